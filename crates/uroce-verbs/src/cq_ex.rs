//! The extended completion interface: `ibv_create_cq_ex` and the polling functions of
//! `struct ibv_cq_ex` (`ibv_start_poll`, `ibv_next_poll`, `ibv_end_poll`, the
//! `ibv_wc_read_*` readers).
//!
//! Every CQ this library hands out is a [`CqObject`]: the `ibv_cq_ex` the program sees
//! (its first members an `ibv_cq`'s, so `ibv_cq_ex_to_cq` is a cast) followed by uroce's
//! [`CqExtra`]. A CQ of `ibv_create_cq` carries the same functions (as mlx5's do), with
//! the standard completion fields. What rdma-core asks (`ibv_create_cq_ex(3)`):
//! - `start_poll` makes the oldest completion current (ENOENT when there is none, and then
//!   `end_poll` is not called), `next_poll` the next (ENOENT at the end), `end_poll` ends
//!   the pass. The current completion's `status` and `wr_id` are the `ibv_cq_ex`'s fields
//!   of those names; the readers give the rest, as `struct ibv_wc` has them.
//! - A pass from `start_poll` to `end_poll` is one thread's at a time: as rdma-core's
//!   providers lock the CQ there, `start_poll` waits while another thread's pass is open.
//! - `wc_flags` may ask for IBV_WC_STANDARD_FLAGS' fields (byte_len, imm, qp_num, src_qp,
//!   slid, sl, dlid_path_bits); the others (completion timestamps, which
//!   `ibv_query_device_ex` reports none of, CVLAN, flow tag, tag matching) are
//!   EOPNOTSUPP. `comp_mask`: IBV_CQ_INIT_ATTR_MASK_FLAGS with
//!   IBV_CREATE_CQ_ATTR_SINGLE_THREADED (taken: the lock is uncontended then) and no
//!   other flag (IGNORE_OVERRUN: EOPNOTSUPP); a parent domain (IBV_CQ_INIT_ATTR_MASK_PD)
//!   is EOPNOTSUPP, uroce has none; other bits EINVAL. `cqe`, `cq_context`, `channel`
//!   and `comp_vector` are `ibv_create_cq`'s.
//!
//! Safe code: the polling functions are `unsafe extern "C"` wrappers in `exports.rs`
//! that reach the [`CqExtra`] through `ffi::cq_extra` (verbs.h's contract: the
//! `ibv_cq_ex` of a live CQ) and write `status` / `wr_id` there.

#![deny(unsafe_code)]

use std::ffi::c_int;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard};

use libc::{EINVAL, ENOENT, EOPNOTSUPP};

use crate::abi::{self, ibv_context, ibv_cq, ibv_cq_ex, ibv_cq_init_attr_ex, ibv_wc};
use crate::resources::null_with;

/// What a CQ handed to the program is: the C object first, uroce's state after it
/// (`#[repr(C)]`, so `ibv_cq` / `ibv_cq_ex` pointers are pointers to this).
#[repr(C)]
pub(crate) struct CqObject {
    pub cq: ibv_cq_ex,
    pub extra: CqExtra,
}

/// uroce's side of an `ibv_cq_ex`: the pass in progress and its current completion.
#[derive(Default)]
pub(crate) struct CqExtra {
    /// A pass (`start_poll` .. `end_poll`) is open.
    polling: AtomicBool,
    current: Mutex<ibv_wc>,
}

impl CqExtra {
    /// The current completion (zeros before the first).
    pub(crate) fn current(&self) -> ibv_wc {
        *self.lock()
    }

    fn lock(&self) -> MutexGuard<'_, ibv_wc> {
        self.current.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn begin(&self) {
        while self
            .polling
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            std::thread::yield_now();
        }
    }

    fn end(&self) {
        self.polling.store(false, Ordering::Release);
    }
}

/// Checks `ibv_cq_init_attr_ex` beyond what `ibv_create_cq` takes (see the module's
/// notes): Ok, EINVAL or EOPNOTSUPP.
pub(crate) fn check_init_attr(a: &ibv_cq_init_attr_ex) -> Result<(), c_int> {
    if a.wc_flags & !abi::IBV_WC_STANDARD_FLAGS != 0 {
        return Err(EOPNOTSUPP);
    }
    let known = abi::IBV_CQ_INIT_ATTR_MASK_FLAGS | abi::IBV_CQ_INIT_ATTR_MASK_PD;
    if a.comp_mask & !known != 0 {
        return Err(EINVAL);
    }
    if a.comp_mask & abi::IBV_CQ_INIT_ATTR_MASK_PD != 0 && !a.parent_domain.is_null() {
        return Err(EOPNOTSUPP);
    }
    if a.comp_mask & abi::IBV_CQ_INIT_ATTR_MASK_FLAGS != 0 {
        if a.flags & abi::IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN != 0 {
            return Err(EOPNOTSUPP);
        }
        if a.flags & !abi::IBV_CREATE_CQ_ATTR_SINGLE_THREADED != 0 {
            return Err(EINVAL);
        }
    }
    Ok(())
}

