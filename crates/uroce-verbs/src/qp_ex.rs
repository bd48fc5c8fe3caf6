//! The extended posting API: `ibv_create_qp_ex` with IBV_QP_INIT_ATTR_SEND_OPS_FLAGS, and
//! the `ibv_wr_*` work request builders of `struct ibv_qp_ex` (`ibv_qp_to_qp_ex`).
//!
//! Every QP this library hands out is a [`QpObject`]: the `ibv_qp_ex` the program sees
//! (its first member the `ibv_qp`, so both have one address) followed by uroce's
//! [`QpExtra`], the batch being built. What rdma-core asks of a provider (its
//! `ibv_wr_post(3)` page, and what mlx5 and rdma_rxe do):
//! - `ibv_wr_start` opens a batch; each operation builder (`ibv_wr_send`,
//!   `ibv_wr_rdma_write`...) starts a work request there, taking `qp_ex->wr_id` and
//!   `qp_ex->wr_flags` as they are then; the setters (`ibv_wr_set_sge`,
//!   `ibv_wr_set_sge_list`, `ibv_wr_set_inline_data[_list]`, `ibv_wr_set_ud_addr`) give the
//!   latest one its buffer or destination. Inline data is copied by the setter, so the
//!   program's buffer is free again when it returns.
//! - Builders return nothing: an error (an operation not asked for in `send_ops_flags`,
//!   more SGEs than `max_send_sge`: EINVAL; more inline bytes than `max_inline_data` or
//!   more requests than `max_send_wr`: ENOMEM, as mlx5) is kept, and `ibv_wr_complete`
//!   returns it and posts nothing.
//! - `ibv_wr_complete` posts the batch whole or not at all (as one doorbell does): every
//!   request is checked, and the send queue's room, before the first is posted.
//!   `ibv_wr_abort` drops the batch.
//! - A batch is the program's to build from one thread at a time (rdma-core's providers
//!   lock the QP from `wr_start` to `wr_complete`; here each builder takes the batch's
//!   own lock, so two threads building on one QP at once interleave their requests
//!   rather than corrupt memory).
//!
//! Operations per QP type, as rdma_rxe takes them and uroce's transports carry them: RC
//! all ten of `enum ibv_qp_create_send_ops_flags` but TSO and ATOMIC_WRITE; UC SEND,
//! SEND with immediate, RDMA WRITE (with immediate); UD SEND and SEND with immediate.
//! Others in `send_ops_flags` are EOPNOTSUPP at create, as are `comp_mask` bits other
//! than PD, CREATE_FLAGS and SEND_OPS_FLAGS, and any `create_flags`.
//!
//! Safe code: the builders are `unsafe extern "C"` wrappers in `exports.rs` that reach
//! the [`QpExtra`] through `ffi::qp_extra` (verbs.h's contract: the `ibv_qp_ex` the
//! program got for a live QP) and read `wr_id` / `wr_flags` there.

#![deny(unsafe_code)]

use std::ffi::{c_int, c_uint};
use std::sync::{Mutex, MutexGuard};

use libc::{EINVAL, ENOMEM, EOPNOTSUPP};
use uroce::verbs::{SendOp, Sge};

use crate::abi::{
    self, ibv_mw_bind_info, ibv_qp, ibv_qp_ex, ibv_qp_init_attr, ibv_qp_init_attr_ex,
};
use crate::device::shared_of;
use crate::engine::QpEntry;
use crate::post::{OnShard, Poster, SendRequest, UdAddr};
use crate::resources::null_with;

// enum ibv_qp_type.
const IBV_QPT_RC: c_int = 2;
const IBV_QPT_UC: c_int = 3;
const IBV_QPT_UD: c_int = 4;

/// The operations an RC QP takes.
pub(crate) const RC_SEND_OPS: u64 = abi::IBV_QP_EX_WITH_RDMA_WRITE
    | abi::IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM
    | abi::IBV_QP_EX_WITH_SEND
    | abi::IBV_QP_EX_WITH_SEND_WITH_IMM
    | abi::IBV_QP_EX_WITH_RDMA_READ
    | abi::IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP
    | abi::IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD
    | abi::IBV_QP_EX_WITH_LOCAL_INV
    | abi::IBV_QP_EX_WITH_BIND_MW
    | abi::IBV_QP_EX_WITH_SEND_WITH_INV;
