//! Neighbour resolution for the AF_XDP datapath: which MAC address a frame to a peer goes
//! to. AF_XDP builds whole Ethernet frames itself, so it needs what the kernel's neighbour
//! subsystem knows: the next hop (the peer when it is on-link, else the gateway of the
//! longest matching route) and that hop's MAC, from ARP for IPv4 (RFC 826) or Neighbor
//! Discovery for IPv6 (RFC 4861 §7.2).
//!
//! - [`Neighbours`]: a sans-IO neighbour cache. It is fed received frames and the time,
//!   and gives back request and answer frames to send; it never touches a socket or a clock.
//! - [`Route`] and [`next_hop`]: longest prefix match over routes.
//! - [`kernel_routes`], [`kernel_neighbour`], [`interface_info`]: what the kernel already
//!   knows (its routes, its neighbour table, the interface's addresses), as a first guess.
//! - [`PacketSocket`]: an AF_PACKET socket that sees ARP or ICMPv6 neighbour discovery on
//!   an interface. The XDP program passes ARP and ICMPv6 on to the kernel (which keeps
//!   answering for its own addresses), and packet sockets see frames after `XDP_PASS`, so
//!   replies are read here rather than from the AF_XDP socket.
//! - [`resolve`]: what the datapath calls at connection set-up: route, kernel table, and
//!   if that has nothing, requests sent on the AF_XDP path with the replies read from a
//!   packet socket.

use std::collections::{HashMap, VecDeque};
use std::ffi::CString;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::wire::arp::{self, ArpOp, ArpRepr};
use crate::wire::ethernet::{self, ETHERTYPE_IPV6};
use crate::wire::ipv6;
use crate::wire::ndp::{self, NdpFrame, NdpRepr};

/// Time between two requests for an address still unresolved.
pub const RETRANSMIT: Duration = Duration::from_millis(250);
/// How long a resolution goes on before it fails.
pub const GIVE_UP: Duration = Duration::from_secs(3);
/// How long a learned MAC address is trusted before it is resolved again (a longer,
/// fixed version of RFC 4861 §6.3.2's ReachableTime; ARP has no such number).
pub const REACHABLE_TIME: Duration = Duration::from_secs(300);
/// Answers waiting to be sent beyond this many are dropped (a flood of requests must not
/// grow memory).
const MAX_ANSWERS: usize = 16;

/// One address being resolved.
#[derive(Debug, Clone, Copy)]
struct Probe {
    /// When the resolution started; it fails at `started + give_up`.
    started: Instant,
    /// When the next request goes out.
    next: Instant,
    /// Our address the requests come from.
    src: IpAddr,
}

#[derive(Debug, Clone, Copy, Default)]
struct Entry {
    /// The MAC address in use (kept while a re-resolution runs).
    mac: Option<[u8; 6]>,
    /// When `mac` was last confirmed by a reply.
    confirmed: Option<Instant>,
    /// The resolution under way, if any.
    probe: Option<Probe>,
    /// The last resolution got no reply.
    failed: bool,
    /// Somebody asked for this address ([`Neighbours::request`]), so it is resolved again
    /// when it expires; entries only learned in passing are forgotten instead.
    wanted: bool,
}

#[derive(Debug, Clone, Copy)]
enum Answer {
    /// The ARP reply to send.
    Arp(ArpRepr),
    /// The solicitation to answer with an advertisement.
    Ndp(NdpFrame),
}

/// A sans-IO neighbour cache for one interface: IPv4 addresses resolved with ARP, IPv6
/// addresses with Neighbor Discovery, and requests for our own addresses answered.
///
/// The caller passes received frames to [`handle_frame`](Self::handle_frame), asks for
/// addresses with [`request`](Self::request), sends whatever
/// [`poll_transmit`](Self::poll_transmit) gives, and calls it again by
/// [`poll_timeout`](Self::poll_timeout). Requests go out every [`RETRANSMIT`]; after
/// [`GIVE_UP`] without a reply the address is [`failed`](Self::failed). A learned address
/// that was asked for is resolved again after [`REACHABLE_TIME`], and the old MAC stays in
/// use until a reply replaces it (or the re-resolution fails).
#[derive(Debug)]
pub struct Neighbours {
    my_mac: [u8; 6],
    my_ips: Vec<IpAddr>,
    entries: HashMap<IpAddr, Entry>,
    answers: VecDeque<(Instant, Answer)>,
    answering: bool,
    retransmit: Duration,
    give_up: Duration,
    dropped: u64,
}

/// True for a group (multicast or broadcast) MAC address, which no host owns.
fn is_group_mac(m: &[u8; 6]) -> bool {
    m[0] & 1 != 0
}

/// True when `ip` can be resolved: a unicast address.
fn resolvable(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(a) => !(a.is_unspecified() || a.is_broadcast() || a.is_multicast()),
        IpAddr::V6(a) => !(a.is_unspecified() || a.is_multicast()),
    }
}

/// Our address that requests for `ip` come from: one of the same family, sharing the
/// longest prefix with it (a link-local one for a link-local target).
fn source_for(my_ips: &[IpAddr], ip: IpAddr) -> Option<IpAddr> {
    let mut best: Option<IpAddr> = None;
    for &mine in my_ips {
        if mine.is_ipv4() != ip.is_ipv4() || !resolvable(mine) {
            continue;
        }
        if best.is_none_or(|b| common_prefix(mine, ip) > common_prefix(b, ip)) {
            best = Some(mine);
        }
    }
    best
}

/// Number of leading bits `a` and `b` share (0 across families).
fn common_prefix(a: IpAddr, b: IpAddr) -> u32 {
    match (a, b) {
        (IpAddr::V4(a), IpAddr::V4(b)) => (a.to_bits() ^ b.to_bits()).leading_zeros(),
        (IpAddr::V6(a), IpAddr::V6(b)) => (a.to_bits() ^ b.to_bits()).leading_zeros(),
        _ => 0,
    }
}

impl Neighbours {
    /// A cache for the interface with MAC `my_mac` and addresses `my_ips` (requests for
    /// these are answered, and requests we send come from them).
    pub fn new(my_mac: [u8; 6], my_ips: &[IpAddr]) -> Self {
        Self {
            my_mac,
            my_ips: my_ips.to_vec(),
            entries: HashMap::new(),
            answers: VecDeque::new(),
            answering: true,
            retransmit: RETRANSMIT,
            give_up: GIVE_UP,
            dropped: 0,
        }
    }

    /// Whether ARP requests and Neighbor Solicitations for our addresses are answered
    /// (on by default). Off when the kernel answers for the same addresses anyway.
    pub fn set_answering(&mut self, on: bool) {
        self.answering = on;
        if !on {
            self.answers.clear();
        }
    }

    /// Changes the time between requests and the time after which a resolution fails
    /// (defaults [`RETRANSMIT`] and [`GIVE_UP`]); resolutions under way keep their start.
    pub fn set_timing(&mut self, retransmit: Duration, give_up: Duration) {
        self.retransmit = retransmit.max(Duration::from_millis(1));
        self.give_up = give_up;
    }

    /// The MAC address of `ip`, if known (also while it is being resolved again).
    pub fn lookup(&self, ip: IpAddr) -> Option<[u8; 6]> {
        self.entries.get(&ip).and_then(|e| e.mac)
    }

    /// True when the last resolution of `ip` got no reply (until it is requested again).
    pub fn failed(&self, ip: IpAddr) -> bool {
        self.entries.get(&ip).is_some_and(|e| e.failed)
    }

    /// True while `ip` is being resolved.
    pub fn pending(&self, ip: IpAddr) -> bool {
        self.entries.get(&ip).is_some_and(|e| e.probe.is_some())
    }

    /// Frames that looked like ARP or neighbour discovery but did not parse.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }

    fn is_mine(&self, ip: IpAddr) -> bool {
        self.my_ips.contains(&ip)
    }

