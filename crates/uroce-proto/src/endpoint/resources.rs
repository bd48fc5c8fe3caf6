//! The ibverbs calls on a context: protection domains, memory regions, completion queues,
//! queue pairs and their state changes, posting work requests, polling completions.

use std::time::{Duration, Instant};

use super::cq::Cq;
use super::qp::Qp;
use super::Context;
use crate::congestion::{dcqcn, NotificationPoint, ReactionPoint};
use crate::mem::{inc_rkey, Access, Mr, Mw, MwType, PdId, RegError};
use crate::transport::{
    CqId, InitAttr, Mtu, QpAttr, QpAttrMask, QpCaps, QpCounters, QpInitAttr, QpInitEx, QpState,
    QpType, RecvWr, RtrAttr, RtsAttr, SendFlags, SendOp, SendWr, Sge, UdSendWr, VerbsError,
    WorkCompletion,
};

/// A type 1 memory window bind (ibv_mw_bind and its ibv_mw_bind_info), for
/// [`Context::bind_mw`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MwBind {
    /// Returned in the completion (IBV_WC_BIND_MW).
    pub wr_id: u64,
    /// Generate a completion on success (errors always complete).
    pub signaled: bool,
    /// The memory region (needs [`Access::MW_BIND`]); not looked at when `length` is 0.
    pub mr_lkey: u32,
    /// First byte granted, inside the region.
    pub addr: u64,
    /// Bytes granted; 0 unbinds the window.
    pub length: u64,
    /// REMOTE_READ, REMOTE_WRITE, REMOTE_ATOMIC (writes need a LOCAL_WRITE region).
    pub access: Access,
}

impl Context {
    /// Allocates a protection domain (ibv_alloc_pd).
    pub fn alloc_pd(&mut self) -> PdId {
        self.mem.alloc_pd()
    }

    /// Registers `data` as a memory region (ibv_reg_mr) whose bytes the context owns: the
    /// safe form of [`Context::reg_mr_raw`] for a buffer the application hands over.
    /// Reach the bytes with [`Context::mr_bytes`] / [`Context::mr_bytes_mut`];
    /// [`Context::dereg_mr`] gives them back. Empty `data` is refused (EINVAL), as
    /// ibverbs refuses a region of length 0.
    pub fn reg_mr(&mut self, pd: PdId, data: Vec<u8>, access: Access) -> Result<Mr, VerbsError> {
        Ok(self.mem.register(pd, data, access)?)
    }

    /// Registers `len` bytes of the program's memory at `addr`, in place, as a memory
    /// region of `pd` with `access` (ibv_reg_mr). The region's address ([`Mr::addr`],
    /// what local SGEs and a peer's RETH name) is `addr` itself, as ibverbs' iova is the
    /// registered address. Received data (SEND, RDMA WRITE, READ responses, atomic
    /// results) is written into this memory, and outgoing data (SEND, RDMA WRITE, READ
    /// responses) read from it, where it is, with no copy in between, as a NIC's DMA
    /// does; a peer's FETCH_ADD / CMP_SWAP is one atomic operation on the 8-byte word
    /// (IBV_ATOMIC_GLOB). [`Context::dereg_mr`] ends the registration and gives nothing
    /// back: the memory was the program's all along.
    ///
    /// Refused as the kernel's `ib_umem_get` refuses them: `len` 0 and a range that
    /// wraps around the address space (EINVAL), a null `addr` (EFAULT); and, as for
    /// [`Context::reg_mr`], an unknown PD or REMOTE_WRITE / REMOTE_ATOMIC without
    /// LOCAL_WRITE (EINVAL).
    ///
    /// # Safety
    ///
    /// This is the contract of every region registered in place, stated once here; it is
    /// ibverbs' own (the program keeps the memory mapped while it is registered):
    ///
    /// - From this call until [`Context::dereg_mr`] of the region succeeds (or the
    ///   context is dropped), `addr` must be valid for reads and writes of `len` bytes:
    ///   allocated, not freed, not moved, writable whatever `access` says.
    /// - The memory is the program's, not the context's: it must not overlap a region
    ///   registered with [`Context::reg_mr`], whose bytes the context lends out as
    ///   slices ([`Context::mr_bytes`]).
    ///
    /// Within that, the memory is shared with the stack as with a NIC, and the program
    /// may read and write it at any time, from any thread. The stack reaches it during
    /// calls into this `Context` (any method: packets in and out, timers, posting,
    /// polling, on whichever thread makes them) only through raw copies and 8-byte
    /// atomics (`mem/shared.rs`), never through a Rust reference, so it assumes nothing
    /// about what else touches the bytes. What the program finds there is settled, as
    /// with a NIC, only for bytes no posted work request and no peer's access (with the
    /// region's rkey) may still change: a receive buffer or a READ destination after its
    /// completion, a remote-writable region once the peer said it is done; a byte it
    /// writes while a transfer reads it may go out either way. An 8-byte aligned word the
    /// program updates with atomic operations (`__atomic_fetch_add`,
    /// `AtomicU64::from_ptr`) is updated atomically by a peer's FETCH_ADD / CMP_SWAP
    /// too. A Rust program reaches the memory through `addr` or pointers made from it
    /// (for a `Vec<u8>`: `Vec::as_mut_ptr`, which never invalidates another pointer to
    /// it), not through a reference held while a call into the context runs, nor through
    /// the owner `addr` was taken from (indexing the `Vec`): in Rust's aliasing rules
    /// such an access would claim the bytes for itself alone. Once `dereg_mr` succeeds,
    /// the stack never touches the memory again.
    ///
    /// Overlapping in-place regions, and the same memory registered twice, are allowed
    /// (as in ibverbs).
    #[allow(unsafe_code)]
    pub unsafe fn reg_mr_raw(
        &mut self,
        pd: PdId,
        addr: *mut u8,
        len: usize,
        access: Access,
    ) -> Result<Mr, VerbsError> {
        // SAFETY: the caller keeps this function's contract, which is the one
        // `Buffer::borrowed` asks for (valid for reads and writes of `len` bytes until
        // deregistered; not the context's own memory).
        let data = unsafe { crate::mem::Buffer::borrowed(addr, len) }?;
        Ok(self.mem.register_buffer(pd, data, access)?)
    }

