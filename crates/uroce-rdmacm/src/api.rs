//! The `rdma_cma.h` entry points: event channels, ids, address and route resolution,
//! listen / connect / accept / reject / disconnect, events, and the QP helpers.
//!
//! Each follows what `rdma_cma.h` documents and what Debian's librdmacm with the
//! kernel's `rdma_cm` does: failures return -1 with errno (or NULL with errno), and what
//! the kernel reports later comes as an event on the id's channel. An id created
//! without a channel is synchronous, as librdmacm's: the call waits for its event and
//! leaves it in `id->event`.
//!
//! Safe code: the exported functions (`exports.rs`) turn their C arguments into values
//! here (`ffi.rs`), the C objects this library hands out are `CBox`es of the state, and
//! the libibverbs calls go through `verbs.rs`.

#![deny(unsafe_code)]

use std::ffi::{c_int, c_void};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::AsRawFd;
use std::time::Instant;

use uroce::cm::{
    ip_private_data, service_id, AcceptParams, ConnectParams, PortSpace, SidrParams,
    SidrReplyParams, Transport,
};
use uroce::verbs::QpState;

use crate::abi::*;
use crate::events::{self, push, Param};
use crate::ffi::{self, set_errno, CBox};
use crate::qp;
use crate::state::{self, finish, gid_of, lock, Channel, Guard, Id, IdBox, Phase, State};
use crate::verbs::verbs;
use crate::verbs_abi::{ibv_context, ibv_pd, ibv_qp_attr, ibv_qp_init_attr};

/// The value of a `Result<T, errno>`, or else a return of -1 with that errno from the
/// entry point (the `?` of the calls that answer -1 with errno).
macro_rules! tri {
    ($e:expr) => {
        match $e {
            Ok(v) => v,
            Err(e) => return fail(e),
        }
    };
}

/// -1 with errno `e`.
pub(crate) fn fail(e: c_int) -> c_int {
    set_errno(e);
    -1
}

/// 0, or -1 with errno.
fn ret(r: Result<(), c_int>) -> c_int {
    match r {
        Ok(()) => 0,
        Err(e) => fail(e),
    }
}

/// Writes `a` into a sockaddr_storage-sized place.
pub(crate) fn write_sockaddr(dst: &mut rdma_sockaddr, a: SocketAddr) {
    *dst = ffi::zeroed();
    match a {
        SocketAddr::V4(v) => {
            dst.sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: v.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from(*v.ip()).to_be(),
                },
                sin_zero: [0; 8],
            };
        }
        SocketAddr::V6(v) => {
            dst.sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: v.port().to_be(),
                sin6_flowinfo: v.flowinfo(),
                sin6_addr: libc::in6_addr {
                    s6_addr: v.ip().octets(),
                },
                sin6_scope_id: v.scope_id(),
            };
        }
    }
}

/// The QP type of a port space (`rdma_create_id`: TCP and IB carry RC, UDP and IPoIB
/// carry UD).
fn qp_type_of(ps: c_int) -> Option<c_int> {
    match ps {
        RDMA_PS_TCP | RDMA_PS_IB => Some(2),
        RDMA_PS_UDP | RDMA_PS_IPOIB => Some(4),
        _ => None,
    }
}

fn port_space(ps: c_int) -> PortSpace {
    match ps {
        RDMA_PS_UDP => PortSpace::Udp,
        RDMA_PS_IPOIB => PortSpace::IpoIb,
        RDMA_PS_IB => PortSpace::Ib,
        _ => PortSpace::Tcp,
    }
}

/// A new C id.
pub(crate) fn new_id_box(
    channel: *mut rdma_event_channel,
    context: *mut c_void,
    ps: c_int,
    qp_type: c_int,
) -> CBox<IdBox> {
    let mut b: CBox<IdBox> = CBox::new(ffi::zeroed());
    b.id.channel = channel;
    b.id.context = context;
    b.id.ps = ps;
    b.id.qp_type = qp_type;
    b
}

/// Fills id `i`'s route (addresses, GIDs, path record) from what the library knows.
pub(crate) fn set_route(g: &mut State, i: usize) {
    // A loopback destination is the device itself on the wire (its GID).
    let wire_dst = g
        .ids
        .get(&i)
        .and_then(|id| Some(g.wire_ip(id.dev?, id.dst?.ip())));
    let State { ids, devices, .. } = g;
    let Some(id) = ids.get_mut(&i) else { return };
    let dev = id.dev.and_then(|d| devices.as_ref().and_then(|v| v.get(d)));
    let (src, dst, phase, tos) = (id.src, id.dst, id.phase, id.tos);
    let dst_gid = wire_dst.or(dst.map(|d| d.ip())).map(gid_of);
    let b = &mut *id.obj;
    if let Some(s) = src {
        write_sockaddr(&mut b.id.route.addr.src, s);
    }
    if let Some(d) = dst {
        write_sockaddr(&mut b.id.route.addr.dst, d);
    }
    let ib = ffi::ib_addr(&mut b.id.route.addr.addr);
    if let Some(dev) = dev {
        ib.sgid.raw = gid_of(dev.ip);
    }
    if let Some(d) = dst_gid {
        ib.dgid.raw = d;
    }
    ib.pkey = 0xffff;
    if let (Some(dev), Some(d), true) = (dev, dst_gid, phase != Phase::AddrResolved) {
        let p = &mut b.path;
        p.dgid.raw = d;
        p.sgid.raw = gid_of(dev.ip);
        p.pkey = 0xffffu16.to_be();
        p.hop_limit = 64;
        p.traffic_class = tos;
        p.reversible = 1;
        p.numb_path = 1;
        p.mtu_selector = 2;
        p.mtu = uroce::cm::mtu_code(dev.mtu);
        p.rate_selector = 2;
        p.rate = 3;
        p.packet_life_time_selector = 2;
        p.packet_life_time = dev.cm.config().packet_life_time;
        b.id.route.path_rec = &mut b.path;
        b.id.route.num_paths = 1;
    }
}

/// The id at `id`, if it is one of ours.
fn id_key(g: &State, id: *mut rdma_cm_id) -> Result<usize, c_int> {
    let k = id as usize;
    if g.ids.contains_key(&k) {
        Ok(k)
    } else {
        Err(libc::EINVAL)
    }
}

/// The C id of key `k` (the program holds it and reads it; only this library writes
/// it, under the lock). EINVAL when `k` is not an id.
fn cid(g: &State, k: usize) -> Result<&rdma_cm_id, c_int> {
    Ok(&g.id(k)?.obj.id)
}

/// [`cid`], to change it.
fn cid_mut(g: &mut State, k: usize) -> Result<&mut rdma_cm_id, c_int> {
    Ok(&mut g.id_mut(k)?.obj.id)
}

// ---------------------------------------------------------------------------------
// Event channels and events.

