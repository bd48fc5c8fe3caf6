//! QP 1, the general services interface (GSI), of an open device, for uroce's
//! `librdmacm.so.1` (crates/uroce-rdmacm): the CM's MADs in and out.
//!
//! A RoCE device has one QP 1 per port, which the kernel owns on a real NIC: it is never
//! an `ibv_qp` the program sees, and the program's QPs are numbered above 0x100. Here it is
//! a UD QP of the device's uroce context (`QpType::Gsi`, Q_Key 0x80010000, IBTA Vol. 1
//! §13.5.3), created at the first `uroce_gsi_open` with a PD, a CQ and a region of its
//! own, and never seen by the program. What it receives is copied out of its receive
//! buffers into an inbox as the datapath is pumped (by the program's calls or the
//! progress thread), and an eventfd tells the CM's thread that MADs wait.
//!
//! The four entry points are exported from libibverbs.so.1 under the private version
//! node `UROCE_PRIVATE_1`; librdmacm finds them with `dlvsym`. A libibverbs.so.1 without
//! them is not uroce's, which librdmacm reports as ENODEV.
//!
//! Safe code: the four entry points are wrappers in `exports.rs` that read and write the
//! caller's GIDs and MAD buffers through `ffi.rs`.

#![deny(unsafe_code)]

use std::collections::VecDeque;
use std::ffi::c_int;
use std::net::{IpAddr, Ipv6Addr};
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::Arc;

use libc::{EAGAIN, EINVAL, ENODEV};
use uroce::datapath::Backend;
use uroce::mem::Access;
use uroce::verbs::{
    CqId, InitAttr, Mr, Mtu, PdId, QpCaps, QpType, RecvWr, Remote, RtsAttr, Sge, UdSendWr,
    WcOpcode, WcStatus, WorkCompletion,
};
use uroce::wire::mad::{GSI_QKEY, GSI_QPN, MAD_LEN};

use crate::abi::ibv_context;
use crate::engine::{signal, Inner, Shared};

/// Bytes of a UD receive before the payload: the GRH area.
const GRH: usize = 40;
/// Bytes of one buffer slot (a GRH and a MAD, rounded up).
const SLOT: usize = 512;
/// Receive buffers kept posted.
const RECV_SLOTS: usize = 64;
/// Send buffers; a MAD sent while all are in flight is refused with EAGAIN (the CM's
/// own retry sends it again).
const SEND_SLOTS: usize = 32;
/// MADs held for the CM's thread; beyond that new ones are dropped and counted, as a
/// NIC drops what its receive queue has no room for.
const INBOX: usize = 1024;

/// A MAD QP 1 received: the sender's address (from the GRH / IP header), its QP and the
/// 256 bytes.
pub(crate) struct InMad {
    from: IpAddr,
    src_qp: u32,
    mad: [u8; MAD_LEN],
}

/// QP 1 of an open device.
pub(crate) struct Gsi {
    cq: CqId,
    mr: Mr,
    /// Send slots not in flight.
    free_send: Vec<usize>,
    inbox: VecDeque<InMad>,
    /// Scratch for QP 1's completions.
    wcs: Vec<WorkCompletion>,
    /// Readable (non-zero) while the inbox may hold MADs.
    fd: OwnedFd,
    /// The MACs MADs go to over a datapath that needs them (AF_XDP).
    peers: crate::gsi_peers::Peers,
}

impl Gsi {
    /// Creates QP 1 in `inner`'s context, brings it to RTS and posts its receives.
    fn create(inner: &mut Inner) -> Result<Self, c_int> {
        let ctx = &mut inner.uroce;
        let pd: PdId = ctx.alloc_pd();
        let cq = ctx
            .create_cq(4 * (RECV_SLOTS + SEND_SLOTS) as u32)
            .map_err(|_| ENODEV)?;
        let qpn = ctx
            .create_qp(
                pd,
                QpCaps {
                    qp_type: QpType::Gsi,
                    send_cq: cq,
                    recv_cq: cq,
                    max_send_wr: SEND_SLOTS,
                    max_recv_wr: RECV_SLOTS,
                },
            )
            .map_err(|_| ENODEV)?;
        debug_assert_eq!(qpn, GSI_QPN);
        ctx.modify_qp_init(
            qpn,
            InitAttr {
                qkey: GSI_QKEY,
                ..InitAttr::default()
            },
        )
        .map_err(|_| ENODEV)?;
        ctx.modify_qp_rtr_ud(qpn, Mtu::M1024).map_err(|_| ENODEV)?;
        ctx.modify_qp_rts(qpn, RtsAttr::default())
            .map_err(|_| ENODEV)?;
        let mr = ctx
            .reg_mr(
                pd,
                vec![0; (RECV_SLOTS + SEND_SLOTS) * SLOT],
                Access::LOCAL_WRITE,
            )
            .map_err(|_| ENODEV)?;
        let fd =
            crate::engine::nonblocking_eventfd().map_err(|e| e.raw_os_error().unwrap_or(ENODEV))?;
        let gsi = Self {
            cq,
            mr,
            free_send: (RECV_SLOTS..RECV_SLOTS + SEND_SLOTS).collect(),
            inbox: VecDeque::new(),
            wcs: Vec::with_capacity(32),
            fd,
            peers: Default::default(),
        };
        for slot in 0..RECV_SLOTS {
            gsi.post_recv(ctx, slot)?;
        }
        Ok(gsi)
    }