    /// Allocates a memory window of `pd` (ibv_alloc_mw): unbound, granting nothing, with
    /// a random rkey of its own. See `mem/window.rs` for what each type allows.
    pub fn alloc_mw(&mut self, pd: PdId, mw_type: MwType) -> Result<Mw, VerbsError> {
        Ok(self.mem.alloc_mw(pd, mw_type)?)
    }

    /// Deallocates a memory window (ibv_dealloc_mw), bound or not: its rkey never grants
    /// access again. EINVAL for an unknown window.
    pub fn dealloc_mw(&mut self, mw: &Mw) -> Result<(), VerbsError> {
        Ok(self.mem.dealloc_mw(mw.id())?)
    }

    /// Binds a type 1 memory window through QP `qpn`'s send queue (ibv_bind_mw): as
    /// rdma-core's rxe provider does, a BIND_MW work request with the window's next key
    /// (`ibv_inc_rkey`) is posted, and `mw.rkey` takes that key at once; the bind happens
    /// when the requester reaches it, in order with the send requests before it, and
    /// completes IBV_WC_BIND_MW (if `signaled`) or IBV_WC_MW_BIND_ERR (then the QP goes to
    /// ERR and the application must undo `mw.rkey`). Refused at once as ibverbs refuses
    /// it (EINVAL): a window that is not type 1, or unknown; then the post-time refusals
    /// of [`Context::post_send`]. Length 0 unbinds the window.
    pub fn bind_mw(&mut self, qpn: u32, mw: &mut Mw, bind: MwBind) -> Result<(), VerbsError> {
        if self.mem.mw_type(mw.id()) != Some(MwType::Type1) {
            return Err(VerbsError::InvalidWr(
                "bind_mw takes a type 1 window; type 2 windows are bound by a BIND_MW work request",
            ));
        }
        let rkey = inc_rkey(mw.rkey);
        let op = SendOp::BindMw {
            mw: mw.id(),
            rkey,
            mr_lkey: bind.mr_lkey,
            addr: bind.addr,
            length: bind.length,
            access: bind.access,
        };
        let wr = SendWr {
            wr_id: bind.wr_id,
            op,
            sge: Sge::default(),
            signaled: bind.signaled,
            solicited: false,
        };
        self.post(qpn, wr, SendFlags::NONE)?;
        mw.rkey = rkey;
        Ok(())
    }

    /// Deregisters a region (ibv_dereg_mr): its lkey and rkey stop working at once (a
    /// peer's request naming the rkey is NAKed Remote Access Error from now on) and the
    /// stack never touches its bytes again. A region registered with [`Context::reg_mr`]
    /// gives its bytes back (`Some`); one registered in place with
    /// [`Context::reg_mr_raw`] gives `None`, the memory being the application's.
    ///
    /// Refused, with the region still registered and fully usable:
    /// - EBUSY ([`crate::mem::RegError::RegionInUse`]) while a work request the stack
    ///   may still read or write the region for has its buffer in it, on any QP (a send
    ///   not yet completed, whose retransmissions read it; a receive a message is being
    ///   placed in), or while `mem` says the region is in use
    ///   ([`crate::mem::Memory::may_deregister`]). The kernel's old `ib_dereg_mr`
    ///   refused with EBUSY a region still in use (its `usecnt`, memory windows bound to
    ///   it; IBTA §10.6.7.2.6); rdma_rxe instead keeps a deregistered region alive
    ///   until its last WQE lets go. Refusing keeps the rule simple for memory the
    ///   application owns: once `dereg_mr` succeeds, the memory is the caller's alone.
    ///
    ///   A receive posted (on a QP or an SRQ) that no message has started to use does
    ///   not pin the region: it holds only the region's key, which every placement
    ///   looks up again, so it can never reach the bytes once they are gone. As on a
    ///   NIC, whose WQE's lkey is checked when the WQE is used, it fails then: on RC
    ///   the receive completes `LOC_QP_OP_ERR` and the sender's request is NAKed
    ///   Remote Operational Error (its WC `REM_OP_ERR`), on UD it completes
    ///   `LOC_PROT_ERR`, on UC the message is dropped (rdma-core's
    ///   `test_mr_rereg_addr` re-registers a region a receive names).
    /// - EINVAL ([`crate::mem::RegError::NoSuchMr`]) for a region not registered (or
    ///   deregistered already).
    pub fn dereg_mr(&mut self, mr: &Mr) -> Result<Option<Vec<u8>>, VerbsError> {
        self.mem.may_deregister(mr.lkey)?;
        if self.region_in_use(mr.lkey) {
            let why = "a posted work request not yet completed has its buffer in it";
            return Err(RegError::RegionInUse(why).into());
        }
        Ok(self.mem.deregister(mr.lkey)?)
    }

