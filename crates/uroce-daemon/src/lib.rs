//! `uroce daemon`: one interface's RoCEv2 datapath shared by every process on the host.
//!
//! A NIC (or rdma_rxe in the kernel) serves every process on a host at once; a user-space
//! datapath can be opened by one process only (AF_XDP takes the interface's RoCE frames,
//! UDP port 4791 binds once). The daemon owns the datapath and switches frames between it
//! and the processes attached to it, as a NIC's steering does:
//!
//! - the transport stays in each process (its sans-IO context, exactly as in direct
//!   mode): to a process the daemon is one more `Backend`
//!   ([`uroce::datapath::daemon::DaemonBackend`]), so a crash of a process loses that
//!   process's QPs only, and the daemon never touches application memory;
//! - packets move through shared memory (two rings of slots in a sealed memfd per
//!   process, [`uroce::datapath::daemon::ring`]), with an eventfd doorbell rung only for
//!   a side that sleeps;
//! - the daemon hands out QPNs ([`switch`]), steers received frames by destination QPN
//!   and QP 1's connection management by service ID and communication ID, delivers
//!   between its own processes locally (never on the wire), and checks what each process
//!   sends (source address, UD source QP);
//! - its threads: one takes frames off the wire, `--threads` others take each process's
//!   sends (a process's ring is served by one of them), one serves the control socket.
//!
//! The control socket is `/run/uroce/net-NS/IFACE.sock` for root's daemon, the user's
//! runtime directory for another user's (UDP backend). Who may attach: the socket's mode
//! (0600 unless others are let in) and `SO_PEERCRED` (root, the daemon's own user, the
//! `--allow-uid`s).

pub mod switch;

use std::collections::HashMap;
use std::net::IpAddr;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context as _};
use uroce::datapath::daemon::proto::{self, Reply, Request};
use uroce::datapath::daemon::ring::{Dir, Region, SlotHeader, SLOTS};
use uroce::datapath::udp::UdpBackend;
use uroce::datapath::xdp::{XdpBackend, XdpConfig};
use uroce::datapath::{Backend, Received, Transmit};

use switch::{ClientId, Switch};

/// `uroce daemon`'s arguments.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// The interface whose RoCEv2 datapath to own and share.
    #[arg(long)]
    pub iface: String,
    /// The datapath: auto (the faster on the interface: AF_XDP on a NIC with zero-copy or
    /// native XDP, UDP on veth and other virtual links; UDP where AF_XDP cannot be set
    /// up), xdp or udp.
    #[arg(long, default_value = "auto")]
    pub backend: String,
    /// Exit this many seconds after the last process left (default: stay).
    #[arg(long)]
    pub linger: Option<u64>,
    /// The control socket (default: /run/uroce/net-NS/IFACE.sock for root, else the
    /// user's runtime directory).
    #[arg(long)]
    pub socket: Option<PathBuf>,
    /// Let processes of this user attach too (besides root and the daemon's own user).
    #[arg(long = "allow-uid")]
    pub allow_uid: Vec<u32>,
    /// Threads taking the processes' sends (default: half the cores, 1 to 4).
    #[arg(long)]
    pub threads: Option<usize>,
    /// Microseconds the receive thread keeps looking at the datapath, and a send thread
    /// at its processes' rings, after the last packet before it sleeps (the next packet
    /// then costs no wake-up). Default: 50 where there are more than 2 cores, else 0
    /// (spinning would take the core from the processes).
    #[arg(long)]
    pub spin_us: Option<u64>,
    /// Attach to the daemon serving the interface (or listening at --socket), say which,
    /// and leave; an error when none serves it or it refuses us.
    #[arg(long)]
    pub check: bool,
    /// Over UDP, keep every packet in the rings: no socket of its own for a process (the
    /// fast path skips the daemon's checks on what a process sends, as any process
    /// sending UDP to port 4791 does; with this the daemon checks every packet).
    #[arg(long)]
    pub no_fast_path: bool,
}

/// The fast path over UDP: the sockets of classes 1 to 63 of the reuseport group on
/// `addr` (`uroce::datapath::udp::bind_classes`; class 0 is the daemon's own datapath for
/// that address), each given to at most one process, which is then handed QPNs of its
/// class only, so the kernel steers its datagrams straight to its socket.
struct FastPath {
    addr: IpAddr,
    /// Class `k`'s socket at `k - 1`.
    classes: Vec<Mutex<Class>>,
    /// The process holding each class (index `k`; 0: free; class 0 is never given).
    owners: Mutex<Vec<ClientId>>,
    /// The class given last: the next search starts after it, so that classes are used
    /// in turn and a class's quarantined QPNs (a process that just left) rest.
    last: Mutex<usize>,
    /// Bumped whenever a class is taken or let go: the receive thread then looks again
    /// at which sockets it reads.
    changed: AtomicU64,
    /// Rung with each bump: wakes the receive thread from its wait, which does not
    /// watch a class's socket let go meanwhile.
    bell: OwnedFd,
}

/// A class's socket, kept open for the daemon's life (the kernel renumbers a reuseport
/// group's sockets when one closes): kept, or read by the daemon itself. Exactly one
/// of the two holds it.
struct Class {
    /// Never given yet, or given to the process holding the class.
    kept: Option<std::net::UdpSocket>,
    /// Free after a process held it. The kernel still steers a coalesced run by its
    /// first packet, so a run led by a packet for the QPNs of a process that left
    /// reaches this socket, and the other processes' packets in it must be switched to
    /// them as that process would have passed them on (its own are for nobody now).
    /// Coalescing, as the process's was: what the kernel queued coalesced is read whole,
    /// its segments told apart.
    read: Option<Box<UdpBackend>>,
}

impl FastPath {
    /// Class `k`'s socket, locked.
    fn class(&self, k: usize) -> std::sync::MutexGuard<'_, Class> {
        self.classes[k - 1]
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// A free class for `client`, its socket emptied of what an earlier holder left.
    fn take(&self, client: ClientId) -> Option<(u8, RawFd)> {
        let mut o = self.owners.lock().unwrap_or_else(|e| e.into_inner());
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        let n = o.len() - 1;
        let k = (0..n).map(|i| 1 + (*last + i) % n).find(|&k| o[k] == 0)?;
        *last = k;
        o[k] = client;
        // The daemon reads it no more (a receive under way ends first: this waits for
        // its lock), and what it took and did not switch yet goes.
        let mut c = self.class(k);
        if let Some(b) = c.read.take() {
            c.kept = Some(b.into_socket());
        }
        let sock = c.kept.as_ref().expect("a class's socket");
        uroce::datapath::udp::drain_socket(sock);
        let fd = sock.as_raw_fd();
        self.changed.fetch_add(1, Ordering::Release);
        proto::ring(self.bell.as_raw_fd());
        Some((k as u8, fd))
    }

    /// `client` left: its class is free again (its QPNs are quarantined by the switch),
    /// and its socket is read by the daemon until the class is taken again.
    fn release(&self, client: ClientId) {
        let mut o = self.owners.lock().unwrap_or_else(|e| e.into_inner());
        let Some(k) = o.iter().position(|&c| c == client) else {
            // It held none (the fast path off, or no class free when it came).
            return;
        };
        o[k] = 0;
        let mut class = self.class(k);
        // Built on a copy of the descriptor, which replaces the kept one once it
        // works: the socket is never closed, even when this fails (without a
        // reader, what the socket holds waits until the class is taken again, which
        // drops it).
        let reader = (class.kept.as_ref())
            .map(|s| {
                s.try_clone()
                    .and_then(|dup| UdpBackend::from_class_socket(self.addr, dup, true))
            })
            .and_then(Result::ok);
        if let Some(b) = reader {
            class.kept = None;
            class.read = Some(Box::new(b));
        }
        self.changed.fetch_add(1, Ordering::Release);
        proto::ring(self.bell.as_raw_fd());
    }

