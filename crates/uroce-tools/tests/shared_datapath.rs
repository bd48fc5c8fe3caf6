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

/// Whether rping failed only in its own teardown race: its CM thread, in
/// `rdma_get_cm_event` (back there after the DISCONNECTED event, or still waiting for
/// it), finds the channel its main thread destroyed meanwhile (rping never joins that
/// thread) and exits with the error (EINVAL here; with rdma-core a read of the closed
/// descriptor, EBADF). On a loaded machine the main thread sometimes gets there first,
/// and now and then before the CM thread printed "DISCONNECT EVENT" (seen once in CI,
/// over AF_XDP, after all ten pings). Every ping is still counted by the caller.
fn lost_the_teardown_race(o: &Output) -> bool {
    let err = String::from_utf8_lossy(&o.stderr);
    err.trim_end()
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

/// The bytes `tests/c/ud_fanout.c --recv` checks in message `seq` for `qpn`: the QPN and
/// the sequence number (big-endian), then its pattern, 256 bytes in all.
fn fanout_message(qpn: u32, seq: u32) -> Vec<u8> {
    let mut m = vec![0u8; 256];
    m[..4].copy_from_slice(&qpn.to_be_bytes());
    m[4..8].copy_from_slice(&seq.to_be_bytes());
    for (at, b) in m.iter_mut().enumerate().skip(8) {
        *b = (qpn
            .wrapping_mul(7)
            .wrapping_add(seq.wrapping_mul(13))
            .wrapping_add((at as u32).wrapping_mul(31))
            .wrapping_add((at >> 5) as u32)) as u8;
    }
    m
}

/// A peer's runs of UD SENDs to two QPNs on one host ([`send_coalesced_runs`]).
struct Runs {
    src: std::net::Ipv4Addr,
    dst: std::net::Ipv4Addr,
    qpns: [u32; 2],
    /// The next sequence number of each QPN's messages.
    seq: [u32; 2],
}

/// Sends, from `src` port 0xc123 in the current thread's namespace, `rounds` runs of
/// `per_run` UD SENDs to `dst`, alternating between the QPNs `qpns` (a run's first
/// packet for `qpns[lead(round)]`), each run ONE datagram with UDP_SEGMENT: the kernel
/// keeps a run whole up to the receiving socket, as a NIC's GRO coalesces a flow's
/// packets (one source address and port), and the receiving host steers it whole by its
/// first packet's QPN.
fn send_coalesced_runs(runs: &mut Runs, rounds: u32, per_run: u32, lead: fn(u32) -> u32) {
    use std::os::fd::AsRawFd;
    use uroce::wire::{BthRepr, DatagramRepr, DethRepr, ExtHeaders, FrameRepr, Opcode};
    const SPORT: u16 = 0xc123;
    let Runs {
        src,
        dst,
        qpns,
        seq,
    } = runs;
    let (src, dst) = (*src, *dst);
    let sock = std::net::UdpSocket::bind((src, SPORT)).expect("binding the sender's socket");
    let d = DatagramRepr::roce(src.into(), dst.into(), SPORT, 0).unwrap();
    let mut psn = 0;
    for round in 0..rounds {
        let mut run = Vec::new();
        let mut size = 0;
        for k in 0..per_run {
            let which = ((lead(round) + k) % 2) as usize;
            let msg = fanout_message(qpns[which], seq[which]);
            seq[which] += 1;
            let frame = FrameRepr {
                eth: None,
                ip: d.ip,
                udp: d.udp,
                bth: BthRepr::new(Opcode::UdSendOnly, qpns[which], psn),
                ext: ExtHeaders {
                    deth: Some(DethRepr {
                        qkey: 0x1111_1111,
                        src_qp: 0x99,
                    }),
                    ..ExtHeaders::default()
                },
            };
            psn += 1;
            let mut buf = vec![0u8; 512];
            size = frame
                .emit_roce_with(msg.len(), &mut buf, |p| p.copy_from_slice(&msg))
                .unwrap();
            run.extend_from_slice(&buf[..size]);
        }
        let seg = size as libc::c_int;
        // SAFETY: setsockopt on our socket with an int option value.
        let r = unsafe {
            libc::setsockopt(
                sock.as_raw_fd(),
                libc::SOL_UDP,
                libc::UDP_SEGMENT,
                (&seg as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        assert_eq!(r, 0, "UDP_SEGMENT: {}", std::io::Error::last_os_error());
        sock.send_to(&run, (dst, uroce::wire::ROCEV2_UDP_PORT))
            .expect("sending a run");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Starts `uroce daemon --iface IFACE --backend udp EXTRA` in `ns` and waits until it
/// answers.
fn start_daemon(ns: &str, iface: &str, extra: &[&str]) -> std::process::Child {
    let mut args = vec!["daemon", "--iface", iface, "--backend", "udp"];
    args.extend(extra);
    let daemon = common::uroce_in(ns, &args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting uroce daemon");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !common::uroce_in(ns, &["daemon", "--check", "--iface", iface])
        .output()
        .unwrap()
        .status
        .success()
    {
        assert!(Instant::now() < deadline, "uroce daemon did not come up");
        std::thread::sleep(Duration::from_millis(100));
    }
    daemon
}

/// What the tests of `tests/c/ud_fanout.c` start with: the program, a veth pair named
/// after `tag`, and a daemon over UDP (with `extra` options) on its first namespace's
/// interface; None, said why, where the machine cannot run them.
fn fanout_setup(
    tag: &str,
    extra: &[&str],
) -> Option<(std::path::PathBuf, VethPair, std::process::Child)> {
    if !can_run(&[]) {
        return None;
    }
    let exe = common::c_program("ud_fanout")?;
    let pair = VethPair::create(tag, 1500).unwrap();
    let daemon = start_daemon(&pair.ns[0], &pair.ifaces[0], extra);
    Some((exe, pair, daemon))
}

/// Stops a daemon from [`start_daemon`]; what it said (its counters last).
fn stop_daemon(daemon: std::process::Child) -> String {
    // SAFETY: signalling our own child (`ip netns exec` execs the daemon).
    unsafe { libc::kill(daemon.id() as i32, libc::SIGTERM) };
    let d = daemon.wait_with_output().unwrap();
    String::from_utf8_lossy(&d.stderr).into_owned()
}

/// Starts `tests/c/ud_fanout.c --recv COUNT` in `ns` through `uroce run`; the child and
/// its QPN (the first line it prints).
fn start_fanout_receiver(
    ns: &str,
    iface: &str,
    exe: &std::path::Path,
    count: u32,
) -> (std::process::Child, u32) {
    let (r, line) = start_fanout(ns, iface, exe, &["--recv", &count.to_string()]);
    let qpn = line
        .strip_prefix("qpn 0x")
        .and_then(|h| u32::from_str_radix(h.trim(), 16).ok())
        .unwrap_or_else(|| panic!("a receiver said {line:?}"));
    (r, qpn)
}

/// Starts `tests/c/ud_fanout.c ARGS` in `ns` through `uroce run`, its standard streams
/// piped; the child and the first line it prints.
fn start_fanout(
    ns: &str,
    iface: &str,
    exe: &std::path::Path,
    args: &[&str],
) -> (std::process::Child, String) {
    let mut all = vec![exe.to_str().unwrap()];
    all.extend(args);
    let mut child = uroce_run(ns, iface, "udp", &all)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting ud_fanout");
    let mut line = String::new();
    use std::io::BufRead;
    std::io::BufReader::new(child.stdout.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    (child, line)
}

/// A process whose sends go through its ring to the daemon (no fast path) leaves with
/// `_exit` the moment its last UD SEND completes, and the daemon, stopped meanwhile
/// (SIGSTOP), finds the process gone and its ring full of sends when it runs again: it
/// takes them before it forgets the process, and the receiver on the same address gets
/// every message, each byte checked. (The daemon used to forget a process, and what its
/// ring held, as soon as its connection closed: most of them were lost.)
#[test]
fn a_process_that_exits_at_its_last_completion_loses_no_send() {
    let Some((exe, pair, daemon)) = fanout_setup("sdx", &["--no-fast-path"]) else {
        return;
    };
    let (ns, iface) = (&pair.ns[0], &pair.ifaces[0]);
    // Fewer than a ring holds: none waits for room, none is dropped for want of it.
    const COUNT: u32 = 512;
    let (receiver, qpn) = start_fanout_receiver(ns, iface, &exe, COUNT);
    let dest = format!("{qpn:#x}");
    let count = COUNT.to_string();
    let (mut sender, line) = start_fanout(ns, iface, &exe, &["--send", &dest, &count]);
    use std::io::Write;
    assert_eq!(line.trim(), "ready", "the sender said {line:?}");
    /// Lets the daemon run again when dropped, whatever happened while it was stopped.
    struct Stopped(i32);
    impl Drop for Stopped {
        fn drop(&mut self) {
            // SAFETY: signalling our own child.
            unsafe { libc::kill(self.0, libc::SIGCONT) };
        }
    }
    // SAFETY: signalling our own child (`ip netns exec` execs the daemon).
    unsafe { libc::kill(daemon.id() as i32, libc::SIGSTOP) };
    let stopped = Stopped(daemon.id() as i32);
    sender
        .stdin
        .take()
        .unwrap()
        .write_all(b"go\n")
        .expect("telling the sender to go");
    // It needs nothing from the daemon to send 512 (they fit in its ring); bounded all
    // the same, so a sender that waits on the stopped daemon fails the test.
    let deadline = Instant::now() + Duration::from_secs(20);
    while sender.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = sender.kill();
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    drop(stopped);
    let sent = sender.wait_with_output().unwrap();
    let got = receiver.wait_with_output().unwrap();
    let err = stop_daemon(daemon);
    assert!(sent.status.success(), "the sender: {}", text(&sent));
    assert!(
        got.status.success(),
        "the receiver: {}\nthe daemon: {err}",
        text(&got)
    );
    assert!(err.contains(&format!("local {COUNT},")), "{err}");
}

/// [`send_coalesced_runs`] from a thread in namespace `ns`.
fn send_from(ns: &str, runs: &mut Runs, rounds: u32, per_run: u32, lead: fn(u32) -> u32) {
    let ns = ns.to_string();
    std::thread::scope(|s| {
        s.spawn(|| {
            uroce_tools::netns::enter(&ns).expect("setns");
            send_coalesced_runs(runs, rounds, per_run, lead);
        });
    });
}

/// A process that leaves while a peer still sends to its QPN, from the port it shares
/// with another process's QPN on that host: each coalesced run led by a packet for the
/// process that left reaches its class's socket, which no process reads now. The daemon
/// reads that socket and switches the other process's packets to it (the first
/// process's own it counts as for nobody), so the other process gets every message.
#[test]
fn a_run_led_by_a_packet_for_a_process_that_left_reaches_the_others() {
    let Some((exe, pair, daemon)) = fanout_setup("sdo", &[]) else {
        return;
    };
    let (ns, iface) = (&pair.ns[0], &pair.ifaces[0]);
    const PER_RUN: u32 = 16;
    const LATER: u32 = 4;
    // The first takes one run's share and leaves; the second takes all its messages.
    let (first, a) = start_fanout_receiver(ns, iface, &exe, PER_RUN / 2);
    let (second, b) = start_fanout_receiver(ns, iface, &exe, PER_RUN / 2 * (1 + LATER));
    assert_ne!(a >> 18, b >> 18, "two classes: {a:#x} {b:#x}");
    let mut runs = Runs {
        src: pair.addrs[1],
        dst: pair.addrs[0],
        qpns: [a, b],
        seq: [0; 2],
    };
    send_from(&pair.ns[1], &mut runs, 1, PER_RUN, |_| 0);
    let first = first.wait_with_output().unwrap();
    assert!(first.status.success(), "the first: {}", text(&first));
    // Runs led by the first's QPN, each half the second's.
    send_from(&pair.ns[1], &mut runs, LATER, PER_RUN, |_| 0);
    let second = second.wait_with_output().unwrap();
    let err = stop_daemon(daemon);
    assert!(
        second.status.success(),
        "the second: {}\nthe daemon: {err}",
        text(&second)
    );
    let unrouted: u64 = err
        .split("(unrouted ")
        .nth(1)
        .and_then(|s| s.split(')').next())
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no counters from the daemon: {err}"));
    assert!(unrouted >= u64::from(LATER * PER_RUN / 2), "{err}");
}

/// Two processes on one address through the daemon over UDP, each with a UD QP, and a
/// peer sending runs of UD datagrams to both from ONE source port, each run coalesced
/// (as a NIC's GRO coalesces a flow): the kernel steers a run whole to the socket of its
/// first packet's process, which passes the other's packets on through the daemon (its
/// socket coalesces, so it sees them). Each process receives every message of its own,
/// each byte checked, and the daemon counts the packets passed on. (Before the sockets
/// coalesced, the runs were split back on the first process's socket and the other lost
/// its messages in them.)
#[test]
fn a_coalesced_run_for_two_processes_reaches_both() {
    let Some((exe, pair, daemon)) = fanout_setup("sdg", &[]) else {
        return;
    };
    let (ns, iface) = (&pair.ns[0], &pair.ifaces[0]);
    const ROUNDS: u32 = 8;
    const PER_RUN: u32 = 16;
    let mut receivers = Vec::new();
    let mut qpns = [0u32; 2];
    for q in qpns.iter_mut() {
        let (r, qpn) = start_fanout_receiver(ns, iface, &exe, ROUNDS * PER_RUN / 2);
        *q = qpn;
        receivers.push(r);
    }
    assert_ne!(qpns[0] >> 18, qpns[1] >> 18, "two classes: {qpns:x?}");
    let mut runs = Runs {
        src: pair.addrs[1],
        dst: pair.addrs[0],
        qpns,
        seq: [0; 2],
    };
    send_from(&pair.ns[1], &mut runs, ROUNDS, PER_RUN, |round| round % 2);
    let outs: Vec<Output> = receivers
        .into_iter()
        .map(|r| r.wait_with_output().unwrap())
        .collect();
    let err = stop_daemon(daemon);
    for o in &outs {
        // With the daemon's counters (passed on, refused, dropped at a full ring): where
        // a message was lost.
        assert!(
            o.status.success(),
            "a receiver (QPNs {qpns:x?}): {}\nthe daemon: {err}",
            text(o)
        );
    }
    let passed: u64 = err
        .split("passed on ")
        .nth(1)
        .and_then(|s| s.split(',').next())
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no counters from the daemon: {err}"));
    assert!(passed > 0, "{err}");
    eprintln!("daemon: {}", err.trim());
}
