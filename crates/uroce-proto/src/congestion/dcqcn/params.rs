//! DCQCN parameters: two named profiles and the knobs by the names NIC operators know
//! from `/sys/class/net/*/ecn/roce_rp` and `roce_np` (mlx5), in the same units.

use std::time::Duration;

/// Every DCQCN knob, in SI units.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Params {
    /// Line rate of the port, bits/s (the rate a flow starts at and never exceeds).
    pub line_rate_bps: f64,
    /// Rate increase timer T (`rpg_time_reset`).
    pub time_reset: Duration,
    /// Byte counter B (`rpg_byte_reset`), bytes.
    pub byte_reset: u64,
    /// Fast-recovery threshold F (`rpg_threshold`): stages before additive increase.
    pub threshold: u32,
    /// Additive increase step R_AI (`rpg_ai_rate`), bits/s.
    pub ai_rate_bps: f64,
    /// Hyper increase step R_HAI (`rpg_hai_rate`), bits/s.
    pub hai_rate_bps: f64,
    /// `rpg_gd`: a cut is rate × (1 − α·1024 / 2^gd); 11 gives the paper's (1 − α/2).
    pub gd: u32,
    /// `rpg_min_dec_fac`, percent: a cut leaves at least this share of the rate.
    pub min_dec_fac: u32,
    /// Floor of the rate (`rpg_min_rate`), bits/s.
    pub min_rate_bps: f64,
    /// Alpha gain g (`dce_tcp_g` / 1024).
    pub g: f64,
    /// Alpha update period K (`dce_tcp_rtt`).
    pub alpha_period: Duration,
    /// Minimum time between two rate cuts (`rate_reduce_monitor_period`); CNPs in
    /// between are counted as ignored.
    pub rate_reduce_monitor_period: Duration,
    /// Alpha at start (`initial_alpha_value` / 1024).
    pub initial_alpha: f64,
    /// NP: minimum time between CNPs of one QP (`min_time_between_cnps`).
    pub min_time_between_cnps: Duration,
    /// NP: DSCP of CNPs (`cnp_dscp`).
    pub cnp_dscp: u8,
    /// NP: 802.1p priority of CNPs (`cnp_802p_prio`).
    pub cnp_802p_prio: u8,
}

/// A profile name that does not exist, or a knob name or value that is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParamError {
    /// Unknown profile.
    #[error("unknown DCQCN profile `{0}` (paper, mlx5)")]
    UnknownProfile(String),
    /// Unknown knob.
    #[error("unknown DCQCN knob `{0}`; knobs: {KNOBS}")]
    UnknownKnob(String),
    /// A value out of range or not a number.
    #[error("bad value `{value}` for {knob}: {why}")]
    BadValue {
        /// The knob.
        knob: String,
        /// The value.
        value: String,
        /// What is wrong.
        why: &'static str,
    },
}

/// The knobs [`Params::set`] takes.
pub const KNOBS: &str =
    "rpg_time_reset (us), rpg_byte_reset (B), rpg_threshold, rpg_ai_rate (Mb/s), \
rpg_hai_rate (Mb/s), rpg_gd, rpg_min_dec_fac (%), rpg_min_rate (Mb/s), dce_tcp_g (/1024), \
dce_tcp_rtt (us), rate_reduce_monitor_period (us), initial_alpha_value (/1024), \
min_time_between_cnps (us), cnp_dscp, cnp_802p_prio, line_rate (Gb/s)";

const MBPS: f64 = 1e6;

impl Params {
    /// The values of the DCQCN paper (Zhu et al., SIGCOMM 2015): K = 55 µs, T = 55 µs,
    /// B = 10 MB, F = 5, R_AI = 40 Mb/s, g = 1/256, CNP interval 50 µs. The paper gives no
    /// R_HAI; 10 × R_AI is used (as mlx5's defaults keep it).
    pub fn paper(line_rate_bps: f64) -> Self {
        Self {
            line_rate_bps,
            time_reset: Duration::from_micros(55),
            byte_reset: 10 * 1024 * 1024,
            threshold: 5,
            ai_rate_bps: 40.0 * MBPS,
            hai_rate_bps: 400.0 * MBPS,
            gd: 11,
            min_dec_fac: 0,
            min_rate_bps: 10.0 * MBPS,
            g: 1.0 / 256.0,
            alpha_period: Duration::from_micros(55),
            rate_reduce_monitor_period: Duration::ZERO,
            initial_alpha: 1.0,
            min_time_between_cnps: Duration::from_micros(50),
            cnp_dscp: 48,
            cnp_802p_prio: 6,
        }
    }

