//! Engine shards: a device's QPs spread over several sans-IO contexts, each with its own
//! datapath, lock and thread, so that a program's transport work uses more than one core.
//!
//! `UROCE_SHARDS=N` (1 to 64; 1, the default, is the single engine of `engine.rs`) gives
//! a device opened in direct mode over the UDP backend, or through a `uroce daemon`, N
//! engines:
//! - shard 0 is the device's own context (`engine::Inner`): QP 1, QPs on an SRQ, and
//!   every QP once a memory window was allocated on the device;
//! - shards 1 to N-1 ([`Shard`]) take the other QPs (RC, UC, UD), in turn as they are
//!   created. Each is a `uroce::verbs::Context` of its own behind its own lock, with its
//!   own UDP socket and its own thread.
//!
//! **Steering.** The N sockets are one SO_REUSEPORT group on port 4791 whose steering
//! program hands each datagram to socket `DestQP mod N`
//! (`UdpBackend::bind_steered`): shard `s` gets socket `(s + 1) mod N` and the QPNs of
//! that class, so QP 1 (class 1) is shard 0's. A datagram reaches the thread that owns
//! its QP in the kernel; the sockets coalesce (UDP GRO), and a packet of another class in
//! a coalesced run goes to its owner through `uroce::datapath::handoff`. Datagrams
//! between QPs of one process go through the kernel too (it loops them back to the right
//! socket), not through the single engine's local delivery.
//!
//! **Through a daemon**, each shard attaches to it as a process of its own would
//! (`engine::daemon_shards`): its own rings and doorbells and, over UDP, its own socket
//! of the daemon's reuseport group, a class of 2^18 QPNs, from which it claims its QPs'
//! numbers (`ShardState::next_qpn_from_daemon`). The daemon steers by QPN as it does
//! between processes (the kernel for the class sockets, its switch for the rings), so no
//! packet needs a hand-off. A daemon that lets in fewer leaves the device one engine; on
//! AF_XDP in direct mode (one queue per process) it has one engine too.
//!
//! **What every shard shares.** One key space and one set of CQs for the program: every
//! protection domain, memory region and CQ is made in shard 0 and mirrored into each
//! shard under the same id or keys (`uroce::endpoint` `mirror.rs`), so an rkey is valid on
//! whichever shard the QP it arrives on lives, and a CQ fed by QPs of several shards has
//! a copy in each. `ibv_poll_cq` takes from the copies in turn (a QP lives in one shard,
//! so its completions stay in order); `ibv_req_notify_cq` arms every copy, and the first
//! to fire disarms the others (one arm, one event). Memory windows are not mirrored (their
//! bindings change with work requests on a QP): a context allocates one only while all
//! its QPs are on shard 0, and is kept there from then on (EOPNOTSUPP otherwise).
//!
//! **Locks.** `ibv_post_send` and `ibv_post_recv` on a QP of shard `s`, and
//! `ibv_poll_cq` on a CQ only shards feed, never take the device's lock: they find the
//! QP, the CQ and any address handle in the device's route table (`crate::routes`, a
//! reader-writer lock the data path only reads), then take shard `s`'s lock once for the
//! whole list of work requests, and the packets go out, and come in, under it alone.
//! Threads posting to QPs of different shards run side by side. The other verbs (and the
//! extended posting API, and polls of a CQ a QP of shard 0 used) take the device's lock
//! and then a shard's. A thread takes a shard's lock alone, after the route table's read,
//! or after the device's, never two shards' without the device's: no cycle.
//!
//! **Threads.** A shard's thread moves its packets: it sleeps in `ppoll(2)` on the
//! socket, a wake-up eventfd and the next timer, and after any packet it keeps polling
//! for [`SPIN`] before it sleeps again (where the cores allow), as a NIC's queue engine
//! would. A program's poll of a CQ reads the shards' completions, and moves the packets
//! of a shard whose thread sleeps. Completion and asynchronous events go through the
//! device's lock to their channels.

#![deny(unsafe_code)]

use std::ffi::c_int;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use uroce::datapath::Backend;
use uroce::verbs::{CqId, WorkCompletion};

use crate::engine::{self, Shared};
use crate::ffi;

/// The environment variable that asks for engine shards.
pub const SHARDS_ENV: &str = "UROCE_SHARDS";

/// The most shards a device may have.
pub const MAX_SHARDS: usize = 64;

// How long a shard's thread keeps polling its socket after the last packet before it
// sleeps, where the machine has the cores for it.
use uroce::datapath::SPIN;

/// The longest a shard's thread sleeps without looking at its datapath.
const MAX_SLEEP: Duration = Duration::from_millis(5);

