//! Datapaths: how frames built by a [`crate::verbs::Context`] reach a real network.
//!
//! - [`udp`]: a plain UDP socket on port 4791 (no privileges, no XDP): the kernel builds
//!   Ethernet, IP and UDP; uroce sends and receives the RoCEv2 transport bytes.
//! - [`by_source`]: [`by_source::BySource`], several backends as one, each packet sent
//!   by the one bound to its source address (UDP on the routable and on the link-local
//!   address).
//! - [`event_loop`]: drives a context from a backend, its timers and the application.
//! - [`handoff`]: [`handoff::Member`], a member of a group of sockets steered by
//!   destination QP that hands a packet of another member's class to it (coalesced runs).
//! - [`notify`]: [`notify::Notifier`], an eventfd an application polls for completion and
//!   asynchronous events instead of spinning.
//! - [`impair`]: [`impair::Impaired`], a wrapper that drops and reorders what any backend
//!   receives, seeded, where netem is missing.
//!
//! - [`xdp`]: AF_XDP (kernel bypass) with an XDP program steering UDP/4791.
//! - [`daemon`]: the shared datapath, `uroce daemon`'s rings and the process's end of them
//!   ([`daemon::DaemonBackend`]).
//! - [`choice`]: which of AF_XDP and UDP `auto` takes on an interface, and why.
//! - [`wait`]: waiting on descriptors to the microsecond (`ppoll`).
//! - [`holder`]: which process holds an interface's XDP hook or a UDP port, for errors
//!   that name it.
//!
//! The next hop and MAC address AF_XDP frames go to come from [`crate::net::resolve`]
//! (the kernel's route and neighbour table over rtnetlink, else ARP / NDP).

pub mod by_source;
pub mod choice;
pub mod daemon;
pub mod event_loop;
pub mod handoff;
pub mod holder;
pub mod impair;
pub mod notify;
pub mod udp;
pub mod wait;
pub mod worker;
pub mod xdp;

use std::io;
use std::time::Duration;

pub use crate::endpoint::{Received, Transmit};

/// Largest frame a backend carries: a 4096-byte payload plus every header uroce emits.
pub const MAX_FRAME: usize = 4096 + 256;

/// How long a datapath loop keeps polling after the last packet before it sleeps (where
/// the machine has a core for it), as a NIC's queue engine does not sleep between a
/// request and the next: a round trip to a peer on the same host or LAN takes less, so a
/// stream of requests and answers never waits for a wake-up, and an idle loop sleeps a
/// moment after its traffic ends. The engine shards, the `uroce daemon`'s receive and
/// send loops and `uroce perf`'s server use it.
pub const SPIN: Duration = Duration::from_micros(50);

/// A way to put RoCEv2 datagrams on a network and take them off.
///
/// The shape is quinn's: the endpoint writes the RoCE part of a datagram (BTH to ICRC) into
/// the backend's own memory and says where it goes ([`Transmit`]); a UDP socket sends those
/// bytes as they are, the AF_XDP backend writes Ethernet, IP and UDP in front of them in
/// place. Received packets come back as [`Received`]: whole frames (AF_XDP) or UDP payloads
/// with their addressing (UDP sockets). [`Backend::send_with`] queues, [`Backend::flush`]
/// hands what is queued to the kernel, [`Backend::receive`] hands received packets to a
/// closure in place.
pub trait Backend {
    /// Offers a buffer to `build`, big enough for the largest packet of the MTU the backend
    /// was opened for (never more than [`MAX_FRAME`] is needed), which writes the RoCE
    /// part of one datagram at its start and returns where it goes, or `None` when it has
    /// nothing to send. (A datagram whose payload `build` left in place, which only a
    /// backend that takes them gets, must be flushed before the caller goes back to the
    /// context that built it: [`Backend::takes_payload_in_place`].) Returns whether a
    /// datagram was queued. When the backend has no room, it returns
    /// `ErrorKind::WouldBlock` without calling `build`, so nothing is lost; a packet
    /// `build` wrote that the backend cannot send is an error (the caller counts it; RC
    /// retransmits).
    fn send_with(
        &mut self,
        build: &mut dyn FnMut(&mut [u8]) -> Option<Transmit>,
    ) -> io::Result<bool>;