/// The operations a UC QP takes (uroce runs BIND_MW, LOCAL_INV and SEND with
/// invalidate on RC only).
pub(crate) const UC_SEND_OPS: u64 = abi::IBV_QP_EX_WITH_RDMA_WRITE
    | abi::IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM
    | abi::IBV_QP_EX_WITH_SEND
    | abi::IBV_QP_EX_WITH_SEND_WITH_IMM;
/// The operations a UD QP takes.
pub(crate) const UD_SEND_OPS: u64 = abi::IBV_QP_EX_WITH_SEND | abi::IBV_QP_EX_WITH_SEND_WITH_IMM;

/// What a QP handed to the program is: the C object first, uroce's state after it
/// (`#[repr(C)]`, so `ibv_qp` / `ibv_qp_ex` pointers are pointers to this).
#[repr(C)]
pub(crate) struct QpObject {
    pub qp: ibv_qp_ex,
    pub extra: QpExtra,
}

/// uroce's side of an `ibv_qp_ex`: what it was created with and the batch being built.
pub(crate) struct QpExtra {
    cfg: ExConfig,
    batch: Mutex<Batch>,
}

/// What the builders check a request against.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct ExConfig {
    /// `send_ops_flags` (0: not created for the extended API).
    pub send_ops: u64,
    pub ud: bool,
    pub max_send_wr: usize,
    pub max_send_sge: usize,
    pub max_inline_data: usize,
}

impl QpExtra {
    pub(crate) fn new(cfg: ExConfig) -> Self {
        Self {
            cfg,
            batch: Mutex::new(Batch::default()),
        }
    }

    /// Whether the QP was created with send operations (`ibv_qp_to_qp_ex` gives it).
    pub(crate) fn is_ex(&self) -> bool {
        self.cfg.send_ops != 0
    }

    fn lock(&self) -> MutexGuard<'_, Batch> {
        self.batch.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// An operation builder's request, with what it names by address (windows, regions,
/// address handles are looked up when the batch is posted).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ExOp {
    Send,
    /// Immediate data in network order, as the builder takes it.
    SendImm(u32),
    SendInv(u32),
    Write {
        rkey: u32,
        addr: u64,
    },
    WriteImm {
        rkey: u32,
        addr: u64,
        imm: u32,
    },
    Read {
        rkey: u32,
        addr: u64,
    },
    CmpSwp {
        rkey: u32,
        addr: u64,
        compare: u64,
        swap: u64,
    },
    FetchAdd {
        rkey: u32,
        addr: u64,
        add: u64,
    },
    LocalInv(u32),
    BindMw {
        mw: usize,
        rkey: u32,
        info: BindInfo,
    },
}

/// `struct ibv_mw_bind_info` as the builder read it (the region by address).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BindInfo {
    pub mr: usize,
    pub addr: u64,
    pub length: u64,
    pub mw_access_flags: c_uint,
}

impl From<&ibv_mw_bind_info> for BindInfo {
    fn from(b: &ibv_mw_bind_info) -> Self {
        Self {
            mr: b.mr as usize,
            addr: b.addr,
            length: b.length,
            mw_access_flags: b.mw_access_flags,
        }
    }
}

impl ExOp {
    /// Its bit of `enum ibv_qp_create_send_ops_flags`.
    fn flag(&self) -> u64 {
        match self {
            Self::Send => abi::IBV_QP_EX_WITH_SEND,
            Self::SendImm(_) => abi::IBV_QP_EX_WITH_SEND_WITH_IMM,
            Self::SendInv(_) => abi::IBV_QP_EX_WITH_SEND_WITH_INV,
            Self::Write { .. } => abi::IBV_QP_EX_WITH_RDMA_WRITE,
            Self::WriteImm { .. } => abi::IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM,
            Self::Read { .. } => abi::IBV_QP_EX_WITH_RDMA_READ,
            Self::CmpSwp { .. } => abi::IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP,
            Self::FetchAdd { .. } => abi::IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD,
            Self::LocalInv(_) => abi::IBV_QP_EX_WITH_LOCAL_INV,
            Self::BindMw { .. } => abi::IBV_QP_EX_WITH_BIND_MW,
        }
    }

    /// Whether the operation sends the local buffer (so takes inline data).
    fn carries_data(&self) -> bool {
        matches!(
            self,
            Self::Send
                | Self::SendImm(_)
                | Self::SendInv(_)
                | Self::Write { .. }
                | Self::WriteImm { .. }
        )
    }
}