    /// The free classes the daemon reads, with their sockets' descriptors.
    fn idle(&self) -> Vec<(usize, RawFd)> {
        let o = self.owners.lock().unwrap_or_else(|e| e.into_inner());
        (1..o.len())
            .filter(|&k| o[k] == 0)
            .filter_map(|k| {
                let c = self.class(k);
                c.read.as_ref().map(|b| (k, b.wait_fds()[0]))
            })
            .collect()
    }
}

/// Counters of the whole daemon.
#[derive(Debug, Default)]
pub struct Stats {
    /// Frames taken off the wire.
    pub rx: AtomicU64,
    /// Of those, for no process (unknown QPN, nobody listening).
    pub rx_unrouted: AtomicU64,
    /// Datagrams a process's socket of the fast path received for another process (or
    /// for the daemon) and passed on, switched to their owner.
    pub passed_on: AtomicU64,
    /// Packets processes sent to the wire.
    pub tx: AtomicU64,
    /// Packets delivered from one process to another without the wire.
    pub local: AtomicU64,
    /// Packets a process sent that broke a rule (see [`switch::Refusal`]).
    pub refused: AtomicU64,
    /// Packets lost because their process's ring was full.
    pub dropped_full: AtomicU64,
}

/// A process attached.
struct Client {
    id: ClientId,
    /// The process's user (`SO_PEERCRED` at connect).
    uid: u32,
    /// The class of the fast path's socket it was given with its welcome, if any (held
    /// in [`FastPath`] until it leaves).
    class: Option<u32>,
    region: Region,
    /// The daemon waits on it for the process's sends.
    to_daemon: OwnedFd,
    /// The process waits on it.
    to_process: OwnedFd,
    /// The control socket (a descriptor of its own, so that it cannot be another
    /// process's by the time a thread still holding this Client cuts it), to cut a
    /// process that broke its ring.
    control: OwnedFd,
    /// Producers into the process's ring: the receive thread and the send threads
    /// (local delivery).
    rx_lock: Mutex<()>,
    broken: AtomicBool,
    /// Its connection closed (set once, by the control thread, which drops its listens
    /// then). The send thread that serves it then takes what its ring still holds and
    /// forgets it ([`retire_left`]).
    left: AtomicBool,
    /// Slots that thread took from its ring since it left (bounded by
    /// [`LEFT_DRAIN_SLOTS`]).
    taken_since_left: AtomicUsize,
}

impl Client {
    /// Cuts the process off (its connection closes; it is then forgotten as one that
    /// left, [`retire_left`]).
    fn cut(&self) {
        if !self.broken.swap(true, Ordering::Relaxed) {
            // SAFETY: shutdown on a socket descriptor this Client owns.
            unsafe { libc::shutdown(self.control.as_raw_fd(), libc::SHUT_RDWR) };
        }
    }

    /// Puts a packet into the process's ring; true when the process needs waking.
    fn deliver(&self, stats: &Stats, header: &SlotHeader, data: &[u8]) -> bool {
        let _g = self.rx_lock.lock().unwrap_or_else(|e| e.into_inner());
        match self.region.ring(Dir::ToProcess).push(header, data) {
            Ok(true) => true,
            Ok(false) => {
                stats.dropped_full.fetch_add(1, Ordering::Relaxed);
                false
            }
            Err(_) => {
                self.cut();
                false
            }
        }
    }

    fn wake(&self) {
        if self.region.ring(Dir::ToProcess).consumer_needs_wake() {
            proto::ring(self.to_process.as_raw_fd());
        }
    }
}

struct Daemon {
    datapaths: Vec<Datapath>,
    /// Shared by the receive and send threads' lookups; written by the control thread and
    /// by a send thread for a packet that teaches it something (a new flow, a CM ID).
    switch: RwLock<Switch>,
    clients: RwLock<HashMap<ClientId, Arc<Client>>>,
    /// Bumped when a process comes or goes.
    generation: AtomicU64,
    local: RwLock<Vec<IpAddr>>,
    needs_link: bool,
    /// A datapath serves the interface's link-local address (AF_XDP, or a UDP socket
    /// bound to it): processes are told so in their welcome.
    link_local: bool,
    /// The interface's MAC (neighbour requests a process sends must be from it).
    mac: Option<[u8; 6]>,
    rx_capacity: u64,
    /// Over UDP: the sockets a process may have of its own.
    fast: Option<FastPath>,
    stop: AtomicBool,
    stats: Stats,
}

/// Whether a frame a process sends is one the daemon lets out for it: an ARP request
/// (RFC 826) or an ICMPv6 Neighbor Solicitation (RFC 4861), from the interface's MAC
/// address `mac` (the library resolves next hops over AF_XDP so; the replies reach it
/// through the kernel, which the XDP program passes them to).
fn neighbour_request(f: &[u8], mac: [u8; 6]) -> bool {
    if f.len() < 14 || f[6..12] != mac {
        return false;
    }
    match u16::from_be_bytes([f[12], f[13]]) {
        0x0806 => f.len() >= 14 + 28 && f[14 + 6..14 + 8] == [0, 1],
        0x86dd => f.len() >= 14 + 40 + 4 && f[14 + 6] == 58 && f[14 + 40] == 135,
        _ => false,
    }
}

/// Where an Ethernet frame's IP destination and RoCE part (BTH on) are; `None` when it
/// is not RoCEv2 (UDP port 4791) over IPv4 or IPv6, untagged or with one VLAN tag.
fn locate(f: &[u8]) -> Option<(IpAddr, usize)> {
    let u16_at = |i: usize| Some(u16::from_be_bytes(f.get(i..i + 2)?.try_into().ok()?));
    let mut off = 12;
    let mut ethertype = u16_at(off)?;
    if ethertype == 0x8100 {
        off += 4;
        ethertype = u16_at(off)?;
    }
    off += 2;
    let dst = match ethertype {
        0x0800 => {
            let h = f.get(off..off + 20)?;
            if h[9] != 17 {
                return None;
            }
            let dst = IpAddr::from(<[u8; 4]>::try_from(&h[16..20]).ok()?);
            off += usize::from(h[0] & 0xf) * 4;
            dst
        }
        0x86dd => {
            let h = f.get(off..off + 40)?;
            if h[6] != 17 {
                return None;
            }
            let dst = IpAddr::from(<[u8; 16]>::try_from(&h[24..40]).ok()?);
            off += 40;
            dst
        }
        _ => return None,
    };
    if u16_at(off + 2)? != uroce::wire::ROCEV2_UDP_PORT {
        return None;
    }
    Some((dst, off + 8))
}

/// The interface's addresses, MTU and MAC.
fn interface(iface: &str) -> anyhow::Result<(Vec<IpAddr>, u32, Option<[u8; 6]>)> {
    let info = uroce::net::addresses::interface_info(iface)
        .with_context(|| format!("interface {iface}"))?;
    Ok((
        info.addrs.iter().map(|&(a, _)| a).collect(),
        info.mtu,
        info.mac,
    ))
}

/// One datapath of the daemon and the source addresses it sends from (empty: any of the
/// interface's, as AF_XDP, which writes the IP header itself).
struct Datapath {
    sources: Vec<IpAddr>,
    backend: Mutex<Box<dyn Backend + Send>>,
}

