//! `uroce sim`: two endpoints over a simulated lossy link, every operation verified.

use std::process::ExitCode;
use std::time::Duration;

use anyhow::{anyhow, bail, Context as _};

use uroce::sim::dgram::{self, DgramConfig};
use uroce::sim::rc::{run, Mix, SimConfig};
use uroce::sim::LinkConfig;
use uroce::verbs::{Mtu, QpType};

/// Arguments of `uroce sim`.
#[derive(clap::Args)]
pub struct Args {
    /// Operations to run.
    #[arg(long, default_value_t = 10_000)]
    ops: usize,
    /// Operation mix as weights, e.g. `send:4,write:3,read:2,atomic:1`.
    #[arg(long, default_value = "send:4,write:3,read:2,atomic:1", value_parser = parse_mix)]
    mix: Mix,
    /// Message sizes in bytes, uniform in `MIN..MAX` (inclusive), or one size.
    #[arg(long, default_value = "1..65536", value_parser = parse_size)]
    size: (u32, u32),
    /// Probability that the link loses a frame.
    #[arg(long, default_value_t = 0.0, value_parser = parse_prob)]
    loss: f64,
    /// Probability that a frame is delayed past later ones.
    #[arg(long, default_value_t = 0.0, value_parser = parse_prob)]
    reorder: f64,
    /// Probability that a frame is delivered twice.
    #[arg(long, default_value_t = 0.0, value_parser = parse_prob)]
    dup: f64,
    /// Probability that one bit of a frame is flipped (the ICRC must catch it).
    #[arg(long, default_value_t = 0.0, value_parser = parse_prob)]
    corrupt: f64,
    /// Seed: the same seed replays the same run.
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Path MTU: 256, 512, 1024, 2048 or 4096.
    #[arg(long, default_value_t = 1024, value_parser = parse_mtu)]
    mtu: u32,
    /// One-way link delay in microseconds.
    #[arg(long, default_value_t = 2.0)]
    delay_us: f64,
    /// Link rate in Gb/s (0 = unlimited).
    #[arg(long, default_value_t = 25.0)]
    gbps: f64,
    /// Operations in flight.
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u32).range(1..=4096))]
    window: u32,
    /// Transport: rc (every operation reliable and verified), ud or uc (messages may
    /// be lost, never delivered damaged or partial).
    #[arg(long, default_value = "rc", value_parser = ["rc", "uc", "ud"])]
    transport: String,
    /// Turn DCQCN on (RC) with this parameter profile: paper or mlx5.
    #[arg(long)]
    dcqcn: Option<String>,
    /// DCQCN knobs by their mlx5 names, e.g. `rpg_ai_rate=10,min_time_between_cnps=50`.
    #[arg(long, default_value = "")]
    dcqcn_set: String,
    /// Probability that the link marks an ECN-capable frame CE (a congested switch).
    #[arg(long, default_value_t = 0.0, value_parser = parse_prob)]
    ecn_mark: f64,
    /// Hand each packet to its endpoint as a UDP socket would (the RoCE bytes and the
    /// addressing the kernel reports, the IPv4 identification guessed), not as a whole
    /// frame (RC only).
    #[arg(long)]
    datagrams: bool,
    /// Print the summary as one JSON object.
    #[arg(long)]
    json: bool,
}

fn parse_prob(s: &str) -> anyhow::Result<f64> {
    let v: f64 = s.parse().map_err(|_| anyhow!("`{s}` is not a number"))?;
    if (0.0..=1.0).contains(&v) {
        Ok(v)
    } else {
        Err(anyhow!("{v} is not a probability between 0 and 1"))
    }
}

fn parse_mtu(s: &str) -> anyhow::Result<u32> {
    let v: u32 = s.parse().map_err(|_| anyhow!("`{s}` is not a number"))?;
    Mtu::from_bytes(v)
        .map(|_| v)
        .with_context(|| format!("path MTU must be 256, 512, 1024, 2048 or 4096, not {v}"))
}

fn parse_size(s: &str) -> anyhow::Result<(u32, u32)> {
    let num = |t: &str| -> anyhow::Result<u32> {
        t.trim()
            .parse::<u32>()
            .map_err(|_| anyhow!("`{t}` is not a size in bytes"))
    };
    let (lo, hi) = match s.split_once("..") {
        Some((a, b)) => (num(a)?, num(b.trim_start_matches('='))?),
        None => {
            let v = num(s)?;
            (v, v)
        }
    };
    if lo > hi {
        bail!("size range {lo}..{hi} is empty");
    }
    if hi > 1 << 24 {
        bail!("sizes above {} bytes are not simulated", 1 << 24);
    }
    Ok((lo, hi))
}

fn parse_mix(s: &str) -> anyhow::Result<Mix> {
    let mut m = Mix {
        send: 0,
        write: 0,
        read: 0,
        atomic: 0,
    };
    for part in s.split(',').filter(|p| !p.trim().is_empty()) {
        let (k, v) = part
            .split_once(':')
            .with_context(|| format!("`{part}` should be KIND:WEIGHT"))?;
        let w: u32 = v
            .trim()
            .parse()
            .map_err(|_| anyhow!("weight `{v}` is not a whole number"))?;
        match k.trim() {
            "send" => m.send = w,
            "write" => m.write = w,
            "read" => m.read = w,
            "atomic" => m.atomic = w,
            other => {
                bail!("unknown operation `{other}` (send, write, read, atomic)")
            }
        }
    }
    if m.send + m.write + m.read + m.atomic == 0 {
        bail!("the mix has no operation with a weight above 0");
    }
    Ok(m)
}

