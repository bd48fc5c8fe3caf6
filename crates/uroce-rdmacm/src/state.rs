//! What the library holds for the whole process: the devices (each an open ibverbs
//! context with its QP 1 and a `uroce::cm::CmEndpoint`), the `rdma_cm_id`s, the event
//! channels and the events handed out; and the CM thread that moves MADs and runs the
//! CM's timers, as the kernel's `rdma_cm` and `ib_cm` do for Debian's librdmacm.
//!
//! One mutex guards it all. MADs are sent after it is released (finding a peer's MAC may
//! take an ARP exchange), by whoever made them: an API call or the CM thread.

#![deny(unsafe_code)]

use std::collections::{HashMap, VecDeque};
use std::ffi::c_int;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use uroce::cm::{CmConfig, CmEndpoint, CmId, OutMad};
use uroce::verbs::Mtu;

use crate::abi::{ibv_sa_path_rec, rdma_cm_event, rdma_cm_id, rdma_event_channel};
use crate::ffi::CBox;
use crate::verbs::verbs;
use crate::verbs_abi::ibv_context;

/// An open uroce device as the CM uses it.
pub(crate) struct Device {
    pub ctx: *mut ibv_context,
    /// The address the context sends from (its QPs' source GID).
    pub ip: IpAddr,
    /// That address's index in the GID table.
    pub sgid_index: u8,
    /// The port's active MTU: the path MTU of connections made here (rdma_cm over RoCE
    /// takes the netdev's MTU).
    pub mtu: Mtu,
    /// `max_qp_rd_atom`: the most READ / atomic requests a QP takes each way.
    pub max_rd_atomic: u8,
    /// The device's own PD, allocated at the first id on the device: an id's `pd` until
    /// the program gives its own (librdmacm's per-device PD, what `rdma_create_ep` and
    /// `rdma_reg_msgs` use when the program passes none).
    pub pd: *mut crate::verbs_abi::ibv_pd,
    /// QP 1's descriptor (readable while MADs wait), once opened.
    pub gsi_fd: Option<RawFd>,
    pub cm: CmEndpoint,
    /// The CM's connections and SIDR exchanges → the `rdma_cm_id` (its address).
    pub by_cm: HashMap<u32, usize>,
}

/// Where an id is in its life (`rdma_cm`'s `cma_state`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    Idle,
    Bound,
    /// `rdma_resolve_addr` is finding the peer's MAC (a thread of its own).
    AddrQuery,
    AddrResolved,
    RouteResolved,
    Listening,
    /// A REQ / SIDR_REQ sent (active) or received and not answered yet (passive).
    Connecting,
    Connected,
    Disconnected,
}

/// An `rdma_cm_id` and what the library knows of it.
pub(crate) struct Id {
    /// The C object (its address is the program's `rdma_cm_id *`; freed with the `Id`, by
    /// `rdma_destroy_id`).
    pub obj: CBox<IdBox>,
    pub ps: c_int,
    pub channel: usize,
    /// The id made its own channel (`rdma_create_id` without one: synchronous calls).
    pub sync: bool,
    pub dev: Option<usize>,
    pub src: Option<SocketAddr>,
    pub dst: Option<SocketAddr>,
    pub phase: Phase,
    pub cm: Option<CmId>,
    /// For a passive id, the listener it came from.
    pub listener: Option<usize>,
    /// RDMA_OPTION_ID_TOS.
    pub tos: u8,
    /// RDMA_OPTION_ID_ACK_TIMEOUT.
    pub ack_timeout: Option<u8>,
    /// RDMA_OPTION_ID_REUSEADDR.
    pub reuseaddr: bool,
    /// RDMA_OPTION_ID_AFONLY.
    pub afonly: bool,
    /// CQs and channels `rdma_create_qp` made (destroyed with the QP).
    pub own_cqs: bool,
    /// The QP init attributes `rdma_create_ep` kept for `rdma_get_request`.
    pub ep_qp_init: Option<Box<crate::verbs_abi::ibv_qp_init_attr>>,
    /// The Starting PSN of this side's REQ or REP (where its QP's receive queue starts),
    /// chosen when the connection starts (`rdma_connect`, or the REQ's arrival on the
    /// passive side, so that a program that brings its QP to RTR with
    /// `rdma_init_qp_attr` before `rdma_accept` gets the PSN the REP will carry).
    pub psn: u32,
    /// Passive side: what the REQ said, for the accept.
    pub req: Option<Box<uroce::cm::ConnectRequest>>,
}

