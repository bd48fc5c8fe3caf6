//! IPv4 header (RFC 791), options allowed, with the header checksum.

use std::net::Ipv4Addr;

use super::{be16, check_len, put16, WireError};

/// Length of an IPv4 header without options.
pub const MIN_HEADER_LEN: usize = 20;
/// Longest IPv4 header (IHL 15).
pub const MAX_HEADER_LEN: usize = 60;
/// IP protocol number of UDP.
pub const PROTO_UDP: u8 = 17;

mod field {
    pub const VER_IHL: usize = 0;
    pub const TOS: usize = 1;
    pub const LENGTH: usize = 2;
    pub const IDENT: usize = 4;
    pub const FLG_OFF: usize = 6;
    pub const TTL: usize = 8;
    pub const PROTOCOL: usize = 9;
    pub const CHECKSUM: usize = 10;
    pub const SRC: usize = 12;
    pub const DST: usize = 16;
}

/// A zero-copy view of an IPv4 header.
#[derive(Debug, Clone, Copy)]
pub struct Header<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Header<T> {
    /// Wraps a buffer without checks.
    pub fn new_unchecked(buffer: T) -> Self {
        Self { buffer }
    }

    /// Wraps a buffer, checking version, IHL and that the whole header is present.
    /// Lengths beyond the header are checked by the packet parser, which knows the frame.
    pub fn new_checked(buffer: T) -> Result<Self, WireError> {
        let h = Self::new_unchecked(buffer);
        let b = h.buffer.as_ref();
        check_len("IPv4 header", b, MIN_HEADER_LEN, 0)?;
        if h.version() != 4 {
            return Err(WireError::BadIpVersion {
                version: h.version(),
                expected: 4,
                offset: 0,
            });
        }
        if h.header_len() < MIN_HEADER_LEN {
            return Err(WireError::BadIpv4HeaderLen {
                len: h.header_len(),
                offset: 0,
            });
        }
        check_len("IPv4 options", b, h.header_len(), 0)?;
        Ok(h)
    }

    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }
    /// Version nibble.
    pub fn version(&self) -> u8 {
        self.b()[field::VER_IHL] >> 4
    }
    /// Header length in bytes (IHL × 4).
    pub fn header_len(&self) -> usize {
        usize::from(self.b()[field::VER_IHL] & 0x0f) * 4
    }
    /// The TOS byte: DSCP (6 bits) and ECN (2 bits).
    pub fn tos(&self) -> u8 {
        self.b()[field::TOS]
    }
    /// Total length field.
    pub fn total_len(&self) -> u16 {
        be16(self.b(), field::LENGTH)
    }
    /// Identification.
    pub fn ident(&self) -> u16 {
        be16(self.b(), field::IDENT)
    }
    /// Don't fragment flag.
    pub fn dont_frag(&self) -> bool {
        self.b()[field::FLG_OFF] & 0x40 != 0
    }
    /// More fragments flag.
    pub fn more_frags(&self) -> bool {
        self.b()[field::FLG_OFF] & 0x20 != 0
    }
    /// Fragment offset, in 8-byte units.
    pub fn frag_offset(&self) -> u16 {
        be16(self.b(), field::FLG_OFF) & 0x1fff
    }
    /// Time to live.
    pub fn ttl(&self) -> u8 {
        self.b()[field::TTL]
    }
    /// Payload protocol.
    pub fn protocol(&self) -> u8 {
        self.b()[field::PROTOCOL]
    }
    /// Header checksum as found.
    pub fn checksum(&self) -> u16 {
        be16(self.b(), field::CHECKSUM)
    }
    /// Source address.
    pub fn src(&self) -> Ipv4Addr {
        let b = self.b();
        Ipv4Addr::new(
            b[field::SRC],
            b[field::SRC + 1],
            b[field::SRC + 2],
            b[field::SRC + 3],
        )
    }
    /// Destination address.
    pub fn dst(&self) -> Ipv4Addr {
        let b = self.b();
        Ipv4Addr::new(
            b[field::DST],
            b[field::DST + 1],
            b[field::DST + 2],
            b[field::DST + 3],
        )
    }
    /// Options bytes (empty when IHL is 5).
    pub fn options(&self) -> &[u8] {
        &self.b()[MIN_HEADER_LEN..self.header_len()]
    }
    /// The checksum the header should carry (computed with the checksum field as zero).
    pub fn compute_checksum(&self) -> u16 {
        header_checksum(&self.b()[..self.header_len()])
    }
}

