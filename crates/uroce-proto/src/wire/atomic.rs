//! Atomic Extended Transport Header (IBTA §9.3.4) and Atomic Acknowledge ETH (§9.3.5.1).
//!
//! ```text
//! AtomicETH, 28 bytes                       AtomicAckETH, 8 bytes
//! bytes 0-7    Virtual Address (VA)         bytes 0-7   Original Remote Data
//! bytes 8-11   Remote Key (R_Key)
//! bytes 12-19  Swap (or Add) Data
//! bytes 20-27  Compare Data
//! ```

use super::{be32, be64, check_len, need, put32, put64, WireError};

/// Length of the AtomicETH.
pub const ATOMIC_ETH_LEN: usize = 28;
/// Length of the AtomicAckETH.
pub const ATOMIC_ACK_ETH_LEN: usize = 8;

/// Fields of the AtomicETH.
mod field {
    /// Bytes 0-7: virtual address.
    pub const VA: usize = 0;
    /// Bytes 8-11: R_Key.
    pub const R_KEY: usize = 8;
    /// Bytes 12-19: swap (COMPARE_SWAP) or add (FETCH_ADD) data.
    pub const SWAP_ADD: usize = 12;
    /// Bytes 20-27: compare data.
    pub const COMPARE: usize = 20;
}

/// Fields of the AtomicAckETH.
mod ack_field {
    /// Bytes 0-7: original remote data.
    pub const ORIG_DATA: usize = 0;
}

