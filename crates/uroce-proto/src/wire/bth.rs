//! Base Transport Header (IBTA Vol. 1 §9.2): 12 bytes that start every transport packet.
//!
//! ```text
//! byte 0      opcode
//! byte 1      SE | M | PadCnt(2) | TVer(4)
//! bytes 2-3   P_Key
//! byte 4      FECN | BECN | reserved(6)     (resv8a: masked to ones in the ICRC)
//! bytes 5-7   DestQP
//! byte 8      AckReq | reserved(7)
//! bytes 9-11  PSN
//! ```

use super::{be16, be24, check_len, put16, put24, Opcode, WireError};

/// Length of the BTH.
pub const HEADER_LEN: usize = 12;
/// Byte of the BTH that the ICRC masks to ones (FECN, BECN, reserved).
pub const RESV8A_OFFSET: usize = 4;
/// PSNs are 24 bits.
pub const PSN_MASK: u32 = 0x00ff_ffff;
/// QPNs are 24 bits.
pub const QPN_MASK: u32 = 0x00ff_ffff;

/// The destination QP of a packet that starts with a BTH (a RoCEv2 datagram's UDP
/// payload), read without parsing the rest, to steer it to its owner before the owner
/// checks it; `None` when it is too short to hold a BTH's destination QP.
pub fn dest_qp_of(packet: &[u8]) -> Option<u32> {
    let b = packet.get(field::DEST_QP..field::DEST_QP + 3)?;
    Some(u32::from_be_bytes([0, b[0], b[1], b[2]]))
}

mod field {
    pub const OPCODE: usize = 0;
    pub const FLAGS: usize = 1;
    pub const PKEY: usize = 2;
    pub const RESV8A: usize = 4;
    pub const DEST_QP: usize = 5;
    pub const ACK: usize = 8;
    pub const PSN: usize = 9;
}

/// A zero-copy view of a BTH.
#[derive(Debug, Clone, Copy)]
pub struct Header<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Header<T> {
    /// Wraps a buffer, checking that 12 bytes are there.
    pub fn new_checked(buffer: T) -> Result<Self, WireError> {
        check_len("BTH", buffer.as_ref(), HEADER_LEN, 0)?;
        Ok(Self { buffer })
    }
    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }
    /// Raw opcode byte.
    pub fn opcode(&self) -> u8 {
        self.b()[field::OPCODE]
    }
    /// Solicited event.
    pub fn solicited(&self) -> bool {
        self.b()[field::FLAGS] & 0x80 != 0
    }
    /// Migration request.
    pub fn mig_req(&self) -> bool {
        self.b()[field::FLAGS] & 0x40 != 0
    }
    /// Pad count: bytes of padding after the payload (0..=3).
    pub fn pad_count(&self) -> u8 {
        (self.b()[field::FLAGS] >> 4) & 0x03
    }
    /// Transport header version (must be 0).
    pub fn tver(&self) -> u8 {
        self.b()[field::FLAGS] & 0x0f
    }
    /// Partition key.
    pub fn pkey(&self) -> u16 {
        be16(self.b(), field::PKEY)
    }
    /// Forward explicit congestion notification.
    pub fn fecn(&self) -> bool {
        self.b()[field::RESV8A] & 0x80 != 0
    }
    /// Backward explicit congestion notification.
    pub fn becn(&self) -> bool {
        self.b()[field::RESV8A] & 0x40 != 0
    }
    /// Destination QP number (24 bits).
    pub fn dest_qp(&self) -> u32 {
        be24(self.b(), field::DEST_QP)
    }
    /// The 6 reserved bits of byte 4 (after FECN and BECN); 0 from a conforming sender.
    pub fn resv6(&self) -> u8 {
        self.b()[field::RESV8A] & 0x3f
    }
    /// Acknowledge request.
    pub fn ack_req(&self) -> bool {
        self.b()[field::ACK] & 0x80 != 0
    }
    /// The 7 reserved bits of byte 8 (after AckReq); 0 from a conforming sender.
    pub fn resv7(&self) -> u8 {
        self.b()[field::ACK] & 0x7f
    }
    /// Packet sequence number (24 bits).
    pub fn psn(&self) -> u32 {
        be24(self.b(), field::PSN)
    }
}

