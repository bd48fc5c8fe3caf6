//! Service ID resolution for UD (IBTA Vol. 1 §12.11): a SIDR_REQ asks which UD QP and
//! Q_Key serve a service ID, the SIDR_REP answers. rdma_cm's UDP port space
//! (udaddy) resolves through it, with the RDMA CM IP header in the SIDR_REQ's private
//! data. Active side: `sidr_resolve`, sent again until the SIDR_REP comes or the retries
//! are spent (`Unreachable`). Passive side: a `SidrRequest` event for a listened service
//! (answer with `sidr_reply`), a SIDR_REP with status 1 (service ID not supported) for
//! any other (the kernel's `cm_sidr_req_handler`); a duplicate SIDR_REQ is dropped while
//! the application decides and answered again after.

use std::net::IpAddr;
use std::time::Instant;

use super::endpoint::{check_pd, CmEndpoint, CmError};
use super::event::{CmEvent, CmId};
use super::service_id as sid;
use super::timing::{answer_wait, Retransmit};
use crate::wire::cm_repr::{CmRepr, IpCmHeaderRepr, SidrRepRepr, SidrReqRepr};
use crate::wire::mad::MAD_LEN;

/// SIDR_REP status: the QP is valid.
pub const SIDR_VALID: u8 = 0;
/// SIDR_REP status: the service ID is not supported (nobody listens).
pub const SIDR_UNSUPPORTED: u8 = 1;
/// SIDR_REP status: the service provider rejected the request.
pub const SIDR_REJECT: u8 = 2;

/// What `sidr_resolve` sends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SidrParams {
    /// The service to resolve.
    pub service_id: u64,
    /// The peer's address.
    pub peer: IpAddr,
    /// How long the peer may take to answer (5 bits).
    pub timeout: u8,
    /// How often the SIDR_REQ is sent again.
    pub max_retries: u8,
    /// Private data (at most 216 bytes; over IP: [`super::ip_private_data`]).
    pub private_data: Vec<u8>,
}

/// What `sidr_reply` sends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SidrReplyParams {
    /// Status ([`SIDR_VALID`], [`SIDR_REJECT`]...).
    pub status: u8,
    /// The UD QP serving the service.
    pub qpn: u32,
    /// Its Q_Key (rdma_cm's UDP port space: 0x01234567, `RDMA_UDP_QKEY`).
    pub qkey: u32,
    /// Private data (at most 136 bytes).
    pub private_data: Vec<u8>,
}

/// One SIDR exchange.
#[derive(Debug, Clone)]
pub(super) struct Sidr {
    pub peer: IpAddr,
    /// Active side: this side's request ID (the key); passive side: the peer's.
    pub request_id: u32,
    pub service_id: u64,
    pub tid: u64,
    /// Active side: the SIDR_REQ awaiting its SIDR_REP.
    pub retransmit: Option<Retransmit>,
    /// Passive side: the SIDR_REP sent, for a duplicate SIDR_REQ.
    pub reply: Option<Box<[u8; MAD_LEN]>>,
    /// Passive side: forgotten then.
    pub forget_at: Option<Instant>,
    pub active: bool,
}

impl Sidr {
    pub fn deadline(&self) -> Option<Instant> {
        self.retransmit
            .as_ref()
            .map(|r| r.deadline)
            .or(self.forget_at)
    }
}

impl CmEndpoint {
    /// Sends a SIDR_REQ for `p.service_id` to `p.peer`.
    pub fn sidr_resolve(&mut self, now: Instant, p: &SidrParams) -> Result<CmId, CmError> {
        check_pd("SIDR_REQ", sid::SIDR_REQ_PRIVATE_DATA, &p.private_data)?;
        if p.timeout > 31 {
            return Err(CmError::InvalidParam("SIDR timeout above 31"));
        }
        let id = self.new_id();
        let tid = self.new_tid(id);
        let pkey = self.cfg.pkey;
        let mad = self.send(
            p.peer,
            tid,
            CmRepr::SidrReq(SidrReqRepr {
                request_id: id,
                pkey,
                service_id: p.service_id,
                private_data: &p.private_data,
            }),
        );
        let wait = answer_wait(p.timeout, self.cfg.packet_life_time);
        self.sidrs.insert(
            id,
            Sidr {
                peer: p.peer,
                request_id: id,
                service_id: p.service_id,
                tid,
                retransmit: Some(Retransmit::new(mad, now, wait, p.max_retries)),
                reply: None,
                forget_at: None,
                active: true,
            },
        );
        Ok(CmId(id))
    }

