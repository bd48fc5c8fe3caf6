//! Received CM MADs: each message against the connection it names and that
//! connection's state (IBTA Vol. 1 §12.9.6, and the kernel IB CM's handlers
//! `cm_req_handler`, `cm_rep_handler`... for what IBTA leaves open). Whatever arrives,
//! malformed, unknown, duplicated, stale or hostile, is counted and dropped or answered
//! as IBTA asks; nothing here panics.

use std::net::IpAddr;
use std::time::Instant;

use super::conn::{CmState, Conn};
use super::endpoint::{msg, reason, CmEndpoint};
use super::event::{CmEvent, CmId};
use super::params::{mtu_of_code, ConnectReply, ConnectRequest, Transport};
use super::timing::answer_wait;
use crate::wire::cm;
use crate::wire::cm_repr::{
    CmMad, CmRepr, DreqRepr, IdsRepr, IpCmHeaderRepr, MraRepr, RejRepr, RepRepr, ReqRepr,
};
use crate::wire::mad::MAD_LEN;

impl CmEndpoint {
    /// A MAD that arrived on QP 1 from `from` (the sender's address, from the GRH or
    /// the IP header; `src_qp` the sender's QP, from the DETH), without the 40 bytes of
    /// GRH a UD receive buffer starts with: at least 256 bytes, the rest ignored.
    pub fn handle_mad(&mut self, now: Instant, from: IpAddr, src_qp: u32, mad: &[u8]) {
        let _ = src_qp; // The CM answers QP 1 whatever QP sent (IBTA §13.5.1: no redirection).
        self.counters.rx_mads += 1;
        if mad.len() < MAD_LEN {
            self.counters.rx_malformed += 1;
            return;
        }
        let m = match CmMad::parse(&mad[..MAD_LEN]) {
            Ok(Some(m)) => m,
            Ok(None) => {
                self.counters.rx_unsupported += 1;
                return;
            }
            Err(_) => {
                self.counters.rx_malformed += 1;
                return;
            }
        };
        match m.msg {
            CmRepr::Req(r) => self.on_req(now, from, m.tid, &r),
            CmRepr::Mra(r) => self.on_mra(now, from, &r),
            CmRepr::Rej(r) => self.on_rej(now, from, &r),
            CmRepr::Rep(r) => self.on_rep(now, from, m.tid, &r),
            CmRepr::Rtu(r) => self.on_rtu(from, &r),
            CmRepr::Dreq(r) => self.on_dreq(now, from, m.tid, &r),
            CmRepr::Drep(r) => self.on_drep(now, from, &r),
            CmRepr::SidrReq(r) => self.on_sidr_req(from, m.tid, &r),
            CmRepr::SidrRep(r) => self.on_sidr_rep(from, &r),
        }
    }

    /// The connection that a message from `from` naming `local` (the receiver's, i.e.
    /// this side's, communication ID) and `remote` (the sender's; 0 when it did not
    /// know it yet) belongs to.
    fn find(&mut self, from: IpAddr, local: u32, remote: u32) -> Option<u32> {
        let c = self.conns.get(&local)?;
        if c.peer != from || (remote != 0 && c.remote_id != 0 && c.remote_id != remote) {
            return None;
        }
        Some(local)
    }

    /// A connection of this CM to `peer`'s QP `qpn` other than `except` that is not in
    /// time wait: a REQ or REP for a new connection of that QP makes it stale.
    fn same_qp(&self, peer: IpAddr, qpn: u32, except: u32) -> Option<u32> {
        self.conns
            .iter()
            .find(|(&id, c)| {
                id != except
                    && c.peer == peer
                    && c.remote_qpn == qpn
                    && c.has_peer_qp()
                    && c.state != CmState::TimeWait
            })
            .map(|(&id, _)| id)
    }

    fn resend_last(&mut self, id: u32, retransmit: bool) {
        let Some(c) = self.conns.get(&id) else { return };
        let mad = if retransmit {
            c.retransmit.as_ref().map(|r| *r.mad)
        } else {
            c.last_reply.as_deref().copied()
        };
        if let Some(mad) = mad {
            let peer = c.peer;
            self.queue(peer, mad);
        }
    }

