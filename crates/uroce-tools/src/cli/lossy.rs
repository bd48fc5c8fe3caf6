//! `uroce lossy IFACE --drop P`: makes an interface lose a share of the RoCEv2 frames it
//! receives, until interrupted (an XDP program; for tests where `tc netem` is missing).

use std::process::ExitCode;
use std::time::Duration;

use anyhow::{anyhow, bail};

use uroce::datapath::xdp::LossyLink;

/// Arguments of `uroce lossy`.
#[derive(clap::Args)]
pub struct Args {
    /// The interface whose received RoCEv2 frames are dropped.
    iface: String,
    /// Share of them dropped, at random per frame (0..1).
    #[arg(long)]
    drop: f64,
}

/// Attaches, says so, waits for SIGINT / SIGTERM, detaches.
pub fn run(a: Args) -> anyhow::Result<ExitCode> {
    if !(0.0..1.0).contains(&a.drop) {
        bail!("--drop {} is out of range [0, 1)", a.drop);
    }
    uroce::datapath::catch_interrupts();
    let l = LossyLink::attach(&a.iface, a.drop).map_err(|e| {
        anyhow!(
            "{}: {e} (needs root, or CAP_BPF and CAP_NET_ADMIN)",
            a.iface
        )
    })?;
    eprintln!(
        "uroce lossy: {} drops {:.1}% of received RoCEv2 frames ({} XDP) until interrupted",
        a.iface,
        a.drop * 100.0,
        if l.native { "native" } else { "generic" }
    );
    while !uroce::datapath::interrupted() {
        std::thread::sleep(Duration::from_millis(50));
    }
    drop(l);
    Ok(ExitCode::SUCCESS)
}
