//! DCQCN (Zhu et al., "Congestion Control for Large-Scale RDMA Deployments", SIGCOMM 2015):
//! the reaction point that runs at every sender QP. The notification point is
//! [`super::NotificationPoint`].
//!
//! Sans-IO: time comes in as an `Instant`. The sender asks [`ReactionPoint::can_send`]
//! before each packet and reports it with [`ReactionPoint::on_sent`]; CNPs come in through
//! [`ReactionPoint::on_cnp`]; the rate-increase timer runs from
//! [`ReactionPoint::poll_timeout`] / [`ReactionPoint::handle_timeout`].

mod params;

use std::time::{Duration, Instant};

pub use params::{ParamError, Params, KNOBS};

/// Counters of one reaction point, named as mlx5 names them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RpCounters {
    /// rp_cnp_handled: CNPs that cut the rate.
    pub rp_cnp_handled: u64,
    /// rp_cnp_ignored: CNPs inside `rate_reduce_monitor_period` of the last cut.
    pub rp_cnp_ignored: u64,
    /// Rate increase events (timer or byte counter).
    pub rate_increases: u64,
}

/// The DCQCN reaction point of one QP.
#[derive(Debug, Clone)]
pub struct ReactionPoint {
    p: Params,
    /// Current rate R_C, bits/s.
    rc: f64,
    /// Target rate R_T, bits/s.
    rt: f64,
    alpha: f64,
    /// Alpha decays lazily: `alpha` is its value at `alpha_at`, one factor (1 − g) per
    /// whole alpha period since.
    alpha_at: Instant,
    /// Below line rate: pacing and the increase timer are on.
    limited: bool,
    inc_deadline: Option<Instant>,
    bytes: u64,
    t_stage: u32,
    bc_stage: u32,
    last_cut: Option<Instant>,
    next_send: Instant,
    counters: RpCounters,
}

impl ReactionPoint {
    /// A flow starting at line rate.
    pub fn new(p: Params, now: Instant) -> Self {
        Self {
            p,
            rc: p.line_rate_bps,
            rt: p.line_rate_bps,
            alpha: p.initial_alpha,
            alpha_at: now,
            limited: false,
            inc_deadline: None,
            bytes: 0,
            t_stage: 0,
            bc_stage: 0,
            last_cut: None,
            next_send: now,
            counters: RpCounters::default(),
        }
    }

    /// The parameters.
    pub fn params(&self) -> &Params {
        &self.p
    }

    /// Current rate R_C in bits/s.
    pub fn rate_bps(&self) -> f64 {
        self.rc
    }

    /// Target rate R_T in bits/s.
    pub fn target_bps(&self) -> f64 {
        self.rt
    }

    /// Alpha as of `now`.
    pub fn alpha(&self, now: Instant) -> f64 {
        let k = self.p.alpha_period.as_nanos().max(1);
        let periods = now.saturating_duration_since(self.alpha_at).as_nanos() / k;
        self.alpha * (1.0 - self.p.g).powi(periods.min(1 << 20) as i32)
    }

    /// Counters.
    pub fn counters(&self) -> RpCounters {
        self.counters
    }

    /// A CNP arrived: cut the rate (IBTA A17.9, DCQCN §3.1):
    /// α ← (1 − g)α + g, R_T ← R_C, R_C ← R_C(1 − α/2), floored at the minimum rate.
    pub fn on_cnp(&mut self, now: Instant) {
        if let Some(t) = self.last_cut {
            if now.saturating_duration_since(t) < self.p.rate_reduce_monitor_period {
                self.counters.rp_cnp_ignored += 1;
                return;
            }
        }
        self.counters.rp_cnp_handled += 1;
        let a = self.alpha(now);
        self.alpha = (1.0 - self.p.g) * a + self.p.g;
        self.alpha_at = now;
        let dec = (self.alpha * 1024.0 / f64::from(1u32 << self.p.gd.min(31))).min(1.0);
        let floor = self.rc * f64::from(self.p.min_dec_fac.min(100)) / 100.0;
        self.rt = self.rc;
        self.rc = (self.rc * (1.0 - dec)).max(floor).max(self.p.min_rate_bps);
        self.limited = true;
        self.t_stage = 0;
        self.bc_stage = 0;
        self.bytes = 0;
        self.inc_deadline = Some(now + self.p.time_reset);
        self.last_cut = Some(now);
    }

