//! The progress engine of an open device: uroce's sans-IO context, the datapath under it,
//! and the thread that moves packets when the program does not call in.
//!
//! Everything an open device holds is one [`Inner`] behind one mutex in [`Shared`]: every
//! verb takes it, so every entry point is thread safe as ibverbs promises. Packets move
//! in two ways, as a NIC's doorbell and its interrupt:
//! - the program's own calls: a post hands what it made sendable to the datapath before
//!   it returns, and a poll of an empty CQ first takes what the datapath received (no
//!   thread hand-off on the busy-polling path perftest and pingpong use);
//! - the progress thread, started with the datapath at the first QP: it sleeps in
//!   `ppoll(2)` on the datapath's descriptors, a wake-up eventfd and the next timer
//!   (retransmission, RNR), and runs the same pump when one fires, so a program blocked
//!   in `ibv_get_cq_event` still gets its completions. While the program polls or posts
//!   it leaves the datapath to it, but a packet that arrives while the program has stopped
//!   calling in (perftest's `ib_write_lat` spins on memory for the peer's RDMA WRITE) is
//!   still taken at once: see [`Shared::run`].
//!
//! The datapath is opened lazily (listing and querying devices, as `ibv_devinfo` does,
//! opens none): `UROCE_BACKEND` = `auto` (default: the `uroce daemon` serving the
//! device's interface when one runs, shared with every process on the host; else as
//! `direct`), `daemon` (that daemon or ECONNREFUSED), `direct` (the faster datapath on the
//! device's interface, `uroce::datapath::choice`: the UDP backend on veth and other virtual
//! links, AF_XDP on a NIC with zero-copy or native XDP where the process may set it up,
//! else the UDP backend; EADDRINUSE, never the UDP backend, when another process holds the
//! interface's AF_XDP), `xdp` or `udp`; AF_XDP is tuned
//! by `UROCE_XDP_TX_BATCH` and `UROCE_XDP_BUSY_POLL` ([`uroce::datapath::xdp::XdpConfig`]).
//!
//! With `UROCE_SHARDS` = N > 1 (direct mode over UDP), the device has N engines:
//! [`Inner`]'s context is the first, [`crate::shard`] holds the others, each with its own
//! lock, socket and thread, and the QPs are spread over them. Posts on their QPs, and
//! polls of CQs only they feed, take no lock of [`Shared`]'s but a read of its route
//! table ([`crate::routes`]): [`Shared::on_shard`], [`Shared::poll_on_shards`].
//!
//! Safe code: the eventfd, read, write, ppoll and prctl calls and the `Send` of
//! [`AsyncEntry`] are in `ffi.rs`.

#![deny(unsafe_code)]

use std::collections::{HashMap, VecDeque};
use std::ffi::c_int;
use std::net::IpAddr;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use uroce::datapath::by_source::BySource;
use uroce::datapath::holder;
use uroce::datapath::udp::UdpBackend;
use uroce::datapath::xdp::{XdpBackend, XdpConfig};
use uroce::datapath::Backend;
use uroce::net::link_watch::LinkWatch;
use uroce::verbs::{AsyncEvent, CqId, Mr, Mtu, PdId, SrqId, WorkCompletion};

use crate::abi::{ibv_async_event, ibv_async_event_element, ibv_cq, ibv_qp, ibv_srq};
use crate::device::Device;
use crate::ffi;
use crate::loopback::Loopback;
use crate::routes::{RouteTable, Routes};
use crate::shard::Shard;

/// The environment variable that picks the datapath.
pub const BACKEND_ENV: &str = "UROCE_BACKEND";

/// The longest the progress thread sleeps without looking at the datapath: frames an
/// AF_XDP ring has not taken yet and packets a backend holds back are retried this often.
const MAX_SLEEP: Duration = Duration::from_millis(5);

/// How often the progress thread reads the link's state changes (one non-blocking
/// system call), as `datapath::event_loop::Endpoint::watch_port` does.
const PORT_CHECK: Duration = Duration::from_millis(50);

/// How long after the program last polled a CQ or posted the progress thread counts it
/// as at work: meanwhile the thread leaves the datapath to it (a program that polls moves
/// its own packets: fewer context switches, no lock contention on a machine with few
/// cores) unless a packet arrives that the program is not there to take ([`POLLING`]); and
/// it pumps once in this time unless the program is in the library then (holds the lock).
/// Past it, the thread alone moves the packets.
const APP_ACTIVE: Duration = Duration::from_millis(1);

/// A program that polled a CQ or posted this recently is polling now: a packet that
/// arrives is its to take. One that has not called in for longer has stopped to do
/// something else, maybe to spin on memory for a peer's RDMA WRITE, which only the thread
/// can then move into it. A busy-polling program calls in well within this (each empty
/// poll moves packets and stamps the time); a round trip to a peer takes longer.
const POLLING: Duration = Duration::from_micros(5);

/// The progress thread's first back-off when a packet arrives while the program polls:
/// it looks away from the datapath this long, then again for twice as long on each
/// consecutive such finding, up to [`APP_ACTIVE`], so that a program that busy-polls
/// through a stream of packets (`ib_write_bw`, `ib_send_bw`) costs at most about a
/// thousand thread wake-ups a second, not one a packet. A program that stops polling
/// may wait this long for its first packet after a poll (in `ib_write_lat` the peer's
/// WRITE comes right behind the ACK the program polled for: short, then).
const MIN_BACKOFF: Duration = Duration::from_micros(10);

/// The progress thread's timer slack: the kernel's default of 50 µs would stretch a
/// back-off of [`MIN_BACKOFF`] to six times as long.
const TIMER_SLACK_NS: u64 = 1_000;

/// A CQ handed out: uroce's id and the completion channel it reports to (0: none).
#[derive(Debug, Clone, Copy)]
pub(crate) struct CqEntry {
    pub id: CqId,
    pub channel: usize,
}

/// A QP handed out.
#[derive(Debug, Clone, Copy)]
pub(crate) struct QpEntry {
    pub qpn: u32,
    pub pd: usize,
    pub send_cq: usize,
    pub recv_cq: usize,
    /// A UD QP (its sends name an address handle).
    pub ud: bool,
    /// The engine it lives in: 0 for the device's own context, else a [`Shard`]'s index.
    pub shard: usize,
}

/// An SRQ handed out.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SrqEntry {
    pub id: SrqId,
    pub pd: usize,
}

/// A completion channel: its eventfd (a semaphore: one count per event) and the CQs whose
/// events wait to be taken by `ibv_get_cq_event`, in order, each with uroce's id of the
/// CQ (never reused, so an event of a destroyed CQ is told from one of a new CQ at the
/// same address).
pub(crate) struct ChannelEntry {
    pub fd: OwnedFd,
    pub events: VecDeque<(usize, u32)>,
}

/// The event type of a queued asynchronous event whose object was destroyed.
pub(crate) const FORGOTTEN: c_int = -1;

/// A queued asynchronous event, as `ibv_get_async_event` hands it out, and the address
/// of its object (its QP, CQ or SRQ; None for a port event), so that
/// [`Inner::forget_async_events_of`] finds it without reading the union. (`Send` in
/// `ffi.rs`: the event's pointer is only an address.)
#[derive(Clone, Copy)]
pub(crate) struct AsyncEntry {
    pub event: ibv_async_event,
    obj: Option<usize>,
}

/// The datapath of an open device and the thread that drives it.
struct Datapath {
    backend: Loopback,
    thread: Option<JoinHandle<()>>,
}

