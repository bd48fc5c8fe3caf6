//! Atomic Extended Transport Header (IBTA §9.3.4; 28 bytes: VA, R_Key, swap-or-add data,
//! compare data) and Atomic Acknowledge ETH (§9.3.5.1; 8 bytes: the original remote value).

use super::{be32, be64, check_len, put32, put64, reth::need, WireError};

/// Length of the AtomicETH.
pub const ATOMIC_ETH_LEN: usize = 28;
/// Length of the AtomicAckETH.
pub const ATOMIC_ACK_ETH_LEN: usize = 8;

/// Plain representation of an AtomicETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct AtomicEthRepr {
    /// Remote virtual address (8-byte aligned).
    pub va: u64,
    /// Remote key.
    pub rkey: u32,
    /// Swap value (COMPARE_SWAP) or addend (FETCH_ADD).
    pub swap_add: u64,
    /// Compare value (COMPARE_SWAP; ignored by FETCH_ADD).
    pub compare: u64,
}

impl AtomicEthRepr {
    /// Parses the first 28 bytes of `b`.
    pub fn parse(b: &[u8]) -> Result<Self, WireError> {
        check_len("AtomicETH", b, ATOMIC_ETH_LEN, 0)?;
        Ok(Self {
            va: be64(b, 0),
            rkey: be32(b, 8),
            swap_add: be64(b, 12),
            compare: be64(b, 20),
        })
    }
    /// Bytes the header takes.
    pub const fn buffer_len(&self) -> usize {
        ATOMIC_ETH_LEN
    }
    /// Writes the header at the start of `b`.
    pub fn emit(&self, b: &mut [u8]) -> Result<(), WireError> {
        need(b, ATOMIC_ETH_LEN)?;
        put64(b, 0, self.va);
        put32(b, 8, self.rkey);
        put64(b, 12, self.swap_add);
        put64(b, 20, self.compare);
        Ok(())
    }
}

/// Plain representation of an AtomicAckETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct AtomicAckEthRepr {
    /// The value at the remote address before the atomic operation.
    pub orig: u64,
}

impl AtomicAckEthRepr {
    /// Parses the first 8 bytes of `b`.
    pub fn parse(b: &[u8]) -> Result<Self, WireError> {
        check_len("AtomicAckETH", b, ATOMIC_ACK_ETH_LEN, 0)?;
        Ok(Self { orig: be64(b, 0) })
    }
    /// Bytes the header takes.
    pub const fn buffer_len(&self) -> usize {
        ATOMIC_ACK_ETH_LEN
    }
    /// Writes the header at the start of `b`.
    pub fn emit(&self, b: &mut [u8]) -> Result<(), WireError> {
        need(b, ATOMIC_ACK_ETH_LEN)?;
        put64(b, 0, self.orig);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_real_fetch_add() {
        // AtomicETH of the first FETCH_ADD in ib_atomic_bw.pcap.
        let b = [
            0x00, 0x00, 0x55, 0x6a, 0x80, 0x50, 0x80, 0x00, 0x00, 0x00, 0x08, 0x60, 0, 0, 0, 0, 0,
            0, 0, 0x01, 0, 0, 0, 0, 0, 0, 0, 0,
        ];
        let a = AtomicEthRepr::parse(&b).unwrap();
        assert_eq!(a.va, 0x0000_556a_8050_8000);
        assert_eq!((a.rkey, a.swap_add, a.compare), (0x860, 1, 0));
        let mut out = [0u8; 28];
        a.emit(&mut out).unwrap();
        assert_eq!(out, b);
        let ack = AtomicAckEthRepr { orig: 7 };
        let mut ob = [0u8; 8];
        ack.emit(&mut ob).unwrap();
        assert_eq!(AtomicAckEthRepr::parse(&ob).unwrap(), ack);
    }
}
