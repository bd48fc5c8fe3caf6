//! `uroce pingpong`: ibv_rc_pingpong / ibv_ud_pingpong / ibv_srq_pingpong compatible.

use std::net::IpAddr;
use std::process::ExitCode;

use anyhow::{bail, Context as _};

use uroce::verbs::Mtu;
use uroce_tools::pingpong::{run, Dest, PingpongConfig};
use uroce_tools::srq_pingpong;

/// Arguments, named as ibv_*_pingpong names them.
#[derive(clap::Args)]
pub struct Args {
    /// UD (like ibv_ud_pingpong) instead of RC (ibv_rc_pingpong).
    #[arg(long, conflicts_with = "srq")]
    ud: bool,
    /// N RC QPs sharing one shared receive queue, like ibv_srq_pingpong -q N (default
    /// 16; both ends must use the same N). Give N when the server address follows.
    #[arg(long, value_name = "N", num_args = 0..=1, default_missing_value = "16")]
    srq: Option<u32>,
    /// TCP port of the address exchange.
    #[arg(short = 'p', long, default_value_t = 18515)]
    port: u16,
    /// Message size.
    #[arg(short = 's', long, default_value_t = 4096)]
    size: u32,
    /// Iterations.
    #[arg(short = 'n', long, default_value_t = 1000)]
    iters: u32,
    /// Path MTU: 256, 512, 1024, 2048 or 4096.
    #[arg(short = 'm', long, default_value_t = 1024)]
    mtu: u32,
    /// Receive queue depth.
    #[arg(short = 'r', long, default_value_t = 500)]
    rx_depth: u32,
    /// GID index: accepted for compatibility; uroce's GID is always the IPv4-mapped GID
    /// of the local address (what rxe calls index 1).
    #[arg(short = 'g', long)]
    gid_idx: Option<u32>,
    /// Validate received buffers, as ibv_*_pingpong -c does (ibv_srq_pingpong has no -c).
    #[arg(short = 'c', long, conflicts_with = "srq")]
    chk: bool,
    /// Sleep on CQ events (req_notify_cq) instead of polling, as ibv_*_pingpong -e does.
    #[arg(short = 'e', long)]
    events: bool,
    /// Datapath: auto, xdp or udp: the datapath of the `uroce daemon` started for the
    /// interface when none serves it (one that runs keeps its own), or with --no-daemon
    /// this process's own.
    #[arg(long, default_value = "auto", value_parser = ["auto", "xdp", "udp"])]
    backend: String,
    /// Open the datapath in this process (direct mode: one uroce process per interface)
    /// instead of through the `uroce daemon` serving the interface.
    #[arg(long)]
    no_daemon: bool,
    /// Interface for AF_XDP.
    #[arg(long)]
    iface: Option<String>,
    #[command(flatten)]
    impair: super::impair::ImpairArgs,
    /// The server; without it, this is the server.
    server: Option<IpAddr>,
}

fn show(what: &str, d: &Dest) {
    println!(
        "  {what} LID 0x{:04x}, QPN 0x{:06x}, PSN 0x{:06x}, GID {}",
        d.lid, d.qpn, d.psn, d.gid
    );
}

/// Runs it.
pub fn run_cmd(a: Args) -> anyhow::Result<ExitCode> {
    let mtu = Mtu::from_bytes(a.mtu)
        .with_context(|| format!("-m {}: MTU must be 256, 512, 1024, 2048 or 4096", a.mtu))?;
    if a.size == 0 || a.size > 1 << 24 {
        bail!("-s {}: size out of range 1..=16777216", a.size);
    }
    if a.ud && a.size > mtu.bytes() {
        bail!(
            "-s {}: a UD message must fit in the MTU ({})",
            a.size,
            mtu.bytes()
        );
    }
    if a.iters == 0 || a.rx_depth == 0 {
        bail!("-n and -r must be above 0");
    }
    let _ = a.gid_idx;
    let impair = a.impair.impairment()?;
    let cfg = PingpongConfig {
        ud: a.ud,
        port: a.port,
        size: a.size,
        iters: a.iters,
        mtu,
        rx_depth: a.rx_depth,
        validate: a.chk,
        events: a.events,
        backend: uroce_tools::backend::choice_string(&a.backend, a.no_daemon),
        iface: a.iface,
        impair,
    };
    if let Some(num_qp) = a.srq {
        let r = srq_pingpong::run(&cfg, num_qp, a.server)?;
        for d in &r.local {
            show("local address: ", d);
        }
        for d in &r.remote {
            show("remote address:", d);
        }
        for l in r.summary() {
            println!("{l}");
        }
        eprintln!("(datapath: {})", r.datapath);
        return Ok(ExitCode::SUCCESS);
    }
    let r = run(&cfg, a.server)?;
    show("local address: ", &r.local);
    show("remote address:", &r.remote);
    for l in r.summary() {
        println!("{l}");
    }
    if a.events {
        eprintln!(
            "(datapath: {}, {} completion events)",
            r.datapath, r.cq_events
        );
    } else {
        eprintln!("(datapath: {})", r.datapath);
    }
    Ok(ExitCode::SUCCESS)
}