/// What an open device holds: uroce's context and the C objects handed out, by address.
pub(crate) struct Inner {
    pub uroce: uroce::verbs::Context,
    pub device: &'static Device,
    pub pds: HashMap<usize, PdId>,
    pub mrs: HashMap<usize, Mr>,
    pub cqs: HashMap<usize, CqEntry>,
    /// uroce's CQ id → the `ibv_cq`.
    pub cq_by_id: HashMap<u32, usize>,
    pub qps: HashMap<usize, QpEntry>,
    /// QPN → the `ibv_qp`.
    pub qp_by_qpn: HashMap<u32, usize>,
    pub srqs: HashMap<usize, SrqEntry>,
    /// Where IBV_SEND_INLINE data is gathered from the program's pointers (`qp::post`),
    /// a region of its own PD, registered at the first inline post.
    pub inline_stage: Option<Mr>,
    /// Memory windows: the `ibv_mw` → uroce's window (its current rkey) and its PD.
    pub mws: HashMap<usize, (uroce::verbs::Mw, usize)>,
    /// Address handles: the `ibv_ah` → where its datagrams go.
    pub ahs: HashMap<usize, crate::ah::AhEntry>,
    pub channels: HashMap<usize, ChannelEntry>,
    /// Asynchronous events for `ibv_get_async_event`, in order; the async fd counts them.
    pub async_events: VecDeque<AsyncEntry>,
    /// Scratch for polled completions (no allocation per poll once grown).
    pub wcs: Vec<WorkCompletion>,
    /// QP 1, once uroce's librdmacm asked for it (`crate::gsi`).
    pub gsi: Option<crate::gsi::Gsi>,
    datapath: Option<Datapath>,
    /// The daemon's control connection when the datapath is a `uroce daemon`'s
    /// (listens are asked of it).
    daemon: Option<uroce::datapath::daemon::Control>,
    /// QPNs the daemon gave this context and not used yet: `next..end`.
    qpns: (u32, u32),
    /// The context's async fd (owned by [`Shared`]), counted up per queued event.
    async_fd: RawFd,
    /// When the progress thread wakes next on its own (its timer), to know whether a
    /// post brought a timer forward.
    sleep_until: Option<Instant>,
    /// The device's other engines (`UROCE_SHARDS`), index `k - 1` for shard `k`; empty
    /// for one engine. Every PD, region and CQ is mirrored into each.
    pub shards: Vec<Arc<Shard>>,
    /// Whether the shards have datapaths and take QPs: in direct mode over UDP, or
    /// through a daemon (each shard attached on its own).
    sharded: bool,
    /// A memory window was allocated: every QP stays on shard 0 from then on.
    pub pinned: bool,
    /// The shard the next QP goes to (1 to `shards.len()`, in turn).
    next_shard: usize,
    /// The copy of a CQ `ibv_poll_cq` looks at first, in turn, so that none is starved.
    poll_turn: usize,
    /// With shards: the CQs (uroce's ids) armed and not fired yet. Each copy of a CQ is
    /// armed; the first event delivered takes the arm, and an event of another copy that
    /// fired meanwhile is dropped: one arm, one event.
    pub armed: std::collections::HashSet<u32>,
    /// With shards: what their posts and polls look up without this lock.
    pub routes: RouteTable,
}

/// An open device's state, shared by the program's threads and the progress thread.
pub(crate) struct Shared {
    inner: Mutex<Inner>,
    /// Written to wake the progress thread early.
    wake: OwnedFd,
    /// The context's `async_fd`: a semaphore eventfd counting queued async events.
    pub async_fd: OwnedFd,
    /// The context's `cmd_fd`: a descriptor the program may dup, poll or pass on, as it
    /// may a kernel device's command fd; uroce takes no commands through it (an eventfd
    /// never signalled), and `ibv_import_device` on it is EOPNOTSUPP.
    pub cmd_fd: OwnedFd,
    stop: AtomicBool,
    /// Start of the clock of `app_polled`.
    epoch: Instant,
    /// When the program last polled a CQ (an empty poll moves packets), in nanoseconds
    /// since `epoch`; 0 for never. Atomic, so the progress thread looks without the lock.
    app_polled: AtomicU64,
    /// The engine shards (as [`Inner::shards`]), for the posts and polls that reach them
    /// without the device's lock.
    shards: Vec<Arc<Shard>>,
    /// What those posts and polls look up (as [`Inner::routes`]).
    routes: RouteTable,
}

/// A new non-blocking eventfd (a read takes the whole count).
pub(crate) fn nonblocking_eventfd() -> std::io::Result<OwnedFd> {
    ffi::eventfd(libc::EFD_NONBLOCK)
}

/// Adds one to an eventfd's counter (readable from then on). A full counter (EAGAIN) is
/// readable already, so the result is not needed.
pub(crate) fn signal(fd: RawFd) {
    let _ = ffi::eventfd_write(fd, 1);
}

/// A new semaphore eventfd (each read takes one count), blocking as a channel's fd is
/// (the program may set O_NONBLOCK on it).
pub(crate) fn semaphore() -> std::io::Result<OwnedFd> {
    ffi::eventfd(libc::EFD_SEMAPHORE)
}

/// Takes one count from a semaphore eventfd, blocking unless the program made the fd
/// non-blocking; `Err` with the errno: EAGAIN when non-blocking and nothing is there,
/// EINTR when a signal interrupted the wait (libibverbs' `ibv_get_cq_event` and
/// `ibv_get_async_event` are one `read(2)` and fail with its errno: a handler installed
/// without SA_RESTART ends the wait, as qperf's SIGALRM ends a test).
pub(crate) fn take_one(fd: RawFd) -> Result<(), c_int> {
    ffi::eventfd_read(fd).map(|_| ())
}

impl Shared {
    /// The state of a newly opened device.
    pub fn new(
        uroce: uroce::verbs::Context,
        device: &'static Device,
        shards: Vec<Arc<Shard>>,
    ) -> std::io::Result<Self> {
        let async_fd = semaphore()?;
        let routes = RouteTable::default();
        Ok(Self {
            inner: Mutex::new(Inner {
                async_fd: async_fd.as_raw_fd(),
                uroce,
                device,
                pds: HashMap::new(),
                mrs: HashMap::new(),
                cqs: HashMap::new(),
                cq_by_id: HashMap::new(),
                qps: HashMap::new(),
                qp_by_qpn: HashMap::new(),
                srqs: HashMap::new(),
                mws: HashMap::new(),
                inline_stage: None,
                ahs: HashMap::new(),
                channels: HashMap::new(),
                async_events: VecDeque::new(),
                wcs: Vec::with_capacity(64),
                gsi: None,
                datapath: None,
                daemon: None,
                qpns: (0, 0),
                sleep_until: None,
                shards: shards.clone(),
                sharded: false,
                pinned: false,
                next_shard: 0,
                poll_turn: 0,
                armed: Default::default(),
                routes: routes.clone(),
            }),
            wake: ffi::eventfd(libc::EFD_NONBLOCK)?,
            async_fd,
            cmd_fd: nonblocking_eventfd()?,
            stop: AtomicBool::new(false),
            epoch: Instant::now(),
            app_polled: AtomicU64::new(0),
            shards,
            routes,
        })
    }

