//! Routes: the kernel's route to one destination, and longest prefix match.
//!
//! [`route_to`] asks the kernel the question `ip route get DST from SRC` asks: an
//! `RTM_GETROUTE` request (not a dump) with `RTA_DST` (and `RTA_SRC`), which the kernel
//! answers with the one route a packet to that destination would take, after policy
//! routing rules, `RTA_OIF` naming the output interface, `RTA_GATEWAY` the next hop when
//! the destination is off-link, and `RTA_PREFSRC` the source address it would pick
//! (rtnetlink(7), ip-route(8)).
//!
//! [`Route`] and [`next_hop`] are plain longest prefix match over a list of routes, for
//! callers that have one (the connected prefixes of an interface, a simulator).

use std::io;
use std::net::IpAddr;

use netlink_packet_route::route::{
    RouteAddress, RouteAttribute, RouteMessage, RouteType, RouteVia,
};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};

use super::netlink::{request, Kind};
use super::NetError;

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

/// The route the kernel picked for one destination.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RouteTo {
    /// The destination asked about.
    pub dst: IpAddr,
    /// The output interface's index (`RTA_OIF`).
    pub oif: u32,
    /// The gateway (`RTA_GATEWAY`, or an `RTA_VIA` of the same family); `None`: on-link.
    pub gateway: Option<IpAddr>,
    /// The source address the kernel would use (`RTA_PREFSRC`), when it says.
    pub pref_src: Option<IpAddr>,
    /// The destination is one of this host's addresses (`RTN_LOCAL`).
    pub local: bool,
}

impl RouteTo {
    /// Where frames to the destination go on the link: the gateway, else the destination.
    pub fn next_hop(&self) -> IpAddr {
        self.gateway.unwrap_or(self.dst)
    }
}

fn ip_of(a: &RouteAddress) -> Option<IpAddr> {
    match a {
        RouteAddress::Inet(a) => Some(IpAddr::V4(*a)),
        RouteAddress::Inet6(a) => Some(IpAddr::V6(*a)),
        _ => None,
    }
}

/// The `RTM_GETROUTE` request for `dst` (from `src`): a full-length `RTA_DST`, like
/// `ip route get`.
fn get_route(dst: IpAddr, src: Option<IpAddr>) -> RouteMessage {
    let mut m = RouteMessage::default();
    let full = if dst.is_ipv4() { 32 } else { 128 };
    m.header.address_family = if dst.is_ipv4() {
        AddressFamily::Inet
    } else {
        AddressFamily::Inet6
    };
    m.header.destination_prefix_length = full;
    m.attributes.push(RouteAttribute::Destination(dst.into()));
    if let Some(s) = src.filter(|s| s.is_ipv4() == dst.is_ipv4()) {
        m.header.source_prefix_length = full;
        m.attributes.push(RouteAttribute::Source(s.into()));
    }
    m
}

/// Reads the kernel's answer to an `RTM_GETROUTE` request for `dst`. A route of a type that carries
/// no packets (unreachable, prohibit, blackhole, throw) is no route.
pub fn route_from_message(dst: IpAddr, m: &RouteMessage) -> Result<RouteTo, NetError> {
    let no = |why: &str| NetError::NoRoute {
        dst,
        why: why.to_string(),
    };
    let local = match m.header.kind {
        RouteType::Unicast => false,
        RouteType::Local => true,
        RouteType::Unreachable => return Err(no(" (an unreachable route)")),
        RouteType::Prohibit => return Err(no(" (a prohibit route)")),
        RouteType::BlackHole => return Err(no(" (a blackhole route)")),
        RouteType::Throw => return Err(no(" (a throw route)")),
        other => return Err(no(&format!(" (a route of type {other:?})"))),
    };
    let mut r = RouteTo {
        dst,
        oif: 0,
        gateway: None,
        pref_src: None,
        local,
    };
    for a in &m.attributes {
        match a {
            RouteAttribute::Oif(i) => r.oif = *i,
            RouteAttribute::Gateway(g) => r.gateway = ip_of(g),
            RouteAttribute::Via(RouteVia::Inet(g)) => r.gateway = Some(IpAddr::V4(*g)),
            RouteAttribute::Via(RouteVia::Inet6(g)) => r.gateway = Some(IpAddr::V6(*g)),
            RouteAttribute::PrefSource(s) => r.pref_src = ip_of(s),
            _ => {}
        }
    }
    if r.oif == 0 {
        return Err(no(" (the kernel named no output interface)"));
    }
    Ok(r)
}

