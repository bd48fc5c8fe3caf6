//! ACK Extended Transport Header (IBTA §9.3.5): syndrome (1 byte) and MSN (3 bytes).
//!
//! ```text
//! byte 0      Syndrome
//! bytes 1-3   MSN (message sequence number)
//! ```
//!
//! The syndrome's bits 6..5 say what the packet is (§9.7.5.1, Table 45): `00` ACK with a
//! credit count, `01` RNR NAK with a timer code, `11` NAK with a code; bit 7 is reserved.

use super::{be24, check_len, need, put24, WireError};

/// Length of the AETH.
pub const HEADER_LEN: usize = 4;
/// MSNs are 24 bits.
pub const MSN_MASK: u32 = 0x00ff_ffff;

mod field {
    /// Byte 0: syndrome.
    pub const SYNDROME: usize = 0;
    /// Bytes 1-3: MSN.
    pub const MSN: usize = 1;
}

/// A zero-copy view of an AETH.
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
    /// Wraps a buffer, checking that 4 bytes are there.
    pub fn new_checked(buffer: T) -> Result<Self, WireError> {
        check_len("AETH", buffer.as_ref(), HEADER_LEN, 0)?;
        Ok(Self { buffer })
    }
    /// The wrapped buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }
    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }
    /// The syndrome byte as on the wire (§9.7.5.1); [`Syndrome::from_byte`] decodes it.
    pub fn syndrome(&self) -> u8 {
        self.b()[field::SYNDROME]
    }
    /// Message sequence number (24 bits).
    pub fn msn(&self) -> u32 {
        be24(self.b(), field::MSN)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Header<T> {
    fn bm(&mut self) -> &mut [u8] {
        self.buffer.as_mut()
    }
    /// Sets the syndrome byte.
    pub fn set_syndrome(&mut self, v: u8) {
        self.bm()[field::SYNDROME] = v
    }
    /// Sets the MSN; only its low 24 bits are written.
    pub fn set_msn(&mut self, v: u32) {
        put24(self.bm(), field::MSN, v)
    }
}

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
    /// The code's name as IBTA Vol. 1 Table 45 gives it, upper case with underscores
    /// (`PSN_SEQUENCE_ERROR`...; `RESERVED` for codes 5 to 31).
    pub fn name(self) -> &'static str {
        match self {
            Self::PsnSequenceError => "PSN_SEQUENCE_ERROR",
            Self::InvalidRequest => "INVALID_REQUEST",
            Self::RemoteAccessError => "REMOTE_ACCESS_ERROR",
            Self::RemoteOperationalError => "REMOTE_OPERATIONAL_ERROR",
            Self::InvalidRdRequest => "INVALID_RD_REQUEST",
            Self::Reserved(_) => "RESERVED",
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

/// The number of end-to-end credits an ACK's 5-bit credit code grants (IBTA Vol. 1
/// §9.7.7.2, end-to-end credit codes: 0 to 4 as they are, then 1.5 and 2 times a power of two up to
/// 32768 for code 30); `None` for code 31, "credit count not used" (the responder has an
/// SRQ or does not do end-to-end flow control).
pub fn credits_from_code(code: u8) -> Option<u32> {
    match code & 0x1f {
        31 => None,
        c @ 0..=4 => Some(u32::from(c)),
        // Even codes from 6 on are 2^(code/2); odd codes from 5 on are one and a half
        // times the even code below them: 5 → 6, 6 → 8, 7 → 12, ..., 30 → 32768.
        c if c % 2 == 0 => Some(1 << (c / 2)),
        c => Some(3 << ((c - 1) / 2 - 1)),
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
        let h = Header::new_checked(b)?;
        Ok(Self {
            syndrome: h.syndrome(),
            msn: h.msn(),
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
        if self.msn > MSN_MASK {
            return Err(WireError::InvalidRepr("MSN wider than 24 bits"));
        }
        let mut h = Header::new_unchecked(b);
        h.set_syndrome(self.syndrome);
        h.set_msn(self.msn);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credit_codes_follow_the_spec_table() {
        let table = [
            0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024,
            1536, 2048, 3072, 4096, 6144, 8192, 12288, 16384, 24576, 32768,
        ];
        for (code, want) in table.iter().enumerate() {
            assert_eq!(credits_from_code(code as u8), Some(*want), "code {code}");
        }
        assert_eq!(credits_from_code(31), None);
        assert_eq!(NakCode::from_code(0).name(), "PSN_SEQUENCE_ERROR");
        assert_eq!(NakCode::from_code(3).name(), "REMOTE_OPERATIONAL_ERROR");
        assert_eq!(NakCode::from_code(9).name(), "RESERVED");
    }

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

    #[test]
    fn getters_on_known_bytes() {
        // AETH of an RNR NAK (timer code 14) for MSN 0x010203.
        let b = [0x2e, 0x01, 0x02, 0x03];
        let h = Header::new_checked(&b[..]).unwrap();
        assert_eq!(h.syndrome(), 0x2e);
        assert_eq!(h.msn(), 0x01_0203);
        assert_eq!(
            Syndrome::from_byte(h.syndrome()),
            Syndrome::RnrNak { timer: 14 }
        );
    }

    #[test]
    fn setters_round_trip() {
        let mut b = [0xffu8; 4];
        let mut h = Header::new_checked(&mut b[..]).unwrap();
        h.set_syndrome(0x1f);
        h.set_msn(0x00ab_cdef);
        assert_eq!((h.syndrome(), h.msn()), (0x1f, 0xab_cdef));
        h.set_msn(0x7f00_0001);
        assert_eq!(h.msn(), 1, "only the low 24 bits are written");
        assert_eq!(b, [0x1f, 0, 0, 1]);
    }

    #[test]
    fn truncated_input_and_wide_msn() {
        let e = Header::new_checked(&[0x60u8, 0, 0][..]).unwrap_err();
        assert_eq!(
            e,
            WireError::Truncated {
                what: "AETH",
                offset: 0,
                need: 4,
                have: 3
            }
        );
        assert_eq!(AethRepr::parse(&[0x60, 0, 0]).unwrap_err(), e);
        let mut b = [0u8; 4];
        let wide = AethRepr {
            syndrome: 0,
            msn: 1 << 24,
        };
        assert!(matches!(wide.emit(&mut b), Err(WireError::InvalidRepr(_))));
        assert!(matches!(
            AethRepr::default().emit(&mut b[..3]),
            Err(WireError::BufferTooSmall { need: 4, have: 3 })
        ));
    }
}