/// The C `rdma_cm_id` and the path record its route points at.
#[repr(C)]
pub struct IdBox {
    pub id: rdma_cm_id,
    pub path: ibv_sa_path_rec,
}

/// An event channel: its eventfd (a semaphore: one count per event queued, or dropped
/// after it was counted) and the events not taken yet.
pub(crate) struct Channel {
    /// The C object (its address is the program's `rdma_event_channel *`), held to be
    /// freed with the channel.
    #[allow(dead_code)]
    pub obj: CBox<rdma_event_channel>,
    pub fd: OwnedFd,
    pub queue: VecDeque<CBox<EventBox>>,
    /// Counts in the fd whose events were dropped (their id destroyed or moved): taken
    /// by `rdma_get_cm_event` without an event. The fd is never read under the lock
    /// (a blocking read there could wait for ever while another thread took the count).
    pub stale: usize,
}

/// The C `rdma_cm_event` and the private data its parameters point at.
#[repr(C)]
pub struct EventBox {
    pub ev: rdma_cm_event,
    pub private_data: [u8; 256],
}

/// The whole state.
pub(crate) struct State {
    /// The devices, opened at the first call that needs one.
    pub devices: Option<Vec<Device>>,
    pub ids: HashMap<usize, Id>,
    pub channels: HashMap<usize, Channel>,
    /// Events handed out and not acknowledged, by address.
    pub outstanding: HashMap<usize, CBox<EventBox>>,
    /// Next value of the generator of PSNs and ports.
    rng: u64,
    /// The CM thread runs.
    thread: bool,
    /// While the CM thread handles what arrived: the events it made, each with its
    /// channel, queued only once the MADs that answer what arrived are sent (a DREP must
    /// leave before the program, told it is disconnected, may exit).
    pub deferred: Option<Vec<(usize, CBox<EventBox>)>>,
    /// The process whose state this is ([`lock`] starts afresh in a forked child).
    pub pid: u32,
}

/// The CM thread's wake-up eventfd (this process's: a child of a fork makes its own, as
/// it runs a CM thread of its own).
fn wake_fd() -> RawFd {
    static WAKE: Mutex<Option<(u32, RawFd)>> = Mutex::new(None);
    let mut w = WAKE.lock().unwrap_or_else(|e| e.into_inner());
    let me = std::process::id();
    match *w {
        Some((pid, fd)) if pid == me => fd,
        _ => {
            // The parent's stays open (its CM thread is the parent's).
            let fd = eventfd(libc::EFD_NONBLOCK).expect("eventfd");
            let raw = fd.as_raw_fd();
            std::mem::forget(fd);
            *w = Some((me, raw));
            raw
        }
    }
}

pub(crate) use crate::ffi::{eventfd, signal, take_one};

static STATE: Mutex<Option<State>> = Mutex::new(None);

/// Held by the CM thread from the moment it releases the state's lock with MADs to send
/// until they are sent: what it did under the lock (a phase set to Disconnected, say)
/// may let the program return from a call and exit before the MAD that goes with it (the
/// DREP) has left. The calls that end a connection wait for it ([`sends_done`]).
static SENDING: Mutex<()> = Mutex::new(());

/// Waits until the MADs the CM thread has taken are sent.
pub(crate) fn sends_done() {
    drop(SENDING.lock().unwrap_or_else(|e| e.into_inner()));
}

