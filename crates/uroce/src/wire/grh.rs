//! Global Route Header (IBTA §8.3), 40 bytes, laid out like an IPv6 header: IPVer (4),
//! TClass (8), FlowLabel (20), PayLen (16), NxtHdr (8), HopLmt (8), SGID (16), DGID (16).
//!
//! RoCEv2 puts no GRH on the wire (the IP header takes its place), but a UD receive buffer
//! still starts with 40 bytes of GRH, as ibverbs applications expect: for IPv6 it holds the
//! IPv6 header; for IPv4 the first 20 bytes are zero and the last 20 hold the IPv4 header
//! ([`ud_receive_grh`]). GIDs of IPv4 peers are IPv4-mapped IPv6 addresses (`::ffff:a.b.c.d`).

use std::net::{Ipv4Addr, Ipv6Addr};

use super::{be16, check_len, put16, reth::need, IpRepr, WireError};

/// Length of the GRH.
pub const HEADER_LEN: usize = 40;

/// Plain representation of a GRH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct GrhRepr {
    /// Traffic class.
    pub traffic_class: u8,
    /// Flow label (20 bits).
    pub flow_label: u32,
    /// Payload length.
    pub payload_len: u16,
    /// Next header (0x1b on InfiniBand, 17 for RoCEv2 over IPv6).
    pub next_header: u8,
    /// Hop limit.
    pub hop_limit: u8,
    /// Source GID.
    pub sgid: Ipv6Addr,
    /// Destination GID.
    pub dgid: Ipv6Addr,
}

impl GrhRepr {
    /// Parses the first 40 bytes of `b`; the version nibble must be 6.
    pub fn parse(b: &[u8]) -> Result<Self, WireError> {
        check_len("GRH", b, HEADER_LEN, 0)?;
        let w0 = super::be32(b, 0);
        if w0 >> 28 != 6 {
            return Err(WireError::BadIpVersion {
                version: (w0 >> 28) as u8,
                expected: 6,
                offset: 0,
            });
        }
        let mut s = [0u8; 16];
        let mut d = [0u8; 16];
        s.copy_from_slice(&b[8..24]);
        d.copy_from_slice(&b[24..40]);
        Ok(Self {
            traffic_class: (w0 >> 20) as u8,
            flow_label: w0 & 0x000f_ffff,
            payload_len: be16(b, 4),
            next_header: b[6],
            hop_limit: b[7],
            sgid: s.into(),
            dgid: d.into(),
        })
    }
    /// Bytes the header takes.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }
    /// Writes the header at the start of `b`.
    pub fn emit(&self, b: &mut [u8]) -> Result<(), WireError> {
        need(b, HEADER_LEN)?;
        if self.flow_label > 0x000f_ffff {
            return Err(WireError::InvalidRepr("GRH flow label wider than 20 bits"));
        }
        let w0 = (6u32 << 28) | (u32::from(self.traffic_class) << 20) | self.flow_label;
        b[..4].copy_from_slice(&w0.to_be_bytes());
        put16(b, 4, self.payload_len);
        b[6] = self.next_header;
        b[7] = self.hop_limit;
        b[8..24].copy_from_slice(&self.sgid.octets());
        b[24..40].copy_from_slice(&self.dgid.octets());
        Ok(())
    }
}

/// The RoCEv2 GID of an IPv4 address: the IPv4-mapped IPv6 address `::ffff:a.b.c.d`.
pub fn gid_from_ipv4(a: Ipv4Addr) -> Ipv6Addr {
    a.to_ipv6_mapped()
}

/// Fills the 40-byte GRH area of a UD receive buffer from the received IP header, as
/// ibverbs does for RoCEv2: IPv6 header verbatim, or 20 zero bytes then the IPv4 header.
/// `ip_header` is the header as it arrived (its first 20 or 40 bytes are used).
pub fn ud_receive_grh(ip: &IpRepr, ip_header: &[u8], out: &mut [u8]) -> Result<(), WireError> {
    need(out, HEADER_LEN)?;
    match ip {
        IpRepr::V4(_) => {
            check_len("IPv4 header", ip_header, 20, 0)?;
            out[..20].fill(0);
            out[20..40].copy_from_slice(&ip_header[..20]);
        }
        IpRepr::V6(_) => {
            check_len("IPv6 header", ip_header, 40, 0)?;
            out[..40].copy_from_slice(&ip_header[..40]);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_mapped_gid() {
        let g = GrhRepr {
            traffic_class: 0x10,
            flow_label: 0x12345,
            payload_len: 100,
            next_header: 0x1b,
            hop_limit: 1,
            sgid: gid_from_ipv4(Ipv4Addr::new(10, 77, 0, 12)),
            dgid: "fe80::1".parse().unwrap(),
        };
        assert_eq!(g.sgid.to_string(), "::ffff:10.77.0.12");
        let mut b = [0u8; 40];
        g.emit(&mut b).unwrap();
        assert_eq!(GrhRepr::parse(&b).unwrap(), g);
        assert_eq!(
            &b[8..24],
            &[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 77, 0, 12]
        );
    }
}