/// A request's local buffer.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
enum Data {
    #[default]
    None,
    /// One entry (`ibv_wr_set_sge`), kept without an allocation.
    One(Sge),
    Sges(Vec<Sge>),
    Inline(Vec<u8>),
}

/// One request of a batch.
#[derive(Debug, Clone, PartialEq, Eq)]
struct ExWr {
    wr_id: u64,
    flags: c_uint,
    op: ExOp,
    data: Data,
    ud: Option<UdAddr>,
}

/// The batch between `ibv_wr_start` and `ibv_wr_complete` / `ibv_wr_abort`.
#[derive(Debug, Default)]
struct Batch {
    open: bool,
    /// The first builder error: `ibv_wr_complete` returns it and posts nothing.
    err: Option<c_int>,
    wrs: Vec<ExWr>,
}

impl Batch {
    fn fail(&mut self, e: c_int) {
        self.err.get_or_insert(e);
    }

    /// The request the setters apply to (the latest), unless the batch already failed;
    /// none started is EINVAL.
    fn current(&mut self) -> Option<&mut ExWr> {
        if self.err.is_some() {
            return None;
        }
        if !self.open || self.wrs.is_empty() {
            self.fail(EINVAL);
            return None;
        }
        self.wrs.last_mut()
    }
}

/// The operations QP type `qp_type` takes; EOPNOTSUPP for other types.
fn supported_ops(qp_type: c_int) -> Result<(u64, bool), c_int> {
    match qp_type {
        IBV_QPT_RC => Ok((RC_SEND_OPS, false)),
        IBV_QPT_UC => Ok((UC_SEND_OPS, false)),
        IBV_QPT_UD => Ok((UD_SEND_OPS, true)),
        _ => Err(EOPNOTSUPP),
    }
}

/// Checks `ibv_qp_init_attr_ex`'s extended fields: the send operations asked for (None
/// without IBV_QP_INIT_ATTR_SEND_OPS_FLAGS). EINVAL without a PD; EOPNOTSUPP for
/// `comp_mask` bits other than PD, CREATE_FLAGS and SEND_OPS_FLAGS (XRC domains, RSS
/// tables, TSO), any `create_flags`, no operation or one the QP type does not take.
pub(crate) fn check_init_attr_ex(a: &ibv_qp_init_attr_ex) -> Result<Option<u64>, c_int> {
    let known = abi::IBV_QP_INIT_ATTR_PD
        | abi::IBV_QP_INIT_ATTR_CREATE_FLAGS
        | abi::IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
    if a.comp_mask & !known != 0 {
        return Err(EOPNOTSUPP);
    }
    if a.comp_mask & abi::IBV_QP_INIT_ATTR_PD == 0 || a.pd.is_null() {
        return Err(EINVAL);
    }
    if a.comp_mask & abi::IBV_QP_INIT_ATTR_CREATE_FLAGS != 0 && a.create_flags != 0 {
        return Err(EOPNOTSUPP);
    }
    if a.comp_mask & abi::IBV_QP_INIT_ATTR_SEND_OPS_FLAGS == 0 {
        return Ok(None);
    }
    let (supported, _) = supported_ops(a.qp_type)?;
    if a.send_ops_flags == 0 || a.send_ops_flags & !supported != 0 {
        return Err(EOPNOTSUPP);
    }
    Ok(Some(a.send_ops_flags))
}

/// `verbs_context.create_qp_ex` (the inline `ibv_create_qp_ex` when `comp_mask` is more
/// than IBV_QP_INIT_ATTR_PD): a QP in RESET, `attr->cap` updated with what was granted.
pub(crate) fn create_qp_ex(
    ctx: *mut abi::ibv_context,
    attr: Option<&mut ibv_qp_init_attr_ex>,
) -> *mut ibv_qp {
    let Some(a) = attr else {
        return null_with(EINVAL);
    };
    let send_ops = match check_init_attr_ex(a) {
        Ok(s) => s,
        Err(e) => return null_with(e),
    };
    if crate::resources::owner_of(a.pd) != Some(ctx) {
        return null_with(EINVAL);
    }
    let mut base = ibv_qp_init_attr {
        qp_context: a.qp_context,
        send_cq: a.send_cq,
        recv_cq: a.recv_cq,
        srq: a.srq,
        cap: a.cap,
        qp_type: a.qp_type,
        sq_sig_all: a.sq_sig_all,
    };
    let q = crate::qp::create_qp_with(a.pd, &mut base, send_ops.unwrap_or(0));
    a.cap = base.cap;
    q
}

