//! `uroce perf OP [SERVER]`: RC bandwidth or latency between two hosts, between two
//! uroce endpoints or against perftest's `ib_*_bw` / `ib_*_lat`.

use std::io::Write;
use std::net::IpAddr;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{bail, Context as _};

use uroce::verbs::Mtu;
use uroce_tools::perf::{client, PerfConfig, PerfOp};
use uroce_tools::perftest::{self, Test, Verb};

/// What `uroce perf --help` says about perftest.
pub const PERFTEST_HELP: &str = "\
perftest compatibility:
  A uroce perf server answers both uroce clients and perftest's (ib_write_bw, ib_read_bw,
  ib_send_bw, ib_atomic_bw, ib_*_lat; version 6.06 exchange on TCP 18515). Against a
  perftest client it runs the test named by its own OP, --lat, -s and -n, as perftest's
  server does; both sides must agree on them. As a client, add --perftest to talk to a
  perftest server:
      ib_write_bw -d rxe0 -x 1 -s 4096 -n 1000           (on the peer)
      uroce perf write --perftest -s 4096 -n 1000 PEER    (here)
  perftest flags with a counterpart: -s, -n, -p, -m, -t, -A, --report_gbits (--report-gbits).
  Not supported yet (say so rather than ignore them): -R/rdma_cm, -b bidirectional,
  -q more than one QP, -D duration (perftest mode counts iterations), -a all sizes,
  -c UC/UD/XRC/DC, -I inline, -e events, -u/-U timeouts and retries, --report-per-port,
  -z/-Q/-l/-M (CQ moderation, post lists, multicast), --use_cuda and the like.
  The peer must use an IPv4-mapped RoCEv2 GID (rxe: -x 1).";

/// Arguments of `uroce perf`.
#[derive(clap::Args)]
pub struct Args {
    /// Operation: write, read, send or atomic; `raw` sends frames of an RC WRITE packet's
    /// size with no transport at all (the datapath's ceiling; the server counts them).
    #[arg(value_parser = ["write", "read", "send", "atomic", "raw"])]
    op: String,
    /// The server's IPv4 address; without it this is the server (as perftest does).
    server: Option<IpAddr>,
    /// Bytes per message (default 65536, or 8 with --lat; perftest mode: perftest's
    /// defaults, 65536 for bandwidth and 2 for latency; atomics are always 8).
    #[arg(short = 's', long)]
    size: Option<u32>,
    /// Speak perftest's exchange to a perftest server (ib_write_bw and friends).
    #[arg(long)]
    perftest: bool,
    /// perftest mode: iterations (perftest's default: 5000 for ib_write_bw, else 1000).
    #[arg(short = 'n', long)]
    iters: Option<u64>,
    /// perftest mode: operations in flight (bandwidth tests).
    #[arg(short = 't', long = "tx-depth", default_value_t = 128)]
    tx_depth: u32,
    /// perftest mode: the atomic operation.
    #[arg(short = 'A', long, default_value = "FETCH_AND_ADD", value_parser = ["FETCH_AND_ADD", "CMP_AND_SWAP"])]
    atomic_type: String,
    /// perftest mode: report bandwidth in Gb/s instead of MB/s.
    #[arg(long = "report-gbits", alias = "report_gbits")]
    report_gbits: bool,
    /// Seconds the client runs.
    #[arg(long, default_value_t = 5.0)]
    duration: f64,
    /// Latency: one operation at a time; report p50 / p99 / p99.9 of post-to-completion.
    #[arg(long)]
    lat: bool,
    /// QPs, driven by one loop; messages go to them in turn (uroce peers only; up to
    /// 65,536). 32 messages in flight per QP, at most 1 MiB of them in all (never fewer
    /// than 32).
    #[arg(long, default_value_t = 1)]
    qps: u32,
    /// Datapath: auto (the faster on the interface: UDP on veth, AF_XDP on a NIC with zero-copy or native XDP), xdp or udp: the datapath of the
    /// `uroce daemon` started for the interface when none serves it (one that runs keeps
    /// its own), or with --no-daemon this process's own.
    #[arg(long, default_value = "auto", value_parser = ["auto", "xdp", "udp"])]
    backend: String,
    /// Open the datapath in this process (direct mode: one uroce process per interface)
    /// instead of through the `uroce daemon` serving the interface. Implied by
    /// --busy-poll and --xdp-tx-batch, which tune the process's own AF_XDP.
    #[arg(long)]
    no_daemon: bool,
    /// Interface for AF_XDP (default: the one holding the local address).
    #[arg(long)]
    iface: Option<String>,
    /// AF_XDP busy polling: USEC[,BUDGET][,noprefer] sets SO_BUSY_POLL (microseconds
    /// per poll), SO_BUSY_POLL_BUDGET (packets per poll, default the kernel's 8) and
    /// SO_PREFER_BUSY_POLL (on unless noprefer) on the AF_XDP sockets; needs
    /// CAP_NET_ADMIN, and a driver that ties its queues to a NAPI (not veth: the line
    /// naming the datapath says). Default: UROCE_XDP_BUSY_POLL, else off.
    #[arg(long, value_name = "USEC[,BUDGET][,noprefer]")]
    busy_poll: Option<uroce::datapath::xdp::BusyPoll>,
    /// AF_XDP: frames queued before the kernel is woken to send them (1 to 2048; the
    /// kernel takes up to as many per wake-up, Linux 6.17 or later). Default:
    /// UROCE_XDP_TX_BATCH, else 256.
    #[arg(long, value_name = "N")]
    xdp_tx_batch: Option<u32>,
    /// TCP port of the out-of-band exchange.
    #[arg(short = 'p', long, default_value_t = 18515)]
    port: u16,
    /// Path MTU: 256 to 4096 (default 4096); never more than the interface carries (1024
    /// on a 1500-byte link), and the smaller of both sides' wins.
    #[arg(short = 'm', long)]
    mtu: Option<u32>,
    #[command(flatten)]
    impair: super::impair::ImpairArgs,
    #[command(flatten)]
    traffic: super::traffic::TrafficArgs,
    /// Event loops, one per thread with one QP each (UDP backend; the kernel steers each
    /// datagram to the loop owning its QP). Bandwidth between uroce peers.
    #[arg(long, default_value_t = 1)]
    threads: u32,
    /// One JSON object instead of the table.
    #[arg(long)]
    json: bool,
    /// Server: serve clients one after another until interrupted, instead of exiting
    /// after the first (a long `uroce fuzz-peer` run reconnects when it has used up the
    /// QPs it was given). A client that fails is reported and the next one served.
    #[arg(long)]
    keep_serving: bool,
}

