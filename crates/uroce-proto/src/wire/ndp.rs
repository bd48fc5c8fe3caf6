//! IPv6 Neighbor Discovery, the two messages address resolution needs (RFC 4861 §7.2):
//! Neighbor Solicitation (ICMPv6 type 135, §4.3) and Neighbor Advertisement (type 136,
//! §4.4), with the source / target link-layer address options for Ethernet (§4.6.1).
//!
//! A solicitation for an address goes to its solicited-node multicast group
//! (RFC 4291 §2.7.1) at the group's Ethernet multicast address (RFC 2464 §7); the owner
//! answers with a unicast advertisement. Every message carries the ICMPv6 checksum over
//! the IPv6 pseudo-header (RFC 8200 §8.1, RFC 4443 §2.3) and travels with hop limit 255,
//! which a receiver checks so that no off-link node can forge one (RFC 4861 §7.1).

use std::net::Ipv6Addr;

use super::ethernet::{self, EthernetRepr, ETHERTYPE_IPV6};
use super::ipv6::{self, Ipv6Repr};
use super::{be16, check_len, put16, WireError};

/// IPv6 next header value of ICMPv6.
pub const NEXT_HEADER_ICMPV6: u8 = 58;
/// ICMPv6 type of a Neighbor Solicitation.
pub const TYPE_NEIGHBOR_SOLICIT: u8 = 135;
/// ICMPv6 type of a Neighbor Advertisement.
pub const TYPE_NEIGHBOR_ADVERT: u8 = 136;
/// Option type of the Source Link-Layer Address option (RFC 4861 §4.6.1).
pub const OPT_SOURCE_LLADDR: u8 = 1;
/// Option type of the Target Link-Layer Address option (RFC 4861 §4.6.1).
pub const OPT_TARGET_LLADDR: u8 = 2;
/// The hop limit every Neighbor Discovery message is sent with and must arrive with.
pub const HOP_LIMIT: u8 = 255;
/// Length of a solicitation or advertisement without options.
pub const MESSAGE_LEN: usize = 24;
/// Length of a link-layer address option carrying an Ethernet address.
pub const LLADDR_OPTION_LEN: usize = 8;
/// The all-nodes multicast address, where an advertisement answering a solicitation from
/// the unspecified address goes (RFC 4861 §7.2.4).
pub const ALL_NODES: Ipv6Addr = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 1);

const FLAG_ROUTER: u8 = 0x80;
const FLAG_SOLICITED: u8 = 0x40;
const FLAG_OVERRIDE: u8 = 0x20;

mod field {
    use std::ops::Range;
    pub const TYPE: usize = 0;
    pub const CODE: usize = 1;
    pub const CHECKSUM: usize = 2;
    pub const FLAGS: usize = 4;
    pub const RESERVED: Range<usize> = 4..8;
    pub const TARGET: Range<usize> = 8..24;
    pub const OPTIONS: usize = 24;
}

/// The one error kind [`WireError`] offers for a field value that is well-formed but
/// unsupported or forbidden; kept in one place so a dedicated variant can replace it.
fn invalid(why: &'static str) -> WireError {
    WireError::InvalidRepr(why)
}

/// A zero-copy view of a Neighbor Solicitation or Advertisement: the whole ICMPv6
/// message (the IPv6 payload, exactly), since the checksum and the options need its end.
#[derive(Debug, Clone, Copy)]
pub struct Message<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Message<T> {
    /// Wraps a buffer without checking its length.
    pub fn new_unchecked(buffer: T) -> Self {
        Self { buffer }
    }

