//! Waiting on descriptors for a [`Duration`], to the microsecond.
//!
//! `poll(2)` counts milliseconds: a wait for a timer due in 300 us became a wait of none
//! (the caller's loop then spun until the timer was due) or, rounded up, of a whole
//! millisecond (DCQCN's timers and the retransmit timers late by up to that). `ppoll(2)`
//! takes a `timespec`.

use std::io;
use std::time::Duration;

/// Waits up to `timeout` for the events asked in `pfds` (`ppoll(2)`, the thread's signal
/// mask left as it is): how many descriptors have one. 0 when the time ran out or a
/// signal came first (an early wake-up: the caller's loop looks at its own flags).
pub fn poll(pfds: &mut [libc::pollfd], timeout: Duration) -> io::Result<usize> {
    let ts = libc::timespec {
        tv_sec: timeout.as_secs().min(i32::MAX as u64) as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: `pfds` is a live, writable array of its length; `ts` a live timespec; a
    // null mask leaves the thread's signal mask alone.
    let r = unsafe {
        libc::ppoll(
            pfds.as_mut_ptr(),
            pfds.len() as libc::nfds_t,
            &ts,
            std::ptr::null(),
        )
    };
    if r < 0 {
        let e = io::Error::last_os_error();
        return if e.kind() == io::ErrorKind::Interrupted {
            Ok(0)
        } else {
            Err(e)
        };
    }
    Ok(r as usize)
}

/// Waits up to `timeout` for `fd` to become readable; whether it did.
pub fn readable(fd: std::os::fd::RawFd, timeout: Duration) -> io::Result<bool> {
    let mut p = [libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    }];
    Ok(poll(&mut p, timeout)? > 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    use std::time::Instant;

    fn eventfd() -> OwnedFd {
        // SAFETY: eventfd returns a new descriptor or -1, checked.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        assert!(fd >= 0);
        // SAFETY: a descriptor just made, owned by nothing else.
        unsafe { OwnedFd::from_raw_fd(fd) }
    }

    /// A wait shorter than a millisecond sleeps (poll(2) made it none), and a readable
    /// descriptor ends it at once. (No bound on how late a sleep ends: the machine is
    /// shared; only that it does not return before its time.)
    #[test]
    fn a_sub_millisecond_wait_sleeps_its_time() {
        let fd = eventfd();
        let t = Instant::now();
        assert!(!readable(fd.as_raw_fd(), Duration::from_micros(300)).unwrap());
        assert!(t.elapsed() >= Duration::from_micros(300));
        let one = 1u64.to_ne_bytes();
        // SAFETY: writing 8 bytes from a live buffer to our eventfd.
        let wrote = unsafe { libc::write(fd.as_raw_fd(), one.as_ptr().cast(), 8) };
        assert_eq!(wrote, 8);
        assert!(readable(fd.as_raw_fd(), Duration::from_secs(10)).unwrap());
    }
}
