//! Interop with Linux soft-RoCE (rdma_rxe) and rdma-core's tools in a qemu guest
//! (`scripts/interop`: `install.sh` builds the guest, `start-peer.sh` boots it in netns
//! `roce-h`, where uroce runs on the veth `roce-host` over AF_XDP). One boot for the
//! whole suite. It skips, saying why, where there is no root, no /dev/net/tun, or no
//! guest image (run `scripts/interop/install.sh` as root).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

fn scripts() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/interop")
}

fn skip_reason() -> Option<String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Some("not root".into());
    }
    if !Path::new("/dev/net/tun").exists() {
        return Some("no /dev/net/tun".into());
    }
    if Command::new("qemu-system-x86_64")
        .arg("--version")
        .output()
        .is_err()
    {
        return Some("qemu-system-x86_64 is not installed (scripts/interop/install.sh)".into());
    }
    let home = std::env::var("HOME").unwrap_or_else(|_| "/root".into());
    let cache =
        std::env::var("ROCE_INTEROP_CACHE").unwrap_or(format!("{home}/.cache/roce-interop"));
    if !Path::new(&cache).join("guest/current/vmlinuz").exists() {
        return Some(format!(
            "no guest image in {cache} (scripts/interop/install.sh)"
        ));
    }
    None
}

/// The booted guest; stopped (processes, links, namespace) when dropped, also on failure.
struct Peer;

impl Peer {
    fn start() -> Result<Self, String> {
        let out = Command::new("timeout")
            .args([
                "300",
                &scripts().join("start-peer.sh").to_string_lossy(),
                "1",
            ])
            .output()
            .map_err(|e| e.to_string())?;
        if !out.status.success() {
            let _ = Command::new(scripts().join("stop-peer.sh")).output();
            return Err(format!(
                "start-peer.sh failed: {}",
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        Ok(Peer)
    }

    fn guest(&self, cmd: &str) -> Output {
        Command::new(scripts().join("guest-exec.py"))
            .args(["-g", "1", cmd])
            .output()
            .expect("guest-exec.py")
    }

    fn guest_bg(&self, cmd: &str) {
        let out = Command::new(scripts().join("guest-exec.py"))
            .args(["-g", "1", "--bg", cmd])
            .output()
            .expect("guest-exec.py");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    fn uroce(&self, args: &[&str]) -> Output {
        Command::new("timeout")
            .args([
                "120",
                "ip",
                "netns",
                "exec",
                "roce-h",
                env!("CARGO_BIN_EXE_uroce"),
            ])
            .args(args)
            .output()
            .expect("uroce")
    }

    fn uroce_bg(&self, args: &[&str]) -> std::process::Child {
        Command::new("timeout")
            .args([
                "120",
                "ip",
                "netns",
                "exec",
                "roce-h",
                env!("CARGO_BIN_EXE_uroce"),
            ])
            .args(args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("uroce")
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        let _ = Command::new(scripts().join("stop-peer.sh")).output();
    }
}

fn ok(o: &Output, what: &str) -> String {
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        o.status.success(),
        "{what}: {text}\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    text
}

#[test]
fn pingpong_against_rxe_both_ways() {
    if let Some(why) = skip_reason() {
        eprintln!("SKIP: interop with rxe: {why}");
        return;
    }
    let peer = Peer::start().unwrap();
    let rxe = "10.77.0.11";
    // Capture what both sides put on the wire during the suite.
    let mut cap = Command::new("ip")
        .args([
            "netns",
            "exec",
            "roce-h",
            "tcpdump",
            "-U",
            "-s",
            "0",
            "-i",
            "roce-tap1",
            "-w",
            "/tmp/uroce-interop.pcap",
            "udp port 4791",
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("tcpdump");
    std::thread::sleep(Duration::from_secs(1));
    // (UD, size, share of frames uroce drops on receive: losing rxe's requests and ACKs,
    // so both sides must recover; `tc netem` is not available on every kernel).
    for (ud, size, drop) in [
        (false, "1024", "0"),
        (false, "8000", "0"),
        (true, "512", "0"),
        (false, "4000", "0.1"),
    ] {
        let tool = if ud {
            "ibv_ud_pingpong"
        } else {
            "ibv_rc_pingpong"
        };
        // ibv_ud_pingpong has no -m (its MTU is the port's) and no -c.
        let chk = if ud { "" } else { " -m 1024 -c" };
        let mut args = vec![
            "pingpong",
            "-s",
            size,
            "-n",
            "20",
            "-m",
            "1024",
            "--backend",
            "xdp",
            "--drop",
            drop,
        ];
        if ud {
            args.push("--ud");
        } else {
            args.push("-c");
        }
        // rxe serves, uroce is the client.
        peer.guest_bg(&format!(
            "{tool} -d rxe0 -g 1 -s {size} -n 20{chk} > /tmp/srv.log 2>&1"
        ));
        std::thread::sleep(Duration::from_secs(2));
        let mut client = args.clone();
        client.push(rxe);
        // The guest is emulated and slow to start its server: retry while it is not
        // listening yet.
        let mut o = peer.uroce(&client);
        for _ in 0..10 {
            if o.status.success()
                || !String::from_utf8_lossy(&o.stderr).contains("Connection refused")
            {
                break;
            }
            std::thread::sleep(Duration::from_secs(1));
            o = peer.uroce(&client);
        }
        let out = ok(&o, &format!("uroce {tool} client"));
        assert!(out.contains("20 iters in"), "{out}");
        std::thread::sleep(Duration::from_secs(1));
        let srv = ok(&peer.guest("cat /tmp/srv.log"), "guest log");
        assert!(
            srv.contains("20 iters in"),
            "{tool} server in the guest: {srv}"
        );
        // uroce serves, rxe is the client.
        let server = peer.uroce_bg(&args);
        std::thread::sleep(Duration::from_secs(1));
        let g = ok(
            &peer.guest(&format!(
                "{tool} -d rxe0 -g 1 -s {size} -n 20{chk} 10.77.0.1"
            )),
            tool,
        );
        assert!(g.contains("20 iters in"), "{g}");
        let s = server.wait_with_output().unwrap();
        let s = ok(&s, "uroce pingpong server");
        assert!(s.contains("20 iters in"), "{s}");
    }
    // SAFETY: signalling our own child.
    unsafe { libc::kill(cap.id() as i32, libc::SIGINT) };
    let _ = cap.wait();
    let dec = Command::new(env!("CARGO_BIN_EXE_uroce"))
        .args(["decode", "--check", "/tmp/uroce-interop.pcap"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&dec.stdout);
    assert!(
        dec.status.success(),
        "frames on the wire that do not decode:\n{text}"
    );
    assert!(
        text.lines().count() > 100,
        "too few RoCE frames captured: {}",
        text.lines().count()
    );
    drop(peer);
}