/// Asks the kernel which route a packet from `src` (when given: policy rules may select
/// on it; it must then be one of this host's addresses) to `dst` takes, as
/// `ip route get DST from SRC` does: one `RTM_GETROUTE` request in the calling thread's
/// network namespace. The kernel answers `ENETUNREACH` / `EHOSTUNREACH` when no route
/// matches, which is [`NetError::NoRoute`].
pub fn route_to(dst: IpAddr, src: Option<IpAddr>) -> Result<RouteTo, NetError> {
    let answer = request(
        RouteNetlinkMessage::GetRoute(get_route(dst, src)),
        Kind::Get,
    );
    let msgs = match answer {
        Ok(m) => m,
        Err(NetError::Netlink { source, .. })
            if matches!(
                source.raw_os_error(),
                Some(libc::ENETUNREACH | libc::EHOSTUNREACH)
            ) =>
        {
            return Err(NetError::NoRoute {
                dst,
                why: String::new(),
            })
        }
        // Prohibit routes answer EACCES and blackholes EINVAL, and so does a source
        // address that is not ours: the kernel refused this destination.
        Err(NetError::Netlink { source, .. })
            if matches!(source.raw_os_error(), Some(libc::EACCES | libc::EINVAL)) =>
        {
            let from = src.map(|s| format!(" from {s}")).unwrap_or_default();
            return Err(NetError::NoRoute {
                dst,
                why: format!("{from} (the kernel said: {source})"),
            });
        }
        Err(e) => return Err(e),
    };
    match msgs.first() {
        Some(RouteNetlinkMessage::NewRoute(m)) => route_from_message(dst, m),
        _ => Err(NetError::Netlink {
            op: "RTM_GETROUTE",
            source: io::Error::other("the kernel answered with no route message"),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::net::netlink::testing::{nla, nlmsg};
    use crate::net::netlink::{decode, encode};

    fn v4(s: &str) -> IpAddr {
        s.parse().unwrap()
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

    /// The request is what `ip route get 192.0.2.9 from 192.0.2.1` sends: `rtmsg` with
    /// family AF_INET, dst_len 32, src_len 32, then `RTA_DST` (1) and `RTA_SRC` (2).
    #[test]
    fn the_request_names_destination_and_source() {
        let b = encode(
            RouteNetlinkMessage::GetRoute(get_route(v4("192.0.2.9"), Some(v4("192.0.2.1")))),
            Kind::Get,
            1,
        );
        assert_eq!(u16::from_ne_bytes([b[4], b[5]]), 26, "RTM_GETROUTE");
        assert_eq!(&b[16..18], &[libc::AF_INET as u8, 32]);
        assert_eq!(b[17..19], [32, 32]);
        let mut attrs = nla(1, &[192, 0, 2, 9]);
        attrs.extend(nla(2, &[192, 0, 2, 1]));
        assert_eq!(&b[28..], &attrs[..]);
        // A source of the other family is left out.
        let m = get_route(v4("fd00::1"), Some(v4("192.0.2.1")));
        assert_eq!(m.attributes.len(), 1);
        assert_eq!(m.header.destination_prefix_length, 128);
    }

    /// An `RTM_NEWROUTE` (24) answer: `rtmsg` of `kind` with `attrs`.
    fn newroute(family: u8, kind: u8, attrs: &[Vec<u8>]) -> Vec<u8> {
        // family, dst_len, src_len, tos, table, protocol, scope, type, flags
        let mut body = vec![family, 32, 0, 0, 254, 2, 0, kind];
        body.extend_from_slice(&0u32.to_ne_bytes());
        for a in attrs {
            body.extend_from_slice(a);
        }
        nlmsg(24, 0, 1, &body)
    }

    fn parse(bytes: &[u8], dst: &str) -> Result<RouteTo, NetError> {
        let d = decode(bytes, 1, Kind::Get, "RTM_GETROUTE").unwrap();
        assert!(d.done);
        match &d.messages[0] {
            RouteNetlinkMessage::NewRoute(m) => route_from_message(v4(dst), m),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn parses_the_kernel_s_answer() {
        let af4 = libc::AF_INET as u8;
        let af6 = libc::AF_INET6 as u8;
        // Via a gateway: RTA_DST, RTA_OIF (4), RTA_GATEWAY (5), RTA_PREFSRC (7).
        let b = newroute(
            af4,
            1,
            &[
                nla(1, &[192, 0, 2, 9]),
                nla(4, &3u32.to_ne_bytes()),
                nla(5, &[10, 0, 0, 254]),
                nla(7, &[10, 0, 0, 1]),
            ],
        );
        let r = parse(&b, "192.0.2.9").unwrap();
        assert_eq!(
            r,
            RouteTo {
                dst: v4("192.0.2.9"),
                oif: 3,
                gateway: Some(v4("10.0.0.254")),
                pref_src: Some(v4("10.0.0.1")),
                local: false
            }
        );
        assert_eq!(r.next_hop(), v4("10.0.0.254"));
        // On-link IPv6: no gateway, the destination is the next hop.
        let dst6: IpAddr = v4("fd00::2");
        let IpAddr::V6(d6) = dst6 else { unreachable!() };
        let b = newroute(af6, 1, &[nla(1, &d6.octets()), nla(4, &2u32.to_ne_bytes())]);
        let r = parse(&b, "fd00::2").unwrap();
        assert_eq!((r.oif, r.gateway, r.next_hop()), (2, None, dst6));
        // Local (2): ours.
        let b = newroute(af4, 2, &[nla(4, &1u32.to_ne_bytes())]);
        assert!(parse(&b, "127.0.0.1").unwrap().local);
        // Unreachable (7) and prohibit (8): no route, saying which.
        let b = newroute(af4, 7, &[nla(4, &1u32.to_ne_bytes())]);
        let e = parse(&b, "192.0.2.9").unwrap_err();
        assert_eq!(
            e.to_string(),
            "no route to 192.0.2.9 (an unreachable route)"
        );
        let b = newroute(af4, 8, &[]);
        assert!(parse(&b, "192.0.2.9")
            .unwrap_err()
            .to_string()
            .contains("prohibit"));
        // No output interface: not usable.
        let b = newroute(af4, 1, &[nla(1, &[192, 0, 2, 9])]);
        assert!(matches!(
            parse(&b, "192.0.2.9"),
            Err(NetError::NoRoute { .. })
        ));
    }

    /// The running kernel: 127.0.0.1 is local, through loopback.
    #[test]
    fn asks_the_kernel_for_loopback() {
        let r = route_to(v4("127.0.0.1"), None).unwrap();
        assert!(r.local);
        assert_eq!(Some(r.oif), crate::net::addresses::ifindex("lo").ok());
        assert_eq!(r.next_hop(), v4("127.0.0.1"));
    }
}
