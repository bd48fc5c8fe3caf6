//! Communication management (IBTA Vol. 1 chapter 12): the connection manager that
//! RDMA CM speaks over QP 1, sans-IO.
//!
//! A [`CmEndpoint`] per local address holds the connections (one connection each, in
//! a [`CmState`] of IBTA's state diagram, §12.9.6) and the SIDR exchanges. It never
//! touches a QP, a socket or a clock:
//!
//! - MADs in: [`CmEndpoint::handle_mad`] with the sender's address (from the UD
//!   receive's GRH or the IP header) and the 256 MAD bytes after the GRH;
//! - MADs out: [`CmEndpoint::poll_transmit`] gives an [`OutMad`] to send as a UD SEND
//!   from QP 1 to QP 1 at its address, Q_Key 0x80010000;
//! - events: [`CmEndpoint::poll_event`] ([`CmEvent`]: ConnectRequest, ConnectReply,
//!   Established, Rejected, Unreachable, Disconnected, TimeWaitExit, SidrRequest,
//!   SidrReply);
//! - time: [`CmEndpoint::poll_timeout`] / [`CmEndpoint::handle_timeout`] send a
//!   message again or give up on it (each REQ, REP, DREQ, SIDR_REQ is retried every
//!   response timeout plus twice the packet life time, `max_cm_retries` times) and end
//!   time waits;
//! - the QP: [`CmEndpoint::qp_attr`] gives the modify verb's attributes and mask for
//!   INIT, RTR and RTS from what the REQ and REP negotiated (path MTU, PSNs, retry and
//!   RNR retry counts, responder resources and initiator depth), as the kernel's
//!   `ib_cm_init_qp_attr`.
//!
//! The wire side is [`crate::wire::cm`] (read views) and [`crate::wire::cm_repr`]
//! (Reprs that emit). RDMA CM's service IDs and IP addressing header are in
//! [`mod@service_id`]. Simultaneous connect is there for REQs sent with
//! [`ConnectParams::peer_to_peer`]. Not done: LAP / APR (alternate paths: dropped and
//! counted), RD, and the MRA this side could send by itself when the application is slow
//! (the application calls [`CmEndpoint::mra`]).

#![forbid(unsafe_code)]

mod conn;
mod endpoint;
mod event;
mod params;
mod receive;
pub mod service_id;
mod sidr;
mod timing;

#[cfg(test)]
mod tests;

pub use conn::CmState;
pub use endpoint::{ca_guid_from_mac, reason, CmConfig, CmCounters, CmEndpoint, CmError, OutMad};
pub use event::{CmEvent, CmId};
pub use params::{
    mtu_code, mtu_of_code, AcceptParams, ConnectParams, ConnectReply, ConnectRequest, Transport,
};
pub use service_id::{flow_label, ip_private_data, port_of, service_id, PortSpace};
pub use sidr::{SidrParams, SidrReplyParams, SIDR_REJECT, SIDR_UNSUPPORTED, SIDR_VALID};
pub use timing::{answer_wait, cm_time};
