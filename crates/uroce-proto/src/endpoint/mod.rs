//! The sans-IO endpoint: one [`Context`] is an RDMA device context (protection domains,
//! memory regions, completion queues, queue pairs) driven like quinn-proto's endpoint. The
//! caller passes received packets in ([`Context::handle_frame`],
//! [`Context::handle_datagram`]), takes datagrams out ([`Context::poll_transmit`], which
//! writes the RoCE part and returns a [`Transmit`]) and keeps time
//! ([`Context::poll_timeout`], [`Context::handle_timeout`]); `now` is always passed in.
//! Nothing in here touches a socket or reads a clock.
//!
//! - `resources`: the ibverbs calls (PDs, MRs, CQs, QPs, modify, post, poll);
//! - `receive`: packets in, to their QP or the DCQCN reaction point;
//! - `transmit`: packets out, CNPs first, QPs in turn, paced by DCQCN;
//! - `schedule`: the ready list of QPs that may have a packet to send, and the heap of
//!   their timers, so that no call walks every QP;
//! - `qp`: a QP as the context holds it (the transport's QP and its reaction point);
//! - `table`: the QPs by QPN, in constant time;
//! - `srq`: shared receive queues (create, modify, post, destroy) and their events;
//! - `mirror`: the PDs, regions and CQs a context shares with another context of the
//!   same device (the drop-in library's engine shards).
//!
//! No `unsafe` here but [`Context::reg_mr_raw`], the door for registering the
//! program's memory in place (its contract is stated there; `mem/shared.rs` holds the
//! pointer and reaches the bytes), and the prefetch hint of `prefetch.rs`, which reads nothing.

#![deny(unsafe_code)]

mod cq;
mod mirror;
pub(crate) mod prefetch;
mod qp;
mod receive;
mod resources;
mod schedule;
mod srq;
mod table;
mod transmit;

pub use cq::{AsyncEvent, MAX_CQE};
pub use receive::Received;
pub use resources::MwBind;
pub use transmit::{InPlace, Transmit, IN_PLACE_MIN};

use std::collections::VecDeque;
use std::net::IpAddr;
use std::time::Instant;

use cq::{CqTable, Offer};
use schedule::Schedule;
use table::QpTable;

use crate::congestion::{dcqcn, NotificationPoint, DEFAULT_CNP_DSCP};
use crate::mem::Memory;
use crate::transport::{CqId, Io, QpErrorEvent, Remote, Srq, SrqId, WorkCompletion};

/// The local end: addresses, and the seed that makes keys and anything random repeatable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ContextConfig {
    /// Our MAC.
    pub mac: [u8; 6],
    /// Our IP address (its GID is `::ffff:a.b.c.d` for IPv4).
    pub ip: IpAddr,
    /// Seed of the key generator.
    pub seed: u64,
    /// UDP source ports are `udp_sport_base | hash(QPN) & 0x3fff` (ECMP entropy, fixed per QP).
    pub udp_sport_base: u16,
    /// IP TOS / traffic class of every packet (DSCP and ECN).
    pub tos: u8,
}

/// Frame-level counters of a context.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ContextCounters {
    /// Packets handed to [`Context::handle_frame`] or [`Context::handle_datagram`].
    pub rx_frames: u64,
    /// Frames dropped because the ICRC did not verify.
    pub rx_bad_icrc: u64,
    /// Frames dropped as malformed (every other [`crate::wire::WireError`]).
    pub rx_malformed: u64,
    /// Frames for a QP that does not exist.
    pub rx_unknown_qp: u64,
    /// Frames for another IP address.
    pub rx_not_for_us: u64,
    /// Packets produced by [`Context::poll_transmit`].
    pub tx_frames: u64,
    /// Packets the transport produced that could not be built (a buffer too small for
    /// them, a peer of the other IP version): lost, as on a lossy link.
    pub tx_dropped: u64,
    /// CNPs received for a QP that does not exist.
    pub rx_cnp_unknown_qp: u64,
    /// IPv4 datagrams whose ICRC fit under another identification than the backend
    /// guessed (a UDP socket does not report it; see [`Received::Datagram`]).
    pub rx_idents_recovered: u64,
    /// READ responses copied into their READ's buffer before their ICRC was checked
    /// (see `Context::place`). Those whose ICRC then failed count in `rx_bad_icrc`
    /// too.
    pub rx_placed: u64,
}

/// A CNP waiting to be sent.
#[derive(Debug, Clone, Copy)]
struct CnpJob {
    /// The QP whose flow was marked (ours: its UDP source port is used).
    from_qpn: u32,
    /// The sender's QP, which the CNP names.
    dest_qp: u32,
    pkey: u16,
    to: Remote,
}

