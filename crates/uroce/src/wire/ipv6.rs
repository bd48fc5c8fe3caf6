//! IPv6 fixed header (RFC 8200). RoCEv2 over IPv6 carries UDP directly; extension headers
//! are not accepted.

use std::net::Ipv6Addr;

use super::{be16, check_len, put16, WireError};

/// Length of the fixed IPv6 header.
pub const HEADER_LEN: usize = 40;

mod field {
    pub const VER_TC_FLOW: usize = 0;
    pub const LENGTH: usize = 4;
    pub const NEXT_HEADER: usize = 6;
    pub const HOP_LIMIT: usize = 7;
    pub const SRC: usize = 8;
    pub const DST: usize = 24;
}

/// A zero-copy view of an IPv6 header.
#[derive(Debug, Clone, Copy)]
pub struct Header<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Header<T> {
    /// Wraps a buffer, checking length and version.
    pub fn new_checked(buffer: T) -> Result<Self, WireError> {
        check_len("IPv6 header", buffer.as_ref(), HEADER_LEN, 0)?;
        let h = Self { buffer };
        if h.version() != 6 {
            return Err(WireError::BadIpVersion {
                version: h.version(),
                expected: 6,
                offset: 0,
            });
        }
        Ok(h)
    }
    fn word0(&self) -> u32 {
        super::be32(self.buffer.as_ref(), field::VER_TC_FLOW)
    }
    /// Version nibble.
    pub fn version(&self) -> u8 {
        (self.word0() >> 28) as u8
    }
    /// Traffic class: DSCP and ECN.
    pub fn traffic_class(&self) -> u8 {
        (self.word0() >> 20) as u8
    }
    /// Flow label (20 bits).
    pub fn flow_label(&self) -> u32 {
        self.word0() & 0x000f_ffff
    }
    /// Payload length.
    pub fn payload_len(&self) -> u16 {
        be16(self.buffer.as_ref(), field::LENGTH)
    }
    /// Next header.
    pub fn next_header(&self) -> u8 {
        self.buffer.as_ref()[field::NEXT_HEADER]
    }
    /// Hop limit.
    pub fn hop_limit(&self) -> u8 {
        self.buffer.as_ref()[field::HOP_LIMIT]
    }
    /// Source address.
    pub fn src(&self) -> Ipv6Addr {
        addr(&self.buffer.as_ref()[field::SRC..field::SRC + 16])
    }
    /// Destination address.
    pub fn dst(&self) -> Ipv6Addr {
        addr(&self.buffer.as_ref()[field::DST..field::DST + 16])
    }
}

fn addr(b: &[u8]) -> Ipv6Addr {
    let mut a = [0u8; 16];
    a.copy_from_slice(b);
    Ipv6Addr::from(a)
}

/// Plain representation of an IPv6 header; payload length is derived when emitting.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ipv6Repr {
    /// Source address.
    pub src: Ipv6Addr,
    /// Destination address.
    pub dst: Ipv6Addr,
    /// Traffic class (DSCP and ECN).
    pub traffic_class: u8,
    /// Flow label (20 bits).
    pub flow_label: u32,
    /// Next header (17 for RoCEv2).
    pub next_header: u8,
    /// Hop limit.
    pub hop_limit: u8,
}

impl Ipv6Repr {
    /// Parses a checked view.
    pub fn parse<T: AsRef<[u8]>>(h: &Header<T>) -> Self {
        Self {
            src: h.src(),
            dst: h.dst(),
            traffic_class: h.traffic_class(),
            flow_label: h.flow_label(),
            next_header: h.next_header(),
            hop_limit: h.hop_limit(),
        }
    }

    /// The ECN codepoint.
    pub fn ecn(&self) -> u8 {
        self.traffic_class & 0x03
    }

    /// Bytes the header takes.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes the header for `payload_len` bytes of payload.
    pub fn emit(&self, buf: &mut [u8], payload_len: usize) -> Result<(), WireError> {
        if buf.len() < HEADER_LEN {
            return Err(WireError::BufferTooSmall {
                need: HEADER_LEN,
                have: buf.len(),
            });
        }
        if self.flow_label > 0x000f_ffff {
            return Err(WireError::InvalidRepr("IPv6 flow label wider than 20 bits"));
        }
        let len = u16::try_from(payload_len)
            .map_err(|_| WireError::InvalidRepr("IPv6 payload longer than 65535 bytes"))?;
        let w0 = (6u32 << 28) | (u32::from(self.traffic_class) << 20) | self.flow_label;
        buf[..4].copy_from_slice(&w0.to_be_bytes());
        put16(buf, field::LENGTH, len);
        buf[field::NEXT_HEADER] = self.next_header;
        buf[field::HOP_LIMIT] = self.hop_limit;
        buf[field::SRC..field::SRC + 16].copy_from_slice(&self.src.octets());
        buf[field::DST..field::DST + 16].copy_from_slice(&self.dst.octets());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let r = Ipv6Repr {
            src: "fe80::1".parse().unwrap(),
            dst: "2001:db8::2".parse().unwrap(),
            traffic_class: 0x6a,
            flow_label: 0xabcde,
            next_header: 17,
            hop_limit: 64,
        };
        let mut b = [0u8; 40];
        r.emit(&mut b, 1000).unwrap();
        assert_eq!(&b[..4], &[0x66, 0xaa, 0xbc, 0xde]);
        let h = Header::new_checked(&b[..]).unwrap();
        assert_eq!(h.payload_len(), 1000);
        assert_eq!(Ipv6Repr::parse(&h), r);
        b[0] = 0x45;
        assert!(matches!(
            Header::new_checked(&b[..]),
            Err(WireError::BadIpVersion { version: 4, .. })
        ));
    }
}
