//! Shared receive queues: `ibv_create_srq`, `ibv_modify_srq`, `ibv_query_srq`,
//! `ibv_destroy_srq`, and `ibv_context_ops.post_srq_recv` (the inline
//! `ibv_post_srq_recv`), on uroce's SRQs (limit event, EBUSY while a QP uses one).

use std::ffi::{c_int, c_void};

use libc::EINVAL;
use uroce::verbs::{RecvWr, SrqAttr, SrqAttrMask};

use crate::abi::{ibv_pd, ibv_recv_wr, ibv_srq, ibv_srq_attr};
use crate::device::{shared_of, with_inner};
use crate::engine::SrqEntry;
use crate::exports::default_version;
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

/// `ibv_create_srq`: `attr->attr` is updated with what was granted.
///
/// # Safety
/// `attr` points at a readable and writable `struct ibv_srq_init_attr`.
#[no_mangle]
pub unsafe extern "C" fn ibv_create_srq(
    pd: *mut ibv_pd,
    attr: *mut ibv_srq_init_attr,
) -> *mut ibv_srq {
    crate::ffi::ptr("ibv_create_srq", move || {
        let Some(ctx) = owner_of(pd) else {
            return null_with(EINVAL);
        };
        if attr.is_null() {
            return null_with(EINVAL);
        }
        // SAFETY: the caller's ibv_srq_init_attr.
        let a = unsafe { &mut *attr };
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
    })
}
default_version!(ibv_create_srq, "IBVERBS_1.1");

/// `ibv_modify_srq`: IBV_SRQ_MAX_WR (resize) and IBV_SRQ_LIMIT (arm); 0 or the errno.
///
/// # Safety
/// `attr` points at a readable `struct ibv_srq_attr`.
#[no_mangle]
pub unsafe extern "C" fn ibv_modify_srq(
    srq: *mut ibv_srq,
    attr: *mut ibv_srq_attr,
    mask: c_int,
) -> c_int {
    crate::ffi::errno("ibv_modify_srq", move || {
        let Some(ctx) = owner_of(srq) else {
            return EINVAL;
        };
        if attr.is_null() || mask & !3 != 0 {
            return EINVAL;
        }
        // SAFETY: the caller's readable ibv_srq_attr.
        let a = attr_of(unsafe { &*attr });
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
    })
}
default_version!(ibv_modify_srq, "IBVERBS_1.1");

/// `ibv_query_srq`.
///
/// # Safety
/// `attr` points at a writable `struct ibv_srq_attr`.
#[no_mangle]
pub unsafe extern "C" fn ibv_query_srq(srq: *mut ibv_srq, attr: *mut ibv_srq_attr) -> c_int {
    crate::ffi::errno("ibv_query_srq", move || {
        let Some(ctx) = owner_of(srq) else {
            return EINVAL;
        };
        if attr.is_null() {
            return EINVAL;
        }
        with_inner(ctx, |inner| {
            let Some(e) = inner.srqs.get(&(srq as usize)).copied() else {
                return EINVAL;
            };
            match inner.uroce.query_srq(e.id) {
                Ok(g) => {
                    // SAFETY: the caller's writable ibv_srq_attr.
                    unsafe { attr.write(c_attr_of(g)) };
                    0
                }
                Err(e) => e.errno(),
            }
        })
        .unwrap_or(EINVAL)
    })
}
default_version!(ibv_query_srq, "IBVERBS_1.1");

/// `ibv_destroy_srq`: 0, EBUSY while a QP uses it, EINVAL for an unknown one.
#[no_mangle]
pub extern "C" fn ibv_destroy_srq(srq: *mut ibv_srq) -> c_int {
    crate::ffi::errno("ibv_destroy_srq", move || {
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
            inner.srqs.remove(&(srq as usize));
            inner.forget_async_events_of(srq as usize);
            disown(srq);
            // SAFETY: registered, so from Box::into_raw in ibv_create_srq, freed once.
            unsafe { crate::ffi::free_c(srq) };
            0
        })
        .unwrap_or(EINVAL)
    })
}
default_version!(ibv_destroy_srq, "IBVERBS_1.1");

/// `ibv_context_ops.post_srq_recv` (the inline `ibv_post_srq_recv`): 0, or the errno of
/// the first request refused with `*bad` pointing at it.
pub(crate) unsafe extern "C" fn post_srq_recv(
    srq: *mut ibv_srq,
    wr: *mut ibv_recv_wr,
    bad: *mut *mut ibv_recv_wr,
) -> c_int {
    crate::ffi::errno("post_srq_recv", move || {
        // SAFETY: the list and `bad` are the caller's, as verbs.h has them.
        let list = unsafe { crate::ffi::WrList::new(wr, bad) };
        // SAFETY: the inline ibv_post_srq_recv read `srq->context` already.
        let Some(shared) = shared_of(unsafe { crate::ffi::srq_context(srq) }) else {
            return list.refuse();
        };
        let mut g = shared.lock();
        let Some(e) = g.srqs.get(&(srq as usize)).copied() else {
            return list.refuse();
        };
        crate::qp::post_recv_list(&mut g, list, |inner, wr_id, list| {
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
    })
}