    /// NVIDIA ConnectX (mlx5) defaults.
    pub fn mlx5(line_rate_bps: f64) -> Self {
        Self {
            line_rate_bps,
            time_reset: Duration::from_micros(300),
            byte_reset: 32767,
            threshold: 1,
            ai_rate_bps: 5.0 * MBPS,
            hai_rate_bps: 50.0 * MBPS,
            gd: 11,
            min_dec_fac: 50,
            min_rate_bps: MBPS,
            g: 1019.0 / 1024.0,
            alpha_period: Duration::from_micros(1),
            rate_reduce_monitor_period: Duration::from_micros(4),
            initial_alpha: 1023.0 / 1024.0,
            min_time_between_cnps: Duration::from_micros(4),
            cnp_dscp: 48,
            cnp_802p_prio: 6,
        }
    }

    /// A profile by name.
    pub fn profile(name: &str, line_rate_bps: f64) -> Result<Self, ParamError> {
        match name {
            "paper" => Ok(Self::paper(line_rate_bps)),
            "mlx5" => Ok(Self::mlx5(line_rate_bps)),
            other => Err(ParamError::UnknownProfile(other.to_string())),
        }
    }

    /// Sets one knob by its mlx5 name, in mlx5 units.
    pub fn set(&mut self, knob: &str, value: &str) -> Result<(), ParamError> {
        let bad = |why| ParamError::BadValue {
            knob: knob.to_string(),
            value: value.to_string(),
            why,
        };
        let num: f64 = value.trim().parse().map_err(|_| bad("not a number"))?;
        if !num.is_finite() || num < 0.0 {
            return Err(bad("must be a finite number, 0 or more"));
        }
        let us = Duration::from_nanos((num * 1000.0) as u64);
        match knob {
            "rpg_time_reset" => self.time_reset = us,
            "rpg_byte_reset" => self.byte_reset = num as u64,
            "rpg_threshold" => self.threshold = num as u32,
            "rpg_ai_rate" => self.ai_rate_bps = num * MBPS,
            "rpg_hai_rate" => self.hai_rate_bps = num * MBPS,
            "rpg_gd" if num <= 31.0 => self.gd = num as u32,
            "rpg_min_dec_fac" if num <= 100.0 => self.min_dec_fac = num as u32,
            "rpg_min_rate" => self.min_rate_bps = num * MBPS,
            "dce_tcp_g" if num <= 1024.0 => self.g = num / 1024.0,
            "dce_tcp_rtt" => self.alpha_period = us,
            "rate_reduce_monitor_period" => self.rate_reduce_monitor_period = us,
            "initial_alpha_value" if num <= 1024.0 => self.initial_alpha = num / 1024.0,
            "min_time_between_cnps" => self.min_time_between_cnps = us,
            "cnp_dscp" if num < 64.0 => self.cnp_dscp = num as u8,
            "cnp_802p_prio" if num < 8.0 => self.cnp_802p_prio = num as u8,
            "line_rate" if num > 0.0 => self.line_rate_bps = num * 1e9,
            "rpg_gd"
            | "rpg_min_dec_fac"
            | "dce_tcp_g"
            | "initial_alpha_value"
            | "cnp_dscp"
            | "cnp_802p_prio"
            | "line_rate" => return Err(bad("out of range")),
            other => return Err(ParamError::UnknownKnob(other.to_string())),
        }
        Ok(())
    }

    /// Sets `name=value,name=value...`.
    pub fn set_all(&mut self, list: &str) -> Result<(), ParamError> {
        for kv in list.split(',').filter(|s| !s.trim().is_empty()) {
            let (k, v) = kv.split_once('=').ok_or_else(|| ParamError::BadValue {
                knob: kv.to_string(),
                value: String::new(),
                why: "expected knob=value",
            })?;
            self.set(k.trim(), v)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn knobs_by_mlx5_names() {
        let mut p = Params::mlx5(25e9);
        assert_eq!(p.time_reset, Duration::from_micros(300));
        assert_eq!(p.byte_reset, 32767);
        p.set_all("rpg_ai_rate=10, rpg_time_reset=100, dce_tcp_g=512, min_time_between_cnps=50")
            .unwrap();
        assert_eq!(p.ai_rate_bps, 10e6);
        assert_eq!(p.time_reset, Duration::from_micros(100));
        assert_eq!(p.g, 0.5);
        assert_eq!(p.min_time_between_cnps, Duration::from_micros(50));
        assert!(matches!(
            p.set("rpg_foo", "1"),
            Err(ParamError::UnknownKnob(_))
        ));
        assert!(matches!(
            p.set("cnp_dscp", "64"),
            Err(ParamError::BadValue { .. })
        ));
        assert!(matches!(
            p.set("rpg_ai_rate", "x"),
            Err(ParamError::BadValue { .. })
        ));
        assert!(Params::profile("paper", 40e9).is_ok());
        assert!(Params::profile("cubic", 40e9).is_err());
    }
}