/// One RDMA device context: everything a process has open on it.
pub struct Context {
    cfg: ContextConfig,
    mem: Memory,
    cqs: CqTable,
    /// Completion events of armed CQs, for [`Context::poll_cq_event`].
    cq_events: VecDeque<CqId>,
    /// Asynchronous events, for [`Context::poll_async_event`].
    async_events: VecDeque<AsyncEvent>,
    qps: QpTable,
    /// Shared receive queues, by [`SrqId`]; `None` once destroyed.
    srqs: Vec<Option<Srq>>,
    next_qpn: u32,
    qpn_stride: u32,
    np: NotificationPoint,
    cnp_dscp: u8,
    cnps: VecDeque<CnpJob>,
    /// DCQCN parameters, when on.
    dcqcn: Option<dcqcn::Params>,
    /// The QPs that may have a packet to send, and the QPs' timers.
    sched: Schedule,
    /// Bytes in flight per QP ([`Context::set_inflight_budget`]).
    inflight_budget: Option<u64>,
    /// UDP source ports the QPs share, 0 for one per QP ([`Context::set_udp_sports`]).
    udp_sports: u16,
    /// Start of DCQCN rate state for QPs created after `enable_dcqcn`.
    epoch: Instant,
    wcs: Vec<(CqId, WorkCompletion)>,
    /// Completions in all the CQs, not polled yet ([`Context::completions_waiting`]).
    held: usize,
    /// The staging list of the packet being built ([`crate::transport::Io::gather`]).
    gather: Vec<crate::mem::Span>,
    counters: ContextCounters,
    /// The identification's ICRC bases, to find an IPv4 datagram's
    /// ([`Received::Datagram`]).
    ident_bases: crate::wire::icrc::IdentBases,
    /// A second address: the interface's IPv6 link-local one, for peers named by their
    /// link-local GID ([`Context::set_link_local`]).
    link_local: Option<std::net::Ipv6Addr>,
}

impl Context {
    /// A context with nothing open; `now` starts its clock (DCQCN's rate state).
    pub fn new(cfg: ContextConfig, now: Instant) -> Self {
        Self {
            cfg,
            mem: Memory::new(cfg.seed),
            cqs: CqTable::default(),
            cq_events: VecDeque::new(),
            async_events: VecDeque::new(),
            qps: QpTable::default(),
            srqs: Vec::new(),
            next_qpn: 0x11,
            qpn_stride: 1,
            np: NotificationPoint::default(),
            cnp_dscp: DEFAULT_CNP_DSCP,
            cnps: VecDeque::new(),
            dcqcn: None,
            sched: Schedule::default(),
            inflight_budget: None,
            udp_sports: 0,
            epoch: now,
            wcs: Vec::new(),
            held: 0,
            gather: Vec::with_capacity(crate::transport::MAX_SGE as usize),
            counters: ContextCounters::default(),
            ident_bases: Default::default(),
            link_local: None,
        }
    }

    /// The configuration.
    pub fn config(&self) -> &ContextConfig {
        &self.cfg
    }

    /// Gives the context a second address, `ip`, an IPv6 link-local address of its
    /// interface (fe80::/10), or takes it away (`None`): packets to it are received as
    /// packets to [`ContextConfig::ip`] are, and a peer at an IPv6 link-local address is
    /// sent to from it, whatever the family of `ContextConfig::ip`. This is how a NIC
    /// uses the default GID (IBTA §4.1.1, GID index 0: fe80:: with the port's EUI-64)
    /// beside the GIDs of its other addresses. An address that is not link-local is
    /// ignored.
    pub fn set_link_local(&mut self, ip: Option<std::net::Ipv6Addr>) {
        self.link_local = ip.filter(|a| a.is_unicast_link_local());
    }

    /// The second address ([`Context::set_link_local`]).
    pub fn link_local(&self) -> Option<std::net::Ipv6Addr> {
        self.link_local
    }

    /// Whether `ip` is one of this context's addresses.
    pub(crate) fn is_own(&self, ip: IpAddr) -> bool {
        ip == self.cfg.ip || matches!((ip, self.link_local), (IpAddr::V6(a), Some(b)) if a == b)
    }

    /// The address packets to `to` leave from: the link-local one for a link-local peer
    /// when the context has one, else [`ContextConfig::ip`].
    pub(crate) fn source_for(&self, to: IpAddr) -> IpAddr {
        match (to, self.link_local) {
            (IpAddr::V6(t), Some(ll)) if t.is_unicast_link_local() => IpAddr::V6(ll),
            _ => self.cfg.ip,
        }
    }

    /// Whether a peer at `to` can be reached from one of this context's addresses (of
    /// the same IP version).
    pub(crate) fn reaches(&self, to: IpAddr) -> bool {
        self.source_for(to).is_ipv4() == to.is_ipv4()
    }

