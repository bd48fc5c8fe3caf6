//! The emit side of the connection manager's messages (IBTA Vol. 1 §12.6): a plain
//! `Repr` per message with `parse` (from the checked views of [`super::cm`]) and `emit`
//! (into the 232 bytes of CM data after the MAD header), and [`CmMad`], a whole 256-byte
//! MAD with its header. Layouts are the ones drawn in [`super::cm`]; reserved bits are
//! written as zero (IBTA §13.4.1: "reserved fields shall be set to zero by the sender"),
//! so a message that had them zero re-emits byte for byte (the tests check that against
//! the MADs rdma_rxe's CM sent in `crates/uroce/tests/data/rdma_cm.pcap`).
//!
//! A `Repr` borrows its private data. `emit` writes the whole CM data area: the fixed
//! fields, the private data, and zeros up to the end, so a message never carries stale
//! bytes; private data longer than the message has room for is
//! [`WireError::InvalidRepr`], as is a field wider than its bits.

#![forbid(unsafe_code)]

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use super::cm::{self, CmAttr, DATA_LEN};
use super::mad::{self, MadRepr, CLASS_CM, HEADER_LEN, MAD_LEN};
use super::{need, put16, put24, put32, put64, WireError};

/// CM class version (IBTA §12.6.1: the CM's MADs carry class version 2).
pub const CM_CLASS_VERSION: u8 = 2;
/// The MAD method every CM message uses: Send (IBTA §12.6.1).
pub const METHOD_SEND: u8 = 0x03;

fn bits(v: u8, width: u32, what: &'static str) -> Result<u8, WireError> {
    if u32::from(v) >> width != 0 {
        Err(WireError::InvalidRepr(what))
    } else {
        Ok(v)
    }
}

fn bits24(v: u32, what: &'static str) -> Result<u32, WireError> {
    if v >> 24 != 0 {
        Err(WireError::InvalidRepr(what))
    } else {
        Ok(v)
    }
}

/// Writes `pd` at `at` and zeroes the rest of the CM data; `Err` when it does not fit.
fn put_private(b: &mut [u8], at: usize, pd: &[u8]) -> Result<(), WireError> {
    if pd.len() > DATA_LEN - at {
        return Err(WireError::InvalidRepr(
            "private data longer than the message has room for",
        ));
    }
    b[at..at + pd.len()].copy_from_slice(pd);
    b[at + pd.len()..DATA_LEN].fill(0);
    Ok(())
}

fn put_gid(b: &mut [u8], at: usize, g: Ipv6Addr) {
    b[at..at + 16].copy_from_slice(&g.octets());
}

/// The GID of an IP address as RoCEv2 writes it (IPv4: the IPv4-mapped IPv6 address).
pub fn gid_of(ip: IpAddr) -> Ipv6Addr {
    match ip {
        IpAddr::V4(a) => a.to_ipv6_mapped(),
        IpAddr::V6(a) => a,
    }
}

/// The IP address a RoCEv2 GID stands for (an IPv4-mapped GID is the IPv4 address).
pub fn ip_of_gid(g: Ipv6Addr) -> IpAddr {
    match g.to_ipv4_mapped() {
        Some(a) => IpAddr::V4(a),
        None => IpAddr::V6(g),
    }
}

/// One path of a REQ (primary at CM data offset 52, alternate at 96; IBTA §12.6.5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PathRepr {
    /// The sender's LID (rdma_cm over RoCE: 0xffff, the permissive LID).
    pub local_lid: u16,
    /// The receiver's LID.
    pub remote_lid: u16,
    /// The sender's GID.
    pub local_gid: Ipv6Addr,
    /// The receiver's GID.
    pub remote_gid: Ipv6Addr,
    /// Flow label (20 bits).
    pub flow_label: u32,
    /// Packet rate code (6 bits).
    pub packet_rate: u8,
    /// Traffic class.
    pub traffic_class: u8,
    /// Hop limit.
    pub hop_limit: u8,
    /// Service level (4 bits).
    pub sl: u8,
    /// The receiver is on the sender's subnet.
    pub subnet_local: bool,
    /// Local ACK timeout (5 bits; 4.096 µs × 2^value).
    pub local_ack_timeout: u8,
}

impl Default for PathRepr {
    fn default() -> Self {
        Self {
            local_lid: 0,
            remote_lid: 0,
            local_gid: Ipv6Addr::UNSPECIFIED,
            remote_gid: Ipv6Addr::UNSPECIFIED,
            flow_label: 0,
            packet_rate: 0,
            traffic_class: 0,
            hop_limit: 0,
            sl: 0,
            subnet_local: false,
            local_ack_timeout: 0,
        }
    }
}

impl PathRepr {
    fn parse(b: &[u8], at: usize) -> Self {
        let mut l = [0u8; 16];
        let mut r = [0u8; 16];
        l.copy_from_slice(&b[at + 4..at + 20]);
        r.copy_from_slice(&b[at + 20..at + 36]);
        Self {
            local_lid: super::be16(b, at),
            remote_lid: super::be16(b, at + 2),
            local_gid: Ipv6Addr::from(l),
            remote_gid: Ipv6Addr::from(r),
            flow_label: super::be32(b, at + 36) >> 12,
            packet_rate: b[at + 39] & 0x3f,
            traffic_class: b[at + 40],
            hop_limit: b[at + 41],
            sl: b[at + 42] >> 4,
            subnet_local: b[at + 42] & 0x08 != 0,
            local_ack_timeout: b[at + 43] >> 3,
        }
    }

