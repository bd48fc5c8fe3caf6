//! `uroce perf OP [SERVER]`: RC bandwidth or latency between two hosts.

use std::net::IpAddr;
use std::process::ExitCode;
use std::time::Duration;

use uroce::perf::{client, server, PerfConfig, PerfOp};
use uroce::verbs::Mtu;

/// Arguments of `uroce perf`.
#[derive(clap::Args)]
pub struct Args {
    /// Operation: write, read or send; `raw` sends frames of an RC WRITE packet's size
    /// with no transport at all (the datapath's ceiling; the server counts them).
    #[arg(value_parser = ["write", "read", "send", "raw"])]
    op: String,
    /// The server's IPv4 address; without it this is the server (as perftest does).
    server: Option<IpAddr>,
    /// Bytes per message (default 65536, or 8 with --lat).
    #[arg(long)]
    size: Option<u32>,
    /// Seconds the client runs.
    #[arg(long, default_value_t = 5.0)]
    duration: f64,
    /// Latency: one operation at a time; report p50 / p99 / p99.9 of post-to-completion.
    #[arg(long)]
    lat: bool,
    /// QPs (only 1 for now).
    #[arg(long, default_value_t = 1)]
    qps: u32,
    /// Datapath: auto (AF_XDP where possible, else UDP), xdp or udp.
    #[arg(long, default_value = "auto", value_parser = ["auto", "xdp", "udp"])]
    backend: String,
    /// Interface for AF_XDP (default: the one holding the local address).
    #[arg(long)]
    iface: Option<String>,
    /// TCP port of the out-of-band exchange.
    #[arg(long, default_value_t = 18515)]
    port: u16,
    /// Path MTU: 1024, 2048 or 4096 (both sides must agree).
    #[arg(long, default_value_t = 4096)]
    mtu: u32,
    /// One JSON object instead of the table.
    #[arg(long)]
    json: bool,
}

/// Runs server or client.
pub fn run_cmd(a: Args) -> Result<ExitCode, String> {
    if a.qps != 1 {
        return Err("--qps above 1 is not supported yet".into());
    }
    if !(a.duration > 0.0 && a.duration <= 3600.0) {
        return Err(format!(
            "--duration {} is out of range (0, 3600]",
            a.duration
        ));
    }
    let mtu = Mtu::from_bytes(a.mtu)
        .ok_or_else(|| format!("--mtu {} is not 256, 512, 1024, 2048 or 4096", a.mtu))?;
    let size = a.size.unwrap_or(if a.lat { 8 } else { 65536 });
    if size == 0 || size > 1 << 24 {
        return Err(format!("--size {size} is out of range 1..=16777216"));
    }
    let op = match a.op.as_str() {
        "read" => PerfOp::Read,
        "send" => PerfOp::Send,
        "raw" => PerfOp::Raw,
        _ => PerfOp::Write,
    };
    let cfg = PerfConfig {
        op,
        size,
        duration: Duration::from_secs_f64(a.duration),
        latency: a.lat,
        backend: a.backend,
        iface: a.iface,
        port: a.port,
        mtu,
    };
    let Some(server_addr) = a.server else {
        eprintln!("uroce perf: waiting for a client on TCP port {}", cfg.port);
        let what = server(&cfg)?;
        eprintln!("uroce perf: {what}");
        return Ok(ExitCode::SUCCESS);
    };
    let json = a.json;
    let r = client(&cfg, server_addr, &mut |line| {
        if !json {
            eprintln!("{line}");
        }
    })?;
    if json {
        println!("{}", serde_json::to_string(&r).map_err(|e| e.to_string())?);
        return Ok(ExitCode::SUCCESS);
    }
    let rule = "-".repeat(87);
    println!("{rule}");
    println!(
        " RDMA {} {}, datapath {}",
        r.op.to_uppercase(),
        if a.lat { "latency" } else { "bandwidth" },
        r.datapath
    );
    println!("{rule}");
    if a.lat {
        println!(" #bytes     #iterations    t_p50[usec]    t_p99[usec]    t_p99.9[usec]");
        println!(
            " {:<10} {:<14} {:<14.2} {:<14.2} {:<14.2}",
            r.bytes,
            r.iterations,
            r.lat_p50_us.unwrap_or(0.0),
            r.lat_p99_us.unwrap_or(0.0),
            r.lat_p999_us.unwrap_or(0.0)
        );
    } else {
        println!(" #bytes     #iterations    BW average[Gb/sec]    MsgRate[Mpps]");
        println!(
            " {:<10} {:<14} {:<21.2} {:<.6}",
            r.bytes, r.iterations, r.bw_gbps, r.msg_rate_mpps
        );
    }
    println!("{rule}");
    Ok(ExitCode::SUCCESS)
}
