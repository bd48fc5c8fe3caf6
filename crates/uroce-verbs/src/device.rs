//! Devices: one per usable interface, their contexts, ports and GID tables.
//!
//! A device is an Ethernet interface (one with a MAC address) of the calling thread's
//! network namespace, named `uroce_<interface>`. `UROCE_IFACES` (a comma-separated list
//! of interface names) limits the list to those interfaces. The port is read live from
//! the kernel at every query (rtnetlink, `uroce::net::addresses`): state from the link's
//! operational state, active MTU from the interface MTU, link layer Ethernet; the GID
//! table holds at index 0 the default GID (IBTA §4.1.1: the link-local prefix fe80::/64
//! with the port's EUI-64, what the kernel assigns to the interface in the default
//! address mode), always, so that the indexes after it do not move while the kernel is
//! still bringing up IPv6; then one RoCE v2 GID per address of the interface: IPv4 (as
//! `::ffff:a.b.c.d`, the first at index 1, what `-g 1` names in rdma-core's examples and
//! perftest), then the other IPv6 addresses, at most [`GID_TABLE_LEN`].
//!
//! A device lives for the rest of the process once listed (a program may keep an opened
//! device after `ibv_free_device_list`); listing again reuses it. Contexts are boxed
//! `verbs_context`s, known to a registry so that closing one twice, or a pointer that is
//! not one, is refused instead of freeing memory that is not ours.
//!
//! Safe code: the exported verbs and the `verbs_context` ops are wrappers in
//! `exports.rs`; a context's `verbs_context` is an `ffi::CBox` its registry entry owns.

#![deny(unsafe_code)]

use std::collections::HashMap;
use std::ffi::{c_char, c_int};
use std::net::IpAddr;
use std::os::fd::AsRawFd;
use std::sync::{Arc, Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};

use libc::{EINVAL, ENODATA, ENODEV};
use uroce::net::addresses::{self, InterfaceInfo, OperState};
use uroce::verbs::ContextConfig;

use crate::abi::{
    self, ibv_context, ibv_device, ibv_device_attr, ibv_gid, ibv_port_attr, verbs_context,
};
use crate::engine::{Inner, Shared};
use crate::ffi::{self, set_errno};

/// Entries in a port's GID table (`gid_tbl_len`).
pub const GID_TABLE_LEN: usize = 16;

/// The deepest send or receive queue a QP may ask for (`max_qp_wr`).
pub const MAX_QP_WR: u32 = 1 << 14;

/// `ibv_device_attr.vendor_id`: 0xffffff, what rdma_rxe (a soft RoCE device too) reports.
pub const VENDOR_ID: u32 = 0x00ff_ffff;

/// The environment variable that selects interfaces.
pub const IFACES_ENV: &str = "UROCE_IFACES";

/// A listed device: the C `ibv_device` first, so a `*mut ibv_device` is a `*mut Device`.
#[repr(C)]
pub struct Device {
    dev: ibv_device,
    iface: String,
    ifindex: u32,
    mac: [u8; 6],
    uverbs: u32,
}

impl Device {
    /// The interface this device is.
    pub fn iface(&self) -> &str {
        &self.iface
    }

    /// The interface's index.
    pub fn ifindex(&self) -> u32 {
        self.ifindex
    }

    /// The interface's MAC address.
    pub fn mac(&self) -> [u8; 6] {
        self.mac
    }

    /// The node GUID, EUI-64 from the MAC, in network order as `__be64` holds it.
    pub fn guid(&self) -> u64 {
        u64::from_ne_bytes(eui64(self.mac))
    }

    /// The device's name (`ibv_get_device_name`): `uroce_<interface>`.
    pub fn name(&self) -> String {
        format!("uroce_{}", self.iface)
    }

    /// N of the device's uverbs character device, `/dev/infiniband/uverbsN`, which
    /// `ibv_device.dev_name` names as the kernel's ib_uverbs does (`uverbsN`, N in the
    /// order devices appeared).
    pub fn uverbs(&self) -> u32 {
        self.uverbs
    }

    /// `ibv_device.dev_path`: the uverbs device's directory in sysfs,
    /// `/sys/class/infiniband_verbs/uverbsN`.
    pub fn dev_path(&self) -> String {
        format!("/sys/class/infiniband_verbs/uverbs{}", self.uverbs)
    }

    /// `ibv_device.ibdev_path`: the device's directory in sysfs,
    /// `/sys/class/infiniband/<name>`.
    pub fn ibdev_path(&self) -> String {
        format!("/sys/class/infiniband/{}", self.name())
    }

    /// The port's attributes now (`ibv_query_port` answers the same), with the interface
    /// as the kernel reports it now.
    pub fn port_attr_now(&self) -> Result<(InterfaceInfo, ibv_port_attr), c_int> {
        let info = live_info(self)?;
        let attr = port_attr(&info, addresses::link_speed_mbps(&self.iface));
        Ok((info, attr))
    }

    /// The device's attributes (`ibv_query_device` answers the same).
    pub fn attr(&self) -> ibv_device_attr {
        device_attr(self)
    }
}

fn eui64(m: [u8; 6]) -> [u8; 8] {
    [m[0] ^ 2, m[1], m[2], 0xff, 0xfe, m[3], m[4], m[5]]
}

/// The devices listed so far, leaked: they live (unchanged) for the rest of the process.
static DEVICES: Mutex<Vec<&'static Device>> = Mutex::new(Vec::new());