/// The number of engines `UROCE_SHARDS` asks for: 1 when it is not set, EINVAL for
/// anything but a number from 1 to [`MAX_SHARDS`].
pub(crate) fn count_from_env() -> Result<usize, c_int> {
    match std::env::var(SHARDS_ENV) {
        Err(std::env::VarError::NotPresent) => Ok(1),
        Ok(v) => parse_count(&v).ok_or(libc::EINVAL),
        Err(_) => Err(libc::EINVAL),
    }
}

fn parse_count(v: &str) -> Option<usize> {
    v.trim()
        .parse::<usize>()
        .ok()
        .filter(|n| (1..=MAX_SHARDS).contains(n))
}

/// The socket of a steered group of `count` that shard `shard` takes: the one that
/// receives its QPNs, `(shard + 1) mod count`, so that QP 1 is shard 0's.
pub(crate) fn socket_of(shard: usize, count: usize) -> usize {
    (shard + 1) % count
}

/// The first QPN of shard `shard` of `count` whose device numbers from `first`, and the
/// stride: QPNs of the class its socket receives.
pub(crate) fn qpn_space(first: u32, shard: usize, count: usize) -> (u32, u32) {
    let n = count as u32;
    let base = first - first % n;
    (base + socket_of(shard, count) as u32, n)
}

/// One engine of a device beyond its first (shard 0 is `engine::Inner`'s context).
pub(crate) struct Shard {
    /// Its index, 1 and up.
    pub index: usize,
    state: Mutex<ShardState>,
    /// Written to wake its thread early (a post brought its timer forward).
    wake: OwnedFd,
    stop: AtomicBool,
    thread: Mutex<Option<JoinHandle<()>>>,
    /// Its thread sleeps (in `ppoll`): a program polling a CQ moves its packets then.
    asleep: AtomicBool,
    /// Completions waiting in its CQ copies, as of the last time its lock was let go
    /// ([`Shard::publish`]): a poll leaves a shard with none alone, without its lock.
    waiting: AtomicUsize,
    /// How long its thread polls on after a packet: [`SPIN`] where the machine has a
    /// core for each engine thread and the program's, else none (spinning threads would
    /// take the cores the others need).
    spin: Duration,
}

/// What a shard's lock holds.
pub(crate) struct ShardState {
    pub uroce: uroce::verbs::Context,
    backend: Option<Box<dyn Backend + Send>>,
    /// Through a daemon, the QPNs it gave this shard and not used yet: `next..end`.
    qpns: (u32, u32),
    /// When its thread wakes next on its own.
    sleep_until: Option<Instant>,
}

impl Shard {
    /// Shard `index` of `count` around `uroce`, its datapath not open yet.
    pub fn new(
        index: usize,
        count: usize,
        uroce: uroce::verbs::Context,
    ) -> std::io::Result<Arc<Self>> {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        Ok(Arc::new(Self {
            index,
            state: Mutex::new(ShardState {
                uroce,
                backend: None,
                qpns: (0, 0),
                sleep_until: None,
            }),
            wake: engine::nonblocking_eventfd()?,
            stop: AtomicBool::new(false),
            thread: Mutex::new(None),
            asleep: AtomicBool::new(false),
            waiting: AtomicUsize::new(0),
            spin: if cores > count { SPIN } else { Duration::ZERO },
        }))
    }