/// The interface's datapaths: AF_XDP (one, for every address), or a UDP socket backend
/// for each address that can be bound (IPv4 and IPv6: a UDP socket sends from the
/// address it is bound to). Over UDP the IPv6 link-local addresses are bound with their
/// scope, the interface's index, and the default GID (the EUI-64 address of `mac`) is
/// bound even before the kernel has it (`UdpBackend::bind_link_local`): processes then
/// send from and receive at GID 0 as over AF_XDP (libfabric's dgram and rdm endpoints
/// name it at both ends).
fn open_datapaths(
    args: &Args,
    addrs: &[IpAddr],
    mtu: u32,
    mac: Option<[u8; 6]>,
) -> anyhow::Result<(Vec<Datapath>, Option<FastPath>)> {
    let mtu = uroce::verbs::Mtu::fitting(mtu).unwrap_or(uroce::verbs::Mtu::M1024);
    // Over UDP, the address processes send from (a context's: the first IPv4 one, else
    // the first) gets the fast path's reuseport group instead of one socket; never a
    // link-local one (bound with its scope, below).
    let fast_addr = (!args.no_fast_path)
        .then(|| {
            addrs
                .iter()
                .find(|a| a.is_ipv4())
                .or_else(|| {
                    addrs
                        .iter()
                        .find(|a| !matches!(a, IpAddr::V6(v) if v.is_unicast_link_local()))
                })
                .copied()
        })
        .flatten();
    let fast = std::cell::RefCell::new(None);
    let xdp = || {
        XdpBackend::open_with(
            &args.iface,
            1,
            mtu.bytes() + 100,
            uroce::transport::rc::MAX_INFLIGHT_PSNS,
            &XdpConfig::default(),
        )
        .map(|b| {
            vec![Datapath {
                sources: Vec::new(),
                backend: Mutex::new(Box::new(b) as Box<dyn Backend + Send>),
            }]
        })
    };
    let udp = || -> anyhow::Result<Vec<Datapath>> {
        let mut v = Vec::new();
        let mut first_error = None;
        let index = uroce::net::addresses::ifindex(&args.iface).unwrap_or(0);
        let mut addrs = addrs.to_vec();
        if let Some(ll) = mac.map(uroce::net::addresses::eui64_link_local) {
            if !addrs.contains(&IpAddr::V6(ll)) {
                addrs.push(IpAddr::V6(ll));
            }
        }
        for ip in addrs {
            let bound = match ip {
                IpAddr::V6(a) if a.is_unicast_link_local() => UdpBackend::bind_link_local(a, index),
                _ if Some(ip) == fast_addr => match uroce::datapath::udp::bind_classes(ip) {
                    Ok(mut socks) => {
                        let zero = socks.remove(0);
                        let n = socks.len() + 1;
                        *fast.borrow_mut() = Some(FastPath {
                            addr: ip,
                            classes: socks
                                .into_iter()
                                .map(|s| {
                                    Mutex::new(Class {
                                        kept: Some(s),
                                        read: None,
                                    })
                                })
                                .collect(),
                            owners: Mutex::new(vec![0; n]),
                            last: Mutex::new(0),
                            changed: AtomicU64::new(0),
                            bell: proto::eventfd()?,
                        });
                        UdpBackend::from_class_socket(ip, zero, false)
                    }
                    Err(e) => {
                        eprintln!(
                            "uroce daemon {}: no fast path on {ip} ({e}): every packet through the rings",
                            args.iface
                        );
                        UdpBackend::bind(ip)
                    }
                },
                _ => UdpBackend::bind(ip),
            };
            match bound {
                Ok(b) => v.push(Datapath {
                    sources: vec![ip],
                    backend: Mutex::new(Box::new(b)),
                }),
                Err(e) => {
                    let held = uroce::datapath::holder::held_by(
                        uroce::datapath::holder::udp_holder(ip, uroce::wire::ROCEV2_UDP_PORT),
                    );
                    first_error.get_or_insert(anyhow!("binding UDP {ip}:4791{held}: {e}"));
                }
            }
        }
        match (v.is_empty(), first_error) {
            (true, Some(e)) => Err(e),
            (true, None) => bail!("{} has no IP address", args.iface),
            _ => Ok(v),
        }
    };
    let v = match args.backend.as_str() {
        "xdp" => xdp().context("AF_XDP"),
        "udp" => udp(),
        "auto" => {
            let c = uroce::datapath::choice::choose(&args.iface);
            eprintln!("uroce daemon {}: auto takes {c}", args.iface);
            if c.datapath == uroce::datapath::choice::Datapath::Udp {
                // Another process's XDP program would take every RoCE frame away from
                // the daemon's sockets.
                let index = uroce::net::addresses::ifindex(&args.iface).unwrap_or(0);
                if let Some(h) = uroce::datapath::holder::xdp_holder(index) {
                    bail!(
                        "AF_XDP on {} is held by {h}: its XDP program takes every RoCE frame there",
                        args.iface
                    );
                }
                udp()
            } else {
                match xdp() {
                    Ok(v) => Ok(v),
                    Err(e) if uroce::datapath::xdp::is_held(&e) => Err(e).context("AF_XDP"),
                    Err(e) => {
                        eprintln!(
                            "uroce daemon {}: AF_XDP not possible ({e}), UDP backend",
                            args.iface
                        );
                        udp()
                    }
                }
            }
        }
        other => bail!("backend {other:?} is not auto, xdp or udp"),
    }?;
    Ok((v, fast.into_inner()))
}

/// The socket a daemon for `args` listens on.
pub fn socket_path(args: &Args) -> anyhow::Result<PathBuf> {
    match &args.socket {
        Some(p) => Ok(p.clone()),
        // SAFETY: geteuid cannot fail.
        None => Ok(proto::socket_path(
            &args.iface,
            unsafe { libc::geteuid() } == 0,
        )?),
    }
}

/// Refuses a socket directory another user owns or may write to (under /tmp, another
/// user could have made `/tmp/uroce-UID` first and would then own our socket's name).
fn owned_by_us(dir: &std::path::Path) -> anyhow::Result<()> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::symlink_metadata(dir).with_context(|| format!("{}", dir.display()))?;
    // SAFETY: geteuid cannot fail.
    let me = unsafe { libc::geteuid() };
    if !m.is_dir() || (m.uid() != me && m.uid() != 0) || m.mode() & 0o022 != 0 {
        bail!(
            "{} is not a directory of this user's that only it may write to (owner uid {}, mode {:o})",
            dir.display(),
            m.uid(),
            m.mode() & 0o7777
        );
    }
    Ok(())
}

/// `uroce daemon --check`: attaches and says to whom (with `--socket`, to the daemon
/// listening there, else to the one serving the interface).
pub fn check(args: &Args) -> anyhow::Result<String> {
    let found = match &args.socket {
        Some(p) => Some(
            uroce::datapath::daemon::DaemonBackend::connect(p)
                .with_context(|| format!("uroce daemon at {}", p.display()))?,
        ),
        None => uroce::datapath::daemon::DaemonBackend::find(&args.iface)?,
    };
    match found {
        Some(b) => Ok(format!(
            "attached to uroce daemon for {} as process {} ({})",
            args.iface,
            b.control().client(),
            if b.needs_link_addresses() {
                "AF_XDP"
            } else if b.fast_path() {
                "UDP, fast path: a socket of its own"
            } else {
                "UDP"
            }
        )),
        None => bail!(
            "no uroce daemon serves {} in this network namespace",
            args.iface
        ),
    }
}

