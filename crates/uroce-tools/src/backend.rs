//! Choosing and opening a tool's datapath: `auto` takes what [`choice::choose`] says is the
//! faster one on the interface (AF_XDP on a NIC with zero-copy or native XDP, the UDP
//! backend on veth and other virtual links), and the UDP backend where AF_XDP cannot be set
//! up, saying why; with seeded loss and reordering wrapped around it when asked.

use std::net::IpAddr;

use anyhow::{anyhow, bail, Context as _};

use uroce::datapath::choice::{self, Choice, Datapath};
use uroce::datapath::holder;
use uroce::datapath::impair::{Impaired, Impairment};
use uroce::datapath::udp::UdpBackend;
use uroce::datapath::xdp::{is_held, XdpBackend, XdpConfig};
use uroce::datapath::Backend;
use uroce::transport::rc::MAX_INFLIGHT_PSNS;
use uroce::verbs::Mtu;

/// A backend a tool owns, movable to a loop's thread.
pub type Boxed = Box<dyn Backend + Send>;

/// The prefix of a datapath choice that goes through the `uroce daemon` serving the
/// interface: `daemon:auto`, `daemon:xdp`, `daemon:udp` (the datapath the daemon opens
/// when none runs and this tool starts one; a daemon already running keeps its own).
pub const VIA_DAEMON: &str = "daemon:";

/// The datapath choice a tool's `--backend` and `--no-daemon` make: through the daemon
/// unless `no_daemon`.
pub fn choice_string(backend: &str, no_daemon: bool) -> String {
    if no_daemon {
        backend.to_string()
    } else {
        format!("{VIA_DAEMON}{backend}")
    }
}

/// A backend through the `uroce daemon` serving `iface`, started with datapath `kind`
/// (auto, xdp, udp) when none runs; and a line saying what it is.
pub fn open_daemon(iface: &str, kind: &str) -> anyhow::Result<(Boxed, String)> {
    BackendChoice::parse(kind)?;
    let (path, started) = crate::daemon_start::ensure(iface, kind)?;
    let b = uroce::datapath::daemon::DaemonBackend::connect(&path)
        .with_context(|| format!("attaching to uroce daemon at {}", path.display()))?;
    let what = format!(
        "uroce daemon on {iface} ({}{})",
        if b.needs_link_addresses() {
            "AF_XDP"
        } else {
            "UDP backend"
        },
        if started { ", started now" } else { "" }
    );
    Ok((Box::new(b), what))
}

/// QPNs a tool claims from the daemon at the least.
pub const TOOL_QPNS: u32 = 4096;

/// Makes `ctx` give its QPs the numbers `backend` reserves for it (a daemon's: it steers
/// by destination QPN), enough for `qps` QPs at a time: at least [`TOOL_QPNS`], which
/// leaves room for the QPs a server creates for client after client; call before creating
/// QPs. A claim holds its numbers for the tool's life and a minute of quarantine after,
/// so a tool asks for about what it uses, not for the most it could (a fast-path class of
/// the daemon holds 2^18).
pub fn adopt_qpns(
    ctx: &mut uroce::verbs::Context,
    backend: &mut dyn Backend,
    qps: u32,
) -> anyhow::Result<()> {
    if let Some((first, _)) = backend
        .claim_qpns(qps.max(TOOL_QPNS))
        .context("QPNs from uroce daemon")?
    {
        ctx.set_qpn_space(first, 1);
    }
    Ok(())
}

/// Which datapath a tool uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackendChoice {
    /// The faster datapath on the interface ([`choice::choose`]); the UDP backend where
    /// AF_XDP cannot be set up (saying why).
    Auto,
    /// AF_XDP or fail.
    Xdp,
    /// The UDP socket backend.
    Udp,
}

impl BackendChoice {
    /// `auto`, `xdp` or `udp`.
    pub fn parse(s: &str) -> anyhow::Result<Self> {
        match s {
            "auto" => Ok(Self::Auto),
            "xdp" => Ok(Self::Xdp),
            "udp" => Ok(Self::Udp),
            _ => bail!("backend {s:?} is not auto, xdp or udp"),
        }
    }
}

/// Bytes of a frame above the path MTU's payload: every header uroce may put around it.
const FRAME_OVERHEAD: u32 = 100;

/// The AF_XDP tuning the command line asked for ([`set_xdp_config`]).
static XDP_CONFIG: std::sync::OnceLock<XdpConfig> = std::sync::OnceLock::new();

/// Sets the AF_XDP tuning (TX batch, busy polling) of every AF_XDP backend this process
/// opens from now on: `uroce perf --busy-poll` / `--xdp-tx-batch`. Once per process.
pub fn set_xdp_config(c: XdpConfig) -> anyhow::Result<()> {
    c.validate().map_err(|e| anyhow!(e))?;
    XDP_CONFIG
        .set(c)
        .map_err(|_| anyhow!("the AF_XDP tuning was set already"))
}

