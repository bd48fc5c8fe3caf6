//! Interop with Linux soft-RoCE (rdma_rxe) and rdma-core's tools in a qemu guest
//! (`scripts/interop`: `install.sh` builds the guest, `start-peer.sh` boots it in netns
//! `roce-h`, where uroce runs on the veth `roce-host` over AF_XDP). One boot for the
//! whole suite. It skips, saying why, where there is no root, no /dev/net/tun, or no
//! guest image (run `scripts/interop/install.sh` as root). `UROCE_INTEROP_ONLY=<text>`
//! runs only the cases whose peer tool's name contains `<text>` (e.g. `srq`).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

fn scripts() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/interop")
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

/// Loss on the path between uroce and rxe: `uroce lossy` (an XDP program
/// dropping a share of received RoCEv2 frames) on the guest's tap (rxe's frames) and on
/// the bridge end of uroce's veth (uroce's frames). `tc netem` would do, but this host's
/// kernel has no `sch_netem`. Removed when dropped.
struct PathLoss(Vec<std::process::Child>);

impl PathLoss {
    /// Loss both ways.
    fn start(share: &str) -> Self {
        Self::on(share, &["roce-tap1", "roce-hostp"])
    }

    /// Loss on the given links only (`roce-tap1`: rxe's frames, `roce-hostp`: uroce's).
    fn on(share: &str, links: &[&str]) -> Self {
        let v = links
            .iter()
            .map(|iface| {
                Command::new("ip")
                    .args(["netns", "exec", "roce-h", env!("CARGO_BIN_EXE_uroce")])
                    .args(["lossy", iface, "--drop", share])
                    .stderr(std::process::Stdio::piped())
                    .spawn()
                    .expect("uroce lossy")
            })
            .collect();
        std::thread::sleep(Duration::from_millis(500));
        let mut v: Vec<std::process::Child> = v;
        for c in &mut v {
            if let Ok(Some(status)) = c.try_wait() {
                let mut why = String::new();
                if let Some(e) = c.stderr.as_mut() {
                    let _ = std::io::Read::read_to_string(e, &mut why);
                }
                panic!("uroce lossy could not put loss on the path ({status}): {why}");
            }
        }
        PathLoss(v)
    }
}

impl Drop for PathLoss {
    fn drop(&mut self) {
        for c in &mut self.0 {
            // SAFETY: signalling our own child.
            unsafe { libc::kill(c.id() as i32, libc::SIGINT) };
            let _ = c.wait();
        }
    }
}

/// One row of the results table.
struct Row {
    tool: String,
    op: String,
    direction: &'static str,
    mtu: u32,
    extra: String,
    pass: bool,
    detail: String,
}

/// The same uroce command, tried again while the emulated guest's server is not
/// listening yet.
fn uroce_client(peer: &Peer, args: &[&str]) -> Output {
    let mut o = peer.uroce(args);
    for _ in 0..10 {
        if o.status.success() || !String::from_utf8_lossy(&o.stderr).contains("Connection refused")
        {
            break;
        }
        std::thread::sleep(Duration::from_secs(1));
        o = peer.uroce(args);
    }
    o
}

