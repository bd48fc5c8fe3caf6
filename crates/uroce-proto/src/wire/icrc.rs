//! The RoCEv2 invariant CRC (IBTA Vol. 1 Annex A17.3.3, and §7.8.1 for the CRC itself).
//!
//! The ICRC is the Ethernet CRC-32 (reflected polynomial 0x04C11DB7, initial value and
//! final XOR all ones) computed over, in order:
//!
//! 1. 8 bytes of 0xFF standing in for the InfiniBand LRH, which RoCEv2 does not carry;
//! 2. the IP header with the fields a router may change set to all ones: for IPv4 the TOS
//!    byte (DSCP+ECN), TTL and header checksum; for IPv6 the traffic class, flow label
//!    and hop limit;
//! 3. the UDP header with its checksum set to all ones;
//! 4. the BTH with byte 4 (FECN, BECN and reserved bits, "resv8a") set to all ones;
//! 5. everything after the BTH up to the ICRC: extension headers, payload and pad.
//!
//! It is stored as the last 4 bytes of the UDP payload, least significant byte first:
//! this is what rdma_rxe and ConnectX NICs put on the wire (checked against the captures
//! in `crates/uroce/tests/data`).
//!
//! The masked headers (at most 88 bytes) are assembled in a stack scratch buffer and
//! hashed with one update, then the rest of the packet is hashed in place: one pass,
//! no copy of the payload.

use super::{ipv4, IpRepr, UdpRepr, WireError, ICRC_LEN};

const LRH_STANDIN: usize = 8;
const SCRATCH: usize = LRH_STANDIN + ipv4::MAX_HEADER_LEN + 8 + super::bth::HEADER_LEN;

/// Computes the ICRC of a packet given its IP header (all of it, options included), its
/// UDP header (8 bytes) and its transport bytes from the BTH up to, not including, the
/// ICRC. Inputs need not be valid; short inputs are hashed as they are.
pub fn compute(ip_header: &[u8], udp_header: &[u8], transport: &[u8]) -> u32 {
    if ip_header.len() == ipv4::MIN_HEADER_LEN
        && udp_header.len() == 8
        && transport.len() >= super::bth::HEADER_LEN
        && ip_header[0] == 0x45
    {
        return compute_v4(ip_header, udp_header, transport);
    }
    let mut s = [0xffu8; SCRATCH];
    let ip = &ip_header[..ip_header.len().min(ipv4::MAX_HEADER_LEN)];
    s[LRH_STANDIN..LRH_STANDIN + ip.len()].copy_from_slice(ip);
    let udp = &udp_header[..udp_header.len().min(8)];
    let at = LRH_STANDIN + ip.len();
    s[at..at + udp.len()].copy_from_slice(udp);
    masked_hash(&mut s, ip.len(), udp.len(), transport)
}

/// Computes the ICRC of `transport` (BTH up to, not including, the ICRC) carried under
/// the IP and UDP headers `ip` and `udp` would emit: the pseudo-header is written from the
/// representations straight into the scratch buffer, without the IPv4 header checksum
/// that the mask covers anyway. What [`super::DatagramRepr::icrc`] uses.
pub fn compute_for(ip: &IpRepr, udp: &UdpRepr, transport: &[u8]) -> Result<u32, WireError> {
    let mut s = [0xffu8; SCRATCH];
    let udp_len = super::udp::HEADER_LEN + transport.len() + ICRC_LEN;
    let ip_len = ip.emit_fields(&mut s[LRH_STANDIN..], udp_len)?;
    udp.emit(
        &mut s[LRH_STANDIN + ip_len..],
        udp_len - super::udp::HEADER_LEN,
    )?;
    Ok(masked_hash(
        &mut s,
        ip_len,
        super::udp::HEADER_LEN,
        transport,
    ))
}

