//! Two unmodified programs on ONE address, as on a host with a RoCE NIC: the distro's
//! `ib_write_bw`, `ib_write_lat`, `ibv_rc_pingpong` and `rping` server and client in one
//! network namespace on one interface, each through `uroce run`, which starts one
//! `uroce daemon` for the interface that both attach to (its frames between them never
//! reach the wire).
//! Over AF_XDP and over the UDP backend. Root, iproute2 and the distro's perftest,
//! ibverbs-utils and rdmacm-utils (scripts/setup.sh installs them); each case says why
//! and skips otherwise. `cargo build` first: `uroce run` takes the libraries from next
//! to the uroce binary.

mod common;

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{can_run, daemon_check_then, text};
use uroce_tools::netns::VethPair;

/// `uroce run --iface IF --backend B -- ARGS` in namespace `ns`, under a timeout.
fn uroce_run(ns: &str, iface: &str, backend: &str, args: &[&str]) -> Command {
    let mut c = common::uroce_run(ns, iface, &["--backend", backend]);
    c.args(["timeout", "60"]).args(args);
    c
}

/// Runs `server` in the background, then `client` (after `settle`), both on the first
/// namespace's interface and address; returns both outputs.
fn pair_on_one_address(
    pair: &VethPair,
    backend: &str,
    server: &[&str],
    client: &[&str],
    settle: Duration,
) -> (Output, Output) {
    let (ns, iface) = (&pair.ns[0], &pair.ifaces[0]);
    let s = uroce_run(ns, iface, backend, server)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting the server");
    std::thread::sleep(settle);
    let c = uroce_run(ns, iface, backend, client)
        .output()
        .expect("running the client");
    let start = Instant::now();
    let mut s = s;
    while s.try_wait().unwrap().is_none() && start.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(50));
    }
    if s.try_wait().unwrap().is_none() {
        // SIGTERM reaches the program through `timeout` (SIGKILL would end `timeout`
        // alone and leave the program behind).
        // SAFETY: signalling our own child.
        unsafe { libc::kill(s.id() as i32, libc::SIGTERM) };
    }
    (s.wait_with_output().unwrap(), c)
}

/// Runs perftest's `tool` (`-n iters -s size`, on `port` when given) with server and
/// client on ONE address of a veth pair through the uroce daemon (`backend`), checks both
/// ended well, and returns (server, client) output. The client asks first how it attaches
/// to the daemon serving the interface ([`daemon_check_then`]: on its stdout).
fn perftest_on_one_address(
    backend: &str,
    tool: &str,
    iters: &str,
    size: &str,
    port: Option<&str>,
) -> Option<(std::process::Output, std::process::Output, VethPair)> {
    if !can_run(&[tool]) {
        return None;
    }
    let pair = VethPair::create(&format!("sd{}", &tool[9..10]), 1500).unwrap();
    let dev = format!("uroce_{}", pair.ifaces[0]);
    let addr = pair.addrs[0].to_string();
    let mut common = vec!["-d", dev.as_str(), "-x", "1", "-F", "-n", iters, "-s", size];
    if let Some(p) = port {
        common.extend(["-p", p]);
    }
    let mut client: Vec<&str> = daemon_check_then(&pair.ifaces[0]).to_vec();
    client.push(tool);
    client.extend(&common);
    client.push(&addr);
    let mut server = vec![tool];
    server.extend(&common);
    let (s, c) = pair_on_one_address(
        &pair,
        backend,
        &server,
        &client,
        Duration::from_millis(1500),
    );
    assert!(c.status.success(), "client: {}", text(&c));
    assert!(s.status.success(), "server: {}", text(&s));
    Some((s, c, pair))
}

