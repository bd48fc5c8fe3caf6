//! The AF_XDP backend: an XDP program steers UDP/4791 to AF_XDP sockets (one per receive
//! queue), everything else goes on to the kernel. Frames are read from and written to a
//! UMEM shared with the kernel through fill / RX / TX / completion rings.
//!
//! Copy mode with NEED_WAKEUP (veth has no zero-copy); zero-copy is tried first where the
//! driver has it. Multi-buffer (XDP_USE_SG) carries frames larger than one 4 KiB UMEM
//! chunk, so a 4096-byte path MTU works (the interface MTU must allow 4154-byte frames).
//! Chunks cannot be larger than a page: Linux refuses 8 KiB chunks even on huge pages
//! (EINVAL on 6.18; that support was merged for 6.6 and taken out again). Received
//! multi-buffer frames are still read in place: only every other RX chunk is offered to
//! the kernel, and a frame's tail is copied into the chunk after its head.
//!
//! Each socket buffers as many received frames as an RC requester keeps unacknowledged
//! (2048): a burst from one QP over a fast link (veth) then never finds the fill ring
//! empty. [`XdpBackend::stats`] has the kernel's counters when it does.
//!
//! [`XdpConfig`] tunes how often the kernel is woken to send and turns on busy polling;
//! [`XdpBackend::open_with`] takes it.

mod bpf;
mod config;
mod ring;

pub use config::{
    BusyPoll, XdpConfig, BUSY_POLL_ENV, DEFAULT_TX_BATCH, KERNEL_TX_BATCH, MAX_TX_BATCH,
    TX_BATCH_ENV,
};

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::Duration;

use super::{holder, Backend, Received, Transmit};
use ring::{Ring, Umem};

const AF_XDP: i32 = 44;
const SOL_XDP: i32 = 283;
const XDP_MMAP_OFFSETS: i32 = 1;
const XDP_STATISTICS: i32 = 7;
const XDP_MAX_TX_SKB_BUDGET: i32 = 9;
// SOL_SOCKET options of asm-generic/socket.h (x86, arm64, riscv; not mips, sparc,
// parisc or alpha, which number them differently).
const SO_BUSY_POLL: i32 = 46;
const SO_INCOMING_NAPI_ID: i32 = 56;
const SO_PREFER_BUSY_POLL: i32 = 69;
const SO_BUSY_POLL_BUDGET: i32 = 70;
/// NAPI ids below this are not NAPI instances (`MIN_NAPI_ID` in include/net/busy_poll.h:
/// smaller values are sender_cpu hints).
const MIN_NAPI_ID: u32 = 8 * 1024;
const XDP_RX_RING: i32 = 2;
const XDP_TX_RING: i32 = 3;
const XDP_UMEM_REG: i32 = 4;
const XDP_UMEM_FILL_RING: i32 = 5;
const XDP_UMEM_COMPLETION_RING: i32 = 6;
const XDP_COPY: u16 = 1 << 1;
const XDP_ZEROCOPY: u16 = 1 << 2;
const XDP_USE_NEED_WAKEUP: u16 = 1 << 3;
const XDP_USE_SG: u16 = 1 << 4;
const XDP_PKT_CONTD: u32 = 1;

const CHUNK: u32 = 4096;

/// Writes a frame into a TX slot and says where in the slot it starts and its length.
type PlaceFrame<'a> = dyn FnMut(&mut [u8]) -> Option<(usize, usize)> + 'a;

/// Room in a TX slot in front of the RoCE part for the longest link headers uroce writes
/// (Ethernet, IPv6, UDP); IPv4's are shorter and the frame starts later in the slot.
const HEADROOM: usize = crate::wire::ethernet::HEADER_LEN
    + crate::wire::ipv6::HEADER_LEN
    + crate::wire::udp::HEADER_LEN;

/// The kernel's counters of an AF_XDP socket (XDP_STATISTICS), summed over the sockets.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct XdpStats {
    /// Frames dropped on receive: in copy mode when the fill ring had no chunk for them
    /// (and frames too large without multi-buffer); a zero-copy driver's own drops are
    /// not counted here.
    pub rx_dropped: u64,
    /// Received descriptors the kernel found invalid.
    pub rx_invalid_descs: u64,
    /// TX descriptors the kernel found invalid.
    pub tx_invalid_descs: u64,
    /// Frames dropped because the RX ring was full (the application fell behind).
    pub rx_ring_full: u64,
    /// Times the fill ring had no chunk for a frame.
    pub rx_fill_ring_empty_descs: u64,
    /// Times the kernel found the TX ring empty when woken.
    pub tx_ring_empty_descs: u64,
}

/// How the socket ended up bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct XdpMode {
    /// The program runs in the driver (native), not in the generic skb path.
    pub native: bool,
    /// Zero-copy bind (else copy mode).
    pub zero_copy: bool,
    /// Multi-buffer frames (XDP_USE_SG).
    pub multi_buffer: bool,
    /// The NAPI instance the kernel tied the (first) socket to, which busy polling
    /// polls; 0 when the driver names none (veth, generic XDP): busy polling then polls
    /// nothing.
    pub napi_id: u32,
    /// Busy polling as asked for (and set on every socket).
    pub busy_poll: Option<BusyPoll>,
    /// Frames the kernel takes per wake-up in copy mode: 32 descriptors (16 multi-buffer
    /// frames) unless more was asked for and the kernel has `XDP_MAX_TX_SKB_BUDGET`.
    pub tx_budget: u32,
}