    /// The state, locked.
    pub fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The state, locked, unless another thread holds the lock now.
    fn try_lock(&self) -> Option<MutexGuard<'_, Inner>> {
        match self.inner.try_lock() {
            Ok(g) => Some(g),
            Err(std::sync::TryLockError::Poisoned(e)) => Some(e.into_inner()),
            Err(std::sync::TryLockError::WouldBlock) => None,
        }
    }

    /// The program has just polled a CQ (an empty one moves the packets itself).
    pub fn app_polled(&self) {
        let ns = self.epoch.elapsed().as_nanos().max(1) as u64;
        self.app_polled.store(ns, Ordering::Relaxed);
    }

    /// The program is about to block waiting for an event (`ibv_get_cq_event`,
    /// `ibv_get_async_event`): the progress thread takes over at once.
    pub fn app_waits(&self) {
        self.app_polled.store(0, Ordering::Relaxed);
        signal(self.wake.as_raw_fd());
    }

    /// How long ago the program last polled a CQ, if it did.
    fn since_app_polled(&self) -> Option<Duration> {
        let at = self.app_polled.load(Ordering::Relaxed);
        (at != 0).then(|| {
            let now = self.epoch.elapsed().as_nanos() as u64;
            Duration::from_nanos(now.saturating_sub(at))
        })
    }

    /// Wakes the progress thread if a post brought the next timer before its wake-up.
    pub fn after_post(&self, inner: &Inner) {
        // A program posting is at work too: the thread stays away while it is (one clock
        // read: the stamp before this post says whether it was already at work).
        let now = (self.epoch.elapsed().as_nanos() as u64).max(1);
        let before = self.app_polled.swap(now, Ordering::Relaxed);
        let polling = before != 0 && now.saturating_sub(before) < APP_ACTIVE.as_nanos() as u64;
        if inner.datapath.is_none() || polling {
            // A program that polls runs the timers itself; if it stops, the thread is
            // back within APP_ACTIVE.
            return;
        }
        let next = inner.uroce.poll_timeout();
        if next.is_some() && (inner.sleep_until.is_none() || next < inner.sleep_until) {
            signal(self.wake.as_raw_fd());
        }
    }

    /// Opens the datapath and starts the progress thread, once; the errno when neither
    /// AF_XDP nor the UDP backend can be had.
    pub fn start(self: &Arc<Self>, inner: &mut Inner) -> Result<(), c_int> {
        if inner.datapath.is_some() {
            return Ok(());
        }
        let choice = std::env::var(BACKEND_ENV).unwrap_or_else(|_| "auto".into());
        if !inner.shards.is_empty() {
            // Through a daemon, each engine attaches as a process of its own would: its
            // own rings, its own socket of the fast path and QPNs of that socket's class
            // (`daemon_shards`). Where the daemon lets in fewer, one engine.
            if let Some((b, control)) = daemon_backend(inner, &choice)? {
                // Shards that cannot all start leave the device one engine (none runs).
                if let Some(group) = daemon_shards(inner) {
                    let _ = self.start_shards(inner, group);
                }
                return self
                    .start_on(inner, b, control, Vec::new())
                    .inspect_err(|_| {
                        self.stop_shards(inner);
                    });
            }
            if let Some(mut group) = sharded_backends(inner, &choice)? {
                // Shard `s` takes socket `shard::socket_of(s, n)`, `(s + 1) mod n`: with
                // the group turned left by one, the `s`th.
                group.rotate_left(1);
                if group.is_empty() {
                    return Err(libc::EIO);
                }
                let first = group.remove(0);
                self.start_shards(inner, group)?;
                return self
                    .start_on(inner, first, None, Vec::new())
                    .inspect_err(|_| {
                        self.stop_shards(inner);
                    });
            }
        }
        let (backend, daemon) = open_backend(inner)?;
        // Both of the context's addresses are its own: a QP talking to one of the device's
        // QPs through GID 0 (link-local) is delivered here too, not put on the wire.
        // Through a daemon, it delivers locally, between every process it serves.
        let mut local = vec![inner.uroce.config().ip];
        local.extend(inner.uroce.link_local().map(std::net::IpAddr::V6));
        if daemon.is_some() {
            local.clear();
        }
        self.start_on(inner, backend, daemon, local)
    }

    /// Starts shards 1 to N-1 on `backends` (shard `k` on the `k - 1`th): their datapaths
    /// open, their threads run, and QPs go to them from now on. None is left running
    /// when one fails to start (the next QP's start tries again).
    fn start_shards(
        self: &Arc<Self>,
        inner: &mut Inner,
        backends: Vec<Box<dyn Backend + Send>>,
    ) -> Result<(), c_int> {
        // Each engine's posts stage inline data in a slot of their own.
        crate::post::inline_stage(inner)?;
        for (sh, b) in inner.shards.clone().into_iter().zip(backends) {
            let name = format!("uroce-s{}-{}", sh.index, inner.device.iface());
            if let Err(e) = sh.start(b, self.clone(), name) {
                self.stop_shards(inner);
                return Err(e);
            }
        }
        inner.sharded = true;
        Ok(())
    }

    /// Stops every shard's thread and closes its datapath: QPs go to shard 0 again (the
    /// device's datapath could not be started after them, or theirs could not all be).
    fn stop_shards(&self, inner: &mut Inner) {
        for s in &inner.shards {
            s.stop();
        }
        inner.sharded = false;
    }

    /// Starts the progress thread on `backend`, delivering what goes to one of `local`
    /// itself ([`Loopback`]).
    fn start_on(
        self: &Arc<Self>,
        inner: &mut Inner,
        backend: Box<dyn Backend + Send>,
        daemon: DaemonControl,
        local: Vec<IpAddr>,
    ) -> Result<(), c_int> {
        // RC windows no larger than what the receive buffer holds (the peer's taken to be
        // like ours), as `Endpoint::new` does: a clean path then loses nothing.
        if let Some(bytes) = backend.rx_capacity() {
            inner.uroce.set_inflight_budget(Some(bytes));
        }
        inner.daemon = daemon;
        let backend = Loopback::new(backend, local);
        let me = self.clone();
        // Signals blocked: the program's signals are for its own threads.
        let thread = ffi::quiet::spawn(format!("uroce-{}", inner.device.iface()), move || me.run())
            .map_err(|e| e.raw_os_error().unwrap_or(libc::EAGAIN))?;
        inner.datapath = Some(Datapath {
            backend,
            thread: Some(thread),
        });
        Ok(())
    }

    /// Whether the device is being closed ([`Shared::stop`] was called).
    pub fn is_stopping(&self) -> bool {
        self.stop.load(Ordering::Acquire)
    }

    /// Stops the progress thread (the device is being closed).
    pub fn stop(&self) {
        self.stop.store(true, Ordering::Release);
        signal(self.wake.as_raw_fd());
        let (thread, shards) = {
            let mut g = self.lock();
            let t = g.datapath.as_mut().and_then(|d| d.thread.take());
            (t, g.shards.clone())
        };
        if let Some(t) = thread {
            let _ = t.join();
        }
        for s in shards {
            s.stop();
        }
    }

    /// After a post or modify on a QP of engine `shard`, with the device's lock `g`: what
    /// became sendable goes to the datapath and the events it raised (flush completions on
    /// an armed CQ) to their channels. On the device's own engine, for a send (`sends`),
    /// the progress thread is told ([`Shared::after_post`]); a shard's packets go out
    /// under its lock alone, after the device's is let go.
    pub fn finish_post(&self, mut g: MutexGuard<'_, Inner>, shard: usize, sends: bool) {
        match shard.checked_sub(1).and_then(|k| g.shards.get(k)).cloned() {
            None => {
                g.pump(false);
                if sends {
                    self.after_post(&g);
                }
            }
            Some(sh) => {
                drop(g);
                if sh.after_post(&mut sh.lock()) {
                    self.take_shard_events(&sh);
                }
            }
        }
    }

    /// Runs `f` on the context of QP `qp` (an `ibv_qp`'s address) when it lives on an
    /// engine shard, under that shard's lock alone, with the routes read; then what it
    /// made sendable goes to the shard's datapath and its events to their channels, as
    /// [`Shared::finish_post`] does. None when the QP is not a shard's: the caller takes
    /// the device's lock.
    pub fn on_shard<R>(
        &self,
        qp: usize,
        f: impl FnOnce(&Routes, QpEntry, &mut uroce::verbs::Context) -> R,
    ) -> Option<R> {
        if self.shards.is_empty() {
            return None;
        }
        let routes = self.routes.read();
        let e = *routes.qps.get(&qp)?;
        let sh = self.shards.get(e.shard.checked_sub(1)?)?;
        let mut st = sh.lock();
        let r = f(&routes, e, &mut st.uroce);
        // Not held through the sends: a verb waiting to change the routes would hold up
        // every other post and poll meanwhile.
        drop(routes);
        let events = sh.after_post(&mut st);
        drop(st);
        if events {
            self.take_shard_events(sh);
        }
        Some(r)
    }

    /// Polls CQ `cq` (an `ibv_cq`'s address) without the device's lock when only the
    /// shards feed it (no QP of the device's own engine ever used it): up to `n`
    /// completions, each given to `out` with its index, and their number. None when the
    /// device's own copy may hold some, or `cq` is not known here: the caller takes the
    /// device's lock.
    pub fn poll_on_shards(
        &self,
        cq: usize,
        n: usize,
        mut out: impl FnMut(usize, &WorkCompletion),
    ) -> Option<usize> {
        if self.shards.is_empty() {
            return None;
        }
        let route = *self.routes.read().cqs.get(&cq)?;
        if route.on_zero() {
            return None;
        }
        // No `app_polled` stamp: this poll moves no packet of the device's own engine, so
        // its progress thread goes on moving them (QP 1's) as for a program away.
        thread_local! {
            /// The calling thread's turn (the copy its next poll looks at first: a count
            /// of its own, so that threads polling side by side share no counter) and the
            /// completions its poll takes (no allocation per poll once grown).
            static SCRATCH: std::cell::RefCell<(usize, Vec<WorkCompletion>)> =
                const { std::cell::RefCell::new((0, Vec::new())) };
        }
        let (got, events) = SCRATCH.with(|s| {
            let (turn, wcs) = &mut *s.borrow_mut();
            *turn = turn.wrapping_add(1);
            wcs.clear();
            let copies = (&self.shards[..], route.fed_by);
            let events = crate::shard::poll_copies(copies, *turn, route.id, n, wcs);
            for (i, w) in wcs.iter().enumerate() {
                out(i, w);
            }
            (wcs.len(), events)
        });
        for s in self.shards.iter().filter(|s| events & (1 << s.index) != 0) {
            self.take_shard_events(s);
        }
        Some(got)
    }

    /// Hands the completion and asynchronous events shard `shard` found to their
    /// channels and the async fd (its thread, after a pump, without its lock).
    pub fn take_shard_events(&self, shard: &Shard) {
        let mut g = self.lock();
        let mut st = shard.lock();
        g.take_events_of(shard.index, &mut st.uroce);
    }

    /// Queues IBV_EVENT_PORT_ACTIVE (`up`) or IBV_EVENT_PORT_ERR for port 1.
    fn port_event(&self, up: bool) {
        let mut g = self.lock();
        g.uroce.push_async_event(if up {
            AsyncEvent::PortActive(1)
        } else {
            AsyncEvent::PortErr(1)
        });
        g.pump(false);
    }

    /// The progress thread. Two states, by how recently the program polled a CQ or
    /// posted (its stamp, [`Shared::app_polled`]):
    /// - the program is away (not within [`APP_ACTIVE`], or it waits on a completion
    ///   channel: [`Shared::app_waits`]): the thread moves every packet. It pumps when a
    ///   datapath descriptor is readable, its wake-up eventfd is written or its timer
    ///   (retransmission, RNR) is due, at least every [`MAX_SLEEP`].
    /// - the program is at work (within [`APP_ACTIVE`]): it moves its own packets, so the
    ///   thread takes no lock, but it still watches the datapath's descriptors: a program
    ///   may stop calling in without blocking anywhere the library sees (it spins on
    ///   memory for a peer's RDMA WRITE, as `ib_write_lat` does), and nobody else would
    ///   move that WRITE into it. When one is readable the thread looks at the stamp: not
    ///   within [`POLLING`], the program has stopped to do something else, and the thread
    ///   pumps at once (if the lock is free: a program holding it is at work). Within it,
    ///   or with the lock held, the program takes the packet itself; the thread then
    ///   sleeps without the datapath's descriptors for a back-off, [`MIN_BACKOFF`]
    ///   doubled on each consecutive such finding up to [`APP_ACTIVE`] (back to the first
    ///   once the thread finds the program stopped or away), so a program busy-polling
    ///   through a stream of packets wakes it about a thousand times a second at most,
    ///   not once a packet, which on a machine with two cores would take throughput from
    ///   it. And it pumps every [`APP_ACTIVE`] (unless the program holds the lock then:
    ///   it is in the library, and the thread never waits for the lock while the program
    ///   is at work), so what the program leaves waits no longer.
    ///
    /// [`Progress::next`] makes these choices; this loop carries them out.
    ///
    /// Through a `uroce daemon`, the datapath's descriptor is the doorbell the daemon
    /// rings only for a side that said it sleeps: every receive that finds the ring empty
    /// says so (the program's empty polls, the thread's pumps, which end with one), so a
    /// program that stops polling is rung for its next packet and the thread wakes; the
    /// doorbell stays readable until the next receive takes its count, which the thread
    /// leaves to the program while it polls.
    fn run(&self) {
        let fds = {
            let g = self.lock();
            g.datapath
                .as_ref()
                .map(|d| d.backend.wait_fds())
                .unwrap_or_default()
        };
        ffi::set_timer_slack(TIMER_SLACK_NS);
        // The port's events (IBV_EVENT_PORT_ERR / PORT_ACTIVE) follow the interface's link,
        // read from rtnetlink every PORT_CHECK; without a netlink socket there are none.
        let ifindex = self.lock().device.ifindex();
        let mut link = LinkWatch::new(ifindex).ok();
        if link.as_ref().is_some_and(|l| !l.is_up()) {
            self.port_event(false);
        }
        let mut next_port_check = Instant::now() + PORT_CHECK;
        let mut last_pump = Instant::now();
        // The back-off while the program polls through arriving packets (zero: none).
        let mut backoff = Duration::ZERO;
        // A datapath descriptor was readable when the thread last woke.
        let mut readable = false;
        let mut pfds: Vec<libc::pollfd> = ffi::pollfds(self.wake.as_raw_fd(), fds);
        while !self.stop.load(Ordering::Acquire) {
            if Instant::now() >= next_port_check {
                next_port_check = Instant::now() + PORT_CHECK;
                if let Some(Ok(Some(up))) = link.as_mut().map(LinkWatch::poll) {
                    self.port_event(up);
                }
            }
            let idle = last_pump.elapsed();
            let step = Progress::next(&mut backoff, self.since_app_polled(), idle, readable);
            let (wait, watch) = match step {
                Progress::Pump => (self.pump_as_thread(self.lock(), &mut last_pump), pfds.len()),
                Progress::Watch(wait) => (wait, pfds.len()),
                Progress::LookAway(wait) => (wait, 1),
                Progress::TryPump | Progress::Periodic => match self.try_lock() {
                    Some(g) => {
                        if step == Progress::TryPump {
                            backoff = Duration::ZERO;
                        }
                        (self.pump_as_thread(g, &mut last_pump), pfds.len())
                    }
                    // The program (or another of its threads) holds the lock: it is in
                    // the library, at work; its next empty poll moves what there is. (No
                    // wait for the lock: the thread would be woken at each of the
                    // program's unlocks to lose the lock again, thousands of times a
                    // second while the program busy-polls.)
                    None => {
                        last_pump = Instant::now();
                        (Progress::back_off(&mut backoff, Duration::ZERO), 1)
                    }
                },
            };
            readable = false;
            if wait.is_zero() {
                continue;
            }
            for p in pfds.iter_mut() {
                p.revents = 0;
            }
            // The descriptors are this device's own (the backend's outlive the thread:
            // `stop` joins before they close); `watch` is at most their number.
            let _ = uroce::datapath::wait::poll(&mut pfds[..watch], wait);
            if pfds[0].revents != 0 {
                // Our non-blocking wake-up eventfd: its whole count.
                let _ = ffi::eventfd_read(pfds[0].fd);
            }
            readable = pfds[1..watch].iter().any(|p| p.revents != 0);
        }
    }

    /// The progress thread's pump, with the lock `g`: moves everything, notes when
    /// (`last_pump`) and when its next timer is due; returns how long it may sleep.
    fn pump_as_thread(&self, mut g: MutexGuard<'_, Inner>, last_pump: &mut Instant) -> Duration {
        g.pump(true);
        let now = Instant::now();
        *last_pump = now;
        let next = g.uroce.poll_timeout();
        g.sleep_until = next;
        next.map_or(MAX_SLEEP, |t| {
            t.saturating_duration_since(now).min(MAX_SLEEP)
        })
    }
}

