//! Shared receive queues (IBTA Vol. 1 §10.2.9; ibverbs' `ibv_srq`): one queue of receive
//! work requests that any number of QPs of its protection domain take their receives
//! from, oldest first, whichever QP a message arrives on.
//!
//! Rules, and where they come from:
//! - depth: `max_wr` is rounded up to a power of two minus one (`2^k - 1 >= max_wr`), as
//!   rdma_rxe's `rxe_queue_init` sizes its queues; at most [`MAX_SRQ_WR`] (its
//!   `RXE_MAX_SRQ_WR`), at least 1; `max_sge` at most [`super::MAX_SGE`] (EINVAL
//!   beyond, `rxe_srq_chk_init`), 0 granted as 1; a work request with more entries is
//!   refused with EINVAL (`post_one_recv`).
//! - posting (`ibv_post_srq_recv`): ENOMEM when the queue is full, EINVAL for a buffer
//!   outside a region of the SRQ's PD granting LOCAL_WRITE (as a QP's receive queue,
//!   [`RecvBuf::check`]).
//! - the limit (§10.2.9, §11.5.2 "SRQ Limit Reached"): armed by a non-zero
//!   `srq_limit` (at creation, as rdma_rxe's `rxe_srq_from_init` takes it, or by
//!   `modify_srq`), it fires once, when taking a WQE leaves fewer than `srq_limit`
//!   posted, and disarms itself: `srq_limit` reads 0 again until it is re-armed
//!   (rdma_rxe's `get_srq_wqe`). Posting never fires it.
//! - resizing (`IBV_SRQ_MAX_WR`, as rdma_rxe's `rxe_queue_resize`): the new depth is
//!   rounded as at creation and must hold the WQEs posted now, and not be below an armed
//!   limit (EINVAL).

use std::collections::VecDeque;

use super::{RecvBuf, RecvWr, VerbsError};
use crate::mem::{Memory, PdId};

/// A shared receive queue handle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
pub struct SrqId(pub u32);

/// The deepest SRQ (rdma_rxe's `RXE_MAX_SRQ_WR`, its `max_srq_wr`).
pub const MAX_SRQ_WR: u32 = 0x4000;

/// The attributes of an SRQ (ibv_srq_attr): given to `create_srq` and `modify_srq`,
/// returned by `query_srq`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SrqAttr {
    /// Receive work requests the queue holds (rounded up when granted).
    pub max_wr: u32,
    /// Scatter entries per receive work request: at most [`super::MAX_SGE`] (0 is
    /// granted as 1).
    pub max_sge: u32,
    /// The limit: when taking a WQE leaves fewer posted, the SRQ raises
    /// `AsyncEvent::SrqLimitReached` once; 0 is off.
    pub srq_limit: u32,
}

/// Which attributes `modify_srq` changes (ibv_srq_attr_mask).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SrqAttrMask(u8);

impl SrqAttrMask {
    /// IBV_SRQ_MAX_WR: resize the queue.
    pub const MAX_WR: SrqAttrMask = SrqAttrMask(1);
    /// IBV_SRQ_LIMIT: arm (or, with 0, disarm) the limit.
    pub const LIMIT: SrqAttrMask = SrqAttrMask(2);

    /// True if every bit of `other` is set.
    pub fn contains(self, other: SrqAttrMask) -> bool {
        self.0 & other.0 == other.0
    }
}

impl std::ops::BitOr for SrqAttrMask {
    type Output = SrqAttrMask;
    fn bitor(self, o: SrqAttrMask) -> SrqAttrMask {
        SrqAttrMask(self.0 | o.0)
    }
}

/// One shared receive queue.
#[derive(Debug)]
pub(crate) struct Srq {
    pub pd: PdId,
    q: VecDeque<RecvBuf>,
    max_wr: u32,
    /// Scatter entries per work request, as granted.
    max_sge: u32,
    /// The armed limit; 0 when off or fired.
    limit: u32,
    /// The limit fired and its event is not taken yet.
    limit_reached: bool,
}

impl Srq {
    /// The depth granted for `max_wr`: `2^k - 1 >= max_wr`, at least 1; `None` for 0 or
    /// above [`MAX_SRQ_WR`] (EINVAL, rdma_rxe's `rxe_srq_chk_attr`).
    fn round(max_wr: u32) -> Option<u32> {
        if max_wr == 0 || max_wr > MAX_SRQ_WR {
            return None;
        }
        Some((max_wr + 1).next_power_of_two() - 1)
    }