    fn sge(&self, slot: usize, length: usize) -> Sge {
        Sge {
            addr: self.mr.addr + (slot * SLOT) as u64,
            length: length as u32,
            lkey: self.mr.lkey,
        }
    }

    fn post_recv(&self, ctx: &mut uroce::verbs::Context, slot: usize) -> Result<(), c_int> {
        ctx.post_recv(
            GSI_QPN,
            RecvWr {
                wr_id: slot as u64,
                sge: self.sge(slot, GRH + MAD_LEN),
            },
        )
        .map_err(|_| ENODEV)
    }

    /// Takes QP 1's completions: received MADs to the inbox (their buffers posted
    /// again), finished sends' buffers back to the free list.
    pub(crate) fn drain(&mut self, ctx: &mut uroce::verbs::Context) {
        let before = self.inbox.len();
        let mut wcs = std::mem::take(&mut self.wcs);
        loop {
            wcs.clear();
            if ctx.poll_cq_into(self.cq, 32, &mut wcs) == 0 {
                break;
            }
            for wc in wcs.drain(..) {
                let slot = wc.wr_id as usize;
                if wc.opcode != WcOpcode::Recv {
                    if (RECV_SLOTS..RECV_SLOTS + SEND_SLOTS).contains(&slot) {
                        self.free_send.push(slot);
                    }
                    continue;
                }
                if slot >= RECV_SLOTS {
                    continue;
                }
                if wc.status == WcStatus::Success && wc.byte_len as usize == GRH + MAD_LEN {
                    if let Some(from) = wc.sender {
                        // Beyond INBOX the MAD is dropped, as a full receive queue drops.
                        if self.inbox.len() < INBOX {
                            let at = slot * SLOT + GRH;
                            let mut mad = [0u8; MAD_LEN];
                            mad.copy_from_slice(&ctx.mr_bytes(&self.mr)[at..at + MAD_LEN]);
                            self.inbox.push_back(InMad {
                                from,
                                src_qp: wc.src_qp,
                                mad,
                            });
                        }
                    }
                }
                // A flushed receive (the QP in error) is not posted again.
                if wc.status == WcStatus::Success {
                    let _ = self.post_recv(ctx, slot);
                }
            }
        }
        self.wcs = wcs;
        if self.inbox.len() > before {
            signal(self.fd.as_raw_fd());
        }
    }
}

/// The context behind `ctx`, with QP 1 created and the datapath open.
fn open(ctx: *mut ibv_context) -> Result<Arc<Shared>, c_int> {
    let shared = crate::device::shared_of(ctx).ok_or(EINVAL)?;
    {
        let mut g = shared.lock();
        shared.start(&mut g)?;
        if g.gsi.is_none() {
            let gsi = Gsi::create(&mut g)?;
            g.gsi = Some(gsi);
        }
    }
    Ok(shared)
}

/// The address of a GID, and whether the device's datapath needs its MAC.
fn peer_of(shared: &Shared, gid: [u8; 16]) -> (IpAddr, bool) {
    let v6 = Ipv6Addr::from(gid);
    let ip = v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4);
    let needs_l2 = shared
        .lock()
        .backend()
        .is_some_and(|b| b.needs_link_addresses());
    (ip, needs_l2)
}

/// `uroce_gsi_open`: creates QP 1 of the open device `ctx` if it is not there yet;
/// returns a descriptor that is readable while MADs wait for `uroce_gsi_recv` (read it
/// to clear it, then take MADs until there are none), or a negative errno: EINVAL for a
/// context that is not one of ours, the datapath's errno when it cannot be opened.
pub(crate) fn gsi_open(ctx: *mut ibv_context) -> c_int {
    match open(ctx) {
        Ok(shared) => shared
            .lock()
            .gsi
            .as_ref()
            .map_or(-ENODEV, |g| g.fd.as_raw_fd()),
        Err(e) => -e,
    }
}