/// What the progress thread does next ([`Shared::run`] says why).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Progress {
    /// The program is away: pump, waiting for the lock if need be.
    Pump,
    /// A packet arrived and the program has stopped calling in: pump if the lock is
    /// free (if not, the program is at work: look away, [`Progress::back_off`]); the
    /// back-off goes back to its first.
    TryPump,
    /// The program is at work and the thread has not pumped for [`APP_ACTIVE`]: pump if
    /// the lock is free, as for `TryPump`, the back-off kept as it is (the program is at
    /// work: a program busy-polling through packets would otherwise have the thread back
    /// at [`MIN_BACKOFF`] every [`APP_ACTIVE`]).
    Periodic,
    /// The program is at work and nothing arrived: sleep this long on the wake-up
    /// eventfd and the datapath's descriptors.
    Watch(Duration),
    /// A packet arrived while the program polls: sleep this long (the back-off) on the
    /// wake-up eventfd alone.
    LookAway(Duration),
}

impl Progress {
    /// The next step, from how long ago the program last polled or posted (`since`;
    /// None: never, or it waits on a channel), how long ago the thread last pumped
    /// (`idle`) and whether a datapath descriptor was readable when it woke; `backoff` is
    /// the thread's back-off, doubled when it looks away again, zero when it pumps.
    fn next(
        backoff: &mut Duration,
        since: Option<Duration>,
        idle: Duration,
        readable: bool,
    ) -> Self {
        let at_work = since.filter(|&s| s < APP_ACTIVE);
        match at_work {
            None => {
                *backoff = Duration::ZERO;
                Progress::Pump
            }
            Some(_) if idle >= APP_ACTIVE => Progress::Periodic,
            // Until the program's turn ends or the thread's periodic pump is due.
            Some(since) if !readable => {
                Progress::Watch((APP_ACTIVE - since).min(APP_ACTIVE - idle))
            }
            Some(since) if since >= POLLING => Progress::TryPump,
            Some(_) => Progress::LookAway(Self::back_off(backoff, idle)),
        }
    }

