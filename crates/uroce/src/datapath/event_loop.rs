//! Driving a [`Context`] from a [`Backend`]: frames out, frames in, timers, in a loop the
//! application calls. A `max_wait` under [`SPIN_BELOW`] (zero, or a sub-millisecond
//! idle sleep) busy-polls; above it the loop sleeps on the socket when there is nothing
//! to do, until a frame comes or a timer is due (one due sooner than [`SPIN_BELOW`] is
//! waited for busily too).

use std::io;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::notify::Notifier;
use super::Backend;
use crate::net::link_watch::LinkWatch;
use crate::net::NetError;
use crate::verbs::{AsyncEvent, Context};

/// How often [`Endpoint::poll`] reads the link's state changes (one non-blocking system
/// call), when a port is watched.
const PORT_CHECK: Duration = Duration::from_millis(50);

/// A wait shorter than this (a timer due within it: a lossy RC QP's recovery probe,
/// some round trips away; DCQCN's pacing; or the caller's own `max_wait`, such as the
/// 200 us idle sleeps of `uroce perf --threads` and the perftest loops, which so poll
/// busily as they did under `poll(2)`) polls busily instead of sleeping, as a NIC
/// driver's busy poll would. Measured (`scripts/bench-loss-ab.sh`: `uroce perf write`
/// over veth, the server dropping 1% of what it receives, builds taking turns): sleeping
/// in `ppoll` until such a timer gave 0.55x to 0.69x the throughput in 4 pairs, at less
/// CPU a second but more a byte (the wake-ups come late), and 0.67x to 0.74x in 2 more
/// with a timer slack of 1 us.
const SPIN_BELOW: Duration = Duration::from_millis(1);

/// The link under a port, and when to look at it next.
struct PortWatch {
    port: u8,
    link: LinkWatch,
    next: Instant,
}

/// A context and its backend.
pub struct Endpoint<B: Backend> {
    /// The verbs context.
    pub ctx: Context,
    backend: B,
    /// Frames the backend refused to send.
    pub send_errors: u64,
    notifier: Option<Arc<Notifier>>,
    port: Option<PortWatch>,
}

impl<B: Backend> Endpoint<B> {
    /// Joins a context and a backend.
    ///
    /// Each RC QP's window is bounded by what the backend's receive path holds
    /// ([`Backend::rx_capacity`], [`Context::set_inflight_budget`]), the peer's taken to
    /// be like ours: so a clean path loses nothing to a receive buffer overflowing, even
    /// where an unprivileged process cannot have a big one.
    pub fn new(mut ctx: Context, backend: B) -> Self {
        if let Some(bytes) = backend.rx_capacity() {
            ctx.set_inflight_budget(Some(bytes));
        }
        Self {
            ctx,
            backend,
            send_errors: 0,
            notifier: None,
            port: None,
        }
    }

    /// Reports the state of the link with index `ifindex` as port `port`'s events
    /// (IBV_EVENT_PORT_ERR when it stops carrying frames, IBV_EVENT_PORT_ACTIVE when it
    /// carries them again, [`AsyncEvent::PortErr`] / [`AsyncEvent::PortActive`]), looked at
    /// every 50 ms of [`Endpoint::poll`]. A link that is down already when the watch starts
    /// gives a PortErr at once. Fails if the link or the netlink socket cannot be had.
    pub fn watch_port(&mut self, port: u8, ifindex: u32) -> Result<(), NetError> {
        let link = LinkWatch::new(ifindex)?;
        if !link.is_up() {
            self.ctx.push_async_event(AsyncEvent::PortErr(port));
        }
        self.port = Some(PortWatch {
            port,
            link,
            next: Instant::now() + PORT_CHECK,
        });
        Ok(())
    }

    /// Signals `n` at the end of every [`Endpoint::poll`] that leaves completion or
    /// asynchronous events in the context ([`Context::has_events`]), when armed.
    pub fn set_notifier(&mut self, n: Arc<Notifier>) {
        self.notifier = Some(n);
    }

    /// The notifier, if one was set.
    pub fn notifier(&self) -> Option<&Arc<Notifier>> {
        self.notifier.as_ref()
    }

    /// The backend, for callers that move frames without the transport (benchmarks).
    pub fn backend_mut(&mut self) -> &mut B {
        &mut self.backend
    }

    /// One round: build every ready frame in the backend's memory and hand the batch to
    /// the kernel, wait up to `max_wait` (less if a timer is due sooner; none, busily,
    /// under [`SPIN_BELOW`]) for frames, take up to 64 of them in place, run due timers;
    /// how many frames came in. No allocation.
    pub fn poll(&mut self, max_wait: Duration) -> io::Result<usize> {
        let now = Instant::now();
        let Self {
            ctx,
            backend,
            send_errors,
            notifier,
            port,
        } = self;
        *send_errors += super::transmit(ctx, backend, now);
        let wait = ctx
            .poll_timeout()
            .map_or(max_wait, |t| t.saturating_duration_since(now).min(max_wait));
        // A timer due sooner than that is waited for busily: see [`SPIN_BELOW`].
        let wait = if wait < SPIN_BELOW {
            Duration::ZERO
        } else {
            wait
        };
        let got = backend.receive(wait, 64, &mut |r| {
            let _ = ctx.handle_received(Instant::now(), r);
        })?;
        ctx.handle_timeout(Instant::now());
        if let Some(w) = port.as_mut().filter(|w| now >= w.next) {
            w.next = now + PORT_CHECK;
            // A failed read of the link's state changes nothing: the next look tries again.
            if let Ok(Some(up)) = w.link.poll() {
                ctx.push_async_event(if up {
                    AsyncEvent::PortActive(w.port)
                } else {
                    AsyncEvent::PortErr(w.port)
                });
            }
        }
        if let Some(n) = notifier {
            if ctx.has_events() {
                n.signal();
            }
        }
        Ok(got)
    }

    /// Polls until `done` says so or `deadline` passes; true when `done` was reached.
    pub fn run_until(
        &mut self,
        deadline: Instant,
        mut done: impl FnMut(&mut Context) -> bool,
    ) -> io::Result<bool> {
        loop {
            if done(&mut self.ctx) {
                return Ok(true);
            }
            if Instant::now() >= deadline || crate::datapath::interrupted() {
                return Ok(false);
            }
            self.poll(Duration::from_millis(1))?;
        }
    }
}
