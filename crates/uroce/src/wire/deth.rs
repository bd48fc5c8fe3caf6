//! Datagram Extended Transport Header (IBTA §9.3.2): Q_Key (4 bytes), reserved (1), source
//! QP (3). Carried by every UD packet.

use super::{be24, be32, check_len, put24, put32, reth::need, WireError};

/// Length of the DETH.
pub const HEADER_LEN: usize = 8;

/// Plain representation of a DETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct DethRepr {
    /// Queue key the receiving QP checks.
    pub qkey: u32,
    /// The sender's QP number (24 bits).
    pub src_qp: u32,
}

impl DethRepr {
    /// Parses the first 8 bytes of `b`.
    pub fn parse(b: &[u8]) -> Result<Self, WireError> {
        check_len("DETH", b, HEADER_LEN, 0)?;
        Ok(Self {
            qkey: be32(b, 0),
            src_qp: be24(b, 5),
        })
    }
    /// Bytes the header takes.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }
    /// Writes the header at the start of `b`.
    pub fn emit(&self, b: &mut [u8]) -> Result<(), WireError> {
        need(b, HEADER_LEN)?;
        if self.src_qp > 0x00ff_ffff {
            return Err(WireError::InvalidRepr("source QPN wider than 24 bits"));
        }
        put32(b, 0, self.qkey);
        b[4] = 0;
        put24(b, 5, self.src_qp);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let d = DethRepr {
            qkey: 0x1111_1111,
            src_qp: 0x11,
        };
        let mut b = [0xffu8; 8];
        d.emit(&mut b).unwrap();
        assert_eq!(b, [0x11, 0x11, 0x11, 0x11, 0, 0, 0, 0x11]);
        assert_eq!(DethRepr::parse(&b).unwrap(), d);
    }
}
