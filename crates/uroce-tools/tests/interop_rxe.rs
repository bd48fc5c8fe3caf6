//! Interop with Linux soft-RoCE (rdma_rxe) and rdma-core's tools in a qemu guest
//! (`scripts/interop`: `install.sh` builds the guest, `start-peer.sh` boots it in netns
//! `roce-h`, where uroce runs on the veth `roce-host` over AF_XDP). One boot for the
//! whole suite. It skips, saying why, where there is no root, no /dev/net/tun, or no
//! guest image (run `scripts/interop/install.sh` as root). `UROCE_INTEROP_ONLY=<text>`
//! runs only the cases whose peer tool's name contains `<text>` (e.g. `srq`; `libibverbs`
//! and `librdmacm`: the host's own programs on uroce's drop-in libraries).

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use common::{have, text};

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
    if !have("qemu-system-x86_64") {
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
        self.uroce_env(&[], args)
    }

    fn uroce_bg(&self, args: &[&str]) -> std::process::Child {
        self.uroce_bg_env(&[], args)
    }

    /// `uroce ARGS` in the host's namespace with `env` added to its environment. `uroce
    /// perf` and `uroce pingpong` run in direct mode (`--no-daemon`), as every case here:
    /// each row names the datapath it runs on, and a daemon a row left for its linger would
    /// hold the interface for the next.
    fn uroce_cmd(env: &[(&str, &str)], args: &[&str]) -> Command {
        let mut c = Command::new("timeout");
        c.args([
            "120",
            "ip",
            "netns",
            "exec",
            "roce-h",
            env!("CARGO_BIN_EXE_uroce"),
        ]);
        match args.split_first() {
            Some((&tool, rest)) if tool == "perf" || tool == "pingpong" => {
                c.args([tool, "--no-daemon"]).args(rest)
            }
            _ => c.args(args),
        }
        .envs(env.iter().copied());
        c
    }

    fn uroce_env(&self, env: &[(&str, &str)], args: &[&str]) -> Output {
        Self::uroce_cmd(env, args).output().expect("uroce")
    }

    fn uroce_bg_env(&self, env: &[(&str, &str)], args: &[&str]) -> std::process::Child {
        Self::uroce_cmd(env, args)
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
    let probe = peer.uroce(&["run", "--no-daemon", "--", "true"]);
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
                "--no-daemon",
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

// ---- uroce's librdmacm.so.1 against the kernel's rdma_cm on rxe ----

/// The guest's address, and the host's (uroce's) on roce-host.
const RXE: &str = "10.77.0.11";
const HOST: &str = "10.77.0.1";

/// A directory holding the `librdmacm.so.1` and `libibverbs.so.1` of this very build
/// (cargo builds uroce-rdmacm and uroce-verbs, dev-dependencies of uroce-tools, into
/// `target/<profile>/deps` before the test runs; the copies `cargo build` leaves next to
/// the uroce binary may be older), for `uroce run` through `UROCE_LIBDIR`.
fn rdmacm_libdir() -> Result<PathBuf, String> {
    let deps = Path::new(env!("CARGO_BIN_EXE_uroce"))
        .parent()
        .expect("target/<profile>")
        .join("deps");
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("uroce-cm-libs");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    for (lib, soname) in [
        ("libibverbs.so", "libibverbs.so.1"),
        ("librdmacm.so", "librdmacm.so.1"),
    ] {
        let built = deps.join(lib);
        if !built.exists() {
            return Err(format!(
                "{} is missing (cargo builds it with uroce-tools' dev-dependencies)",
                built.display()
            ));
        }
        std::os::unix::fs::symlink(&built, dir.join(soname)).map_err(|e| e.to_string())?;
    }
    Ok(dir)
}

/// `uroce run` of a host program on roce-host over AF_XDP, under a 60 s timeout.
fn cm_host_args(cmd: &str) -> Vec<String> {
    let mut v: Vec<String> = [
        "run",
        "--no-daemon",
        "--iface",
        "roce-host",
        "--backend",
        "xdp",
        "--",
        "timeout",
        "60",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    v.extend(cmd.split(' ').map(String::from));
    v
}

/// A counter of rxe's port in the guest: its kernel CM's (`cm_tx_retries/rep`, ...) or
/// rxe's own (`hw_counters/sent_pkts`).
fn rxe_cm_counter(peer: &Peer, counter: &str) -> u64 {
    let o = peer.guest(&format!("cat /sys/class/infiniband/rxe0/ports/1/{counter}"));
    String::from_utf8_lossy(&o.stdout)
        .trim()
        .parse()
        .unwrap_or(0)
}

/// The guest's `/tmp/<log>` once it ends with the `EXIT=` line (or after `secs`).
fn guest_log(peer: &Peer, log: &str, secs: u32) -> String {
    let mut t = String::new();
    for _ in 0..secs * 2 {
        t = text(&peer.guest(&format!("cat /tmp/{log}")));
        if t.contains("EXIT=") {
            break;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    t
}

/// Waits (at most 20 s) until the guest's rdma_cm has an id listening on `port` (the
/// emulated guest can take seconds to start a server; a REQ before that is rejected).
fn rxe_listening(peer: &Peer, port: u16) {
    let at = format!(":{port}");
    for _ in 0..40 {
        let o = peer.guest("rdma res show cm_id");
        let t = String::from_utf8_lossy(&o.stdout);
        if t.lines().any(|l| l.contains("LISTEN") && l.contains(&at)) {
            return;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// Whether `out` has `needle` at least `n` times.
fn has(out: &str, (needle, n): (&str, usize)) -> bool {
    out.matches(needle).count() >= n
}

/// One RDMA CM program, run with rxe serving and uroce connecting, then the other way:
/// its command line as server and as client (`{peer}` is the server's address), and
/// what each side's output must show (a text, at least so many times).
struct CmCase {
    tool: &'static str,
    op: &'static str,
    /// The port the server listens on.
    port: u16,
    /// How often the case may be run (with rxe serving) before it fails.
    attempts: u32,
    server: String,
    client: String,
    client_done: (&'static str, usize),
    server_done: (&'static str, usize),
    extra: String,
}

/// rxe's server, the host's client on uroce's libraries. Whether both did their part,
/// and their outputs. A case with `attempts` above 1 is run again from the start (a
/// fresh server, after the kernel CM's time wait) when it fails.
fn cm_rxe_serves(peer: &Peer, env: &[(&str, &str)], c: &CmCase) -> (bool, String) {
    let mut detail = String::new();
    for attempt in 1..=c.attempts {
        peer.guest_bg(&format!(
            "timeout 60 {} > /tmp/srv.log 2>&1 & echo $! > /tmp/srv.pid; wait $!; echo EXIT=$? >> /tmp/srv.log",
            c.server
        ));
        rxe_listening(peer, c.port);
        let args = cm_host_args(&c.client.replace("{peer}", RXE));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let o = peer.uroce_env(env, &args);
        let srv = guest_log(peer, "srv.log", 20);
        let pass = o.status.success()
            && has(&text(&o), c.client_done)
            && srv.contains("EXIT=0")
            && has(&srv, c.server_done);
        detail.push_str(&format!(
            "attempt {attempt}:\nuroce: {}\nrxe: {srv}\n",
            text(&o)
        ));
        if pass {
            return (true, detail);
        }
        let _ = peer.guest("kill $(cat /tmp/srv.pid) 2>/dev/null");
        std::thread::sleep(Duration::from_secs(3));
    }
    (false, detail)
}

/// The host's server on uroce's libraries, rxe's client (started again while the server
/// is not listening yet).
fn cm_uroce_serves(peer: &Peer, env: &[(&str, &str)], c: &CmCase) -> (bool, String) {
    let args = cm_host_args(&c.server);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let server = peer.uroce_bg_env(env, &args);
    std::thread::sleep(Duration::from_secs(2));
    let cmd = format!("timeout 60 {}", c.client.replace("{peer}", HOST));
    let mut g = peer.guest(&cmd);
    let refused = |t: &str| t.contains("REJECTED") || t.contains("CM event");
    for _ in 0..3 {
        if g.status.success() || !refused(&text(&g)) {
            break;
        }
        std::thread::sleep(Duration::from_secs(1));
        g = peer.guest(&cmd);
    }
    let s = server.wait_with_output().unwrap();
    let pass = g.status.success()
        && has(&text(&g), c.client_done)
        && s.status.success()
        && has(&text(&s), c.server_done);
    (pass, format!("uroce: {}\nrxe: {}", text(&s), text(&g)))
}

/// The distro's RDMA CM programs on this host, unmodified, on uroce's librdmacm.so.1
/// and libibverbs.so.1 (`uroce run`), against the same programs on the kernel's rdma_cm
/// and rxe in the guest: rping (-V checks every byte; two sizes), ib_write_bw -R and
/// udaddy (UD, the QPs found with SIDR), both ways; two connections whose first REQ or
/// REP is lost (the kernel's CM counters show it sent that message again); and the golden
/// comparison of the CM MADs of one rping connection each way. Returns the golden
/// comparison's report. `UROCE_INTEROP_ONLY=librdmacm` runs only these.
fn rdmacm_library_cases(peer: &Peer, pcap: &Path, rows: &mut Vec<Row>) -> Option<String> {
    let lib = match rdmacm_libdir() {
        Ok(d) => d,
        Err(e) => {
            // Asked for by name: a missing library is a failure, not a skip.
            let asked = std::env::var("UROCE_INTEROP_ONLY").is_ok_and(|o| o.contains("rdmacm"));
            assert!(!asked, "uroce's librdmacm cases cannot run: {e}");
            eprintln!("SKIP: uroce's librdmacm.so.1 cases: {e}");
            return None;
        }
    };
    let lib = lib.to_string_lossy().into_owned();
    let env = [("UROCE_LIBDIR", lib.as_str())];
    let started = std::time::Instant::now();
    let libs = "the host's program on uroce's librdmacm.so.1 + libibverbs.so.1, xdp";
    // rping -V checks every byte and fails on a difference; -v prints each ping, counted
    // here (only for small sizes: the guest agent's output is limited).
    let rping = |size: u32, count: usize, port: u16| {
        let (v, n) = if size <= 1024 {
            ("-v ", count)
        } else {
            ("", 0)
        };
        CmCase {
            tool: "rping",
            op: "RC: SEND, RDMA READ, RDMA WRITE (-V)",
            port,
            attempts: 1,
            server: format!("rping -s -a 0.0.0.0 -p {port} -V {v}-C {count} -S {size}"),
            client: format!("rping -c -a {{peer}} -p {port} -V {v}-C {count} -S {size}"),
            client_done: ("ping data: rdma-ping-", n),
            server_done: ("server ping data: rdma-ping-", n),
            extra: format!("{size} B × {count}, {libs}"),
        }
    };
    let cases = [
        rping(100, 20, 7180),
        rping(32768, 5, 7181),
        CmCase {
            tool: "ib_write_bw",
            op: "RDMA WRITE (-R: connected by rdma_cm)",
            port: 18530,
            // perftest's server listens for the test's connection only after the control
            // connection's exchange: a client faster than the emulated guest can send that
            // REQ first and be rejected (reason 8), as between two kernels with a slow
            // server (perftest 4.5).
            attempts: 3,
            server: "ib_write_bw -R -F -s 65536 -n 50 -p 18530".into(),
            client: "ib_write_bw -R -F -s 65536 -n 50 -p 18530 {peer}".into(),
            client_done: ("#bytes", 1),
            server_done: ("#bytes", 1),
            extra: format!("64 KiB × 50, {libs}"),
        },
        CmCase {
            tool: "udaddy",
            op: "UD SEND (SIDR_REQ / SIDR_REP)",
            port: 7174,
            attempts: 1,
            // (udaddy's -p is the port space; it listens on 7174 of RDMA_PS_UDP.)
            server: "udaddy -C 10".into(),
            client: "udaddy -s {peer} -C 10".into(),
            client_done: ("test complete", 1),
            server_done: ("test complete", 1),
            extra: format!("10 messages each way, {libs}"),
        },
    ];
    for c in &cases {
        let name = format!("{} on librdmacm.so.1", c.tool);
        if !wanted(&name) || !Path::new("/usr/bin").join(c.tool).exists() {
            continue;
        }
        for rxe_serves in [true, false] {
            let (pass, detail) = if rxe_serves {
                cm_rxe_serves(peer, &env, c)
            } else {
                cm_uroce_serves(peer, &env, c)
            };
            rows.push(Row {
                tool: name.clone(),
                op: c.op.into(),
                direction: if rxe_serves {
                    "rxe server, uroce client"
                } else {
                    "uroce server, rxe client"
                },
                mtu: 4096,
                extra: c.extra.clone(),
                pass,
                detail,
            });
        }
    }
    let name = "rping on librdmacm.so.1";
    if wanted(name) && Path::new("/usr/bin/rping").exists() {
        cm_loss_cases(peer, &env, rows);
    }
    let golden = (wanted(name) && Path::new("/usr/bin/rping").exists())
        .then(|| cm_golden_case(peer, &env, pcap, rows));
    eprintln!("librdmacm cases: {:.0} s", started.elapsed().as_secs_f64());
    golden
}

/// Connections whose first CM message from rxe is lost: `uroce lossy` drops every RoCE
/// frame rxe sends until rxe's packet counter shows it sent one, then stops.
/// rxe's REQ to uroce's server (the kernel sends it again after its response timeout,
/// 20: 4.3 s, plus twice the packet life time), and rxe's REP to uroce's client (sent
/// again by rxe, or answered again when uroce repeats its REQ). Both must still connect
/// and run, and the kernel's CM counters must show the repeat.
fn cm_loss_cases(peer: &Peer, env: &[(&str, &str)], rows: &mut Vec<Row>) {
    let c = |port: u16| CmCase {
        tool: "rping",
        op: "RC (-V), a lost CM MAD sent again",
        port,
        attempts: 1,
        server: format!("rping -s -a 0.0.0.0 -p {port} -V -v -C 5 -S 100"),
        client: format!("rping -c -a {{peer}} -p {port} -V -v -C 5 -S 100"),
        client_done: ("ping data: rdma-ping-", 5),
        server_done: ("server ping data: rdma-ping-", 5),
        extra: String::new(),
    };
    // Waits until rxe has sent a frame since `before` (its packet counter; the kernel's
    // CM counts a message only once it is answered), at most 20 s.
    let sent_pkts = || rxe_cm_counter(peer, "hw_counters/sent_pkts");
    let sent_since = |before: u64| {
        for _ in 0..80 {
            if sent_pkts() > before {
                return true;
            }
            std::thread::sleep(Duration::from_millis(250));
        }
        false
    };

    // rxe's first REQ lost: uroce serves, rxe connects.
    let k = c(7183);
    let retries0 = rxe_cm_counter(peer, "cm_tx_retries/req");
    let args = cm_host_args(&k.server);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let server = peer.uroce_bg_env(env, &args);
    std::thread::sleep(Duration::from_secs(2));
    let loss = PathLoss::on("0.99999", &["roce-tap1"]);
    let pkts = sent_pkts();
    peer.guest_bg(&format!(
        "timeout 60 {} > /tmp/cli.log 2>&1; echo EXIT=$? >> /tmp/cli.log",
        k.client.replace("{peer}", HOST)
    ));
    let went = sent_since(pkts);
    drop(loss);
    let cli = guest_log(peer, "cli.log", 40);
    let s = server.wait_with_output().unwrap();
    let retries = rxe_cm_counter(peer, "cm_tx_retries/req") - retries0;
    rows.push(Row {
        tool: "rping on librdmacm.so.1".into(),
        op: k.op.into(),
        direction: "uroce server, rxe client",
        mtu: 4096,
        extra: format!("rxe's first REQ lost; rxe sent it again {retries} time(s)"),
        pass: went
            && retries >= 1
            && cli.contains("EXIT=0")
            && has(&cli, k.client_done)
            && s.status.success()
            && has(&text(&s), k.server_done),
        detail: format!(
            "REQ sent under loss: {went}, REQ retries {retries}\nuroce: {}\nrxe: {cli}",
            text(&s)
        ),
    });

    // rxe's first REP lost: rxe serves, uroce connects.
    let k = c(7184);
    peer.guest_bg(&format!(
        "timeout 60 {} > /tmp/srv.log 2>&1; echo EXIT=$? >> /tmp/srv.log",
        k.server
    ));
    rxe_listening(peer, k.port);
    let (rep_retries0, dup_req0) = (
        rxe_cm_counter(peer, "cm_tx_retries/rep"),
        rxe_cm_counter(peer, "cm_rx_duplicates/req"),
    );
    let loss = PathLoss::on("0.99999", &["roce-tap1"]);
    let pkts = sent_pkts();
    let args = cm_host_args(&k.client.replace("{peer}", RXE));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let client = peer.uroce_bg_env(env, &args);
    let went = sent_since(pkts);
    drop(loss);
    let o = client.wait_with_output().unwrap();
    let srv = guest_log(peer, "srv.log", 20);
    let rep_retries = rxe_cm_counter(peer, "cm_tx_retries/rep") - rep_retries0;
    let dup_req = rxe_cm_counter(peer, "cm_rx_duplicates/req") - dup_req0;
    rows.push(Row {
        tool: "rping on librdmacm.so.1".into(),
        op: k.op.into(),
        direction: "rxe server, uroce client",
        mtu: 4096,
        extra: format!(
            "rxe's first REP lost; rxe sent it again {rep_retries} time(s), got uroce's REQ again {dup_req} time(s)"
        ),
        pass: went
            && rep_retries + dup_req >= 1
            && o.status.success()
            && has(&text(&o), k.client_done)
            && srv.contains("EXIT=0")
            && has(&srv, k.server_done),
        detail: format!(
            "REP sent under loss: {went}, REP retries {rep_retries}, duplicate REQs {dup_req}\nuroce: {}\nrxe: {srv}",
            text(&o)
        ),
    });
}

/// A CM MAD on the wire: who sent it to whom, `uroce decode --json`'s record of its
/// frame, and the MAD's 256 bytes.
struct CapturedMad {
    src: String,
    dst: String,
    json: serde_json::Value,
    mad: Vec<u8>,
}

/// The first CM messages of each kind (`REQ`, `REP`, ...) of each sender address.
type CmMads = std::collections::HashMap<(String, String), CapturedMad>;

/// Sender `who`'s first `msg` in `m`.
fn pick<'a>(m: &'a CmMads, who: &str, msg: &str) -> Option<&'a CapturedMad> {
    m.get(&(who.to_string(), msg.to_string()))
}

/// The CM messages of one connection in `pcap` (the suite's capture, still being written:
/// a last record cut short is left out): the last REQ `req_from` sent to service `port`,
/// and every MAD carrying its transaction ID (both CMs give all of a connection's MADs
/// the REQ's); the first of each kind from each address.
fn cm_mads_of(pcap: &Path, req_from: &str, port: u16) -> CmMads {
    let dec = Command::new(env!("CARGO_BIN_EXE_uroce"))
        .args(["decode", "--json", "--qp", "1", &pcap.to_string_lossy()])
        .output()
        .expect("uroce decode");
    let file = std::fs::read(pcap).expect("capture");
    let frames: Vec<Vec<u8>> = uroce::pcap::Reader::new(&file)
        .expect("pcap")
        .map_while(|f| f.ok().map(|f| f.data.to_vec()))
        .collect();
    let all: Vec<serde_json::Value> = String::from_utf8_lossy(&dec.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .filter(|j: &serde_json::Value| j["cm"]["msg"].is_string())
        .collect();
    let tid = all
        .iter()
        .rev()
        .find(|j| {
            j["cm"]["msg"] == "REQ"
                && j["src"] == req_from
                && j["cm"]["service_id"].as_u64().map(|s| s as u16) == Some(port)
        })
        .map(|j| j["mad"]["tid"].clone());
    let mut out = std::collections::HashMap::new();
    for j in all
        .into_iter()
        .filter(|j| Some(&j["mad"]["tid"]) == tid.as_ref())
    {
        let n = j["frame"].as_u64().expect("frame number") as usize;
        let Some(p) = frames.get(n - 1).and_then(|f| uroce::wire::parse(f).ok()) else {
            continue;
        };
        let key = (
            j["src"].as_str().unwrap_or("").to_string(),
            j["cm"]["msg"].as_str().unwrap_or("").to_string(),
        );
        out.entry(key).or_insert_with(|| CapturedMad {
            src: j["src"].as_str().unwrap_or("").into(),
            dst: j["dst"].as_str().unwrap_or("").into(),
            mad: p.payload.to_vec(),
            json: j,
        });
    }
    out
}

/// The fields of a CM message that differ between two connections by nature: the
/// transaction ID, communication IDs, CA GUIDs, QP numbers, starting PSNs; addresses,
/// ports and what follows from them (the GIDs, RDMA CM's flow label), which are checked
/// against the frame and the ports instead.
const CM_PER_CONNECTION: &[&str] = &[
    "mad.tid",
    "cm.local_comm_id",
    "cm.remote_comm_id",
    "cm.local_ca_guid",
    "cm.local_qpn",
    "cm.remote_qpn",
    "cm.starting_psn",
    "cm.primary_local_gid",
    "cm.primary_remote_gid",
    "cm.primary_flow_label",
    "cm.rdma_cm.src",
    "cm.rdma_cm.dst",
    "cm.rdma_cm.src_port",
];

/// The same fields as byte ranges of the MAD (offset, length, bit mask of each byte),
/// for the byte-for-byte comparison of everything else (reserved bits, packet rate,
/// LIDs, the alternate path, the rest of the private data): IBTA Vol. 1 §12.6 tables
/// 99 (REQ), 103 (REP), 104 (RTU), 105 (DREQ), 106 (DREP), after the 24-byte MAD header.
fn cm_per_connection_bytes(msg: &str) -> Vec<(usize, usize, u8)> {
    let d = |off: usize, len: usize| (24 + off, len, 0xff);
    let mut v = vec![(8, 8, 0xff), d(0, 4)];
    match msg {
        // Comm ID, CA GUID, QPN, PSN, both GIDs, the flow label's 20 bits; in the
        // private data the source port and both addresses.
        "REQ" => v.extend([
            d(16, 8),
            d(32, 3),
            d(44, 3),
            d(56, 32),
            d(88, 2),
            (24 + 90, 1, 0xf0),
            d(142, 2),
            d(144, 32),
        ]),
        // Remote comm ID, QPN, PSN, CA GUID.
        "REP" => v.extend([d(4, 4), d(12, 3), d(20, 3), d(28, 8)]),
        // Remote comm ID; the DREQ's remote QPN.
        "RTU" | "DREP" => v.push(d(4, 4)),
        "DREQ" => v.extend([d(4, 4), d(8, 3)]),
        _ => {}
    }
    v
}

/// Flattens a JSON object into `prefix.key` leaves.
fn leaves(prefix: &str, v: &serde_json::Value, out: &mut Vec<(String, serde_json::Value)>) {
    match v.as_object() {
        Some(m) => {
            for (k, x) in m {
                leaves(&format!("{prefix}.{k}"), x, out);
            }
        }
        None => out.push((prefix.to_string(), v.clone())),
    }
}

/// Golden: the CM MADs of an rping connection uroce made (client) against rxe, and of one
/// rxe made against uroce, decoded by `uroce decode` and compared with rxe's own field
/// by field: uroce's REQ, RTU and DREQ with rxe's as client, uroce's REP and DREP with
/// rxe's as server. The MAD header and every CM field must be equal but those of
/// [`CM_PER_CONNECTION`], which are checked for what they must be instead (GIDs and the
/// IP header's addresses are the frame's, the flow label RDMA CM's hash of the ports,
/// every MAD of a connection carries its REQ's transaction ID, a reply names the
/// communication ID and QP the other side gave); then every other byte of the MADs must
/// be equal too. One row per message; returns the comparison's report.
fn cm_golden_case(peer: &Peer, env: &[(&str, &str)], pcap: &Path, rows: &mut Vec<Row>) -> String {
    let c = |port: u16| CmCase {
        tool: "rping",
        op: "",
        port,
        attempts: 1,
        server: format!("rping -s -a 0.0.0.0 -p {port} -V -v -C 2 -S 100"),
        client: format!("rping -c -a {{peer}} -p {port} -V -v -C 2 -S 100"),
        client_done: ("ping data: rdma-ping-", 2),
        server_done: ("server ping data: rdma-ping-", 2),
        extra: String::new(),
    };
    let mut ran = (false, false, String::new());
    let (ok, d) = cm_rxe_serves(peer, env, &c(7185));
    (ran.0, ran.2) = (ok, d);
    // The same port: the service ID must be the same too.
    let (ok, d) = cm_uroce_serves(peer, env, &c(7185));
    ran.1 = ok;
    ran.2.push_str(&d);
    std::thread::sleep(Duration::from_secs(1));
    let (a, b) = (cm_mads_of(pcap, HOST, 7185), cm_mads_of(pcap, RXE, 7185));
    // (message, uroce's, rxe's): the client's messages from the first capture for
    // uroce, the second for rxe; the server's the other way round.
    let mut md = format!(
        "\nGolden CM MADs (two rping connections on port 7185 in {}): uroce's against rxe's, field by field\n",
        pcap.display()
    );
    for (msg, client_side) in [
        ("REQ", true),
        ("REP", false),
        ("RTU", true),
        ("DREQ", true),
        ("DREP", false),
    ] {
        let (u, r, uc, rc) = if client_side {
            (pick(&a, HOST, msg), pick(&b, RXE, msg), &a, &b)
        } else {
            (pick(&b, HOST, msg), pick(&a, RXE, msg), &b, &a)
        };
        let mut findings = Vec::new();
        let (Some(u), Some(r)) = (u, r) else {
            findings.push(format!(
                "missing: uroce's {} rxe's {}",
                u.is_some(),
                r.is_some()
            ));
            rows.push(Row {
                tool: "rping on librdmacm.so.1 (golden CM MADs)".into(),
                op: msg.into(),
                direction: "uroce's against rxe's",
                mtu: 4096,
                extra: findings.join("; "),
                pass: false,
                detail: format!("connections ran: {} {}\n{}", ran.0, ran.1, ran.2),
            });
            md.push_str(&format!("- {msg}: {}\n", findings.join("; ")));
            continue;
        };
        let (mut lu, mut lr) = (Vec::new(), Vec::new());
        for part in ["mad", "cm"] {
            leaves(part, &u.json[part], &mut lu);
            leaves(part, &r.json[part], &mut lr);
        }
        let get = |l: &[(String, serde_json::Value)], k: &str| {
            l.iter()
                .find(|(x, _)| x == k)
                .map(|(_, v)| v.clone())
                .unwrap_or(serde_json::Value::Null)
        };
        let mut keys: Vec<String> = lu.iter().chain(&lr).map(|(k, _)| k.clone()).collect();
        keys.sort();
        keys.dedup();
        let mut equal = 0;
        for k in &keys {
            if CM_PER_CONNECTION.contains(&k.as_str()) {
                continue;
            }
            let (x, y) = (get(&lu, k), get(&lr, k));
            if x == y {
                equal += 1;
            } else {
                findings.push(format!("{k}: uroce {x}, rxe {y}"));
            }
        }
        // The per-connection fields, checked for what they must be on each side.
        for (who, m, conn) in [("uroce", u, uc), ("rxe", r, rc)] {
            let l = if who == "uroce" { &lu } else { &lr };
            let mut check = |what: String, ok: bool| {
                if !ok {
                    findings.push(format!("{who}'s {what}"));
                }
            };
            let req_tid = conn
                .values()
                .find(|x| x.json["cm"]["msg"] == "REQ")
                .map(|x| x.json["mad"]["tid"].clone());
            check(
                format!("TID {} is not its REQ's", get(l, "mad.tid")),
                req_tid == Some(get(l, "mad.tid")),
            );
            // The comm ID and QP the other side's REQ / REP gave.
            let other = conn.values().find(|x| {
                x.src != m.src && matches!(x.json["cm"]["msg"].as_str(), Some("REQ" | "REP"))
            });
            if let (Some(o), true) = (other, msg != "REQ") {
                check(
                    format!("remote comm ID {}", get(l, "cm.remote_comm_id")),
                    get(l, "cm.remote_comm_id") == o.json["cm"]["local_comm_id"],
                );
                if msg == "DREQ" {
                    check(
                        format!("remote QPN {}", get(l, "cm.remote_qpn")),
                        get(l, "cm.remote_qpn") == o.json["cm"]["local_qpn"],
                    );
                }
            }
            if msg == "REQ" {
                let gid = |a: &str| serde_json::Value::from(format!("::ffff:{a}"));
                check(
                    format!("local GID {}", get(l, "cm.primary_local_gid")),
                    get(l, "cm.primary_local_gid") == gid(&m.src),
                );
                check(
                    format!("remote GID {}", get(l, "cm.primary_remote_gid")),
                    get(l, "cm.primary_remote_gid") == gid(&m.dst),
                );
                check(
                    format!(
                        "IP header {} > {}",
                        get(l, "cm.rdma_cm.src"),
                        get(l, "cm.rdma_cm.dst")
                    ),
                    get(l, "cm.rdma_cm.src") == m.src.as_str()
                        && get(l, "cm.rdma_cm.dst") == m.dst.as_str(),
                );
                let sport = get(l, "cm.rdma_cm.src_port").as_u64().unwrap_or(0) as u16;
                let dport = get(l, "cm.service_id").as_u64().unwrap_or(0) as u16;
                let fl = uroce::cm::flow_label(sport, dport);
                check(
                    format!(
                        "flow label {} is not RDMA CM's {fl} of ports {sport} > {dport}",
                        get(l, "cm.primary_flow_label")
                    ),
                    get(l, "cm.primary_flow_label") == fl,
                );
            }
        }
        // Every byte that none of the fields above covers.
        let mask = cm_per_connection_bytes(msg);
        let mut bytes = 0;
        for i in 0..u.mad.len().min(r.mad.len()) {
            let m = mask
                .iter()
                .filter(|(o, n, _)| (*o..o + n).contains(&i))
                .fold(0xffu8, |acc, (_, _, b)| acc & !b);
            if u.mad[i] & m != r.mad[i] & m {
                findings.push(format!(
                    "MAD byte {i}: uroce {:#04x}, rxe {:#04x}",
                    u.mad[i], r.mad[i]
                ));
            }
            bytes += usize::from(m != 0);
        }
        let per: Vec<String> = CM_PER_CONNECTION
            .iter()
            .filter(|k| keys.iter().any(|x| x == *k))
            .map(|k| format!("{k} {} / {}", get(&lu, k), get(&lr, k)))
            .collect();
        md.push_str(&format!(
            "- {msg}: {equal} fields equal, {bytes} bytes compared; per connection (uroce / rxe): {}; {}\n",
            per.join(", "),
            if findings.is_empty() {
                "no difference".to_string()
            } else {
                format!("DIFFERENCES: {}", findings.join("; "))
            }
        ));
        rows.push(Row {
            tool: "rping on librdmacm.so.1 (golden CM MADs)".into(),
            op: msg.into(),
            direction: "uroce's against rxe's",
            mtu: 4096,
            extra: format!(
                "{equal} decoded fields and {bytes} other bytes equal{}",
                if findings.is_empty() {
                    String::new()
                } else {
                    format!(", {} differences", findings.len())
                }
            ),
            pass: findings.is_empty() && ran.0 && ran.1,
            detail: format!(
                "{}\nconnections ran: {} {}\n{}",
                findings.join("\n"),
                ran.0,
                ran.1,
                ran.2
            ),
        });
    }
    md
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
    let golden = rdmacm_library_cases(&peer, &pcap, &mut rows);
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
    if let Some(report) = &golden {
        md.push_str(report);
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
