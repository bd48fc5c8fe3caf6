//! The reliable connected transport (IBTA Vol. 1 §9.7): a requester and a responder per QP.
//!
//! Both halves are sans-IO: [`RcQp::on_packet`] takes a parsed packet and the time,
//! [`RcQp::next_packet`] hands out the next packet to send, [`RcQp::poll_timeout`] /
//! [`RcQp::on_timeout`] drive the retransmit and RNR timers. Payload bytes move between
//! the packet and registered memory once, through [`crate::mem::Memory`].

mod requester;

pub(crate) use requester::MAX_INFLIGHT_PSNS;
mod responder;

use std::time::Instant;

use crate::mem::{Memory, PdId};
use crate::transport::{
    CqId, InitAttr, QpState, RecvWr, Remote, RtrAttr, RtsAttr, SendWr, VerbsError, WcStatus,
};
use crate::wire::RocePacket;

pub(crate) use crate::transport::{Io, OutPacket, QpCounters};
pub(crate) use requester::Requester;
pub(crate) use responder::Responder;

/// Connection parameters fixed at RTR / RTS.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Path {
    pub remote: Remote,
    pub dest_qpn: u32,
    pub mtu: u32,
    pub pkey: u16,
}

/// One RC queue pair.
pub struct RcQp {
    pub(crate) qpn: u32,
    pub(crate) pd: PdId,
    pub(crate) state: QpState,
    pub(crate) path: Option<Path>,
    pub(crate) max_send_wr: usize,
    pub(crate) max_recv_wr: usize,
    pub(crate) req: Requester,
    pub(crate) resp: Responder,
    pub(crate) counters: QpCounters,
}

impl RcQp {
    pub(crate) fn new(
        qpn: u32,
        pd: PdId,
        send_cq: CqId,
        recv_cq: CqId,
        max_send_wr: usize,
        max_recv_wr: usize,
    ) -> Self {
        Self {
            qpn,
            pd,
            state: QpState::Reset,
            path: None,
            max_send_wr,
            max_recv_wr,
            req: Requester::new(qpn, send_cq),
            resp: Responder::new(qpn, recv_cq, pd),
            counters: QpCounters::default(),
        }
    }

    fn bad_state(&self, what: &'static str) -> VerbsError {
        VerbsError::BadState {
            qpn: self.qpn,
            state: self.state,
            what,
        }
    }

    pub(crate) fn modify_init(&mut self, a: InitAttr) -> Result<(), VerbsError> {
        if self.state != QpState::Reset {
            return Err(self.bad_state("RESET -> INIT"));
        }
        self.resp.set_access(a.access, a.pkey);
        self.state = QpState::Init;
        Ok(())
    }

    pub(crate) fn modify_rtr(&mut self, a: RtrAttr) -> Result<(), VerbsError> {
        if self.state != QpState::Init {
            return Err(self.bad_state("INIT -> RTR"));
        }
        self.path = Some(Path {
            remote: a.remote,
            dest_qpn: a.dest_qpn & 0xff_ffff,
            mtu: a.path_mtu.bytes(),
            pkey: self.resp.pkey,
        });
        self.resp
            .start(a.rq_psn, a.max_dest_rd_atomic, a.min_rnr_timer);
        self.state = QpState::Rtr;
        Ok(())
    }

    pub(crate) fn modify_rts(&mut self, a: RtsAttr) -> Result<(), VerbsError> {
        if self.state != QpState::Rtr {
            return Err(self.bad_state("RTR -> RTS"));
        }
        self.req.start(a);
        self.state = QpState::Rts;
        Ok(())
    }

    /// Moves to ERR and flushes every outstanding work request (IBTA §10.3.1: completions
    /// with IBV_WC_WR_FLUSH_ERR, in order).
    pub(crate) fn enter_err(&mut self, io: &mut Io<'_>) {
        self.state = QpState::Err;
        self.req.flush(io);
        let path = self.path;
        self.resp.flush(io, path.as_ref());
    }

    pub(crate) fn post_send(&mut self, mem: &Memory, wr: SendWr) -> Result<(), VerbsError> {
        if self.state != QpState::Rts {
            return Err(self.bad_state("post_send"));
        }
        if self.req.queued() >= self.max_send_wr {
            return Err(VerbsError::QueueFull("send"));
        }
        let mtu = self.path.map_or(1024, |p| p.mtu);
        self.req.post(self.pd, mem, wr, mtu)
    }

    pub(crate) fn post_recv(&mut self, mem: &Memory, wr: RecvWr) -> Result<(), VerbsError> {
        if matches!(self.state, QpState::Reset | QpState::Err) {
            return Err(self.bad_state("post_recv"));
        }
        if self.resp.queued() >= self.max_recv_wr {
            return Err(VerbsError::QueueFull("receive"));
        }
        self.resp.post(mem, wr)
    }

    /// Handles a packet addressed to this QP (ICRC already verified).
    pub(crate) fn on_packet(&mut self, io: &mut Io<'_>, p: &RocePacket<'_>) {
        if !matches!(self.state, QpState::Rtr | QpState::Rts) {
            self.counters.dropped += 1;
            return;
        }
        let Some(path) = self.path else { return };
        // A connected QP takes packets from its peer only.
        if p.ip.src() != path.remote.ip || !pkey_matches(p.bth.pkey, path.pkey) {
            self.counters.dropped += 1;
            return;
        }
        use crate::wire::Opcode::*;
        let is_response = matches!(
            p.bth.opcode,
            RcAck
                | RcAtomicAck
                | RcReadResponseFirst
                | RcReadResponseMiddle
                | RcReadResponseLast
                | RcReadResponseOnly
        );
        let result = if is_response {
            if self.state != QpState::Rts {
                self.counters.dropped += 1;
                return;
            }
            self.req.on_response(&path, io, p, &mut self.counters)
        } else {
            self.resp.on_request(&path, io, p, &mut self.counters)
        };
        if result.is_err() {
            self.enter_err(io);
        }
    }

    /// The next packet to send, responder output first (ACKs must not wait behind bulk
    /// requests), then requests.
    pub(crate) fn next_packet(&mut self, io: &mut Io<'_>) -> Option<OutPacket> {
        let path = self.path?;
        let p = if let Some(p) = self.resp.next_packet(&path) {
            Some(p)
        } else if self.state == QpState::Rts {
            self.req.next_packet(&path, io, &mut self.counters)
        } else {
            None
        };
        if p.is_some() {
            self.counters.packets_sent += 1;
        }
        p
    }

    /// When [`RcQp::on_timeout`] wants to be called next.
    pub(crate) fn poll_timeout(&self) -> Option<Instant> {
        (self.state == QpState::Rts)
            .then(|| self.req.poll_timeout())
            .flatten()
    }

    /// Fires the timers that are due.
    pub(crate) fn on_timeout(&mut self, io: &mut Io<'_>) {
        if self.state != QpState::Rts {
            return;
        }
        if self.req.on_timeout(io, &mut self.counters).is_err() {
            self.enter_err(io);
        }
    }
}

/// P_Key match (IBTA §10.9.3): the low 15 bits equal, and at least one side a full member.
fn pkey_matches(a: u16, b: u16) -> bool {
    a & 0x7fff == b & 0x7fff && (a | b) & 0x8000 != 0
}

/// An error that takes the QP to the error state after the completion it produced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Fatal(pub WcStatus);