/// A new event channel: a semaphore eventfd (one count per queued event) the program
/// may poll.
pub(crate) fn new_channel(g: &mut State) -> Result<*mut rdma_event_channel, c_int> {
    let fd = state::eventfd(libc::EFD_SEMAPHORE)
        .map_err(|e| e.raw_os_error().unwrap_or(libc::EMFILE))?;
    let obj = CBox::new(rdma_event_channel { fd: fd.as_raw_fd() });
    let p = obj.as_ptr();
    g.channels.insert(
        obj.addr(),
        Channel {
            obj,
            fd,
            queue: Default::default(),
            stale: 0,
        },
    );
    Ok(p)
}

/// `rdma_create_event_channel`: a channel whose `fd` is readable while events wait.
pub(crate) fn create_event_channel() -> *mut rdma_event_channel {
    match new_channel(&mut lock()) {
        Ok(c) => c,
        Err(e) => {
            set_errno(e);
            std::ptr::null_mut()
        }
    }
}

/// `rdma_destroy_event_channel`: the channel's events not taken yet are freed.
pub(crate) fn destroy_event_channel(channel: *mut rdma_event_channel) {
    let c = lock().channels.remove(&(channel as usize));
    // Its object and queued events are freed (outside the lock).
    drop(c);
}

/// An event taken from a channel (handed out, now outstanding).
pub(crate) struct Taken {
    pub ptr: *mut rdma_cm_event,
    pub event: rdma_cm_event_type,
    pub status: c_int,
    /// The event's id.
    pub id: *mut rdma_cm_id,
}

/// Takes the next event of `channel` (blocking unless its fd is non-blocking; EINTR
/// when a signal interrupts the wait, as librdmacm's `read(2)` fails).
pub(crate) fn get_event(channel: *mut rdma_event_channel) -> Result<Taken, c_int> {
    let fd = {
        let g = lock();
        g.channels
            .get(&(channel as usize))
            .ok_or(libc::EINVAL)?
            .fd
            .as_raw_fd()
    };
    loop {
        state::take_one(fd)?;
        let mut g = lock();
        let c = g
            .channels
            .get_mut(&(channel as usize))
            .ok_or(libc::EINVAL)?;
        match c.queue.pop_front() {
            Some(e) => {
                let taken = Taken {
                    ptr: e.as_ptr().cast(),
                    event: e.ev.event,
                    status: e.ev.status,
                    id: e.ev.id,
                };
                g.outstanding.insert(e.addr(), e);
                return Ok(taken);
            }
            // The count of an event dropped since: take the next.
            None => c.stale = c.stale.saturating_sub(1),
        }
    }
}

/// `rdma_ack_cm_event`: frees an event taken with `rdma_get_cm_event`.
pub(crate) fn ack_cm_event(event: *mut rdma_cm_event) -> c_int {
    let e = lock().outstanding.remove(&(event as usize));
    match e {
        Some(e) => {
            drop(e);
            0
        }
        None => fail(libc::EINVAL),
    }
}

/// A synchronous id's wait for the event its call causes (`ucma_complete`): the event is
/// left in `id->event`; an error event is the call's errno.
fn complete(id: *mut rdma_cm_id) -> c_int {
    let k = id as usize;
    let (channel, prev) = {
        let mut g = lock();
        let Ok(x) = g.id_mut(k) else {
            return fail(libc::EINVAL);
        };
        if !x.sync {
            return 0;
        }
        let c = &mut x.obj.id;
        (
            c.channel,
            std::mem::replace(&mut c.event, std::ptr::null_mut()),
        )
    };
    if !prev.is_null() {
        ack_cm_event(prev);
    }
    match get_event(channel) {
        Ok(e) => {
            if let Ok(c) = cid_mut(&mut lock(), k) {
                c.event = e.ptr;
            }
            match e.event {
                RDMA_CM_EVENT_REJECTED => fail(libc::ECONNREFUSED),
                _ if e.status != 0 => fail(e.status.abs()),
                RDMA_CM_EVENT_UNREACHABLE => fail(libc::ETIMEDOUT),
                RDMA_CM_EVENT_ADDR_ERROR
                | RDMA_CM_EVENT_ROUTE_ERROR
                | RDMA_CM_EVENT_CONNECT_ERROR => fail(libc::EINVAL),
                _ => 0,
            }
        }
        Err(e) => fail(e),
    }
}

// ---------------------------------------------------------------------------------
// Ids.

/// A new id (`channel` null: a synchronous one, with a channel of its own).
pub(crate) fn create_id(
    channel: *mut rdma_event_channel,
    context: *mut c_void,
    ps: c_int,
    qp_type: Option<c_int>,
) -> Result<*mut rdma_cm_id, c_int> {
    let qp_type = qp_type.or_else(|| qp_type_of(ps)).ok_or(libc::EINVAL)?;
    let (channel, sync) = if channel.is_null() {
        let c = new_channel(&mut lock()).map_err(|_| libc::EMFILE)?;
        (c, true)
    } else {
        (channel, false)
    };
    let mut g = lock();
    if !g.channels.contains_key(&(channel as usize)) {
        return Err(libc::EINVAL);
    }
    let obj = new_id_box(channel, context, ps, qp_type);
    let p = obj.as_ptr();
    g.ids.insert(
        obj.addr(),
        Id {
            obj,
            ps,
            channel: channel as usize,
            sync,
            dev: None,
            src: None,
            dst: None,
            phase: Phase::Idle,
            cm: None,
            listener: None,
            tos: 0,
            ack_timeout: None,
            reuseaddr: false,
            afonly: false,
            own_cqs: false,
            ep_qp_init: None,
            psn: 0,
            req: None,
        },
    );
    Ok(p.cast())
}

/// Whether an id other than `k` listens on port space `ps`'s `port` (its service is then
/// listened on already, in the CM and in the daemon, and stays so when `k` stops).
fn another_listens(g: &State, k: usize, ps: c_int, port: u16) -> bool {
    g.ids.iter().any(|(&o, x)| {
        o != k && x.phase == Phase::Listening && x.ps == ps && x.src.map(|s| s.port()) == Some(port)
    })
}