/// The open contexts, by the address of their `verbs_context` (which owns it). Read on
/// every verb (finding a context's engine), written only at open and close: a reader's
/// lock, so that the threads of a program (and the engine shards' work) do not queue
/// behind each other here.
static CONTEXTS: RwLock<Option<HashMap<usize, ContextEntry>>> = RwLock::new(None);

/// The open contexts, to look at.
fn contexts() -> RwLockReadGuard<'static, Option<HashMap<usize, ContextEntry>>> {
    CONTEXTS.read().unwrap_or_else(|e| e.into_inner())
}

/// The open contexts, to change.
fn contexts_mut() -> RwLockWriteGuard<'static, Option<HashMap<usize, ContextEntry>>> {
    CONTEXTS.write().unwrap_or_else(|e| e.into_inner())
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn copy_name(dst: &mut [c_char], s: &str) {
    let room = dst.len().saturating_sub(1);
    for (d, b) in dst.iter_mut().zip(s.bytes().take(room)) {
        *d = b as c_char;
    }
}

/// Whether `info` becomes a device under the selection `selected` (`UROCE_IFACES`).
pub fn usable(info: &InterfaceInfo, selected: Option<&str>) -> bool {
    if info.mac.is_none() {
        return false;
    }
    match selected {
        Some(list) => list.split(',').map(str::trim).any(|n| n == info.name),
        None => true,
    }
}

/// The devices of the calling thread's namespace now, creating those not seen before.
pub fn list() -> Result<Vec<&'static Device>, c_int> {
    list_selected(std::env::var(IFACES_ENV).ok().as_deref())
}

/// [`list`] with the selection `selected` in place of `UROCE_IFACES` (`uroce run`
/// lists the devices its program will see).
pub fn list_selected(selected: Option<&str>) -> Result<Vec<&'static Device>, c_int> {
    let infos = addresses::interfaces().map_err(|_| ENODEV)?;
    let mut devices = lock(&DEVICES);
    let mut out = Vec::new();
    for info in infos.iter().filter(|i| usable(i, selected)) {
        let Some(mac) = info.mac else { continue };
        let known = devices
            .iter()
            .copied()
            .find(|d| d.iface == info.name && d.ifindex == info.index && d.mac == mac);
        let dev = known.unwrap_or_else(|| {
            let dev = ibv_device {
                _ops: abi::_ibv_device_ops {
                    _dummy1: None,
                    _dummy2: None,
                },
                node_type: abi::IBV_NODE_CA,
                transport_type: abi::IBV_TRANSPORT_IB,
                name: [0; abi::IBV_SYSFS_NAME_MAX],
                dev_name: [0; abi::IBV_SYSFS_NAME_MAX],
                dev_path: [0; abi::IBV_SYSFS_PATH_MAX],
                ibdev_path: [0; abi::IBV_SYSFS_PATH_MAX],
            };
            let taken: Vec<u32> = devices.iter().map(|d| d.uverbs).collect();
            let mut d = Device {
                dev,
                iface: info.name.clone(),
                ifindex: info.index,
                mac,
                uverbs: uverbs_number(out.len() as u32, &taken),
            };
            let (name, dev_path, ibdev_path) = (d.name(), d.dev_path(), d.ibdev_path());
            copy_name(&mut d.dev.name, &name);
            copy_name(&mut d.dev.dev_name, &format!("uverbs{}", d.uverbs));
            copy_name(&mut d.dev.dev_path, &dev_path);
            copy_name(&mut d.dev.ibdev_path, &ibdev_path);
            let d: &'static Device = Box::leak(Box::new(d));
            devices.push(d);
            d
        });
        out.push(dev);
    }
    Ok(out)
}

#[cfg(test)]
impl Device {
    /// A device that was never listed, for the tests of the files that describe one.
    pub(crate) fn for_test(iface: &str, mac: [u8; 6], uverbs: u32) -> Device {
        let mut d = Device {
            dev: crate::ffi::zeroed(),
            iface: iface.into(),
            ifindex: 1,
            mac,
            uverbs,
        };
        let name = d.name();
        copy_name(&mut d.dev.name, &name);
        d
    }
}

/// The port attributes of `info`, for the tests of other modules.
#[cfg(test)]
pub(crate) fn port_attr_for_test(info: &InterfaceInfo) -> ibv_port_attr {
    port_attr(info, None)
}

/// N of a new device's `uverbsN`: its position in the listing, as in every process
/// that lists the same interfaces (so `uroce run`'s files name what its program's
/// library lists), unless a device seen earlier in this process holds that number.
fn uverbs_number(position: u32, taken: &[u32]) -> u32 {
    if !taken.contains(&position) {
        return position;
    }
    (0..).find(|n| !taken.contains(n)).unwrap_or(position)
}

impl Device {
    /// The `ibv_device` the program gets for this device (never written: C only reads
    /// it).
    pub(crate) fn c_ptr(&'static self) -> *mut ibv_device {
        (&self.dev as *const ibv_device).cast_mut()
    }
}

/// The device behind `dev` if it is one of ours.
fn device(dev: *const ibv_device) -> Option<&'static Device> {
    lock(&DEVICES)
        .iter()
        .copied()
        .find(|d| std::ptr::eq(&d.dev, dev))
}

/// An open device: its `verbs_context` (with the `ibv_context` at its end), which the
/// program reaches through its pointer, and what the verbs on it use.
struct ContextEntry {
    _vctx: ffi::CBox<verbs_context>,
    device: &'static Device,
    shared: Arc<Shared>,
    /// The process that opened it: after a fork the child inherits the entry, but not
    /// the engine's progress thread nor its datapath (a daemon's rings are the
    /// parent's), so the child opens engines of its own and never stops an inherited one.
    pid: u32,
}