impl std::fmt::Display for XdpMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} XDP, {}{}",
            if self.native { "native" } else { "generic" },
            if self.zero_copy {
                "zero-copy"
            } else {
                "copy mode"
            },
            if self.multi_buffer {
                ", multi-buffer"
            } else {
                ""
            }
        )?;
        if self.tx_budget > KERNEL_TX_BATCH {
            write!(f, ", {} frames per wake-up", self.tx_budget)?;
        }
        if let Some(bp) = self.busy_poll {
            write!(f, ", busy poll {} µs", bp.usecs)?;
            if self.napi_id >= MIN_NAPI_ID {
                write!(f, " on NAPI {}", self.napi_id)?;
            } else {
                write!(f, " (no NAPI: polls nothing)")?;
            }
        }
        Ok(())
    }
}

struct Socket {
    fd: OwnedFd,
    umem: Umem,
    fill: Ring,
    comp: Ring,
    rx: Ring,
    tx: Ring,
    /// First UMEM offset of the TX half (the RX half is below it).
    tx_base: u64,
    /// Bytes per TX slot: one chunk, or two adjacent chunks with multi-buffer so a
    /// frame of up to 8 KiB is built in one contiguous place.
    tx_slot: u64,
    /// Free TX slots (UMEM offsets).
    free_tx: Vec<u64>,
    /// Descriptors of each TX slot the kernel has not completed yet.
    tx_pending: Vec<u8>,
    /// Frames queued on the TX ring since the last wake-up.
    unkicked: u32,
    /// Frames queued before the kernel is woken ([`XdpConfig::tx_batch`]).
    tx_batch: u32,
    /// Busy polling is on: an empty RX ring is worth a `recvfrom` (which polls the NAPI).
    busy_poll: bool,
    /// The NAPI the kernel tied the socket to (0: none).
    napi_id: u32,
    /// Busy polling was asked for and the socket had no NAPI when bound: how many more
    /// times to look for one after frames arrive, before taking it that the driver has
    /// none (veth).
    napi_checks: u8,
    /// Frames the kernel takes per wake-up.
    tx_budget: u32,
    /// Since when the kernel has refused to take queued frames (copy mode).
    stalled_since: Option<std::time::Instant>,
    /// Multi-buffer: only every other RX chunk is offered to the kernel, and the chunk
    /// after a frame's first takes the rest of the frame (see `drain`).
    spill: bool,
}

/// Chunks a received frame may span (a 4096-byte path MTU takes two).
const MAX_PARTS: usize = 4;

/// The steering program attached to an interface, shared by the backends using it.
struct Attachment {
    _link: OwnedFd,
    _prog: OwnedFd,
    _map: OwnedFd,
}

/// AF_XDP on one interface.
pub struct XdpBackend {
    socks: Vec<Socket>,
    _attach: std::sync::Arc<Attachment>,
    mode: XdpMode,
    next_rx: usize,
    /// The interface's MAC: the source of every frame built here.
    mac: [u8; 6],
    /// Where a multi-buffer received frame is put together.
    scratch: Vec<u8>,
}

fn sockopt<T>(fd: i32, name: i32, v: &T) -> io::Result<()> {
    setsockopt(fd, SOL_XDP, name, v)
}

fn setsockopt<T>(fd: i32, level: i32, name: i32, v: &T) -> io::Result<()> {
    // SAFETY: `v` is a live value of the size passed.
    let r = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (v as *const T).cast(),
            std::mem::size_of::<T>() as u32,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

#[repr(C)]
#[derive(Default)]
struct RingOffset {
    producer: u64,
    consumer: u64,
    desc: u64,
    flags: u64,
}

#[repr(C)]
#[derive(Default)]
struct MmapOffsets {
    rx: RingOffset,
    tx: RingOffset,
    fr: RingOffset,
    cr: RingOffset,
}

#[repr(C)]
struct UmemReg {
    addr: u64,
    len: u64,
    chunk_size: u32,
    headroom: u32,
    flags: u32,
    tx_metadata_len: u32,
}

#[repr(C)]
struct SockaddrXdp {
    family: u16,
    flags: u16,
    ifindex: u32,
    queue_id: u32,
    shared_umem_fd: u32,
}

/// Sets what `cfg` asks for on a bound socket whose TX ring has `tx_ring` entries and
/// whose frames take `descs` descriptors each (2 with multi-buffer); returns the
/// socket's NAPI id (0: none) and the frames the kernel takes per wake-up (its budget
/// counts descriptors).
/// Busy polling the kernel refuses is an error naming the option (EPERM: CAP_NET_ADMIN
/// is missing; ENOPROTOOPT: a kernel before 5.11); a TX budget it does not know
/// (before 6.17) leaves the kernel's 32, which only means more wake-ups.
fn tune(fd: i32, cfg: &XdpConfig, tx_ring: u32, descs: u32) -> io::Result<(u32, u32)> {
    let mut tx_budget = KERNEL_TX_BATCH;
    let want = cfg.tx_batch.saturating_mul(descs).min(tx_ring);
    if want > KERNEL_TX_BATCH {
        match sockopt(fd, XDP_MAX_TX_SKB_BUDGET, &want) {
            Ok(()) => tx_budget = want,
            Err(e) if e.raw_os_error() == Some(libc::ENOPROTOOPT) => {}
            Err(e) => {
                return Err(io::Error::new(
                    e.kind(),
                    format!("XDP_MAX_TX_SKB_BUDGET {want}: {e}"),
                ))
            }
        }
    }
    if let Some(bp) = cfg.busy_poll {
        let why = |what: String, e: io::Error| {
            let hint = match e.raw_os_error() {
                Some(libc::EPERM) => " (needs CAP_NET_ADMIN)",
                Some(libc::ENOPROTOOPT) => " (the kernel is older than 5.11)",
                _ => "",
            };
            io::Error::new(e.kind(), format!("{what} on the AF_XDP socket: {e}{hint}"))
        };
        let usecs = i32::try_from(bp.usecs).unwrap_or(i32::MAX);
        setsockopt(fd, libc::SOL_SOCKET, SO_BUSY_POLL, &usecs)
            .map_err(|e| why(format!("SO_BUSY_POLL {usecs} µs"), e))?;
        let prefer = i32::from(bp.prefer);
        setsockopt(fd, libc::SOL_SOCKET, SO_PREFER_BUSY_POLL, &prefer)
            .map_err(|e| why(format!("SO_PREFER_BUSY_POLL {prefer}"), e))?;
        if let Some(b) = bp.budget {
            let b = i32::from(b);
            setsockopt(fd, libc::SOL_SOCKET, SO_BUSY_POLL_BUDGET, &b)
                .map_err(|e| why(format!("SO_BUSY_POLL_BUDGET {b}"), e))?;
        }
    }
    Ok((napi_id_of(fd), tx_budget / descs.max(1)))
}

/// The NAPI the kernel tied socket `fd` to (`SO_INCOMING_NAPI_ID`; 0 for none yet): set
/// at bind from the driver's queue since Linux 6.13, on receive before that.
fn napi_id_of(fd: i32) -> u32 {
    let mut napi = 0u32;
    let mut len = std::mem::size_of::<u32>() as libc::socklen_t;
    // SAFETY: `napi` is a writable u32 and `len` its size.
    let r = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            SO_INCOMING_NAPI_ID,
            (&mut napi as *mut u32).cast(),
            &mut len,
        )
    };
    if r != 0 {
        0
    } else {
        napi
    }
}