/// Serves one client that connected on `tcp`: a uroce client (it opens with a JSON line)
/// or a perftest one (its version string), with the test `pt` names.
fn serve_one(
    cfg: &PerfConfig,
    pt: Option<&perftest::Config>,
    tcp: std::net::TcpStream,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let mut first = [0u8; 1];
    tcp.peek(&mut first)?;
    if first[0] == b'{' {
        let what = uroce_tools::perf::serve(cfg, tcp)?;
        eprintln!("uroce perf: {what}");
        return Ok(ExitCode::SUCCESS);
    }
    let pt = pt.context("a perftest client connected, but `raw` is not a perftest test")?;
    uroce::datapath::catch_interrupts();
    let out = perftest::serve(pt, tcp)?;
    print_perftest(&out, json)
}

/// Runs server or client.
pub fn run_cmd(a: Args) -> anyhow::Result<ExitCode> {
    if a.qps == 0 || a.qps > uroce_tools::perf::MAX_QPS {
        bail!(
            "--qps {} is out of range 1..={}",
            a.qps,
            uroce_tools::perf::MAX_QPS
        );
    }
    if a.threads == 0 || a.threads > 64 {
        bail!("--threads {} is out of range 1..=64", a.threads);
    }
    if a.threads > 1 && (a.lat || a.perftest || a.qps > 1) {
        bail!("--threads above 1 is for bandwidth between uroce peers, one QP per loop (not --lat, --perftest or --qps)");
    }
    if a.qps > 1 && (a.lat || a.perftest) {
        bail!("--qps above 1 is for bandwidth between uroce peers (not --lat or --perftest)");
    }
    if !(a.duration > 0.0 && a.duration <= 3600.0) {
        bail!("--duration {} is out of range (0, 3600]", a.duration);
    }
    let mut xdp = uroce::datapath::xdp::XdpConfig::from_env().map_err(anyhow::Error::msg)?;
    if let Some(bp) = a.busy_poll {
        xdp.busy_poll = Some(bp);
    }
    if let Some(n) = a.xdp_tx_batch {
        xdp.tx_batch = n;
    }
    uroce_tools::backend::set_xdp_config(xdp).context("--busy-poll / --xdp-tx-batch")?;
    // Raw frames and AF_XDP tuning are the process's own datapath's.
    let no_daemon =
        a.no_daemon || a.busy_poll.is_some() || a.xdp_tx_batch.is_some() || a.op == "raw";
    let backend = uroce_tools::backend::choice_string(&a.backend, no_daemon);
    let impair = a.impair.impairment()?;
    let traffic = a.traffic.traffic()?;
    let mtu = a
        .mtu
        .map(|m| {
            Mtu::from_bytes(m)
                .with_context(|| format!("--mtu {m} is not 256, 512, 1024, 2048 or 4096"))
        })
        .transpose()?;
    if let Some(size) = a.size {
        if size == 0 || size > 1 << 24 {
            bail!("--size {size} is out of range 1..=16777216");
        }
    }
    let verb = match a.op.as_str() {
        "read" => Some(Verb::Read),
        "send" => Some(Verb::Send),
        "atomic" => Some(Verb::Atomic),
        "write" => Some(Verb::Write),
        _ => None,
    };
    let pt = verb.map(|verb| {
        let test = Test {
            verb,
            latency: a.lat,
        };
        perftest::Config {
            test,
            size: a.size.unwrap_or(if a.lat {
                perftest::DEFAULT_SIZE_LAT
            } else {
                perftest::DEFAULT_SIZE_BW
            }),
            iters: a.iters.unwrap_or(test.default_iters()),
            mtu,
            tx_depth: if a.lat { 1 } else { a.tx_depth.max(1) },
            compare_swap: a.atomic_type == "CMP_AND_SWAP",
            report_gbits: a.report_gbits,
            port: a.port,
            backend: backend.clone(),
            iface: a.iface.clone(),
            impair,
            traffic: traffic.clone(),
        }
    });
    let op = match a.op.as_str() {
        "read" => PerfOp::Read,
        "send" => PerfOp::Send,
        "raw" => PerfOp::Raw,
        _ => PerfOp::Write,
    };
    let cfg = PerfConfig {
        op,
        size: a.size.unwrap_or(if a.lat { 8 } else { 65536 }),
        duration: Duration::from_secs_f64(a.duration),
        latency: a.lat,
        backend,
        iface: a.iface,
        port: a.port,
        mtu: mtu.unwrap_or(Mtu::M4096),
        impair,
        traffic,
        qps: a.qps,
        threads: a.threads,
    };
    let Some(server_addr) = a.server else {
        eprintln!("uroce perf: waiting for a client on TCP port {}", cfg.port);
        if !a.keep_serving {
            let tcp = uroce_tools::perf::accept_one(cfg.port)?;
            return serve_one(&cfg, pt.as_ref(), tcp, a.json);
        }
        uroce::datapath::catch_interrupts();
        let listener = uroce_tools::perf::listen(cfg.port)?;
        // Accepting does not block, so that Ctrl-C ends the server between clients too.
        listener.set_nonblocking(true)?;
        let mut served = 0u64;
        while !uroce::datapath::interrupted() {
            let tcp = match listener.accept() {
                Ok((tcp, _)) => tcp,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    std::thread::sleep(Duration::from_millis(20));
                    continue;
                }
                Err(e) => return Err(e).context("accepting a client"),
            };
            tcp.set_nonblocking(false)?;
            served += 1;
            if let Err(e) = serve_one(&cfg, pt.as_ref(), tcp, a.json) {
                eprintln!("uroce perf: client {served}: {e:#}");
            }
            eprintln!(
                "uroce perf: waiting for the next client on TCP port {}",
                cfg.port
            );
        }
        eprintln!("uroce perf: interrupted after {served} clients");
        return Ok(ExitCode::SUCCESS);
    };
    if a.perftest {
        let pt = pt.context("`raw` is not a perftest test")?;
        let out = perftest::client(&pt, server_addr)?;
        return print_perftest(&out, a.json);
    }
    if verb == Some(Verb::Atomic) {
        bail!("`atomic` between uroce peers needs --perftest (both ends speak it)");
    }
    let json = a.json;
    let r = client(&cfg, server_addr, &mut |line| {
        if !json {
            eprintln!("{line}");
        }
    })?;
    if json {
        println!("{}", serde_json::to_string(&r)?);
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

fn print_perftest(out: &perftest::Outcome, json: bool) -> anyhow::Result<ExitCode> {
    if json {
        println!("{}", serde_json::to_string(out)?);
    } else {
        let mut o = std::io::stdout().lock();
        for l in &out.text {
            let _ = writeln!(o, "{l}");
        }
        for v in &out.validated {
            let _ = writeln!(o, " validated: {v}");
        }
    }
    Ok(ExitCode::SUCCESS)
}