    /// A new SRQ of `pd` (ibv_create_srq).
    pub(crate) fn new(pd: PdId, a: SrqAttr) -> Result<Self, VerbsError> {
        let max_wr = Self::round(a.max_wr)
            .ok_or(VerbsError::InvalidWr("SRQ max_wr 0 or above MAX_SRQ_WR"))?;
        if a.max_sge > super::MAX_SGE {
            return Err(VerbsError::InvalidWr(
                "SRQ max_sge above the device's limit (32)",
            ));
        }
        if a.srq_limit > max_wr {
            return Err(VerbsError::InvalidWr("srq_limit above the SRQ's depth"));
        }
        Ok(Self {
            pd,
            // One above the depth: a WQE given back (`give_back`) while the application
            // has refilled the queue to `max_wr` takes its place back without allocating.
            q: VecDeque::with_capacity(max_wr as usize + 1),
            max_wr,
            max_sge: a.max_sge.max(1),
            limit: a.srq_limit,
            limit_reached: false,
        })
    }

    /// The attributes as `query_srq` gives them: the depth and entries granted, and the
    /// limit (0 once it fired).
    pub(crate) fn attr(&self) -> SrqAttr {
        SrqAttr {
            max_wr: self.max_wr,
            max_sge: self.max_sge,
            srq_limit: self.limit,
        }
    }

    /// Receive work requests posted and not taken yet.
    pub(crate) fn len(&self) -> usize {
        self.q.len()
    }

    /// ibv_modify_srq: resizes (`MAX_WR`) and arms the limit (`LIMIT`); nothing changes
    /// when any part is refused.
    pub(crate) fn modify(&mut self, a: SrqAttr, mask: SrqAttrMask) -> Result<(), VerbsError> {
        let max_wr = if mask.contains(SrqAttrMask::MAX_WR) {
            let m = Self::round(a.max_wr)
                .ok_or(VerbsError::InvalidWr("SRQ max_wr 0 or above MAX_SRQ_WR"))?;
            if (m as usize) < self.q.len() {
                return Err(VerbsError::InvalidWr(
                    "SRQ max_wr below the receive work requests posted",
                ));
            }
            m
        } else {
            self.max_wr
        };
        let limit = if mask.contains(SrqAttrMask::LIMIT) {
            a.srq_limit
        } else {
            self.limit
        };
        if limit > max_wr {
            return Err(VerbsError::InvalidWr("srq_limit above the SRQ's depth"));
        }
        if max_wr as usize + 1 > self.q.capacity() {
            self.q.reserve(max_wr as usize + 1 - self.q.len());
        }
        self.max_wr = max_wr;
        self.limit = limit;
        Ok(())
    }

    /// ibv_post_srq_recv: ENOMEM when full; a buffer outside a region of the SRQ's PD
    /// granting LOCAL_WRITE is taken and fails the message that uses it
    /// ([`RecvBuf::check_sgl`]).
    pub(crate) fn post(&mut self, mem: &Memory, wr: RecvWr) -> Result<(), VerbsError> {
        self.post_sgl(mem, wr.wr_id, &[wr.sge])
    }

    /// [`Srq::post`] with a scatter/gather list: EINVAL for more entries than
    /// `max_sge` (rdma_rxe's `post_one_recv`).
    pub(crate) fn post_sgl(
        &mut self,
        mem: &Memory,
        wr_id: u64,
        list: &[super::Sge],
    ) -> Result<(), VerbsError> {
        if self.q.len() >= self.max_wr as usize {
            return Err(VerbsError::QueueFull("shared receive"));
        }
        super::sgl::check_count(list, self.max_sge, "more SGEs than the SRQ's max_sge")?;
        let r = RecvBuf::check_sgl(mem, self.pd, wr_id, list)?;
        self.q.push_back(r);
        Ok(())
    }

    /// Whether a WQE is waiting.
    pub(crate) fn is_empty(&self) -> bool {
        self.q.is_empty()
    }

    /// Takes the oldest WQE for a message on one of its QPs; fires the armed limit when
    /// fewer than `srq_limit` are left (rdma_rxe's `get_srq_wqe`).
    pub(crate) fn take(&mut self) -> Option<RecvBuf> {
        let r = self.q.pop_front()?;
        if self.limit != 0 && (self.q.len() as u32) < self.limit {
            self.limit = 0;
            self.limit_reached = true;
        }
        Some(r)
    }