    /// Wraps a buffer, checking that the 24 fixed bytes are there (RFC 4861 §7.1.1:
    /// "ICMP length (derived from the IP length) is 24 or more octets").
    pub fn new_checked(buffer: T) -> Result<Self, WireError> {
        check_len(
            "ICMPv6 neighbor discovery message",
            buffer.as_ref(),
            MESSAGE_LEN,
            0,
        )?;
        Ok(Self { buffer })
    }

    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }

    /// ICMPv6 type: 135 or 136.
    pub fn msg_type(&self) -> u8 {
        self.b()[field::TYPE]
    }
    /// ICMPv6 code, 0 for both messages.
    pub fn code(&self) -> u8 {
        self.b()[field::CODE]
    }
    /// Checksum as found.
    pub fn checksum(&self) -> u16 {
        be16(self.b(), field::CHECKSUM)
    }
    /// Router flag (advertisement only).
    pub fn router(&self) -> bool {
        self.b()[field::FLAGS] & FLAG_ROUTER != 0
    }
    /// Solicited flag (advertisement only).
    pub fn solicited(&self) -> bool {
        self.b()[field::FLAGS] & FLAG_SOLICITED != 0
    }
    /// Override flag (advertisement only).
    pub fn override_flag(&self) -> bool {
        self.b()[field::FLAGS] & FLAG_OVERRIDE != 0
    }
    /// The target address: the address being resolved, or the one advertised.
    pub fn target(&self) -> Ipv6Addr {
        let mut a = [0u8; 16];
        a.copy_from_slice(&self.b()[field::TARGET]);
        Ipv6Addr::from(a)
    }
    /// The option bytes after the fixed part.
    pub fn options(&self) -> &[u8] {
        &self.b()[field::OPTIONS..]
    }
    /// True when the checksum verifies for a message from `src` to `dst`.
    pub fn verify_checksum(&self, src: &Ipv6Addr, dst: &Ipv6Addr) -> bool {
        icmpv6_checksum(src, dst, self.b()) == 0
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Message<T> {
    fn bm(&mut self) -> &mut [u8] {
        self.buffer.as_mut()
    }
    /// Sets the type.
    pub fn set_msg_type(&mut self, v: u8) {
        self.bm()[field::TYPE] = v
    }
    /// Sets the code.
    pub fn set_code(&mut self, v: u8) {
        self.bm()[field::CODE] = v
    }
    /// Sets the checksum field as given.
    pub fn set_checksum(&mut self, v: u16) {
        put16(self.bm(), field::CHECKSUM, v)
    }
    /// Sets the R, S and O flags and clears the reserved bits.
    pub fn set_flags(&mut self, router: bool, solicited: bool, override_flag: bool) {
        let b = self.bm();
        b[field::RESERVED].fill(0);
        b[field::FLAGS] = (u8::from(router) * FLAG_ROUTER)
            | (u8::from(solicited) * FLAG_SOLICITED)
            | (u8::from(override_flag) * FLAG_OVERRIDE);
    }
    /// Sets the target address.
    pub fn set_target(&mut self, a: &Ipv6Addr) {
        self.bm()[field::TARGET].copy_from_slice(&a.octets())
    }
    /// Computes and writes the checksum for a message from `src` to `dst`, over the whole
    /// buffer (which must end where the message ends).
    pub fn fill_checksum(&mut self, src: &Ipv6Addr, dst: &Ipv6Addr) {
        self.set_checksum(0);
        let c = icmpv6_checksum(src, dst, self.b());
        self.set_checksum(c);
    }
}

/// The ICMPv6 checksum (RFC 4443 §2.3): the complement of the one's complement sum of the
/// IPv6 pseudo-header (RFC 8200 §8.1: source, destination, 32-bit upper-layer length,
/// three zero bytes, next header 58) and of `msg`. Over a message whose checksum field is
/// correct the result is 0; over one with the field zeroed it is the value to write.
pub fn icmpv6_checksum(src: &Ipv6Addr, dst: &Ipv6Addr, msg: &[u8]) -> u16 {
    fn add(sum: &mut u64, b: &[u8]) {
        let mut pairs = b.chunks_exact(2);
        for p in &mut pairs {
            *sum += u64::from(u16::from_be_bytes([p[0], p[1]]));
        }
        if let [last] = pairs.remainder() {
            *sum += u64::from(u16::from_be_bytes([*last, 0]));
        }
    }
    let mut sum = 0u64;
    add(&mut sum, &src.octets());
    add(&mut sum, &dst.octets());
    let len = msg.len() as u64;
    sum += (len >> 16) + (len & 0xffff);
    sum += u64::from(NEXT_HEADER_ICMPV6);
    add(&mut sum, msg);
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// The solicited-node multicast address of `addr` (RFC 4291 §2.7.1): `ff02::1:ff00:0/104`
/// followed by the low 24 bits of the address.
pub fn solicited_node(addr: &Ipv6Addr) -> Ipv6Addr {
    let o = addr.octets();
    let mut a = [0u8; 16];
    a[0] = 0xff;
    a[1] = 0x02;
    a[11] = 0x01;
    a[12] = 0xff;
    a[13..].copy_from_slice(&o[13..]);
    Ipv6Addr::from(a)
}

/// True when `addr` is a solicited-node multicast address.
pub fn is_solicited_node(addr: &Ipv6Addr) -> bool {
    let o = addr.octets();
    o[..13] == solicited_node(&Ipv6Addr::UNSPECIFIED).octets()[..13]
}

/// The Ethernet address an IPv6 multicast group is sent to (RFC 2464 §7): `33:33`
/// followed by the group's last four bytes; `33:33:ff:xx:xx:xx` for a solicited-node group.
pub fn multicast_mac(group: &Ipv6Addr) -> [u8; 6] {
    let o = group.octets();
    [0x33, 0x33, o[12], o[13], o[14], o[15]]
}

/// Plain representation of a Neighbor Solicitation or Advertisement. Only the Ethernet
/// link-layer address options are represented; other options are skipped on parse.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NdpRepr {
    /// Neighbor Solicitation (RFC 4861 §4.3).
    Solicit {
        /// The address being resolved.
        target: Ipv6Addr,
        /// The Source Link-Layer Address option: the solicitor's MAC (absent when the
        /// solicitation comes from the unspecified address, §4.3).
        source_mac: Option<[u8; 6]>,
    },
    /// Neighbor Advertisement (RFC 4861 §4.4).
    Advert {
        /// R: the sender is a router.
        router: bool,
        /// S: sent in response to a solicitation.
        solicited: bool,
        /// O: the advertisement should override an existing cache entry.
        override_flag: bool,
        /// The address advertised.
        target: Ipv6Addr,
        /// The Target Link-Layer Address option: the target's MAC.
        target_mac: Option<[u8; 6]>,
    },
}

impl NdpRepr {
    /// The target address of either message.
    pub fn target(&self) -> Ipv6Addr {
        match *self {
            Self::Solicit { target, .. } | Self::Advert { target, .. } => target,
        }
    }

    /// The link-layer address the message carries (source for a solicitation, target for
    /// an advertisement).
    pub fn lladdr(&self) -> Option<[u8; 6]> {
        match *self {
            Self::Solicit { source_mac, .. } => source_mac,
            Self::Advert { target_mac, .. } => target_mac,
        }
    }

    /// The IPv6 header a Neighbor Discovery message from `src` to `dst` travels under.
    pub fn ip_repr(src: Ipv6Addr, dst: Ipv6Addr) -> Ipv6Repr {
        Ipv6Repr {
            src,
            dst,
            traffic_class: 0,
            flow_label: 0,
            next_header: NEXT_HEADER_ICMPV6,
            hop_limit: HOP_LIMIT,
        }
    }

    /// Parses and validates a message that arrived under `ip` (RFC 4861 §7.1.1 for a
    /// solicitation, §7.1.2 for an advertisement): hop limit 255, a good checksum, code 0,
    /// a target that is not multicast, every option of non-zero length; a solicitation
    /// from the unspecified address must go to a solicited-node group and carry no source
    /// address option; an advertisement to a multicast group must not be solicited.
    /// `msg` must hold exactly the ICMPv6 message.
    pub fn parse<T: AsRef<[u8]>>(ip: &Ipv6Repr, msg: &Message<T>) -> Result<Self, WireError> {
        if ip.next_header != NEXT_HEADER_ICMPV6 {
            return Err(invalid("IPv6 next header is not ICMPv6 (58)"));
        }
        if ip.hop_limit != HOP_LIMIT {
            return Err(invalid(
                "neighbor discovery message with IPv6 hop limit other than 255 (RFC 4861 §7.1)",
            ));
        }
        let kind = msg.msg_type();
        if kind != TYPE_NEIGHBOR_SOLICIT && kind != TYPE_NEIGHBOR_ADVERT {
            return Err(invalid(
                "ICMPv6 type is neither neighbor solicitation (135) nor advertisement (136)",
            ));
        }
        if !msg.verify_checksum(&ip.src, &ip.dst) {
            return Err(invalid("ICMPv6 checksum does not verify (RFC 4443 §2.3)"));
        }
        if msg.code() != 0 {
            return Err(invalid("neighbor discovery ICMPv6 code is not 0"));
        }
        let target = msg.target();
        if target.is_multicast() {
            return Err(invalid("neighbor discovery target address is multicast"));
        }
        let want = if kind == TYPE_NEIGHBOR_SOLICIT {
            OPT_SOURCE_LLADDR
        } else {
            OPT_TARGET_LLADDR
        };
        let lladdr = find_lladdr(msg.options(), want)?;
        if kind == TYPE_NEIGHBOR_SOLICIT {
            if ip.src.is_unspecified() {
                if !is_solicited_node(&ip.dst) {
                    return Err(invalid(
                        "neighbor solicitation from :: not sent to a solicited-node group",
                    ));
                }
                if lladdr.is_some() {
                    return Err(invalid(
                        "neighbor solicitation from :: carries a source link-layer address",
                    ));
                }
            }
            Ok(Self::Solicit {
                target,
                source_mac: lladdr,
            })
        } else {
            if ip.dst.is_multicast() && msg.solicited() {
                return Err(invalid(
                    "solicited neighbor advertisement sent to a multicast address",
                ));
            }
            Ok(Self::Advert {
                router: msg.router(),
                solicited: msg.solicited(),
                override_flag: msg.override_flag(),
                target,
                target_mac: lladdr,
            })
        }
    }

    /// Bytes the message takes: 24, plus 8 for a link-layer address option.
    pub fn buffer_len(&self) -> usize {
        MESSAGE_LEN + self.lladdr().map_or(0, |_| LLADDR_OPTION_LEN)
    }

    /// Writes the message, checksum included, for a packet from `src` to `dst`.
    pub fn emit(&self, src: &Ipv6Addr, dst: &Ipv6Addr, buf: &mut [u8]) -> Result<(), WireError> {
        let len = self.buffer_len();
        if buf.len() < len {
            return Err(WireError::BufferTooSmall {
                need: len,
                have: buf.len(),
            });
        }
        if self.target().is_multicast() {
            return Err(invalid("neighbor discovery target address is multicast"));
        }
        let mut m = Message::new_unchecked(&mut buf[..len]);
        m.set_code(0);
        m.set_target(&self.target());
        let opt = match *self {
            Self::Solicit { source_mac, .. } => {
                if src.is_unspecified() && source_mac.is_some() {
                    return Err(invalid(
                        "a neighbor solicitation from :: must not carry a source link-layer address",
                    ));
                }
                m.set_msg_type(TYPE_NEIGHBOR_SOLICIT);
                m.set_flags(false, false, false);
                OPT_SOURCE_LLADDR
            }
            Self::Advert {
                router,
                solicited,
                override_flag,
                ..
            } => {
                if solicited && dst.is_multicast() {
                    return Err(invalid(
                        "a solicited neighbor advertisement must not go to a multicast address",
                    ));
                }
                m.set_msg_type(TYPE_NEIGHBOR_ADVERT);
                m.set_flags(router, solicited, override_flag);
                OPT_TARGET_LLADDR
            }
        };
        if let Some(mac) = self.lladdr() {
            let o = &mut m.bm()[field::OPTIONS..field::OPTIONS + LLADDR_OPTION_LEN];
            o[0] = opt;
            o[1] = (LLADDR_OPTION_LEN / 8) as u8;
            o[2..].copy_from_slice(&mac);
        }
        m.fill_checksum(src, dst);
        Ok(())
    }
}

/// Walks the options (RFC 4861 §4.6: type, length in units of 8 bytes, value) and
/// returns the Ethernet address in the first option of type `want`. A zero length or an
/// option running past the end is an error; unknown options are skipped (§4.6); an
/// address option that does not hold exactly one Ethernet address is an error.
fn find_lladdr(mut opts: &[u8], want: u8) -> Result<Option<[u8; 6]>, WireError> {
    let mut found = None;
    let mut at = field::OPTIONS;
    while !opts.is_empty() {
        check_len("neighbor discovery option", opts, 2, at)?;
        let len = usize::from(opts[1]) * 8;
        if len == 0 {
            return Err(invalid(
                "neighbor discovery option of length 0 (RFC 4861 §4.6)",
            ));
        }
        check_len("neighbor discovery option", opts, len, at)?;
        if opts[0] == want && found.is_none() {
            if len != LLADDR_OPTION_LEN {
                return Err(invalid(
                    "link-layer address option does not hold one Ethernet address",
                ));
            }
            let mut mac = [0u8; 6];
            mac.copy_from_slice(&opts[2..8]);
            found = Some(mac);
        }
        opts = &opts[len..];
        at += len;
    }
    Ok(found)
}

/// A Neighbor Discovery message with the headers it came under.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct NdpFrame {
    /// The Ethernet header.
    pub eth: EthernetRepr,
    /// The IPv6 header.
    pub ip: Ipv6Repr,
    /// The message.
    pub ndp: NdpRepr,
}