/// Runs a daemon until SIGINT / SIGTERM, or until `--linger` seconds after its last
/// process left. `ready` is called once the socket accepts processes.
pub fn serve(args: &Args, ready: impl FnOnce(&std::path::Path)) -> anyhow::Result<()> {
    let (addrs, mtu, mac) = interface(&args.iface)?;
    raise_open_files();
    let (datapaths, fast) = open_datapaths(args, &addrs, mtu, mac)?;
    let path = socket_path(args)?;
    let dir = path
        .parent()
        .ok_or_else(|| anyhow!("socket path without a directory"))?;
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    owned_by_us(dir)?;
    if let Some(up) = dir.parent().filter(|_| args.socket.is_none()) {
        owned_by_us(up)?;
    }
    if path.exists() {
        if proto::connect(&path).is_ok() {
            bail!(
                "a uroce daemon already serves {} at {}",
                args.iface,
                path.display()
            );
        }
        // A socket left by a daemon that died.
        let _ = std::fs::remove_file(&path);
    }
    let listener =
        proto::listen(&path).with_context(|| format!("listening on {}", path.display()))?;
    let mode = if args.allow_uid.is_empty() {
        0o600
    } else {
        0o666
    };
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode))?;
    }
    let ring_bytes = u64::from(SLOTS / 2) * 1024;
    let (rx_capacity, needs_link) = {
        let b = datapaths[0]
            .backend
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        (
            b.rx_capacity().map_or(ring_bytes, |c| c.min(ring_bytes)),
            b.needs_link_addresses(),
        )
    };
    let link_local = datapaths.iter().any(|dp| {
        dp.backend
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .serves_link_local()
    });
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos() ^ std::process::id());
    let daemon = Arc::new(Daemon {
        datapaths,
        switch: RwLock::new(Switch::new(seed)),
        clients: RwLock::new(HashMap::new()),
        generation: AtomicU64::new(0),
        local: RwLock::new(addrs),
        needs_link,
        link_local,
        mac: mac.filter(|_| needs_link),
        rx_capacity,
        fast,
        stop: AtomicBool::new(false),
        stats: Stats::default(),
    });
    let threads = args.threads.unwrap_or_else(|| {
        std::thread::available_parallelism().map_or(1, |n| (n.get() / 2).clamp(1, 4))
    });
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let spin = match args.spin_us {
        Some(us) => Duration::from_micros(us),
        None if cores > 2 => uroce::datapath::SPIN,
        None => Duration::ZERO,
    };
    let mut senders = Vec::new();
    let mut handles = Vec::new();
    for k in 0..threads {
        let (epoll, wake) = epoll_with_wake()?;
        let epoll = Arc::new(epoll);
        senders.push((epoll.clone(), wake.clone()));
        let d = daemon.clone();
        handles.push(
            std::thread::Builder::new()
                .name(format!("uroced-tx{k}"))
                .spawn(move || send_loop(&d, k, threads, spin, &epoll, &wake))?,
        );
    }
    {
        let d = daemon.clone();
        handles.push(
            std::thread::Builder::new()
                .name("uroced-rx".into())
                .spawn(move || receive_loop(&d, spin))?,
        );
    }
    ready(&path);
    let r = control_loop(&daemon, args, listener.as_raw_fd(), &senders);
    daemon.stop.store(true, Ordering::SeqCst);
    for (_, wake) in &senders {
        proto::ring(wake.as_raw_fd());
    }
    for h in handles {
        let _ = h.join();
    }
    let _ = std::fs::remove_file(&path);
    r
}

/// The daemon's counters, as it prints them when it stops on SIGINT or SIGTERM.
fn stats_line(s: &Stats) -> String {
    format!(
        "rx {} (unrouted {}), tx {}, local {}, passed on {}, refused {}, dropped (ring full) {}",
        s.rx.load(Ordering::Relaxed),
        s.rx_unrouted.load(Ordering::Relaxed),
        s.tx.load(Ordering::Relaxed),
        s.local.load(Ordering::Relaxed),
        s.passed_on.load(Ordering::Relaxed),
        s.refused.load(Ordering::Relaxed),
        s.dropped_full.load(Ordering::Relaxed)
    )
}

fn epoll_with_wake() -> anyhow::Result<(OwnedFd, Arc<OwnedFd>)> {
    use std::os::fd::FromRawFd;
    // SAFETY: epoll_create1 with a constant flag; the result is checked.
    let ep = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
    if ep < 0 {
        return Err(std::io::Error::last_os_error().into());
    }
    // SAFETY: a new descriptor we own.
    let ep = unsafe { OwnedFd::from_raw_fd(ep) };
    let wake = Arc::new(proto::eventfd()?);
    epoll_add(ep.as_raw_fd(), wake.as_raw_fd(), u64::MAX)?;
    Ok((ep, wake))
}

fn epoll_add(ep: RawFd, fd: RawFd, data: u64) -> std::io::Result<()> {
    let mut ev = libc::epoll_event {
        events: libc::EPOLLIN as u32,
        u64: data,
    };
    // SAFETY: a valid epoll descriptor, a descriptor to watch and an event record.
    if unsafe { libc::epoll_ctl(ep, libc::EPOLL_CTL_ADD, fd, &mut ev) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Takes frames off the wire and hands each to the process owning its destination,
/// looking again without waiting for `spin` after the last one before it sleeps in
/// `poll(2)`, as a NIC's queue engine would (a wake-up costs a round trip tens of
/// microseconds).
fn receive_loop(d: &Daemon, spin: Duration) {
    let mut woken: Vec<Arc<Client>> = Vec::new();
    // Which source each descriptor is of: datapath `k`, then the free classes of the
    // fast path whose sockets the daemon reads (`Source::Class`), looked at again when
    // one is taken or let go.
    let mut fds: Vec<(RawFd, Source)> = Vec::new();
    let mut seen = None;
    let mut ready: Vec<bool> = Vec::new();
    let mut p: Vec<libc::pollfd> = Vec::new();
    let mut last_rx = Instant::now();
    let mut spins = 0u32;
    let mut done = vec![false; d.datapaths.len()];
    while !d.stop.load(Ordering::Relaxed) {
        let changed = d.fast.as_ref().map(|f| f.changed.load(Ordering::Acquire));
        if seen != Some(changed) {
            seen = Some(changed);
            fds.clear();
            for (k, dp) in d.datapaths.iter().enumerate() {
                let b = dp.backend.lock().unwrap_or_else(|e| e.into_inner());
                fds.extend(b.wait_fds().into_iter().map(|fd| (fd, Source::Datapath(k))));
            }
            if let Some(f) = &d.fast {
                fds.push((f.bell.as_raw_fd(), Source::Bell));
                fds.extend(f.idle().into_iter().map(|(k, fd)| (fd, Source::Class(k))));
            }
            p = fds
                .iter()
                .map(|&(fd, _)| libc::pollfd {
                    fd,
                    events: libc::POLLIN,
                    revents: 0,
                })
                .collect();
            ready = vec![true; fds.len()];
        }
        if fds.is_empty() {
            std::thread::sleep(Duration::from_millis(1));
            ready.fill(true);
        } else if !spin.is_zero() && last_rx.elapsed() < spin {
            std::hint::spin_loop();
            // The datapaths each time, the free classes' sockets (rarely used) now and
            // then: a system call each.
            spins = spins.wrapping_add(1);
            let classes_too = spins % 64 == 0;
            for (r, (_, source)) in ready.iter_mut().zip(&fds) {
                *r = classes_too || matches!(source, Source::Datapath(_));
            }
        } else {
            for pfd in p.iter_mut() {
                pfd.revents = 0;
            }
            let _ = uroce::datapath::wait::poll(&mut p, Duration::from_millis(100));
            for (r, pfd) in ready.iter_mut().zip(&p) {
                *r = pfd.revents != 0;
            }
        }
        let mut got = 0;
        // Each datapath once, whatever number of its descriptors were ready.
        done.fill(false);
        for (&(_, source), &r) in fds.iter().zip(&ready) {
            if !r {
                continue;
            }
            got += match source {
                Source::Datapath(k) if !done[k] => {
                    done[k] = true;
                    let dp = &d.datapaths[k];
                    receive_from(d, &mut woken, &mut |h| {
                        let mut b = dp.backend.lock().unwrap_or_else(|e| e.into_inner());
                        b.receive(Duration::ZERO, 64, h).unwrap_or(0)
                    })
                }
                Source::Datapath(_) => 0,
                Source::Bell => {
                    // Rung for a change, looked at on the next turn.
                    proto::drain(
                        d.fast
                            .as_ref()
                            .expect("a fast path's bell")
                            .bell
                            .as_raw_fd(),
                    );
                    0
                }
                Source::Class(k) => {
                    let f = d.fast.as_ref().expect("a class without a fast path");
                    receive_from(d, &mut woken, &mut |h| {
                        // None: taken since the descriptors were gathered (its process
                        // reads it).
                        let mut c = f.class(k);
                        (c.read.as_mut())
                            .map_or(0, |b| b.receive(Duration::ZERO, 64, h).unwrap_or(0))
                    })
                }
            };
        }
        if got > 0 {
            last_rx = Instant::now();
        }
    }
}

/// What the receive thread reads.
#[derive(Clone, Copy, Debug)]
enum Source {
    /// One of the daemon's datapaths (by index).
    Datapath(usize),
    /// The socket of a free class of the fast path (by class).
    Class(usize),
    /// [`FastPath::bell`].
    Bell,
}

/// A receive of up to 64 packets from one source, handing each to the closure it is
/// given; how many.
type Take<'a> = dyn FnMut(&mut dyn FnMut(Received<'_>)) -> usize + 'a;