    /// REQ (passive side; IBTA §12.9.6.2, the kernel's `cm_match_req`): a duplicate is
    /// answered with what was sent (REP, MRA) or, in time wait, rejected as stale; a REQ
    /// of a QP that has a connection here already is rejected as stale and that
    /// connection disconnected; a REQ nobody listens for is rejected with reason 8, one
    /// beyond the backlog with 3; a REQ for an unknown transport or MTU is rejected with
    /// reason 9 or 26. Otherwise
    /// a new connection in ReqRcvd and a `ConnectRequest` event.
    fn on_req(&mut self, now: Instant, from: IpAddr, tid: u64, r: &ReqRepr<'_>) {
        if r.local_comm_id == 0 {
            // 0 is "unknown" in every reply's remote communication ID field.
            self.counters.rx_malformed += 1;
            return;
        }
        let dup = self
            .conns
            .iter()
            .find(|(_, c)| !c.active && c.peer == from && c.remote_id == r.local_comm_id)
            .map(|(&id, c)| (id, c.state));
        if let Some((id, state)) = dup {
            self.counters.rx_duplicates += 1;
            match state {
                CmState::RepSent | CmState::MraRepRcvd => self.resend_last(id, true),
                CmState::MraReqSent => self.resend_last(id, false),
                CmState::TimeWait => {
                    self.counters.rx_stale += 1;
                    let which = msg::REQ;
                    self.send_rej(
                        from,
                        tid,
                        id,
                        r.local_comm_id,
                        which,
                        reason::STALE_CONNECTION,
                        &[],
                    );
                }
                // Still with the application, or established (its REP was taken): drop.
                _ => {}
            }
            return;
        }
        if let Some(old) = self.same_qp(from, r.local_qpn, 0) {
            self.counters.rx_stale += 1;
            self.send_rej(
                from,
                tid,
                0,
                r.local_comm_id,
                msg::REQ,
                reason::STALE_CONNECTION,
                &[],
            );
            self.stale(now, old);
            return;
        }
        if self.peer_to_peer(from, tid, r) {
            return;
        }
        if !self.listens.contains(&r.service_id) {
            self.counters.rx_no_listener += 1;
            self.send_rej(
                from,
                tid,
                0,
                r.local_comm_id,
                msg::REQ,
                reason::INVALID_SERVICE_ID,
                &[],
            );
            return;
        }
        let pending = self
            .conns
            .values()
            .filter(|c| matches!(c.state, CmState::ReqRcvd | CmState::MraReqSent))
            .count();
        if pending >= self.cfg.backlog {
            self.counters.rx_backlog_full += 1;
            self.send_rej(
                from,
                tid,
                0,
                r.local_comm_id,
                msg::REQ,
                reason::NO_RESOURCES,
                &[],
            );
            return;
        }
        let transport = transport_of(r);
        let mtu = mtu_of_code(r.path_mtu);
        let (Some(transport), Some(path_mtu)) = (transport, mtu) else {
            let why = if transport.is_none() {
                reason::INVALID_TRANSPORT_TYPE
            } else {
                reason::INVALID_PATH_MTU
            };
            self.send_rej(from, tid, 0, r.local_comm_id, msg::REQ, why, &[]);
            return;
        };
        let id = self.new_id();
        self.new_passive(from, tid, id, r, transport, path_mtu, ip_header(r));
    }

    /// Simultaneous connect (IBTA §12.9.3, the kernel's former `cm_is_active_peer`): a
    /// REQ for the service a peer-to-peer REQ of this side to the same peer asks for. The
    /// REQ from the larger CA GUID (then the larger QPN) wins: if it is the peer's, this
    /// side's connection becomes the passive side of it (ReqRcvd, a `ConnectRequest`
    /// event under the same ID, its own REQ no longer sent); if it is this side's, the
    /// peer's REQ is dropped (the peer answers this side's). Returns whether it applied.
    fn peer_to_peer(&mut self, from: IpAddr, tid: u64, r: &ReqRepr<'_>) -> bool {
        let mine = self.conns.iter().find(|(_, c)| {
            c.active
                && c.peer_to_peer
                && c.peer == from
                && c.service_id == r.service_id
                && matches!(c.state, CmState::ReqSent | CmState::MraReqRcvd)
        });
        let Some((&id, c)) = mine else {
            return false;
        };
        let (ours, theirs) = (
            (self.cfg.ca_guid, c.local_qpn),
            (r.local_ca_guid, r.local_qpn),
        );
        if ours >= theirs {
            self.counters.rx_unexpected += 1;
            return true;
        }
        let (Some(transport), Some(path_mtu)) = (transport_of(r), mtu_of_code(r.path_mtu)) else {
            return false; // Rejected as any REQ with these would be.
        };
        self.conns.remove(&id);
        self.new_passive(from, tid, id, r, transport, path_mtu, ip_header(r));
        true
    }