/// Plain representation of a BTH. TVer is always 0 and reserved bits are sent as 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BthRepr {
    /// The opcode.
    pub opcode: Opcode,
    /// Solicited event.
    pub solicited: bool,
    /// Migration request (APM); RoCE senders set it to 1 on connected QPs... or not: carried as is.
    pub mig_req: bool,
    /// Pad count; the frame builder derives it from the payload length.
    pub pad_count: u8,
    /// Partition key (0xffff is the default full-membership key).
    pub pkey: u16,
    /// FECN.
    pub fecn: bool,
    /// BECN.
    pub becn: bool,
    /// Destination QP (24 bits).
    pub dest_qp: u32,
    /// Acknowledge request.
    pub ack_req: bool,
    /// PSN (24 bits).
    pub psn: u32,
}

impl BthRepr {
    /// A BTH with the default P_Key and every flag clear.
    pub fn new(opcode: Opcode, dest_qp: u32, psn: u32) -> Self {
        Self {
            opcode,
            solicited: false,
            mig_req: false,
            pad_count: 0,
            pkey: 0xffff,
            fecn: false,
            becn: false,
            dest_qp,
            ack_req: false,
            psn,
        }
    }

    /// Parses a checked view: the opcode must be known and TVer 0.
    pub fn parse<T: AsRef<[u8]>>(h: &Header<T>) -> Result<Self, WireError> {
        // One copy of the 12 bytes, then plain shifts: no bounds check per field.
        let mut b = [0u8; HEADER_LEN];
        b.copy_from_slice(&h.buffer.as_ref()[..HEADER_LEN]);
        let opcode = Opcode::from_u8(b[field::OPCODE]).ok_or(WireError::UnknownOpcode {
            opcode: b[field::OPCODE],
            offset: 0,
        })?;
        let flags = b[field::FLAGS];
        if flags & 0x0f != 0 {
            return Err(WireError::BadTver {
                tver: flags & 0x0f,
                offset: field::FLAGS,
            });
        }
        let w1 = u32::from_be_bytes([b[4], b[5], b[6], b[7]]);
        let w2 = u32::from_be_bytes([b[8], b[9], b[10], b[11]]);
        Ok(Self {
            opcode,
            solicited: flags & 0x80 != 0,
            mig_req: flags & 0x40 != 0,
            pad_count: (flags >> 4) & 0x03,
            pkey: u16::from_be_bytes([b[field::PKEY], b[field::PKEY + 1]]),
            fecn: w1 & 0x8000_0000 != 0,
            becn: w1 & 0x4000_0000 != 0,
            dest_qp: w1 & QPN_MASK,
            ack_req: w2 & 0x8000_0000 != 0,
            psn: w2 & PSN_MASK,
        })
    }

    /// Bytes the header takes.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes the header at the start of `buf`.
    pub fn emit(&self, buf: &mut [u8]) -> Result<(), WireError> {
        if buf.len() < HEADER_LEN {
            return Err(WireError::BufferTooSmall {
                need: HEADER_LEN,
                have: buf.len(),
            });
        }
        if self.pad_count > 3 || self.dest_qp > QPN_MASK || self.psn > PSN_MASK {
            return Err(WireError::InvalidRepr(
                "BTH pad count above 3, or QPN / PSN wider than 24 bits",
            ));
        }
        buf[field::OPCODE] = self.opcode.value();
        buf[field::FLAGS] =
            (u8::from(self.solicited) << 7) | (u8::from(self.mig_req) << 6) | (self.pad_count << 4);
        put16(buf, field::PKEY, self.pkey);
        buf[field::RESV8A] = (u8::from(self.fecn) << 7) | (u8::from(self.becn) << 6);
        put24(buf, field::DEST_QP, self.dest_qp);
        buf[field::ACK] = u8::from(self.ack_req) << 7;
        put24(buf, field::PSN, self.psn);
        Ok(())
    }
}

