//! Which QPs the context visits, so that the cost of a packet, a timer or a call to
//! [`super::Context::poll_timeout`] does not grow with the number of QPs:
//!
//! - the **ready list**: the QPs that may have a packet to send, in the order they became
//!   ready. A QP enters it when something may have given it a packet (a post, a received
//!   packet, a modify, a timer) and leaves it when asked for a packet and it has none, or
//!   when its DCQCN rate limiter holds it back. `poll_transmit` takes the QP at the head
//!   and, when it sent, puts it back: at the head while it may have more and its run is
//!   under [`QUANTUM`] bytes and [`RUN_PACKETS`] packets, else at the tail
//!   ([`Schedule::requeue`]). That is the round robin between busy QPs that walking
//!   every QP in turn gave, a run at a time, with idle QPs never visited. Being ready
//!   wrongly costs one question answered "nothing".
//! - the **timers**: a binary heap of (due time, QPN), one valid entry per QP whose
//!   transport (retransmission, RNR wait) or reaction point (rate increase, the release
//!   of a packet the pacer held back) has a time. An entry is pushed when a QP's next
//!   time comes earlier than the one it has in the heap; the entry it replaces stays,
//!   stale (its time is not the QP's [`QpSched::timer`] any more), and is dropped when it
//!   reaches the top or when stale entries outnumber the QPs (`tidy`). A time that moves
//!   later (an ACK re-arming the retransmission timer) pushes nothing: the entry fires
//!   early once, finds nothing due, and is pushed again at the QP's real time. So an ACK
//!   costs a comparison, and [`super::Context::poll_timeout`] may say a time up to one
//!   timer period early for a QP, never late.
//!   A packet sent asks for the QP's next time only when it started a timer (the
//!   retransmission timer of a QP with nothing outstanding, `QpCore::timer_started`):
//!   one sent while the timer runs cannot move that time earlier, and asks nothing.
//!
//! The heap and the list grow with the QPs and never per packet: once they have held
//! every QP, nothing here allocates.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::time::Instant;

use super::qp::Qp;

/// A QP's place in the schedule, kept in the QP.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct QpSched {
    /// In the ready list.
    pub ready: bool,
    /// Its rate limiter held a packet back: off the ready list until the pacer lets it go
    /// (its timer then includes that time).
    pub held: bool,
    /// The time of its valid entry in the timer heap.
    pub timer: Option<Instant>,
}

/// The ready list and the timer heap of a context.
#[derive(Debug, Default)]
pub(crate) struct Schedule {
    ready: VecDeque<u32>,
    timers: BinaryHeap<Reverse<(Instant, u32)>>,
    /// Entries were pushed or popped since the last `tidy`: a stale one may be on top.
    moved: bool,
    /// The QP that sent last, and the bytes and packets it has sent in a row
    /// ([`Schedule::requeue`]).
    run: (u32, usize, usize),
}

/// Payload bytes a QP sends in a row before the next ready QP's turn: 64 KiB, one GSO
/// send's worth (`uroce::datapath::udp`), so that the packets of busy QPs reach the
/// datapath in runs of one QP and leave as few large sends, not one small send per QP
/// and turn. A QP that is not busy waits at most one run of each QP ahead of it.
pub(crate) const QUANTUM: usize = 64 * 1024;

/// Packets a QP sends in a row at most, whatever their size: the most segments the
/// kernel takes in one GSO send (UDP_MAX_SEGMENTS). A QP of small messages beside
/// others then waits no longer than for that many packets of each.
pub(crate) const RUN_PACKETS: usize = 64;

impl Schedule {
    /// Puts QP `qpn` on the ready list, at the tail, unless it is there.
    #[inline]
    pub(crate) fn wake(&mut self, qpn: u32, qp: &mut Qp) {
        if !qp.sched.ready {
            qp.sched.ready = true;
            self.ready.push_back(qpn);
        }
    }

    /// Makes sure QP `qpn`'s next time is in the heap: pushes it when it comes before
    /// the time the QP has there (or it has none).
    #[inline]
    pub(crate) fn rearm(&mut self, qpn: u32, qp: &mut Qp) {
        let rp = qp.rp.poll_timeout(qp.sched.held);
        let due = match (qp.poll_timeout(), rp) {
            (Some(a), Some(b)) => a.min(b),
            (a, b) => match a.or(b) {
                Some(t) => t,
                None => return,
            },
        };
        if qp.sched.timer.is_none_or(|t| due < t) {
            qp.sched.timer = Some(due);
            self.timers.push(Reverse((due, qpn)));
            self.moved = true;
        }
    }

