//! A discrete-event simulation of DCQCN the way the paper evaluates it: N senders, one
//! switch output port with RED/ECN marking (and optional PFC), one receiver. The senders
//! run the real reaction point ([`ReactionPoint`]) and the receiver the real notification
//! point ([`NotificationPoint`]); only the network is simulated.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::time::{Duration, Instant};

use super::Rng;
use crate::congestion::dcqcn::{Params, ReactionPoint};
use crate::congestion::NotificationPoint;

/// RED/ECN marking at the switch queue (Kmin, Kmax, Pmax as in the paper).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Red {
    /// Below this queue length nothing is marked.
    pub kmin_bytes: usize,
    /// At or above this queue length everything is marked.
    pub kmax_bytes: usize,
    /// Marking probability just below Kmax.
    pub pmax: f64,
}

/// PFC thresholds: pause every sender above `xoff`, resume below `xon`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Pfc {
    /// Pause threshold.
    pub xoff_bytes: usize,
    /// Resume threshold.
    pub xon_bytes: usize,
}

/// A congestion-control experiment.
#[derive(Debug, Clone, PartialEq)]
pub struct CcConfig {
    /// Number of senders.
    pub flows: usize,
    /// Sender NIC and bottleneck rate, bits/s.
    pub line_rate_bps: f64,
    /// One-way propagation delay of each hop.
    pub prop_delay: Duration,
    /// Bytes per packet on the wire.
    pub packet_bytes: usize,
    /// How long to run.
    pub duration: Duration,
    /// Flow i starts at i × stagger.
    pub stagger: Duration,
    /// ECN marking.
    pub red: Red,
    /// Switch buffer for the port; packets beyond it are dropped.
    pub buffer_bytes: usize,
    /// PFC, if on.
    pub pfc: Option<Pfc>,
    /// DCQCN parameters, `None` for no end-to-end control.
    pub dcqcn: Option<Params>,
    /// Sampling interval of the output series.
    pub sample: Duration,
    /// Seed of the marking coin.
    pub seed: u64,
}

impl CcConfig {
    /// The paper's setting: 40 Gb/s, Kmin 5 KB, Kmax 200 KB, Pmax 1%, the paper's DCQCN
    /// parameters, 1 µs per hop, 1 KB packets, a 12 MB buffer.
    pub fn paper(flows: usize) -> Self {
        let rate = 40e9;
        Self {
            flows,
            line_rate_bps: rate,
            prop_delay: Duration::from_micros(1),
            packet_bytes: 1086,
            duration: Duration::from_millis(100),
            stagger: Duration::ZERO,
            red: Red {
                kmin_bytes: 5_000,
                kmax_bytes: 200_000,
                pmax: 0.01,
            },
            buffer_bytes: 12 << 20,
            pfc: None,
            dcqcn: Some(Params::paper(rate)),
            sample: Duration::from_micros(500),
            seed: 1,
        }
    }
}

/// One sample of the series.
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct Sample {
    /// Time, microseconds.
    pub t_us: f64,
    /// Throughput of each flow at the receiver over the interval, Gb/s.
    pub rates_gbps: Vec<f64>,
    /// Switch queue at the sample time, bytes.
    pub queue_bytes: usize,
}