    #[allow(clippy::too_many_arguments)]
    fn new_passive(
        &mut self,
        from: IpAddr,
        tid: u64,
        id: u32,
        r: &ReqRepr<'_>,
        transport: Transport,
        path_mtu: crate::transport::Mtu,
        ip: Option<IpCmHeaderRepr>,
    ) {
        self.conns.insert(
            id,
            Conn {
                state: CmState::ReqRcvd,
                active: false,
                peer_to_peer: false,
                peer: from,
                remote_id: r.local_comm_id,
                tid,
                service_id: r.service_id,
                transport,
                local_qpn: 0,
                remote_qpn: r.local_qpn,
                local_psn: 0,
                remote_psn: r.starting_psn,
                path_mtu,
                // Bounds for `accept`: what this side need accept is what the peer
                // will have outstanding, and the other way round.
                responder_resources: r.initiator_depth,
                initiator_depth: r.responder_resources,
                retry_count: r.retry_count,
                rnr_retry_count: r.rnr_retry_count,
                min_rnr_timer: 0,
                local_ack_timeout: r.primary.local_ack_timeout,
                // The REP is timed by how long the REQ's sender says it takes to answer.
                peer_response_timeout: r.local_cm_response_timeout,
                max_cm_retries: r.max_cm_retries,
                retransmit: None,
                last_reply: None,
                timewait_until: None,
            },
        );
        self.events.push_back(CmEvent::ConnectRequest {
            id: CmId(id),
            req: Box::new(ConnectRequest {
                service_id: r.service_id,
                peer: from,
                transport,
                remote_qpn: r.local_qpn,
                starting_psn: r.starting_psn,
                path_mtu,
                responder_resources: r.responder_resources,
                initiator_depth: r.initiator_depth,
                retry_count: r.retry_count,
                rnr_retry_count: r.rnr_retry_count,
                srq: r.srq,
                remote_ca_guid: r.local_ca_guid,
                ip,
                private_data: r.private_data.to_vec(),
            }),
        });
    }

    /// A connection found stale by a new REQ or REP of its QP: disconnected (a DREQ, as
    /// the kernel's `cm_match_req` does) when established, else forgotten into time wait.
    fn stale(&mut self, now: Instant, old: u32) {
        let state = self.conns.get(&old).map(|c| c.state);
        if state == Some(CmState::Established) {
            let _ = self.disconnect(now, CmId(old), &[]);
        } else {
            self.enter_timewait(now, old);
        }
    }

    /// MRA (IBTA §12.6.6): the REQ (active side, ReqSent) or the REP (passive side,
    /// RepSent) arrived and its answer will take the service timeout: wait that long
    /// before sending it again.
    fn on_mra(&mut self, now: Instant, from: IpAddr, r: &MraRepr<'_>) {
        let Some(id) = self.find(from, r.remote_comm_id, r.local_comm_id) else {
            self.counters.rx_unknown_id += 1;
            return;
        };
        let plt = self.cfg.packet_life_time;
        let Some(c) = self.conns.get_mut(&id) else {
            return;
        };
        use CmState::*;
        let next = match (c.state, r.message_mraed) {
            (ReqSent | MraReqRcvd, msg::REQ) => MraReqRcvd,
            (RepSent | MraRepRcvd, msg::REP) => MraRepRcvd,
            _ => {
                self.counters.rx_unexpected += 1;
                return;
            }
        };
        c.state = next;
        if let Some(t) = c.retransmit.as_mut() {
            t.wait = answer_wait(r.service_timeout, plt);
            t.deadline = now + t.wait;
        }
    }

