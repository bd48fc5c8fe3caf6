//! Completion queues with a depth, completion notification and asynchronous events, end
//! to end between two contexts: the overrun (the CQ error event, the CQ and QP states
//! after, what the peer sees), armed / solicited-only / not re-armed notification, the
//! async events of QP errors, and the eventfd notifier becoming readable.

use std::io;
use std::net::{IpAddr, Ipv4Addr};
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

use uroce::datapath::event_loop::Endpoint;
use uroce::datapath::notify::Notifier;
use uroce::datapath::{Backend, Received, Transmit};
use uroce::mem::{Access, Mr, PdId};
use uroce::verbs::{
    AsyncEvent, Context, ContextConfig, CqId, InitAttr, Mtu, QpCaps, QpState, QpType, RecvWr,
    Remote, RtrAttr, RtsAttr, SendOp, SendWr, Sge, VerbsError, WcFlags, WcOpcode, WcStatus,
};

struct Side {
    c: Context,
    cq: CqId,
    qp: u32,
    mr: Mr,
}

fn side(last: u8, depth: u32) -> Side {
    let mut c = Context::new(
        ContextConfig {
            mac: [2, 0, 0, 0, 0, last],
            ip: IpAddr::V4(Ipv4Addr::new(10, 0, 0, last)),
            seed: u64::from(last),
            udp_sport_base: 0xc000,
            tos: 0,
        },
        Instant::now(),
    );
    let cq = c.create_cq(depth).unwrap();
    let pd = c.alloc_pd();
    let caps = QpCaps {
        qp_type: QpType::Rc,
        send_cq: cq,
        recv_cq: cq,
        max_send_wr: 16,
        max_recv_wr: 16,
    };
    let qp = c.create_qp(pd, caps).unwrap();
    let access = Access::LOCAL_WRITE | Access::REMOTE_WRITE;
    let mr = c.reg_mr(PdId(0), vec![0; 1 << 16], access).unwrap();
    Side { c, cq, qp, mr }
}

struct Pair {
    a: Side,
    b: Side,
    now: Instant,
}

/// A (requester) and B (responder, receive CQ of `b_depth`), RC, connected, in RTS.
fn pair(b_depth: u32) -> Pair {
    let mut a = side(1, 64);
    let mut b = side(2, b_depth);
    let (qa, qb) = (a.qp, b.qp);
    for (s, peer, dest) in [(&mut a, 2u8, qb), (&mut b, 1u8, qa)] {
        s.c.modify_qp_init(s.qp, InitAttr::default()).unwrap();
        s.c.modify_qp_rtr(
            s.qp,
            RtrAttr {
                remote: Remote {
                    ip: IpAddr::V4(Ipv4Addr::new(10, 0, 0, peer)),
                    mac: [2, 0, 0, 0, 0, peer],
                },
                dest_qpn: dest,
                rq_psn: 100,
                path_mtu: Mtu::M1024,
                max_dest_rd_atomic: 4,
                min_rnr_timer: 12,
            },
        )
        .unwrap();
        let rts = RtsAttr {
            sq_psn: 100,
            timeout: 10,
            retry_cnt: 2,
            rnr_retry: 0,
            max_rd_atomic: 4,
        };
        s.c.modify_qp_rts(s.qp, rts).unwrap();
    }
    Pair {
        a,
        b,
        now: Instant::now(),
    }
}

impl Pair {
    fn send(&mut self, wr_id: u64, op: SendOp, len: u32, solicited: bool) {
        let sge = Sge {
            addr: self.a.mr.addr,
            length: len,
            lkey: self.a.mr.lkey,
        };
        let wr = SendWr {
            wr_id,
            op,
            sge,
            signaled: true,
            solicited,
        };
        self.a.c.post_send(self.a.qp, wr).unwrap();
    }

    fn recv(&mut self, wr_id: u64, len: u32) {
        let sge = Sge {
            addr: self.b.mr.addr + wr_id * 1024,
            length: len,
            lkey: self.b.mr.lkey,
        };
        self.b
            .c
            .post_recv(self.b.qp, RecvWr { wr_id, sge })
            .unwrap();
    }