    /// Its state, locked.
    pub fn lock(&self) -> MutexGuard<'_, ShardState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Its state, locked, unless another thread holds the lock now.
    pub fn try_lock(&self) -> Option<MutexGuard<'_, ShardState>> {
        match self.state.try_lock() {
            Ok(g) => Some(g),
            Err(std::sync::TryLockError::Poisoned(e)) => Some(e.into_inner()),
            Err(std::sync::TryLockError::WouldBlock) => None,
        }
    }

    /// Says how many completions its CQ copies hold (`st`, its state, locked): stored
    /// before the lock is let go, so a thread that takes the lock after sees it, and a
    /// program that armed a CQ (which takes every shard's lock) and then finds no
    /// completion waiting anywhere has missed none.
    pub fn publish(&self, st: &ShardState) {
        self.waiting
            .store(st.uroce.completions_waiting(), Ordering::Release);
    }

    /// Whether its CQ copies may hold completions.
    pub fn has_completions(&self) -> bool {
        self.waiting.load(Ordering::Acquire) != 0
    }

    /// Whether its thread polls on after a packet (the machine has a core for it).
    pub fn spins(&self) -> bool {
        !self.spin.is_zero()
    }

    /// Whether its thread sleeps now.
    pub fn asleep(&self) -> bool {
        self.asleep.load(Ordering::Relaxed)
    }

    /// Opens the shard's datapath on `backend` and starts its thread, named `name`.
    pub fn start(
        self: &Arc<Self>,
        backend: Box<dyn Backend + Send>,
        device: Arc<Shared>,
        name: String,
    ) -> Result<(), c_int> {
        // Started again after a failed start stopped it.
        self.stop.store(false, Ordering::Release);
        {
            let mut st = self.lock();
            if let Some(bytes) = backend.rx_capacity() {
                st.uroce.set_inflight_budget(Some(bytes));
            }
            st.backend = Some(backend);
        }
        let me = self.clone();
        let t = ffi::quiet::spawn(name, move || me.run(&device))
            .map_err(|e| e.raw_os_error().unwrap_or(libc::EAGAIN))?;
        *self.thread.lock().unwrap_or_else(|e| e.into_inner()) = Some(t);
        Ok(())
    }

    /// Stops its thread and closes its datapath (the device is being closed, or its
    /// datapaths could not all be started).
    pub fn stop(&self) {
        self.stop.store(true, Ordering::Release);
        engine::signal(self.wake.as_raw_fd());
        let t = self.thread.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(t) = t {
            let _ = t.join();
        }
        self.lock().backend = None;
    }

    /// After a post on one of its QPs (with `st`, its state): what became sendable goes to
    /// the datapath now, and the thread is woken if the post brought its timer forward.
    /// Whether the shard has events for the device to hand on
    /// ([`Shared::take_shard_events`]).
    pub fn after_post(&self, st: &mut ShardState) -> bool {
        let ShardState { uroce, backend, .. } = st;
        if let Some(b) = backend.as_mut() {
            uroce::datapath::transmit(uroce, b.as_mut(), Instant::now());
        }
        self.after_pump(st);
        st.uroce.has_events()
    }

    /// After its packets moved on another thread than its own (with `st`, its state):
    /// its thread is woken if its timer came forward, and its completions are published.
    pub fn after_pump(&self, st: &mut ShardState) {
        let next = st.uroce.poll_timeout();
        if next.is_some() && (st.sleep_until.is_none() || next < st.sleep_until) {
            engine::signal(self.wake.as_raw_fd());
            // Woken once for it, not again by each post or poll until the thread runs.
            st.sleep_until = next;
        }
        self.publish(st);
    }

    /// The thread: pumps, hands events to the device, polls on for [`SPIN`] after the
    /// last packet, then sleeps until a packet, a wake-up or the next timer.
    fn run(&self, device: &Shared) {
        ffi::set_timer_slack(1_000);
        let fds = self
            .lock()
            .backend
            .as_ref()
            .map(|b| b.wait_fds())
            .unwrap_or_default();
        let mut pfds: Vec<libc::pollfd> = ffi::pollfds(self.wake.as_raw_fd(), fds);
        let mut last_busy = Instant::now();
        while !self.stop.load(Ordering::Acquire) {
            let now = Instant::now();
            let (moved, next, events) = {
                let mut st = self.lock();
                let moved = st.pump(now);
                let next = st.uroce.poll_timeout();
                st.sleep_until = next;
                self.publish(&st);
                (moved, next, st.uroce.has_events())
            };
            if events {
                device.take_shard_events(self);
            }
            if moved {
                last_busy = now;
                continue;
            }
            if now.duration_since(last_busy) < self.spin {
                std::hint::spin_loop();
                continue;
            }
            let wait = next.map_or(MAX_SLEEP, |t| {
                t.saturating_duration_since(Instant::now()).min(MAX_SLEEP)
            });
            if wait.is_zero() {
                continue;
            }
            for p in pfds.iter_mut() {
                p.revents = 0;
            }
            self.asleep.store(true, Ordering::Relaxed);
            let _ = uroce::datapath::wait::poll(&mut pfds, wait);
            self.asleep.store(false, Ordering::Relaxed);
            if pfds[0].revents != 0 {
                let _ = ffi::eventfd_read(pfds[0].fd);
            }
        }
    }
}

