//! The RC requester (IBTA §9.7.4 and the completer of §9.7.5.1): cuts work requests into
//! packets, numbers them, retransmits go-back-N on timeout or NAK, waits on RNR NAKs,
//! takes READ and atomic responses into local memory, and completes work requests in order.
//!
//! Loss recovery has two clocks. The local ACK timeout (IBTA §9.7.6.1.3, the QP's
//! `timeout`) is the one the spec counts: it spends the retry count and ends in
//! RETRY_EXC_ERR. A second, shorter one runs beside it while a packet sent is
//! unacknowledged (from the last response that moved `una`, or the first packet sent
//! after all were answered): the recovery probe. When no response has moved `una` for a
//! while, the requester goes back to `una` as the timeout would, without spending a
//! retry. How long it waits ([`Requester::probe_wait`]): inside a loss episode or on a
//! QP that lost something lately ([`LOSSY_HOLD`]: the QP's requester or its responder
//! saw it), [`PROBE_RTTS`] smoothed round trips; on a clean QP, or before a round trip
//! was measured, an eighth of the ACK timeout, at least 10 ms and at most half the
//! timeout ([`CLEAN_PROBE_SHARE`]):
//!
//! - inside a loss episode (after a sequence NAK or a timeout, until `una` passes what
//!   had been sent when it began) it resends from there on. A window of a few PSNs at
//!   heavy loss otherwise stalls whenever the responder's one sequence NAK (§9.7.5.2.2:
//!   one per sequence error) is lost, and waits out the whole timeout, a thousand round
//!   trips on a LAN, for each;
//! - outside one it is a tail probe: one packet, the one at `una`, asking for an ACK,
//!   and nothing more until a response comes (RFC 8985's tail loss probe, in go-back-N's
//!   terms). A loss with nothing sent behind it (the last packets of a burst, a READ
//!   request, the ACK of the last packet) raises no sequence NAK, and neither does a
//!   NAK the network delivered after a later ACK (the requester drops it as stale); each
//!   cost a whole timeout (`uroce sim --loss 0.01`: 7 to 11 timeouts, half the run's
//!   time). The answer says which it was ([`Requester::tail_probe_answered`]): an ACK
//!   of everything (only an ACK was lost: one duplicate spent), a sequence NAK, or an
//!   ACK short of what was sent (the responder lacked the PSN after it; or, sooner than
//!   half a round trip after the probe, a late answer to an earlier packet): go-back-N
//!   from there and a cut as for a NAK, unless another response moves `una` within the
//!   confirming wait, as the late ACKs of a receiver that stalled do. An ACK that moves
//!   nothing (the answer to a duplicate: the path is alive, draining copies sent
//!   before) puts the tail probe off.
//!
//! Resending early is safe: the responder takes a duplicate as §9.7.5.2.2 asks (re-ACKs
//! it, replays a READ or an atomic from its replay state).

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use super::{Fatal, Io, OutPacket, Path, QpCounters};
use crate::mem::{BindRequest, Memory, PdId, Span};
use crate::transport::{
    ack_timeout, rnr_timer_us, CqId, RtsAttr, SendOp, SendWr, VerbsError, WcOpcode, WcStatus,
    WorkCompletion,
};
use crate::transport::{message_packet, psn_add, psn_diff, Local, Payload};
use crate::wire::{
    AtomicEthRepr, BthRepr, ExtHeaders, NakCode, Opcode, RethRepr, RocePacket, Syndrome,
};

/// Largest message (IBTA: 2^31 bytes).
const MAX_MESSAGE: u32 = 1 << 31;
/// Largest number of PSNs in flight; far below the 2^23 the spec allows, enough for a
/// few MB in flight at 4 KiB MTU.
pub const MAX_INFLIGHT_PSNS: u32 = 2048;
/// The in-flight limit never shrinks below this.
const MIN_INFLIGHT_PSNS: u32 = 8;
/// Ask for an ACK at least this often inside long messages.
const ACKREQ_EVERY: i32 = 32;
/// The recovery probe waits this many smoothed round trips without progress...
const PROBE_RTTS: u32 = 4;
/// ... and never less than this (a round trip measured on an idle loopback is a few
/// microseconds; scheduling noise is larger).
const MIN_PROBE_WAIT: Duration = Duration::from_micros(20);
/// Probes in a row without progress, each waiting twice as long as the one before; then
/// only the local ACK timeout runs until a response moves `una` again. An ACK timeout
/// that begins a loss episode gives it its probes again, and each later timeout of the
/// episode one, the longest: a peer that is gone costs one go-back-N more a timeout, not
/// one per round trip. The wait never exceeds half the local ACK timeout, which stays
/// the one that counts retries.
const MAX_PROBES: u8 = 3;
/// A QP counts as lossy for this long after a loss (a sequence NAK, a missing READ
/// response, a timeout, a tail probe answered, a request its responder took out
/// of sequence or twice; not an RNR NAK, which says the receiver had no buffer; see the
/// module's doc), and its recovery probe waits a few round trips. A clean QP's waits
/// [`CLEAN_PROBE_SHARE`] of the ACK timeout: a receiver that stalls (a shared 2-core
/// machine, `uroce demo` on loopback) made a clean QP probing after a few round trips
/// resend spuriously, and each such probe was a time in the context's timer heap that
/// came due while the message was still in flight (one per message cost a clean path
/// with 10,000 QPs taking turns 8% more instructions a message, `examples/many_qps`).
const LOSSY_HOLD: Duration = Duration::from_secs(1);
/// A clean QP's recovery probe waits this share of the local ACK timeout (an eighth:
/// 537 ms at NCCL's `timeout` 20), at least [`CLEAN_PROBE_MIN_WAIT`], then twice that,
/// and so on up to [`MAX_PROBES`] (never more than half the timeout): a lost tail or a
/// lost sequence NAK on a QP that never lost anything before costs that much, not the
/// whole timeout.
const CLEAN_PROBE_SHARE: u32 = 8;
/// ... and never less than this, as TCP's loss probe draft floors its probe timeout
/// (draft-dukkipati-tcpm-tcp-loss-probe): a receiver that stalls for less (a process
/// descheduled on a loaded host) sees no spurious resend.
const CLEAN_PROBE_MIN_WAIT: Duration = Duration::from_millis(10);
/// A clean QP's first recovery probe wait for an ACK timeout of `t`: [`CLEAN_PROBE_SHARE`]
/// of it, at least [`CLEAN_PROBE_MIN_WAIT`], at most half of it.
fn clean_probe_wait(t: Duration) -> Duration {
    (t / CLEAN_PROBE_SHARE).max(CLEAN_PROBE_MIN_WAIT).min(t / 2)
}

/// One packet asking for an ACK in this many is timed for the smoothed round trip.
const RTT_EVERY: u8 = 16;

#[derive(Debug, Clone)]
struct Wqe {
    wr: SendWr,
    /// The local buffer: its length is `wr.sge.length`.
    local: Local,
    /// IBV_SEND_FENCE: not started while a READ or atomic before it is outstanding.
    fence: bool,
    first_psn: u32,
    npkts: u32,
    /// READ: next response PSN expected; ATOMIC: its PSN until the ACK arrives.
    next_resp: u32,
    done: bool,
    status: Option<WcStatus>,
}