/// Whether a case runs: all of them, or with `UROCE_INTEROP_ONLY=<text>` only those
/// whose name (the peer tool, like `ibv_srq_pingpong` or `ib_write_bw`) contains it.
fn wanted(name: &str) -> bool {
    std::env::var("UROCE_INTEROP_ONLY").map_or(true, |only| name.contains(&only))
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// The completion events `uroce pingpong -e` says it took (`..., N completion events)`).
fn events_taken(out: &str) -> u64 {
    out.split(" completion events")
        .next()
        .and_then(|head| head.rsplit(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// ibv_rc_pingpong / ibv_ud_pingpong, rxe as server then as client.
fn pingpong_cases(peer: &Peer, rows: &mut Vec<Row>) {
    let rxe = "10.77.0.11";
    // (UD, size, MTU, share of RoCE frames lost each way on the path, backend, both ends
    // in event mode: -e, sleeping on completion events instead of polling the CQ).
    for (ud, size, mtu, drop, backend, events) in [
        (false, "1024", "1024", "0", "xdp", false),
        (false, "8000", "1024", "0", "xdp", false),
        (false, "8000", "4096", "0", "xdp", false),
        (true, "512", "4096", "0", "xdp", false),
        (false, "4000", "1024", "0.05", "xdp", false),
        (false, "8000", "1024", "0", "udp", false),
        (true, "512", "4096", "0", "udp", false),
        (false, "4000", "1024", "0", "xdp", true),
        (true, "512", "4096", "0", "udp", true),
    ] {
        let tool = if ud {
            "ibv_ud_pingpong"
        } else {
            "ibv_rc_pingpong"
        };
        if !wanted(tool) {
            continue;
        }
        // ibv_ud_pingpong has no -m (its MTU is the port's) and no -c.
        let mut chk = if ud {
            String::new()
        } else {
            format!(" -m {mtu} -c")
        };
        if events {
            chk.push_str(" -e");
        }
        let mut args = vec![
            "pingpong",
            "-s",
            size,
            "-n",
            "20",
            "-m",
            mtu,
            "--backend",
            backend,
        ];
        // Only uroce's frames are lost here: ibv_rc_pingpong exits as soon as its own work
        // completes, so if the ACK of the peer's last SEND were lost there would be no one
        // left to answer its retransmission; no RC implementation recovers from that.
        // Loss of rxe's frames is covered by the perftest cases below, which keep both
        // ends up until the closing exchange.
        let _loss = (drop != "0").then(|| PathLoss::on(drop, &["roce-hostp"]));
        if ud {
            args.push("--ud");
        } else {
            args.push("-c");
        }
        if events {
            args.push("-e");
        }
        // In event mode uroce reports the completion events it slept on: at least one per
        // iteration.
        let evented = |out: &str| !events || events_taken(out) >= 20;
        let extra = format!(
            "{size} B{}{}{}",
            if drop == "0" {
                String::new()
            } else {
                format!(
                    ", {}% loss uroce to rxe",
                    (drop.parse::<f64>().unwrap() * 100.0).round() as u32
                )
            },
            if backend == "udp" {
                ", UDP backend"
            } else {
                ""
            },
            if events {
                ", both ends -e (CQ events)"
            } else {
                ""
            }
        );
        // rxe serves, uroce is the client.
        peer.guest_bg(&format!(
            "{tool} -d rxe0 -g 1 -s {size} -n 20{chk} > /tmp/srv.log 2>&1; echo EXIT=$? >> /tmp/srv.log"
        ));
        std::thread::sleep(Duration::from_secs(2));
        let mut client = args.clone();
        client.push(rxe);
        let o = uroce_client(peer, &client);
        std::thread::sleep(Duration::from_secs(1));
        let srv = text(&peer.guest("cat /tmp/srv.log"));
        let pass = o.status.success()
            && text(&o).contains("20 iters in")
            && evented(&text(&o))
            && srv.contains("20 iters in")
            && srv.contains("EXIT=0");
        rows.push(Row {
            tool: tool.into(),
            op: if ud { "SEND (UD)" } else { "SEND (RC)" }.into(),
            direction: "rxe server, uroce client",
            mtu: mtu.parse().unwrap(),
            extra: extra.clone(),
            pass,
            detail: format!("uroce: {}\nrxe: {srv}", text(&o)),
        });
        // uroce serves, rxe is the client.
        let server = peer.uroce_bg(&args);
        std::thread::sleep(Duration::from_secs(1));
        let g = peer.guest(&format!(
            "{tool} -d rxe0 -g 1 -s {size} -n 20{chk} 10.77.0.1"
        ));
        let s = server.wait_with_output().unwrap();
        let pass = g.status.success()
            && text(&g).contains("20 iters in")
            && s.status.success()
            && text(&s).contains("20 iters in")
            && evented(&text(&s));
        rows.push(Row {
            tool: tool.into(),
            op: if ud { "SEND (UD)" } else { "SEND (RC)" }.into(),
            direction: "uroce server, rxe client",
            mtu: mtu.parse().unwrap(),
            extra,
            pass,
            detail: format!("uroce: {}\nrxe: {}", text(&s), text(&g)),
        });
    }
}

/// ibv_srq_pingpong (16 RC QPs on each side, the receives of each side from one shared
/// receive queue, 256 address messages each way) against `uroce pingpong --srq`, rxe as
/// server then as client.
fn srq_pingpong_cases(peer: &Peer, rows: &mut Vec<Row>) {
    let tool = "ibv_srq_pingpong";
    if !wanted(tool) {
        return;
    }
    let rxe = "10.77.0.11";
    // 32 receives for 16 QPs: each side tops its SRQ up many times during the run.
    let (qps, depth, size, iters) = ("16", "32", "1024", "200");
    let extra = format!("{qps} QPs on one SRQ of {depth}, {size} B");
    let args = [
        "pingpong",
        "--srq",
        qps,
        "-r",
        depth,
        "-s",
        size,
        "-n",
        iters,
        "-m",
        "1024",
        "--backend",
        "xdp",
    ];
    let flags = format!("-d rxe0 -g 1 -q {qps} -r {depth} -s {size} -n {iters} -m 1024");
    let done = format!("{iters} iters in");
    // rxe serves, uroce is the client.
    peer.guest_bg(&format!(
        "timeout 100 {tool} {flags} > /tmp/srv.log 2>&1; echo EXIT=$? >> /tmp/srv.log"
    ));
    std::thread::sleep(Duration::from_secs(2));
    let mut client = args.to_vec();
    client.push(rxe);
    let o = uroce_client(peer, &client);
    let mut srv = String::new();
    for _ in 0..20 {
        std::thread::sleep(Duration::from_millis(500));
        srv = text(&peer.guest("cat /tmp/srv.log"));
        if srv.contains("EXIT=") {
            break;
        }
    }
    let pass = o.status.success()
        && text(&o).contains(&done)
        && srv.contains(&done)
        && srv.contains("EXIT=0");
    rows.push(Row {
        tool: tool.into(),
        op: "SEND (RC, SRQ)".into(),
        direction: "rxe server, uroce client",
        mtu: 1024,
        extra: extra.clone(),
        pass,
        detail: format!("uroce: {}\nrxe: {srv}", text(&o)),
    });
    // uroce serves, rxe is the client.
    let server = peer.uroce_bg(&args);
    std::thread::sleep(Duration::from_secs(1));
    let g = peer.guest(&format!("timeout 100 {tool} {flags} 10.77.0.1"));
    let s = server.wait_with_output().unwrap();
    let pass = g.status.success()
        && text(&g).contains(&done)
        && s.status.success()
        && text(&s).contains(&done);
    rows.push(Row {
        tool: tool.into(),
        op: "SEND (RC, SRQ)".into(),
        direction: "uroce server, rxe client",
        mtu: 1024,
        extra,
        pass,
        detail: format!("uroce: {}\nrxe: {}", text(&s), text(&g)),
    });
}

/// perftest's ib_*_bw and ib_*_lat against `uroce perf`, both ways.
fn perftest_cases(peer: &Peer, rows: &mut Vec<Row>) {
    let rxe = "10.77.0.11";
    // (verb, latency, size, MTU, iterations, loss on the path each way, share of its
    // received frames uroce holds back behind the next one, backend)
    type Case = (
        &'static str,
        bool,
        u32,
        u32,
        u32,
        &'static str,
        &'static str,
        &'static str,
    );
    let mut cases: Vec<Case> = Vec::new();
    for verb in ["write", "read", "send", "atomic"] {
        for lat in [false, true] {
            let size = match (verb, lat) {
                ("atomic", _) => 8,
                (_, true) => 2,
                _ => 4096,
            };
            cases.push((verb, lat, size, 1024, 50, "0", "0", "xdp"));
        }
    }
    // Sizes across the MTU, both MTUs.
    for verb in ["write", "read", "send"] {
        for (size, mtu) in [
            (1, 1024),
            (1025, 1024),
            (65536, 1024),
            (4097, 4096),
            (65536, 4096),
        ] {
            cases.push((verb, false, size, mtu, 20, "0", "0", "xdp"));
        }
    }
    // Loss: 5% of the RoCE frames each way (requests, ACKs, responses of both sides).
    for verb in ["write", "read", "send", "atomic"] {
        let size = if verb == "atomic" { 8 } else { 8192 };
        cases.push((verb, false, size, 1024, 50, "0.05", "0", "xdp"));
    }
    // Reordering: uroce holds back 5% of rxe's frames behind the next one, so uroce's
    // responder NAKs sequence errors that rxe's requester must answer by going back,
    // and rxe's READ responses arrive out of order at uroce's requester.
    for verb in ["write", "read", "send"] {
        cases.push((verb, false, 8192, 1024, 50, "0", "0.05", "xdp"));
    }
    // The UDP socket backend (it recovers rxe's IP identification from the ICRC).
    for verb in ["write", "read", "send", "atomic"] {
        let size = if verb == "atomic" { 8 } else { 65536 };
        cases.push((verb, false, size, 1024, 50, "0", "0", "udp"));
    }
    for (verb, lat, size, mtu, iters, drop, reorder, backend) in cases {
        let tool = format!("ib_{verb}_{}", if lat { "lat" } else { "bw" });
        if !wanted(&tool) {
            continue;
        }
        let size_s = size.to_string();
        let iters_s = iters.to_string();
        let mtu_s = mtu.to_string();
        let mut args = vec![
            "perf",
            verb,
            "-n",
            &iters_s,
            "-m",
            &mtu_s,
            "--backend",
            backend,
        ];
        if reorder != "0" {
            args.extend(["--reorder", reorder]);
        }
        let _loss = (drop != "0").then(|| PathLoss::start(drop));
        let mut flags = format!("-d rxe0 -x 1 -F -n {iters} -m {mtu}");
        if verb != "atomic" {
            args.extend(["-s", &size_s]);
            flags.push_str(&format!(" -s {size}"));
        }
        if lat {
            args.push("--lat");
        }
        let percent = |p: &str| (p.parse::<f64>().unwrap() * 100.0).round() as u32;
        let extra = format!(
            "{size} B{}{}{}",
            if drop == "0" {
                String::new()
            } else {
                format!(", {}% loss each way", percent(drop))
            },
            if reorder == "0" {
                String::new()
            } else {
                format!(", uroce reorders {}% of what it receives", percent(reorder))
            },
            if backend == "udp" {
                ", UDP backend"
            } else {
                ""
            }
        );
        let op = match verb {
            "write" => "RDMA WRITE",
            "read" => "RDMA READ",
            "send" => "SEND",
            _ => "FETCH_AND_ADD",
        };
        // rxe serves, uroce is the client.
        peer.guest_bg(&format!(
            "timeout 100 {tool} {flags} > /tmp/srv.log 2>&1; echo EXIT=$? >> /tmp/srv.log"
        ));
        std::thread::sleep(Duration::from_millis(2500));
        let mut client = args.clone();
        client.extend(["--perftest", rxe]);
        let o = uroce_client(peer, &client);
        let mut srv = String::new();
        for _ in 0..20 {
            std::thread::sleep(Duration::from_millis(500));
            srv = text(&peer.guest("cat /tmp/srv.log"));
            if srv.contains("EXIT=") {
                break;
            }
        }
        let row_ok = |t: &str| t.contains(&format!(" {size} ")) && t.contains("#bytes");
        // The read/atomic latency servers print no table (as perftest's do).
        let srv_table = row_ok(&srv) || (lat && (verb == "read" || verb == "atomic"));
        let pass = o.status.success() && row_ok(&text(&o)) && srv.contains("EXIT=0") && srv_table;
        rows.push(Row {
            tool: tool.clone(),
            op: op.into(),
            direction: "rxe server, uroce client",
            mtu,
            extra: extra.clone(),
            pass,
            detail: format!("uroce: {}\nrxe: {srv}", text(&o)),
        });
        // uroce serves, rxe is the client.
        let server = peer.uroce_bg(&args);
        std::thread::sleep(Duration::from_secs(1));
        let g = peer.guest(&format!("timeout 100 {tool} {flags} 10.77.0.1"));
        let s = server.wait_with_output().unwrap();
        let uroce_table = row_ok(&text(&s)) || (lat && (verb == "read" || verb == "atomic"));
        let pass = g.status.success() && row_ok(&text(&g)) && s.status.success() && uroce_table;
        rows.push(Row {
            tool,
            op: op.into(),
            direction: "uroce server, rxe client",
            mtu,
            extra,
            pass,
            detail: format!("uroce: {}\nrxe: {}", text(&s), text(&g)),
        });
    }
}

/// The distro's own pingpong and perftest binaries on this host, unmodified, on uroce's
/// libibverbs.so.1 (`uroce run`, which finds the library cargo built next to the uroce
/// binary), against the same binaries on rxe in the guest, both directions; one case with
/// loss on the path. Skipped (saying so) when the library or the host's tools are not
/// there. `UROCE_INTEROP_ONLY=libibverbs` runs only these.
fn verbs_library_cases(peer: &Peer, rows: &mut Vec<Row>) {
    let rxe = "10.77.0.11";
    let probe = peer.uroce(&["run", "--", "true"]);
    if !probe.status.success() {
        eprintln!("SKIP: uroce's libibverbs.so.1 cases: {}", text(&probe));
        return;
    }
    // (tool, its flags on both ends, path MTU, backend, loss each way, what says it
    // finished); ibv_ud_pingpong and perftest take the port's MTU (4096 at link MTU 9000).
    let cases: [(&str, &str, u32, &str, &str, &str); 6] = [
        (
            "ibv_rc_pingpong",
            "-g 1 -s 4000 -n 20 -c",
            1024,
            "xdp",
            "0",
            "20 iters in",
        ),
        (
            "ibv_ud_pingpong",
            "-g 1 -s 512 -n 20 -c",
            4096,
            "udp",
            "0",
            "20 iters in",
        ),
        (
            "ib_write_bw",
            "-x 1 -F -s 65536 -n 50",
            4096,
            "xdp",
            "0",
            "#bytes",
        ),
        (
            "ib_read_bw",
            "-x 1 -F -s 8192 -n 50",
            4096,
            "xdp",
            "0.05",
            "#bytes",
        ),
        (
            "ib_send_lat",
            "-x 1 -F -s 2 -n 50",
            4096,
            "udp",
            "0",
            "#bytes",
        ),
        ("ib_atomic_bw", "-x 1 -F -n 50", 4096, "xdp", "0", "#bytes"),
    ];
    for (tool, flags, mtu, backend, drop, done) in cases {
        let name = format!("{tool} on libibverbs.so.1");
        if !wanted(&name) || !Path::new("/usr/bin").join(tool).exists() {
            continue;
        }
        let _loss = (drop != "0").then(|| PathLoss::start(drop));
        let extra = format!(
            "host's {tool} on uroce's libibverbs.so.1, {backend}{}",
            if drop == "0" {
                ""
            } else {
                ", 5% loss each way"
            }
        );
        let host = |addr: Option<&str>| {
            let mut v: Vec<String> = [
                "run",
                "--iface",
                "roce-host",
                "--backend",
                backend,
                "--",
                "timeout",
                "100",
                tool,
                "-d",
                "uroce_roce-host",
            ]
            .iter()
            .map(|s| s.to_string())
            .collect();
            v.extend(flags.split(' ').map(String::from));
            v.extend(addr.map(String::from));
            v
        };
        // rxe serves, the host's tool on uroce is the client.
        peer.guest_bg(&format!(
            "timeout 100 {tool} -d rxe0 {flags} > /tmp/srv.log 2>&1; echo EXIT=$? >> /tmp/srv.log"
        ));
        std::thread::sleep(Duration::from_millis(2500));
        let args = host(Some(rxe));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let mut o = peer.uroce(&args);
        for _ in 0..10 {
            if o.status.success() || !text(&o).contains("onnect") {
                break;
            }
            std::thread::sleep(Duration::from_secs(1));
            o = peer.uroce(&args);
        }
        let mut srv = String::new();
        for _ in 0..20 {
            std::thread::sleep(Duration::from_millis(500));
            srv = text(&peer.guest("cat /tmp/srv.log"));
            if srv.contains("EXIT=") {
                break;
            }
        }
        let pass = o.status.success() && text(&o).contains(done) && srv.contains("EXIT=0");
        rows.push(Row {
            tool: name.clone(),
            op: tool.into(),
            direction: "rxe server, uroce client",
            mtu,
            extra: extra.clone(),
            pass,
            detail: format!("uroce: {}\nrxe: {srv}", text(&o)),
        });
        // The host's tool on uroce serves, rxe is the client.
        let args = host(None);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let server = peer.uroce_bg(&args);
        std::thread::sleep(Duration::from_secs(2));
        let g = peer.guest(&format!("timeout 100 {tool} -d rxe0 {flags} 10.77.0.1"));
        let s = server.wait_with_output().unwrap();
        let pass = g.status.success() && text(&g).contains(done) && s.status.success();
        rows.push(Row {
            tool: name,
            op: tool.into(),
            direction: "uroce server, rxe client",
            mtu,
            extra,
            pass,
            detail: format!("uroce: {}\nrxe: {}", text(&s), text(&g)),
        });
    }
}

/// `uroce fuzz-peer` against rxe, peer tool by peer tool ([`fuzz_rxe`]): two
/// `ib_write_bw` servers (the fuzz QP's and the known-good QP's), one `ib_write_bw -q 4`
/// (frames spread over three QPs, the fourth the known-good one), `ibv_rc_pingpong` (SENDs
/// against its receives, RDMA it must refuse), `ibv_ud_pingpong` (datagrams, Q_Keys), and
/// every IP / UDP header edge replayed once against `ib_write_bw`. Bounded runs whose
/// findings and wrong verdicts are reported, not failed on; what fails is a crash of the
/// fuzzer (uroce) itself: any exit but 0 (no finding) or 1 (findings). Returns the
/// report's lines, and whether the fuzzer crashed.
fn fuzz_peer_case(peer: &Peer) -> Option<(String, bool)> {
    if !wanted("fuzz-peer") {
        return None;
    }
    let mut md = String::new();
    let mut crashed = false;
    let write2 = [
        "ib_write_bw -d rxe0 -x 1 -F -p 18515",
        "ib_write_bw -d rxe0 -x 1 -F -p 18516",
    ];
    let runs: [(&str, &[&str], &[&str]); 4] = [
        (
            "two ib_write_bw servers, 60 s, seed 5",
            &write2,
            &["--tool", "ib_write_bw", "--duration", "60", "--seed", "5"],
        ),
        (
            "ib_write_bw -q 4, 40 s, seed 21",
            &["ib_write_bw -d rxe0 -x 1 -F -q 4 -p 18515"],
            &[
                "--tool",
                "ib_write_bw",
                "--peer-qps",
                "4",
                "--duration",
                "40",
                "--seed",
                "21",
            ],
        ),
        (
            "ibv_rc_pingpong -s 2048, 40 s, seed 5",
            &["ibv_rc_pingpong -d rxe0 -g 1 -s 2048 -n 1000000000 -p 18515"],
            &[
                "--tool",
                "ibv_rc_pingpong",
                "-s",
                "2048",
                "--duration",
                "40",
                "--seed",
                "5",
            ],
        ),
        (
            "ibv_ud_pingpong -s 512, 40 s, seed 9",
            &["ibv_ud_pingpong -d rxe0 -g 1 -s 512 -n 1000000000 -p 18515"],
            &[
                "--tool",
                "ibv_ud_pingpong",
                "-s",
                "512",
                "--duration",
                "40",
                "--seed",
                "9",
            ],
        ),
    ];
    for (what, servers, args) in runs {
        let (m, c) = fuzz_rxe(peer, what, servers, args);
        md.push_str(&m);
        crashed |= c;
    }
    // Every IP / UDP edge once, each followed by a valid WRITE.
    let mut specs = Vec::new();
    for edge in uroce_tools::fuzz_peer::mutate::IP_EDGES {
        specs.push(serde_json::json!({"kind": "ip", "edge": edge}));
        specs.push(serde_json::json!({"kind": "write", "len": 64, "off": 0, "ack_req": true}));
    }
    let file = Path::new(env!("CARGO_TARGET_TMPDIR")).join("fuzz-rxe-edges.json");
    std::fs::write(&file, serde_json::to_vec(&specs).unwrap()).unwrap();
    let file = file.to_string_lossy().to_string();
    let (m, c) = fuzz_rxe(
        peer,
        "every IP / UDP edge, two ib_write_bw servers",
        &write2,
        &[
            "--tool",
            "ib_write_bw",
            "--replay",
            &file,
            "--wait-ms",
            "100",
            "-v",
        ],
    );
    md.push_str(&m);
    crashed |= c;
    Some((md, crashed))
}

/// One bounded `uroce fuzz-peer` run against rxe: `servers` started in the guest (and
/// restarted by a script whenever the fuzz QPs are used up), the fuzzer over AF_XDP with
/// `--verdicts count` and `args`, the guest's kernel log scanned for BUG / WARNING / Oops
/// between bursts. Its report's lines, and whether the fuzzer crashed.
fn fuzz_rxe(peer: &Peer, what: &str, servers: &[&str], args: &[&str]) -> (String, bool) {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let exec = scripts().join("guest-exec.py");
    let script = dir.join("fuzz-rxe-restart.sh");
    let mut start = String::new();
    for (k, srv) in servers.iter().enumerate() {
        let redirect = if k == 0 { ">" } else { ">>" };
        start.push_str(&format!(
            "{srv} > /tmp/fz{k}.log 2>&1 & echo $! {redirect} /tmp/fz.pids; "
        ));
    }
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh
             {exec} -g 1 --bg 'kill $(cat /tmp/fz.pids 2>/dev/null) 2>/dev/null; sleep 0.3; {start} wait' > /dev/null
             sleep 2.5
",
            exec = exec.display()
        ),
    )
    .unwrap();
    let _ = Command::new("chmod").arg("+x").arg(&script).status();
    let _ = Command::new(&script).status();
    let check = format!(
        "! {} -g 1 \"dmesg | grep -E 'BUG:|WARNING:|Oops|general protection'\"",
        exec.display()
    );
    let pcap = dir.join("fuzz-rxe.pcap");
    let o = Command::new("timeout")
        .args([
            "400",
            "ip",
            "netns",
            "exec",
            "roce-h",
            env!("CARGO_BIN_EXE_uroce"),
        ])
        .args(["fuzz-peer", "10.77.0.11", "--backend", "xdp"])
        .args(args)
        .args(["--verdicts", "count", "--json"])
        .args([
            "--restart-cmd",
            &script.to_string_lossy(),
            "--check-cmd",
            &check,
        ])
        .args(["--pcap", &pcap.to_string_lossy()])
        .output()
        .expect("uroce fuzz-peer");
    let _ = peer.guest("kill $(cat /tmp/fz.pids 2>/dev/null) 2>/dev/null");
    let code = o.status.code();
    let crashed = !matches!(code, Some(0) | Some(1));
    let s: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap_or_default();
    let mut md = format!(
        "\n`uroce fuzz-peer` against rxe ({what}, AF_XDP): exit {code:?}, {} frames, {} checks passed, {} peer restarts, {} CNPs for {} CE-marked\n",
        s["frames_sent"], s["checks_passed"], s["peer_restarts"], s["cnps"], s["ce_marked"]
    );
    if let Some(a) = s["answers"].as_object() {
        let v: Vec<String> = a.iter().map(|(k, v)| format!("{k} {v}")).collect();
        md.push_str(&format!("- answers: {}\n", v.join(", ")));
    }
    for m in s["mismatches"].as_array().into_iter().flatten() {
        md.push_str(&format!(
            "- wrong verdict: {} frames expected {} got {} ({} times; first {})\n",
            m["kind"], m["expected"], m["got"], m["count"], m["example"]["spec"]
        ));
    }
    for f in s["findings"].as_array().into_iter().flatten() {
        md.push_str(&format!(
            "- FINDING ({}): {}; shrunk: {}\n",
            f["oracle"], f["detail"], f["shrunk"]
        ));
    }
    // The answer to each edge of a replay (-v), for the record.
    for l in String::from_utf8_lossy(&o.stderr)
        .lines()
        .filter(|l| l.contains("Ip {"))
    {
        md.push_str(&format!("  - {}\n", l.trim()));
    }
    if crashed {
        md.push_str(&format!(
            "- the fuzzer CRASHED: {}\n",
            String::from_utf8_lossy(&o.stderr)
        ));
    }
    (md, crashed)
}

/// The whole suite against one boot of the guest (link MTU 9000, so rxe's port MTU is
/// 4096 and both 1024 and 4096 are reached with -m); every RoCE frame either side put on
/// the wire is captured and must decode with a good ICRC.
#[test]
fn rxe_interop_suite() {
    if let Some(why) = skip_reason() {
        eprintln!("SKIP: interop with rxe: {why}");
        return;
    }
    std::env::set_var("ROCE_MTU", "9000");
    let peer = Peer::start().unwrap();
    let pcap = std::env::temp_dir().join("uroce-interop.pcap");
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
            &pcap.to_string_lossy(),
            "udp port 4791",
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("tcpdump");
    std::thread::sleep(Duration::from_secs(1));
    let mut rows = Vec::new();
    pingpong_cases(&peer, &mut rows);
    srq_pingpong_cases(&peer, &mut rows);
    perftest_cases(&peer, &mut rows);
    verbs_library_cases(&peer, &mut rows);
    // SAFETY: signalling our own child.
    unsafe { libc::kill(cap.id() as i32, libc::SIGINT) };
    let _ = cap.wait();
    // After the capture: the fuzzer's frames are meant to be malformed.
    let fuzz = fuzz_peer_case(&peer);
    drop(peer);
    let dec = Command::new(env!("CARGO_BIN_EXE_uroce"))
        .args(["decode", "--check", &pcap.to_string_lossy()])
        .output()
        .unwrap();
    let frames = String::from_utf8_lossy(&dec.stdout).lines().count();
    // The table of the last run, for the README.
    let mut md = String::from(
        "| peer tool | operation | direction | MTU | case | result |\n|---|---|---|---|---|---|\n",
    );
    for r in &rows {
        md.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} |\n",
            r.tool,
            r.op,
            r.direction,
            r.mtu,
            r.extra,
            if r.pass { "pass" } else { "FAIL" }
        ));
    }
    if let Some((report, _)) = &fuzz {
        md.push_str(report);
    }
    md.push_str(&format!(
        "\nCapture: {frames} RoCE frames, every one decoded with a good ICRC: {}\n",
        if dec.status.success() { "yes" } else { "NO" }
    ));
    let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("interop-results.md");
    std::fs::write(&out, &md).unwrap();
    eprintln!("{md}\n(written to {})", out.display());
    let failed: Vec<&Row> = rows.iter().filter(|r| !r.pass).collect();
    for r in &failed {
        eprintln!(
            "FAILED: {} {} {} MTU {} {}:\n{}\n",
            r.tool, r.op, r.direction, r.mtu, r.extra, r.detail
        );
    }
    assert!(failed.is_empty(), "{} interop cases failed", failed.len());
    assert!(
        !fuzz.as_ref().is_some_and(|f| f.1),
        "uroce fuzz-peer crashed against rxe:{}",
        fuzz.map(|f| f.0).unwrap_or_default()
    );
    assert!(
        dec.status.success(),
        "frames on the wire that do not decode:\n{}",
        String::from_utf8_lossy(&dec.stdout)
    );
    let all = std::env::var("UROCE_INTEROP_ONLY").is_err();
    assert!(
        rows.is_empty() || frames > if all { 1000 } else { 100 },
        "too few RoCE frames captured: {frames}"
    );
}