/// `ibv_qp_to_qp_ex`: the QP's `ibv_qp_ex` (the same address) when it was created with
/// IBV_QP_INIT_ATTR_SEND_OPS_FLAGS; NULL otherwise, as rdma-core answers for a QP made
/// without the extended posting API.
pub(crate) fn qp_to_qp_ex(qp: *mut ibv_qp) -> *mut ibv_qp_ex {
    let Some(ctx) = crate::resources::owner_of(qp) else {
        return std::ptr::null_mut();
    };
    let ex = crate::device::with_inner(ctx, |inner| {
        crate::ffi::qp_extra_of(inner, qp).is_some_and(QpExtra::is_ex)
    });
    match ex {
        Some(true) => qp.cast(),
        _ => std::ptr::null_mut(),
    }
}

/// The configuration of a new QP's [`QpExtra`] from what it was granted.
pub(crate) fn config(send_ops: u64, qp_type: c_int, cap: &abi::ibv_qp_cap) -> ExConfig {
    ExConfig {
        send_ops,
        ud: qp_type == IBV_QPT_UD,
        max_send_wr: cap.max_send_wr as usize,
        max_send_sge: cap.max_send_sge as usize,
        max_inline_data: cap.max_inline_data as usize,
    }
}

/// `ibv_wr_start`: a new, empty batch (what an earlier one held is dropped).
pub(crate) fn wr_start(x: &QpExtra) {
    let mut b = x.lock();
    b.open = true;
    b.err = None;
    b.wrs.clear();
}

/// An operation builder: a new request `op` with the program's `wr_id` and `wr_flags`.
pub(crate) fn wr_op(x: &QpExtra, wr_id: u64, wr_flags: c_uint, op: ExOp) {
    let mut b = x.lock();
    if b.err.is_some() {
        return;
    }
    if !b.open || x.cfg.send_ops & op.flag() == 0 {
        return b.fail(EINVAL);
    }
    if b.wrs.len() >= x.cfg.max_send_wr {
        return b.fail(ENOMEM);
    }
    b.wrs.push(ExWr {
        wr_id,
        flags: wr_flags & !abi::IBV_SEND_INLINE,
        op,
        data: Data::None,
        ud: None,
    });
}

/// `ibv_wr_set_sge` / `ibv_wr_set_sge_list`: the latest request's buffer is `list`
/// (None: the program's list could not be read, EINVAL); EINVAL above `max_send_sge`.
pub(crate) fn wr_set_sges(x: &QpExtra, list: Option<Vec<Sge>>) {
    let max = x.cfg.max_send_sge;
    let mut b = x.lock();
    let ok = matches!(&list, Some(l) if l.len() <= max);
    let Some(w) = b.current() else { return };
    match list {
        Some(l) if ok => w.data = Data::Sges(l),
        _ => b.fail(EINVAL),
    }
}

/// `ibv_wr_set_sge`: the latest request's buffer is the one entry `sge`; EINVAL when
/// the QP takes no entry (`max_send_sge` 0).
pub(crate) fn wr_set_sge(x: &QpExtra, sge: Sge) {
    let ok = x.cfg.max_send_sge >= 1;
    let mut b = x.lock();
    let Some(w) = b.current() else { return };
    if ok {
        w.data = Data::One(sge);
    } else {
        b.fail(EINVAL);
    }
}

/// `ibv_wr_set_inline_data` / `_list`: the latest request sends a copy of `parts`
/// (concatenated); ENOMEM above `max_inline_data` (as mlx5), EINVAL for an operation that
/// sends no data (READ, atomics) or a buffer that could not be read (None).
pub(crate) fn wr_set_inline<'a>(x: &QpExtra, parts: impl IntoIterator<Item = Option<&'a [u8]>>) {
    let max = x.cfg.max_inline_data;
    let mut b = x.lock();
    let Some(w) = b.current() else { return };
    if !w.op.carries_data() {
        return b.fail(EINVAL);
    }
    let mut bytes = Vec::new();
    for p in parts {
        let Some(p) = p else { return b.fail(EINVAL) };
        if bytes.len() + p.len() > max {
            return b.fail(ENOMEM);
        }
        bytes.extend_from_slice(p);
    }
    w.data = Data::Inline(bytes);
}

