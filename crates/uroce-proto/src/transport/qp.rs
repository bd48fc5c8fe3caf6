//! The queue pair shell RC, UC and UD share: the QP state and its legal changes (IBTA
//! Vol. 1 §10.3.1, the QP state diagram; the table itself is `transition.rs`), the
//! attributes each change takes (`modify`, `query`), the checks on posting work
//! requests, the receive queue, entering ERR with every outstanding work request flushed
//! as WR_FLUSH_ERR, SQD (the send queue drained) and SQE (UC / UD after a send-side
//! error), RESET (everything cleared), and the counters.
//!
//! A transport plugs its own parts in as a [`Service`] (what every service does its own
//! way: the send queue, packets in and out, timers) and either [`Connected`] (RC, UC: a
//! peer fixed at INIT → RTR, send work requests without an address) or [`Datagram`] (UD:
//! an address handle on every send work request). The shell calls a service only in the
//! states where the call is legal, so the services do not check the state again.

use std::collections::VecDeque;
use std::net::IpAddr;
use std::time::Instant;

use super::transition::{self, ModifyRefusal};
use super::{
    sgl, CqId, InitAttr, Io, Local, Mtu, OutPacket, QpAttr, QpAttrMask, QpCaps, QpCounters,
    QpInitAttr, QpInitEx, QpType, RecvBuf, RecvWr, RtrAttr, RtsAttr, SendFlags, SendOp, SendWr,
    Sge, SrqId, UdSendWr, VerbsError, WcOpcode, WcStatus, WorkCompletion, MAX_INLINE_DATA, MAX_SGE,
};
use crate::mem::{Access, Memory, Mr, PdId, Span};
use crate::wire::{Misfit, RocePacket};

/// QP state (ibv_qp_state).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum QpState {
    /// IBV_QPS_RESET.
    Reset,
    /// IBV_QPS_INIT: receives may be posted.
    Init,
    /// IBV_QPS_RTR: ready to receive.
    Rtr,
    /// IBV_QPS_RTS: ready to send.
    Rts,
    /// IBV_QPS_SQD: send queue drained. Send work requests may be posted but none is
    /// started; those in progress finish (IBTA §10.3.1). The receive side works.
    Sqd,
    /// IBV_QPS_SQE: send queue error (UC, UD): a send work request completed in error,
    /// those behind it were flushed, and the receive side works on (IBTA §10.3.1).
    Sqe,
    /// IBV_QPS_ERR: everything outstanding flushed.
    Err,
}

impl QpState {
    /// Whether incoming packets are taken: from RTR on, SQD and SQE included (their
    /// receive side works, §10.3.1); RESET, INIT and ERR drop them.
    fn receives(self) -> bool {
        matches!(self, Self::Rtr | Self::Rts | Self::Sqd | Self::Sqe)
    }

    /// Whether request packets go out and the send side's timers run: in RTS, and in
    /// SQD for the requests already in progress.
    fn sends(self) -> bool {
        matches!(self, Self::Rts | Self::Sqd)
    }

    /// Whether a send work request posted now completes at once with WR_FLUSH_ERR: in
    /// ERR, and in SQE, whose send queue is in error until SQE → RTS.
    fn flushes_sends(self) -> bool {
        matches!(self, Self::Err | Self::Sqe)
    }

    /// Whether receive work requests may be posted: from INIT on, ERR included (where
    /// they complete at once with WR_FLUSH_ERR, as in rdma_rxe's `rxe_post_recv`, which
    /// refuses only a state before INIT).
    fn takes_receives(self) -> bool {
        !matches!(self, Self::Reset)
    }

    /// Whether send work requests may be posted: in RTS; in SQD, where they wait for
    /// SQD → RTS; in SQE and ERR, where they complete at once with WR_FLUSH_ERR
    /// (rdma_rxe's `rxe_post_send` refuses only a state before RTS; mlx5 does the same).
    fn takes_sends(self) -> bool {
        matches!(self, Self::Rts | Self::Sqd | Self::Sqe | Self::Err)
    }
}

/// What every QP has whatever its service: its number and protection domain, its state,
/// where its completions go, how deep its queues are, and its counters.
///
/// `repr(C)`, in this order: what every packet or post reads first (numbers, state,
/// queue depth), then the counters, then the receive queue, so that with 10,000 QPs a
/// packet touches as few cache lines of its QP as it can (see `endpoint/table.rs`).
#[derive(Debug)]
#[repr(C)]
pub(crate) struct QpCore {
    pub qpn: u32,
    pub pd: PdId,
    pub send_cq: CqId,
    pub recv_cq: CqId,
    /// The shared receive queue the QP takes its receives from instead (IBTA §10.2.9).
    pub srq: Option<SrqId>,
    pub max_send_wr: usize,
    pub max_recv_wr: usize,
    pub state: QpState,
    /// A timer of the service started while it gave a request packet
    /// ([`Service::next_request`]): its [`Service::poll_timeout`] may have come earlier,
    /// and the context's timer heap must hear of it ([`Qp::take_timer_started`]). A
    /// packet that starts no timer leaves the heap alone.
    pub timer_started: bool,
    pub counters: QpCounters,
    /// The receive queue: posted receives, oldest first, consumed alike by every service
    /// (through [`super::Io::take_recv`]); always empty on a QP with an SRQ.
    pub rq: VecDeque<RecvBuf>,
}

impl QpCore {
    fn bad_state(&self, what: &'static str) -> VerbsError {
        VerbsError::BadState {
            qpn: self.qpn,
            state: self.state,
            what,
        }
    }

    /// Checks that send work requests may be posted now: from RTS on.
    fn may_post_send(&self) -> Result<(), VerbsError> {
        if !self.state.takes_sends() {
            return Err(self.bad_state("post_send"));
        }
        Ok(())
    }

    /// Checks that the send queue, `queued` deep, has room for one more.
    fn send_room(&self, queued: usize) -> Result<(), VerbsError> {
        if queued >= self.max_send_wr {
            return Err(VerbsError::QueueFull("send"));
        }
        Ok(())
    }
}

/// The peer of a connected QP, fixed at INIT → RTR: receive completions name it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Peer {
    /// Its QPN.
    pub qpn: u32,
    /// Its address.
    pub ip: IpAddr,
}

/// An affiliated asynchronous event of a QP: the error it raises on its way to ERR when
/// no completion reports the error (IBTA §10.10.2.3, C9-222.1.1; ibverbs'
/// IBV_EVENT_QP_*), or its send queue drained in SQD.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum QpErrorEvent {
    /// IBV_EVENT_SQ_DRAINED: in SQD, the last send work request in progress completed
    /// (raised when RTS → SQD asked for it with IBV_QP_EN_SQD_ASYNC_NOTIFY).
    SqDrained,
    /// IBV_EVENT_QP_FATAL.
    Fatal,
    /// IBV_EVENT_QP_REQ_ERR.
    ReqErr,
    /// IBV_EVENT_QP_ACCESS_ERR.
    AccessErr,
}

/// An error that takes the QP to ERR after the completion it produced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Fatal(pub WcStatus);