/// Opens one AF_XDP socket on `queue` with room for `frames` frames in flight each way.
fn open_socket(ifindex: u32, queue: u32, sg: bool, frames: u32) -> io::Result<(Socket, bool)> {
    let frames = frames.clamp(64, 1 << 16).next_power_of_two();
    // SAFETY: plain socket call; the descriptor is owned at once.
    let raw = unsafe { libc::socket(AF_XDP, libc::SOCK_RAW, 0) };
    if raw < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `raw` is a fresh descriptor nobody else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    // A frame per chunk; with multi-buffer a frame takes two chunks to send and, as the
    // receive side offers only every other chunk, four to receive. Every ring holds a
    // descriptor per chunk in use.
    let (rx_chunks, tx_chunks) = if sg {
        (4 * frames, 2 * frames)
    } else {
        (frames, frames)
    };
    let ring = if sg { 2 * frames } else { frames };
    let umem = Umem::new((rx_chunks + tx_chunks) as usize * CHUNK as usize)?;
    let reg = UmemReg {
        addr: umem.addr() as u64,
        len: umem.len() as u64,
        chunk_size: CHUNK,
        headroom: 0,
        flags: 0,
        tx_metadata_len: 0,
    };
    sockopt(raw, XDP_UMEM_REG, &reg)?;
    for name in [
        XDP_UMEM_FILL_RING,
        XDP_UMEM_COMPLETION_RING,
        XDP_RX_RING,
        XDP_TX_RING,
    ] {
        sockopt(raw, name, &ring)?;
    }
    let mut off = MmapOffsets::default();
    let mut len = std::mem::size_of::<MmapOffsets>() as u32;
    // SAFETY: `off` is a writable MmapOffsets and `len` its size.
    let r = unsafe {
        libc::getsockopt(
            raw,
            SOL_XDP,
            XDP_MMAP_OFFSETS,
            (&mut off as *mut MmapOffsets).cast(),
            &mut len,
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    let fill = Ring::map(raw, 0x1_0000_0000, &off.fr, ring, 8)?;
    let comp = Ring::map(raw, 0x1_8000_0000, &off.cr, ring, 8)?;
    let rx = Ring::map(raw, 0, &off.rx, ring, 16)?;
    let tx = Ring::map(raw, 0x8000_0000, &off.tx, ring, 16)?;
    let mut zero_copy = true;
    let bind = |flags: u16| {
        let sa = SockaddrXdp {
            family: AF_XDP as u16,
            flags,
            ifindex,
            queue_id: queue,
            shared_umem_fd: 0,
        };
        // SAFETY: `sa` is a valid sockaddr_xdp of the size passed.
        let r = unsafe {
            libc::bind(
                raw,
                (&sa as *const SockaddrXdp).cast(),
                std::mem::size_of::<SockaddrXdp>() as u32,
            )
        };
        if r == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    };
    let sg_flag = if sg { XDP_USE_SG } else { 0 };
    if bind(XDP_ZEROCOPY | XDP_USE_NEED_WAKEUP | sg_flag).is_err() {
        zero_copy = false;
        bind(XDP_COPY | XDP_USE_NEED_WAKEUP | sg_flag)?;
    }
    let mut s = Socket {
        fd,
        umem,
        fill,
        comp,
        rx,
        tx,
        tx_slot: if sg {
            2 * u64::from(CHUNK)
        } else {
            u64::from(CHUNK)
        },
        free_tx: Vec::new(),
        tx_pending: Vec::new(),
        unkicked: 0,
        tx_batch: KERNEL_TX_BATCH,
        busy_poll: false,
        napi_id: 0,
        napi_checks: 0,
        tx_budget: KERNEL_TX_BATCH / if sg { 2 } else { 1 },
        stalled_since: None,
        spill: sg,
        tx_base: u64::from(rx_chunks) * u64::from(CHUNK),
    };
    // The first half of the chunks wait in the fill ring for received packets (every
    // other one with multi-buffer).
    let stride = if sg { 2 } else { 1 };
    for i in (0..rx_chunks).step_by(stride) {
        s.fill.push_addr(u64::from(i * CHUNK));
    }
    s.fill.submit();
    let slots = u64::from(tx_chunks) * u64::from(CHUNK) / s.tx_slot;
    s.free_tx = (0..slots)
        .rev()
        .map(|i| s.tx_base + i * s.tx_slot)
        .collect();
    s.tx_pending = vec![0; slots as usize];
    Ok((s, zero_copy))
}

/// Attaches `prog` in the driver (native) where it can, else in the generic skb path;
/// says which.
///
/// An interface that has an XDP program already (another process's AF_XDP: the kernel
/// answers EBUSY for a link in the same mode, EEXIST for a program in the other) is
/// [`io::ErrorKind::ResourceBusy`], naming the holder where one is seen
/// ([`holder::xdp_holder`]): one AF_XDP datapath per interface, so a caller must not
/// take another datapath instead (see [`is_held`]).
fn attach_any(prog: i32, ifindex: u32, iface: &str) -> io::Result<(OwnedFd, bool)> {
    let drv = match bpf::attach(prog, ifindex, bpf::XDP_FLAGS_DRV_MODE) {
        Ok(l) => return Ok((l, true)),
        Err(e) => e,
    };
    bpf::attach(prog, ifindex, bpf::XDP_FLAGS_SKB_MODE)
        .map(|l| (l, false))
        .map_err(|e| {
            let taken =
                |e: &io::Error| matches!(e.raw_os_error(), Some(libc::EBUSY | libc::EEXIST));
            if taken(&drv) || taken(&e) {
                held(iface, ifindex, "its XDP hook is taken")
            } else {
                io::Error::new(e.kind(), format!("attaching XDP to {iface}: {e}"))
            }
        })
}

/// The error of an interface whose AF_XDP resources another datapath holds.
fn held(iface: &str, ifindex: u32, what: &str) -> io::Error {
    let by = holder::xdp_holder(ifindex);
    let by = match by {
        Some(h) => format!("held by {h}"),
        None => "no process seen holding it (one that just exited may still be letting go, \
                 or a program was attached with `ip link`)"
            .to_string(),
    };
    io::Error::new(
        io::ErrorKind::ResourceBusy,
        format!("AF_XDP on {iface} is in use, {what}: {by}; one uroce process per interface"),
    )
}

/// Whether an error of [`XdpBackend::open`] says that another datapath holds the
/// interface (its XDP hook or queue 0's AF_XDP socket): a caller choosing a datapath must
/// then fail (EADDRINUSE) rather than take the UDP backend, which would split the host's
/// RoCE traffic between two processes, the XDP program taking it all.
pub fn is_held(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::ResourceBusy
}

/// The MAC address of `iface`, the source address of the frames sent, as the kernel
/// reports it over rtnetlink ([`crate::net::addresses::interface_info`]).
fn if_mac(iface: &str) -> io::Result<[u8; 6]> {
    let info = crate::net::addresses::interface_info(iface)
        .map_err(|e| io::Error::other(format!("reading the MAC address of {iface}: {e}")))?;
    match info.mac {
        Some(mac) if mac != [0; 6] => Ok(mac),
        _ => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{iface} has no Ethernet address (AF_XDP needs an Ethernet interface)"),
        )),
    }
}

