//! The common received packet in straight-line code: an untagged Ethernet frame carrying
//! IPv4 without options, unfragmented, UDP to port 4791; then a BTH with a known opcode
//! of a transport uroce implements, its extension headers, a payload that follows the
//! opcode's rule. Every field is read at a fixed offset after one length check, the
//! opcode's facts come from one table lookup ([`super::opcode::OP_TABLE`]) and the
//! [`RocePacket`] is written once, without the per-layer views and representations the
//! general parser builds and copies.
//!
//! It accepts a subset of what the general parser (`wire::packet`) accepts and returns
//! the same packet for it: anything else, every malformed packet included, gets `None`
//! and goes to the general parser, which alone says what is wrong and where. The rules
//! checked are the general parser's (IBTA Vol. 1 §9.2 for the BTH, Table 35 for the
//! headers and payload of each opcode, §9.7.5.1.1 for the pad; Annex A17.3.3 for the
//! ICRC); the tests in `wire::packet` hold the two to the same answers.

use super::ethernet::ETHERTYPE_IPV4;
use super::opcode::{ExtHeader, ExtShape, OP_TABLE};
use super::packet::{ExtHeaders, IpRepr, RocePacket};
use super::Opcode;
use super::{aeth::AethRepr, deth::DethRepr, immdt, reth, reth::RethRepr};
use super::{
    be16, be32, bth, icrc, ipv4, BthRepr, EthernetRepr, Ipv4Repr, UdpRepr, WireError, ICRC_LEN,
    ROCEV2_UDP_PORT,
};

const ETH: usize = super::ethernet::HEADER_LEN;
const IP: usize = ipv4::MIN_HEADER_LEN;
const UDP: usize = super::udp::HEADER_LEN;

/// [`super::parse`] (with `verify`: IPv4 header checksum and ICRC) or
/// [`super::parse_headers`] (without) for the common frame; [`NOT_HERE`] for anything
/// else. (A `Result` rather than an `Option`, so that the caller can return it as it is:
/// the packet is written once, in the caller's return slot.)
#[inline(always)]
pub(crate) fn parse_frame(frame: &[u8], verify: bool) -> Result<RocePacket<'_>, WireError> {
    if frame.len() < ETH + IP + UDP + bth::HEADER_LEN + ICRC_LEN {
        return Err(NOT_HERE);
    }
    let (l2, rest) = frame.split_at(ETH);
    let (ip, rest) = rest.split_at(IP);
    // Untagged IPv4, a 20-byte header.
    if be16(l2, 12) != ETHERTYPE_IPV4 || ip[0] != 0x45 {
        return Err(NOT_HERE);
    }
    let total = usize::from(be16(ip, 2));
    // Not a fragment (MF clear, offset 0), UDP, and the whole packet in the frame.
    if be16(ip, 6) & 0x3fff != 0
        || ip[9] != ipv4::PROTO_UDP
        || total < IP + UDP + bth::HEADER_LEN + ICRC_LEN
        || total > IP + rest.len()
    {
        return Err(NOT_HERE);
    }
    let (udp, rest) = rest.split_at(UDP);
    let roce_len = total - IP - UDP;
    if be16(udp, 2) != ROCEV2_UDP_PORT || usize::from(be16(udp, 4)) != UDP + roce_len {
        return Err(NOT_HERE);
    }
    let (roce, trailer) = rest.split_at(roce_len);
    let (body, stored) = roce.split_at(roce_len - ICRC_LEN);
    let found = u32::from_le_bytes([stored[0], stored[1], stored[2], stored[3]]);
    let Some(t) = transport(roce) else {
        return Err(NOT_HERE);
    };
    let mut mac = [0u8; 12];
    mac.copy_from_slice(&l2[..12]);
    let [d0, d1, d2, d3, d4, d5, s0, s1, s2, s3, s4, s5] = mac;
    let p = Ok(RocePacket {
        // The extension headers first, while little else is held in registers; then
        // each field as it is stored.
        ext: ext_headers(t.shape, t.headers, &roce[bth::HEADER_LEN..t.ext_end]),
        bth: t.bth(),
        payload: t.payload,
        eth: Some(EthernetRepr {
            dst: [d0, d1, d2, d3, d4, d5],
            src: [s0, s1, s2, s3, s4, s5],
            vlan: None,
            ethertype: ETHERTYPE_IPV4,
        }),
        ip: IpRepr::V4(Ipv4Repr {
            src: be32(ip, 12).into(),
            dst: be32(ip, 16).into(),
            tos: ip[1],
            ident: be16(ip, 4),
            dont_frag: ip[6] & 0x40 != 0,
            ttl: ip[8],
            protocol: ipv4::PROTO_UDP,
            options: [0; 40],
            options_len: 0,
        }),
        ip_header: ip,
        udp: UdpRepr {
            src_port: be16(udp, 0),
            dst_port: ROCEV2_UDP_PORT,
            checksum: be16(udp, 6),
        },
        icrc: found,
        trailer,
    });
    // The checksums last: the CRC's long chain of dependent multiplications starts
    // behind the header work rather than in front of it.
    if verify {
        let h = ipv4::Header::new_unchecked(ip);
        if h.compute_checksum() != h.checksum() || icrc::compute_v4(ip, udp, body) != found {
            return Err(NOT_HERE);
        }
    }
    p
}

