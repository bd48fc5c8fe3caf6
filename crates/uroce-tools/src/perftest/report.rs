//! What a perftest run reports: the rows of its bandwidth and latency tables ([`BwRow`],
//! [`LatRow`]) and the [`Outcome`] `--json` prints, and the text perftest prints (header,
//! address lines, tables), computed from the run's time stamps.

use std::time::Instant;

use super::{Keys, Run, Test, Verb, VERSION};

/// Bandwidth results (perftest's report row).
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct BwRow {
    /// Bytes per message.
    pub bytes: u64,
    /// Iterations.
    pub iterations: u64,
    /// Peak bandwidth, MB/s (or Gb/s with --report_gbits).
    pub bw_peak: f64,
    /// Average bandwidth, same unit.
    pub bw_average: f64,
    /// Messages per second, millions.
    pub msg_rate_mpps: f64,
}

/// Latency results (perftest's report row), microseconds.
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct LatRow {
    /// Bytes per message.
    pub bytes: u64,
    /// Iterations.
    pub iterations: u64,
    /// Smallest.
    pub t_min: f64,
    /// Largest (after dropping the two largest, as perftest does).
    pub t_max: f64,
    /// Median.
    pub t_typical: f64,
    /// Mean.
    pub t_avg: f64,
    /// Standard deviation.
    pub t_stdev: f64,
    /// 99th percentile.
    pub p99: f64,
    /// 99.9th percentile.
    pub p999: f64,
}

/// What a run did.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Outcome {
    /// perftest's tool this run is compatible with.
    pub tool: String,
    /// "client" or "server".
    pub role: String,
    /// The peer's version string.
    pub peer_version: String,
    /// Negotiated path MTU, bytes.
    pub mtu: u32,
    /// Datapath used.
    pub datapath: String,
    /// Bandwidth row (the client's numbers, on both sides where perftest shows them).
    pub bw: Option<BwRow>,
    /// Latency row.
    pub lat: Option<LatRow>,
    /// What uroce checked of the data, in words (empty when nothing could be).
    pub validated: Vec<String>,
    /// Packets uroce retransmitted.
    pub retransmits: u64,
    /// perftest-style text: header, address lines, result table.
    #[serde(skip)]
    pub text: Vec<String>,
}

impl Run {
    pub(super) fn header(&mut self) {
        let t = self.cfg.test;
        let rule = "-".repeat(87);
        let mut title = t.title();
        if t.verb == Verb::Atomic {
            let op = if self.cfg.compare_swap {
                "CMP_AND_SWAP"
            } else {
                "FETCH_AND_ADD"
            };
            title = format!("Atomic {op} {}", &title["Atomic ".len()..]);
        }
        let lines = [
            rule.clone(),
            format!("                    {title}"),
            " Number of qps   : 1\t\tTransport type : IB".to_string(),
            " Connection type : RC\t\tUsing SRQ      : OFF".to_string(),
            format!(" Mtu             : {}[B]", self.mtu.bytes()),
            " Link type       : Ethernet".to_string(),
            format!(" Datapath        : {}", self.out.datapath),
            format!(" Data ex. method : Ethernet (perftest {VERSION} exchange)"),
            rule.clone(),
            Self::address_line("local", &self.mine, t),
            Self::gid_line(&self.mine),
            Self::address_line("remote", &self.rem, t),
            Self::gid_line(&self.rem),
            rule,
        ];
        self.out.text.extend(lines);
    }

    fn address_line(who: &str, k: &Keys, t: Test) -> String {
        let mut s = format!(
            " {who} address: LID {:#06x} QPN {:#06x} PSN {:#08x}",
            k.lid, k.qpn, k.psn
        );
        if t.verb == Verb::Read {
            s.push_str(&format!(" OUT {:#04x}", k.out_reads));
        }
        if matches!(t.verb, Verb::Write | Verb::Read) {
            s.push_str(&format!(" RKey {:#08x} VAddr {:#016x}", k.rkey, k.vaddr));
        }
        s
    }