/// `ibv_wr_set_ud_addr`: the latest request's destination; EINVAL on a QP that is not
/// UD.
pub(crate) fn wr_set_ud_addr(x: &QpExtra, ah: usize, remote_qpn: u32, remote_qkey: u32) {
    let ud = x.cfg.ud;
    let mut b = x.lock();
    let Some(w) = b.current() else { return };
    if !ud {
        return b.fail(EINVAL);
    }
    w.ud = Some(UdAddr {
        ah,
        remote_qpn,
        remote_qkey,
    });
}

/// Fails the batch with `e` (a builder that panicked: EIO), unless it failed already.
pub(crate) fn wr_fail(x: &QpExtra, e: c_int) {
    x.lock().fail(e);
}

/// `ibv_wr_abort`: the batch is dropped, nothing posted.
pub(crate) fn wr_abort(x: &QpExtra) {
    let mut b = x.lock();
    b.open = false;
    b.err = None;
    b.wrs.clear();
}

/// uroce's operation for a request (windows and regions looked up in `inner`).
fn send_op(p: &impl Poster, op: &ExOp) -> Result<SendOp, c_int> {
    Ok(match *op {
        ExOp::Send => SendOp::Send,
        ExOp::SendImm(imm) => SendOp::SendWithImm(u32::from_be(imm)),
        ExOp::SendInv(rkey) => SendOp::SendWithInv(rkey),
        ExOp::Write { rkey, addr } => SendOp::Write {
            remote_addr: addr,
            rkey,
        },
        ExOp::WriteImm { rkey, addr, imm } => SendOp::WriteWithImm {
            remote_addr: addr,
            rkey,
            imm: u32::from_be(imm),
        },
        ExOp::Read { rkey, addr } => SendOp::Read {
            remote_addr: addr,
            rkey,
        },
        ExOp::CmpSwp {
            rkey,
            addr,
            compare,
            swap,
        } => SendOp::CompareSwap {
            remote_addr: addr,
            rkey,
            compare,
            swap,
        },
        ExOp::FetchAdd { rkey, addr, add } => SendOp::FetchAdd {
            remote_addr: addr,
            rkey,
            add,
        },
        ExOp::LocalInv(rkey) => SendOp::LocalInv { rkey },
        ExOp::BindMw { mw, rkey, info } => {
            let c = ibv_mw_bind_info {
                mr: info.mr as *mut abi::ibv_mr,
                addr: info.addr,
                length: info.length,
                mw_access_flags: info.mw_access_flags,
            };
            p.bind(mw, rkey, &c)?
        }
    })
}

/// `ibv_wr_complete` on QP `qp` of context `ctx` (`qp->context`): 0 with the batch
/// posted; the first builder error, EINVAL outside a batch or for a request uroce
/// refuses (an unknown window, region or address handle, a UD request without
/// destination), ENOMEM when the send queue lacks room for all of it, each with nothing
/// posted; the errno of a post refused for the QP's state (before RTS: EINVAL), also with
/// nothing posted, as the first request is refused.
pub(crate) fn wr_complete(ctx: *mut abi::ibv_context, qp: *mut ibv_qp, x: &QpExtra) -> c_int {
    let (open, err, mut wrs) = {
        let mut b = x.lock();
        let open = std::mem::replace(&mut b.open, false);
        (open, b.err.take(), std::mem::take(&mut b.wrs))
    };
    let r = match (open, err) {
        (false, _) => EINVAL,
        (true, Some(e)) => e,
        (true, None) if wrs.is_empty() => 0,
        (true, None) => post_batch(ctx, qp, &wrs),
    };
    // The batch's storage goes back for the next one (no allocation per batch once
    // grown), unless a new batch has begun meanwhile.
    wrs.clear();
    let mut b = x.lock();
    if b.wrs.capacity() == 0 {
        b.wrs = wrs;
    }
    r
}

