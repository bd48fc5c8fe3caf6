//! RDMA Extended Transport Header (IBTA §9.3.3): the remote buffer of an RDMA WRITE or
//! READ request. 16 bytes:
//!
//! ```text
//! bytes 0-7    Virtual Address (VA)      §9.3.3.1
//! bytes 8-11   Remote Key (R_Key)        §9.3.3.2
//! bytes 12-15  DMA Length                §9.3.3.3
//! ```

use super::{be32, be64, check_len, need, put32, put64, WireError};

/// Length of the RETH.
pub const HEADER_LEN: usize = 16;

mod field {
    /// Bytes 0-7: virtual address.
    pub const VA: usize = 0;
    /// Bytes 8-11: R_Key.
    pub const R_KEY: usize = 8;
    /// Bytes 12-15: DMA length.
    pub const DMA_LEN: usize = 12;
}

/// A zero-copy view of a RETH.
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
    /// Wraps a buffer, checking that 16 bytes are there.
    pub fn new_checked(buffer: T) -> Result<Self, WireError> {
        check_len("RETH", buffer.as_ref(), HEADER_LEN, 0)?;
        Ok(Self { buffer })
    }
    /// The wrapped buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }
    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }
    /// Virtual address of the first byte of the remote buffer (§9.3.3.1).
    pub fn va(&self) -> u64 {
        be64(self.b(), field::VA)
    }
    /// R_Key that authorises the access to the remote buffer (§9.3.3.2).
    pub fn rkey(&self) -> u32 {
        be32(self.b(), field::R_KEY)
    }
    /// DMA length: bytes of the whole transfer, not of this packet (§9.3.3.3).
    pub fn dma_len(&self) -> u32 {
        be32(self.b(), field::DMA_LEN)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Header<T> {
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
    /// Sets the DMA length.
    pub fn set_dma_len(&mut self, v: u32) {
        put32(self.bm(), field::DMA_LEN, v)
    }
}

/// Plain representation of a RETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct RethRepr {
    /// Remote virtual address.
    pub va: u64,
    /// Remote key.
    pub rkey: u32,
    /// Length of the whole transfer in bytes (the DMA length).
    pub len: u32,
}

impl RethRepr {
    /// Parses the first 16 bytes of `b`.
    pub fn parse(b: &[u8]) -> Result<Self, WireError> {
        let h = Header::new_checked(b)?;
        Ok(Self {
            va: h.va(),
            rkey: h.rkey(),
            len: h.dma_len(),
        })
    }
    /// Bytes the header takes.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }
    /// Writes the header at the start of `b`.
    pub fn emit(&self, b: &mut [u8]) -> Result<(), WireError> {
        need(b, HEADER_LEN)?;
        let mut h = Header::new_unchecked(b);
        h.set_va(self.va);
        h.set_rkey(self.rkey);
        h.set_dma_len(self.len);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // RETH of an RDMA WRITE FIRST: VA 0x0000_5566_7788_99aa, R_Key 0x1234, 4096 bytes.
    const BYTES: [u8; 16] = [
        0x00, 0x00, 0x55, 0x66, 0x77, 0x88, 0x99, 0xaa, 0x00, 0x00, 0x12, 0x34, 0x00, 0x00, 0x10,
        0x00,
    ];

    #[test]
    fn getters_on_known_bytes() {
        let h = Header::new_checked(&BYTES[..]).unwrap();
        assert_eq!(h.va(), 0x0000_5566_7788_99aa);
        assert_eq!(h.rkey(), 0x1234);
        assert_eq!(h.dma_len(), 4096);
    }

    #[test]
    fn setters_round_trip() {
        let mut b = [0u8; 16];
        let mut h = Header::new_checked(&mut b[..]).unwrap();
        h.set_va(0x0102_0304_0506_0708);
        h.set_rkey(0x090a_0b0c);
        h.set_dma_len(0x0d0e_0f10);
        assert_eq!(
            (h.va(), h.rkey(), h.dma_len()),
            (0x0102_0304_0506_0708, 0x090a_0b0c, 0x0d0e_0f10)
        );
        assert_eq!(b, [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16]);
    }

    #[test]
    fn repr_round_trip() {
        let r = RethRepr {
            va: 0x0000_5566_7788_99aa,
            rkey: 0x1234,
            len: 4096,
        };
        let mut b = [0u8; 16];
        r.emit(&mut b).unwrap();
        assert_eq!(b, BYTES);
        assert_eq!(RethRepr::parse(&b).unwrap(), r);
        assert!(matches!(
            r.emit(&mut b[..15]),
            Err(WireError::BufferTooSmall { need: 16, have: 15 })
        ));
    }

    #[test]
    fn truncated_input_says_need_and_have() {
        for short in [&BYTES[..0], &BYTES[..15]] {
            let e = Header::new_checked(short).unwrap_err();
            assert_eq!(
                e,
                WireError::Truncated {
                    what: "RETH",
                    offset: 0,
                    need: 16,
                    have: short.len()
                }
            );
            assert_eq!(RethRepr::parse(short).unwrap_err(), e);
        }
    }
}
