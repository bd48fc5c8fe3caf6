//! RDMA Extended Transport Header (IBTA §9.3.3): the remote buffer of an RDMA WRITE or
//! READ request. 16 bytes: virtual address (8), R_Key (4), DMA length (4).

use super::{be32, be64, check_len, put32, put64, WireError};

/// Length of the RETH.
pub const HEADER_LEN: usize = 16;

/// Plain representation of a RETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct RethRepr {
    /// Remote virtual address.
    pub va: u64,
    /// Remote key.
    pub rkey: u32,
    /// Length of the whole transfer in bytes.
    pub len: u32,
}

impl RethRepr {
    /// Parses the first 16 bytes of `b`.
    pub fn parse(b: &[u8]) -> Result<Self, WireError> {
        check_len("RETH", b, HEADER_LEN, 0)?;
        Ok(Self {
            va: be64(b, 0),
            rkey: be32(b, 8),
            len: be32(b, 12),
        })
    }
    /// Bytes the header takes.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }
    /// Writes the header at the start of `b`.
    pub fn emit(&self, b: &mut [u8]) -> Result<(), WireError> {
        need(b, HEADER_LEN)?;
        put64(b, 0, self.va);
        put32(b, 8, self.rkey);
        put32(b, 12, self.len);
        Ok(())
    }
}

pub(crate) fn need(b: &[u8], n: usize) -> Result<(), WireError> {
    if b.len() < n {
        Err(WireError::BufferTooSmall {
            need: n,
            have: b.len(),
        })
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let r = RethRepr {
            va: 0x0000_5566_7788_99aa,
            rkey: 0x1234,
            len: 4096,
        };
        let mut b = [0u8; 16];
        r.emit(&mut b).unwrap();
        assert_eq!(RethRepr::parse(&b).unwrap(), r);
        assert!(RethRepr::parse(&b[..15]).is_err());
    }
}
