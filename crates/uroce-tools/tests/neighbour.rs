//! Neighbour resolution end to end, between network namespaces joined by veth pairs (CI
//! runs as root): ARP and NDP on-link, a peer behind a router, and a peer that never
//! answers. Each test makes its own namespaces (named with the process id) and removes
//! them when it ends, also when it fails. Without root or iproute2 these tests say why
//! and skip, as tests/veth.rs does.
//!
//! These tests have no AF_XDP socket: the requests `resolve` builds leave through an
//! AF_PACKET socket on the same veth, which puts the same bytes on the wire.

use std::net::{IpAddr, UdpSocket};
use std::process::Command;
use std::time::{Duration, Instant};

use uroce::net::addresses::interface_info;
use uroce::net::neighbours::kernel_neighbour;
use uroce::net::packet_socket::PacketSocket;
use uroce::net::resolve::{resolve, How, Resolved};
use uroce_tools::netns;

fn can_run() -> bool {
    match netns::check_privileges() {
        Ok(()) => true,
        Err(why) => {
            eprintln!("SKIP: {why}");
            false
        }
    }
}

fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().unwrap();
    assert!(
        out.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr).trim()
    );
}

/// Namespaces made for one test, deleted on drop (with the veths inside them).
struct Lab {
    case: &'static str,
    ns: Vec<String>,
}

impl Lab {
    fn new(case: &'static str) -> Self {
        Self {
            case,
            ns: Vec::new(),
        }
    }

    /// Makes namespace `side` (lo up) and returns its name.
    fn ns(&mut self, side: &str) -> String {
        let name = format!("uroce-nbr-{}-{}-{side}", std::process::id(), self.case);
        ip(&["netns", "add", &name]);
        self.ns.push(name.clone());
        ip(&["-n", &name, "link", "set", "lo", "up"]);
        name
    }

    /// The name of interface `side` of this test (unique per process and test).
    fn ifname(&self, side: &str) -> String {
        format!("nb{}{}{side}", std::process::id() % 100_000, self.case)
    }

    /// A veth pair from `a` in namespace `ns_a` to `b` in `ns_b`, both up.
    fn link(&self, ns_a: &str, a: &str, ns_b: &str, b: &str) {
        ip(&[
            "-n", ns_a, "link", "add", a, "type", "veth", "peer", "name", b, "netns", ns_b,
        ]);
        ip(&["-n", ns_a, "link", "set", a, "up"]);
        ip(&["-n", ns_b, "link", "set", b, "up"]);
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        for n in &self.ns {
            let _ = Command::new("ip").args(["netns", "del", n]).output();
        }
    }
}

/// Adds `addr` (with its prefix length) to `dev` in `ns`; IPv6 without duplicate address
/// detection, so it is usable at once.
fn addr(ns: &str, dev: &str, addr: &str) {
    if addr.contains(':') {
        ip(&["-n", ns, "addr", "add", addr, "dev", dev, "nodad"]);
    } else {
        ip(&["-n", ns, "addr", "add", addr, "dev", dev]);
    }
}

/// `dev`'s MAC in `ns`, asked of the kernel over rtnetlink from inside the namespace.
fn mac_of(ns: &str, dev: &str) -> [u8; 6] {
    let dev = dev.to_string();
    in_ns(ns, move || {
        interface_info(&dev)
            .unwrap()
            .mac
            .unwrap_or_else(|| panic!("{dev} has no MAC"))
    })
}

/// Runs `f` on a thread that joined namespace `ns` (network namespaces are per thread).
fn in_ns<T: Send + 'static>(ns: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let ns = ns.to_string();
    std::thread::spawn(move || {
        netns::enter(&ns).unwrap_or_else(|e| panic!("setns into {ns}: {e}"));
        f()
    })
    .join()
    .unwrap_or_else(|e| std::panic::resume_unwind(e))
}

/// `resolve` inside namespace `ns` from `dev`'s MAC and `local` to `peer`, with frames
/// sent through an AF_PACKET socket on `dev`; also returns how long it took and the
/// frames it sent.
fn resolve_in(
    ns: &str,
    dev: &str,
    local: &str,
    peer: &str,
    timeout: Duration,
) -> (Result<Resolved, String>, Duration, Vec<Vec<u8>>) {
    let dev = dev.to_string();
    let local: IpAddr = local.parse().unwrap();
    let peer: IpAddr = peer.parse().unwrap();
    in_ns(ns, move || {
        let my_mac = interface_info(&dev).unwrap().mac.expect("veth has a MAC");
        let ethertype = if peer.is_ipv4() { 0x0806 } else { 0x86dd };
        let tx = PacketSocket::open(&dev, ethertype).unwrap();
        let mut sent = Vec::new();
        let mut send = |frame: &[u8]| {
            sent.push(frame.to_vec());
            tx.send(frame)
        };
        let start = Instant::now();
        let r = resolve(&dev, my_mac, local, peer, &mut send, timeout);
        (r, start.elapsed(), sent)
    })
}