    fn emit(&self, b: &mut [u8], at: usize) -> Result<(), WireError> {
        if self.flow_label >> 20 != 0 {
            return Err(WireError::InvalidRepr("flow label wider than 20 bits"));
        }
        put16(b, at, self.local_lid);
        put16(b, at + 2, self.remote_lid);
        put_gid(b, at + 4, self.local_gid);
        put_gid(b, at + 20, self.remote_gid);
        put32(
            b,
            at + 36,
            (self.flow_label << 12)
                | u32::from(bits(self.packet_rate, 6, "packet rate wider than 6 bits")?),
        );
        b[at + 40] = self.traffic_class;
        b[at + 41] = self.hop_limit;
        b[at + 42] =
            (bits(self.sl, 4, "SL wider than 4 bits")? << 4) | (u8::from(self.subnet_local) << 3);
        b[at + 43] = bits(
            self.local_ack_timeout,
            5,
            "local ACK timeout wider than 5 bits",
        )? << 3;
        Ok(())
    }
}

/// ConnectRequest (IBTA §12.6.5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ReqRepr<'a> {
    /// The sender's communication ID.
    pub local_comm_id: u32,
    /// The service asked for.
    pub service_id: u64,
    /// The sender's CA GUID.
    pub local_ca_guid: u64,
    /// The sender's Q_Key (RD only).
    pub local_qkey: u32,
    /// The sender's QP number (24 bits).
    pub local_qpn: u32,
    /// RDMA READ / atomic requests the sender accepts at once.
    pub responder_resources: u8,
    /// The sender's EE context (RD only).
    pub local_eecn: u32,
    /// RDMA READ / atomic requests the sender keeps outstanding.
    pub initiator_depth: u8,
    /// The remote EE context (RD only).
    pub remote_eecn: u32,
    /// How long the receiver may take to answer (5 bits; 4.096 µs × 2^value).
    pub remote_cm_response_timeout: u8,
    /// Transport service type (2 bits: 0 RC, 1 UC, 2 RD, 3 extended).
    pub transport_service_type: u8,
    /// End-to-end flow control.
    pub end_to_end_flow_control: bool,
    /// The sender's starting PSN (24 bits).
    pub starting_psn: u32,
    /// How long the sender takes to answer (5 bits).
    pub local_cm_response_timeout: u8,
    /// Transport retry count (3 bits).
    pub retry_count: u8,
    /// Partition key.
    pub pkey: u16,
    /// Path MTU code (4 bits; [`cm::mtu_bytes`]).
    pub path_mtu: u8,
    /// RDC exists (RD only).
    pub rdc_exists: bool,
    /// RNR retry count (3 bits; 7 without limit).
    pub rnr_retry_count: u8,
    /// How often the sender retries a CM message (4 bits).
    pub max_cm_retries: u8,
    /// The sender uses an SRQ.
    pub srq: bool,
    /// Extended transport type (3 bits).
    pub extended_transport_type: u8,
    /// The primary path.
    pub primary: PathRepr,
    /// The alternate path (all zero when there is none).
    pub alternate: PathRepr,
    /// Private data (at most 92 bytes).
    pub private_data: &'a [u8],
}

impl<'a> ReqRepr<'a> {
    /// Reads a checked view.
    pub fn parse(m: &cm::Req<&'a [u8]>) -> Self {
        let b = m.bytes();
        Self {
            local_comm_id: m.local_comm_id(),
            service_id: m.service_id(),
            local_ca_guid: m.local_ca_guid(),
            local_qkey: m.local_qkey(),
            local_qpn: m.local_qpn(),
            responder_resources: m.responder_resources(),
            local_eecn: m.local_eecn(),
            initiator_depth: m.initiator_depth(),
            remote_eecn: m.remote_eecn(),
            remote_cm_response_timeout: m.remote_cm_response_timeout(),
            transport_service_type: m.transport_service_type(),
            end_to_end_flow_control: m.end_to_end_flow_control(),
            starting_psn: m.starting_psn(),
            local_cm_response_timeout: m.local_cm_response_timeout(),
            retry_count: m.retry_count(),
            pkey: m.pkey(),
            path_mtu: m.path_mtu(),
            rdc_exists: m.rdc_exists(),
            rnr_retry_count: m.rnr_retry_count(),
            max_cm_retries: m.max_cm_retries(),
            srq: m.srq(),
            extended_transport_type: m.extended_transport_type(),
            primary: PathRepr::parse(b, 52),
            alternate: PathRepr::parse(b, 96),
            private_data: m.private_data_ref(),
        }
    }

    /// Writes the CM data (232 bytes) into `b`.
    pub fn emit(&self, b: &mut [u8]) -> Result<(), WireError> {
        need(b, DATA_LEN)?;
        put_private(b, 140, self.private_data)?;
        put32(b, 0, self.local_comm_id);
        put32(b, 4, 0);
        put64(b, 8, self.service_id);
        put64(b, 16, self.local_ca_guid);
        put32(b, 24, 0);
        put32(b, 28, self.local_qkey);
        put24(b, 32, bits24(self.local_qpn, "QPN wider than 24 bits")?);
        b[35] = self.responder_resources;
        put24(b, 36, bits24(self.local_eecn, "EECN wider than 24 bits")?);
        b[39] = self.initiator_depth;
        put24(b, 40, bits24(self.remote_eecn, "EECN wider than 24 bits")?);
        b[43] = (bits(
            self.remote_cm_response_timeout,
            5,
            "CM response timeout wider than 5 bits",
        )? << 3)
            | (bits(
                self.transport_service_type,
                2,
                "transport service type wider than 2 bits",
            )? << 1)
            | u8::from(self.end_to_end_flow_control);
        put24(b, 44, bits24(self.starting_psn, "PSN wider than 24 bits")?);
        b[47] = (bits(
            self.local_cm_response_timeout,
            5,
            "CM response timeout wider than 5 bits",
        )? << 3)
            | bits(self.retry_count, 3, "retry count wider than 3 bits")?;
        put16(b, 48, self.pkey);
        b[50] = (bits(self.path_mtu, 4, "path MTU wider than 4 bits")? << 4)
            | (u8::from(self.rdc_exists) << 3)
            | bits(self.rnr_retry_count, 3, "RNR retry count wider than 3 bits")?;
        b[51] = (bits(self.max_cm_retries, 4, "max CM retries wider than 4 bits")? << 4)
            | (u8::from(self.srq) << 3)
            | bits(
                self.extended_transport_type,
                3,
                "extended transport type wider than 3 bits",
            )?;
        self.primary.emit(b, 52)?;
        self.alternate.emit(b, 96)?;
        Ok(())
    }
}