/// Undoes what the CM holds for id `k` (as the kernel's `rdma_destroy_id`): a connection
/// is disconnected (DREQ) or its REQ rejected, a listen stopped.
fn release_cm(g: &mut State, k: usize) {
    let Some(id) = g.ids.get(&k) else { return };
    let (dev, cm, phase, src, ps) = (id.dev, id.cm, id.phase, id.src, id.ps);
    if phase == Phase::Listening {
        let sid = src.map(|s| service_id(port_space(ps), s.port()));
        let others = src.is_some_and(|s| another_listens(g, k, ps, s.port()));
        if let (Some(sid), false, Some(devs)) = (sid, others, g.devices.as_mut()) {
            let v = crate::verbs::verbs().ok();
            for d in devs.iter_mut() {
                if d.cm.stop_listen(sid) {
                    if let (Some(v), Some(_)) = (v, d.gsi_fd) {
                        v.gsi_listen(d.ctx, sid, false);
                    }
                }
            }
        }
    }
    if let (Some(d), Some(cm)) = (dev, cm) {
        if let Some(devs) = g.devices.as_mut() {
            // What the peer must be told (REJ, DREQ) is sent, and the CM finishes the
            // connection's DREQ retries and time wait without the id.
            devs[d].cm.abort(Instant::now(), cm);
            devs[d].by_cm.remove(&cm.0);
        }
    }
}

/// Forgets id `k` entirely (a connection request's new id the program never saw): its
/// CM connection aborted, its object and own channel freed.
pub(crate) fn discard_id(g: &mut State, k: usize) {
    if !g.ids.contains_key(&k) {
        return;
    }
    release_cm(g, k);
    let Some(x) = g.ids.remove(&k) else { return };
    if x.sync {
        // Its own channel, with the channel's queued events.
        drop(g.channels.remove(&(x.obj.id.channel as usize)));
    }
}

/// `rdma_destroy_id`: events of the id not taken yet are dropped; one taken must have
/// been acknowledged (it is not touched here).
pub(crate) fn destroy_id(id: *mut rdma_cm_id) -> c_int {
    let mut g = lock();
    let Ok(k) = id_key(&g, id) else {
        return fail(libc::EINVAL);
    };
    release_cm(&mut g, k);
    let x = tri!(g.ids.remove(&k).ok_or(libc::EINVAL));
    // Its queued events go; a listener's connection requests not taken yet are
    // rejected, as the kernel's `ucma_cleanup_ctx_events` does.
    let children = g
        .channels
        .get_mut(&x.channel)
        .map(|c| events::forget_queued(c, k))
        .unwrap_or_default();
    for child in children {
        discard_id(&mut g, child);
    }
    // A synchronous id's last event, unless the program acknowledged it already.
    let last = x.obj.id.event;
    let last = (!last.is_null())
        .then(|| g.outstanding.remove(&(last as usize)))
        .flatten();
    let own_channel = x.sync.then_some(x.obj.id.channel);
    finish(g);
    drop(last);
    state::sends_done();
    if let Some(c) = own_channel {
        destroy_event_channel(c);
    }
    // The id's object, alive until now.
    drop(x);
    0
}

/// A free port for `ps` (the kernel's ephemeral range).
fn ephemeral_port(g: &mut State, ps: c_int) -> u16 {
    loop {
        let p = 32768 + (g.random() % 28232) as u16;
        if !g
            .ids
            .values()
            .any(|x| x.ps == ps && x.src.is_some_and(|s| s.port() == p))
        {
            return p;
        }
    }
}

fn bind(g: &mut Guard, k: usize, addr: SocketAddr) -> Result<(), c_int> {
    let ps = g.id(k)?.ps;
    if g.id(k)?.phase != Phase::Idle {
        return Err(libc::EINVAL);
    }
    let mut addr = addr;
    if addr.port() == 0 {
        addr.set_port(ephemeral_port(g, ps));
    } else {
        let reuse = g.id(k)?.reuseaddr;
        // A connection a listener accepted holds no port of its own (the kernel's
        // bind lists hold the ids that were bound).
        let clash = g.ids.iter().any(|(&o, x)| {
            o != k
                && x.listener.is_none()
                && x.ps == ps
                && x.src.is_some_and(|s| {
                    s.port() == addr.port()
                        && (s.ip() == addr.ip()
                            || s.ip().is_unspecified()
                            || addr.ip().is_unspecified())
                })
                && !(reuse && x.reuseaddr)
        });
        if clash {
            return Err(libc::EADDRINUSE);
        }
    }
    // The kernel's rdma_cm takes a loopback address as it takes the wildcard
    // (`cma_any_addr`): no device until the id resolves or a REQ arrives, a listener on
    // every device. libfabric's verbs provider relies on it: with no source address it
    // binds 127.0.0.1, and only an id without a device makes it take the devices' own
    // addresses for its fi_info (a 127.0.0.1 name would send its peer to itself).
    let dev = if addr.ip().is_unspecified() || addr.ip().is_loopback() {
        None
    } else {
        Some(g.device_of(addr.ip())?)
    };
    if let Some(d) = dev {
        g.attach(k, d);
    }
    let x = g.id_mut(k)?;
    x.dev = dev;
    x.src = Some(addr);
    x.phase = Phase::Bound;
    set_route(g, k);
    Ok(())
}

/// `rdma_bind_addr`: a source address (one of a uroce device's, or the wildcard) and
/// port (0: one is chosen); EADDRINUSE when another id has it, EADDRNOTAVAIL for an
/// address no uroce device has. A loopback address is bound as the wildcard is (no
/// device; a listener on it hears every device), as the kernel's rdma_cm binds it.
pub(crate) fn bind_addr(id: *mut rdma_cm_id, addr: Option<SocketAddr>) -> c_int {
    let Some(a) = addr else {
        return fail(libc::EAFNOSUPPORT);
    };
    let mut g = lock();
    let r = id_key(&g, id).and_then(|k| bind(&mut g, k, a));
    ret(r)
}

/// The source address the host's routes choose for `dst` (a connected UDP socket's
/// local address: the kernel's route lookup, no privilege needed).
fn route_source(dst: IpAddr) -> Result<IpAddr, c_int> {
    let any: SocketAddr = if dst.is_ipv4() {
        (Ipv4Addr::UNSPECIFIED, 0).into()
    } else {
        (Ipv6Addr::UNSPECIFIED, 0).into()
    };
    let s = std::net::UdpSocket::bind(any).map_err(|e| e.raw_os_error().unwrap_or(libc::EIO))?;
    s.connect((dst, 4791))
        .map_err(|e| e.raw_os_error().unwrap_or(libc::ENETUNREACH))?;
    s.local_addr()
        .map(|a| a.ip())
        .map_err(|e| e.raw_os_error().unwrap_or(libc::EIO))
}

