//! Congestion control hooks (RoCEv2, IBTA Annex A17.9): the notification point (NP) turns
//! ECN-CE marked packets into CNPs, at most one per QP per interval; the reaction point
//! (RP) is where received CNPs land. The DCQCN rate logic that acts on them lives in
//! `dcqcn` once built; here are the parts every QP needs on the wire.

#![forbid(unsafe_code)]

pub mod dcqcn;

use std::collections::HashMap;
use std::time::{Duration, Instant};

/// Default minimum time between two CNPs for one QP (the DCQCN paper's 50 µs).
pub const DEFAULT_CNP_INTERVAL: Duration = Duration::from_micros(50);
/// DSCP of CNPs (mlx5's `cnp_dscp` default, 48).
pub const DEFAULT_CNP_DSCP: u8 = 48;

/// The notification point: decides when a CE mark earns a CNP.
#[derive(Debug, Clone)]
pub struct NotificationPoint {
    interval: Duration,
    last: HashMap<u32, Instant>,
}

impl NotificationPoint {
    /// An NP sending at most one CNP per QP per `interval`.
    pub fn new(interval: Duration) -> Self {
        Self {
            interval,
            last: HashMap::new(),
        }
    }

    /// The interval.
    pub fn interval(&self) -> Duration {
        self.interval
    }

    /// A CE-marked packet arrived for `qpn` at `now`: true when a CNP should go out.
    pub fn on_ce(&mut self, qpn: u32, now: Instant) -> bool {
        match self.last.get(&qpn) {
            Some(&t) if now.saturating_duration_since(t) < self.interval => false,
            _ => {
                self.last.insert(qpn, now);
                true
            }
        }
    }
}

impl Default for NotificationPoint {
    fn default() -> Self {
        Self::new(DEFAULT_CNP_INTERVAL)
    }
}

/// The reaction point of one QP: where its CNPs are delivered, and, when DCQCN is on,
/// the rate limiter its packets wait for.
#[derive(Debug, Clone, Default)]
pub struct ReactionPoint {
    /// CNPs received.
    pub cnps: u64,
    /// When the last one arrived.
    pub last_cnp: Option<Instant>,
    /// The DCQCN rate state, when DCQCN is on: boxed, so that a QP without DCQCN keeps
    /// one word for it (a context may hold 10,000 QPs; see "Many QPs" in DESIGN.md).
    pub dcqcn: Option<Box<dcqcn::ReactionPoint>>,
}

impl ReactionPoint {
    /// A CNP for this QP arrived.
    pub fn on_cnp(&mut self, now: Instant) {
        self.cnps += 1;
        self.last_cnp = Some(now);
        if let Some(rp) = &mut self.dcqcn {
            rp.on_cnp(now);
        }
    }

    /// True when the QP may send a packet now.
    #[inline]
    pub fn can_send(&self, now: Instant) -> bool {
        self.dcqcn.as_ref().is_none_or(|rp| rp.can_send(now))
    }

    /// A packet of `bytes` left.
    #[inline]
    pub fn on_sent(&mut self, now: Instant, bytes: usize) {
        if let Some(rp) = &mut self.dcqcn {
            rp.on_sent(now, bytes);
        }
    }

    /// The next time the rate limiter has something to do: its increase timer, or the
    /// release of a packet it holds back.
    pub fn poll_timeout(&self, held: bool) -> Option<Instant> {
        let rp = self.dcqcn.as_ref()?;
        let release = if held { rp.next_send() } else { None };
        [rp.poll_timeout(), release].into_iter().flatten().min()
    }

    /// Runs the increase timer.
    pub fn handle_timeout(&mut self, now: Instant) {
        if let Some(rp) = &mut self.dcqcn {
            rp.handle_timeout(now);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_cnp_per_interval_per_qp() {
        let mut np = NotificationPoint::default();
        let t0 = Instant::now();
        let sent: usize = (0..10_000u64)
            .filter(|i| np.on_ce(7, t0 + Duration::from_nanos(i * 100)))
            .count();
        assert_eq!(sent, 20, "1 ms of marks at 10 Mpkt/s, one CNP per 50 us");
        assert!(np.on_ce(8, t0), "another QP has its own interval");
    }
}