/// [`compute_for`] of a transport section given in three pieces: `head` (the BTH and
/// the extension headers), then `payload_len` bytes that `payload` hashes (it takes the
/// CRC-32 state so far, as `crc32fast::Hasher` holds it, and returns the state after
/// them), then `tail` (the pad). For a payload that stays where it is, in memory the
/// stack reads only with raw loads ([`crate::mem::SharedBytes::crc32_update`]). A
/// `payload` that hashes other than `payload_len` bytes gives a wrong ICRC, never a fault.
///
/// Its first lines are `compute_for`'s: shared through a function returning the scratch
/// buffer, they cost the send path 29 to 47 instructions a packet (callgrind,
/// `examples/send_path`), so they are written twice.
pub fn compute_for_parts(
    ip: &IpRepr,
    udp: &UdpRepr,
    head: &[u8],
    payload_len: usize,
    payload: impl FnOnce(u32) -> u32,
    tail: &[u8],
) -> Result<u32, WireError> {
    let mut s = [0xffu8; SCRATCH];
    let udp_len = super::udp::HEADER_LEN + head.len() + payload_len + tail.len() + ICRC_LEN;
    let ip_len = ip.emit_fields(&mut s[LRH_STANDIN..], udp_len)?;
    udp.emit(
        &mut s[LRH_STANDIN + ip_len..],
        udp_len - super::udp::HEADER_LEN,
    )?;
    let state = payload(masked_hasher(&mut s, ip_len, super::udp::HEADER_LEN, head).finalize());
    if tail.is_empty() {
        return Ok(state);
    }
    let mut h = crc32fast::Hasher::new_with_initial(state);
    h.update(tail);
    Ok(h.finalize())
}

/// [`compute`] for the common case, a 20-byte IPv4 header (no options), with the masks
/// at fixed offsets: what the receive path's fast parser (`wire::fastpath`) uses. Other
/// headers go to [`compute`].
///
/// The masked pseudo-header is 48 bytes, written into a buffer of their own and hashed
/// on their own, then the rest of the packet in place; a packet of up to 256 bytes in
/// all is copied behind the pseudo-header and hashed in one go (a 64-byte RDMA WRITE:
/// 35 ns as two pieces, 26 as one, on the development machine).
#[inline]
pub fn compute_v4(ip_header: &[u8], udp_header: &[u8], transport: &[u8]) -> u32 {
    let (Ok(ip), Ok(udp), Some((bth, rest))) = (
        <&[u8; ipv4::MIN_HEADER_LEN]>::try_from(ip_header),
        <&[u8; 8]>::try_from(udp_header),
        transport.split_first_chunk::<{ super::bth::HEADER_LEN }>(),
    ) else {
        return compute(ip_header, udp_header, transport);
    };
    if ip[0] != 0x45 {
        return compute(ip_header, udp_header, transport);
    }
    compute_v4_fixed(ip, udp, bth, rest)
}

/// [`compute_v4`] for headers already known to be a 20-byte IPv4 header, a UDP header
/// and a BTH, followed by `rest` (extension headers, payload and pad): what
/// `wire::fastpath` calls, with nothing to check again.
#[inline(always)]
pub(crate) fn compute_v4_fixed(
    ip: &[u8; ipv4::MIN_HEADER_LEN],
    udp: &[u8; super::udp::HEADER_LEN],
    bth: &[u8; super::bth::HEADER_LEN],
    rest: &[u8],
) -> u32 {
    const IP: usize = LRH_STANDIN;
    const UDP: usize = IP + ipv4::MIN_HEADER_LEN;
    const BTH: usize = UDP + super::udp::HEADER_LEN;
    const END: usize = BTH + super::bth::HEADER_LEN;
    // The pseudo-header with its masks, written over all ones (the LRH stand-in and the
    // masked fields).
    let pseudo = |s: &mut [u8; END]| {
        s[IP..UDP].copy_from_slice(ip);
        s[UDP..BTH].copy_from_slice(udp);
        s[BTH..END].copy_from_slice(bth);
        for i in [IP + 1, IP + 8, IP + 10, IP + 11, UDP + 6, UDP + 7] {
            s[i] = 0xff; // TOS, TTL, IPv4 header checksum; UDP checksum
        }
        s[BTH + super::bth::RESV8A_OFFSET] = 0xff; // FECN, BECN, reserved
    };
    let mut h = hasher();
    if rest.len() <= SHORT - END {
        // A short packet: all of it in one buffer, one pass (with carry-less
        // multiplication from 128 bytes on).
        let mut s = [0xffu8; SHORT];
        if let Some((head, tail)) = s.split_first_chunk_mut::<END>() {
            pseudo(head);
            tail[..rest.len()].copy_from_slice(rest);
        }
        h.update(&s[..END + rest.len()]);
    } else {
        // A long one: the pseudo-header alone (not the whole buffer filled), then the
        // rest in place.
        let mut head = [0xffu8; END];
        pseudo(&mut head);
        h.update(&head);
        h.update(rest);
    }
    h.finalize()
}