/// Sends one UDP datagram from `ns` to `peer`, so the kernel resolves it itself, and
/// waits until its neighbour table has the entry.
fn kernel_learns(ns: &str, dev: &str, peer: &str) {
    let dev = dev.to_string();
    let peer: IpAddr = peer.parse().unwrap();
    in_ns(ns, move || {
        let any: IpAddr = if peer.is_ipv4() {
            "0.0.0.0".parse().unwrap()
        } else {
            "::".parse().unwrap()
        };
        let s = UdpSocket::bind((any, 0)).unwrap();
        let deadline = Instant::now() + Duration::from_secs(3);
        let index = interface_info(&dev).unwrap().index;
        while kernel_neighbour(index, peer).unwrap().is_none() {
            assert!(
                Instant::now() < deadline,
                "the kernel did not resolve {peer}"
            );
            let _ = s.send_to(b"hello", (peer, 9));
            std::thread::sleep(Duration::from_millis(50));
        }
    });
}

fn flush(ns: &str, dev: &str) {
    ip(&["-n", ns, "neigh", "flush", "dev", dev]);
}

/// Two namespaces `a` and `b` on one veth; returns (lab, ns a, dev a, ns b, dev b).
fn pair(case: &'static str) -> (Lab, String, String, String, String) {
    let mut lab = Lab::new(case);
    let (na, nb) = (lab.ns("a"), lab.ns("b"));
    let (da, db) = (lab.ifname("a"), lab.ifname("b"));
    lab.link(&na, &da, &nb, &db);
    (lab, na, da, nb, db)
}

#[test]
fn ipv4_on_link_by_arp_then_from_the_kernel() {
    if !can_run() {
        return;
    }
    let (_lab, na, da, nb, db) = pair("4");
    addr(&na, &da, "10.201.1.1/24");
    addr(&nb, &db, "10.201.1.2/24");
    let b_mac = mac_of(&nb, &db);
    flush(&na, &da);
    let (r, took, sent) = resolve_in(&na, &da, "10.201.1.1", "10.201.1.2", Duration::from_secs(3));
    let r = r.unwrap();
    assert_eq!(r.mac, b_mac);
    assert_eq!(r.how, How::Arp);
    // What went out is a well-formed ARP request from A's veth for B.
    let (eth, arp) = uroce::wire::arp::parse_frame(&sent[0]).unwrap();
    assert_eq!(eth.src, mac_of(&na, &da));
    assert_eq!(arp.target_ip.to_string(), "10.201.1.2");
    assert_eq!(arp.sender_ip.to_string(), "10.201.1.1");
    assert_eq!(r.next_hop, "10.201.1.2".parse::<IpAddr>().unwrap());
    assert!(took < Duration::from_secs(1), "took {took:?}");

    kernel_learns(&na, &da, "10.201.1.2");
    let (r, _, _) = resolve_in(&na, &da, "10.201.1.1", "10.201.1.2", Duration::from_secs(3));
    let r = r.unwrap();
    assert_eq!((r.mac, r.how), (b_mac, How::Kernel));
}

#[test]
fn ipv6_on_link_by_ndp_then_from_the_kernel() {
    if !can_run() {
        return;
    }
    let (_lab, na, da, nb, db) = pair("6");
    addr(&na, &da, "fd00:201:1::1/64");
    addr(&nb, &db, "fd00:201:1::2/64");
    let b_mac = mac_of(&nb, &db);
    flush(&na, &da);
    let (r, took, _) = resolve_in(
        &na,
        &da,
        "fd00:201:1::1",
        "fd00:201:1::2",
        Duration::from_secs(3),
    );
    let r = r.unwrap();
    assert_eq!(r.mac, b_mac);
    assert_eq!(r.how, How::Ndp);
    assert_eq!(r.next_hop, "fd00:201:1::2".parse::<IpAddr>().unwrap());
    assert!(took < Duration::from_secs(1), "took {took:?}");

    kernel_learns(&na, &da, "fd00:201:1::2");
    let (r, _, _) = resolve_in(
        &na,
        &da,
        "fd00:201:1::1",
        "fd00:201:1::2",
        Duration::from_secs(3),
    );
    let r = r.unwrap();
    assert_eq!((r.mac, r.how), (b_mac, How::Kernel));
}

