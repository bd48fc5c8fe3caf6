//! Shared receive queues on a context (ibv_create_srq, ibv_modify_srq, ibv_query_srq,
//! ibv_post_srq_recv, ibv_destroy_srq) and the asynchronous events of QPs on them. The
//! queue's own rules are in [`crate::transport`]'s `srq` module.

use super::{AsyncEvent, Context};
use crate::mem::PdId;
use crate::transport::{RecvWr, Sge, Srq, SrqAttr, SrqAttrMask, SrqId, VerbsError};

impl Context {
    /// Creates a shared receive queue of `pd` (ibv_create_srq): `max_wr` is rounded up to
    /// `2^k - 1` ([`Context::query_srq`] says what was granted; EINVAL for 0 or above
    /// [`crate::transport::MAX_SRQ_WR`]), `max_sge` is at most
    /// [`crate::transport::MAX_SGE`] (0 granted as 1), and a non-zero
    /// `srq_limit` arms the limit at once (as rdma_rxe takes it at creation).
    pub fn create_srq(&mut self, pd: PdId, attr: SrqAttr) -> Result<SrqId, VerbsError> {
        if !self.mem.pd_exists(pd) {
            return Err(crate::mem::RegError::NoSuchPd.into());
        }
        let srq = Srq::new(pd, attr)?;
        self.srqs.push(Some(srq));
        Ok(SrqId(self.srqs.len() as u32 - 1))
    }

    fn srq(&mut self, srq: SrqId) -> Result<&mut Srq, VerbsError> {
        super::srq_mut(&mut self.srqs, Some(srq)).ok_or(VerbsError::NoSuchSrq)
    }

    /// Changes an SRQ (ibv_modify_srq): `SrqAttrMask::LIMIT` arms the limit event
    /// (0 disarms it), `SrqAttrMask::MAX_WR` resizes the queue; EINVAL for a depth that
    /// cannot hold the WQEs posted or a limit above the depth.
    pub fn modify_srq(
        &mut self,
        srq: SrqId,
        attr: SrqAttr,
        mask: SrqAttrMask,
    ) -> Result<(), VerbsError> {
        self.srq(srq)?.modify(attr, mask)
    }

    /// The attributes of an SRQ (ibv_query_srq): the depth and `max_sge` granted, and the
    /// armed limit (0 when off or once it fired).
    pub fn query_srq(&self, srq: SrqId) -> Result<SrqAttr, VerbsError> {
        match self.srqs.get(srq.0 as usize) {
            Some(Some(s)) => Ok(s.attr()),
            _ => Err(VerbsError::NoSuchSrq),
        }
    }

    /// Receive work requests posted to an SRQ and not yet taken by a message.
    pub fn srq_posted(&self, srq: SrqId) -> Option<usize> {
        self.srqs.get(srq.0 as usize)?.as_ref().map(|s| s.len())
    }

    /// Posts a receive work request to an SRQ (ibv_post_srq_recv): ENOMEM when the queue
    /// is full, EINVAL for a buffer outside a region of the SRQ's PD granting
    /// LOCAL_WRITE. The next message on any of its QPs takes it.
    pub fn post_srq_recv(&mut self, srq: SrqId, wr: RecvWr) -> Result<(), VerbsError> {
        let s = super::srq_mut(&mut self.srqs, Some(srq)).ok_or(VerbsError::NoSuchSrq)?;
        s.post(&self.mem, wr)
    }

    /// [`Context::post_srq_recv`] with the buffer as a scatter/gather list (`sg_list` /
    /// `num_sge`): EINVAL for more entries than the SRQ's `max_sge` or for a bad entry;
    /// a message is scattered over the entries in order.
    pub fn post_srq_recv_sgl(
        &mut self,
        srq: SrqId,
        wr_id: u64,
        sgl: &[Sge],
    ) -> Result<(), VerbsError> {
        let s = super::srq_mut(&mut self.srqs, Some(srq)).ok_or(VerbsError::NoSuchSrq)?;
        s.post_sgl(&self.mem, wr_id, sgl)
    }

    /// Destroys an SRQ (ibv_destroy_srq): EBUSY while a QP is on it (rdma_rxe holds a
    /// reference on the SRQ for every QP created with it). Its WQEs are dropped without
    /// completions, as ibverbs drops them.
    pub fn destroy_srq(&mut self, srq: SrqId) -> Result<(), VerbsError> {
        self.srq(srq)?;
        if self.qps.values().any(|q| q.srq() == Some(srq)) {
            return Err(VerbsError::Busy);
        }
        self.srqs[srq.0 as usize] = None;
        Ok(())
    }

    /// Queues the events of QP `qpn` on SRQ `srq` after it worked: IBV_EVENT_QP_LAST_WQE_REACHED
    /// when it entered ERR, then IBV_EVENT_SRQ_LIMIT_REACHED when a WQE it took fired the
    /// SRQ's limit.
    pub(crate) fn queue_srq_events(&mut self, qpn: u32, srq: Option<SrqId>, last_wqe: bool) {
        if last_wqe {
            self.async_events
                .push_back(AsyncEvent::QpLastWqeReached(qpn));
        }
        if let Some(id) = srq {
            if super::srq_mut(&mut self.srqs, Some(id)).is_some_and(|s| s.take_limit_reached()) {
                self.async_events.push_back(AsyncEvent::SrqLimitReached(id));
            }
        }
    }
}