    /// Starts resolving `ip` at `now` unless that is already under way. A MAC already known
    /// stays in use until a reply replaces it. An address that cannot be resolved
    /// (multicast, broadcast, unspecified, one of ours, or with no address of ours of its
    /// family to ask from) fails at once.
    pub fn request(&mut self, ip: IpAddr, now: Instant) {
        let src = source_for(&self.my_ips, ip);
        let ok = resolvable(ip) && !self.is_mine(ip);
        let e = self.entries.entry(ip).or_default();
        e.wanted = true;
        if e.probe.is_some() {
            return;
        }
        match src {
            Some(src) if ok => {
                e.failed = false;
                e.probe = Some(Probe {
                    started: now,
                    next: now,
                    src,
                });
            }
            _ => e.failed = true,
        }
    }

    /// Puts a known address in the cache (for example from the kernel's neighbour table),
    /// as if a reply had just confirmed it.
    pub fn insert(&mut self, ip: IpAddr, mac: [u8; 6], now: Instant) {
        self.learn(ip, mac, now);
        if let Some(e) = self.entries.get_mut(&ip) {
            e.wanted = true;
        }
    }

    fn learn(&mut self, ip: IpAddr, mac: [u8; 6], now: Instant) {
        let e = self.entries.entry(ip).or_default();
        e.mac = Some(mac);
        e.confirmed = Some(now);
        e.probe = None;
        e.failed = false;
    }

    fn queue(&mut self, now: Instant, a: Answer) {
        if self.answering && self.answers.len() < MAX_ANSWERS {
            self.answers.push_back((now, a));
        }
    }

    /// Takes in one received Ethernet frame. ARP requests and replies, Neighbor
    /// Solicitations and Advertisements to us are learned from; requests for our own
    /// addresses are answered (see [`poll_transmit`](Self::poll_transmit)). Anything else
    /// is ignored; malformed ARP / neighbour discovery is counted in
    /// [`dropped`](Self::dropped).
    pub fn handle_frame(&mut self, now: Instant, frame: &[u8]) {
        let Ok(f) = ethernet::Frame::new_checked(frame) else {
            return;
        };
        let dst = f.dst();
        // Frames to another host's unicast address (seen in promiscuous mode) are not ours.
        if dst != self.my_mac && !is_group_mac(&dst) {
            return;
        }
        match f.ethertype() {
            arp::ETHERTYPE_ARP => match arp::parse_frame(frame) {
                Ok((_, a)) => self.handle_arp(now, &a),
                Err(_) => self.dropped += 1,
            },
            ETHERTYPE_IPV6 if is_neighbour_frame(frame) => match ndp::parse_frame(frame) {
                Ok(n) => self.handle_ndp(now, &n),
                Err(_) => self.dropped += 1,
            },
            _ => {}
        }
    }

    /// RFC 826 "Packet Reception": update the sender's entry if we have one; if the target
    /// is us, add the sender too, and answer a request.
    fn handle_arp(&mut self, now: Instant, a: &ArpRepr) {
        if a.sender_mac == self.my_mac || is_group_mac(&a.sender_mac) {
            return;
        }
        let sender = IpAddr::V4(a.sender_ip);
        let for_us = self.is_mine(IpAddr::V4(a.target_ip));
        // An RFC 5227 probe comes from 0.0.0.0: nothing to learn, but still answered.
        if !a.sender_ip.is_unspecified()
            && !self.is_mine(sender)
            && (for_us || self.entries.contains_key(&sender))
        {
            self.learn(sender, a.sender_mac, now);
        }
        if for_us && a.op == ArpOp::Request {
            self.queue(now, Answer::Arp(ArpRepr::reply_to(a, self.my_mac)));
        }
    }

    /// RFC 4861 §7.2.3 (solicitation for one of our addresses: learn the solicitor, answer)
    /// and §7.2.5 (advertisement: update an entry we have, never create one).
    fn handle_ndp(&mut self, now: Instant, n: &NdpFrame) {
        if n.eth.src == self.my_mac {
            return;
        }
        match n.ndp {
            NdpRepr::Solicit { target, source_mac } => {
                if !self.is_mine(IpAddr::V6(target)) {
                    return;
                }
                let from = IpAddr::V6(n.ip.src);
                if let Some(mac) = source_mac {
                    if !n.ip.src.is_unspecified() && !is_group_mac(&mac) && !self.is_mine(from) {
                        self.learn(from, mac, now);
                    }
                }
                self.queue(now, Answer::Ndp(*n));
            }
            NdpRepr::Advert {
                target,
                target_mac,
                override_flag,
                ..
            } => {
                let ip = IpAddr::V6(target);
                let Some(e) = self.entries.get(&ip) else {
                    return;
                };
                let Some(mac) = target_mac else {
                    // No address option: nothing to learn (an entry being resolved stays so).
                    return;
                };
                if is_group_mac(&mac) {
                    return;
                }
                // Without the override flag, an advertisement does not replace a MAC we
                // have with a different one (§7.2.5).
                if e.mac.is_some_and(|old| old != mac) && !override_flag {
                    return;
                }
                self.learn(ip, mac, now);
            }
        }
    }

    /// Writes the next frame to send into `buf` and returns its length: answers first,
    /// then requests that are due. Also runs the timers: resolutions that reached their
    /// end fail, expired entries are resolved again (or forgotten when nobody asked for
    /// them). Call it until it returns `None`, and again at [`poll_timeout`](Self::poll_timeout).
    /// A frame that does not fit in `buf` is dropped (86 bytes are always enough).
    pub fn poll_transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<usize> {
        while let Some((_, a)) = self.answers.pop_front() {
            let r = match a {
                Answer::Arp(reply) => reply.emit_frame(buf),
                Answer::Ndp(ns) => ndp::emit_advert_frame(self.my_mac, &ns, buf),
            };
            if let Ok(n) = r {
                return Some(n);
            }
        }
        let reachable = REACHABLE_TIME;
        // Expired entries nobody asked for are forgotten.
        self.entries.retain(|_, e| {
            e.wanted || e.probe.is_some() || e.confirmed.is_none_or(|c| now < c + reachable)
        });
        let (my_mac, retransmit, give_up) = (self.my_mac, self.retransmit, self.give_up);
        let mut out = None;
        for (&ip, e) in self.entries.iter_mut() {
            if e.probe.is_none() && e.confirmed.is_some_and(|c| now >= c + reachable) {
                // Expired and wanted: resolve again, keeping the MAC meanwhile.
                e.confirmed = None;
                e.probe = source_for(&self.my_ips, ip).map(|src| Probe {
                    started: now,
                    next: now,
                    src,
                });
                if e.probe.is_none() {
                    e.mac = None;
                    e.failed = true;
                }
            }
            let Some(p) = e.probe.as_mut() else {
                continue;
            };
            if now >= p.started + give_up {
                e.probe = None;
                e.mac = None;
                e.confirmed = None;
                e.failed = true;
                continue;
            }
            if out.is_some() || now < p.next {
                continue;
            }
            p.next = now + retransmit;
            out = emit_request(my_mac, p.src, ip, buf).ok();
        }
        out
    }

    /// When [`poll_transmit`](Self::poll_transmit) next has something to do (a time in
    /// the past when answers are waiting); `None` when nothing is pending.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let mut t = self.answers.front().map(|&(at, _)| at);
        let mut take = |x: Instant| t = Some(t.map_or(x, |t| t.min(x)));
        for e in self.entries.values() {
            match (e.probe, e.confirmed) {
                (Some(p), _) => take(p.next.min(p.started + self.give_up)),
                (None, Some(c)) => take(c + REACHABLE_TIME),
                (None, None) => {}
            }
        }
        t
    }
}

/// Writes a request for `target` from `my_mac`/`src`: an ARP request, or a Neighbor
/// Solicitation to the target's solicited-node group.
fn emit_request(
    my_mac: [u8; 6],
    src: IpAddr,
    target: IpAddr,
    buf: &mut [u8],
) -> Result<usize, crate::wire::WireError> {
    match (src, target) {
        (IpAddr::V4(s), IpAddr::V4(t)) => ArpRepr::request(my_mac, s, t).emit_frame(buf),
        (IpAddr::V6(s), IpAddr::V6(t)) => ndp::emit_solicit_frame(my_mac, s, t, buf),
        _ => Err(crate::wire::WireError::InvalidRepr(
            "request source and target of different IP versions",
        )),
    }
}

