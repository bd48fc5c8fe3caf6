//! ARP for Ethernet and IPv4 (RFC 826), as the AF_XDP datapath needs it to find a peer's
//! (or its gateway's) MAC address: a request is broadcast, the owner of the address
//! answers with a unicast reply.
//!
//! Only the Ethernet/IPv4 combination is accepted: hardware type 1 with 6-byte addresses,
//! protocol type 0x0800 with 4-byte addresses. Any other combination is a [`WireError`].

use std::net::Ipv4Addr;

use super::ethernet::{self, EthernetRepr, ETHERTYPE_IPV4};
use super::{be16, check_len, put16, WireError};

/// Ethertype of ARP.
pub const ETHERTYPE_ARP: u16 = 0x0806;
/// ARP hardware type of Ethernet (RFC 826 `ar$hrd`, IANA "Hardware Types").
pub const HTYPE_ETHERNET: u16 = 1;
/// Length of an Ethernet/IPv4 ARP packet.
pub const PACKET_LEN: usize = 28;
/// The Ethernet broadcast address, where requests go.
pub const BROADCAST: [u8; 6] = [0xff; 6];
/// Shortest Ethernet frame without its FCS; shorter frames are padded with zeros.
pub const MIN_FRAME_LEN: usize = 60;

/// `ar$op` of a request.
const OP_REQUEST: u16 = 1;
/// `ar$op` of a reply.
const OP_REPLY: u16 = 2;

mod field {
    use std::ops::Range;
    pub const HTYPE: usize = 0;
    pub const PTYPE: usize = 2;
    pub const HLEN: usize = 4;
    pub const PLEN: usize = 5;
    pub const OPER: usize = 6;
    pub const SHA: Range<usize> = 8..14;
    pub const SPA: Range<usize> = 14..18;
    pub const THA: Range<usize> = 18..24;
    pub const TPA: Range<usize> = 24..28;
}

/// The one error kind [`WireError`] offers for a field value that is well-formed but
/// unsupported or forbidden; kept in one place so a dedicated variant can replace it.
fn unsupported(why: &'static str) -> WireError {
    WireError::InvalidRepr(why)
}

/// A zero-copy view of an ARP packet (the Ethernet payload).
#[derive(Debug, Clone, Copy)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wraps a buffer without checking its length.
    pub fn new_unchecked(buffer: T) -> Self {
        Self { buffer }
    }

    /// Wraps a buffer, checking that the 28 bytes of an Ethernet/IPv4 ARP packet are
    /// there (the address lengths are checked by [`ArpRepr::parse`]).
    pub fn new_checked(buffer: T) -> Result<Self, WireError> {
        check_len("ARP packet", buffer.as_ref(), PACKET_LEN, 0)?;
        Ok(Self { buffer })
    }

    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }

    /// Hardware address space (`ar$hrd`), 1 for Ethernet.
    pub fn hardware_type(&self) -> u16 {
        be16(self.b(), field::HTYPE)
    }
    /// Protocol address space (`ar$pro`), an ethertype: 0x0800 for IPv4.
    pub fn protocol_type(&self) -> u16 {
        be16(self.b(), field::PTYPE)
    }
    /// Hardware address length (`ar$hln`), 6 for Ethernet.
    pub fn hardware_len(&self) -> u8 {
        self.b()[field::HLEN]
    }
    /// Protocol address length (`ar$pln`), 4 for IPv4.
    pub fn protocol_len(&self) -> u8 {
        self.b()[field::PLEN]
    }
    /// Operation (`ar$op`): 1 request, 2 reply.
    pub fn operation(&self) -> u16 {
        be16(self.b(), field::OPER)
    }
    /// Sender hardware address (`ar$sha`).
    pub fn sender_mac(&self) -> [u8; 6] {
        mac(&self.b()[field::SHA])
    }
    /// Sender protocol address (`ar$spa`).
    pub fn sender_ip(&self) -> Ipv4Addr {
        ipv4(&self.b()[field::SPA])
    }
    /// Target hardware address (`ar$tha`); meaningless in a request.
    pub fn target_mac(&self) -> [u8; 6] {
        mac(&self.b()[field::THA])
    }
    /// Target protocol address (`ar$tpa`).
    pub fn target_ip(&self) -> Ipv4Addr {
        ipv4(&self.b()[field::TPA])
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    fn bm(&mut self) -> &mut [u8] {
        self.buffer.as_mut()
    }
    /// Sets `ar$hrd`.
    pub fn set_hardware_type(&mut self, v: u16) {
        put16(self.bm(), field::HTYPE, v)
    }
    /// Sets `ar$pro`.
    pub fn set_protocol_type(&mut self, v: u16) {
        put16(self.bm(), field::PTYPE, v)
    }
    /// Sets `ar$hln`.
    pub fn set_hardware_len(&mut self, v: u8) {
        self.bm()[field::HLEN] = v
    }
    /// Sets `ar$pln`.
    pub fn set_protocol_len(&mut self, v: u8) {
        self.bm()[field::PLEN] = v
    }
    /// Sets `ar$op`.
    pub fn set_operation(&mut self, v: u16) {
        put16(self.bm(), field::OPER, v)
    }
    /// Sets `ar$sha`.
    pub fn set_sender_mac(&mut self, m: [u8; 6]) {
        self.bm()[field::SHA].copy_from_slice(&m)
    }
    /// Sets `ar$spa`.
    pub fn set_sender_ip(&mut self, a: Ipv4Addr) {
        self.bm()[field::SPA].copy_from_slice(&a.octets())
    }
    /// Sets `ar$tha`.
    pub fn set_target_mac(&mut self, m: [u8; 6]) {
        self.bm()[field::THA].copy_from_slice(&m)
    }
    /// Sets `ar$tpa`.
    pub fn set_target_ip(&mut self, a: Ipv4Addr) {
        self.bm()[field::TPA].copy_from_slice(&a.octets())
    }
}

