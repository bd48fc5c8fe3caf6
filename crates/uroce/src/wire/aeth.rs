//! ACK Extended Transport Header (IBTA §9.3.5): syndrome (1 byte) and MSN (3 bytes).
//!
//! The syndrome's bits 6..5 say what the packet is (§9.7.5.1, Table 45): `00` ACK with a
//! credit count, `01` RNR NAK with a timer code, `11` NAK with a code; bit 7 is reserved.

use super::{be24, check_len, put24, reth::need, WireError};

/// Length of the AETH.
pub const HEADER_LEN: usize = 4;

/// Plain representation of an AETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct AethRepr {
    /// The syndrome byte as on the wire; [`AethRepr::kind`] decodes it.
    pub syndrome: u8,
    /// Message sequence number (24 bits).
    pub msn: u32,
}

/// NAK codes (syndrome `011xxxxx`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NakCode {
    /// PSN sequence error: the responder wants a resend from the PSN in the BTH.
    PsnSequenceError,
    /// Invalid request.
    InvalidRequest,
    /// Remote access error (rkey, bounds or rights).
    RemoteAccessError,
    /// Remote operational error.
    RemoteOperationalError,
    /// Invalid RD request.
    InvalidRdRequest,
    /// A reserved code.
    Reserved(u8),
}

impl NakCode {
    /// The 5-bit code.
    pub fn code(self) -> u8 {
        match self {
            Self::PsnSequenceError => 0,
            Self::InvalidRequest => 1,
            Self::RemoteAccessError => 2,
            Self::RemoteOperationalError => 3,
            Self::InvalidRdRequest => 4,
            Self::Reserved(c) => c & 0x1f,
        }
    }
    fn from_code(c: u8) -> Self {
        match c {
            0 => Self::PsnSequenceError,
            1 => Self::InvalidRequest,
            2 => Self::RemoteAccessError,
            3 => Self::RemoteOperationalError,
            4 => Self::InvalidRdRequest,
            c => Self::Reserved(c),
        }
    }
}

/// A decoded syndrome.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Syndrome {
    /// Positive acknowledgement with an end-to-end credit count (31 = invalid/unlimited).
    Ack { credits: u8 },
    /// Receiver not ready; the 5-bit timer code selects the minimum wait (§9.7.5.2.8, Table 46).
    RnrNak { timer: u8 },
    /// Negative acknowledgement.
    Nak(NakCode),
    /// Syndrome type `10`, reserved.
    Reserved(u8),
}

impl Syndrome {
    /// The syndrome byte.
    pub fn to_byte(self) -> u8 {
        match self {
            Self::Ack { credits } => credits & 0x1f,
            Self::RnrNak { timer } => 0x20 | (timer & 0x1f),
            Self::Nak(code) => 0x60 | code.code(),
            Self::Reserved(b) => b,
        }
    }
    /// Decodes a syndrome byte.
    pub fn from_byte(b: u8) -> Self {
        match (b >> 5) & 0x03 {
            0 => Self::Ack { credits: b & 0x1f },
            1 => Self::RnrNak { timer: b & 0x1f },
            3 => Self::Nak(NakCode::from_code(b & 0x1f)),
            _ => Self::Reserved(b),
        }
    }
}

impl AethRepr {
    /// An AETH for `syndrome` and `msn`.
    pub fn new(syndrome: Syndrome, msn: u32) -> Self {
        Self {
            syndrome: syndrome.to_byte(),
            msn,
        }
    }
    /// Parses the first 4 bytes of `b`.
    pub fn parse(b: &[u8]) -> Result<Self, WireError> {
        check_len("AETH", b, HEADER_LEN, 0)?;
        Ok(Self {
            syndrome: b[0],
            msn: be24(b, 1),
        })
    }
    /// The decoded syndrome.
    pub fn kind(&self) -> Syndrome {
        Syndrome::from_byte(self.syndrome)
    }
    /// Bytes the header takes.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }
    /// Writes the header at the start of `b`.
    pub fn emit(&self, b: &mut [u8]) -> Result<(), WireError> {
        need(b, HEADER_LEN)?;
        if self.msn > 0x00ff_ffff {
            return Err(WireError::InvalidRepr("MSN wider than 24 bits"));
        }
        b[0] = self.syndrome;
        put24(b, 1, self.msn);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn syndromes() {
        assert_eq!(Syndrome::from_byte(0x1f), Syndrome::Ack { credits: 31 });
        assert_eq!(Syndrome::from_byte(0x2e), Syndrome::RnrNak { timer: 14 });
        assert_eq!(
            Syndrome::from_byte(0x62),
            Syndrome::Nak(NakCode::RemoteAccessError)
        );
        assert_eq!(Syndrome::from_byte(0x45), Syndrome::Reserved(0x45));
        for b in 0..=0x7fu8 {
            assert_eq!(Syndrome::from_byte(b).to_byte(), b);
        }
        let a = AethRepr::new(Syndrome::Nak(NakCode::PsnSequenceError), 0xabcdef);
        let mut buf = [0u8; 4];
        a.emit(&mut buf).unwrap();
        assert_eq!(buf, [0x60, 0xab, 0xcd, 0xef]);
        assert_eq!(AethRepr::parse(&buf).unwrap(), a);
    }
}
