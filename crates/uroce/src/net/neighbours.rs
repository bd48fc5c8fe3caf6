//! Neighbours: which MAC address a frame to a next hop goes to.
//!
//! - [`kernel_neighbour`]: what the kernel's neighbour table says (`RTM_GETNEIGH`, IPv4
//!   ARP and IPv6 neighbour discovery entries alike; rtnetlink(7), ip-neighbour(8)).
//! - [`Neighbours`]: a sans-IO neighbour cache. It is fed received frames and the time,
//!   and gives back request and answer frames to send; it never touches a socket or a
//!   clock. IPv4 addresses are resolved with ARP (RFC 826), IPv6 ones with Neighbor
//!   Discovery (RFC 4861 §7.2).

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::time::{Duration, Instant};

use netlink_packet_route::neighbour::{
    NeighbourAddress, NeighbourAttribute, NeighbourMessage, NeighbourState,
};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};

use super::ndp::is_neighbour_frame;
use super::netlink::{request, Kind};
use super::NetError;
use crate::wire::arp::{self, ArpOp, ArpRepr};
use crate::wire::ethernet::{self, ETHERTYPE_IPV6};
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

// ---------------------------------------------------------------------------------------
// The kernel's neighbour table

/// True for a neighbour entry state whose link-layer address can be used: reachable,
/// stale, delay, probe, permanent, noarp (the kernel's `NUD_VALID`); not incomplete,
/// failed or none.
fn usable(state: &NeighbourState) -> bool {
    matches!(
        state,
        NeighbourState::Reachable
            | NeighbourState::Stale
            | NeighbourState::Delay
            | NeighbourState::Probe
            | NeighbourState::Permanent
            | NeighbourState::Noarp
    )
}

/// The MAC of `ip` on interface `ifindex` among the messages of an `RTM_GETNEIGH` dump:
/// an entry with `NDA_DST` = `ip`, a 6-byte non-zero `NDA_LLADDR` and a usable state.
pub fn neighbour_from(msgs: &[RouteNetlinkMessage], ifindex: u32, ip: IpAddr) -> Option<[u8; 6]> {
    msgs.iter().find_map(|m| {
        let RouteNetlinkMessage::NewNeighbour(n) = m else {
            return None;
        };
        if n.header.ifindex != ifindex || !usable(&n.header.state) {
            return None;
        }
        let mut dst = None;
        let mut mac = None;
        for a in &n.attributes {
            match a {
                NeighbourAttribute::Destination(NeighbourAddress::Inet(a)) => {
                    dst = Some(IpAddr::V4(*a))
                }
                NeighbourAttribute::Destination(NeighbourAddress::Inet6(a)) => {
                    dst = Some(IpAddr::V6(*a))
                }
                NeighbourAttribute::LinkLayerAddress(b) => {
                    mac = <[u8; 6]>::try_from(b.as_slice()).ok()
                }
                _ => {}
            }
        }
        mac.filter(|m| dst == Some(ip) && *m != [0; 6])
    })
}