fn mac(b: &[u8]) -> [u8; 6] {
    let mut m = [0u8; 6];
    m.copy_from_slice(b);
    m
}

fn ipv4(b: &[u8]) -> Ipv4Addr {
    Ipv4Addr::new(b[0], b[1], b[2], b[3])
}

/// The ARP operation (RFC 826 `ar$op`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ArpOp {
    /// `ares_op$REQUEST` (1): who has `target_ip`?
    Request,
    /// `ares_op$REPLY` (2): `sender_ip` is at `sender_mac`.
    Reply,
}

/// Plain representation of an Ethernet/IPv4 ARP packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ArpRepr {
    /// Request or reply.
    pub op: ArpOp,
    /// Hardware address of the sender.
    pub sender_mac: [u8; 6],
    /// IPv4 address of the sender (0.0.0.0 in an RFC 5227 probe).
    pub sender_ip: Ipv4Addr,
    /// Hardware address of the target (zero in a request, RFC 826 leaves it unused).
    pub target_mac: [u8; 6],
    /// IPv4 address of the target.
    pub target_ip: Ipv4Addr,
}

impl ArpRepr {
    /// A request from `sender_mac`/`sender_ip` asking for `target_ip`.
    pub fn request(sender_mac: [u8; 6], sender_ip: Ipv4Addr, target_ip: Ipv4Addr) -> Self {
        Self {
            op: ArpOp::Request,
            sender_mac,
            sender_ip,
            target_mac: [0; 6],
            target_ip,
        }
    }

    /// The reply to `request` from the owner of its target address, `my_mac`
    /// (RFC 826 "Packet Reception": swap the fields, put in the local hardware address).
    pub fn reply_to(request: &ArpRepr, my_mac: [u8; 6]) -> Self {
        Self {
            op: ArpOp::Reply,
            sender_mac: my_mac,
            sender_ip: request.target_ip,
            target_mac: request.sender_mac,
            target_ip: request.sender_ip,
        }
    }

    /// Parses a checked view, refusing anything but Ethernet/IPv4 ARP requests and replies.
    pub fn parse<T: AsRef<[u8]>>(p: &Packet<T>) -> Result<Self, WireError> {
        if p.hardware_type() != HTYPE_ETHERNET {
            return Err(unsupported("ARP hardware type is not Ethernet (1)"));
        }
        if p.protocol_type() != ETHERTYPE_IPV4 {
            return Err(unsupported("ARP protocol type is not IPv4 (0x0800)"));
        }
        if p.hardware_len() != 6 {
            return Err(unsupported("ARP hardware address length is not 6"));
        }
        if p.protocol_len() != 4 {
            return Err(unsupported("ARP protocol address length is not 4"));
        }
        let op = match p.operation() {
            OP_REQUEST => ArpOp::Request,
            OP_REPLY => ArpOp::Reply,
            _ => {
                return Err(unsupported(
                    "ARP operation is neither request (1) nor reply (2)",
                ))
            }
        };
        Ok(Self {
            op,
            sender_mac: p.sender_mac(),
            sender_ip: p.sender_ip(),
            target_mac: p.target_mac(),
            target_ip: p.target_ip(),
        })
    }