impl Wqe {
    fn last_psn(&self) -> u32 {
        psn_add(self.first_psn, self.npkts - 1)
    }
    fn end_psn(&self) -> u32 {
        psn_add(self.first_psn, self.npkts)
    }
    fn contains(&self, psn: u32) -> bool {
        let d = psn_diff(psn, self.first_psn);
        d >= 0 && (d as u32) < self.npkts
    }
}

/// Requester state of one QP. `repr(C)`: what sending a packet and taking an ACK read
/// (the send queue, the PSNs, the window, the timers) first, the rest after.
#[derive(Debug, Default)]
#[repr(C)]
pub(crate) struct Requester {
    sq: VecDeque<Wqe>,
    /// sq[..started] have PSNs.
    started: usize,
    /// First PSN of the next work request to start.
    next_psn: u32,
    /// Oldest PSN not yet acknowledged (or not yet answered, for READ / atomics).
    una: u32,
    /// Next PSN to (re)transmit; equal to `next_psn` when nothing is owed.
    tx_psn: u32,
    /// Every PSN before this one has been sent at least once.
    sent_hw: u32,
    last_ackreq: u32,
    /// In-flight limit in PSNs. Go-back-N resends everything after a loss, so on a lossy
    /// path a full window of 2048 packets would be resent again and again: the limit
    /// halves on each loss episode (a loss among the packets resent after a cut starts
    /// one, [`Requester::on_loss`]) and grows by one per window acknowledged (AIMD).
    inflight_limit: u32,
    rd_atomic_inflight: u32,
    max_rd_atomic: u32,
    timer: Option<Instant>,
    rnr_until: Option<Instant>,
    /// SQD: no work request is started; those started go on (rdma_rxe's QP_STATE_DRAIN).
    draining: bool,
    /// A local operation (BIND_MW, LOCAL_INV) failed and has just completed in error:
    /// the QP must go to ERR ([`Requester::take_local_error`]).
    local_error: Option<WcStatus>,
    timeout: Option<Duration>,
    retry_cnt: u8,
    retry_left: u8,
    rnr_retry: u8,
    rnr_left: u8,
    inflight_credit: u32,
    /// The most PSNs the limit may reach: what the receiver can hold
    /// ([`Requester::set_inflight_cap`]); 0 for [`MAX_INFLIGHT_PSNS`].
    inflight_cap: u32,
    /// No further halving until `una` passes this PSN (one cut per loss episode), or a
    /// loss beyond the last cut says a resent packet was lost.
    recover: Option<u32>,
    /// The last cut: the PSN it went back to (what is resent from there was sent after
    /// it) and when. Set with `recover`, read only while `recover` is.
    last_cut: Option<(u32, Instant)>,
    /// A READ re-request went out at this PSN: later responses beyond it are expected
    /// to be discarded, do not re-request again for each of them.
    rerequested: Option<u32>,
    /// Smoothed round trip from a request asking for an ACK to the response that
    /// acknowledges it, first packets only (a resent one is never timed: Karn's rule).
    /// In nanoseconds; 0 until the first sample.
    srtt_ns: u64,
    /// The packet being timed for `srtt_ns`: its PSN and when it left.
    rtt_sample: Option<(u32, Instant)>,
    /// Packets asking for an ACK still to go before the next one is timed.
    rtt_skip: u8,
    /// When the recovery probe goes back to `una` if no response moved it (see the
    /// module's doc and [`Requester::probe_wait`]): while a packet sent is unacknowledged,
    /// on any QP with an ACK timeout (a lossy QP's after a few round trips, a clean
    /// QP's after a share of the timeout); or, while `confirming`, when it goes back.
    probe_at: Option<Instant>,
    /// Probes in a row without progress.
    probe_backoff: u8,
    /// A tail probe went out at this time (the packet at `una`): nothing more is resent
    /// until a response moves `una`, or a NAK or the timeout goes back.
    probing_tail: Option<Instant>,
    /// The tail probe's answer stopped short of what was sent: unless another response
    /// moves `una` before `probe_at` ([`Requester::confirm_wait`]), go back to `una`
    /// ([`Requester::tail_probe_answered`]).
    confirming: bool,
    /// See [`Requester::take_probe_started`].
    probe_started: bool,
    /// Until when the QP counts as lossy: [`LOSSY_HOLD`] after its last loss. A lossy
    /// QP's recovery probe waits a few round trips, a clean QP's a share of the timeout.
    lossy_until: Option<Instant>,
    qpn: u32,
    pd: PdId,
    cq: CqId,
}

impl Requester {
    pub(crate) fn new(qpn: u32, pd: PdId, cq: CqId) -> Self {
        Self {
            qpn,
            pd,
            cq,
            ..Self::default()
        }
    }

    /// Whether a local operation that failed has completed (in order, after the requests
    /// ahead of it): the QP then enters ERR and flushes the rest, as rdma_rxe's completer
    /// does for a WQE its requester marked in error.
    pub(crate) fn take_local_error(&mut self) -> Option<Fatal> {
        self.local_error.take().map(Fatal)
    }

    /// Runs the local operations (BIND_MW, LOCAL_INV) at the head of the requests not
    /// started yet, in order, as rdma_rxe's requester runs `rxe_do_local_ops` when it
    /// reaches one: they take no PSN and complete in order with the rest. A fenced one
    /// waits for the READs and atomics before it (the usual fence of a LOCAL_INV behind
    /// a READ of the same window). `false` when the requests behind must wait: a fence,
    /// or a local operation that failed (nothing behind it is started; it completes in
    /// error in turn and the QP goes to ERR).
    ///
    /// Out of line: ordinary requests pay only the test that sends them here.
    #[inline(never)]
    fn local_ops(&mut self, io: &mut Io<'_>) -> bool {
        let go = self.run_local_ops(io.mem);
        !self.complete(io) && go
    }

    fn run_local_ops(&mut self, mem: &mut Memory) -> bool {
        while let Some(w) = self.sq.get_mut(self.started) {
            if !w.wr.op.is_local() {
                break;
            }
            if w.status.is_some() || w.fence && self.rd_atomic_inflight > 0 {
                return false;
            }
            w.first_psn = self.next_psn;
            w.done = true;
            w.status = local_op(mem, self.pd, self.qpn, w.wr.op);
            if w.status.is_some() {
                return false;
            }
            self.started += 1;
        }
        true
    }

    pub(crate) fn start(&mut self, a: RtsAttr) {
        let psn = a.sq_psn & 0xff_ffff;
        self.next_psn = psn;
        self.una = psn;
        self.tx_psn = psn;
        self.last_ackreq = psn;
        self.sent_hw = psn;
        self.inflight_limit = self.cap();
        self.max_rd_atomic = u32::from(a.max_rd_atomic.max(1));
        self.set_timeout(a.timeout);
        self.retry_cnt = a.retry_cnt.min(7);
        self.retry_left = self.retry_cnt;
        self.rnr_retry = a.rnr_retry.min(7);
        self.rnr_left = self.rnr_retry;
    }

    /// IBV_QP_TIMEOUT changed (SQD → SQD): the next time the retransmission timer is
    /// armed it takes the new value; an armed timer runs out as it was (as rdma_rxe's
    /// `qp_timeout_jiffies` is read when the timer is next set).
    pub(crate) fn set_timeout(&mut self, timeout: u8) {
        self.timeout = ack_timeout(timeout);
    }

