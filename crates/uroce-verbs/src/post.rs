//! The posting verbs: `ibv_post_send` and `ibv_post_recv` (the inline operations of
//! `ibv_context_ops`), and what the extended posting API (`crate::qp_ex`) and SRQs
//! (`crate::srq`) share of them: the requests converted to uroce's, inline data staged,
//! what became sendable handed to the datapath before the post returns.
//!
//! A post runs on a [`Poster`]: the device's state under its lock ([`Inner`]), or, for a
//! QP of an engine shard, the shard's context under the shard's lock alone ([`OnShard`],
//! found through the route table, `crate::routes`): threads posting to QPs of different
//! shards do not wait for each other.

#![deny(unsafe_code)]

use std::ffi::{c_int, c_uint};

use libc::{EINVAL, EOPNOTSUPP};
use uroce::verbs::{
    Access, Context, Mr, RecvWr, Remote, SendFlags, SendOp, SendWr, Sge, UdSendWr, MAX_INLINE_DATA,
    MAX_SGE,
};

use crate::abi::{ibv_mw_bind_info, ibv_qp, ibv_recv_wr, ibv_send_wr};
use crate::device::shared_of;
use crate::engine::{Inner, QpEntry};
use crate::ffi::{Wr, WrList};
use crate::resources::access_of;
use crate::routes::Routes;

// enum ibv_send_flags.
const SEND_FENCE: c_uint = 1;
const SEND_SIGNALED: c_uint = 2;
const SEND_SOLICITED: c_uint = 4;

/// Where a post builds its requests and hands them to uroce.
pub(crate) trait Poster {
    /// Gathers `total` bytes of inline data (`fill` writes them, and says how many)
    /// into this poster's slot of the staging region ([`inline_stage`]): the SGE over
    /// them; EINVAL above the device's `max_inline_data`.
    fn stage(
        &mut self,
        total: u64,
        fill: impl FnOnce(&mut [u8]) -> Result<usize, c_int>,
    ) -> Result<Sge, c_int>;
    /// Where the datagrams of address handle `ah` (by address) go: None for a handle
    /// that is not registered.
    fn ah(&self, ah: usize) -> Option<Remote>;
    /// The BIND_MW operation for window `mw` (by address), as [`bind_op`].
    fn bind(&self, mw: usize, rkey: u32, info: &ibv_mw_bind_info) -> Result<SendOp, c_int>;
    /// Runs `f` on the context QP `e` lives in.
    fn on<R>(&mut self, e: QpEntry, f: impl FnOnce(&mut Context) -> R) -> R;
}

/// The device's state, under its lock: any QP, on any engine (a shard's under its lock,
/// taken after the device's); inline data in slot 0.
impl Poster for Inner {
    fn stage(
        &mut self,
        total: u64,
        fill: impl FnOnce(&mut [u8]) -> Result<usize, c_int>,
    ) -> Result<Sge, c_int> {
        if total > u64::from(MAX_INLINE_DATA) {
            return Err(EINVAL);
        }
        let stage = inline_stage(self)?;
        if !self.shards.is_empty() {
            // The shards reach the region through their mirrors, as memory of the
            // program's: it is written by a copy, never through a reference to it.
            return fill_slot(&mut self.uroce, &stage, 0, total, fill);
        }
        let at = fill(self.uroce.mr_bytes_mut(&stage))?;
        Ok(Sge {
            addr: stage.addr,
            length: at as u32,
            lkey: stage.lkey,
        })
    }

    fn ah(&self, ah: usize) -> Option<Remote> {
        self.ahs.get(&ah).map(|a| a.remote)
    }

    fn bind(&self, mw: usize, rkey: u32, info: &ibv_mw_bind_info) -> Result<SendOp, c_int> {
        bind_op(self, mw, rkey, info)
    }

    fn on<R>(&mut self, e: QpEntry, f: impl FnOnce(&mut Context) -> R) -> R {
        self.ctx_of(e.shard, f)
    }
}

/// A QP of an engine shard: its context under the shard's lock, the device's route
/// table read; inline data in the shard's own slot. `ibv_post_send` and `ibv_post_recv`
/// use it without the device's lock; the extended API's batch with it too, so that the
/// batch goes in whole ([`crate::qp_ex`]).
pub(crate) struct OnShard<'a> {
    ctx: &'a mut Context,
    routes: &'a Routes,
    slot: usize,
}

