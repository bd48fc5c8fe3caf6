//! Shared receive queues: `ibv_create_srq`, `ibv_modify_srq`, `ibv_query_srq`,
//! `ibv_destroy_srq`, and `ibv_context_ops.post_srq_recv` (the inline
//! `ibv_post_srq_recv`), on uroce's SRQs (limit event, EBUSY while a QP uses one).
//!
//! Safe code: the exported verbs and the `post_srq_recv` op are wrappers in
//! `exports.rs`; an SRQ's C object is freed through the registry-checked `ffi::take_srq`.

#![deny(unsafe_code)]

use std::ffi::{c_int, c_void};

use libc::EINVAL;
use uroce::verbs::{RecvWr, SrqAttr, SrqAttrMask};

use crate::abi::{ibv_context, ibv_pd, ibv_recv_wr, ibv_srq, ibv_srq_attr};
use crate::device::{shared_of, with_inner};
use crate::engine::SrqEntry;
use crate::ffi::WrList;
use crate::resources::{disown, null_with, own, owner_of};

/// `struct ibv_srq_init_attr`.
#[repr(C)]
pub struct ibv_srq_init_attr {
    pub srq_context: *mut c_void,
    pub attr: ibv_srq_attr,
}

fn attr_of(a: &ibv_srq_attr) -> SrqAttr {
    SrqAttr {
        max_wr: a.max_wr,
        max_sge: a.max_sge,
        srq_limit: a.srq_limit,
    }
}

/// The C form of uroce's SRQ attributes.
fn c_attr_of(a: SrqAttr) -> ibv_srq_attr {
    ibv_srq_attr {
        max_wr: a.max_wr,
        max_sge: a.max_sge,
        srq_limit: a.srq_limit,
    }
}

/// `ibv_create_srq`: `attr->attr` is updated with what was granted. `attr` is the
/// caller's structure (None for NULL: EINVAL).
pub(crate) fn create_srq(pd: *mut ibv_pd, attr: Option<&mut ibv_srq_init_attr>) -> *mut ibv_srq {
    let Some(ctx) = owner_of(pd) else {
        return null_with(EINVAL);
    };
    let Some(a) = attr else {
        return null_with(EINVAL);
    };
    let made = with_inner(ctx, |inner| {
        let pd_id = *inner.pds.get(&(pd as usize)).ok_or(EINVAL)?;
        let id = inner
            .uroce
            .create_srq(pd_id, attr_of(&a.attr))
            .map_err(|e| e.errno())?;
        if let Ok(g) = inner.uroce.query_srq(id) {
            a.attr = c_attr_of(g);
        }
        let mut s: ibv_srq = crate::ffi::zeroed();
        s.context = ctx;
        s.srq_context = a.srq_context;
        s.pd = pd;
        s.handle = id.0;
        let s = Box::into_raw(Box::new(s));
        inner.srqs.insert(
            s as usize,
            SrqEntry {
                id,
                pd: pd as usize,
            },
        );
        own(s, ctx);
        Ok(s)
    });
    match made {
        Some(Ok(s)) => s,
        Some(Err(e)) => null_with(e),
        None => null_with(EINVAL),
    }
}

/// `ibv_modify_srq`: IBV_SRQ_MAX_WR (resize) and IBV_SRQ_LIMIT (arm); 0 or the errno.
/// `attr` is the caller's (None for NULL: EINVAL).
pub(crate) fn modify_srq(srq: *mut ibv_srq, attr: Option<ibv_srq_attr>, mask: c_int) -> c_int {
    let Some(ctx) = owner_of(srq) else {
        return EINVAL;
    };
    let Some(attr) = attr.filter(|_| mask & !3 == 0) else {
        return EINVAL;
    };
    let a = attr_of(&attr);
    let mut m = SrqAttrMask::default();
    if mask & 1 != 0 {
        m = m | SrqAttrMask::MAX_WR;
    }
    if mask & 2 != 0 {
        m = m | SrqAttrMask::LIMIT;
    }
    with_inner(ctx, |inner| {
        let Some(e) = inner.srqs.get(&(srq as usize)).copied() else {
            return EINVAL;
        };
        match inner.uroce.modify_srq(e.id, a, m) {
            Ok(()) => 0,
            Err(e) => e.errno(),
        }
    })
    .unwrap_or(EINVAL)
}

/// `ibv_query_srq`: the SRQ's attributes, or the errno.
pub(crate) fn query_srq(srq: *mut ibv_srq) -> Result<ibv_srq_attr, c_int> {
    let ctx = owner_of(srq).ok_or(EINVAL)?;
    with_inner(ctx, |inner| {
        let e = inner.srqs.get(&(srq as usize)).copied().ok_or(EINVAL)?;
        inner
            .uroce
            .query_srq(e.id)
            .map(c_attr_of)
            .map_err(|e| e.errno())
    })
    .unwrap_or(Err(EINVAL))
}

/// `ibv_destroy_srq`: 0, EBUSY while a QP uses it, EINVAL for an unknown one.
pub(crate) fn destroy_srq(srq: *mut ibv_srq) -> c_int {
    let Some(ctx) = owner_of(srq) else {
        return EINVAL;
    };
    with_inner(ctx, |inner| {
        let Some(e) = inner.srqs.get(&(srq as usize)).copied() else {
            return EINVAL;
        };
        if let Err(e) = inner.uroce.destroy_srq(e.id) {
            return e.errno();
        }
        inner.forget_async_events_of(srq as usize);
        // Disowned first, then its C object freed as it leaves the registry.
        disown(srq);
        crate::ffi::take_srq(inner, srq);
        0
    })
    .unwrap_or(EINVAL)
}

/// `ibv_context_ops.post_srq_recv` (the inline `ibv_post_srq_recv`): 0, or the errno of
/// the first request refused with `*bad` pointing at it. `ctx` is `srq->context`.
pub(crate) fn post_srq_recv(
    ctx: *mut ibv_context,
    srq: *mut ibv_srq,
    list: WrList<ibv_recv_wr>,
) -> c_int {
    let Some(shared) = shared_of(ctx) else {
        return list.refuse();
    };
    let mut g = shared.lock();
    let Some(e) = g.srqs.get(&(srq as usize)).copied() else {
        return list.refuse();
    };
    crate::post::post_recv_list(&mut g, list, |inner, wr_id, list| {
        let r = match list {
            [] | [_] => inner.uroce.post_srq_recv(
                e.id,
                RecvWr {
                    wr_id,
                    sge: list.first().copied().unwrap_or_default(),
                },
            ),
            _ => inner.uroce.post_srq_recv_sgl(e.id, wr_id, list),
        };
        r.map_err(|e| e.errno())
    })
}