/// `rdma_resolve_addr`: the source address from `src` or the host's routes, the device
/// that has it; RDMA_CM_EVENT_ADDR_RESOLVED, or ADDR_ERROR when no uroce device has the
/// source address. A loopback destination is the first device with an active port,
/// talking to itself (the kernel's `cma_resolve_loopback`: destination GID = source GID). The peer's MAC is found when the first MAD goes to it.
pub(crate) fn resolve_addr(
    id: *mut rdma_cm_id,
    src: Option<SocketAddr>,
    dst: Option<SocketAddr>,
    timeout_ms: c_int,
) -> c_int {
    let Some(dst) = dst else {
        return fail(libc::EINVAL);
    };
    let mut g = lock();
    let k = match id_key(&g, id) {
        Ok(k) => k,
        Err(e) => return fail(e),
    };
    if tri!(g.id(k)).phase == Phase::Idle {
        let any = src.unwrap_or(if dst.is_ipv4() {
            (Ipv4Addr::UNSPECIFIED, 0).into()
        } else {
            (Ipv6Addr::UNSPECIFIED, 0).into()
        });
        if let Err(e) = bind(&mut g, k, any) {
            return fail(e);
        }
    }
    if tri!(g.id(k)).phase != Phase::Bound {
        return fail(libc::EINVAL);
    }
    let bound = tri!(tri!(g.id(k)).src.ok_or(libc::EINVAL));
    let source = if bound.ip().is_unspecified() && dst.ip().is_loopback() {
        // The kernel's loopback resolution (`cma_resolve_loopback`): the source is the
        // family's loopback address, on the device a loopback bind takes.
        Ok(match dst.ip() {
            IpAddr::V4(_) => Ipv4Addr::LOCALHOST.into(),
            IpAddr::V6(_) => Ipv6Addr::LOCALHOST.into(),
        })
    } else if bound.ip().is_unspecified() {
        route_source(dst.ip())
    } else {
        Ok(bound.ip())
    };
    let dev = source.and_then(|ip| g.device_of(ip).map(|d| (d, ip)));
    let dev = dev.and_then(|(d, ip)| g.open_gsi(d).map(|_| (d, ip)));
    match dev {
        Ok((d, ip)) => {
            g.attach(k, d);
            let x = tri!(g.id_mut(k));
            x.dev = Some(d);
            x.src = Some(SocketAddr::new(ip, bound.port()));
            x.dst = Some(dst);
            x.phase = Phase::AddrQuery;
            let ctx = tri!(g.dev(d)).ctx as usize;
            let peer = g.wire_ip(d, dst.ip());
            // The peer's MAC (ARP / NDP where the datapath needs it) on a thread of its
            // own, as the kernel's address resolution runs on its workqueue; the event
            // comes when it is known, or ADDR_ERROR after `timeout_ms`.
            let spawned = crate::ffi::quiet::spawn("uroce-rdmacm-addr".into(), move || {
                resolve_neighbour(k, ctx, peer, timeout_ms)
            });
            if spawned.is_err() {
                resolved(&mut g, k, Err(libc::EAGAIN));
            }
        }
        Err(e) => push(&mut g, k, 0, RDMA_CM_EVENT_ADDR_ERROR, -e, Param::None),
    }
    drop(g);
    complete(id)
}

/// Finds the MAC of `peer` from the context `ctx` of id `k`, then reports it.
fn resolve_neighbour(k: usize, ctx: usize, peer: IpAddr, timeout_ms: c_int) {
    let gid = gid_of(peer);
    let r = verbs().and_then(
        |v| match v.gsi_resolve(ctx as *mut ibv_context, &gid, timeout_ms) {
            0 => Ok(()),
            e => Err(e),
        },
    );
    resolved(&mut lock(), k, r);
}

/// The end of id `k`'s address resolution: ADDR_RESOLVED, or ADDR_ERROR with the
/// errno, if the id is still waiting for it.
fn resolved(g: &mut State, k: usize, r: Result<(), c_int>) {
    if g.ids.get(&k).map(|x| x.phase) != Some(Phase::AddrQuery) {
        return;
    }
    match r {
        Ok(()) => {
            if let Ok(x) = g.id_mut(k) {
                x.phase = Phase::AddrResolved;
            }
            set_route(g, k);
            push(g, k, 0, RDMA_CM_EVENT_ADDR_RESOLVED, 0, Param::None);
        }
        Err(e) => {
            if let Ok(x) = g.id_mut(k) {
                x.phase = Phase::Bound;
            }
            push(g, k, 0, RDMA_CM_EVENT_ADDR_ERROR, -e, Param::None);
        }
    }
}

/// `rdma_resolve_route`: over RoCE the path is made locally (GIDs, the port's MTU, the
/// CM's packet life time), as the kernel's `cma_resolve_iboe_route`.
pub(crate) fn resolve_route(id: *mut rdma_cm_id) -> c_int {
    let mut g = lock();
    let k = match id_key(&g, id) {
        Ok(k) => k,
        Err(e) => return fail(e),
    };
    if tri!(g.id(k)).phase != Phase::AddrResolved {
        return fail(libc::EINVAL);
    }
    tri!(g.id_mut(k)).phase = Phase::RouteResolved;
    set_route(&mut g, k);
    push(&mut g, k, 0, RDMA_CM_EVENT_ROUTE_RESOLVED, 0, Param::None);
    drop(g);
    complete(id)
}

/// `rdma_listen`: REQs (and SIDR_REQs) for the id's port space and port arrive as
/// RDMA_CM_EVENT_CONNECT_REQUEST on new ids; a wildcard id listens on every device.
pub(crate) fn listen(id: *mut rdma_cm_id, backlog: c_int) -> c_int {
    let mut g = lock();
    let k = match id_key(&g, id) {
        Ok(k) => k,
        Err(e) => return fail(e),
    };
    match tri!(g.id(k)).phase {
        // Listening already: a new backlog, which the CM does not need.
        Phase::Listening => return 0,
        // Not bound: the wildcard and a free port, as the kernel does.
        Phase::Idle => {
            if let Err(e) = bind(&mut g, k, (Ipv4Addr::UNSPECIFIED, 0).into()) {
                return fail(e);
            }
        }
        Phase::Bound => {}
        _ => return fail(libc::EINVAL),
    }
    let x = tri!(g.id(k));
    let (dev, ps, port) = (x.dev, x.ps, tri!(x.src.ok_or(libc::EINVAL)).port());
    let sid = service_id(port_space(ps), port);
    let devs: Vec<usize> = match dev {
        Some(d) => vec![d],
        None => match g.devices() {
            Ok(v) => (0..v.len()).collect(),
            Err(e) => return fail(e),
        },
    };
    if devs.is_empty() {
        return fail(libc::ENODEV);
    }
    let shared = another_listens(&g, k, ps, port);
    for (i, &d) in devs.iter().enumerate() {
        if let Err(e) = g.open_gsi(d) {
            return fail(e);
        }
        // Through `uroce daemon`, the host's other processes may listen too: the daemon
        // says whether the service is ours (EADDRINUSE, as the kernel's rdma_cm).
        if !shared {
            let v = tri!(crate::verbs::verbs());
            let r = v.gsi_listen(tri!(g.dev(d)).ctx, sid, true);
            if r != 0 {
                for &done in &devs[..i] {
                    v.gsi_listen(tri!(g.dev(done)).ctx, sid, false);
                }
                return fail(r);
            }
        }
        let c = &mut tri!(g.dev_mut(d)).cm;
        // Another id listening on the same service at another address shares it.
        let _ = c.listen(sid);
        if backlog > 0 {
            // The CM's backlog is per device; rdma_listen's is a hint (the kernel's too).
        }
    }
    tri!(g.id_mut(k)).phase = Phase::Listening;
    0
}