    /// Frame-level counters.
    pub fn counters(&self) -> ContextCounters {
        self.counters
    }

    /// Puts the completions the transport made into their CQs: an armed CQ queues its
    /// completion event; a full one overruns, and the QPs on it go to ERR (their flushed
    /// work requests are routed in the same pass). See `cq.rs` for the rules.
    pub(crate) fn route_completions(&mut self) {
        let mut i = 0;
        while i < self.wcs.len() {
            let (cq, wc) = self.wcs[i];
            i += 1;
            let Some(c) = self.cqs.get_mut(cq) else {
                continue;
            };
            let offer = c.offer(wc);
            if let Offer::Queued(_) = offer {
                self.held += 1;
            }
            match offer {
                Offer::Queued(true) => self.cq_events.push_back(cq),
                Offer::Queued(false) | Offer::Lost => {}
                Offer::Overrun => {
                    self.async_events.push_back(AsyncEvent::CqErr(cq));
                    for (&qpn, qp) in self.qps.iter_mut() {
                        let (s, r) = qp.cqs();
                        if (s == cq || r == cq) && qp.enter_err_overrun(&mut self.wcs) {
                            self.sched.touch(qpn, qp);
                            self.async_events.push_back(AsyncEvent::QpFatal(qpn));
                            if qp.take_last_wqe_reached() {
                                let ev = AsyncEvent::QpLastWqeReached(qpn);
                                self.async_events.push_back(ev);
                            }
                        }
                    }
                }
            }
        }
        self.wcs.clear();
    }

    /// Queues the affiliated asynchronous event QP `qpn` raised.
    pub(crate) fn queue_qp_event(&mut self, qpn: u32, ev: QpErrorEvent) {
        self.async_events.push_back(qp_event(qpn, ev));
    }

    /// Whether completion or asynchronous events wait to be taken
    /// ([`Context::poll_cq_event`], [`Context::poll_async_event`]).
    pub fn has_events(&self) -> bool {
        !self.cq_events.is_empty() || !self.async_events.is_empty()
    }

    /// The next asynchronous event (ibv_get_async_event; there is nothing to
    /// acknowledge).
    pub fn poll_async_event(&mut self) -> Option<AsyncEvent> {
        self.async_events.pop_front()
    }

    /// Queues an asynchronous event that comes from outside the context (a port going
    /// active or down, which the datapath sees).
    pub fn push_async_event(&mut self, ev: AsyncEvent) {
        self.async_events.push_back(ev);
    }

    /// The earliest time [`Context::handle_timeout`] has work to do: the top of the
    /// timer heap (`schedule.rs`), without looking at the QPs. It may be early, by at most
    /// one timer period of one QP, when a QP's timer moved later since it was set (an
    /// ACK re-armed the retransmission timer); never late.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.sched.next_timer()
    }

    /// Runs the timers that are due at `now`: the QPs whose entry in the timer heap is
    /// due, and only those. Each one's rate limiter moves on (DCQCN's increase timer, the
    /// release of a packet it held back), its transport's timers that are due fire
    /// (retransmission, the end of an RNR wait), and it goes on the ready list.
    pub fn handle_timeout(&mut self, now: Instant) {
        while let Some((t, qpn)) = self.sched.pop_due(now) {
            let Some(qp) = self.qps.get_mut(&qpn) else {
                continue;
            };
            if qp.sched.timer != Some(t) {
                continue; // stale: the QP has an earlier entry, already handled
            }
            qp.sched.timer = None;
            qp.rp.handle_timeout(now);
            if qp.sched.held && qp.rp.can_send(now) {
                qp.sched.held = false;
            }
            if qp.poll_timeout().is_some_and(|t| t <= now) {
                let mut io = Io {
                    now,
                    mem: &mut self.mem,
                    wcs: &mut self.wcs,
                    gather: &mut self.gather,
                    placed: None,
                    srq: srq_mut(&mut self.srqs, qp.srq()),
                };
                qp.on_timeout(&mut io);
                while let Some(ev) = qp.take_event() {
                    self.async_events.push_back(qp_event(qpn, ev));
                }
                if qp.take_last_wqe_reached() {
                    self.async_events
                        .push_back(AsyncEvent::QpLastWqeReached(qpn));
                }
            }
            // Released, retransmitting, or early: ask it for a packet, and set its
            // next time.
            if !qp.sched.held {
                self.sched.wake(qpn, qp);
            }
            self.sched.rearm(qpn, qp);
        }
        self.route_completions();
        self.tidy_timers();
    }

    /// Drops the stale entries of the timer heap (`schedule.rs`).
    #[inline]
    fn tidy_timers(&mut self) {
        let qps = &self.qps;
        self.sched.tidy(qps.len(), |t, qpn| {
            qps.get(&qpn).is_some_and(|q| q.sched.timer == Some(t))
        });
    }
}

