//! Whole-frame parsing: Ethernet → IP → UDP → ICRC → BTH → extension headers → payload.
//!
//! [`parse`] is strict and fast: the first problem is the error. [`dissect`] is for tools
//! (the `decode` command): it keeps every header it could read, goes on past a bad
//! checksum or ICRC, and records the first error.

use std::net::IpAddr;

use super::ethernet::{self, ETHERTYPE_IPV4, ETHERTYPE_IPV6};
use super::opcode::{ExtHeader, PayloadRule};
use super::{
    aeth::AethRepr, atomic::AtomicAckEthRepr, atomic::AtomicEthRepr, bth, check_len,
    deth::DethRepr, icrc, immdt, ipv4, ipv6, reth::RethRepr, udp, BthRepr, EthernetRepr, Ipv4Repr,
    Ipv6Repr, TransportKind, UdpRepr, WireError, ICRC_LEN, MAX_PAYLOAD, ROCEV2_UDP_PORT,
};

/// An IPv4 or IPv6 header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IpRepr {
    /// IPv4.
    V4(Ipv4Repr),
    /// IPv6.
    V6(Ipv6Repr),
}

impl IpRepr {
    /// The fields of `header`, a whole IP header a parser checked (IPv6 when its version
    /// nibble says 6 and it is 40 bytes or more, IPv4 otherwise): never panics.
    #[inline]
    pub(crate) fn read(header: &[u8]) -> Self {
        if header.first().is_some_and(|v| v >> 4 == 6) {
            if let Ok(h) = ipv6::Header::new_checked(header) {
                return Self::V6(Ipv6Repr::parse(&h));
            }
        }
        Self::V4(Ipv4Repr::read(header))
    }

    /// 4 or 6.
    pub fn version(&self) -> u8 {
        match self {
            Self::V4(_) => 4,
            Self::V6(_) => 6,
        }
    }
    /// Source address.
    pub fn src(&self) -> IpAddr {
        match self {
            Self::V4(r) => r.src.into(),
            Self::V6(r) => r.src.into(),
        }
    }
    /// Destination address.
    pub fn dst(&self) -> IpAddr {
        match self {
            Self::V4(r) => r.dst.into(),
            Self::V6(r) => r.dst.into(),
        }
    }
    /// ECN codepoint: 0 Not-ECT, 1 ECT(1), 2 ECT(0), 3 CE.
    pub fn ecn(&self) -> u8 {
        match self {
            Self::V4(r) => r.ecn(),
            Self::V6(r) => r.ecn(),
        }
    }
    /// DSCP: the upper 6 bits of the TOS byte or traffic class.
    pub fn dscp(&self) -> u8 {
        match self {
            Self::V4(r) => r.tos >> 2,
            Self::V6(r) => r.traffic_class >> 2,
        }
    }
    /// IPv4 time to live, or IPv6 hop limit.
    pub fn ttl(&self) -> u8 {
        match self {
            Self::V4(r) => r.ttl,
            Self::V6(r) => r.hop_limit,
        }
    }
    /// IPv4 identification (`None` for IPv6).
    pub fn ident(&self) -> Option<u16> {
        match self {
            Self::V4(r) => Some(r.ident),
            Self::V6(_) => None,
        }
    }
    /// The ethertype that carries this header.
    pub fn ethertype(&self) -> u16 {
        match self {
            Self::V4(_) => ETHERTYPE_IPV4,
            Self::V6(_) => ETHERTYPE_IPV6,
        }
    }
    /// The payload protocol (next header).
    pub fn protocol(&self) -> u8 {
        match self {
            Self::V4(r) => r.protocol,
            Self::V6(r) => r.next_header,
        }
    }
    /// Bytes the header takes.
    pub fn buffer_len(&self) -> usize {
        match self {
            Self::V4(r) => r.buffer_len(),
            Self::V6(r) => r.buffer_len(),
        }
    }
    /// Writes the header for `payload_len` bytes of payload but, for IPv4, leaves the
    /// header checksum zero (the ICRC masks it); returns the header length.
    pub(crate) fn emit_fields(
        &self,
        buf: &mut [u8],
        payload_len: usize,
    ) -> Result<usize, WireError> {
        match self {
            Self::V4(r) => r.emit_fields(buf, payload_len),
            Self::V6(r) => r.emit(buf, payload_len).map(|()| r.buffer_len()),
        }
    }
    /// Writes the header for `payload_len` bytes of payload.
    pub fn emit(&self, buf: &mut [u8], payload_len: usize) -> Result<(), WireError> {
        match self {
            Self::V4(r) => r.emit(buf, payload_len),
            Self::V6(r) => r.emit(buf, payload_len),
        }
    }
}

/// The extension headers of one packet; which ones are present follows from the opcode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct ExtHeaders {
    /// RDETH (RD only): the EE context.
    pub rdeth: Option<u32>,
    /// DETH.
    pub deth: Option<DethRepr>,
    /// FETH (FLUSH only), raw.
    pub feth: Option<u32>,
    /// RETH.
    pub reth: Option<RethRepr>,
    /// AtomicETH.
    pub atomic: Option<AtomicEthRepr>,
    /// AETH.
    pub aeth: Option<AethRepr>,
    /// AtomicAckETH.
    pub atomic_ack: Option<AtomicAckEthRepr>,
    /// Immediate data.
    pub imm: Option<u32>,
    /// IETH: the R_Key to invalidate.
    pub ieth: Option<u32>,
}

impl ExtHeaders {
    /// True when `h` is present (the CNP's reserved block carries no value: always false).
    pub fn has(&self, h: ExtHeader) -> bool {
        match h {
            ExtHeader::Rdeth => self.rdeth.is_some(),
            ExtHeader::Deth => self.deth.is_some(),
            ExtHeader::Feth => self.feth.is_some(),
            ExtHeader::Reth => self.reth.is_some(),
            ExtHeader::AtomicEth => self.atomic.is_some(),
            ExtHeader::Aeth => self.aeth.is_some(),
            ExtHeader::AtomicAckEth => self.atomic_ack.is_some(),
            ExtHeader::ImmDt => self.imm.is_some(),
            ExtHeader::Ieth => self.ieth.is_some(),
            ExtHeader::CnpReserved => false,
        }
    }

    pub(super) fn parse_one(&mut self, h: ExtHeader, b: &[u8]) -> Result<(), WireError> {
        match h {
            ExtHeader::Rdeth => self.rdeth = Some(immdt::parse("RDETH", b)? & 0x00ff_ffff),
            ExtHeader::Deth => self.deth = Some(DethRepr::parse(b)?),
            ExtHeader::Feth => self.feth = Some(immdt::parse("FETH", b)?),
            ExtHeader::Reth => self.reth = Some(RethRepr::parse(b)?),
            ExtHeader::AtomicEth => self.atomic = Some(AtomicEthRepr::parse(b)?),
            ExtHeader::Aeth => self.aeth = Some(AethRepr::parse(b)?),
            ExtHeader::AtomicAckEth => self.atomic_ack = Some(AtomicAckEthRepr::parse(b)?),
            ExtHeader::ImmDt => self.imm = Some(immdt::parse("ImmDt", b)?),
            ExtHeader::Ieth => self.ieth = Some(immdt::parse("IETH", b)?),
            ExtHeader::CnpReserved => check_len("CNP reserved bytes", b, 16, 0)?,
        }
        Ok(())
    }