/// The READ / atomic depths a parameter block asks for, (responder resources,
/// initiator depth): RDMA_MAX_RESP_RES / RDMA_MAX_INIT_DEPTH, or no parameters, mean the
/// device's most; EINVAL above what the device has, as librdmacm's `ucma_valid_param`.
fn depths(param: Option<rdma_conn_param>, max: u8) -> Result<(u8, u8), c_int> {
    let one = |asked: u8| match asked {
        0xff => Ok(max),
        a if a > max => Err(libc::EINVAL),
        a => Ok(a),
    };
    Ok((
        one(param.map_or(0xff, |p| p.responder_resources))?,
        one(param.map_or(0xff, |p| p.initiator_depth))?,
    ))
}

/// The QP number a connection names: the id's QP's, else the parameters' (a program
/// with a QP of its own); 0 when neither has one.
fn qpn_of(qp: *mut crate::verbs_abi::ibv_qp, param: Option<rdma_conn_param>) -> u32 {
    if qp.is_null() {
        param.map_or(0, |p| p.qp_num)
    } else {
        crate::verbs::qp_num(qp)
    }
}

/// `rdma_connect`: a REQ (RC, UC) or a SIDR_REQ (UD) to the resolved peer, with the RDMA
/// CM IP addressing header in front of the program's private data `user`.
pub(crate) fn connect(id: *mut rdma_cm_id, param: Option<rdma_conn_param>, user: Vec<u8>) -> c_int {
    let mut g = lock();
    let k = match id_key(&g, id) {
        Ok(k) => k,
        Err(e) => return fail(e),
    };
    let x = tri!(g.id(k));
    if x.phase != Phase::RouteResolved {
        return fail(libc::EINVAL);
    }
    let (d, src, dst, ps, tos) = (
        tri!(x.dev.ok_or(libc::EINVAL)),
        tri!(x.src.ok_or(libc::EINVAL)),
        tri!(x.dst.ok_or(libc::EINVAL)),
        x.ps,
        x.tos,
    );
    let c = tri!(cid(&g, k));
    let (qp, qp_type, srq) = (c.qp, c.qp_type, !c.srq.is_null());
    let ip_space = ps != RDMA_PS_IB;
    let private = if ip_space {
        match ip_private_data(src.ip(), src.port(), dst.ip(), &user) {
            Ok(p) => p,
            Err(_) => return fail(libc::EINVAL),
        }
    } else {
        user
    };
    let now = Instant::now();
    let sid = service_id(port_space(ps), dst.port());
    // The CM IP header keeps the loopback addresses; the MADs go to the device itself.
    let peer = g.wire_ip(d, dst.ip());
    let r = if qp_type == 4 {
        let dev = &mut tri!(g.dev_mut(d));
        dev.cm.sidr_resolve(
            now,
            &SidrParams {
                service_id: sid,
                peer,
                timeout: state::cm_timing().0,
                max_retries: state::cm_timing().1,
                private_data: private,
            },
        )
    } else {
        let qpn = qpn_of(qp, param);
        if qpn == 0 {
            return fail(libc::EINVAL);
        }
        let psn = (g.random() & 0xff_ffff) as u32;
        tri!(g.id_mut(k)).psn = psn;
        let dev = &mut tri!(g.dev_mut(d));
        let mut p = ConnectParams::new(sid, peer, qpn, psn);
        p.transport = if qp_type == 3 {
            Transport::Uc
        } else {
            Transport::Rc
        };
        p.path_mtu = dev.mtu;
        match depths(param, dev.max_rd_atomic) {
            Ok((r, i)) => (p.responder_resources, p.initiator_depth) = (r, i),
            Err(e) => return fail(e),
        }
        p.retry_count = param.map_or(7, |p| p.retry_count.min(7));
        p.rnr_retry_count = param.map_or(7, |p| p.rnr_retry_count.min(7));
        p.srq = srq || param.is_some_and(|p| p.srq != 0);
        p.traffic_class = tos;
        p.flow_label = uroce::cm::flow_label(src.port(), dst.port());
        (p.remote_cm_response_timeout, p.max_cm_retries) = state::cm_timing();
        p.private_data = private;
        dev.cm.connect(now, &p)
    };
    match r {
        Ok(cm) => {
            tri!(g.dev_mut(d)).by_cm.insert(cm.0, k);
            let x = tri!(g.id_mut(k));
            x.cm = Some(cm);
            x.phase = Phase::Connecting;
            finish(g);
            complete(id)
        }
        Err(_) => fail(libc::EINVAL),
    }
}

/// `rdma_accept`: answers the CONNECT_REQUEST of id `id` with a REP (its QP brought to
/// RTR and RTS first, as librdmacm does) or, for UD, a SIDR_REP naming its QP.
pub(crate) fn accept(id: *mut rdma_cm_id, param: Option<rdma_conn_param>, user: Vec<u8>) -> c_int {
    let mut g = lock();
    let k = match id_key(&g, id) {
        Ok(k) => k,
        Err(e) => return fail(e),
    };
    let x = tri!(g.id(k));
    let (Some(d), Some(cm), Phase::Connecting, Some(_)) = (x.dev, x.cm, x.phase, x.listener) else {
        return fail(libc::EINVAL);
    };
    let req = x.req.clone();
    let c = tri!(cid(&g, k));
    let (qp, qp_type, srq) = (c.qp, c.qp_type, !c.srq.is_null());
    let qpn = qpn_of(qp, param);
    if qp_type == 4 {
        let r = tri!(g.dev_mut(d)).cm.sidr_reply(
            Instant::now(),
            cm,
            &SidrReplyParams {
                status: uroce::cm::SIDR_VALID,
                qpn,
                qkey: RDMA_UDP_QKEY,
                private_data: user,
            },
        );
        if r.is_err() {
            return fail(libc::EINVAL);
        }
        let x = tri!(g.id_mut(k));
        x.phase = Phase::Connected;
        x.cm = None;
        tri!(g.dev_mut(d)).by_cm.remove(&cm.0);
        finish(g);
        return 0;
    }
    if qpn == 0 {
        return fail(libc::EINVAL);
    }
    let Some(req) = req else {
        return fail(libc::EINVAL);
    };
    let psn = tri!(g.id(k)).psn;
    let dev = &mut tri!(g.dev_mut(d));
    let mut p = AcceptParams::new(qpn, psn);
    // This side's view of the REQ (see `events::connect_request`): at most what the peer
    // can take.
    match depths(param, dev.max_rd_atomic) {
        Ok((r, i)) => {
            p.responder_resources = r.min(req.initiator_depth);
            p.initiator_depth = i.min(req.responder_resources);
        }
        Err(e) => return fail(e),
    }
    p.rnr_retry_count = param.map_or(7, |p| p.rnr_retry_count.min(7));
    p.srq = srq || param.is_some_and(|p| p.srq != 0);
    p.private_data = user;
    if dev.cm.accept(Instant::now(), cm, &p).is_err() {
        return fail(libc::EINVAL);
    }
    if !qp.is_null() {
        let r = qp::modify_from_cm(&g, k, QpState::Init)
            .and_then(|_| qp::modify_from_cm(&g, k, QpState::Rtr))
            .and_then(|_| qp::modify_from_cm(&g, k, QpState::Rts));
        if let Err(e) = r {
            let _ = tri!(g.dev_mut(d)).cm.reject(cm, &[]);
            finish(g);
            return fail(e);
        }
    }
    finish(g);
    complete(id)
}