    /// Gives a WQE taken for a message that was then dropped back to the head of the
    /// queue, for the next message (the UC resynchronisation; no event). The queue may
    /// then hold `max_wr + 1` WQEs for a while (the application refilled it meanwhile):
    /// it has the room, and posting waits until it is below `max_wr` again. rdma_rxe
    /// completes such a WQE in error instead; giving it back loses nothing.
    pub(crate) fn give_back(&mut self, r: RecvBuf) {
        self.q.push_front(r);
    }

    /// Whether the limit fired since the last call.
    /// Whether the limit fired and its event is not taken yet (a flag test, for the
    /// per-packet path).
    pub(crate) fn limit_reached(&self) -> bool {
        self.limit_reached
    }

    pub(crate) fn take_limit_reached(&mut self) -> bool {
        std::mem::take(&mut self.limit_reached)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mem::Access;
    use crate::transport::Sge;

    fn setup(max_wr: u32, limit: u32) -> (Memory, Srq, Sge) {
        let mut mem = Memory::new(7);
        let pd = mem.alloc_pd();
        let mr = mem.register(pd, vec![0; 64], Access::LOCAL_WRITE).unwrap();
        let srq = Srq::new(
            pd,
            SrqAttr {
                max_wr,
                max_sge: 1,
                srq_limit: limit,
            },
        )
        .unwrap();
        let sge = Sge {
            addr: mr.addr,
            length: 64,
            lkey: mr.lkey,
        };
        (mem, srq, sge)
    }

    /// rdma_rxe's `rxe_queue_init` rounds to 2^k - 1; `rxe_srq_chk_attr` refuses 0 and
    /// more than `max_srq_wr`.
    #[test]
    fn depth_rounds_like_rxe() {
        assert_eq!(Srq::round(1), Some(1));
        assert_eq!(Srq::round(2), Some(3));
        assert_eq!(Srq::round(500), Some(511));
        assert_eq!(Srq::round(511), Some(511));
        assert_eq!(Srq::round(0), None);
        assert_eq!(Srq::round(MAX_SRQ_WR + 1), None);
    }

    /// ibv_post_srq_recv: ENOMEM when the queue is full.
    #[test]
    fn full_queue_is_enomem() {
        let (mem, mut srq, sge) = setup(3, 0);
        for i in 0..3 {
            srq.post(&mem, RecvWr { wr_id: i, sge }).unwrap();
        }
        let e = srq.post(&mem, RecvWr { wr_id: 9, sge }).unwrap_err();
        assert_eq!(e.errno(), crate::transport::errno::ENOMEM);
        assert_eq!(srq.take().map(|r| r.wr_id), Some(0));
    }

    /// The limit fires once when fewer than `srq_limit` are left, then reads 0
    /// (rdma_rxe's `get_srq_wqe`); posting again does not re-arm it.
    #[test]
    fn limit_fires_once_and_disarms() {
        let (mem, mut srq, sge) = setup(7, 2);
        for i in 0..4 {
            srq.post(&mem, RecvWr { wr_id: i, sge }).unwrap();
        }
        srq.take(); // 3 left
        srq.take(); // 2 left: not below 2
        assert!(!srq.take_limit_reached());
        srq.take(); // 1 left
        assert!(srq.take_limit_reached());
        assert_eq!(srq.attr().srq_limit, 0);
        srq.post(&mem, RecvWr { wr_id: 9, sge }).unwrap();
        srq.take();
        srq.take();
        assert!(!srq.take_limit_reached());
    }

    /// rxe_queue_resize cannot drop posted WQEs; the limit cannot exceed the depth.
    #[test]
    fn resize_keeps_posted_wqes() {
        let (mem, mut srq, sge) = setup(7, 0);
        for i in 0..5 {
            srq.post(&mem, RecvWr { wr_id: i, sge }).unwrap();
        }
        let a = |max_wr, srq_limit| SrqAttr {
            max_wr,
            max_sge: 1,
            srq_limit,
        };
        assert!(srq.modify(a(3, 0), SrqAttrMask::MAX_WR).is_err());
        srq.modify(a(20, 0), SrqAttrMask::MAX_WR).unwrap();
        assert_eq!(srq.attr().max_wr, 31);
        assert!(srq.modify(a(0, 32), SrqAttrMask::LIMIT).is_err());
        srq.modify(a(0, 5), SrqAttrMask::LIMIT).unwrap();
        assert_eq!(srq.attr().srq_limit, 5);
    }
}
