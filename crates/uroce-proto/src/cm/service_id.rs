//! RDMA CM's service IDs and the IP addressing header it puts in a REQ's or SIDR_REQ's
//! private data (IBTA Vol. 1 Annex A11, "RDMA IP CM Service").
//!
//! An RDMA CM port space and a port make the service ID `0x0000_0000_01PP_PPPP`: the
//! port space (`0x0106` TCP, `0x0111` UDP, `0x013F` IB) in bits 31-16 and the port in
//! bits 15-0, as the kernel's `rdma_get_service_id` builds it (`RDMA_IB_IP_PS_*` OR-ed
//! with the port). The IB port space (AF_IB) carries its own 64-bit service ID and no
//! IP header.

use std::net::IpAddr;

use crate::wire::cm_repr::IpCmHeaderRepr;
use crate::wire::WireError;

/// An RDMA CM port space (the kernel's `enum rdma_ucm_port_space`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PortSpace {
    /// RDMA_PS_TCP (RC and UC connections; rping, perftest -R).
    Tcp,
    /// RDMA_PS_UDP (UD, resolved with SIDR; udaddy).
    Udp,
    /// RDMA_PS_IPOIB.
    IpoIb,
    /// RDMA_PS_IB (AF_IB: the 16-bit "port" is the low bits of a native service ID).
    Ib,
}

impl PortSpace {
    /// The port space's 16-bit code in the service ID.
    pub const fn code(self) -> u16 {
        match self {
            Self::Tcp => 0x0106,
            Self::Udp => 0x0111,
            Self::IpoIb => 0x0002,
            Self::Ib => 0x013f,
        }
    }

    /// The port space with this code.
    pub fn from_code(code: u16) -> Option<Self> {
        Some(match code {
            0x0106 => Self::Tcp,
            0x0111 => Self::Udp,
            0x0002 => Self::IpoIb,
            0x013f => Self::Ib,
            _ => return None,
        })
    }
}

/// The service ID of `port` in port space `ps` (`rdma_get_service_id`).
pub const fn service_id(ps: PortSpace, port: u16) -> u64 {
    ((ps.code() as u64) << 16) | port as u64
}

/// The port space and port of an RDMA CM service ID, `None` for any other service ID.
pub fn port_of(service_id: u64) -> Option<(PortSpace, u16)> {
    if service_id >> 32 != 0 {
        return None;
    }
    let ps = PortSpace::from_code((service_id >> 16) as u16)?;
    Some((ps, service_id as u16))
}

/// Length of the RDMA CM IP addressing header.
pub const IP_HEADER_LEN: usize = IpCmHeaderRepr::LEN;

/// Private data a REQ carries (IBTA §12.6.5: 92 bytes).
pub const REQ_PRIVATE_DATA: usize = 92;
/// Private data an MRA carries.
pub const MRA_PRIVATE_DATA: usize = 222;
/// Private data a REJ carries.
pub const REJ_PRIVATE_DATA: usize = 148;
/// Private data a REP carries.
pub const REP_PRIVATE_DATA: usize = 196;
/// Private data an RTU or DREP carries.
pub const RTU_PRIVATE_DATA: usize = 224;
/// Private data a DREQ carries.
pub const DREQ_PRIVATE_DATA: usize = 220;
/// Private data a SIDR_REQ carries.
pub const SIDR_REQ_PRIVATE_DATA: usize = 216;
/// Private data a SIDR_REP carries.
pub const SIDR_REP_PRIVATE_DATA: usize = 136;

/// The private data of an RDMA CM REQ or SIDR_REQ over IP: the 36-byte addressing header
/// (source port and address, destination address) followed by the application's own
/// (at most 56 bytes for a REQ, 180 for a SIDR_REQ: what is left of the message's room).
pub fn ip_private_data(
    src: IpAddr,
    src_port: u16,
    dst: IpAddr,
    user: &[u8],
) -> Result<Vec<u8>, WireError> {
    let mut v = vec![0u8; IP_HEADER_LEN + user.len()];
    IpCmHeaderRepr { src_port, src, dst }.emit(&mut v)?;
    v[IP_HEADER_LEN..].copy_from_slice(user);
    Ok(v)
}

