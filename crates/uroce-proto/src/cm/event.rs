//! What the CM tells the application: one [`CmEvent`] per thing that happened, taken
//! with `CmEndpoint::poll_event`. They map onto rdma_cm's events as the kernel's
//! `cma_ib_handler` maps the IB CM's: `ConnectRequest` → RDMA_CM_EVENT_CONNECT_REQUEST,
//! `ConnectReply` → (after the RTU) ESTABLISHED or CONNECT_RESPONSE, `Established` →
//! ESTABLISHED, `Rejected` → REJECTED, `Unreachable` → UNREACHABLE (ETIMEDOUT),
//! `Disconnected` → DISCONNECTED, `TimeWaitExit` → TIMEWAIT_EXIT.

use std::net::IpAddr;

use super::params::{ConnectReply, ConnectRequest};
use crate::wire::cm_repr::IpCmHeaderRepr;

/// A communication ID of this CM: the local communication ID its MADs carry, and the
/// handle of a connection or SIDR exchange.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CmId(pub u32);

/// Something that happened to a connection or a SIDR exchange.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CmEvent {
    /// A REQ for a service this endpoint listens on (passive side): answer with
    /// `accept`, `reject` or `mra`.
    ConnectRequest {
        /// The new connection.
        id: CmId,
        /// What the REQ said.
        req: Box<ConnectRequest>,
    },
    /// The REP arrived (active side): bring the QP to RTR and RTS (`qp_attr`), then
    /// send the RTU (`rtu`), or `reject`.
    ConnectReply {
        /// The connection.
        id: CmId,
        /// What the REP said.
        rep: Box<ConnectReply>,
    },
    /// The connection is established: the RTU arrived (passive side), this side sent
    /// it (active side), or the application said data arrived first
    /// (`notify_established`).
    Established {
        /// The connection.
        id: CmId,
    },
    /// The peer rejected the REQ or REP (or, with reason 10, the connection as stale).
    Rejected {
        /// The connection, forgotten (or in time wait for a stale connection).
        id: CmId,
        /// The REJ's reason (`wire::cm::reject_reason_name`).
        reason: u16,
        /// The additional reject information.
        reject_info: Vec<u8>,
        /// The REJ's private data.
        private_data: Vec<u8>,
    },
    /// The REQ, REP or SIDR_REQ went unanswered through every retry: the peer is gone
    /// (a REJ with reason 4, timeout, was sent for a REQ or REP).
    Unreachable {
        /// The connection or SIDR exchange, forgotten.
        id: CmId,
    },
    /// The connection is down: a DREQ arrived (and was answered), the DREP to this
    /// side's DREQ arrived, or the DREQ went unanswered. The connection is in time wait.
    Disconnected {
        /// The connection.
        id: CmId,
        /// The DREQ's or DREP's private data (empty after a timeout).
        private_data: Vec<u8>,
    },
    /// The time wait after a disconnection is over: the connection is forgotten and its
    /// QP may be reused.
    TimeWaitExit {
        /// The connection.
        id: CmId,
    },
    /// A SIDR_REQ for a service this endpoint listens on: answer with `sidr_reply`.
    SidrRequest {
        /// The exchange.
        id: CmId,
        /// The service asked for.
        service_id: u64,
        /// Where the request came from.
        peer: IpAddr,
        /// The RDMA CM IP addressing header, for RDMA CM's IP port spaces.
        ip: Option<IpCmHeaderRepr>,
        /// The SIDR_REQ's private data.
        private_data: Vec<u8>,
    },
    /// The SIDR_REP arrived.
    SidrReply {
        /// The exchange, forgotten.
        id: CmId,
        /// Status (0 valid; `wire::cm::sidr_status_name`).
        status: u8,
        /// The UD QP serving the service.
        qpn: u32,
        /// The Q_Key to send to it with.
        qkey: u32,
        /// The SIDR_REP's private data.
        private_data: Vec<u8>,
    },
}