    /// IBV_QP_RETRY_CNT / IBV_QP_RNR_RETRY changed (SQD → SQD): the counts start over.
    pub(crate) fn set_retries(&mut self, retry_cnt: u8, rnr_retry: u8) {
        self.retry_cnt = retry_cnt.min(7);
        self.retry_left = self.retry_cnt;
        self.rnr_retry = rnr_retry.min(7);
        self.rnr_left = self.rnr_retry;
    }

    /// IBV_QP_MAX_QP_RD_ATOMIC changed (SQD → SQD).
    pub(crate) fn set_max_rd_atomic(&mut self, n: u8) {
        self.max_rd_atomic = u32::from(n.max(1));
    }

    /// RTS → SQD (`true`), SQD → RTS (`false`).
    pub(crate) fn set_draining(&mut self, on: bool) {
        self.draining = on;
    }

    /// Work requests started (their PSNs given) and not completed.
    pub(crate) fn in_progress(&self) -> bool {
        self.started > 0
    }

    /// Whether a packet may follow at once: PSNs owed (a message going on, a resend), or
    /// a work request not started yet with room in the window and the QP not draining.
    /// The window, an RNR wait, the READ and atomic depth or a fence may still refuse it.
    #[inline]
    pub(crate) fn has_more(&self) -> bool {
        self.tx_psn != self.next_psn
            || self.started < self.sq.len()
                && !self.draining
                && psn_diff(self.next_psn, self.una) < self.inflight_limit as i32
    }

    pub(crate) fn queued(&self) -> usize {
        self.sq.len()
    }

    /// Whether a work request not yet completed (sent or not, READ responses pending or
    /// not) has its local buffer in the region `lkey`.
    pub(crate) fn refers_to(&self, lkey: u32) -> bool {
        self.sq.iter().any(|w| w.local.refers_to(lkey))
    }

    /// Refuses a work request ibverbs refuses at post time (EINVAL): longer than a
    /// message may be, an atomic without its 8-byte buffer, more PSNs than the window
    /// holds at path MTU `mtu`.
    pub(crate) fn check(wr: &SendWr, mtu: u32) -> Result<(), VerbsError> {
        let len = wr.sge.length;
        if len > MAX_MESSAGE {
            return Err(VerbsError::InvalidWr("message longer than 2^31 bytes"));
        }
        if wr.op.is_atomic() && len != 8 {
            return Err(VerbsError::InvalidWr("atomic needs an 8-byte local buffer"));
        }
        // One message's PSNs must fit well inside the 2^23 window that tells the past
        // from the future (2^31 bytes at a 256-byte MTU would fill it exactly).
        if npkts(wr, mtu) >= (1 << 23) - MAX_INFLIGHT_PSNS {
            return Err(VerbsError::InvalidWr(
                "message needs more PSNs than the window allows at this path MTU: use a larger MTU",
            ));
        }
        Ok(())
    }

    /// Queues a work request the QP shell admitted: it passed [`Requester::check`]
    /// (through the service's `check_wr`) and its local buffer resolved to `local`.
    pub(crate) fn post(&mut self, wr: SendWr, fence: bool, mtu: u32, local: Local) {
        let npkts = npkts(&wr, mtu);
        self.sq.push_back(Wqe {
            wr,
            local,
            fence,
            first_psn: 0,
            npkts,
            next_resp: 0,
            done: false,
            status: None,
        });
    }

    /// Whether the retransmission timer (the local ACK timeout, IBTA §9.7.6.1.3) runs:
    /// from a packet sent while none was in flight (unacknowledged).
    #[inline]
    pub(crate) fn timer_running(&self) -> bool {
        self.timer.is_some()
    }

    pub(crate) fn poll_timeout(&self) -> Option<Instant> {
        // Mostly the probe comes first, and no RNR wait runs.
        let t = match (self.probe_at, self.timer) {
            (Some(p), Some(t)) => Some(p.min(t)),
            (p, t) => p.or(t),
        };
        match (t, self.rnr_until) {
            (Some(t), Some(r)) => Some(t.min(r)),
            (t, r) => t.or(r),
        }
    }

    /// How long the recovery probe waits from `now` (see the module's doc): inside a
    /// loss episode or on a QP that lost something lately, [`PROBE_RTTS`] smoothed round
    /// trips (at least [`MIN_PROBE_WAIT`]); on a clean QP, or before a round trip was
    /// measured, [`CLEAN_PROBE_SHARE`] of the ACK timeout, at least
    /// [`CLEAN_PROBE_MIN_WAIT`] (none without a timeout, `timeout` 0). Twice as long for
    /// each probe in a row without progress, never more than half the ACK timeout, and
    /// none after [`MAX_PROBES`].
    fn probe_wait(&self, now: Instant) -> Option<Duration> {
        if self.probe_backoff >= MAX_PROBES {
            return None;
        }
        let lossy = self.recover.is_some() || self.lossy_until.is_some_and(|t| now < t);
        if !lossy || self.srtt_ns == 0 {
            // Apart, so that a clean QP's first wait (every message arms it) is one
            // division and no doubling: 33 instructions a message in `many_qps` against
            // one shared tail with the lossy wait's.
            let t = self.timeout?;
            return Some(match self.probe_backoff {
                0 => clean_probe_wait(t),
                b => (clean_probe_wait(t) * (1u32 << b)).min(t / 2),
            });
        }
        let w = Duration::from_nanos(self.srtt_ns * u64::from(PROBE_RTTS)).max(MIN_PROBE_WAIT)
            * (1u32 << self.probe_backoff);
        Some(self.timeout.map_or(w, |t| w.min(t / 2)))
    }

    /// (Re)starts the recovery probe from `now` while a packet sent is unacknowledged;
    /// stops it otherwise.
    fn arm_probe(&mut self, now: Instant) {
        self.probe_at = if self.in_flight() {
            self.probe_wait(now).map(|w| now + w)
        } else {
            None
        };
    }

    /// Whether a packet sent is unacknowledged (not only a PSN given to a message whose
    /// packets wait to go: a sender that does not run for a while loses nothing, and
    /// its timers start again from the next packet it sends).
    fn in_flight(&self) -> bool {
        psn_diff(self.sent_hw, self.una) > 0
    }

    /// (Re)starts the retransmission timer and the recovery probe from `now` while a
    /// packet sent is unacknowledged; stops them otherwise (the next packet sent starts
    /// them).
    fn arm(&mut self, now: Instant) {
        if self.in_flight() {
            self.timer = self.timeout.map(|t| now + t);
            self.probe_at = self.probe_wait(now).map(|w| now + w);
        } else {
            self.timer = None;
            self.probe_at = None;
        }
    }