    /// Moves a region to protection domain `pd` with `access`, its bytes and keys kept
    /// (ibv_rereg_mr with `IBV_REREG_MR_CHANGE_PD` / `_ACCESS` only): see
    /// [`crate::mem::Memory::modify`]. Work requests already posted are checked against
    /// the new PD and rights as they run, as on a NIC.
    pub fn modify_mr(&mut self, mr: &Mr, pd: PdId, access: Access) -> Result<Mr, VerbsError> {
        Ok(self.mem.modify(mr.lkey, pd, access)?)
    }

    /// Whether a work request the stack may still read or write the region `lkey` for
    /// refers to it: every QP is asked (its sends not yet completed, the receive a
    /// message is being placed in). Receives waiting on a receive queue or an SRQ are
    /// not: no byte is placed in one before its keys are looked up again. Walked at
    /// deregistration only, so the data path pays nothing for it.
    pub(super) fn region_in_use(&self, lkey: u32) -> bool {
        self.qps.values().any(|q| q.refers_to(lkey))
    }

    /// The bytes of a region the context owns ([`Context::reg_mr`]); empty for an
    /// unknown region and for one registered in place ([`Context::reg_mr_raw`]), which
    /// the program reaches through its own pointer or copies out with
    /// [`Context::mr_read`] (its memory is never lent as a Rust reference: the program
    /// may change it at any time).
    pub fn mr_bytes(&self, mr: &Mr) -> &[u8] {
        self.mem.bytes(mr.lkey).unwrap_or(&[])
    }

    /// The bytes of a region the context owns, writable; empty for an unknown region and
    /// for one registered in place (write it with [`Context::mr_write`]).
    pub fn mr_bytes_mut(&mut self, mr: &Mr) -> &mut [u8] {
        self.mem.bytes_mut(mr.lkey).unwrap_or(&mut [])
    }

    /// Copies the region's bytes `[offset, offset + dst.len())` into `dst`, whoever owns
    /// them; false, `dst` untouched, for an unknown region or a range not inside it.
    pub fn mr_read(&self, mr: &Mr, offset: usize, dst: &mut [u8]) -> bool {
        let got = self.mem.view(mr.lkey);
        got.and_then(|v| v.sub(offset, dst.len()))
            .is_some_and(|v| v.copy_to(dst))
    }

    /// Copies `src` into the region's bytes from `offset` on, whoever owns them; false,
    /// nothing written, for an unknown region or a range not inside it.
    pub fn mr_write(&mut self, mr: &Mr, offset: usize, src: &[u8]) -> bool {
        let got = self.mem.view_mut(mr.lkey);
        got.is_some_and(|mut v| {
            v.sub(offset, src.len())
                .is_some_and(|mut w| w.copy_from(src))
        })
    }

    /// Creates a completion queue of at least `cqe` entries (ibv_create_cq): rounded up to
    /// a power of two minus one, as mlx5 does (10 → 15, 16 → 31); [`Context::cq_depth`]
    /// says what was granted. `cqe` of 0 or above [`super::MAX_CQE`] is refused (EINVAL).
    /// A completion arriving at a full CQ puts it in error: see [`super::AsyncEvent::CqErr`].
    pub fn create_cq(&mut self, cqe: u32) -> Result<CqId, VerbsError> {
        let depth = Cq::round(cqe).ok_or(VerbsError::InvalidWr("CQ depth 0 or above MAX_CQE"))?;
        Ok(self.cqs.push(Cq::new(depth)))
    }