    /// Writes header `h` at the start of `b`; `InvalidRepr` when it is missing.
    pub(crate) fn emit_one(&self, h: ExtHeader, b: &mut [u8]) -> Result<(), WireError> {
        let missing = WireError::InvalidRepr("an extension header the opcode requires is missing");
        match h {
            ExtHeader::Rdeth => immdt::emit(self.rdeth.ok_or(missing)?, b),
            ExtHeader::Deth => self.deth.ok_or(missing)?.emit(b),
            ExtHeader::Feth => immdt::emit(self.feth.ok_or(missing)?, b),
            ExtHeader::Reth => self.reth.ok_or(missing)?.emit(b),
            ExtHeader::AtomicEth => self.atomic.ok_or(missing)?.emit(b),
            ExtHeader::Aeth => self.aeth.ok_or(missing)?.emit(b),
            ExtHeader::AtomicAckEth => self.atomic_ack.ok_or(missing)?.emit(b),
            ExtHeader::ImmDt => immdt::emit(self.imm.ok_or(missing)?, b),
            ExtHeader::Ieth => immdt::emit(self.ieth.ok_or(missing)?, b),
            ExtHeader::CnpReserved => {
                super::need(b, 16)?;
                b[..16].fill(0);
                Ok(())
            }
        }
    }
}

/// A parsed RoCEv2 packet whose ICRC verified. Borrowed from the frame it came from.
///
/// The IP header and the BTH are kept as their bytes and read when asked
/// ([`RocePacket::ip`], [`bth::Bth`]): a receive reads a few of their fields (the
/// destination address and ECN, the QPN, PSN and opcode), and decoding all of them into
/// representations for every packet was most of what writing the packet cost.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct RocePacket<'a> {
    /// Ethernet header (`None` when parsed from the IP header on, see [`parse_ip`]).
    pub eth: Option<EthernetRepr>,
    /// The IP header's bytes as received, options included, checked by the parser
    /// ([`RocePacket::ip`] reads its fields; a UD receive copies it into its GRH area).
    pub ip_header: &'a [u8],
    /// UDP header.
    pub udp: UdpRepr,
    /// BTH, as its bytes: each field read when asked ([`bth::Bth`]).
    pub bth: bth::Bth,
    /// Extension headers.
    pub ext: ExtHeaders,
    /// Payload, pad excluded.
    pub payload: &'a [u8],
    /// The ICRC as found (and verified).
    pub icrc: u32,
    /// Link-layer bytes after the IP packet (Ethernet padding or FCS); not RoCE data.
    pub trailer: &'a [u8],
}

impl RocePacket<'_> {
    /// The IP header, read field by field from [`RocePacket::ip_header`] when asked
    /// (for a datagram, the header its [`super::DatagramRepr`] wrote);
    /// [`IpView::repr`] for all of it.
    #[inline]
    pub fn ip(&self) -> IpView<'_> {
        IpView { b: self.ip_header }
    }

    /// The representation that [`super::FrameRepr::emit`] turns back into this frame.
    pub fn frame_repr(&self) -> super::FrameRepr {
        super::FrameRepr {
            eth: self.eth,
            ip: self.ip().repr(),
            udp: self.udp,
            bth: self.bth.repr(),
            ext: self.ext,
        }
    }
}

/// The IP header of a [`RocePacket`], read from its bytes (which the parser checked)
/// one field at a time: the methods of [`IpRepr`] that a receive asks for, without
/// decoding the rest (the 40 bytes of IPv4 options among them). IPv6 when the version
/// nibble says 6 and the header is 40 bytes or more, IPv4 otherwise, as
/// [`IpView::repr`] reads it; no method panics, whatever the bytes.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct IpView<'a> {
    b: &'a [u8],
}

impl<'a> IpView<'a> {
    #[inline]
    fn is_v6(&self) -> bool {
        self.b.len() >= ipv6::HEADER_LEN && self.b[0] >> 4 == 6
    }
    /// `N` bytes at `at`, zeros where the header is shorter.
    #[inline]
    fn at<const N: usize>(&self, at: usize) -> [u8; N] {
        match self.b.get(at..).and_then(|s| s.first_chunk::<N>()) {
            Some(a) => *a,
            None => [0; N],
        }
    }
    /// One byte at `at`, 0 past the end.
    #[inline]
    fn byte(&self, at: usize) -> u8 {
        self.b.get(at).copied().unwrap_or(0)
    }
    /// The whole header as an [`IpRepr`].
    pub fn repr(&self) -> IpRepr {
        IpRepr::read(self.b)
    }
    /// The header's bytes.
    pub fn bytes(&self) -> &'a [u8] {
        self.b
    }
    /// 4 or 6.
    #[inline]
    pub fn version(&self) -> u8 {
        if self.is_v6() {
            6
        } else {
            4
        }
    }
    /// Source address.
    #[inline]
    pub fn src(&self) -> IpAddr {
        if self.is_v6() {
            IpAddr::from(self.at::<16>(8))
        } else {
            IpAddr::from(self.at::<4>(12))
        }
    }
    /// Destination address.
    #[inline]
    pub fn dst(&self) -> IpAddr {
        if self.is_v6() {
            IpAddr::from(self.at::<16>(24))
        } else {
            IpAddr::from(self.at::<4>(16))
        }
    }
    /// The IPv4 TOS byte or the IPv6 traffic class.
    #[inline]
    fn traffic_class(&self) -> u8 {
        if self.is_v6() {
            (self.byte(0) << 4) | (self.byte(1) >> 4)
        } else {
            self.byte(1)
        }
    }
    /// ECN codepoint: 0 Not-ECT, 1 ECT(1), 2 ECT(0), 3 CE.
    #[inline]
    pub fn ecn(&self) -> u8 {
        self.traffic_class() & 0x03
    }
    /// DSCP: the upper 6 bits of the TOS byte or traffic class.
    #[inline]
    pub fn dscp(&self) -> u8 {
        self.traffic_class() >> 2
    }
    /// IPv4 time to live, or IPv6 hop limit.
    #[inline]
    pub fn ttl(&self) -> u8 {
        self.byte(if self.is_v6() { 7 } else { 8 })
    }
    /// IPv4 identification (`None` for IPv6).
    #[inline]
    pub fn ident(&self) -> Option<u16> {
        (!self.is_v6()).then(|| u16::from_be_bytes(self.at::<2>(4)))
    }
}

impl core::fmt::Debug for IpView<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        self.repr().fmt(f)
    }
}