/// `verbs_context.create_cq_ex` (the inline `ibv_create_cq_ex`).
pub(crate) fn create_cq_ex(
    ctx: *mut ibv_context,
    attr: Option<ibv_cq_init_attr_ex>,
) -> *mut ibv_cq_ex {
    let Some(a) = attr else {
        return null_with(EINVAL);
    };
    if let Err(e) = check_init_attr(&a) {
        return null_with(e);
    }
    let (Ok(cqe), Ok(vector)) = (c_int::try_from(a.cqe), c_int::try_from(a.comp_vector)) else {
        return null_with(EINVAL);
    };
    crate::cq::create_cq(ctx, cqe, a.cq_context, a.channel, vector).cast()
}

/// Takes one completion of CQ `cq` (`ctx` its context) as current: Ok(Some) with it,
/// Ok(None) when there is none, EINVAL for a CQ that is not one of ours.
fn take_one(ctx: *mut ibv_context, cq: *mut ibv_cq, x: &CqExtra) -> Result<Option<ibv_wc>, c_int> {
    let got = crate::cq::poll_one(ctx, cq)?;
    if let Some(wc) = got {
        *x.lock() = wc;
    }
    Ok(got)
}

/// `ibv_start_poll`: the first completion of a pass (its `status`, `wr_id`), or ENOENT
/// (no pass open then), EINVAL for a CQ that is not one of ours.
pub(crate) fn start_poll(
    ctx: *mut ibv_context,
    cq: *mut ibv_cq,
    x: &CqExtra,
) -> Result<ibv_wc, c_int> {
    x.begin();
    match take_one(ctx, cq, x) {
        Ok(Some(wc)) => Ok(wc),
        Ok(None) => {
            x.end();
            Err(ENOENT)
        }
        Err(e) => {
            x.end();
            Err(e)
        }
    }
}

/// `ibv_next_poll`: the next completion of the pass, or ENOENT.
pub(crate) fn next_poll(
    ctx: *mut ibv_context,
    cq: *mut ibv_cq,
    x: &CqExtra,
) -> Result<ibv_wc, c_int> {
    take_one(ctx, cq, x)?.ok_or(ENOENT)
}

/// `ibv_end_poll`: the pass ends.
pub(crate) fn end_poll(x: &CqExtra) {
    x.end();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn init_attr_checks() {
        let mut a: ibv_cq_init_attr_ex = crate::ffi::zeroed();
        a.cqe = 4;
        a.wc_flags = abi::IBV_WC_STANDARD_FLAGS;
        assert_eq!(check_init_attr(&a), Ok(()));
        a.wc_flags |= 1 << 7; // completion timestamp
        assert_eq!(check_init_attr(&a), Err(EOPNOTSUPP));
        a.wc_flags = 0;
        a.comp_mask = abi::IBV_CQ_INIT_ATTR_MASK_FLAGS;
        a.flags = abi::IBV_CREATE_CQ_ATTR_SINGLE_THREADED;
        assert_eq!(check_init_attr(&a), Ok(()));
        a.flags = abi::IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN;
        assert_eq!(check_init_attr(&a), Err(EOPNOTSUPP));
        a.flags = 1 << 5;
        assert_eq!(check_init_attr(&a), Err(EINVAL));
        a.flags = 0;
        a.comp_mask = 1 << 2;
        assert_eq!(check_init_attr(&a), Err(EINVAL));
    }

    #[test]
    fn a_pass_is_one_threads_at_a_time() {
        let x = std::sync::Arc::new(CqExtra::default());
        // An unknown CQ: EINVAL, and the pass is not left open.
        let mut junk = [0u64; 64];
        let p = junk.as_mut_ptr().cast();
        assert_eq!(start_poll(p, p.cast(), &x).err(), Some(EINVAL));
        x.begin();
        let (tx, rx) = std::sync::mpsc::channel();
        let y = x.clone();
        let t = std::thread::spawn(move || {
            y.begin();
            tx.send(()).unwrap();
            y.end();
        });
        assert!(rx
            .recv_timeout(std::time::Duration::from_millis(100))
            .is_err());
        end_poll(&x);
        assert!(rx.recv_timeout(std::time::Duration::from_secs(10)).is_ok());
        t.join().unwrap();
    }
}