/// What each transport service does its own way. The shell calls these only where the
/// state allows: packets in RTR and RTS, requests out and timers in RTS.
pub(crate) trait Service: Send {
    /// RESET → INIT: the P_Key, the remote access rights, and (UD) the Q_Key.
    fn init(&mut self, core: &QpCore, a: &InitAttr);
    /// Changes the attributes `mask` names, after the change that first set them
    /// (INIT → INIT, the optional attributes of INIT → RTR and RTR → RTS, RTS → RTS,
    /// SQD → SQD, SQD / SQE → RTS). `a` holds every attribute as now set.
    fn set(&mut self, core: &QpCore, a: &QpAttr, mask: QpAttrMask);
    /// Any state → RESET: back to what `new` made, every queue emptied without a
    /// completion.
    fn reset(&mut self, core: &QpCore);
    /// RTS → SQD (`true`) and SQD → RTS (`false`): while draining, no send work request
    /// is started; those in progress go on to completion (IBTA §10.3.1; rdma_rxe's
    /// requester in QP_STATE_DRAIN takes no new WQE).
    fn set_draining(&mut self, _on: bool) {}
    /// Whether a send work request has started (a packet of it sent) and not completed.
    fn send_in_progress(&self) -> bool {
        false
    }
    /// Bounds the bytes of requests (packets of the path MTU) in flight to what the
    /// peer's receive buffer is taken to hold, `None` for no bound but the transport's
    /// own (RC; the other services have no window).
    fn set_inflight_budget(&mut self, _bytes: Option<u64>) {}
    /// RTR → RTS: the first PSN to send, and (RC) the retry and timer attributes.
    fn rts(&mut self, a: &RtsAttr);
    /// The peer of a connected QP once in RTR; `None` for UD.
    fn peer(&self) -> Option<Peer>;
    /// Hands out every outstanding send work request, oldest first, as its id and
    /// completion opcode, and forgets it.
    fn flush_send(&mut self, flushed: &mut dyn FnMut(u64, WcOpcode));
    /// Takes out the receive a message is being placed in (RC, UC), taken off the
    /// receive queue when the message began.
    fn take_receiving(&mut self) -> Option<RecvBuf> {
        None
    }
    /// Where the payload of `p`, a packet for this QP whose ICRC is not checked yet,
    /// goes if it is taken: part of a buffer lent to a work request in progress, which
    /// the program may not touch before it completes, that no verified packet filled
    /// yet and that the packet expected there fills exactly; or `None`. Changes nothing.
    /// The context copies the payload there before it checks the ICRC; a damaged packet
    /// then leaves bytes where the expected one's will go (see `Context::place`).
    fn placement(&self, core: &QpCore, p: &RocePacket<'_>) -> Option<Span> {
        let _ = (core, p);
        None
    }
    /// A packet for this QP (ICRC verified), in RTR or RTS. `Err` takes the QP to ERR.
    fn on_packet(
        &mut self,
        core: &mut QpCore,
        io: &mut Io<'_>,
        p: &RocePacket<'_>,
    ) -> Result<(), Fatal>;
    /// The next packet answering the peer's requests (RC's ACKs, NAKs, READ responses):
    /// in any state, as a NAK queued on the way to ERR still goes out.
    fn next_response(&mut self) -> Option<OutPacket> {
        None
    }
    /// The next request packet, in RTS. A service whose [`Service::poll_timeout`] comes
    /// earlier for it (a timer started) sets [`QpCore::timer_started`].
    fn next_request(&mut self, core: &mut QpCore, io: &mut Io<'_>) -> Option<OutPacket>;
    /// After a request packet: whether the next question may find another at once (a
    /// work request not started yet, RC packets owed), so that the QP keeps its turn on
    /// the ready list while its run lasts ([`crate::endpoint`]'s `Schedule::requeue`).
    /// A cheap guess: `true` where the window then refuses costs one question answered
    /// "nothing"; `false` costs the QP the rest of its run, never a packet.
    fn has_more(&self) -> bool {
        false
    }
    /// After [`Service::next_request`] gave no packet: a work request the service executed
    /// itself (RC's BIND_MW and LOCAL_INV) failed and has completed in error; the QP goes
    /// to ERR.
    fn take_local_error(&mut self) -> Option<Fatal> {
        None
    }
    /// When [`Service::on_timeout`] wants to be called next, in RTS.
    fn poll_timeout(&self) -> Option<Instant> {
        None
    }
    /// A packet for this QP whose transport header breaks the opcode table (reserved
    /// opcode, payload where none is allowed, bad pad count), in RTR or RTS. Dropped and
    /// counted unless the service answers it (RC); `Err` takes the QP to ERR.
    fn on_misfit(&mut self, core: &mut QpCore, _io: &mut Io<'_>, _m: &Misfit) -> Result<(), Fatal> {
        core.counters.dropped += 1;
        Ok(())
    }

    /// After an `Err` from a packet: the affiliated asynchronous error to raise, when no
    /// completion reported the error.
    fn take_error_event(&mut self) -> Option<QpErrorEvent> {
        None
    }
    /// The QP goes to ERR because its CQ overran: responses not sent yet are dropped.
    fn discard_responses(&mut self) {}

    /// Fires the timers that are due, in RTS. `Err` takes the QP to ERR.
    fn on_timeout(&mut self, _core: &mut QpCore, _io: &mut Io<'_>) -> Result<(), Fatal> {
        Ok(())
    }
    /// The connected part of RC and UC.
    fn connected(&mut self) -> Option<&mut dyn Connected> {
        None
    }
    /// The datagram part of UD.
    fn datagram(&mut self) -> Option<&mut dyn Datagram> {
        None
    }
    /// Whether a send work request the service holds (posted, not yet completed), or the
    /// receive a message is being placed in, has its buffer in the region `lkey`.
    fn refers_to(&self, lkey: u32) -> bool;
}

/// What a connected service (RC, UC) adds: a peer and path fixed at INIT → RTR, and send
/// work requests that go to that peer.
pub(crate) trait Connected {
    /// INIT → RTR: the peer, its QPN, the path MTU, the first PSN expected, and (RC) the
    /// responder's resources.
    fn rtr(&mut self, core: &QpCore, a: &RtrAttr);
    /// Send work requests posted and not yet completed.
    fn send_queued(&self) -> usize;
    /// Refuses the operations the service does not carry, before the queue is looked at.
    fn check_op(&self, _op: SendOp) -> Result<(), VerbsError> {
        Ok(())
    }
    /// Refuses, at post time, a work request the service cannot carry (the errors
    /// ibverbs returns from `ibv_post_send`), before its local buffer is checked.
    fn check_wr(&self, _wr: &SendWr) -> Result<(), VerbsError> {
        Ok(())
    }
    /// Queues a send work request; the shell checked the state, the queue depth and the
    /// request (`check_wr`), copied inline data, and resolved the local buffer to `local`
    /// (`None` when empty). `flags` carries IBV_SEND_FENCE.
    fn post_send(&mut self, core: &QpCore, wr: SendWr, flags: SendFlags, local: Local);
}

/// What the datagram service (UD) adds: an MTU at INIT → RTR, and an address handle on
/// every send work request.
pub(crate) trait Datagram {
    /// INIT → RTR: the MTU no datagram may exceed.
    fn rtr(&mut self, mtu: Mtu);
    /// Datagrams posted and not yet sent.
    fn send_queued(&self) -> usize;
    /// Queues a datagram; the shell checked the state and the queue depth and resolved the
    /// local buffer to `local` (`None` when empty, or when the datagram is longer than the
    /// MTU and so never sent).
    fn post_send(&mut self, core: &QpCore, wr: UdSendWr, local: Local);
}

/// What the shell decided for a send work request at post time.
enum Admit {
    /// On to the service, with its local buffer resolved (empty when it has none or it
    /// was not checked).
    Service(Local),
    /// Completed here (WR_FLUSH_ERR, a local fault) or waiting behind a local fault.
    Settled,
}

/// A send work request that failed its own local check when it was posted (a local
/// protection error: unknown lkey, buffer outside its region or without the access it
/// needs): it never reaches the service, so nothing of it goes on the wire.
#[derive(Debug, Clone, Copy)]
struct LocalFault {
    wr_id: u64,
    opcode: WcOpcode,
    status: WcStatus,
}

/// Where completions made by the shell go.
type Wcs = Vec<(CqId, WorkCompletion)>;

/// One queue pair: the shell around its transport service.
///
/// `repr(C)`, hot fields first: what a post or a packet reads (the service, a local
/// fault, the flags of pending events, `max_send_sge` and `sq_sig_all`, then the core's
/// numbers and state and its first counter) lies in the first cache lines; what only
/// modify, query and errors read comes last.
#[repr(C)]
pub(crate) struct Qp {
    service: Box<dyn Service>,
    /// A send work request that failed its local check, waiting for the requests posted
    /// before it to complete: then it completes with its status and the QP enters ERR.
    fault: Option<LocalFault>,
    /// `max_inline_data` and `sq_sig_all` ([`QpInitEx`]).
    ex: QpInitEx,
    /// The affiliated asynchronous error of the last error that took the QP to ERR.
    event: Option<QpErrorEvent>,
    /// In SQD: the send work requests in progress at RTS → SQD have all completed.
    drained: bool,
    /// RTS → SQD asked for IBV_EVENT_SQ_DRAINED (IBV_QP_EN_SQD_ASYNC_NOTIFY).
    notify_drained: bool,
    /// IBV_EVENT_SQ_DRAINED is due, for [`Qp::take_event`].
    drained_event: bool,
    /// A QP on an SRQ entered ERR and its last WQE event is not taken yet.
    last_wqe_reached: bool,
    /// The MTU a UD QP's datagrams may not exceed, set at INIT → RTR.
    ud_mtu: u32,
    core: QpCore,
    /// Inline requests posted so far: the next one takes slot `inline_seq % max_send_wr`.
    inline_seq: u64,
    /// Send work requests posted behind `fault`: never handed to the service, they
    /// complete with WR_FLUSH_ERR when the QP enters ERR.
    behind_fault: VecDeque<(u64, WcOpcode)>,
    /// Where inline data is copied at post time: a region of the QP's PD, registered at
    /// the first inline request, `max_send_wr` slots of `max_inline_data` bytes.
    inline_pool: Option<Mr>,
    /// Type, CQs and queue depths, as created.
    caps: QpCaps,
    /// The attributes as set by the modifies since RESET (for `query`).
    attr: QpAttr,
    /// A QP on an SRQ went to RESET while filling a receive it took from the SRQ: the
    /// WQE, for the context to give back to the SRQ ([`Qp::take_srq_return`]).
    srq_return: Option<RecvBuf>,
}

impl Qp {
    /// Bounds the bytes this QP keeps in flight to what the peer's receive buffer is
    /// taken to hold (see [`crate::verbs::Context::set_inflight_budget`]); kept across
    /// RESET.
    pub(crate) fn set_inflight_budget(&mut self, bytes: Option<u64>) {
        self.service.set_inflight_budget(bytes);
    }