/// Parses an Ethernet frame carrying IPv6 (an 802.1Q tag is allowed) whose payload is a
/// Neighbor Solicitation or Advertisement directly after the fixed header. Bytes beyond
/// the IPv6 payload length (Ethernet padding) are ignored.
pub fn parse_frame(frame: &[u8]) -> Result<NdpFrame, WireError> {
    let f = ethernet::Frame::new_checked(frame)?;
    let eth = EthernetRepr::parse(&f);
    if eth.ethertype != ETHERTYPE_IPV6 {
        return Err(WireError::UnsupportedEthertype {
            ethertype: eth.ethertype,
            offset: f.header_len() - 2,
        });
    }
    let at = f.header_len();
    let h = ipv6::Header::new_checked(&frame[at..]).map_err(|e| e.shifted(at))?;
    let ip = Ipv6Repr::parse(&h);
    let len = usize::from(h.payload_len());
    let start = at + ipv6::HEADER_LEN;
    if frame.len() - start < len {
        return Err(WireError::BadIpLength {
            field: len,
            offset: at + 4,
            why: "IPv6 payload length runs past the end of the frame",
        });
    }
    if ip.next_header != NEXT_HEADER_ICMPV6 {
        return Err(invalid("IPv6 next header is not ICMPv6 (58)"));
    }
    let m = Message::new_checked(&frame[start..start + len]).map_err(|e| e.shifted(start))?;
    let ndp = NdpRepr::parse(&ip, &m).map_err(|e| e.shifted(start))?;
    Ok(NdpFrame { eth, ip, ndp })
}