    /// Bytes the packet takes (28).
    pub const fn buffer_len(&self) -> usize {
        PACKET_LEN
    }

    /// Writes the packet at the start of `buf`.
    pub fn emit(&self, buf: &mut [u8]) -> Result<(), WireError> {
        if buf.len() < PACKET_LEN {
            return Err(WireError::BufferTooSmall {
                need: PACKET_LEN,
                have: buf.len(),
            });
        }
        let mut p = Packet::new_unchecked(&mut buf[..PACKET_LEN]);
        p.set_hardware_type(HTYPE_ETHERNET);
        p.set_protocol_type(ETHERTYPE_IPV4);
        p.set_hardware_len(6);
        p.set_protocol_len(4);
        p.set_operation(match self.op {
            ArpOp::Request => OP_REQUEST,
            ArpOp::Reply => OP_REPLY,
        });
        p.set_sender_mac(self.sender_mac);
        p.set_sender_ip(self.sender_ip);
        p.set_target_mac(self.target_mac);
        p.set_target_ip(self.target_ip);
        Ok(())
    }

    /// The Ethernet header this packet travels under: from the sender, to the broadcast
    /// address for a request, to the target for a reply.
    pub fn ethernet(&self) -> EthernetRepr {
        EthernetRepr {
            dst: match self.op {
                ArpOp::Request => BROADCAST,
                ArpOp::Reply => self.target_mac,
            },
            src: self.sender_mac,
            vlan: None,
            ethertype: ETHERTYPE_ARP,
        }
    }

    /// Writes a whole untagged Ethernet frame (header, packet, zero padding up to the
    /// 60-byte minimum) and returns its length.
    pub fn emit_frame(&self, buf: &mut [u8]) -> Result<usize, WireError> {
        let eth = self.ethernet();
        let len = (eth.buffer_len() + PACKET_LEN).max(MIN_FRAME_LEN);
        if buf.len() < len {
            return Err(WireError::BufferTooSmall {
                need: len,
                have: buf.len(),
            });
        }
        eth.emit(buf)?;
        let h = eth.buffer_len();
        self.emit(&mut buf[h..])?;
        buf[h + PACKET_LEN..len].fill(0);
        Ok(len)
    }
}

