//! An event loop on its own thread. The loop owns a [`Context`] and its backend;
//! application threads hand it work requests and take completions through lock-free
//! bounded queues (`crossbeam_queue::ArrayQueue`), so posting never blocks on the
//! datapath and the datapath never waits for the application.
//!
//! One loop per core: give each loop its own context with its own QPN space
//! ([`Context::set_qpn_space`]) and its own backend: for AF_XDP one queue of the
//! interface each ([`crate::datapath::xdp::XdpBackend::open_per_queue`]), for the UDP
//! backend sockets that share port 4791 with the kernel steering each datagram to the
//! loop that owns its destination QP ([`crate::datapath::udp::UdpBackend::bind_steered`]).
//!
//! Shutdown is clean: the loop takes the work already queued, moves every QP to ERR so
//! each outstanding work request completes with `WR_FLUSH_ERR`, and hands back the
//! endpoint and every completion not yet taken.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_queue::ArrayQueue;

use super::event_loop::Endpoint;
use super::Backend;
use crate::verbs::{Context, CqId, RecvWr, SendWr, WcOpcode, WcStatus, WorkCompletion};

/// A work request for the loop.
#[derive(Debug, Clone, Copy)]
pub enum Work {
    /// `post_send` on a QP.
    Send {
        /// The QP.
        qpn: u32,
        /// The request.
        wr: SendWr,
    },
    /// `post_recv` on a QP.
    Recv {
        /// The QP.
        qpn: u32,
        /// The request.
        wr: RecvWr,
    },
}

struct Shared {
    work: ArrayQueue<Work>,
    done: ArrayQueue<WorkCompletion>,
    stop: AtomicBool,
    /// Work requests the context refused (reported as completions with LOC_QP_OP_ERR).
    refused: AtomicU64,
}

/// How the loop waits when there is nothing to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Idle {
    /// Spin: lowest latency, one core busy.
    BusyPoll,
    /// Sleep on the socket up to this long (new work waits at most that much).
    Sleep(Duration),
}

/// A running loop; `&Worker` can be shared by several application threads.
pub struct Worker<B: Backend + Send + 'static> {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<(Endpoint<B>, Vec<WorkCompletion>)>>,
}

impl<B: Backend + Send + 'static> Worker<B> {
    /// Starts a loop on a new thread for `ep`, reporting completions of the CQs `cqs`.
    /// With a notifier set on `ep` ([`Endpoint::set_notifier`]), completions handed over
    /// signal it when armed, so a thread can wait on its fd before [`Worker::poll_cq`].
    /// `depth` bounds both queues.
    pub fn spawn(ep: Endpoint<B>, cqs: Vec<CqId>, idle: Idle, depth: usize) -> Self {
        let shared = Arc::new(Shared {
            work: ArrayQueue::new(depth.max(1)),
            done: ArrayQueue::new(depth.max(1)),
            stop: AtomicBool::new(false),
            refused: AtomicU64::new(0),
        });
        let s = shared.clone();
        let thread = std::thread::spawn(move || run(ep, &s, &cqs, idle));
        Self {
            shared,
            thread: Some(thread),
        }
    }

    /// Queues a send; gives the request back when the queue is full.
    pub fn post_send(&self, qpn: u32, wr: SendWr) -> Result<(), Work> {
        self.shared.work.push(Work::Send { qpn, wr })
    }

    /// Queues a receive; gives the request back when the queue is full.
    pub fn post_recv(&self, qpn: u32, wr: RecvWr) -> Result<(), Work> {
        self.shared.work.push(Work::Recv { qpn, wr })
    }

    /// Takes up to `max` completions into `out`; returns how many.
    pub fn poll_cq(&self, out: &mut Vec<WorkCompletion>, max: usize) -> usize {
        let mut n = 0;
        while n < max {
            match self.shared.done.pop() {
                Some(wc) => {
                    out.push(wc);
                    n += 1;
                }
                None => break,
            }
        }
        n
    }

    /// Work requests the context refused so far.
    pub fn refused(&self) -> u64 {
        self.shared.refused.load(Ordering::Relaxed)
    }

    /// Stops the loop: queued work is taken, every QP goes to ERR (outstanding requests
    /// complete with WR_FLUSH_ERR). Returns the endpoint and the completions not taken.
    pub fn shutdown(mut self) -> (Endpoint<B>, Vec<WorkCompletion>) {
        self.shared.stop.store(true, Ordering::Release);
        let (ep, mut rest) = self
            .thread
            .take()
            .map(|t| t.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
            .expect("joined once");
        let mut queued = Vec::new();
        while let Some(wc) = self.shared.done.pop() {
            queued.push(wc);
        }
        queued.append(&mut rest);
        (ep, queued)
    }
}