    /// [`Schedule::wake`] and [`Schedule::rearm`]: after anything that may have given
    /// the QP a packet to send or moved its timers.
    #[inline]
    pub(crate) fn touch(&mut self, qpn: u32, qp: &mut Qp) {
        self.wake(qpn, qp);
        self.rearm(qpn, qp);
    }

    /// QPs on the ready list.
    pub(crate) fn ready_len(&self) -> usize {
        self.ready.len()
    }

    /// Takes the QP at the head of the ready list (its `ready` flag is the caller's to
    /// clear, or the QP goes back with [`Schedule::requeue`]).
    #[inline]
    pub(crate) fn pop_ready(&mut self) -> Option<u32> {
        self.ready.pop_front()
    }

    /// Puts a QP taken with [`Schedule::pop_ready`] that has just sent a packet of
    /// `bytes` back on the ready list: at the head while it may have another packet at
    /// once (`more`: its message goes on, or another work request waits) and its run of
    /// packets in a row stays under [`QUANTUM`] bytes and [`RUN_PACKETS`] packets, else
    /// at the tail (a new run starts when its turn comes again). So QPs share the link
    /// by bytes, a run at a time, whether their messages are large or small, and one of
    /// small messages yields after one GSO send's worth of packets.
    ///
    /// `more` is the service's cheap guess ([`crate::transport::qp::Qp::has_more`]): a
    /// QP whose last work request ended goes to the tail. At the head it would be asked
    /// again at once for nothing (a question per message: 565 instructions a message,
    /// both sides, with 10,000 QPs taking turns in `examples/many_qps`).
    #[inline]
    pub(crate) fn requeue(&mut self, qpn: u32, bytes: usize, more: bool) {
        if more {
            if self.run.0 != qpn {
                self.run = (qpn, 0, 0);
            }
            self.run.1 += bytes;
            self.run.2 += 1;
            if self.run.1 < QUANTUM && self.run.2 < RUN_PACKETS {
                self.ready.push_front(qpn);
                return;
            }
        }
        self.run.1 = 0;
        self.run.2 = 0;
        self.ready.push_back(qpn);
    }

    /// Ends the run of QP `qpn`, just requeued, whose packet could not be built: from
    /// the head it goes to the tail, so that the packets behind it that fail too do not
    /// keep the others from their turn.
    #[inline]
    pub(crate) fn demote(&mut self, qpn: u32) {
        self.run.1 = 0;
        self.run.2 = 0;
        if self.ready.front() == Some(&qpn) {
            self.ready.pop_front();
            self.ready.push_back(qpn);
        }
    }

    /// The time at the top of the heap (possibly of an entry that turns out early).
    pub(crate) fn next_timer(&self) -> Option<Instant> {
        self.timers.peek().map(|Reverse((t, _))| *t)
    }

    /// Takes the entry at the top of the heap if it is due at `now`.
    #[inline]
    pub(crate) fn pop_due(&mut self, now: Instant) -> Option<(Instant, u32)> {
        match self.timers.peek() {
            Some(Reverse((t, _))) if *t <= now => {
                self.moved = true;
                self.timers.pop().map(|Reverse(e)| e)
            }
            _ => None,
        }
    }

    /// Drops stale entries: those at the top of the heap (so that `next_timer` says a
    /// time some QP has), and all of them once they outnumber the QPs (in place, without
    /// allocating). `valid` says whether an entry is a QP's current one. Nothing to do,
    /// and nothing looked at, when the heap did not change since the last call.
    #[inline(always)]
    pub(crate) fn tidy(&mut self, qps: usize, valid: impl Fn(Instant, u32) -> bool) {
        if std::mem::take(&mut self.moved) {
            self.tidy_moved(qps, valid);
        }
    }

    /// [`Schedule::tidy`] once the heap moved: out of line, so that a packet that moved
    /// no timer pays one test.
    #[inline(never)]
    fn tidy_moved(&mut self, qps: usize, valid: impl Fn(Instant, u32) -> bool) {
        if self.timers.len() > 2 * qps + 64 {
            self.timers.retain(|Reverse((t, q))| valid(*t, *q));
        }
        while let Some(Reverse((t, q))) = self.timers.peek() {
            if valid(*t, *q) {
                break;
            }
            self.timers.pop();
        }
    }

    /// Entries in the timer heap, stale ones included.
    #[cfg(test)]
    pub(crate) fn timers_len(&self) -> usize {
        self.timers.len()
    }
}

#[cfg(test)]
mod tests {
    use std::net::{IpAddr, Ipv4Addr};
    use std::time::Instant;

    use crate::congestion::dcqcn::Params;
    use crate::mem::Access;
    use crate::verbs::{
        Context, ContextConfig, InitAttr, Mtu, QpCaps, QpType, Remote, RtrAttr, RtsAttr, SendOp,
        SendWr, Sge,
    };