    /// The next packet to put on the wire, if the window and the RNR wait allow one.
    pub(crate) fn next_packet(
        &mut self,
        path: &Path,
        io: &mut Io<'_>,
        c: &mut QpCounters,
    ) -> Option<OutPacket> {
        if let Some(t) = self.rnr_until {
            if io.now < t {
                return None;
            }
            self.rnr_until = None;
        }
        // Report work requests that failed locally before they got PSNs. A failed local
        // operation among them stops the requester: the QP goes to ERR
        // (`take_local_error`).
        if self.complete(io) {
            return None;
        }
        let owed = self.tx_psn != self.next_psn;
        // The window holds packets, not only messages: a message longer than what is left
        // of it goes out as ACKs open it (what the receiver can hold is the bound,
        // `set_inflight_cap`), not all at once behind a window that had one PSN free.
        if owed
            && (psn_diff(self.tx_psn, self.una) >= self.inflight_limit as i32
                || self.probing_tail.is_some() && self.tx_psn != self.una)
        {
            return None;
        }
        let idx = if owed {
            match self.started_holding(self.tx_psn) {
                Some(i) => i,
                None => {
                    // The request holding `tx_psn` was acknowledged and completed
                    // meanwhile. Go on from the oldest PSN not acknowledged: a request
                    // behind it may be only partly sent (the window let part of it
                    // out), and jumping to `next_psn` would leave a gap the responder
                    // sees as out of sequence. Only when everything is acknowledged
                    // does new work come next.
                    self.tx_psn = if psn_diff(self.una, self.tx_psn) > 0 {
                        self.una
                    } else {
                        self.next_psn
                    };
                    return self.next_packet(path, io, c);
                }
            }
        } else {
            let i = self.started;
            let w = self.sq.get(i)?;
            if self.draining {
                return None; // SQD: nothing new starts
            }
            if w.status.is_some() {
                return None; // a locally failed request waits for completion in order
            }
            if w.wr.op.is_local() {
                // BIND_MW, LOCAL_INV: run now, then on to what follows them; a failed
                // one waits for its completion in order, and nothing behind it starts.
                if !self.local_ops(io) {
                    return None;
                }
                return self.next_packet(path, io, c);
            }
            let inflight = psn_diff(self.next_psn, self.una);
            if inflight > 0 && inflight as u32 >= self.inflight_limit {
                return None;
            }
            // At most max_rd_atomic READ / atomic requests wait for their responses
            // (the QP's initiator depth; rdma_rxe's `rd_atomic`
            // count): the next one waits its turn,
            // and so does everything behind it, in order.
            if w.wr.op.is_read_or_atomic() && self.rd_atomic_inflight >= self.max_rd_atomic {
                return None;
            }
            // A fenced request waits until every READ and atomic before it has its
            // response (the Fence indicator of IBTA's Post Send Request verb;
            // rdma_rxe's `rxe_wqe_is_fenced`).
            if w.fence && self.rd_atomic_inflight > 0 {
                return None;
            }
            let psn = self.next_psn;
            let w = &mut self.sq[i];
            w.first_psn = psn;
            w.next_resp = psn;
            if w.wr.op.is_read_or_atomic() {
                self.rd_atomic_inflight += 1;
            }
            self.next_psn = psn_add(psn, w.npkts);
            self.started += 1;
            i
        };
        let psn = self.tx_psn;
        let w = &self.sq[idx];
        let mut pkt = build(w, psn, path, io.gather);
        // READ and atomic requests carry their whole PSN range in one packet.
        self.tx_psn = if w.wr.op.is_read_or_atomic() {
            w.end_psn()
        } else {
            psn_add(psn, 1)
        };
        let last_of_message = self.tx_psn == w.end_psn();
        let resent = psn_diff(psn, self.sent_hw) < 0;
        // AckReq on every resent packet: after a loss, each one that gets through
        // should move `una` (and reset the retry counter) as soon as possible. And on the
        // packet that fills the window: nothing more goes until it is acknowledged.
        let fills = psn_diff(self.tx_psn, self.una) >= self.inflight_limit as i32;
        if last_of_message || resent || fills || psn_diff(psn, self.last_ackreq) >= ACKREQ_EVERY {
            pkt.bth.ack_req = true;
        }
        if pkt.bth.ack_req {
            self.last_ackreq = psn;
            // One packet in RTT_EVERY is timed (reading the clock's difference costs
            // more than the rest of an ACK's bookkeeping), the first at once.
            if !resent && self.rtt_sample.is_none() {
                if self.rtt_skip == 0 {
                    self.rtt_skip = RTT_EVERY - 1;
                    self.rtt_sample = Some((psn, io.now));
                } else {
                    self.rtt_skip -= 1;
                }
            }
        }
        if resent {
            c.retransmits += 1;
        } else {
            self.sent_hw = self.tx_psn;
        }
        if self.timer.is_none() {
            self.arm(io.now);
            if self.timeout.is_none() {
                // No ACK timer (`timeout` 0): nothing else tells the heap of the probe.
                self.probe_started = self.probe_at.is_some();
            }
        }
        Some(pkt)
    }

    /// Whether the last packet armed the recovery probe without starting the
    /// retransmission timer (a QP with no ACK timer, `timeout` 0): its time may be
    /// earlier than the one the QP has in the timer heap. Clears the flag.
    #[inline]
    pub(crate) fn take_probe_started(&mut self) -> bool {
        std::mem::take(&mut self.probe_started)
    }

    /// Handles ACK, NAK, READ response and ATOMIC ACK packets.
    pub(crate) fn on_response(
        &mut self,
        path: &Path,
        io: &mut Io<'_>,
        p: &RocePacket<'_>,
        c: &mut QpCounters,
    ) -> Result<(), Fatal> {
        let psn = p.bth.psn();
        // A response must name a PSN we sent and that is not yet fully answered.
        // A response must name a PSN already sent (not merely reserved for a message
        // still going out), and no older than the last one acknowledged; a NAK must name
        // one not yet acknowledged.
        let d_una = psn_diff(psn, self.una);
        let is_nak = p.bth.opcode() == Opcode::RcAck
            && !matches!(p.ext.aeth.map(|a| a.kind()), Some(Syndrome::Ack { .. }));
        if psn_diff(self.sent_hw, psn) <= 0 || d_una < -1 || (is_nak && d_una < 0) {
            c.dropped += 1;
            return Ok(());
        }
        use Opcode::*;
        match p.bth.opcode() {
            RcAck => {
                let Some(aeth) = p.ext.aeth else {
                    return Ok(());
                };
                match aeth.kind() {
                    Syndrome::Ack { .. } => {
                        let una = self.una;
                        self.acked_through(psn, io.now);
                        if self.una == una
                            && self.recover.is_none()
                            && self.probe_at.is_some()
                            && !self.confirming
                        {
                            // An ACK that moves nothing answers a duplicate: the path is
                            // alive and draining copies sent before, so the tail probe
                            // waits on (it would resend into that queue).
                            self.arm_probe(io.now);
                        }
                    }
                    Syndrome::RnrNak { timer } => {
                        c.rnr_nak_received += 1;
                        self.acked_through(psn_add(psn, 0xff_ffff), io.now);
                        if self.rnr_retry != 7 {
                            if self.rnr_left == 0 {
                                c.rnr_nak_retry_err += 1;
                                return self.fail_at(psn, WcStatus::RnrRetryExcErr, io);
                            }
                            self.rnr_left -= 1;
                        }
                        self.rnr_until = Some(io.now + Duration::from_micros(rnr_timer_us(timer)));
                        self.rewind(psn, io.now, false);
                        self.timer = None;
                    }
                    Syndrome::Nak(NakCode::PsnSequenceError) if self.rnr_until.is_some() => {
                        // Behind an RNR NAK the rest of the window is out of sequence by
                        // design: the RNR wait already resends from there.
                        c.packet_seq_err += 1;
                    }
                    Syndrome::Nak(NakCode::PsnSequenceError) => {
                        c.packet_seq_err += 1;
                        let progress = psn_diff(psn, self.una) > 0;
                        self.acked_through(psn_add(psn, 0xff_ffff), io.now);
                        if !progress {
                            if self.retry_left == 0 {
                                return self.fail_at(psn, WcStatus::RetryExcErr, io);
                            }
                            self.spend_retry();
                        }
                        self.rewind(psn, io.now, true);
                        // The probe waits from the go-back-N, not from the last progress
                        // (it would go back again as the resend starts).
                        self.arm_probe(io.now);
                    }
                    Syndrome::Nak(code) => {
                        // An older READ or atomic still waits for its data: its responses
                        // were lost (implied NAK, §9.7.5.1.4). Ask for them again first;
                        // the error will come back, in order, when this PSN is resent.
                        if let Some(j) = self.oldest_rd_atomic() {
                            let w = &self.sq[j];
                            if psn_diff(psn, w.first_psn) > 0 && !w.contains(psn) {
                                let at = w.next_resp;
                                self.rerequested = Some(at);
                                self.tx_psn = at;
                                self.arm_probe(io.now);
                                return Ok(());
                            }
                        }
                        self.acked_through(psn_add(psn, 0xff_ffff), io.now);
                        let status = match code {
                            NakCode::RemoteAccessError => WcStatus::RemAccessErr,
                            NakCode::RemoteOperationalError => WcStatus::RemOpErr,
                            _ => WcStatus::RemInvReqErr,
                        };
                        return self.fail_at(psn, status, io);
                    }
                    Syndrome::Reserved(_) => c.dropped += 1,
                }
            }
            RcAtomicAck => {
                let Some(w) = self.oldest_rd_atomic() else {
                    c.dropped += 1;
                    return Ok(());
                };
                let w = &mut self.sq[w];
                if !w.wr.op.is_atomic() || w.first_psn != psn {
                    c.dropped += 1;
                    return Ok(());
                }
                if let Some(ack) = p.ext.atomic_ack {
                    // The original value scatters over the local entries (8 bytes in
                    // all, checked at post time), as rdma_rxe's completer copies it.
                    let orig = ack.orig.to_le_bytes();
                    let n = w.local.len().min(8);
                    if !w.local.copy_in(io.mem, 0, &orig[..n]) {
                        // The result buffer was deregistered under the request.
                        return self.fail_at(psn, WcStatus::LocProtErr, io);
                    }
                }
                w.done = true;
                w.next_resp = w.end_psn();
                self.rd_atomic_inflight = self.rd_atomic_inflight.saturating_sub(1);
                self.acked_through(psn, io.now);
            }
            RcReadResponseFirst | RcReadResponseMiddle | RcReadResponseLast
            | RcReadResponseOnly => {
                return self.read_response(path, io, p, c);
            }
            _ => c.dropped += 1,
        }
        self.complete(io);
        Ok(())
    }

