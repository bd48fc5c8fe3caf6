//! The distro's unmodified RDMA CM programs (rdmacm-utils' `rping`, `udaddy`, `ucmatose`,
//! `rdma_server` / `rdma_client`, perftest with `-R`) on both drop-in libraries, `librdmacm.so.1` and uroce-verbs'
//! `libibverbs.so.1`, at both ends of a veth pair between two network namespaces, over
//! the UDP backend and over AF_XDP. The connection is made by uroce's CM over QP 1 (REQ,
//! REP, RTU; SIDR_REQ / SIDR_REP for udaddy; DREQ / DREP at the end); both ends must exit
//! 0, rping checking the data (`-V`). And the bad input a program must see as rdma_cm
//! reports it: a connect to a port nobody listens on is rejected with reason 8 (invalid
//! service ID), and a connect to an address no uroce device has fails address
//! resolution. Needs root, iproute2, rdmacm-utils and perftest; skips (saying which is
//! missing) otherwise.

mod common;

use std::path::Path;
use std::process::{Output, Stdio};
use std::time::Duration;

use common::{in_ns, text};
use uroce_tools::netns::{self, VethPair};

/// The tests here run one at a time: each starts programs at both ends of a veth pair,
/// and on a 2-core machine several at once make perftest's `-R` race its own server.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner())
}

fn ready() -> bool {
    if let Err(e) = netns::check_privileges() {
        eprintln!("SKIP: {e}");
        return false;
    }
    for tool in [
        "rping",
        "udaddy",
        "ucmatose",
        "rdma_server",
        "rdma_client",
        "ib_write_bw",
        "ib_send_lat",
    ] {
        if !Path::new("/usr/bin").join(tool).exists() {
            eprintln!(
                "SKIP: /usr/bin/{tool} is missing (scripts/setup.sh installs rdmacm-utils and perftest)"
            );
            return false;
        }
    }
    true
}

/// Starts `server` in the first namespace, then `client` in the second once the server
/// has had time to listen. A client that fails within seconds came too early: before the
/// server listened (REJECTED, reason 8), or, with perftest's `-R`, before the server's
/// second listener, for the test's own connection, was up (perftest connects it as soon
/// as its control connection is made, and its retry reuses the id it destroyed). Then
/// both are started again, at most five times.
fn serve_and_connect(
    pair: &VethPair,
    lib: &Path,
    env: &[(&str, &str)],
    server: &[&str],
    client: &[&str],
) -> (Output, Output) {
    let mut tries = 0;
    loop {
        let mut srv = in_ns(&pair.ns[0], lib, env, server)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("server");
        std::thread::sleep(Duration::from_millis(700));
        let started = std::time::Instant::now();
        let cli = in_ns(&pair.ns[1], lib, env, client)
            .output()
            .expect("client");
        tries += 1;
        let early = started.elapsed() < Duration::from_secs(5);
        if cli.status.success() || !early || tries == 5 {
            return (srv.wait_with_output().expect("server output"), cli);
        }
        eprintln!(
            "{} came before the server listened; again:\n{}",
            client.join(" "),
            text(&cli)
        );
        // SIGTERM, which `timeout` passes on to the server (SIGKILL would leave it).
        let _ = std::process::Command::new("kill")
            .arg(srv.id().to_string())
            .status();
        let _ = srv.wait();
        // The kernel lets go of a finished program's AF_XDP socket after it is gone.
        std::thread::sleep(Duration::from_millis(300));
    }
}

/// Runs a server and its client; panics with both outputs unless both exit 0 and the
/// client's output has `done`.
fn run(pair: &VethPair, lib: &Path, backend: &str, server: &[&str], client: &[&str], done: &str) {
    let env = [("UROCE_BACKEND", backend)];
    let mut s = vec!["timeout", "60"];
    s.extend_from_slice(server);
    let mut c = vec!["timeout", "60"];
    c.extend_from_slice(client);
    let (srv, cli) = serve_and_connect(pair, lib, &env, &s, &c);
    let what = format!(
        "{} over {backend}\n-- server:\n{}\n-- client:\n{}",
        client.join(" "),
        text(&srv),
        text(&cli)
    );
    assert!(srv.status.success() && cli.status.success(), "{what}");
    assert!(text(&cli).contains(done), "{what}");
    eprintln!("ok: {} over {backend}", client.join(" "));
}

