//! `uroce demo`: two endpoints in two network namespaces over a veth pair.

use std::process::ExitCode;

use anyhow::{bail, Context as _};

use uroce::verbs::Mtu;
use uroce_tools::demo::{run, BackendChoice, DemoConfig};

/// Arguments of `uroce demo`.
#[derive(clap::Args)]
pub struct Args {
    /// Messages per operation.
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u32).range(1..=1024))]
    messages: u32,
    /// Bytes per RC message.
    #[arg(long, default_value_t = 65536, value_parser = clap::value_parser!(u32).range(8..=1 << 24))]
    size: u32,
    /// Path MTU: 1024, 2048 or 4096.
    #[arg(long, default_value_t = 4096)]
    mtu: u32,
    /// Impair the veth with `tc netem`, e.g. `--netem "loss 5%"` (needs sch_netem).
    #[arg(long)]
    netem: Option<String>,
    #[command(flatten)]
    impair: super::impair::ImpairArgs,
    /// Datapath: auto (the faster on the interface: UDP on veth, AF_XDP on a NIC with zero-copy or native XDP; saying why), xdp or udp.
    #[arg(long, default_value = "auto", value_parser = ["auto", "xdp", "udp"])]
    backend: String,
    /// Capture the veth traffic into this pcap file (and check every RoCE frame's ICRC).
    #[arg(long)]
    pcap: Option<std::path::PathBuf>,
}

/// Runs the demo and prints what it did.
pub fn run_cmd(a: Args) -> anyhow::Result<ExitCode> {
    let mtu = Mtu::from_bytes(a.mtu)
        .with_context(|| format!("--mtu {} is not 256, 512, 1024, 2048 or 4096", a.mtu))?;
    let impair = a.impair.impairment()?;
    if u64::from(a.messages) * u64::from(a.size) > 256 << 20 {
        bail!("--messages x --size above 256 MiB: pick smaller numbers");
    }
    println!("uroce demo");
    let r = run(&DemoConfig {
        messages: a.messages as usize,
        size: a.size,
        mtu,
        netem: a.netem,
        impair,
        capture: a.pcap.is_some(),
        backend: match a.backend.as_str() {
            "xdp" => BackendChoice::Xdp,
            "udp" => BackendChoice::Udp,
            _ => BackendChoice::Auto,
        },
    })?;
    for l in &r.lines {
        println!("  {l}");
    }
    if let Some(path) = &a.pcap {
        let roce: Vec<&Vec<u8>> = r
            .captured
            .iter()
            .filter(|f| uroce::wire::dissect(f).udp.is_some())
            .collect();
        let bad = roce
            .iter()
            .filter(|f| uroce::wire::parse(f).is_err())
            .count();
        std::fs::write(
            path,
            uroce::pcap::write_pcap(r.captured.iter().map(|f| &f[..])),
        )
        .with_context(|| path.display().to_string())?;
        println!(
            "  captured {} frames on the veth into {} ({} RoCEv2, {} with a bad ICRC or malformed)",
            r.captured.len(),
            path.display(),
            roce.len(),
            bad
        );
    }
    println!(
        "  result: {}",
        if r.ok {
            "OK, everything verified; all it made is removed"
        } else {
            "FAILED"
        }
    );
    Ok(if r.ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
