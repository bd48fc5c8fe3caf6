//! UDP header (RFC 768). RoCEv2 uses destination port 4791; the source port carries
//! per-flow entropy for ECMP (IBTA Annex A17.3.1) and must stay fixed for a QP.

use super::{be16, check_len, put16, WireError};

/// Length of the UDP header.
pub const HEADER_LEN: usize = 8;

mod field {
    pub const SRC_PORT: usize = 0;
    pub const DST_PORT: usize = 2;
    pub const LENGTH: usize = 4;
    pub const CHECKSUM: usize = 6;
}

/// A zero-copy view of a UDP header.
#[derive(Debug, Clone, Copy)]
pub struct Header<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Header<T> {
    /// Wraps a buffer, checking that 8 bytes are there.
    pub fn new_checked(buffer: T) -> Result<Self, WireError> {
        check_len("UDP header", buffer.as_ref(), HEADER_LEN, 0)?;
        Ok(Self { buffer })
    }
    /// Source port.
    pub fn src_port(&self) -> u16 {
        be16(self.buffer.as_ref(), field::SRC_PORT)
    }
    /// Destination port.
    pub fn dst_port(&self) -> u16 {
        be16(self.buffer.as_ref(), field::DST_PORT)
    }
    /// Length of header plus payload.
    pub fn len(&self) -> u16 {
        be16(self.buffer.as_ref(), field::LENGTH)
    }
    /// True when the length field is zero.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Checksum as found (0 means "not computed", legal over IPv4).
    pub fn checksum(&self) -> u16 {
        be16(self.buffer.as_ref(), field::CHECKSUM)
    }
}

/// Plain representation of a UDP header. The length is derived from the payload when
/// emitting; the checksum is carried as a value because RoCEv2 senders normally send 0
/// (the ICRC protects the payload) and the ICRC masks it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct UdpRepr {
    /// Source port (ECMP entropy).
    pub src_port: u16,
    /// Destination port (4791 for RoCEv2).
    pub dst_port: u16,
    /// Checksum written as is.
    pub checksum: u16,
}

impl UdpRepr {
    /// Parses a checked view.
    pub fn parse<T: AsRef<[u8]>>(h: &Header<T>) -> Self {
        Self {
            src_port: h.src_port(),
            dst_port: h.dst_port(),
            checksum: h.checksum(),
        }
    }

    /// Bytes the header takes.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes the header for a datagram of `payload_len` bytes after it.
    pub fn emit(&self, buf: &mut [u8], payload_len: usize) -> Result<(), WireError> {
        if buf.len() < HEADER_LEN {
            return Err(WireError::BufferTooSmall {
                need: HEADER_LEN,
                have: buf.len(),
            });
        }
        let len = u16::try_from(HEADER_LEN + payload_len)
            .map_err(|_| WireError::InvalidRepr("UDP datagram longer than 65535 bytes"))?;
        put16(buf, field::SRC_PORT, self.src_port);
        put16(buf, field::DST_PORT, self.dst_port);
        put16(buf, field::LENGTH, len);
        put16(buf, field::CHECKSUM, self.checksum);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let r = UdpRepr {
            src_port: 49476,
            dst_port: 4791,
            checksum: 0,
        };
        let mut b = [0u8; 8];
        r.emit(&mut b, 32).unwrap();
        assert_eq!(b, [0xc1, 0x44, 0x12, 0xb7, 0, 40, 0, 0]);
        let h = Header::new_checked(&b[..]).unwrap();
        assert_eq!(h.len(), 40);
        assert_eq!(UdpRepr::parse(&h), r);
        assert!(r.emit(&mut b, 70000).is_err());
    }
}