    /// Destroys a completion queue (ibv_destroy_cq): the completions it still holds go
    /// with it, and its id names nothing from then on. EBUSY while a QP of this context
    /// has it as its send or receive CQ (ibverbs' rule); EINVAL for an unknown or
    /// destroyed CQ. Its completion events not taken yet go too; the program must have
    /// acknowledged those it took (`ibv_destroy_cq` waits for them: the drop-in library
    /// says EBUSY instead).
    pub fn destroy_cq(&mut self, cq: CqId) -> Result<(), VerbsError> {
        if self.cqs.get(cq).is_none() {
            return Err(VerbsError::NoSuchCq);
        }
        if self.qps.values().any(|q| {
            let (s, r) = q.cqs();
            s == cq || r == cq
        }) {
            return Err(VerbsError::Busy);
        }
        let gone = self.cqs.destroy(cq).map_or(0, |c| c.q.len());
        self.held -= gone;
        self.cq_events.retain(|&e| e != cq);
        Ok(())
    }

    /// Resizes a CQ to at least `cqe` entries (ibv_resize_cq), rounded as by
    /// [`Context::create_cq`]; the new depth. EINVAL for an unknown CQ, a `cqe` of 0 or
    /// above [`super::MAX_CQE`], or fewer entries than it holds now.
    pub fn resize_cq(&mut self, cq: CqId, cqe: u32) -> Result<u32, VerbsError> {
        let c = self
            .cqs
            .get_mut(cq)
            .ok_or(VerbsError::InvalidWr("no such CQ"))?;
        c.resize(cqe).ok_or(VerbsError::InvalidWr(
            "CQ depth 0, above MAX_CQE or below the completions it holds",
        ))
    }

    /// The entries a CQ holds (ibv_cq's `cqe`).
    pub fn cq_depth(&self, cq: CqId) -> Option<u32> {
        self.cqs.get(cq).map(|c| c.depth as u32)
    }

    /// Whether a CQ overran and is in error: it takes no completion any more (those it
    /// held can still be polled).
    pub fn cq_in_error(&self, cq: CqId) -> bool {
        self.cqs.get(cq).is_some_and(|c| c.error)
    }

    /// Takes up to `max` completions, oldest first (ibv_poll_cq).
    pub fn poll_cq(&mut self, cq: CqId, max: usize) -> Vec<WorkCompletion> {
        let Some(c) = self.cqs.get_mut(cq) else {
            return Vec::new();
        };
        let n = max.min(c.q.len());
        self.held -= n;
        c.q.drain(..n).collect()
    }

    /// Like [`Context::poll_cq`], appending to `out` (no allocation once `out` has room):
    /// for loops that poll per packet.
    pub fn poll_cq_into(&mut self, cq: CqId, max: usize, out: &mut Vec<WorkCompletion>) -> usize {
        let Some(c) = self.cqs.get_mut(cq) else {
            return 0;
        };
        let n = max.min(c.q.len());
        self.held -= n;
        out.extend(c.q.drain(..n));
        n
    }

    /// Arms a CQ for one completion event (ibv_req_notify_cq): the next completion, or
    /// with `solicited_only` the next receive of a solicited message or unsuccessful
    /// completion. Completions already in the CQ do not count: poll it after arming.
    /// A CQ in error cannot be armed.
    pub fn req_notify_cq(&mut self, cq: CqId, solicited_only: bool) -> Result<(), VerbsError> {
        let c = self.cqs.get_mut(cq).ok_or(VerbsError::NoSuchCq)?;
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
        if let Some(c) = self.cqs.get_mut(cq) {
            c.unacked += 1;
        }
        Some(cq)
    }

    /// Acknowledges `n` completion events of `cq` (ibv_ack_cq_events).
    pub fn ack_cq_events(&mut self, cq: CqId, n: u32) {
        if let Some(c) = self.cqs.get_mut(cq) {
            c.unacked = c.unacked.saturating_sub(n);
        }
    }

    /// Completion events of `cq` taken and not acknowledged yet.
    pub fn cq_events_unacked(&self, cq: CqId) -> u32 {
        self.cqs.get(cq).map_or(0, |c| c.unacked)
    }

    /// Makes the QPs created from now on take the numbers `first`, `first + stride`, ...
    /// (modulo 2^24): with one context per event loop, a QPN then says which loop owns
    /// it, as a NIC steers by destination QP.
    pub fn set_qpn_space(&mut self, first: u32, stride: u32) {
        self.next_qpn = first & 0xff_ffff;
        self.qpn_stride = stride.max(1);
    }