fn ifindex(iface: &str) -> io::Result<u32> {
    let name = CString::new(iface).map_err(|_| io::Error::other("interface name"))?;
    // SAFETY: a valid C string.
    let i = unsafe { libc::if_nametoindex(name.as_ptr()) };
    if i == 0 {
        Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!("no interface {iface}"),
        ))
    } else {
        Ok(i)
    }
}

impl XdpBackend {
    /// Loads and attaches the steering program on `iface` and opens one AF_XDP socket per
    /// receive queue (`queues`, at least 1). `mtu` (or the link's MTU) above 3498 asks for multi-buffer.
    /// `frames` is how many frames each socket holds in flight each way (a power of two,
    /// 64 to 65536): as many as the peers' transports send unacknowledged (an RC
    /// requester's window, [`crate::transport::rc::MAX_INFLIGHT_PSNS`]), so a burst fits
    /// the receive side. Errors say what failed (capabilities: CAP_BPF, CAP_NET_ADMIN,
    /// CAP_NET_RAW).
    pub fn open(iface: &str, queues: u32, mtu: u32, frames: u32) -> io::Result<Self> {
        Self::open_with(iface, queues, mtu, frames, &XdpConfig::default())
    }

    /// [`XdpBackend::open`] tuned as `cfg` says (TX batch, busy polling). Fails on a
    /// `cfg` out of range and when the kernel refuses busy polling (see [`BusyPoll`]).
    pub fn open_with(
        iface: &str,
        queues: u32,
        mtu: u32,
        frames: u32,
        cfg: &XdpConfig,
    ) -> io::Result<Self> {
        cfg.validate()
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        let mac = if_mac(iface)?;
        let (attach, map, ifindex, native, sg) = Self::attach(iface, queues.max(1), mtu)?;
        let mut socks = Vec::new();
        let mut zero_copy = true;
        for q in 0..queues.max(1) {
            match open_socket(ifindex, q, sg, frames) {
                Ok((mut s, zc)) => {
                    s.tune(cfg)
                        .map_err(|e| io::Error::new(e.kind(), format!("{iface} queue {q}: {e}")))?;
                    bpf::map_set(map, q, s.fd.as_raw_fd())?;
                    zero_copy &= zc;
                    socks.push(s);
                }
                // Another socket on queue 0: the interface is someone else's.
                Err(e) if q == 0 && e.raw_os_error() == Some(libc::EBUSY) => {
                    return Err(held(iface, ifindex, "its queue 0 has an AF_XDP socket"))
                }
                // Queues past the active ones refuse a bind; queue 0 must work.
                Err(e) if q == 0 => {
                    return Err(io::Error::new(
                        e.kind(),
                        format!("AF_XDP socket on {iface} queue 0: {e}"),
                    ))
                }
                Err(_) => break,
            }
        }
        Ok(Self::with(socks, attach, mac, native, zero_copy, sg, cfg))
    }

