//! Loss and reordering put on received frames on purpose, seeded, for recovery tests and
//! demos on kernels where `tc netem` cannot run (this host's kernel has no `sch_netem`).
//!
//! Each received frame is dropped with probability `drop`; otherwise, while no frame is
//! held, with probability `reorder` it is held back and handed up right after the frame
//! that follows it (as netem's `reorder` lets later packets overtake a delayed one; one
//! frame is held at a time, so the share reordered is a little below `reorder`). A held
//! frame is handed up anyway once the backend finds nothing more to receive, so nothing
//! else is lost. A call never hands up more than its `max`: an overtaken frame comes out in
//! the same call when `max` leaves room, else first in the next one.
//!
//! [`Impaired`] wraps any [`Backend`]: the normal path has none of this code.

use std::io;
use std::time::Duration;

use super::{Backend, MAX_FRAME};
use crate::endpoint::{Received, Transmit};
use crate::rng::Rng;
use crate::wire::DatagramRepr;

/// How received frames are impaired.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Impairment {
    /// Share of received frames dropped.
    pub drop: f64,
    /// Share of received frames held back behind the next one.
    pub reorder: f64,
}

impl Impairment {
    /// Checks both shares are within `0..=0.5` (a path losing more than half its frames
    /// tests patience, not recovery); says which is not.
    pub fn validate(&self) -> Result<(), String> {
        for (name, p) in [("--drop", self.drop), ("--reorder", self.reorder)] {
            if !(0.0..=0.5).contains(&p) {
                return Err(format!("{name} {p} is not between 0 and 0.5"));
            }
        }
        Ok(())
    }

    /// Whether any frame is touched.
    pub fn is_none(&self) -> bool {
        self.drop == 0.0 && self.reorder == 0.0
    }
}

/// What an impaired backend did to its received frames.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ImpairStats {
    /// Frames dropped.
    pub dropped: u64,
    /// Frames handed up after the frame that followed them.
    pub reordered: u64,
}

/// A backend whose received frames are dropped and reordered as [`Impairment`] says.
pub struct Impaired<B> {
    inner: B,
    imp: Impairer,
}

impl<B: Backend> Impaired<B> {
    /// Wraps `inner`; `seed` makes the choices repeatable.
    pub fn new(inner: B, cfg: Impairment, seed: u64) -> Self {
        let mut imp = Impairer::new(seed);
        imp.set(cfg);
        Self { inner, imp }
    }

    /// What the impairment did so far.
    pub fn stats(&self) -> ImpairStats {
        self.imp.stats()
    }

    /// The wrapped backend.
    pub fn inner_mut(&mut self) -> &mut B {
        &mut self.inner
    }
}

impl<B: Backend> Backend for Impaired<B> {
    fn takes_payload_in_place(&self) -> bool {
        self.inner.takes_payload_in_place()
    }

    fn send_with(
        &mut self,
        build: &mut dyn FnMut(&mut [u8]) -> Option<Transmit>,
    ) -> io::Result<bool> {
        self.inner.send_with(build)
    }

    fn send_frame_with(
        &mut self,
        build: &mut dyn FnMut(&mut [u8]) -> Option<usize>,
    ) -> io::Result<bool> {
        self.inner.send_frame_with(build)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }

    fn needs_link_addresses(&self) -> bool {
        self.inner.needs_link_addresses()
    }
    fn serves_link_local(&self) -> bool {
        self.inner.serves_link_local()
    }

    fn wait_fds(&self) -> Vec<std::os::fd::RawFd> {
        self.inner.wait_fds()
    }

    fn holds_received(&self) -> bool {
        self.inner.holds_received()
    }

    fn rx_overruns(&self) -> u64 {
        self.inner.rx_overruns()
    }

    fn rx_capacity(&self) -> Option<u64> {
        self.inner.rx_capacity()
    }

    fn claim_qpns(&mut self, count: u32) -> std::io::Result<Option<(u32, u32)>> {
        self.inner.claim_qpns(count)
    }

    fn receive(
        &mut self,
        timeout: Duration,
        max: usize,
        handle: &mut dyn FnMut(Received<'_>),
    ) -> io::Result<usize> {
        if max == 0 {
            return Ok(0);
        }
        let Self { inner, imp } = self;
        // A held-back frame that has been overtaken goes first.
        let mut handled = if imp.due() { imp.release(handle) } else { 0 };
        if handled == max {
            return Ok(handled);
        }
        // Never sleep while holding a frame, and keep room in `max` for it: it comes out
        // right after the frame that overtakes it.
        let wait = if imp.holding() || handled > 0 {
            Duration::ZERO
        } else {
            timeout
        };
        let room = (max - handled - usize::from(imp.holding())).max(1);
        let got = inner.receive(wait, room, &mut |r| {
            handled += imp.pass(r, handle);
            if imp.due() && handled < max {
                handled += imp.release(handle);
            }
        })?;
        if got == 0 && handled == 0 {
            // Nothing more came: a frame still held back goes now.
            handled = imp.release(handle);
        }
        Ok(handled)
    }
}

/// The state kept to impair received frames.
struct Impairer {
    cfg: Impairment,
    rng: Rng,
    /// The frame held back (allocated once, when reordering is first asked for), and
    /// its datagram addressing when it came from a UDP socket.
    held: Vec<u8>,
    held_len: Option<usize>,
    held_datagram: Option<DatagramRepr>,
    /// A later frame has been handed up: the held one goes next.
    overtaken: bool,
    stats: ImpairStats,
}

impl Impairer {
    fn new(seed: u64) -> Self {
        Self {
            cfg: Impairment::default(),
            rng: Rng::new(seed),
            held: Vec::new(),
            held_len: None,
            held_datagram: None,
            overtaken: false,
            stats: ImpairStats::default(),
        }
    }