/// The state of the open context `ctx`, if it is one. A verb holds it (not the
/// registry) while it runs, so verbs on different contexts do not wait for each other
/// and closing a context while another thread is in a verb on it frees nothing that verb
/// still uses.
pub(crate) fn shared_of(ctx: *mut ibv_context) -> Option<Arc<Shared>> {
    let p = context_ptr_of(ctx);
    contexts()
        .as_ref()
        .and_then(|m| m.get(&(p as usize)))
        .map(|e| e.shared.clone())
}

/// Runs `f` on the state of the open context `ctx` (locked: one verb at a time per
/// context); None if `ctx` is not one.
pub(crate) fn with_inner<R>(ctx: *mut ibv_context, f: impl FnOnce(&mut Inner) -> R) -> Option<R> {
    let shared = shared_of(ctx)?;
    let mut guard = shared.lock();
    Some(f(&mut guard))
}

/// The first QPN of a context opened with `seed`: in 0x100 ..= 0x7f_ffff, so that
/// millions of QPs fit before the 24-bit number wraps (to 0 and QP 1, which are not for
/// the program).
fn first_qpn(seed: u64) -> u32 {
    let x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 40;
    0x100 + (x as u32 % (0x80_0000 - 0x100))
}

/// The `verbs_context` whose `context` member `ctx` is (an address only).
fn context_ptr_of(ctx: *mut ibv_context) -> *mut verbs_context {
    ctx.cast::<u8>()
        .wrapping_sub(std::mem::offset_of!(verbs_context, context))
        .cast()
}

/// The open context behind `ctx`, if it is one of ours.
fn context(ctx: *mut ibv_context) -> Option<&'static Device> {
    let p = context_ptr_of(ctx);
    contexts()
        .as_ref()
        .and_then(|m| m.get(&(p as usize)))
        .map(|e| e.device)
}

fn open(device: &'static Device) -> *mut ibv_context {
    let ops = abi::ibv_context_ops {
        _compat_query_device: None,
        _compat_query_port: None,
        _compat_alloc_pd: None,
        _compat_dealloc_pd: None,
        _compat_reg_mr: None,
        _compat_rereg_mr: None,
        _compat_dereg_mr: None,
        alloc_mw: Some(crate::exports::alloc_mw),
        bind_mw: Some(crate::exports::bind_mw),
        dealloc_mw: Some(crate::exports::dealloc_mw),
        _compat_create_cq: None,
        poll_cq: Some(crate::exports::poll_cq),
        req_notify_cq: Some(crate::exports::req_notify_cq),
        _compat_cq_event: None,
        _compat_resize_cq: None,
        _compat_destroy_cq: None,
        _compat_create_srq: None,
        _compat_modify_srq: None,
        _compat_query_srq: None,
        _compat_destroy_srq: None,
        post_srq_recv: Some(crate::exports::post_srq_recv),
        _compat_create_qp: None,
        _compat_query_qp: None,
        _compat_modify_qp: None,
        _compat_destroy_qp: None,
        post_send: Some(crate::exports::post_send),
        post_recv: Some(crate::exports::post_recv),
        _compat_create_ah: None,
        _compat_destroy_ah: None,
        _compat_attach_mcast: None,
        _compat_detach_mcast: None,
        _compat_async_event: None,
    };
    let mutex: libc::pthread_mutex_t = crate::ffi::zeroed();
    let vctx = verbs_context {
        query_port: Some(crate::exports::query_port_ex),
        advise_mr: None,
        alloc_null_mr: None,
        read_counters: None,
        attach_counters_point_flow: None,
        create_counters: None,
        destroy_counters: None,
        reg_dm_mr: None,
        alloc_dm: None,
        free_dm: None,
        modify_flow_action_esp: None,
        destroy_flow_action: None,
        create_flow_action_esp: None,
        modify_qp_rate_limit: None,
        alloc_parent_domain: None,
        dealloc_td: None,
        alloc_td: None,
        modify_cq: None,
        post_srq_ops: None,
        destroy_rwq_ind_table: None,
        create_rwq_ind_table: None,
        destroy_wq: None,
        modify_wq: None,
        create_wq: None,
        query_rt_values: None,
        create_cq_ex: Some(crate::exports::create_cq_ex),
        priv_: std::ptr::null_mut(),
        query_device_ex: Some(crate::exports::query_device_ex),
        ibv_destroy_flow: None,
        ABI_placeholder2: None,
        ibv_create_flow: None,
        ABI_placeholder1: None,
        open_qp: None,
        create_qp_ex: Some(crate::exports::create_qp_ex),
        get_srq_num: None,
        create_srq_ex: None,
        open_xrcd: None,
        close_xrcd: None,
        _ABI_placeholder3: 0,
        sz: std::mem::size_of::<verbs_context>(),
        context: ibv_context {
            device: (&device.dev as *const ibv_device).cast_mut(),
            ops,
            cmd_fd: -1,
            async_fd: -1,
            num_comp_vectors: 1,
            mutex,
            abi_compat: abi::VERBS_ABI_IS_EXTENDED,
        },
    };
    // A second context of a device this process has open shares the first's engine
    // (its uroce context, datapath and progress thread), as two contexts of one NIC share
    // its hardware: two datapaths would fight over the interface's AF_XDP queue or
    // UDP/4791 (Open MPI opens the device through UCX and again through libfabric; a
    // program beside librdmacm opens its own context).
    // The registry stays locked from the look to the insert, so two threads opening the
    // device at once do not make two engines.
    let mut contexts = contexts_mut();
    let existing = contexts
        .as_ref()
        .and_then(|m| {
            m.values()
                .find(|e| std::ptr::eq(e.device, device) && e.pid == std::process::id())
        })
        .map(|e| e.shared.clone());
    let shared = match existing {
        Some(s) => s,
        None => match new_engine(device) {
            Ok(s) => s,
            Err(e) => {
                set_errno(e);
                return std::ptr::null_mut();
            }
        },
    };
    let mut vctx = vctx;
    vctx.context.async_fd = shared.async_fd.as_raw_fd();
    vctx.context.cmd_fd = shared.cmd_fd.as_raw_fd();
    let c = ffi::CBox::new(vctx);
    let p = c.as_ptr();
    contexts.get_or_insert_with(HashMap::new).insert(
        p as usize,
        ContextEntry {
            _vctx: c,
            device,
            shared,
            pid: std::process::id(),
        },
    );
    // The `context` member, inside the allocation.
    p.cast::<u8>()
        .wrapping_add(std::mem::offset_of!(verbs_context, context))
        .cast()
}