    /// Answers the SIDR_REQ of a `SidrRequest` event.
    pub fn sidr_reply(
        &mut self,
        now: Instant,
        id: CmId,
        p: &SidrReplyParams,
    ) -> Result<(), CmError> {
        check_pd("SIDR_REP", sid::SIDR_REP_PRIVATE_DATA, &p.private_data)?;
        if p.qpn >> 24 != 0 {
            return Err(CmError::InvalidParam("QPN wider than 24 bits"));
        }
        let s = match self.sidrs.get(&id.0) {
            Some(s) if !s.active && s.reply.is_none() => s,
            _ => return Err(CmError::NoSuchId(id.0)),
        };
        let (peer, tid, rid, svc) = (s.peer, s.tid, s.request_id, s.service_id);
        let mad = self.send(
            peer,
            tid,
            CmRepr::SidrRep(SidrRepRepr {
                request_id: rid,
                status: p.status,
                qpn: p.qpn,
                service_id: svc,
                qkey: p.qkey,
                additional_info: &[],
                private_data: &p.private_data,
            }),
        );
        // Kept for duplicates of the SIDR_REQ for as long as a requester with rdma_cm's
        // timeout (20) would still be sending them once more.
        let keep = answer_wait(20, self.cfg.packet_life_time);
        if let Some(s) = self.sidrs.get_mut(&id.0) {
            s.reply = Some(Box::new(mad));
            s.forget_at = Some(now + keep);
        }
        Ok(())
    }

    pub(super) fn on_sidr_req(&mut self, from: IpAddr, tid: u64, r: &SidrReqRepr<'_>) {
        let dup = self
            .sidrs
            .iter()
            .find(|(_, s)| !s.active && s.peer == from && s.request_id == r.request_id)
            .map(|(_, s)| s.reply.as_deref().copied());
        if let Some(reply) = dup {
            self.counters.rx_duplicates += 1;
            if let Some(mad) = reply {
                self.queue(from, mad);
            }
            return;
        }
        if !self.listens.contains(&r.service_id) {
            self.counters.rx_no_listener += 1;
            self.send(
                from,
                tid,
                CmRepr::SidrRep(SidrRepRepr {
                    request_id: r.request_id,
                    status: SIDR_UNSUPPORTED,
                    qpn: 0,
                    service_id: r.service_id,
                    qkey: 0,
                    additional_info: &[],
                    private_data: &[],
                }),
            );
            return;
        }
        let id = self.new_id();
        self.sidrs.insert(
            id,
            Sidr {
                peer: from,
                request_id: r.request_id,
                service_id: r.service_id,
                tid,
                retransmit: None,
                reply: None,
                forget_at: None,
                active: false,
            },
        );
        let ip = crate::wire::cm::rdma_cm_service(r.service_id)
            .filter(|(ps, _)| *ps != crate::wire::cm::PS_IB)
            .and_then(|_| crate::wire::cm::IpCmHeader::new_checked(r.private_data).ok())
            .and_then(|h| IpCmHeaderRepr::parse(&h));
        self.events.push_back(CmEvent::SidrRequest {
            id: CmId(id),
            service_id: r.service_id,
            peer: from,
            ip,
            private_data: r.private_data.to_vec(),
        });
    }

    pub(super) fn on_sidr_rep(&mut self, from: IpAddr, r: &SidrRepRepr<'_>) {
        match self.sidrs.get(&r.request_id) {
            Some(s) if s.active && s.peer == from => {}
            _ => {
                self.counters.rx_unknown_id += 1;
                return;
            }
        }
        self.sidrs.remove(&r.request_id);
        self.events.push_back(CmEvent::SidrReply {
            id: CmId(r.request_id),
            status: r.status,
            qpn: r.qpn,
            qkey: r.qkey,
            private_data: r.private_data.to_vec(),
        });
    }

    pub(super) fn sidr_timeouts(&mut self, now: Instant) {
        let mut due: Vec<u32> = self
            .sidrs
            .iter()
            .filter(|(_, s)| s.deadline().is_some_and(|d| d <= now))
            .map(|(&id, _)| id)
            .collect();
        due.sort_unstable();
        for id in due {
            let Some(s) = self.sidrs.get_mut(&id) else {
                continue;
            };
            let peer = s.peer;
            match s.retransmit.as_mut() {
                Some(r) if r.retries_left > 0 => {
                    r.retries_left -= 1;
                    r.deadline = now + r.wait;
                    let mad = *r.mad;
                    self.counters.retransmits += 1;
                    self.queue(peer, mad);
                }
                Some(_) => {
                    self.counters.timeouts += 1;
                    self.sidrs.remove(&id);
                    self.events.push_back(CmEvent::Unreachable { id: CmId(id) });
                }
                None => {
                    self.sidrs.remove(&id);
                }
            }
        }
    }
}