/// A received BTH as its 12 bytes, read field by field when asked: what a parsed packet
/// ([`super::RocePacket`]) carries. The parser checked it (a known opcode, TVer 0,
/// IBTA Vol. 1 §9.2), so each accessor is a load and a shift or mask; keeping the bytes
/// instead of [`BthRepr`]'s ten fields (five of them flags) saves the receive path a
/// decode of fields that most packets never read. The reserved bits are kept as they came
/// (the ICRC covers them) and read by no accessor but [`Bth::as_bytes`].
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Bth {
    /// The opcode of byte 0, known.
    opcode: Opcode,
    b: [u8; HEADER_LEN],
}

impl Bth {
    /// The BTH `b`, whose opcode byte is `opcode`'s and whose TVer is 0 (the caller
    /// checked).
    #[inline(always)]
    pub(crate) fn new(opcode: Opcode, b: [u8; HEADER_LEN]) -> Self {
        debug_assert!(b[field::OPCODE] == opcode.value() && b[field::FLAGS] & 0x0f == 0);
        Self { opcode, b }
    }
    /// Checks the 12 bytes at the start of `buf` as [`BthRepr::parse`] does (a known
    /// opcode, TVer 0) and keeps them.
    pub fn parse(buf: &[u8]) -> Result<Self, WireError> {
        let h = Header::new_checked(buf)?;
        let r = BthRepr::parse(&h)?;
        let mut b = [0u8; HEADER_LEN];
        b.copy_from_slice(&buf[..HEADER_LEN]);
        Ok(Self::new(r.opcode, b))
    }
    /// The opcode.
    #[inline]
    pub fn opcode(&self) -> Opcode {
        self.opcode
    }
    /// Solicited event.
    #[inline]
    pub fn solicited(&self) -> bool {
        self.b[field::FLAGS] & 0x80 != 0
    }
    /// Migration request.
    #[inline]
    pub fn mig_req(&self) -> bool {
        self.b[field::FLAGS] & 0x40 != 0
    }
    /// Pad count: bytes of padding after the payload (0..=3).
    #[inline]
    pub fn pad_count(&self) -> u8 {
        (self.b[field::FLAGS] >> 4) & 0x03
    }
    /// Partition key.
    #[inline]
    pub fn pkey(&self) -> u16 {
        u16::from_be_bytes([self.b[field::PKEY], self.b[field::PKEY + 1]])
    }
    /// Forward explicit congestion notification.
    #[inline]
    pub fn fecn(&self) -> bool {
        self.b[field::RESV8A] & 0x80 != 0
    }
    /// Backward explicit congestion notification.
    #[inline]
    pub fn becn(&self) -> bool {
        self.b[field::RESV8A] & 0x40 != 0
    }
    /// Destination QP (24 bits).
    #[inline]
    pub fn dest_qp(&self) -> u32 {
        let [_, _, _, _, r, q0, q1, q2, ..] = self.b;
        u32::from_be_bytes([r, q0, q1, q2]) & QPN_MASK
    }
    /// Acknowledge request.
    #[inline]
    pub fn ack_req(&self) -> bool {
        self.b[field::ACK] & 0x80 != 0
    }
    /// PSN (24 bits).
    #[inline]
    pub fn psn(&self) -> u32 {
        let [.., a, p0, p1, p2] = self.b;
        u32::from_be_bytes([a, p0, p1, p2]) & PSN_MASK
    }
    /// The BTH's fields as a [`BthRepr`] (reserved bits dropped).
    pub fn repr(&self) -> BthRepr {
        BthRepr {
            opcode: self.opcode,
            solicited: self.solicited(),
            mig_req: self.mig_req(),
            pad_count: self.pad_count(),
            pkey: self.pkey(),
            fecn: self.fecn(),
            becn: self.becn(),
            dest_qp: self.dest_qp(),
            ack_req: self.ack_req(),
            psn: self.psn(),
        }
    }
    /// The 12 bytes as received.
    pub fn as_bytes(&self) -> &[u8; HEADER_LEN] {
        &self.b
    }
}

