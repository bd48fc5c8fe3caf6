//! The common received packet in straight-line code: an untagged Ethernet frame carrying
//! IPv4 without options, unfragmented, UDP to port 4791; then a BTH with a known opcode
//! of a transport uroce implements, its extension headers, a payload that follows the
//! opcode's rule. Every field is read at a fixed offset after one length check, the
//! opcode's facts come from one table lookup ([`FAST_OPS`]) and the [`RocePacket`] is
//! written once, without the per-layer views and representations the general parser
//! builds and copies (its IP header and BTH as the frame's bytes, which the packet reads
//! on demand). Three steps, which the parsers call: [`check`] (is it the common
//! frame?), [`build`] (the packet, read again from the frame rather than held over from
//! the checks) and, for `parse`, [`verify`] (its IPv4 header checksum and ICRC) last:
//! with the packet written, little is kept across the CRC's calls (fewer instructions
//! under callgrind than the other orders, measured).
//!
//! It accepts a subset of what the general parser (`wire::packet`) accepts and returns
//! the same packet for it: anything else, every malformed packet included, gets `None`
//! and goes to the general parser, which alone says what is wrong and where. The rules
//! checked are the general parser's (IBTA Vol. 1 §9.2 for the BTH, Table 35 for the
//! headers and payload of each opcode, §9.7.5.1.1 for the pad; Annex A17.3.3 for the
//! ICRC); the tests in `wire::packet` hold the two to the same answers.

use super::ethernet::ETHERTYPE_IPV4;
use super::opcode::{ExtHeader, ExtShape, OP_TABLE};
use super::packet::{ExtHeaders, RocePacket};
use super::Opcode;
use super::{aeth::AethRepr, deth::DethRepr, immdt, reth, reth::RethRepr};
use super::{bth, icrc, ipv4, Bth, EthernetRepr, UdpRepr, WireError, ICRC_LEN, ROCEV2_UDP_PORT};

const ETH: usize = super::ethernet::HEADER_LEN;
const IP: usize = ipv4::MIN_HEADER_LEN;
const UDP: usize = super::udp::HEADER_LEN;

/// Ethernet, IPv4 without options, UDP and the BTH: the bytes [`check`] reads at fixed
/// offsets, after one length check.
const FIXED: usize = ETH + IP + UDP + bth::HEADER_LEN;

/// A big-endian `u16` at a fixed offset of the fixed headers (no bounds check left).
#[inline(always)]
fn h16(h: &[u8; FIXED], at: usize) -> u16 {
    u16::from_be_bytes([h[at], h[at + 1]])
}

/// A big-endian `u32` at a fixed offset of the fixed headers.
#[inline(always)]
fn h32(h: &[u8; FIXED], at: usize) -> u32 {
    u32::from_be_bytes([h[at], h[at + 1], h[at + 2], h[at + 3]])
}

/// A frame [`check`] took: how long its RoCE part is (BTH to ICRC) and its opcode.
#[derive(Clone, Copy)]
pub(crate) struct Checked {
    roce_len: usize,
    op: &'static FastOp,
}

/// [`super::parse`] (with `verify`: IPv4 header checksum and ICRC) or
/// [`super::parse_headers`] (without) for the common frame; [`NOT_HERE`] for anything
/// else: [`check`], [`build`], [`verify`], as the parsers call them (for the tests).
#[cfg(test)]
pub(crate) fn parse_frame(frame: &[u8], verify: bool) -> Result<RocePacket<'_>, WireError> {
    match check(frame) {
        Some(c) if !verify || self::verify(frame, c) => build(frame, c),
        _ => Err(NOT_HERE),
    }
}

/// Whether `frame` is the common frame, and if so what [`build`] needs to know of it.
#[inline(always)]
pub(crate) fn check(frame: &[u8]) -> Option<Checked> {
    let (h, _) = frame.split_first_chunk::<FIXED>()?;
    const I: usize = ETH;
    const U: usize = ETH + IP;
    const B: usize = ETH + IP + UDP;
    let total = usize::from(h16(h, I + 2));
    // Untagged IPv4 with a 20-byte header (ethertype and the version/IHL byte in one
    // word); not a fragment (MF clear, offset 0); UDP; the whole packet in the frame,
    // BTH and ICRC included.
    if h32(h, 12) & 0xffff_ff00 != u32::from(ETHERTYPE_IPV4) << 16 | 0x4500
        || h16(h, I + 6) & 0x3fff != 0
        || h[I + 9] != ipv4::PROTO_UDP
        || total < IP + UDP + bth::HEADER_LEN + ICRC_LEN
        || total > frame.len() - ETH
    {
        return None;
    }
    let roce_len = total - IP - UDP;
    // UDP to port 4791 whose length is the IP payload's (port and length in one word).
    if h32(h, U + 2) != u32::from(ROCEV2_UDP_PORT) << 16 | (UDP + roce_len) as u32 {
        return None;
    }
    let t = transport(&frame[B..B + roce_len])?;
    Some(Checked { roce_len, op: t.op })
}

