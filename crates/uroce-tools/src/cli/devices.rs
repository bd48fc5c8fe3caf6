//! `uroce devices` and `uroce info IFACE`: what uroce can use on this host.

use std::net::IpAddr;
use std::process::ExitCode;

use anyhow::Context as _;

/// Arguments of `uroce info`.
#[derive(clap::Args)]
pub struct InfoArgs {
    /// The interface.
    iface: String,
}

struct Link {
    name: String,
    mac: String,
    mtu: u64,
    up: bool,
    addrs: Vec<IpAddr>,
}

/// The host's interfaces, as the kernel lists them over rtnetlink.
fn links() -> anyhow::Result<Vec<Link>> {
    // As text: a NetError's message already ends with its source's, which `{:#}` would
    // print a second time.
    let all = uroce::net::addresses::interfaces().map_err(|e| anyhow::Error::msg(e.to_string()))?;
    Ok(all
        .into_iter()
        .map(|i| Link {
            mac: i
                .mac
                .as_ref()
                .map_or_else(|| "none".to_string(), uroce::net::addresses::format_mac),
            name: i.name,
            mtu: u64::from(i.mtu),
            up: i.up,
            addrs: i.addrs.into_iter().map(|(a, _)| a).collect(),
        })
        .collect())
}

/// The GID of an address, as ibverbs tools show it: the IPv4-mapped address for IPv4.
fn gid(a: &IpAddr) -> String {
    match a {
        IpAddr::V4(v) => v.to_ipv6_mapped().to_string(),
        IpAddr::V6(v) => v.to_string(),
    }
}

fn backends(l: &Link) -> String {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let has_v4 = l.addrs.iter().any(IpAddr::is_ipv4);
    let xdp = if !root {
        "xdp: needs root (CAP_BPF, CAP_NET_ADMIN, CAP_NET_RAW)"
    } else if l.name == "lo" {
        "xdp: not on loopback"
    } else {
        "xdp: yes"
    };
    let udp = if has_v4 {
        "udp: yes"
    } else {
        "udp: needs an IPv4 address"
    };
    format!("{xdp}; {udp}")
}

fn show(l: &Link, verbose: bool) {
    println!(
        "{:<16} {:<5} mtu {:<5} path MTU {:<4} mac {}",
        l.name,
        if l.up { "UP" } else { "DOWN" },
        l.mtu,
        uroce::verbs::Mtu::fitting(u32::try_from(l.mtu).unwrap_or(u32::MAX))
            .map_or(0, |m| m.bytes()),
        l.mac
    );
    for (i, a) in l.addrs.iter().enumerate() {
        println!("    GID[{i}] {:<40} RoCE v2 ({a})", gid(a));
    }
    if verbose {
        println!("    backends: {}", backends(l));
        let missing = super::run::cap_eff()
            .map(super::run::missing_for_xdp)
            .unwrap_or_default();
        println!("    {}", super::run::auto_line(&l.name, &missing));
        let daemon = if uroce_tools::daemon_start::running(&l.name) {
            "uroce daemon serving it (programs share its datapath)"
        } else {
            "none (uroce run, perf and pingpong start one)"
        };
        println!("    daemon: {daemon}");
    }
}

/// `uroce devices`.
pub fn run_devices() -> anyhow::Result<ExitCode> {
    for l in links()? {
        show(&l, true);
    }
    Ok(ExitCode::SUCCESS)
}

/// `uroce info IFACE`.
pub fn run_info(a: InfoArgs) -> anyhow::Result<ExitCode> {
    let l = links()?
        .into_iter()
        .find(|l| l.name == a.iface)
        .with_context(|| format!("no interface {} here (see `uroce devices`)", a.iface))?;
    show(&l, true);
    Ok(ExitCode::SUCCESS)
}