/// A new engine for `device`: its uroce context and the state behind it (the datapath
/// opens at the first QP); the errno if it cannot be made.
fn new_engine(device: &'static Device) -> Result<Arc<Shared>, c_int> {
    let ip = live_info(device)
        .ok()
        .and_then(|i| {
            let v4 = i.addrs.iter().find(|a| a.0.is_ipv4()).or(i.addrs.first());
            v4.map(|a| a.0)
        })
        .unwrap_or(IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED));
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
        ^ u64::from(std::process::id()).rotate_left(32);
    let cfg = ContextConfig {
        mac: device.mac,
        ip,
        seed,
        udp_sport_base: 0xc000,
        tos: 0,
    };
    let mut uctx = uroce::verbs::Context::new(cfg, std::time::Instant::now());
    // GID 0's address is the context's too (`qp::remote_of` says when it is used).
    uctx.set_link_local(Some(std::net::Ipv6Addr::from(default_gid(device.mac).raw)));
    // QPNs start at a number of this process's own, not at 0x11 in every process: a
    // program restarted against the same peer would otherwise offer the QPN of its
    // previous life, which the peer's CM holds in time wait and rejects as a stale
    // connection (IBTA §12.9.8.3.1; the kernel numbers QPs across processes).
    //
    // With `UROCE_SHARDS` = n > 1, each engine numbers its QPs in the class of QPNs its
    // socket receives (`crate::shard`): every n-th from there.
    let n = crate::shard::count_from_env()?;
    let space = |k: usize| match n {
        1 => (first_qpn(seed), 1),
        _ => crate::shard::qpn_space(first_qpn(seed), k, n),
    };
    let (first, stride) = space(0);
    uctx.set_qpn_space(first, stride);
    let errno = |e: std::io::Error| e.raw_os_error().unwrap_or(libc::EMFILE);
    let mut shards = Vec::with_capacity(n - 1);
    for k in 1..n {
        let cfg = ContextConfig {
            seed: seed ^ (k as u64).rotate_left(48),
            ..cfg
        };
        let mut c = uroce::verbs::Context::new(cfg, std::time::Instant::now());
        c.set_link_local(uctx.link_local());
        let (first, stride) = space(k);
        c.set_qpn_space(first, stride);
        shards.push(crate::shard::Shard::new(k, n, c).map_err(errno)?);
    }
    Shared::new(uctx, device, shards)
        .map(Arc::new)
        .map_err(errno)
}

fn close(ctx: *mut ibv_context) -> bool {
    let p = context_ptr_of(ctx);
    let Some(c) = contexts_mut()
        .as_mut()
        .and_then(|m| m.remove(&(p as usize)))
    else {
        return false;
    };
    // The engine stops with the device's last context in this process.
    let last = !contexts()
        .as_ref()
        .is_some_and(|m| m.values().any(|e| Arc::ptr_eq(&e.shared, &c.shared)));
    if c.pid != std::process::id() {
        // Inherited over a fork: the engine's thread is the parent's (joining it here
        // would wait for nothing that exists); what it holds stays, as memory.
        std::mem::forget(c);
        return true;
    }
    if last {
        c.shared.stop();
    }
    // Its verbs_context is freed with it, after the progress thread stopped.
    drop(c);
    true
}

/// `IBV_MTU_*` for an interface MTU: the largest IB MTU a RoCE v2 packet with its
/// headers (IPv6 40, UDP 8, BTH 12, the largest extension headers 28, ICRC 4) fits in.
pub fn active_mtu(if_mtu: u32) -> c_int {
    let room = if_mtu.saturating_sub(92);
    match room {
        4096.. => 5,
        2048..=4095 => 4,
        1024..=2047 => 3,
        512..=1023 => 2,
        _ => 1,
    }
}

/// The default GID of a port with MAC `mac` (IBTA §4.1.1): fe80::/64 with the EUI-64.
pub fn default_gid(mac: [u8; 6]) -> ibv_gid {
    let mut raw = [0u8; 16];
    raw[0] = 0xfe;
    raw[1] = 0x80;
    raw[8..].copy_from_slice(&eui64(mac));
    ibv_gid { raw }
}