/// A fresh CRC-32 hasher. `crc32fast::Hasher::new` asks which CPU features there are
/// each time (37 instructions under callgrind, as much as the rest of the pseudo-header
/// work); the answer is the same for the life of the process, so one hasher is made
/// once and copied.
#[inline]
fn hasher() -> crc32fast::Hasher {
    static FRESH: std::sync::OnceLock<crc32fast::Hasher> = std::sync::OnceLock::new();
    FRESH.get_or_init(crc32fast::Hasher::new).clone()
}

/// [`compute_v4`] copies a packet whose pseudo-header and transport section fit in this
/// many bytes whole into its scratch buffer.
const SHORT: usize = 256;

/// Masks the IP header (`ip_len` bytes after the LRH stand-in) and the UDP header
/// (`udp_len` bytes after it) in `s`, appends the masked BTH and hashes everything with
/// the rest of `transport`.
fn masked_hash(s: &mut [u8; SCRATCH], ip_len: usize, udp_len: usize, transport: &[u8]) -> u32 {
    masked_hasher(s, ip_len, udp_len, transport).finalize()
}

/// [`masked_hash`]'s hasher, before its result is taken: more may follow. (Always
/// inlined: as a call, returning the hasher cost a 4 KiB WRITE 36 instructions.)
#[inline(always)]
fn masked_hasher(
    s: &mut [u8; SCRATCH],
    ip_len: usize,
    udp_len: usize,
    transport: &[u8],
) -> crc32fast::Hasher {
    let mut n = LRH_STANDIN;
    let ip = &mut s[n..n + ip_len];
    match ip.first().map(|b| b >> 4) {
        Some(4) => {
            for i in [1usize, 8, 10, 11] {
                if i < ip.len() {
                    ip[i] = 0xff; // TOS, TTL, header checksum
                }
            }
        }
        Some(6) => {
            ip[0] |= 0x0f; // low nibble of the traffic class
            for i in [1usize, 2, 3, 7] {
                if i < ip.len() {
                    ip[i] = 0xff; // traffic class, flow label, hop limit
                }
            }
        }
        _ => {}
    }
    n += ip_len;
    for i in [6usize, 7] {
        if i < udp_len {
            s[n + i] = 0xff; // UDP checksum
        }
    }
    n += udp_len;

    let bth_len = transport.len().min(super::bth::HEADER_LEN);
    s[n..n + bth_len].copy_from_slice(&transport[..bth_len]);
    if bth_len > super::bth::RESV8A_OFFSET {
        s[n + super::bth::RESV8A_OFFSET] = 0xff; // FECN, BECN, reserved
    }
    n += bth_len;

    let mut h = hasher();
    h.update(&s[..n]);
    h.update(&transport[bth_len..]);
    h
}

/// [`compute`] for an IPv6 packet whose fixed header `ip_fixed` (40 bytes) is followed by
/// extension headers `ext` before the UDP header. The ICRC's pseudo-header then covers
/// the fixed header, masked as always, and the extension headers as they are: the whole
/// IP header as it was sent. uroce never sends extension headers and Annex A17 does not
/// show them; this is what the dissector uses to give a verdict on such packets.
pub fn compute_ipv6_ext(ip_fixed: &[u8], ext: &[u8], udp_header: &[u8], transport: &[u8]) -> u32 {
    // Rare (the dissector's), so simply: the whole pseudo-packet in one buffer, masked,
    // and a bitwise CRC. A second use of crc32fast here would cost the endpoint's path:
    // its CPU-feature check stops being inlined there (13 instructions a packet more
    // under callgrind).
    const FIXED: usize = super::ipv6::HEADER_LEN;
    let ip = &ip_fixed[..ip_fixed.len().min(FIXED)];
    let udp = &udp_header[..udp_header.len().min(8)];
    let mut v =
        Vec::with_capacity(LRH_STANDIN + ip.len() + ext.len() + udp.len() + transport.len());
    v.extend_from_slice(&[0xff; LRH_STANDIN]);
    v.extend_from_slice(ip);
    if let Some(b) = v.get_mut(LRH_STANDIN) {
        *b |= 0x0f; // low nibble of the traffic class
    }
    for i in [1usize, 2, 3, 7] {
        if i < ip.len() {
            v[LRH_STANDIN + i] = 0xff; // traffic class, flow label, hop limit
        }
    }
    v.extend_from_slice(ext);
    let at = v.len();
    v.extend_from_slice(udp);
    for i in [6usize, 7] {
        if i < udp.len() {
            v[at + i] = 0xff; // UDP checksum
        }
    }
    let at = v.len();
    v.extend_from_slice(transport);
    if transport.len() > super::bth::RESV8A_OFFSET {
        v[at + super::bth::RESV8A_OFFSET] = 0xff; // FECN, BECN, reserved
    }
    crc32_bitwise(&v)
}