/// Posts a batch: every request checked first, then each posted (see [`wr_complete`]).
/// The batch goes in whole, as under mlx5's send-queue lock: a QP of an engine shard has
/// its shard's lock held (after the device's) from the room check to the last post, so
/// a concurrent `ibv_post_send` on it, which takes that lock alone, comes before or after.
fn post_batch(ctx: *mut abi::ibv_context, qp: *mut ibv_qp, wrs: &[ExWr]) -> c_int {
    let Some(shared) = shared_of(ctx) else {
        return EINVAL;
    };
    let mut g = shared.lock();
    let inner = &mut *g;
    let Some(e) = inner.qps.get(&(qp as usize)).copied() else {
        return EINVAL;
    };
    let r = match e
        .shard
        .checked_sub(1)
        .and_then(|k| inner.shards.get(k))
        .cloned()
    {
        Some(sh) => {
            // The routes' read under the device's lock waits for no writer (a writer
            // holds the device's lock), then the shard's: `crate::routes`' order.
            let routes = inner.routes.read();
            let mut st = sh.lock();
            let r = batch(&mut OnShard::new(&mut st.uroce, &routes, e), e, wrs);
            sh.publish(&st);
            r
        }
        None => batch(inner, e, wrs),
    };
    shared.finish_post(g, e.shard, true);
    r
}