/// The MAC the kernel's neighbour table has for `ip` on interface `ifindex` in a usable
/// state, `None` when it has no such entry: a dump of `RTM_GETNEIGH` for the address's
/// family (the ARP table for IPv4, the neighbour discovery table for IPv6, as
/// `ip neigh show` lists them) in the calling thread's network namespace.
pub fn kernel_neighbour(ifindex: u32, ip: IpAddr) -> Result<Option<[u8; 6]>, NetError> {
    let mut m = NeighbourMessage::default();
    m.header.family = if ip.is_ipv4() {
        AddressFamily::Inet
    } else {
        AddressFamily::Inet6
    };
    m.header.ifindex = ifindex;
    let all = request(RouteNetlinkMessage::GetNeighbour(m), Kind::Dump)?;
    Ok(neighbour_from(&all, ifindex, ip))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::net::netlink::testing::{nla, nlmsg};
    use crate::net::netlink::{decode, Kind};
    use std::net::Ipv6Addr;

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

    /// An `RTM_NEWNEIGH` (28): `ndmsg` (family, ifindex, state, flags, type), then
    /// `NDA_DST` (1) and, when given, `NDA_LLADDR` (2).
    fn newneigh(ifindex: u32, state: u16, dst: IpAddr, mac: Option<[u8; 6]>) -> Vec<u8> {
        let (family, addr) = match dst {
            IpAddr::V4(a) => (libc::AF_INET as u8, a.octets().to_vec()),
            IpAddr::V6(a) => (libc::AF_INET6 as u8, a.octets().to_vec()),
        };
        let mut body = vec![family, 0, 0, 0];
        body.extend_from_slice(&ifindex.to_ne_bytes());
        body.extend_from_slice(&state.to_ne_bytes());
        body.extend_from_slice(&[0, 1]); // flags, RTN_UNICAST
        body.extend(nla(1, &addr));
        if let Some(m) = mac {
            body.extend(nla(2, &m));
        }
        nlmsg(28, 2, 1, &body)
    }

    #[test]
    fn parses_the_kernel_neighbour_table() {
        const REACHABLE: u16 = 0x02;
        const STALE: u16 = 0x04;
        const INCOMPLETE: u16 = 0x01;
        const FAILED: u16 = 0x20;
        const PERMANENT: u16 = 0x80;
        let mut b = newneigh(2, REACHABLE, v4("192.0.2.1"), Some([2, 0xfc, 0, 0, 0, 5]));
        b.extend(newneigh(2, FAILED, v4("192.0.2.2"), None));
        b.extend(newneigh(2, INCOMPLETE, v4("192.0.2.3"), Some([0; 6])));
        b.extend(newneigh(
            3,
            PERMANENT,
            v4("192.0.2.1"),
            Some([2, 0xfc, 0, 0, 0, 9]),
        ));
        b.extend(newneigh(2, STALE, v4("fd00::2"), Some(PEER)));
        b.extend(newneigh(2, FAILED, v4("fd00::1"), Some(OTHER)));
        b.extend(newneigh(
            2,
            REACHABLE,
            v4("fe80::1"),
            Some([2, 0, 0, 0, 0, 4]),
        ));
        b.extend(nlmsg(3, 2, 1, &[0; 4])); // NLMSG_DONE
        let d = decode(&b, 1, Kind::Dump, "RTM_GETNEIGH").unwrap();
        assert!(d.done);
        let m = &d.messages;
        assert_eq!(
            neighbour_from(m, 2, v4("192.0.2.1")),
            Some([2, 0xfc, 0, 0, 0, 5])
        );
        assert_eq!(neighbour_from(m, 2, v4("192.0.2.2")), None);
        assert_eq!(neighbour_from(m, 2, v4("192.0.2.3")), None);
        assert_eq!(
            neighbour_from(m, 3, v4("192.0.2.1")),
            Some([2, 0xfc, 0, 0, 0, 9])
        );
        assert_eq!(neighbour_from(m, 2, v4("192.0.2.9")), None);
        assert_eq!(neighbour_from(m, 2, v4("fd00::2")), Some(PEER));
        assert_eq!(neighbour_from(m, 2, v4("fd00::1")), None);
        assert_eq!(
            neighbour_from(m, 2, v4("fe80::1")),
            Some([2, 0, 0, 0, 0, 4])
        );
        assert_eq!(neighbour_from(&[], 2, v4("fd00::2")), None);
    }

    /// The running kernel answers a neighbour dump (loopback has no entries to speak of).
    #[test]
    fn asks_the_kernel_for_its_neighbour_table() {
        let lo = crate::net::addresses::ifindex("lo").unwrap();
        assert_eq!(kernel_neighbour(lo, v4("127.0.0.2")).unwrap(), None);
        assert_eq!(kernel_neighbour(lo, v4("::2")).unwrap(), None);
    }
}