    /// The next back-off (`backoff` doubled, at least [`MIN_BACKOFF`], at most
    /// [`APP_ACTIVE`]), stored; how long to sleep (no later than the periodic pump, due
    /// [`APP_ACTIVE`] after the last, `idle` ago).
    fn back_off(backoff: &mut Duration, idle: Duration) -> Duration {
        *backoff = (*backoff * 2).clamp(MIN_BACKOFF, APP_ACTIVE);
        (*backoff).min(APP_ACTIVE.saturating_sub(idle))
    }
}

impl Inner {
    /// Whether the datapath is open.
    pub fn started(&self) -> bool {
        self.datapath.is_some()
    }

    /// Moves packets: everything sendable to the datapath; with `receive`, everything
    /// received to the context, due timers, and what that made sendable; then completion
    /// and asynchronous events to their channels.
    pub fn pump(&mut self, receive: bool) {
        let Inner {
            uroce, datapath, ..
        } = self;
        if let Some(d) = datapath.as_mut() {
            let now = Instant::now();
            let receive = receive || d.backend.pending();
            if receive {
                uroce.handle_timeout(now);
            }
            // Bounded, so a flood cannot hold the lock for ever. A round ends with a
            // receive that found nothing, so nothing sent to ourselves is left waiting.
            // Each round reads the clock: an ACK taken rounds after its packet left, at
            // the time read before both, timed the round trip as nothing (an RC QP's
            // smoothed round trip fell to 1 ns, and its recovery probe fired on every
            // round trip the path really took).
            let mut now = now;
            for round in 0..32 {
                if round > 0 {
                    now = Instant::now();
                }
                uroce::datapath::transmit(uroce, &mut d.backend, now);
                if !receive {
                    break;
                }
                let got = d
                    .backend
                    .receive(Duration::ZERO, 64, &mut |r| {
                        let _ = uroce.handle_received(now, r);
                    })
                    .unwrap_or(0);
                if got == 0 {
                    break;
                }
            }
        }
        if let Some(gsi) = self.gsi.as_mut() {
            gsi.drain(&mut self.uroce);
        }
        if self.uroce.has_events() {
            self.dispatch_events();
        }
    }

    /// Hands completion events to their channels and asynchronous events to the async fd.
    fn dispatch_events(&mut self) {
        while let Some(cq) = self.uroce.poll_cq_event() {
            if !(self.takes_the_arm(0, cq) && self.deliver_cq_event(cq)) {
                self.uroce.ack_cq_events(cq, 1);
            }
        }
        while let Some(ev) = self.uroce.poll_async_event() {
            self.deliver_async_event(ev);
        }
    }

    /// Hands the completion and asynchronous events of shard `index` (its context,
    /// `from`, locked) to their channels and the async fd.
    fn take_events_of(&mut self, index: usize, from: &mut uroce::verbs::Context) {
        while let Some(cq) = from.poll_cq_event() {
            // Counted where the program acknowledges it: in the device's own copy.
            from.ack_cq_events(cq, 1);
            if self.takes_the_arm(index, cq) && self.deliver_cq_event(cq) {
                self.uroce.count_cq_event(cq);
            }
        }
        while let Some(ev) = from.poll_async_event() {
            self.deliver_async_event(ev);
        }
    }

    /// Whether a completion event of `cq` that engine `from`'s copy raised is the one of
    /// the CQ's arm. With shards every copy was armed: the other copies' arms are taken
    /// back (`from`'s fired), and an event another copy raised first took the arm (one
    /// arm, one event). With one engine, every event is its arm's.
    fn takes_the_arm(&mut self, from: usize, cq: CqId) -> bool {
        if self.shards.is_empty() {
            return true;
        }
        if from != 0 {
            self.uroce.disarm_cq(cq);
        }
        for s in self.shards.iter().filter(|s| s.index != from) {
            s.lock().uroce.disarm_cq(cq);
        }
        self.armed.remove(&cq.0)
    }

    /// Queues a completion event of `cq` on its channel: false when it has none (a CQ
    /// without a channel cannot be waited on: the event goes).
    fn deliver_cq_event(&mut self, cq: CqId) -> bool {
        let channel = self
            .cq_by_id
            .get(&cq.0)
            .and_then(|c| self.cqs.get(c).map(|e| (*c, e.channel)));
        match channel.and_then(|(c, ch)| self.channels.get_mut(&ch).map(|e| (c, e))) {
            Some((c, ch)) => {
                ch.events.push_back((c, cq.0));
                signal(ch.fd.as_raw_fd());
                true
            }
            None => false,
        }
    }

    /// Queues an asynchronous event for `ibv_get_async_event`, if its object is still
    /// handed out.
    fn deliver_async_event(&mut self, ev: AsyncEvent) {
        if let Some(e) = self.async_event(ev) {
            self.async_events.push_back(e);
            signal(self.async_fd);
        }
    }

    /// Runs `f` on the context of engine `shard` (0: the device's own; else under that
    /// shard's lock, taken after the device's).
    pub fn ctx_of<R>(
        &mut self,
        shard: usize,
        f: impl FnOnce(&mut uroce::verbs::Context) -> R,
    ) -> R {
        match shard.checked_sub(1).and_then(|k| self.shards.get(k)) {
            Some(s) => {
                let mut st = s.lock();
                let r = f(&mut st.uroce);
                // A post may complete at once (a flush on a QP in error): published
                // before the lock goes, so a poll that follows sees it.
                s.publish(&st);
                r
            }
            None => f(&mut self.uroce),
        }
    }