impl<'a> OnShard<'a> {
    /// The poster for QP `e`, in context `ctx` (its shard's, locked).
    pub fn new(ctx: &'a mut Context, routes: &'a Routes, e: QpEntry) -> Self {
        Self {
            ctx,
            routes,
            slot: e.shard,
        }
    }
}

impl Poster for OnShard<'_> {
    fn stage(
        &mut self,
        total: u64,
        fill: impl FnOnce(&mut [u8]) -> Result<usize, c_int>,
    ) -> Result<Sge, c_int> {
        // Made when the shards started (`Shared::start`).
        let stage = self.routes.stage.ok_or(EINVAL)?;
        fill_slot(self.ctx, &stage, self.slot, total, fill)
    }

    fn ah(&self, ah: usize) -> Option<Remote> {
        self.routes.ahs.get(&ah).copied()
    }

    /// EINVAL: no memory window exists while a QP lives on a shard (`crate::mw`), so
    /// the window named is not one (as [`bind_op`] answers).
    fn bind(&self, _: usize, _: u32, _: &ibv_mw_bind_info) -> Result<SendOp, c_int> {
        Err(EINVAL)
    }

    fn on<R>(&mut self, _: QpEntry, f: impl FnOnce(&mut Context) -> R) -> R {
        f(self.ctx)
    }
}

/// Gathers the bytes an IBV_SEND_INLINE request names into the poster's slot of the
/// context's inline staging region and gives the one SGE over them: ibverbs reads inline
/// data from the SGEs' addresses at post time, registered or not (mlx5 and rdma_rxe copy
/// it with `memcpy`, their lkeys unread). uroce then copies it into the QP's inline pool
/// as it posts, so the slot is free again when the post returns. EINVAL above the
/// device's `max_inline_data` (512; the QP's own limit is checked by uroce). `list` is
/// `w`'s SGEs.
fn stage_inline(p: &mut impl Poster, w: &Wr<'_, ibv_send_wr>, list: &[Sge]) -> Result<Sge, c_int> {
    let total: u64 = list.iter().map(|s| u64::from(s.length)).sum();
    p.stage(total, |dst| w.gather_inline(dst))
}

/// [`stage_inline`] for bytes the extended API copied already (`ibv_wr_set_inline_data`).
pub(crate) fn stage_bytes(p: &mut impl Poster, bytes: &[u8]) -> Result<Sge, c_int> {
    p.stage(bytes.len() as u64, |dst| {
        dst[..bytes.len()].copy_from_slice(bytes);
        Ok(bytes.len())
    })
}

/// The bytes of one slot of the inline staging region.
const SLOT: usize = MAX_INLINE_DATA as usize;

/// The device's inline staging region, made on first use (or when engine shards start):
/// a slot of [`SLOT`] bytes for each engine, slot 0 written under the device's lock and
/// slot `k` under shard `k`'s alone, so posts on different shards stage side by side.
/// Its own PD; mirrored into every shard, and named in the route table.
pub(crate) fn inline_stage(inner: &mut Inner) -> Result<Mr, c_int> {
    if let Some(mr) = inner.inline_stage {
        return Ok(mr);
    }
    let pd = inner.uroce.alloc_pd();
    let slots = 1 + inner.shards.len();
    let mr = inner
        .uroce
        .reg_mr(pd, vec![0; SLOT * slots], Access::NONE)
        .map_err(|e| e.errno())?;
    inner
        .mirror(|c| {
            c.mirror_pd(pd);
            crate::ffi::mirror_region(c, &mr)
        })
        .map_err(|e| e.errno())?;
    inner.inline_stage = Some(mr);
    if let Some(mut r) = inner.routes_mut() {
        r.stage = Some(mr);
    }
    Ok(mr)
}