/// The GID table of an interface, in the order the module docs give.
pub fn gids(info: &InterfaceInfo) -> Vec<ibv_gid> {
    let mut ordered: Vec<IpAddr> = Vec::new();
    if let Some(mac) = info.mac {
        let g = default_gid(mac).raw;
        ordered.push(IpAddr::V6(std::net::Ipv6Addr::from(g)));
    }
    ordered.extend(info.addrs.iter().map(|a| a.0).filter(IpAddr::is_ipv4));
    for a in info.addrs.iter().map(|a| a.0).filter(IpAddr::is_ipv6) {
        if !ordered.contains(&a) {
            ordered.push(a);
        }
    }
    ordered
        .into_iter()
        .take(GID_TABLE_LEN)
        .map(crate::qp::gid_of)
        .collect()
}

/// IBTA `PortInfo:LinkWidthActive` codes (`IBV_WIDTH_*` as ibv_devinfo prints them).
pub mod width {
    /// 1x.
    pub const X1: u8 = 1;
    /// 4x.
    pub const X4: u8 = 2;
    /// 2x.
    pub const X2: u8 = 16;
}

/// IBTA `PortInfo:LinkSpeedActive` / `LinkSpeedExtActive` codes, per lane, as
/// `ibv_port_attr.active_speed` (and rdma-core 47's `active_speed_ex`) hold them.
pub mod speed {
    /// SDR, 2.5 Gb/s.
    pub const SDR: u8 = 1;
    /// DDR, 5 Gb/s.
    pub const DDR: u8 = 2;
    /// FDR10, 10 Gb/s.
    pub const FDR10: u8 = 8;
    /// EDR, 25 Gb/s.
    pub const EDR: u8 = 32;
    /// HDR, 50 Gb/s.
    pub const HDR: u8 = 64;
    /// NDR, 100 Gb/s.
    pub const NDR: u8 = 128;
}

/// The IB link width and speed a RoCE port reports for an Ethernet link of `mbps`
/// (ethtool's speed; `None` when the driver does not know it). The kernel's RoCE
/// drivers, rdma_rxe among them (`ib_get_eth_speed`), take an unknown speed as 1 Gb/s
/// and pick the IB width and per-lane speed whose product is the first at or above the
/// link's: up to 1 Gb/s 1x SDR, 10 Gb/s 1x FDR10 (a veth's 10000), 20 Gb/s 4x DDR,
/// 25 Gb/s 1x EDR, 40 Gb/s 4x FDR10, 50 Gb/s 2x EDR, 100 Gb/s 4x EDR, 200 Gb/s 4x HDR,
/// faster 4x NDR. uroce does the same, so programs that print or weigh the port's
/// rate (NCCL's bandwidth model, `ibv_devinfo`) see what rxe on that link shows.
pub fn width_and_speed(mbps: Option<u32>) -> (u8, u8) {
    match mbps.unwrap_or(1000) {
        0..=1000 => (width::X1, speed::SDR),
        1001..=10_000 => (width::X1, speed::FDR10),
        10_001..=20_000 => (width::X4, speed::DDR),
        20_001..=25_000 => (width::X1, speed::EDR),
        25_001..=40_000 => (width::X4, speed::FDR10),
        40_001..=50_000 => (width::X2, speed::EDR),
        50_001..=100_000 => (width::X4, speed::EDR),
        100_001..=200_000 => (width::X4, speed::HDR),
        _ => (width::X4, speed::NDR),
    }
}

/// A port's attributes: `struct ibv_port_attr` as rdma-core 44 lays it out, and
/// `active_speed_ex`, the field rdma-core 47 added after it (bytes 52-55 of the
/// 56-byte structure newer headers, NCCL's own among them, pass), which holds the
/// active speed whatever its size (for speeds above NDR `active_speed` is 0).
#[derive(Clone, Copy, Debug, Default)]
pub struct PortAttr {
    /// The rdma-core 44 structure.
    pub attr: ibv_port_attr,
    /// `active_speed_ex`.
    pub active_speed_ex: u32,
}

fn port_attr(info: &InterfaceInfo, mbps: Option<u32>) -> ibv_port_attr {
    let active = info.up && matches!(info.oper_state, OperState::Up | OperState::Unknown);
    let (active_width, active_speed) = width_and_speed(mbps);
    ibv_port_attr {
        state: if active {
            abi::IBV_PORT_ACTIVE
        } else {
            abi::IBV_PORT_DOWN
        },
        max_mtu: 5,
        active_mtu: active_mtu(info.mtu),
        gid_tbl_len: GID_TABLE_LEN as c_int,
        // IBV_PORT_IP_BASED_GIDS.
        port_cap_flags: 1 << 26,
        max_msg_sz: 1 << 31,
        pkey_tbl_len: 1,
        max_vl_num: 1,
        active_width,
        active_speed,
        // LINK_UP or DISABLED.
        phys_state: if active { 5 } else { 3 },
        link_layer: abi::IBV_LINK_LAYER_ETHERNET,
        ..Default::default()
    }
}