    /// REJ (IBTA §12.6.7): the REQ or REP was refused, or (reason 10) the connection
    /// is stale. The connection is forgotten (stale: time wait) with a `Rejected` event.
    fn on_rej(&mut self, now: Instant, from: IpAddr, r: &RejRepr<'_>) {
        // A REJ of a REQ names the REQ's sender in its remote communication ID; the
        // peer may have made no ID of its own (0).
        let Some(id) = self.find(from, r.remote_comm_id, r.local_comm_id) else {
            self.counters.rx_unknown_id += 1;
            return;
        };
        let Some(c) = self.conns.get(&id) else { return };
        use CmState::*;
        let ok = match c.state {
            ReqSent | MraReqRcvd => r.message_rejected == msg::REQ,
            RepSent | MraRepRcvd => r.message_rejected == msg::REP,
            RepRcvd | MraRepSent | Established => true,
            ReqRcvd | MraReqSent | DreqSent | TimeWait => false,
        };
        if !ok {
            self.counters.rx_unexpected += 1;
            return;
        }
        if r.reason == reason::STALE_CONNECTION || c.state == Established {
            self.enter_timewait(now, id);
        } else {
            self.conns.remove(&id);
        }
        self.events.push_back(CmEvent::Rejected {
            id: CmId(id),
            reason: r.reason,
            reject_info: r.reject_info.to_vec(),
            private_data: r.private_data.to_vec(),
        });
    }

    /// REP (active side; IBTA §12.9.6.1, the kernel's `cm_rep_handler`): in ReqSent or
    /// MraReqRcvd it gives the peer's QP and PSN and a `ConnectReply` event; a duplicate
    /// is answered with the RTU or MRA sent; a REP naming no connection is rejected with
    /// reason 6, one for a QP that has another connection here as stale (reason 10).
    fn on_rep(&mut self, now: Instant, from: IpAddr, tid: u64, r: &RepRepr<'_>) {
        let Some(id) = self.find(from, r.remote_comm_id, r.local_comm_id) else {
            self.counters.rx_unknown_id += 1;
            self.send_rej(
                from,
                tid,
                0,
                r.local_comm_id,
                msg::REP,
                reason::INVALID_COMM_ID,
                &[],
            );
            return;
        };
        let Some(c) = self.conns.get(&id) else { return };
        use CmState::*;
        match c.state {
            ReqSent | MraReqRcvd if c.active => {}
            RepRcvd | Established | MraRepSent if c.active && c.remote_id == r.local_comm_id => {
                self.counters.rx_duplicates += 1;
                if c.state != RepRcvd {
                    self.resend_last(id, false);
                }
                return;
            }
            _ => {
                self.counters.rx_unexpected += 1;
                return;
            }
        }
        if let Some(old) = self.same_qp(from, r.local_qpn, id) {
            self.counters.rx_stale += 1;
            let tid = c.tid;
            self.send_rej(
                from,
                tid,
                id,
                r.local_comm_id,
                msg::REP,
                reason::STALE_CONNECTION,
                &[],
            );
            self.conns.remove(&id);
            self.events.push_back(CmEvent::Rejected {
                id: CmId(id),
                reason: reason::STALE_CONNECTION,
                reject_info: Vec::new(),
                private_data: Vec::new(),
            });
            self.stale(now, old);
            return;
        }
        let Some(c) = self.conns.get_mut(&id) else {
            return;
        };
        c.state = RepRcvd;
        c.retransmit = None;
        c.remote_id = r.local_comm_id;
        c.remote_qpn = r.local_qpn;
        c.remote_psn = r.starting_psn;
        // The REP's responder resources are what this side may have outstanding, its
        // initiator depth what this side must accept (`cm_rep_handler`).
        c.initiator_depth = c.initiator_depth.min(r.responder_resources);
        c.responder_resources = r.initiator_depth;
        c.rnr_retry_count = r.rnr_retry_count;
        self.events.push_back(CmEvent::ConnectReply {
            id: CmId(id),
            rep: Box::new(ConnectReply {
                remote_qpn: r.local_qpn,
                starting_psn: r.starting_psn,
                responder_resources: r.responder_resources,
                initiator_depth: r.initiator_depth,
                rnr_retry_count: r.rnr_retry_count,
                srq: r.srq,
                remote_ca_guid: r.local_ca_guid,
                private_data: r.private_data.to_vec(),
            }),
        });
    }

