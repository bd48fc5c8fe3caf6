//! Global Route Header (IBTA §8.3), 40 bytes, laid out like an IPv6 header:
//!
//! ```text
//! byte 0 bits 7-4      IPVer (6)
//! bytes 0-1 bits 11-4  TClass
//! bytes 1-3 bits 19-0  FlowLabel
//! bytes 4-5            PayLen
//! byte 6               NxtHdr
//! byte 7               HopLmt
//! bytes 8-23           SGID
//! bytes 24-39          DGID
//! ```
//!
//! RoCEv2 puts no GRH on the wire (the IP header takes its place), but a UD receive buffer
//! still starts with 40 bytes of GRH, as ibverbs applications expect: for IPv6 it holds the
//! IPv6 header; for IPv4 the first 20 bytes are zero and the last 20 hold the IPv4 header
//! ([`ud_receive_grh`]). GIDs of IPv4 peers are IPv4-mapped IPv6 addresses (`::ffff:a.b.c.d`).

use std::net::{Ipv4Addr, Ipv6Addr};

use super::{be16, be32, check_len, need, put16, put32, IpView, WireError};

/// Length of the GRH.
pub const HEADER_LEN: usize = 40;
/// The only IPVer a GRH may carry.
pub const IP_VERSION: u8 = 6;
/// Flow labels are 20 bits.
pub const FLOW_LABEL_MASK: u32 = 0x000f_ffff;

mod field {
    use std::ops::Range;
    /// Bytes 0-3: IPVer (4 bits), TClass (8), FlowLabel (20).
    pub const VER_TC_FLOW: usize = 0;
    /// Bytes 4-5: PayLen.
    pub const PAY_LEN: usize = 4;
    /// Byte 6: NxtHdr.
    pub const NXT_HDR: usize = 6;
    /// Byte 7: HopLmt.
    pub const HOP_LMT: usize = 7;
    /// Bytes 8-23: source GID.
    pub const SGID: Range<usize> = 8..24;
    /// Bytes 24-39: destination GID.
    pub const DGID: Range<usize> = 24..40;
}

/// A zero-copy view of a GRH. [`Header::new_checked`] checks the length only; the version
/// is for [`GrhRepr::parse`] to judge.
#[derive(Debug, Clone, Copy)]
pub struct Header<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Header<T> {
    /// Wraps a buffer without checking its length; accessors panic if it is shorter than
    /// [`HEADER_LEN`].
    pub fn new_unchecked(buffer: T) -> Self {
        Self { buffer }
    }
    /// Wraps a buffer, checking that 40 bytes are there.
    pub fn new_checked(buffer: T) -> Result<Self, WireError> {
        check_len("GRH", buffer.as_ref(), HEADER_LEN, 0)?;
        Ok(Self { buffer })
    }
    /// The wrapped buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }
    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }
    fn word0(&self) -> u32 {
        be32(self.b(), field::VER_TC_FLOW)
    }
    /// IP version (IPVer), 6 in a valid GRH.
    pub fn version(&self) -> u8 {
        (self.word0() >> 28) as u8
    }
    /// Traffic class (TClass).
    pub fn traffic_class(&self) -> u8 {
        (self.word0() >> 20) as u8
    }
    /// Flow label (20 bits).
    pub fn flow_label(&self) -> u32 {
        self.word0() & FLOW_LABEL_MASK
    }
    /// Payload length (PayLen): bytes after the GRH up to the ICRC.
    pub fn payload_len(&self) -> u16 {
        be16(self.b(), field::PAY_LEN)
    }
    /// Next header (NxtHdr): 0x1b on InfiniBand, 17 for RoCEv2 over IPv6.
    pub fn next_header(&self) -> u8 {
        self.b()[field::NXT_HDR]
    }
    /// Hop limit (HopLmt).
    pub fn hop_limit(&self) -> u8 {
        self.b()[field::HOP_LMT]
    }
    /// Source GID.
    pub fn sgid(&self) -> Ipv6Addr {
        gid(&self.b()[field::SGID])
    }
    /// Destination GID.
    pub fn dgid(&self) -> Ipv6Addr {
        gid(&self.b()[field::DGID])
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Header<T> {
    fn bm(&mut self) -> &mut [u8] {
        self.buffer.as_mut()
    }
    fn set_word0(&mut self, mask: u32, v: u32) {
        let w = (self.word0() & !mask) | (v & mask);
        put32(self.bm(), field::VER_TC_FLOW, w)
    }
    /// Sets IPVer; only the low 4 bits of `v` are written.
    pub fn set_version(&mut self, v: u8) {
        self.set_word0(0xf000_0000, u32::from(v) << 28)
    }
    /// Sets TClass.
    pub fn set_traffic_class(&mut self, v: u8) {
        self.set_word0(0x0ff0_0000, u32::from(v) << 20)
    }
    /// Sets the flow label; only the low 20 bits of `v` are written.
    pub fn set_flow_label(&mut self, v: u32) {
        self.set_word0(FLOW_LABEL_MASK, v)
    }
    /// Sets PayLen.
    pub fn set_payload_len(&mut self, v: u16) {
        put16(self.bm(), field::PAY_LEN, v)
    }
    /// Sets NxtHdr.
    pub fn set_next_header(&mut self, v: u8) {
        self.bm()[field::NXT_HDR] = v
    }
    /// Sets HopLmt.
    pub fn set_hop_limit(&mut self, v: u8) {
        self.bm()[field::HOP_LMT] = v
    }
    /// Sets the source GID.
    pub fn set_sgid(&mut self, g: Ipv6Addr) {
        self.bm()[field::SGID].copy_from_slice(&g.octets())
    }
    /// Sets the destination GID.
    pub fn set_dgid(&mut self, g: Ipv6Addr) {
        self.bm()[field::DGID].copy_from_slice(&g.octets())
    }
}

fn gid(b: &[u8]) -> Ipv6Addr {
    let mut a = [0u8; 16];
    a.copy_from_slice(b);
    Ipv6Addr::from(a)
}

/// Plain representation of a GRH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct GrhRepr {
    /// Traffic class.
    pub traffic_class: u8,
    /// Flow label (20 bits).
    pub flow_label: u32,
    /// Payload length.
    pub payload_len: u16,
    /// Next header (0x1b on InfiniBand, 17 for RoCEv2 over IPv6).
    pub next_header: u8,
    /// Hop limit.
    pub hop_limit: u8,
    /// Source GID.
    pub sgid: Ipv6Addr,
    /// Destination GID.
    pub dgid: Ipv6Addr,
}