fn device_attr(device: &Device) -> ibv_device_attr {
    let mut fw_ver = [0 as c_char; 64];
    copy_name(&mut fw_ver, concat!("uroce ", env!("CARGO_PKG_VERSION")));
    ibv_device_attr {
        fw_ver,
        node_guid: device.guid(),
        sys_image_guid: device.guid(),
        max_mr_size: u64::MAX,
        page_size_cap: 0xffff_f000,
        // The IEEE OUI field of a soft device, as rdma_rxe reports (0xffffff: no OUI;
        // rdma-core's test suite wants a non-zero vendor id); no part number.
        vendor_id: VENDOR_ID,
        vendor_part_id: 0,
        hw_ver: 0,
        max_qp: 1 << 16,
        max_qp_wr: MAX_QP_WR as c_int,
        // What uroce does: SYS_IMAGE_GUID, RC_RNR_NAK_GEN, SRQ_RESIZE, CURR_QP_STATE_MOD,
        // PORT_ACTIVE_EVENT (the link is watched once the datapath runs), MEM_WINDOW.
        device_cap_flags: (1 << 11) | (1 << 12) | (1 << 13) | (1 << 7) | (1 << 10) | (1 << 17),
        max_sge: uroce::transport::MAX_SGE as c_int,
        max_sge_rd: uroce::transport::MAX_SGE as c_int,
        max_cq: 1 << 16,
        max_cqe: uroce::endpoint::MAX_CQE as c_int,
        max_mr: 1 << 16,
        max_pd: 1 << 16,
        max_qp_rd_atom: 16,
        max_ee_rd_atom: 0,
        max_res_rd_atom: 0,
        max_qp_init_rd_atom: 16,
        max_ee_init_rd_atom: 0,
        // A peer's FETCH_ADD / CMP_SWAP is one atomic operation on the program's word
        // (uroce's mem/shared.rs), atomic with the program's own atomics too.
        atomic_cap: abi::IBV_ATOMIC_GLOB,
        max_ee: 0,
        max_rdd: 0,
        max_mw: 1 << 16,
        max_raw_ipv6_qp: 0,
        max_raw_ethy_qp: 0,
        max_mcast_grp: 0,
        max_mcast_qp_attach: 0,
        max_total_mcast_qp_attach: 0,
        max_ah: 1 << 16,
        max_fmr: 0,
        max_map_per_fmr: 0,
        max_srq: 1 << 16,
        max_srq_wr: uroce::transport::MAX_SRQ_WR as c_int,
        max_srq_sge: uroce::transport::MAX_SGE as c_int,
        max_pkeys: 1,
        local_ca_ack_delay: 15,
        phys_port_cnt: 1,
    }
}

fn live_info(device: &Device) -> Result<InterfaceInfo, c_int> {
    addresses::interface_info(&device.iface).map_err(|_| ENODEV)
}

/// `verbs_context.query_port` (what the inline `ibv_query_port` calls) and
/// `ibv_query_port`: the port's attributes, or the errno.
pub(crate) fn query_port(ctx: *mut ibv_context, port: u8) -> Result<PortAttr, c_int> {
    let device = context(ctx).ok_or(EINVAL)?;
    if port != 1 {
        return Err(EINVAL);
    }
    let (_, attr) = device.port_attr_now()?;
    Ok(PortAttr {
        attr,
        active_speed_ex: u32::from(attr.active_speed),
    })
}

/// `verbs_context.query_device_ex` (what the inline `ibv_query_device_ex` calls): the
/// attributes, or the errno (EINVAL for an input `comp_mask` other than 0). `comp_mask`
/// is the input's (None without one).
pub(crate) fn query_device_ex(
    ctx: *mut ibv_context,
    comp_mask: Option<u32>,
) -> Result<abi::ibv_device_attr_ex, c_int> {
    let device = context(ctx).ok_or(EINVAL)?;
    if comp_mask.is_some_and(|m| m != 0) {
        return Err(EINVAL);
    }
    let mut ex: abi::ibv_device_attr_ex = crate::ffi::zeroed();
    ex.orig_attr = device_attr(device);
    ex.phys_port_cnt_ex = 1;
    Ok(ex)
}

/// `ibv_get_device_list`: the devices as the program gets them.
pub(crate) fn get_device_list() -> Result<Vec<*mut ibv_device>, c_int> {
    Ok(list()?.into_iter().map(Device::c_ptr).collect())
}

/// `ibv_get_device_name`: NULL with errno EINVAL for a device that is not ours.
pub(crate) fn get_device_name(dev: *mut ibv_device) -> *const c_char {
    match device(dev) {
        Some(d) => d.dev.name.as_ptr(),
        None => ffi::null_with::<c_char>(EINVAL).cast_const(),
    }
}

/// `ibv_get_device_guid`: 0 for a device that is not ours.
pub(crate) fn get_device_guid(dev: *mut ibv_device) -> u64 {
    device(dev).map_or(0, Device::guid)
}

/// `ibv_open_device`: NULL with errno ENODEV for a device that is not ours.
pub(crate) fn open_device(dev: *mut ibv_device) -> *mut ibv_context {
    match device(dev) {
        Some(d) => open(d),
        None => {
            set_errno(ENODEV);
            std::ptr::null_mut()
        }
    }
}

/// `ibv_close_device`: 0, or -1 with errno EINVAL for a context that is not open.
pub(crate) fn close_device(ctx: *mut ibv_context) -> c_int {
    if close(ctx) {
        0
    } else {
        set_errno(EINVAL);
        -1
    }
}

/// `ibv_query_device`: the attributes, or EINVAL for a context that is not open.
pub(crate) fn query_device(ctx: *mut ibv_context) -> Result<ibv_device_attr, c_int> {
    context(ctx).map(device_attr).ok_or(EINVAL)
}