    /// The QPNs of every QP, in increasing order.
    pub fn qpns(&self) -> impl Iterator<Item = u32> + '_ {
        let mut v: Vec<u32> = self.qps.keys().copied().collect();
        v.sort_unstable();
        v.into_iter()
    }

    /// Creates a QP in RESET (ibv_create_qp); returns its QPN. A `Gsi` QP is QP1.
    pub fn create_qp(&mut self, pd: PdId, caps: QpCaps) -> Result<u32, VerbsError> {
        self.create_qp_ex(pd, caps, QpInitEx::default())
    }

    /// [`Context::create_qp`] with the rest of `ibv_qp_init_attr`: `max_inline_data`
    /// (EINVAL above [`crate::transport::MAX_INLINE_DATA`]), `max_send_sge` and
    /// `max_recv_sge` (EINVAL above [`crate::transport::MAX_SGE`]), `sq_sig_all`, and `srq`
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
        let max_sge = crate::transport::MAX_SGE;
        if ex.max_send_sge > max_sge || ex.max_recv_sge > max_sge {
            // rdma_rxe's `rxe_qp_chk_cap`.
            return Err(VerbsError::InvalidWr(
                "max_send_sge or max_recv_sge above the device's limit (32)",
            ));
        }
        if !self.mem.pd_exists(pd) {
            return Err(crate::mem::RegError::NoSuchPd.into());
        }
        for cq in [caps.send_cq, caps.recv_cq] {
            if self.cqs.get(cq).is_none() {
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
            self.next_qpn = next_in_class(q, self.qpn_stride);
            q
        };
        let mut rp = ReactionPoint::default();
        if let Some(p) = self.dcqcn {
            rp.dcqcn = Some(Box::new(dcqcn::ReactionPoint::new(p, self.epoch)));
        }
        let mut qp = Qp::new(qpn, pd, &caps, rp);
        qp.set_init_ex(ex)?;
        qp.set_inflight_budget(self.inflight_budget);
        self.qps.insert(qpn, qp);
        Ok(qpn)
    }

    /// Bounds what each RC QP, present and future, keeps in flight to `bytes` (in packets
    /// of its path MTU, at least 8): what the peer can hold queued before its receive
    /// path takes them. A receiver whose buffer overflows drops what does not fit and
    /// the sender retransmits everything behind the first loss (go-back-N, IBTA
    /// §9.7.5.1.1 PSN sequence errors), on a path that lost nothing itself; a window no
    /// bigger than the buffer keeps a clean path clean. `None`: the transport's own bound
    /// ([`crate::transport::rc::MAX_INFLIGHT_PSNS`]). `uroce::datapath::Backend::rx_capacity` (the IO crate)
    /// says what a backend's receive buffer holds; `Endpoint::new` applies it, taking the
    /// peer's to be like ours.
    pub fn set_inflight_budget(&mut self, bytes: Option<u64>) {
        self.inflight_budget = bytes;
        for qp in self.qps.values_mut() {
            qp.set_inflight_budget(bytes);
        }
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
            qp.rp.dcqcn = Some(Box::new(dcqcn::ReactionPoint::new(p, now)));
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

    /// The modify verb (ibv_modify_qp): moves the QP along the QP state table (IBTA
    /// Vol. 1 §10.3.1) and sets the attributes `mask` names; see `transport::Qp::modify`
    /// for what each change does and `transport/transition.rs` for the table. An
    /// illegal change, a required attribute missing, one not permitted or out of range
    /// is [`VerbsError::BadModify`] (EINVAL) naming the change and the attributes, and
    /// changes nothing. A peer address (IBV_QP_AV) of the other IP version than this
    /// context's is EINVAL too.
    pub fn modify_qp(
        &mut self,
        qpn: u32,
        attr: &QpAttr,
        mask: QpAttrMask,
    ) -> Result<(), VerbsError> {
        if mask.contains(QpAttrMask::AV) && !self.reaches(attr.ah_attr.ip) {
            return Err(VerbsError::InvalidWr("remote and local IP versions differ"));
        }
        let qp = self.qps.get_mut(&qpn).ok_or(VerbsError::NoSuchQp(qpn))?;
        let was = qp.state();
        let r = qp.modify(attr, mask, &mut self.wcs);
        let reset = r.is_ok() && qp.state() == QpState::Reset && was != QpState::Reset;
        let cqs = qp.cqs();
        if r.is_ok() && qp.state() == QpState::Reset {
            // What the QP held outside itself: the SRQ receive it was filling goes back to
            // the SRQ, and the type 2 windows bound to it are unbound.
            if let Some(w) = qp.take_srq_return() {
                if let Some(srq) = super::srq_mut(&mut self.srqs, qp.srq()) {
                    srq.give_back(w);
                }
            }
            self.mem.unbind_qp_windows(qpn);
        }
        self.sched.touch(qpn, qp);
        self.route_completions();
        if reset {
            // A QP back in RESET starts afresh: the completions of its work requests
            // still in its CQs (the flushed ones of an ERR it left) go, as mlx4 / mlx5
            // clean the CQs when a QP moves to RESET (rdma-core's test_mr_rereg_pd
            // restates a QP from ERR and expects its next completion to be new work's).
            for cq in [cqs.0, cqs.1] {
                if let Some(c) = self.cqs.get_mut(cq) {
                    let before = c.q.len();
                    c.q.retain(|w| w.qp_num != qpn);
                    self.held -= before - c.q.len();
                }
            }
        }
        self.take_qp_events(qpn);
        r
    }

    /// The destroy verb (ibv_destroy_qp): the QP goes with every work request it held,
    /// without completions (ibverbs: a destroyed QP's outstanding requests are not
    /// reported; completions already in a CQ stay there). The receive it was filling from
    /// an SRQ goes back to the SRQ, its type 2 windows are unbound, and its QPN is not
    /// given out again before the QPN space wraps. Packets for it afterwards count as
    /// `rx_unknown_qp`.
    pub fn destroy_qp(&mut self, qpn: u32) -> Result<(), VerbsError> {
        let mut qp = self.qps.remove(&qpn).ok_or(VerbsError::NoSuchQp(qpn))?;
        let reset = QpAttr {
            qp_state: QpState::Reset,
            ..QpAttr::default()
        };
        // RESET empties the queues without completions; from any state it is legal.
        let mut flushed = Vec::new();
        let _ = qp.modify(&reset, QpAttrMask::STATE, &mut flushed);
        if let Some(w) = qp.take_srq_return() {
            if let Some(srq) = super::srq_mut(&mut self.srqs, qp.srq()) {
                srq.give_back(w);
            }
        }
        self.mem.unbind_qp_windows(qpn);
        Ok(())
    }

    /// The query verb (ibv_query_qp): the QP's state and attributes as set, and what it
    /// was created with.
    pub fn query_qp(&self, qpn: u32) -> Result<(QpAttr, QpInitAttr), VerbsError> {
        Ok(self.qps.get(&qpn).ok_or(VerbsError::NoSuchQp(qpn))?.query())
    }

    /// RESET → INIT: [`Context::modify_qp`] with IBV_QP_PKEY_INDEX, IBV_QP_PORT and
    /// IBV_QP_ACCESS_FLAGS (RC, UC) or IBV_QP_QKEY (UD; QP1 without IBV_QP_PORT).
    pub fn modify_qp_init(&mut self, qpn: u32, a: InitAttr) -> Result<(), VerbsError> {
        type M = QpAttrMask;
        let t = self.qp(qpn)?.qp_type();
        let mask = M::STATE
            | M::PKEY_INDEX
            | match t {
                QpType::Rc | QpType::Uc => M::PORT | M::ACCESS_FLAGS,
                QpType::Ud => M::PORT | M::QKEY,
                QpType::Gsi => M::QKEY,
            };
        let attr = QpAttr {
            qp_state: QpState::Init,
            pkey: a.pkey,
            qp_access_flags: a.access,
            qkey: a.qkey,
            ..QpAttr::default()
        };
        self.modify_qp(qpn, &attr, mask)
    }

    /// INIT → RTR for a connected QP (RC, UC): [`Context::modify_qp`] with IBV_QP_AV,
    /// IBV_QP_PATH_MTU, IBV_QP_DEST_QPN, IBV_QP_RQ_PSN and, for RC,
    /// IBV_QP_MAX_DEST_RD_ATOMIC and IBV_QP_MIN_RNR_TIMER.
    pub fn modify_qp_rtr(&mut self, qpn: u32, a: RtrAttr) -> Result<(), VerbsError> {
        type M = QpAttrMask;
        let mut mask = M::STATE | M::AV | M::PATH_MTU | M::DEST_QPN | M::RQ_PSN;
        match self.qp(qpn)?.qp_type() {
            QpType::Rc => mask |= M::MAX_DEST_RD_ATOMIC | M::MIN_RNR_TIMER,
            QpType::Uc => {}
            QpType::Ud | QpType::Gsi => {
                return Err(VerbsError::InvalidWr(
                    "a UD QP has no peer: use modify_qp_rtr_ud",
                ))
            }
        }
        let attr = QpAttr {
            qp_state: QpState::Rtr,
            ah_attr: a.remote,
            path_mtu: a.path_mtu,
            dest_qp_num: a.dest_qpn,
            rq_psn: a.rq_psn,
            max_dest_rd_atomic: a.max_dest_rd_atomic,
            min_rnr_timer: a.min_rnr_timer,
            ..QpAttr::default()
        };
        self.modify_qp(qpn, &attr, mask)
    }

    /// INIT → RTR for a UD QP; `mtu` limits the datagrams it sends
    /// ([`Context::modify_qp`] with IBV_QP_PATH_MTU, which uroce takes for UD).
    pub fn modify_qp_rtr_ud(&mut self, qpn: u32, mtu: Mtu) -> Result<(), VerbsError> {
        if !matches!(self.qp(qpn)?.qp_type(), QpType::Ud | QpType::Gsi) {
            return Err(VerbsError::InvalidWr("modify_qp_rtr_ud is for UD QPs"));
        }
        let attr = QpAttr {
            qp_state: QpState::Rtr,
            path_mtu: mtu,
            ..QpAttr::default()
        };
        self.modify_qp(qpn, &attr, QpAttrMask::STATE | QpAttrMask::PATH_MTU)
    }

    /// RTR → RTS: [`Context::modify_qp`] with IBV_QP_SQ_PSN and, for RC,
    /// IBV_QP_TIMEOUT, IBV_QP_RETRY_CNT, IBV_QP_RNR_RETRY and IBV_QP_MAX_QP_RD_ATOMIC.
    pub fn modify_qp_rts(&mut self, qpn: u32, a: RtsAttr) -> Result<(), VerbsError> {
        type M = QpAttrMask;
        let mut mask = M::STATE | M::SQ_PSN;
        if self.qp(qpn)?.qp_type() == QpType::Rc {
            mask |= M::TIMEOUT | M::RETRY_CNT | M::RNR_RETRY | M::MAX_QP_RD_ATOMIC;
        }
        let attr = QpAttr {
            qp_state: QpState::Rts,
            sq_psn: a.sq_psn,
            timeout: a.timeout,
            retry_cnt: a.retry_cnt,
            rnr_retry: a.rnr_retry,
            max_rd_atomic: a.max_rd_atomic,
            ..QpAttr::default()
        };
        self.modify_qp(qpn, &attr, mask)
    }

    /// Any state → ERR: outstanding work requests complete with WR_FLUSH_ERR
    /// ([`Context::modify_qp`] with IBV_QP_STATE alone). `now` is not needed by the
    /// flush; it stays for the callers.
    pub fn modify_qp_err(&mut self, qpn: u32, _now: Instant) -> Result<(), VerbsError> {
        let attr = QpAttr {
            qp_state: QpState::Err,
            ..QpAttr::default()
        };
        self.modify_qp(qpn, &attr, QpAttrMask::STATE)
    }

    /// Queues every affiliated asynchronous event QP `qpn` has due, and the limit event
    /// of its SRQ. The per-packet paths call it only when `events_due` says so, or the
    /// QP's SRQ says its limit fired.
    #[inline(never)]
    pub(crate) fn take_qp_events(&mut self, qpn: u32) {
        while let Some(ev) = self.qps.get_mut(&qpn).and_then(|q| q.take_event()) {
            self.queue_qp_event(qpn, ev);
        }
        let Some(qp) = self.qps.get_mut(&qpn) else {
            return;
        };
        let (last_wqe, srq) = (qp.take_last_wqe_reached(), qp.srq());
        self.queue_srq_events(qpn, srq, last_wqe);
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

    /// How many more send work requests QP `qpn`'s send queue takes now (its
    /// `max_send_wr` less those posted and not yet completed); None for an unknown QP.
    /// A batch of the extended posting API (`ibv_wr_complete`) is posted whole or not at
    /// all, as a NIC's doorbell rings once for it.
    pub fn send_queue_room(&mut self, qpn: u32) -> Option<usize> {
        self.qps.get_mut(&qpn).map(|q| q.send_room())
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
    ///
    /// A BIND_MW work request must name a type 2 window (EINVAL otherwise: type 1 windows
    /// are bound with [`Context::bind_mw`]).
    pub fn post_send_with(
        &mut self,
        qpn: u32,
        wr: SendWr,
        flags: SendFlags,
    ) -> Result<(), VerbsError> {
        if let SendOp::BindMw { mw, .. } = wr.op {
            if self.mem.mw_type(mw) != Some(MwType::Type2) {
                return Err(VerbsError::InvalidWr(
                    "a BIND_MW work request binds a type 2 window (type 1: bind_mw)",
                ));
            }
        }
        self.post(qpn, wr, flags)
    }

    /// Posts a send work request on an RC or UC QP, every check made.
    fn post(&mut self, qpn: u32, wr: SendWr, flags: SendFlags) -> Result<(), VerbsError> {
        let qp = self.qps.get_mut(&qpn).ok_or(VerbsError::NoSuchQp(qpn))?;
        let r = qp.post_send(&mut self.mem, wr, flags, &mut self.wcs);
        // A post gives the QP work; its timers start when packets go (poll_transmit).
        self.sched.wake(qpn, qp);
        let due = qp.events_due();
        self.route_completions();
        if due {
            self.take_qp_events(qpn);
        }
        r
    }

    /// [`Context::post_send_with`] with the local buffer as a scatter/gather list
    /// (ibv_send_wr's `sg_list` / `num_sge`); `wr.sge` must be `Sge::default()` (EINVAL
    /// otherwise: the list is the buffer, and a request naming two buffers is a
    /// mistake). EINVAL for more entries than the QP's `max_send_sge` (rdma_rxe's
    /// `validate_send_wr`). The message is the entries' bytes in order (its length their
    /// sum; a zero-length entry is skipped); every entry is checked at post time as a
    /// single SGE is, and one bad entry completes the request LOC_PROT_ERR with nothing
    /// sent. READ responses and atomic results scatter over the entries in order;
    /// IBV_SEND_INLINE gathers them into the inline copy.
    pub fn post_send_sgl(
        &mut self,
        qpn: u32,
        wr: SendWr,
        sgl: &[Sge],
        flags: SendFlags,
    ) -> Result<(), VerbsError> {
        if wr.sge != Sge::default() {
            return Err(VerbsError::InvalidWr(
                "post_send_sgl takes the buffer from the list: wr.sge must be Sge::default()",
            ));
        }
        if let SendOp::BindMw { mw, .. } = wr.op {
            if self.mem.mw_type(mw) != Some(MwType::Type2) {
                return Err(VerbsError::InvalidWr(
                    "a BIND_MW work request binds a type 2 window (type 1: bind_mw)",
                ));
            }
        }
        let qp = self.qps.get_mut(&qpn).ok_or(VerbsError::NoSuchQp(qpn))?;
        let r = qp.post_send_sgl(&mut self.mem, wr, sgl, flags, &mut self.wcs);
        // A post gives the QP work; its timers start when packets go (poll_transmit).
        self.sched.wake(qpn, qp);
        self.route_completions();
        self.take_qp_events(qpn);
        r
    }

    /// [`Context::post_send_ud_with`] with the datagram gathered from a scatter/gather
    /// list, as [`Context::post_send_sgl`] (`wr.sge` must be `Sge::default()`).
    pub fn post_send_ud_sgl(
        &mut self,
        qpn: u32,
        wr: UdSendWr,
        sgl: &[Sge],
        flags: SendFlags,
    ) -> Result<(), VerbsError> {
        if wr.sge != Sge::default() {
            return Err(VerbsError::InvalidWr(
                "post_send_ud_sgl takes the buffer from the list: wr.sge must be Sge::default()",
            ));
        }
        if !self.reaches(wr.dest.ip) {
            return Err(VerbsError::InvalidWr("remote and local IP versions differ"));
        }
        let qp = self.qps.get_mut(&qpn).ok_or(VerbsError::NoSuchQp(qpn))?;
        let r = qp.post_send_ud_sgl(&mut self.mem, wr, sgl, flags, &mut self.wcs);
        // A post gives the QP work; its timers start when packets go (poll_transmit).
        self.sched.wake(qpn, qp);
        self.route_completions();
        self.take_qp_events(qpn);
        r
    }

    /// [`Context::post_recv`] with the buffer as a scatter/gather list (ibv_recv_wr's
    /// `sg_list` / `num_sge`): EINVAL for more entries than the QP's `max_recv_sge`
    /// (rdma_rxe's `post_one_recv`); a bad entry is taken and fails the message that
    /// uses it. An incoming SEND is scattered
    /// over the entries in order (shorter in all than the message: LOC_LEN_ERR); on UD
    /// the 40 bytes of GRH fill the first bytes of the list.
    pub fn post_recv_sgl(&mut self, qpn: u32, wr_id: u64, sgl: &[Sge]) -> Result<(), VerbsError> {
        let qp = self.qps.get_mut(&qpn).ok_or(VerbsError::NoSuchQp(qpn))?;
        let r = qp.post_recv_sgl(&self.mem, wr_id, sgl, &mut self.wcs);
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
        if !self.reaches(wr.dest.ip) {
            return Err(VerbsError::InvalidWr("remote and local IP versions differ"));
        }
        let qp = self.qps.get_mut(&qpn).ok_or(VerbsError::NoSuchQp(qpn))?;
        let r = qp.post_send_ud(&mut self.mem, wr, flags, &mut self.wcs);
        // A post gives the QP work; its timers start when packets go (poll_transmit).
        self.sched.wake(qpn, qp);
        let due = qp.events_due();
        self.route_completions();
        if due {
            self.take_qp_events(qpn);
        }
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

/// The QPN after `q` in its class `q mod stride` ([`Context::set_qpn_space`]): `q + stride`,
/// or past the 24-bit space the class's first above QP 1, so that a context of one event
/// loop or engine shard numbers in its class for ever (a plain wrap would change the
/// class where `stride` does not divide 2^24), and never takes QPN 0 or 1.
fn next_in_class(q: u32, stride: u32) -> u32 {
    let stride = stride.max(1);
    match q.checked_add(stride).filter(|&n| n <= 0xff_ffff) {
        Some(n) => n,
        None => {
            let first = q % stride;
            let mut n = first;
            while n < 2 {
                n += stride;
            }
            n
        }
    }
}

#[cfg(test)]
mod qpn_tests {
    use super::next_in_class;

    /// QPNs stay in their class across the end of the 24-bit space and skip 0 and 1.
    #[test]
    fn qpns_keep_their_class_past_the_wrap() {
        for stride in [1u32, 2, 3, 5, 64] {
            for class in 0..stride {
                let q = 0xff_ffff - (0xff_ffff - class) % stride;
                assert_eq!(q % stride, class);
                let n = next_in_class(q, stride);
                assert_eq!(n % stride, class, "stride {stride}");
                assert!(n >= 2 && n < q, "stride {stride}: {q:#x} -> {n:#x}");
            }
        }
        assert_eq!(next_in_class(0x100, 3), 0x103);
        assert_eq!(next_in_class(0xff_ffff, 1), 2);
    }
}
