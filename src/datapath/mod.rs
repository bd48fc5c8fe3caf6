//! Datapaths: how frames built by a [`crate::verbs::Context`] reach a real network.
//!
//! - [`udp`]: a plain UDP socket on port 4791 (no privileges, no XDP): the kernel builds
//!   Ethernet, IP and UDP; uroce sends and receives the RoCEv2 transport bytes.
//! - [`netns`]: network namespaces and veth pairs, for the demo and the tests.
//! - [`event_loop`]: drives a context from a backend, its timers and the application.
//!
//! - [`xdp`]: AF_XDP (kernel bypass) with an XDP program steering UDP/4791.

pub mod capture;
pub mod event_loop;
pub mod netns;
pub mod udp;
pub mod xdp;

use std::io;
use std::time::Duration;

/// A way to put frames on a network and take them off.
pub trait Backend {
    /// Sends one Ethernet frame built by the context.
    fn send(&mut self, frame: &[u8]) -> io::Result<()>;
    /// Waits up to `timeout` for one frame; writes it into `buf` as an Ethernet frame the
    /// context can parse and returns its length, or `None` on timeout.
    fn recv(&mut self, buf: &mut [u8], timeout: Duration) -> io::Result<Option<usize>>;
}

impl<B: Backend + ?Sized> Backend for Box<B> {
    fn send(&mut self, frame: &[u8]) -> io::Result<()> {
        (**self).send(frame)
    }
    fn recv(&mut self, buf: &mut [u8], timeout: Duration) -> io::Result<Option<usize>> {
        (**self).recv(buf, timeout)
    }
}

static INTERRUPTED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

extern "C" fn on_sigint(_: libc::c_int) {
    INTERRUPTED.store(true, std::sync::atomic::Ordering::SeqCst);
}

/// Makes Ctrl-C (SIGINT) and SIGTERM set a flag that loops check, so they stop and
/// clean up (namespaces, sockets) instead of dying on the spot.
pub fn catch_interrupts() {
    // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
    unsafe {
        libc::signal(libc::SIGINT, on_sigint as *const () as libc::sighandler_t);
        libc::signal(libc::SIGTERM, on_sigint as *const () as libc::sighandler_t);
    }
}

/// True once SIGINT or SIGTERM arrived after [`catch_interrupts`].
pub fn interrupted() -> bool {
    INTERRUPTED.load(std::sync::atomic::Ordering::SeqCst)
}