    /// A context at 10.0.0.1, no QP yet.
    fn context(t0: Instant) -> Context {
        Context::new(
            ContextConfig {
                mac: [2, 0, 0, 0, 0, 1],
                ip: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)),
                seed: 1,
                udp_sport_base: 0xc000,
                tos: 0,
            },
            t0,
        )
    }

    /// Every packet `c` sends now, as runs of (destination QP, packets in a row).
    fn runs(c: &mut Context, t0: Instant) -> Vec<(u32, usize)> {
        let mut buf = vec![0u8; 2048];
        let mut order: Vec<(u32, usize)> = Vec::new();
        while let Some(t) = c.poll_transmit(t0, &mut buf) {
            let dest = crate::wire::bth::dest_qp_of(&buf[..t.len]).unwrap();
            match order.last_mut() {
                Some((d, n)) if *d == dest => *n += 1,
                _ => order.push((dest, 1)),
            }
        }
        order
    }

    /// An RC QP in RTS towards QPN 0x99, DCQCN off, with one 64 KiB region.
    fn rts_context(t0: Instant) -> (Context, u32, crate::mem::Mr) {
        let mut c = context(t0);
        let cq = c.create_cq(63).unwrap();
        let pd = c.alloc_pd();
        let q = rts_qp(&mut c, pd, cq, 0x99);
        let mr = c.reg_mr(pd, vec![1; 1 << 16], Access::LOCAL_WRITE).unwrap();
        (c, q, mr)
    }

    /// One more RC QP of `pd` in RTS, towards QPN `dest_qpn` (path MTU 1024).
    fn rts_qp(c: &mut Context, pd: crate::mem::PdId, cq: crate::verbs::CqId, dest_qpn: u32) -> u32 {
        let caps = QpCaps {
            qp_type: QpType::Rc,
            send_cq: cq,
            recv_cq: cq,
            max_send_wr: 128,
            max_recv_wr: 4,
        };
        let q = c.create_qp(pd, caps).unwrap();
        c.modify_qp_init(q, InitAttr::default()).unwrap();
        let rtr = RtrAttr {
            remote: Remote {
                ip: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)),
                mac: [2, 0, 0, 0, 0, 2],
            },
            dest_qpn,
            rq_psn: 0,
            path_mtu: Mtu::M1024,
            max_dest_rd_atomic: 4,
            min_rnr_timer: 1,
        };
        c.modify_qp_rtr(q, rtr).unwrap();
        c.modify_qp_rts(q, RtsAttr::default()).unwrap();
        q
    }

    /// Busy QPs take turns a quantum (64 KiB) at a time, not a packet at a time, and a
    /// QP with one small message waits for one quantum of each busy QP ahead of it, no
    /// more: two 128 KiB WRITEs (128 packets of 1 KiB each) and a 64-byte SEND posted
    /// after them leave as 64 packets of the first, 64 of the second, the SEND, then the
    /// second half of each.
    #[test]
    fn busy_qps_take_turns_a_run_at_a_time() {
        let t0 = Instant::now();
        let mut c = context(t0);
        let cq = c.create_cq(63).unwrap();
        let pd = c.alloc_pd();
        let mr = c.reg_mr(pd, vec![1; 1 << 17], Access::LOCAL_WRITE).unwrap();
        let post = |c: &mut Context, q: u32, op: SendOp, length: u32| {
            let sge = Sge {
                addr: mr.addr,
                length,
                lkey: mr.lkey,
            };
            let wr = SendWr {
                wr_id: 0,
                op,
                sge,
                signaled: false,
                solicited: false,
            };
            c.post_send(q, wr).unwrap();
        };
        let write = SendOp::Write {
            remote_addr: 0,
            rkey: 1,
        };
        for dest in [0xa, 0xb] {
            let q = rts_qp(&mut c, pd, cq, dest);
            post(&mut c, q, write, 1 << 17);
        }
        let q = rts_qp(&mut c, pd, cq, 0xc);
        post(&mut c, q, SendOp::Send, 64);
        assert_eq!(
            runs(&mut c, t0),
            [(0xa, 64), (0xb, 64), (0xc, 1), (0xa, 64), (0xb, 64)],
            "runs of (destination QP, packets)"
        );
        // Small messages share by bytes too: a QP with sixteen 8 KiB WRITEs keeps its
        // turn across their ends, 64 KiB a run, beside a 128 KiB WRITE; one with a
        // hundred 64-byte SENDs yields after 64 packets.
        let big = rts_qp(&mut c, pd, cq, 0xd);
        post(&mut c, big, write, 1 << 17);
        let q = rts_qp(&mut c, pd, cq, 0xe);
        for _ in 0..16 {
            post(&mut c, q, write, 8192);
        }
        assert_eq!(
            runs(&mut c, t0),
            [(0xd, 64), (0xe, 64), (0xd, 64), (0xe, 64)]
        );
        post(&mut c, big, write, 1 << 17);
        let q = rts_qp(&mut c, pd, cq, 0xf);
        for _ in 0..100 {
            post(&mut c, q, SendOp::Send, 64);
        }
        assert_eq!(
            runs(&mut c, t0),
            [(0xd, 64), (0xf, 64), (0xd, 64), (0xf, 36)]
        );
    }

    /// The first packet starts the retransmission timer, and the heap hears of it (the
    /// context's next time is that timer's); the packets sent while it runs start no
    /// timer, ask nothing of the heap and leave it one entry.
    #[test]
    fn only_a_packet_that_starts_a_timer_rearms() {
        let t0 = Instant::now();
        let (mut c, q, mr) = rts_context(t0);
        for i in 0..8 {
            let wr = SendWr {
                wr_id: i,
                op: SendOp::Send,
                sge: Sge {
                    addr: mr.addr,
                    length: 64,
                    lkey: mr.lkey,
                },
                signaled: false,
                solicited: false,
            };
            c.post_send(q, wr).unwrap();
        }
        assert_eq!(c.poll_timeout(), None, "a post starts no timer");
        let mut buf = vec![0u8; 2048];
        assert!(c.poll_frame(t0, &mut buf).is_some());
        let due = c
            .poll_timeout()
            .expect("the retransmission timer is in the heap");
        assert!(due > t0);
        assert_eq!(c.sched.timers_len(), 1);
        assert!(!c.qps.get_mut(&q).unwrap().take_timer_started(), "taken");
        let later = t0 + std::time::Duration::from_micros(1);
        let mut sent = 1;
        while c.poll_frame(later, &mut buf).is_some() {
            sent += 1;
        }
        assert_eq!(sent, 8);
        assert_eq!(c.poll_timeout(), Some(due), "the running timer stays");
        assert_eq!(c.sched.timers_len(), 1);
    }

    /// A paced QP leaves a stale retransmission entry behind at every packet (its
    /// pacer's release comes first); `tidy` keeps the heap within twice the QPs plus 64
    /// however many packets go out, and every packet still goes out.
    #[test]
    fn stale_timer_entries_stay_bounded() {
        let t0 = Instant::now();
        let mut c = context(t0);
        c.enable_dcqcn(Params::paper(40e9), t0);
        let cq = c.create_cq(63).unwrap();
        let pd = c.alloc_pd();
        let caps = QpCaps {
            qp_type: QpType::Rc,
            send_cq: cq,
            recv_cq: cq,
            max_send_wr: 4,
            max_recv_wr: 4,
        };
        let q = c.create_qp(pd, caps).unwrap();
        c.modify_qp_init(q, InitAttr::default()).unwrap();
        let rtr = RtrAttr {
            remote: Remote {
                ip: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)),
                mac: [2, 0, 0, 0, 0, 2],
            },
            dest_qpn: 0x99,
            rq_psn: 0,
            path_mtu: Mtu::M1024,
            max_dest_rd_atomic: 4,
            min_rnr_timer: 1,
        };
        c.modify_qp_rtr(q, rtr).unwrap();
        c.modify_qp_rts(q, RtsAttr::default()).unwrap();
        let mr = c.reg_mr(pd, vec![1; 1 << 20], Access::LOCAL_WRITE).unwrap();
        let wr = SendWr {
            wr_id: 1,
            op: SendOp::Write {
                remote_addr: 0,
                rkey: 1,
            },
            sge: Sge {
                addr: mr.addr,
                length: 1 << 20,
                lkey: mr.lkey,
            },
            signaled: true,
            solicited: false,
        };
        c.post_send(q, wr).unwrap();
        c.qps.get_mut(&q).unwrap().rp.on_cnp(t0); // half rate: paced from now on
        let mut buf = vec![0u8; 2048];
        let (mut now, mut sent, mut most) = (t0, 0, 0);
        while sent < 1024 {
            while c.poll_frame(now, &mut buf).is_some() {
                sent += 1;
            }
            most = most.max(c.sched.timers_len());
            now = c.poll_timeout().expect("the pacer's release").max(now);
            c.handle_timeout(now);
        }
        assert!(most <= 2 + 64, "{most} entries for one QP");
        assert!(
            most > 2,
            "stale entries were left ({most}): the bound is tested"
        );
    }
}
