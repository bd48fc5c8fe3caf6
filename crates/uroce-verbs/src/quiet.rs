//! The threads both drop-in libraries start (the progress thread of an open device, ARP
//! and address resolution, librdmacm's CM thread) run with every signal blocked, so a
//! signal sent to the process (SIGALRM that ends a qperf test, SIGINT) is handled by one
//! of the program's own threads, where it interrupts a blocking call
//! (`ibv_get_cq_event`, `rdma_get_cm_event`) as it does with rdma-core, whose libraries
//! start no thread the program's signals could land on. The mask is set around the
//! spawn (a new thread inherits its creator's mask), so there is no moment at which the
//! new thread runs unmasked. uroce-verbs' `ffi.rs` and uroce-rdmacm's include this one
//! file by path, as they include `catch.rs`.

use std::io;
use std::thread::{Builder, JoinHandle};

/// Spawns `f` on a thread named `name` with every signal blocked (SIGKILL and SIGSTOP
/// cannot be, and glibc keeps its own internal ones); the calling thread's mask is
/// restored before this returns. Err: the spawn's failure.
pub(crate) fn spawn<F, T>(name: String, f: F) -> io::Result<JoinHandle<T>>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    let mut all = std::mem::MaybeUninit::<libc::sigset_t>::uninit();
    let mut old = std::mem::MaybeUninit::<libc::sigset_t>::uninit();
    // SAFETY: sigfillset initialises the set it is given, a live local; pthread_sigmask
    // reads that set and writes the previous mask into `old`, another live local.
    let masked = unsafe {
        libc::sigfillset(all.as_mut_ptr()) == 0
            && libc::pthread_sigmask(libc::SIG_SETMASK, all.as_ptr(), old.as_mut_ptr()) == 0
    };
    let r = Builder::new().name(name).spawn(f);
    if masked {
        // SAFETY: `old` was written by the successful pthread_sigmask above.
        unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, old.as_ptr(), std::ptr::null_mut()) };
    }
    r
}

/// The calling thread's blocked signals (for tests): whether `sig` is among them.
#[cfg(test)]
pub(crate) fn blocks(sig: libc::c_int) -> bool {
    let mut now = std::mem::MaybeUninit::<libc::sigset_t>::uninit();
    // SAFETY: a null new set only reads the mask into `now`, a live local, which
    // sigismember then reads.
    unsafe {
        libc::pthread_sigmask(libc::SIG_SETMASK, std::ptr::null(), now.as_mut_ptr());
        libc::sigismember(now.as_ptr(), sig) == 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_new_thread_blocks_every_signal_and_the_caller_keeps_its_mask() {
        let before = (blocks(libc::SIGALRM), blocks(libc::SIGINT));
        let t = spawn("quiet-test".into(), || {
            [
                libc::SIGALRM,
                libc::SIGINT,
                libc::SIGTERM,
                libc::SIGUSR1,
                libc::SIGCHLD,
            ]
            .into_iter()
            .all(blocks)
        })
        .expect("spawn");
        assert!(
            t.join().unwrap(),
            "a signal is not blocked on the new thread"
        );
        assert_eq!((blocks(libc::SIGALRM), blocks(libc::SIGINT)), before);
    }
}