/// [`post_batch`]'s checks and posts on `p`.
fn batch(p: &mut impl Poster, e: QpEntry, wrs: &[ExWr]) -> c_int {
    // Every request checked before the first is posted (the operation is made again
    // below, under the same locks, rather than kept in a list of its own).
    for w in wrs {
        if let Err(e) = send_op(p, &w.op) {
            return e;
        }
        if e.ud && w.ud.is_none_or(|u| p.ah(u.ah).is_none()) {
            return EINVAL;
        }
    }
    if p.on(e, |c| c.send_queue_room(e.qpn)).unwrap_or(0) < wrs.len() {
        return ENOMEM;
    }
    for w in wrs {
        let op = match send_op(p, &w.op) {
            Ok(op) => op,
            Err(e) => return e,
        };
        let staged;
        let (list, flags): (&[Sge], c_uint) = match &w.data {
            Data::None => (&[], w.flags),
            Data::One(sge) => (std::slice::from_ref(sge), w.flags),
            Data::Sges(l) => (l, w.flags),
            Data::Inline(bytes) => match crate::post::stage_bytes(p, bytes) {
                Ok(s) => {
                    staged = s;
                    (
                        std::slice::from_ref(&staged),
                        w.flags | abi::IBV_SEND_INLINE,
                    )
                }
                Err(e) => return e,
            },
        };
        let req = SendRequest {
            wr_id: w.wr_id,
            op,
            list,
            send_flags: flags,
            ud: w.ud,
        };
        if let Err(e) = crate::post::post_request(p, e, req) {
            return e;
        }
    }
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn extra(send_ops: u64) -> QpExtra {
        QpExtra::new(ExConfig {
            send_ops,
            ud: false,
            max_send_wr: 2,
            max_send_sge: 2,
            max_inline_data: 8,
        })
    }

    fn err(x: &QpExtra) -> Option<c_int> {
        x.lock().err
    }

    #[test]
    fn builders_fill_a_batch() {
        let x = extra(RC_SEND_OPS);
        wr_start(&x);
        wr_op(
            &x,
            7,
            2 | abi::IBV_SEND_INLINE,
            ExOp::Write { rkey: 1, addr: 2 },
        );
        wr_set_sges(
            &x,
            Some(vec![Sge {
                addr: 1,
                length: 2,
                lkey: 3,
            }]),
        );
        wr_op(&x, 8, 0, ExOp::Send);
        wr_set_inline(&x, [Some(&b"abc"[..]), Some(&b"de"[..])]);
        let b = x.lock();
        assert_eq!(b.err, None);
        assert_eq!(b.wrs.len(), 2);
        assert_eq!(
            (b.wrs[0].wr_id, b.wrs[0].flags),
            (7, 2),
            "INLINE comes from the setter"
        );
        assert_eq!(b.wrs[1].data, Data::Inline(b"abcde".to_vec()));
    }

    #[test]
    fn one_sge_is_kept_inline_and_needs_room_for_one() {
        let sge = Sge {
            addr: 1,
            length: 2,
            lkey: 3,
        };
        let x = extra(RC_SEND_OPS);
        wr_start(&x);
        wr_op(&x, 1, 0, ExOp::Send);
        wr_set_sge(&x, sge);
        assert_eq!(x.lock().wrs[0].data, Data::One(sge));
        let mut cfg = x.cfg;
        cfg.max_send_sge = 0;
        let y = QpExtra::new(cfg);
        wr_start(&y);
        wr_op(&y, 1, 0, ExOp::Send);
        wr_set_sge(&y, sge);
        assert_eq!(err(&y), Some(EINVAL));
    }

    #[test]
    fn a_bad_builder_fails_the_batch() {
        // An operation not asked for.
        let x = extra(abi::IBV_QP_EX_WITH_SEND);
        wr_start(&x);
        wr_op(&x, 1, 0, ExOp::Read { rkey: 1, addr: 2 });
        assert_eq!(err(&x), Some(EINVAL));
        // wr_complete answers the error, and the next batch starts clean.
        assert_eq!(
            wr_complete(std::ptr::null_mut(), std::ptr::null_mut(), &x),
            EINVAL
        );
        wr_start(&x);
        wr_op(&x, 1, 0, ExOp::Send);
        assert_eq!(err(&x), None);
        // Too many SGEs, too much inline data, inline data on a READ, too many requests.
        wr_set_sges(&x, Some(vec![Sge::default(); 3]));
        assert_eq!(err(&x), Some(EINVAL));
        let x = extra(RC_SEND_OPS);
        wr_start(&x);
        wr_op(&x, 1, 0, ExOp::Send);
        wr_set_inline(&x, [Some(&[0u8; 9][..])]);
        assert_eq!(err(&x), Some(ENOMEM));
        wr_start(&x);
        wr_op(&x, 1, 0, ExOp::Read { rkey: 1, addr: 2 });
        wr_set_inline(&x, [Some(&[0u8; 1][..])]);
        assert_eq!(err(&x), Some(EINVAL));
        wr_start(&x);
        for _ in 0..3 {
            wr_op(&x, 1, 0, ExOp::Send);
        }
        assert_eq!(err(&x), Some(ENOMEM));
        // A setter with no request, a UD address on RC, a builder outside a batch.
        wr_start(&x);
        wr_set_sges(&x, Some(vec![]));
        assert_eq!(err(&x), Some(EINVAL));
        wr_start(&x);
        wr_op(&x, 1, 0, ExOp::Send);
        wr_set_ud_addr(&x, 1, 2, 3);
        assert_eq!(err(&x), Some(EINVAL));
        wr_abort(&x);
        assert_eq!(
            wr_complete(std::ptr::null_mut(), std::ptr::null_mut(), &x),
            EINVAL
        );
        // A builder that panicked (exports.rs' `builder!`): EIO, nothing posted.
        wr_start(&x);
        wr_op(&x, 1, 0, ExOp::Send);
        wr_fail(&x, libc::EIO);
        assert_eq!(
            wr_complete(std::ptr::null_mut(), std::ptr::null_mut(), &x),
            libc::EIO
        );
    }

    #[test]
    fn create_refuses_what_uroce_lacks() {
        // SAFETY-free: the structure's zeros are valid (NULL pointers, zero integers).
        let mut a: ibv_qp_init_attr_ex = crate::ffi::zeroed();
        a.qp_type = IBV_QPT_RC;
        a.comp_mask = abi::IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
        a.send_ops_flags = abi::IBV_QP_EX_WITH_SEND;
        assert_eq!(check_init_attr_ex(&a), Err(EINVAL), "no PD");
        let mut pd = 0u64;
        a.pd = (&mut pd as *mut u64).cast();
        a.comp_mask |= abi::IBV_QP_INIT_ATTR_PD;
        assert_eq!(check_init_attr_ex(&a), Ok(Some(abi::IBV_QP_EX_WITH_SEND)));
        a.send_ops_flags = 1 << 10; // TSO
        assert_eq!(check_init_attr_ex(&a), Err(EOPNOTSUPP));
        a.qp_type = IBV_QPT_UD;
        a.send_ops_flags = abi::IBV_QP_EX_WITH_RDMA_WRITE;
        assert_eq!(check_init_attr_ex(&a), Err(EOPNOTSUPP));
        a.qp_type = IBV_QPT_UC;
        a.send_ops_flags = RC_SEND_OPS;
        assert_eq!(check_init_attr_ex(&a), Err(EOPNOTSUPP));
        a.send_ops_flags = UC_SEND_OPS;
        assert_eq!(check_init_attr_ex(&a), Ok(Some(UC_SEND_OPS)));
        a.comp_mask |= abi::IBV_QP_INIT_ATTR_CREATE_FLAGS;
        a.create_flags = 1 << 1;
        assert_eq!(check_init_attr_ex(&a), Err(EOPNOTSUPP));
        a.create_flags = 0;
        a.comp_mask |= 1 << 1; // XRCD
        assert_eq!(check_init_attr_ex(&a), Err(EOPNOTSUPP));
    }
}