fn gid_at(ctx: *mut ibv_context, port: u32, index: c_int) -> Result<Option<ibv_gid>, c_int> {
    let device = context(ctx).ok_or(EINVAL)?;
    if port != 1 {
        return Err(EINVAL);
    }
    let index = usize::try_from(index).map_err(|_| EINVAL)?;
    if index >= GID_TABLE_LEN {
        return Err(EINVAL);
    }
    let info = live_info(device)?;
    Ok(gids(&info).get(index).copied())
}

/// `ibv_query_gid`: the entry (an unused one reads as zeros), or the errno.
pub(crate) fn query_gid(ctx: *mut ibv_context, port: u8, index: c_int) -> Result<ibv_gid, c_int> {
    gid_at(ctx, u32::from(port), index).map(Option::unwrap_or_default)
}

/// `ibv_query_gid_type` (rdma-core's driver.h): `IBV_GID_TYPE_SYSFS_ROCE_V2` for a used
/// entry, or the errno (ENODATA for an unused one).
pub(crate) fn query_gid_type(ctx: *mut ibv_context, port: u8, index: u32) -> Result<c_int, c_int> {
    match gid_at(ctx, u32::from(port), c_int::try_from(index).unwrap_or(-1)) {
        Ok(Some(_)) => Ok(abi::IBV_GID_TYPE_SYSFS_ROCE_V2),
        Ok(None) => Err(ENODATA),
        Err(e) => Err(e),
    }
}

/// `_ibv_query_gid_ex` (behind the inline `ibv_query_gid_ex`): the entry, or the errno
/// (ENODATA for an unused entry, EINVAL for flags or an `entry_size` too small).
pub(crate) fn query_gid_ex(
    ctx: *mut ibv_context,
    port: u32,
    index: u32,
    flags: u32,
    entry_size: usize,
) -> Result<abi::ibv_gid_entry, c_int> {
    if flags != 0 || entry_size < std::mem::size_of::<abi::ibv_gid_entry>() {
        return Err(EINVAL);
    }
    let device = context(ctx).ok_or(EINVAL)?;
    match gid_at(ctx, port, c_int::try_from(index).unwrap_or(-1)) {
        Ok(Some(gid)) => Ok(abi::ibv_gid_entry {
            gid,
            gid_index: index,
            port_num: port,
            gid_type: abi::IBV_GID_TYPE_ROCE_V2,
            ndev_ifindex: device.ifindex,
        }),
        Ok(None) => Err(ENODATA),
        Err(e) => Err(e),
    }
}

/// `_ibv_query_gid_table` (behind the inline `ibv_query_gid_table`): every used GID entry
/// of every port, in index order, as `ibv_query_gid_ex` gives each (RoCE v2, the
/// interface's ifindex), or the errno rdma-core gives: EINVAL for `flags` other than 0,
/// an `entry_size` smaller than `struct ibv_gid_entry`, or a table with more entries
/// than `max_entries`.
pub(crate) fn query_gid_table(
    ctx: *mut ibv_context,
    max_entries: usize,
    flags: u32,
    entry_size: usize,
) -> Result<Vec<abi::ibv_gid_entry>, c_int> {
    if flags != 0 || entry_size < std::mem::size_of::<abi::ibv_gid_entry>() {
        return Err(EINVAL);
    }
    let device = context(ctx).ok_or(EINVAL)?;
    let info = live_info(device)?;
    let table: Vec<abi::ibv_gid_entry> = gids(&info)
        .into_iter()
        .enumerate()
        .map(|(i, gid)| abi::ibv_gid_entry {
            gid,
            gid_index: i as u32,
            port_num: 1,
            gid_type: abi::IBV_GID_TYPE_ROCE_V2,
            ndev_ifindex: device.ifindex,
        })
        .collect();
    if table.len() > max_entries {
        return Err(EINVAL);
    }
    Ok(table)
}

/// `ibv_query_pkey`: the one P_Key, 0xffff, at index 0; or EINVAL.
pub(crate) fn query_pkey(ctx: *mut ibv_context, port: u8, index: c_int) -> Result<u16, c_int> {
    match context(ctx).is_some() && port == 1 && index == 0 {
        true => Ok(0xffff),
        false => Err(EINVAL),
    }
}

#[cfg(test)]
pub(crate) mod tests {

    #[test]
    fn first_qpns_differ_by_seed_and_stay_clear_of_the_wrap() {
        let qpns: Vec<u32> = (0..1000u64).map(|k| first_qpn(k * 7919 + 1)).collect();
        assert!(qpns.iter().all(|&q| (0x100..0x80_0000).contains(&q)));
        let mut d = qpns.clone();
        d.sort_unstable();
        d.dedup();
        assert!(d.len() > 990, "{} distinct of 1000", d.len());
    }

    use super::*;
    use crate::exports::{
        ibv_close_device, ibv_get_device_guid, ibv_get_device_name, ibv_open_device,
    };
    use std::net::{Ipv4Addr, Ipv6Addr};

    /// A veth0 (ifindex 7, MAC 02:00:00:00:00:01, MTU 1500, up) with `addrs` (/24), for
    /// the tests of this crate's modules.
    pub(crate) fn info(addrs: &[IpAddr]) -> InterfaceInfo {
        InterfaceInfo {
            name: "veth0".into(),
            index: 7,
            mac: Some([2, 0, 0, 0, 0, 1]),
            mtu: 1500,
            up: true,
            oper_state: OperState::Up,
            addrs: addrs.iter().map(|&a| (a, 24)).collect(),
            connected: Vec::new(),
        }
    }