/// `rdma_reject`: a REJ (reason 28, consumer defined, with the private data) or a
/// SIDR_REP with status "rejected", with the private data `user`.
pub(crate) fn reject(id: *mut rdma_cm_id, user: Vec<u8>) -> c_int {
    let mut g = lock();
    let k = match id_key(&g, id) {
        Ok(k) => k,
        Err(e) => return fail(e),
    };
    let x = tri!(g.id(k));
    let (Some(d), Some(cm)) = (x.dev, x.cm) else {
        return fail(libc::EINVAL);
    };
    let ud = tri!(cid(&g, k)).qp_type == 4;
    let dev = &mut tri!(g.dev_mut(d));
    let r = if ud {
        dev.cm.sidr_reply(
            Instant::now(),
            cm,
            &SidrReplyParams {
                status: uroce::cm::SIDR_REJECT,
                qpn: 0,
                qkey: 0,
                private_data: user,
            },
        )
    } else {
        dev.cm.reject(cm, &user)
    };
    dev.by_cm.remove(&cm.0);
    let x = tri!(g.id_mut(k));
    x.cm = None;
    x.phase = Phase::Disconnected;
    finish(g);
    ret(r.map_err(|_| libc::EINVAL))
}

/// `rdma_disconnect`: the QP to the error state, and a DREQ (or nothing more when the
/// peer's DREQ came first: it was answered).
pub(crate) fn disconnect(id: *mut rdma_cm_id) -> c_int {
    let mut g = lock();
    let k = match id_key(&g, id) {
        Ok(k) => k,
        Err(e) => return fail(e),
    };
    let c = tri!(cid(&g, k));
    let (qp, qp_type) = (c.qp, c.qp_type);
    if !qp.is_null() && qp_type != 4 {
        if let Ok(v) = verbs() {
            let mut a = ibv_qp_attr {
                qp_state: 6,
                ..ibv_qp_attr::default()
            };
            v.modify_qp(qp, &mut a, qp::IBV_QP_STATE);
        }
    }
    let x = tri!(g.id(k));
    let r = match (x.dev, x.cm, x.phase) {
        // A DREQ, unless one was sent or came already (the kernel's rdma_disconnect
        // answers 0 then too).
        (Some(d), Some(cm), Phase::Connected) => {
            let sent = tri!(g.dev_mut(d))
                .cm
                .disconnect(Instant::now(), cm, &[])
                .is_ok();
            Ok(sent)
        }
        (_, _, Phase::Connected | Phase::Disconnected) => Ok(false),
        _ => Err(libc::EINVAL),
    };
    let sync = tri!(g.id(k)).sync;
    finish(g);
    // A DREP the CM thread owes the peer leaves before this returns.
    state::sends_done();
    match r {
        // A synchronous id waits for its DISCONNECTED (the DREP, or the DREQ's retries).
        Ok(true) if sync => complete(id),
        Ok(_) => 0,
        Err(e) => fail(e),
    }
}

/// `rdma_establish`: the RTU of a connection whose QP the program brought up itself
/// after RDMA_CM_EVENT_CONNECT_RESPONSE.
pub(crate) fn establish(id: *mut rdma_cm_id) -> c_int {
    let mut g = lock();
    let k = match id_key(&g, id) {
        Ok(k) => k,
        Err(e) => return fail(e),
    };
    let x = tri!(g.id(k));
    let (Some(d), Some(cm)) = (x.dev, x.cm) else {
        return fail(libc::EINVAL);
    };
    let r = tri!(g.dev_mut(d)).cm.rtu(cm, &[]);
    if r.is_ok() {
        tri!(g.id_mut(k)).phase = Phase::Connected;
    }
    finish(g);
    ret(r.map_err(|_| libc::EINVAL))
}

// ---------------------------------------------------------------------------------
// QPs.

/// `rdma_create_qp`: a QP on the id's device (CQs with completion channels made when the
/// attributes name none, as librdmacm's `ucma_create_cqs`), moved to INIT (UD: on to RTS
/// with the UDP port space's Q_Key). `pd` is null or a PD of the id's device.
pub(crate) fn create_qp(
    id: *mut rdma_cm_id,
    pd: *mut ibv_pd,
    attr: Option<&mut ibv_qp_init_attr>,
) -> c_int {
    let v = match verbs() {
        Ok(v) => v,
        Err(e) => return fail(e),
    };
    let Some(a) = attr else {
        return fail(libc::EINVAL);
    };
    let mut g = lock();
    let k = match id_key(&g, id) {
        Ok(k) => k,
        Err(e) => return fail(e),
    };
    let c = tri!(cid_mut(&mut g, k));
    let pd = if pd.is_null() { c.pd } else { pd };
    if c.verbs.is_null() || pd.is_null() || !c.qp.is_null() {
        return fail(libc::EINVAL);
    }
    let ctx = c.verbs;
    let mut made = false;
    let mut failed = None;
    for (want, size, cq, ch) in [
        (
            a.send_cq.is_null(),
            a.cap.max_send_wr,
            &mut c.send_cq,
            &mut c.send_cq_channel,
        ),
        (
            a.recv_cq.is_null(),
            a.cap.max_recv_wr,
            &mut c.recv_cq,
            &mut c.recv_cq_channel,
        ),
    ] {
        if want && cq.is_null() && failed.is_none() {
            made = true;
            *ch = v.create_comp_channel(ctx);
            if ch.is_null() {
                failed = Some(libc::ENOMEM);
                continue;
            }
            *cq = v.create_cq(ctx, size.max(1) as c_int, id.cast(), *ch);
            if cq.is_null() {
                failed = Some(libc::ENOMEM);
            }
        }
    }
    let qp = match failed {
        Some(e) => Err(e),
        None => {
            if a.send_cq.is_null() {
                a.send_cq = c.send_cq;
            }
            if a.recv_cq.is_null() {
                a.recv_cq = c.recv_cq;
            }
            if a.srq.is_null() {
                a.srq = c.srq;
            }
            let qp = v.create_qp(pd, a);
            if qp.is_null() {
                Err(errno_or(libc::EINVAL))
            } else {
                Ok(qp)
            }
        }
    };
    let psn = (g.random() & 0xff_ffff) as u32;
    let qp = qp.and_then(|qp| {
        let ud = crate::verbs::qp_type(qp) == 4;
        qp::init_new_qp(qp, ud, psn).map(|_| qp).inspect_err(|_| {
            v.destroy_qp(qp);
        })
    });
    match qp {
        Ok(qp) => {
            let c = tri!(cid_mut(&mut g, k));
            c.qp = qp;
            c.pd = pd;
            if made {
                tri!(g.id_mut(k)).own_cqs = true;
            }
            0
        }
        Err(e) => {
            if made {
                // What this call made goes, as librdmacm's `ucma_destroy_cqs`.
                destroy_own_cqs(v, tri!(cid_mut(&mut g, k)));
            }
            fail(e)
        }
    }
}