/// What [`set_xdp_config`] set, else `UROCE_XDP_TX_BATCH` and `UROCE_XDP_BUSY_POLL`.
fn xdp_config() -> anyhow::Result<XdpConfig> {
    match XDP_CONFIG.get() {
        Some(c) => Ok(*c),
        None => XdpConfig::from_env().map_err(|e| anyhow!(e)),
    }
}

/// The backend `choice` asks for: AF_XDP on `iface` (none: not possible, `no_iface` says
/// why), else the UDP backend on `local`; received frames impaired as `impair` says.
/// Returns the backend and a line saying what it is.
pub fn open(
    choice: BackendChoice,
    iface: Option<&str>,
    no_iface: &str,
    local: IpAddr,
    mtu: Mtu,
    impair: Impairment,
) -> anyhow::Result<(Boxed, String)> {
    let auto = match (choice, iface) {
        (BackendChoice::Auto, Some(i)) => Some(auto_choice(i)?),
        _ => None,
    };
    let xdp = match (choice, iface, &auto) {
        (BackendChoice::Udp, _, _) => None,
        (_, _, Some(c)) if c.datapath == Datapath::Udp => None,
        (_, None, _) => Some(Err(anyhow!("{no_iface}"))),
        (_, Some(i), _) => {
            let cfg = xdp_config()?;
            let r = retry_while_letting_go(i, || {
                XdpBackend::open_with(i, 2, mtu.bytes() + FRAME_OVERHEAD, MAX_INFLIGHT_PSNS, &cfg)
            });
            if let Err(e) = &r {
                refuse_if_held(e)?;
            }
            Some(r.map(|b| (b, i)).with_context(|| format!("AF_XDP on {i}")))
        }
    };
    let seed = seed_of(local);
    let why = auto.map_or(String::new(), |c| format!(", auto: {}", c.reason));
    match xdp {
        Some(Ok((b, i))) => {
            refuse_if_udp_held(local)?;
            let what = format!("AF_XDP on {i} ({}{why})", b.mode());
            Ok((impaired(b, impair, seed), what))
        }
        Some(Err(e)) if choice == BackendChoice::Xdp => Err(e),
        other => {
            let u = UdpBackend::bind(local)?;
            let what = match other {
                Some(Err(e)) => format!("UDP backend (AF_XDP not possible: {e:#})"),
                _ if why.is_empty() => "UDP backend".to_string(),
                _ => format!("UDP backend ({})", &why[2..]),
            };
            Ok((impaired(u, impair, seed), what))
        }
    }
}

/// What `auto` takes on `iface` ([`choice::choose`]). When that is the UDP backend
/// while another process holds the interface's AF_XDP (its XDP program takes every RoCE
/// frame, so a UDP socket would receive nothing), EADDRINUSE naming the holder.
fn auto_choice(iface: &str) -> anyhow::Result<Choice> {
    let c = choice::choose(iface);
    if c.datapath == Datapath::Udp {
        let index = uroce::net::addresses::ifindex(iface).unwrap_or(0);
        if let Some(h) = holder::xdp_holder(index) {
            bail!(std::io::Error::new(
                std::io::ErrorKind::AddrInUse,
                format!(
                    "AF_XDP on {iface} is in use, its XDP program taking every RoCE frame \
                     there: held by {h}; one uroce process per interface (or share it \
                     through a uroce daemon)"
                )
            ));
        }
    }
    Ok(c)
}

/// [`holder::retry_while_letting_go`] for the interface named `iface`.
fn retry_while_letting_go<T>(
    iface: &str,
    open: impl Fn() -> std::io::Result<T>,
) -> std::io::Result<T> {
    let ifindex = uroce::net::addresses::interface_info(iface).map_or(0, |i| i.index);
    holder::retry_while_letting_go(ifindex, open)
}

/// EADDRINUSE, naming the holder, when AF_XDP failed because another process holds the
/// interface (`auto` must not take the UDP backend then: the holder's XDP program takes
/// every RoCE frame, the host would be split silently).
fn refuse_if_held(e: &std::io::Error) -> anyhow::Result<()> {
    if is_held(e) {
        bail!(std::io::Error::new(
            std::io::ErrorKind::AddrInUse,
            e.to_string()
        ));
    }
    Ok(())
}

