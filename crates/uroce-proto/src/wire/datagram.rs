//! The datagram around a RoCEv2 packet: its IP and UDP headers as representations, apart
//! from the transport bytes (BTH to ICRC) they carry.
//!
//! This is the split quinn makes between a QUIC packet and its `Transmit`: the endpoint
//! writes the RoCE part, and a backend either hands those bytes to a UDP socket with the
//! addresses, ports and TOS of the [`DatagramRepr`] (the kernel builds IP and UDP), or
//! writes Ethernet, IP and UDP in front of them in place (AF_XDP).
//!
//! The ICRC (Annex A17.3.3) covers the IP and UDP headers, masked; so both ends must agree
//! on every unmasked field. [`DatagramRepr::roce`] is the one place where uroce's choices
//! for those fields live (IPv4: DF set, identification 0, no options; UDP checksum 0), and
//! [`DatagramRepr::icrc`] is the one place the ICRC's pseudo-header is made from them.

use std::net::IpAddr;

use super::{
    icrc, ipv4, ipv6, udp, EthernetRepr, IpRepr, Ipv4Repr, Ipv6Repr, UdpRepr, WireError,
    ROCEV2_UDP_PORT,
};

/// Most bytes IP and UDP take in front of the BTH (IPv4 with 40 bytes of options).
pub const MAX_HEADERS_LEN: usize = ipv4::MAX_HEADER_LEN + udp::HEADER_LEN;

/// The IP and UDP headers of one RoCEv2 datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DatagramRepr {
    /// IP header (protocol / next header UDP; lengths are derived when emitted).
    pub ip: IpRepr,
    /// UDP header (destination port 4791; the length is derived).
    pub udp: UdpRepr,
}

/// The IP and UDP headers of a datagram written out, as the ICRC covers them.
#[derive(Debug, Clone, Copy)]
pub struct HeaderBytes {
    buf: [u8; MAX_HEADERS_LEN],
    ip_len: usize,
}

impl HeaderBytes {
    /// The IP header.
    pub fn ip(&self) -> &[u8] {
        &self.buf[..self.ip_len]
    }

    /// The UDP header.
    pub fn udp(&self) -> &[u8] {
        &self.buf[self.ip_len..self.ip_len + udp::HEADER_LEN]
    }

    /// IP and UDP headers together.
    pub fn as_slice(&self) -> &[u8] {
        &self.buf[..self.ip_len + udp::HEADER_LEN]
    }
}

impl DatagramRepr {
    /// A datagram from `src` to `dst` as uroce sends RoCEv2 (and Linux sends UDP on a
    /// socket with "don't fragment"): IPv4 with DF set, identification 0 (RFC 6864 allows
    /// it for atomic datagrams), no options and TTL 64; IPv6 with flow label 0 and hop
    /// limit 64; UDP from `src_port` to 4791 with a zero checksum. `tos` is the TOS or
    /// traffic class byte (DSCP and ECN). `None` when the two addresses are of different
    /// IP versions.
    pub fn roce(src: IpAddr, dst: IpAddr, src_port: u16, tos: u8) -> Option<Self> {
        let ip = match (src, dst) {
            (IpAddr::V4(s), IpAddr::V4(d)) => IpRepr::V4(Ipv4Repr::new(s, d, tos)),
            (IpAddr::V6(s), IpAddr::V6(d)) => IpRepr::V6(Ipv6Repr {
                src: s,
                dst: d,
                traffic_class: tos,
                flow_label: 0,
                next_header: super::ipv4::PROTO_UDP,
                hop_limit: 64,
            }),
            _ => return None,
        };
        Some(Self {
            ip,
            udp: UdpRepr {
                src_port,
                dst_port: ROCEV2_UDP_PORT,
                checksum: 0,
            },
        })
    }

    /// Source address.
    pub fn src(&self) -> IpAddr {
        self.ip.src()
    }

    /// Destination address.
    pub fn dst(&self) -> IpAddr {
        self.ip.dst()
    }

    /// The TOS (IPv4) or traffic class (IPv6) byte: DSCP and ECN.
    pub fn tos(&self) -> u8 {
        match &self.ip {
            IpRepr::V4(r) => r.tos,
            IpRepr::V6(r) => r.traffic_class,
        }
    }

    /// Bytes IP and UDP take in front of the BTH.
    pub fn headers_len(&self) -> usize {
        self.ip.buffer_len() + udp::HEADER_LEN
    }

    /// Bytes Ethernet (no VLAN tag), IP and UDP take in front of the BTH.
    pub fn link_headers_len(&self) -> usize {
        super::ethernet::HEADER_LEN + self.headers_len()
    }

    /// Writes the IP and UDP headers into the first [`DatagramRepr::headers_len`] bytes
    /// of `buf`, for `roce_len` bytes of UDP payload (BTH to ICRC).
    pub fn emit(&self, buf: &mut [u8], roce_len: usize) -> Result<(), WireError> {
        let ip_len = self.ip.buffer_len();
        if buf.len() < ip_len + udp::HEADER_LEN {
            return Err(WireError::BufferTooSmall {
                need: ip_len + udp::HEADER_LEN,
                have: buf.len(),
            });
        }
        self.ip.emit(buf, udp::HEADER_LEN + roce_len)?;
        self.udp.emit(&mut buf[ip_len..], roce_len)
    }