    /// True when a packet may leave now.
    #[inline]
    pub fn can_send(&self, now: Instant) -> bool {
        !self.limited || now >= self.next_send
    }

    /// When the pacer lets the next packet go (only while the rate is limited).
    pub fn next_send(&self) -> Option<Instant> {
        self.limited.then_some(self.next_send)
    }

    /// A packet of `bytes` left: advance the pacer and the byte counter.
    #[inline]
    pub fn on_sent(&mut self, now: Instant, bytes: usize) {
        if !self.limited {
            return;
        }
        let start = self.next_send.max(now);
        self.next_send = start + Duration::from_nanos((bytes as f64 * 8e9 / self.rc) as u64);
        self.bytes += bytes as u64;
        if self.bytes >= self.p.byte_reset {
            self.bytes -= self.p.byte_reset;
            self.bc_stage += 1;
            self.increase();
        }
    }

    /// When the increase timer fires next.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.inc_deadline
    }

    /// Fires the increase timer if it is due.
    pub fn handle_timeout(&mut self, now: Instant) {
        while let Some(t) = self.inc_deadline {
            if now < t {
                break;
            }
            self.t_stage += 1;
            self.inc_deadline = Some(t + self.p.time_reset);
            self.increase();
        }
    }

    /// One increase event (DCQCN §3.1): fast recovery while both stage counters are below
    /// F, additive increase once one reaches F, hyper increase once both have.
    fn increase(&mut self) {
        if !self.limited {
            return;
        }
        self.counters.rate_increases += 1;
        let f = self.p.threshold;
        let (hi, lo) = (
            self.t_stage.max(self.bc_stage),
            self.t_stage.min(self.bc_stage),
        );
        if lo >= f {
            self.rt += f64::from(lo - f + 1) * self.p.hai_rate_bps;
        } else if hi >= f {
            self.rt += self.p.ai_rate_bps;
        }
        self.rt = self.rt.min(self.p.line_rate_bps);
        self.rc = ((self.rt + self.rc) / 2.0).min(self.p.line_rate_bps);
        if self.p.line_rate_bps - self.rc < 1e-6 * self.p.line_rate_bps {
            self.rc = self.p.line_rate_bps;
            self.limited = false;
            self.inc_deadline = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cut_then_recover() {
        let t0 = Instant::now();
        let p = Params::paper(40e9);
        let mut rp = ReactionPoint::new(p, t0);
        assert!(rp.can_send(t0));
        rp.on_cnp(t0);
        // α = (1 − 1/256)·1 + 1/256 = 1, cut to half.
        assert!((rp.rate_bps() - 20e9).abs() < 1.0);
        assert_eq!(rp.target_bps(), 40e9);
        // Pacing at 20 Gb/s: a 1000-byte packet holds the next one for 400 ns.
        rp.on_sent(t0, 1000);
        assert!(!rp.can_send(t0 + Duration::from_nanos(399)));
        assert!(rp.can_send(t0 + Duration::from_nanos(400)));
        // Fast recovery: each timer halves the distance to the target.
        rp.handle_timeout(t0 + p.time_reset);
        assert!((rp.rate_bps() - 30e9).abs() < 1.0);
        // Alpha decays on its own: one factor (1 − g) per 55 µs without a CNP.
        let a = rp.alpha(t0 + 10 * p.alpha_period);
        assert!((a - (255.0f64 / 256.0).powi(10)).abs() < 1e-9);
        // Eventually back at line rate, unlimited again.
        rp.handle_timeout(t0 + Duration::from_secs(1));
        assert_eq!(rp.rate_bps(), 40e9);
        assert!(rp.next_send().is_none());
    }

    #[test]
    fn monitor_period_ignores_cnps_and_floor_holds() {
        let t0 = Instant::now();
        let mut rp = ReactionPoint::new(Params::mlx5(25e9), t0);
        rp.on_cnp(t0);
        rp.on_cnp(t0 + Duration::from_micros(1));
        assert_eq!(rp.counters().rp_cnp_handled, 1);
        assert_eq!(rp.counters().rp_cnp_ignored, 1);
        for i in 0..200 {
            rp.on_cnp(t0 + Duration::from_micros(5 * (i + 1)));
        }
        assert!(rp.rate_bps() >= 1e6, "never below rpg_min_rate");
    }
}