/// MsgRcptAck (IBTA §12.6.6).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MraRepr<'a> {
    /// The sender's communication ID.
    pub local_comm_id: u32,
    /// The receiver's communication ID.
    pub remote_comm_id: u32,
    /// The message acknowledged (2 bits: 0 REQ, 1 REP, 2 LAP).
    pub message_mraed: u8,
    /// How long the answer may take (5 bits).
    pub service_timeout: u8,
    /// Private data (at most 222 bytes).
    pub private_data: &'a [u8],
}

impl<'a> MraRepr<'a> {
    /// Reads a checked view.
    pub fn parse(m: &cm::Mra<&'a [u8]>) -> Self {
        Self {
            local_comm_id: m.local_comm_id(),
            remote_comm_id: m.remote_comm_id(),
            message_mraed: m.message_mraed(),
            service_timeout: m.service_timeout(),
            private_data: m.private_data_ref(),
        }
    }
    /// Writes the CM data (232 bytes) into `b`.
    pub fn emit(&self, b: &mut [u8]) -> Result<(), WireError> {
        need(b, DATA_LEN)?;
        put_private(b, 10, self.private_data)?;
        put32(b, 0, self.local_comm_id);
        put32(b, 4, self.remote_comm_id);
        b[8] = bits(self.message_mraed, 2, "message MRAed wider than 2 bits")? << 6;
        b[9] = bits(self.service_timeout, 5, "service timeout wider than 5 bits")? << 3;
        Ok(())
    }
}

/// ConnectReject (IBTA §12.6.7).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RejRepr<'a> {
    /// The sender's communication ID (0 when it made none, as for a REQ nobody listens for).
    pub local_comm_id: u32,
    /// The receiver's communication ID.
    pub remote_comm_id: u32,
    /// The message rejected (2 bits: 0 REQ, 1 REP, 2 other).
    pub message_rejected: u8,
    /// The reason ([`cm::reject_reason_name`]).
    pub reason: u16,
    /// Additional reject information (at most 72 bytes; its length goes in 7 bits).
    pub reject_info: &'a [u8],
    /// Private data (at most 148 bytes).
    pub private_data: &'a [u8],
}

impl<'a> RejRepr<'a> {
    /// Reads a checked view.
    pub fn parse(m: &cm::Rej<&'a [u8]>) -> Self {
        Self {
            local_comm_id: m.local_comm_id(),
            remote_comm_id: m.remote_comm_id(),
            message_rejected: m.message_rejected(),
            reason: m.reason(),
            reject_info: {
                let n = usize::from(m.reject_info_len()).min(72);
                &m.bytes()[12..12 + n]
            },
            private_data: m.private_data_ref(),
        }
    }
    /// Writes the CM data (232 bytes) into `b`.
    pub fn emit(&self, b: &mut [u8]) -> Result<(), WireError> {
        need(b, DATA_LEN)?;
        if self.reject_info.len() > 72 {
            return Err(WireError::InvalidRepr(
                "reject information longer than 72 bytes",
            ));
        }
        put_private(b, 84, self.private_data)?;
        put32(b, 0, self.local_comm_id);
        put32(b, 4, self.remote_comm_id);
        b[8] = bits(
            self.message_rejected,
            2,
            "message rejected wider than 2 bits",
        )? << 6;
        b[9] = (self.reject_info.len() as u8) << 1;
        put16(b, 10, self.reason);
        b[12..84].fill(0);
        b[12..12 + self.reject_info.len()].copy_from_slice(self.reject_info);
        Ok(())
    }
}

/// ConnectReply (IBTA §12.6.8).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RepRepr<'a> {
    /// The sender's communication ID.
    pub local_comm_id: u32,
    /// The receiver's communication ID (the REQ's).
    pub remote_comm_id: u32,
    /// The sender's Q_Key (RD only).
    pub local_qkey: u32,
    /// The sender's QP number (24 bits).
    pub local_qpn: u32,
    /// The sender's EE context (RD only).
    pub local_eecn: u32,
    /// The sender's starting PSN (24 bits).
    pub starting_psn: u32,
    /// RDMA READ / atomic requests the sender accepts at once.
    pub responder_resources: u8,
    /// RDMA READ / atomic requests the sender keeps outstanding.
    pub initiator_depth: u8,
    /// Target ACK delay (5 bits).
    pub target_ack_delay: u8,
    /// Failover accepted (2 bits).
    pub failover_accepted: u8,
    /// End-to-end flow control.
    pub end_to_end_flow_control: bool,
    /// RNR retries the REQ's sender shall use (3 bits).
    pub rnr_retry_count: u8,
    /// The sender uses an SRQ.
    pub srq: bool,
    /// The sender's CA GUID.
    pub local_ca_guid: u64,
    /// Private data (at most 196 bytes).
    pub private_data: &'a [u8],
}