impl core::fmt::Debug for RocePacket<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("RocePacket")
            .field("eth", &self.eth)
            .field("ip", &self.ip())
            .field("ip_header", &self.ip_header)
            .field("udp", &self.udp)
            .field("bth", &self.bth)
            .field("ext", &self.ext)
            .field("payload", &self.payload)
            .field("icrc", &self.icrc)
            .field("trailer", &self.trailer)
            .finish()
    }
}

/// Everything [`dissect`] could read from a frame, with the first problem found.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Dissection<'a> {
    /// Ethernet header, when the frame had one and it was complete.
    pub eth: Option<EthernetRepr>,
    /// IP header.
    pub ip: Option<IpRepr>,
    /// UDP header.
    pub udp: Option<UdpRepr>,
    /// The opcode byte, even when it is unknown.
    pub opcode_raw: Option<u8>,
    /// BTH, when its opcode is known and TVer is 0.
    pub bth: Option<BthRepr>,
    /// Extension headers read before any error.
    pub ext: ExtHeaders,
    /// Payload (pad excluded), when the structure was valid.
    pub payload: Option<&'a [u8]>,
    /// The stored ICRC, when there were enough bytes for one.
    pub icrc: Option<u32>,
    /// The ICRC the packet should carry, when it could be computed.
    pub icrc_computed: Option<u32>,
    /// True when the ICRC was computed and matched.
    pub icrc_ok: bool,
    /// IPv4 only: whether the header checksum verified.
    pub ipv4_checksum_ok: Option<bool>,
    /// IPv6 only, when the packet had extension headers: which, and how long.
    pub ipv6_ext: Option<ipv6::Extensions>,
    /// The first problem found, `None` for a good RoCEv2 packet.
    pub error: Option<WireError>,
    /// When `error` is one that leaves the structure readable (a bad IPv4 header checksum
    /// or ICRC, [`WireError::is_integrity`]), the next problem found after it, if any:
    /// a bad IPv4 checksum does not hide a bad ICRC or a malformed transport header.
    pub next_error: Option<WireError>,
}

impl Dissection<'_> {
    /// True for a well-formed RoCEv2 packet with a good ICRC.
    pub fn is_ok(&self) -> bool {
        self.error.is_none()
    }

    /// The problems found, first first: `error`, then `next_error`.
    pub fn errors(&self) -> impl Iterator<Item = &WireError> {
        self.error.iter().chain(self.next_error.iter())
    }

    fn note(&mut self, e: WireError) {
        match self.error {
            None => self.error = Some(e),
            Some(first) if first.is_integrity() && self.next_error.is_none() => {
                self.next_error = Some(e)
            }
            Some(_) => {}
        }
    }
}

struct IpLayer<'a> {
    ip: IpRepr,
    /// The IP header; for IPv6 in the dissector, its extension headers too.
    header: &'a [u8],
    payload: &'a [u8],
    trailer: &'a [u8],
}

impl IpLayer<'_> {
    /// IPv6 extension headers (only the dissector keeps them in `header`).
    fn ext(&self) -> &[u8] {
        match self.ip {
            IpRepr::V6(_) => self.header.get(ipv6::HEADER_LEN..).unwrap_or(&[]),
            IpRepr::V4(_) => &[],
        }
    }

    /// The upper-layer protocol (after any extension headers) and where the field that
    /// names it is, from the start of the IP header.
    fn upper_protocol(&self) -> (u8, usize) {
        match self.ip {
            IpRepr::V4(r) => (r.protocol, 9),
            IpRepr::V6(r) if self.header.len() == ipv6::HEADER_LEN => (r.next_header, 6),
            IpRepr::V6(r) => match ipv6::walk_extensions(self.ext(), r.next_header) {
                Ok(e) => (e.protocol, ipv6::HEADER_LEN + e.protocol_at.unwrap_or(0)),
                Err(_) => (r.next_header, 6), // walked successfully before: not reached
            },
        }
    }
}

struct UdpLayer<'a> {
    udp: UdpRepr,
    header: &'a [u8],
    payload: &'a [u8],
    base: usize,
}

#[derive(Default)]
struct TransportParts<'a> {
    bth: Option<BthRepr>,
    ext: ExtHeaders,
    payload: Option<&'a [u8]>,
}

impl TransportParts<'_> {
    /// The BTH [`transport_layer`] parsed from the start of `p`, kept as its bytes.
    fn kept(&self, p: &[u8]) -> Option<bth::Bth> {
        let b = p.first_chunk::<{ bth::HEADER_LEN }>()?;
        self.bth.map(|r| bth::Bth::new(r.opcode, *b))
    }
}

/// Parses an Ethernet frame carrying RoCEv2 and verifies its IPv4 checksum and ICRC.
pub fn parse(frame: &[u8]) -> Result<RocePacket<'_>, WireError> {
    use super::fastpath;
    if let Some(c) = fastpath::check(frame) {
        // Built first, verified last: once the packet is written, little has to be kept
        // across the ICRC's call.
        let p = fastpath::build(frame, c);
        if fastpath::verify(frame, c) {
            return p;
        }
    }
    parse_general(frame)
}

/// [`parse`] without the fast path for the common frame: the general parser, which
/// alone reports errors (and the reference the fast path is tested against).
#[cold]
#[inline(never)]
fn parse_general(frame: &[u8]) -> Result<RocePacket<'_>, WireError> {
    let (eth, ip_off) = ethernet_layer(frame)?;
    let mut p = parse_from(&frame[ip_off..], ip_off)?;
    p.eth = Some(eth);
    Ok(p)
}

/// Parses a packet that starts with its IP header (raw-IP captures, UDP sockets).
pub fn parse_ip(packet: &[u8]) -> Result<RocePacket<'_>, WireError> {
    parse_from(packet, 0)
}

/// Parses the RoCE part of a datagram whose IP and UDP headers a UDP socket gave as
/// addresses, ports and TOS ([`super::DatagramRepr`]), written out in `headers` (see
/// [`super::DatagramRepr::header_bytes`]), and verifies the ICRC over them.
pub fn parse_datagram<'a>(
    d: &super::DatagramRepr,
    headers: &'a super::datagram::HeaderBytes,
    roce: &'a [u8],
) -> Result<RocePacket<'a>, WireError> {
    parse_datagram_computed(d, headers, roce, None)
}

/// [`parse_datagram`] given the ICRC of `roce` under `headers` when the caller computed
/// it already (the context does, to find the IPv4 identification a UDP socket does not
/// report): it is compared with the stored one and the bytes are not hashed again.
/// `None`: computed here.
pub fn parse_datagram_computed<'a>(
    d: &super::DatagramRepr,
    headers: &'a super::datagram::HeaderBytes,
    roce: &'a [u8],
    computed: Option<u32>,
) -> Result<RocePacket<'a>, WireError> {
    check_len("BTH and ICRC", roce, bth::HEADER_LEN + ICRC_LEN, 0)?;
    let body = &roce[..roce.len() - ICRC_LEN];
    let found = icrc::stored(roce).unwrap_or(0);
    let computed = computed.unwrap_or_else(|| icrc::compute(headers.ip(), headers.udp(), body));
    if computed != found {
        return Err(WireError::BadIcrc {
            computed,
            found,
            offset: body.len(),
        });
    }
    parse_datagram_unverified(d, headers, roce)
}