/// A locked state.
pub(crate) struct Guard(MutexGuard<'static, Option<State>>);

impl std::ops::Deref for Guard {
    type Target = State;
    fn deref(&self) -> &State {
        self.0.as_ref().expect("initialised by lock()")
    }
}

impl std::ops::DerefMut for Guard {
    fn deref_mut(&mut self) -> &mut State {
        self.0.as_mut().expect("initialised by lock()")
    }
}

/// The state, locked (created at the first call).
pub(crate) fn lock() -> Guard {
    let mut g = STATE.lock().unwrap_or_else(|e| e.into_inner());
    if g.as_ref().is_some_and(|s| s.pid != std::process::id()) {
        // A child of a fork (Python's multiprocessing, a server forking per client): the
        // state is the parent's, its CM thread is not running here and its devices'
        // contexts are the parent's. Start afresh; what the parent's state holds is
        // forgotten, not dropped (dropping would close the parent's contexts).
        if let Some(old) = g.take() {
            std::mem::forget(old);
        }
    }
    if g.is_none() {
        let seed = run_seed();
        *g = Some(State {
            devices: None,
            ids: HashMap::new(),
            channels: HashMap::new(),
            outstanding: HashMap::new(),
            rng: seed | 1,
            thread: false,
            deferred: None,
            pid: std::process::id(),
        });
    }
    Guard(g)
}

/// The GID of an address (IPv4-mapped for IPv4).
pub(crate) fn gid_of(ip: IpAddr) -> [u8; 16] {
    match ip {
        IpAddr::V4(v) => v.to_ipv6_mapped().octets(),
        IpAddr::V6(v) => v.octets(),
    }
}

/// The address of a GID.
pub(crate) fn ip_of_gid(raw: [u8; 16]) -> IpAddr {
    let v6 = Ipv6Addr::from(raw);
    v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4)
}

/// Opens every uroce device (what `ibv_get_device_list` lists) with the address its
/// context sends from: the first IPv4 address in its GID table, else the first that is
/// not link-local.
fn open_devices() -> Result<Vec<Device>, c_int> {
    let v = verbs()?;
    let list = v.device_list();
    if list.is_empty() {
        return Err(libc::ENODEV);
    }
    let mut out = Vec::new();
    for dev in list {
        let ctx = v.open_device(dev);
        if ctx.is_null() {
            continue;
        }
        let mut gids = Vec::new();
        for index in 0..16u8 {
            let Some(raw) = v.query_gid(ctx, c_int::from(index)) else {
                break;
            };
            if raw != [0; 16] {
                gids.push((index, ip_of_gid(raw)));
            }
        }
        let pick = gids
            .iter()
            .find(|(_, ip)| ip.is_ipv4())
            .or_else(|| {
                gids.iter().find(|(_, ip)| match ip {
                    IpAddr::V6(v) => (v.segments()[0] & 0xffc0) != 0xfe80,
                    IpAddr::V4(_) => true,
                })
            })
            .copied();
        let Some((sgid_index, ip)) = pick else {
            continue;
        };
        let mtu = match v.query_port(ctx).map(|p| p.active_mtu) {
            Some(1) => Mtu::M256,
            Some(2) => Mtu::M512,
            Some(4) => Mtu::M2048,
            Some(5) => Mtu::M4096,
            _ => Mtu::M1024,
        };
        let (guid, max_rd) = match v.query_device(ctx) {
            Some(attr) => (
                u64::from_be(attr.node_guid),
                u8::try_from(attr.max_qp_rd_atom).unwrap_or(u8::MAX),
            ),
            None => (0, 16),
        };
        let seed = run_seed() ^ guid;
        out.push(Device {
            ctx,
            ip,
            sgid_index,
            mtu,
            max_rd_atomic: max_rd,
            pd: std::ptr::null_mut(),
            gsi_fd: None,
            cm: CmEndpoint::new(CmConfig::new(ip, guid, seed)),
            by_cm: HashMap::new(),
        });
    }
    Ok(out)
}

/// A seed distinct per process and run (the clock and the process id): of the PSN and
/// port generator, and of each CM's communication IDs (IBTA §12.9.8.3.1).
fn run_seed() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
        .wrapping_mul(0x9e37_79b9_7f4a_7c15)
        ^ u64::from(std::process::id())
}

impl State {
    /// The id of key `k`; EINVAL when there is none (not one of ours, or destroyed).
    pub(crate) fn id(&self, k: usize) -> Result<&Id, c_int> {
        self.ids.get(&k).ok_or(libc::EINVAL)
    }

    /// [`State::id`], to change it.
    pub(crate) fn id_mut(&mut self, k: usize) -> Result<&mut Id, c_int> {
        self.ids.get_mut(&k).ok_or(libc::EINVAL)
    }

    /// Open device `d`; ENODEV when the devices are not open or there is no such one.
    pub(crate) fn dev(&self, d: usize) -> Result<&Device, c_int> {
        self.devices
            .as_ref()
            .and_then(|v| v.get(d))
            .ok_or(libc::ENODEV)
    }

    /// [`State::dev`], to change it.
    pub(crate) fn dev_mut(&mut self, d: usize) -> Result<&mut Device, c_int> {
        self.devices
            .as_mut()
            .and_then(|v| v.get_mut(d))
            .ok_or(libc::ENODEV)
    }