impl<'a> RepRepr<'a> {
    /// Reads a checked view.
    pub fn parse(m: &cm::Rep<&'a [u8]>) -> Self {
        Self {
            local_comm_id: m.local_comm_id(),
            remote_comm_id: m.remote_comm_id(),
            local_qkey: m.local_qkey(),
            local_qpn: m.local_qpn(),
            local_eecn: m.local_eecn(),
            starting_psn: m.starting_psn(),
            responder_resources: m.responder_resources(),
            initiator_depth: m.initiator_depth(),
            target_ack_delay: m.target_ack_delay(),
            failover_accepted: m.failover_accepted(),
            end_to_end_flow_control: m.end_to_end_flow_control(),
            rnr_retry_count: m.rnr_retry_count(),
            srq: m.srq(),
            local_ca_guid: m.local_ca_guid(),
            private_data: m.private_data_ref(),
        }
    }
    /// Writes the CM data (232 bytes) into `b`.
    pub fn emit(&self, b: &mut [u8]) -> Result<(), WireError> {
        need(b, DATA_LEN)?;
        put_private(b, 36, self.private_data)?;
        put32(b, 0, self.local_comm_id);
        put32(b, 4, self.remote_comm_id);
        put32(b, 8, self.local_qkey);
        // The 24-bit fields sit in the top three bytes of their word.
        put32(
            b,
            12,
            bits24(self.local_qpn, "QPN wider than 24 bits")? << 8,
        );
        put32(
            b,
            16,
            bits24(self.local_eecn, "EECN wider than 24 bits")? << 8,
        );
        put32(
            b,
            20,
            bits24(self.starting_psn, "PSN wider than 24 bits")? << 8,
        );
        b[24] = self.responder_resources;
        b[25] = self.initiator_depth;
        b[26] = (bits(
            self.target_ack_delay,
            5,
            "target ACK delay wider than 5 bits",
        )? << 3)
            | (bits(
                self.failover_accepted,
                2,
                "failover accepted wider than 2 bits",
            )? << 1)
            | u8::from(self.end_to_end_flow_control);
        b[27] = (bits(self.rnr_retry_count, 3, "RNR retry count wider than 3 bits")? << 5)
            | (u8::from(self.srq) << 4);
        put64(b, 28, self.local_ca_guid);
        Ok(())
    }
}

/// ReadyToUse (IBTA §12.6.9) and DisconnectReply (§12.6.11): two communication IDs and
/// private data (at most 224 bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct IdsRepr<'a> {
    /// The sender's communication ID.
    pub local_comm_id: u32,
    /// The receiver's communication ID.
    pub remote_comm_id: u32,
    /// Private data.
    pub private_data: &'a [u8],
}

impl<'a> IdsRepr<'a> {
    /// Reads an RTU.
    pub fn parse_rtu(m: &cm::Rtu<&'a [u8]>) -> Self {
        Self {
            local_comm_id: m.local_comm_id(),
            remote_comm_id: m.remote_comm_id(),
            private_data: m.private_data_ref(),
        }
    }
    /// Reads a DREP.
    pub fn parse_drep(m: &cm::Drep<&'a [u8]>) -> Self {
        Self {
            local_comm_id: m.local_comm_id(),
            remote_comm_id: m.remote_comm_id(),
            private_data: m.private_data_ref(),
        }
    }
    /// Writes the CM data (232 bytes) into `b`.
    pub fn emit(&self, b: &mut [u8]) -> Result<(), WireError> {
        need(b, DATA_LEN)?;
        put_private(b, 8, self.private_data)?;
        put32(b, 0, self.local_comm_id);
        put32(b, 4, self.remote_comm_id);
        Ok(())
    }
}

/// DisconnectRequest (IBTA §12.6.10).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DreqRepr<'a> {
    /// The sender's communication ID.
    pub local_comm_id: u32,
    /// The receiver's communication ID.
    pub remote_comm_id: u32,
    /// The receiver's QP number (24 bits).
    pub remote_qpn: u32,
    /// Private data (at most 220 bytes).
    pub private_data: &'a [u8],
}

impl<'a> DreqRepr<'a> {
    /// Reads a checked view.
    pub fn parse(m: &cm::Dreq<&'a [u8]>) -> Self {
        Self {
            local_comm_id: m.local_comm_id(),
            remote_comm_id: m.remote_comm_id(),
            remote_qpn: m.remote_qpn(),
            private_data: m.private_data_ref(),
        }
    }
    /// Writes the CM data (232 bytes) into `b`.
    pub fn emit(&self, b: &mut [u8]) -> Result<(), WireError> {
        need(b, DATA_LEN)?;
        put_private(b, 12, self.private_data)?;
        put32(b, 0, self.local_comm_id);
        put32(b, 4, self.remote_comm_id);
        put32(
            b,
            8,
            bits24(self.remote_qpn, "QPN wider than 24 bits")? << 8,
        );
        Ok(())
    }
}

/// ServiceIDResReq (IBTA §12.11.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SidrReqRepr<'a> {
    /// Request ID.
    pub request_id: u32,
    /// Partition key.
    pub pkey: u16,
    /// The service to resolve.
    pub service_id: u64,
    /// Private data (at most 216 bytes).
    pub private_data: &'a [u8],
}

impl<'a> SidrReqRepr<'a> {
    /// Reads a checked view.
    pub fn parse(m: &cm::SidrReq<&'a [u8]>) -> Self {
        Self {
            request_id: m.request_id(),
            pkey: m.pkey(),
            service_id: m.service_id(),
            private_data: m.private_data_ref(),
        }
    }
    /// Writes the CM data (232 bytes) into `b`.
    pub fn emit(&self, b: &mut [u8]) -> Result<(), WireError> {
        need(b, DATA_LEN)?;
        put_private(b, 16, self.private_data)?;
        put32(b, 0, self.request_id);
        put16(b, 4, self.pkey);
        put16(b, 6, 0);
        put64(b, 8, self.service_id);
        Ok(())
    }
}

/// ServiceIDResReqResp (IBTA §12.11.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SidrRepRepr<'a> {
    /// Request ID (the SIDR_REQ's).
    pub request_id: u32,
    /// Status ([`cm::sidr_status_name`]).
    pub status: u8,
    /// The UD QP serving the service (24 bits).
    pub qpn: u32,
    /// The service ID resolved.
    pub service_id: u64,
    /// The Q_Key to send with.
    pub qkey: u32,
    /// Additional information (at most 72 bytes).
    pub additional_info: &'a [u8],
    /// Private data (at most 136 bytes).
    pub private_data: &'a [u8],
}

