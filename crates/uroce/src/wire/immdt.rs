//! The two 4-byte extension headers: Immediate Data (ImmDt, IBTA §9.3.6) and the
//! Invalidate ETH (IETH, §9.3.7, the R_Key a SEND WITH INVALIDATE revokes). Both are one
//! big-endian 32-bit word.

use super::{be32, check_len, put32, reth::need, WireError};

/// Length of ImmDt and of IETH.
pub const HEADER_LEN: usize = 4;

/// Reads an ImmDt or IETH word from the first 4 bytes of `b`.
pub fn parse(what: &'static str, b: &[u8]) -> Result<u32, WireError> {
    check_len(what, b, HEADER_LEN, 0)?;
    Ok(be32(b, 0))
}

/// Writes an ImmDt or IETH word at the start of `b`.
pub fn emit(value: u32, b: &mut [u8]) -> Result<(), WireError> {
    need(b, HEADER_LEN)?;
    put32(b, 0, value);
    Ok(())
}