/// Takes what one source received (`take`) until it has nothing left, switching each
/// packet to the process whose QPN it is (or by QP 1's rules); how many frames.
fn receive_from(d: &Daemon, woken: &mut Vec<Arc<Client>>, take: &mut Take<'_>) -> usize {
    let mut total = 0;
    loop {
        // Locks in the one order every thread takes them: clients, switch, datapath
        // (`take` takes its source's).
        let clients = d.clients.read().unwrap_or_else(|e| e.into_inner());
        let switch = d.switch.read().unwrap_or_else(|e| e.into_inner());
        let n = take(&mut |r| {
            d.stats.rx.fetch_add(1, Ordering::Relaxed);
            let (dst, roce, header, data) = match r {
                Received::Frame(f) => match locate(f) {
                    Some((dst, at)) => (dst, &f[at..], SlotHeader::Frame, f),
                    None => {
                        d.stats.rx_unrouted.fetch_add(1, Ordering::Relaxed);
                        return;
                    }
                },
                Received::Datagram { datagram, roce } => (
                    datagram.dst(),
                    roce,
                    SlotHeader::Datagram {
                        datagram: *datagram,
                        dst_mac: [0; 6],
                    },
                    roce,
                ),
            };
            match switch.route(dst, roce).and_then(|c| clients.get(&c)) {
                Some(c) => {
                    if c.deliver(&d.stats, &header, data) && !woken.iter().any(|w| w.id == c.id) {
                        woken.push(c.clone());
                    }
                }
                None => {
                    d.stats.rx_unrouted.fetch_add(1, Ordering::Relaxed);
                }
            }
        });
        drop((switch, clients));
        for c in woken.drain(..) {
            c.wake();
        }
        if n == 0 {
            break total;
        }
        total += n;
    }
}

/// The processes send thread `k` of `threads` serves.
fn clients_of(d: &Daemon, k: usize, threads: usize) -> Vec<Arc<Client>> {
    d.clients
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .values()
        .filter(|c| c.id as usize % threads == k)
        .cloned()
        .collect()
}

/// Takes the sends of the processes whose id is `k` modulo `threads`.
fn send_loop(
    d: &Daemon,
    k: usize,
    threads: usize,
    spin: Duration,
    epoll: &OwnedFd,
    wake: &OwnedFd,
) {
    let mut last_work = Instant::now();
    let mut mine: Vec<Arc<Client>> = Vec::new();
    let mut seen = u64::MAX;
    let mut buf = vec![0u8; uroce::datapath::MAX_FRAME];
    let mut woken: Vec<Arc<Client>> = Vec::new();
    let mut events = [libc::epoll_event { events: 0, u64: 0 }; 32];
    while !d.stop.load(Ordering::Relaxed) {
        let g = d.generation.load(Ordering::Acquire);
        if g != seen {
            seen = g;
            mine = clients_of(d, k, threads);
        }
        let mut work = 0;
        for c in &mine {
            let n = drain(d, c, &mut buf, &mut woken);
            if n > 0 && c.left.load(Ordering::Acquire) {
                c.taken_since_left.fetch_add(n, Ordering::Relaxed);
            }
            work += n;
        }
        for c in woken.drain(..) {
            c.wake();
        }
        retire_left(d, &mine);
        if work > 0 {
            last_work = Instant::now();
            continue;
        }
        if !spin.is_zero() && last_work.elapsed() < spin {
            std::hint::spin_loop();
            continue;
        }
        let mut all_empty = true;
        for c in &mine {
            match c.region.ring(Dir::ToDaemon).prepare_sleep() {
                Ok(true) => {}
                Ok(false) => all_empty = false,
                Err(_) => c.cut(),
            }
        }
        if !all_empty {
            continue;
        }
        // SAFETY: an epoll descriptor and an array of events of the given length.
        let n = unsafe {
            libc::epoll_wait(
                epoll.as_raw_fd(),
                events.as_mut_ptr(),
                events.len() as i32,
                100,
            )
        };
        for ev in events.iter().take(n.max(0) as usize) {
            let id = ev.u64;
            if id == u64::MAX {
                proto::drain(wake.as_raw_fd());
            } else if let Some(c) = mine.iter().find(|c| u64::from(c.id) == id) {
                proto::drain(c.to_daemon.as_raw_fd());
            }
        }
    }
    // Stopping: what processes that left published still goes out (nothing reads their
    // rings after this).
    for c in clients_of(d, k, threads) {
        while c.left.load(Ordering::Acquire)
            && c.taken_since_left.load(Ordering::Relaxed) < LEFT_DRAIN_SLOTS
        {
            let n = drain(d, &c, &mut buf, &mut woken);
            if n == 0 {
                break;
            }
            c.taken_since_left.fetch_add(n, Ordering::Relaxed);
        }
    }
    for c in woken.drain(..) {
        c.wake();
    }
}

/// Most slots a send thread takes from the ring of a process that left before it
/// forgets the process anyway: twice what the ring holds, so what it published before
/// it went is taken whole however long the thread waited for a core, and a ring another
/// process keeps filling through a mapping it inherited does not keep it for ever.
const LEFT_DRAIN_SLOTS: usize = 2 * SLOTS as usize;