fn ib_write_bw_on_one_address(backend: &str) {
    let Some((_, c, _pair)) =
        perftest_on_one_address(backend, "ib_write_bw", "2000", "65536", None)
    else {
        return;
    };
    let out = String::from_utf8_lossy(&c.stdout);
    let row = out
        .lines()
        .find(|l| l.trim_start().starts_with("65536"))
        .unwrap_or_else(|| panic!("no result row: {}", text(&c)));
    let avg: f64 = row.split_whitespace().nth(3).unwrap().parse().unwrap();
    assert!(avg > 0.0, "{row}");
    // The daemon `uroce run` made sure of for the client serves the interface. Over UDP a
    // process gets the fast path: a socket of its own in the daemon's reuseport group, its
    // datagrams steered to it by the kernel.
    let want = if backend == "xdp" {
        "AF_XDP"
    } else {
        "UDP, fast path"
    };
    assert!(
        out.contains("attached to uroce daemon for") && out.contains(want),
        "{}",
        text(&c)
    );
}

#[test]
fn ib_write_bw_server_and_client_on_one_address_over_af_xdp() {
    ib_write_bw_on_one_address("xdp");
}

#[test]
fn ib_write_bw_server_and_client_on_one_address_over_udp() {
    ib_write_bw_on_one_address("udp");
}

/// `ib_write_lat`: each side spins on MEMORY for the peer's RDMA WRITE and polls no CQ
/// meanwhile, so only the library's progress thread moves the WRITE into it (it watches
/// the datapath while the program is at work and takes a packet the program is not
/// polling for: `engine::Progress`). Every iteration must complete and the result row
/// be printed; how fast is for the benchmarks to say (DESIGN.md: never a timed test).
fn ib_write_lat_on_one_address(backend: &str) {
    let Some((s, c, _pair)) =
        perftest_on_one_address(backend, "ib_write_lat", "500", "8", Some("18763"))
    else {
        return;
    };
    for o in [&s, &c] {
        let out = String::from_utf8_lossy(&o.stdout);
        let row = out
            .lines()
            .find(|l| l.split_whitespace().take(2).eq(["8", "500"]))
            .unwrap_or_else(|| panic!("no result row: {}", text(o)));
        let typical: f64 = row.split_whitespace().nth(4).unwrap().parse().unwrap();
        assert!(typical > 0.0, "{row}");
    }
}

#[test]
fn ib_write_lat_server_and_client_on_one_address_over_af_xdp() {
    ib_write_lat_on_one_address("xdp");
}

#[test]
fn ib_write_lat_server_and_client_on_one_address_over_udp() {
    ib_write_lat_on_one_address("udp");
}

fn rc_pingpong_on_one_address(backend: &str) {
    if !can_run(&["ibv_rc_pingpong"]) {
        return;
    }
    let pair = VethPair::create("sdp", 1500).unwrap();
    let addr = pair.addrs[0].to_string();
    let args = [
        "ibv_rc_pingpong",
        "-g",
        "1",
        "-n",
        "200",
        "-c",
        "-p",
        "18761",
    ];
    let mut client = args.to_vec();
    client.push(&addr);
    let (s, c) = pair_on_one_address(&pair, backend, &args, &client, Duration::from_millis(1500));
    assert!(c.status.success(), "client: {}", text(&c));
    assert!(s.status.success(), "server: {}", text(&s));
    for o in [&s, &c] {
        assert!(
            String::from_utf8_lossy(&o.stdout).contains("200 iters in"),
            "{}",
            text(o)
        );
    }
}

#[test]
fn ibv_rc_pingpong_on_one_address_over_af_xdp() {
    rc_pingpong_on_one_address("xdp");
}

#[test]
fn ibv_rc_pingpong_on_one_address_over_udp() {
    rc_pingpong_on_one_address("udp");
}