/// Runs the simulation and prints the summary; exit 1 if anything went wrong.
pub fn run_cmd(a: Args) -> anyhow::Result<ExitCode> {
    if !(a.delay_us >= 0.0 && a.delay_us < 1e7) {
        bail!("--delay-us {} is out of range", a.delay_us);
    }
    if !(a.gbps >= 0.0 && a.gbps < 1e6) {
        bail!("--gbps {} is out of range", a.gbps);
    }
    let link = LinkConfig {
        loss: a.loss,
        dup: a.dup,
        reorder: a.reorder,
        corrupt: a.corrupt,
        delay: Duration::from_nanos((a.delay_us * 1000.0) as u64),
        bandwidth_bps: (a.gbps * 1e9) as u64,
        ecn_mark: a.ecn_mark,
        ..LinkConfig::default()
    };
    let dcqcn = match &a.dcqcn {
        Some(profile) => {
            let mut p = uroce::congestion::dcqcn::Params::profile(profile, a.gbps.max(1.0) * 1e9)?;
            p.set_all(&a.dcqcn_set)?;
            Some(p)
        }
        None => None,
    };
    let mtu = Mtu::from_bytes(a.mtu).unwrap_or(Mtu::M1024);
    if a.transport != "rc" {
        if a.datagrams {
            bail!("--datagrams is for --transport rc");
        }
        return run_dgram(&a, link, mtu);
    }
    let cfg = SimConfig {
        ops: a.ops,
        mix: a.mix,
        size: a.size,
        seed: a.seed,
        mtu,
        window: a.window as usize,
        recv_depth: a.window as usize,
        link,
        dcqcn,
        datagrams: a.datagrams,
        ..SimConfig::default()
    };
    let r = run(&cfg);
    if a.json {
        println!("{}", serde_json::to_string(&r)?);
    } else {
        println!("uroce sim: RC, {} ops, seed {}", a.ops, a.seed);
        println!("  ops completed      {}", r.ops_completed);
        println!("  ops failed         {}", r.ops_failed);
        println!("  bytes verified     {}", r.bytes_verified);
        println!("  packets sent       {}", r.packets_sent);
        println!("  retransmits        {}", r.retransmits);
        println!("  ack timeouts       {}", r.timeouts);
        let naks: Vec<String> = r.naks.iter().map(|(k, v)| format!("{k} {v}")).collect();
        println!("  NAKs sent          {}", naks.join(", "));
        println!(
            "  link               dropped {}, duplicated {}, reordered {}, corrupted {} (rejected by ICRC/parser: {})",
            r.link_dropped, r.link_duplicated, r.link_reordered, r.link_corrupted, r.corrupted_rejected
        );
        if a.datagrams {
            println!(
                "  as datagrams       identifications found {}, READ responses placed first {}, dropped as a kernel would {}",
                r.idents_recovered, r.placed, r.kernel_dropped
            );
        }
        println!(
            "  simulated time     {:.3} ms",
            r.sim_time_us as f64 / 1000.0
        );
        if r.link_ecn_marked > 0 {
            println!("  ECN CE marked      {}", r.link_ecn_marked);
        }
        for (side, c) in &r.counters {
            let nonzero: Vec<String> = c
                .iter()
                .filter(|(_, v)| **v > 0)
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            println!("  {side:<6} counters   {}", nonzero.join(" "));
        }
        if r.errors.is_empty() {
            println!("  result             OK: every operation completed once, in order, with correct data");
        } else {
            println!("  result             FAILED, {} error(s):", r.errors.len());
            for e in r.errors.iter().take(20) {
                println!("    - {e}");
            }
        }
    }
    Ok(if r.errors.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// `--transport ud|uc`: messages (the `--mix` does not apply: UD and UC carry SENDs here).
fn run_dgram(a: &Args, link: LinkConfig, mtu: Mtu) -> anyhow::Result<ExitCode> {
    let cfg = DgramConfig {
        transport: if a.transport == "uc" {
            QpType::Uc
        } else {
            QpType::Ud
        },
        messages: a.ops,
        size: a.size,
        link,
        seed: a.seed,
        mtu,
        window: a.window as usize,
    };
    let r = dgram::run(&cfg);
    if a.json {
        println!("{}", serde_json::to_string(&r)?);
    } else {
        println!(
            "uroce sim: {}, {} messages, seed {}",
            r.transport.to_uppercase(),
            a.ops,
            a.seed
        );
        println!("  sent               {}", r.sent);
        println!("  delivered intact   {}", r.delivered);
        println!("  dropped            {}", r.dropped);
        if r.duplicates > 0 {
            println!(
                "  duplicates         {} (UD has no duplicate detection)",
                r.duplicates
            );
        }
        println!("  corrupt, rejected  {}", r.corrupted_rejected);
        println!("  bytes verified     {}", r.bytes_verified);
        println!(
            "  simulated time     {:.3} ms",
            r.sim_time_us as f64 / 1000.0
        );
        if r.errors.is_empty() {
            println!("  result             OK: nothing delivered damaged or partial");
        } else {
            println!("  result             FAILED, {} error(s):", r.errors.len());
            for e in r.errors.iter().take(20) {
                println!("    - {e}");
            }
        }
    }
    Ok(if r.errors.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