/// `rdma_destroy_qp`: the QP, and the CQs and channels `rdma_create_qp` made.
pub(crate) fn destroy_qp(id: *mut rdma_cm_id) {
    let Ok(v) = verbs() else { return };
    let mut g = lock();
    let Ok(k) = id_key(&g, id) else { return };
    let Ok(x) = g.id_mut(k) else { return };
    let own = std::mem::take(&mut x.own_cqs);
    let c = &mut x.obj.id;
    if !c.qp.is_null() {
        // Destroyed once: the field is cleared.
        v.destroy_qp(c.qp);
        c.qp = std::ptr::null_mut();
    }
    if own {
        destroy_own_cqs(v, c);
    }
}

/// Destroys the CQs and completion channels `rdma_create_qp` made for id `c`, each once
/// (the fields are cleared).
fn destroy_own_cqs(v: &crate::verbs::Verbs, c: &mut rdma_cm_id) {
    for (cq, ch) in [
        (&mut c.send_cq, &mut c.send_cq_channel),
        (&mut c.recv_cq, &mut c.recv_cq_channel),
    ] {
        if !cq.is_null() {
            v.destroy_cq(*cq);
            *cq = std::ptr::null_mut();
        }
        if !ch.is_null() {
            v.destroy_comp_channel(*ch);
            *ch = std::ptr::null_mut();
        }
    }
}

/// `rdma_init_qp_attr`: the attributes for moving the id's QP to `attr.qp_state`: INIT
/// before a connection as `rdma_create_qp` sets it, else what the CM negotiated.
pub(crate) fn init_qp_attr(id: *mut rdma_cm_id, attr: &mut ibv_qp_attr, mask: &mut c_int) -> c_int {
    let g = lock();
    let k = match id_key(&g, id) {
        Ok(k) => k,
        Err(e) => return fail(e),
    };
    let Some(to) = qp::state_of(attr.qp_state) else {
        return fail(libc::EINVAL);
    };
    match qp::cm_attr(&g, k, to) {
        Ok((a, m)) => {
            *attr = a;
            *mask = m;
            0
        }
        Err(_) if to == QpState::Init => {
            let ud = tri!(cid(&g, k)).qp_type == 4;
            *attr = ibv_qp_attr {
                qp_state: 1,
                port_num: 1,
                qkey: RDMA_UDP_QKEY,
                ..ibv_qp_attr::default()
            };
            *mask = qp::IBV_QP_STATE
                | qp::IBV_QP_PKEY_INDEX
                | qp::IBV_QP_PORT
                | if ud {
                    qp::IBV_QP_QKEY
                } else {
                    qp::IBV_QP_ACCESS_FLAGS
                };
            0
        }
        Err(e) => fail(e),
    }
}

/// `rdma_set_local_ece` and `rdma_get_remote_ece` on `id`: 0, or -1 with EINVAL for an id
/// that is not one or has a QP of its own (enhanced connection establishment is for a
/// QP the program made itself and connects through the id). uroce's CM, as rdma_rxe's
/// devices, puts no ECE on the wire: the local one is accepted, the remote one is all
/// zero (no vendor, no options), what librdmacm reports on a device without ECE.
pub(crate) fn ece(id: *mut rdma_cm_id) -> c_int {
    let g = lock();
    let k = match id_key(&g, id) {
        Ok(k) => k,
        Err(e) => return fail(e),
    };
    if !tri!(cid(&g, k)).qp.is_null() {
        return fail(libc::EINVAL);
    }
    0
}

/// `rdma_set_option`: RDMA_OPTION_ID_TOS, _REUSEADDR, _AFONLY, _ACK_TIMEOUT;
/// RDMA_OPTION_IB_PATH is accepted and ignored (the path over RoCE is made locally).
/// `val` is the option's first bytes (at least one, at most four): a byte, or an int
/// when there are four.
pub(crate) fn set_option(id: *mut rdma_cm_id, level: c_int, optname: c_int, val: &[u8]) -> c_int {
    let byte = val.first().copied().unwrap_or(0);
    let int = match val {
        &[a, b, c, d, ..] => c_int::from_ne_bytes([a, b, c, d]),
        _ => c_int::from(byte),
    };
    let mut g = lock();
    let k = match id_key(&g, id) {
        Ok(k) => k,
        Err(e) => return fail(e),
    };
    let x = tri!(g.id_mut(k));
    match (level, optname) {
        (RDMA_OPTION_ID, RDMA_OPTION_ID_TOS) => x.tos = byte,
        (RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR) => x.reuseaddr = int != 0,
        (RDMA_OPTION_ID, RDMA_OPTION_ID_AFONLY) => x.afonly = int != 0,
        (RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT) => x.ack_timeout = Some(byte.min(31)),
        (RDMA_OPTION_IB, RDMA_OPTION_IB_PATH) => {}
        _ => return fail(libc::ENOSYS),
    }
    0
}

/// `rdma_get_devices`: the open contexts of every uroce device.
pub(crate) fn device_contexts() -> Result<Vec<*mut ibv_context>, c_int> {
    let mut g = lock();
    g.devices().map(|v| v.iter().map(|d| d.ctx).collect())
}

/// The port of id `id`'s source (`src`) or destination address, in network order; 0 for
/// an id without one.
pub(crate) fn port_of_id(id: *mut rdma_cm_id, src: bool) -> u16 {
    let g = lock();
    g.ids
        .get(&(id as usize))
        .and_then(|x| if src { x.src } else { x.dst })
        .map_or(0, |s| s.port().to_be())
}

// ---------------------------------------------------------------------------------
// The synchronous endpoint calls of <rdma/rdma_verbs.h>'s programs.