/// Takes up to `n - wcs.len()` completions of `cq` from the copies of `shards` whose bit
/// (`1 << index`) is set in `fed_by` (the shards whose QPs use the CQ: no other copy
/// holds its completions, and no other shard's packets are this poll's to move), starting
/// at copy `turn` (modulo their number) so that none is starved; a bit `1 << index` set
/// in the answer for each shard whose pump on the way raised events to hand on (with its
/// lock taken again, after the device's: [`Shared::take_shard_events`]).
///
/// A shard that says it holds completions ([`Shard::has_completions`]) is looked at, its
/// lock waited for (a pump's round at most); one that holds none is not: a program that
/// arms the CQ (every shard's lock taken) and then polls it sees every completion that
/// came before the arm, or it would wait for an event that never comes. Then a shard
/// whose thread sleeps has its packets moved by the program that polls (as the device's
/// own engine's are): a busy-polling program waits for no thread's wake-up. One whose
/// thread is at work is left to it where that thread has a core to spin on; where it has
/// none ([`Shard::spins`]), its packets are moved by whoever finds its lock free: an
/// awake thread may be one the scheduler has not run yet, while busy-polling program
/// threads hold the cores (on two cores, two polling threads slowed `tests/c/threads.c`
/// to 0.28x of the device-locked engine before this).
pub(crate) fn poll_copies(
    (shards, fed_by): (&[Arc<Shard>], u64),
    turn: usize,
    cq: CqId,
    n: usize,
    wcs: &mut Vec<WorkCompletion>,
) -> u64 {
    let count = shards.len();
    let in_turn = |k: usize| &shards[(turn + k) % count];
    let feeds = |s: &Shard| fed_by & (1 << s.index) != 0;
    for k in 0..count {
        if wcs.len() >= n {
            break;
        }
        let s = in_turn(k);
        if !feeds(s) || !s.has_completions() {
            continue;
        }
        let mut st = s.lock();
        st.uroce.poll_cq_into(cq, n - wcs.len(), wcs);
        s.publish(&st);
    }
    let mut events = 0;
    for k in 0..count {
        if wcs.len() >= n {
            break;
        }
        let s = in_turn(k);
        if !feeds(s) || (!s.asleep() && s.spins()) {
            continue;
        }
        let Some(mut st) = s.try_lock() else {
            continue;
        };
        if st.pump(Instant::now()) {
            st.uroce.poll_cq_into(cq, n - wcs.len(), wcs);
        }
        if st.uroce.has_events() {
            events |= 1 << s.index;
        }
        s.after_pump(&mut st);
    }
    events
}

impl ShardState {
    /// Makes its next QP take a QPN the daemon gave it, when its datapath is a daemon's
    /// (`engine::next_qpn_of`).
    pub fn next_qpn_from_daemon(&mut self) -> Result<(), c_int> {
        let Self {
            uroce,
            backend,
            qpns,
            ..
        } = self;
        engine::next_qpn_of(qpns, backend.as_deref_mut().map(|b| b as _), uroce)
    }

    /// Moves packets, one receive batch a time (the thread takes the lock again for the
    /// next: a post or poll waiting for it goes in between): due timers, what is
    /// sendable, what was received and what that made sendable; whether any packet came
    /// in.
    pub fn pump(&mut self, now: Instant) -> bool {
        let Self { uroce, backend, .. } = self;
        let Some(b) = backend.as_mut() else {
            return false;
        };
        uroce.handle_timeout(now);
        uroce::datapath::transmit(uroce, b.as_mut(), now);
        let got = b
            .receive(Duration::ZERO, 64, &mut |r| {
                let _ = uroce.handle_received(now, r);
            })
            .unwrap_or(0);
        if got > 0 {
            uroce::datapath::transmit(uroce, b.as_mut(), now);
        }
        got > 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// UROCE_SHARDS takes 1 to 64 and nothing else.
    #[test]
    fn shard_counts_are_one_to_sixty_four() {
        assert_eq!(parse_count("1"), Some(1));
        assert_eq!(parse_count(" 8 "), Some(8));
        assert_eq!(parse_count("64"), Some(64));
        for bad in ["0", "65", "-1", "abc", "", "2.5"] {
            assert_eq!(parse_count(bad), None, "{bad:?}");
        }
    }

    /// Each shard's QPNs are the class its socket receives (DestQP mod N), QP 1's class
    /// is shard 0's, and no two shards share a class.
    #[test]
    fn each_shard_numbers_its_qps_in_its_sockets_class() {
        for count in [2usize, 3, 8, 64] {
            assert_eq!(socket_of(0, count), 1 % count);
            let mut classes = std::collections::HashSet::new();
            for shard in 0..count {
                let (first, stride) = qpn_space(0x1234, shard, count);
                assert_eq!(stride as usize, count);
                assert_eq!(first as usize % count, socket_of(shard, count));
                assert!(first >= 0x1234 - count as u32 && first > 1);
                assert!(classes.insert(first % stride));
            }
        }
    }
}
