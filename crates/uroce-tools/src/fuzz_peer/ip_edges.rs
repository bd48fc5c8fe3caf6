//! IP / UDP header edges of `uroce fuzz-peer` ([`IpEdge`]): a whole Ethernet frame around
//! a valid RoCE packet with one header broken or unusual, the ICRC right for the headers
//! as sent; the verdict each edge calls for is `verdict::ip_edge_expect`.

use std::net::IpAddr;

use uroce::wire;

use super::mutate::{frame_of, IpEdge, Target};

/// RFC 1071 checksum of an IPv4 header.
fn ipv4_checksum(h: &[u8]) -> u16 {
    !(ones_sum(0, h) as u16)
}

/// The Internet checksum (RFC 1071) of `data`, folded, not complemented, added to `sum`.
pub(crate) fn ones_sum(mut sum: u32, data: &[u8]) -> u32 {
    for c in data.chunks(2) {
        sum += u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]));
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    sum
}

/// The UDP checksum of `udp` (header, checksum field zero, and payload) between `src`
/// and `dst` (RFC 768, RFC 8200 §8.1 pseudo-headers); 0 is sent as 0xffff.
fn udp_checksum(src: IpAddr, dst: IpAddr, udp: &[u8]) -> u16 {
    let mut pseudo = Vec::with_capacity(40);
    match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            pseudo.extend_from_slice(&s.octets());
            pseudo.extend_from_slice(&d.octets());
            pseudo.extend_from_slice(&[0, 17]);
            pseudo.extend_from_slice(&(udp.len() as u16).to_be_bytes());
        }
        _ => {
            let v6 = |a: IpAddr| match a {
                IpAddr::V4(a) => a.to_ipv6_mapped().octets(),
                IpAddr::V6(a) => a.octets(),
            };
            pseudo.extend_from_slice(&v6(src));
            pseudo.extend_from_slice(&v6(dst));
            pseudo.extend_from_slice(&(udp.len() as u32).to_be_bytes());
            pseudo.extend_from_slice(&[0, 0, 0, 17]);
        }
    }
    let c = !(ones_sum(ones_sum(0, &pseudo), udp) as u16);
    if c == 0 {
        0xffff
    } else {
        c
    }
}

/// A whole frame around `roce` with one IP / UDP edge, and whether the edge applies to
/// the peer's IP version (else the frame is left valid); the ICRC stays correct for the
/// headers as sent (RoCEv2 Annex A17.4.1: it masks IPv4 TTL, TOS and header checksum,
/// IPv6 traffic class, flow label and hop limit, and the UDP checksum).
pub(crate) fn ip_edge(t: &Target, roce: &[u8], edge: IpEdge) -> (Vec<u8>, bool) {
    use IpEdge as E;
    let mut f = frame_of(t, roce);
    let ip = wire::ethernet::HEADER_LEN;
    let v4 = matches!(t.src, IpAddr::V4(_));
    let ip_fixed = if v4 { 20 } else { 40 };
    if f.len() < ip + ip_fixed + 8 + 16 {
        return (f, false);
    }
    let applied = match edge {
        E::Options | E::MoreFragments | E::FragmentOffset | E::BadIpChecksum => v4,
        E::FlowLabel | E::NextHeader => !v4,
        _ => true,
    };
    if !applied {
        return (f, false);
    }
    if edge == E::Options {
        // Four bytes of options: NOP, NOP, NOP, end of list.
        f.splice(ip + 20..ip + 20, [1u8, 1, 1, 0]);
        f[ip] = 0x46;
        let total = (f.len() - ip) as u16;
        f[ip + 2..ip + 4].copy_from_slice(&total.to_be_bytes());
    }
    let ihl = if v4 {
        usize::from(f[ip] & 0x0f) * 4
    } else {
        40
    };
    let udp = ip + ihl;
    // The IP length field: IPv4 total length, IPv6 payload length.
    let len_at = if v4 { ip + 2 } else { ip + 4 };
    let add_len = |f: &mut Vec<u8>, d: i32| {
        let v = (i32::from(u16::from_be_bytes([f[len_at], f[len_at + 1]])) + d) as u16;
        f[len_at..len_at + 2].copy_from_slice(&v.to_be_bytes());
    };
    // The traffic class byte (IPv4 TOS; IPv6 across the first two bytes).
    let set_tc = |f: &mut Vec<u8>, tc: u8| {
        if v4 {
            f[ip + 1] = tc;
        } else {
            f[ip] = 0x60 | (tc >> 4);
            f[ip + 1] = (f[ip + 1] & 0x0f) | (tc << 4);
        }
    };
    let hops = if v4 { ip + 8 } else { ip + 7 };
    match edge {
        E::TtlZero | E::HopLimitZero => f[hops] = 0,
        E::TtlOne => f[hops] = 1,
        E::MoreFragments => f[ip + 6] = 0x20,
        E::FragmentOffset => {
            f[ip + 6] = 0x00;
            f[ip + 7] = 0x10;
        }
        E::TotalLenLong => add_len(&mut f, 64),
        E::TotalLenShort => add_len(&mut f, -8),
        E::UdpLenShort | E::UdpLenLong => {
            let d: i32 = if edge == E::UdpLenShort { -4 } else { 16 };
            let v = (i32::from(u16::from_be_bytes([f[udp + 4], f[udp + 5]])) + d) as u16;
            f[udp + 4..udp + 6].copy_from_slice(&v.to_be_bytes());
        }
        E::BadUdpChecksum => f[udp + 6..udp + 8].copy_from_slice(&[0x12, 0x34]),
        E::SourcePort4791 => f[udp..udp + 2].copy_from_slice(&4791u16.to_be_bytes()),
        E::WrongDstPort => f[udp + 2..udp + 4].copy_from_slice(&4792u16.to_be_bytes()),
        E::Trailer => f.extend_from_slice(&[0u8; 18]),
        E::Dscp => set_tc(&mut f, 46 << 2),
        E::EcnEct0 => set_tc(&mut f, 0b10),
        E::EcnEct1 => set_tc(&mut f, 0b01),
        E::EcnCe => set_tc(&mut f, 0b11),
        E::FlowLabel => {
            f[ip + 1] = (f[ip + 1] & 0xf0) | 0x0a;
            f[ip + 2] = 0xbc;
            f[ip + 3] = 0xde;
        }
        E::NextHeader => f[ip + 6] = 59,
        E::Options | E::BadIpChecksum | E::GoodUdpChecksum => {}
    }
    // The ICRC over the headers as they now are (the trailer is not part of it).
    let end = if edge == E::Trailer {
        f.len() - 18
    } else {
        f.len()
    };
    let bth_at = udp + 8;
    let icrc = wire::icrc::compute(&f[ip..udp], &f[udp..bth_at], &f[bth_at..end - 4]);
    f[end - 4..end].copy_from_slice(&icrc.to_le_bytes());
    if edge == E::GoodUdpChecksum {
        f[udp + 6..udp + 8].copy_from_slice(&[0, 0]);
        let c = udp_checksum(t.src, t.dst, &f[udp..end]);
        f[udp + 6..udp + 8].copy_from_slice(&c.to_be_bytes());
    }
    if v4 {
        f[ip + 10..ip + 12].copy_from_slice(&[0, 0]);
        let c = ipv4_checksum(&f[ip..udp]);
        f[ip + 10..ip + 12].copy_from_slice(&c.to_be_bytes());
        if edge == E::BadIpChecksum {
            f[ip + 10] ^= 0x5a;
        }
    }
    (f, true)
}