impl<'a> SidrRepRepr<'a> {
    /// Reads a checked view.
    pub fn parse(m: &cm::SidrRep<&'a [u8]>) -> Self {
        let b = m.bytes();
        let n = usize::from(m.additional_info_len()).min(72);
        Self {
            request_id: m.request_id(),
            status: m.status(),
            qpn: m.qpn(),
            service_id: m.service_id(),
            qkey: m.qkey(),
            additional_info: &b[24..24 + n],
            private_data: m.private_data_ref(),
        }
    }
    /// Writes the CM data (232 bytes) into `b`.
    pub fn emit(&self, b: &mut [u8]) -> Result<(), WireError> {
        need(b, DATA_LEN)?;
        if self.additional_info.len() > 72 {
            return Err(WireError::InvalidRepr(
                "additional information longer than 72 bytes",
            ));
        }
        put_private(b, 96, self.private_data)?;
        put32(b, 0, self.request_id);
        b[4] = self.status;
        b[5] = self.additional_info.len() as u8;
        put16(b, 6, 0);
        put32(b, 8, bits24(self.qpn, "QPN wider than 24 bits")? << 8);
        put64(b, 12, self.service_id);
        put32(b, 20, self.qkey);
        b[24..96].fill(0);
        b[24..24 + self.additional_info.len()].copy_from_slice(self.additional_info);
        Ok(())
    }
}

/// The RDMA CM IP addressing header (Linux `struct cma_hdr`, IBTA Annex A11), 36 bytes
/// at the start of a REQ's or SIDR_REQ's private data; layout in [`cm::IpCmHeader`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct IpCmHeaderRepr {
    /// The sender's port.
    pub src_port: u16,
    /// The sender's address.
    pub src: IpAddr,
    /// The address the sender connects to (its family must be the source's).
    pub dst: IpAddr,
}

impl IpCmHeaderRepr {
    /// Length of the header.
    pub const LEN: usize = 36;

    /// Reads a view; `None` for a CM version other than 0 or an IP version other than
    /// 4 or 6 (what the kernel's `cma_check_req_qp_type` / `cma_save_ip_info` refuse).
    pub fn parse<T: AsRef<[u8]>>(h: &cm::IpCmHeader<T>) -> Option<Self> {
        if h.cma_version() != 0 {
            return None;
        }
        Some(Self {
            src_port: h.src_port(),
            src: h.src_addr()?,
            dst: h.dst_addr()?,
        })
    }

    /// Writes the 36 bytes at the start of `b`.
    pub fn emit(&self, b: &mut [u8]) -> Result<(), WireError> {
        need(b, Self::LEN)?;
        b[..Self::LEN].fill(0);
        let version = match (self.src, self.dst) {
            (IpAddr::V4(s), IpAddr::V4(d)) => {
                b[16..20].copy_from_slice(&s.octets());
                b[32..36].copy_from_slice(&d.octets());
                4
            }
            (IpAddr::V6(s), IpAddr::V6(d)) => {
                put_gid(b, 4, s);
                put_gid(b, 20, d);
                6
            }
            _ => {
                return Err(WireError::InvalidRepr(
                    "source and destination address families differ",
                ))
            }
        };
        b[1] = version << 4;
        put16(b, 2, self.src_port);
        Ok(())
    }
}

/// The unspecified address of `ip`'s family.
pub fn unspecified_like(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(_) => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        IpAddr::V6(_) => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
    }
}