/// Parses an Ethernet frame carrying ARP (an 802.1Q tag is allowed); returns the Ethernet
/// header and the packet. Bytes after the 28 ARP bytes (padding) are ignored.
pub fn parse_frame(frame: &[u8]) -> Result<(EthernetRepr, ArpRepr), WireError> {
    let f = ethernet::Frame::new_checked(frame)?;
    let eth = EthernetRepr::parse(&f);
    if eth.ethertype != ETHERTYPE_ARP {
        return Err(WireError::UnsupportedEthertype {
            ethertype: eth.ethertype,
            offset: f.header_len() - 2,
        });
    }
    let h = f.header_len();
    let p = Packet::new_checked(&frame[h..]).map_err(|e| e.shifted(h))?;
    Ok((eth, ArpRepr::parse(&p)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    const A_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x0a];
    const B_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x0b];

    /// Captured with `tcpdump -xx` on a veth: Linux 6.x asking who has 10.9.9.2, and
    /// the answer.
    const REQUEST: [u8; 42] = [
        0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02, 0x00, 0x00, 0x00, 0x00, 0x0a, 0x08, 0x06, 0x00,
        0x01, 0x08, 0x00, 0x06, 0x04, 0x00, 0x01, 0x02, 0x00, 0x00, 0x00, 0x00, 0x0a, 0x0a, 0x09,
        0x09, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x0a, 0x09, 0x09, 0x02,
    ];
    const REPLY: [u8; 42] = [
        0x02, 0x00, 0x00, 0x00, 0x00, 0x0a, 0x02, 0x00, 0x00, 0x00, 0x00, 0x0b, 0x08, 0x06, 0x00,
        0x01, 0x08, 0x00, 0x06, 0x04, 0x00, 0x02, 0x02, 0x00, 0x00, 0x00, 0x00, 0x0b, 0x0a, 0x09,
        0x09, 0x02, 0x02, 0x00, 0x00, 0x00, 0x00, 0x0a, 0x0a, 0x09, 0x09, 0x01,
    ];
    const A_IP: Ipv4Addr = Ipv4Addr::new(10, 9, 9, 1);
    const B_IP: Ipv4Addr = Ipv4Addr::new(10, 9, 9, 2);

    #[test]
    fn parses_a_request() {
        let (eth, arp) = parse_frame(&REQUEST).unwrap();
        assert_eq!(eth.dst, BROADCAST);
        assert_eq!(eth.src, A_MAC);
        assert_eq!(arp, ArpRepr::request(A_MAC, A_IP, B_IP));
    }

    #[test]
    fn request_frame_round_trip_and_padding() {
        let req = ArpRepr::request(A_MAC, A_IP, B_IP);
        let mut buf = [0xeeu8; 80];
        let n = req.emit_frame(&mut buf).unwrap();
        assert_eq!(n, MIN_FRAME_LEN);
        assert_eq!(&buf[..42], &REQUEST);
        assert!(buf[42..60].iter().all(|&b| b == 0));
        assert_eq!(parse_frame(&buf[..n]).unwrap().1, req);
        assert!(matches!(
            req.emit_frame(&mut buf[..59]),
            Err(WireError::BufferTooSmall { need: 60, have: 59 })
        ));
    }

    #[test]
    fn reply_swaps_and_goes_unicast() {
        let req = ArpRepr::request(A_MAC, A_IP, B_IP);
        let rep = ArpRepr::reply_to(&req, B_MAC);
        assert_eq!(rep.op, ArpOp::Reply);
        assert_eq!(rep.sender_ip, req.target_ip);
        assert_eq!(rep.target_ip, req.sender_ip);
        assert_eq!(rep.target_mac, A_MAC);
        let mut buf = [0u8; 60];
        rep.emit_frame(&mut buf).unwrap();
        assert_eq!(&buf[..42], &REPLY);
        let (eth, back) = parse_frame(&buf).unwrap();
        assert_eq!(eth, rep.ethernet());
        assert_eq!(back, rep);
    }

    #[test]
    fn refuses_other_hardware_protocols_lengths_and_ops() {
        for (at, v) in [(15, 6u8), (16, 0x86), (18, 8), (19, 16), (21, 3), (21, 0)] {
            let mut f = REQUEST;
            f[at] = v;
            let e = parse_frame(&f).unwrap_err();
            assert!(matches!(e, WireError::InvalidRepr(_)), "byte {at}={v}: {e}");
        }
    }

    #[test]
    fn truncated_and_foreign_frames_are_errors() {
        for n in 0..42 {
            assert!(parse_frame(&REQUEST[..n]).is_err(), "{n} bytes");
        }
        assert!(matches!(
            parse_frame(&REQUEST[..41]),
            Err(WireError::Truncated {
                need: 28,
                have: 27,
                offset: 14,
                ..
            })
        ));
        let mut f = REQUEST;
        f[13] = 0x00;
        assert!(matches!(
            parse_frame(&f),
            Err(WireError::UnsupportedEthertype {
                ethertype: 0x0800,
                offset: 12
            })
        ));
    }

    #[test]
    fn vlan_tagged_frames_parse() {
        let mut f = vec![0u8; 46];
        f[..12].copy_from_slice(&REQUEST[..12]);
        f[12..16].copy_from_slice(&[0x81, 0x00, 0x00, 0x64]);
        f[16..].copy_from_slice(&REQUEST[12..]);
        let (eth, arp) = parse_frame(&f).unwrap();
        assert_eq!(eth.vlan.unwrap().vid, 100);
        assert_eq!(arp.target_ip, B_IP);
    }

    #[test]
    fn view_setters_and_getters_agree() {
        let mut b = [0u8; PACKET_LEN];
        let mut p = Packet::new_checked(&mut b[..]).unwrap();
        p.set_operation(2);
        p.set_target_ip(Ipv4Addr::new(1, 2, 3, 4));
        p.set_sender_mac(B_MAC);
        assert_eq!(p.operation(), 2);
        assert_eq!(p.target_ip(), Ipv4Addr::new(1, 2, 3, 4));
        assert_eq!(p.sender_mac(), B_MAC);
        assert!(Packet::new_checked(&b[..27]).is_err());
    }
}
