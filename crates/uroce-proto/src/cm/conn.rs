//! One connection's state (IBTA Vol. 1 §12.9.6, the CM state diagrams for the active
//! and passive sides) and the QP attributes it gives each state change of the QP (what
//! the kernel's `ib_cm_init_qp_attr` gives `ib_modify_qp`).

use std::net::IpAddr;
use std::time::Instant;

use super::params::Transport;
use super::timing::Retransmit;
use crate::mem::Access;
use crate::transport::{Mtu, QpAttr, QpAttrMask, QpState, Remote};
use crate::wire::mad::MAD_LEN;

/// Where a connection is in IBTA's CM state diagram (§12.9.6). Idle is no connection
/// (forgotten); Listen is the endpoint's service list.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CmState {
    /// Active: REQ sent, waiting for the REP.
    ReqSent,
    /// Active: the peer sent an MRA for the REQ; waiting longer for the REP.
    MraReqRcvd,
    /// Passive: REQ received, waiting for the application.
    ReqRcvd,
    /// Passive: this side sent an MRA for the REQ; waiting for the application.
    MraReqSent,
    /// Passive: REP sent, waiting for the RTU.
    RepSent,
    /// Passive: the peer sent an MRA for the REP; waiting longer for the RTU.
    MraRepRcvd,
    /// Active: REP received, waiting for the application's RTU.
    RepRcvd,
    /// Active: this side sent an MRA for the REP.
    MraRepSent,
    /// Connected.
    Established,
    /// This side sent a DREQ, waiting for the DREP.
    DreqSent,
    /// Disconnected; stale messages for the connection are still recognised.
    TimeWait,
}

/// A connection of the endpoint.
#[derive(Debug, Clone)]
pub(super) struct Conn {
    pub state: CmState,
    /// This side sent the REQ.
    pub active: bool,
    /// The REQ was sent peer to peer: a REQ from the peer for the same service may
    /// make this side the passive one.
    pub peer_to_peer: bool,
    pub peer: IpAddr,
    /// The peer's communication ID (0 until the REQ or REP gave it).
    pub remote_id: u32,
    /// The transaction ID of every MAD of the connection: the REQ's.
    pub tid: u64,
    pub service_id: u64,
    pub transport: Transport,
    pub local_qpn: u32,
    pub remote_qpn: u32,
    /// The Starting PSN this side's REQ or REP carried: where this side's receive queue
    /// starts, the PSN the peer sends from (see [`Conn::qp_attr`]).
    pub local_psn: u32,
    /// The Starting PSN of the peer's REQ or REP: the PSN this side sends from.
    pub remote_psn: u32,
    pub path_mtu: Mtu,
    /// This side's `max_dest_rd_atomic`.
    pub responder_resources: u8,
    /// This side's `max_rd_atomic`.
    pub initiator_depth: u8,
    pub retry_count: u8,
    /// RNR retries this side's QP uses (the peer's REQ or REP says).
    pub rnr_retry_count: u8,
    pub min_rnr_timer: u8,
    /// The local ACK timeout of the path (the QP's `timeout`).
    pub local_ack_timeout: u8,
    /// How long the peer's CM takes to answer (times this side's REQ, REP, DREQ).
    pub peer_response_timeout: u8,
    pub max_cm_retries: u8,
    /// The message awaiting an answer.
    pub retransmit: Option<Retransmit>,
    /// The last answer sent that is not retried (MRA, RTU, DREP): sent again when the
    /// message it answered comes again.
    pub last_reply: Option<Box<[u8; MAD_LEN]>>,
    /// End of the time wait.
    pub timewait_until: Option<Instant>,
}

impl Conn {
    /// When this connection next needs `handle_timeout`.
    pub fn deadline(&self) -> Option<Instant> {
        match (&self.retransmit, self.timewait_until) {
            (Some(r), _) => Some(r.deadline),
            (None, t) => t,
        }
    }

    /// The peer's QP is known and the QP may go to RTR.
    pub fn has_peer_qp(&self) -> bool {
        !matches!(self.state, CmState::ReqSent | CmState::MraReqRcvd)
    }

    /// The attributes and mask of the modify verb taking the connection's QP to `to`:
    /// INIT (P_Key index, port, access: REMOTE_WRITE, with REMOTE_READ and
    /// REMOTE_ATOMIC when this side has responder resources, as `cm_init_qp_init_attr`),
    /// RTR (the peer's address and QP, the PSN this side's REQ or REP carried, the path
    /// MTU; for RC the responder resources and the RNR timer) or RTS (the PSN the peer's
    /// REQ or REP carried; for RC the local ACK timeout, retry and RNR retry counts,
    /// initiator depth). Each side's Starting PSN is the one its own receive queue
    /// expects: the kernel's CM takes the REQ's for the active side's `rq_psn` and the
    /// passive side's `sq_psn`, the REP's for the passive side's `rq_psn` and the
    /// active side's `sq_psn` (`ib_send_cm_req`, `cm_req_handler`, `ib_send_cm_rep`,
    /// `cm_rep_handler`), and rdma_rxe's first SEND after the RTU goes out at the REP's
    /// PSN (`crates/uroce/tests/data/rdma_cm.pcap`, frame 4). The address's MAC is left
    /// zero: the CM does not know it; the caller fills it from its neighbour table.
    /// `None` for another state, or RTR / RTS before the peer's QP is known.
    pub fn qp_attr(&self, to: QpState) -> Option<(QpAttr, QpAttrMask)> {
        type M = QpAttrMask;
        let rc = self.transport == Transport::Rc;
        let mut a = QpAttr {
            qp_state: to,
            ..QpAttr::default()
        };
        let mask = match to {
            QpState::Init => {
                a.qp_access_flags = Access::REMOTE_WRITE;
                if rc && self.responder_resources > 0 {
                    a.qp_access_flags =
                        a.qp_access_flags | Access::REMOTE_READ | Access::REMOTE_ATOMIC;
                }
                M::STATE | M::ACCESS_FLAGS | M::PKEY_INDEX | M::PORT
            }
            QpState::Rtr if self.has_peer_qp() => {
                a.ah_attr = Remote {
                    ip: self.peer,
                    mac: [0; 6],
                };
                a.path_mtu = self.path_mtu;
                a.dest_qp_num = self.remote_qpn;
                a.rq_psn = self.local_psn;
                let m = M::STATE | M::AV | M::PATH_MTU | M::DEST_QPN | M::RQ_PSN;
                if rc {
                    a.max_dest_rd_atomic = self.responder_resources;
                    a.min_rnr_timer = self.min_rnr_timer;
                    m | M::MAX_DEST_RD_ATOMIC | M::MIN_RNR_TIMER
                } else {
                    m
                }
            }
            QpState::Rts if self.has_peer_qp() => {
                a.sq_psn = self.remote_psn;
                if rc {
                    a.timeout = self.local_ack_timeout;
                    a.retry_cnt = self.retry_count;
                    a.rnr_retry = self.rnr_retry_count;
                    a.max_rd_atomic = self.initiator_depth;
                    M::STATE
                        | M::SQ_PSN
                        | M::TIMEOUT
                        | M::RETRY_CNT
                        | M::RNR_RETRY
                        | M::MAX_QP_RD_ATOMIC
                } else {
                    M::STATE | M::SQ_PSN
                }
            }
            _ => return None,
        };
        Some((a, mask))
    }
}