/// Forgets each of `mine` that left ([`Client::left`]) once its ring to the daemon is
/// empty (taken by [`drain`] first: what it published before it went still goes out,
/// the way a NIC sends what was handed to it), broken, or [`LEFT_DRAIN_SLOTS`] were
/// taken since it left: its QPNs and communication IDs go, its class of the fast path
/// is free, and its rings go when the threads let go of them.
fn retire_left(d: &Daemon, mine: &[Arc<Client>]) {
    for c in mine {
        if !c.left.load(Ordering::Acquire) {
            continue;
        }
        let empty = !matches!(c.region.ring(Dir::ToDaemon).next_slot(), Ok(Some(_)));
        let enough = c.taken_since_left.load(Ordering::Relaxed) >= LEFT_DRAIN_SLOTS;
        if !(empty || enough || c.broken.load(Ordering::Relaxed)) {
            continue;
        }
        let gone = d
            .clients
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&c.id);
        if gone.is_none() {
            continue;
        }
        d.switch
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .forget(c.id, Instant::now());
        if let Some(f) = &d.fast {
            f.release(c.id);
        }
        d.generation.fetch_add(1, Ordering::Release);
    }
}

/// Bytes at the start of a packet the switch looks at: BTH, DETH, the MAD's header and
/// the CM fields it routes by (a REQ's service ID ends at byte 60).
const CHECKED: usize = 64;

/// Takes up to 64 of a process's sends: to another of our processes (locally) or to
/// the wire. Returns how many.
///
/// A packet's first [`CHECKED`] bytes are copied out of the process's ring and checked;
/// that copy, not the ring, is what goes on, so the process cannot change what was
/// checked. The rest is copied once, straight into the datapath's buffer (or the other
/// process's ring).
fn drain(d: &Daemon, c: &Arc<Client>, buf: &mut [u8], woken: &mut Vec<Arc<Client>>) -> usize {
    if c.broken.load(Ordering::Relaxed) {
        return 0;
    }
    let ring = c.region.ring(Dir::ToDaemon);
    if matches!(ring.next_slot(), Ok(None)) {
        return 0;
    }
    // Locks in the one order every thread takes them: clients, switch, backend.
    let clients = d.clients.read().unwrap_or_else(|e| e.into_inner());
    let mut switch = d.switch.read().unwrap_or_else(|e| e.into_inner());
    let local = d.local.read().unwrap_or_else(|e| e.into_inner());
    let mut backend: Held<'_> = None;
    let mut n = 0;
    while n < 64 {
        let index = match ring.next_slot() {
            Ok(Some(i)) => i,
            Ok(None) => break,
            Err(_) => {
                c.cut();
                break;
            }
        };
        n += 1;
        let header = ring.read_header(index);
        'slot: {
            let (datagram, dst_mac, len) = match header {
                Some((
                    SlotHeader::Datagram {
                        datagram, dst_mac, ..
                    },
                    len,
                )) => (datagram, dst_mac, len),
                Some((SlotHeader::Frame, len)) => {
                    ring.copy_data(index, 0, &mut buf[..len]);
                    let frame = &buf[..len];
                    let b = match d.mac {
                        Some(m) if neighbour_request(frame, m) => {
                            datapath_for(d, &mut backend, None)
                        }
                        _ => None,
                    };
                    let Some(b) = b else {
                        d.stats.refused.fetch_add(1, Ordering::Relaxed);
                        break 'slot;
                    };
                    let mut copy = |out: &mut [u8]| {
                        (out.len() >= frame.len()).then(|| {
                            out[..frame.len()].copy_from_slice(frame);
                            frame.len()
                        })
                    };
                    if let Ok(true) = b.send_frame_with(&mut copy) {
                        d.stats.tx.fetch_add(1, Ordering::Relaxed);
                    }
                    break 'slot;
                }
                Some((SlotHeader::Misdelivered { datagram }, len)) => {
                    ring.copy_data(index, 0, &mut buf[..len]);
                    pass_on(
                        d,
                        c,
                        &clients,
                        &switch,
                        &local,
                        datagram,
                        &buf[..len],
                        woken,
                    );
                    break 'slot;
                }
                // A header that is not one.
                None => {
                    d.stats.refused.fetch_add(1, Ordering::Relaxed);
                    break 'slot;
                }
            };
            let checked = len.min(CHECKED);
            ring.copy_data(index, 0, &mut buf[..checked]);
            let head = &buf[..checked];
            let (src, dst, port) = (datagram.src(), datagram.dst(), datagram.udp.dst_port);
            let verdict = match switch.check_send_shared(c.id, src, dst, port, head, &local) {
                Some(v) => v,
                None => {
                    // The switch learns from it: written under its own lock, taken in order
                    // (what this thread holds of a datapath goes first).
                    if let Some((_, mut b)) = backend.take() {
                        let _ = b.flush();
                    }
                    drop(switch);
                    let v = d
                        .switch
                        .write()
                        .unwrap_or_else(|e| e.into_inner())
                        .check_send(c.id, src, dst, port, head, &local);
                    switch = d.switch.read().unwrap_or_else(|e| e.into_inner());
                    v
                }
            };
            if verdict.is_err() {
                d.stats.refused.fetch_add(1, Ordering::Relaxed);
                break 'slot;
            }
            if local.contains(&dst) {
                // Between two of our processes: never on the wire.
                let Some(t) = switch.route(dst, head).and_then(|t| clients.get(&t)) else {
                    d.stats.rx_unrouted.fetch_add(1, Ordering::Relaxed);
                    break 'slot;
                };
                ring.copy_data(index, checked, &mut buf[checked..len]);
                let h = SlotHeader::Datagram { datagram, dst_mac };
                d.stats.local.fetch_add(1, Ordering::Relaxed);
                if t.deliver(&d.stats, &h, &buf[..len]) && !woken.iter().any(|w| w.id == t.id) {
                    woken.push(t.clone());
                }
                break 'slot;
            }
            let Some(b) = datapath_for(d, &mut backend, Some(src)) else {
                // No datapath sends from that address (over UDP: one that could not be
                // bound).
                d.stats.refused.fetch_add(1, Ordering::Relaxed);
                break 'slot;
            };
            let t = Transmit {
                datagram,
                dst_mac,
                len,
                in_place: None,
            };
            let mut copy = |out: &mut [u8]| {
                if out.len() < len {
                    return None;
                }
                out[..checked].copy_from_slice(&buf[..checked]);
                ring.copy_data(index, checked, &mut out[checked..len]);
                Some(t)
            };
            for attempt in 0..100 {
                match b.send_with(&mut copy) {
                    Ok(true) => {
                        d.stats.tx.fetch_add(1, Ordering::Relaxed);
                        break;
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock && attempt < 99 => {
                        let _ = b.flush();
                    }
                    _ => {
                        d.stats.refused.fetch_add(1, Ordering::Relaxed);
                        break;
                    }
                }
            }
        }
        ring.release(index);
    }
    // The kernel's part (sendmmsg, the AF_XDP kick) without the tables locked.
    drop((switch, clients, local));
    if let Some((_, mut b)) = backend {
        let _ = b.flush();
    }
    n
}