    /// Like [`Backend::send_with`] for a whole link-layer frame that `build` writes and
    /// returns the length of (ARP and neighbour discovery, raw-frame benchmarks). A
    /// backend that does not send link-layer frames (UDP) returns `ErrorKind::Unsupported`.
    fn send_frame_with(
        &mut self,
        _build: &mut dyn FnMut(&mut [u8]) -> Option<usize>,
    ) -> io::Result<bool> {
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "this backend does not send link-layer frames",
        ))
    }

    /// Hands queued datagrams to the kernel.
    fn flush(&mut self) -> io::Result<()>;

    /// Waits up to `timeout` for a first packet, then passes up to `max` received packets
    /// to `handle`; returns how many.
    fn receive(
        &mut self,
        timeout: Duration,
        max: usize,
        handle: &mut dyn FnMut(Received<'_>),
    ) -> io::Result<usize>;

    /// The descriptors that become readable when [`Backend::receive`] has packets to hand
    /// up, for a loop that waits on them with other descriptors (`poll(2)`); empty when
    /// the backend cannot say (the loop then polls `receive` with a short timeout).
    /// Packets a backend holds already (GRO segments left from the last call) do not
    /// make them readable: call `receive` until it returns 0 before waiting.
    fn wait_fds(&self) -> Vec<std::os::fd::RawFd> {
        Vec::new()
    }

    /// Whether packets this backend took from the kernel already wait in it for the next
    /// [`Backend::receive`] (GRO segments left from the last call, a wrapper's copies):
    /// [`Backend::wait_fds`] do not show them. A wrapper that hands some of what its
    /// inner backend receives elsewhere asks this before it reports nothing received.
    fn holds_received(&self) -> bool {
        false
    }

    /// Whether `send_with` takes datagrams whose payload stays in registered memory
    /// ([`Transmit::in_place`], from [`crate::verbs::Context::poll_transmit_in_place`]):
    /// the UDP backend hands the kernel a gather list, where the others need the whole
    /// datagram in their buffer. A backend that says yes sends or copies every such
    /// payload before its `flush` returns (see [`crate::endpoint::InPlace`] for how long the
    /// bytes are valid); a wrapper that says yes makes a datagram whole ([`gather`])
    /// wherever it reads the buffer or hands it on to something else.
    fn takes_payload_in_place(&self) -> bool {
        false
    }

    /// Whether the Ethernet addresses of sent frames matter (AF_XDP: yes; the UDP
    /// backend lets the kernel build the link header).
    fn needs_link_addresses(&self) -> bool {
        true
    }

    /// Whether the datapath sends from and receives at the interface's IPv6 link-local
    /// address (its default GID, fe80:: with the EUI-64 of its MAC, which libfabric's
    /// dgram and rdm endpoints name at both ends): AF_XDP, which writes the IP header
    /// itself, does; a UDP socket does only when bound to that address with its scope
    /// ([`udp::UdpBackend::bind_link_local`], held with the routable address's by
    /// [`by_source::BySource`]); a daemon's datapath when the daemon says so. A context
    /// sends to a link-local destination from the link-local address only where this
    /// holds (else from its routable address, which the peer cannot answer at GID 0).
    fn serves_link_local(&self) -> bool {
        false
    }

    /// Frames the kernel dropped on their way in because this backend fell behind (AF_XDP:
    /// a full RX ring or no chunk in the fill ring), where the kernel counts them.
    fn rx_overruns(&self) -> u64 {
        0
    }

    /// Bytes of packets this backend's receive path holds queued before it overflows and
    /// drops (the UDP backend: from the socket buffer the kernel granted), `None` when it
    /// does not know or its bound is the transport's own. [`event_loop::Endpoint::new`]
    /// bounds each RC QP's window by it ([`crate::verbs::Context::set_inflight_budget`]).
    fn rx_capacity(&self) -> Option<u64> {
        None
    }

    /// At least `count` more QPNs a context over this datapath must give its QPs,
    /// `(first, count)`, contiguous: a shared datapath (`uroce daemon`,
    /// [`daemon::DaemonBackend`]) steers frames by destination QPN and hands each process
    /// numbers of its own; `None` (a datapath of the process's own): any. Claim before
    /// creating QPs, and make the context use them
    /// ([`crate::verbs::Context::set_qpn_space`]).
    fn claim_qpns(&mut self, _count: u32) -> io::Result<Option<(u32, u32)>> {
        Ok(None)
    }

    /// Sends one whole link-layer frame now (copied); see [`Backend::send_frame_with`].
    fn send(&mut self, frame: &[u8]) -> io::Result<()> {
        if frame.len() > MAX_FRAME {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "frame larger than the backend carries",
            ));
        }
        let mut room = None;
        let mut copy = |buf: &mut [u8]| {
            if frame.len() > buf.len() {
                room = Some(buf.len());
                return None;
            }
            buf[..frame.len()].copy_from_slice(frame);
            Some(frame.len())
        };
        self.send_frame_with(&mut copy)?;
        if let Some(room) = room {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "a frame of {} bytes does not fit this backend's {room}-byte buffer",
                    frame.len()
                ),
            ));
        }
        self.flush()
    }
}