impl<B: Backend + Send + 'static> Drop for Worker<B> {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn apply(ctx: &mut Context, w: Work, shared: &Shared, backlog: &mut Vec<WorkCompletion>) {
    let (qpn, wr_id, r, opcode) = match w {
        Work::Send { qpn, wr } => (qpn, wr.wr_id, ctx.post_send(qpn, wr), WcOpcode::Send),
        Work::Recv { qpn, wr } => (qpn, wr.wr_id, ctx.post_recv(qpn, wr), WcOpcode::Recv),
    };
    if r.is_err() {
        shared.refused.fetch_add(1, Ordering::Relaxed);
        backlog.push(WorkCompletion::send(
            qpn,
            wr_id,
            opcode,
            0,
            WcStatus::LocQpOpErr,
        ));
    }
}

/// Moves every completion waiting on `cqs` into `backlog` (`wcs` is the scratch batch).
fn take_completions(
    ctx: &mut Context,
    cqs: &[CqId],
    wcs: &mut Vec<WorkCompletion>,
    backlog: &mut Vec<WorkCompletion>,
) {
    for &cq in cqs {
        loop {
            wcs.clear();
            if ctx.poll_cq_into(cq, 64, wcs) == 0 {
                break;
            }
            backlog.extend_from_slice(wcs);
        }
    }
}

fn run<B: Backend>(
    mut ep: Endpoint<B>,
    shared: &Shared,
    cqs: &[CqId],
    idle: Idle,
) -> (Endpoint<B>, Vec<WorkCompletion>) {
    let wait = match idle {
        Idle::BusyPoll => Duration::ZERO,
        Idle::Sleep(d) => d,
    };
    // Completions the application has not made room for yet: kept, never dropped.
    let mut backlog: Vec<WorkCompletion> = Vec::with_capacity(shared.done.capacity());
    let mut wcs = Vec::with_capacity(64);
    let notifier = ep.notifier().cloned();
    let hand_over = |backlog: &mut Vec<WorkCompletion>| {
        let mut taken = 0;
        for wc in backlog.iter() {
            if shared.done.push(*wc).is_err() {
                break;
            }
            taken += 1;
        }
        backlog.drain(..taken);
        // Completions handed over wake an application waiting on the notifier (an
        // atomic load when it is not armed).
        if taken > 0 {
            if let Some(n) = &notifier {
                n.signal();
            }
        }
    };
    while !shared.stop.load(Ordering::Acquire) {
        let mut busy = false;
        while let Some(w) = shared.work.pop() {
            apply(&mut ep.ctx, w, shared, &mut backlog);
            busy = true;
        }
        // Sleep on the socket only when nothing was posted this round.
        let _ = ep.poll(if busy { Duration::ZERO } else { wait });
        // Every completion now: one ACK can complete a whole window of requests.
        take_completions(&mut ep.ctx, cqs, &mut wcs, &mut backlog);
        hand_over(&mut backlog);
    }
    // Clean shutdown: what was queued is taken, then every QP is flushed.
    while let Some(w) = shared.work.pop() {
        apply(&mut ep.ctx, w, shared, &mut backlog);
    }
    let _ = ep.poll(Duration::ZERO);
    let qpns: Vec<u32> = ep.ctx.qpns().collect();
    for q in qpns {
        let _ = ep.ctx.modify_qp_err(q, Instant::now());
    }
    take_completions(&mut ep.ctx, cqs, &mut wcs, &mut backlog);
    (ep, backlog)
}