    fn gid_line(k: &Keys) -> String {
        let g: Vec<String> = k.gid.iter().map(|b| format!("{b:02}")).collect();
        format!(" GID: {}", g.join(":"))
    }

    pub(super) fn bw_unit(&self) -> (&'static str, f64) {
        if self.cfg.report_gbits {
            ("Gb/sec", 125e6)
        } else {
            ("MB/sec", 1_048_576.0)
        }
    }

    pub(super) fn bw_table(&mut self, row: BwRow) {
        let (unit, _) = self.bw_unit();
        self.out.text.push(format!(
            " #bytes     #iterations    BW peak[{unit}]    BW average[{unit}]   MsgRate[Mpps]"
        ));
        self.out.text.push(format!(
            " {:<7}    {:<10}       {:<7.2}            {:<7.2}\t\t   {:<7.6}",
            row.bytes, row.iterations, row.bw_peak, row.bw_average, row.msg_rate_mpps
        ));
        self.out.text.push("-".repeat(87));
        self.out.bw = Some(row);
    }

    pub(super) fn row(&self, posted: &[Instant], completed: &[Instant], iters: u64) -> BwRow {
        let (_, factor) = self.bw_unit();
        let size = f64::from(self.cfg.size);
        let (Some(first), Some(last)) = (posted.first(), completed.last()) else {
            return BwRow::default();
        };
        let secs = last.duration_since(*first).as_secs_f64().max(1e-9);
        // The peak as perftest takes it: the best per-message time between any post and
        // a later completion; skipped above 20,000 iterations (perftest's noPeak).
        let mut peak = 0.0;
        if completed.len() <= 20_000 {
            let mut best = f64::MAX;
            for (i, p) in posted.iter().enumerate() {
                for (j, c) in completed.iter().enumerate().skip(i) {
                    let t = c.saturating_duration_since(*p).as_secs_f64() / (j - i + 1) as f64;
                    if t > 0.0 && t < best {
                        best = t;
                    }
                }
            }
            if best < f64::MAX {
                peak = size / best / factor;
            }
        }
        BwRow {
            bytes: u64::from(self.cfg.size),
            iterations: iters,
            bw_peak: peak,
            bw_average: size * iters as f64 / secs / factor,
            msg_rate_mpps: iters as f64 / secs / 1e6,
        }
    }

    pub(super) fn lat_table(&mut self, stamps: &[Instant], rtt_factor: f64) {
        let mut d: Vec<f64> = stamps
            .windows(2)
            .map(|w| w[1].duration_since(w[0]).as_secs_f64() * 1e6 / rtt_factor)
            .collect();
        d.sort_by(|a, b| a.total_cmp(b));
        // perftest drops the two largest samples.
        d.truncate(d.len().saturating_sub(2));
        let row = if d.is_empty() {
            LatRow::default()
        } else {
            let n = d.len();
            let avg = d.iter().sum::<f64>() / n as f64;
            let var = d.iter().map(|x| (x - avg) * (x - avg)).sum::<f64>() / n as f64;
            let pct = |p: f64| d[(((n - 1) as f64 * p).ceil() as usize).min(n - 1)];
            LatRow {
                bytes: u64::from(self.cfg.size),
                iterations: self.cfg.iters,
                t_min: d[0],
                t_max: d[n - 1],
                t_typical: d[n / 2],
                t_avg: avg,
                t_stdev: var.sqrt(),
                p99: pct(0.99),
                p999: pct(0.999),
            }
        };
        self.out.text.push(" #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] ".into());
        self.out.text.push(format!(
            " {:<7} {:<10}  {:<7.2}        {:<7.2}      {:<7.2}  \t       {:<7.2}     \t{:<7.2}\t\t{:<7.2} \t\t{:<7.2}",
            row.bytes, row.iterations, row.t_min, row.t_max, row.t_typical, row.t_avg, row.t_stdev, row.p99, row.p999
        ));
        self.out.text.push("-".repeat(87));
        self.out.lat = Some(row);
    }
}
