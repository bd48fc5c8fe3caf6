//! Datagram Extended Transport Header (IBTA §9.3.2): carried by every UD packet. 8 bytes:
//!
//! ```text
//! bytes 0-3   Queue Key (Q_Key)
//! byte 4      reserved (sent as 0)
//! bytes 5-7   Source QP (SrcQP)
//! ```

use super::{be24, be32, check_len, need, put24, put32, WireError};

/// Length of the DETH.
pub const HEADER_LEN: usize = 8;
/// QPNs are 24 bits.
pub const QPN_MASK: u32 = 0x00ff_ffff;

mod field {
    /// Bytes 0-3: Q_Key.
    pub const Q_KEY: usize = 0;
    /// Byte 4: reserved.
    pub const RESERVED: usize = 4;
    /// Bytes 5-7: source QP.
    pub const SRC_QP: usize = 5;
}

/// A zero-copy view of a DETH.
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
    /// Wraps a buffer, checking that 8 bytes are there.
    pub fn new_checked(buffer: T) -> Result<Self, WireError> {
        check_len("DETH", buffer.as_ref(), HEADER_LEN, 0)?;
        Ok(Self { buffer })
    }
    /// The wrapped buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }
    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }
    /// Queue key the receiving QP checks.
    pub fn qkey(&self) -> u32 {
        be32(self.b(), field::Q_KEY)
    }
    /// The reserved byte as found (ignored on receive).
    pub fn reserved(&self) -> u8 {
        self.b()[field::RESERVED]
    }
    /// The sender's QP number, 24 bits.
    pub fn src_qp(&self) -> u32 {
        be24(self.b(), field::SRC_QP)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Header<T> {
    fn bm(&mut self) -> &mut [u8] {
        self.buffer.as_mut()
    }
    /// Sets the Q_Key.
    pub fn set_qkey(&mut self, v: u32) {
        put32(self.bm(), field::Q_KEY, v)
    }
    /// Zeroes the reserved byte, as a sender must.
    pub fn clear_reserved(&mut self) {
        self.bm()[field::RESERVED] = 0
    }
    /// Sets the source QP; only its low 24 bits are written.
    pub fn set_src_qp(&mut self, v: u32) {
        put24(self.bm(), field::SRC_QP, v)
    }
}

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
        let h = Header::new_checked(b)?;
        Ok(Self {
            qkey: h.qkey(),
            src_qp: h.src_qp(),
        })
    }
    /// Bytes the header takes.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }
    /// Writes the header at the start of `b`.
    pub fn emit(&self, b: &mut [u8]) -> Result<(), WireError> {
        need(b, HEADER_LEN)?;
        if self.src_qp > QPN_MASK {
            return Err(WireError::InvalidRepr("source QPN wider than 24 bits"));
        }
        let mut h = Header::new_unchecked(b);
        h.set_qkey(self.qkey);
        h.clear_reserved();
        h.set_src_qp(self.src_qp);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn getters_on_known_bytes() {
        // DETH of a UD SEND: Q_Key 0x11111111, reserved byte set (ignored), source QP 0xabcdef.
        let b = [0x11, 0x11, 0x11, 0x11, 0x5a, 0xab, 0xcd, 0xef];
        let h = Header::new_checked(&b[..]).unwrap();
        assert_eq!(h.qkey(), 0x1111_1111);
        assert_eq!(h.reserved(), 0x5a);
        assert_eq!(h.src_qp(), 0xab_cdef);
        assert_eq!(
            DethRepr::parse(&b).unwrap(),
            DethRepr {
                qkey: 0x1111_1111,
                src_qp: 0xab_cdef
            }
        );
    }

    #[test]
    fn setters_round_trip() {
        let mut b = [0xffu8; 8];
        let mut h = Header::new_checked(&mut b[..]).unwrap();
        h.set_qkey(0x8001_0002);
        h.set_src_qp(0x12_3456);
        assert_eq!(
            (h.qkey(), h.src_qp(), h.reserved()),
            (0x8001_0002, 0x12_3456, 0xff)
        );
        h.clear_reserved();
        assert_eq!(h.reserved(), 0);
        assert_eq!(b, [0x80, 0x01, 0x00, 0x02, 0, 0x12, 0x34, 0x56]);
    }

    #[test]
    fn repr_round_trip() {
        let d = DethRepr {
            qkey: 0x1111_1111,
            src_qp: 0x11,
        };
        let mut b = [0xffu8; 8];
        d.emit(&mut b).unwrap();
        assert_eq!(b, [0x11, 0x11, 0x11, 0x11, 0, 0, 0, 0x11]);
        assert_eq!(DethRepr::parse(&b).unwrap(), d);
        let wide = DethRepr {
            src_qp: 1 << 24,
            ..d
        };
        assert!(matches!(wide.emit(&mut b), Err(WireError::InvalidRepr(_))));
    }

    #[test]
    fn truncated_input_says_need_and_have() {
        let b = [0u8; 7];
        let e = Header::new_checked(&b[..]).unwrap_err();
        assert_eq!(
            e,
            WireError::Truncated {
                what: "DETH",
                offset: 0,
                need: 8,
                have: 7
            }
        );
        assert_eq!(DethRepr::parse(&b).unwrap_err(), e);
        assert!(matches!(
            DethRepr::default().emit(&mut [0u8; 7]),
            Err(WireError::BufferTooSmall { need: 8, have: 7 })
        ));
    }
}
