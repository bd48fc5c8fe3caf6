//! The two 4-byte extension headers: Immediate Data (ImmDt, IBTA §9.3.6) and the
//! Invalidate ETH (IETH, §9.3.7, the R_Key a SEND WITH INVALIDATE revokes). Both are one
//! big-endian 32-bit word, so one view serves both; the RDETH and FETH, also one word,
//! are read through it too. Their plain representation is the `u32` itself, read by
//! [`parse`] and written by [`emit`].
//!
//! ```text
//! bytes 0-3   Immediate Data (ImmDt) or R_Key to invalidate (IETH)
//! ```

use super::{be32, check_len, need, put32, WireError};

/// Length of ImmDt and of IETH.
pub const HEADER_LEN: usize = 4;

mod field {
    /// Bytes 0-3: the immediate data, or the R_Key of an IETH.
    pub const VALUE: usize = 0;
}

/// A zero-copy view of an ImmDt or IETH (or any one-word extension header).
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
    /// Wraps a buffer, checking that 4 bytes are there; a truncation error names ImmDt.
    pub fn new_checked(buffer: T) -> Result<Self, WireError> {
        Self::new_checked_as("ImmDt", buffer)
    }
    /// [`Header::new_checked`] for a header that a truncation error calls `what`
    /// ("IETH", "RDETH", "FETH").
    pub fn new_checked_as(what: &'static str, buffer: T) -> Result<Self, WireError> {
        check_len(what, buffer.as_ref(), HEADER_LEN, 0)?;
        Ok(Self { buffer })
    }
    /// The wrapped buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }
    /// The word: immediate data (ImmDt) or the R_Key to invalidate (IETH).
    pub fn value(&self) -> u32 {
        be32(self.buffer.as_ref(), field::VALUE)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Header<T> {
    /// Sets the word.
    pub fn set_value(&mut self, v: u32) {
        put32(self.buffer.as_mut(), field::VALUE, v)
    }
}

/// Reads an ImmDt or IETH word from the first 4 bytes of `b`; `what` names the header in
/// a truncation error.
pub fn parse(what: &'static str, b: &[u8]) -> Result<u32, WireError> {
    Ok(Header::new_checked_as(what, b)?.value())
}

/// Writes an ImmDt or IETH word at the start of `b`.
pub fn emit(value: u32, b: &mut [u8]) -> Result<(), WireError> {
    need(b, HEADER_LEN)?;
    Header::new_unchecked(b).set_value(value);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn getter_on_known_bytes() {
        let b = [0xde, 0xad, 0xbe, 0xef, 0xff];
        let h = Header::new_checked(&b[..]).unwrap();
        assert_eq!(h.value(), 0xdead_beef);
        assert_eq!(parse("IETH", &b).unwrap(), 0xdead_beef);
    }

    #[test]
    fn setter_round_trip() {
        let mut b = [0u8; 4];
        let mut h = Header::new_checked(&mut b[..]).unwrap();
        h.set_value(0x0102_0304);
        assert_eq!(h.value(), 0x0102_0304);
        assert_eq!(b, [1, 2, 3, 4]);
        emit(0xa0b0_c0d0, &mut b).unwrap();
        assert_eq!(parse("ImmDt", &b).unwrap(), 0xa0b0_c0d0);
    }

    #[test]
    fn truncated_input_names_the_header() {
        let b = [0u8; 3];
        assert_eq!(
            Header::new_checked(&b[..]).unwrap_err(),
            WireError::Truncated {
                what: "ImmDt",
                offset: 0,
                need: 4,
                have: 3
            }
        );
        assert!(matches!(
            parse("IETH", &b),
            Err(WireError::Truncated {
                what: "IETH",
                need: 4,
                have: 3,
                ..
            })
        ));
        assert!(matches!(
            emit(1, &mut [0u8; 3]),
            Err(WireError::BufferTooSmall { need: 4, have: 3 })
        ));
    }
}