/// [`parse_datagram`] without the ICRC (the packet's `icrc` is the stored one): for a
/// receiver that copies a payload to its place before it checks the ICRC (where no one
/// may look before the check), and checks it before anything else depends on the
/// packet. Never for accepting data unchecked.
pub fn parse_datagram_unverified<'a>(
    d: &super::DatagramRepr,
    headers: &'a super::datagram::HeaderBytes,
    roce: &'a [u8],
) -> Result<RocePacket<'a>, WireError> {
    check_len("BTH and ICRC", roce, bth::HEADER_LEN + ICRC_LEN, 0)?;
    let found = icrc::stored(roce).unwrap_or(0);
    if let Some(t) = super::fastpath::transport(roce) {
        return Ok(RocePacket {
            eth: None,
            ip_header: headers.ip(),
            udp: d.udp,
            bth: t.bth(),
            ext: super::fastpath::ext_headers(
                t.shape,
                t.headers,
                &roce[bth::HEADER_LEN..t.ext_end],
            ),
            payload: t.payload,
            icrc: found,
            trailer: &[],
        });
    }
    let mut t = TransportParts::default();
    transport_layer(roce, 0, &mut t)?;
    match (t.kept(roce), t.payload) {
        (Some(bth), Some(payload)) => Ok(RocePacket {
            eth: None,
            ip_header: headers.ip(),
            udp: d.udp,
            bth,
            ext: t.ext,
            payload,
            icrc: found,
            trailer: &[],
        }),
        _ => Err(WireError::InvalidRepr("transport layer incomplete")),
    }
}

/// Parses an Ethernet frame's headers without verifying the IPv4 checksum or the ICRC
/// (`icrc` holds the stored value). For steering a frame before it is verified, and for
/// measuring what header handling costs apart from the CRC; never for accepting data.
pub fn parse_headers(frame: &[u8]) -> Result<RocePacket<'_>, WireError> {
    match super::fastpath::check(frame) {
        Some(c) => super::fastpath::build(frame, c),
        None => parse_headers_general(frame),
    }
}

/// [`parse_headers`] without the fast path.
#[cold]
#[inline(never)]
fn parse_headers_general(frame: &[u8]) -> Result<RocePacket<'_>, WireError> {
    let (eth, ip_off) = ethernet_layer(frame)?;
    let mut p = parse_layers(&frame[ip_off..], ip_off, false)?;
    p.eth = Some(eth);
    Ok(p)
}

fn parse_from(b: &[u8], base: usize) -> Result<RocePacket<'_>, WireError> {
    parse_layers(b, base, true)
}

fn parse_layers(b: &[u8], base: usize, verify: bool) -> Result<RocePacket<'_>, WireError> {
    let l3 = ip_layer(b, base, false)?;
    let l4 = udp_layer(&l3, base)?;
    let found = if verify {
        ipv4_checksum(&l3, base)?;
        check_icrc(&l3, &l4)?
    } else {
        check_len("BTH and ICRC", l4.payload, bth::HEADER_LEN + ICRC_LEN, 0)
            .map_err(|e| e.shifted(l4.base))?;
        icrc::stored(l4.payload).unwrap_or(0)
    };
    let mut t = TransportParts::default();
    transport_layer(l4.payload, l4.base, &mut t)?;
    match (t.kept(l4.payload), t.payload) {
        (Some(bth), Some(payload)) => Ok(RocePacket {
            eth: None,
            ip_header: l3.header,
            udp: l4.udp,
            bth,
            ext: t.ext,
            payload,
            icrc: found,
            trailer: l3.trailer,
        }),
        _ => Err(WireError::InvalidRepr("transport layer incomplete")),
    }
}

/// Reads as much of an Ethernet frame as it can; never fails, never panics.
pub fn dissect(frame: &[u8]) -> Dissection<'_> {
    match ethernet_layer(frame) {
        Ok((eth, ip_off)) => {
            let mut d = dissect_from(&frame[ip_off..], ip_off);
            d.eth = Some(eth);
            d
        }
        Err(e) => {
            let mut d = Dissection::default();
            if let Ok(f) = ethernet::Frame::new_checked(frame) {
                d.eth = Some(EthernetRepr::parse(&f));
            }
            d.note(e);
            d
        }
    }
}

/// [`dissect`] for a packet that starts with its IP header.
pub fn dissect_ip(packet: &[u8]) -> Dissection<'_> {
    dissect_from(packet, 0)
}

fn dissect_from(b: &[u8], base: usize) -> Dissection<'_> {
    let mut d = Dissection::default();
    let l3 = match ip_layer(b, base, true) {
        Ok(l3) => l3,
        Err(e) => {
            d.note(e);
            return d;
        }
    };
    d.ip = Some(l3.ip);
    if let (IpRepr::V6(r), false) = (l3.ip, l3.ext().is_empty()) {
        // Walked once already by the IP layer, which kept only the bytes: again for the
        // names (the dissector's path, not the endpoint's).
        d.ipv6_ext = ipv6::walk_extensions(l3.ext(), r.next_header).ok();
    }
    if let IpRepr::V4(_) = l3.ip {
        let r = ipv4_checksum(&l3, base);
        d.ipv4_checksum_ok = Some(r.is_ok());
        if let Err(e) = r {
            d.note(e);
        }
    }
    let l4 = match udp_layer(&l3, base) {
        Ok(l4) => l4,
        Err(e) => {
            d.note(e);
            return d;
        }
    };
    d.udp = Some(l4.udp);
    d.opcode_raw = l4.payload.first().copied();
    d.icrc = icrc::stored(l4.payload);
    match check_icrc(&l3, &l4) {
        Ok(found) => {
            d.icrc_ok = true;
            d.icrc_computed = Some(found);
        }
        Err(e) => {
            if let WireError::BadIcrc { computed, .. } = e {
                d.icrc_computed = Some(computed);
            }
            d.note(e)
        }
    }
    let mut t = TransportParts::default();
    let r = transport_layer(l4.payload, l4.base, &mut t);
    d.bth = t.bth;
    d.ext = t.ext;
    d.payload = t.payload;
    if let Err(e) = r {
        d.note(e);
    }
    d
}

fn ethernet_layer(frame: &[u8]) -> Result<(EthernetRepr, usize), WireError> {
    let f = ethernet::Frame::new_checked(frame)?;
    let eth = EthernetRepr::parse(&f);
    match eth.ethertype {
        ETHERTYPE_IPV4 | ETHERTYPE_IPV6 => Ok((eth, f.header_len())),
        ethertype => Err(WireError::UnsupportedEthertype {
            ethertype,
            offset: f.header_len() - 2,
        }),
    }
}