fn suite(backend: &str, base_port: u16) {
    if !ready() {
        return;
    }
    let lib = common::both_libraries_dir(&format!("cm-{backend}"));
    let pair = VethPair::create(&format!("cm{}", &backend[..1]), 9000).expect("veth pair");
    let a = pair.addrs[0].to_string();
    let port = |k: u16| (base_port + k).to_string();
    let (p0, p1, p2, p3, p4, p5) = (port(0), port(1), port(2), port(3), port(4), port(5));
    // rping: the client SENDs its buffer's address and rkey, the server RDMA READs it and
    // RDMA WRITEs its own back; -V checks every byte of every round.
    let rping = |p: &str, extra: &[&'static str]| {
        let mut s = vec!["rping", "-s", "-a", "0.0.0.0", "-p", p];
        s.extend_from_slice(extra);
        let mut c = vec!["rping", "-c", "-a", &a, "-p", p];
        c.extend_from_slice(extra);
        (
            s.into_iter().map(String::from).collect::<Vec<_>>(),
            c.into_iter().map(String::from).collect::<Vec<_>>(),
        )
    };
    let cases = [
        rping(&p0, &["-V", "-C", "20", "-S", "100"]),
        rping(&p1, &["-V", "-C", "5", "-S", "32768"]),
        // The program's own QP, brought up with rdma_init_qp_attr; rdma_establish.
        rping(&p2, &["-V", "-q", "-C", "5"]),
    ];
    for (s, c) in &cases {
        let s: Vec<&str> = s.iter().map(String::as_str).collect();
        let c: Vec<&str> = c.iter().map(String::as_str).collect();
        run(&pair, &lib, backend, &s, &c, "");
    }
    // udaddy: UD QPs found through SIDR_REQ / SIDR_REP, 10 messages each way.
    run(
        &pair,
        &lib,
        backend,
        &["udaddy", "-C", "10"],
        &["udaddy", "-s", &a, "-C", "10"],
        "test complete",
    );
    // ucmatose: four RC connections at once, SENDs both ways, then DREQ / DREP.
    run(
        &pair,
        &lib,
        backend,
        &["ucmatose", "-c", "4", "-C", "20"],
        &["ucmatose", "-s", &a, "-c", "4", "-C", "20"],
        "test complete",
    );
    // rdma_server / rdma_client: the synchronous calls (rdma_getaddrinfo, rdma_create_ep,
    // rdma_get_request, the rdma_verbs.h helpers on the id's PD, QP and CQs).
    run(
        &pair,
        &lib,
        backend,
        &["rdma_server", "-s", &a, "-p", &p5],
        &["rdma_client", "-s", &a, "-p", &p5],
        "rdma_client: end 0",
    );
    // perftest connecting through rdma_cm (-R): the control exchange and the test's QPs.
    run(
        &pair,
        &lib,
        backend,
        &["ib_write_bw", "-R", "-s", "65536", "-n", "200", "-p", &p3],
        &[
            "ib_write_bw",
            "-R",
            "-s",
            "65536",
            "-n",
            "200",
            "-p",
            &p3,
            &a,
        ],
        "#bytes",
    );
    run(
        &pair,
        &lib,
        backend,
        &["ib_send_lat", "-R", "-n", "200", "-p", &p4],
        &["ib_send_lat", "-R", "-n", "200", "-p", &p4, &a],
        "#bytes",
    );
    drop(pair);
    let _ = std::fs::remove_dir_all(&lib);
}

/// Both backends one after the other.
#[test]
fn distro_cm_programs_over_udp_and_af_xdp() {
    let _one = serial();
    suite("udp", 20100);
    suite("xdp", 20200);
}