    /// The route table, for a change, when the device has shards (no shard's lock
    /// held: `crate::routes`' lock order).
    pub fn routes_mut(&self) -> Option<std::sync::RwLockWriteGuard<'_, Routes>> {
        (!self.shards.is_empty()).then(|| self.routes.write())
    }

    /// Runs `f` on every shard's context (after the device's own was changed the same
    /// way): the first error, if any.
    pub fn mirror<E>(
        &self,
        mut f: impl FnMut(&mut uroce::verbs::Context) -> Result<(), E>,
    ) -> Result<(), E> {
        for s in &self.shards {
            f(&mut s.lock().uroce)?;
        }
        Ok(())
    }

    /// The engine a new QP goes to: a shard in turn when the shards have datapaths, the
    /// QP has no SRQ and no memory window was allocated; else the device's own.
    pub fn place_qp(&mut self, srq: bool) -> usize {
        if !self.sharded || self.pinned || srq {
            return 0;
        }
        self.next_shard = self.next_shard % self.shards.len() + 1;
        self.next_shard
    }

    /// Whether any QP lives on a shard.
    pub fn any_qp_on_shards(&self) -> bool {
        self.qps.values().any(|e| e.shard != 0)
    }

    /// Takes up to `n - inner.wcs.len()` completions of `cq` from the shards' copies
    /// ([`crate::shard::poll_copies`]), starting at a different copy each time, and hands
    /// on the events the pumps on the way raised.
    pub fn poll_shards(&mut self, cq: CqId, n: usize) {
        if self.shards.is_empty() {
            return;
        }
        self.poll_turn = self.poll_turn.wrapping_add(1);
        // Every copy: this path does not read the routes' record of which feed `cq`.
        let copies = (&self.shards[..], u64::MAX);
        let events = crate::shard::poll_copies(copies, self.poll_turn, cq, n, &mut self.wcs);
        for k in 0..self.shards.len() {
            if events & (1 << (k + 1)) != 0 {
                let s = self.shards[k].clone();
                let mut st = s.lock();
                self.take_events_of(s.index, &mut st.uroce);
            }
        }
    }

    /// The C form of an asynchronous event, when its object is still handed out.
    fn async_event(&self, ev: AsyncEvent) -> Option<AsyncEntry> {
        let qp = |qpn: u32| self.qp_by_qpn.get(&qpn).copied();
        // The object's address and the event type; None for a port event.
        let (obj, event_type) = match ev {
            AsyncEvent::CqErr(cq) => (Some(*self.cq_by_id.get(&cq.0)?), 0),
            AsyncEvent::QpFatal(q) => (Some(qp(q)?), 1),
            AsyncEvent::QpReqErr(q) => (Some(qp(q)?), 2),
            AsyncEvent::QpAccessErr(q) => (Some(qp(q)?), 3),
            AsyncEvent::SqDrained(q) => (Some(qp(q)?), 5),
            AsyncEvent::PortActive(_) => (None, 9),
            AsyncEvent::PortErr(_) => (None, 10),
            AsyncEvent::SrqLimitReached(s) => {
                let p = self.srqs.iter().find(|(_, e)| e.id == s).map(|(&p, _)| p)?;
                (Some(p), 15)
            }
            AsyncEvent::QpLastWqeReached(q) => (Some(qp(q)?), 16),
        };
        let element = match (ev, obj) {
            (AsyncEvent::PortActive(p) | AsyncEvent::PortErr(p), _) => ibv_async_event_element {
                port_num: c_int::from(p),
            },
            (AsyncEvent::CqErr(_), Some(c)) => ibv_async_event_element {
                cq: c as *mut ibv_cq,
            },
            (AsyncEvent::SrqLimitReached(_), Some(s)) => ibv_async_event_element {
                srq: s as *mut ibv_srq,
            },
            (_, q) => ibv_async_event_element {
                qp: q.unwrap_or(0) as *mut ibv_qp,
            },
        };
        Some(AsyncEntry {
            event: ibv_async_event {
                element,
                event_type,
            },
            obj,
        })
    }

    /// Drops the queued asynchronous events of an object being destroyed (a QP, CQ or
    /// SRQ at address `obj`), as the kernel does, so that no event hands the program a
    /// freed object; the async fd keeps their counts, which `ibv_get_async_event` skips.
    pub fn forget_async_events_of(&mut self, obj: usize) {
        for e in self.async_events.iter_mut() {
            if e.event.event_type != FORGOTTEN && e.obj == Some(obj) {
                e.event.event_type = FORGOTTEN;
            }
        }
    }

    /// The datapath, for resolving a peer's MAC address on its path.
    pub fn backend(&mut self) -> Option<&mut Loopback> {
        self.datapath.as_mut().map(|d| &mut d.backend)
    }

    /// Makes the next QP that engine `shard` creates take a QPN of this process's own:
    /// through a daemon, one it handed out to that engine ([`Backend::claim_qpns`], a
    /// block at a time: each engine is a process of its own to the daemon,
    /// `daemon_shards`); in direct mode the engine's own.
    pub fn next_qpn_from_daemon(&mut self, shard: usize) -> Result<(), c_int> {
        match shard.checked_sub(1).and_then(|k| self.shards.get(k)) {
            Some(s) => s.lock().next_qpn_from_daemon(),
            None => next_qpn_of(
                &mut self.qpns,
                self.datapath
                    .as_mut()
                    .map(|d| &mut d.backend as &mut dyn Backend),
                &mut self.uroce,
            ),
        }
    }

    /// Connection requests for `service_id` come to this process (`on`), or no longer:
    /// asked of the daemon when there is one (EADDRINUSE: another process listens).
    pub fn listen(&mut self, service_id: u64, on: bool) -> Result<(), c_int> {
        match &self.daemon {
            Some(c) => c
                .listen(
                    service_id,
                    std::net::IpAddr::V6(std::net::Ipv6Addr::UNSPECIFIED),
                    on,
                )
                .map_err(|e| errno_of(&e)),
            None => Ok(()),
        }
    }
}

/// Makes `uroce`'s next QP take the next of `qpns` (`next..end`), the QPNs the daemon
/// behind `backend` gave it, a block of 64 claimed when they ran out; with no daemon
/// (`claim_qpns` says none) the context numbers its QPs itself.
pub(crate) fn next_qpn_of(
    qpns: &mut (u32, u32),
    backend: Option<&mut dyn Backend>,
    uroce: &mut uroce::verbs::Context,
) -> Result<(), c_int> {
    if qpns.0 >= qpns.1 {
        let Some(b) = backend else {
            return Ok(());
        };
        match b.claim_qpns(64).map_err(|e| errno_of(&e))? {
            Some((first, count)) => *qpns = (first, first + count),
            None => return Ok(()),
        }
    }
    uroce.set_qpn_space(qpns.0, 1);
    qpns.0 += 1;
    Ok(())
}

/// The errno of a datapath's failure to open: the OS error where there is one, else one
/// for its kind (the backends add context to the message, which drops the raw errno).
fn errno_of(e: &std::io::Error) -> c_int {
    use std::io::ErrorKind as K;
    if uroce::datapath::xdp::is_held(e) {
        // Another datapath has the interface: as a second bind of UDP/4791 would be.
        return libc::EADDRINUSE;
    }
    e.raw_os_error().unwrap_or(match e.kind() {
        K::AddrInUse => libc::EADDRINUSE,
        K::AddrNotAvailable => libc::EADDRNOTAVAIL,
        K::PermissionDenied => libc::EPERM,
        K::NotFound => libc::ENODEV,
        K::Unsupported => libc::EOPNOTSUPP,
        _ => libc::EIO,
    })
}

/// Bytes of a frame above the path MTU's payload: every header uroce may put around it.
const FRAME_OVERHEAD: u32 = 100;

/// A daemon's control connection, when the datapath is one.
type DaemonControl = Option<uroce::datapath::daemon::Control>;

/// A datapath and, when it is a daemon's, its control connection.
type Opened = (Box<dyn Backend + Send>, DaemonControl);

/// The datapath `UROCE_BACKEND` asks for on the device's interface: `auto` attaches to
/// the `uroce daemon` serving the interface when one runs, else opens it in direct mode;
/// `daemon` attaches or fails (ECONNREFUSED); `xdp` and `udp` are direct mode.
fn open_backend(inner: &Inner) -> Result<Opened, c_int> {
    let choice = std::env::var(BACKEND_ENV).unwrap_or_else(|_| "auto".into());
    if let Some((b, control)) = daemon_backend(inner, &choice)? {
        return Ok((b, control));
    }
    let choice = if choice == "direct" {
        "auto"
    } else {
        choice.as_str()
    };
    direct_backend(inner, choice).map(|b| (b, None))
}