    /// Writes Ethernet (from `src_mac` to `dst_mac`, no VLAN tag), IP and UDP into the
    /// first [`DatagramRepr::link_headers_len`] bytes of `buf`.
    pub fn emit_link(
        &self,
        src_mac: [u8; 6],
        dst_mac: [u8; 6],
        buf: &mut [u8],
        roce_len: usize,
    ) -> Result<(), WireError> {
        let eth = EthernetRepr {
            dst: dst_mac,
            src: src_mac,
            vlan: None,
            ethertype: self.ip.ethertype(),
        };
        eth.emit(buf)?;
        self.emit(&mut buf[super::ethernet::HEADER_LEN..], roce_len)
    }

    /// The IP and UDP headers for `roce_len` bytes of UDP payload, written out.
    pub fn header_bytes(&self, roce_len: usize) -> Result<HeaderBytes, WireError> {
        let mut h = HeaderBytes {
            buf: [0; MAX_HEADERS_LEN],
            ip_len: self.ip.buffer_len(),
        };
        self.emit(&mut h.buf, roce_len)?;
        Ok(h)
    }

    /// The ICRC of `transport` (BTH up to, not including, the ICRC) carried in this
    /// datagram: the pseudo-header is these IP and UDP headers, masked as A17.3.3 says.
    pub fn icrc(&self, transport: &[u8]) -> Result<u32, WireError> {
        icrc::compute_for(&self.ip, &self.udp, transport)
    }

    /// Whether `stored`, the ICRC a packet of `transport_len` bytes (BTH up to the ICRC)
    /// carried, fits `computed`, its ICRC under these headers ([`DatagramRepr::icrc`]);
    /// for IPv4 without options, also under another identification, which is then taken
    /// into `self.ip`.
    ///
    /// The ICRC covers the IPv4 identification, which a UDP socket does not report and
    /// GRO does not keep: a receiver puts its guess in `self.ip` (segment j of a
    /// coalesced GSO send most likely left with identification j), and where the guess
    /// misses the identification is solved for ([`icrc::solve_ident`], with `bases`).
    /// So an IPv4 datagram's check keeps 16 of the ICRC's 32 bits: 1 damaged packet in
    /// 65,536 still finds an identification that fits.
    pub fn fit_icrc(
        &mut self,
        transport_len: usize,
        computed: u32,
        stored: u32,
        bases: &mut icrc::IdentBases,
    ) -> bool {
        if computed == stored {
            return true;
        }
        let IpRepr::V4(ip) = &mut self.ip else {
            return false;
        };
        if ip.options_len != 0 {
            return false;
        }
        let Some(b) = bases.get(transport_len) else {
            return false;
        };
        // Under identification x the ICRC moves by the effect of (guess XOR x).
        match icrc::solve_ident(&b, computed ^ stored) {
            Some(d) => {
                ip.ident ^= d;
                true
            }
            None => false,
        }
    }

    /// [`DatagramRepr::fit_icrc`] for a whole RoCE datagram, `roce` (BTH to ICRC): its
    /// ICRC computed under these headers and fitted to the one it carries. Returns the
    /// ICRC under the headers as they are after (the stored one where it fits, else the
    /// one computed) and whether the identification was moved to fit; `None` where
    /// `roce` is too short to carry an ICRC.
    pub fn fit_icrc_of(
        &mut self,
        roce: &[u8],
        bases: &mut icrc::IdentBases,
    ) -> Option<(u32, bool)> {
        let body = roce.get(..roce.len().checked_sub(super::ICRC_LEN)?)?;
        let stored = icrc::stored(roce)?;
        let computed = self.icrc(body).ok()?;
        Some(if self.fit_icrc(body.len(), computed, stored, bases) {
            (stored, computed != stored)
        } else {
            (computed, false)
        })
    }
}

