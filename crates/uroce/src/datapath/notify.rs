//! A descriptor an application can `poll`/`epoll` instead of spinning: an eventfd the
//! event loop ([`super::event_loop::Endpoint::poll`]) and the threaded worker
//! ([`super::worker::Worker`]) signal when there is something to take (a completion
//! event or an asynchronous event of the context; for the worker, completions handed
//! over).
//!
//! It is one-shot, like an armed CQ: [`Notifier::arm`] says the application is about to
//! wait; the next [`Notifier::signal`] then writes the eventfd once and disarms. Unarmed,
//! `signal` is an atomic load, no system call, so the hot path pays nothing when nobody
//! waits. To wait without losing a wake-up: `arm`, look once more for work (the
//! context's events, the CQs), and only then `poll` the descriptor; `clear` it after.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};

/// An eventfd-backed notifier (non-blocking, close-on-exec).
#[derive(Debug)]
pub struct Notifier {
    fd: OwnedFd,
    armed: AtomicBool,
}

impl Notifier {
    /// A new eventfd, not armed.
    pub fn new() -> io::Result<Self> {
        // SAFETY: eventfd takes no pointers; a negative return is an error, checked.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` was just opened and nothing else owns it.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(Self {
            fd,
            armed: AtomicBool::new(false),
        })
    }

    /// The application is about to wait: the next [`Notifier::signal`] writes the fd.
    pub fn arm(&self) {
        self.armed.store(true, Ordering::Release);
    }

    /// Whether armed (no signal since [`Notifier::arm`]).
    pub fn is_armed(&self) -> bool {
        self.armed.load(Ordering::Acquire)
    }

    /// Makes the fd readable if armed, and disarms; `true` if it wrote. Unarmed, no
    /// system call.
    pub fn signal(&self) -> bool {
        if !self.armed.load(Ordering::Relaxed) || !self.armed.swap(false, Ordering::AcqRel) {
            return false;
        }
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a live u64 to our own eventfd. A full counter
        // (EAGAIN) already means readable, so the result is not needed.
        let _ = unsafe {
            libc::write(
                self.fd.as_raw_fd(),
                (&one as *const u64).cast::<libc::c_void>(),
                8,
            )
        };
        true
    }

    /// Reads the eventfd's counter back to zero (not readable any more); the number of
    /// signals since the last `clear`, 0 if none.
    pub fn clear(&self) -> u64 {
        let mut n: u64 = 0;
        // SAFETY: reads 8 bytes into a live u64 from our own non-blocking eventfd.
        let r = unsafe {
            libc::read(
                self.fd.as_raw_fd(),
                (&mut n as *mut u64).cast::<libc::c_void>(),
                8,
            )
        };
        if r == 8 {
            n
        } else {
            0
        }
    }
}

impl AsFd for Notifier {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl AsRawFd for Notifier {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether the fd is readable now (poll with a zero timeout).
    fn readable(n: &Notifier) -> bool {
        let mut p = libc::pollfd {
            fd: n.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one live pollfd, count 1.
        let r = unsafe { libc::poll(&mut p, 1, 0) };
        r == 1 && p.revents & libc::POLLIN != 0
    }

    #[test]
    fn signals_only_when_armed_and_once() {
        let n = Notifier::new().unwrap();
        assert!(!n.signal(), "not armed: no write");
        assert!(!readable(&n));
        n.arm();
        assert!(n.signal());
        assert!(!n.signal(), "one-shot");
        assert!(readable(&n));
        assert_eq!(n.clear(), 1);
        assert!(!readable(&n));
        assert_eq!(n.clear(), 0);
    }
}
