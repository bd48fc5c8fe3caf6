//! `uroce sim-cc`: DCQCN on a simulated switch port, the paper's experiments.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{anyhow, bail, Context as _};

use uroce::congestion::dcqcn::Params;
use uroce::sim::cc::{csv, run, CcConfig, Pfc};

/// Arguments of `uroce sim-cc`.
#[derive(clap::Args)]
pub struct Args {
    /// Senders sharing the bottleneck (8 with --stagger-ms 0 is the 8:1 incast).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=256))]
    flows: u32,
    /// Congestion control: dcqcn, or none (senders at line rate).
    #[arg(long, default_value = "dcqcn", value_parser = ["dcqcn", "none"])]
    control: String,
    /// DCQCN parameter profile: paper or mlx5.
    #[arg(long, default_value = "paper")]
    profile: String,
    /// DCQCN knobs by their mlx5 names, e.g. `rpg_ai_rate=10,rpg_time_reset=100`.
    #[arg(long, default_value = "")]
    set: String,
    /// Turn PFC on (pause above 400 KB of queue, resume below 200 KB).
    #[arg(long)]
    pfc: bool,
    /// Link rate, Gb/s.
    #[arg(long, default_value_t = 40.0)]
    gbps: f64,
    /// Simulated time, ms.
    #[arg(long, default_value_t = 100.0)]
    duration_ms: f64,
    /// Flow i starts at i × this many ms.
    #[arg(long, default_value_t = 0.0)]
    stagger_ms: f64,
    /// Switch buffer for the port, KB.
    #[arg(long, default_value_t = 12288)]
    buffer_kb: usize,
    /// ECN marking thresholds Kmin,Kmax in KB and Pmax, e.g. `5,200,0.01`.
    #[arg(long, default_value = "5,200,0.01")]
    red: String,
    /// Write the series as CSV here.
    #[arg(long)]
    csv: Option<PathBuf>,
    /// Write an SVG plot (per-flow rate and queue over time) here.
    #[arg(long)]
    svg: Option<PathBuf>,
    /// Print the summary as JSON.
    #[arg(long)]
    json: bool,
}

/// Runs the experiment and prints the summary.
pub fn run_cmd(a: Args) -> anyhow::Result<ExitCode> {
    if !(a.gbps > 0.0 && a.gbps < 1e4) {
        bail!("--gbps {} is out of range", a.gbps);
    }
    if !(a.duration_ms > 0.0 && a.duration_ms <= 10_000.0) {
        bail!("--duration-ms {} is out of range (0, 10000]", a.duration_ms);
    }
    if !(a.stagger_ms >= 0.0 && a.stagger_ms <= 10_000.0) {
        bail!("--stagger-ms {} is out of range", a.stagger_ms);
    }
    let rate = a.gbps * 1e9;
    let mut cfg = CcConfig::paper(a.flows as usize);
    cfg.line_rate_bps = rate;
    cfg.duration = Duration::from_secs_f64(a.duration_ms / 1000.0);
    cfg.stagger = Duration::from_secs_f64(a.stagger_ms / 1000.0);
    cfg.buffer_bytes = a.buffer_kb * 1024;
    let parts: Vec<&str> = a.red.split(',').collect();
    let [kmin, kmax, pmax] = parts[..] else {
        bail!("--red `{}`: expected KMIN_KB,KMAX_KB,PMAX", a.red);
    };
    let num = |s: &str| {
        s.trim()
            .parse::<f64>()
            .map_err(|_| anyhow!("--red: `{s}` is not a number"))
    };
    let (kmin, kmax, pmax) = (num(kmin)?, num(kmax)?, num(pmax)?);
    if !(0.0..=1.0).contains(&pmax) || kmin < 0.0 || kmax <= kmin {
        bail!("--red: need 0 <= KMIN < KMAX and 0 <= PMAX <= 1");
    }
    cfg.red.kmin_bytes = (kmin * 1000.0) as usize;
    cfg.red.kmax_bytes = (kmax * 1000.0) as usize;
    cfg.red.pmax = pmax;
    if a.pfc {
        cfg.pfc = Some(Pfc {
            xoff_bytes: 400_000,
            xon_bytes: 200_000,
        });
    }
    cfg.dcqcn = if a.control == "dcqcn" {
        let mut p = Params::profile(&a.profile, rate)?;
        p.set_all(&a.set)?;
        Some(p)
    } else {
        None
    };
    let r = run(&cfg);
    if let Some(path) = &a.csv {
        std::fs::write(path, csv(&r)).with_context(|| path.display().to_string())?;
    }
    if let Some(path) = &a.svg {
        let title = format!(
            "{} flows, {}, {:.0} Gb/s{}",
            a.flows,
            if cfg.dcqcn.is_some() {
                format!("DCQCN ({})", a.profile)
            } else {
                "no congestion control".into()
            },
            a.gbps,
            if a.pfc { ", PFC" } else { "" }
        );
        std::fs::write(path, uroce::sim::plot::svg(&r, &title))
            .with_context(|| path.display().to_string())?;
    }
    if a.json {
        #[derive(serde::Serialize)]
        struct Summary<'a> {
            flows: u32,
            drops: u64,
            max_queue_bytes: usize,
            mean_queue_bytes_second_half: f64,
            jain_second_half: f64,
            utilisation_second_half: f64,
            cnps: u64,
            converge_us: Option<f64>,
            control: &'a str,
        }
        let s = Summary {
            flows: a.flows,
            drops: r.drops,
            max_queue_bytes: r.max_queue_bytes,
            mean_queue_bytes_second_half: r.mean_queue_bytes_second_half,
            jain_second_half: r.jain_second_half,
            utilisation_second_half: r.utilisation_second_half,
            cnps: r.cnps,
            converge_us: r.converge_us,
            control: &a.control,
        };
        println!("{}", serde_json::to_string(&s)?);
    } else {
        println!(
            "uroce sim-cc: {} flows, {}, {} Gb/s, {} ms",
            a.flows, a.control, a.gbps, a.duration_ms
        );
        println!(
            "  utilisation (2nd half)   {:.1}%",
            r.utilisation_second_half * 100.0
        );
        println!("  Jain's index (2nd half)  {:.3}", r.jain_second_half);
        println!(
            "  mean queue (2nd half)    {:.1} KB",
            r.mean_queue_bytes_second_half / 1000.0
        );
        println!(
            "  max queue                {:.1} KB",
            r.max_queue_bytes as f64 / 1000.0
        );
        println!("  drops                    {}", r.drops);
        println!("  CNPs                     {}", r.cnps);
        match r.converge_us {
            Some(c) => println!(
                "  converged (Jain >= 0.95) {:.1} ms after the last flow started",
                c / 1000.0
            ),
            None => println!("  converged (Jain >= 0.95) never"),
        }
    }
    Ok(ExitCode::SUCCESS)
}
