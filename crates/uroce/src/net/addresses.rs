//! Links and their addresses, as the kernel lists them: a dump of `RTM_GETLINK` (one
//! `ifinfomsg` per interface with `IFLA_IFNAME`, `IFLA_ADDRESS`, `IFLA_MTU`,
//! `IFLA_OPERSTATE`) joined by interface index with a dump of `RTM_GETADDR` (one
//! `ifaddrmsg` per address with `IFA_LOCAL` / `IFA_ADDRESS` and `IFA_FLAGS`); see
//! rtnetlink(7). This is what `ip addr show` prints, without running `ip`.

use std::ffi::CString;
use std::net::IpAddr;

use netlink_packet_route::address::{
    AddressAttribute, AddressFlags, AddressHeaderFlags, AddressMessage,
};
use netlink_packet_route::link::{LinkAttribute, LinkFlags, LinkInfo, LinkMessage, State};
use netlink_packet_route::RouteNetlinkMessage;

use super::netlink::{request, Kind};
use super::routes::Route;
use super::NetError;

/// The operational state of a link (RFC 2863 `ifOperStatus`, `IFLA_OPERSTATE`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OperState {
    /// The driver does not say (loopback, and some virtual links).
    Unknown,
    /// Up: frames can pass.
    Up,
    /// Down.
    Down,
    /// Down because a link below it is (a veth whose peer is down).
    LowerLayerDown,
    /// Waiting for an external event (802.1X, a dormant tunnel).
    Dormant,
    /// Any other state (not present, testing, or one newer than this code).
    Other,
}

impl From<&State> for OperState {
    fn from(s: &State) -> Self {
        match s {
            State::Unknown => Self::Unknown,
            State::Up => Self::Up,
            State::Down => Self::Down,
            State::LowerLayerDown => Self::LowerLayerDown,
            State::Dormant => Self::Dormant,
            _ => Self::Other,
        }
    }
}

/// One interface: what `RTM_GETLINK` and `RTM_GETADDR` say about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InterfaceInfo {
    /// Its name (`IFLA_IFNAME`).
    pub name: String,
    /// Its index.
    pub index: u32,
    /// Its MAC address (`IFLA_ADDRESS`); `None` for interfaces without an Ethernet
    /// address (no address, not 6 bytes, or all zeros as loopback reports).
    pub mac: Option<[u8; 6]>,
    /// Its MTU in bytes (`IFLA_MTU`).
    pub mtu: u32,
    /// Administratively up (`IFF_UP`, `ip link set up`).
    pub up: bool,
    /// The operational state (`IFLA_OPERSTATE`).
    pub oper_state: OperState,
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

/// Writes `aa:bb:cc:dd:ee:ff`.
pub fn format_mac(m: &[u8; 6]) -> String {
    format!(
        "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
        m[0], m[1], m[2], m[3], m[4], m[5]
    )
}

/// An interface without its addresses, from one `RTM_NEWLINK` message.
fn link_of(m: &LinkMessage) -> InterfaceInfo {
    let mut info = InterfaceInfo {
        name: String::new(),
        index: m.header.index,
        mac: None,
        mtu: 0,
        up: m.header.flags.contains(LinkFlags::Up),
        oper_state: OperState::Unknown,
        addrs: Vec::new(),
        connected: Vec::new(),
    };
    for a in &m.attributes {
        match a {
            LinkAttribute::IfName(n) => info.name.clone_from(n),
            LinkAttribute::Address(b) => {
                info.mac = <[u8; 6]>::try_from(b.as_slice())
                    .ok()
                    .filter(|m| *m != [0; 6]);
            }
            LinkAttribute::Mtu(v) => info.mtu = *v,
            LinkAttribute::OperState(s) => info.oper_state = s.into(),
            _ => {}
        }
    }
    info
}