    /// RTU (passive side, RepSent or MraRepRcvd): established. Anything else is late
    /// or stray and dropped.
    fn on_rtu(&mut self, from: IpAddr, r: &IdsRepr<'_>) {
        let Some(id) = self.find(from, r.remote_comm_id, r.local_comm_id) else {
            self.counters.rx_unknown_id += 1;
            return;
        };
        let Some(c) = self.conns.get_mut(&id) else {
            return;
        };
        if c.active || !matches!(c.state, CmState::RepSent | CmState::MraRepRcvd) {
            self.counters.rx_unexpected += 1;
            return;
        }
        c.state = CmState::Established;
        c.retransmit = None;
        self.events.push_back(CmEvent::Established { id: CmId(id) });
    }

    /// DREQ (IBTA §12.9.6.3, the kernel's `cm_dreq_handler`): answered with a DREP,
    /// the connection `Disconnected` and in time wait; a DREQ for a connection already in
    /// time wait is answered again; one naming no connection is answered too, so the
    /// peer stops sending it. A DREQ whose QP is not the connection's is dropped.
    fn on_dreq(&mut self, now: Instant, from: IpAddr, tid: u64, r: &DreqRepr<'_>) {
        let drep = |ep: &mut CmEndpoint, local: u32, remote: u32, tid: u64| {
            ep.send(
                from,
                tid,
                CmRepr::Drep(IdsRepr {
                    local_comm_id: local,
                    remote_comm_id: remote,
                    private_data: &[],
                }),
            )
        };
        let Some(id) = self.find(from, r.remote_comm_id, r.local_comm_id) else {
            self.counters.rx_unknown_id += 1;
            drep(self, r.remote_comm_id, r.local_comm_id, tid);
            return;
        };
        let Some(c) = self.conns.get(&id) else { return };
        if c.local_qpn != r.remote_qpn {
            self.counters.rx_unexpected += 1;
            return;
        }
        use CmState::*;
        match c.state {
            // A DREQ before the RTU means the peer considers the connection made.
            Established | RepSent | MraRepRcvd | DreqSent => {
                let (remote, tid) = (c.remote_id, c.tid);
                let mad = drep(self, id, remote, tid);
                self.enter_timewait(now, id);
                if let Some(c) = self.conns.get_mut(&id) {
                    c.last_reply = Some(Box::new(mad));
                }
                self.events.push_back(CmEvent::Disconnected {
                    id: CmId(id),
                    private_data: r.private_data.to_vec(),
                });
            }
            TimeWait => {
                self.counters.rx_duplicates += 1;
                let (remote, tid) = (c.remote_id, c.tid);
                drep(self, id, remote, tid);
            }
            _ => self.counters.rx_unexpected += 1,
        }
    }

    /// DREP (DreqSent): `Disconnected`, time wait.
    fn on_drep(&mut self, now: Instant, from: IpAddr, r: &IdsRepr<'_>) {
        let Some(id) = self.find(from, r.remote_comm_id, r.local_comm_id) else {
            self.counters.rx_unknown_id += 1;
            return;
        };
        if self.conns.get(&id).map(|c| c.state) != Some(CmState::DreqSent) {
            self.counters.rx_unexpected += 1;
            return;
        }
        self.enter_timewait(now, id);
        self.events.push_back(CmEvent::Disconnected {
            id: CmId(id),
            private_data: r.private_data.to_vec(),
        });
    }
}

/// The transport a REQ asks for, if uroce has it.
fn transport_of(r: &ReqRepr<'_>) -> Option<Transport> {
    match r.transport_service_type {
        0 => Some(Transport::Rc),
        1 => Some(Transport::Uc),
        _ => None,
    }
}

/// The RDMA CM IP addressing header of a REQ, when its service ID is one of RDMA CM's
/// IP port spaces.
pub(super) fn ip_header(r: &ReqRepr<'_>) -> Option<IpCmHeaderRepr> {
    let (ps, _) = cm::rdma_cm_service(r.service_id)?;
    if ps == cm::PS_IB {
        return None;
    }
    IpCmHeaderRepr::parse(&cm::IpCmHeader::new_checked(r.private_data).ok()?)
}