/// Internet checksum (RFC 1071) of an IPv4 header, skipping its checksum field.
pub fn header_checksum(header: &[u8]) -> u16 {
    let mut sum: u32 = 0;
    let mut i = 0;
    while i + 1 < header.len() {
        if i != field::CHECKSUM {
            sum += u32::from(be16(header, i));
        }
        i += 2;
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// What [`header_checksum`] says of a 20-byte header (no options) against the checksum
/// it carries: 0 when they agree, something else when not. The same verdict, read a
/// word of 32 bits at a time and in either byte order: the ones'-complement sum of the
/// header's 16-bit words other than the checksum may be taken over wider words and
/// folded, and in swapped byte order gives the swapped sum (RFC 1071 §2 (A), (B)), so
/// the words are read least significant byte first, which costs no byte swaps on the
/// usual machine, and compared with the checksum read the same way.
#[inline]
pub fn checksum_20(h: &[u8; MIN_HEADER_LEN]) -> u16 {
    let w = |at: usize| u64::from(u32::from_le_bytes([h[at], h[at + 1], h[at + 2], h[at + 3]]));
    // The checksum is bytes 10 and 11: the high half of the third word, so read.
    let sum = w(0) + w(4) + (w(8) & 0xffff) + w(12) + w(16);
    // Folded to 32 bits and then to 16, each time with the end-around carry, which
    // cannot carry again (the high part is at most 4, then at most 0xffff). Like
    // `header_checksum`'s folding this gives 0 only for a sum of 0, and otherwise the
    // one value from 1 to 0xffff the sum is congruent to modulo 0xffff.
    let (s, c) = (sum as u32).overflowing_add((sum >> 32) as u32);
    let s = s + u32::from(c);
    let (s, c) = (s as u16).overflowing_add((s >> 16) as u16);
    let s = s + u16::from(c);
    !s ^ u16::from_le_bytes([h[field::CHECKSUM], h[field::CHECKSUM + 1]])
}

/// Plain representation of an IPv4 header. Total length is derived from the payload
/// when emitting and the checksum is always computed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ipv4Repr {
    /// Source address.
    pub src: Ipv4Addr,
    /// Destination address.
    pub dst: Ipv4Addr,
    /// DSCP (upper 6 bits) and ECN (lower 2 bits).
    pub tos: u8,
    /// Identification.
    pub ident: u16,
    /// Don't fragment.
    pub dont_frag: bool,
    /// Time to live.
    pub ttl: u8,
    /// Payload protocol (17 for RoCEv2).
    pub protocol: u8,
    /// Options, `options_len` bytes used, a multiple of 4.
    pub options: [u8; 40],
    /// How many bytes of `options` are in use.
    pub options_len: u8,
}

impl Ipv4Repr {
    /// A header with no options, DF set and TTL 64, as Linux sends RoCEv2.
    pub fn new(src: Ipv4Addr, dst: Ipv4Addr, tos: u8) -> Self {
        Self {
            src,
            dst,
            tos,
            ident: 0,
            dont_frag: true,
            ttl: 64,
            protocol: PROTO_UDP,
            options: [0; 40],
            options_len: 0,
        }
    }

    /// Parses a checked view (fragmentation and lengths are the packet parser's business).
    pub fn parse<T: AsRef<[u8]>>(h: &Header<T>) -> Self {
        Self::read(&h.buffer.as_ref()[..h.header_len()])
    }

    /// The fields of `header`, a whole IPv4 header (options included) that a parser
    /// checked: what [`super::RocePacket::ip`] reads on demand. Never panics: a header
    /// shorter than 20 bytes reads as zeros past its end, options past 40 bytes are
    /// dropped (neither comes from a parser).
    #[inline]
    pub(crate) fn read(header: &[u8]) -> Self {
        let (b, opts) = match header.split_first_chunk::<MIN_HEADER_LEN>() {
            Some((b, opts)) => (*b, opts),
            None => {
                let mut b = [0u8; MIN_HEADER_LEN];
                b[..header.len()].copy_from_slice(header);
                (b, &[][..])
            }
        };
        let mut options = [0u8; 40];
        let opts = &opts[..opts.len().min(options.len())];
        if !opts.is_empty() {
            options[..opts.len()].copy_from_slice(opts);
        }
        Self {
            src: Ipv4Addr::new(b[12], b[13], b[14], b[15]),
            dst: Ipv4Addr::new(b[16], b[17], b[18], b[19]),
            tos: b[field::TOS],
            ident: u16::from_be_bytes([b[4], b[5]]),
            dont_frag: b[field::FLG_OFF] & 0x40 != 0,
            ttl: b[field::TTL],
            protocol: b[field::PROTOCOL],
            options,
            options_len: opts.len() as u8,
        }
    }

    /// The ECN codepoint (RFC 3168): 0 Not-ECT, 1 ECT(1), 2 ECT(0), 3 CE.
    pub fn ecn(&self) -> u8 {
        self.tos & 0x03
    }

    /// The DSCP.
    pub fn dscp(&self) -> u8 {
        self.tos >> 2
    }

    /// Bytes the header takes.
    pub fn buffer_len(&self) -> usize {
        MIN_HEADER_LEN + usize::from(self.options_len)
    }

    /// Writes the header (checksum included) for `payload_len` bytes of payload.
    pub fn emit(&self, buf: &mut [u8], payload_len: usize) -> Result<(), WireError> {
        let hl = self.emit_fields(buf, payload_len)?;
        let sum = header_checksum(&buf[..hl]);
        put16(buf, field::CHECKSUM, sum);
        Ok(())
    }

    /// Writes every field but the header checksum (left zero) and returns the header
    /// length: for the ICRC, which masks the checksum (A17.3.3), it need not be computed.
    pub(crate) fn emit_fields(
        &self,
        buf: &mut [u8],
        payload_len: usize,
    ) -> Result<usize, WireError> {
        let hl = self.buffer_len();
        if self.options_len > 40 || self.options_len % 4 != 0 {
            return Err(WireError::InvalidRepr(
                "IPv4 options must be a multiple of 4 bytes, at most 40",
            ));
        }
        if buf.len() < hl {
            return Err(WireError::BufferTooSmall {
                need: hl,
                have: buf.len(),
            });
        }
        let total = u16::try_from(hl + payload_len)
            .map_err(|_| WireError::InvalidRepr("IPv4 packet longer than 65535 bytes"))?;
        buf[field::VER_IHL] = 0x40 | (hl / 4) as u8;
        buf[field::TOS] = self.tos;
        put16(buf, field::LENGTH, total);
        put16(buf, field::IDENT, self.ident);
        put16(buf, field::FLG_OFF, if self.dont_frag { 0x4000 } else { 0 });
        buf[field::TTL] = self.ttl;
        buf[field::PROTOCOL] = self.protocol;
        buf[field::SRC..field::SRC + 4].copy_from_slice(&self.src.octets());
        buf[field::DST..field::DST + 4].copy_from_slice(&self.dst.octets());
        put16(buf, field::CHECKSUM, 0);
        buf[MIN_HEADER_LEN..hl].copy_from_slice(&self.options[..usize::from(self.options_len)]);
        Ok(hl)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `checksum_20` gives `header_checksum`'s verdict on every header: random ones,
    /// each with its right checksum, one off, and the other representation of zero
    /// (0x0000 / 0xffff); and headers whose words sum to a multiple of 0xffff.
    #[test]
    fn checksum_20_agrees_with_header_checksum() {
        let verdict = |h: &[u8; 20]| header_checksum(h) == be16(h, field::CHECKSUM);
        let mut rng = crate::rng::Rng::new(7);
        let mut agreed = [0usize; 2];
        for i in 0..20_000 {
            let mut h = [0u8; 20];
            for b in h.iter_mut() {
                *b = rng.next_u64() as u8;
            }
            if i % 4 == 0 {
                // Words summing to 0xffff (or to 0): the folds' corner cases.
                h.fill(0);
                h[0] = (i / 4 % 256) as u8;
                h[1] = !h[0];
                h[2] = 0xff ^ if i % 8 == 0 { 0xff } else { 0 };
                h[3] = h[2];
            }
            let good = header_checksum(&h);
            for c in [good, good.wrapping_add(1), !good, 0, 0xffff] {
                h[field::CHECKSUM..field::CHECKSUM + 2].copy_from_slice(&c.to_be_bytes());
                let v = verdict(&h);
                assert_eq!(checksum_20(&h) == 0, v, "{h:02x?}");
                agreed[usize::from(v)] += 1;
            }
        }
        assert!(agreed[0] > 1000 && agreed[1] > 1000, "{agreed:?}");
    }

    #[test]
    fn checksum_matches_a_real_header() {
        // IPv4 header of frame 10 of rc_pingpong.pcap (10.77.0.12 -> 10.77.0.11).
        let hdr: [u8; 20] = [
            0x45, 0x00, 0x04, 0x2c, 0x84, 0xad, 0x40, 0x00, 0x40, 0x11, 0x9d, 0x63, 0x0a, 0x4d,
            0x00, 0x0c, 0x0a, 0x4d, 0x00, 0x0b,
        ];
        let h = Header::new_checked(&hdr[..]).unwrap();
        assert_eq!(h.compute_checksum(), h.checksum());
        let r = Ipv4Repr::parse(&h);
        let mut out = [0u8; 20];
        r.emit(&mut out, usize::from(h.total_len()) - 20).unwrap();
        assert_eq!(out, hdr);
    }

    #[test]
    fn options_round_trip_and_bad_ihl() {
        let mut r = Ipv4Repr::new(Ipv4Addr::new(1, 2, 3, 4), Ipv4Addr::new(5, 6, 7, 8), 0x02);
        r.options[..4].copy_from_slice(&[0x94, 0x04, 0, 0]); // router alert
        r.options_len = 4;
        let mut b = [0u8; 24];
        r.emit(&mut b, 100).unwrap();
        let h = Header::new_checked(&b[..]).unwrap();
        assert_eq!(h.header_len(), 24);
        assert_eq!(Ipv4Repr::parse(&h), r);
        assert_eq!(h.compute_checksum(), h.checksum());
        b[0] = 0x44;
        assert!(matches!(
            Header::new_checked(&b[..]),
            Err(WireError::BadIpv4HeaderLen { len: 16, .. })
        ));
        b[0] = 0x4f;
        assert!(matches!(
            Header::new_checked(&b[..]),
            Err(WireError::Truncated {
                need: 60,
                have: 24,
                ..
            })
        ));
    }
}