    /// A QP in RESET. `service` makes the transport's part from the shell's.
    pub(crate) fn new(
        qpn: u32,
        pd: PdId,
        caps: &QpCaps,
        service: impl FnOnce(&QpCore) -> Box<dyn Service>,
    ) -> Self {
        let core = QpCore {
            qpn,
            pd,
            state: QpState::Reset,
            send_cq: caps.send_cq,
            recv_cq: caps.recv_cq,
            max_send_wr: caps.max_send_wr,
            max_recv_wr: caps.max_recv_wr,
            rq: VecDeque::new(),
            srq: None,
            counters: QpCounters::default(),
            timer_started: false,
        };
        let service = service(&core);
        Self {
            core,
            service,
            fault: None,
            behind_fault: VecDeque::new(),
            ud_mtu: Mtu::M1024.bytes(),
            ex: QpInitEx::default(),
            inline_pool: None,
            inline_seq: 0,
            event: None,
            caps: *caps,
            attr: QpAttr::default(),
            drained: false,
            notify_drained: false,
            drained_event: false,
            last_wqe_reached: false,
            srq_return: None,
        }
    }

    /// Sets what [`QpInitEx`] holds, when the QP is created. EINVAL for a
    /// `max_inline_data` above [`MAX_INLINE_DATA`] (rdma_rxe's `rxe_qp_chk_cap`).
    /// The context checked that `ex.srq` exists.
    ///
    /// `max_send_sge` / `max_recv_sge`: EINVAL above [`MAX_SGE`] (`rxe_qp_chk_cap`); 0 is
    /// granted as 1, so that a request of one entry is always possible ([`Qp::query`]
    /// reports the caps granted, as `ibv_create_qp` writes them back into `cap`).
    pub(crate) fn set_init_ex(&mut self, mut ex: QpInitEx) -> Result<(), VerbsError> {
        if ex.max_inline_data > MAX_INLINE_DATA {
            return Err(VerbsError::InvalidWr(
                "max_inline_data above the device's limit (512)",
            ));
        }
        if ex.max_send_sge > MAX_SGE || ex.max_recv_sge > MAX_SGE {
            return Err(VerbsError::InvalidWr(
                "max_send_sge or max_recv_sge above the device's limit (32)",
            ));
        }
        ex.max_send_sge = ex.max_send_sge.max(1);
        ex.max_recv_sge = ex.max_recv_sge.max(1);
        self.ex = ex;
        self.core.srq = ex.srq;
        Ok(())
    }

    /// The shared receive queue the QP takes its receives from.
    pub(crate) fn srq(&self) -> Option<SrqId> {
        self.core.srq
    }

    /// The SRQ receive the QP was filling when it went to RESET, to give back to its SRQ.
    pub(crate) fn take_srq_return(&mut self) -> Option<RecvBuf> {
        self.srq_return.take()
    }

    /// Whether the QP, on an SRQ, entered ERR since the last call: the context raises
    /// IBV_EVENT_QP_LAST_WQE_REACHED for it ([`Qp::flush`]).
    pub(crate) fn take_last_wqe_reached(&mut self) -> bool {
        std::mem::take(&mut self.last_wqe_reached)
    }

    /// The post-time checks of the flags and caps that every service shares, done before
    /// anything is queued (EINVAL, as rdma_rxe's `validate_send_wr`): inline data longer
    /// than `max_inline_data`.
    fn check_flags(&self, len: u32, flags: SendFlags) -> Result<(), VerbsError> {
        if flags.contains(SendFlags::INLINE) && len > self.ex.max_inline_data {
            return Err(VerbsError::InvalidWr(
                "inline data longer than the QP's max_inline_data",
            ));
        }
        Ok(())
    }