    /// The devices, opened now if they are not yet.
    pub fn devices(&mut self) -> Result<&mut Vec<Device>, c_int> {
        if self.devices.is_none() {
            self.devices = Some(open_devices()?);
        }
        self.devices.as_mut().ok_or(libc::ENODEV)
    }

    /// The device an id with source `ip` uses: the one whose context sends from `ip`;
    /// EADDRNOTAVAIL when none does. For a loopback address (127.0.0.0/8, ::1), which
    /// only an address resolution gives a device (a bind takes it as the wildcard), the
    /// kernel's choice (`cma_bind_loopback`): the first device with an active port, else
    /// the first device; the id keeps the loopback address as its source, and its GIDs
    /// are the device's ([`State::wire_ip`]).
    pub fn device_of(&mut self, ip: IpAddr) -> Result<usize, c_int> {
        let devs = self.devices()?;
        if ip.is_loopback() {
            let v = verbs()?;
            let active = devs.iter().position(|d| {
                v.query_port(d.ctx)
                    .is_some_and(|p| p.state == crate::verbs_abi::IBV_PORT_ACTIVE)
            });
            return active
                .or((!devs.is_empty()).then_some(0))
                .ok_or(libc::ENODEV);
        }
        devs.iter()
            .position(|d| d.ip == ip)
            .ok_or(libc::EADDRNOTAVAIL)
    }

    /// The address packets for `ip` go to from device `d`: `ip` itself, or for a
    /// loopback address the device's own (the kernel's loopback resolution makes the
    /// destination GID the source GID, `cma_resolve_loopback`).
    pub fn wire_ip(&self, d: usize, ip: IpAddr) -> IpAddr {
        match self.dev(d) {
            Ok(dev) if ip.is_loopback() => dev.ip,
            _ => ip,
        }
    }

    /// Puts device `d` into the C id of id `k`: its context, port 1 and the device's PD.
    pub fn attach(&mut self, k: usize, d: usize) {
        let Ok(v) = verbs() else { return };
        let Some(dev) = self.devices.as_mut().and_then(|v| v.get_mut(d)) else {
            return;
        };
        if dev.pd.is_null() {
            dev.pd = v.alloc_pd(dev.ctx);
        }
        let (ctx, pd) = (dev.ctx, dev.pd);
        let Some(x) = self.ids.get_mut(&k) else {
            return;
        };
        let id = &mut x.obj.id;
        id.verbs = ctx;
        id.port_num = 1;
        if id.pd.is_null() {
            id.pd = pd;
        }
    }

    /// Opens QP 1 of device `d` and starts the CM thread.
    pub fn open_gsi(&mut self, d: usize) -> Result<(), c_int> {
        let v = verbs()?;
        let dev = &mut self.devices()?[d];
        if dev.gsi_fd.is_none() {
            let fd = v.gsi_open(dev.ctx);
            if fd < 0 {
                return Err(-fd);
            }
            dev.gsi_fd = Some(fd);
        }
        if !self.thread {
            crate::ffi::quiet::spawn("uroce-rdmacm".into(), cm_thread)
                .map_err(|e| e.raw_os_error().unwrap_or(libc::EAGAIN))?;
            self.thread = true;
        }
        signal(wake_fd());
        Ok(())
    }