    /// [`crate::transport::Service::placement`] for a response: where the payload of
    /// `p` goes if it is the next READ response of the oldest READ outstanding (its PSN
    /// the one expected, its size exactly the one expected there), where it lands in one
    /// range of one region. Mirrors `on_response` and `read_response`, changing
    /// nothing: `next_resp` moves only past verified responses, so no verified byte is
    /// ever placed over.
    pub(crate) fn placement(&self, path: &Path, p: &RocePacket<'_>) -> Option<Span> {
        use Opcode::*;
        let is_last = match p.bth.opcode() {
            RcReadResponseFirst | RcReadResponseMiddle => false,
            RcReadResponseLast | RcReadResponseOnly => true,
            _ => return None,
        };
        let psn = p.bth.psn();
        if psn_diff(self.sent_hw, psn) <= 0 || psn_diff(psn, self.una) < -1 {
            return None;
        }
        let w = &self.sq[self.oldest_rd_atomic()?];
        if !matches!(w.wr.op, SendOp::Read { .. }) || psn != w.next_resp {
            return None;
        }
        let k = psn_diff(psn, w.first_psn) as u32;
        let offset = u64::from(k) * u64::from(path.mtu);
        let len = p.payload.len() as u64;
        let expect = if is_last {
            u64::from(w.wr.sge.length).saturating_sub(offset)
        } else {
            u64::from(path.mtu)
        };
        if len != expect || (is_last && k + 1 != w.npkts) || (!is_last && k + 1 >= w.npkts) {
            return None;
        }
        w.local.span_at(offset as usize, len as usize)
    }

    fn read_response(
        &mut self,
        path: &Path,
        io: &mut Io<'_>,
        p: &RocePacket<'_>,
        c: &mut QpCounters,
    ) -> Result<(), Fatal> {
        let psn = p.bth.psn();
        let Some(i) = self.oldest_rd_atomic() else {
            c.dropped += 1;
            return Ok(());
        };
        let w = &self.sq[i];
        if !matches!(w.wr.op, SendOp::Read { .. }) {
            c.dropped += 1;
            return Ok(());
        }
        let d = psn_diff(psn, w.next_resp);
        if d < 0 {
            return Ok(()); // a duplicate response
        }
        if d > 0 {
            // A response went missing: ask again from the first missing PSN, once.
            if self.rerequested != Some(w.next_resp) {
                self.rerequested = Some(w.next_resp);
                let at = w.next_resp;
                self.rewind(at, io.now, true);
                self.arm_probe(io.now);
            }
            return Ok(());
        }
        let mtu = path.mtu;
        let k = psn_diff(psn, w.first_psn) as u32;
        let offset = k as u64 * u64::from(mtu);
        let total = u64::from(w.wr.sge.length);
        let len = p.payload.len() as u64;
        let is_last = matches!(
            p.bth.opcode(),
            Opcode::RcReadResponseLast | Opcode::RcReadResponseOnly
        );
        let expect = if is_last {
            total.saturating_sub(offset)
        } else {
            u64::from(mtu)
        };
        if len != expect || (is_last && k + 1 != w.npkts) || (!is_last && k + 1 >= w.npkts) {
            let first = w.first_psn;
            return self.fail_at(first, WcStatus::BadRespErr, io);
        }
        // The response scatters over the local entries from its offset in the message
        // (rdma_rxe's `read_reply` → `copy_data`), so a re-request resumes mid-list.
        if !w
            .local
            .copy_in_unless_placed(io.mem, offset as usize, p.payload, io.placed)
        {
            let first = w.first_psn;
            return self.fail_at(first, WcStatus::LocProtErr, io);
        }
        let w = &mut self.sq[i];
        w.next_resp = psn_add(psn, 1);
        self.rerequested = None;
        if is_last {
            w.done = true;
            self.rd_atomic_inflight = self.rd_atomic_inflight.saturating_sub(1);
        }
        // A READ response acknowledges everything before it (IBTA §9.7.5.1.2).
        self.acked_through(psn, io.now);
        self.complete(io);
        Ok(())
    }

    /// The started request whose PSNs include `psn`. The newest is asked first: the
    /// next packet of a message being sent is in it, so a long send queue (perftest's
    /// 128 messages) costs one look per packet, not one per request outstanding (6.7%
    /// of `ib_write_bw`'s CPU went to that walk). A retransmission from `una` walks from
    /// the oldest. The started requests' PSN ranges do not overlap (local operations
    /// hold none), so either way it is the one.
    fn started_holding(&self, psn: u32) -> Option<usize> {
        let newest = self.started.checked_sub(1)?;
        if self.sq[newest].contains(psn) {
            return Some(newest);
        }
        (0..newest).find(|&i| self.sq[i].contains(psn))
    }

