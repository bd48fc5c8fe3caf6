//! `--dscp`, `--sport-base`, `--dcqcn`, `--dcqcn-set`: what `uroce perf` puts in the
//! headers the network looks at.

use uroce_tools::perf::Traffic;

/// DSCP, UDP source ports and DCQCN of the packets sent.
#[derive(clap::Args, Debug, Clone)]
pub struct TrafficArgs {
    /// DSCP of data and ACK packets (0..63; RoCE classes are often 26 or 24).
    #[arg(long, default_value_t = 0)]
    dscp: u8,
    /// UDP source ports are SPORT_BASE | (hash(QPN) & 0x3fff): fixed per QP, spread over
    /// QPs for ECMP. 16384, 32768 or 49152.
    #[arg(long, default_value_t = 0xc000)]
    sport_base: u16,
    /// UDP source ports the QPs share: 0 gives each QP its own (SPORT_BASE | 14 bits of
    /// its QPN's hash, as rdma_rxe), N a pool of N (SPORT_BASE | hash % N). Default: 4
    /// over the UDP backend (a socket per port: fewer sockets, one sendmmsg per port per
    /// batch), one per QP over AF_XDP. More ports, more ECMP entropy.
    #[arg(long)]
    udp_sports: Option<u16>,
    /// Turn DCQCN on with this profile (paper or mlx5): data packets carry ECT(0), each
    /// QP is paced by its reaction point, CE-marked packets are answered with CNPs.
    #[arg(long)]
    dcqcn: Option<String>,
    /// DCQCN knobs by their mlx5 names, e.g. `rpg_ai_rate=10,min_time_between_cnps=50`.
    #[arg(long, default_value = "", requires = "dcqcn")]
    dcqcn_set: String,
}

impl TrafficArgs {
    /// The traffic asked for, or why it is refused.
    pub fn traffic(&self) -> anyhow::Result<Traffic> {
        let t = Traffic {
            dscp: self.dscp,
            sport_base: self.sport_base,
            udp_sports: self.udp_sports,
            dcqcn: self.dcqcn.clone().map(|p| (p, self.dcqcn_set.clone())),
        };
        t.validate()?;
        Ok(t)
    }
}