/// What an experiment showed.
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct CcResult {
    /// The series.
    pub samples: Vec<Sample>,
    /// Packets dropped at the switch (buffer overflow).
    pub drops: u64,
    /// Largest queue seen, bytes.
    pub max_queue_bytes: usize,
    /// Mean queue over the second half, bytes.
    pub mean_queue_bytes_second_half: f64,
    /// Jain's fairness index of per-flow throughput over the second half.
    pub jain_second_half: f64,
    /// Bottleneck utilisation over the second half (0..1).
    pub utilisation_second_half: f64,
    /// CNPs the receiver sent.
    pub cnps: u64,
    /// Time from the last flow's start until Jain's index first stays at or above 0.95
    /// over a 5 ms window, microseconds (`None` if never).
    pub converge_us: Option<f64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Ev {
    Sample,
    SenderTry(usize),
    RpTimer(usize),
    Cnp(usize),
    Pause(bool),
    Arrive(usize, bool),
    Depart,
    Deliver(usize, bool),
}

/// Runs an experiment.
pub fn run(cfg: &CcConfig) -> CcResult {
    let t0 = Instant::now();
    let ns = |d: Duration| d.as_nanos() as u64;
    let at = |t: u64| t0 + Duration::from_nanos(t);
    let ser = (cfg.packet_bytes as f64 * 8e9 / cfg.line_rate_bps) as u64;
    // The bottleneck port serialises at exactly the line rate: its clock runs in
    // picoseconds and each departure is scheduled at the nanosecond after the packet's
    // last bit (`ser` alone, truncated to whole nanoseconds, would let it send 1% over
    // the line rate for 1086-byte packets at 100 Gb/s: 86 ns for 86.88).
    let ser_ps = (cfg.packet_bytes as f64 * 8e12 / cfg.line_rate_bps).round() as u64;
    let mut port_ps: u64 = 0;
    let depart_at = |ps: u64| ps.div_ceil(1000);
    let prop = ns(cfg.prop_delay);
    let end = ns(cfg.duration);
    let n = cfg.flows.max(1);
    let mut rng = Rng::new(cfg.seed);
    let mut rps: Vec<Option<ReactionPoint>> = (0..n)
        .map(|_| cfg.dcqcn.map(|p| ReactionPoint::new(p, t0)))
        .collect();
    let mut rp_timer: Vec<Option<u64>> = vec![None; n];
    let mut np = NotificationPoint::new(
        cfg.dcqcn
            .map_or(Duration::from_micros(50), |p| p.min_time_between_cnps),
    );
    let mut q: BinaryHeap<Reverse<(u64, u64, Ev)>> = BinaryHeap::new();
    let mut seq = 0u64;
    let mut push = |q: &mut BinaryHeap<Reverse<(u64, u64, Ev)>>, t: u64, e: Ev| {
        seq += 1;
        q.push(Reverse((t, seq, e)));
    };
    for f in 0..n {
        push(&mut q, ns(cfg.stagger) * f as u64, Ev::SenderTry(f));
    }
    push(&mut q, ns(cfg.sample), Ev::Sample);
    let mut queue: VecDeque<(usize, bool)> = VecDeque::new();
    let mut qbytes = 0usize;
    let mut busy = false;
    let mut paused = false;
    let mut pause_pending = false;
    let mut delivered = vec![0u64; n];
    let mut last_delivered = vec![0u64; n];
    let mut samples = Vec::new();
    let mut drops = 0u64;
    let mut max_q = 0usize;
    let mut cnps = 0u64;
    let mut sender_waiting = vec![false; n];

    while let Some(Reverse((t, _, ev))) = q.pop() {
        if t > end {
            break;
        }
        let now = at(t);
        match ev {
            Ev::SenderTry(f) => {
                if paused {
                    sender_waiting[f] = true;
                    continue;
                }
                let next = match &mut rps[f] {
                    Some(rp) if !rp.can_send(now) => rp.next_send().map_or(t + ser, |s| ns(s - t0)),
                    rp => {
                        if let Some(rp) = rp {
                            rp.on_sent(now, cfg.packet_bytes);
                        }
                        push(&mut q, t + ser + prop, Ev::Arrive(f, false));
                        let paced = rps[f]
                            .as_ref()
                            .and_then(|r| r.next_send())
                            .map_or(0, |s| ns(s.saturating_duration_since(t0)));
                        (t + ser).max(paced)
                    }
                };
                push(&mut q, next.max(t + 1), Ev::SenderTry(f));
                if let Some(rp) = &rps[f] {
                    if let Some(d) = rp.poll_timeout() {
                        let d = ns(d - t0);
                        if rp_timer[f] != Some(d) {
                            rp_timer[f] = Some(d);
                            push(&mut q, d, Ev::RpTimer(f));
                        }
                    }
                }
            }
            Ev::Arrive(f, _) => {
                if qbytes + cfg.packet_bytes > cfg.buffer_bytes {
                    drops += 1;
                    continue;
                }
                let p = if qbytes <= cfg.red.kmin_bytes {
                    0.0
                } else if qbytes >= cfg.red.kmax_bytes {
                    1.0
                } else {
                    cfg.red.pmax * (qbytes - cfg.red.kmin_bytes) as f64
                        / (cfg.red.kmax_bytes - cfg.red.kmin_bytes) as f64
                };
                let marked = rng.chance(p);
                queue.push_back((f, marked));
                qbytes += cfg.packet_bytes;
                max_q = max_q.max(qbytes);
                if !busy {
                    busy = true;
                    port_ps = t * 1000 + ser_ps;
                    push(&mut q, depart_at(port_ps), Ev::Depart);
                }
                if let Some(pfc) = cfg.pfc {
                    if qbytes > pfc.xoff_bytes && !paused && !pause_pending {
                        pause_pending = true;
                        push(&mut q, t + prop, Ev::Pause(true));
                    }
                }
            }
            Ev::Depart => {
                if let Some((f, marked)) = queue.pop_front() {
                    qbytes -= cfg.packet_bytes;
                    push(&mut q, t + prop, Ev::Deliver(f, marked));
                }
                if queue.is_empty() {
                    busy = false;
                } else {
                    port_ps += ser_ps;
                    push(&mut q, depart_at(port_ps), Ev::Depart);
                }
                if let Some(pfc) = cfg.pfc {
                    if paused && qbytes < pfc.xon_bytes && !pause_pending {
                        pause_pending = true;
                        push(&mut q, t + prop, Ev::Pause(false));
                    }
                }
            }
            Ev::Pause(on) => {
                pause_pending = false;
                paused = on;
                if !on {
                    for (f, w) in sender_waiting.iter_mut().enumerate() {
                        if std::mem::take(w) {
                            push(&mut q, t, Ev::SenderTry(f));
                        }
                    }
                }
            }
            Ev::Deliver(f, marked) => {
                delivered[f] += cfg.packet_bytes as u64;
                if marked && cfg.dcqcn.is_some() && np.on_ce(f as u32, now) {
                    cnps += 1;
                    push(&mut q, t + 2 * prop, Ev::Cnp(f));
                }
            }
            Ev::Cnp(f) => {
                if let Some(rp) = &mut rps[f] {
                    rp.on_cnp(now);
                    if let Some(d) = rp.poll_timeout() {
                        let d = ns(d - t0);
                        rp_timer[f] = Some(d);
                        push(&mut q, d, Ev::RpTimer(f));
                    }
                }
            }
            Ev::RpTimer(f) => {
                if rp_timer[f] != Some(t) {
                    continue; // superseded
                }
                rp_timer[f] = None;
                if let Some(rp) = &mut rps[f] {
                    rp.handle_timeout(now);
                    if let Some(d) = rp.poll_timeout() {
                        let d = ns(d - t0);
                        rp_timer[f] = Some(d);
                        push(&mut q, d, Ev::RpTimer(f));
                    }
                }
            }
            Ev::Sample => {
                let dt = cfg.sample.as_secs_f64();
                let rates = (0..n)
                    .map(|f| (delivered[f] - last_delivered[f]) as f64 * 8.0 / dt / 1e9)
                    .collect();
                last_delivered.clone_from(&delivered);
                samples.push(Sample {
                    t_us: t as f64 / 1000.0,
                    rates_gbps: rates,
                    queue_bytes: qbytes,
                });
                push(&mut q, t + ns(cfg.sample), Ev::Sample);
            }
        }
    }
    summarise(cfg, samples, drops, max_q, cnps)
}

/// Jain's fairness index of `x`: 1 when all equal, 1/n when one has everything.
pub fn jain(x: &[f64]) -> f64 {
    let s: f64 = x.iter().sum();
    let s2: f64 = x.iter().map(|v| v * v).sum();
    if s2 == 0.0 {
        return 1.0;
    }
    s * s / (x.len() as f64 * s2)
}

fn summarise(
    cfg: &CcConfig,
    samples: Vec<Sample>,
    drops: u64,
    max_q: usize,
    cnps: u64,
) -> CcResult {
    let n = cfg.flows.max(1);
    let half = samples.len() / 2;
    let tail = &samples[half..];
    let mean =
        |f: usize| tail.iter().map(|s| s.rates_gbps[f]).sum::<f64>() / tail.len().max(1) as f64;
    let per_flow: Vec<f64> = (0..n).map(mean).collect();
    let total: f64 = per_flow.iter().sum();
    let mean_q = tail.iter().map(|s| s.queue_bytes as f64).sum::<f64>() / tail.len().max(1) as f64;
    // Convergence: from the last flow's start, the first time a 5 ms window of samples
    // has a fair share (Jain >= 0.95 over the window's per-flow means).
    let start_us = (cfg.stagger.as_secs_f64() * 1e6) * (n - 1) as f64;
    let win = ((5e-3 / cfg.sample.as_secs_f64()) as usize).max(1);
    let mut converge_us = None;
    let idx0 = samples
        .iter()
        .position(|s| s.t_us > start_us)
        .unwrap_or(samples.len());
    for i in idx0..samples.len().saturating_sub(win) {
        let w = &samples[i..i + win];
        let m: Vec<f64> = (0..n)
            .map(|f| w.iter().map(|s| s.rates_gbps[f]).sum::<f64>() / win as f64)
            .collect();
        if jain(&m) >= 0.95 {
            converge_us = Some(samples[i].t_us - start_us);
            break;
        }
    }
    CcResult {
        jain_second_half: jain(&per_flow),
        utilisation_second_half: total * 1e9 / cfg.line_rate_bps,
        mean_queue_bytes_second_half: mean_q,
        samples,
        drops,
        max_queue_bytes: max_q,
        cnps,
        converge_us,
    }
}

/// The series as CSV: `t_us,flow0_gbps,...,queue_bytes`.
pub fn csv(r: &CcResult) -> String {
    let n = r.samples.first().map_or(0, |s| s.rates_gbps.len());
    let mut out = String::from("t_us");
    for f in 0..n {
        out.push_str(&format!(",flow{f}_gbps"));
    }
    out.push_str(",queue_bytes\n");
    for s in &r.samples {
        out.push_str(&format!("{:.1}", s.t_us));
        for v in &s.rates_gbps {
            out.push_str(&format!(",{v:.3}"));
        }
        out.push_str(&format!(",{}\n", s.queue_bytes));
    }
    out
}