    /// One backend per receive queue `0..count` of `iface`, sharing one steering
    /// program: for one event loop per queue (a frame sent on queue k leaves on TX queue
    /// k; over veth it arrives on the peer's queue k). Fails when a queue cannot be bound.
    /// `mtu` and `frames` as for [`XdpBackend::open`].
    pub fn open_per_queue(iface: &str, count: u32, mtu: u32, frames: u32) -> io::Result<Vec<Self>> {
        Self::open_per_queue_with(iface, count, mtu, frames, &XdpConfig::default())
    }

    /// [`XdpBackend::open_per_queue`] tuned as `cfg` says.
    pub fn open_per_queue_with(
        iface: &str,
        count: u32,
        mtu: u32,
        frames: u32,
        cfg: &XdpConfig,
    ) -> io::Result<Vec<Self>> {
        cfg.validate()
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        let mac = if_mac(iface)?;
        let (attach, map, ifindex, native, sg) = Self::attach(iface, count.max(1), mtu)?;
        let mut out = Vec::new();
        for q in 0..count.max(1) {
            let (mut s, zc) = open_socket(ifindex, q, sg, frames).map_err(|e| {
                if e.raw_os_error() == Some(libc::EBUSY) {
                    return held(
                        iface,
                        ifindex,
                        &format!("its queue {q} has an AF_XDP socket"),
                    );
                }
                io::Error::new(
                    e.kind(),
                    format!(
                        "AF_XDP socket on {iface} queue {q} (does it have {count} queues?): {e}"
                    ),
                )
            })?;
            s.tune(cfg)
                .map_err(|e| io::Error::new(e.kind(), format!("{iface} queue {q}: {e}")))?;
            bpf::map_set(map, q, s.fd.as_raw_fd())?;
            out.push(Self::with(
                vec![s],
                attach.clone(),
                mac,
                native,
                zc,
                sg,
                cfg,
            ));
        }
        Ok(out)
    }

    /// Loads and attaches the steering program with an XSKMAP of `queues` slots.
    #[allow(clippy::type_complexity)]
    fn attach(
        iface: &str,
        queues: u32,
        mtu: u32,
    ) -> io::Result<(std::sync::Arc<Attachment>, i32, u32, bool, bool)> {
        let ifindex = ifindex(iface)?;
        // Multi-buffer when the frames we expect need it, and also when the link carries
        // frames that large (its MTU, plus Ethernet and a VLAN tag): a driver that cannot
        // run a single-buffer program at that MTU (veth above about 3.5 KB) takes it only
        // in the generic skb path, where a peer's UDP GSO run arrives as one oversized
        // frame and is lost (veth turns its peer's GSO off only for a native program).
        let link = crate::net::addresses::interface_info(iface).map_or(0, |i| i.mtu + 18);
        let sg = mtu.max(link) > 3498;
        let map = bpf::create_xskmap(queues)
            .map_err(|e| io::Error::new(e.kind(), format!("creating the XSKMAP: {e}")))?;
        let prog = bpf::load(bpf::OnRoce::Steer(map.as_raw_fd()), sg)?;
        let (link, native) = attach_any(prog.as_raw_fd(), ifindex, iface)?;
        let raw = map.as_raw_fd();
        let attach = std::sync::Arc::new(Attachment {
            _link: link,
            _prog: prog,
            _map: map,
        });
        Ok((attach, raw, ifindex, native, sg))
    }

    fn with(
        socks: Vec<Socket>,
        attach: std::sync::Arc<Attachment>,
        mac: [u8; 6],
        native: bool,
        zero_copy: bool,
        sg: bool,
        cfg: &XdpConfig,
    ) -> Self {
        let first = socks.first();
        Self {
            mode: XdpMode {
                native,
                zero_copy,
                multi_buffer: sg,
                napi_id: first.map_or(0, |s| s.napi_id),
                busy_poll: cfg.busy_poll,
                tx_budget: first.map_or(0, |s| s.tx_budget),
            },
            socks,
            _attach: attach,
            mac,
            next_rx: 0,
            scratch: vec![0; 2 * CHUNK as usize],
        }
    }

    /// The interface's MAC address, the source of the frames this backend builds.
    pub fn mac(&self) -> [u8; 6] {
        self.mac
    }

    /// How it is bound.
    pub fn mode(&self) -> XdpMode {
        self.mode
    }