/// Adds one `RTM_NEWADDR` message's address to `info`. `IFA_LOCAL` is the interface's
/// own address; `IFA_ADDRESS` is the same, or the peer's on a point-to-point link. The
/// flags are `IFA_FLAGS` when present (32 bits), else the header's 8.
fn add_address(info: &mut InterfaceInfo, m: &AddressMessage) {
    let len = m.header.prefix_len;
    let mut local = None;
    let mut address = None;
    let mut flags = None;
    for a in &m.attributes {
        match a {
            AddressAttribute::Local(ip) => local = Some(*ip),
            AddressAttribute::Address(ip) => address = Some(*ip),
            AddressAttribute::Flags(f) => flags = Some(*f),
            _ => {}
        }
    }
    let Some(mine) = local.or(address) else {
        return;
    };
    // A tentative (or duplicate) IPv6 address must not be used as a source yet
    // (RFC 4862 §5.4); its prefix is on-link all the same.
    let unusable = match flags {
        Some(f) => f.intersects(AddressFlags::Tentative | AddressFlags::Dadfailed),
        None => m
            .header
            .flags
            .intersects(AddressHeaderFlags::Tentative | AddressHeaderFlags::Dadfailed),
    };
    if !unusable {
        info.addrs.push((mine, len));
    }
    info.connected.push(Route {
        prefix: address.unwrap_or(mine),
        len,
        gateway: None,
    });
}

/// Joins the messages of a link dump and an address dump into interfaces, in the
/// order of the link dump (by index).
pub fn interfaces_from(
    links: &[RouteNetlinkMessage],
    addrs: &[RouteNetlinkMessage],
) -> Vec<InterfaceInfo> {
    let mut out: Vec<InterfaceInfo> = links
        .iter()
        .filter_map(|m| match m {
            RouteNetlinkMessage::NewLink(l) => Some(link_of(l)),
            _ => None,
        })
        .collect();
    for m in addrs {
        if let RouteNetlinkMessage::NewAddress(a) = m {
            if let Some(i) = out.iter_mut().find(|i| i.index == a.header.index) {
                add_address(i, a);
            }
        }
    }
    out
}

/// Every interface of the calling thread's network namespace with its addresses: a dump
/// of `RTM_GETLINK` and one of `RTM_GETADDR` (all families).
pub fn interfaces() -> Result<Vec<InterfaceInfo>, NetError> {
    let links = request(
        RouteNetlinkMessage::GetLink(LinkMessage::default()),
        Kind::Dump,
    )?;
    let addrs = request(
        RouteNetlinkMessage::GetAddress(AddressMessage::default()),
        Kind::Dump,
    )?;
    Ok(interfaces_from(&links, &addrs))
}

/// The kind of link `index` is (`IFLA_LINKINFO`'s `IFLA_INFO_KIND`: "veth", "bridge",
/// "macvlan", ...), as `ip -d link` prints it; `None` for a device with a driver of its
/// own (a NIC), which has none.
pub fn link_kind(index: u32) -> Result<Option<String>, NetError> {
    let mut m = LinkMessage::default();
    m.header.index = index;
    let answer = request(RouteNetlinkMessage::GetLink(m), Kind::Get)?;
    Ok(answer.iter().find_map(|m| match m {
        RouteNetlinkMessage::NewLink(l) => l.attributes.iter().find_map(|a| match a {
            LinkAttribute::LinkInfo(infos) => infos.iter().find_map(|i| match i {
                LinkInfo::Kind(k) => Some(k.to_string()),
                _ => None,
            }),
            _ => None,
        }),
        _ => None,
    }))
}

/// The interface named `iface` (see [`interfaces`]).
pub fn interface_info(iface: &str) -> Result<InterfaceInfo, NetError> {
    interfaces()?
        .into_iter()
        .find(|i| i.name == iface)
        .ok_or_else(|| NetError::NoInterface(iface.to_string()))
}

/// The interface holding address `ip` (see [`interfaces`]).
pub fn interface_with_address(ip: IpAddr) -> Result<InterfaceInfo, NetError> {
    interfaces()?
        .into_iter()
        .find(|i| i.addrs.iter().any(|&(a, _)| a == ip))
        .ok_or(NetError::NoAddress(ip))
}