/// True for an ARP frame or an ICMPv6 Neighbor Solicitation / Advertisement right after
/// the IPv6 header: the frames neighbour resolution reads (checked cheaply, not validated).
pub fn is_neighbour_frame(frame: &[u8]) -> bool {
    let Ok(f) = ethernet::Frame::new_checked(frame) else {
        return false;
    };
    match f.ethertype() {
        arp::ETHERTYPE_ARP => true,
        ETHERTYPE_IPV6 => {
            let p = f.payload();
            ipv6::Header::new_checked(p).is_ok_and(|h| {
                h.next_header() == ndp::NEXT_HEADER_ICMPV6
                    && matches!(
                        p.get(ipv6::HEADER_LEN),
                        Some(&(ndp::TYPE_NEIGHBOR_SOLICIT | ndp::TYPE_NEIGHBOR_ADVERT))
                    )
            })
        }
        _ => false,
    }
}

// ---------------------------------------------------------------------------------------
// Routes

/// A route: destinations within `prefix/len` go to `gateway`, or are on-link when there
/// is none.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Route {
    /// The network (host bits may be set; they are ignored).
    pub prefix: IpAddr,
    /// Prefix length in bits (0 for a default route).
    pub len: u8,
    /// The next hop for destinations in the prefix; `None`: on-link.
    pub gateway: Option<IpAddr>,
}

impl Route {
    /// True when `ip` is within the prefix (of the same IP version).
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.prefix, ip) {
            (IpAddr::V4(p), IpAddr::V4(a)) if self.len <= 32 => {
                let mask = u32::MAX.checked_shl(32 - u32::from(self.len)).unwrap_or(0);
                (p.to_bits() ^ a.to_bits()) & mask == 0
            }
            (IpAddr::V6(p), IpAddr::V6(a)) if self.len <= 128 => {
                let mask = u128::MAX
                    .checked_shl(128 - u32::from(self.len))
                    .unwrap_or(0);
                (p.to_bits() ^ a.to_bits()) & mask == 0
            }
            _ => false,
        }
    }
}

/// The next hop towards `dst` by longest prefix match (the first of equally long ones):
/// `dst` itself when the route is on-link, its gateway otherwise; `None` without a route.
pub fn next_hop(routes: &[Route], dst: IpAddr) -> Option<IpAddr> {
    let mut best: Option<&Route> = None;
    for r in routes.iter().filter(|r| r.contains(dst)) {
        if best.is_none_or(|b| r.len > b.len) {
            best = Some(r);
        }
    }
    best.map(|r| r.gateway.unwrap_or(dst))
}

/// Reads `/proc/thread-self/net/NAME`: `/proc/net` is `/proc/self/net`, the namespace of
/// the process's main thread, while a thread that joined another namespace with `setns`
/// wants its own. Falls back to `/proc/net` on kernels older than 3.17.
fn read_proc_net(name: &str) -> io::Result<String> {
    std::fs::read_to_string(format!("/proc/thread-self/net/{name}"))
        .or_else(|_| std::fs::read_to_string(format!("/proc/net/{name}")))
}

const RTF_UP: u32 = 0x0001;
const RTF_GATEWAY: u32 = 0x0002;
const RTF_REJECT: u32 = 0x0200;
const RTF_ANYCAST: u32 = 0x0010_0000;
const RTF_CACHE: u32 = 0x0100_0000;
const RTF_LOCAL: u32 = 0x8000_0000;

/// Parses `/proc/net/route` (IPv4): lines of interface, destination, gateway, flags,
/// refcnt, use, metric, mask... with addresses as the hex of the in-memory (network order)
/// `u32`, which reads little-endian on x86. Returns `(metric, route)` for `iface`.
fn parse_proc_route(text: &str, iface: &str) -> Vec<(u32, Route)> {
    let mut out = Vec::new();
    for line in text.lines().skip(1) {
        let c: Vec<&str> = line.split_whitespace().collect();
        if c.len() < 8 || c[0] != iface {
            continue;
        }
        let hex = |s: &str| u32::from_str_radix(s, 16).ok();
        let (Some(dst), Some(gw), Some(flags), Some(metric), Some(mask)) = (
            hex(c[1]),
            hex(c[2]),
            hex(c[3]),
            c[6].parse().ok(),
            hex(c[7]),
        ) else {
            continue;
        };
        if flags & RTF_UP == 0 || flags & RTF_REJECT != 0 {
            continue;
        }
        // The value printed is the address's bytes read as a host-order integer.
        let addr = |v: u32| Ipv4Addr::from(v.to_ne_bytes());
        let len = addr(mask).to_bits().leading_ones() as u8;
        let gateway = (flags & RTF_GATEWAY != 0 && gw != 0).then(|| IpAddr::V4(addr(gw)));
        out.push((
            metric,
            Route {
                prefix: IpAddr::V4(addr(dst)),
                len,
                gateway,
            },
        ));
    }
    out
}

/// Parses `/proc/net/ipv6_route`: lines of destination (32 hex digits, network order),
/// prefix length, source, source length, next hop, metric, refcnt, use, flags, interface.
/// Returns `(metric, route)` for `iface`, skipping local, anycast, cached and reject ones.
fn parse_proc_ipv6_route(text: &str, iface: &str) -> Vec<(u32, Route)> {
    let mut out = Vec::new();
    for line in text.lines() {
        let c: Vec<&str> = line.split_whitespace().collect();
        if c.len() < 10 || c[9] != iface {
            continue;
        }
        let addr = |s: &str| u128::from_str_radix(s, 16).ok().map(Ipv6Addr::from_bits);
        let hex = |s: &str| u32::from_str_radix(s, 16).ok();
        let (Some(dst), Some(len), Some(gw), Some(metric), Some(flags)) =
            (addr(c[0]), hex(c[1]), addr(c[4]), hex(c[5]), hex(c[8]))
        else {
            continue;
        };
        if flags & RTF_UP == 0
            || flags & (RTF_REJECT | RTF_ANYCAST | RTF_CACHE | RTF_LOCAL) != 0
            || len > 128
        {
            continue;
        }
        let gateway = (flags & RTF_GATEWAY != 0 || !gw.is_unspecified())
            .then_some(IpAddr::V6(gw))
            .filter(|g| !g.is_unspecified());
        out.push((
            metric,
            Route {
                prefix: IpAddr::V6(dst),
                len: len as u8,
                gateway,
            },
        ));
    }
    out
}

/// What `ip -j addr show dev IFACE` says about an interface.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InterfaceInfo {
    /// Its MAC address (none for interfaces without one).
    pub mac: Option<[u8; 6]>,
    /// Its addresses with their prefix lengths (not tentative or duplicate ones).
    pub addrs: Vec<(IpAddr, u8)>,
    /// Connected prefixes: one on-link route per address (to the peer's prefix for a
    /// point-to-point address).
    pub connected: Vec<Route>,
}

/// Parses `aa:bb:cc:dd:ee:ff`.
pub fn parse_mac(s: &str) -> Option<[u8; 6]> {
    let mut m = [0u8; 6];
    let mut parts = s.split(':');
    for b in &mut m {
        let p = parts.next()?;
        if p.is_empty() || p.len() > 2 {
            return None;
        }
        *b = u8::from_str_radix(p, 16).ok()?;
    }
    parts.next().is_none().then_some(m)
}

fn parse_ip_addr_json(json: &[u8]) -> Result<InterfaceInfo, String> {
    let v: serde_json::Value =
        serde_json::from_slice(json).map_err(|e| format!("`ip -j addr` output: {e}"))?;
    let link = v.get(0).ok_or("`ip -j addr` listed no interface")?;
    Ok(parse_link(link))
}