/// What the fast path answers for a packet it leaves to the general parser.
pub(crate) const NOT_HERE: WireError = WireError::InvalidRepr("not the common frame");

/// What [`transport`] found: the BTH and the payload; the extension headers are read by
/// [`ext_headers`] straight into the packet that carries them.
pub(crate) struct Transport<'a> {
    /// The BTH's bytes, known to be valid ([`Transport::bth`] reads them).
    b: &'a [u8; bth::HEADER_LEN],
    opcode: Opcode,
    pub payload: &'a [u8],
    /// The opcode's extension headers, and where they end (the ICRC, or the payload).
    pub headers: &'static [ExtHeader],
    pub shape: ExtShape,
    pub ext_end: usize,
}

impl Transport<'_> {
    /// The BTH.
    #[inline(always)]
    pub(crate) fn bth(&self) -> BthRepr {
        let b = self.b;
        let flags = b[1];
        let w1 = be32(b, 4);
        let w2 = be32(b, 8);
        BthRepr {
            opcode: self.opcode,
            solicited: flags & 0x80 != 0,
            mig_req: flags & 0x40 != 0,
            pad_count: (flags >> 4) & 0x03,
            pkey: be16(b, 2),
            fecn: w1 & 0x8000_0000 != 0,
            becn: w1 & 0x4000_0000 != 0,
            dest_qp: w1 & bth::QPN_MASK,
            ack_req: w2 & 0x8000_0000 != 0,
            psn: w2 & bth::PSN_MASK,
        }
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

/// BTH and payload of a UDP payload (ICRC included) whose opcode is known and
/// supported and which breaks no rule; `None` otherwise.
#[inline(always)]
pub(crate) fn transport(p: &[u8]) -> Option<Transport<'_>> {
    let b: &[u8; bth::HEADER_LEN] = p.get(..bth::HEADER_LEN)?.try_into().ok()?;
    let info = OP_TABLE[usize::from(b[0])];
    let opcode = info.opcode?;
    let flags = b[1];
    if !info.supported || flags & 0x0f != 0 {
        return None; // RD, or TVer not 0
    }
    let end = p.len().checked_sub(ICRC_LEN)?;
    let at = bth::HEADER_LEN + usize::from(info.ext_len);
    let rest = end.checked_sub(at)?;
    let pad = (flags >> 4) & 0x03;
    // The opcode's payload rule (Table 35) and the pad (§9.7.5.1.1): a whole number of
    // words after the extension headers, within the rule's bounds (which for a payload of
    // any length is MAX_PAYLOAD: a pad of 1 to 3 never lets 4100 bytes in), and a pad
    // only where a payload may be, no longer than it.
    if rest % 4 != 0
        || rest < usize::from(info.min_rest)
        || rest > usize::from(info.max_rest)
        || (pad != 0 && !(info.pad_ok && rest != 0))
    {
        return None;
    }
    let pad = usize::from(pad);
    Some(Transport {
        b,
        opcode,
        payload: &p[at..end - pad],
        headers: info.headers,
        shape: info.shape,
        ext_end: at,
    })
}