fn emit_frame(
    eth: &EthernetRepr,
    ip: &Ipv6Repr,
    ndp: &NdpRepr,
    buf: &mut [u8],
) -> Result<usize, WireError> {
    let eh = eth.buffer_len();
    let len = eh + ipv6::HEADER_LEN + ndp.buffer_len();
    if buf.len() < len {
        return Err(WireError::BufferTooSmall {
            need: len,
            have: buf.len(),
        });
    }
    eth.emit(buf)?;
    ip.emit(&mut buf[eh..], ndp.buffer_len())?;
    ndp.emit(&ip.src, &ip.dst, &mut buf[eh + ipv6::HEADER_LEN..len])?;
    Ok(len)
}

/// Writes a whole Ethernet + IPv6 + Neighbor Solicitation frame from `my_mac`/`my_ip`
/// asking for `target`: to its solicited-node group and that group's multicast MAC, with
/// a source link-layer address option (RFC 4861 §7.2.2). Returns the frame length (86).
pub fn emit_solicit_frame(
    my_mac: [u8; 6],
    my_ip: Ipv6Addr,
    target: Ipv6Addr,
    buf: &mut [u8],
) -> Result<usize, WireError> {
    let group = solicited_node(&target);
    let eth = EthernetRepr {
        dst: multicast_mac(&group),
        src: my_mac,
        vlan: None,
        ethertype: ETHERTYPE_IPV6,
    };
    let ndp = NdpRepr::Solicit {
        target,
        source_mac: (!my_ip.is_unspecified()).then_some(my_mac),
    };
    emit_frame(&eth, &NdpRepr::ip_repr(my_ip, group), &ndp, buf)
}