    fn set(&mut self, cfg: Impairment) {
        if cfg.reorder > 0.0 && self.held.is_empty() {
            self.held = vec![0; MAX_FRAME];
        }
        self.cfg = cfg;
    }

    fn stats(&self) -> ImpairStats {
        self.stats
    }

    /// Whether a frame is held back (the backend should not sleep on its socket).
    fn holding(&self) -> bool {
        self.held_len.is_some()
    }

    /// Whether the held frame has been overtaken and should be released next.
    fn due(&self) -> bool {
        self.overtaken
    }

    /// Passes one received frame on to `handle` (or not, or later); returns how many
    /// frames `handle` got (0 or 1).
    fn pass(&mut self, r: Received<'_>, handle: &mut dyn FnMut(Received<'_>)) -> usize {
        if self.cfg.is_none() {
            handle(r);
            return 1;
        }
        let (frame, datagram) = match r {
            Received::Frame(f) => (f, None),
            Received::Datagram { datagram, roce } => (roce, Some(*datagram)),
        };
        if self.rng.chance(self.cfg.drop) {
            self.stats.dropped += 1;
            return 0;
        }
        if self.held_len.is_none()
            && frame.len() <= self.held.len()
            && self.rng.chance(self.cfg.reorder)
        {
            self.held[..frame.len()].copy_from_slice(frame);
            self.held_len = Some(frame.len());
            self.held_datagram = datagram;
            return 0;
        }
        handle(r);
        self.overtaken = self.held_len.is_some();
        1
    }

    /// Hands up the held frame, overtaken or not (nothing else came); returns how many
    /// (0 or 1).
    fn release(&mut self, handle: &mut dyn FnMut(Received<'_>)) -> usize {
        match self.held_len.take() {
            Some(n) => {
                if std::mem::take(&mut self.overtaken) {
                    self.stats.reordered += 1;
                }
                let bytes = &self.held[..n];
                match &self.held_datagram {
                    Some(datagram) => handle(Received::Datagram {
                        datagram,
                        roce: bytes,
                    }),
                    None => handle(Received::Frame(bytes)),
                }
                1
            }
            None => 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn first(r: Received<'_>) -> u8 {
        match r {
            Received::Frame(f) => f[0],
            Received::Datagram { roce, .. } => roce[0],
        }
    }

    fn run(cfg: Impairment, frames: usize) -> (Vec<u8>, ImpairStats) {
        let mut imp = Impairer::new(7);
        imp.set(cfg);
        let mut out = Vec::new();
        for i in 0..frames {
            assert!(imp.pass(Received::Frame(&[i as u8]), &mut |f| out.push(first(f))) <= 1);
            if imp.due() {
                imp.release(&mut |f| out.push(first(f)));
            }
        }
        imp.release(&mut |f| out.push(first(f)));
        (out, imp.stats())
    }

    #[test]
    fn untouched_when_off() {
        let (out, st) = run(Impairment::default(), 200);
        assert_eq!(out, (0..200).map(|i| i as u8).collect::<Vec<_>>());
        assert_eq!(st, ImpairStats::default());
    }

    #[test]
    fn reordering_loses_nothing_and_swaps_neighbours() {
        let (out, st) = run(
            Impairment {
                drop: 0.0,
                reorder: 0.2,
            },
            250,
        );
        let mut sorted = out.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, (0..250).map(|i| i as u8).collect::<Vec<_>>());
        let swaps = out.windows(2).filter(|w| w[0] > w[1]).count() as u64;
        assert!(st.reordered > 20, "{st:?}");
        assert_eq!(swaps, st.reordered);
        assert_eq!(st.dropped, 0);
    }

    #[test]
    fn dropping_takes_about_the_share_asked() {
        let (out, st) = run(
            Impairment {
                drop: 0.1,
                reorder: 0.0,
            },
            2000,
        );
        assert_eq!(out.len() as u64 + st.dropped, 2000);
        assert!((120..=280).contains(&st.dropped), "{st:?}");
    }

    #[test]
    fn shares_outside_zero_to_one_are_refused() {
        let bad = Impairment {
            drop: 0.0,
            reorder: 1.5,
        };
        assert!(bad.validate().unwrap_err().contains("--reorder"));
        assert!(Impairment::default().validate().is_ok());
    }
}