    fn oldest_rd_atomic(&self) -> Option<usize> {
        (0..self.started).find(|&i| self.sq[i].wr.op.is_read_or_atomic() && !self.sq[i].done)
    }

    /// Everything up to and including `psn` is acknowledged; READ / atomic requests stay
    /// outstanding until their data arrived (an ACK beyond an unanswered READ means its
    /// responses were lost: re-request it, the "implied NAK" of §9.7.5.1.4).
    fn acked_through(&mut self, psn: u32, now: Instant) {
        let mut una = psn_add(psn, 1);
        let mut implied_nak = None;
        for i in 0..self.started {
            let w = &mut self.sq[i];
            if w.done {
                continue;
            }
            if psn_diff(w.first_psn, psn) > 0 {
                break; // not covered
            }
            if w.wr.op.is_read_or_atomic() {
                una = w.next_resp;
                if psn_diff(psn, w.next_resp) >= 0 {
                    implied_nak = Some(w.next_resp);
                }
                break;
            }
            if psn_diff(psn, w.last_psn()) >= 0 {
                w.done = true;
            } else {
                break;
            }
        }
        if let Some(at) = implied_nak {
            if psn_diff(self.tx_psn, at) > 0 && self.rerequested != Some(at) {
                self.rerequested = Some(at);
                self.rewind(at, now, true);
                self.arm_probe(now);
            }
        }
        if psn_diff(una, self.una) > 0 {
            let advanced = psn_diff(una, self.una) as u32;
            self.inflight_credit += advanced;
            if self.inflight_credit >= self.inflight_limit {
                self.inflight_credit = 0;
                self.inflight_limit = (self.inflight_limit + 1).min(self.cap());
            }
            if self.recover.is_some_and(|r| psn_diff(una, r) >= 0) {
                self.recover = None;
            }
            let probe = self
                .probing_tail
                .take()
                .map(|at| (at, self.probe_answered(at, now)));
            if let Some((timed, sent)) = self.rtt_sample {
                if psn_diff(una, timed) > 0 {
                    // RFC 6298's gain of 1/8, in whole nanoseconds (at least 1: 0 is
                    // "none yet"). A sample of nothing says the clock passed in did not
                    // move (a caller that read it once for a send and its ACK), not the
                    // path: dropped.
                    let sample = now.saturating_duration_since(sent).as_nanos() as u64;
                    if sample > 0 {
                        self.srtt_ns = match self.srtt_ns {
                            0 => sample,
                            s => ((s * 7 + sample) / 8).max(1),
                        };
                    }
                    self.rtt_sample = None;
                }
            }
            self.una = una;
            self.probe_backoff = 0;
            self.confirming = false;
            match probe {
                Some((_, answered)) if implied_nak.is_none() => {
                    self.tail_probe_answered(answered, now);
                }
                // An ACK past what the go-back-N has sent again means the first sends
                // are getting through after all (the timeout was spurious: a slow or
                // starved receiver, not a loss). Sending the rest of them again would
                // only pile duplicates on a receiver that is behind; go on after the
                // furthest PSN sent instead. A packet that was truly lost there shows as
                // a sequence NAK or another timeout. Except where the ACK also says a
                // READ's or an atomic's responses were lost (an implied NAK at `una`,
                // its first missing response, which the cursor behind it did not move
                // back to): that request is asked for again first.
                _ if psn_diff(una, self.tx_psn) > 0 => {
                    self.tx_psn = match implied_nak {
                        Some(at) => {
                            self.rerequested = Some(at);
                            at
                        }
                        None => self.sent_hw,
                    };
                }
                _ => {}
            }
            self.retry_left = self.retry_cnt;
            self.rnr_left = self.rnr_retry;
            self.arm(now);
            if self.confirming {
                let probe_rtt = probe.map(|(at, _)| now.saturating_duration_since(at));
                self.probe_at = Some(now + self.confirm_wait(probe_rtt));
            }
        }
    }

    /// The path lost something the requester did not see itself (the responder of the
    /// same QP took a request out of sequence or twice): the QP counts as lossy
    /// ([`LOSSY_HOLD`]), and brings its probe forward to a lossy QP's wait if a packet
    /// it sent is unacknowledged (its own last request may be lost in the same burst).
    /// Whether it did: its time may be earlier than the QP's in the timer heap.
    pub(crate) fn mark_lossy(&mut self, now: Instant) -> bool {
        self.lossy_until = Some(now + LOSSY_HOLD);
        if self.recover.is_some() || self.confirming || !self.in_flight() {
            return false;
        }
        let Some(at) = self.probe_wait(now).map(|w| now + w) else {
            return false;
        };
        if self.probe_at.is_some_and(|p| p <= at) {
            return false;
        }
        self.probe_at = Some(at);
        true
    }

    /// How long after a tail probe's answer that stops short of what was sent the
    /// requester waits for another response before it goes back: two smoothed round
    /// trips, at least [`MIN_PROBE_WAIT`] (scheduling noise; and a responder ACKs every
    /// 32 packets, which a receiver draining after a stall may take longer than a round
    /// trip to reach). Before a round trip was measured, two of the probe's own
    /// (`probe_rtt`, from the probe to its answer), at least [`CLEAN_PROBE_MIN_WAIT`]: a
    /// receiver that stalled past a clean QP's probe wait and drains slowly is not taken
    /// for a loss after 20 us. Never more than half the ACK timeout.
    fn confirm_wait(&self, probe_rtt: Option<Duration>) -> Duration {
        let w = match (self.srtt_ns, probe_rtt) {
            (0, r) => r
                .unwrap_or_default()
                .saturating_mul(2)
                .max(CLEAN_PROBE_MIN_WAIT),
            (s, _) => Duration::from_nanos(s)
                .saturating_mul(2)
                .max(MIN_PROBE_WAIT),
        };
        self.timeout.map_or(w, |t| w.min(t / 2))
    }

    /// Whether a response at `now` may answer the tail probe that went out at `at`: half
    /// a smoothed round trip or more after it. Sooner, it answers an earlier packet.
    fn probe_answered(&self, at: Instant, now: Instant) -> bool {
        now.saturating_duration_since(at).as_nanos() as u64 >= self.srtt_ns / 2
    }