/// A — R — B with R forwarding: B's address resolves to R's MAC on A's link, through the
/// default route, for IPv4 and IPv6.
#[test]
fn off_subnet_peer_resolves_to_the_gateway() {
    if !can_run() {
        return;
    }
    let mut lab = Lab::new("r");
    let (na, nr, nb) = (lab.ns("a"), lab.ns("r"), lab.ns("b"));
    let (da, dra, drb, db) = (
        lab.ifname("a"),
        lab.ifname("x"),
        lab.ifname("y"),
        lab.ifname("b"),
    );
    lab.link(&na, &da, &nr, &dra);
    lab.link(&nr, &drb, &nb, &db);
    addr(&na, &da, "10.202.1.1/24");
    addr(&nr, &dra, "10.202.1.254/24");
    addr(&nr, &drb, "10.202.2.254/24");
    addr(&nb, &db, "10.202.2.2/24");
    addr(&na, &da, "fd00:202:1::1/64");
    addr(&nr, &dra, "fd00:202:1::fe/64");
    addr(&nr, &drb, "fd00:202:2::fe/64");
    addr(&nb, &db, "fd00:202:2::2/64");
    ip(&["-n", &na, "route", "add", "default", "via", "10.202.1.254"]);
    ip(&["-n", &nb, "route", "add", "default", "via", "10.202.2.254"]);
    ip(&[
        "-n",
        &na,
        "-6",
        "route",
        "add",
        "default",
        "via",
        "fd00:202:1::fe",
    ]);
    ip(&[
        "-n",
        &nb,
        "-6",
        "route",
        "add",
        "default",
        "via",
        "fd00:202:2::fe",
    ]);
    for knob in ["net.ipv4.ip_forward", "net.ipv6.conf.all.forwarding"] {
        ip(&["netns", "exec", &nr, "sysctl", "-qw", &format!("{knob}=1")]);
    }
    let r_mac = mac_of(&nr, &dra);
    assert_ne!(r_mac, mac_of(&nr, &drb));
    flush(&na, &da);

    let (r, _, _) = resolve_in(&na, &da, "10.202.1.1", "10.202.2.2", Duration::from_secs(3));
    let r = r.unwrap();
    assert_eq!(r.mac, r_mac);
    assert_eq!(r.next_hop, "10.202.1.254".parse::<IpAddr>().unwrap());
    assert_eq!(r.how, How::Arp);

    let (r, _, _) = resolve_in(
        &na,
        &da,
        "fd00:202:1::1",
        "fd00:202:2::2",
        Duration::from_secs(3),
    );
    let r = r.unwrap();
    assert_eq!(r.mac, r_mac);
    assert_eq!(r.next_hop, "fd00:202:1::fe".parse::<IpAddr>().unwrap());
    assert_eq!(r.how, How::Ndp);

    // A route via the router's link-local address, as router advertisements make them:
    // the solicitation for it comes from A's link-local address.
    addr(&na, &da, "fe80::a/64");
    addr(&nr, &dra, "fe80::fe/64");
    ip(&[
        "-n",
        &na,
        "-6",
        "route",
        "add",
        "fd00:202:3::/64",
        "via",
        "fe80::fe",
        "dev",
        &da,
    ]);
    let (r, _, sent) = resolve_in(
        &na,
        &da,
        "fd00:202:1::1",
        "fd00:202:3::5",
        Duration::from_secs(3),
    );
    let r = r.unwrap();
    let ns = uroce::wire::ndp::parse_frame(&sent[0]).unwrap();
    assert_eq!(ns.ip.src.to_string(), "fe80::a");
    assert_eq!(ns.ndp.target().to_string(), "fe80::fe");
    assert_eq!(r.mac, r_mac);
    assert_eq!(r.next_hop, "fe80::fe".parse::<IpAddr>().unwrap());
    assert_eq!(r.how, How::Ndp);
}

#[test]
fn nobody_answers_or_no_route() {
    if !can_run() {
        return;
    }
    let (_lab, na, da, nb, db) = pair("d");
    addr(&na, &da, "10.203.1.1/24");
    addr(&nb, &db, "10.203.1.2/24");
    let (r, took, sent) = resolve_in(
        &na,
        &da,
        "10.203.1.1",
        "10.203.1.77",
        Duration::from_secs(3),
    );
    let e = r.unwrap_err();
    assert!(e.contains("no ARP reply from 10.203.1.77"), "{e}");
    assert!(e.contains("after 3 s"), "{e}");
    assert!(
        took >= Duration::from_millis(2900) && took < Duration::from_millis(3500),
        "gave up after {took:?}"
    );
    // One ARP request every 250 ms for 3 s: 12 (fewer if this busy machine woke us late).
    assert!(
        (10..=12).contains(&sent.len()),
        "{} ARP requests",
        sent.len()
    );
    // A has no default route: an address off its subnet has no next hop.
    let (r, took, _) = resolve_in(&na, &da, "10.203.1.1", "192.0.2.9", Duration::from_secs(3));
    let e = r.unwrap_err();
    assert!(e.contains(&format!("no route to 192.0.2.9 on {da}")), "{e}");
    assert!(took < Duration::from_secs(1));
}