impl GrhRepr {
    /// Parses the first 40 bytes of `b`; the version nibble must be 6.
    pub fn parse(b: &[u8]) -> Result<Self, WireError> {
        let h = Header::new_checked(b)?;
        if h.version() != IP_VERSION {
            return Err(WireError::BadIpVersion {
                version: h.version(),
                expected: IP_VERSION,
                offset: 0,
            });
        }
        Ok(Self {
            traffic_class: h.traffic_class(),
            flow_label: h.flow_label(),
            payload_len: h.payload_len(),
            next_header: h.next_header(),
            hop_limit: h.hop_limit(),
            sgid: h.sgid(),
            dgid: h.dgid(),
        })
    }
    /// Bytes the header takes.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }
    /// Writes the header at the start of `b`.
    pub fn emit(&self, b: &mut [u8]) -> Result<(), WireError> {
        need(b, HEADER_LEN)?;
        if self.flow_label > FLOW_LABEL_MASK {
            return Err(WireError::InvalidRepr("GRH flow label wider than 20 bits"));
        }
        let mut h = Header::new_unchecked(b);
        h.set_version(IP_VERSION);
        h.set_traffic_class(self.traffic_class);
        h.set_flow_label(self.flow_label);
        h.set_payload_len(self.payload_len);
        h.set_next_header(self.next_header);
        h.set_hop_limit(self.hop_limit);
        h.set_sgid(self.sgid);
        h.set_dgid(self.dgid);
        Ok(())
    }
}

/// The RoCEv2 GID of an IPv4 address: the IPv4-mapped IPv6 address `::ffff:a.b.c.d`.
pub fn gid_from_ipv4(a: Ipv4Addr) -> Ipv6Addr {
    a.to_ipv6_mapped()
}