/// Switches a datagram that process `c`'s socket of the fast path received for a QPN not
/// of its class ([`SlotHeader::Misdelivered`]: UDP GRO coalesced a run of one flow and
/// the kernel steered it by its first packet) as one the daemon received: to the process
/// whose QPN it is, or by QP 1's rules, when [`may_pass_on`] lets it (else refused,
/// counted).
#[allow(clippy::too_many_arguments)]
fn pass_on(
    d: &Daemon,
    c: &Client,
    clients: &HashMap<ClientId, Arc<Client>>,
    switch: &Switch,
    local: &[IpAddr],
    datagram: uroce::wire::DatagramRepr,
    roce: &[u8],
    woken: &mut Vec<Arc<Client>>,
) {
    let dst = datagram.dst();
    let dest_qp = switch::dest_qp(roce);
    let ours = local.contains(&dst) && datagram.udp.dst_port == uroce::wire::ROCEV2_UDP_PORT;
    let target = ours
        .then(|| switch.route(dst, roce))
        .flatten()
        .and_then(|t| clients.get(&t))
        .filter(|t| may_pass_on((c.id, c.uid, c.class), (t.id, t.uid), dest_qp));
    let Some(t) = target else {
        d.stats.refused.fetch_add(1, Ordering::Relaxed);
        return;
    };
    let h = SlotHeader::Datagram {
        datagram,
        dst_mac: [0; 6],
    };
    if t.deliver(&d.stats, &h, roce) {
        d.stats.passed_on.fetch_add(1, Ordering::Relaxed);
        if !woken.iter().any(|w| w.id == t.id) {
            woken.push(t.clone());
        }
    }
}

/// Whether a process (`sender`: its id, user and class of the fast path) may pass on a
/// datagram for `dest_qp` that the switch routes to `target` (its id and user). Only a
/// process whose socket coalesces (one with a class) has such datagrams, and only for
/// another class; one for QP 1 may be its own (connection management in a run of
/// another class), any other is another process's. And only to a process of its own user
/// (root: any): a datagram passed on says it came from any address, which a process
/// cannot make the kernel say for it, so it must not reach another user's processes (one
/// coalesced run that held theirs loses those packets instead, as on a congested link).
fn may_pass_on(
    sender: (ClientId, u32, Option<u32>),
    target: (ClientId, u32),
    dest_qp: Option<u32>,
) -> bool {
    let (id, uid, class) = sender;
    let (Some(class), Some(q)) = (class, dest_qp) else {
        return false;
    };
    let another_class = q >> uroce::datapath::udp::CLASS_SHIFT != class;
    let someone_else = target.0 != id || q == 1;
    another_class && someone_else && (uid == 0 || uid == target.1)
}

/// A datapath's lock as [`drain`] holds it.
type Held<'a> = Option<(usize, std::sync::MutexGuard<'a, Box<dyn Backend + Send>>)>;

/// The datapath that sends from `src` (`None`: a link-layer frame, the first), locked:
/// the one `held` holds already, or that one flushed and let go for the right one.
fn datapath_for<'a, 'h>(
    d: &'a Daemon,
    held: &'h mut Held<'a>,
    src: Option<IpAddr>,
) -> Option<&'h mut Box<dyn Backend + Send>> {
    let k = match src {
        None => 0,
        Some(ip) => d
            .datapaths
            .iter()
            .position(|dp| dp.sources.is_empty() || dp.sources.contains(&ip))?,
    };
    if held.as_ref().is_some_and(|(j, _)| *j != k) {
        if let Some((_, mut b)) = held.take() {
            let _ = b.flush();
        }
    }
    let (_, b) = held.get_or_insert_with(|| {
        (
            k,
            d.datapaths[k]
                .backend
                .lock()
                .unwrap_or_else(|e| e.into_inner()),
        )
    });
    Some(b)
}

/// Takes the open-files limit up to its hard limit: each process attached holds four of
/// the daemon's descriptors (its socket, memfd and two eventfds), and the usual soft
/// limit of 1024 would stop at about 250 processes.
fn raise_open_files() {
    // SAFETY: getrlimit / setrlimit on a local struct.
    unsafe {
        let mut r: libc::rlimit = std::mem::zeroed();
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) == 0 && r.rlim_cur < r.rlim_max {
            r.rlim_cur = r.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &r);
        }
    }
}

/// Connections the daemon serves at once (each a process's rings and descriptors); one
/// more is refused with EAGAIN, so a flood of connections cannot take the daemon's
/// descriptors.
const MAX_PROCESSES: usize = 4096;

/// A connection on the control socket.
struct Conn {
    fd: OwnedFd,
    cred: libc::ucred,
    client: Option<ClientId>,
}

fn allowed(args: &Args, cred: &libc::ucred) -> bool {
    // SAFETY: geteuid cannot fail.
    let me = unsafe { libc::geteuid() };
    cred.uid == 0 || cred.uid == me || args.allow_uid.contains(&cred.uid)
}