/// The route is the kernel's answer for the peer, so policy rules count: a prefix
/// routed only in table 100, selected by `ip rule`, resolves to that table's gateway. A
/// peer whose route leaves through another interface is an error that says so.
#[test]
fn policy_rules_and_the_output_interface_count() {
    if !can_run() {
        return;
    }
    let mut lab = Lab::new("p");
    let (na, nb, nc) = (lab.ns("a"), lab.ns("b"), lab.ns("c"));
    let (da, db, dc, dd) = (
        lab.ifname("a"),
        lab.ifname("b"),
        lab.ifname("c"),
        lab.ifname("d"),
    );
    lab.link(&na, &da, &nb, &db);
    lab.link(&na, &dc, &nc, &dd);
    addr(&na, &da, "10.204.1.1/24");
    addr(&nb, &db, "10.204.1.254/24");
    addr(&na, &dc, "10.204.2.1/24");
    addr(&nc, &dd, "10.204.2.2/24");
    ip(&[
        "-n",
        &na,
        "route",
        "add",
        "192.0.2.0/24",
        "via",
        "10.204.1.254",
        "table",
        "100",
    ]);
    ip(&[
        "-n",
        &na,
        "rule",
        "add",
        "to",
        "192.0.2.0/24",
        "table",
        "100",
    ]);
    let (r, _, _) = resolve_in(&na, &da, "10.204.1.1", "192.0.2.7", Duration::from_secs(3));
    let r = r.unwrap();
    assert_eq!(r.next_hop, "10.204.1.254".parse::<IpAddr>().unwrap());
    assert_eq!(r.mac, mac_of(&nb, &db));
    // 10.204.2.2 is on A's other veth: not reachable through `da`.
    let (r, _, _) = resolve_in(&na, &da, "10.204.1.1", "10.204.2.2", Duration::from_secs(3));
    let e = r.unwrap_err();
    assert!(e.contains(&format!("goes out of {dc}, not {da}")), "{e}");
}

/// `interface_info` inside a namespace: the veth's MTU, state and addresses as the kernel
/// has them, and errors that name what is missing.
#[test]
fn interface_info_reads_mtu_state_and_addresses() {
    if !can_run() {
        return;
    }
    let (_lab, na, da, nb, db) = pair("i");
    addr(&na, &da, "10.205.1.1/24");
    addr(&na, &da, "fd00:205::1/64");
    ip(&["-n", &na, "link", "set", &da, "mtu", "4200"]);
    ip(&["-n", &nb, "link", "set", &db, "down"]);
    let b_mac = mac_of(&nb, &db);
    let dev = da.clone();
    let (info, lo, missing, no_addr) = in_ns(&na, move || {
        (
            interface_info(&dev).unwrap(),
            interface_info("lo").unwrap(),
            interface_info("uroce-nope0").unwrap_err().to_string(),
            uroce::net::addresses::interface_with_address("10.205.9.9".parse().unwrap())
                .unwrap_err()
                .to_string(),
        )
    });
    assert_eq!(info.name, da);
    assert_eq!(info.mtu, 4200);
    assert!(info.up);
    // Its peer is down, so the veth, administratively up, is operationally down (the
    // kernel's link watch updates the state a moment later).
    let dev = da.clone();
    let state = in_ns(&na, move || {
        let deadline = Instant::now() + Duration::from_secs(3);
        loop {
            let s = interface_info(&dev).unwrap().oper_state;
            if s == uroce::net::addresses::OperState::Down || Instant::now() > deadline {
                return s;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    });
    assert_eq!(state, uroce::net::addresses::OperState::Down);
    assert!(info.mac.is_some_and(|m| m != b_mac));
    assert!(info
        .addrs
        .contains(&("10.205.1.1".parse::<IpAddr>().unwrap(), 24)));
    assert!(info
        .addrs
        .contains(&("fd00:205::1".parse::<IpAddr>().unwrap(), 64)));
    assert_eq!(lo.mac, None, "loopback has no MAC");
    assert_eq!(
        missing,
        "no interface uroce-nope0 in this network namespace"
    );
    assert_eq!(no_addr, "no interface has the address 10.205.9.9");
}