/// Fills slot `slot` of the staging region `stage` through context `c` with `total`
/// bytes (`fill` writes them): the SGE over them. Written by a copy, never through a
/// reference to the region: with shards, other engines write their slots meanwhile.
fn fill_slot(
    c: &mut Context,
    stage: &Mr,
    slot: usize,
    total: u64,
    fill: impl FnOnce(&mut [u8]) -> Result<usize, c_int>,
) -> Result<Sge, c_int> {
    if total > u64::from(MAX_INLINE_DATA) {
        return Err(EINVAL);
    }
    let mut staged = [0u8; SLOT];
    let at = fill(&mut staged)?;
    let offset = slot * SLOT;
    if !c.mr_write(stage, offset, &staged[..at]) {
        return Err(EINVAL);
    }
    Ok(Sge {
        addr: stage.addr + offset as u64,
        length: at as u32,
        lkey: stage.lkey,
    })
}

/// The destination of a UD send: `wr.ud` of `ibv_send_wr`, or what
/// `ibv_wr_set_ud_addr` gave (the address handle by address).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct UdAddr {
    pub ah: usize,
    pub remote_qpn: u32,
    pub remote_qkey: u32,
}

/// One send work request as both posting APIs (`ibv_post_send`, `ibv_wr_complete`)
/// hand it to [`post_request`]: its operation, its local buffer (inline data already
/// staged, [`stage_bytes`]), its `ibv_send_flags` and, on UD, its destination.
pub(crate) struct SendRequest<'a> {
    pub wr_id: u64,
    pub op: SendOp,
    pub list: &'a [Sge],
    pub send_flags: c_uint,
    pub ud: Option<UdAddr>,
}

/// The BIND_MW operation for window `mw` (by address) with `rkey` and `info`: EINVAL for
/// a window, or a region (unless the length is 0), that is not registered.
pub(crate) fn bind_op(
    inner: &Inner,
    mw: usize,
    rkey: u32,
    info: &crate::abi::ibv_mw_bind_info,
) -> Result<SendOp, c_int> {
    let (mw, _) = *inner.mws.get(&mw).ok_or(EINVAL)?;
    let mr_lkey = match inner.mrs.get(&(info.mr as usize)) {
        Some(m) => m.lkey,
        None if info.length == 0 => 0,
        None => return Err(EINVAL),
    };
    Ok(SendOp::BindMw {
        mw: mw.id(),
        rkey,
        mr_lkey,
        addr: info.addr,
        length: info.length,
        access: access_of(info.mw_access_flags)?,
    })
}

/// Posts one send work request: 0, or the errno `ibv_post_send` gives for it. On UD the
/// operation is SEND or SEND with immediate (EINVAL otherwise) and `ud` names a
/// registered address handle (EINVAL otherwise).
pub(crate) fn post_request(
    p: &mut impl Poster,
    e: QpEntry,
    r: SendRequest<'_>,
) -> Result<(), c_int> {
    let f = r.send_flags;
    let mut flags = SendFlags::NONE;
    if f & SEND_FENCE != 0 {
        flags = flags | SendFlags::FENCE;
    }
    if f & crate::abi::IBV_SEND_INLINE != 0 {
        flags = flags | SendFlags::INLINE;
    }
    let signaled = f & SEND_SIGNALED != 0;
    let solicited = f & SEND_SOLICITED != 0;
    let list = r.list;
    let one = (list.len() <= 1).then(|| list.first().copied().unwrap_or_default());
    let res = if e.ud {
        let imm = match r.op {
            SendOp::Send => None,
            SendOp::SendWithImm(imm) => Some(imm),
            _ => return Err(EINVAL),
        };
        let ud = r.ud.ok_or(EINVAL)?;
        let dest = p.ah(ud.ah).ok_or(EINVAL)?;
        let wr = UdSendWr {
            wr_id: r.wr_id,
            dest,
            remote_qpn: ud.remote_qpn,
            remote_qkey: ud.remote_qkey,
            sge: one.unwrap_or_default(),
            imm,
            signaled,
            solicited,
        };
        p.on(e, |c| match one {
            Some(_) => c.post_send_ud_with(e.qpn, wr, flags),
            None => c.post_send_ud_sgl(e.qpn, wr, list, flags),
        })
    } else {
        let wr = SendWr {
            wr_id: r.wr_id,
            op: r.op,
            sge: one.unwrap_or_default(),
            signaled,
            solicited,
        };
        p.on(e, |c| match one {
            Some(_) => c.post_send_with(e.qpn, wr, flags),
            None => c.post_send_sgl(e.qpn, wr, list, flags),
        })
    };
    res.map_err(|e| e.errno())
}