/// The IP layer; `follow_ext` (the dissector) follows IPv6 extension headers, which the
/// endpoint's parser refuses (as not UDP).
fn ip_layer(b: &[u8], base: usize, follow_ext: bool) -> Result<IpLayer<'_>, WireError> {
    check_len("IP header", b, 1, 0).map_err(|e| e.shifted(base))?;
    match b[0] >> 4 {
        4 => ipv4_layer(b, base),
        6 => ipv6_layer(b, base, follow_ext),
        version => Err(WireError::BadIpVersion {
            version,
            expected: 4,
            offset: base,
        }),
    }
}

fn ipv4_layer(b: &[u8], base: usize) -> Result<IpLayer<'_>, WireError> {
    let h = ipv4::Header::new_checked(b).map_err(|e| e.shifted(base))?;
    let hl = h.header_len();
    let total = usize::from(h.total_len());
    if total < hl {
        return Err(WireError::BadIpLength {
            field: total,
            offset: base + 2,
            why: "IPv4 total length is shorter than the header",
        });
    }
    check_len("IPv4 packet", b, total, base).map_err(|e| match e {
        WireError::Truncated { need, have, .. } => WireError::Truncated {
            what: "IPv4 packet (total length)",
            offset: base,
            need,
            have,
        },
        e => e,
    })?;
    if h.more_frags() || h.frag_offset() != 0 {
        return Err(WireError::Fragmented { offset: base + 6 });
    }
    Ok(IpLayer {
        ip: IpRepr::V4(Ipv4Repr::parse(&h)),
        header: &b[..hl],
        payload: &b[hl..total],
        trailer: &b[total..],
    })
}

fn ipv6_layer(b: &[u8], base: usize, follow_ext: bool) -> Result<IpLayer<'_>, WireError> {
    let h = ipv6::Header::new_checked(b).map_err(|e| e.shifted(base))?;
    let plen = usize::from(h.payload_len());
    let end = ipv6::HEADER_LEN + plen;
    if plen == 0 {
        return Err(WireError::BadIpLength {
            field: 0,
            offset: base + 4,
            why: "IPv6 payload length 0 (jumbograms are not RoCEv2)",
        });
    }
    if b.len() < end {
        return Err(WireError::Truncated {
            what: "IPv6 packet (payload length)",
            offset: base,
            need: end,
            have: b.len(),
        });
    }
    let fixed = ipv6::HEADER_LEN;
    let ext_len = match ipv6::extension_name(h.next_header()) {
        Some(_) if follow_ext => {
            ipv6::walk_extensions(&b[fixed..end], h.next_header())
                .map_err(|e| e.shifted(base + fixed))?
                .len
        }
        _ => 0,
    };
    Ok(IpLayer {
        ip: IpRepr::V6(Ipv6Repr::parse(&h)),
        header: &b[..fixed + ext_len],
        payload: &b[fixed + ext_len..end],
        trailer: &b[end..],
    })
}

fn ipv4_checksum(l3: &IpLayer<'_>, base: usize) -> Result<(), WireError> {
    if let IpRepr::V4(_) = l3.ip {
        let h = ipv4::Header::new_unchecked(l3.header);
        let computed = h.compute_checksum();
        if computed != h.checksum() {
            return Err(WireError::BadIpv4Checksum {
                computed,
                found: h.checksum(),
                offset: base + 10,
            });
        }
    }
    Ok(())
}

fn udp_layer<'a>(l3: &IpLayer<'a>, base: usize) -> Result<UdpLayer<'a>, WireError> {
    let (protocol, protocol_at) = l3.upper_protocol();
    if protocol != ipv4::PROTO_UDP {
        return Err(WireError::NotUdp {
            protocol,
            offset: base + protocol_at,
        });
    }
    let at = base + l3.header.len();
    let h = udp::Header::new_checked(l3.payload).map_err(|e| e.shifted(at))?;
    if h.dst_port() != ROCEV2_UDP_PORT {
        return Err(WireError::NotRoceV2Port {
            port: h.dst_port(),
            offset: at + 2,
        });
    }
    if usize::from(h.len()) != l3.payload.len() {
        return Err(WireError::BadUdpLength {
            udp_len: usize::from(h.len()),
            ip_payload: l3.payload.len(),
            offset: at + 4,
        });
    }
    Ok(UdpLayer {
        udp: UdpRepr::parse(&h),
        header: &l3.payload[..udp::HEADER_LEN],
        payload: &l3.payload[udp::HEADER_LEN..],
        base: at + udp::HEADER_LEN,
    })
}

fn check_icrc(l3: &IpLayer<'_>, l4: &UdpLayer<'_>) -> Result<u32, WireError> {
    let p = l4.payload;
    check_len("BTH and ICRC", p, bth::HEADER_LEN + ICRC_LEN, 0).map_err(|e| e.shifted(l4.base))?;
    let body = &p[..p.len() - ICRC_LEN];
    let found = icrc::stored(p).unwrap_or(0);
    // `compute` takes headers up to IPv4's 60 bytes; longer ones are IPv6 with extension
    // headers (the dissector's), hashed in pieces.
    let computed = if l3.header.len() <= ipv4::MAX_HEADER_LEN {
        icrc::compute(l3.header, l4.header, body)
    } else {
        let (fixed, ext) = l3.header.split_at(ipv6::HEADER_LEN);
        icrc::compute_ipv6_ext(fixed, ext, l4.header, body)
    };
    if computed != found {
        return Err(WireError::BadIcrc {
            computed,
            found,
            offset: l4.base + body.len(),
        });
    }
    Ok(found)
}

/// Parses BTH, extension headers and payload out of a UDP payload (ICRC included).
fn transport_layer<'a>(
    p: &'a [u8],
    base: usize,
    out: &mut TransportParts<'a>,
) -> Result<(), WireError> {
    check_len("BTH and ICRC", p, bth::HEADER_LEN + ICRC_LEN, 0).map_err(|e| e.shifted(base))?;
    let h = bth::Header::new_checked(p).map_err(|e| e.shifted(base))?;
    let bth = BthRepr::parse(&h).map_err(|e| e.shifted(base))?;
    out.bth = Some(bth);
    let op = bth.opcode;
    if op.transport() == TransportKind::Rd {
        return Err(WireError::UnsupportedOpcode {
            opcode: op.value(),
            name: op.name(),
            offset: base,
        });
    }
    let end = p.len() - ICRC_LEN;
    let mut at = bth::HEADER_LEN;
    for &hdr in op.headers() {
        check_len(hdr.name(), &p[at..end], hdr.wire_len(), 0).map_err(|e| e.shifted(base + at))?;
        out.ext
            .parse_one(hdr, &p[at..end])
            .map_err(|e| e.shifted(base + at))?;
        at += hdr.wire_len();
    }
    let rest = end - at;
    let pad = usize::from(bth.pad_count);
    let payload_at = base + at;
    match op.payload() {
        PayloadRule::None if rest != 0 || pad != 0 => {
            return Err(WireError::UnexpectedPayload {
                opcode: op.value(),
                len: rest,
                allowed: "no",
                offset: payload_at,
            })
        }
        PayloadRule::Exactly(n) if rest != n || pad != 0 => {
            return Err(WireError::UnexpectedPayload {
                opcode: op.value(),
                len: rest,
                allowed: "exactly 8",
                offset: payload_at,
            })
        }
        _ => {}
    }
    if rest % 4 != 0 {
        return Err(WireError::Unaligned {
            len: rest,
            offset: payload_at,
        });
    }
    if pad > rest {
        return Err(WireError::BadPad {
            pad: bth.pad_count,
            available: rest,
            offset: base + 1,
        });
    }
    let len = rest - pad;
    if len > MAX_PAYLOAD {
        return Err(WireError::PayloadTooLong {
            len,
            offset: payload_at,
        });
    }
    out.payload = Some(&p[at..at + len]);
    Ok(())
}