    /// Moves frames both ways until quiet; then up to `timeouts` timers. Returns the
    /// frames B sent.
    fn run(&mut self, timeouts: usize) -> usize {
        let mut buf = vec![0u8; 5000];
        let mut from_b = 0;
        let mut fired = 0;
        loop {
            let mut moved = false;
            for a_to_b in [true, false] {
                let (src, dst) = if a_to_b {
                    (&mut self.a.c, &mut self.b.c)
                } else {
                    (&mut self.b.c, &mut self.a.c)
                };
                while let Some(n) = src.poll_frame(self.now, &mut buf) {
                    moved = true;
                    from_b += usize::from(!a_to_b);
                    dst.handle_frame(self.now, &buf[..n]).unwrap();
                }
            }
            if moved {
                continue;
            }
            let next = [self.a.c.poll_timeout(), self.b.c.poll_timeout()]
                .into_iter()
                .flatten()
                .min();
            match next {
                Some(t) if fired < timeouts => {
                    fired += 1;
                    self.now = self.now.max(t);
                    self.a.c.handle_timeout(self.now);
                    self.b.c.handle_timeout(self.now);
                }
                _ => return from_b,
            }
        }
    }
}

fn events(c: &mut Context) -> Vec<AsyncEvent> {
    std::iter::from_fn(|| c.poll_async_event()).collect()
}

#[test]
fn depth_is_rounded_up_to_a_power_of_two_minus_one() {
    let mut s = side(1, 1);
    assert_eq!(s.c.cq_depth(s.cq), Some(1));
    let cq = s.c.create_cq(10).unwrap();
    assert_eq!(s.c.cq_depth(cq), Some(15));
    let cq = s.c.create_cq(16).unwrap();
    assert_eq!(s.c.cq_depth(cq), Some(31));
    assert!(s.c.create_cq(0).is_err());
    assert!(s.c.create_cq(uroce::verbs::MAX_CQE + 1).is_err());
}

/// rdma_rxe's `rxe_cq_post` on a full CQ: IB_EVENT_CQ_ERR, the entry refused; the
/// responder (class G) moves the QP to ERR without answering the message; the
/// requester retries, hears nothing, and completes RETRY_EXC_ERR.
#[test]
fn overrun_puts_the_cq_in_error_and_its_qps_in_err() {
    let mut p = pair(1);
    for i in 0..3 {
        p.recv(i, 1024);
    }
    p.send(1, SendOp::Send, 64, false);
    p.run(0);
    let first = p.a.c.poll_cq(p.a.cq, 8);
    assert_eq!(first.len(), 1);
    assert_eq!(first[0].status, WcStatus::Success);
    assert!(events(&mut p.b.c).is_empty());

    // B's CQ (depth 1) still holds the first receive: the second one overruns it.
    p.send(2, SendOp::Send, 64, false);
    let b_frames = p.run(0);
    assert_eq!(b_frames, 0, "no ACK or NAK for the message that overran");
    assert_eq!(
        events(&mut p.b.c),
        vec![AsyncEvent::CqErr(p.b.cq), AsyncEvent::QpFatal(p.b.qp)]
    );
    assert!(p.b.c.cq_in_error(p.b.cq));
    assert_eq!(p.b.c.qp_state(p.b.qp), Some(QpState::Err));
    // What the CQ held before the overrun can still be polled; nothing more arrives.
    let held = p.b.c.poll_cq(p.b.cq, 8);
    assert_eq!(held.len(), 1);
    assert_eq!((held[0].wr_id, held[0].status), (0, WcStatus::Success));
    assert!(p.b.c.poll_cq(p.b.cq, 8).is_empty());
    assert!(p.b.c.req_notify_cq(p.b.cq, false).is_err());

    // The peer retransmits into a QP in ERR and gives up.
    p.run(10);
    let wcs = p.a.c.poll_cq(p.a.cq, 8);
    assert_eq!(wcs.len(), 1);
    assert_eq!((wcs[0].wr_id, wcs[0].status), (2, WcStatus::RetryExcErr));
    assert_eq!(p.a.c.qp_state(p.a.qp), Some(QpState::Err));
    // A's error is reported by its completion: no asynchronous event there.
    assert!(events(&mut p.a.c).is_empty());
}