/// The operation of an `ibv_send_wr` (its `wr` union read as the opcode says it is
/// filled; `None` from an accessor cannot happen, each answers for the opcodes that
/// name its member).
fn send_op_of(p: &impl Poster, e: QpEntry, w: &Wr<'_, ibv_send_wr>) -> Result<SendOp, c_int> {
    if e.ud {
        return match w.opcode {
            crate::abi::IBV_WR_SEND => Ok(SendOp::Send),
            crate::abi::IBV_WR_SEND_WITH_IMM => Ok(SendOp::SendWithImm(u32::from_be(w.imm_data))),
            _ => Err(EINVAL),
        };
    }
    Ok(match w.opcode {
        crate::abi::IBV_WR_SEND => SendOp::Send,
        crate::abi::IBV_WR_SEND_WITH_IMM => SendOp::SendWithImm(u32::from_be(w.imm_data)),
        crate::abi::IBV_WR_SEND_WITH_INV => SendOp::SendWithInv(w.imm_data),
        crate::abi::IBV_WR_RDMA_WRITE => {
            let r = w.rdma().ok_or(EINVAL)?;
            SendOp::Write {
                remote_addr: r.remote_addr,
                rkey: r.rkey,
            }
        }
        crate::abi::IBV_WR_RDMA_WRITE_WITH_IMM => {
            let r = w.rdma().ok_or(EINVAL)?;
            SendOp::WriteWithImm {
                remote_addr: r.remote_addr,
                rkey: r.rkey,
                imm: u32::from_be(w.imm_data),
            }
        }
        crate::abi::IBV_WR_RDMA_READ => {
            let r = w.rdma().ok_or(EINVAL)?;
            SendOp::Read {
                remote_addr: r.remote_addr,
                rkey: r.rkey,
            }
        }
        crate::abi::IBV_WR_ATOMIC_CMP_AND_SWP => {
            let a = w.atomic().ok_or(EINVAL)?;
            SendOp::CompareSwap {
                remote_addr: a.remote_addr,
                rkey: a.rkey,
                compare: a.compare_add,
                swap: a.swap,
            }
        }
        crate::abi::IBV_WR_ATOMIC_FETCH_AND_ADD => {
            let a = w.atomic().ok_or(EINVAL)?;
            SendOp::FetchAdd {
                remote_addr: a.remote_addr,
                rkey: a.rkey,
                add: a.compare_add,
            }
        }
        crate::abi::IBV_WR_LOCAL_INV => SendOp::LocalInv { rkey: w.imm_data },
        crate::abi::IBV_WR_BIND_MW => {
            let b = w.bind_mw().ok_or(EINVAL)?;
            p.bind(b.mw as usize, b.rkey, &b.bind_info)?
        }
        // TSO, driver.
        10 | 11 => return Err(EOPNOTSUPP),
        _ => return Err(EINVAL),
    })
}

/// Posts one send work request of `ibv_post_send`.
fn post_one_send(p: &mut impl Poster, e: QpEntry, w: Wr<'_, ibv_send_wr>) -> Result<(), c_int> {
    let mut buf = [Sge::default(); MAX_SGE as usize];
    let list = w.sges(&mut buf)?;
    let carries_data = matches!(
        w.opcode,
        crate::abi::IBV_WR_SEND
            | crate::abi::IBV_WR_SEND_WITH_IMM
            | crate::abi::IBV_WR_SEND_WITH_INV
            | crate::abi::IBV_WR_RDMA_WRITE
            | crate::abi::IBV_WR_RDMA_WRITE_WITH_IMM
    );
    let staged;
    let list = if w.send_flags & crate::abi::IBV_SEND_INLINE != 0 && carries_data {
        staged = stage_inline(p, &w, list)?;
        std::slice::from_ref(&staged)
    } else {
        list
    };
    let op = send_op_of(p, e, &w)?;
    let ud = match e.ud {
        true => w.ud().map(|u| UdAddr {
            ah: u.ah as usize,
            remote_qpn: u.remote_qpn,
            remote_qkey: u.remote_qkey,
        }),
        false => None,
    };
    let r = SendRequest {
        wr_id: w.wr_id,
        op,
        list,
        send_flags: w.send_flags,
        ud,
    };
    post_request(p, e, r)
}

