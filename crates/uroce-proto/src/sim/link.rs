//! A simulated Ethernet link between two endpoints: seeded loss, duplication, reordering,
//! bit corruption, propagation delay and a serialising bandwidth limit, driven by the
//! caller's simulated clock. The same seed gives the same run, frame for frame.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::{Duration, Instant};

use super::Rng;

/// What the link does to frames.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LinkConfig {
    /// Probability a frame is lost.
    pub loss: f64,
    /// Probability a frame is delivered twice.
    pub dup: f64,
    /// Probability a frame is held back (delivered after later frames).
    pub reorder: f64,
    /// Probability one random bit of a frame is flipped.
    pub corrupt: f64,
    /// One-way propagation delay.
    pub delay: Duration,
    /// Line rate in bits per second (0 = infinite).
    pub bandwidth_bps: u64,
    /// Longest a frame may wait for the wire before it is dropped (the switch buffer).
    pub max_queue: Duration,
    /// Probability that an ECN-capable (ECT) IPv4 frame is marked CE, as a congested
    /// switch would.
    pub ecn_mark: f64,
}

impl Default for LinkConfig {
    fn default() -> Self {
        Self {
            loss: 0.0,
            dup: 0.0,
            reorder: 0.0,
            corrupt: 0.0,
            delay: Duration::from_micros(2),
            bandwidth_bps: 25_000_000_000,
            max_queue: Duration::from_millis(1),
            ecn_mark: 0.0,
        }
    }
}

/// What happened on the link.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LinkStats {
    /// Frames offered.
    pub sent: u64,
    /// Frames lost on purpose.
    pub dropped: u64,
    /// Frames dropped because the queue was full.
    pub queue_drops: u64,
    /// Extra copies delivered.
    pub duplicated: u64,
    /// Frames held back.
    pub reordered: u64,
    /// Frames with a bit flipped.
    pub corrupted: u64,
    /// Frames delivered.
    pub delivered: u64,
    /// Frames marked ECN CE.
    pub ecn_marked: u64,
}

#[derive(Default)]
struct Direction {
    queue: BinaryHeap<Reverse<(Instant, u64, Vec<u8>)>>,
    busy_until: Option<Instant>,
}

/// A two-way link; direction 0 carries frames from endpoint 0 to endpoint 1.
pub struct Link {
    cfg: LinkConfig,
    rng: Rng,
    dirs: [Direction; 2],
    seq: u64,
    stats: LinkStats,
}

impl Link {
    /// A link with `cfg`, randomised from `seed`.
    pub fn new(cfg: LinkConfig, seed: u64) -> Self {
        Self {
            cfg,
            rng: Rng::new(seed ^ 0x6c69_6e6b),
            dirs: [Direction::default(), Direction::default()],
            seq: 0,
            stats: LinkStats::default(),
        }
    }

    /// Counters so far.
    pub fn stats(&self) -> LinkStats {
        self.stats
    }

    fn wire_time(&self, len: usize) -> Duration {
        if self.cfg.bandwidth_bps == 0 {
            return Duration::ZERO;
        }
        // Ethernet preamble, SFD, FCS and inter-frame gap: 24 bytes on the wire.
        Duration::from_nanos(((len as u64 + 24) * 8 * 1_000_000_000) / self.cfg.bandwidth_bps)
    }

    /// Offers a frame sent by endpoint `from` at `now`.
    pub fn send(&mut self, from: usize, now: Instant, mut frame: Vec<u8>) {
        let d = from & 1;
        self.stats.sent += 1;
        let start = self.dirs[d].busy_until.map_or(now, |b| b.max(now));
        if start.saturating_duration_since(now) > self.cfg.max_queue {
            self.stats.queue_drops += 1;
            return;
        }
        let done = start + self.wire_time(frame.len());
        self.dirs[d].busy_until = Some(done);
        if self.rng.chance(self.cfg.loss) {
            self.stats.dropped += 1;
            return;
        }
        if self.cfg.ecn_mark > 0.0 && mark_ce(&mut frame, &mut self.rng, self.cfg.ecn_mark) {
            self.stats.ecn_marked += 1;
        }
        if self.rng.chance(self.cfg.corrupt) && !frame.is_empty() {
            let bit = self.rng.range(0, frame.len() as u64 * 8 - 1);
            frame[(bit / 8) as usize] ^= 1 << (bit % 8);
            self.stats.corrupted += 1;
        }
        let mut at = done + self.cfg.delay;
        if self.rng.chance(self.cfg.reorder) {
            let extra = self.cfg.delay.max(Duration::from_micros(5)) * 4;
            at += Duration::from_nanos(self.rng.range(1, extra.as_nanos() as u64));
            self.stats.reordered += 1;
        }
        if self.rng.chance(self.cfg.dup) {
            self.stats.duplicated += 1;
            self.seq += 1;
            let later = at + Duration::from_nanos(self.rng.range(0, 2_000));
            self.dirs[d]
                .queue
                .push(Reverse((later, self.seq, frame.clone())));
        }
        self.seq += 1;
        self.dirs[d].queue.push(Reverse((at, self.seq, frame)));
    }

