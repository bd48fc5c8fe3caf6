//! Loss and reordering put on received frames on purpose, seeded, for recovery tests and
//! demos on kernels where `tc netem` cannot run (this host's kernel has no `sch_netem`).
//!
//! Each received frame is dropped with probability `drop`; otherwise, with probability
//! `reorder`, it is held back and handed up right after the frame that follows it (as
//! netem's `reorder` lets later packets overtake a delayed one). A held frame is handed up
//! anyway once the backend finds nothing more to receive, so nothing else is lost. One
//! received frame never becomes two deliveries at once: once overtaken, the held frame is
//! `Impairer::due` and the backend releases it within its `max`.

use super::MAX_FRAME;
use crate::rng::Rng;

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

/// The state a backend keeps to impair its received frames.
pub(crate) struct Impairer {
    cfg: Impairment,
    rng: Rng,
    /// The frame held back (allocated once, when reordering is first asked for).
    held: Vec<u8>,
    held_len: Option<usize>,
    /// A later frame has been handed up: the held one goes next.
    overtaken: bool,
    stats: ImpairStats,
}

impl Impairer {
    pub(crate) fn new(seed: u64) -> Self {
        Self {
            cfg: Impairment::default(),
            rng: Rng::new(seed),
            held: Vec::new(),
            held_len: None,
            overtaken: false,
            stats: ImpairStats::default(),
        }
    }

    pub(crate) fn set(&mut self, cfg: Impairment) {
        if cfg.reorder > 0.0 && self.held.is_empty() {
            self.held = vec![0; MAX_FRAME];
        }
        self.cfg = cfg;
    }

    pub(crate) fn stats(&self) -> ImpairStats {
        self.stats
    }

    /// Whether a frame is held back (the backend should not sleep on its socket).
    pub(crate) fn holding(&self) -> bool {
        self.held_len.is_some()
    }

    /// Whether the held frame has been overtaken and should be released next.
    pub(crate) fn due(&self) -> bool {
        self.overtaken
    }

    /// Passes one received frame on to `handle` (or not, or later); returns how many
    /// frames `handle` got (0 or 1).
    pub(crate) fn pass(&mut self, frame: &[u8], handle: &mut dyn FnMut(&[u8])) -> usize {
        if self.cfg.is_none() {
            handle(frame);
            return 1;
        }
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
            return 0;
        }
        handle(frame);
        self.overtaken = self.held_len.is_some();
        1
    }

    /// Hands up the held frame, overtaken or not (nothing else came); returns how many
    /// (0 or 1).
    pub(crate) fn release(&mut self, handle: &mut dyn FnMut(&[u8])) -> usize {
        match self.held_len.take() {
            Some(n) => {
                if std::mem::take(&mut self.overtaken) {
                    self.stats.reordered += 1;
                }
                handle(&self.held[..n]);
                1
            }
            None => 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(cfg: Impairment, frames: usize) -> (Vec<u8>, ImpairStats) {
        let mut imp = Impairer::new(7);
        imp.set(cfg);
        let mut out = Vec::new();
        for i in 0..frames {
            assert!(imp.pass(&[i as u8], &mut |f| out.push(f[0])) <= 1);
            if imp.due() {
                imp.release(&mut |f| out.push(f[0]));
            }
        }
        imp.release(&mut |f| out.push(f[0]));
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