/// The Ethernet CRC-32 (reflected polynomial 0xEDB88320, initial value and final XOR all
/// ones), one bit at a time: what crc32fast computes, slowly, for the rare packets that
/// need it.
fn crc32_bitwise(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in data {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0xedb8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

/// Reads the ICRC stored in the last 4 bytes of a UDP payload.
pub fn stored(udp_payload: &[u8]) -> Option<u32> {
    let at = udp_payload.len().checked_sub(ICRC_LEN)?;
    let mut b = [0u8; 4];
    b.copy_from_slice(&udp_payload[at..]);
    Some(u32::from_le_bytes(b))
}

/// Writes an ICRC in wire byte order.
pub fn store(icrc: u32, out: &mut [u8; 4]) {
    *out = icrc.to_le_bytes();
}

/// Longest transport section (BTH to ICRC) [`ident_basis`] handles.
pub const MAX_IDENT_TRANSPORT: usize = 4400;
static ZEROS: [u8; MAX_IDENT_TRANSPORT] = [0; MAX_IDENT_TRANSPORT];

/// How each of the 16 bits of the IPv4 identification moves the ICRC of a packet with an
/// `ip_len`-byte IPv4 header and a `transport_len`-byte transport section.
///
/// The IPv4 identification is covered by the ICRC (Annex A17.3.3 masks only TOS, TTL and
/// the header checksum), but a UDP socket does not show it. CRC-32 is affine over GF(2):
/// flipping a set of bits changes the CRC by the XOR of what each bit alone changes, and
/// that depends only on the bit's distance from the end. So the identification a received
/// packet was sent with can be solved for ([`solve_ident`]) from the ICRC computed with
/// identification 0 and the ICRC on the wire. `None` when `transport_len` is above
/// [`MAX_IDENT_TRANSPORT`] or `ip_len` is not a valid IPv4 header length.
pub fn ident_basis(ip_len: usize, transport_len: usize) -> Option<[u32; 16]> {
    if !(20..=ipv4::MAX_HEADER_LEN).contains(&ip_len) || transport_len > MAX_IDENT_TRANSPORT {
        return None;
    }
    let mut ip = [0u8; ipv4::MAX_HEADER_LEN];
    ip[0] = 0x40 | (ip_len / 4) as u8;
    let ip = &mut ip[..ip_len];
    let udp = [0u8; 8];
    let t = &ZEROS[..transport_len];
    let zero = compute(ip, &udp, t);
    let mut basis = [0u32; 16];
    for (j, b) in basis.iter_mut().enumerate() {
        let id = 1u16 << j;
        ip[4..6].copy_from_slice(&id.to_be_bytes());
        *b = compute(ip, &udp, t) ^ zero;
    }
    Some(basis)
}

/// [`ident_basis`] by transport length, for a 20-byte IPv4 header (what a UDP socket's
/// datagrams are taken to have), each computed once (17 CRC passes) and kept: a sender
/// that renumbers its queued packets and a receiver that finds theirs ask for the same
/// few lengths again and again. At most one per length up to [`MAX_IDENT_TRANSPORT`], so
/// packets of ever new lengths cannot make every packet pay for one.
#[derive(Debug, Clone, Default)]
pub struct IdentBases(std::collections::HashMap<usize, [u32; 16]>);

impl IdentBases {
    /// The basis for a transport section (BTH to ICRC) of `transport_len` bytes; `None`
    /// above [`MAX_IDENT_TRANSPORT`].
    pub fn get(&mut self, transport_len: usize) -> Option<[u32; 16]> {
        if let Some(b) = self.0.get(&transport_len) {
            return Some(*b);
        }
        let b = ident_basis(20, transport_len)?;
        self.0.insert(transport_len, b);
        Some(b)
    }

    /// How many lengths' bases are kept.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether none is kept yet.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// What identification `id` does to an ICRC computed with identification 0: the XOR of
/// each of its bits' effect in `basis` (from [`ident_basis`]). Moving a packet from
/// identification `a` to `b` changes its ICRC by `ident_effect(basis, a ^ b)`.
pub fn ident_effect(basis: &[u32; 16], id: u16) -> u32 {
    (0..16)
        .filter(|j| id & (1 << j) != 0)
        .fold(0, |acc, j| acc ^ basis[j])
}

/// The identification `x` whose bits' changes (from [`ident_basis`]) XOR to `delta`, the
/// ICRC on the wire XOR the ICRC computed with identification 0; `None` when there is none
/// (the packet is damaged: only 1 in 65536 damaged packets still finds one, so the check
/// keeps 16 of its 32 bits).
pub fn solve_ident(basis: &[u32; 16], delta: u32) -> Option<u16> {
    // Gaussian elimination over GF(2): rows (vector, which identification bits make it).
    let mut rows = [(0u32, 0u16); 16];
    let mut n = 0;
    for (j, &v) in basis.iter().enumerate() {
        let mut row = (v, 1u16 << j);
        for &(pv, pc) in &rows[..n] {
            let pivot = 1u32 << (31 - pv.leading_zeros());
            if row.0 & pivot != 0 {
                row = (row.0 ^ pv, row.1 ^ pc);
            }
        }
        if row.0 != 0 {
            rows[n] = row;
            n += 1;
        }
    }
    let (mut t, mut x) = (delta, 0u16);
    for &(pv, pc) in &rows[..n] {
        let pivot = 1u32 << (31 - pv.leading_zeros());
        if t & pivot != 0 {
            t ^= pv;
            x ^= pc;
        }
    }
    (t == 0).then_some(x)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The pseudo-header written from representations hashes as the emitted headers do,
    /// options, odd TTLs and IPv6 included.
    #[test]
    fn compute_for_matches_compute_over_emitted_headers() {
        use crate::wire::{Ipv4Repr, Ipv6Repr};
        let mut v4 = Ipv4Repr::new([10, 0, 0, 1].into(), [10, 0, 0, 2].into(), 0x9a);
        v4.ident = 0x1234;
        v4.ttl = 3;
        v4.options[..4].copy_from_slice(&[0x94, 0x04, 0, 0]);
        v4.options_len = 4;
        let v6 = Ipv6Repr {
            src: "fd00::1".parse().unwrap(),
            dst: "fd00::2".parse().unwrap(),
            traffic_class: 0x02,
            flow_label: 0xbeef,
            next_header: 17,
            hop_limit: 9,
        };
        let udp = UdpRepr {
            src_port: 0xc123,
            dst_port: 4791,
            checksum: 0,
        };
        let transport: Vec<u8> = (0..60u8).collect();
        for ip in [IpRepr::V4(v4), IpRepr::V6(v6)] {
            let mut h = [0u8; 68];
            let ip_len = ip.buffer_len();
            let udp_len = 8 + transport.len() + ICRC_LEN;
            ip.emit(&mut h, udp_len).unwrap();
            udp.emit(&mut h[ip_len..], udp_len - 8).unwrap();
            assert_eq!(
                compute_for(&ip, &udp, &transport).unwrap(),
                compute(&h[..ip_len], &h[ip_len..ip_len + 8], &transport)
            );
        }
    }

    #[test]
    fn masked_fields_do_not_change_it_and_others_do() {
        let mut ip = [0u8; 20];
        ip[0] = 0x45;
        ip[9] = 17;
        let udp = [0xc0, 0x00, 0x12, 0xb7, 0, 28, 0, 0];
        let mut t = [0u8; 16];
        t[0] = 0x04;
        let base = compute(&ip, &udp, &t);
        let mut ip2 = ip;
        ip2[1] = 0x03; // ECN CE
        ip2[8] = 1; // TTL
        ip2[10] = 0x12; // checksum
        let mut udp2 = udp;
        udp2[6] = 0x55;
        let mut t2 = t;
        t2[4] = 0xc0; // FECN+BECN
        assert_eq!(compute(&ip2, &udp2, &t2), base);
        t2[5] ^= 1; // DestQP
        assert_ne!(compute(&ip2, &udp2, &t2), base);
    }

    #[test]
    fn the_ip_identification_is_recovered_from_the_icrc() {
        let mut ip = [0u8; 20];
        ip[0] = 0x45;
        ip[9] = 17;
        let udp = [0xc0, 0x00, 0x12, 0xb7, 0, 60, 0, 0];
        let mut t = [0u8; 48];
        for (i, b) in t.iter_mut().enumerate() {
            *b = (i * 37) as u8;
        }
        let basis = ident_basis(20, t.len()).unwrap();
        for id in [0u16, 1, 0x1234, 0xbeef, 0xffff] {
            ip[4..6].copy_from_slice(&id.to_be_bytes());
            let wire = compute(&ip, &udp, &t);
            ip[4..6].copy_from_slice(&[0, 0]);
            let zero = compute(&ip, &udp, &t);
            assert_eq!(solve_ident(&basis, wire ^ zero), Some(id));
            // A damaged packet finds no identification (almost always).
            let mut bad = t;
            bad[30] ^= 0x40;
            assert_eq!(solve_ident(&basis, wire ^ compute(&ip, &udp, &bad)), None);
        }
        assert!(ident_basis(20, MAX_IDENT_TRANSPORT + 1).is_none());
        assert!(ident_basis(19, 10).is_none());
    }

    /// Each length's basis is computed once and kept; lengths beyond the bound get
    /// none, and are not kept. `ident_effect` is the XOR of its bits' effects.
    #[test]
    fn identification_bases_are_kept_and_bounded() {
        let mut bases = IdentBases::default();
        for _ in 0..3 {
            assert_eq!(bases.get(64), ident_basis(20, 64));
        }
        let b = bases.get(68).unwrap();
        assert_eq!(bases.len(), 2);
        assert_eq!(bases.get(MAX_IDENT_TRANSPORT + 4), None);
        assert_eq!(bases.len(), 2);
        assert_eq!(ident_effect(&b, 0), 0);
        assert_eq!(ident_effect(&b, 0x8001), b[15] ^ b[0]);
    }

    /// `compute_v4`, by either of its paths (one buffer for short packets, two pieces for
    /// long ones), is the CRC of the whole masked pseudo-packet, for every length around
    /// the switch-over and up to a 4 KiB payload with extension headers; `compute` goes
    /// through it for such headers.
    #[test]
    fn compute_v4_is_the_crc_of_the_masked_whole() {
        let mut ip = [0u8; 20];
        ip[0] = 0x45;
        ip[9] = 17;
        ip[1] = 0x03;
        let udp = [0xc0, 0x00, 0x12, 0xb7, 0, 60, 0x12, 0x34];
        let t: Vec<u8> = (0..4200u32).map(|i| (i * 131 + i / 7) as u8).collect();
        for n in (12..600).chain([4108, 4124, 4136, 4199]) {
            let mut whole = vec![0xffu8; 8];
            whole.extend_from_slice(&ip);
            whole.extend_from_slice(&udp);
            whole.extend_from_slice(&t[..n]);
            for i in [8 + 1, 8 + 8, 8 + 10, 8 + 11, 28 + 6, 28 + 7, 36 + 4] {
                whole[i] = 0xff;
            }
            let want = crc32_bitwise(&whole);
            assert_eq!(compute_v4(&ip, &udp, &t[..n]), want, "{n}");
            assert_eq!(compute(&ip, &udp, &t[..n]), want, "{n}");
        }
    }

    #[test]
    fn bitwise_crc_is_crc32fast() {
        let data: Vec<u8> = (0..5000u32).map(|i| (i * 7 + i / 13) as u8).collect();
        for n in [0, 1, 3, 64, 4999] {
            assert_eq!(
                crc32_bitwise(&data[..n]),
                crc32fast::hash(&data[..n]),
                "{n}"
            );
        }
        assert_eq!(crc32_bitwise(b"123456789"), 0xcbf4_3926); // the CRC-32 check value
    }

    #[test]
    fn ipv6_extension_headers_are_hashed_as_part_of_the_ip_header() {
        let mut fixed = [0u8; 40];
        fixed[0] = 0x60;
        fixed[1] = 0x2a;
        fixed[6] = 0; // hop-by-hop
        fixed[7] = 64;
        let ext = [17u8, 0, 1, 4, 0, 0, 0, 0, 0x44, 0, 0, 0, 0, 0, 0, 0];
        let udp = [0xc0, 0x00, 0x12, 0xb7, 0, 40, 0x12, 0x34];
        let transport = [7u8; 28];
        let mut whole = fixed.to_vec();
        whole.extend_from_slice(&ext);
        assert_eq!(
            compute_ipv6_ext(&fixed, &ext, &udp, &transport),
            compute(&whole, &udp, &transport)
        );
        assert_eq!(
            compute_ipv6_ext(&fixed, &[], &udp, &transport),
            compute(&fixed, &udp, &transport)
        );
        assert_ne!(
            compute_ipv6_ext(&fixed, &ext[..8], &udp, &transport),
            compute_ipv6_ext(&fixed, &ext, &udp, &transport)
        );
    }
}