/// What `rdma_create_ep` takes from its `rdma_addrinfo`.
pub(crate) struct EpInfo {
    pub flags: c_int,
    pub qp_type: c_int,
    pub port_space: c_int,
    pub src: Option<SocketAddr>,
    pub dst: Option<SocketAddr>,
}

/// `rdma_create_ep`: a synchronous id for `r`: passive (RAI_PASSIVE) bound to its source
/// address, keeping `pd` and `qp_init_attr` for `rdma_get_request`; active with its
/// address and route resolved and, given `qp_init_attr`, its QP made. Err: the errno.
pub(crate) fn create_ep(
    r: EpInfo,
    pd: *mut ibv_pd,
    qp_init_attr: Option<&mut ibv_qp_init_attr>,
) -> Result<*mut rdma_cm_id, c_int> {
    let qp_type = if r.qp_type != 0 {
        Some(r.qp_type)
    } else {
        None
    };
    let ps = if r.port_space != 0 {
        r.port_space
    } else {
        RDMA_PS_TCP
    };
    let cm_id = create_id(std::ptr::null_mut(), std::ptr::null_mut(), ps, qp_type)?;
    let k = cm_id as usize;
    let undo = move |e: c_int| {
        destroy_id(cm_id);
        Err(e)
    };
    if !pd.is_null() {
        match cid_mut(&mut lock(), k) {
            Ok(c) => c.pd = pd,
            Err(e) => return undo(e),
        }
    }
    if r.flags & RAI_PASSIVE != 0 {
        if bind_addr(cm_id, r.src) != 0 {
            return undo(errno());
        }
        if let Some(attr) = qp_init_attr {
            let mut a = Box::new(ffi::copy_qp_init_attr(attr));
            let mut g = lock();
            a.qp_type = match cid(&g, k) {
                Ok(c) => c.qp_type,
                Err(e) => return undo(e),
            };
            match g.id_mut(k) {
                Ok(x) => x.ep_qp_init = Some(a),
                Err(e) => return undo(e),
            }
        }
    } else {
        if resolve_addr(cm_id, r.src, r.dst, 2000) != 0 {
            return undo(errno());
        }
        if resolve_route(cm_id) != 0 {
            return undo(errno());
        }
        if let Some(a) = qp_init_attr {
            a.qp_type = match cid(&lock(), k) {
                Ok(c) => c.qp_type,
                Err(e) => return undo(e),
            };
            if create_qp(cm_id, pd, Some(a)) != 0 {
                return undo(errno());
            }
        }
    }
    Ok(cm_id)
}

/// `rdma_destroy_ep`: the id's QP (and what `rdma_create_qp` made for it), then the id.
pub(crate) fn destroy_ep(id: *mut rdma_cm_id) {
    destroy_qp(id);
    destroy_id(id);
}

/// `rdma_get_request`: the next connection request of the synchronous listener `listen`,
/// with the QP `rdma_create_ep` was asked for made on it; the request event is left in
/// the new id's `event`. Err: the errno.
pub(crate) fn get_request(listen: *mut rdma_cm_id) -> Result<*mut rdma_cm_id, c_int> {
    let l = listen as usize;
    let (channel, attr, pd, prev) = {
        let mut g = lock();
        let x = g.ids.get_mut(&l).ok_or(libc::EINVAL)?;
        if !x.sync {
            return Err(libc::EINVAL);
        }
        let attr = x.ep_qp_init.as_deref().map(ffi::copy_qp_init_attr);
        let c = &mut x.obj.id;
        let prev = std::mem::replace(&mut c.event, std::ptr::null_mut());
        (c.channel, attr, c.pd, prev)
    };
    if !prev.is_null() {
        ack_cm_event(prev);
    }
    let event = get_event(channel)?;
    // The listener keeps an event it could not hand on.
    let keep = |e: *mut rdma_cm_event| {
        if let Ok(c) = cid_mut(&mut lock(), l) {
            c.event = e;
        }
    };
    let refuse = match event.event {
        RDMA_CM_EVENT_REJECTED => Some(libc::ECONNREFUSED),
        _ if event.status != 0 => Some(event.status.abs()),
        RDMA_CM_EVENT_CONNECT_REQUEST => None,
        _ => Some(libc::EINVAL),
    };
    if let Some(e) = refuse {
        keep(event.ptr);
        return Err(e);
    }
    let new = event.id;
    if let Some(mut a) = attr {
        // The new id is live: its request is not acknowledged.
        if create_qp(new, pd, Some(&mut a)) != 0 {
            keep(event.ptr);
            return Err(errno());
        }
    }
    match cid_mut(&mut lock(), new as usize) {
        Ok(c) => c.event = event.ptr,
        Err(e) => return Err(e),
    }
    Ok(new)
}

/// `rdma_migrate_id`: the id's events go to `channel` from now on (NULL: a channel of its
/// own, making the id synchronous); its queued events move with it.
pub(crate) fn migrate_id(id: *mut rdma_cm_id, channel: *mut rdma_event_channel) -> c_int {
    let mut g = lock();
    let k = match id_key(&g, id) {
        Ok(k) => k,
        Err(e) => return fail(e),
    };
    let (to, sync) = if channel.is_null() {
        match new_channel(&mut g) {
            Ok(c) => (c, true),
            Err(e) => return fail(e),
        }
    } else if g.channels.contains_key(&(channel as usize)) {
        (channel, false)
    } else {
        return fail(libc::EINVAL);
    };
    let from = tri!(g.id(k)).channel;
    let mut moved = std::collections::VecDeque::new();
    if let Some(c) = g.channels.get_mut(&from) {
        // The id's events, and a listener's connection requests.
        let (mine, rest) = std::mem::take(&mut c.queue)
            .into_iter()
            .partition(|e| e.ev.id as usize == k || e.ev.listen_id as usize == k);
        c.queue = rest;
        moved = mine;
        c.stale += moved.len();
    }
    if let Some(c) = g.channels.get_mut(&(to as usize)) {
        for e in moved {
            c.queue.push_back(e);
            state::signal(c.fd.as_raw_fd());
        }
    }
    let x = tri!(g.id_mut(k));
    let old_sync = std::mem::replace(&mut x.sync, sync);
    x.channel = to as usize;
    let old = std::mem::replace(&mut tri!(cid_mut(&mut g, k)).channel, to);
    drop(g);
    if old_sync {
        // The id's former own channel, used by nothing else now.
        destroy_event_channel(old);
    }
    0
}

pub(crate) fn errno() -> c_int {
    errno_or(libc::EINVAL)
}

/// The thread's errno, or `default` when it is 0.
fn errno_or(default: c_int) -> c_int {
    match std::io::Error::last_os_error().raw_os_error() {
        Some(0) | None => default,
        Some(e) => e,
    }
}
