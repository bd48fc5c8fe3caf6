//! Driving a [`Context`] from a [`Backend`]: frames out, frames in, timers, in a loop the
//! application calls. `max_wait` zero busy-polls; above zero the loop sleeps on the
//! socket when there is nothing to do.

use std::io;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::notify::Notifier;
use super::Backend;
use crate::verbs::Context;

/// A context and its backend.
pub struct Endpoint<B: Backend> {
    /// The verbs context.
    pub ctx: Context,
    backend: B,
    /// Frames the backend refused to send.
    pub send_errors: u64,
    notifier: Option<Arc<Notifier>>,
}

impl<B: Backend> Endpoint<B> {
    /// Joins a context and a backend.
    pub fn new(ctx: Context, backend: B) -> Self {
        Self {
            ctx,
            backend,
            send_errors: 0,
            notifier: None,
        }
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
    /// the kernel, wait up to `max_wait` (less if a timer is due sooner) for frames, take
    /// up to 64 of them in place, run due timers. No allocation.
    pub fn poll(&mut self, max_wait: Duration) -> io::Result<()> {
        let now = Instant::now();
        let Self {
            ctx,
            backend,
            send_errors,
            notifier,
        } = self;
        loop {
            match backend.send_with(&mut |buf| ctx.poll_transmit(now, buf)) {
                Ok(true) => {}
                Ok(false) => break,
                Err(_) => {
                    *send_errors += 1;
                    break;
                }
            }
        }
        if backend.flush().is_err() {
            *send_errors += 1;
        }
        let wait = ctx
            .poll_timeout()
            .map_or(max_wait, |t| t.saturating_duration_since(now).min(max_wait));
        backend.receive(wait, 64, &mut |r| {
            let _ = ctx.handle_received(Instant::now(), r);
        })?;
        ctx.handle_timeout(Instant::now());
        if let Some(n) = notifier {
            if ctx.has_events() {
                n.signal();
            }
        }
        Ok(())
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