/// Bytes of IP and UDP that [`DatagramRepr::roce`] puts in front of the BTH for an
/// address of this version: 28 (IPv4) or 48 (IPv6).
pub fn roce_headers_len(ip: IpAddr) -> usize {
    match ip {
        IpAddr::V4(_) => ipv4::MIN_HEADER_LEN + udp::HEADER_LEN,
        IpAddr::V6(_) => ipv6::HEADER_LEN + udp::HEADER_LEN,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{self, cnp, ExtHeaders, FrameRepr};
    use std::net::{Ipv4Addr, Ipv6Addr};

    fn frame_of(d: DatagramRepr) -> FrameRepr {
        FrameRepr {
            eth: Some(EthernetRepr {
                dst: [2, 0, 0, 0, 0, 2],
                src: [2, 0, 0, 0, 0, 1],
                vlan: None,
                ethertype: d.ip.ethertype(),
            }),
            ip: d.ip,
            udp: d.udp,
            bth: cnp::bth(0x12, 0xffff),
            ext: ExtHeaders::default(),
        }
    }

    /// A RoCE datagram from 10.0.0.1 to 10.0.0.2 with IPv4 identification `id`.
    fn with_ident(id: u16) -> DatagramRepr {
        let mut d = DatagramRepr::roce(
            IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)),
            IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)),
            0xc001,
            0,
        )
        .unwrap();
        if let IpRepr::V4(ip) = &mut d.ip {
            ip.ident = id;
        }
        d
    }

    /// `fit_icrc` keeps a guess that fits, finds the identification where it does not
    /// (IPv4 only), and refuses a damaged packet.
    #[test]
    fn the_icrc_fits_the_identification_found() {
        let t: Vec<u8> = (0..1100u32).map(|i| (i * 13) as u8).collect();
        let mut bases = icrc::IdentBases::default();
        let stored = with_ident(0x0203).icrc(&t).unwrap();
        for guess in [0x0203, 0, 2, 0xffff] {
            let mut d = with_ident(guess);
            let computed = d.icrc(&t).unwrap();
            assert!(d.fit_icrc(t.len(), computed, stored, &mut bases));
            assert_eq!(d, with_ident(0x0203), "guess {guess}");
        }
        let mut damaged = t.clone();
        damaged[700] ^= 0x10;
        let mut d = with_ident(2);
        let computed = d.icrc(&damaged).unwrap();
        assert!(!d.fit_icrc(t.len(), computed, stored, &mut bases));
        assert_eq!(d, with_ident(2), "left as it was");
        assert_eq!(bases.len(), 1);
        let mut d = DatagramRepr::roce(
            IpAddr::V6(Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 1)),
            IpAddr::V6(Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 2)),
            0xc001,
            0,
        )
        .unwrap();
        let stored = d.icrc(&t).unwrap();
        let computed = d.icrc(&damaged).unwrap();
        assert!(!d.fit_icrc(t.len(), computed, stored, &mut bases));
        assert!(d.fit_icrc(t.len(), stored, stored, &mut bases));
    }

    #[test]
    fn a_whole_datagram_is_fitted_by_the_icrc_it_carries() {
        let body: Vec<u8> = (0..300u32).map(|i| (i * 7) as u8).collect();
        let icrc = with_ident(5).icrc(&body).unwrap();
        let mut roce = body.clone();
        roce.extend_from_slice(&icrc.to_le_bytes());
        let mut bases = icrc::IdentBases::default();
        let mut d = with_ident(5);
        assert_eq!(d.fit_icrc_of(&roce, &mut bases), Some((icrc, false)));
        let mut d2 = with_ident(9);
        assert_eq!(d2.fit_icrc_of(&roce, &mut bases), Some((icrc, true)));
        assert_eq!(d2, d, "moved to the identification it was sent with");
        roce[100] ^= 1;
        let mut d3 = with_ident(9);
        let (computed, moved) = d3.fit_icrc_of(&roce, &mut bases).unwrap();
        assert_ne!(computed, icrc);
        assert!(!moved);
        assert_eq!(d3, with_ident(9), "a damaged datagram leaves the guess");
        assert_eq!(d.fit_icrc_of(&roce[..3], &mut bases), None, "too short");
    }

    #[test]
    fn headers_and_icrc_match_a_whole_frame() {
        for (s, d) in [
            (
                IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)),
                IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)),
            ),
            (
                IpAddr::V6(Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 1)),
                IpAddr::V6(Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 2)),
            ),
        ] {
            let dg = DatagramRepr::roce(s, d, 0xc001, 0x02).unwrap();
            assert_eq!(dg.headers_len(), roce_headers_len(s));
            let r = frame_of(dg);
            let mut f = vec![0u8; r.buffer_len(0)];
            let n = r.emit(&[], &mut f).unwrap();
            let p = wire::parse(&f[..n]).unwrap();
            assert_eq!((p.ip().repr(), p.udp), (dg.ip, dg.udp));
            let at = dg.link_headers_len();
            let h = dg.header_bytes(n - at).unwrap();
            assert_eq!(h.as_slice(), &f[14..at]);
            assert_eq!(dg.icrc(&f[at..n - 4]).unwrap(), p.icrc);
            let mut link = vec![0u8; at];
            dg.emit_link([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2], &mut link, n - at)
                .unwrap();
            assert_eq!(link, f[..at]);
        }
    }

    #[test]
    fn mixed_versions_and_short_buffers_are_refused() {
        let v4 = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));
        let v6 = IpAddr::V6(Ipv6Addr::LOCALHOST);
        assert!(DatagramRepr::roce(v4, v6, 1, 0).is_none());
        let d = DatagramRepr::roce(v4, v4, 1, 0).unwrap();
        assert!(matches!(
            d.emit(&mut [0u8; 27], 16),
            Err(WireError::BufferTooSmall { need: 28, have: 27 })
        ));
    }
}