/// The IPv4 header checksum and the ICRC of a frame [`check`] took.
#[inline(always)]
pub(crate) fn verify(frame: &[u8], c: Checked) -> bool {
    const I: usize = ETH;
    const U: usize = ETH + IP;
    const B: usize = ETH + IP + UDP;
    let (Some((h, _)), Some(rest), Some(stored)) = (
        frame.split_first_chunk::<FIXED>(),
        frame.get(FIXED..B + c.roce_len - ICRC_LEN),
        frame
            .get(B + c.roce_len - ICRC_LEN..)
            .and_then(|s| s.first_chunk::<ICRC_LEN>()),
    ) else {
        return false; // not reached: `check` saw these bytes
    };
    let (Some(ip), Some(udp), Some(bth)) = (
        h[I..].first_chunk::<IP>(),
        h[U..].first_chunk::<UDP>(),
        h[B..].first_chunk::<{ bth::HEADER_LEN }>(),
    ) else {
        return false; // not reached: the ranges are within the fixed headers
    };
    ipv4::checksum_20(ip) == 0
        && icrc::compute_v4_fixed(ip, udp, bth, rest) == u32::from_le_bytes(*stored)
}

/// The packet of a frame [`check`] took: one straight-line block per shape of extension
/// headers (a jump on the shape), so that each writes only its own headers, not a
/// merge of every shape's.
#[inline(always)]
pub(crate) fn build(frame: &[u8], c: Checked) -> Result<RocePacket<'_>, WireError> {
    let Checked { roce_len, op } = c;
    match op.shape {
        ExtShape::Bare => packet::<BARE>(frame, roce_len, op),
        ExtShape::Reth => packet::<RETH>(frame, roce_len, op),
        ExtShape::Aeth => packet::<AETH>(frame, roce_len, op),
        ExtShape::Imm => packet::<IMM>(frame, roce_len, op),
        ExtShape::RethImm => packet::<RETH_IMM>(frame, roce_len, op),
        ExtShape::Deth => packet::<DETH>(frame, roce_len, op),
        ExtShape::Other => packet_other(frame, roce_len, op),
    }
}

/// [`packet`] for the rarer shapes of extension headers (atomics, invalidate, FLUSH,
/// DETH with ImmDt, CNP), out of line: their loop over the headers calls out, and
/// inline it made every packet save and restore the registers those calls preserve.
#[inline(never)]
fn packet_other<'a>(
    frame: &'a [u8],
    roce_len: usize,
    op: &'static FastOp,
) -> Result<RocePacket<'a>, WireError> {
    packet::<OTHER>(frame, roce_len, op)
}

const BARE: u8 = 0;
const RETH: u8 = 1;
const AETH: u8 = 2;
const IMM: u8 = 3;
const RETH_IMM: u8 = 4;
const DETH: u8 = 5;
const OTHER: u8 = 6;