/// A zero-copy view of an AtomicETH.
#[derive(Debug, Clone, Copy)]
pub struct AtomicEthHeader<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> AtomicEthHeader<T> {
    /// Wraps a buffer without checking its length; accessors panic if it is shorter than
    /// [`ATOMIC_ETH_LEN`].
    pub fn new_unchecked(buffer: T) -> Self {
        Self { buffer }
    }
    /// Wraps a buffer, checking that 28 bytes are there.
    pub fn new_checked(buffer: T) -> Result<Self, WireError> {
        check_len("AtomicETH", buffer.as_ref(), ATOMIC_ETH_LEN, 0)?;
        Ok(Self { buffer })
    }
    /// The wrapped buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }
    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }
    /// Virtual address of the remote 8-byte operand.
    pub fn va(&self) -> u64 {
        be64(self.b(), field::VA)
    }
    /// R_Key that authorises the access.
    pub fn rkey(&self) -> u32 {
        be32(self.b(), field::R_KEY)
    }
    /// Swap data of a COMPARE_SWAP, or add data of a FETCH_ADD.
    pub fn swap_add(&self) -> u64 {
        be64(self.b(), field::SWAP_ADD)
    }
    /// Compare data of a COMPARE_SWAP; FETCH_ADD ignores it.
    pub fn compare(&self) -> u64 {
        be64(self.b(), field::COMPARE)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> AtomicEthHeader<T> {
    fn bm(&mut self) -> &mut [u8] {
        self.buffer.as_mut()
    }
    /// Sets the virtual address.
    pub fn set_va(&mut self, v: u64) {
        put64(self.bm(), field::VA, v)
    }
    /// Sets the R_Key.
    pub fn set_rkey(&mut self, v: u32) {
        put32(self.bm(), field::R_KEY, v)
    }
    /// Sets the swap or add data.
    pub fn set_swap_add(&mut self, v: u64) {
        put64(self.bm(), field::SWAP_ADD, v)
    }
    /// Sets the compare data.
    pub fn set_compare(&mut self, v: u64) {
        put64(self.bm(), field::COMPARE, v)
    }
}

/// A zero-copy view of an AtomicAckETH.
#[derive(Debug, Clone, Copy)]
pub struct AtomicAckEthHeader<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> AtomicAckEthHeader<T> {
    /// Wraps a buffer without checking its length; accessors panic if it is shorter than
    /// [`ATOMIC_ACK_ETH_LEN`].
    pub fn new_unchecked(buffer: T) -> Self {
        Self { buffer }
    }
    /// Wraps a buffer, checking that 8 bytes are there.
    pub fn new_checked(buffer: T) -> Result<Self, WireError> {
        check_len("AtomicAckETH", buffer.as_ref(), ATOMIC_ACK_ETH_LEN, 0)?;
        Ok(Self { buffer })
    }
    /// The wrapped buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }
    /// The value at the remote address before the atomic operation.
    pub fn orig_data(&self) -> u64 {
        be64(self.buffer.as_ref(), ack_field::ORIG_DATA)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> AtomicAckEthHeader<T> {
    /// Sets the original remote data.
    pub fn set_orig_data(&mut self, v: u64) {
        put64(self.buffer.as_mut(), ack_field::ORIG_DATA, v)
    }
}

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
        let h = AtomicEthHeader::new_checked(b)?;
        Ok(Self {
            va: h.va(),
            rkey: h.rkey(),
            swap_add: h.swap_add(),
            compare: h.compare(),
        })
    }
    /// Bytes the header takes.
    pub const fn buffer_len(&self) -> usize {
        ATOMIC_ETH_LEN
    }
    /// Writes the header at the start of `b`.
    pub fn emit(&self, b: &mut [u8]) -> Result<(), WireError> {
        need(b, ATOMIC_ETH_LEN)?;
        let mut h = AtomicEthHeader::new_unchecked(b);
        h.set_va(self.va);
        h.set_rkey(self.rkey);
        h.set_swap_add(self.swap_add);
        h.set_compare(self.compare);
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
        let h = AtomicAckEthHeader::new_checked(b)?;
        Ok(Self {
            orig: h.orig_data(),
        })
    }
    /// Bytes the header takes.
    pub const fn buffer_len(&self) -> usize {
        ATOMIC_ACK_ETH_LEN
    }
    /// Writes the header at the start of `b`.
    pub fn emit(&self, b: &mut [u8]) -> Result<(), WireError> {
        need(b, ATOMIC_ACK_ETH_LEN)?;
        AtomicAckEthHeader::new_unchecked(b).set_orig_data(self.orig);
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

    #[test]
    fn getters_on_known_bytes() {
        // A COMPARE_SWAP: VA 0x1122334455667788, R_Key 0x99aabbcc, swap 0x0102030405060708,
        // compare 0xf0e0d0c0b0a09080.
        let b = [
            0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x99, 0xaa, 0xbb, 0xcc, 0x01, 0x02,
            0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0xf0, 0xe0, 0xd0, 0xc0, 0xb0, 0xa0, 0x90, 0x80,
        ];
        let h = AtomicEthHeader::new_checked(&b[..]).unwrap();
        assert_eq!(h.va(), 0x1122_3344_5566_7788);
        assert_eq!(h.rkey(), 0x99aa_bbcc);
        assert_eq!(h.swap_add(), 0x0102_0304_0506_0708);
        assert_eq!(h.compare(), 0xf0e0_d0c0_b0a0_9080);
        let ack = [0xde, 0xad, 0xbe, 0xef, 0, 0, 0, 0x2a];
        let h = AtomicAckEthHeader::new_checked(&ack[..]).unwrap();
        assert_eq!(h.orig_data(), 0xdead_beef_0000_002a);
    }

    #[test]
    fn setters_round_trip() {
        let mut b = [0u8; 28];
        let mut h = AtomicEthHeader::new_checked(&mut b[..]).unwrap();
        h.set_va(u64::MAX - 7);
        h.set_rkey(0x0102_0304);
        h.set_swap_add(5);
        h.set_compare(u64::MAX);
        assert_eq!(
            (h.va(), h.rkey(), h.swap_add(), h.compare()),
            (u64::MAX - 7, 0x0102_0304, 5, u64::MAX)
        );
        assert_eq!(&b[8..20], &[1, 2, 3, 4, 0, 0, 0, 0, 0, 0, 0, 5]);
        let mut a = [0u8; 8];
        let mut h = AtomicAckEthHeader::new_checked(&mut a[..]).unwrap();
        h.set_orig_data(0x0102_0304_0506_0708);
        assert_eq!(h.orig_data(), 0x0102_0304_0506_0708);
        assert_eq!(a, [1, 2, 3, 4, 5, 6, 7, 8]);
    }

    #[test]
    fn truncated_input_says_need_and_have() {
        let b = [0u8; 27];
        let e = AtomicEthHeader::new_checked(&b[..]).unwrap_err();
        assert_eq!(
            e,
            WireError::Truncated {
                what: "AtomicETH",
                offset: 0,
                need: 28,
                have: 27
            }
        );
        assert_eq!(AtomicEthRepr::parse(&b).unwrap_err(), e);
        let e = AtomicAckEthHeader::new_checked(&b[..7]).unwrap_err();
        assert_eq!(
            e,
            WireError::Truncated {
                what: "AtomicAckETH",
                offset: 0,
                need: 8,
                have: 7
            }
        );
        assert_eq!(AtomicAckEthRepr::parse(&b[..7]).unwrap_err(), e);
        assert!(matches!(
            AtomicEthRepr::default().emit(&mut [0u8; 27]),
            Err(WireError::BufferTooSmall { need: 28, have: 27 })
        ));
        assert!(matches!(
            AtomicAckEthRepr::default().emit(&mut [0u8; 7]),
            Err(WireError::BufferTooSmall { need: 8, have: 7 })
        ));
    }
}
