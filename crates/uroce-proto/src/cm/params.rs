//! What a connection is made of: what the active side asks for ([`ConnectParams`], the
//! REQ), what the passive side answers ([`AcceptParams`], the REP), and what each side
//! learns of the other ([`ConnectRequest`], [`ConnectReply`]). Field names are the REQ's
//! and REP's (IBTA Vol. 1 §12.6.5, §12.6.8) and librdmacm's `rdma_conn_param`.

use std::net::IpAddr;

use crate::transport::Mtu;
use crate::wire::cm_repr::IpCmHeaderRepr;

/// The connected transport service a REQ asks for (its transport service type).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Transport {
    /// Reliable connection (type 0).
    Rc,
    /// Unreliable connection (type 1).
    Uc,
}

impl Transport {
    /// The REQ's transport service type code.
    pub const fn code(self) -> u8 {
        match self {
            Self::Rc => 0,
            Self::Uc => 1,
        }
    }
}

/// The CM's path MTU code of an MTU (IBTA §12.6.5: 1 256 ... 5 4096).
pub const fn mtu_code(m: Mtu) -> u8 {
    match m {
        Mtu::M256 => 1,
        Mtu::M512 => 2,
        Mtu::M1024 => 3,
        Mtu::M2048 => 4,
        Mtu::M4096 => 5,
    }
}

/// The MTU of a CM path MTU code, `None` for a reserved code.
pub fn mtu_of_code(code: u8) -> Option<Mtu> {
    Mtu::from_bytes(crate::wire::cm::mtu_bytes(code)?)
}

/// What `connect` sends in the REQ. [`ConnectParams::new`] fills in what the kernel's
/// RDMA CM sends (rdma_rxe's REQs in `crates/uroce/tests/data/rdma_cm.pcap`): CM response timeouts
/// 20 (4.3 s; `CMA_CM_RESPONSE_TIMEOUT`), 15 CM retries (`CMA_MAX_CM_RETRIES`), retry and
/// RNR retry counts 7, path MTU 1024, hop limit 64.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectParams {
    /// The service to connect to ([`super::service_id()`] for RDMA CM's port spaces).
    pub service_id: u64,
    /// The peer's address (its CM is reached at QP 1 there).
    pub peer: IpAddr,
    /// RC or UC.
    pub transport: Transport,
    /// The local QP that will carry the connection.
    pub qpn: u32,
    /// The Starting PSN this message carries (24 bits): the first PSN the local QP's
    /// receive queue expects, which the peer's QP sends from (its `rq_psn`; see
    /// [`CmEndpoint::qp_attr`](super::CmEndpoint::qp_attr)).
    pub starting_psn: u32,
    /// The path MTU.
    pub path_mtu: Mtu,
    /// RDMA READ / atomic requests this side accepts at once (its `max_dest_rd_atomic`).
    pub responder_resources: u8,
    /// RDMA READ / atomic requests this side keeps outstanding (its `max_rd_atomic`).
    pub initiator_depth: u8,
    /// Transport retries of the connection (3 bits).
    pub retry_count: u8,
    /// RNR retries the passive side shall use (3 bits; 7 without limit).
    pub rnr_retry_count: u8,
    /// How long the peer's CM may take to answer (5 bits; 4.096 µs × 2^value); the REQ
    /// is sent again after that plus twice the packet life time.
    pub remote_cm_response_timeout: u8,
    /// How long this CM takes to answer (5 bits); the peer times its REP with it.
    pub local_cm_response_timeout: u8,
    /// How often the REQ (and the REP) are sent again before giving up (4 bits).
    pub max_cm_retries: u8,
    /// The local QP takes its receives from an SRQ.
    pub srq: bool,
    /// Peer to peer (IBTA §12.9.3, simultaneous connect): the peer may be connecting to
    /// this side with the same service ID at the same time; of the two REQs, the one
    /// from the larger CA GUID (then QPN) wins and this side may become the passive one.
    pub peer_to_peer: bool,
    /// Flow label of the path (20 bits; rdma_cm hashes the ports into it).
    pub flow_label: u32,
    /// Traffic class.
    pub traffic_class: u8,
    /// Hop limit.
    pub hop_limit: u8,
    /// Service level (4 bits).
    pub sl: u8,
    /// The RNR NAK timer code the local QP sends (`min_rnr_timer` at INIT → RTR; the
    /// kernel's CM sets 0).
    pub min_rnr_timer: u8,
    /// Private data (at most 92 bytes; RDMA CM over IP: [`super::ip_private_data`]).
    pub private_data: Vec<u8>,
}