/// The asynchronous event of QP `qpn` for what its transport raised.
fn qp_event(qpn: u32, ev: QpErrorEvent) -> AsyncEvent {
    match ev {
        QpErrorEvent::Fatal => AsyncEvent::QpFatal(qpn),
        QpErrorEvent::ReqErr => AsyncEvent::QpReqErr(qpn),
        QpErrorEvent::AccessErr => AsyncEvent::QpAccessErr(qpn),
        QpErrorEvent::SqDrained => AsyncEvent::SqDrained(qpn),
    }
}

/// The SRQ `id` names, for the [`Io`] of a QP on it.
fn srq_mut(srqs: &mut [Option<Srq>], id: Option<SrqId>) -> Option<&mut Srq> {
    srqs.get_mut(id?.0 as usize)?.as_mut()
}

/// The UDP source port of a QP: fixed for its life, spread for ECMP (IBTA A17.3.1).
pub fn udp_source_port(base: u16, qpn: u32) -> u16 {
    base | sport_hash(qpn)
}

/// 14 bits of a multiplicative hash of the QPN, as rdma_rxe takes 14 bits of
/// `hash_32(qpn)` for its source port in 0xc000..=0xffff.
fn sport_hash(qpn: u32) -> u16 {
    (qpn.wrapping_mul(0x9e37_79b1) >> 18) as u16 & 0x3fff
}

/// The UDP source port of QP `qpn` when the QPs share `count` ports (0: one per QP,
/// [`udp_source_port`]): `base + hash(QPN) % count`, still fixed for the QP's life, so
/// its packets keep their order on one ECMP path. Added, not or-ed, so that a base with
/// low bits set still gives `count` different ports.
pub fn udp_source_port_of(base: u16, qpn: u32, count: u16) -> u16 {
    match count {
        0 => udp_source_port(base, qpn),
        n => base.wrapping_add(sport_hash(qpn) % n),
    }
}

impl Context {
    /// How many UDP source ports the QPs share: `0` (the default) gives each QP its own,
    /// `base | 14 bits of a hash of its QPN` as rdma_rxe does (ECMP can then spread QPs
    /// over paths one by one), `n` (at most 16,384) makes them `base + hash % n`: a
    /// backend that sends from a socket per source port (the UDP backend) then holds at
    /// most `n` sockets and sends a batch with at most `n` system calls, whatever the
    /// number of QPs, at the price of ECMP seeing at most `n` flows. A QP's port stays
    /// fixed for its life, so this is set before any QP is created: with QPs it is
    /// [`crate::verbs::VerbsError::Busy`] (a QP whose packets changed port could see them overtake each
    /// other, one port's batch going before another's).
    pub fn set_udp_sports(&mut self, n: u16) -> Result<(), crate::verbs::VerbsError> {
        if self.qps.len() > 0 {
            return Err(crate::verbs::VerbsError::Busy);
        }
        self.udp_sports = n.min(0x4000);
        Ok(())
    }

    /// See [`Context::set_udp_sports`].
    pub fn udp_sports(&self) -> u16 {
        self.udp_sports
    }
}

#[cfg(test)]
mod tests {
    use super::{udp_source_port, udp_source_port_of};

    /// With a pool of `n` ports, QPs take at most `n` of them, `base` to `base + n - 1`;
    /// with none (0), each QP has the port of [`udp_source_port`], and 1,000 consecutive
    /// QPNs spread over hundreds of ports.
    #[test]
    fn pooled_source_ports_stay_in_the_pool() {
        let qpns = 0x100..0x100 + 1000u32;
        for n in [1u16, 4, 16] {
            let mut seen: Vec<u16> = qpns
                .clone()
                .map(|q| udp_source_port_of(0xc000, q, n))
                .collect();
            seen.sort_unstable();
            seen.dedup();
            assert_eq!(seen.len(), usize::from(n), "{n} ports used");
            assert!(seen.iter().all(|&p| (0xc000..0xc000 + n).contains(&p)));
            // A base that is not a multiple of the pool still gives `n` ports.
            let mut odd: Vec<u16> = qpns
                .clone()
                .map(|q| udp_source_port_of(0xc001, q, n))
                .collect();
            odd.sort_unstable();
            odd.dedup();
            assert_eq!(odd.len(), usize::from(n), "{n} ports from base 0xc001");
        }
        let mut own: Vec<u16> = qpns.clone().map(|q| udp_source_port(0xc000, q)).collect();
        assert!(qpns
            .clone()
            .all(|q| udp_source_port_of(0xc000, q, 0) == udp_source_port(0xc000, q)));
        own.sort_unstable();
        own.dedup();
        assert!(own.len() > 900, "{} ports for 1,000 QPs", own.len());
    }
}