    /// The kernel's counters for its sockets (zeros where the kernel does not give them).
    pub fn stats(&self) -> XdpStats {
        let mut sum = XdpStats::default();
        for s in &self.socks {
            let mut v = [0u64; 6];
            let mut len = std::mem::size_of_val(&v) as libc::socklen_t;
            // SAFETY: `v` is writable and `len` its size; the kernel writes at most that.
            let r = unsafe {
                libc::getsockopt(
                    s.fd.as_raw_fd(),
                    SOL_XDP,
                    XDP_STATISTICS,
                    v.as_mut_ptr().cast(),
                    &mut len,
                )
            };
            if r == 0 {
                sum.rx_dropped += v[0];
                sum.rx_invalid_descs += v[1];
                sum.tx_invalid_descs += v[2];
                sum.rx_ring_full += v[3];
                sum.rx_fill_ring_empty_descs += v[4];
                sum.tx_ring_empty_descs += v[5];
            }
        }
        sum
    }
}

/// A lossy link for tests: an XDP program on an interface that drops a share of the
/// RoCEv2 frames it receives (at random, per frame) and passes everything else. Where
/// `tc netem` is missing (this host's kernel has no `sch_netem`), it puts loss on a path
/// without touching either endpoint. Detached when dropped or when the process exits.
pub struct LossyLink {
    _link: OwnedFd,
    _prog: OwnedFd,
    /// Whether the program runs in the driver (else the generic skb path).
    pub native: bool,
}

impl LossyLink {
    /// Attaches to `iface`, dropping a share `p` (0..1) of its received RoCEv2 frames.
    pub fn attach(iface: &str, p: f64) -> io::Result<Self> {
        if !(0.0..=1.0).contains(&p) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("drop share {p} is outside 0..1"),
            ));
        }
        let ifindex = ifindex(iface)?;
        let threshold = (p * f64::from(u32::MAX)) as u32;
        let prog = bpf::load(bpf::OnRoce::Drop(threshold), true)
            .or_else(|_| bpf::load(bpf::OnRoce::Drop(threshold), false))?;
        let (link, native) = attach_any(prog.as_raw_fd(), ifindex, iface)?;
        Ok(Self {
            _link: link,
            _prog: prog,
            native,
        })
    }
}

impl Socket {
    /// Applies `cfg` to the bound socket ([`tune`]).
    fn tune(&mut self, cfg: &XdpConfig) -> io::Result<()> {
        let descs = if self.spill { 2 } else { 1 };
        let (napi_id, tx_budget) = tune(self.fd.as_raw_fd(), cfg, self.tx.size(), descs)?;
        self.tx_batch = cfg.tx_batch;
        self.busy_poll = cfg.busy_poll.is_some() && napi_id >= MIN_NAPI_ID;
        self.napi_id = napi_id;
        self.napi_checks = if cfg.busy_poll.is_some() && !self.busy_poll {
            16
        } else {
            0
        };
        self.tx_budget = tx_budget;
        Ok(())
    }

    /// Takes finished TX descriptors back; a slot is free once all of its are done.
    fn reclaim(&mut self) {
        while let Some(addr) = self.comp.pop_addr() {
            let slot = (addr.saturating_sub(self.tx_base) / self.tx_slot) as usize;
            if let Some(p) = self.tx_pending.get_mut(slot) {
                *p = p.saturating_sub(1);
                if *p == 0 {
                    self.free_tx.push(self.tx_base + slot as u64 * self.tx_slot);
                }
            }
        }
        self.comp.release();
    }

    fn kick(&self) {
        // SAFETY: a zero-length sendto on our own socket only wakes the kernel's TX path.
        unsafe {
            libc::sendto(
                self.fd.as_raw_fd(),
                std::ptr::null(),
                0,
                libc::MSG_DONTWAIT,
                std::ptr::null(),
                0,
            );
        }
    }

    /// Wakes the kernel until it has taken every queued frame (copy mode moves a batch
    /// per wake-up), or once when a zero-copy driver asks for it. Stops when two wake-ups
    /// in a row move nothing (the device is busy; the next flush tries again).
    fn push_out(&mut self, zero_copy: bool) {
        self.unkicked = 0;
        if zero_copy {
            if self.tx.needs_wakeup() {
                self.kick();
            }
            return;
        }
        let mut idle = 0;
        let mut moved = false;
        while self.tx.in_flight() > 0 && idle < 2 {
            let before = self.tx.in_flight();
            self.kick();
            self.reclaim();
            if self.tx.in_flight() < before {
                (idle, moved) = (0, true);
            } else {
                idle += 1;
            }
        }
        self.stalled_since = match (self.tx.in_flight(), moved, self.stalled_since) {
            (0, _, _) => None,
            (_, false, Some(t)) => Some(t),
            _ => Some(std::time::Instant::now()),
        };
    }

    /// Frames wait on the TX ring and the kernel refused them only briefly (its send
    /// buffer fills until the receiver's copies free it): worth trying again at once
    /// rather than sleeping. After a millisecond of refusals (a stopped device) it is not.
    fn tx_retry_soon(&self) -> bool {
        self.tx.in_flight() > 0
            && self
                .stalled_since
                .is_none_or(|t| t.elapsed() < Duration::from_millis(1))
    }
}

impl Backend for XdpBackend {
    fn wait_fds(&self) -> Vec<std::os::fd::RawFd> {
        self.socks.iter().map(|s| s.fd.as_raw_fd()).collect()
    }