/// Writes the whole Ethernet + IPv6 + Neighbor Advertisement frame that answers the
/// solicitation `ns` for one of our addresses, from `my_mac` (RFC 4861 §7.2.4): the
/// target is the solicited address (also the IPv6 source), override set, a target
/// link-layer address option; to the solicitor with the solicited flag, or to all-nodes
/// without it when the solicitation came from the unspecified address. The Ethernet
/// destination is the solicitor's source link-layer address option, else the frame's
/// source. Returns the frame length (86).
pub fn emit_advert_frame(
    my_mac: [u8; 6],
    ns: &NdpFrame,
    buf: &mut [u8],
) -> Result<usize, WireError> {
    let NdpRepr::Solicit { target, source_mac } = ns.ndp else {
        return Err(invalid("an advertisement answers a neighbor solicitation"));
    };
    let (dst_ip, dst_mac, solicited) = if ns.ip.src.is_unspecified() {
        (ALL_NODES, multicast_mac(&ALL_NODES), false)
    } else {
        (ns.ip.src, source_mac.unwrap_or(ns.eth.src), true)
    };
    let eth = EthernetRepr {
        dst: dst_mac,
        src: my_mac,
        vlan: ns.eth.vlan,
        ethertype: ETHERTYPE_IPV6,
    };
    let ndp = NdpRepr::Advert {
        router: false,
        solicited,
        override_flag: true,
        target,
        target_mac: Some(my_mac),
    };
    emit_frame(&eth, &NdpRepr::ip_repr(target, dst_ip), &ndp, buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    const A_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x0a];
    const B_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x0b];

    fn a_ip() -> Ipv6Addr {
        "fd00:db8::1".parse().unwrap()
    }
    fn b_ip() -> Ipv6Addr {
        "fd00:db8::2".parse().unwrap()
    }

    /// Captured with `tcpdump -xx` on a veth (Linux 6.x, `nodad` addresses): fd00:db8::1
    /// asks who has fd00:db8::2, and the answer.
    const NS: [u8; 86] = [
        0x33, 0x33, 0xff, 0x00, 0x00, 0x02, 0x02, 0x00, 0x00, 0x00, 0x00, 0x0a, 0x86, 0xdd, 0x60,
        0x00, 0x00, 0x00, 0x00, 0x20, 0x3a, 0xff, 0xfd, 0x00, 0x0d, 0xb8, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0xff, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x01, 0xff, 0x00, 0x00, 0x02, 0x87, 0x00, 0x62, 0x1e, 0x00, 0x00,
        0x00, 0x00, 0xfd, 0x00, 0x0d, 0xb8, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x02, 0x01, 0x01, 0x02, 0x00, 0x00, 0x00, 0x00, 0x0a,
    ];
    const NA: [u8; 86] = [
        0x02, 0x00, 0x00, 0x00, 0x00, 0x0a, 0x02, 0x00, 0x00, 0x00, 0x00, 0x0b, 0x86, 0xdd, 0x60,
        0x00, 0x00, 0x00, 0x00, 0x20, 0x3a, 0xff, 0xfd, 0x00, 0x0d, 0xb8, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x02, 0xfd, 0x00, 0x0d, 0xb8, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x88, 0x00, 0xf3, 0x68, 0x60, 0x00,
        0x00, 0x00, 0xfd, 0x00, 0x0d, 0xb8, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x02, 0x02, 0x01, 0x02, 0x00, 0x00, 0x00, 0x00, 0x0b,
    ];

    #[test]
    fn solicited_node_group_and_its_mac() {
        let a: Ipv6Addr = "2001:db8::1:2:3:4a5b:6c7d".parse().unwrap();
        let g = solicited_node(&a);
        assert_eq!(g, "ff02::1:ff5b:6c7d".parse::<Ipv6Addr>().unwrap());
        assert!(is_solicited_node(&g));
        assert!(!is_solicited_node(&a));
        assert!(!is_solicited_node(&ALL_NODES));
        assert_eq!(multicast_mac(&g), [0x33, 0x33, 0xff, 0x5b, 0x6c, 0x7d]);
        assert_eq!(multicast_mac(&ALL_NODES), [0x33, 0x33, 0, 0, 0, 1]);
    }

    #[test]
    fn parses_linux_solicitation_and_advertisement() {
        let ns = parse_frame(&NS).unwrap();
        assert_eq!(ns.eth.dst, [0x33, 0x33, 0xff, 0, 0, 2]);
        assert_eq!(ns.ip.src, a_ip());
        assert_eq!(ns.ip.dst, solicited_node(&b_ip()));
        assert_eq!(
            ns.ndp,
            NdpRepr::Solicit {
                target: b_ip(),
                source_mac: Some(A_MAC)
            }
        );
        let na = parse_frame(&NA).unwrap();
        assert_eq!(
            na.ndp,
            NdpRepr::Advert {
                router: false,
                solicited: true,
                override_flag: true,
                target: b_ip(),
                target_mac: Some(B_MAC)
            }
        );
    }

    #[test]
    fn emits_what_linux_emits() {
        let mut buf = [0u8; 128];
        let n = emit_solicit_frame(A_MAC, a_ip(), b_ip(), &mut buf).unwrap();
        assert_eq!(&buf[..n], &NS[..]);
        let ns = parse_frame(&NS).unwrap();
        let n = emit_advert_frame(B_MAC, &ns, &mut buf).unwrap();
        assert_eq!(&buf[..n], &NA[..]);
        assert!(matches!(
            emit_solicit_frame(A_MAC, a_ip(), b_ip(), &mut buf[..85]),
            Err(WireError::BufferTooSmall { need: 86, have: 85 })
        ));
        let na = parse_frame(&NA).unwrap();
        assert!(emit_advert_frame(B_MAC, &na, &mut buf).is_err());
    }

    #[test]
    fn advert_to_a_solicitation_from_unspecified_goes_to_all_nodes() {
        let mut buf = [0u8; 128];
        let n = emit_solicit_frame(A_MAC, Ipv6Addr::UNSPECIFIED, b_ip(), &mut buf).unwrap();
        assert_eq!(n, 14 + 40 + 24);
        let ns = parse_frame(&buf[..n]).unwrap();
        assert_eq!(ns.ndp.lladdr(), None);
        let n = emit_advert_frame(B_MAC, &ns, &mut buf).unwrap();
        let na = parse_frame(&buf[..n]).unwrap();
        assert_eq!(na.ip.dst, ALL_NODES);
        assert_eq!(na.eth.dst, [0x33, 0x33, 0, 0, 0, 1]);
        assert!(matches!(
            na.ndp,
            NdpRepr::Advert {
                solicited: false,
                override_flag: true,
                ..
            }
        ));
    }

    #[test]
    fn checksum_is_zero_over_a_good_message_and_catches_flips() {
        let ip = Ipv6Repr::parse(&ipv6::Header::new_checked(&NS[14..]).unwrap());
        assert_eq!(icmpv6_checksum(&ip.src, &ip.dst, &NS[54..]), 0);
        for i in 54..86 {
            let mut f = NS;
            f[i] ^= 0x10;
            assert!(parse_frame(&f).is_err(), "flipped byte {i}");
        }
        // The pseudo-header counts: the same message from another source does not verify.
        let mut f = NS;
        f[37] = 3;
        assert!(parse_frame(&f).is_err());
        // An odd-length message sums with a zero pad byte.
        // (one more byte of length, one less in the complement).
        assert_eq!(
            icmpv6_checksum(&ip.src, &ip.dst, &[1]),
            icmpv6_checksum(&ip.src, &ip.dst, &[1, 0]).wrapping_add(1)
        );
    }

    /// Rebuilds `frame` with a new message (checksum recomputed) and hop limit.
    fn with_message(frame: &[u8], hop: u8, edit: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
        let mut msg = frame[54..].to_vec();
        edit(&mut msg);
        let mut f = frame[..54].to_vec();
        f[19] = msg.len() as u8;
        f[21] = hop;
        let ip = Ipv6Repr::parse(&ipv6::Header::new_checked(&f[14..]).unwrap());
        Message::new_unchecked(&mut msg[..]).fill_checksum(&ip.src, &ip.dst);
        f.extend_from_slice(&msg);
        f
    }

    #[test]
    fn rfc4861_validity_checks() {
        // The helper itself produces a valid frame.
        assert!(parse_frame(&with_message(&NS, 255, |_| {})).is_ok());
        let bad: Vec<(&str, &str, Vec<u8>)> = vec![
            ("hop limit 64", "hop limit", with_message(&NS, 64, |_| {})),
            ("code 1", "code", with_message(&NS, 255, |m| m[1] = 1)),
            (
                "type 134",
                "neither",
                with_message(&NS, 255, |m| m[0] = 134),
            ),
            (
                "multicast target",
                "target address is multicast",
                with_message(&NS, 255, |m| m[8] = 0xff),
            ),
            (
                "zero-length option",
                "length 0",
                with_message(&NS, 255, |m| m[25] = 0),
            ),
            (
                "option past the end",
                "truncated",
                with_message(&NS, 255, |m| m[25] = 2),
            ),
            (
                "short message",
                "truncated",
                with_message(&NS, 255, |m| m.truncate(20)),
            ),
            (
                "two-unit lladdr option",
                "one Ethernet address",
                with_message(&NS, 255, |m| {
                    m[25] = 2;
                    m.extend_from_slice(&[0; 8]);
                }),
            ),
            (
                "solicited advertisement to a multicast group",
                "multicast address",
                {
                    let mut na = NA;
                    na[38] = 0xff;
                    with_message(&na, 255, |_| {})
                },
            ),
        ];
        for (what, why, f) in bad {
            let e = parse_frame(&f).expect_err(what).to_string();
            assert!(e.contains(why), "{what}: {e}");
        }
        // Unknown options are skipped, the address option after them is still found.
        let f = with_message(&NS, 255, |m| {
            let opt = m.split_off(24);
            m.extend_from_slice(&[14, 1, 0, 0, 0, 0, 0, 0]);
            m.extend_from_slice(&opt);
        });
        assert_eq!(parse_frame(&f).unwrap().ndp.lladdr(), Some(A_MAC));
        // No option at all is fine for a solicitation from an address.
        let f = with_message(&NS, 255, |m| m.truncate(24));
        assert_eq!(parse_frame(&f).unwrap().ndp.lladdr(), None);
    }

    #[test]
    fn solicitation_from_unspecified_rules() {
        // From :: with a source lladdr option: invalid.
        let mut f = NS;
        f[22..38].fill(0);
        let f = with_message(&f, 255, |_| {});
        assert!(parse_frame(&f).is_err());
        // From :: to a unicast address: invalid.
        let mut f = NS;
        f[22..38].fill(0);
        f[38..54].copy_from_slice(&b_ip().octets());
        let f = with_message(&f, 255, |m| m.truncate(24));
        assert!(parse_frame(&f).is_err());
        let ndp = NdpRepr::Solicit {
            target: b_ip(),
            source_mac: Some(A_MAC),
        };
        let mut b = [0u8; 32];
        assert!(ndp
            .emit(&Ipv6Addr::UNSPECIFIED, &solicited_node(&b_ip()), &mut b)
            .is_err());
    }

    #[test]
    fn truncation_and_foreign_frames_never_panic() {
        for n in 0..NS.len() {
            assert!(parse_frame(&NS[..n]).is_err(), "{n} bytes");
        }
        assert!(matches!(
            parse_frame(&NS[..80]),
            Err(WireError::BadIpLength { field: 32, .. })
        ));
        let mut f = NS;
        f[20] = 17;
        assert!(parse_frame(&f).is_err());
        let mut f = NS;
        f[12] = 0x08;
        f[13] = 0x00;
        assert!(matches!(
            parse_frame(&f),
            Err(WireError::UnsupportedEthertype { .. })
        ));
        // Trailing padding after the IPv6 payload is ignored.
        let mut f = NS.to_vec();
        f.extend_from_slice(&[0; 10]);
        assert!(parse_frame(&f).is_ok());
    }

    #[test]
    fn view_accessors() {
        let m = Message::new_checked(&NA[54..]).unwrap();
        assert_eq!(m.msg_type(), TYPE_NEIGHBOR_ADVERT);
        assert!(m.solicited() && m.override_flag() && !m.router());
        assert_eq!(m.target(), b_ip());
        assert_eq!(m.options().len(), 8);
        assert_eq!(m.checksum(), 0xf368);
        assert!(Message::new_checked(&NA[54..77]).is_err());
    }
}
