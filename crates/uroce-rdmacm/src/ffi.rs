//! The C boundary of `librdmacm.so.1`: every function C calls goes through here.
//!
//! Each exported function runs its body inside [`minus1`], [`ptr`], [`void`] or [`call`],
//! which catch a panic (`std::panic::catch_unwind`: a panic that reached an `extern "C"`
//! function would abort the host program) and answer it as `<rdma/rdma_cma.h>`
//! documents a failure, with `EIO`: -1 with errno `EIO` for the calls returning an int
//! (`rdma_create_id`, `rdma_connect`, `rdma_get_cm_event`...), NULL with errno `EIO` for
//! those returning a pointer (`rdma_create_event_channel`, `rdma_get_devices`), nothing
//! for the destroy and free calls, port 0 for `rdma_get_src_port` / `rdma_get_dst_port`.
//! The library's one lock is taken poisoned or not (`state::lock`), so a call after a
//! panic finds the state as the panicking call left it between two steps. Nothing here
//! installs a panic hook: the default one reports a panic on stderr, which is the
//! runtime's output, not this library's.
//!
//! The test hook is uroce-verbs' (its `src/ffi.rs` says why it is made so): in a debug
//! build only, `UROCE_TEST_PANIC=<entry point>` makes the first call of that entry point
//! in the process panic inside its entry (`tests/panic.rs`).

use std::ffi::c_int;
use std::panic::{catch_unwind, AssertUnwindSafe};

use libc::EIO;

/// The environment variable of the test hook (debug builds only).
pub const TEST_PANIC_ENV: &str = "UROCE_TEST_PANIC";

/// Sets the calling thread's `errno`.
pub(crate) fn set_errno(value: c_int) {
    // SAFETY: __errno_location returns the address of this thread's errno, valid for the
    // thread's life; writing an int there is what setting errno means.
    unsafe { *libc::__errno_location() = value };
}

#[cfg(debug_assertions)]
fn test_hook(name: &str) {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::OnceLock;
    static TARGET: OnceLock<Option<String>> = OnceLock::new();
    static FIRED: AtomicBool = AtomicBool::new(false);
    let target = TARGET.get_or_init(|| std::env::var(TEST_PANIC_ENV).ok());
    if target.as_deref() == Some(name) && !FIRED.swap(true, Ordering::Relaxed) {
        panic!("{TEST_PANIC_ENV}: the panic asked for in {name}");
    }
}

#[cfg(not(debug_assertions))]
#[inline(always)]
fn test_hook(_name: &str) {}

/// Runs the body of the C entry point `name`; if it panics, the answer is `failed()`.
pub(crate) fn call<R>(
    name: &'static str,
    failed: impl FnOnce() -> R,
    body: impl FnOnce() -> R,
) -> R {
    // AssertUnwindSafe: what a later call sees is behind the library's one mutex, which
    // it takes poisoned or not; each call keeps it consistent between the steps that can
    // fail, and the worst a half-done call leaves is an object not handed out.
    match catch_unwind(AssertUnwindSafe(|| {
        test_hook(name);
        body()
    })) {
        Ok(r) => r,
        Err(_) => failed(),
    }
}

/// A call that returns 0 (or a count) or -1 with errno: -1 with errno EIO on a panic.
pub(crate) fn minus1<R: From<i8>>(name: &'static str, body: impl FnOnce() -> R) -> R {
    call(
        name,
        || {
            set_errno(EIO);
            R::from(-1)
        },
        body,
    )
}

/// A call that returns a pointer, NULL with errno on failure: NULL with errno EIO on a
/// panic.
pub(crate) fn ptr<T>(name: &'static str, body: impl FnOnce() -> *mut T) -> *mut T {
    call(
        name,
        || {
            set_errno(EIO);
            std::ptr::null_mut()
        },
        body,
    )
}

/// A call with nothing to return (the destroy and free calls): errno EIO on a panic.
pub(crate) fn void(name: &'static str, body: impl FnOnce()) {
    call(name, || set_errno(EIO), body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_is_the_calls_failure() {
        assert_eq!(minus1::<c_int>("t", || panic!("boom")), -1);
        // SAFETY: reading this thread's errno.
        assert_eq!(unsafe { *libc::__errno_location() }, EIO);
        assert_eq!(minus1::<isize>("t", || panic!("boom")), -1);
        assert!(ptr::<u8>("t", || panic!("boom")).is_null());
        void("t", || panic!("boom"));
        assert_eq!(minus1::<c_int>("t", || 3), 3);
    }
}