/// Sends the `len` bytes at `mad` (a MAD, 256 bytes) as a UD SEND from QP 1 to QP
/// `remote_qpn` with Q_Key `remote_qkey` at the IP address of the GID `gid` (16 bytes,
/// IPv4-mapped for IPv4). Never waits for the network: over AF_XDP a MAD to a peer whose
/// MAC is not known yet is held while another thread finds it, and goes when it is found
/// (`crate::gsi_peers`). Returns 0 (sent or held), or an errno: EINVAL for bad arguments,
/// EAGAIN when every send buffer is in flight or too many MADs wait for the peer,
/// EHOSTUNREACH when the peer did not answer ARP / NDP lately.
///
/// `uroce_gsi_send`; `gid` and `mad` are the caller's (None for NULL: EINVAL, as a
/// `mad` of another length than MAD_LEN).
pub(crate) fn gsi_send(
    ctx: *mut ibv_context,
    gid: Option<[u8; 16]>,
    remote_qpn: u32,
    remote_qkey: u32,
    mad: Option<&[u8]>,
) -> c_int {
    let (Some(gid), Some(mad)) = (gid, mad.filter(|m| m.len() == MAD_LEN)) else {
        return EINVAL;
    };
    let shared = match open(ctx) {
        Ok(s) => s,
        Err(e) => return e,
    };
    let (ip, needs_l2) = peer_of(&shared, gid);
    if needs_l2 && ip != shared.lock().uroce.config().ip {
        return send_resolving(&shared, ip, remote_qpn, remote_qkey, mad);
    }
    // No MAC to find (the kernel's UDP stack finds it, or the peer is this device).
    let dest = match crate::qp::remote_to(&shared, ip, needs_l2) {
        Ok(r) => r,
        Err(e) => return e,
    };
    let mut g = shared.lock();
    let r = post_mad(&mut g, dest, remote_qpn, remote_qkey, mad);
    g.pump(false);
    shared.after_post(&g);
    r
}

/// [`uroce_gsi_send`] to a peer whose MAC uroce finds itself: sent now when it is known,
/// else held while a thread of its own resolves it (never in the caller's thread: that is
/// the CM's, which a peer gone silent would otherwise stop for seconds at every MAD), and
/// sent when the answer comes or dropped without one (the CM's retries and timeout tell).
fn send_resolving(
    shared: &Arc<Shared>,
    ip: IpAddr,
    remote_qpn: u32,
    remote_qkey: u32,
    mad: &[u8],
) -> c_int {
    use crate::gsi_peers::{Pending, Route};
    let mut pending = Pending {
        remote_qpn,
        remote_qkey,
        mad: [0; MAD_LEN],
    };
    pending.mad.copy_from_slice(mad);
    let now = std::time::Instant::now();
    let mut g = shared.lock();
    let Some(gsi) = g.gsi.as_mut() else {
        return ENODEV;
    };
    gsi.peers.expire(now);
    let route = gsi.peers.route(ip, now, pending);
    match route {
        Route::Now(mac) => {
            let r = post_mad(&mut g, Remote { ip, mac }, remote_qpn, remote_qkey, mad);
            g.pump(false);
            shared.after_post(&g);
            r
        }
        Route::Queued => 0,
        Route::Unreachable => libc::EHOSTUNREACH,
        Route::Full => EAGAIN,
        Route::Resolve => {
            drop(g);
            // The thread holds the device only while it sends a request or takes the
            // answer, so closing the device is not kept waiting for an ARP's seconds.
            let weak = Arc::downgrade(shared);
            let spawned = crate::ffi::quiet::spawn("uroce-gsi-arp".into(), move || {
                let mut guard = Unresolved(Some((weak.clone(), ip)));
                let mac =
                    crate::qp::remote_within_weak(&weak, ip, true, uroce::net::neighbours::GIVE_UP)
                        .ok()
                        .map(|r| r.mac);
                guard.0 = None;
                if let Some(s) = weak.upgrade() {
                    resolved(&s, ip, mac);
                }
            });
            if spawned.is_err() {
                if let Some(gsi) = shared.lock().gsi.as_mut() {
                    gsi.peers.forget(ip);
                }
                return EAGAIN;
            }
            0
        }
    }
}

/// Ends a resolution whose thread stopped without an answer (it panicked): its MADs are
/// dropped and the peer counts as not answering, rather than waiting for ever.
struct Unresolved(Option<(std::sync::Weak<Shared>, IpAddr)>);

impl Drop for Unresolved {
    fn drop(&mut self) {
        if let Some((weak, ip)) = self.0.take() {
            if let Some(s) = weak.upgrade() {
                resolved(&s, ip, None);
            }
        }
    }
}

