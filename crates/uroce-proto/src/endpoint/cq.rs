//! Completion queues as ibverbs has them (a depth, an error state on overrun, one-shot
//! notification) and the context's asynchronous events.
//!
//! Rules, and where they come from:
//! - depth: `create_cq(cqe)` gets at least `cqe` entries, rounded up as mlx5 does, to a
//!   power of two minus one (`2^k - 1 >= cqe`, so 1 → 1, 10 → 15, 16 → 31); the depth
//!   granted is [`super::Context::cq_depth`] (ibv_cq's `cqe`). At most [`MAX_CQE`].
//! - overrun: a completion arriving at a full CQ is lost, the CQ enters its error state
//!   (it takes no completion after that; those already in it can still be polled), an
//!   [`AsyncEvent::CqErr`] is queued (rdma_rxe's `rxe_cq_post` raises IB_EVENT_CQ_ERR and
//!   refuses the entry; IBTA §11.6.3 "CQ overrun"), and every QP whose send or receive CQ
//!   it is goes to ERR with an [`AsyncEvent::QpFatal`] (its work requests can no longer
//!   complete; rdma_rxe's responder treats the failed post as class G and moves the QP
//!   to ERR, with no ACK or NAK for the message).
//! - notification: `req_notify_cq(cq, solicited_only)` arms the CQ for one event: the
//!   next completion, or with `solicited_only` the next receive of a solicited message
//!   or unsuccessful completion (ibv_req_notify_cq; IBTA §11.4.2.2). The event disarms it;
//!   completions already in the CQ when it is armed do not produce one (as in rdma_rxe,
//!   which checks `notify` when it posts).

use std::collections::VecDeque;

use crate::transport::{CqId, SrqId, WorkCompletion};

/// The deepest CQ [`super::Context::create_cq`] makes (mlx5's `max_cqe`, 2^22 - 1).
pub const MAX_CQE: u32 = (1 << 22) - 1;

/// An asynchronous event (ibv_async_event): what happened, and to which resource.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AsyncEvent {
    /// IBV_EVENT_CQ_ERR: the CQ overran and is in error.
    CqErr(CqId),
    /// IBV_EVENT_QP_FATAL: the QP went to ERR for an error no completion reports
    /// (its CQ overran).
    QpFatal(u32),
    /// IBV_EVENT_QP_REQ_ERR: the responder of this QP took an invalid request that no
    /// receive work request reports (NAK Invalid Request), and the QP went to ERR.
    QpReqErr(u32),
    /// IBV_EVENT_QP_ACCESS_ERR: the responder of this QP took a request breaking its
    /// rkey, bounds or rights that no receive work request reports (NAK Remote Access
    /// Error), and the QP went to ERR.
    QpAccessErr(u32),
    /// IBV_EVENT_SQ_DRAINED: the QP, moved RTS → SQD with IBV_QP_EN_SQD_ASYNC_NOTIFY,
    /// has no send work request in progress any more.
    SqDrained(u32),
    /// IBV_EVENT_SRQ_LIMIT_REACHED: fewer WQEs than the armed `srq_limit` are left in
    /// this SRQ; the limit is disarmed until `modify_srq` arms it again (IBTA §11.5.2).
    SrqLimitReached(SrqId),
    /// IBV_EVENT_QP_LAST_WQE_REACHED: this QP, on an SRQ, entered ERR and will take no
    /// more WQEs from it (IBTA §11.5.2; rdma_rxe's `flush_recv_queue`).
    QpLastWqeReached(u32),
    /// IBV_EVENT_PORT_ACTIVE: the port's link carries frames again
    /// (`datapath::event_loop::Endpoint::watch_port` raises it from the link's state).
    PortActive(u8),
    /// IBV_EVENT_PORT_ERR: the port's link stopped carrying frames (down, or no carrier).
    PortErr(u8),
}

/// A context's CQs, by [`CqId`] (their index). A destroyed CQ's place stays, empty,
/// and its id is never given again (a stale id names nothing, as a freed handle must
/// not name a new CQ); what it held is freed.
#[derive(Debug, Default)]
pub(crate) struct CqTable(Vec<Option<Cq>>);

impl CqTable {
    /// A new CQ; its id.
    pub(crate) fn push(&mut self, cq: Cq) -> CqId {
        self.0.push(Some(cq));
        CqId(self.0.len() as u32 - 1)
    }

    /// Makes the ids below `id` that this table has not given name nothing (a CQ
    /// mirrored from another context takes the id that context gave it).
    pub(crate) fn skip_to(&mut self, id: usize) {
        while self.0.len() < id {
            self.0.push(None);
        }
    }

    /// Ids given so far (destroyed ones included).
    pub(crate) fn ids(&self) -> usize {
        self.0.len()
    }

    pub(crate) fn get(&self, cq: CqId) -> Option<&Cq> {
        self.0.get(cq.0 as usize)?.as_ref()
    }

    pub(crate) fn get_mut(&mut self, cq: CqId) -> Option<&mut Cq> {
        self.0.get_mut(cq.0 as usize)?.as_mut()
    }

    /// Takes the CQ out for good; `None` if there was none.
    pub(crate) fn destroy(&mut self, cq: CqId) -> Option<Cq> {
        self.0.get_mut(cq.0 as usize)?.take()
    }
}

/// How a CQ is armed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Arm {
    Off,
    Next,
    Solicited,
}

/// What became of a completion offered to a CQ.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Offer {
    /// Queued; `true` when it fired the armed notification.
    Queued(bool),
    /// The CQ was full: it is in error now.
    Overrun,
    /// The CQ was already in error: lost.
    Lost,
}