/// Posts each request of `list` with `one`; on the first failure `*bad` is it and the
/// answer its errno. Then hands what became sendable to the datapath.
fn post_list<W: crate::ffi::WorkRequest>(
    inner: &mut Inner,
    list: WrList<W>,
    mut one: impl FnMut(&mut Inner, Wr<'_, W>) -> Result<(), c_int>,
) -> c_int {
    let r = list.each(|w| one(inner, w));
    inner.pump(false);
    r
}

/// Posts each request of `list` on a QP of engine `shard` with `one`, as [`post_list`],
/// then [`crate::engine::Shared::finish_post`] (`sends`: a send queue's).
fn post_list_on<W: crate::ffi::WorkRequest>(
    shared: &crate::engine::Shared,
    mut g: std::sync::MutexGuard<'_, Inner>,
    (shard, sends): (usize, bool),
    list: WrList<W>,
    mut one: impl FnMut(&mut Inner, Wr<'_, W>) -> Result<(), c_int>,
) -> c_int {
    let r = list.each(|w| one(&mut g, w));
    shared.finish_post(g, shard, sends);
    r
}

/// `ibv_context_ops.post_send` (the inline `ibv_post_send`) on QP `qp` of context `ctx`
/// (`qp->context`, NULL for a NULL QP): 0, or the errno of the first request refused
/// with `*bad` pointing at it (the ones before it are posted).
pub(crate) fn post_send(
    ctx: *mut crate::abi::ibv_context,
    qp: *mut ibv_qp,
    list: WrList<ibv_send_wr>,
) -> c_int {
    let Some(shared) = shared_of(ctx) else {
        return list.refuse();
    };
    let on_shard = shared.on_shard(qp as usize, |routes, e, c| {
        let mut p = OnShard::new(c, routes, e);
        list.each(|w| post_one_send(&mut p, e, w))
    });
    if let Some(r) = on_shard {
        return r;
    }
    let g = shared.lock();
    let Some(e) = g.qps.get(&(qp as usize)).copied() else {
        return list.refuse();
    };
    post_list_on(&shared, g, (e.shard, true), list, |inner, w| {
        post_one_send(inner, e, w)
    })
}

/// Posts one receive work request on a QP.
fn post_one_recv(p: &mut impl Poster, e: QpEntry, w: Wr<'_, ibv_recv_wr>) -> Result<(), c_int> {
    let mut buf = [Sge::default(); MAX_SGE as usize];
    let list = w.sges(&mut buf)?;
    let qpn = e.qpn;
    let r = p.on(e, |c| match list {
        [] | [_] => c.post_recv(
            qpn,
            RecvWr {
                wr_id: w.wr_id,
                sge: list.first().copied().unwrap_or_default(),
            },
        ),
        _ => c.post_recv_sgl(qpn, w.wr_id, list),
    });
    r.map_err(|e| e.errno())
}

/// `ibv_context_ops.post_recv` (the inline `ibv_post_recv`), as [`post_send`].
pub(crate) fn post_recv(
    ctx: *mut crate::abi::ibv_context,
    qp: *mut ibv_qp,
    list: WrList<ibv_recv_wr>,
) -> c_int {
    let Some(shared) = shared_of(ctx) else {
        return list.refuse();
    };
    let on_shard = shared.on_shard(qp as usize, |routes, e, c| {
        let mut p = OnShard::new(c, routes, e);
        list.each(|w| post_one_recv(&mut p, e, w))
    });
    if let Some(r) = on_shard {
        return r;
    }
    let g = shared.lock();
    let Some(e) = g.qps.get(&(qp as usize)).copied() else {
        return list.refuse();
    };
    post_list_on(&shared, g, (e.shard, false), list, |inner, w| {
        post_one_recv(inner, e, w)
    })
}

/// Posts a receive list on an SRQ (shared with [`crate::srq`]): `one` takes each
/// request's id and SGEs.
pub(crate) fn post_recv_list(
    inner: &mut Inner,
    list: WrList<ibv_recv_wr>,
    mut one: impl FnMut(&mut Inner, u64, &[Sge]) -> Result<(), c_int>,
) -> c_int {
    post_list(inner, list, |inner, w| {
        let mut buf = [Sge::default(); MAX_SGE as usize];
        let sges = w.sges(&mut buf)?;
        one(inner, w.wr_id, sges)
    })
}