/// Fills the 40-byte GRH area of a UD receive buffer from the received IP header, as
/// ibverbs does for RoCEv2: IPv6 header verbatim, or 20 zero bytes then the IPv4 header.
/// `ip` is the header as it arrived (its first 20 or 40 bytes are used).
pub fn ud_receive_grh(ip: IpView<'_>, out: &mut [u8]) -> Result<(), WireError> {
    need(out, HEADER_LEN)?;
    let ip_header = ip.bytes();
    match ip.version() {
        4 => {
            check_len("IPv4 header", ip_header, 20, 0)?;
            out[..20].fill(0);
            out[20..40].copy_from_slice(&ip_header[..20]);
        }
        _ => {
            check_len("IPv6 header", ip_header, 40, 0)?;
            out[..40].copy_from_slice(&ip_header[..40]);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_mapped_gid() {
        let g = GrhRepr {
            traffic_class: 0x10,
            flow_label: 0x12345,
            payload_len: 100,
            next_header: 0x1b,
            hop_limit: 1,
            sgid: gid_from_ipv4(Ipv4Addr::new(10, 77, 0, 12)),
            dgid: "fe80::1".parse().unwrap(),
        };
        assert_eq!(g.sgid.to_string(), "::ffff:10.77.0.12");
        let mut b = [0u8; 40];
        g.emit(&mut b).unwrap();
        assert_eq!(GrhRepr::parse(&b).unwrap(), g);
        assert_eq!(
            &b[8..24],
            &[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 77, 0, 12]
        );
    }

    // A GRH as an IPv6 RoCEv2 packet's header would fill it: TClass 0x02 (ECT(0)), flow
    // label 0xabcde, PayLen 36, NxtHdr 17, HopLmt 64, fe80::1 -> fe80::2.
    const BYTES: [u8; 40] = [
        0x60, 0x2a, 0xbc, 0xde, 0x00, 0x24, 0x11, 0x40, 0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
        0, 0, 0, 0x01, 0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x02,
    ];

    #[test]
    fn getters_on_known_bytes() {
        let h = Header::new_checked(&BYTES[..]).unwrap();
        assert_eq!(h.version(), 6);
        assert_eq!(h.traffic_class(), 0x02);
        assert_eq!(h.flow_label(), 0xabcde);
        assert_eq!(h.payload_len(), 36);
        assert_eq!(h.next_header(), 17);
        assert_eq!(h.hop_limit(), 64);
        assert_eq!(h.sgid(), "fe80::1".parse::<Ipv6Addr>().unwrap());
        assert_eq!(h.dgid(), "fe80::2".parse::<Ipv6Addr>().unwrap());
    }

    #[test]
    fn setters_round_trip() {
        let mut b = [0xffu8; 40];
        let mut h = Header::new_checked(&mut b[..]).unwrap();
        h.set_version(6);
        h.set_traffic_class(0x02);
        h.set_flow_label(0xabcde);
        h.set_payload_len(36);
        h.set_next_header(17);
        h.set_hop_limit(64);
        h.set_sgid("fe80::1".parse().unwrap());
        h.set_dgid("fe80::2".parse().unwrap());
        assert_eq!(b, BYTES);
        // The three fields of the first word do not disturb each other.
        let mut h = Header::new_unchecked(&mut b[..]);
        h.set_traffic_class(0xff);
        assert_eq!((h.version(), h.flow_label()), (6, 0xabcde));
        h.set_flow_label(0x1_2345);
        h.set_version(4);
        assert_eq!(
            (h.version(), h.traffic_class(), h.flow_label()),
            (4, 0xff, 0x1_2345)
        );
        assert_eq!(&b[..4], &[0x4f, 0xf1, 0x23, 0x45]);
    }

    #[test]
    fn repr_parses_the_view_and_checks_the_version() {
        let g = GrhRepr::parse(&BYTES).unwrap();
        assert_eq!((g.traffic_class, g.flow_label), (0x02, 0xabcde));
        let mut out = [0u8; 40];
        g.emit(&mut out).unwrap();
        assert_eq!(out, BYTES);
        let mut v4 = BYTES;
        v4[0] = 0x40;
        assert!(matches!(
            GrhRepr::parse(&v4),
            Err(WireError::BadIpVersion {
                version: 4,
                expected: 6,
                offset: 0
            })
        ));
        let wide = GrhRepr {
            flow_label: 1 << 20,
            ..g
        };
        assert!(matches!(
            wide.emit(&mut out),
            Err(WireError::InvalidRepr(_))
        ));
    }

    #[test]
    fn truncated_input_says_need_and_have() {
        let e = Header::new_checked(&BYTES[..39]).unwrap_err();
        assert_eq!(
            e,
            WireError::Truncated {
                what: "GRH",
                offset: 0,
                need: 40,
                have: 39
            }
        );
        assert_eq!(GrhRepr::parse(&BYTES[..39]).unwrap_err(), e);
        let mut out = [0u8; 39];
        assert!(matches!(
            GrhRepr::parse(&BYTES).unwrap().emit(&mut out),
            Err(WireError::BufferTooSmall { need: 40, have: 39 })
        ));
    }
}