/// EADDRINUSE, naming the holder, when AF_XDP was had but another process has UDP/4791
/// on `local` (a uroce program on the UDP backend), whose traffic the XDP program would
/// take. The kernel's own socket (rdma_rxe's) has no process and does not count.
fn refuse_if_udp_held(local: IpAddr) -> anyhow::Result<()> {
    if let Some(h) = holder::udp_holder(local, uroce::wire::ROCEV2_UDP_PORT) {
        bail!(std::io::Error::new(
            std::io::ErrorKind::AddrInUse,
            format!(
                "UDP {} is held by {h} (a uroce program on the UDP backend); one uroce \
                 process per address",
                std::net::SocketAddr::new(local, uroce::wire::ROCEV2_UDP_PORT)
            )
        ));
    }
    Ok(())
}

/// One AF_XDP backend per receive queue of `iface` (`n` of them, for `n` loops), or `n`
/// UDP backends steered by DestQP; the same rules as [`open`].
pub fn open_per_loop(
    choice: BackendChoice,
    iface: &str,
    local: IpAddr,
    n: u32,
    mtu: Mtu,
    impair: Impairment,
) -> anyhow::Result<(Vec<Boxed>, String)> {
    let auto = match choice {
        BackendChoice::Auto => Some(auto_choice(iface)?),
        _ => None,
    };
    let mut why = auto
        .as_ref()
        .map_or(String::new(), |c| format!(" (auto: {})", c.reason));
    if choice == BackendChoice::Xdp || auto.is_some_and(|c| c.datapath == Datapath::Xdp) {
        let cfg = xdp_config()?;
        match retry_while_letting_go(iface, || {
            XdpBackend::open_per_queue_with(
                iface,
                n,
                mtu.bytes() + FRAME_OVERHEAD,
                MAX_INFLIGHT_PSNS,
                &cfg,
            )
        }) {
            Ok(v) => {
                refuse_if_udp_held(local)?;
                let v = v
                    .into_iter()
                    .enumerate()
                    .map(|(k, b)| impaired(b, impair, seed_of(local) ^ k as u64))
                    .collect();
                let what = format!("AF_XDP on {iface}, {n} loops on threads, one queue each{why}");
                return Ok((v, what));
            }
            Err(e) if choice == BackendChoice::Xdp || is_held(&e) => {
                refuse_if_held(&e)?;
                return Err(e).with_context(|| format!("AF_XDP on {iface}"));
            }
            Err(e) => why = format!(" (AF_XDP not possible: {e})"),
        }
    }
    // The sockets coalesce (UDP GRO) as a single one does; a packet the kernel put on
    // the wrong socket in a coalesced run is handed to its loop (`datapath::handoff`).
    let group = uroce::datapath::handoff::Group::new(n as usize)?;
    let mut v = Vec::new();
    for k in 0..n {
        let b = UdpBackend::bind_steered_coalescing(local, k, n)?;
        let b = uroce::datapath::handoff::Member::new(Box::new(b), k as usize, group.clone());
        v.push(impaired(b, impair, seed_of(local) ^ u64::from(k)));
    }
    let what = format!("UDP backend, {n} loops on threads, steered by DestQP{why}");
    Ok((v, what))
}

/// `b` as it is, or wrapped in [`Impaired`] when `impair` touches any frame.
pub fn impaired(b: impl Backend + Send + 'static, impair: Impairment, seed: u64) -> Boxed {
    if impair.is_none() {
        Box::new(b)
    } else {
        Box::new(Impaired::new(b, impair, seed))
    }
}

/// A seed for what is random on this host's side (memory keys, PSNs, impairment),
/// different for each local address.
pub(crate) fn seed_of(a: IpAddr) -> u64 {
    match a {
        IpAddr::V4(v) => u64::from(u32::from(v)),
        IpAddr::V6(v) => {
            let x = u128::from(v);
            (x as u64) ^ ((x >> 64) as u64)
        }
    }
}

/// The datapath `backend` (`auto`, `xdp`, `udp`) on `iface` / `local`, and a description,
/// impairing received frames as `impair` says (to test recovery).
pub(crate) fn open_backend_lossy(
    backend: &str,
    mtu: Mtu,
    local: impl Into<IpAddr>,
    iface: &str,
    impair: Impairment,
) -> anyhow::Result<(Box<dyn Backend + Send>, String)> {
    if let Some(kind) = backend.strip_prefix(VIA_DAEMON) {
        let (b, what) = open_daemon(iface, kind)?;
        let b = impaired(b, impair, seed_of(local.into()));
        return Ok((crate::fuzz_peer::planted::wrap_from_env(b), what));
    }
    let choice = BackendChoice::parse(backend)?;
    let (b, what) = open(choice, Some(iface), "", local.into(), mtu, impair)?;
    // Unset (always, outside the fuzzer's tests) this is `b` itself.
    Ok((crate::fuzz_peer::planted::wrap_from_env(b), what))
}