/// The packet of a frame [`check`] took, `roce_len` bytes from the BTH to the ICRC, of
/// opcode `op` whose extension headers have the shape `S`.
#[inline(always)]
fn packet<'a, const S: u8>(
    frame: &'a [u8],
    roce_len: usize,
    op: &'static FastOp,
) -> Result<RocePacket<'a>, WireError> {
    const I: usize = ETH;
    const U: usize = ETH + IP;
    const B: usize = ETH + IP + UDP;
    // Checked by the caller: these fail for no frame that reaches here.
    let (Some((h, _)), Some(roce)) = (
        frame.split_first_chunk::<FIXED>(),
        frame.get(B..B + roce_len),
    ) else {
        return Err(NOT_HERE);
    };
    let trailer = &frame[B + roce_len..];
    let end = roce_len - ICRC_LEN;
    let at = bth::HEADER_LEN + usize::from(op.ext_len);
    let pad = usize::from((h[B + 1] >> 4) & 0x03);
    let (Some(x), Some(payload), Some(stored)) = (
        roce.get(bth::HEADER_LEN..at),
        roce.get(at..end - pad),
        roce.get(end..).and_then(|s| s.first_chunk::<4>()),
    ) else {
        return Err(NOT_HERE);
    };
    let d = ExtHeaders::default();
    let imm = |at: usize| x.get(at..).and_then(|b| immdt::parse("ImmDt", b).ok());
    let ext = match S {
        BARE => d,
        RETH => ExtHeaders {
            reth: RethRepr::parse(x).ok(),
            ..d
        },
        AETH => ExtHeaders {
            aeth: AethRepr::parse(x).ok(),
            ..d
        },
        IMM => ExtHeaders { imm: imm(0), ..d },
        RETH_IMM => ExtHeaders {
            reth: RethRepr::parse(x).ok(),
            imm: imm(reth::HEADER_LEN),
            ..d
        },
        DETH => ExtHeaders {
            deth: DethRepr::parse(x).ok(),
            ..d
        },
        _ => ext_headers(ExtShape::Other, op.headers, x),
    };
    let [d0, d1, d2, d3, d4, d5, s0, s1, s2, s3, s4, s5, ..] = *h;
    let Some(b) = h[B..].first_chunk::<{ bth::HEADER_LEN }>() else {
        return Err(NOT_HERE); // not reached: within the fixed headers
    };
    Ok(RocePacket {
        ext,
        bth: Bth::new(op.opcode, *b),
        payload,
        eth: Some(EthernetRepr {
            dst: [d0, d1, d2, d3, d4, d5],
            src: [s0, s1, s2, s3, s4, s5],
            vlan: None,
            ethertype: ETHERTYPE_IPV4,
        }),
        ip_header: &h[I..U],
        udp: UdpRepr {
            src_port: h16(h, U),
            dst_port: ROCEV2_UDP_PORT,
            checksum: h16(h, U + 6),
        },
        icrc: u32::from_le_bytes(*stored),
        trailer,
    })
}

/// What the fast path answers for a packet it leaves to the general parser.
pub(crate) const NOT_HERE: WireError = WireError::InvalidRepr("not the common frame");

/// What [`transport`] found: the BTH and the payload; the extension headers are read by
/// [`ext_headers`] straight into the packet that carries them.
pub(crate) struct Transport<'a> {
    /// The BTH's bytes, known to be valid ([`Transport::bth`] reads them).
    b: &'a [u8; bth::HEADER_LEN],
    opcode: Opcode,
    /// The opcode's record.
    op: &'static FastOp,
    pub payload: &'a [u8],
    /// The opcode's extension headers, and where they end (the ICRC, or the payload).
    pub headers: &'static [ExtHeader],
    pub shape: ExtShape,
    pub ext_end: usize,
}

impl Transport<'_> {
    /// The BTH.
    #[inline(always)]
    pub(crate) fn bth(&self) -> Bth {
        Bth::new(self.opcode, *self.b)
    }
}

/// The extension headers `headers` (an opcode's, see [`Opcode::headers`]) read from `x`,
/// the bytes after the BTH, which [`transport`] checked hold them all. Written as one
/// value per opcode shape, so that it is built in place in the packet.
#[inline(always)]
pub(crate) fn ext_headers(shape: ExtShape, headers: &[ExtHeader], x: &[u8]) -> ExtHeaders {
    let d = ExtHeaders::default();
    let imm = |at: usize| x.get(at..).and_then(|b| immdt::parse("ImmDt", b).ok());
    match shape {
        ExtShape::Bare => d,
        ExtShape::Reth => ExtHeaders {
            reth: RethRepr::parse(x).ok(),
            ..d
        },
        ExtShape::Aeth => ExtHeaders {
            aeth: AethRepr::parse(x).ok(),
            ..d
        },
        ExtShape::Imm => ExtHeaders { imm: imm(0), ..d },
        ExtShape::RethImm => ExtHeaders {
            reth: RethRepr::parse(x).ok(),
            imm: imm(reth::HEADER_LEN),
            ..d
        },
        ExtShape::Deth => ExtHeaders {
            deth: DethRepr::parse(x).ok(),
            ..d
        },
        ExtShape::Other => {
            // The rarer shapes (atomics, invalidate, FLUSH, DETH with ImmDt, CNP).
            let mut e = d;
            let mut at = 0;
            for &h in headers {
                let _ = e.parse_one(h, x.get(at..).unwrap_or(&[]));
                at += h.wire_len();
            }
            e
        }
    }
}