    /// A response moved `una` after a tail probe. A responder answers a duplicate with an
    /// ACK of the last PSN it took in order, so if the response may be the probe's
    /// answer (`answered`: [`Requester::probe_answered`]), the path lost something (the
    /// QP counts as lossy), and if `una` is short of what was sent, the responder did not
    /// hold `una` and did not take what followed it (out of sequence, or lost), unless
    /// the response was a late ACK of the first copies from a receiver that stalled. A
    /// response sooner than half a round trip after the probe answers an earlier packet
    /// (a late ACK: the probe was spurious), and says nothing of what follows it. Either
    /// way the requester resends nothing and waits a little ([`Requester::confirm_wait`],
    /// `confirming`): another response moving `una` says the first copies are arriving
    /// after all; none says they were lost, and it goes back to `una` and cuts the window
    /// as for a sequence NAK. (A smoothed round trip measured while a queue stood makes a
    /// probe that crossed the idle path look early: without the wait, each probe
    /// recovered one PSN.)
    ///
    /// The test is only as good as the smoothed round trip. One that grew past what was
    /// measured (a receiver that stalls, a queue that built up) makes a lossy QP's tail
    /// probes spurious, a packet each, and a late ACK then stops short of what was sent
    /// and goes back. The probe drops the sample that would correct the figure (as Karn's
    /// rule asks; keeping it let the samples of ACKs that cover lost ones run the figure
    /// up: the README's heavy sim took 250 s, not 40), so clean ACKs must do it.
    fn tail_probe_answered(&mut self, answered: bool, now: Instant) {
        // Answered, the probe says the path lost something (an ACK at least), or a
        // receiver stalled past the probe's wait: either way the QP counts as lossy.
        // Not marking a clean QP's (a stall is the rarer of the two at NCCL's 537 ms)
        // made each later lost ACK cost the clean wait again: NCCL's harness with 0.2% of
        // small packets dropped took 1.9-2.9 s for what took 0.65-1.3.
        if answered {
            self.lossy_until = Some(now + LOSSY_HOLD);
        }
        self.tx_psn = self.sent_hw;
        if self.una == self.sent_hw {
            return;
        }
        // A READ's responses to the probe (it asked again from `una`) come one by one:
        // each moves `una`, and the rest are on their way.
        let reading = self
            .started_holding(self.una)
            .is_some_and(|i| self.sq[i].wr.op.is_read_or_atomic());
        self.confirming = !reading;
    }

    /// One transport retry. A retry count of 7 never runs out, as in Linux rdma_rxe and
    /// as the RNR retry count does in the spec (the IBTA itself counts 7 as seven).
    fn spend_retry(&mut self) {
        if self.retry_cnt != 7 {
            self.retry_left = self.retry_left.saturating_sub(1);
        }
    }

    /// Bounds the PSNs in flight to `cap` (at least [`MIN_INFLIGHT_PSNS`], at most
    /// [`MAX_INFLIGHT_PSNS`]; `None` for the latter): what the receiver's buffer holds, so
    /// that a clean path loses nothing to its overflow (the window still halves on a loss
    /// and grows back up to this).
    pub(crate) fn set_inflight_cap(&mut self, cap: Option<u32>) {
        self.inflight_cap = cap.map_or(0, |c| c.clamp(MIN_INFLIGHT_PSNS, MAX_INFLIGHT_PSNS));
        self.inflight_limit = self.inflight_limit.min(self.cap());
    }

    fn cap(&self) -> u32 {
        match self.inflight_cap {
            0 => MAX_INFLIGHT_PSNS,
            c => c,
        }
    }

    /// A loss was detected at `psn` (the PSN to go back to) at `now`: halve the in-flight
    /// limit, once per episode. With `recut` (a sequence NAK, a missing READ response, a
    /// timeout; not an RNR NAK, which says the receiver had no buffer, not that the path
    /// lost anything), a loss beyond the PSN the last cut went back to, a smoothed round
    /// trip or more after that cut, is a new episode and halves again. Go-back-N resent
    /// everything from there, so it is most likely a resent packet lost: a window that
    /// overflowed a queue meets the queue still full when it is resent, and without a
    /// second cut each round resent as much into it as the last (a simulated 25 Gb/s link
    /// with a 1 ms queue and 64 WRITEs of 64 KiB in flight: 64,117 packets resent for
    /// 25,600, 10,293 with it). The round trip keeps two sequence NAKs that reordering
    /// alone raised (the responder NAKs again after each in-order packet) from cutting
    /// twice within one. A duplicate NAK is the same episode.
    fn on_loss(&mut self, psn: u32, now: Instant, recut: bool) {
        if recut {
            self.lossy_until = Some(now + LOSSY_HOLD);
        }
        if let (Some(_), Some((from, at))) = (self.recover, self.last_cut) {
            let round_trip = Duration::from_nanos(self.srtt_ns);
            let again =
                recut && psn_diff(psn, from) > 0 && now.saturating_duration_since(at) >= round_trip;
            if !again {
                return;
            }
        }
        self.last_cut = Some((psn, now));
        self.inflight_limit = (self.inflight_limit / 2).max(MIN_INFLIGHT_PSNS);
        self.inflight_credit = 0;
        self.recover = Some(self.sent_hw);
        // What is in flight now may be resent: not a clean sample any more.
        self.rtt_sample = None;
    }

    /// Go back to `psn` (go-back-N); `now` and `recut` as [`Requester::on_loss`] has them.
    fn rewind(&mut self, psn: u32, now: Instant, recut: bool) {
        self.on_loss(psn, now, recut);
        self.probing_tail = None;
        self.confirming = false;
        if psn_diff(self.tx_psn, psn) > 0 && psn_diff(psn, self.una) >= 0 {
            self.tx_psn = psn;
        } else if psn_diff(psn, self.una) < 0 {
            self.tx_psn = self.una;
        }
    }

    /// Pops finished work requests in order and reports them.
    ///
    /// Called before every packet goes out, where usually nothing is done: the check
    /// stays inline and the completing is out of line. Returns whether a failed local
    /// operation completed (the QP must then go to ERR).
    #[inline]
    fn complete(&mut self, io: &mut Io<'_>) -> bool {
        if self.sq.front().is_some_and(|w| w.done) {
            return self.complete_done(io);
        }
        false
    }

    /// [`Requester::complete`] once the oldest request is done.
    fn complete_done(&mut self, io: &mut Io<'_>) -> bool {
        while self.sq.front().is_some_and(|w| w.done) {
            let Some(w) = self.sq.pop_front() else { break };
            // Started requests are a prefix of the queue.
            self.started = self.started.saturating_sub(1);
            let status = w.status.unwrap_or(WcStatus::Success);
            if w.wr.signaled || status != WcStatus::Success {
                io.wcs.push((self.cq, wc(&w, status, self.qpn)));
            }
            if status != WcStatus::Success {
                // Only a local operation completes here in error.
                self.local_error = Some(status);
                return true;
            }
        }
        false
    }

    /// Completes the request holding `psn` with `status` (the oldest one if none holds
    /// it); the QP then goes to ERR and flushes the rest.
    fn fail_at(&mut self, psn: u32, status: WcStatus, io: &mut Io<'_>) -> Result<(), Fatal> {
        self.complete(io);
        let i = (0..self.started)
            .find(|&i| self.sq[i].contains(psn))
            .unwrap_or(0);
        if let Some(w) = self.sq.remove(i) {
            if i < self.started {
                self.started -= 1;
            }
            io.wcs.push((self.cq, wc(&w, status, self.qpn)));
        }
        Err(Fatal(status))
    }

