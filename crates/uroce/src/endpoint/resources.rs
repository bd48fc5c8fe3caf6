//! The ibverbs calls on a context: protection domains, memory regions, completion queues,
//! queue pairs and their state changes, posting work requests, polling completions.

use std::time::{Duration, Instant};

use super::cq::Cq;
use super::qp::Qp;
use super::Context;
use crate::congestion::{dcqcn, NotificationPoint, ReactionPoint};
use crate::mem::{Access, Mr, PdId};
use crate::transport::{
    CqId, InitAttr, Io, Mtu, QpCaps, QpCounters, QpInitEx, QpState, QpType, RecvWr, RtrAttr,
    RtsAttr, SendFlags, SendWr, UdSendWr, VerbsError, WorkCompletion,
};

impl Context {
    /// Allocates a protection domain (ibv_alloc_pd).
    pub fn alloc_pd(&mut self) -> PdId {
        self.mem.alloc_pd()
    }

    /// Registers `data` as a memory region (ibv_reg_mr).
    pub fn reg_mr(&mut self, pd: PdId, data: Vec<u8>, access: Access) -> Result<Mr, VerbsError> {
        Ok(self.mem.register(pd, data, access)?)
    }

    /// Deregisters a region (ibv_dereg_mr); its keys stop working and the bytes come back.
    pub fn dereg_mr(&mut self, mr: &Mr) -> Option<Vec<u8>> {
        self.mem.deregister(mr.lkey)
    }

    /// The bytes of a region.
    pub fn mr_bytes(&self, mr: &Mr) -> &[u8] {
        self.mem.bytes(mr.lkey).unwrap_or(&[])
    }

    /// The bytes of a region, writable.
    pub fn mr_bytes_mut(&mut self, mr: &Mr) -> &mut [u8] {
        self.mem.bytes_mut(mr.lkey).unwrap_or(&mut [])
    }

    /// Creates a completion queue of at least `cqe` entries (ibv_create_cq): rounded up to
    /// a power of two minus one, as mlx5 does (10 → 15, 16 → 31); [`Context::cq_depth`]
    /// says what was granted. `cqe` of 0 or above [`super::MAX_CQE`] is refused (EINVAL).
    /// A completion arriving at a full CQ puts it in error: see [`super::AsyncEvent::CqErr`].
    pub fn create_cq(&mut self, cqe: u32) -> Result<CqId, VerbsError> {
        let depth = Cq::round(cqe).ok_or(VerbsError::InvalidWr("CQ depth 0 or above MAX_CQE"))?;
        self.cqs.push(Cq::new(depth));
        Ok(CqId(self.cqs.len() as u32 - 1))
    }

    /// The entries a CQ holds (ibv_cq's `cqe`).
    pub fn cq_depth(&self, cq: CqId) -> Option<u32> {
        self.cqs.get(cq.0 as usize).map(|c| c.depth as u32)
    }

    /// Whether a CQ overran and is in error: it takes no completion any more (those it
    /// held can still be polled).
    pub fn cq_in_error(&self, cq: CqId) -> bool {
        self.cqs.get(cq.0 as usize).is_some_and(|c| c.error)
    }

    /// Takes up to `max` completions, oldest first (ibv_poll_cq).
    pub fn poll_cq(&mut self, cq: CqId, max: usize) -> Vec<WorkCompletion> {
        let Some(c) = self.cqs.get_mut(cq.0 as usize) else {
            return Vec::new();
        };
        let n = max.min(c.q.len());
        c.q.drain(..n).collect()
    }

    /// Like [`Context::poll_cq`], appending to `out` (no allocation once `out` has room):
    /// for loops that poll per packet.
    pub fn poll_cq_into(&mut self, cq: CqId, max: usize, out: &mut Vec<WorkCompletion>) -> usize {
        let Some(c) = self.cqs.get_mut(cq.0 as usize) else {
            return 0;
        };
        let n = max.min(c.q.len());
        out.extend(c.q.drain(..n));
        n
    }

