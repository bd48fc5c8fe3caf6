//! Driving a [`Context`] from a [`Backend`]: frames out, frames in, timers, in a loop the
//! application calls. `max_wait` zero busy-polls; above zero the loop sleeps on the
//! socket when there is nothing to do.

use std::io;
use std::time::{Duration, Instant};

use super::Backend;
use crate::verbs::Context;

/// A context and its backend.
pub struct Endpoint<B: Backend> {
    /// The verbs context.
    pub ctx: Context,
    backend: B,
    tx: Vec<u8>,
    rx: Vec<u8>,
    /// Frames the backend refused to send.
    pub send_errors: u64,
}

impl<B: Backend> Endpoint<B> {
    /// Joins a context and a backend.
    pub fn new(ctx: Context, backend: B) -> Self {
        Self {
            ctx,
            backend,
            tx: vec![0; 4096 + 256],
            rx: vec![0; 4096 + 256],
            send_errors: 0,
        }
    }

    /// One round: send what is ready, wait up to `max_wait` (less if a timer is due
    /// sooner) for frames, take up to 64 of them, run due timers.
    pub fn poll(&mut self, max_wait: Duration) -> io::Result<()> {
        let now = Instant::now();
        while let Some(n) = self.ctx.poll_transmit(now, &mut self.tx) {
            if self.backend.send(&self.tx[..n]).is_err() {
                self.send_errors += 1;
            }
        }
        let wait = self
            .ctx
            .poll_timeout()
            .map_or(max_wait, |t| t.saturating_duration_since(now).min(max_wait));
        let mut timeout = wait;
        for _ in 0..64 {
            match self.backend.recv(&mut self.rx, timeout)? {
                Some(n) => {
                    let _ = self.ctx.handle_frame(Instant::now(), &self.rx[..n]);
                    timeout = Duration::ZERO;
                }
                None => break,
            }
        }
        self.ctx.handle_timeout(Instant::now());
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