    /// Timer expiry: retransmit from the oldest unacknowledged PSN, or give up.
    pub(crate) fn on_timeout(&mut self, io: &mut Io<'_>, c: &mut QpCounters) -> Result<(), Fatal> {
        if let Some(t) = self.timer {
            if io.now >= t {
                self.timer = None;
                // Something is in flight whenever the timer runs (`arm` stops it once
                // everything sent was acknowledged); the test keeps a caller's stale
                // state from counting a timeout.
                if self.in_flight() {
                    c.local_ack_timeout_err += 1;
                    if self.retry_left == 0 {
                        let una = self.una;
                        return self.fail_at(una, WcStatus::RetryExcErr, io);
                    }
                    self.spend_retry();
                    // A timeout that begins a loss episode gives it its recovery probes,
                    // however many ran before it; each later one in the same episode one
                    // probe, the longest (each probe in an episode resends the window: a
                    // peer that does not answer costs one more go-back-N a timeout).
                    self.probe_backoff = if self.recover.is_none() {
                        0
                    } else {
                        MAX_PROBES - 1
                    };
                    self.rewind(self.una, io.now, true);
                    self.rerequested = None;
                    self.arm(io.now);
                }
            }
        }
        // The recovery probe: nothing moved `una` for a while, go back to it now rather
        // than at the timeout (no retry spent, no timeout counted); outside a loss
        // episode, one packet (the tail probe, see the module's doc).
        if let Some(t) = self.probe_at {
            if io.now >= t {
                self.probe_at = None;
                if std::mem::take(&mut self.confirming) && self.in_flight() {
                    // Nothing moved `una` for the confirming wait after the tail probe's
                    // answer: what followed it was lost (see `tail_probe_answered`).
                    self.rewind(self.una, io.now, true);
                    self.rerequested = None;
                    self.arm_probe(io.now);
                } else if self.in_flight() && self.rnr_until.is_none() {
                    self.tx_psn = self.una;
                    self.rerequested = None;
                    self.rtt_sample = None;
                    self.probing_tail = self.recover.is_none().then_some(io.now);
                    c.tail_probes += u64::from(self.probing_tail.is_some());
                    self.probe_backoff = self.probe_backoff.saturating_add(1);
                    self.arm_probe(io.now);
                }
            }
        }
        if let Some(t) = self.rnr_until {
            if io.now >= t {
                self.rnr_until = None;
                self.arm(io.now);
            }
        }
        Ok(())
    }

    /// QP to ERR: hands out every outstanding send work request, oldest first, to
    /// complete with WR_FLUSH_ERR.
    pub(crate) fn flush(&mut self, flushed: &mut dyn FnMut(u64, WcOpcode)) {
        for w in self.sq.drain(..) {
            flushed(w.wr.wr_id, w.wr.op.wc_opcode());
        }
        self.started = 0;
        self.timer = None;
        self.probe_at = None;
        self.probing_tail = None;
        self.confirming = false;
        self.rnr_until = None;
        self.una = self.next_psn;
        self.tx_psn = self.next_psn;
    }
}

/// Packets a work request takes at path MTU `mtu`.
fn npkts(wr: &SendWr, mtu: u32) -> u32 {
    match wr.op {
        SendOp::CompareSwap { .. } | SendOp::FetchAdd { .. } => 1,
        SendOp::BindMw { .. } | SendOp::LocalInv { .. } => 0,
        _ => wr.sge.length.div_ceil(mtu).max(1),
    }
}

fn wc(w: &Wqe, status: WcStatus, qpn: u32) -> WorkCompletion {
    WorkCompletion::send(
        qpn,
        w.wr.wr_id,
        w.wr.op.wc_opcode(),
        w.wr.sge.length,
        status,
    )
}

/// Executes a local operation against memory for QP `qpn` of `pd`: the status it
/// completes with when it fails (rdma_rxe's `rxe_do_local_ops`: IBV_WC_MW_BIND_ERR for a
/// bind, IBV_WC_LOC_QP_OP_ERR for a local invalidate), `None` on success.
fn local_op(mem: &mut Memory, pd: PdId, qpn: u32, op: SendOp) -> Option<WcStatus> {
    match op {
        SendOp::BindMw {
            mw,
            rkey,
            mr_lkey,
            addr,
            length,
            access,
        } => {
            let b = BindRequest {
                mw,
                rkey,
                mr_lkey,
                addr,
                length,
                access,
            };
            mem.bind_mw(pd, qpn, &b).err().map(|_| WcStatus::MwBindErr)
        }
        SendOp::LocalInv { rkey } => mem
            .invalidate(pd, None, rkey)
            .err()
            .map(|_| WcStatus::LocQpOpErr),
        _ => None,
    }
}

/// Packet `k` of `npkts` of a SEND with Invalidate: a SEND's, with the last one
/// SEND_LAST_WITH_INVALIDATE / SEND_ONLY_WITH_INVALIDATE carrying `rkey` in its IETH
/// (IBTA Table 35, §9.4.1.1). Apart from `message_packet`, so that an ordinary SEND pays
/// nothing for it.
fn send_with_inv_packet(
    rkey: u32,
    k: u32,
    npkts: u32,
    mtu: u32,
    local: &Local,
    staged: &mut Vec<Span>,
) -> (Opcode, ExtHeaders, Payload) {
    let Some((op, mut ext, payload)) =
        message_packet(false, SendOp::Send, k, npkts, mtu, local, staged)
    else {
        return (Opcode::RcSendOnlyInv, ExtHeaders::default(), Payload::None);
    };
    let op = match op {
        Opcode::RcSendOnly => Opcode::RcSendOnlyInv,
        Opcode::RcSendLast => Opcode::RcSendLastInv,
        other => return (other, ext, payload),
    };
    ext.ieth = Some(rkey);
    (op, ext, payload)
}

/// Builds the request packet of `w` at `psn`.
fn build(w: &Wqe, psn: u32, path: &Path, staged: &mut Vec<Span>) -> OutPacket {
    let mtu = path.mtu;
    let k = psn_diff(psn, w.first_psn).max(0) as u32;
    let offset = u64::from(k) * u64::from(mtu);
    let total = u64::from(w.wr.sge.length);
    let last = k + 1 == w.npkts;
    let mut ext = ExtHeaders::default();
    let mut payload = Payload::None;
    use Opcode::*;
    let opcode = match w.wr.op {
        SendOp::SendWithInv(rkey) => {
            let (op, e, p) = send_with_inv_packet(rkey, k, w.npkts, mtu, &w.local, staged);
            ext = e;
            payload = p;
            op
        }
        SendOp::Send
        | SendOp::SendWithImm(_)
        | SendOp::Write { .. }
        | SendOp::WriteWithImm { .. }
        | SendOp::BindMw { .. }
        | SendOp::LocalInv { .. } => {
            match message_packet(false, w.wr.op, k, w.npkts, mtu, &w.local, staged) {
                Some((op, e, p)) => {
                    ext = e;
                    payload = p;
                    op
                }
                None => RcSendOnly,
            }
        }
        SendOp::Read { remote_addr, rkey } => {
            // A re-request asks only for what is still missing (§9.7.5.1.4).
            ext.reth = Some(RethRepr {
                va: remote_addr.wrapping_add(offset),
                rkey,
                len: (total.saturating_sub(offset)) as u32,
            });
            RcReadRequest
        }
        SendOp::CompareSwap {
            remote_addr,
            rkey,
            compare,
            swap,
        } => {
            ext.atomic = Some(AtomicEthRepr {
                va: remote_addr,
                rkey,
                swap_add: swap,
                compare,
            });
            RcCompareSwap
        }
        SendOp::FetchAdd {
            remote_addr,
            rkey,
            add,
        } => {
            ext.atomic = Some(AtomicEthRepr {
                va: remote_addr,
                rkey,
                swap_add: add,
                compare: 0,
            });
            RcFetchAdd
        }
    };
    let mut bth = BthRepr::new(opcode, path.dest_qpn, psn);
    bth.pkey = path.pkey;
    bth.solicited = last && w.wr.solicited;
    bth.ack_req = w.wr.op.is_read_or_atomic();
    OutPacket {
        bth,
        ext,
        payload,
        to: path.remote,
    }
}