/// One completion queue.
#[derive(Debug)]
pub(crate) struct Cq {
    pub q: VecDeque<WorkCompletion>,
    pub depth: usize,
    pub error: bool,
    arm: Arm,
    /// Completion events handed out and not acknowledged yet.
    pub unacked: u32,
}

impl Cq {
    /// Entries granted for a request of `cqe`: the smallest `2^k - 1` at least `cqe`.
    pub(crate) fn round(cqe: u32) -> Option<u32> {
        if cqe == 0 || cqe > MAX_CQE {
            return None;
        }
        Some((cqe + 1).next_power_of_two() - 1)
    }

    /// A CQ of `depth` entries; room for up to 4096 is taken now, more as it fills.
    pub(crate) fn new(depth: u32) -> Self {
        Self {
            q: VecDeque::with_capacity((depth as usize).min(4096)),
            depth: depth as usize,
            error: false,
            arm: Arm::Off,
            unacked: 0,
        }
    }

    /// Gives the CQ room for at least `cqe` entries (ibv_resize_cq), rounded as at
    /// creation; the new depth, or `None` for a `cqe` [`Cq::round`] refuses or fewer
    /// entries than the CQ holds now (rdma_rxe refuses both with EINVAL). What it holds
    /// stays, in order.
    pub(crate) fn resize(&mut self, cqe: u32) -> Option<u32> {
        let depth = Self::round(cqe)?;
        if (depth as usize) < self.q.len() {
            return None;
        }
        self.depth = depth as usize;
        Some(depth)
    }

    pub(crate) fn arm(&mut self, solicited_only: bool) {
        // Arming for the next completion widens a solicited-only arm, never narrows it
        // (mlx5 and rdma_rxe: NEXT_COMP wins over SOLICITED).
        self.arm = match (self.arm, solicited_only) {
            (Arm::Next, _) | (_, false) => Arm::Next,
            _ => Arm::Solicited,
        };
    }

    /// Takes the arm back (another copy of the CQ fired it).
    pub(crate) fn disarm(&mut self) {
        self.arm = Arm::Off;
    }

    /// Offers a completion.
    pub(crate) fn offer(&mut self, wc: WorkCompletion) -> Offer {
        if self.error {
            return Offer::Lost;
        }
        if self.q.len() >= self.depth {
            self.error = true;
            self.arm = Arm::Off;
            return Offer::Overrun;
        }
        self.q.push_back(wc);
        let fire = match self.arm {
            Arm::Off => false,
            Arm::Next => true,
            Arm::Solicited => wc.wakes_solicited(),
        };
        if fire {
            self.arm = Arm::Off;
        }
        Offer::Queued(fire)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::{WcOpcode, WcStatus};

    fn wc(status: WcStatus) -> WorkCompletion {
        WorkCompletion::send(0x11, 1, WcOpcode::Send, 8, status)
    }

    #[test]
    fn depth_rounds_up_to_a_power_of_two_minus_one() {
        assert_eq!(Cq::round(0), None);
        assert_eq!(Cq::round(1), Some(1));
        assert_eq!(Cq::round(2), Some(3));
        assert_eq!(Cq::round(10), Some(15));
        assert_eq!(Cq::round(15), Some(15));
        assert_eq!(Cq::round(16), Some(31));
        assert_eq!(Cq::round(MAX_CQE), Some(MAX_CQE));
        assert_eq!(Cq::round(MAX_CQE + 1), None);
    }

    #[test]
    fn full_cq_overruns_once_then_loses() {
        let mut cq = Cq::new(1);
        assert_eq!(cq.offer(wc(WcStatus::Success)), Offer::Queued(false));
        assert_eq!(cq.offer(wc(WcStatus::Success)), Offer::Overrun);
        assert!(cq.error);
        assert_eq!(cq.offer(wc(WcStatus::Success)), Offer::Lost);
        assert_eq!(cq.q.len(), 1);
    }

    #[test]
    fn resize_keeps_what_it_holds_and_refuses_less_room() {
        let mut cq = Cq::new(3);
        assert_eq!(cq.resize(1), Some(1));
        assert_eq!(cq.resize(7), Some(7));
        for _ in 0..6 {
            assert_eq!(cq.offer(wc(WcStatus::Success)), Offer::Queued(false));
        }
        assert_eq!(cq.resize(1), None);
        assert_eq!(cq.resize(0), None);
        assert_eq!(cq.resize(MAX_CQE + 1), None);
        assert_eq!(cq.depth, 7);
        assert_eq!(cq.resize(6), Some(7));
        assert_eq!(cq.resize(8), Some(15));
        assert_eq!(cq.q.len(), 6);
    }

    #[test]
    fn arm_fires_once() {
        let mut cq = Cq::new(7);
        cq.arm(false);
        assert_eq!(cq.offer(wc(WcStatus::Success)), Offer::Queued(true));
        assert_eq!(cq.offer(wc(WcStatus::Success)), Offer::Queued(false));
    }

    #[test]
    fn solicited_only_waits_for_solicited_or_error() {
        let mut cq = Cq::new(7);
        cq.arm(true);
        assert_eq!(cq.offer(wc(WcStatus::Success)), Offer::Queued(false));
        let se =
            WorkCompletion::send(0x11, 2, WcOpcode::Recv, 0, WcStatus::Success).solicited(true);
        assert_eq!(cq.offer(se), Offer::Queued(true));
        cq.arm(true);
        assert_eq!(cq.offer(wc(WcStatus::RetryExcErr)), Offer::Queued(true));
        // NEXT widens a solicited arm.
        cq.arm(true);
        cq.arm(false);
        assert_eq!(cq.offer(wc(WcStatus::Success)), Offer::Queued(true));
    }
}