    /// Copies the inline data the entries of `sgl` name, gathered in order, into the
    /// next slot of the QP's inline pool and gives the SGE of that copy, which the
    /// request then sends from: the application may change or free its buffers as soon
    /// as the post returns. Each source is found by address alone ([`Memory::find`]),
    /// its lkey unread, as ibverbs does (rdma_rxe's `copy_inline_data_to_wqe` walks the
    /// SGEs by address). The caller checked the total length `len` against
    /// `max_inline_data` and that the queue has room: with at most `max_send_wr`
    /// requests outstanding and completions in order, the slot taken `max_send_wr`
    /// inline requests ago is free again.
    fn copy_inline(&mut self, mem: &mut Memory, sgl: &[Sge], len: u32) -> Result<Sge, VerbsError> {
        if len == 0 {
            return Ok(Sge::default());
        }
        let len = len as usize;
        let mut tmp = [0u8; MAX_INLINE_DATA as usize];
        let mut at = 0;
        for sge in sgl.iter().filter(|s| s.length > 0) {
            let n = sge.length as usize;
            let src = mem
                .find(sge.addr, u64::from(sge.length))
                .ok_or(VerbsError::InvalidWr(
                    "inline data outside every registered region",
                ))?;
            if !mem.copy_out(src, &mut tmp[at..at + n]) {
                return Err(VerbsError::InvalidWr("inline data's region went away"));
            }
            at += n;
        }
        let slot_len = self.ex.max_inline_data as usize;
        let slots = self.core.max_send_wr.max(1);
        let pool = match self.inline_pool {
            Some(mr) => mr,
            None => {
                let mr = mem.register(self.core.pd, vec![0; slots * slot_len], Access::NONE)?;
                self.inline_pool = Some(mr);
                mr
            }
        };
        let offset = (self.inline_seq % slots as u64) as usize * slot_len;
        self.inline_seq += 1;
        let dst = crate::mem::Span {
            lkey: pool.lkey,
            offset,
            len,
        };
        if !mem.copy_in(dst, &tmp[..len]) {
            return Err(VerbsError::InvalidWr("inline pool went away"));
        }
        Ok(Sge {
            addr: pool.addr + offset as u64,
            length: len as u32,
            lkey: pool.lkey,
        })
    }

    /// Whether a request posted now would be handed to the service (the QP not in ERR
    /// and no local fault ahead of it): only then is its inline data worth copying.
    fn reaches_service(&self) -> bool {
        !self.core.state.flushes_sends() && self.fault.is_none()
    }

    /// Where the service's state lies, for a prefetch hint only (never dereferenced).
    pub(crate) fn service_ptr(&self) -> *const u8 {
        (&*self.service as *const dyn Service).cast()
    }

    /// The state.
    pub(crate) fn state(&self) -> QpState {
        self.core.state
    }

    /// The counters.
    pub(crate) fn counters(&self) -> &QpCounters {
        &self.core.counters
    }

    /// The counters, for those kept outside the transport (ECN, CNPs).
    pub(crate) fn counters_mut(&mut self) -> &mut QpCounters {
        &mut self.core.counters
    }

    /// The QPN `p` comes from: the peer of a connected QP, the sender a UD packet names
    /// in its DETH.
    pub(crate) fn peer_qpn(&self, p: &RocePacket<'_>) -> u32 {
        match self.service.peer() {
            Some(peer) => peer.qpn,
            None => p.ext.deth.map_or(0, |d| d.src_qp),
        }
    }

    /// The QP's type.
    pub(crate) fn qp_type(&self) -> QpType {
        self.caps.qp_type
    }