/// One CM message as a plain representation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CmRepr<'a> {
    /// ConnectRequest.
    Req(ReqRepr<'a>),
    /// MsgRcptAck.
    Mra(MraRepr<'a>),
    /// ConnectReject.
    Rej(RejRepr<'a>),
    /// ConnectReply.
    Rep(RepRepr<'a>),
    /// ReadyToUse.
    Rtu(IdsRepr<'a>),
    /// DisconnectRequest.
    Dreq(DreqRepr<'a>),
    /// DisconnectReply.
    Drep(IdsRepr<'a>),
    /// ServiceIDResReq.
    SidrReq(SidrReqRepr<'a>),
    /// ServiceIDResReqResp.
    SidrRep(SidrRepRepr<'a>),
}

impl<'a> CmRepr<'a> {
    /// The attribute.
    pub fn attr(&self) -> CmAttr {
        match self {
            Self::Req(_) => CmAttr::Req,
            Self::Mra(_) => CmAttr::Mra,
            Self::Rej(_) => CmAttr::Rej,
            Self::Rep(_) => CmAttr::Rep,
            Self::Rtu(_) => CmAttr::Rtu,
            Self::Dreq(_) => CmAttr::Dreq,
            Self::Drep(_) => CmAttr::Drep,
            Self::SidrReq(_) => CmAttr::SidrReq,
            Self::SidrRep(_) => CmAttr::SidrRep,
        }
    }

    /// The attribute ID.
    pub fn attr_id(&self) -> u16 {
        match self.attr() {
            CmAttr::ClassPortInfo => 0x0001,
            CmAttr::Req => 0x0010,
            CmAttr::Mra => 0x0011,
            CmAttr::Rej => 0x0012,
            CmAttr::Rep => 0x0013,
            CmAttr::Rtu => 0x0014,
            CmAttr::Dreq => 0x0015,
            CmAttr::Drep => 0x0016,
            CmAttr::SidrReq => 0x0017,
            CmAttr::SidrRep => 0x0018,
            CmAttr::Lap => 0x0019,
            CmAttr::Apr => 0x001a,
        }
    }

    /// Reads a parsed message; `None` for LAP and APR (alternate paths, which uroce
    /// does not load).
    pub fn parse(m: &cm::Message<&'a [u8]>) -> Option<Self> {
        Some(match m {
            cm::Message::Req(v) => Self::Req(ReqRepr::parse(v)),
            cm::Message::Mra(v) => Self::Mra(MraRepr::parse(v)),
            cm::Message::Rej(v) => Self::Rej(RejRepr::parse(v)),
            cm::Message::Rep(v) => Self::Rep(RepRepr::parse(v)),
            cm::Message::Rtu(v) => Self::Rtu(IdsRepr::parse_rtu(v)),
            cm::Message::Dreq(v) => Self::Dreq(DreqRepr::parse(v)),
            cm::Message::Drep(v) => Self::Drep(IdsRepr::parse_drep(v)),
            cm::Message::SidrReq(v) => Self::SidrReq(SidrReqRepr::parse(v)),
            cm::Message::SidrRep(v) => Self::SidrRep(SidrRepRepr::parse(v)),
            cm::Message::Lap(_) | cm::Message::Apr(_) => return None,
        })
    }

    /// Writes the CM data (232 bytes) into `b`.
    pub fn emit(&self, b: &mut [u8]) -> Result<(), WireError> {
        match self {
            Self::Req(r) => r.emit(b),
            Self::Mra(r) => r.emit(b),
            Self::Rej(r) => r.emit(b),
            Self::Rep(r) => r.emit(b),
            Self::Rtu(r) | Self::Drep(r) => r.emit(b),
            Self::Dreq(r) => r.emit(b),
            Self::SidrReq(r) => r.emit(b),
            Self::SidrRep(r) => r.emit(b),
        }
    }
}

/// A whole CM MAD: the common header (base version 1, class 0x07, class version 2,
/// method Send, status 0, the transaction ID) and one message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CmMad<'a> {
    /// Transaction ID (the CM keeps one per connection: the REQ's).
    pub tid: u64,
    /// The message.
    pub msg: CmRepr<'a>,
}

impl<'a> CmMad<'a> {
    /// Reads a MAD whose header says CM, class version 2, method Send; `Err` for one
    /// too short for its message, `Ok(None)` for a header that is not the CM's or an
    /// attribute the CM does not handle.
    pub fn parse(mad: &'a [u8]) -> Result<Option<Self>, WireError> {
        let h = mad::Header::new_checked(mad)?;
        let r = MadRepr::parse(&h);
        if r.base_version != 1
            || r.mgmt_class != CLASS_CM
            || r.class_version != CM_CLASS_VERSION
            || r.method != METHOD_SEND
            || r.response
        {
            return Ok(None);
        }
        let data = &mad[HEADER_LEN..mad.len().min(MAD_LEN)];
        let Some(m) = cm::Message::parse(r.attr_id, data)? else {
            return Ok(None);
        };
        Ok(Self::from_message(r.tid, m))
    }

    fn from_message(tid: u64, m: cm::Message<&'a [u8]>) -> Option<Self> {
        // The views borrow `data` for 'a; re-wrap each so the Repr borrows it too.
        let msg = match m {
            cm::Message::Req(v) => CmRepr::Req(ReqRepr::parse(&v)),
            cm::Message::Mra(v) => CmRepr::Mra(MraRepr::parse(&v)),
            cm::Message::Rej(v) => CmRepr::Rej(RejRepr::parse(&v)),
            cm::Message::Rep(v) => CmRepr::Rep(RepRepr::parse(&v)),
            cm::Message::Rtu(v) => CmRepr::Rtu(IdsRepr::parse_rtu(&v)),
            cm::Message::Dreq(v) => CmRepr::Dreq(DreqRepr::parse(&v)),
            cm::Message::Drep(v) => CmRepr::Drep(IdsRepr::parse_drep(&v)),
            cm::Message::SidrReq(v) => CmRepr::SidrReq(SidrReqRepr::parse(&v)),
            cm::Message::SidrRep(v) => CmRepr::SidrRep(SidrRepRepr::parse(&v)),
            cm::Message::Lap(_) | cm::Message::Apr(_) => return None,
        };
        Some(Self { tid, msg })
    }

    /// Writes the 256-byte MAD at the start of `b`.
    pub fn emit(&self, b: &mut [u8]) -> Result<(), WireError> {
        need(b, MAD_LEN)?;
        MadRepr {
            base_version: 1,
            mgmt_class: CLASS_CM,
            class_version: CM_CLASS_VERSION,
            response: false,
            method: METHOD_SEND,
            status: 0,
            class_specific: 0,
            tid: self.tid,
            attr_id: self.msg.attr_id(),
            attr_mod: 0,
        }
        .emit(b)?;
        self.msg.emit(&mut b[HEADER_LEN..MAD_LEN])
    }

    /// The MAD as an array.
    pub fn to_bytes(&self) -> Result<[u8; MAD_LEN], WireError> {
        let mut b = [0u8; MAD_LEN];
        self.emit(&mut b)?;
        Ok(b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The CM MADs in `crates/uroce/tests/data/rdma_cm.pcap` (rdma_rxe's CM: rping over IPv4 and
    /// IPv6, udaddy's SIDR, a REQ to a port nobody listens on, ib_write_bw -R), each
    /// with its frame number.
    fn rxe_mads() -> Vec<(usize, Vec<u8>)> {
        let file = include_bytes!("../../../uroce/tests/data/rdma_cm.pcap");
        let mut out = Vec::new();
        for (i, f) in crate::pcap::Reader::new(file).unwrap().enumerate() {
            let f = f.unwrap();
            let p = crate::wire::parse(f.data).unwrap();
            if p.bth.dest_qp() == GSI && p.payload.len() == MAD_LEN {
                out.push((i + 1, p.payload.to_vec()));
            }
        }
        out
    }
    const GSI: u32 = mad::GSI_QPN;

    #[test]
    fn every_rxe_cm_mad_reemits_byte_for_byte() {
        let mads = rxe_mads();
        let frames: Vec<usize> = mads.iter().map(|m| m.0).collect();
        assert_eq!(
            frames,
            [1, 2, 3, 40, 41, 42, 43, 48, 49, 50, 51, 52, 65, 66, 67, 68, 69, 90, 91, 92]
        );
        let mut kinds = std::collections::HashSet::new();
        for (n, mad) in &mads {
            let m = CmMad::parse(mad)
                .unwrap()
                .unwrap_or_else(|| panic!("frame {n}"));
            kinds.insert(m.msg.attr());
            let out = m.to_bytes().unwrap();
            assert_eq!(&out[..], &mad[..], "frame {n}: {:?}", m.msg.attr());
            // And the emitted bytes parse to the same fields.
            assert_eq!(CmMad::parse(&out).unwrap().unwrap(), m, "frame {n}");
        }
        assert_eq!(
            kinds.len(),
            8,
            "REQ REP RTU REJ DREQ DREP SIDR_REQ SIDR_REP: {kinds:?}"
        );
    }

    #[test]
    fn rxe_req_rep_rej_sidr_fields() {
        let mads = rxe_mads();
        let get = |n: usize| mads.iter().find(|m| m.0 == n).unwrap().1.as_slice();
        let m = CmMad::parse(get(1)).unwrap().unwrap();
        assert_eq!(m.tid, 0x2_1ad9_448e);
        let CmRepr::Req(r) = m.msg else { panic!() };
        assert_eq!((r.local_comm_id, r.service_id), (0x8e44_d91a, 0x0106_1c06));
        assert_eq!(
            (r.local_qpn, r.responder_resources, r.initiator_depth),
            (0x11, 1, 1)
        );
        assert_eq!(
            (r.remote_cm_response_timeout, r.local_cm_response_timeout),
            (20, 20)
        );
        assert_eq!(
            (r.transport_service_type, r.retry_count, r.rnr_retry_count),
            (0, 7, 7)
        );
        assert_eq!((r.path_mtu, r.max_cm_retries, r.pkey), (3, 15, 0xffff));
        assert_eq!(
            (r.primary.local_lid, r.primary.remote_lid),
            (0xffff, 0xffff)
        );
        assert_eq!(
            ip_of_gid(r.primary.local_gid),
            "10.78.0.12".parse::<IpAddr>().unwrap()
        );
        assert_eq!(
            ip_of_gid(r.primary.remote_gid),
            "10.78.0.11".parse::<IpAddr>().unwrap()
        );
        assert_eq!((r.primary.hop_limit, r.primary.local_ack_timeout), (64, 17));
        assert_eq!(r.alternate, PathRepr::default());
        let h = IpCmHeaderRepr::parse(&cm::IpCmHeader::new_checked(r.private_data).unwrap());
        assert_eq!(
            h,
            Some(IpCmHeaderRepr {
                src_port: 59576,
                src: "10.78.0.12".parse().unwrap(),
                dst: "10.78.0.11".parse().unwrap(),
            })
        );
        let mut hb = [0u8; 36];
        h.unwrap().emit(&mut hb).unwrap();
        assert_eq!(&hb[..], &r.private_data[..36]);

        let CmRepr::Rep(p) = CmMad::parse(get(2)).unwrap().unwrap().msg else {
            panic!()
        };
        assert_eq!(
            (p.local_comm_id, p.remote_comm_id),
            (0x44a2_8b16, 0x8e44_d91a)
        );
        assert_eq!((p.local_qpn, p.starting_psn), (0x11, 0x7871b3));
        assert_eq!(
            (p.responder_resources, p.initiator_depth, p.target_ack_delay),
            (1, 1, 15)
        );
        assert_eq!(
            (p.rnr_retry_count, p.srq, p.failover_accepted),
            (7, false, 0)
        );

        let CmRepr::Rej(j) = CmMad::parse(get(49)).unwrap().unwrap().msg else {
            panic!()
        };
        assert_eq!(
            (j.local_comm_id, j.remote_comm_id, j.message_rejected),
            (0, 0x8c44_d91a, 0)
        );
        assert_eq!((j.reason, j.reject_info.len()), (8, 0));

        let CmRepr::SidrRep(s) = CmMad::parse(get(43)).unwrap().unwrap().msg else {
            panic!()
        };
        assert_eq!(
            (s.status, s.qpn, s.qkey, s.service_id),
            (0, 0x12, 0x0123_4567, 0x0111_1c06)
        );
        let CmRepr::Dreq(d) = CmMad::parse(get(40)).unwrap().unwrap().msg else {
            panic!()
        };
        assert_eq!(d.remote_qpn, 0x11);
    }

    #[test]
    fn every_message_type_round_trips() {
        let pd = [0x5au8; 7];
        let path = PathRepr {
            local_lid: 0xffff,
            remote_lid: 0xffff,
            local_gid: "::ffff:10.0.0.1".parse().unwrap(),
            remote_gid: "fe80::1".parse().unwrap(),
            flow_label: 0xf_ffff,
            packet_rate: 0x3f,
            traffic_class: 0x28,
            hop_limit: 64,
            sl: 15,
            subnet_local: true,
            local_ack_timeout: 31,
        };
        let msgs = [
            CmRepr::Req(ReqRepr {
                local_comm_id: 1,
                service_id: 0x0106_1c06,
                local_ca_guid: 2,
                local_qkey: 3,
                local_qpn: 0xff_ffff,
                responder_resources: 4,
                local_eecn: 5,
                initiator_depth: 6,
                remote_eecn: 7,
                remote_cm_response_timeout: 31,
                transport_service_type: 1,
                end_to_end_flow_control: true,
                starting_psn: 0xab_cdef,
                local_cm_response_timeout: 30,
                retry_count: 7,
                pkey: 0x7fff,
                path_mtu: 5,
                rdc_exists: true,
                rnr_retry_count: 6,
                max_cm_retries: 15,
                srq: true,
                extended_transport_type: 1,
                primary: path,
                alternate: PathRepr { sl: 3, ..path },
                private_data: &[9; 92],
            }),
            CmRepr::Mra(MraRepr {
                local_comm_id: 1,
                remote_comm_id: 2,
                message_mraed: 2,
                service_timeout: 31,
                private_data: &pd,
            }),
            CmRepr::Rej(RejRepr {
                local_comm_id: 1,
                remote_comm_id: 2,
                message_rejected: 1,
                reason: 28,
                reject_info: &[1, 2, 3],
                private_data: &[7; 148],
            }),
            CmRepr::Rep(RepRepr {
                local_comm_id: 1,
                remote_comm_id: 2,
                local_qkey: 3,
                local_qpn: 0x12_3456,
                local_eecn: 4,
                starting_psn: 0xff_ffff,
                responder_resources: 5,
                initiator_depth: 6,
                target_ack_delay: 31,
                failover_accepted: 3,
                end_to_end_flow_control: true,
                rnr_retry_count: 7,
                srq: true,
                local_ca_guid: 8,
                private_data: &[1; 196],
            }),
            CmRepr::Rtu(IdsRepr {
                local_comm_id: 1,
                remote_comm_id: 2,
                private_data: &[3; 224],
            }),
            CmRepr::Dreq(DreqRepr {
                local_comm_id: 1,
                remote_comm_id: 2,
                remote_qpn: 0x11,
                private_data: &[4; 220],
            }),
            CmRepr::Drep(IdsRepr {
                local_comm_id: 1,
                remote_comm_id: 2,
                private_data: &pd,
            }),
            CmRepr::SidrReq(SidrReqRepr {
                request_id: 1,
                pkey: 0xffff,
                service_id: 0x0111_0001,
                private_data: &[5; 216],
            }),
            CmRepr::SidrRep(SidrRepRepr {
                request_id: 1,
                status: 4,
                qpn: 0x12,
                service_id: 0x0111_0001,
                qkey: 0x0123_4567,
                additional_info: &[1; 72],
                private_data: &[6; 136],
            }),
        ];
        for msg in msgs {
            let mad = CmMad {
                tid: 0x1234_5678_9abc_def0,
                msg,
            };
            let b = mad.to_bytes().unwrap();
            let back = CmMad::parse(&b).unwrap().unwrap();
            // Private data comes back padded with zeros to the message's room.
            let mut again = back.to_bytes().unwrap();
            assert_eq!(again, b, "{:?}", msg.attr());
            again[..].copy_from_slice(&b);
            assert_eq!(back.msg.attr(), msg.attr());
            match (back.msg, msg) {
                (CmRepr::Req(a), CmRepr::Req(b)) => {
                    assert_eq!(
                        ReqRepr {
                            private_data: b.private_data,
                            ..a
                        },
                        b
                    )
                }
                (CmRepr::Rep(a), CmRepr::Rep(b)) => {
                    assert_eq!(
                        RepRepr {
                            private_data: b.private_data,
                            ..a
                        },
                        b
                    )
                }
                (CmRepr::Rej(a), CmRepr::Rej(b)) => assert_eq!(a, b),
                (CmRepr::SidrRep(a), CmRepr::SidrRep(b)) => assert_eq!(a, b),
                (a, b) => assert_eq!(a.attr(), b.attr()),
            }
            assert_eq!(
                &msg_private(&back.msg)[..msg_private(&msg).len()],
                msg_private(&msg)
            );
        }
    }

    fn msg_private<'a>(m: &CmRepr<'a>) -> &'a [u8] {
        match m {
            CmRepr::Req(r) => r.private_data,
            CmRepr::Mra(r) => r.private_data,
            CmRepr::Rej(r) => r.private_data,
            CmRepr::Rep(r) => r.private_data,
            CmRepr::Rtu(r) | CmRepr::Drep(r) => r.private_data,
            CmRepr::Dreq(r) => r.private_data,
            CmRepr::SidrReq(r) => r.private_data,
            CmRepr::SidrRep(r) => r.private_data,
        }
    }

    #[test]
    fn bad_reprs_are_errors_not_panics() {
        let ids = IdsRepr {
            local_comm_id: 1,
            remote_comm_id: 2,
            private_data: &[0; 225],
        };
        assert!(matches!(
            ids.emit(&mut [0; DATA_LEN]),
            Err(WireError::InvalidRepr(_))
        ));
        assert!(matches!(
            CmMad {
                tid: 0,
                msg: CmRepr::Rtu(IdsRepr {
                    private_data: &[],
                    ..ids
                })
            }
            .emit(&mut [0; 255]),
            Err(WireError::BufferTooSmall { .. })
        ));
        let d = DreqRepr {
            local_comm_id: 0,
            remote_comm_id: 0,
            remote_qpn: 1 << 24,
            private_data: &[],
        };
        assert!(d.emit(&mut [0; DATA_LEN]).is_err());
        let r = RejRepr {
            local_comm_id: 0,
            remote_comm_id: 0,
            message_rejected: 0,
            reason: 8,
            reject_info: &[0; 73],
            private_data: &[],
        };
        assert!(r.emit(&mut [0; DATA_LEN]).is_err());
        let h = IpCmHeaderRepr {
            src_port: 1,
            src: "10.0.0.1".parse().unwrap(),
            dst: "::1".parse().unwrap(),
        };
        assert!(h.emit(&mut [0; 36]).is_err());
        // Not the CM, not Send, a response, another class version: not a CM MAD.
        let mut mad = CmMad {
            tid: 1,
            msg: CmRepr::Rtu(IdsRepr {
                local_comm_id: 1,
                remote_comm_id: 2,
                private_data: &[],
            }),
        }
        .to_bytes()
        .unwrap();
        assert!(CmMad::parse(&mad).unwrap().is_some());
        for (at, v) in [(0, 2), (1, 0x03), (2, 1), (3, 0x01), (3, 0x83)] {
            let keep = mad[at];
            mad[at] = v;
            assert!(CmMad::parse(&mad).unwrap().is_none(), "byte {at} = {v:#x}");
            mad[at] = keep;
        }
        assert!(CmMad::parse(&mad[..30]).is_err());
        assert!(CmMad::parse(&mad[..10]).is_err());
    }
}