/// The IPv6 link-local address made from `mac` (fe80::/64 with the EUI-64 interface id:
/// ff:fe in the middle, the universal/local bit flipped): the address an interface gets
/// by default, and a RoCE device's default GID (GID 0).
pub fn eui64_link_local(mac: [u8; 6]) -> std::net::Ipv6Addr {
    // The interface id is the CA GUID a RoCE device derives from its MAC.
    let id = crate::cm::ca_guid_from_mac(mac);
    std::net::Ipv6Addr::from((0xfe80u128 << 112) | u128::from(id))
}

/// The index of interface `iface` (if_nametoindex(3)), without a netlink round trip.
pub fn ifindex(iface: &str) -> Result<u32, NetError> {
    let name = CString::new(iface).map_err(|_| NetError::NoInterface(iface.to_string()))?;
    // SAFETY: `name` is a valid NUL-terminated string.
    match unsafe { libc::if_nametoindex(name.as_ptr()) } {
        0 => Err(NetError::NoInterface(iface.to_string())),
        i => Ok(i),
    }
}

/// The name of interface `index` (if_indextoname(3)); `None` when there is none.
pub fn ifname(index: u32) -> Option<String> {
    let mut buf = [0u8; libc::IF_NAMESIZE];
    // SAFETY: `buf` has the IF_NAMESIZE bytes if_indextoname may write.
    let p = unsafe { libc::if_indextoname(index, buf.as_mut_ptr().cast()) };
    if p.is_null() {
        return None;
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    Some(String::from_utf8_lossy(&buf[..end]).into_owned())
}

/// The link speed of interface `iface` in Mb/s, as the kernel's ethtool interface reports
/// it (`SIOCETHTOOL` with `ETHTOOL_GSET`, ethtool(8)'s "Speed:"), asked in the calling
/// thread's network namespace; `None` when the driver does not know it (veth with no
/// configured speed, a link down: `SPEED_UNKNOWN`) or the interface does not exist.
pub fn link_speed_mbps(iface: &str) -> Option<u32> {
    const SIOCETHTOOL: libc::c_ulong = 0x8946;
    const ETHTOOL_GSET: u32 = 1;
    // `struct ethtool_cmd` (linux/ethtool.h): 44 bytes; the low 16 bits of the speed at
    // bytes 12..14, the high 16 bits at bytes 28..30, native order.
    let mut cmd = [0u32; 11];
    cmd[0] = ETHTOOL_GSET;
    let name = iface.as_bytes();
    if name.is_empty() || name.len() >= libc::IFNAMSIZ {
        return None;
    }
    // SAFETY: all-zeros is a valid `ifreq` (a name and a union of integers/pointers).
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (d, &b) in req.ifr_name.iter_mut().zip(name) {
        *d = b as libc::c_char;
    }
    req.ifr_ifru.ifru_data = cmd.as_mut_ptr().cast();
    // SAFETY: plain socket(2); the descriptor is owned below.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return None;
    }
    // SAFETY: `fd` was just opened and nothing else owns it.
    let sock = unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) };
    // SAFETY: SIOCETHTOOL reads the name from `req` and writes at most the 44 bytes of
    // `cmd` its `ifru_data` points at; both outlive the call.
    let rc = unsafe {
        libc::ioctl(
            std::os::fd::AsRawFd::as_raw_fd(&sock),
            SIOCETHTOOL as _,
            &mut req as *mut libc::ifreq,
        )
    };
    if rc != 0 {
        return None;
    }
    let bytes: Vec<u8> = cmd.iter().flat_map(|w| w.to_ne_bytes()).collect();
    let lo = u16::from_ne_bytes([bytes[12], bytes[13]]);
    let hi = u16::from_ne_bytes([bytes[28], bytes[29]]);
    let speed = (u32::from(hi) << 16) | u32::from(lo);
    // SPEED_UNKNOWN is -1 (0xffff in the 16 bits of old drivers); 0 is no speed either.
    (!matches!(speed, 0 | 0xffff | u32::MAX)).then_some(speed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::net::netlink::testing::{nla, nlmsg};
    use crate::net::netlink::{decode, Kind};
    use crate::net::routes::next_hop;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn the_eui64_link_local_address_of_a_mac() {
        assert_eq!(
            IpAddr::V6(eui64_link_local([0x6e, 0x31, 0x8e, 0x34, 0x40, 0xd8])),
            ip("fe80::6c31:8eff:fe34:40d8")
        );
    }

    /// An `RTM_NEWLINK` (16) as the kernel sends it: `ifinfomsg` then attributes.
    fn newlink(index: i32, flags: u32, name: &str, mac: &[u8], mtu: u32, oper: u8) -> Vec<u8> {
        let mut body = Vec::new();
        body.extend_from_slice(&[0, 0]); // family, pad
        body.extend_from_slice(&1u16.to_ne_bytes()); // ARPHRD_ETHER
        body.extend_from_slice(&index.to_ne_bytes());
        body.extend_from_slice(&flags.to_ne_bytes());
        body.extend_from_slice(&0u32.to_ne_bytes()); // change mask
        let mut n = name.as_bytes().to_vec();
        n.push(0);
        body.extend(nla(3, &n)); // IFLA_IFNAME
        body.extend(nla(1, mac)); // IFLA_ADDRESS
        body.extend(nla(4, &mtu.to_ne_bytes())); // IFLA_MTU
        body.extend(nla(16, &[oper])); // IFLA_OPERSTATE
        nlmsg(16, 2, 1, &body)
    }

    /// An `RTM_NEWADDR` (20): `ifaddrmsg`, `IFA_ADDRESS`, `IFA_LOCAL`, `IFA_FLAGS`.
    fn newaddr(
        family: u8,
        len: u8,
        index: u32,
        local: IpAddr,
        peer: IpAddr,
        flags: u32,
    ) -> Vec<u8> {
        let bytes = |a: IpAddr| match a {
            IpAddr::V4(a) => a.octets().to_vec(),
            IpAddr::V6(a) => a.octets().to_vec(),
        };
        let mut body = vec![family, len, flags as u8, 0];
        body.extend_from_slice(&index.to_ne_bytes());
        body.extend(nla(1, &bytes(peer))); // IFA_ADDRESS
        body.extend(nla(2, &bytes(local))); // IFA_LOCAL
        body.extend(nla(8, &flags.to_ne_bytes())); // IFA_FLAGS
        nlmsg(20, 2, 1, &body)
    }

    #[test]
    fn parses_link_and_address_dumps() {
        const IFF_UP: u32 = 1;
        let mut links = newlink(1, IFF_UP, "lo", &[0; 6], 65536, 0);
        links.extend(newlink(2, IFF_UP, "eth0", &[2, 0xfc, 0, 0, 0, 4], 1500, 6));
        links.extend(newlink(3, 0, "eth1", &[2, 0xfc, 0, 0, 0, 5], 9000, 2));
        let links = decode(&links, 1, Kind::Dump, "RTM_GETLINK")
            .unwrap()
            .messages;
        let (v4, v6) = (libc::AF_INET as u8, libc::AF_INET6 as u8);
        let mut addrs = newaddr(v4, 8, 1, ip("127.0.0.1"), ip("127.0.0.1"), 0x80);
        addrs.extend(newaddr(v4, 24, 2, ip("192.0.2.5"), ip("192.0.2.5"), 0x80));
        addrs.extend(newaddr(v4, 32, 2, ip("10.1.1.1"), ip("10.9.9.9"), 0x80));
        addrs.extend(newaddr(v6, 64, 2, ip("fd00::5"), ip("fd00::5"), 0x80));
        addrs.extend(newaddr(
            v6,
            64,
            2,
            ip("fe80::fc:ff:fe00:4"),
            ip("fe80::fc:ff:fe00:4"),
            0x80,
        ));
        // Tentative (IFA_F_TENTATIVE 0x40): left out of the usable addresses.
        addrs.extend(newaddr(v6, 64, 2, ip("fd00:9::1"), ip("fd00:9::1"), 0x40));
        // An address on an index the link dump did not list: dropped.
        addrs.extend(newaddr(
            v4,
            24,
            9,
            ip("198.51.100.1"),
            ip("198.51.100.1"),
            0,
        ));
        let addrs = decode(&addrs, 1, Kind::Dump, "RTM_GETADDR")
            .unwrap()
            .messages;
        let all = interfaces_from(&links, &addrs);
        assert_eq!(all.len(), 3);
        let lo = &all[0];
        assert_eq!((lo.name.as_str(), lo.index, lo.mac), ("lo", 1, None));
        assert_eq!(
            (lo.mtu, lo.up, lo.oper_state),
            (65536, true, OperState::Unknown)
        );
        let eth0 = &all[1];
        assert_eq!(eth0.mac, Some([0x02, 0xfc, 0, 0, 0, 4]));
        assert_eq!(
            (eth0.mtu, eth0.up, eth0.oper_state),
            (1500, true, OperState::Up)
        );
        assert_eq!(eth0.addrs.len(), 4, "the tentative address is left out");
        assert_eq!(eth0.connected.len(), 5);
        assert_eq!(eth0.addrs[0], (ip("192.0.2.5"), 24));
        assert_eq!(eth0.addrs[1], (ip("10.1.1.1"), 32));
        assert_eq!(
            eth0.connected[1],
            Route {
                prefix: ip("10.9.9.9"),
                len: 32,
                gateway: None
            }
        );
        assert_eq!(
            next_hop(&eth0.connected, ip("fd00::77")),
            Some(ip("fd00::77"))
        );
        let eth1 = &all[2];
        assert_eq!(
            (eth1.mtu, eth1.up, eth1.oper_state),
            (9000, false, OperState::Down)
        );
        assert!(eth1.addrs.is_empty());
    }

    #[test]
    fn mac_parsing() {
        assert_eq!(parse_mac("02:00:00:00:00:0a"), Some([2, 0, 0, 0, 0, 10]));
        assert_eq!(parse_mac("2:0:0:0:0:a"), Some([2, 0, 0, 0, 0, 10]));
        assert_eq!(parse_mac("02:00:00:00:00"), None);
        assert_eq!(parse_mac("02:00:00:00:00:00:00"), None);
        assert_eq!(parse_mac("02:00:00:00:00:zz"), None);
        assert_eq!(parse_mac(""), None);
        assert_eq!(format_mac(&[2, 0xab, 0, 0, 0, 10]), "02:ab:00:00:00:0a");
    }

    /// The running kernel: loopback is there with 127.0.0.1, and has no MAC.
    #[test]
    fn this_namespace_has_loopback() {
        let lo = interface_info("lo").unwrap();
        assert_eq!(lo.mac, None);
        assert_eq!(Some(lo.index), ifindex("lo").ok());
        assert_eq!(ifname(lo.index).as_deref(), Some("lo"));
        assert_eq!(interface_with_address(ip("127.0.0.1")).unwrap().name, "lo");
        let e = interface_info("uroce-no-such0").unwrap_err();
        assert_eq!(
            e.to_string(),
            "no interface uroce-no-such0 in this network namespace"
        );
        let e = interface_with_address(ip("192.0.2.201")).unwrap_err();
        assert_eq!(e.to_string(), "no interface has the address 192.0.2.201");
    }

    #[test]
    fn link_speed_is_none_without_one() {
        // Loopback has no link speed; an interface that does not exist has none either.
        assert_eq!(link_speed_mbps("lo"), None);
        assert_eq!(link_speed_mbps("nosuch-if0"), None);
        assert_eq!(link_speed_mbps(""), None);
        assert_eq!(link_speed_mbps("a-name-longer-than-ifnamsiz"), None);
    }
}