fn control_loop(
    d: &Arc<Daemon>,
    args: &Args,
    listener: RawFd,
    senders: &[(Arc<OwnedFd>, Arc<OwnedFd>)],
) -> anyhow::Result<()> {
    let mut conns: Vec<Conn> = Vec::new();
    let mut next_id: ClientId = 1;
    let mut last_seen = Instant::now();
    let mut last_refresh = Instant::now();
    loop {
        if uroce::datapath::interrupted() {
            eprintln!(
                "uroce daemon {}: stopping; {}",
                args.iface,
                stats_line(&d.stats)
            );
            return Ok(());
        }
        if let Some(l) = args.linger {
            // Processes that left count until their sends are taken.
            let none = conns.is_empty()
                && (d.clients.read().unwrap_or_else(|e| e.into_inner())).is_empty();
            if none && last_seen.elapsed() >= Duration::from_secs(l) {
                return Ok(());
            }
        }
        if last_refresh.elapsed() >= Duration::from_secs(1) {
            last_refresh = Instant::now();
            if let Ok((addrs, _, _)) = interface(&args.iface) {
                *d.local.write().unwrap_or_else(|e| e.into_inner()) = addrs;
            }
        }
        let mut p: Vec<libc::pollfd> = std::iter::once(listener)
            .chain(conns.iter().map(|c| c.fd.as_raw_fd()))
            .map(|fd| libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            })
            .collect();
        // SAFETY: an array of pollfds of the given length.
        unsafe { libc::poll(p.as_mut_ptr(), p.len() as libc::nfds_t, 200) };
        if p[0].revents & libc::POLLIN != 0 {
            if let Ok(fd) = proto::accept(listener) {
                let full = conns.len() >= MAX_PROCESSES;
                match proto::peer_cred(fd.as_raw_fd()) {
                    Ok(cred) if allowed(args, &cred) && !full => conns.push(Conn {
                        fd,
                        cred,
                        client: None,
                    }),
                    // Refused: said once, then the connection closes.
                    _ => {
                        let why = if full { libc::EAGAIN } else { libc::EACCES };
                        let _ = proto::send(fd.as_raw_fd(), &Reply::Err(why).encode(), &[]);
                        // Nothing more comes in, and what came (its hello) is read: a
                        // socket closed with unread messages resets its peer, whose
                        // ECONNRESET would then take the place of our answer.
                        // SAFETY: shutdown on a socket we own.
                        unsafe { libc::shutdown(fd.as_raw_fd(), libc::SHUT_RD) };
                        while let Ok(Some(_)) = proto::recv(fd.as_raw_fd(), libc::MSG_DONTWAIT) {}
                    }
                }
            }
        }
        let mut gone = Vec::new();
        for (i, pfd) in p.iter().enumerate().skip(1) {
            if pfd.revents == 0 {
                continue;
            }
            let conn = &mut conns[i - 1];
            match proto::recv(conn.fd.as_raw_fd(), libc::MSG_DONTWAIT) {
                Ok(Some((msg, _fds))) => {
                    // Descriptors a process sends are dropped (closed) here.
                    let reply = match Request::decode(&msg) {
                        Some(req) => handle(d, args, conn, req, &mut next_id, senders),
                        None => Err(libc::EPROTO),
                    };
                    let sent = match reply {
                        Ok((r, fds)) => proto::send(conn.fd.as_raw_fd(), &r.encode(), &fds),
                        Err(errno) => {
                            proto::send(conn.fd.as_raw_fd(), &Reply::Err(errno).encode(), &[])
                        }
                    };
                    if sent.is_err() {
                        gone.push(i - 1);
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                _ => gone.push(i - 1),
            }
        }
        for i in gone.into_iter().rev() {
            let conn = conns.swap_remove(i);
            // What it published before it went is still sent (a program may exit as soon
            // as its last send completes, or hold other processes' packets its socket
            // took): the send thread serving it takes its ring, then forgets it.
            let left = conn.client.and_then(|id| {
                let clients = d.clients.read().unwrap_or_else(|e| e.into_inner());
                clients.get(&id).cloned()
            });
            if let Some(c) = left {
                d.switch
                    .write()
                    .unwrap_or_else(|e| e.into_inner())
                    .stop_listening(c.id);
                c.left.store(true, Ordering::Release);
                proto::ring(senders[c.id as usize % senders.len()].1.as_raw_fd());
            }
        }
        if !conns.is_empty() {
            last_seen = Instant::now();
        }
    }
}

fn handle(
    d: &Arc<Daemon>,
    args: &Args,
    conn: &mut Conn,
    req: Request,
    next_id: &mut ClientId,
    senders: &[(Arc<OwnedFd>, Arc<OwnedFd>)],
) -> Result<(Reply, Vec<RawFd>), i32> {
    match (req, conn.client) {
        (Request::Hello { version }, None) => {
            if version != proto::VERSION {
                return Err(libc::EPROTO);
            }
            let id = *next_id;
            *next_id += 1;
            let region = Region::create(&format!("uroce-{}-{}", args.iface, conn.cred.pid))
                .map_err(errno)?;
            let to_daemon = proto::eventfd().map_err(errno)?;
            let to_process = proto::eventfd().map_err(errno)?;
            let (epoll, wake) = &senders[id as usize % senders.len()];
            epoll_add(epoll.as_raw_fd(), to_daemon.as_raw_fd(), u64::from(id)).map_err(errno)?;
            let fds = vec![
                region.fd().as_raw_fd(),
                to_daemon.as_raw_fd(),
                to_process.as_raw_fd(),
            ];
            let control = conn.fd.try_clone().map_err(errno)?;
            // The fast path's socket, taken once nothing can fail any more (a class goes
            // back when the client it was given to has left and is forgotten).
            let fast = d.fast.as_ref().and_then(|f| f.take(id));
            let client = Arc::new(Client {
                id,
                uid: conn.cred.uid,
                class: fast.map(|(k, _)| u32::from(k)),
                region,
                to_daemon,
                to_process,
                control,
                rx_lock: Mutex::new(()),
                broken: AtomicBool::new(false),
                left: AtomicBool::new(false),
                taken_since_left: AtomicUsize::new(0),
            });
            d.clients
                .write()
                .unwrap_or_else(|e| e.into_inner())
                .insert(id, client);
            d.generation.fetch_add(1, Ordering::Release);
            proto::ring(wake.as_raw_fd());
            conn.client = Some(id);
            let mut fds = fds;
            let (fast_class, fast_addr) = match fast {
                Some((k, fd)) => {
                    fds.push(fd);
                    (k, d.fast.as_ref().map(|f| f.addr).expect("fast"))
                }
                None => (0, IpAddr::V6(std::net::Ipv6Addr::UNSPECIFIED)),
            };
            Ok((
                Reply::Welcome {
                    client: id,
                    needs_link_addresses: d.needs_link,
                    serves_link_local: d.link_local,
                    rx_capacity: d.rx_capacity,
                    fast_class,
                    fast_addr,
                    fast_netns: proto::netns_id().unwrap_or(0),
                },
                fds,
            ))
        }
        (Request::ClaimQpns { count }, Some(id)) => {
            // With the fast path, a process's QPNs are of its socket's class (the kernel
            // steers by them); those of a process without one, of class 0 (the daemon's
            // socket, then its ring).
            let class = d.fast.as_ref().map(|_| {
                let clients = d.clients.read().unwrap_or_else(|e| e.into_inner());
                clients.get(&id).and_then(|c| c.class).unwrap_or(0)
            });
            let mut s = d.switch.write().unwrap_or_else(|e| e.into_inner());
            s.claim_qpns_in_class(id, count, class, Instant::now())
                .map(|(first, count)| (Reply::Qpns { first, count }, Vec::new()))
                .ok_or(libc::ENOSPC)
        }
        (Request::Listen { service_id, ip, on }, Some(id)) => d
            .switch
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .listen(id, service_id, ip, on)
            .map(|()| (Reply::Ok, Vec::new())),
        _ => Err(libc::EPROTO),
    }
}

fn errno(e: std::io::Error) -> i32 {
    e.raw_os_error().unwrap_or(libc::EIO)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A datagram passed on comes from a process with a class, is for another class (or
    /// QP 1, its own too), and goes to a process of the sender's user unless the sender
    /// is root.
    #[test]
    fn only_a_coalescing_process_passes_on_and_only_to_its_own_user() {
        let k = 3u32;
        let other = (5 << uroce::datapath::udp::CLASS_SHIFT) | 0x40;
        let mine = (k << uroce::datapath::udp::CLASS_SHIFT) | 0x40;
        let user = |id, uid| (id, uid, Some(k));
        let cases = [
            (
                user(1, 1000),
                (2, 1000),
                Some(other),
                true,
                "to its user's process",
            ),
            (user(1, 0), (2, 1000), Some(other), true, "root: to anyone"),
            (
                user(1, 1000),
                (2, 1001),
                Some(other),
                false,
                "another user's process",
            ),
            (user(1, 1000), (2, 0), Some(other), false, "root's process"),
            (
                (1, 1000, None),
                (2, 1000),
                Some(other),
                false,
                "no class: never coalesced",
            ),
            (user(1, 1000), (2, 1000), Some(mine), false, "its own class"),
            (
                user(1, 1000),
                (1, 1000),
                Some(other),
                false,
                "back to itself",
            ),
            (
                user(1, 1000),
                (1, 1000),
                Some(1),
                true,
                "QP 1's, its own CM",
            ),
            (user(1, 1000), (2, 1000), None, false, "no BTH"),
        ];
        for (sender, target, q, want, why) in cases {
            assert_eq!(may_pass_on(sender, target, q), want, "{why}");
        }
    }

    #[test]
    fn frames_are_located_by_their_headers() {
        let mut f = vec![0u8; 14 + 20 + 8 + 12];
        f[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
        f[14] = 0x45;
        f[14 + 9] = 17;
        f[14 + 16..14 + 20].copy_from_slice(&[10, 0, 0, 2]);
        f[34 + 2..34 + 4].copy_from_slice(&4791u16.to_be_bytes());
        assert_eq!(locate(&f), Some(("10.0.0.2".parse().unwrap(), 42)));
        f[34 + 2..34 + 4].copy_from_slice(&53u16.to_be_bytes());
        assert_eq!(locate(&f), None, "not RoCEv2");
        assert_eq!(locate(&f[..20]), None, "short");
    }
}