    /// Arms a CQ for one completion event (ibv_req_notify_cq): the next completion, or
    /// with `solicited_only` the next receive of a solicited message or unsuccessful
    /// completion. Completions already in the CQ do not count: poll it after arming.
    /// A CQ in error cannot be armed.
    pub fn req_notify_cq(&mut self, cq: CqId, solicited_only: bool) -> Result<(), VerbsError> {
        let c = self
            .cqs
            .get_mut(cq.0 as usize)
            .ok_or(VerbsError::NoSuchCq)?;
        if c.error {
            return Err(VerbsError::InvalidWr("the CQ overran and is in error"));
        }
        c.arm(solicited_only);
        Ok(())
    }

    /// The next completion event: the CQ whose armed notification fired
    /// (ibv_get_cq_event, without blocking; `datapath::Notifier` gives a descriptor to
    /// wait on). Each event counts until [`Context::ack_cq_events`] acknowledges it.
    pub fn poll_cq_event(&mut self) -> Option<CqId> {
        let cq = self.cq_events.pop_front()?;
        if let Some(c) = self.cqs.get_mut(cq.0 as usize) {
            c.unacked += 1;
        }
        Some(cq)
    }

    /// Acknowledges `n` completion events of `cq` (ibv_ack_cq_events).
    pub fn ack_cq_events(&mut self, cq: CqId, n: u32) {
        if let Some(c) = self.cqs.get_mut(cq.0 as usize) {
            c.unacked = c.unacked.saturating_sub(n);
        }
    }

    /// Completion events of `cq` taken and not acknowledged yet.
    pub fn cq_events_unacked(&self, cq: CqId) -> u32 {
        self.cqs.get(cq.0 as usize).map_or(0, |c| c.unacked)
    }

    /// Makes the QPs created from now on take the numbers `first`, `first + stride`, ...
    /// (modulo 2^24): with one context per event loop, a QPN then says which loop owns
    /// it, as a NIC steers by destination QP.
    pub fn set_qpn_space(&mut self, first: u32, stride: u32) {
        self.next_qpn = first & 0xff_ffff;
        self.qpn_stride = stride.max(1);
    }