impl From<Bth> for BthRepr {
    fn from(b: Bth) -> Self {
        b.repr()
    }
}

impl core::fmt::Debug for Bth {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        self.repr().fmt(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_real_bth() {
        // RC SEND_ONLY from rc_pingpong.pcap: opcode 4, P_Key 0xffff, QP 0x12, AckReq, PSN 0x1443b7.
        let b = [
            0x04, 0x00, 0xff, 0xff, 0x00, 0x00, 0x00, 0x12, 0x80, 0x14, 0x43, 0xb7,
        ];
        let r = BthRepr::parse(&Header::new_checked(&b[..]).unwrap()).unwrap();
        assert_eq!(r.opcode, Opcode::RcSendOnly);
        assert_eq!(
            (r.dest_qp, r.psn, r.ack_req, r.pkey),
            (0x12, 0x1443b7, true, 0xffff)
        );
        let mut out = [0u8; 12];
        r.emit(&mut out).unwrap();
        assert_eq!(out, b);
    }

    #[test]
    fn rejects_bad_tver_unknown_opcode_and_wide_fields() {
        let mut b = [0u8; 12];
        b[1] = 0x01;
        assert!(matches!(
            BthRepr::parse(&Header::new_checked(&b[..]).unwrap()),
            Err(WireError::BadTver { tver: 1, .. })
        ));
        b[0] = 0x1f;
        assert!(matches!(
            BthRepr::parse(&Header::new_checked(&b[..]).unwrap()),
            Err(WireError::UnknownOpcode { opcode: 0x1f, .. })
        ));
        let mut r = BthRepr::new(Opcode::RcAck, 1, 1 << 24);
        assert!(r.emit(&mut b).is_err());
        r.psn = 0;
        assert!(r.emit(&mut b[..11]).is_err());
    }

    #[test]
    fn reserved_bits_and_migreq_are_read_where_they_are() {
        // byte 1: SE | M | pad 2 | tver 3; byte 4: FECN | resv6 0x15; byte 8: resv7 0x2a.
        let b = [
            0x04, 0xe3, 0xff, 0xff, 0x95, 0x00, 0x00, 0x12, 0x2a, 0x00, 0x00, 0x01,
        ];
        let h = Header::new_checked(&b[..]).unwrap();
        assert!(h.solicited() && h.mig_req() && h.fecn() && !h.becn() && !h.ack_req());
        assert_eq!((h.pad_count(), h.tver()), (2, 3));
        assert_eq!((h.resv6(), h.resv7()), (0x15, 0x2a));
    }

    /// The kept bytes read as the parsed fields do, for every flag bit and the widest
    /// QPN and PSN; reserved bits stay in the bytes and out of the fields.
    #[test]
    fn a_kept_bth_reads_what_the_repr_parses() {
        for flags in [0x00u8, 0x80, 0x40, 0x10, 0x20, 0x30, 0xf0] {
            for (r4, r8) in [(0x00u8, 0x00u8), (0x80, 0x80), (0x40, 0x7f), (0xff, 0xff)] {
                let b = [
                    0x0a, flags, 0x80, 0x01, r4, 0xff, 0xfe, 0xfd, r8, 0xfc, 0xfb, 0xfa,
                ];
                let kept = Bth::parse(&b).unwrap();
                let r = BthRepr::parse(&Header::new_checked(&b[..]).unwrap()).unwrap();
                assert_eq!(kept.repr(), r, "{b:02x?}");
                assert_eq!(BthRepr::from(kept), r);
                assert_eq!(kept.as_bytes(), &b);
                assert_eq!((kept.dest_qp(), kept.psn()), (0xff_fefd, 0xfc_fbfa));
            }
        }
        let mut b = [0u8; 12];
        b[1] = 0x02;
        assert!(matches!(
            Bth::parse(&b),
            Err(WireError::BadTver { tver: 2, .. })
        ));
        assert!(Bth::parse(&b[..11]).is_err());
    }
}