    /// When endpoint `from`'s side of the wire is free again (a paced sender waits for it).
    pub fn free_at(&self, from: usize) -> Option<Instant> {
        self.dirs[from & 1].busy_until
    }

    /// When the next frame arrives, if any is on its way.
    pub fn next_delivery(&self) -> Option<Instant> {
        self.dirs
            .iter()
            .filter_map(|d| d.queue.peek().map(|Reverse((t, _, _))| *t))
            .min()
    }

    /// Frames that have arrived by `now`, as (receiving endpoint, frame), in arrival order.
    pub fn deliver(&mut self, now: Instant) -> Vec<(usize, Vec<u8>)> {
        let mut out = Vec::new();
        for (d, dir) in self.dirs.iter_mut().enumerate() {
            while dir.queue.peek().is_some_and(|Reverse((t, _, _))| *t <= now) {
                if let Some(Reverse((_, _, f))) = dir.queue.pop() {
                    out.push((1 - d, f));
                }
            }
        }
        self.stats.delivered += out.len() as u64;
        out
    }
}

/// Marks an ECT IPv4-in-Ethernet frame CE with probability `p`, fixing the header
/// checksum (the ICRC does not cover the ECN bits).
fn mark_ce(frame: &mut [u8], rng: &mut Rng, p: f64) -> bool {
    if frame.len() < 34 || frame[12..14] != [0x08, 0x00] || frame[15] & 0x03 == 0 {
        return false;
    }
    if !rng.chance(p) {
        return false;
    }
    frame[15] |= 0x03;
    let hl = usize::from(frame[14] & 0x0f) * 4;
    if frame.len() >= 14 + hl {
        let sum = crate::wire::ipv4::header_checksum(&frame[14..14 + hl]);
        frame[24..26].copy_from_slice(&sum.to_be_bytes());
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deterministic_and_lossy() {
        let run = |seed| {
            let t0 = Instant::now();
            let mut l = Link::new(
                LinkConfig {
                    loss: 0.3,
                    dup: 0.1,
                    reorder: 0.1,
                    corrupt: 0.1,
                    ..LinkConfig::default()
                },
                seed,
            );
            for i in 0..1000u32 {
                l.send(0, t0, i.to_be_bytes().to_vec());
            }
            let got = l.deliver(t0 + Duration::from_secs(1));
            (got, l.stats())
        };
        let (a, sa) = run(7);
        let (b, sb) = run(7);
        assert_eq!(a, b);
        assert_eq!(sa, sb);
        assert!(sa.dropped > 200 && sa.dropped < 400, "{sa:?}");
        assert_eq!(
            sa.delivered,
            sa.sent - sa.dropped - sa.queue_drops + sa.duplicated
        );
        let (c, _) = run(8);
        assert_ne!(a, c);
    }

    #[test]
    fn bandwidth_serialises_frames() {
        let t0 = Instant::now();
        let mut l = Link::new(
            LinkConfig {
                bandwidth_bps: 8_000_000_000, // 1 byte per ns
                delay: Duration::ZERO,
                ..LinkConfig::default()
            },
            1,
        );
        l.send(0, t0, vec![0; 976]); // 1000 ns on the wire with overhead
        l.send(0, t0, vec![0; 976]);
        assert_eq!(l.next_delivery(), Some(t0 + Duration::from_nanos(1000)));
        assert_eq!(l.deliver(t0 + Duration::from_nanos(1999)).len(), 1);
        assert_eq!(l.deliver(t0 + Duration::from_nanos(2000)).len(), 1);
    }
}