    /// AF_XDP writes the IP header itself: any of the interface's addresses, the
    /// link-local one included, is a source.
    fn serves_link_local(&self) -> bool {
        true
    }

    fn send_with(
        &mut self,
        build: &mut dyn FnMut(&mut [u8]) -> Option<Transmit>,
    ) -> io::Result<bool> {
        let mac = self.mac;
        let mut failed = None;
        let queued = self.send_in_place(&mut |slot| {
            // The RoCE part goes behind room for the longest link headers; Ethernet, IP
            // and UDP are written right in front of it, and the frame starts there.
            let t = build(slot.get_mut(HEADROOM..)?)?;
            if t.in_place.is_some() {
                // This backend says it takes none (`takes_payload_in_place`): a caller
                // that sends one anyway gets an error, never a frame of stale bytes.
                failed = Some("a payload left in place, which AF_XDP does not take".into());
                return None;
            }
            let Some(at) = HEADROOM.checked_sub(t.link_headers_len()) else {
                failed = Some(format!(
                    "link headers of {} bytes do not fit the {HEADROOM}-byte headroom",
                    t.link_headers_len()
                ));
                return None;
            };
            if let Err(e) = t.emit_link_headers(mac, &mut slot[at..HEADROOM]) {
                failed = Some(format!("writing the link headers: {e}"));
                return None;
            }
            Some((at, HEADROOM - at + t.len))
        })?;
        match failed {
            // The endpoint gave up the packet: an error, so the caller counts it.
            Some(why) => Err(io::Error::new(io::ErrorKind::InvalidData, why)),
            None => Ok(queued),
        }
    }

    fn send_frame_with(
        &mut self,
        build: &mut dyn FnMut(&mut [u8]) -> Option<usize>,
    ) -> io::Result<bool> {
        self.send_in_place(&mut |slot| build(slot).map(|n| (0, n)))
    }

    fn rx_overruns(&self) -> u64 {
        let s = self.stats();
        s.rx_dropped + s.rx_ring_full
    }

    fn flush(&mut self) -> io::Result<()> {
        let zero_copy = self.mode.zero_copy;
        let s = &mut self.socks[0];
        if s.unkicked > 0 || s.tx.in_flight() > 0 {
            s.push_out(zero_copy);
        }
        s.reclaim();
        Ok(())
    }

    fn receive(
        &mut self,
        timeout: Duration,
        max: usize,
        handle: &mut dyn FnMut(Received<'_>),
    ) -> io::Result<usize> {
        if max == 0 {
            return Ok(0);
        }
        let mut count = self.drain(max, handle);
        if count > 0 {
            self.look_for_napi();
            return Ok(count);
        }
        let busy = self.socks.iter().any(|s| s.busy_poll);
        if busy {
            // Poll the queue's NAPI from here (one round each), as the kernel's own
            // softirq would have.
            count = self.busy_poll_round(max, handle);
            if count > 0 {
                return Ok(count);
            }
        }
        if !self.mode.zero_copy && self.socks.iter().any(Socket::tx_retry_soon) {
            // Frames the kernel has not taken yet: do not sleep on receive; the caller's
            // next flush wakes the kernel again.
            return Ok(0);
        }
        if busy {
            // Keep polling for up to the socket's busy-poll time before sleeping.
            let usecs = self.mode.busy_poll.map_or(0, |b| b.usecs);
            let until =
                std::time::Instant::now() + timeout.min(Duration::from_micros(usecs.into()));
            while std::time::Instant::now() < until {
                count = self.busy_poll_round(max, handle);
                if count > 0 {
                    return Ok(count);
                }
            }
        }
        let mut pfds = [libc::pollfd {
            fd: -1,
            events: libc::POLLIN,
            revents: 0,
        }; 16];
        let n = self.socks.len().min(pfds.len());
        for (p, s) in pfds.iter_mut().zip(&self.socks) {
            p.fd = s.fd.as_raw_fd();
        }
        if super::wait::poll(&mut pfds[..n], timeout)? > 0 {
            count = self.drain(max, handle);
        }
        Ok(count)
    }
}

impl XdpBackend {
    /// Frames arrived: a copy-mode socket asked to busy poll may have its NAPI now.
    fn look_for_napi(&mut self) {
        for (i, s) in self.socks.iter_mut().enumerate() {
            if s.napi_checks == 0 {
                continue;
            }
            s.napi_checks -= 1;
            let napi = napi_id_of(s.fd.as_raw_fd());
            if napi >= MIN_NAPI_ID {
                (s.napi_id, s.busy_poll, s.napi_checks) = (napi, true, 0);
                if i == 0 {
                    self.mode.napi_id = napi;
                }
            }
        }
    }