    #[test]
    fn link_speed_maps_to_width_and_speed_as_rxe() {
        // Unknown is taken as 1 Gb/s, as the kernel's RoCE drivers do.
        assert_eq!(width_and_speed(None), (width::X1, speed::SDR));
        assert_eq!(width_and_speed(Some(100)), (width::X1, speed::SDR));
        assert_eq!(width_and_speed(Some(1000)), (width::X1, speed::SDR));
        // veth's 10000.
        assert_eq!(width_and_speed(Some(10_000)), (width::X1, speed::FDR10));
        assert_eq!(width_and_speed(Some(20_000)), (width::X4, speed::DDR));
        assert_eq!(width_and_speed(Some(25_000)), (width::X1, speed::EDR));
        assert_eq!(width_and_speed(Some(40_000)), (width::X4, speed::FDR10));
        assert_eq!(width_and_speed(Some(50_000)), (width::X2, speed::EDR));
        assert_eq!(width_and_speed(Some(100_000)), (width::X4, speed::EDR));
        assert_eq!(width_and_speed(Some(200_000)), (width::X4, speed::HDR));
        assert_eq!(width_and_speed(Some(400_000)), (width::X4, speed::NDR));
        let i = info(&[]);
        let a = port_attr(&i, Some(25_000));
        assert_eq!((a.active_width, a.active_speed), (width::X1, speed::EDR));
    }

    #[test]
    fn active_mtu_leaves_room_for_the_headers() {
        assert_eq!(active_mtu(1500), 3);
        assert_eq!(active_mtu(9000), 5);
        assert_eq!(active_mtu(4096), 4);
        assert_eq!(active_mtu(4188), 5);
        assert_eq!(active_mtu(2140), 4);
        assert_eq!(active_mtu(576), 1);
        assert_eq!(active_mtu(0), 1);
    }

    #[test]
    fn gid_table_default_gid_then_ipv4_then_ipv6() {
        let v4 = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));
        let global: IpAddr = "fd00::2".parse::<Ipv6Addr>().unwrap().into();
        let ll: IpAddr = "fe80::1".parse::<Ipv6Addr>().unwrap().into();
        let eui: IpAddr = "fe80::ff:fe00:1".parse::<Ipv6Addr>().unwrap().into();
        let as_ip = |g: &ibv_gid| Ipv6Addr::from(g.raw);
        let table = gids(&info(&[global, v4, ll, eui]));
        assert_eq!(
            table.iter().map(as_ip).collect::<Vec<_>>(),
            vec![
                "fe80::ff:fe00:1".parse::<Ipv6Addr>().unwrap(),
                "::ffff:10.0.0.1".parse().unwrap(),
                "fd00::2".parse().unwrap(),
                "fe80::1".parse().unwrap(),
            ]
        );
        // Before the kernel has brought IPv6 up, the IPv4 GID is at index 1 all the same.
        let early = gids(&info(&[v4]));
        assert_eq!(
            as_ip(&early[1]),
            "::ffff:10.0.0.1".parse::<Ipv6Addr>().unwrap()
        );
        let many: Vec<IpAddr> = (0..40)
            .map(|i| IpAddr::V4(Ipv4Addr::new(10, 0, 0, i)))
            .collect();
        assert_eq!(gids(&info(&many)).len(), GID_TABLE_LEN);
    }

    #[test]
    fn port_follows_the_link() {
        let mut i = info(&[]);
        assert_eq!(port_attr(&i, None).state, abi::IBV_PORT_ACTIVE);
        assert_eq!(port_attr(&i, None).link_layer, abi::IBV_LINK_LAYER_ETHERNET);
        i.oper_state = OperState::LowerLayerDown;
        assert_eq!(port_attr(&i, None).state, abi::IBV_PORT_DOWN);
        i.oper_state = OperState::Up;
        i.up = false;
        assert_eq!(port_attr(&i, None).state, abi::IBV_PORT_DOWN);
    }

    #[test]
    fn selection_and_ethernet_only() {
        let mut i = info(&[]);
        assert!(usable(&i, None));
        assert!(usable(&i, Some("eth0, veth0")));
        assert!(!usable(&i, Some("eth0")));
        i.mac = None;
        assert!(!usable(&i, None));
    }

    #[test]
    fn guid_is_eui64_of_the_mac_in_network_order() {
        let d = Device {
            dev: crate::ffi::zeroed(),
            iface: "x".into(),
            ifindex: 1,
            mac: [0x00, 0x11, 0x22, 0x33, 0x44, 0x55],
            uverbs: 0,
        };
        assert_eq!(u64::from_be(d.guid()), 0x0211_22ff_fe33_4455);
    }

    #[test]
    fn uverbs_numbers_follow_the_listing_and_never_repeat() {
        assert_eq!(uverbs_number(0, &[]), 0);
        assert_eq!(uverbs_number(2, &[0, 1]), 2);
        // A device that appeared later at a position another still holds.
        assert_eq!(uverbs_number(1, &[0, 1, 2]), 3);
        assert_eq!(uverbs_number(0, &[0, 2]), 1);
    }

    #[test]
    fn unknown_pointers_are_refused() {
        let mut bogus = [0u8; 1024];
        let ctx = bogus.as_mut_ptr().wrapping_add(512).cast::<ibv_context>();
        assert_eq!(ibv_close_device(ctx), -1);
        assert!(ibv_open_device(bogus.as_mut_ptr().cast()).is_null());
        assert!(ibv_get_device_name(bogus.as_mut_ptr().cast()).is_null());
        assert_eq!(ibv_get_device_guid(bogus.as_mut_ptr().cast()), 0);
    }
}