/// The flow label RDMA CM gives a RoCEv2 path between two ports (the primary path's flow
/// label in the REQ, 20 bits): the source port times 31 plus the destination port, as
/// the kernel's `cma_get_roce_udp_flow_label` computes it for `rdma_resolve_route` (for
/// IPv6 it takes the source address's own flow label instead when that is not zero).
pub const fn flow_label(src_port: u16, dst_port: u16) -> u32 {
    (src_port as u32 * 31 + dst_port as u32) & 0xf_ffff
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn service_ids_of_the_port_spaces() {
        // rping's default port 7174 in the TCP port space, as rdma_rxe's REQ carried it.
        assert_eq!(service_id(PortSpace::Tcp, 7174), 0x0106_1c06);
        assert_eq!(service_id(PortSpace::Udp, 7174), 0x0111_1c06);
        assert_eq!(service_id(PortSpace::Ib, 1), 0x013f_0001);
        assert_eq!(port_of(0x0106_4853), Some((PortSpace::Tcp, 18515)));
        assert_eq!(port_of(0x0111_1c06), Some((PortSpace::Udp, 7174)));
        assert_eq!(port_of(0x0107_0001), None);
        assert_eq!(port_of(0x1_0106_0001), None);
        for ps in [
            PortSpace::Tcp,
            PortSpace::Udp,
            PortSpace::IpoIb,
            PortSpace::Ib,
        ] {
            assert_eq!(PortSpace::from_code(ps.code()), Some(ps));
            assert_eq!(port_of(service_id(ps, 9)), Some((ps, 9)));
        }
    }

    #[test]
    fn flow_label_hashes_the_ports_as_rdma_cm() {
        // rdma_rxe's REQ in crates/uroce/tests/data/rdma_cm.pcap: source port 59576 to rping's 7174.
        let file = include_bytes!("../../../uroce/tests/data/rdma_cm.pcap");
        let f = crate::pcap::Reader::new(file)
            .unwrap()
            .next()
            .unwrap()
            .unwrap();
        let mad = crate::wire::parse(f.data).unwrap().payload;
        let h = crate::wire::mad::Header::new_checked(mad).unwrap();
        let attr = crate::wire::mad::MadRepr::parse(&h).attr_id;
        let Ok(Some(crate::wire::cm::Message::Req(req))) =
            crate::wire::cm::Message::parse(attr, h.data())
        else {
            panic!("frame 1 is rxe's REQ")
        };
        let ip = crate::wire::cm::IpCmHeader::new_checked(req.private_data()).unwrap();
        assert_eq!((ip.src_port(), req.service_id() as u16), (59576, 7174));
        assert_eq!(flow_label(59576, 7174), req.primary_flow_label());
        assert_eq!(req.primary_flow_label(), 805_454);
        // rdma_rxe's REQ to uroce (the interop suite): 42806 to 7174.
        assert_eq!(flow_label(42806, 7174), 285_584);
        assert_eq!(flow_label(u16::MAX, u16::MAX), (65535 * 32) & 0xf_ffff);
    }

    #[test]
    fn ip_private_data_is_the_header_then_the_user_bytes() {
        let pd = ip_private_data(
            "10.78.0.12".parse().unwrap(),
            59576,
            "10.78.0.11".parse().unwrap(),
            b"hi",
        )
        .unwrap();
        assert_eq!(pd.len(), 38);
        assert_eq!(&pd[..4], &[0, 0x40, 0xe8, 0xb8]);
        assert_eq!(&pd[16..20], &[10, 78, 0, 12]);
        assert_eq!(&pd[32..36], &[10, 78, 0, 11]);
        assert_eq!(&pd[36..], b"hi");
        let h = crate::wire::cm::IpCmHeader::new_checked(&pd[..]).unwrap();
        assert_eq!(h.src_port(), 59576);
        assert!(
            ip_private_data("10.0.0.1".parse().unwrap(), 1, "::1".parse().unwrap(), &[]).is_err()
        );
    }
}