/// A connect to a port nobody listens on: the peer's CM answers the REQ with a REJ,
/// reason 8 (invalid service ID), and rping's client gets RDMA_CM_EVENT_REJECTED with
/// that status, at once. A connect to an address on no uroce device's network fails in
/// address resolution (RDMA_CM_EVENT_ADDR_ERROR), and nothing hangs.
#[test]
fn rejected_and_unresolvable_connects() {
    let _one = serial();
    if !ready() {
        return;
    }
    let lib = common::both_libraries_dir("cm-bad");
    let pair = VethPair::create("cmb", 1500).expect("veth pair");
    let a = pair.addrs[0].to_string();
    let env = [("UROCE_BACKEND", "udp")];
    // A listener on another port keeps the server's CM up; the client asks for 20399.
    let mut srv = in_ns(
        &pair.ns[0],
        &lib,
        &env,
        &[
            "timeout", "20", "rping", "-s", "-a", "0.0.0.0", "-p", "20398",
        ],
    )
    .stdout(Stdio::null())
    .stderr(Stdio::null())
    .spawn()
    .expect("server");
    std::thread::sleep(Duration::from_millis(700));
    let o = in_ns(
        &pair.ns[1],
        &lib,
        &env,
        &[
            "timeout", "20", "rping", "-c", "-d", "-a", &a, "-p", "20399", "-C", "1",
        ],
    )
    .output()
    .expect("client");
    let t = text(&o);
    assert!(!o.status.success(), "{t}");
    assert!(t.contains("RDMA_CM_EVENT_REJECTED"), "{t}");
    assert!(t.contains("error 8"), "reason 8, invalid service ID:\n{t}");
    // SIGTERM, which `timeout` passes on (SIGKILL would leave rping running).
    let _ = std::process::Command::new("kill")
        .arg(srv.id().to_string())
        .status();
    let _ = srv.wait();
    // 192.0.2.1 (TEST-NET-1) is reached through no interface of the namespace.
    let o = in_ns(
        &pair.ns[1],
        &lib,
        &env,
        &[
            "timeout",
            "20",
            "rping",
            "-c",
            "-d",
            "-a",
            "192.0.2.1",
            "-C",
            "1",
        ],
    )
    .output()
    .expect("client");
    let t = text(&o);
    assert!(!o.status.success(), "{t}");
    assert!(
        t.contains("RDMA_CM_EVENT_ADDR_ERROR") || t.contains("rdma_resolve_addr"),
        "{t}"
    );
    assert_ne!(o.status.code(), Some(124), "timed out:\n{t}");
    // An address on the link that nobody has: over AF_XDP the library asks for its MAC
    // itself (ARP) and gives up after rping's 2 s: ADDR_ERROR, -EHOSTUNREACH.
    let o = pair.addrs[0].octets();
    let nobody = std::net::Ipv4Addr::new(o[0], o[1], o[2], 99).to_string();
    let o = in_ns(
        &pair.ns[1],
        &lib,
        &[("UROCE_BACKEND", "xdp")],
        &[
            "timeout", "20", "rping", "-c", "-d", "-a", &nobody, "-C", "1",
        ],
    )
    .output()
    .expect("client");
    let t = text(&o);
    assert!(!o.status.success(), "{t}");
    assert!(t.contains("RDMA_CM_EVENT_ADDR_ERROR"), "{t}");
    assert!(t.contains("error -113"), "EHOSTUNREACH:\n{t}");
}

/// A peer that stops answering mid-handshake (the server process is stopped after it
/// listens): the client's REQ is sent again after each response timeout and, when the
/// retries are spent, rping gets RDMA_CM_EVENT_UNREACHABLE (ETIMEDOUT), as from the
/// kernel's rdma_cm. The kernel's timing (4.3 s × 16 tries) is shortened with
/// UROCE_CM_RESPONSE_TIMEOUT / UROCE_CM_RETRIES.
#[test]
fn a_peer_that_stops_answering_is_unreachable() {
    let _one = serial();
    if !ready() {
        return;
    }
    let lib = common::both_libraries_dir("cm-gone");
    let pair = VethPair::create("cmg", 1500).expect("veth pair");
    let a = pair.addrs[0].to_string();
    let env = [("UROCE_BACKEND", "udp")];
    let mut srv = in_ns(
        &pair.ns[0],
        &lib,
        &env,
        &["rping", "-s", "-a", "0.0.0.0", "-p", "20397"],
    )
    .stdout(Stdio::null())
    .stderr(Stdio::null())
    .spawn()
    .expect("server");
    std::thread::sleep(Duration::from_millis(700));
    // `ip netns exec` execs the program: the child is rping itself.
    let stop = |sig: &str| {
        let _ = std::process::Command::new("kill")
            .args([sig, &srv.id().to_string()])
            .status();
    };
    stop("-STOP");
    let env = [
        ("UROCE_BACKEND", "udp"),
        ("UROCE_CM_RESPONSE_TIMEOUT", "12"),
        ("UROCE_CM_RETRIES", "2"),
    ];
    let o = in_ns(
        &pair.ns[1],
        &lib,
        &env,
        &[
            "timeout", "30", "rping", "-c", "-d", "-a", &a, "-p", "20397", "-C", "1",
        ],
    )
    .output()
    .expect("client");
    stop("-CONT");
    stop("-TERM");
    let _ = srv.wait();
    let t = text(&o);
    assert!(!o.status.success(), "{t}");
    assert_ne!(o.status.code(), Some(124), "timed out:\n{t}");
    assert!(t.contains("RDMA_CM_EVENT_UNREACHABLE"), "{t}");
    assert!(t.contains("error -110"), "ETIMEDOUT:\n{t}");
}