#[test]
fn armed_cq_gives_one_event_and_is_not_rearmed() {
    let mut p = pair(63);
    for i in 0..4 {
        p.recv(i, 1024);
    }
    // Not armed: completions, no event.
    p.send(1, SendOp::Send, 8, false);
    p.run(0);
    assert_eq!(p.b.c.poll_cq_event(), None);
    assert!(!p.b.c.has_events());

    p.b.c.req_notify_cq(p.b.cq, false).unwrap();
    p.send(2, SendOp::Send, 8, false);
    p.send(3, SendOp::Send, 8, false);
    p.run(0);
    assert!(p.b.c.has_events());
    assert_eq!(p.b.c.poll_cq_event(), Some(p.b.cq));
    assert_eq!(p.b.c.poll_cq_event(), None, "one event for two completions");
    assert_eq!(p.b.c.cq_events_unacked(p.b.cq), 1);
    p.b.c.ack_cq_events(p.b.cq, 1);
    assert_eq!(p.b.c.cq_events_unacked(p.b.cq), 0);
    assert_eq!(p.b.c.poll_cq(p.b.cq, 8).len(), 3);

    // Not re-armed: no event for the next one.
    p.send(4, SendOp::Send, 8, false);
    p.run(0);
    assert_eq!(p.b.c.poll_cq_event(), None);
    assert_eq!(p.b.c.poll_cq(p.b.cq, 8).len(), 1);
}

#[test]
fn solicited_only_waits_for_a_solicited_message() {
    let mut p = pair(63);
    for i in 0..4 {
        p.recv(i, 1024);
    }
    p.b.c.req_notify_cq(p.b.cq, true).unwrap();
    p.send(1, SendOp::Send, 8, false);
    p.run(0);
    assert_eq!(p.b.c.poll_cq_event(), None, "unsolicited SEND: no event");
    p.send(2, SendOp::SendWithImm(7), 8, true);
    p.run(0);
    assert_eq!(p.b.c.poll_cq_event(), Some(p.b.cq));
    let wcs = p.b.c.poll_cq(p.b.cq, 8);
    assert_eq!(wcs.len(), 2);
    assert_eq!(wcs[0].flags, WcFlags::NONE);
    assert_eq!(wcs[1].imm, Some(7));
    assert!(wcs[1].flags.contains(WcFlags::WITH_IMM));
    assert!(wcs[1].wakes_solicited());
}

#[test]
fn solicited_only_takes_an_error_completion() {
    let mut p = pair(63);
    p.recv(0, 16);
    p.b.c.req_notify_cq(p.b.cq, true).unwrap();
    // Longer than the receive buffer: LOC_LEN_ERR on B's receive.
    p.send(1, SendOp::Send, 64, false);
    p.run(0);
    assert_eq!(p.b.c.poll_cq_event(), Some(p.b.cq));
    let wcs = p.b.c.poll_cq(p.b.cq, 8);
    assert_eq!(wcs[0].status, WcStatus::LocLenErr);
    // The error is reported by that receive's completion: no asynchronous event.
    assert!(events(&mut p.b.c).is_empty());
    assert_eq!(p.b.c.qp_state(p.b.qp), Some(QpState::Err));
}

/// C9-222.1.1 (and rdma_rxe's rkey-violation event): an RDMA WRITE with a bad rkey has
/// no receive to report it; the responder NAKs Remote Access Error, goes to ERR and
/// raises QP_ACCESS_ERR. The requester has its completion error and no event.
#[test]
fn bad_rkey_write_raises_qp_access_err_at_the_responder() {
    let mut p = pair(63);
    let op = SendOp::Write {
        remote_addr: p.b.mr.addr,
        rkey: p.b.mr.rkey ^ 0x55,
    };
    p.send(1, op, 64, false);
    p.run(0);
    assert_eq!(events(&mut p.b.c), vec![AsyncEvent::QpAccessErr(p.b.qp)]);
    assert_eq!(p.b.c.qp_state(p.b.qp), Some(QpState::Err));
    let wcs = p.a.c.poll_cq(p.a.cq, 8);
    assert_eq!(wcs[0].status, WcStatus::RemAccessErr);
    assert!(events(&mut p.a.c).is_empty());
}

#[test]
fn write_with_imm_completion_has_its_flag() {
    let mut p = pair(63);
    p.recv(0, 16);
    let op = SendOp::WriteWithImm {
        remote_addr: p.b.mr.addr + 4096,
        rkey: p.b.mr.rkey,
        imm: 9,
    };
    p.send(1, op, 64, false);
    p.run(0);
    let wcs = p.b.c.poll_cq(p.b.cq, 8);
    assert_eq!(wcs[0].opcode, WcOpcode::RecvRdmaWithImm);
    assert_eq!(wcs[0].flags, WcFlags::WITH_IMM);
}

/// A backend with no network: the event loop runs, nothing moves.
struct Null;

