//! What an endpoint puts in the headers the network looks at (DSCP, UDP source ports) and
//! whether DCQCN runs: [`Traffic`], shared by `uroce perf` and the perftest-compatible
//! mode, and the context it makes, DCQCN's line rate being the interface's speed.

use std::net::IpAddr;
use std::time::Instant;

use anyhow::{bail, Context as _};

use uroce::congestion::dcqcn;
use uroce::verbs::{Context, ContextConfig};

/// UDP source ports the QPs share over the UDP backend unless `--udp-sports` says
/// otherwise: a batch of 64 datagrams then takes at most this many `sendmmsg` calls, and
/// ECMP still sees this many flows.
pub const DEFAULT_UDP_SPORTS: u16 = 4;

/// What an endpoint puts in the headers the network looks at, and whether DCQCN runs.
#[derive(Debug, Clone, PartialEq)]
pub struct Traffic {
    /// DSCP of every data and ACK packet (CNPs keep DCQCN's `cnp_dscp`).
    pub dscp: u8,
    /// UDP source ports are `sport_base | (hash(QPN) & 0x3fff)`: ECMP entropy, fixed per QP.
    pub sport_base: u16,
    /// UDP source ports the QPs share (`Context::set_udp_sports`): `Some(0)` one per QP,
    /// `Some(n)` a pool of `n`; `None` chooses by backend ([`Traffic::udp_sports_for`]).
    pub udp_sports: Option<u16>,
    /// DCQCN: a profile (`paper` or `mlx5`) and knobs by their mlx5 names
    /// (`rpg_ai_rate=10,...`). Data packets then carry ECT(0), the reaction point paces
    /// each QP, and the notification point answers CE marks with CNPs.
    pub dcqcn: Option<(String, String)>,
}

impl Default for Traffic {
    fn default() -> Self {
        Self {
            dscp: 0,
            sport_base: 0xc000,
            udp_sports: None,
            dcqcn: None,
        }
    }
}

impl Traffic {
    /// Checks the DSCP range and the DCQCN profile and knobs; says what is wrong.
    pub fn validate(&self) -> anyhow::Result<()> {
        if self.dscp > 63 {
            bail!("--dscp {} is out of range 0..=63", self.dscp);
        }
        // The hash fills the low 14 bits: a base with any of them set, or 0 (ports from
        // 0, some privileged), is no range of its own.
        if self.sport_base & 0x3fff != 0 || self.sport_base == 0 {
            bail!(
                "--sport-base {} must be 16384, 32768 or 49152 (ports are BASE | 14 bits of the QPN's hash)",
                self.sport_base
            );
        }
        if self.udp_sports.is_some_and(|n| n > 0x4000) {
            bail!("--udp-sports is at most 16384 (the ports are BASE | 14 bits)");
        }
        self.dcqcn_params(100e9).map(|_| ())
    }

    /// How many UDP source ports the QPs share over a backend: what `--udp-sports` said,
    /// or by default [`DEFAULT_UDP_SPORTS`] over the UDP backend, which sends from a
    /// socket per source port (a socket per QP would be a descriptor and, with QPs
    /// taking turns, a system call per packet), and one per QP over AF_XDP, which builds
    /// its frames itself and batches whatever the ports (ECMP entropy for free).
    pub fn udp_sports_for(&self, udp_backend: bool) -> u16 {
        self.udp_sports
            .unwrap_or(if udp_backend { DEFAULT_UDP_SPORTS } else { 0 })
    }

    fn dcqcn_params(&self, line_rate_bps: f64) -> anyhow::Result<Option<dcqcn::Params>> {
        let Some((profile, knobs)) = &self.dcqcn else {
            return Ok(None);
        };
        let mut p = dcqcn::Params::profile(profile, line_rate_bps).context("--dcqcn")?;
        p.set_all(knobs).context("--dcqcn-set")?;
        Ok(Some(p))
    }

    /// A context for `mac` / `ip` sending as configured; DCQCN's line rate is the
    /// interface's speed (veth reports 10 Gb/s; 100 Gb/s where none is reported).
    pub(crate) fn context(
        &self,
        iface: &str,
        mac: [u8; 6],
        ip: IpAddr,
        seed: u64,
    ) -> anyhow::Result<Context> {
        let mut ctx = Context::new(
            ContextConfig {
                mac,
                ip,
                seed,
                udp_sport_base: self.sport_base,
                tos: self.dscp << 2,
            },
            std::time::Instant::now(),
        );
        if self.dcqcn.is_some() {
            if let Some(p) = self.dcqcn_params(link_speed_bps(iface))? {
                ctx.enable_dcqcn(p, Instant::now());
            }
        }
        Ok(ctx)
    }

    /// How it shows in a datapath line: empty when all is default.
    pub(crate) fn describe(&self) -> String {
        let mut s = String::new();
        if self.dscp != 0 {
            s.push_str(&format!(", DSCP {}", self.dscp));
        }
        match self.udp_sports {
            Some(0) => s.push_str(", a UDP source port per QP"),
            Some(n) => s.push_str(&format!(", {n} UDP source ports")),
            None => {}
        }
        if self.sport_base != Self::default().sport_base {
            s.push_str(&format!(
                ", UDP source ports {:#06x} | hash",
                self.sport_base
            ));
        }
        if let Some((profile, _)) = &self.dcqcn {
            s.push_str(&format!(", DCQCN ({profile}), ECT(0)"));
        }
        s
    }
}

/// The interface's speed from sysfs (veth and tun report 10 Gb/s), or 100 Gb/s when it
/// reports none (-1 or no file).
fn link_speed_bps(iface: &str) -> f64 {
    std::fs::read_to_string(format!("/sys/class/net/{iface}/speed"))
        .ok()
        .and_then(|s| s.trim().parse::<i64>().ok())
        .filter(|&mbps| mbps > 0)
        .map_or(100e9, |mbps| mbps as f64 * 1e6)
}
