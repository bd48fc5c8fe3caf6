//! `uroced`: the daemon on its own (the same as `uroce daemon`), for a systemd unit.

use clap::Parser;

#[derive(Parser)]
#[command(
    name = "uroced",
    about = "Share an interface's RoCEv2 datapath with every process on the host"
)]
struct Cli {
    #[command(flatten)]
    args: uroce_daemon::Args,
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    uroce::datapath::catch_interrupts();
    let r = if cli.args.check {
        uroce_daemon::check(&cli.args).map(|s| println!("{s}"))
    } else {
        uroce_daemon::serve(&cli.args, |p| {
            eprintln!("uroced: serving {} at {}", cli.args.iface, p.display())
        })
    };
    match r {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("uroced: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
