//! The `uroce` command line.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod cli;

/// uroce: a software RoCEv2 stack in user space, and the tools to use it.
#[derive(Parser)]
#[command(name = "uroce", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Two endpoints in two network namespaces over veth: RC WRITE/READ/SEND/atomics and UD, verified.
    Demo(cli::demo::Args),
    /// RC bandwidth / latency between two hosts, or with perftest; the server runs with no address.
    #[command(after_help = cli::perf::PERFTEST_HELP)]
    Perf(cli::perf::Args),
    /// ibv_rc_pingpong / ibv_ud_pingpong / ibv_srq_pingpong (--srq) compatible ping-pong; the
    /// server runs with no address.
    Pingpong(cli::pingpong::Args),
    /// Start an unmodified ibverbs program (ibv_rc_pingpong, perftest, your own) on uroce's
    /// libibverbs.so.1: `uroce run [--iface IF] [--backend B] -- PROGRAM ARGS...`.
    Run(cli::run::Args),
    /// Own an interface's datapath and share it with every uroce process on the host
    /// (`uroce run`, perf and pingpong start one by themselves).
    Daemon(uroce_daemon::Args),
    /// What uroce can use here: interfaces, MTUs, GIDs, backends.
    Devices,
    /// One interface: MTU, path MTU, GIDs, backends.
    Info(cli::devices::InfoArgs),
    /// Decode RoCEv2 frames of a pcap / pcapng capture or read live from an interface: one
    /// line per frame, or per-QP statistics and a PSN plot.
    Decode(cli::decode::Args),
    /// Run two endpoints over a simulated lossy link and verify every operation.
    Sim(cli::sim::Args),
    /// Make an interface lose a share of the RoCEv2 frames it receives (XDP), until interrupted.
    Lossy(cli::lossy::Args),
    /// Fuzz a running RoCE peer (uroce perf, perftest servers): structure-aware frames on
    /// live QPs, a known-good QP as the liveness oracle, findings shrunk.
    #[command(after_help = cli::fuzz_peer::HELP)]
    FuzzPeer(cli::fuzz_peer::Args),
    /// Simulate DCQCN on a switch port: N senders, RED/ECN marking, optional PFC.
    SimCc(cli::simcc::Args),
}

/// `uroce daemon`: serves until interrupted (or `--linger` after its last process), or
/// with `--check` says whether one serves the interface.
fn run_daemon(a: uroce_daemon::Args) -> anyhow::Result<ExitCode> {
    if a.check {
        println!("{}", uroce_daemon::check(&a)?);
        return Ok(ExitCode::SUCCESS);
    }
    uroce::datapath::catch_interrupts();
    uroce_daemon::serve(&a, |p| {
        eprintln!("uroce daemon: serving {} at {}", a.iface, p.display())
    })?;
    Ok(ExitCode::SUCCESS)
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let r = match cli.command {
        Command::Decode(a) => cli::decode::run(a),
        Command::Daemon(a) => run_daemon(a),
        Command::Devices => cli::devices::run_devices(),
        Command::Info(a) => cli::devices::run_info(a),
        Command::Demo(a) => cli::demo::run_cmd(a),
        Command::Perf(a) => cli::perf::run_cmd(a),
        Command::Lossy(a) => cli::lossy::run(a),
        Command::Pingpong(a) => cli::pingpong::run_cmd(a),
        Command::Run(a) => cli::run::run_cmd(a),
        Command::Sim(a) => cli::sim::run_cmd(a),
        Command::SimCc(a) => cli::simcc::run_cmd(a),
        Command::FuzzPeer(a) => cli::fuzz_peer::run_cmd(a),
    };
    match r {
        Ok(code) => code,
        Err(e) => {
            eprintln!("uroce: {e:#}");
            ExitCode::from(2)
        }
    }
}
