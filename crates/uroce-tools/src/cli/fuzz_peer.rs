//! `uroce fuzz-peer PEER`: fuzz a running RoCE peer (see `uroce_tools::fuzz_peer`).

use std::net::IpAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{bail, Context as _};

use uroce::verbs::Mtu;
use uroce_tools::backend::BackendChoice;
use uroce_tools::fuzz_peer::{self, FuzzConfig, Limit, PeerConfig, PeerTool, VerdictMode};

/// What `uroce fuzz-peer --help` says after the options.
pub const HELP: &str = "\
The peer runs a server that stays up; start it first:
  uroce perf write --keep-serving                   (a uroce peer: both take the smaller -m)
  ib_write_bw -d DEV -x IDX -p 18515 & ib_write_bw -d DEV -x IDX -p 18516
                                                    (perftest: the fuzz QP's server and
                                                     the known-good QP's, with --tool ib_write_bw)
  ib_write_bw -d DEV -x IDX -q 4                    (--peer-qps 4: its last QP is the known-good one)
  ibv_rc_pingpong -g IDX -n 1000000000              (--tool ibv_rc_pingpong, -s its -s;
                                                     ibv_ud_pingpong likewise)
Once every fuzz QP of the peer is in the error state the fuzzer connects again (a uroce
perf server with --keep-serving takes it); a perftest server or a pingpong serves one
client: to go on, and to shrink a finding, give --restart-cmd (it must return once the
peer listens again). scripts/fuzz-peers.sh runs every uroce peer this way. Exit status:
0 no finding, 1 a finding, 2 an error.";

/// Arguments of `uroce fuzz-peer`.
#[derive(clap::Args)]
pub struct Args {
    /// The peer's address.
    peer: IpAddr,
    /// The tool the peer runs: uroce-perf, ib_write_bw, ib_read_bw, ib_send_bw, ib_atomic_bw,
    /// ibv_rc_pingpong, ibv_ud_pingpong.
    #[arg(long, default_value = "uroce-perf")]
    tool: String,
    /// TCP port of the exchange (perftest: the fuzz QP's server; the known-good one on the
    /// next port).
    #[arg(short = 'p', long, default_value_t = 18515)]
    port: u16,
    /// Interface for AF_XDP (default: the one holding the local address).
    #[arg(long)]
    iface: Option<String>,
    /// Datapath: auto, xdp (whole frames: IP / UDP header edges too) or udp (RoCE bytes
    /// only; no root needed).
    #[arg(long, default_value = "auto", value_parser = ["auto", "xdp", "udp"])]
    backend: String,
    /// Seed of the frames and of the first PSN.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Seconds to run.
    #[arg(long, conflicts_with = "iters")]
    duration: Option<f64>,
    /// Fuzz frames to send (default 2000 when no --duration).
    #[arg(long)]
    iters: Option<u64>,
    /// Path MTU (256..4096; against a uroce perf or perftest server the smaller of both
    /// sides' wins, as their exchange says; a pingpong peer must run with the same -m).
    #[arg(short = 'm', long, default_value_t = 1024)]
    mtu: u32,
    /// Fuzz QPs to ask a uroce perf server for (1..=63).
    #[arg(long, default_value_t = 16)]
    qps: u32,
    /// QPs of the perftest server (its -q). Above 1, its last QP is the known-good one (no
    /// second server) and frames are spread over the others, each probed between bursts.
    #[arg(long, default_value_t = 1)]
    peer_qps: u32,
    /// The length of the peer's receives (ibv_rc_pingpong's or ibv_ud_pingpong's -s).
    #[arg(short = 's', long, default_value_t = 4096)]
    size: u32,
    /// Fuzz frames between two checks of the oracles.
    #[arg(long, default_value_t = 32)]
    burst: u32,
    /// Milliseconds to wait for the answer to one frame (an answer later than this is
    /// taken for the next frame's: raise it for a slow peer or a loaded host).
    #[arg(long, default_value_t = 20.0)]
    wait_ms: f64,
    /// Milliseconds the known-good operation may take (liveness).
    #[arg(long, default_value_t = 2000.0)]
    deadline_ms: f64,
    /// Run (sh -c) between bursts; a non-zero exit is a finding.
    #[arg(long)]
    check_cmd: Option<String>,
    /// Restart the peer (sh -c); used when its fuzz QPs are used up and to shrink.
    #[arg(long)]
    restart_cmd: Option<String>,
    /// Seconds to keep trying to connect to a peer that is (re)starting.
    #[arg(long, default_value_t = 10.0)]
    connect_for: f64,
    /// What a wrong verdict (an answer the IBTA rules do not allow) does: stop (a
    /// finding) or count (reported; the run goes on).
    #[arg(long, default_value = "stop", value_parser = ["stop", "count"])]
    verdicts: String,
    /// Most replays against a fresh peer to shrink a finding.
    #[arg(long, default_value_t = 64)]
    shrink_budget: u32,
    /// Write the frames of a finding here (and the shrunk ones to NAME-shrunk.pcap);
    /// default uroce-fuzz-finding-SEED.pcap in the current directory.
    #[arg(long)]
    pcap: Option<PathBuf>,
    /// A line per frame on stderr: the frame, its PSN, the answer and what the rules ask.
    #[arg(short = 'v', long)]
    verbose: bool,
    /// Send the frames of this JSON file (an array of specs, as a finding's `shrunk`
    /// lists them) instead of generated ones, then check the oracles.
    #[arg(long)]
    replay: Option<PathBuf>,
    /// The summary as one JSON object on stdout.
    #[arg(long)]
    json: bool,
}

/// Runs the fuzzer.
pub fn run_cmd(a: Args) -> anyhow::Result<ExitCode> {
    let mtu = Mtu::from_bytes(a.mtu)
        .with_context(|| format!("--mtu {} is not 256, 512, 1024, 2048 or 4096", a.mtu))?;
    if !(1..=63).contains(&a.qps) {
        bail!("--qps {} is out of range 1..=63", a.qps);
    }
    if !(1..=63).contains(&a.peer_qps) {
        bail!("--peer-qps {} is out of range 1..=63", a.peer_qps);
    }
    let limit = match (a.duration, a.iters) {
        (Some(d), _) if d > 0.0 && d <= 86_400.0 => Limit::Time(Duration::from_secs_f64(d)),
        (Some(d), _) => bail!("--duration {d} is out of range (0, 86400]"),
        (None, Some(n)) => Limit::Frames(n),
        (None, None) => Limit::Frames(2000),
    };
    let ms = |v: f64, what: &str| {
        if v > 0.0 && v <= 600_000.0 {
            Ok(Duration::from_secs_f64(v / 1000.0))
        } else {
            Err(anyhow::anyhow!("{what} {v} is out of range (0, 600000]"))
        }
    };
    let cfg = FuzzConfig {
        peer: PeerConfig {
            peer: a.peer,
            tool: PeerTool::parse(&a.tool)?,
            port: a.port,
            iface: a.iface,
            backend: BackendChoice::parse(&a.backend)?,
            mtu,
            fuzz_qps: a.qps,
            psn: fuzz_peer::first_psn(a.seed),
            connect_for: Duration::from_secs_f64(a.connect_for.clamp(0.0, 600.0)),
            size: a.size,
            peer_qps: a.peer_qps,
        },
        seed: a.seed,
        limit,
        burst: a.burst.max(1),
        wait: ms(a.wait_ms, "--wait-ms")?,
        deadline: ms(a.deadline_ms, "--deadline-ms")?,
        check_cmd: a.check_cmd,
        restart_cmd: a.restart_cmd,
        pcap: a.pcap,
        verdicts: if a.verdicts == "count" {
            VerdictMode::Count
        } else {
            VerdictMode::Stop
        },
        shrink_budget: a.shrink_budget,
        verbose: a.verbose,
        replay: match &a.replay {
            Some(p) => Some(
                serde_json::from_slice(
                    &std::fs::read(p).with_context(|| format!("reading {}", p.display()))?,
                )
                .with_context(|| format!("{}: not a JSON array of frame specs", p.display()))?,
            ),
            None => None,
        },
    };
    let s = fuzz_peer::run(&cfg, &mut |l| eprintln!("{l}"))?;
    if a.json {
        println!("{}", serde_json::to_string(&s)?);
    } else {
        println!("uroce fuzz-peer: seed {}, datapath {}", s.seed, s.datapath);
        println!(
            " {} frames, {} checks passed, {} fuzz QPs used, {} peer restarts, {:.1} s; ended: {}",
            s.frames_sent, s.checks_passed, s.qps_used, s.peer_restarts, s.secs, s.ended
        );
        println!(" answers:");
        for (k, v) in &s.answers {
            println!("   {k:<32} {v}");
        }
        if s.ce_marked > 0 || s.cnps > 0 {
            println!(" CNPs: {} (frames marked ECN CE: {})", s.cnps, s.ce_marked);
        }
        if !s.mismatches.is_empty() {
            println!(" answers the IBTA rules do not allow:");
            for m in &s.mismatches {
                println!(
                    "   {:<16} expected {:?}, got {} ({} times; first: {:?})",
                    m.kind, m.expected, m.got, m.count, m.example.spec
                );
            }
        }
        for f in &s.unconfirmed {
            println!(
                " unconfirmed (a fresh peer did not answer so again): {} ({})",
                f.detail,
                f.pcap.as_deref().unwrap_or("")
            );
        }
        for f in &s.findings {
            println!(" FINDING ({}): {}", f.oracle, f.detail);
            println!("   {} frames since the last good check", f.frames);
            if let Some(p) = &f.pcap {
                println!("   capture: {p}");
            }
            match (&f.reproduced, &f.shrunk) {
                (Some(true), Some(v)) => {
                    println!(
                        "   reproduced; shrunk to {} frames in {} replays:",
                        v.len(),
                        f.replays
                    );
                    for s in v {
                        println!("     {}", serde_json::to_string(s)?);
                    }
                }
                (Some(false), _) => println!("   did not reproduce against a fresh peer"),
                _ => println!("   not shrunk (no --restart-cmd)"),
            }
            if let Some(p) = &f.shrunk_pcap {
                println!("   shrunk capture: {p}");
            }
        }
    }
    Ok(if s.findings.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