    /// The modify verb (ibv_modify_qp): moves the QP to `a.qp_state` (IBV_QP_STATE in
    /// `mask`; without it the state stays) and sets the attributes `mask` names. The
    /// change must be in the QP state table for the QP's type with every attribute it
    /// requires and none it does not permit ([`transition::check`], the kernel's
    /// `ib_modify_qp_is_ok`), IBV_QP_CUR_STATE must name the QP's state, and values must
    /// be in range (rdma_rxe's `rxe_qp_chk_attr`: timeout and the RNR timer code at most
    /// 31, the retry counts at most 7, port 1); otherwise EINVAL
    /// ([`VerbsError::BadModify`]) and nothing changes. What each change does:
    /// - → RESET: every queue emptied without a completion, every attribute forgotten
    ///   (rdma_rxe's `rxe_qp_reset`): the QP can be brought up again from INIT;
    /// - → ERR: every outstanding work request completes with WR_FLUSH_ERR;
    /// - RTS → SQD: no new send work request starts; once those in progress complete,
    ///   `AsyncEvent::SqDrained` if asked for (IBV_QP_EN_SQD_ASYNC_NOTIFY). While
    ///   draining only → ERR is taken (rdma_rxe);
    /// - SQD → RTS, SQE → RTS: sending resumes with the requests queued meanwhile;
    /// - INIT → INIT, RTS → RTS, SQD → SQD: the attributes named change.
    ///
    /// Completions made here (flushes) go to `wcs`.
    ///
    /// (See [`Qp::set_inflight_budget`] for the one setting not an attribute.)
    pub(crate) fn modify(
        &mut self,
        a: &QpAttr,
        mask: QpAttrMask,
        wcs: &mut Wcs,
    ) -> Result<(), VerbsError> {
        type M = QpAttrMask;
        let from = self.core.state;
        let to = if mask.contains(M::STATE) {
            a.qp_state
        } else {
            from
        };
        let qpn = self.core.qpn;
        let refuse = |why| VerbsError::BadModify { qpn, from, to, why };
        transition::check(self.caps.qp_type, from, to, mask).map_err(refuse)?;
        if mask.contains(M::CUR_STATE) && a.cur_qp_state != from {
            return Err(refuse(ModifyRefusal::CurState(a.cur_qp_state)));
        }
        if from == QpState::Sqd && to != QpState::Err && self.sq_draining() {
            return Err(refuse(ModifyRefusal::Draining));
        }
        let ranges: [(QpAttrMask, bool, &'static str); 5] = [
            (M::TIMEOUT, a.timeout <= 31, "IBV_QP_TIMEOUT (0..=31)"),
            (M::RETRY_CNT, a.retry_cnt <= 7, "IBV_QP_RETRY_CNT (0..=7)"),
            (M::RNR_RETRY, a.rnr_retry <= 7, "IBV_QP_RNR_RETRY (0..=7)"),
            (
                M::MIN_RNR_TIMER,
                a.min_rnr_timer <= 31,
                "IBV_QP_MIN_RNR_TIMER (0..=31)",
            ),
            (M::PORT, a.port_num == 1, "IBV_QP_PORT (uroce has port 1)"),
        ];
        for (bit, ok, what) in ranges {
            if mask.contains(bit) && !ok {
                return Err(refuse(ModifyRefusal::BadValue(what)));
            }
        }
        let merged = self.attr.merged(a, mask);
        match (from, to) {
            (_, QpState::Reset) => {
                self.reset();
                return Ok(());
            }
            (_, QpState::Err) => self.flush(wcs),
            (QpState::Reset, QpState::Init) => self.service.init(&self.core, &merged.init_attr()),
            (QpState::Init, QpState::Rtr) => {
                let opt = mask.and(M::ACCESS_FLAGS | M::PKEY_INDEX | M::QKEY);
                self.service.set(&self.core, &merged, opt);
                if let Some(service) = self.service.connected() {
                    service.rtr(&self.core, &merged.rtr_attr());
                } else if let Some(service) = self.service.datagram() {
                    service.rtr(merged.path_mtu);
                    self.ud_mtu = merged.path_mtu.bytes();
                }
            }
            (QpState::Rtr, QpState::Rts) => {
                let opt = mask.and(M::ACCESS_FLAGS | M::MIN_RNR_TIMER | M::QKEY);
                self.service.set(&self.core, &merged, opt);
                self.service.rts(&merged.rts_attr());
            }
            (QpState::Rts, QpState::Sqd) => {
                self.service.set_draining(true);
                self.drained = false;
                self.drained_event = false;
                self.notify_drained =
                    mask.contains(M::EN_SQD_ASYNC_NOTIFY) && a.en_sqd_async_notify;
            }
            (QpState::Sqd, QpState::Rts) => {
                self.service.set(&self.core, &merged, mask);
                self.service.set_draining(false);
            }
            _ => self.service.set(&self.core, &merged, mask),
        }
        self.attr = merged;
        self.core.state = to;
        self.check_drained();
        Ok(())
    }

    /// The query verb (ibv_query_qp): the state, the attributes as set, whether SQD is
    /// still draining (`sq_draining`, as rdma_rxe's `rxe_qp_to_attr` reports it), and
    /// what the QP was created with.
    pub(crate) fn query(&self) -> (QpAttr, QpInitAttr) {
        let mut a = self.attr;
        a.qp_state = self.core.state;
        a.cur_qp_state = self.core.state;
        a.sq_draining = self.sq_draining();
        if self.caps.qp_type == QpType::Gsi {
            a.qkey = super::ud::GSI_QKEY;
        }
        let init = QpInitAttr {
            caps: self.caps,
            ex: self.ex,
        };
        (a, init)
    }

    /// In SQD with send work requests still in progress.
    fn sq_draining(&self) -> bool {
        self.core.state == QpState::Sqd && !self.drained
    }

    /// In SQD, notes when the last send work request in progress has completed, and
    /// raises IBV_EVENT_SQ_DRAINED once if asked for (rdma_rxe's completer and requester
    /// move QP_STATE_DRAIN to QP_STATE_DRAINED and raise it when nothing is left in
    /// flight).
    fn check_drained(&mut self) {
        if self.sq_draining() && !self.service.send_in_progress() {
            self.drained = true;
            self.drained_event = self.notify_drained;
        }
    }

    /// Any state → RESET: the service as new, the receive queue and the shell's own
    /// queues emptied without completions, every attribute forgotten (rdma_rxe's
    /// `rxe_qp_reset` empties the queues and clears what the modifies set). The counters
    /// and the inline pool stay.
    ///
    /// A receive being filled goes with the receive queue when it is the QP's own; one
    /// taken from an SRQ belongs to the SRQ and is kept for the context to give back
    /// ([`Qp::take_srq_return`]), so no WQE of a shared queue is lost.
    fn reset(&mut self) {
        let receiving = self.service.take_receiving();
        if self.core.srq.is_some() {
            self.srq_return = receiving;
        }
        self.service.reset(&self.core);
        self.core.rq.clear();
        self.core.state = QpState::Reset;
        self.fault = None;
        self.behind_fault.clear();
        self.ud_mtu = Mtu::M1024.bytes();
        self.inline_seq = 0;
        self.event = None;
        self.attr = QpAttr::default();
        self.drained = false;
        self.notify_drained = false;
        self.drained_event = false;
    }

    /// Any state → ERR: every outstanding work request completes with WR_FLUSH_ERR, in
    /// order, sends first (IBTA §10.3.1; IBV_WC_WR_FLUSH_ERR).
    pub(crate) fn enter_err(&mut self, io: &mut Io<'_>) {
        self.flush(io.wcs);
    }

    /// Its CQ overran: the QP goes to ERR, flushing what is outstanding (into CQs that
    /// may be in error and lose them), and sends none of the responses it had queued.
    /// `false` if it was in ERR already.
    pub(crate) fn enter_err_overrun(&mut self, wcs: &mut Wcs) -> bool {
        if self.core.state == QpState::Err {
            return false;
        }
        self.service.discard_responses();
        self.flush(wcs);
        true
    }

    /// The send and receive CQs.
    pub(crate) fn cqs(&self) -> (CqId, CqId) {
        (self.core.send_cq, self.core.recv_cq)
    }

    /// Whether an affiliated asynchronous event is due ([`Qp::take_event`], or the last
    /// WQE reached): a flag test, so the per-packet paths ask the rest only when needed.
    #[inline]
    pub(crate) fn events_due(&self) -> bool {
        self.event.is_some() || self.drained_event || self.last_wqe_reached
    }

    /// The next affiliated asynchronous event due: the error raised by the last packet,
    /// then IBV_EVENT_SQ_DRAINED. Called until `None`.
    pub(crate) fn take_event(&mut self) -> Option<QpErrorEvent> {
        if let Some(e) = self.event.take() {
            return Some(e);
        }
        std::mem::take(&mut self.drained_event).then_some(QpErrorEvent::SqDrained)
    }

    /// [`Qp::enter_err`] with only the completions at hand. A flushed work request
    /// completes whether it was signaled or not (rdma_rxe's `flush_send_queue` completes
    /// every WQE it drains, whatever its flags).
    ///
    /// A QP on an SRQ flushes only what it took from the SRQ (the message it was
    /// receiving); the SRQ's WQEs stay for its other QPs, and entering ERR raises
    /// IBV_EVENT_QP_LAST_WQE_REACHED: no WQE of the SRQ will be consumed by this QP any
    /// more (IBTA §10.3.1 and §11.5.2, "Last WQE Reached"; rdma_rxe's
    /// `flush_recv_queue` raises it for a QP with an SRQ and leaves the SRQ alone).
    fn flush(&mut self, wcs: &mut Wcs) {
        if self.core.srq.is_some() && self.core.state != QpState::Err {
            self.last_wqe_reached = true;
        }
        self.core.state = QpState::Err;
        self.service.set_draining(false);
        self.flush_send(wcs);
        let QpCore { qpn, recv_cq, .. } = self.core;
        let peer = self.service.peer();
        let receiving = self.service.take_receiving();
        for r in receiving.into_iter().chain(self.core.rq.drain(..)) {
            let status = WcStatus::WrFlushErr;
            let wc = WorkCompletion::recv(qpn, r.wr_id, status, WcOpcode::Recv, 0, None, peer);
            wcs.push((recv_cq, wc));
        }
    }

    /// Completes every outstanding send work request with WR_FLUSH_ERR, in order.
    fn flush_send(&mut self, wcs: &mut Wcs) {
        let QpCore { qpn, send_cq, .. } = self.core;
        let flushed = |wr_id, opcode| {
            let wc = WorkCompletion::send(qpn, wr_id, opcode, 0, WcStatus::WrFlushErr);
            (send_cq, wc)
        };
        self.service
            .flush_send(&mut |wr_id, opcode| wcs.push(flushed(wr_id, opcode)));
        // A local fault still waiting for those ahead of it is flushed with them.
        let fault = self.fault.take().map(|f| (f.wr_id, f.opcode));
        for (wr_id, opcode) in fault.into_iter().chain(self.behind_fault.drain(..)) {
            wcs.push(flushed(wr_id, opcode));
        }
    }

    /// Whether a work request the QP may still read or write the region `lkey` for has
    /// its buffer in it: the receive a message is being placed in, or a send the service
    /// holds (its buffer or, for inline data, the copy in the QP's pool). A request
    /// waiting as or behind a local fault never reaches its buffer and does not count;
    /// nor does a receive still on the receive queue, whose keys are looked up again
    /// when a message starts to use it (a region gone by then fails it, as a NIC's lkey
    /// check does). What `Context::dereg_mr` asks every QP before it lets a region go
    /// (EBUSY).
    pub(crate) fn refers_to(&self, lkey: u32) -> bool {
        self.service.refers_to(lkey)
    }

    /// Send work requests the service holds (posted and not yet completed).
    fn service_send_queued(&mut self) -> usize {
        if let Some(c) = self.service.connected() {
            c.send_queued()
        } else if let Some(d) = self.service.datagram() {
            d.send_queued()
        } else {
            0
        }
    }

    /// Send work requests posted and not yet completed, the shell's own included.
    fn send_queued(&mut self) -> usize {
        self.service_send_queued() + usize::from(self.fault.is_some()) + self.behind_fault.len()
    }

    /// How many more send work requests the send queue takes now (`max_send_wr` less
    /// those posted and not completed).
    pub(crate) fn send_room(&mut self) -> usize {
        let queued = self.send_queued();
        self.core.max_send_wr.saturating_sub(queued)
    }

    /// Completes a local fault once every request posted before it has completed: it
    /// completes with its status (byte_len 0, as rdma_rxe's `make_send_cqe` sets it for
    /// an error), then what is behind it is flushed. A completion error always
    /// completes, signaled or not (`do_complete` posts any WQE whose status is not
    /// success).
    ///
    /// RC: the QP enters ERR and flushes its send and receive queues (IBTA §10.3.1 /
    /// §11.6.2: a local error moves the QP to ERR; rdma_rxe: the requester marks the WQE
    /// in error, the completer completes it in order and calls `rxe_qp_error`).
    ///
    /// UC and UD: the QP enters SQE, as IBTA §10.3.1 has it for a send-side error of an
    /// unreliable service ("Send Queue Error": the send queue is flushed, the receive
    /// queue goes on working, SQE → RTS resumes) and as mlx5 does (its SQER state).
    /// rdma_rxe never enters SQE (`rxe_qp_from_attr`: "Not possible from modify_qp"):
    /// it takes every type to ERR, which would needlessly flush the receives of a
    /// service whose receive side has nothing to do with the send that failed.
    #[inline]
    fn settle_fault(&mut self, wcs: &mut Wcs) {
        if self.fault.is_none() || self.service_send_queued() > 0 {
            return;
        }
        if let Some(f) = self.fault.take() {
            let wc = WorkCompletion::send(self.core.qpn, f.wr_id, f.opcode, 0, f.status);
            wcs.push((self.core.send_cq, wc));
        }
        if self.caps.qp_type == QpType::Rc {
            self.flush(wcs);
        } else {
            self.service.set_draining(false);
            self.flush_send(wcs);
            self.core.state = QpState::Sqe;
        }
    }

    /// What every send work request goes through once the service has taken it as valid
    /// ([`Admit::Service`] with the resolved buffer: hand it to the service): the queue
    /// depth (ENOMEM), then, in ERR or SQE, a WR_FLUSH_ERR completion at once; behind a local
    /// fault, a place among the requests it will flush; otherwise the local check of its
    /// buffer, which on failure makes it the QP's local fault. `local` is `None` where
    /// there is no buffer to check (a UD datagram longer than the MTU, which the service
    /// completes LOC_LEN_ERR).
    fn admit_send(
        &mut self,
        mem: &Memory,
        wr_id: u64,
        opcode: WcOpcode,
        local: Option<(&[Sge], Access)>,
        wcs: &mut Wcs,
    ) -> Result<Admit, VerbsError> {
        let queued = self.send_queued();
        self.core.send_room(queued)?;
        if self.core.state.flushes_sends() {
            let wc = WorkCompletion::send(self.core.qpn, wr_id, opcode, 0, WcStatus::WrFlushErr);
            wcs.push((self.core.send_cq, wc));
            return Ok(Admit::Settled);
        }
        if self.fault.is_some() {
            self.behind_fault.push_back((wr_id, opcode));
            return Ok(Admit::Settled);
        }
        let Some((list, need)) = local else {
            return Ok(Admit::Service(Local::Empty));
        };
        match sgl::send_local(mem, self.core.pd, list, need) {
            Ok(span) => Ok(Admit::Service(span)),
            Err(status) => {
                self.fault = Some(LocalFault {
                    wr_id,
                    opcode,
                    status,
                });
                self.settle_fault(wcs);
                Ok(Admit::Settled)
            }
        }
    }

    /// Posts a send work request on a connected QP (RC, UC). In ERR it completes with
    /// WR_FLUSH_ERR; a buffer outside its region completes with LOC_PROT_ERR and takes
    /// the QP to ERR ([`Qp::settle_fault`]). Completions made here go to `wcs`.
    ///
    /// `flags`: IBV_SEND_FENCE goes to the service; IBV_SEND_INLINE copies the data now
    /// ([`Qp::copy_inline`]) on SEND and WRITE, and is ignored on READ and atomics (as
    /// rdma_rxe's `init_send_wqe` ignores it), though its length is still checked against
    /// `max_inline_data` (`validate_send_wr`). With `sq_sig_all` every request is signaled.
    pub(crate) fn post_send(
        &mut self,
        mem: &mut Memory,
        wr: SendWr,
        flags: SendFlags,
        wcs: &mut Wcs,
    ) -> Result<(), VerbsError> {
        let sge = wr.sge;
        self.post_send_sgl(mem, wr, &[sge], flags, wcs)
    }

    /// [`Qp::post_send`] with the local buffer as the scatter/gather list `list`
    /// (`wr.sge` is replaced): EINVAL for more entries than the QP's `max_send_sge`
    /// (rdma_rxe's `validate_send_wr`); the message is the entries' bytes in order, each
    /// entry checked at post time as a single one is (a bad one: LOC_PROT_ERR, nothing
    /// sent); inline data is gathered from every entry.
    pub(crate) fn post_send_sgl(
        &mut self,
        mem: &mut Memory,
        mut wr: SendWr,
        list: &[Sge],
        flags: SendFlags,
        wcs: &mut Wcs,
    ) -> Result<(), VerbsError> {
        let Some(service) = self.service.connected() else {
            return Err(VerbsError::InvalidWr("a UD QP takes post_send_ud"));
        };
        self.core.may_post_send()?;
        service.check_op(wr.op)?;
        sgl::check_count(
            list,
            self.ex.max_send_sge,
            "more SGEs than the QP's max_send_sge",
        )?;
        let len = sgl::total_len(list)?;
        if list.len() != 1 {
            // The services read the message length from `wr.sge.length`.
            wr.sge = Sge {
                length: len,
                ..Sge::default()
            };
        }
        if len > 1 << 31 {
            return Err(VerbsError::InvalidWr("message longer than 2^31 bytes"));
        }
        let Some(service) = self.service.connected() else {
            return Err(VerbsError::InvalidWr("a UD QP takes post_send_ud"));
        };
        service.check_wr(&wr)?;
        self.check_flags(len, flags)?;
        if self.ex.sq_sig_all {
            wr.signaled = true;
        }
        let inline;
        let mut list = list;
        if flags.contains(SendFlags::INLINE) && !wr.op.is_read_or_atomic() {
            let queued = self.send_queued();
            self.core.send_room(queued)?;
            if self.reaches_service() {
                wr.sge = self.copy_inline(mem, list, len)?;
                inline = [wr.sge];
                list = &inline;
            }
        }
        // READ and atomics write their answer into the local buffer; BIND_MW and
        // LOCAL_INV have none (ibverbs does not look at their SGEs).
        let local = if wr.op.is_read_or_atomic() {
            Some((list, Access::LOCAL_WRITE))
        } else if wr.op.is_local() {
            None
        } else {
            Some((list, Access::NONE))
        };
        let Admit::Service(local) =
            self.admit_send(mem, wr.wr_id, wr.op.wc_opcode(), local, wcs)?
        else {
            return Ok(());
        };
        if let Some(service) = self.service.connected() {
            service.post_send(&self.core, wr, flags, local);
        }
        Ok(())
    }

    /// Posts a datagram on a UD QP. In ERR it completes with WR_FLUSH_ERR; a buffer
    /// outside its region completes with LOC_PROT_ERR and takes the QP to ERR.
    ///
    /// A datagram longer than the MTU is left to the service, which completes it with
    /// LOC_LEN_ERR in order and sends nothing; the QP stays in RTS. rdma_rxe does not
    /// take the QP to ERR for it either: citing C10-93.1.1 ("the CI shall not emit any
    /// packets for this message ... shall not generate an error"), its requester
    /// completes it as a successful send (`rxe_req.c`, "fake a successful UD send").
    ///
    /// `flags` as for [`Qp::post_send`] (IBV_SEND_FENCE means nothing on UD).
    pub(crate) fn post_send_ud(
        &mut self,
        mem: &mut Memory,
        wr: UdSendWr,
        flags: SendFlags,
        wcs: &mut Wcs,
    ) -> Result<(), VerbsError> {
        let sge = wr.sge;
        self.post_send_ud_sgl(mem, wr, &[sge], flags, wcs)
    }

    /// [`Qp::post_send_ud`] with the datagram's bytes gathered from the entries of
    /// `list` in order (`wr.sge` is replaced); EINVAL above `max_send_sge`.
    pub(crate) fn post_send_ud_sgl(
        &mut self,
        mem: &mut Memory,
        mut wr: UdSendWr,
        list: &[Sge],
        flags: SendFlags,
        wcs: &mut Wcs,
    ) -> Result<(), VerbsError> {
        if self.service.datagram().is_none() {
            return Err(VerbsError::InvalidWr("post_send_ud is for UD QPs"));
        }
        self.core.may_post_send()?;
        sgl::check_count(
            list,
            self.ex.max_send_sge,
            "more SGEs than the QP's max_send_sge",
        )?;
        let len = sgl::total_len(list)?;
        if list.len() != 1 {
            // The service reads the datagram's length from `wr.sge.length`.
            wr.sge = Sge {
                length: len,
                ..Sge::default()
            };
        }
        self.check_flags(len, flags)?;
        if self.ex.sq_sig_all {
            wr.signaled = true;
        }
        let inline;
        let mut list = list;
        if flags.contains(SendFlags::INLINE) && len <= self.ud_mtu {
            let queued = self.send_queued();
            self.core.send_room(queued)?;
            if self.reaches_service() {
                wr.sge = self.copy_inline(mem, list, len)?;
                inline = [wr.sge];
                list = &inline;
            }
        }
        let local = (len <= self.ud_mtu).then_some((list, Access::NONE));
        let Admit::Service(local) = self.admit_send(mem, wr.wr_id, WcOpcode::Send, local, wcs)?
        else {
            return Ok(());
        };
        if let Some(service) = self.service.datagram() {
            service.post_send(&self.core, wr, local);
        }
        Ok(())
    }

    /// Posts a receive work request; its buffer should lie in a region of the QP's PD
    /// that grants LOCAL_WRITE (one that does not fails the message that uses it). In ERR it completes at once with WR_FLUSH_ERR (to `wcs`).
    /// Refused (EINVAL) on a QP with an SRQ, which has no receive queue of its own
    /// (rdma_rxe's `rxe_post_recv` refuses it with EINVAL).
    pub(crate) fn post_recv(
        &mut self,
        mem: &Memory,
        wr: RecvWr,
        wcs: &mut Wcs,
    ) -> Result<(), VerbsError> {
        self.post_recv_sgl(mem, wr.wr_id, &[wr.sge], wcs)
    }

    /// [`Qp::post_recv`] with the buffer as the scatter/gather list `list`: EINVAL for
    /// more entries than the QP's `max_recv_sge` (rdma_rxe's `post_one_recv`); a bad
    /// entry is taken and fails the message that uses it ([`RecvBuf::check_sgl`]); a
    /// message is scattered over the entries in order.
    pub(crate) fn post_recv_sgl(
        &mut self,
        mem: &Memory,
        wr_id: u64,
        list: &[Sge],
        wcs: &mut Wcs,
    ) -> Result<(), VerbsError> {
        if self.core.srq.is_some() {
            return Err(VerbsError::InvalidWr(
                "the QP takes its receives from an SRQ: use post_srq_recv",
            ));
        }
        if !self.core.state.takes_receives() {
            return Err(self.core.bad_state("post_recv"));
        }
        if self.core.rq.len() >= self.core.max_recv_wr {
            return Err(VerbsError::QueueFull("receive"));
        }
        sgl::check_count(
            list,
            self.ex.max_recv_sge,
            "more SGEs than the QP's max_recv_sge",
        )?;
        let r = RecvBuf::check_sgl(mem, self.core.pd, wr_id, list)?;
        if self.core.state == QpState::Err {
            let peer = self.service.peer();
            let status = WcStatus::WrFlushErr;
            let wc = WorkCompletion::recv(
                self.core.qpn,
                r.wr_id,
                status,
                WcOpcode::Recv,
                0,
                None,
                peer,
            );
            wcs.push((self.core.recv_cq, wc));
            return Ok(());
        }
        self.core.rq.push_back(r);
        Ok(())
    }

    /// [`Service::placement`], in a state that takes packets.
    pub(crate) fn placement(&self, p: &RocePacket<'_>) -> Option<Span> {
        if !self.core.state.receives() {
            return None;
        }
        self.service.placement(&self.core, p)
    }

    /// Handles a packet addressed to this QP (ICRC already verified).
    pub(crate) fn on_packet(&mut self, io: &mut Io<'_>, p: &RocePacket<'_>) {
        if !self.core.state.receives() {
            self.core.counters.dropped += 1;
            return;
        }
        if self.service.on_packet(&mut self.core, io, p).is_err() {
            self.event = self.service.take_error_event();
            self.enter_err(io);
        }
        self.settle_fault(io.wcs);
        self.check_drained();
    }

    /// Handles a packet addressed to this QP whose ICRC verified but whose transport
    /// header breaks the opcode table ([`crate::wire::Misfit`]).
    pub(crate) fn on_misfit(&mut self, io: &mut Io<'_>, m: &Misfit) {
        if !self.core.state.receives() {
            self.core.counters.dropped += 1;
            return;
        }
        if self.service.on_misfit(&mut self.core, io, m).is_err() {
            self.event = self.service.take_error_event();
            self.enter_err(io);
        }
    }

    /// The next packet to send: responses first (ACKs must not wait behind bulk
    /// requests), then, in RTS (and in SQD for the requests in progress), requests.
    pub(crate) fn next_packet(&mut self, io: &mut Io<'_>) -> Option<OutPacket> {
        let mut p = self.service.next_response();
        if p.is_none() && self.core.state.sends() {
            p = self.service.next_request(&mut self.core, io);
            // A failed local operation stops the requests (no packet): asked only then,
            // so that a packet going out costs no call.
            if p.is_none() {
                self.local_error(io);
            }
        }
        if p.is_some() {
            self.core.counters.packets_sent += 1;
        }
        self.settle_fault(io.wcs);
        self.check_drained();
        p
    }

    /// Whether another request packet may follow the one just sent at once
    /// ([`Service::has_more`]).
    #[inline]
    pub(crate) fn has_more(&self) -> bool {
        self.service.has_more()
    }

    /// Enters ERR if a work request the service executed itself failed
    /// ([`Service::take_local_error`]). Out of line: the send path does not carry it.
    #[inline(never)]
    fn local_error(&mut self, io: &mut Io<'_>) {
        if self.service.take_local_error().is_some() {
            self.enter_err(io);
        }
    }

    /// Whether [`Qp::poll_timeout`] may have come earlier since the last call, through a
    /// timer the service started giving a request packet ([`QpCore::timer_started`]);
    /// clears the flag. A packet that starts no timer cannot move the time earlier:
    /// the caller then need not ask for it.
    #[inline]
    pub(crate) fn take_timer_started(&mut self) -> bool {
        std::mem::take(&mut self.core.timer_started)
    }

    /// When [`Qp::on_timeout`] wants to be called next.
    pub(crate) fn poll_timeout(&self) -> Option<Instant> {
        self.core
            .state
            .sends()
            .then(|| self.service.poll_timeout())
            .flatten()
    }

    /// Fires the timers that are due.
    pub(crate) fn on_timeout(&mut self, io: &mut Io<'_>) {
        if !self.core.state.sends() {
            return;
        }
        if self.service.on_timeout(&mut self.core, io).is_err() {
            self.enter_err(io);
        }
        self.settle_fault(io.wcs);
        self.check_drained();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::ud::UdQp;

    #[test]
    fn what_each_state_allows_follows_the_state_diagram() {
        // (state, packets taken, requests sent, sends posted, posted sends flushed):
        // IBTA §10.3.1, and ibverbs' posting rules (rdma_rxe refuses a post only before
        // INIT / RTS).
        use QpState::*;
        let table = [
            (Reset, false, false, false, false),
            (Init, false, false, false, false),
            (Rtr, true, false, false, false),
            (Rts, true, true, true, false),
            (Sqd, true, true, true, false),
            (Sqe, true, false, true, true),
            (Err, false, false, true, true),
        ];
        for (s, receives, sends, takes, flushes) in table {
            assert_eq!(s.receives(), receives, "{s:?}");
            assert_eq!(s.sends(), sends, "{s:?}");
            assert_eq!(s.takes_sends(), takes, "{s:?}");
            assert_eq!(s.flushes_sends(), flushes, "{s:?}");
            assert_eq!(s.takes_receives(), s != Reset, "{s:?}");
        }
    }

    /// A UD QP shell with one region of 4 KiB granting LOCAL_WRITE.
    fn ud() -> (Qp, Memory, Mr) {
        let mut mem = Memory::new(7);
        let pd = mem.alloc_pd();
        let mr = mem
            .register(pd, vec![0; 4096], Access::LOCAL_WRITE)
            .unwrap();
        let caps = QpCaps {
            qp_type: QpType::Ud,
            send_cq: CqId(0),
            recv_cq: CqId(0),
            max_send_wr: 4,
            max_recv_wr: 4,
        };
        let qp = Qp::new(0x11, pd, &caps, |core| Box::new(UdQp::new(core)));
        (qp, mem, mr)
    }

    fn to(s: QpState) -> QpAttr {
        QpAttr {
            qp_state: s,
            qkey: 0x22,
            ..QpAttr::default()
        }
    }

    const INIT: QpAttrMask = QpAttrMask::STATE
        .union(QpAttrMask::PKEY_INDEX)
        .union(QpAttrMask::PORT)
        .union(QpAttrMask::QKEY);

    #[test]
    fn reset_drops_the_queues_without_completions_and_forgets_the_attributes() {
        let (mut qp, mem, mr) = ud();
        let mut wcs = Wcs::new();
        qp.modify(&to(QpState::Init), INIT, &mut wcs).unwrap();
        assert_eq!(qp.query().0.qkey, 0x22);
        let sge = Sge {
            addr: mr.addr,
            length: 64,
            lkey: mr.lkey,
        };
        qp.post_recv(&mem, RecvWr { wr_id: 1, sge }, &mut wcs)
            .unwrap();
        qp.modify(&to(QpState::Reset), QpAttrMask::STATE, &mut wcs)
            .unwrap();
        assert!(wcs.is_empty(), "RESET completes nothing");
        assert!(qp.core.rq.is_empty());
        let (a, _) = qp.query();
        assert_eq!((a.qp_state, a.qkey), (QpState::Reset, 0));
        assert!(matches!(
            qp.post_recv(&mem, RecvWr { wr_id: 2, sge }, &mut wcs),
            Err(VerbsError::BadState { .. })
        ));
        // And up again.
        qp.modify(&to(QpState::Init), INIT, &mut wcs).unwrap();
        qp.post_recv(&mem, RecvWr { wr_id: 3, sge }, &mut wcs)
            .unwrap();
        assert_eq!(qp.core.rq.len(), 1);
    }

    #[test]
    fn a_refused_modify_changes_nothing() {
        let (mut qp, _mem, _mr) = ud();
        let mut wcs = Wcs::new();
        let e = qp
            .modify(&to(QpState::Init), QpAttrMask::STATE, &mut wcs)
            .unwrap_err();
        assert_eq!(
            e,
            VerbsError::BadModify {
                qpn: 0x11,
                from: QpState::Reset,
                to: QpState::Init,
                why: ModifyRefusal::Missing(
                    QpAttrMask::PKEY_INDEX | QpAttrMask::PORT | QpAttrMask::QKEY
                ),
            }
        );
        assert_eq!(
            e.to_string(),
            "QP 0x11: modify Reset -> Init refused: required attributes missing: \
             IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY"
        );
        assert_eq!(qp.state(), QpState::Reset);
        let unset = QpAttr {
            qp_state: QpState::Reset,
            cur_qp_state: QpState::Reset,
            ..QpAttr::default()
        };
        assert_eq!(qp.query().0, unset);
        let bad_port = QpAttr {
            port_num: 2,
            ..to(QpState::Init)
        };
        assert!(matches!(
            qp.modify(&bad_port, INIT, &mut wcs),
            Err(VerbsError::BadModify {
                why: ModifyRefusal::BadValue(_),
                ..
            })
        ));
        assert_eq!(qp.state(), QpState::Reset);
    }
}