impl ConnectParams {
    /// Parameters for an RC connection of QP `qpn` starting at `starting_psn` to
    /// `service_id` at `peer`, with the kernel RDMA CM's defaults.
    pub fn new(service_id: u64, peer: IpAddr, qpn: u32, starting_psn: u32) -> Self {
        Self {
            service_id,
            peer,
            transport: Transport::Rc,
            qpn,
            starting_psn,
            path_mtu: Mtu::M1024,
            responder_resources: 1,
            initiator_depth: 1,
            retry_count: 7,
            rnr_retry_count: 7,
            remote_cm_response_timeout: 20,
            local_cm_response_timeout: 20,
            max_cm_retries: 15,
            srq: false,
            peer_to_peer: false,
            flow_label: 0,
            traffic_class: 0,
            hop_limit: 64,
            sl: 0,
            min_rnr_timer: 0,
            private_data: Vec::new(),
        }
    }
}

/// What `accept` sends in the REP.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AcceptParams {
    /// The local QP that carries the connection.
    pub qpn: u32,
    /// The Starting PSN this message carries (24 bits): the first PSN the local QP's
    /// receive queue expects, which the peer's QP sends from (its `rq_psn`; see
    /// [`CmEndpoint::qp_attr`](super::CmEndpoint::qp_attr)).
    pub starting_psn: u32,
    /// RDMA READ / atomic requests this side accepts at once; no more than the REQ's
    /// initiator depth is used (IBTA §12.7.30).
    pub responder_resources: u8,
    /// RDMA READ / atomic requests this side keeps outstanding; no more than the REQ's
    /// responder resources is used.
    pub initiator_depth: u8,
    /// RNR retries the active side shall use (3 bits).
    pub rnr_retry_count: u8,
    /// Target ACK delay (5 bits; rdma_rxe sends 15).
    pub target_ack_delay: u8,
    /// The local QP takes its receives from an SRQ.
    pub srq: bool,
    /// The RNR NAK timer code the local QP sends (`min_rnr_timer`).
    pub min_rnr_timer: u8,
    /// Private data (at most 196 bytes).
    pub private_data: Vec<u8>,
}

impl AcceptParams {
    /// Accepting with QP `qpn` starting at `starting_psn`, one READ / atomic each way,
    /// RNR retry 7 and target ACK delay 15, as rdma_rxe's REP to rping.
    pub fn new(qpn: u32, starting_psn: u32) -> Self {
        Self {
            qpn,
            starting_psn,
            responder_resources: 1,
            initiator_depth: 1,
            rnr_retry_count: 7,
            target_ack_delay: 15,
            srq: false,
            min_rnr_timer: 0,
            private_data: Vec::new(),
        }
    }
}

/// A REQ as the passive side's application sees it (the `ConnectRequest` event).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectRequest {
    /// The service asked for (one this endpoint listens on).
    pub service_id: u64,
    /// Where the REQ came from.
    pub peer: IpAddr,
    /// RC or UC.
    pub transport: Transport,
    /// The peer's QP.
    pub remote_qpn: u32,
    /// The peer's Starting PSN: the PSN the local QP sends from (its `sq_psn`).
    pub starting_psn: u32,
    /// The path MTU.
    pub path_mtu: Mtu,
    /// The peer's responder resources.
    pub responder_resources: u8,
    /// The peer's initiator depth.
    pub initiator_depth: u8,
    /// Transport retries.
    pub retry_count: u8,
    /// RNR retries this side shall use.
    pub rnr_retry_count: u8,
    /// The peer uses an SRQ.
    pub srq: bool,
    /// The peer's CA GUID.
    pub remote_ca_guid: u64,
    /// The RDMA CM IP addressing header, when the service ID is one of RDMA CM's IP port
    /// spaces and the private data starts with a valid one.
    pub ip: Option<IpCmHeaderRepr>,
    /// The REQ's private data (92 bytes, the IP header included).
    pub private_data: Vec<u8>,
}

/// A REP as the active side's application sees it (the `ConnectReply` event).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectReply {
    /// The peer's QP.
    pub remote_qpn: u32,
    /// The peer's Starting PSN: the PSN the local QP sends from (its `sq_psn`).
    pub starting_psn: u32,
    /// The peer's responder resources (this side's `max_rd_atomic`).
    pub responder_resources: u8,
    /// The peer's initiator depth (this side's `max_dest_rd_atomic`).
    pub initiator_depth: u8,
    /// RNR retries this side shall use.
    pub rnr_retry_count: u8,
    /// The peer uses an SRQ.
    pub srq: bool,
    /// The peer's CA GUID.
    pub remote_ca_guid: u64,
    /// The REP's private data (196 bytes).
    pub private_data: Vec<u8>,
}