/// Hands every packet `ctx` has to send now to `backend`, then to the kernel (`flush`);
/// returns the sends and flushes that failed (0 or 1 of each: a failed send ends the
/// round). Payloads stay where they lie where the backend takes them
/// ([`Backend::takes_payload_in_place`]): this call holds the context from the first
/// build to the flush, which keeps [`crate::verbs::Context::poll_transmit_in_place`]'s
/// contract, on a panic between them too (the flush then runs as the stack unwinds).
pub fn transmit(
    ctx: &mut crate::verbs::Context,
    backend: &mut dyn Backend,
    now: std::time::Instant,
) -> u64 {
    let in_place = backend.takes_payload_in_place();
    let guard = FlushOnUnwind(backend);
    let mut errors = 0;
    loop {
        let sent = guard.0.send_with(&mut |buf| {
            if in_place {
                // SAFETY: the datagrams go to this backend, which takes them, and its
                // flush below (or the guard's, on a panic) comes before anything else
                // touches `ctx`, which this call holds until then.
                unsafe { ctx.poll_transmit_in_place(now, buf) }
            } else {
                ctx.poll_transmit(now, buf)
            }
        });
        match sent {
            Ok(true) => {}
            Ok(false) => break,
            Err(_) => {
                errors += 1;
                break;
            }
        }
    }
    errors + u64::from(guard.0.flush().is_err())
}

/// Flushes its backend if dropped while a panic unwinds (see [`transmit`]).
struct FlushOnUnwind<'a>(&'a mut dyn Backend);

impl Drop for FlushOnUnwind<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let _ = self.0.flush();
        }
    }
}

/// Makes datagram `t`, built in `buf`, whole there: a payload it left in place
/// ([`Transmit::in_place`]) is copied in behind its headers (the pad and ICRC moved behind
/// it) and `t` says so no more. False, nothing changed, where `buf` cannot hold it.
///
/// # Safety
///
/// The payload is still valid: the context that built `t` has not handled a packet, a
/// timeout or a verb since ([`crate::endpoint::InPlace`]).
pub unsafe fn gather(t: &mut Transmit, buf: &mut [u8]) -> bool {
    let Some(p) = t.in_place else {
        return true;
    };
    // SAFETY: the caller's promise, passed on.
    let whole = unsafe { gather_bytes(p, t.len, buf) };
    if whole {
        t.in_place = None;
    }
    whole
}

/// [`gather`] of a datagram of `total` bytes whose payload `p` left in place.
///
/// # Safety
///
/// As [`gather`]'s.
pub(crate) unsafe fn gather_bytes(
    p: crate::endpoint::InPlace,
    total: usize,
    buf: &mut [u8],
) -> bool {
    let (at, len) = (p.at(), p.len());
    let Some(in_buf) = total.checked_sub(len) else {
        return false;
    };
    if buf.len() < total || at > in_buf {
        return false;
    }
    buf.copy_within(at..in_buf, at + len);
    // SAFETY: the caller's promise: `p.addr()` is valid for reads of `len` bytes (a
    // registered region's, read as the stack reads them, with a raw copy); `buf` is the
    // backend's own memory, never a registered region's, so they cannot overlap.
    unsafe { std::ptr::copy_nonoverlapping(p.addr() as *const u8, buf[at..].as_mut_ptr(), len) };
    true
}

impl<B: Backend + ?Sized> Backend for Box<B> {
    fn takes_payload_in_place(&self) -> bool {
        (**self).takes_payload_in_place()
    }
    fn wait_fds(&self) -> Vec<std::os::fd::RawFd> {
        (**self).wait_fds()
    }
    fn holds_received(&self) -> bool {
        (**self).holds_received()
    }
    fn needs_link_addresses(&self) -> bool {
        (**self).needs_link_addresses()
    }
    fn serves_link_local(&self) -> bool {
        (**self).serves_link_local()
    }
    fn rx_overruns(&self) -> u64 {
        (**self).rx_overruns()
    }
    fn rx_capacity(&self) -> Option<u64> {
        (**self).rx_capacity()
    }
    fn claim_qpns(&mut self, count: u32) -> io::Result<Option<(u32, u32)>> {
        (**self).claim_qpns(count)
    }
    fn send_with(
        &mut self,
        build: &mut dyn FnMut(&mut [u8]) -> Option<Transmit>,
    ) -> io::Result<bool> {
        (**self).send_with(build)
    }
    fn send_frame_with(
        &mut self,
        build: &mut dyn FnMut(&mut [u8]) -> Option<usize>,
    ) -> io::Result<bool> {
        (**self).send_frame_with(build)
    }
    fn flush(&mut self) -> io::Result<()> {
        (**self).flush()
    }
    fn receive(
        &mut self,
        timeout: Duration,
        max: usize,
        handle: &mut dyn FnMut(Received<'_>),
    ) -> io::Result<usize> {
        (**self).receive(timeout, max, handle)
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