/// The resolution of `ip` ended: the MADs that waited for it go out (or are dropped); on
/// a device being closed they are dropped. With none waiting the engine is not pumped.
fn resolved(shared: &Arc<Shared>, ip: IpAddr, mac: Option<[u8; 6]>) {
    let stopping = shared.is_stopping();
    let mut g = shared.lock();
    let Some(gsi) = g.gsi.as_mut() else {
        return;
    };
    let waited = gsi.peers.resolved(ip, mac, std::time::Instant::now());
    let (Some(mac), false, false) = (mac, stopping, waited.is_empty()) else {
        return;
    };
    for m in &waited {
        let _ = post_mad(
            &mut g,
            Remote { ip, mac },
            m.remote_qpn,
            m.remote_qkey,
            &m.mad,
        );
    }
    g.pump(false);
    shared.after_post(&g);
}

/// Posts `mad` on QP 1 to `dest`: 0, or EAGAIN when every send slot is in flight (the
/// CM's own retry sends it again), EINVAL when the post is refused.
fn post_mad(g: &mut Inner, dest: Remote, remote_qpn: u32, remote_qkey: u32, mad: &[u8]) -> c_int {
    let Inner { uroce, gsi, .. } = g;
    let Some(gsi) = gsi.as_mut() else {
        return ENODEV;
    };
    gsi.drain(uroce);
    let Some(slot) = gsi.free_send.pop() else {
        return EAGAIN;
    };
    let at = slot * SLOT;
    uroce.mr_bytes_mut(&gsi.mr)[at..at + MAD_LEN].copy_from_slice(mad);
    let wr = UdSendWr {
        wr_id: slot as u64,
        dest,
        remote_qpn,
        remote_qkey,
        sge: gsi.sge(slot, MAD_LEN),
        imm: None,
        signaled: true,
        solicited: false,
    };
    if uroce.post_send_ud(GSI_QPN, wr).is_err() {
        gsi.free_send.push(slot);
        return EINVAL;
    }
    0
}

/// A MAD taken from QP 1's inbox: the sender's GID (IPv4-mapped for IPv4), its QP and
/// the 256 bytes.
pub(crate) struct Received {
    pub gid: [u8; 16],
    pub src_qp: u32,
    pub mad: [u8; MAD_LEN],
}

/// `uroce_gsi_recv`: the oldest MAD QP 1 received, None when none waits, or the errno
/// (EINVAL: QP 1 not opened).
pub(crate) fn gsi_recv(ctx: *mut ibv_context) -> Result<Option<Received>, c_int> {
    let shared = crate::device::shared_of(ctx).ok_or(EINVAL)?;
    let mut g = shared.lock();
    let Inner { uroce, gsi, .. } = &mut *g;
    let gsi = gsi.as_mut().ok_or(EINVAL)?;
    gsi.drain(uroce);
    let Some(m) = gsi.inbox.pop_front() else {
        return Ok(None);
    };
    let gid = match m.from {
        IpAddr::V4(v) => v.to_ipv6_mapped().octets(),
        IpAddr::V6(v) => v.octets(),
    };
    Ok(Some(Received {
        gid,
        src_qp: m.src_qp,
        mad: m.mad,
    }))
}

/// Finds the MAC address of the next hop to the IP address of the GID `gid` (16 bytes,
/// IPv4-mapped for IPv4), as `rdma_resolve_addr` does, giving up after `timeout_ms`
/// (2000 when not positive): 0, or an errno (EHOSTUNREACH when no answer came, EINVAL
/// for bad arguments, the datapath's errno when it cannot be opened). Blocks the calling
/// thread (not the device) for as long as the ARP / NDP exchange takes. `gid` is the
/// caller's (None for NULL: EINVAL).
pub(crate) fn gsi_resolve(
    ctx: *mut ibv_context,
    gid: Option<[u8; 16]>,
    timeout_ms: c_int,
) -> c_int {
    let Some(gid) = gid else {
        return EINVAL;
    };
    let shared = match open(ctx) {
        Ok(s) => s,
        Err(e) => return e,
    };
    let (ip, needs_l2) = peer_of(&shared, gid);
    let ms = if timeout_ms > 0 {
        timeout_ms as u64
    } else {
        2000
    };
    match crate::qp::remote_within(&shared, ip, needs_l2, std::time::Duration::from_millis(ms)) {
        Ok(r) => {
            // The CM's first MAD to the peer then goes at once.
            if needs_l2 {
                resolved(&shared, ip, Some(r.mac));
            }
            0
        }
        Err(e) => e,
    }
}

/// Connection requests (CM REQ, SIDR REQ) for `service_id` come to this process (`on`),
/// or no longer do: through `uroce daemon` the daemon is told, which refuses with
/// EADDRINUSE a service another process on the host listens on, as the kernel's
/// rdma_cm refuses a port in use; in direct mode every request is this process's already.
pub(crate) fn gsi_listen(ctx: *mut ibv_context, service_id: u64, on: bool) -> c_int {
    let shared = match open(ctx) {
        Ok(s) => s,
        Err(e) => return e,
    };
    let mut g = shared.lock();
    match g.listen(service_id, on) {
        Ok(()) => 0,
        Err(e) => e,
    }
}