    /// A random number (xorshift64*).
    pub fn random(&mut self) -> u64 {
        let mut x = self.rng;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.rng = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// The MADs every CM has to send, with the context to send them from.
    pub fn take_transmits(&mut self) -> Vec<(*mut ibv_context, OutMad)> {
        let mut out = Vec::new();
        if let Some(devs) = self.devices.as_mut() {
            for d in devs.iter_mut() {
                while let Some(m) = d.cm.poll_transmit() {
                    out.push((d.ctx, m));
                }
            }
        }
        out
    }
}

/// Sends MADs (without the state's lock: finding a MAC may take an ARP exchange), then
/// wakes the CM thread (its timers may have moved). A MAD that cannot be sent is as one
/// lost on the wire: the CM sends it again.
pub(crate) fn send(out: Vec<(*mut ibv_context, OutMad)>) {
    send_quiet(out);
    signal(wake_fd());
}

/// Ends a call that may have made MADs: releases the lock, then sends them.
pub(crate) fn finish(mut g: Guard) {
    let out = g.take_transmits();
    drop(g);
    send(out);
}

/// The CM thread: waits on every device's QP 1 and the CM timers, hands MADs to the
/// CMs and turns their events into `rdma_cm` events.
fn cm_thread() {
    let mut buf = [0u8; 256];
    loop {
        let (fds, timeout) = {
            let mut g = lock();
            let now = Instant::now();
            g.deferred = Some(Vec::new());
            receive_all(&mut g, now, &mut buf);
            crate::events::process(&mut g);
            let devs = g.devices.as_ref();
            let fds: Vec<RawFd> = devs
                .map(|d| d.iter().filter_map(|d| d.gsi_fd).collect())
                .unwrap_or_default();
            let next = devs.and_then(|d| d.iter().filter_map(|d| d.cm.poll_timeout()).min());
            let out = g.take_transmits();
            let ready = g.deferred.take().unwrap_or_default();
            let sending = SENDING.lock().unwrap_or_else(|e| e.into_inner());
            drop(g);
            send_quiet(out);
            // The events go to the program only now that their answers are sent (to
            // the ids and channels that still exist).
            if !ready.is_empty() {
                let mut g = lock();
                for (chan, e) in ready {
                    crate::events::deliver(&mut g, chan, e);
                }
                let out = g.take_transmits();
                drop(g);
                send_quiet(out);
            }
            drop(sending);
            let timeout = next.map_or(Duration::from_millis(1000), |t| {
                t.saturating_duration_since(Instant::now())
                    .min(Duration::from_millis(1000))
            });
            (fds, timeout)
        };
        let mut pfds: Vec<libc::pollfd> = std::iter::once(wake_fd())
            .chain(fds)
            .map(|fd| libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            })
            .collect();
        let _ = uroce::datapath::wait::poll(&mut pfds, timeout);
        for p in &pfds {
            if p.revents != 0 {
                crate::ffi::drain(p.fd);
            }
        }
    }
}

/// Sends MADs without waking the CM thread (it is the caller).
fn send_quiet(out: Vec<(*mut ibv_context, OutMad)>) {
    if out.is_empty() {
        return;
    }
    let Ok(v) = verbs() else { return };
    for (ctx, m) in out {
        let gid = gid_of(m.to);
        let _ = v.gsi_send(ctx, &gid, m.remote_qpn, m.qkey, &m.mad);
    }
}

/// Hands every MAD waiting at a QP 1 to its CM, and runs due CM timers.
fn receive_all(g: &mut State, now: Instant, buf: &mut [u8; 256]) {
    let Ok(v) = verbs() else { return };
    let Some(devs) = g.devices.as_mut() else {
        return;
    };
    for d in devs.iter_mut() {
        if d.gsi_fd.is_none() {
            continue;
        }
        loop {
            let mut gid = [0u8; 16];
            let mut src_qp = 0u32;
            let n = v.gsi_recv(d.ctx, &mut gid, &mut src_qp, buf);
            if n <= 0 {
                break;
            }
            d.cm.handle_mad(now, ip_of_gid(gid), src_qp, &buf[..n as usize]);
        }
        if d.cm.poll_timeout().is_some_and(|t| t <= now) {
            d.cm.handle_timeout(now);
        }
    }
}

/// The CM response timeout (5-bit code, 4.096 µs × 2^code) and retry count of the REQs and
/// SIDR_REQs this library sends: the kernel rdma_cm's `CMA_CM_RESPONSE_TIMEOUT` (20,
/// 4.3 s) and `CMA_MAX_CM_RETRIES` (15) unless `UROCE_CM_RESPONSE_TIMEOUT` /
/// `UROCE_CM_RETRIES` say otherwise (a peer that vanished mid-handshake is then reported
/// sooner than the kernel's minute and more); out-of-range values are clamped.
pub(crate) fn cm_timing() -> (u8, u8) {
    static T: OnceLock<(u8, u8)> = OnceLock::new();
    *T.get_or_init(|| {
        let var = |name: &str, default: u8, max: u8| {
            std::env::var(name)
                .ok()
                .and_then(|v| v.trim().parse::<u8>().ok())
                .map_or(default, |v| v.min(max))
        };
        (
            var("UROCE_CM_RESPONSE_TIMEOUT", 20, 31),
            var("UROCE_CM_RETRIES", 15, 15),
        )
    })
}