    /// The QPNs of every QP.
    pub fn qpns(&self) -> impl Iterator<Item = u32> + '_ {
        self.qps.keys().copied()
    }

    /// Creates a QP in RESET (ibv_create_qp); returns its QPN. A `Gsi` QP is QP1.
    pub fn create_qp(&mut self, pd: PdId, caps: QpCaps) -> Result<u32, VerbsError> {
        self.create_qp_ex(pd, caps, QpInitEx::default())
    }

    /// [`Context::create_qp`] with the rest of `ibv_qp_init_attr`: `max_inline_data`
    /// (EINVAL above [`crate::transport::MAX_INLINE_DATA`]), `sq_sig_all`, and `srq`
    /// (a QP that takes its receives from a shared receive queue of its PD).
    pub fn create_qp_ex(
        &mut self,
        pd: PdId,
        caps: QpCaps,
        ex: QpInitEx,
    ) -> Result<u32, VerbsError> {
        if ex.max_inline_data > crate::transport::MAX_INLINE_DATA {
            return Err(VerbsError::InvalidWr(
                "max_inline_data above the device's limit (512)",
            ));
        }
        if !self.mem.pd_exists(pd) {
            return Err(crate::mem::RegError::NoSuchPd.into());
        }
        for cq in [caps.send_cq, caps.recv_cq] {
            if cq.0 as usize >= self.cqs.len() {
                return Err(VerbsError::NoSuchCq);
            }
        }
        if let Some(id) = ex.srq {
            // The SRQ must exist and belong to the QP's PD (rdma_rxe's `rxe_qp_chk_init`
            // and `rxe_qp_init_resp` take the SRQ; ibverbs requires the same PD).
            match super::srq_mut(&mut self.srqs, Some(id)) {
                Some(s) if s.pd == pd => {}
                Some(_) => {
                    return Err(VerbsError::InvalidWr(
                        "the SRQ belongs to another protection domain",
                    ))
                }
                None => return Err(VerbsError::NoSuchSrq),
            }
        }
        let qpn = if caps.qp_type == QpType::Gsi {
            if self.qps.contains_key(&1) {
                return Err(VerbsError::InvalidWr("QP1 (GSI) already exists"));
            }
            1
        } else {
            let q = self.next_qpn;
            self.next_qpn = (self.next_qpn + self.qpn_stride) & 0xff_ffff;
            q
        };
        let mut rp = ReactionPoint::default();
        if let Some(p) = self.dcqcn {
            rp.dcqcn = Some(dcqcn::ReactionPoint::new(p, self.epoch));
        }
        let mut qp = Qp::new(qpn, pd, &caps, rp);
        qp.set_init_ex(ex)?;
        self.qps.insert(qpn, qp);
        Ok(qpn)
    }

    /// Turns DCQCN on for every QP, present and future: data packets carry ECT(0), the
    /// notification point follows `min_time_between_cnps` and `cnp_dscp`, and each QP's
    /// packets wait for its reaction point's rate. `now` starts the rate state.
    pub fn enable_dcqcn(&mut self, p: dcqcn::Params, now: Instant) {
        self.dcqcn = Some(p);
        self.epoch = now;
        self.np = NotificationPoint::new(p.min_time_between_cnps);
        self.cnp_dscp = p.cnp_dscp;
        self.cfg.tos = (self.cfg.tos & !0x03) | 0x02;
        for qp in self.qps.values_mut() {
            qp.rp.dcqcn = Some(dcqcn::ReactionPoint::new(p, now));
        }
    }

    /// Sets the notification point's minimum interval between CNPs of one QP.
    pub fn set_cnp_interval(&mut self, interval: Duration) {
        self.np = NotificationPoint::new(interval);
    }

    /// The reaction point of a QP: the CNPs it received.
    pub fn reaction_point(&self, qpn: u32) -> Option<&ReactionPoint> {
        self.qps.get(&qpn).map(|q| &q.rp)
    }

    fn qp(&mut self, qpn: u32) -> Result<&mut Qp, VerbsError> {
        self.qps.get_mut(&qpn).ok_or(VerbsError::NoSuchQp(qpn))
    }

    /// RESET → INIT.
    pub fn modify_qp_init(&mut self, qpn: u32, a: InitAttr) -> Result<(), VerbsError> {
        self.qp(qpn)?.modify_init(&a)
    }

    /// INIT → RTR for a connected QP (RC, UC).
    pub fn modify_qp_rtr(&mut self, qpn: u32, a: RtrAttr) -> Result<(), VerbsError> {
        if a.remote.ip.is_ipv4() != self.cfg.ip.is_ipv4() {
            return Err(VerbsError::InvalidWr("remote and local IP versions differ"));
        }
        self.qp(qpn)?.modify_rtr(&a)
    }

    /// INIT → RTR for a UD QP; `mtu` limits the datagrams it sends.
    pub fn modify_qp_rtr_ud(&mut self, qpn: u32, mtu: Mtu) -> Result<(), VerbsError> {
        self.qp(qpn)?.modify_rtr_ud(mtu)
    }

    /// RTR → RTS.
    pub fn modify_qp_rts(&mut self, qpn: u32, a: RtsAttr) -> Result<(), VerbsError> {
        self.qp(qpn)?.modify_rts(&a)
    }

    /// Any state → ERR: outstanding work requests complete with WR_FLUSH_ERR.
    pub fn modify_qp_err(&mut self, qpn: u32, now: Instant) -> Result<(), VerbsError> {
        let qp = self.qps.get_mut(&qpn).ok_or(VerbsError::NoSuchQp(qpn))?;
        let mut io = Io {
            now,
            mem: &mut self.mem,
            wcs: &mut self.wcs,
            srq: super::srq_mut(&mut self.srqs, qp.srq()),
        };
        qp.enter_err(&mut io);
        let last_wqe = qp.take_last_wqe_reached();
        self.queue_srq_events(qpn, None, last_wqe);
        self.route_completions();
        Ok(())
    }

    /// The QP's state.
    pub fn qp_state(&self, qpn: u32) -> Option<QpState> {
        self.qps.get(&qpn).map(|q| q.state())
    }

    /// The QP's counters.
    pub fn qp_counters(&self, qpn: u32) -> Option<QpCounters> {
        let qp = self.qps.get(&qpn)?;
        let mut c = *qp.counters();
        if let Some(rp) = &qp.rp.dcqcn {
            c.rp_cnp_handled = rp.counters().rp_cnp_handled;
            c.rp_cnp_ignored = rp.counters().rp_cnp_ignored;
        }
        Some(c)
    }

    /// Posts a send work request on an RC or UC QP (ibv_post_send). Refused (`Err`) only
    /// where ibverbs refuses the post: a state before RTS, a full queue, an invalid work
    /// request. On a QP in ERR it completes with WR_FLUSH_ERR; a buffer outside its
    /// region completes with LOC_PROT_ERR, sends nothing and takes the QP to ERR.
    pub fn post_send(&mut self, qpn: u32, wr: SendWr) -> Result<(), VerbsError> {
        self.post_send_with(qpn, wr, SendFlags::NONE)
    }

    /// [`Context::post_send`] with the `ibv_send_flags` [`SendWr`] has no field for:
    /// IBV_SEND_FENCE, IBV_SEND_INLINE (EINVAL above the QP's `max_inline_data`).
    pub fn post_send_with(
        &mut self,
        qpn: u32,
        wr: SendWr,
        flags: SendFlags,
    ) -> Result<(), VerbsError> {
        let qp = self.qps.get_mut(&qpn).ok_or(VerbsError::NoSuchQp(qpn))?;
        let r = qp.post_send(&mut self.mem, wr, flags, &mut self.wcs);
        let last_wqe = qp.take_last_wqe_reached();
        self.queue_srq_events(qpn, None, last_wqe);
        self.route_completions();
        r
    }

    /// Posts a datagram on a UD QP (ibv_post_send with an address handle); in ERR and
    /// on a local protection error as [`Context::post_send`].
    pub fn post_send_ud(&mut self, qpn: u32, wr: UdSendWr) -> Result<(), VerbsError> {
        self.post_send_ud_with(qpn, wr, SendFlags::NONE)
    }

    /// [`Context::post_send_ud`] with IBV_SEND_INLINE.
    pub fn post_send_ud_with(
        &mut self,
        qpn: u32,
        wr: UdSendWr,
        flags: SendFlags,
    ) -> Result<(), VerbsError> {
        if wr.dest.ip.is_ipv4() != self.cfg.ip.is_ipv4() {
            return Err(VerbsError::InvalidWr("remote and local IP versions differ"));
        }
        let qp = self.qps.get_mut(&qpn).ok_or(VerbsError::NoSuchQp(qpn))?;
        let r = qp.post_send_ud(&mut self.mem, wr, flags, &mut self.wcs);
        let last_wqe = qp.take_last_wqe_reached();
        self.queue_srq_events(qpn, None, last_wqe);
        self.route_completions();
        r
    }

    /// Posts a receive work request (ibv_post_recv); on a QP in ERR it completes with
    /// WR_FLUSH_ERR.
    pub fn post_recv(&mut self, qpn: u32, wr: RecvWr) -> Result<(), VerbsError> {
        let qp = self.qps.get_mut(&qpn).ok_or(VerbsError::NoSuchQp(qpn))?;
        let r = qp.post_recv(&self.mem, wr, &mut self.wcs);
        self.route_completions();
        r
    }
}
