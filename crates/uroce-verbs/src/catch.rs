//! The core of both drop-in libraries' C boundary: a C entry point's body run under
//! `catch_unwind`, errno, and the debug-only test hook. uroce-verbs' `ffi.rs` and
//! uroce-rdmacm's include this one file (by path), so the two
//! libraries answer a panic the same way.

use std::ffi::c_int;
use std::panic::{catch_unwind, AssertUnwindSafe};

/// The environment variable of the test hook (debug builds only, see uroce-verbs'
/// `ffi.rs`).
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
    // AssertUnwindSafe: after a panic the only state a later call sees is behind the
    // library's mutexes, which it takes poisoned or not, each kept consistent by its
    // holder between statements that can fail; the worst a half-done call leaves is an
    // object that was allocated and not handed out.
    match catch_unwind(AssertUnwindSafe(|| {
        test_hook(name);
        body()
    })) {
        Ok(r) => r,
        Err(_) => failed(),
    }
}