/// The `uroce daemon` serving the device's interface, when `choice` (`UROCE_BACKEND`)
/// lets it be taken (`auto`, `daemon`) and one runs; ECONNREFUSED for `daemon` when none
/// does.
fn daemon_backend(inner: &Inner, choice: &str) -> Result<Option<Opened>, c_int> {
    if !matches!(choice, "auto" | "daemon") {
        return Ok(None);
    }
    match uroce::datapath::daemon::DaemonBackend::find(inner.device.iface()) {
        Ok(Some(b)) => {
            let control = b.control();
            Ok(Some((Box::new(b), Some(control))))
        }
        Ok(None) if choice == "daemon" => Err(libc::ECONNREFUSED),
        Ok(None) => Ok(None),
        // A daemon serves the interface but not us: EACCES, never a second datapath.
        Err(e) => Err(errno_of(&e)),
    }
}

/// The datapath in direct mode: this process owns it.
fn direct_backend(inner: &Inner, choice: &str) -> Result<Box<dyn Backend + Send>, c_int> {
    let iface = inner.device.iface();
    let local = inner.uroce.config().ip;
    let mtu = uroce::net::addresses::interface_info(iface)
        .ok()
        .and_then(|i| Mtu::fitting(i.mtu))
        .unwrap_or(Mtu::M1024);
    // UROCE_XDP_TX_BATCH and UROCE_XDP_BUSY_POLL tune AF_XDP; a value out of range is
    // EINVAL, as a bad UROCE_BACKEND is, unless AF_XDP is not to be tried at all.
    let xdp = if choice == "udp" {
        XdpConfig::default()
    } else {
        XdpConfig::from_env().map_err(|_| libc::EINVAL)?
    };
    let open = || {
        XdpBackend::open_with(
            iface,
            2,
            mtu.bytes() + FRAME_OVERHEAD,
            uroce::transport::rc::MAX_INFLIGHT_PSNS,
            &xdp,
        )
    };
    let auto_udp = choice == "auto" && takes_udp(inner, choice)?;
    let xdp = match choice {
        "udp" => None,
        "auto" if auto_udp => None,
        // AF_XDP held by another process is EADDRINUSE, never the UDP backend: with the
        // XDP program taking every RoCE frame of the interface, a process on UDP would
        // receive nothing (until a shared datapath lands, one uroce process per
        // interface). Held with no holder to be seen, it is tried again for a second: a
        // program that just exited may still be letting go of it.
        "auto" => Some(holder::retry_while_letting_go(inner.device.ifindex(), open)),
        // Asked for by name: a program that just exited on this interface may still be
        // letting go of its XDP program and socket (the kernel releases them after the
        // process is gone), so a failure other than a missing privilege is tried again
        // for a second before it is the answer.
        "xdp" => {
            let mut r = open();
            for _ in 0..5 {
                match &r {
                    Err(e) if errno_of(e) != libc::EPERM => {
                        std::thread::sleep(Duration::from_millis(200));
                        r = open();
                    }
                    _ => break,
                }
            }
            Some(r)
        }
        _ => return Err(libc::EINVAL),
    };
    match xdp {
        // A process on the UDP backend at this address (UROCE_BACKEND=udp) would lose
        // its traffic to our XDP program: EADDRINUSE as well. (The kernel's own socket,
        // rdma_rxe's, has no process and does not count: AF_XDP takes the frames before
        // it, as it always did.)
        Some(Ok(_)) if holder::udp_holder(local, uroce::wire::ROCEV2_UDP_PORT).is_some() => {
            Err(libc::EADDRINUSE)
        }
        Some(Ok(b)) => Ok(Box::new(b)),
        Some(Err(e)) if choice == "xdp" || uroce::datapath::xdp::is_held(&e) => Err(errno_of(&e)),
        // `auto` without AF_XDP (the library cannot say why; `uroce run` does).
        _ => udp_backend(inner).map_err(|e| errno_of(&e)),
    }
}

/// Whether direct mode takes the UDP backend for `choice` (`UROCE_BACKEND`): `udp`, or
/// `auto` / `direct` where the interface makes it the faster (`choice::choose`: UDP on
/// veth and other virtual links, AF_XDP on a NIC with zero-copy or native XDP; `uroce
/// run` and `uroce devices` say which and why). EADDRINUSE where `auto` would take UDP
/// but another process's XDP program takes every RoCE frame of the interface: a UDP
/// socket here would receive nothing.
fn takes_udp(inner: &Inner, choice: &str) -> Result<bool, c_int> {
    match choice {
        "udp" => Ok(true),
        "auto" | "direct" => {
            let udp = uroce::datapath::choice::choose(inner.device.iface()).datapath
                == uroce::datapath::choice::Datapath::Udp;
            if udp && holder::xdp_holder(inner.device.ifindex()).is_some() {
                return Err(libc::EADDRINUSE);
            }
            Ok(udp)
        }
        _ => Ok(false),
    }
}

/// The datapaths of shards 1 to N-1 of a device whose shard 0 attached to a `uroce
/// daemon`: each attaches to the same daemon as a process of its own, with its own rings
/// and doorbells and, over UDP, its own socket of the daemon's reuseport group (a class),
/// whose QPNs it claims as its QPs are made (`Inner::next_qpn_from_daemon`). The daemon
/// then steers each QP's packets to its engine, in the kernel (the class sockets) or by
/// QPN (its switch, for the rings): no hand-off between shards. None where the daemon
/// lets in fewer (one engine then: a daemon that refuses a second attach, or went away).
fn daemon_shards(inner: &Inner) -> Option<Vec<Box<dyn Backend + Send>>> {
    inner
        .shards
        .iter()
        .map(
            |_| match uroce::datapath::daemon::DaemonBackend::find(inner.device.iface()) {
                Ok(Some(b)) => Some(Box::new(b) as Box<dyn Backend + Send>),
                _ => None,
            },
        )
        .collect()
}

/// The datapaths of a sharded device (`UROCE_SHARDS` > 1), one per engine, when the
/// device is in direct mode over UDP: a steered reuseport group of sockets on its
/// address, index `i` receiving DestQP `mod n == i` (`crate::shard`), each with its
/// link-local partner where the first could be bound, with UDP GRO and the handoff of a
/// coalesced packet of another class (`uroce::datapath::handoff`). None where the device
/// takes AF_XDP in direct mode (one queue per process): one engine then. (Through a
/// daemon, `daemon_shards`.)
fn sharded_backends(
    inner: &Inner,
    choice: &str,
) -> Result<Option<Vec<Box<dyn Backend + Send>>>, c_int> {
    if !takes_udp(inner, choice)? {
        return Ok(None);
    }
    let n = inner.shards.len() as u32 + 1;
    // The port held already (another uroce process in direct mode, rdma_rxe's socket)
    // is EADDRINUSE, as a plain bind would be: the group's first socket asks
    // (`holder::udp_bound`).
    // The sockets coalesce (UDP GRO): a run the kernel steered by its first packet may
    // hold packets of another socket's class, which `handoff` takes to their engine.
    let handoff = uroce::datapath::handoff::Group::new(n as usize).map_err(|e| errno_of(&e))?;
    let mut group: Vec<Box<dyn Backend + Send>> = Vec::with_capacity(n as usize);
    // GID 0 is served on every socket or on none (the group's steering holds only for a
    // whole group): as the first goes.
    let mut with_ll = true;
    for i in 0..n {
        let (b, ll) = udp_pair(inner, Some((i, n)), with_ll).map_err(|e| errno_of(&e))?;
        with_ll = ll;
        let member =
            uroce::datapath::handoff::Member::new(Box::new(b), i as usize, handoff.clone());
        group.push(Box::new(member));
    }
    Ok(Some(group))
}

/// The UDP datapath of a context in direct mode: a socket on its address and, beside it,
/// one on the interface's IPv6 link-local address (the default GID, GID 0) bound with its
/// scope, held together by source address (`BySource`), so that the context sends from
/// and receives at GID 0 over UDP as over AF_XDP (libfabric's dgram and rdm endpoints
/// name it at both ends). Without the second socket (its port taken, IPv6 off on the
/// interface) the context goes on with its address alone: GID 0 is then not served
/// (`qp::remote_of` refuses it).
fn udp_backend(inner: &Inner) -> std::io::Result<Box<dyn Backend + Send>> {
    udp_pair(inner, None, true).map(|(b, _)| Box::new(b) as Box<dyn Backend + Send>)
}