/// A packet whose ICRC verified and whose BTH names a QP, but whose transport header
/// breaks a rule of the opcode table: a reserved opcode, a payload where the opcode
/// allows none (an RDMA READ request or an atomic with data), or a pad count that does
/// not fit the payload. IBTA Vol. 1 §9.7.5.1 has the responder of a connected QP answer
/// some of these rather than drop them (class C errors, §9.9.3), so the endpoint still
/// hands them to the QP they name ([`parse_misfit`], [`parse_datagram_misfit`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Misfit {
    /// Ethernet header, when the packet came in a frame.
    pub eth: Option<EthernetRepr>,
    /// IP header.
    pub ip: IpRepr,
    /// The opcode byte as received (it may name no known opcode).
    pub opcode: u8,
    /// BTH destination QP.
    pub dest_qp: u32,
    /// BTH PSN.
    pub psn: u32,
    /// BTH P_Key.
    pub pkey: u16,
    /// BTH AckReq.
    pub ack_req: bool,
    /// What the parser found wrong.
    pub error: WireError,
}

impl WireError {
    /// True for the errors of a packet whose ICRC verified and whose BTH is readable,
    /// found in the transport header rules: a reserved opcode, a payload the opcode does
    /// not allow, a pad count that does not fit. A QP may answer these ([`Misfit`]).
    pub fn is_misfit(&self) -> bool {
        matches!(
            self,
            WireError::UnknownOpcode { .. }
                | WireError::UnexpectedPayload { .. }
                | WireError::Unaligned { .. }
                | WireError::BadPad { .. }
        )
    }
}

fn misfit(eth: Option<EthernetRepr>, ip: IpRepr, roce: &[u8]) -> Option<Misfit> {
    let h = bth::Header::new_checked(roce).ok()?;
    if h.tver() != 0 {
        return None;
    }
    let mut t = TransportParts::default();
    let error = transport_layer(roce, 0, &mut t).err()?;
    error.is_misfit().then_some(Misfit {
        eth,
        ip,
        opcode: h.opcode(),
        dest_qp: h.dest_qp(),
        psn: h.psn(),
        pkey: h.pkey(),
        ack_req: h.ack_req(),
        error,
    })
}

/// For a frame [`parse`] refused: the [`Misfit`] it is, when its IPv4 checksum and ICRC
/// verify and the error is one of [`WireError::is_misfit`]; `None` otherwise.
pub fn parse_misfit(frame: &[u8]) -> Option<Misfit> {
    let (eth, ip_off) = ethernet_layer(frame).ok()?;
    let b = &frame[ip_off..];
    let l3 = ip_layer(b, ip_off, false).ok()?;
    let l4 = udp_layer(&l3, ip_off).ok()?;
    ipv4_checksum(&l3, ip_off).ok()?;
    check_icrc(&l3, &l4).ok()?;
    misfit(Some(eth), l3.ip, l4.payload)
}

