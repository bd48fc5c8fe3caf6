//! The reliable connected transport (IBTA Vol. 1 §9.7): a requester and a responder per QP.
//!
//! Both halves are sans-IO: a parsed packet and the time go in, the next packet to send
//! comes out, and the retransmit and RNR timers are driven from outside; the QP shell
//! ([`crate::transport`]'s `Qp`) calls them in the states that allow them. Payload bytes move between
//! the packet and registered memory once, through [`crate::mem::Memory`].

mod requester;

pub use requester::MAX_INFLIGHT_PSNS;
mod responder;

use std::time::Instant;

use crate::mem::Span;
use crate::transport::Local;
use crate::transport::{
    Connected, Fatal, InitAttr, Peer, QpAttr, QpAttrMask, QpCore, QpErrorEvent, QpState, RecvBuf,
    Remote, RtrAttr, RtsAttr, SendFlags, SendWr, Service, VerbsError, WcOpcode,
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

impl Path {
    /// The peer at the other end.
    pub(crate) fn peer(&self) -> Peer {
        Peer {
            qpn: self.dest_qpn,
            ip: self.remote.ip,
        }
    }
}

/// The RC part of one queue pair: its path, requester and responder.
///
/// `repr(C)` and cache-line aligned: the path (read by every packet), then the
/// requester's and the responder's hot fields, each first in its own struct, so that a
/// request or response touches few lines of it with 10,000 QPs (`endpoint/table.rs`).
#[repr(C, align(64))]
pub struct RcQp {
    pub(crate) path: Option<Path>,
    pub(crate) req: Requester,
    pub(crate) resp: Responder,
    /// Bytes the peer's receive buffer is taken to hold ([`Service::set_inflight_budget`]).
    inflight_budget: Option<u64>,
}

impl RcQp {
    /// The path MTU in bytes (1024 before RTR).
    fn mtu(&self) -> u32 {
        self.path.map_or(1024, |p| p.mtu)
    }

    pub(crate) fn new(core: &QpCore) -> Self {
        Self {
            path: None,
            req: Requester::new(core.qpn, core.pd, core.send_cq),
            resp: Responder::new(core.qpn, core.recv_cq, core.pd),
            inflight_budget: None,
        }
    }

    /// The requester's window in packets of the path MTU: the budget over the MTU.
    fn apply_inflight_budget(&mut self) {
        let mtu = u64::from(self.mtu().max(256));
        self.req.set_inflight_cap(
            self.inflight_budget
                .map(|b| u32::try_from(b / mtu).unwrap_or(u32::MAX)),
        );
    }
}

impl Service for RcQp {
    fn init(&mut self, _core: &QpCore, a: &InitAttr) {
        self.resp.set_access(a.access, a.pkey);
    }

    fn rts(&mut self, a: &RtsAttr) {
        self.req.start(*a);
    }

    /// What RC changes after the transition that set it (rdma_rxe's `rxe_qp_from_attr`
    /// applies each attribute its mask names): the access rights and P_Key, the
    /// responder's RNR timer code and READ / atomic resources, the requester's ACK
    /// timeout, retry counts and READ / atomic depth, and the peer's address.
    fn set(&mut self, _core: &QpCore, a: &QpAttr, mask: QpAttrMask) {
        type M = QpAttrMask;
        if mask.intersects(M::ACCESS_FLAGS | M::PKEY_INDEX) {
            self.resp.set_access(a.qp_access_flags, a.pkey);
            if let Some(p) = &mut self.path {
                p.pkey = a.pkey;
            }
        }
        if mask.contains(M::MIN_RNR_TIMER) {
            self.resp.set_min_rnr_timer(a.min_rnr_timer);
        }
        if mask.contains(M::MAX_DEST_RD_ATOMIC) {
            self.resp.set_max_dest_rd_atomic(a.max_dest_rd_atomic);
        }
        if mask.contains(M::TIMEOUT) {
            self.req.set_timeout(a.timeout);
        }
        if mask.intersects(M::RETRY_CNT | M::RNR_RETRY) {
            self.req.set_retries(a.retry_cnt, a.rnr_retry);
        }
        if mask.contains(M::MAX_QP_RD_ATOMIC) {
            self.req.set_max_rd_atomic(a.max_rd_atomic);
        }
        if mask.contains(M::AV) {
            if let Some(p) = &mut self.path {
                p.remote = a.ah_attr;
            }
        }
    }

    fn reset(&mut self, core: &QpCore) {
        let budget = self.inflight_budget;
        *self = Self::new(core);
        self.set_inflight_budget(budget);
    }

    fn set_inflight_budget(&mut self, bytes: Option<u64>) {
        self.inflight_budget = bytes;
        self.apply_inflight_budget();
    }

    fn set_draining(&mut self, on: bool) {
        self.req.set_draining(on);
    }

    fn send_in_progress(&self) -> bool {
        self.req.in_progress()
    }

    fn has_more(&self) -> bool {
        self.req.has_more()
    }

    fn peer(&self) -> Option<Peer> {
        self.path.map(|p| p.peer())
    }

    fn flush_send(&mut self, flushed: &mut dyn FnMut(u64, WcOpcode)) {
        self.req.flush(flushed);
    }

    fn take_receiving(&mut self) -> Option<RecvBuf> {
        self.resp.take_receiving()
    }

    fn placement(&self, core: &QpCore, p: &RocePacket<'_>) -> Option<Span> {
        // As `on_packet` below: a response from the peer, with its P_Key, in RTS or SQD.
        // (A request's payload goes to memory the program may read while it is written,
        // an RDMA WRITE's target, or may be shorter than a damaged packet claiming its
        // PSN, a SEND's LAST: see `Responder::execute`'s copies.)
        let path = self.path.as_ref()?;
        if p.ip().src() != path.remote.ip
            || !pkey_matches(p.bth.pkey(), path.pkey)
            || !p.bth.opcode().is_rc_response()
            || !matches!(core.state, QpState::Rts | QpState::Sqd)
        {
            return None;
        }
        self.req.placement(path, p)
    }

    fn on_packet(
        &mut self,
        core: &mut QpCore,
        io: &mut Io<'_>,
        p: &RocePacket<'_>,
    ) -> Result<(), Fatal> {
        let Some(path) = self.path else {
            return Ok(());
        };
        // A connected QP takes packets from its peer only.
        if p.ip().src() != path.remote.ip || !pkey_matches(p.bth.pkey(), path.pkey) {
            core.counters.dropped += 1;
            return Ok(());
        }
        if !p.bth.opcode().is_rc_response() {
            let r = self
                .resp
                .on_request(&path, io, p, &mut core.counters, &mut core.rq);
            // A path that loses the peer's requests loses this side's too: the
            // requester counts as lossy, and its tail probe waits a few round trips, not
            // a clean QP's share of the ACK timeout (a QP whose own requests are few, as
            // NCCL's receiver writing its ready-to-receive FIFO, else meets each lost one
            // with that wait).
            if self.resp.take_saw_loss() && self.req.mark_lossy(io.now) {
                core.timer_started = true;
            }
            return r;
        }
        // Responses are for the requester, which starts in RTS (and finishes what it
        // started in SQD).
        if !matches!(core.state, QpState::Rts | QpState::Sqd) {
            core.counters.dropped += 1;
            return Ok(());
        }
        let r = self.req.on_response(&path, io, p, &mut core.counters);
        self.req.take_local_error().map_or(r, Err)
    }

    fn on_misfit(
        &mut self,
        core: &mut QpCore,
        io: &mut Io<'_>,
        m: &crate::wire::Misfit,
    ) -> Result<(), Fatal> {
        let Some(path) = self.path else {
            return Ok(());
        };
        // Header validation first (§9.6): another peer, another P_Key, or an opcode of
        // another transport is dropped silently, as rdma_rxe's check_type_state does.
        // A malformed response is the requester's, which drops it (§9.9.2).
        let rc_range = m.opcode & 0xe0 == 0;
        let response = (0x0d..=0x12).contains(&m.opcode);
        if m.ip.src() != path.remote.ip || !pkey_matches(m.pkey, path.pkey) || !rc_range || response
        {
            core.counters.dropped += 1;
            return Ok(());
        }
        self.resp.on_misfit(&path, io, m, &mut core.counters)
    }

    fn next_response(&mut self) -> Option<OutPacket> {
        // Asked before every request packet: nothing queued is the common answer, and
        // costs no call.
        if !self.resp.has_response() {
            return None;
        }
        let path = self.path?;
        self.resp.next_packet(&path)
    }

    fn take_error_event(&mut self) -> Option<QpErrorEvent> {
        self.resp.take_event()
    }

    fn discard_responses(&mut self) {
        self.resp.discard_responses();
    }

    fn next_request(&mut self, core: &mut QpCore, io: &mut Io<'_>) -> Option<OutPacket> {
        let path = self.path?;
        let idle = !self.req.timer_running();
        let p = self.req.next_packet(&path, io, &mut core.counters);
        // A request packet starts the retransmission timer when none runs (the only timer
        // it touches: the RNR wait is set by an RNR NAK, on receive), or, with no ACK
        // timer (`timeout` 0), the recovery probe.
        core.timer_started |= idle && self.req.timer_running() || self.req.take_probe_started();
        p
    }

    fn take_local_error(&mut self) -> Option<Fatal> {
        self.req.take_local_error()
    }

    fn poll_timeout(&self) -> Option<Instant> {
        self.req.poll_timeout()
    }

    fn on_timeout(&mut self, core: &mut QpCore, io: &mut Io<'_>) -> Result<(), Fatal> {
        let r = self.req.on_timeout(io, &mut core.counters);
        self.req.take_local_error().map_or(r, Err)
    }

    fn connected(&mut self) -> Option<&mut dyn Connected> {
        Some(self)
    }

    fn refers_to(&self, lkey: u32) -> bool {
        self.req.refers_to(lkey) || self.resp.refers_to(lkey)
    }
}

impl Connected for RcQp {
    fn rtr(&mut self, _core: &QpCore, a: &RtrAttr) {
        self.path = Some(Path {
            remote: a.remote,
            dest_qpn: a.dest_qpn & 0xff_ffff,
            mtu: a.path_mtu.bytes(),
            pkey: self.resp.pkey,
        });
        self.apply_inflight_budget();
        self.resp
            .start(a.rq_psn, a.max_dest_rd_atomic, a.min_rnr_timer);
    }

    fn send_queued(&self) -> usize {
        self.req.queued()
    }

    fn check_wr(&self, wr: &SendWr) -> Result<(), VerbsError> {
        Requester::check(wr, self.mtu())
    }

    fn post_send(&mut self, _core: &QpCore, wr: SendWr, flags: SendFlags, local: Local) {
        let mtu = self.mtu();
        let fence = flags.contains(SendFlags::FENCE);
        self.req.post(wr, fence, mtu, local);
    }
}

/// P_Key match (IBTA §10.9.3): the low 15 bits equal, and at least one side a full member.
fn pkey_matches(a: u16, b: u16) -> bool {
    a & 0x7fff == b & 0x7fff && (a | b) & 0x8000 != 0
}
