//! Memory windows: `ibv_context_ops.alloc_mw`, `bind_mw` and `dealloc_mw` (what the inline
//! `ibv_alloc_mw`, `ibv_bind_mw` and `ibv_dealloc_mw` of verbs.h call), on uroce's windows
//! (`mem/window.rs`). A type 1 window is bound with `ibv_bind_mw`, which posts a bind on
//! the QP's send queue and gives the window its next rkey at once (`mw->rkey`); a type 2
//! window with an IBV_WR_BIND_MW work request ([`crate::qp`]), whose rkey the program
//! chooses with `ibv_inc_rkey`. Both complete IBV_WC_BIND_MW, or IBV_WC_MW_BIND_ERR.
//!
//! Safe code: the ops-table entries are wrappers in `exports.rs`; a window's C object is
//! reached through the registry-checked `ffi::mw_object` / `ffi::take_mw`.

#![deny(unsafe_code)]

use std::ffi::c_int;

use libc::EINVAL;
use uroce::verbs::{MwBind, MwType};

use crate::abi::{ibv_mw, ibv_mw_bind, ibv_pd, ibv_qp};
use crate::device::shared_of;
use crate::resources::{access_of, disown, null_with, own, owner_of};

/// `enum ibv_mw_type`.
const IBV_MW_TYPE_1: c_int = 1;
const IBV_MW_TYPE_2: c_int = 2;

/// IBV_SEND_SIGNALED.
const SEND_SIGNALED: u32 = 2;

/// `ibv_context_ops.alloc_mw`: a window of `pd`, unbound; NULL with errno EINVAL for an
/// unknown PD or type.
pub(crate) fn alloc_mw(pd: *mut ibv_pd, mw_type: c_int) -> *mut ibv_mw {
    let Some(ctx) = owner_of(pd) else {
        return null_with(EINVAL);
    };
    let t = match mw_type {
        IBV_MW_TYPE_1 => MwType::Type1,
        IBV_MW_TYPE_2 => MwType::Type2,
        _ => return null_with(EINVAL),
    };
    let Some(shared) = shared_of(ctx) else {
        return null_with(EINVAL);
    };
    let mut g = shared.lock();
    let Some(&pd_id) = g.pds.get(&(pd as usize)) else {
        return null_with(EINVAL);
    };
    // A window's bindings change with work requests on one QP and are not mirrored
    // into the engine shards (`crate::shard`): a context with a window keeps every QP
    // on its own engine, and one with QPs on the shards already gets none.
    if g.any_qp_on_shards() {
        return null_with(libc::EOPNOTSUPP);
    }
    let mw = match g.uroce.alloc_mw(pd_id, t) {
        Ok(m) => m,
        Err(e) => return null_with(e.errno()),
    };
    g.pinned = true;
    let c = Box::into_raw(Box::new(ibv_mw {
        context: ctx,
        pd,
        rkey: mw.rkey,
        handle: mw.id().0,
        type_: mw_type,
    }));
    g.mws.insert(c as usize, (mw, pd as usize));
    own(c, ctx);
    c
}

/// `ibv_context_ops.dealloc_mw`: 0, or EINVAL for an unknown window.
pub(crate) fn dealloc_mw(mw: *mut ibv_mw) -> c_int {
    let Some(ctx) = owner_of(mw) else {
        return EINVAL;
    };
    let Some(shared) = shared_of(ctx) else {
        return EINVAL;
    };
    let mut g = shared.lock();
    let Some(&(w, _)) = g.mws.get(&(mw as usize)) else {
        return EINVAL;
    };
    if let Err(e) = g.uroce.dealloc_mw(&w) {
        return e.errno();
    }
    // Disowned first, then its C object freed as it leaves the registry, so a new
    // object at this address (of any context) is owned only after.
    disown(mw);
    crate::ffi::take_mw(&mut g, mw);
    drop(g);
    0
}

/// `ibv_context_ops.bind_mw`: binds a type 1 window through `qp`'s send queue; 0 (and
/// `mw->rkey` is the window's new key), or the errno (EINVAL for a type 2 window, an
/// unknown object, a region that is not of this context). `ctx` is `mw->context`, `b`
/// the caller's bind.
pub(crate) fn bind_mw(
    qp: *mut ibv_qp,
    mw: *mut ibv_mw,
    ctx: *mut crate::abi::ibv_context,
    b: ibv_mw_bind,
) -> c_int {
    let Some(shared) = shared_of(ctx) else {
        return EINVAL;
    };
    let mut g = shared.lock();
    let (Some(q), Some(&(mut w, pd))) = (
        g.qps.get(&(qp as usize)).copied(),
        g.mws.get(&(mw as usize)),
    ) else {
        return EINVAL;
    };
    let info = b.bind_info;
    let mr_lkey = match g.mrs.get(&(info.mr as usize)) {
        Some(m) => m.lkey,
        None if info.length == 0 => 0,
        None => return EINVAL,
    };
    let Ok(access) = access_of(info.mw_access_flags) else {
        return EINVAL;
    };
    let req = MwBind {
        wr_id: b.wr_id,
        signaled: b.send_flags & SEND_SIGNALED != 0,
        mr_lkey,
        addr: info.addr,
        length: info.length,
        access,
    };
    match g.uroce.bind_mw(q.qpn, &mut w, req) {
        Ok(()) => {
            g.mws.insert(mw as usize, (w, pd));
            if let Some(c) = crate::ffi::mw_object(&mut g, mw) {
                c.rkey = w.rkey;
            }
            g.pump(false);
            shared.after_post(&g);
            0
        }
        Err(e) => e.errno(),
    }
}