fn rping_on_one_address(backend: &str) {
    if !can_run(&["rping"]) {
        return;
    }
    let pair = VethPair::create("sdr", 1500).unwrap();
    let addr = pair.addrs[0].to_string();
    let server = [
        "rping",
        "-s",
        "-a",
        addr.as_str(),
        "-p",
        "18762",
        "-C",
        "10",
        "-v",
    ];
    let client = [
        "rping",
        "-c",
        "-a",
        addr.as_str(),
        "-p",
        "18762",
        "-C",
        "10",
        "-v",
    ];
    let (s, c) = pair_on_one_address(
        &pair,
        backend,
        &server,
        &client,
        Duration::from_millis(1500),
    );
    assert!(
        c.status.success() || lost_the_teardown_race(&c),
        "client: {}",
        text(&c)
    );
    let pings = String::from_utf8_lossy(&c.stdout)
        .lines()
        .filter(|l| l.starts_with("ping data: rdma-ping-"))
        .count();
    assert_eq!(pings, 10, "client: {}", text(&c));
    let served = String::from_utf8_lossy(&s.stdout)
        .lines()
        .filter(|l| l.starts_with("server ping data: rdma-ping-"))
        .count();
    assert_eq!(served, 10, "server: {}", text(&s));
}

/// Whether rping failed only in its own teardown race: its CM thread, back in
/// `rdma_get_cm_event` after the DISCONNECTED event, finds the channel its main thread
/// destroyed meanwhile (rping never joins that thread) and exits with the error (EINVAL
/// here; with rdma-core a read of the closed descriptor, EBADF). On a loaded machine the
/// main thread sometimes gets there first. Every ping is still counted by the caller.
fn lost_the_teardown_race(o: &Output) -> bool {
    let out = String::from_utf8_lossy(&o.stdout);
    let err = String::from_utf8_lossy(&o.stderr);
    out.contains("DISCONNECT EVENT")
        && err
            .trim_end()
            .ends_with("rdma_get_cm_event: Invalid argument")
}

#[test]
fn rping_server_and_client_on_one_address_over_af_xdp() {
    rping_on_one_address("xdp");
}

#[test]
fn rping_server_and_client_on_one_address_over_udp() {
    rping_on_one_address("udp");
}

/// A second `rping -s` on the port the first listens on is refused, as the kernel's
/// rdma_cm refuses a port in use: the daemon owns the host's listens.
#[test]
fn a_second_listener_on_a_port_in_use_is_refused() {
    if !can_run(&["rping"]) {
        return;
    }
    let pair = VethPair::create("sdl", 1500).unwrap();
    let (ns, iface) = (&pair.ns[0], &pair.ifaces[0]);
    let addr = pair.addrs[0].to_string();
    let server = ["rping", "-s", "-a", addr.as_str(), "-p", "18763", "-C", "1"];
    let mut first = uroce_run(ns, iface, "udp", &server)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    let second = uroce_run(ns, iface, "udp", &server).output().unwrap();
    // SIGTERM, which `timeout` (the first process's, under `uroce run`) passes on to
    // rping: SIGKILL would end `timeout` alone and leave rping waiting for a client.
    // SAFETY: signalling our own child.
    unsafe { libc::kill(first.id() as i32, libc::SIGTERM) };
    let _ = first.wait();
    assert!(!second.status.success(), "{}", text(&second));
    let err = String::from_utf8_lossy(&second.stderr);
    assert!(
        err.contains("rdma_listen: Address already in use"),
        "{}",
        text(&second)
    );
}

/// A program that forks after using the device: the child opens the device anew and moves
/// data through the daemon (its own engine: the parent's progress thread and rings are
/// not the child's), and the parent's QPs keep working after it (Python's
/// multiprocessing, rdma-core's own tests, a server forking per client).
#[test]
fn a_forked_child_uses_the_device_beside_its_parent() {
    if !can_run(&[]) {
        return;
    }
    let Some(exe) = common::c_program("fork") else {
        return;
    };
    for backend in ["udp", "xdp"] {
        let pair = VethPair::create("sdf", 1500).unwrap();
        let out = uroce_run(
            &pair.ns[0],
            &pair.ifaces[0],
            backend,
            &[exe.to_str().unwrap()],
        )
        .output()
        .unwrap();
        let t = text(&out);
        assert!(
            out.status.success()
                && t.contains("child: traffic OK")
                && t.contains("parent: traffic OK"),
            "{backend}: {t}"
        );
    }
}