/// One interface object of `ip -j addr` output.
fn parse_link(link: &serde_json::Value) -> InterfaceInfo {
    let mac = link["address"]
        .as_str()
        .and_then(parse_mac)
        .filter(|m| *m != [0; 6]);
    let mut addrs = Vec::new();
    let mut connected = Vec::new();
    for a in link["addr_info"].as_array().into_iter().flatten() {
        let (Some(local), Some(len)) = (
            a["local"].as_str().and_then(|s| s.parse::<IpAddr>().ok()),
            a["prefixlen"].as_u64().and_then(|l| u8::try_from(l).ok()),
        ) else {
            continue;
        };
        // A tentative (or duplicate) IPv6 address must not be used as a source yet
        // (RFC 4862 §5.4); its prefix is on-link all the same.
        let unusable =
            a["tentative"].as_bool() == Some(true) || a["dadfailed"].as_bool() == Some(true);
        if !unusable {
            addrs.push((local, len));
        }
        let peer = a["address"].as_str().and_then(|s| s.parse::<IpAddr>().ok());
        connected.push(Route {
            prefix: peer.unwrap_or(local),
            len,
            gateway: None,
        });
    }
    InterfaceInfo {
        mac,
        addrs,
        connected,
    }
}

/// Every interface by name with what [`interface_info`] says of it, from `ip -j addr
/// show`, in the calling thread's namespace.
pub fn interfaces() -> Result<Vec<(String, InterfaceInfo)>, String> {
    let out = Command::new("ip")
        .args(["-j", "addr", "show"])
        .output()
        .map_err(|e| format!("running `ip -j addr show`: {e}"))?;
    let v: serde_json::Value =
        serde_json::from_slice(&out.stdout).map_err(|e| format!("`ip -j addr` output: {e}"))?;
    Ok(v.as_array()
        .into_iter()
        .flatten()
        .map(|l| {
            (
                l["ifname"].as_str().unwrap_or("").to_string(),
                parse_link(l),
            )
        })
        .collect())
}