/// The socket on the context's address and, with `link_local`, the one on the
/// interface's link-local address beside it (`udp_backend`); with `steer` = (i, n), each
/// is socket `i` of a steered group of `n` that coalesces (`sharded_backends`), and the
/// link-local one is needed once socket 0 had it (its failure is then the error).
/// Whether the link-local socket is there.
fn udp_pair(
    inner: &Inner,
    steer: Option<(u32, u32)>,
    link_local: bool,
) -> std::io::Result<(BySource, bool)> {
    let local = inner.uroce.config().ip;
    let index = inner.device.ifindex();
    let first = match (steer, local) {
        (Some((i, n)), a) => UdpBackend::bind_steered_coalescing(a, i, n)?,
        (None, IpAddr::V6(a)) if a.is_unicast_link_local() => {
            UdpBackend::bind_link_local(a, index)?
        }
        (None, a) => UdpBackend::bind(a)?,
    };
    let mut b = BySource::new(vec![local], Box::new(first));
    let ll = inner.uroce.link_local().filter(|&a| IpAddr::V6(a) != local);
    let Some(a) = ll.filter(|_| link_local) else {
        return Ok((b, false));
    };
    let second = match steer {
        Some((i, n)) => UdpBackend::bind_link_local_steered(a, index, i, n),
        None => UdpBackend::bind_link_local(a, index),
    };
    match second {
        Ok(second) => {
            b.add(vec![IpAddr::V6(a)], Box::new(second));
            Ok((b, true))
        }
        Err(e) if steer.is_some_and(|(i, _)| i > 0) => Err(e),
        Err(_) => Ok((b, false)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn us(n: u64) -> Duration {
        Duration::from_micros(n)
    }

    /// A post on a QP of an engine shard and a poll of a CQ only shards feed complete
    /// while another thread holds the device's lock: the shards' data path takes none of
    /// the device's locks (a path that took it would wait here until the lock is let go).
    #[test]
    fn the_shards_data_path_takes_no_device_lock() {
        use crate::routes::CqRoute;
        use uroce::verbs::{Context, ContextConfig};
        let mac = [2, 0, 0, 0, 0, 1];
        let device: &'static Device = Box::leak(Box::new(Device::for_test("lo", mac, 0)));
        let cfg = ContextConfig {
            mac,
            ip: "127.0.0.1".parse().unwrap(),
            seed: 1,
            udp_sport_base: 0xc000,
            tos: 0,
        };
        let now = Instant::now();
        let shard = Shard::new(1, 2, Context::new(cfg, now)).unwrap();
        let shared = Arc::new(Shared::new(Context::new(cfg, now), device, vec![shard]).unwrap());
        // A QP of shard 1 and the CQ it alone feeds, as create_qp and create_cq record
        // them (by the addresses of their C objects).
        let (qp, cq) = (0x1000, 0x2000);
        {
            let mut r = shared.routes.write();
            let e = QpEntry {
                qpn: 0x42,
                pd: 0,
                send_cq: cq,
                recv_cq: cq,
                ud: false,
                shard: 1,
            };
            r.qps.insert(qp, e);
            let fed_by = 1 << 1;
            r.cqs.insert(
                cq,
                CqRoute {
                    id: CqId(7),
                    fed_by,
                },
            );
        }
        let held = shared.lock();
        let (tx, rx) = std::sync::mpsc::channel();
        let other = shared.clone();
        let t = std::thread::spawn(move || {
            let posted = other.on_shard(qp, |_, e, _| e.qpn);
            let polled = other.poll_on_shards(cq, 4, |_, _| ());
            let _ = tx.send((posted, polled));
        });
        let done = rx.recv_timeout(Duration::from_secs(10));
        drop(held);
        t.join().unwrap();
        assert_eq!(done, Ok((Some(0x42), Some(0))));
        // A QP that is not a shard's, and a CQ of the device's own engine, are the locked
        // path's (None: the caller takes the device's lock).
        shared.routes.write().cqs.get_mut(&cq).unwrap().fed_by |= 1;
        assert_eq!(shared.on_shard(0x3000, |_, e, _| e.qpn), None);
        assert_eq!(shared.poll_on_shards(cq, 4, |_, _| ()), None);
    }

    /// A packet that arrives for a program that has stopped polling (it spins on memory
    /// for the peer's RDMA WRITE, as `ib_write_lat` does) is taken at once, not left
    /// until the program's turn of APP_ACTIVE ends.
    #[test]
    fn a_packet_for_a_program_that_stopped_polling_is_taken_at_once() {
        let mut backoff = Duration::ZERO;
        for since in [us(50), us(300), us(900)] {
            assert_eq!(
                Progress::next(&mut backoff, Some(since), us(100), true),
                Progress::TryPump,
                "{since:?}"
            );
        }
    }

    /// While the program is at work and nothing arrived, the thread watches the
    /// datapath until the program's turn ends or its own periodic pump is due.
    #[test]
    fn a_program_at_work_is_watched_until_its_turn_ends() {
        let mut backoff = Duration::ZERO;
        assert_eq!(
            Progress::next(&mut backoff, Some(us(200)), us(100), false),
            Progress::Watch(us(800))
        );
        assert_eq!(
            Progress::next(&mut backoff, Some(us(100)), us(600), false),
            Progress::Watch(us(400))
        );
    }

    /// A program that is away (never polled, polled longer than APP_ACTIVE ago, or
    /// waits on a completion channel) has the thread pump, with or without a packet, and
    /// the thread pumps at least every APP_ACTIVE whatever the program does.
    #[test]
    fn the_thread_pumps_for_a_program_away_and_every_app_active() {
        for readable in [false, true] {
            for since in [None, Some(APP_ACTIVE)] {
                let mut backoff = us(640);
                assert_eq!(
                    Progress::next(&mut backoff, since, us(10), readable),
                    Progress::Pump
                );
                assert_eq!(backoff, Duration::ZERO);
            }
            // The periodic pump leaves the back-off of a program at work as it is.
            let mut backoff = us(640);
            assert_eq!(
                Progress::next(&mut backoff, Some(us(1)), APP_ACTIVE, readable),
                Progress::Periodic
            );
            assert_eq!(backoff, us(640));
        }
    }

    /// A program busy-polling through a stream of packets keeps the thread away for a
    /// back-off that doubles from MIN_BACKOFF to APP_ACTIVE: over a second, about a
    /// thousand wake-ups, not one a packet.
    #[test]
    fn a_busy_polling_program_wakes_the_thread_a_thousand_times_a_second_at_most() {
        let mut backoff = Duration::ZERO;
        let mut seen = Vec::new();
        let (mut t, mut wakeups, mut idle) = (Duration::ZERO, 0, Duration::ZERO);
        while t < Duration::from_secs(1) {
            // The program polled a microsecond ago; a packet is always there.
            let wait = match Progress::next(&mut backoff, Some(us(1)), idle, true) {
                Progress::LookAway(w) => w,
                // The periodic pump, every APP_ACTIVE.
                Progress::Periodic => {
                    idle = Duration::ZERO;
                    continue;
                }
                other => panic!("{other:?}"),
            };
            if seen.len() < 8 {
                seen.push(wait);
            }
            t += wait;
            idle += wait;
            wakeups += 1;
        }
        assert_eq!(
            &seen[..7],
            &[us(10), us(20), us(40), us(80), us(160), us(320), us(370)]
        );
        assert_eq!(seen[7], APP_ACTIVE);
        assert!(wakeups <= 1_010, "{wakeups} wake-ups in a second");
        // The thread's own pump puts the back-off back to its first.
        Progress::next(&mut backoff, None, us(1), true);
        assert_eq!(
            Progress::next(&mut backoff, Some(us(1)), us(1), true),
            Progress::LookAway(MIN_BACKOFF)
        );
    }
}