impl Backend for Null {
    fn send_with(&mut self, _: &mut dyn FnMut(&mut [u8]) -> Option<Transmit>) -> io::Result<bool> {
        Ok(false)
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
    fn receive(
        &mut self,
        _: Duration,
        _: usize,
        _: &mut dyn FnMut(Received<'_>),
    ) -> io::Result<usize> {
        Ok(0)
    }
}

fn readable(fd: i32, ms: i32) -> bool {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one live pollfd, count 1.
    let r = unsafe { libc::poll(&mut p, 1, ms) };
    r == 1 && p.revents & libc::POLLIN != 0
}

#[test]
fn event_loop_makes_the_eventfd_readable_when_armed() {
    let s = side(1, 7);
    let (cq, qp, mr) = (s.cq, s.qp, s.mr);
    let mut ep = Endpoint::new(s.c, Null);
    let n = Arc::new(Notifier::new().unwrap());
    ep.set_notifier(n.clone());
    // A QP in ERR completes a send at once with WR_FLUSH_ERR.
    ep.ctx.modify_qp_err(qp, Instant::now()).unwrap();
    let wr = SendWr {
        wr_id: 5,
        op: SendOp::Send,
        sge: Sge {
            addr: mr.addr,
            length: 8,
            lkey: mr.lkey,
        },
        signaled: true,
        solicited: false,
    };

    // Not armed (CQ nor notifier): no event, nothing to read.
    ep.ctx.post_send(qp, wr).unwrap();
    ep.poll(Duration::ZERO).unwrap();
    assert!(!readable(n.as_raw_fd(), 0));

    ep.ctx.req_notify_cq(cq, false).unwrap();
    n.arm();
    ep.ctx.post_send(qp, wr).unwrap();
    ep.poll(Duration::ZERO).unwrap();
    assert!(readable(n.as_raw_fd(), 100));
    assert_eq!(n.clear(), 1);
    assert_eq!(ep.ctx.poll_cq_event(), Some(cq));
    ep.ctx.ack_cq_events(cq, 1);
    let wcs = ep.ctx.poll_cq(cq, 8);
    assert_eq!(wcs.len(), 2);
    assert!(wcs.iter().all(|w| w.status == WcStatus::WrFlushErr));
    assert!(!readable(n.as_raw_fd(), 0));
}

/// ibv_destroy_cq: EBUSY while a QP has the CQ; once the QP is gone, the CQ goes with
/// the completions and the event it still held (none counted as waiting any more), its
/// id names nothing (a poll finds nothing, a QP cannot be made on it, a second destroy
/// is EINVAL), and the next CQ gets a new id.
#[test]
fn a_destroyed_cq_takes_its_completions_and_its_id_names_nothing() {
    let mut p = pair(63);
    for i in 0..3 {
        p.recv(i, 1024);
    }
    p.b.c.req_notify_cq(p.b.cq, false).unwrap();
    for i in 0..3 {
        p.send(i, SendOp::Send, 8, false);
    }
    p.run(0);
    let cq = p.b.cq;
    assert_eq!((p.b.c.cq_held(cq), p.b.c.completions_waiting()), (3, 3));
    assert_eq!(
        p.b.c.destroy_cq(cq),
        Err(VerbsError::Busy),
        "QP {:#x} has it",
        p.b.qp
    );
    assert_eq!(p.b.c.cq_held(cq), 3, "nothing changed");
    p.b.c.destroy_qp(p.b.qp).unwrap();
    p.b.c.destroy_cq(cq).unwrap();
    assert_eq!(p.b.c.completions_waiting(), 0);
    assert_eq!(p.b.c.poll_cq_event(), None, "its event went with it");
    assert!(p.b.c.poll_cq(cq, 8).is_empty());
    assert_eq!(p.b.c.cq_depth(cq), None);
    assert_eq!(p.b.c.destroy_cq(cq), Err(VerbsError::NoSuchCq));
    let caps = QpCaps {
        qp_type: QpType::Rc,
        send_cq: cq,
        recv_cq: cq,
        max_send_wr: 4,
        max_recv_wr: 4,
    };
    assert_eq!(p.b.c.create_qp(PdId(0), caps), Err(VerbsError::NoSuchCq));
    let next = p.b.c.create_cq(8).unwrap();
    assert_ne!(next, cq, "a destroyed CQ's id is not given again");
    assert_eq!(p.b.c.cq_depth(next), Some(15));
}