/// [`parse_misfit`] for the RoCE part of a datagram, as [`parse_datagram`] takes it.
pub fn parse_datagram_misfit(
    d: &super::DatagramRepr,
    headers: &super::datagram::HeaderBytes,
    roce: &[u8],
) -> Option<Misfit> {
    check_len("BTH and ICRC", roce, bth::HEADER_LEN + ICRC_LEN, 0).ok()?;
    let body = &roce[..roce.len() - ICRC_LEN];
    let found = icrc::stored(roce)?;
    if icrc::compute(headers.ip(), headers.udp(), body) != found {
        return None;
    }
    misfit(None, d.ip, roce)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{DethRepr, FrameRepr, Opcode};

    fn frame(ip: IpRepr) -> Vec<u8> {
        let r = FrameRepr {
            eth: Some(EthernetRepr {
                dst: [2, 0, 0, 0, 0, 2],
                src: [2, 0, 0, 0, 0, 1],
                vlan: None,
                ethertype: ip.ethertype(),
            }),
            ip,
            udp: UdpRepr {
                src_port: 0xc000,
                dst_port: ROCEV2_UDP_PORT,
                checksum: 0,
            },
            bth: BthRepr::new(Opcode::UdSendOnly, 1, 5),
            ext: ExtHeaders {
                deth: Some(DethRepr {
                    qkey: 0x8001_0000,
                    src_qp: 1,
                }),
                ..Default::default()
            },
        };
        let mut f = vec![0u8; r.buffer_len(16)];
        r.emit(&[9; 16], &mut f).unwrap();
        f
    }

    fn v4() -> Vec<u8> {
        frame(IpRepr::V4(Ipv4Repr::new(
            [10, 0, 0, 1].into(),
            [10, 0, 0, 2].into(),
            0x03,
        )))
    }

    /// Frames of every kind: each opcode with all its extension headers and a payload
    /// its rule allows (three lengths where any is), IPv4 and IPv6, and every capture in
    /// `crates/uroce/tests/data`.
    fn corpus() -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        let full = ExtHeaders {
            rdeth: Some(0x12),
            deth: Some(DethRepr {
                qkey: 0x8001_0000,
                src_qp: 7,
            }),
            feth: Some(1),
            reth: Some(crate::wire::RethRepr {
                va: 0x1000,
                rkey: 0x77,
                len: 64,
            }),
            atomic: Some(crate::wire::AtomicEthRepr {
                va: 0x2000,
                rkey: 0x78,
                swap_add: 5,
                compare: 6,
            }),
            aeth: Some(crate::wire::AethRepr {
                syndrome: 0x1f,
                msn: 3,
            }),
            atomic_ack: Some(crate::wire::AtomicAckEthRepr { orig: 9 }),
            imm: Some(0xdead_beef),
            ieth: Some(0x55),
        };
        let v6 = IpRepr::V6(Ipv6Repr {
            src: "fd00::1".parse().unwrap(),
            dst: "fd00::2".parse().unwrap(),
            traffic_class: 2,
            flow_label: 0,
            next_header: 17,
            hop_limit: 64,
        });
        let v4 = IpRepr::V4(Ipv4Repr::new(
            [10, 0, 0, 1].into(),
            [10, 0, 0, 2].into(),
            0x03,
        ));
        for &op in Opcode::ALL.iter().filter(|o| o.is_supported()) {
            let lens: &[usize] = match op.payload() {
                PayloadRule::None => &[0],
                PayloadRule::Exactly(n) => &[n],
                PayloadRule::Any => &[0, 5, 4096],
            };
            for &ip in &[v4, v6] {
                for &len in lens {
                    let mut ext = ExtHeaders::default();
                    for &h in op.headers() {
                        let mut b = [0u8; 32];
                        full.emit_one(h, &mut b).unwrap();
                        ext.parse_one(h, &b).unwrap();
                    }
                    let mut bth = BthRepr::new(op, 0x12_3456, 0xab_cdef);
                    bth.solicited = true;
                    bth.ack_req = true;
                    let r = FrameRepr {
                        eth: Some(EthernetRepr {
                            dst: [2, 0, 0, 0, 0, 2],
                            src: [2, 0, 0, 0, 0, 1],
                            vlan: None,
                            ethertype: ip.ethertype(),
                        }),
                        ip,
                        udp: UdpRepr {
                            src_port: 0xc000,
                            dst_port: ROCEV2_UDP_PORT,
                            checksum: 0,
                        },
                        bth,
                        ext,
                    };
                    let payload: Vec<u8> = (0..len).map(|i| i as u8).collect();
                    let mut f = vec![0u8; r.buffer_len(len)];
                    r.emit(&payload, &mut f).unwrap();
                    out.push(f);
                }
            }
        }
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../uroce/tests/data");
        for e in std::fs::read_dir(dir).unwrap() {
            let path = e.unwrap().path();
            if path.extension().is_some_and(|x| x == "pcap") {
                let data = std::fs::read(&path).unwrap();
                for f in crate::pcap::Reader::new(&data).unwrap().flatten() {
                    out.push(f.data.to_vec());
                }
            }
        }
        out
    }

    /// The fast path gives what the general parser gives, for every frame it takes, and
    /// takes the common ones; every frame it leaves is left with its error to the general
    /// parser. Checked on the corpus and on a third of its frames with one byte of the
    /// first 80 changed (to 0, 0xff, and flipped in one bit), and cut short.
    #[test]
    fn the_fast_path_agrees_with_the_general_parser() {
        let check = |f: &[u8], fast_taken: &mut usize| {
            for verify in [false, true] {
                let general = if verify {
                    parse_general(f)
                } else {
                    parse_headers_general(f)
                };
                let fast = crate::wire::fastpath::parse_frame(f, verify);
                match (&fast, &general) {
                    (Ok(a), Ok(b)) => {
                        assert_eq!(a, b, "{f:02x?}");
                        *fast_taken += 1;
                    }
                    (Ok(a), Err(e)) => panic!("fast path took {a:?}, general said {e}: {f:02x?}"),
                    (Err(e), _) => assert_eq!(*e, crate::wire::fastpath::NOT_HERE),
                }
                let public = if verify { parse(f) } else { parse_headers(f) };
                assert_eq!(public, general);
            }
        };
        let corpus = corpus();
        let mut taken = 0;
        for f in &corpus {
            check(f, &mut taken);
        }
        // Every IPv4 frame of a supported opcode with a good ICRC goes the fast way.
        let common = corpus
            .iter()
            .filter(|f| {
                f.get(12..14) == Some(&[8, 0])
                    && parse(f).is_ok_and(|p| p.bth.opcode().is_supported())
            })
            .count();
        assert!(common > 100, "{common}");
        assert_eq!(taken, 2 * common);
        // Mutations of every third frame (the captures repeat themselves).
        for f in corpus.iter().step_by(3) {
            for at in 0..f.len().min(80) {
                for v in [0u8, 0xff, f[at] ^ (1 << (at % 8))] {
                    let mut g = f.clone();
                    g[at] = v;
                    check(&g, &mut taken);
                }
            }
            if f.get(12..14) == Some(&[8, 0]) && f.len() > 42 {
                // Every opcode byte (RD and unknown ones included) under each frame's
                // headers; the ICRC no longer matches, so only headers-only parsing
                // may take them.
                for op in 0..=255u8 {
                    let mut g = f.clone();
                    g[42] = op;
                    check(&g, &mut taken);
                }
            }
            for cut in [1, 2, 4, 5, 17] {
                if let Some(n) = f.len().checked_sub(cut) {
                    check(&f[..n], &mut taken);
                }
            }
        }
    }

    /// The fast path's transport check (`fastpath::transport`: one table lookup, the
    /// payload rule's bounds and alignment in one comparison, the pad in the flags mask
    /// and the slice) takes exactly what the general transport layer takes, and reads
    /// the same: every opcode byte, every TVer and pad count with the other flags
    /// either way, and every length from nothing after the BTH to past the largest
    /// extension headers, and at the payload limit.
    #[test]
    fn the_fast_transport_takes_what_the_general_one_takes() {
        let (mut taken, mut left) = (0, 0);
        let short: Vec<usize> = (0..=36).collect();
        let long = [4096 - 4, 4096, 4096 + 1, 4096 + 4, 4096 + 28, 4096 + 32];
        for op in 0..=255u8 {
            // TVer and the pad count, with SE and M both clear and both set.
            for flags in (0..0x40u8).chain(0xc0..=0xff) {
                let rests = short
                    .iter()
                    .chain(if flags & 0xcf == 0 { &long[..] } else { &[] });
                for &rest in rests {
                    let mut roce = vec![0u8; bth::HEADER_LEN + rest + ICRC_LEN];
                    roce[0] = op;
                    roce[1] = flags;
                    for (i, b) in roce[2..].iter_mut().enumerate() {
                        *b = (i * 7 + 3) as u8;
                    }
                    let fast = crate::wire::fastpath::transport(&roce);
                    let mut t = TransportParts::default();
                    let general = transport_layer(&roce, 0, &mut t);
                    match (fast, general) {
                        (Some(f), Ok(())) => {
                            let ext = crate::wire::fastpath::ext_headers(
                                f.shape,
                                f.headers,
                                &roce[bth::HEADER_LEN..f.ext_end],
                            );
                            assert_eq!(Some(f.bth().repr()), t.bth);
                            assert_eq!(
                                (Some(f.bth()), ext, Some(f.payload)),
                                (t.kept(&roce), t.ext, t.payload),
                                "opcode {op:#04x} flags {flags:#04x}, {rest} bytes"
                            );
                            taken += 1;
                        }
                        (None, Err(_)) => left += 1,
                        (None, Ok(())) if !crate::wire::Opcode::try_from(op)
                            .is_ok_and(|o| o.is_supported()) =>
                        {
                            left += 1; // RD: well formed, for the general parser only
                        }
                        (f, g) => panic!(
                            "opcode {op:#04x} flags {flags:#04x}, {rest} bytes: fast {}, general {g:?}",
                            f.is_some()
                        ),
                    }
                }
            }
        }
        assert!(taken > 2_000 && left > 100_000, "{taken} {left}");
    }

    /// The datagram path's transport parse (fast for the common packet) gives what the
    /// general transport layer gives, and the same errors.
    #[test]
    fn the_datagram_transport_agrees_with_the_general_parser() {
        for f in corpus() {
            let Ok(p) = parse(&f) else { continue };
            let Some(IpRepr::V4(_)) = Some(p.ip().repr()) else {
                continue;
            };
            let d = crate::wire::DatagramRepr {
                ip: p.ip().repr(),
                udp: p.udp,
            };
            let roce = &f[14 + p.ip_header.len() + 8..f.len() - p.trailer.len()];
            let h = d.header_bytes(roce.len()).unwrap();
            let got = parse_datagram(&d, &h, roce).unwrap();
            let mut t = TransportParts::default();
            transport_layer(roce, 0, &mut t).unwrap();
            assert_eq!(got.bth.repr(), t.bth.unwrap());
            assert_eq!(
                (got.bth, got.ext, got.payload),
                (t.kept(roce).unwrap(), t.ext, t.payload.unwrap())
            );
        }
    }

    /// A packet's IP header read field by field ([`IpView`]) says what the IP layer's
    /// representation says, for every frame of the corpus (IPv4 and IPv6, with the TOS
    /// or traffic class varied), and reads without panicking from any bytes.
    #[test]
    fn the_ip_view_reads_what_the_ip_layer_parses() {
        let mut seen = [0usize; 2];
        for mut f in corpus() {
            for tos in [0x00u8, 0x03, 0xfd] {
                // IPv4: the TOS byte; IPv6: the traffic class across bytes 0 and 1.
                match f.get(14).map(|v| v >> 4) {
                    Some(4) => f[15] = tos,
                    Some(6) => {
                        f[14] = 0x60 | tos >> 4;
                        f[15] = (f[15] & 0x0f) | tos << 4;
                    }
                    _ => {}
                }
                let Ok(p) = parse_headers(&f) else { continue };
                let (ip, r) = (p.ip(), ip_layer(&f[14..], 14, false).unwrap().ip);
                assert_eq!(ip.repr(), r);
                assert_eq!(
                    (ip.version(), ip.src(), ip.dst(), ip.ecn(), ip.dscp()),
                    (r.version(), r.src(), r.dst(), r.ecn(), r.dscp())
                );
                assert_eq!(
                    (ip.ttl(), ip.ident(), ip.bytes()),
                    (r.ttl(), r.ident(), p.ip_header)
                );
                seen[usize::from(ip.version() == 6)] += 1;
            }
        }
        assert!(seen[0] > 100 && seen[1] > 100, "{seen:?}");
        for b in [&[][..], &[0x60; 39], &[0x45; 19], &[0xff; 64]] {
            let v = IpView { b };
            let _ = (
                v.repr(),
                v.src(),
                v.dst(),
                v.ecn(),
                v.ttl(),
                v.ident(),
                v.version(),
            );
        }
    }

    #[test]
    fn a_bad_ipv4_checksum_does_not_hide_the_transport() {
        let mut f = v4();
        f[14 + 10] ^= 0xff; // the checksum; the ICRC masks it, so the ICRC still verifies
        let d = dissect(&f);
        assert!(matches!(
            d.error,
            Some(WireError::BadIpv4Checksum { offset: 24, .. })
        ));
        assert_eq!(d.next_error, None);
        assert_eq!(d.ipv4_checksum_ok, Some(false));
        assert!(d.icrc_ok);
        assert_eq!(d.bth.map(|b| b.psn), Some(5));
        assert_eq!(d.ext.deth.map(|x| x.qkey), Some(0x8001_0000));
        assert_eq!(d.payload.map(<[u8]>::len), Some(16));
        assert!(parse(&f).is_err());

        // With a payload bit flipped as well, both problems are reported, in order.
        f[14 + 20 + 8 + 12 + 8] ^= 1;
        let d = dissect(&f);
        let errors: Vec<_> = d.errors().collect();
        assert!(matches!(errors[0], WireError::BadIpv4Checksum { .. }));
        assert!(matches!(errors[1], WireError::BadIcrc { .. }));
        assert!(!d.icrc_ok && d.icrc_computed != d.icrc);

        // A good frame: checksum verified, ICRC computed equals the one stored.
        let good = v4();
        let d = dissect(&good);
        assert_eq!(
            (d.ipv4_checksum_ok, d.icrc_ok, d.error),
            (Some(true), true, None)
        );
        assert_eq!(d.icrc_computed, d.icrc);
    }

    #[test]
    fn ipv6_extension_headers_are_followed_by_the_dissector_only() {
        let f = frame(IpRepr::V6(Ipv6Repr {
            src: "fd00::1".parse().unwrap(),
            dst: "fd00::2".parse().unwrap(),
            traffic_class: 0,
            flow_label: 0,
            next_header: 17,
            hop_limit: 64,
        }));
        // Insert a hop-by-hop header (8 bytes: next header UDP, length 0, PadN) and a
        // destination options header (16 bytes) after the fixed header.
        let at = 14 + 40;
        let mut g = f[..at].to_vec();
        g.extend_from_slice(&[60, 0, 1, 4, 0, 0, 0, 0]);
        g.extend_from_slice(&[17, 1, 1, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
        g.extend_from_slice(&f[at..]);
        g[14 + 6] = ipv6::EXT_HOP_BY_HOP;
        let plen = u16::from_be_bytes([g[18], g[19]]) + 24;
        g[18..20].copy_from_slice(&plen.to_be_bytes());
        let udp_at = at + 24;
        let body = &g[udp_at + 8..g.len() - 4];
        let crc = icrc::compute_ipv6_ext(&g[14..at], &g[at..udp_at], &g[udp_at..udp_at + 8], body);
        let n = g.len();
        g[n - 4..].copy_from_slice(&crc.to_le_bytes());

        let d = dissect(&g);
        assert_eq!(d.error, None, "{:?}", d.error);
        let e = d.ipv6_ext.unwrap();
        assert_eq!(e.kinds(), &[ipv6::EXT_HOP_BY_HOP, ipv6::EXT_DEST_OPTS]);
        assert_eq!(d.udp.map(|u| u.src_port), Some(0xc000));
        assert_eq!(d.bth.map(|b| b.dest_qp), Some(1));
        assert!(d.icrc_ok);
        // The endpoint's parser refuses them, naming the fixed header's next header.
        assert!(matches!(
            parse(&g),
            Err(WireError::NotUdp {
                protocol: 0,
                offset: 20
            })
        ));
        // A chain that ends in something other than UDP names the last next-header field.
        let mut h = g.clone();
        h[at + 8] = 6; // the destination options header says TCP follows
        assert!(matches!(
            dissect(&h).error,
            Some(WireError::NotUdp {
                protocol: 6,
                offset: 62
            })
        ));
    }
}