/// The interface's MAC and addresses, from `ip -j addr show dev IFACE` (plain `ip -j
/// addr`: with `-4` or `-6` the MAC is left out), in the calling thread's namespace.
pub fn interface_info(iface: &str) -> Result<InterfaceInfo, String> {
    let out = Command::new("ip")
        .args(["-j", "addr", "show", "dev", iface])
        .output()
        .map_err(|e| format!("running `ip -j addr show dev {iface}`: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "ip -j addr show dev {iface}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    parse_ip_addr_json(&out.stdout)
}

/// The kernel's routes through `iface`, IPv4 (`/proc/net/route`) and IPv6
/// (`/proc/net/ipv6_route`), plus the connected prefixes of its addresses, in the calling
/// thread's network namespace; ordered by metric (connected prefixes first). Only the
/// main table's view the proc files give: policy routing rules are not consulted.
/// Unreadable sources are skipped.
pub fn kernel_routes(iface: &str) -> Vec<Route> {
    let mut all: Vec<(u32, Route)> = Vec::new();
    if let Ok(info) = interface_info(iface) {
        all.extend(info.connected.into_iter().map(|r| (0, r)));
    }
    if let Ok(t) = read_proc_net("route") {
        all.extend(parse_proc_route(&t, iface));
    }
    if let Ok(t) = read_proc_net("ipv6_route") {
        all.extend(parse_proc_ipv6_route(&t, iface));
    }
    all.sort_by_key(|&(metric, _)| metric);
    let mut routes: Vec<Route> = Vec::with_capacity(all.len());
    for (_, r) in all {
        if !routes.contains(&r) {
            routes.push(r);
        }
    }
    routes
}

/// Parses `/proc/net/arp`: IP address, HW type, flags, HW address, mask, device. Usable
/// entries have ATF_COM (0x2), which the kernel sets for every valid state (reachable,
/// stale, delay, probe, permanent) and clears for incomplete and failed ones.
fn parse_proc_arp(text: &str, iface: &str, ip: Ipv4Addr) -> Option<[u8; 6]> {
    const ATF_COM: u32 = 0x02;
    text.lines().skip(1).find_map(|line| {
        let c: Vec<&str> = line.split_whitespace().collect();
        if c.len() < 6 || c[5] != iface || c[0].parse::<Ipv4Addr>().ok()? != ip {
            return None;
        }
        let flags = u32::from_str_radix(c[2].trim_start_matches("0x"), 16).ok()?;
        let mac = parse_mac(c[3])?;
        (flags & ATF_COM != 0 && mac != [0; 6]).then_some(mac)
    })
}

/// Parses `ip -j -6 neigh show dev IFACE`: the entry for `ip` with a link-layer address
/// and a usable state (not FAILED or INCOMPLETE).
fn parse_neigh_json(json: &[u8], ip: Ipv6Addr) -> Option<[u8; 6]> {
    let v: serde_json::Value = serde_json::from_slice(json).ok()?;
    v.as_array()?.iter().find_map(|n| {
        if n["dst"].as_str()?.parse::<Ipv6Addr>().ok()? != ip {
            return None;
        }
        let bad = n["state"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|s| matches!(s.as_str(), Some("FAILED" | "INCOMPLETE")));
        let mac = parse_mac(n["lladdr"].as_str()?)?;
        (!bad && mac != [0; 6]).then_some(mac)
    })
}

/// The MAC the kernel's neighbour table has for `ip` on `iface` in a usable state, from
/// `/proc/net/arp` (IPv4) or `ip -j -6 neigh show dev IFACE` (IPv6), in the calling
/// thread's network namespace.
pub fn kernel_neighbour(iface: &str, ip: IpAddr) -> Option<[u8; 6]> {
    match ip {
        IpAddr::V4(a) => parse_proc_arp(&read_proc_net("arp").ok()?, iface, a),
        IpAddr::V6(a) => {
            let out = Command::new("ip")
                .args(["-j", "-6", "neigh", "show", "dev", iface])
                .output()
                .ok()?;
            if !out.status.success() {
                return None;
            }
            parse_neigh_json(&out.stdout, a)
        }
    }
}

// ---------------------------------------------------------------------------------------
// Packet socket

/// A non-blocking AF_PACKET socket bound to one interface and one ethertype
/// ([`libc::ETH_P_ARP`] or [`libc::ETH_P_IPV6`]), for the ARP and neighbour discovery
/// frames the XDP program passes on to the kernel. Needs CAP_NET_RAW.
#[derive(Debug)]
pub struct PacketSocket {
    fd: OwnedFd,
    protocol: u16,
}

impl PacketSocket {
    /// Opens the socket on `iface` for frames of `ethertype`.
    pub fn open(iface: &str, ethertype: u16) -> io::Result<Self> {
        let fd = crate::net::packet_socket::packet_socket(iface, ethertype, true)?;
        Ok(Self {
            fd,
            protocol: ethertype,
        })
    }

    /// Reads the next received frame into `buf` without blocking; `None` when there is
    /// none. Frames this host sent are skipped, and on an IPv6 socket everything but
    /// Neighbor Solicitations and Advertisements (filtered here, in user space).
    pub fn recv(&self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        loop {
            // SAFETY: sockaddr_ll is plain data; all-zero is valid.
            let mut from: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
            let mut flen = std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t;
            // SAFETY: `buf` and `from` are writable for the lengths passed.
            let n = unsafe {
                libc::recvfrom(
                    self.fd.as_raw_fd(),
                    buf.as_mut_ptr().cast(),
                    buf.len(),
                    libc::MSG_DONTWAIT,
                    (&mut from as *mut libc::sockaddr_ll).cast(),
                    &mut flen,
                )
            };
            if n < 0 {
                let e = io::Error::last_os_error();
                return match e.kind() {
                    io::ErrorKind::WouldBlock => Ok(None),
                    io::ErrorKind::Interrupted => continue,
                    _ => Err(e),
                };
            }
            let n = (n as usize).min(buf.len());
            if from.sll_pkttype == libc::PACKET_OUTGOING {
                continue;
            }
            if self.protocol == ETHERTYPE_IPV6 && !is_neighbour_frame(&buf[..n]) {
                continue;
            }
            return Ok(Some(n));
        }
    }

    /// Sends one whole Ethernet frame out of the interface.
    pub fn send(&self, frame: &[u8]) -> io::Result<()> {
        loop {
            // SAFETY: `frame` is readable for its length; the socket is bound, so the
            // kernel knows the interface.
            let n =
                unsafe { libc::send(self.fd.as_raw_fd(), frame.as_ptr().cast(), frame.len(), 0) };
            if n >= 0 {
                return Ok(());
            }
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
    }

    /// Waits up to `timeout` for a frame to read; true when one is there.
    pub fn wait(&self, timeout: Duration) -> io::Result<bool> {
        let mut pfd = libc::pollfd {
            fd: self.fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // Round up so a wait for 0.3 ms does not spin.
        let ms = timeout.as_micros().div_ceil(1000).min(i32::MAX as u128) as i32;
        // SAFETY: one valid pollfd.
        let r = unsafe { libc::poll(&mut pfd, 1, ms) };
        if r < 0 {
            let e = io::Error::last_os_error();
            return if e.kind() == io::ErrorKind::Interrupted {
                Ok(false)
            } else {
                Err(e)
            };
        }
        Ok(r > 0)
    }
}

impl AsRawFd for PacketSocket {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

// ---------------------------------------------------------------------------------------
// The datapath's entry point

/// Where a peer's MAC came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum How {
    /// The kernel's neighbour table had it.
    Kernel,
    /// An ARP reply.
    Arp,
    /// A Neighbor Advertisement.
    Ndp,
}

/// The outcome of [`resolve`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Resolved {
    /// The MAC address frames to the peer go to.
    pub mac: [u8; 6],
    /// The peer itself when on-link, else the gateway.
    pub next_hop: IpAddr,
    /// Where `mac` came from.
    pub how: How,
}

fn secs(d: Duration) -> String {
    if d.subsec_millis() == 0 {
        format!("{} s", d.as_secs())
    } else {
        format!("{:.1} s", d.as_secs_f64())
    }
}

/// Finds the MAC address frames from `local` on `iface` to `peer` go to: the next hop from
/// the kernel's routes (the gateway when `peer` is off-link), its MAC from the kernel's
/// neighbour table if there, else from ARP requests (IPv4) or Neighbor Solicitations (IPv6)
/// from `my_mac`/`local`, sent with `send` (the AF_XDP backend's send, so they leave on the
/// AF_XDP path) every [`RETRANSMIT`], with the reply read from a [`PacketSocket`]. Gives up
/// after `timeout` (the datapath passes [`GIVE_UP`]). Runs in the calling thread's network
/// namespace.
pub fn resolve(
    iface: &str,
    my_mac: [u8; 6],
    local: IpAddr,
    peer: IpAddr,
    send: &mut dyn FnMut(&[u8]) -> io::Result<()>,
    timeout: Duration,
) -> Result<Resolved, String> {
    if local.is_ipv4() != peer.is_ipv4() {
        return Err(format!(
            "local address {local} and peer {peer} are not of the same IP version"
        ));
    }
    let name = CString::new(iface).map_err(|_| format!("bad interface name {iface:?}"))?;
    // SAFETY: `name` is a valid NUL-terminated string.
    if unsafe { libc::if_nametoindex(name.as_ptr()) } == 0 {
        return Err(format!("no interface {iface} in this network namespace"));
    }
    let routes = kernel_routes(iface);
    let hop = next_hop(&routes, peer).ok_or_else(|| format!("no route to {peer} on {iface}"))?;
    if let Some(mac) = kernel_neighbour(iface, hop) {
        return Ok(Resolved {
            mac,
            next_hop: hop,
            how: How::Kernel,
        });
    }
    let (ethertype, how, request, reply) = if peer.is_ipv4() {
        (arp::ETHERTYPE_ARP, How::Arp, "ARP request", "ARP reply")
    } else {
        (
            ETHERTYPE_IPV6,
            How::Ndp,
            "neighbor solicitation",
            "neighbor advertisement",
        )
    };
    // Open before the first request goes out, so the reply cannot slip past.
    let sock = PacketSocket::open(iface, ethertype).map_err(|e| {
        if e.kind() == io::ErrorKind::PermissionDenied {
            format!(
                "opening an AF_PACKET socket on {iface} to read the {reply} needs CAP_NET_RAW \
                 (run as root, or setcap cap_net_raw+ep on the binary): {e}"
            )
        } else {
            format!("opening an AF_PACKET socket on {iface} to read the {reply}: {e}")
        }
    })?;
    // Requests come from `local`, except that a link-local next hop (an IPv6 router) is
    // asked from a link-local address of the interface, as the kernel would.
    let mut mine = vec![local];
    if let IpAddr::V6(h) = hop {
        if h.is_unicast_link_local() && !matches!(local, IpAddr::V6(l) if l.is_unicast_link_local())
        {
            let addrs = interface_info(iface).map(|i| i.addrs).unwrap_or_default();
            mine.extend(addrs.into_iter().map(|(a, _)| a).filter(|a| match a {
                IpAddr::V6(a) => a.is_unicast_link_local(),
                IpAddr::V4(_) => false,
            }));
        }
    }
    let mut n = Neighbours::new(my_mac, &mine);
    // The kernel answers for its own addresses; answering too would only double it.
    n.set_answering(false);
    n.set_timing(RETRANSMIT, timeout);
    let start = Instant::now();
    n.request(hop, start);
    let mut tx = [0u8; 128];
    let mut rx = vec![0u8; 65536];
    loop {
        let now = Instant::now();
        while let Some(len) = n.poll_transmit(now, &mut tx) {
            send(&tx[..len])
                .map_err(|e| format!("sending a {request} for {hop} on {iface}: {e}"))?;
        }
        if let Some(mac) = n.lookup(hop) {
            return Ok(Resolved {
                mac,
                next_hop: hop,
                how,
            });
        }
        if n.failed(hop) || now >= start + timeout {
            let via = if hop == peer {
                String::new()
            } else {
                format!(" (next hop for {peer})")
            };
            return Err(format!(
                "no {reply} from {hop}{via} on {iface} after {}",
                secs(timeout)
            ));
        }
        let wake = n
            .poll_timeout()
            .unwrap_or(now + RETRANSMIT)
            .min(start + timeout);
        let ready = sock
            .wait(wake.saturating_duration_since(now))
            .map_err(|e| format!("waiting for the {reply} on {iface}: {e}"))?;
        if ready {
            while let Some(len) = sock
                .recv(&mut rx)
                .map_err(|e| format!("reading the {reply} on {iface}: {e}"))?
            {
                n.handle_frame(Instant::now(), &rx[..len]);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ME: [u8; 6] = [0x02, 0, 0, 0, 0, 0x01];
    const PEER: [u8; 6] = [0x02, 0, 0, 0, 0, 0x02];
    const OTHER: [u8; 6] = [0x02, 0, 0, 0, 0, 0x03];

    fn v4(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn cache() -> Neighbours {
        Neighbours::new(ME, &[v4("10.0.0.1"), v4("fd00::1"), v4("fe80::1")])
    }

    fn drain(n: &mut Neighbours, now: Instant) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        let mut buf = [0u8; 256];
        while let Some(len) = n.poll_transmit(now, &mut buf) {
            out.push(buf[..len].to_vec());
            assert!(out.len() < 100, "poll_transmit never stops");
        }
        out
    }

    /// The whole Ethernet frame of `r`.
    fn arp_frame(r: ArpRepr) -> Vec<u8> {
        let mut b = [0u8; 60];
        let n = r.emit_frame(&mut b).unwrap();
        b[..n].to_vec()
    }

    fn arp_reply(from_mac: [u8; 6], from_ip: &str, to_mac: [u8; 6], to_ip: &str) -> Vec<u8> {
        arp_frame(ArpRepr {
            op: ArpOp::Reply,
            sender_mac: from_mac,
            sender_ip: from_ip.parse().unwrap(),
            target_mac: to_mac,
            target_ip: to_ip.parse().unwrap(),
        })
    }

    /// The peer's answer to a solicitation frame, as the peer (with `mac`) would build it.
    fn na_for(ns: &[u8], mac: [u8; 6]) -> Vec<u8> {
        let ns = ndp::parse_frame(ns).unwrap();
        let mut b = [0u8; 128];
        let n = ndp::emit_advert_frame(mac, &ns, &mut b).unwrap();
        b[..n].to_vec()
    }

    #[test]
    fn arp_request_retransmit_and_reply() {
        let t0 = Instant::now();
        let mut n = cache();
        let peer = v4("10.0.0.2");
        assert_eq!(n.poll_timeout(), None);
        n.request(peer, t0);
        assert!(n.pending(peer));
        let f = drain(&mut n, t0);
        assert_eq!(f.len(), 1);
        let (eth, a) = arp::parse_frame(&f[0]).unwrap();
        assert_eq!(eth.dst, arp::BROADCAST);
        assert_eq!(
            a,
            ArpRepr::request(ME, "10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap())
        );
        assert_eq!(n.poll_timeout(), Some(t0 + RETRANSMIT));
        // Asking again while it runs changes nothing.
        n.request(peer, t0 + Duration::from_millis(10));
        assert!(drain(&mut n, t0 + Duration::from_millis(249)).is_empty());
        assert_eq!(drain(&mut n, t0 + RETRANSMIT).len(), 1);
        assert_eq!(n.lookup(peer), None);
        n.handle_frame(
            t0 + Duration::from_millis(300),
            &arp_reply(PEER, "10.0.0.2", ME, "10.0.0.1"),
        );
        assert_eq!(n.lookup(peer), Some(PEER));
        assert!(!n.pending(peer) && !n.failed(peer));
        assert!(drain(&mut n, t0 + Duration::from_secs(2)).is_empty());
        assert_eq!(
            n.poll_timeout(),
            Some(t0 + Duration::from_millis(300) + REACHABLE_TIME)
        );
    }

    #[test]
    fn no_reply_fails_after_three_seconds() {
        let t0 = Instant::now();
        let mut n = cache();
        let peer = v4("10.0.0.9");
        n.request(peer, t0);
        let mut sent = 0;
        let mut t = t0;
        while t < t0 + Duration::from_secs(4) {
            sent += drain(&mut n, t).len();
            if n.failed(peer) {
                break;
            }
            t = n.poll_timeout().unwrap();
        }
        assert!(n.failed(peer));
        assert_eq!(t, t0 + GIVE_UP);
        assert_eq!(sent, 12, "one request every 250 ms for 3 s");
        assert_eq!(n.lookup(peer), None);
        assert_eq!(n.poll_timeout(), None);
        // A new request starts over.
        n.request(peer, t);
        assert!(!n.failed(peer) && n.pending(peer));
    }

    #[test]
    fn answers_requests_for_our_address_only() {
        let t0 = Instant::now();
        let mut n = cache();
        let req = ArpRepr::request(
            PEER,
            "10.0.0.2".parse().unwrap(),
            "10.0.0.1".parse().unwrap(),
        );
        n.handle_frame(t0, &arp_frame(req));
        // The requester was learned from its request (RFC 826), passively.
        assert_eq!(n.lookup(v4("10.0.0.2")), Some(PEER));
        assert_eq!(n.poll_timeout(), Some(t0));
        let f = drain(&mut n, t0);
        assert_eq!(f.len(), 1);
        let (eth, a) = arp::parse_frame(&f[0]).unwrap();
        assert_eq!(eth.dst, PEER);
        assert_eq!(a, ArpRepr::reply_to(&req, ME));
        // A request for someone else: not answered, not learned from.
        let req = ArpRepr::request(
            OTHER,
            "10.0.0.3".parse().unwrap(),
            "10.0.0.2".parse().unwrap(),
        );
        n.handle_frame(t0, &arp_frame(req));
        assert!(drain(&mut n, t0).is_empty());
        assert_eq!(n.lookup(v4("10.0.0.3")), None);
        // With answering off, nothing goes out.
        n.set_answering(false);
        let req = ArpRepr::request(
            PEER,
            "10.0.0.2".parse().unwrap(),
            "10.0.0.1".parse().unwrap(),
        );
        n.handle_frame(t0, &arp_frame(req));
        assert!(drain(&mut n, t0).is_empty());
    }

    #[test]
    fn replies_to_someone_else_are_ignored() {
        let t0 = Instant::now();
        let mut n = cache();
        n.request(v4("10.0.0.2"), t0);
        drain(&mut n, t0);
        // Unicast to another host's MAC (promiscuous capture): not ours.
        n.handle_frame(t0, &arp_reply(PEER, "10.0.0.2", OTHER, "10.0.0.3"));
        assert_eq!(n.lookup(v4("10.0.0.2")), None);
        // Our own frames echoed back are not learned from either.
        n.handle_frame(t0, &arp_reply(ME, "10.0.0.2", ME, "10.0.0.1"));
        assert_eq!(n.lookup(v4("10.0.0.2")), None);
        // Malformed ARP is counted.
        let mut f = arp_reply(PEER, "10.0.0.2", ME, "10.0.0.1");
        f[15] = 6;
        n.handle_frame(t0, &f);
        assert_eq!(n.dropped(), 1);
        // Truncated and foreign frames never panic.
        for len in 0..f.len() {
            n.handle_frame(t0, &f[..len]);
        }
        n.handle_frame(t0, &[0xff; 100]);
        assert_eq!(n.lookup(v4("10.0.0.2")), None);
    }

    #[test]
    fn gratuitous_arp_updates_an_entry_we_have() {
        let t0 = Instant::now();
        let mut n = cache();
        n.insert(v4("10.0.0.2"), PEER, t0);
        let g = ArpRepr::request(
            OTHER,
            "10.0.0.2".parse().unwrap(),
            "10.0.0.2".parse().unwrap(),
        );
        n.handle_frame(t0, &arp_frame(g));
        assert_eq!(n.lookup(v4("10.0.0.2")), Some(OTHER));
        // ...but does not create entries for strangers.
        let g = ArpRepr::request(
            OTHER,
            "10.0.0.7".parse().unwrap(),
            "10.0.0.7".parse().unwrap(),
        );
        n.handle_frame(t0, &arp_frame(g));
        assert_eq!(n.lookup(v4("10.0.0.7")), None);
        assert!(drain(&mut n, t0).is_empty());
    }

    #[test]
    fn ndp_solicit_and_advert() {
        let t0 = Instant::now();
        let mut n = cache();
        let peer = v4("fd00::2");
        n.request(peer, t0);
        let f = drain(&mut n, t0);
        assert_eq!(f.len(), 1);
        let ns = ndp::parse_frame(&f[0]).unwrap();
        assert_eq!(ns.eth.dst, [0x33, 0x33, 0xff, 0, 0, 2]);
        assert_eq!(ns.ip.src, "fd00::1".parse::<Ipv6Addr>().unwrap());
        assert_eq!(ns.ndp.target(), "fd00::2".parse::<Ipv6Addr>().unwrap());
        assert_eq!(ns.ndp.lladdr(), Some(ME));
        n.handle_frame(t0, &na_for(&f[0], PEER));
        assert_eq!(n.lookup(peer), Some(PEER));
        assert!(!n.pending(peer));
    }

    #[test]
    fn link_local_targets_are_asked_from_the_link_local_address() {
        let t0 = Instant::now();
        let mut n = cache();
        n.request(v4("fe80::2"), t0);
        let f = drain(&mut n, t0);
        let ns = ndp::parse_frame(&f[0]).unwrap();
        assert_eq!(ns.ip.src, "fe80::1".parse::<Ipv6Addr>().unwrap());
    }

    #[test]
    fn answers_solicitations_for_our_address() {
        let t0 = Instant::now();
        let mut n = cache();
        let mut b = [0u8; 128];
        let len = ndp::emit_solicit_frame(
            PEER,
            "fd00::2".parse().unwrap(),
            "fd00::1".parse().unwrap(),
            &mut b,
        )
        .unwrap();
        n.handle_frame(t0, &b[..len]);
        assert_eq!(n.lookup(v4("fd00::2")), Some(PEER));
        let f = drain(&mut n, t0);
        assert_eq!(f.len(), 1);
        let na = ndp::parse_frame(&f[0]).unwrap();
        assert_eq!(na.eth.dst, PEER);
        assert_eq!(na.ip.dst, "fd00::2".parse::<Ipv6Addr>().unwrap());
        assert_eq!(
            na.ndp,
            NdpRepr::Advert {
                router: false,
                solicited: true,
                override_flag: true,
                target: "fd00::1".parse().unwrap(),
                target_mac: Some(ME)
            }
        );
        // For an address not ours: nothing.
        let len = ndp::emit_solicit_frame(
            PEER,
            "fd00::2".parse().unwrap(),
            "fd00::3".parse().unwrap(),
            &mut b,
        )
        .unwrap();
        n.handle_frame(t0, &b[..len]);
        assert!(drain(&mut n, t0).is_empty());
    }

    #[test]
    fn advertisements_follow_rfc4861_rules() {
        let t0 = Instant::now();
        let mut n = cache();
        let peer = v4("fd00::2");
        // Unsolicited advertisement with no entry: not learned.
        let mut ns = [0u8; 128];
        let len = ndp::emit_solicit_frame(
            ME,
            "fd00::1".parse().unwrap(),
            "fd00::2".parse().unwrap(),
            &mut ns,
        )
        .unwrap();
        let na = na_for(&ns[..len], PEER);
        n.handle_frame(t0, &na);
        assert_eq!(n.lookup(peer), None);
        // Hop limit other than 255: dropped.
        n.request(peer, t0);
        let mut bad = na.clone();
        bad[21] = 64;
        n.handle_frame(t0, &bad);
        assert_eq!(n.lookup(peer), None);
        assert_eq!(n.dropped(), 1);
        n.handle_frame(t0, &na);
        assert_eq!(n.lookup(peer), Some(PEER));
        // Without the override flag a different MAC does not replace the one we have.
        let mut no_o = ndp::parse_frame(&na).unwrap();
        no_o.ndp = NdpRepr::Advert {
            router: false,
            solicited: true,
            override_flag: false,
            target: "fd00::2".parse().unwrap(),
            target_mac: Some(OTHER),
        };
        let mut b = [0u8; 128];
        let eh = no_o.eth.buffer_len();
        no_o.eth.emit(&mut b).unwrap();
        no_o.ip.emit(&mut b[eh..], 32).unwrap();
        no_o.ndp
            .emit(&no_o.ip.src, &no_o.ip.dst, &mut b[eh + 40..])
            .unwrap();
        n.handle_frame(t0, &b[..eh + 72]);
        assert_eq!(n.lookup(peer), Some(PEER));
    }

    #[test]
    fn expiry_re_resolves_keeping_the_old_mac() {
        let t0 = Instant::now();
        let mut n = cache();
        let peer = v4("10.0.0.2");
        n.request(peer, t0);
        drain(&mut n, t0);
        n.handle_frame(t0, &arp_reply(PEER, "10.0.0.2", ME, "10.0.0.1"));
        let t1 = t0 + REACHABLE_TIME;
        assert_eq!(n.poll_timeout(), Some(t1));
        let f = drain(&mut n, t1);
        assert_eq!(f.len(), 1, "a new request at expiry");
        assert!(n.pending(peer));
        assert_eq!(n.lookup(peer), Some(PEER), "old MAC kept meanwhile");
        n.handle_frame(t1, &arp_reply(OTHER, "10.0.0.2", ME, "10.0.0.1"));
        assert_eq!(n.lookup(peer), Some(OTHER));
        // Next time nobody answers: the entry fails.
        let t2 = t1 + REACHABLE_TIME;
        drain(&mut n, t2);
        assert_eq!(n.lookup(peer), Some(OTHER));
        drain(&mut n, t2 + GIVE_UP);
        assert_eq!(n.lookup(peer), None);
        assert!(n.failed(peer));
    }

    #[test]
    fn passively_learned_entries_are_forgotten_at_expiry() {
        let t0 = Instant::now();
        let mut n = cache();
        let req = ArpRepr::request(
            PEER,
            "10.0.0.2".parse().unwrap(),
            "10.0.0.1".parse().unwrap(),
        );
        n.handle_frame(t0, &arp_frame(req));
        drain(&mut n, t0);
        assert_eq!(n.lookup(v4("10.0.0.2")), Some(PEER));
        assert!(drain(&mut n, t0 + REACHABLE_TIME).is_empty());
        assert_eq!(n.lookup(v4("10.0.0.2")), None);
        assert!(!n.failed(v4("10.0.0.2")));
        assert_eq!(n.poll_timeout(), None);
    }

    #[test]
    fn unresolvable_requests_fail_at_once() {
        let t0 = Instant::now();
        let mut n = Neighbours::new(ME, &[v4("10.0.0.1")]);
        for ip in [
            "255.255.255.255",
            "224.0.0.1",
            "0.0.0.0",
            "10.0.0.1",
            "fd00::2",
        ] {
            n.request(v4(ip), t0);
            assert!(n.failed(v4(ip)), "{ip}");
        }
        assert!(drain(&mut n, t0).is_empty());
    }

    #[test]
    fn answer_queue_is_bounded() {
        let t0 = Instant::now();
        let mut n = cache();
        let req = ArpRepr::request(
            PEER,
            "10.0.0.2".parse().unwrap(),
            "10.0.0.1".parse().unwrap(),
        );
        for _ in 0..1000 {
            n.handle_frame(t0, &arp_frame(req));
        }
        assert_eq!(drain(&mut n, t0).len(), MAX_ANSWERS);
    }

    #[test]
    fn neighbour_frame_filter() {
        let mut b = [0u8; 128];
        let len = ndp::emit_solicit_frame(
            ME,
            "fd00::1".parse().unwrap(),
            "fd00::2".parse().unwrap(),
            &mut b,
        )
        .unwrap();
        assert!(is_neighbour_frame(&b[..len]));
        b[54] = 128; // echo request
        assert!(!is_neighbour_frame(&b[..len]));
        assert!(!is_neighbour_frame(&b[..54]));
        assert!(is_neighbour_frame(&arp_reply(
            PEER, "10.0.0.2", ME, "10.0.0.1"
        )));
        assert!(!is_neighbour_frame(&[0u8; 10]));
    }

    #[test]
    fn longest_prefix_match() {
        let r = |p: &str, len, gw: Option<&str>| Route {
            prefix: v4(p),
            len,
            gateway: gw.map(v4),
        };
        let routes = [
            r("0.0.0.0", 0, Some("10.0.0.254")),
            r("10.0.0.0", 24, None),
            r("10.0.0.128", 25, Some("10.0.0.200")),
            r("192.168.7.7", 32, None),
            r("::", 0, Some("fe80::1")),
            r("fd00::", 64, None),
        ];
        assert_eq!(next_hop(&routes, v4("10.0.0.5")), Some(v4("10.0.0.5")));
        assert_eq!(next_hop(&routes, v4("10.0.0.130")), Some(v4("10.0.0.200")));
        assert_eq!(next_hop(&routes, v4("8.8.8.8")), Some(v4("10.0.0.254")));
        assert_eq!(
            next_hop(&routes, v4("192.168.7.7")),
            Some(v4("192.168.7.7"))
        );
        assert_eq!(next_hop(&routes, v4("fd00::9")), Some(v4("fd00::9")));
        assert_eq!(next_hop(&routes, v4("2001:db8::1")), Some(v4("fe80::1")));
        assert_eq!(next_hop(&routes[1..4], v4("8.8.8.8")), None);
        assert_eq!(next_hop(&routes[1..4], v4("fd00::9")), None);
        assert_eq!(next_hop(&[], v4("10.0.0.1")), None);
        assert!(!r("10.0.0.0", 40, None).contains(v4("10.0.0.0")));
        // Equal lengths: the first wins (the caller orders by metric).
        let tie = [
            r("0.0.0.0", 0, Some("10.0.0.1")),
            r("0.0.0.0", 0, Some("10.0.0.2")),
        ];
        assert_eq!(next_hop(&tie, v4("1.1.1.1")), Some(v4("10.0.0.1")));
    }

    #[test]
    fn parses_proc_net_route() {
        let text =
            "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n\
            eth0\t00000000\t010200C0\t0003\t0\t0\t100\t00000000\t0\t0\t0\n\
            eth0\t000200C0\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0\n\
            eth1\t0000000A\t00000000\t0001\t0\t0\t0\t000000FF\t0\t0\t0\n\
            eth0\t0000A8C0\t00000000\t0201\t0\t0\t0\t0000FFFF\t0\t0\t0\n";
        let got = parse_proc_route(text, "eth0");
        if cfg!(target_endian = "little") {
            assert_eq!(
                got,
                vec![
                    (
                        100,
                        Route {
                            prefix: v4("0.0.0.0"),
                            len: 0,
                            gateway: Some(v4("192.0.2.1"))
                        }
                    ),
                    (
                        0,
                        Route {
                            prefix: v4("192.0.2.0"),
                            len: 24,
                            gateway: None
                        }
                    ),
                ]
            );
        }
        assert_eq!(parse_proc_route(text, "eth1").len(), 1);
        assert!(parse_proc_route("garbage\nmore garbage here", "eth0").is_empty());
    }

    #[test]
    fn parses_proc_net_ipv6_route() {
        let text = "\
fd000000000000000000000000000000 40 00000000000000000000000000000000 00 00000000000000000000000000000000 00000100 00000001 00000000 00000001     eth0
00000000000000000000000000000000 00 00000000000000000000000000000000 00 fd000000000000000000000000000001 00000400 00000003 00000000 00000003     eth0
fd000000000000000000000000000005 80 00000000000000000000000000000000 00 00000000000000000000000000000000 00000000 00000002 00000000 80200001       lo
fd000000000000000000000000000005 80 00000000000000000000000000000000 00 00000000000000000000000000000000 00000000 00000002 00000000 80200001     eth0
ff000000000000000000000000000000 08 00000000000000000000000000000000 00 00000000000000000000000000000000 00000100 00000001 00000000 00000001     eth1
";
        let got = parse_proc_ipv6_route(text, "eth0");
        assert_eq!(
            got,
            vec![
                (
                    256,
                    Route {
                        prefix: v4("fd00::"),
                        len: 64,
                        gateway: None
                    }
                ),
                (
                    1024,
                    Route {
                        prefix: v4("::"),
                        len: 0,
                        gateway: Some(v4("fd00::1"))
                    }
                ),
            ]
        );
    }

    #[test]
    fn parses_ip_addr_json() {
        let json = br#"[{"ifindex":2,"ifname":"eth0","flags":["UP"],"mtu":1500,"address":"02:fc:00:00:00:04","broadcast":"ff:ff:ff:ff:ff:ff","addr_info":[{"family":"inet","local":"192.0.2.5","prefixlen":24,"scope":"global"},{"family":"inet","local":"10.1.1.1","address":"10.9.9.9","prefixlen":32},{"family":"inet6","local":"fd00::5","prefixlen":64},{"family":"inet6","local":"fe80::fc:ff:fe00:4","prefixlen":64,"scope":"link"},{"family":"inet6","local":"fd00:9::1","prefixlen":64,"tentative":true}]}]"#;
        let info = parse_ip_addr_json(json).unwrap();
        assert_eq!(info.mac, Some([0x02, 0xfc, 0, 0, 0, 4]));
        assert_eq!(info.addrs.len(), 4, "the tentative address is left out");
        assert_eq!(info.connected.len(), 5);
        assert_eq!(info.addrs[0], (v4("192.0.2.5"), 24));
        assert_eq!(
            info.connected[1],
            Route {
                prefix: v4("10.9.9.9"),
                len: 32,
                gateway: None
            }
        );
        assert_eq!(
            next_hop(&info.connected, v4("fd00::77")),
            Some(v4("fd00::77"))
        );
        assert!(parse_ip_addr_json(b"[]").is_err());
        assert!(parse_ip_addr_json(b"not json").is_err());
        let lo = br#"[{"ifname":"lo","address":"00:00:00:00:00:00","addr_info":[]}]"#;
        assert_eq!(parse_ip_addr_json(lo).unwrap().mac, None);
    }

    #[test]
    fn parses_proc_net_arp() {
        let text =
            "IP address       HW type     Flags       HW address            Mask     Device\n\
            192.0.2.1        0x1         0x2         02:fc:00:00:00:05     *        eth0\n\
            192.0.2.2        0x1         0x0         00:00:00:00:00:00     *        eth0\n\
            192.0.2.3        0x1         0x6         02:fc:00:00:00:07     *        eth0\n\
            192.0.2.1        0x1         0x2         02:fc:00:00:00:09     *        eth1\n";
        let ip = |s: &str| s.parse::<Ipv4Addr>().unwrap();
        assert_eq!(
            parse_proc_arp(text, "eth0", ip("192.0.2.1")),
            Some([2, 0xfc, 0, 0, 0, 5])
        );
        assert_eq!(parse_proc_arp(text, "eth0", ip("192.0.2.2")), None);
        assert_eq!(
            parse_proc_arp(text, "eth0", ip("192.0.2.3")),
            Some([2, 0xfc, 0, 0, 0, 7])
        );
        assert_eq!(
            parse_proc_arp(text, "eth1", ip("192.0.2.1")),
            Some([2, 0xfc, 0, 0, 0, 9])
        );
        assert_eq!(parse_proc_arp(text, "eth0", ip("192.0.2.9")), None);
    }

    #[test]
    fn parses_ip_neigh_json() {
        let json = br#"[{"dst":"fd00::1","state":["FAILED"]},{"dst":"fd00::2","lladdr":"02:00:00:00:00:02","state":["STALE"]},{"dst":"fd00::3","lladdr":"02:00:00:00:00:03","state":["INCOMPLETE"]},{"dst":"fe80::1","lladdr":"02:00:00:00:00:04","router":null,"state":["REACHABLE"]}]"#;
        let ip = |s: &str| s.parse::<Ipv6Addr>().unwrap();
        assert_eq!(parse_neigh_json(json, ip("fd00::1")), None);
        assert_eq!(parse_neigh_json(json, ip("fd00::2")), Some(PEER));
        assert_eq!(parse_neigh_json(json, ip("fd00::3")), None);
        assert_eq!(
            parse_neigh_json(json, ip("fe80::1")),
            Some([2, 0, 0, 0, 0, 4])
        );
        assert_eq!(parse_neigh_json(b"[]", ip("fd00::2")), None);
        assert_eq!(parse_neigh_json(b"oops", ip("fd00::2")), None);
    }

    #[test]
    fn mac_parsing() {
        assert_eq!(parse_mac("02:00:00:00:00:0a"), Some([2, 0, 0, 0, 0, 10]));
        assert_eq!(parse_mac("2:0:0:0:0:a"), Some([2, 0, 0, 0, 0, 10]));
        assert_eq!(parse_mac("02:00:00:00:00"), None);
        assert_eq!(parse_mac("02:00:00:00:00:00:00"), None);
        assert_eq!(parse_mac("02:00:00:00:00:zz"), None);
        assert_eq!(parse_mac(""), None);
    }

    /// Meaningful without CAP_NET_RAW (CI as a normal user); as root there is nothing to see.
    #[test]
    fn resolve_explains_a_missing_cap_net_raw() {
        if PacketSocket::open("lo", arp::ETHERTYPE_ARP).is_ok() {
            return;
        }
        let e = resolve(
            "lo",
            ME,
            v4("127.0.0.1"),
            v4("127.0.0.2"),
            &mut |_| Ok(()),
            Duration::from_millis(10),
        )
        .unwrap_err();
        assert!(e.contains("CAP_NET_RAW"), "{e}");
    }

    #[test]
    fn resolve_reports_a_missing_interface() {
        let e = resolve(
            "uroce-no-such0",
            ME,
            v4("10.0.0.1"),
            v4("10.0.0.2"),
            &mut |_| Ok(()),
            Duration::from_millis(10),
        )
        .unwrap_err();
        assert!(e.contains("no interface"), "{e}");
        let e = resolve(
            "lo",
            ME,
            v4("10.0.0.1"),
            v4("fd00::2"),
            &mut |_| Ok(()),
            Duration::from_millis(10),
        )
        .unwrap_err();
        assert!(e.contains("same IP version"), "{e}");
    }
}