/// What [`transport`] needs of an opcode, in one small record per opcode byte: from
/// [`OP_TABLE`], with the payload rule as the fewest bytes from the BTH to the ICRC
/// and a span (so that one subtraction and one comparison check both bounds and the
/// word alignment, see [`transport`]) and the flag bits that must be clear.
#[derive(Clone, Copy)]
struct FastOp {
    /// The opcode (meaningless where `flags_mask` refuses every packet).
    opcode: Opcode,
    shape: ExtShape,
    ext_len: u8,
    /// The bits of the BTH's second byte that must be 0: TVer, and the pad count where
    /// the opcode carries no payload (§9.7.5.1.1); and bit 8, which [`transport`] sets
    /// in every packet's flags, for an unknown opcode or one of a transport uroce does
    /// not implement (RD): one test refuses them all.
    flags_mask: u16,
    /// The fewest bytes from the BTH to the ICRC (BTH, extension headers, the fewest
    /// payload bytes the rule allows, ICRC), and a quarter of how many more may come
    /// (payload and pad): always a multiple of 4.
    min_len: u16,
    span_words: u16,
    /// The opcode's extension headers ([`Opcode::headers`]).
    headers: &'static [ExtHeader],
}

const fn fast_op(v: u8) -> FastOp {
    let i = &OP_TABLE[v as usize];
    let opcode = match i.opcode {
        Some(op) => op,
        None => Opcode::RcSendOnly,
    };
    assert!(i.min_rest % 4 == 0 && i.max_rest % 4 == 0 && i.min_rest <= i.max_rest);
    FastOp {
        opcode,
        shape: i.shape,
        ext_len: i.ext_len,
        flags_mask: if !(i.opcode.is_some() && i.supported) {
            0x100
        } else if i.pad_ok {
            0x0f
        } else {
            0x3f
        },
        min_len: (bth::HEADER_LEN + ICRC_LEN) as u16 + i.ext_len as u16 + i.min_rest,
        span_words: (i.max_rest - i.min_rest) / 4,
        headers: i.headers,
    }
}

/// [`FastOp`] of every opcode byte, built at compile time.
static FAST_OPS: [FastOp; 256] = {
    let mut t = [fast_op(0); 256];
    let mut v = 0;
    while v < 256 {
        t[v] = fast_op(v as u8);
        v += 1;
    }
    t
};

/// BTH and payload of a UDP payload (ICRC included) whose opcode is known and
/// supported and which breaks no rule; `None` otherwise.
#[inline(always)]
pub(crate) fn transport(p: &[u8]) -> Option<Transport<'_>> {
    let b: &[u8; bth::HEADER_LEN] = p.first_chunk()?;
    let op = &FAST_OPS[usize::from(b[0])];
    let flags = b[1];
    // RD and unknown opcodes; TVer not 0; a pad where the opcode has no payload.
    if (0x100 | u16::from(flags)) & op.flags_mask != 0 {
        return None;
    }
    // The opcode's payload rule (Table 35) and the pad (§9.7.5.1.1): a whole number of
    // words after the extension headers, within the rule's bounds (which for a payload of
    // any length is MAX_PAYLOAD: a pad of 1 to 3 never lets 4100 bytes in). In one
    // comparison: the bytes beyond the fewest (wrapping when there are fewer) rotated
    // right by two bits are at most `span_words` exactly when they are a whole number
    // of words no more than the span (low bits rotate to the top; a wrapped difference
    // stays huge).
    let extra = p.len().wrapping_sub(usize::from(op.min_len));
    if extra.rotate_right(2) > usize::from(op.span_words) {
        return None;
    }
    let end = p.len() - ICRC_LEN;
    let at = bth::HEADER_LEN + usize::from(op.ext_len);
    // A pad only where a payload may be (the mask), and no longer than it: with `rest`
    // a multiple of 4 and a pad of at most 3, an empty payload is the only one shorter.
    let pad = usize::from((flags >> 4) & 0x03);
    let payload = p.get(at..end - pad)?;
    Some(Transport {
        b,
        opcode: op.opcode,
        op,
        payload,
        headers: op.headers,
        shape: op.shape,
        ext_end: at,
    })
}