    /// One `recvfrom` on each busy-polling socket (the kernel polls its NAPI once,
    /// `__xsk_recvmsg` in net/xdp/xsk.c), then what arrived.
    fn busy_poll_round(&mut self, max: usize, handle: &mut dyn FnMut(Received<'_>)) -> usize {
        for s in self.socks.iter().filter(|s| s.busy_poll) {
            // SAFETY: a zero-length, non-blocking recvfrom on our own socket: the kernel
            // writes no data (AF_XDP frames arrive on the RX ring).
            unsafe {
                libc::recvfrom(
                    s.fd.as_raw_fd(),
                    std::ptr::null_mut(),
                    0,
                    libc::MSG_DONTWAIT,
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                );
            }
        }
        self.drain(max, handle)
    }

    /// Takes a free TX slot, lets `build` write a frame into it and say where in the slot
    /// the frame starts and how long it is, and queues it on the TX ring.
    fn send_in_place(&mut self, build: &mut PlaceFrame<'_>) -> io::Result<bool> {
        let zero_copy = self.mode.zero_copy;
        let s = &mut self.socks[0];
        s.reclaim();
        let mut tries = 0;
        while s.free_tx.is_empty() || s.tx.free_slots() < 2 {
            if tries == 100 {
                return Err(io::Error::new(
                    io::ErrorKind::WouldBlock,
                    "AF_XDP TX ring full",
                ));
            }
            s.push_out(zero_copy);
            if tries > 0 {
                std::thread::yield_now();
            }
            s.reclaim();
            tries += 1;
        }
        let Some(addr) = s.free_tx.pop() else {
            return Ok(false);
        };
        let slot_len = s.tx_slot as usize;
        // SAFETY: `addr` came off the free TX list: the kernel does not own it.
        let Some((at, n)) = build(unsafe { s.umem.slice_mut(addr, slot_len) }) else {
            s.free_tx.push(addr);
            return Ok(false);
        };
        if at + n > slot_len || n == 0 {
            s.free_tx.push(addr);
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("frame of {n} bytes at {at} does not fit a {slot_len}-byte TX slot"),
            ));
        }
        let chunk = CHUNK as usize;
        let slot = ((addr - s.tx_base) / s.tx_slot) as usize;
        if at + n > chunk {
            // A descriptor stays within its chunk: the first part ends where it does.
            let head = chunk - at;
            s.tx.push_desc(addr + at as u64, head as u32, XDP_PKT_CONTD);
            s.tx.push_desc(addr + u64::from(CHUNK), (n - head) as u32, 0);
            s.tx_pending[slot] = 2;
        } else {
            s.tx.push_desc(addr + at as u64, n as u32, 0);
            s.tx_pending[slot] = 1;
        }
        s.tx.submit();
        s.unkicked += 1;
        if s.unkicked >= s.tx_batch {
            s.push_out(zero_copy);
        }
        Ok(true)
    }

    /// Hands up to `max` frames waiting on the RX rings to `handle`, in place where a
    /// frame is one chunk; multi-buffer frames are put together in `scratch` first.
    fn drain(&mut self, max: usize, handle: &mut dyn FnMut(Received<'_>)) -> usize {
        let Self {
            socks,
            next_rx,
            scratch,
            ..
        } = self;
        let n = socks.len();
        let mut count = 0;
        for k in 0..n {
            let i = (*next_rx + k) % n;
            let s = &mut socks[i];
            while count < max {
                let Some((addr, len, opts)) = s.rx.pop_desc() else {
                    break;
                };
                let mask = !u64::from(CHUNK - 1);
                if opts & XDP_PKT_CONTD == 0 {
                    // SAFETY: popped from the RX ring, given back below.
                    handle(Received::Frame(unsafe { s.umem.slice(addr, len as usize) }));
                    count += 1;
                    s.fill.push_addr(addr & mask);
                    continue;
                }
                // A frame in several chunks (the kernel publishes all of them at once).
                let mut parts = [(addr, len as usize); MAX_PARTS];
                let (mut np, mut more) = (1, opts & XDP_PKT_CONTD != 0);
                while more {
                    let Some((a, l, o)) = s.rx.pop_desc() else {
                        break;
                    };
                    if np < MAX_PARTS {
                        parts[np] = (a, l as usize);
                    } else {
                        s.fill.push_addr(a & mask); // too many parts: dropped below
                    }
                    np += 1;
                    more = o & XDP_PKT_CONTD != 0;
                }
                let parts = &parts[..np.min(MAX_PARTS)];
                let total: usize = parts.iter().map(|p| p.1).sum();
                let head = addr & mask;
                let rest = total - parts[0].1;
                if np > MAX_PARTS {
                    // Not a frame uroce sends or expects; nothing to hand up.
                } else if s.spill
                    && addr + parts[0].1 as u64 == head + u64::from(CHUNK)
                    && rest <= CHUNK as usize
                {
                    // Copy mode fills the first chunk to its end: the rest goes into the
                    // chunk after it, which is never offered to the kernel, and the
                    // frame is read in place (a few hundred bytes copied, not 4 KiB).
                    let mut at = head + u64::from(CHUNK);
                    for &(a, l) in &parts[1..] {
                        // SAFETY: `a` was popped from the RX ring and is given back below;
                        // the chunk after `head` is never in the fill ring.
                        unsafe { s.umem.copy(a, at, l) };
                        at += l as u64;
                    }
                    // SAFETY: the first part was popped from the RX ring, the rest of the
                    // range is ours; `head` goes back to the fill ring below.
                    handle(Received::Frame(unsafe { s.umem.slice(addr, total) }));
                    count += 1;
                } else if total <= scratch.len() {
                    // Another layout (a zero-copy driver's headroom): gather the parts.
                    let mut at = 0;
                    for &(a, l) in parts {
                        // SAFETY: popped from the RX ring, given back below.
                        scratch[at..at + l].copy_from_slice(unsafe { s.umem.slice(a, l) });
                        at += l;
                    }
                    handle(Received::Frame(&scratch[..total]));
                    count += 1;
                }
                for &(a, _) in parts {
                    s.fill.push_addr(a & mask);
                }
            }
            s.rx.release();
            s.fill.submit();
            if count >= max {
                *next_rx = (i + 1) % n;
                break;
            }
        }
        count
    }
}
