//! The QP state table as the spec and ibverbs have it, end to end through
//! `Context::modify_qp` / `query_qp`: every legal change per QP type succeeds and every
//! other is EINVAL (IBTA Vol. 1 §10.3.1; the kernel's `qp_state_table` checked by
//! `ib_modify_qp_is_ok`), required attributes are enforced, SQD drains (rdma_rxe's
//! QP_STATE_DRAIN: what is in progress finishes, nothing new starts, IBV_EVENT_SQ_DRAINED
//! once drained), SQE → RTS resumes a UC / UD send queue, RESET clears everything so the
//! QP comes back with fresh PSNs, and attributes changed after RTS take effect packet by
//! packet (sans-IO time, no timed test).

mod common;

use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};

use common::*;
use uroce::mem::{Access, Mr};
use uroce::verbs::{
    ack_timeout, AsyncEvent, Context, ContextConfig, CqId, ModifyRefusal, Mtu, QpAttr, QpAttrMask,
    QpCaps, QpInitAttr, QpInitEx, QpState, QpType, RecvWr, Remote, RtsAttr, SendOp, Sge, UdSendWr,
    VerbsError, WcStatus, WorkCompletion,
};
use uroce::wire::{Opcode, Syndrome};

type M = QpAttrMask;

const STATES: [QpState; 7] = [
    QpState::Reset,
    QpState::Init,
    QpState::Rtr,
    QpState::Rts,
    QpState::Sqd,
    QpState::Sqe,
    QpState::Err,
];

/// (wr_id, status) of each completion, in order.
fn summary(wcs: &[WorkCompletion]) -> Vec<(u64, WcStatus)> {
    wcs.iter().map(|w| (w.wr_id, w.status)).collect()
}

/// The opcode and PSN of every frame A sent, in order.
fn from_a(p: &Pair) -> Vec<(Opcode, u32)> {
    p.log
        .iter()
        .filter(|s| s.from_a)
        .map(|s| (s.opcode(), s.psn()))
        .collect()
}

fn remote(n: u8) -> Remote {
    Remote {
        ip: IpAddr::V4(Ipv4Addr::new(10, 0, 0, n)),
        mac: [2, 0, 0, 0, 0, n],
    }
}

/// Every attribute set to a valid value.
fn full(to: QpState) -> QpAttr {
    QpAttr {
        qp_state: to,
        qp_access_flags: Access::REMOTE_WRITE | Access::REMOTE_READ,
        pkey: 0xffff,
        port_num: 1,
        qkey: 0x1111,
        ah_attr: remote(2),
        path_mtu: Mtu::M1024,
        dest_qp_num: 0x77,
        rq_psn: 500,
        sq_psn: 700,
        max_rd_atomic: 4,
        max_dest_rd_atomic: 4,
        min_rnr_timer: 12,
        timeout: 14,
        retry_cnt: 7,
        rnr_retry: 7,
        ..QpAttr::default()
    }
}

/// What the kernel's table requires for `from` → `to` (written out here from
/// `qp_state_table`, independently of uroce's own table).
fn required(t: QpType, from: QpState, to: QpState) -> QpAttrMask {
    use QpState::*;
    match (from, to) {
        (Reset, Init) => match t {
            QpType::Rc | QpType::Uc => M::PKEY_INDEX | M::PORT | M::ACCESS_FLAGS,
            QpType::Ud => M::PKEY_INDEX | M::PORT | M::QKEY,
            QpType::Gsi => M::PKEY_INDEX | M::QKEY,
        },
        (Init, Rtr) => match t {
            QpType::Rc => {
                M::AV
                    | M::PATH_MTU
                    | M::DEST_QPN
                    | M::RQ_PSN
                    | M::MAX_DEST_RD_ATOMIC
                    | M::MIN_RNR_TIMER
            }
            QpType::Uc => M::AV | M::PATH_MTU | M::DEST_QPN | M::RQ_PSN,
            QpType::Ud | QpType::Gsi => M::NONE,
        },
        (Rtr, Rts) => match t {
            QpType::Rc => {
                M::SQ_PSN | M::TIMEOUT | M::RETRY_CNT | M::RNR_RETRY | M::MAX_QP_RD_ATOMIC
            }
            _ => M::SQ_PSN,
        },
        _ => M::NONE,
    }
}

/// IBTA §10.3.1's legal changes: up RESET → INIT → RTR → RTS, INIT → INIT, RTS → RTS,
/// RTS → SQD, SQD → SQD, SQD → RTS, SQE → RTS (UC, UD), any → RESET, any → ERR.
fn legal(t: QpType, from: QpState, to: QpState) -> bool {
    use QpState::*;
    matches!(
        (from, to),
        (_, Reset)
            | (_, Err)
            | (Reset, Init)
            | (Init, Init)
            | (Init, Rtr)
            | (Rtr, Rts)
            | (Rts, Rts)
            | (Rts, Sqd)
            | (Sqd, Sqd)
            | (Sqd, Rts)
    ) || (from, to) == (Sqe, Rts) && t != QpType::Rc
}

/// One context with one QP of type `t`, and a registered buffer.
struct Node {
    ctx: Context,
    qpn: u32,
    cq: CqId,
    buf: Mr,
    t: QpType,
}

fn node(t: QpType) -> Node {
    let mut ctx = Context::new(
        ContextConfig {
            mac: [2, 0, 0, 0, 0, 1],
            ip: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)),
            seed: 1,
            udp_sport_base: 0xc000,
            tos: 0,
        },
        Instant::now(),
    );
    let cq = ctx.create_cq(255).unwrap();
    let pd = ctx.alloc_pd();
    let caps = QpCaps {
        qp_type: t,
        send_cq: cq,
        recv_cq: cq,
        max_send_wr: 16,
        max_recv_wr: 16,
    };
    let qpn = ctx.create_qp(pd, caps).unwrap();
    let buf = ctx
        .reg_mr(pd, vec![0; 1 << 16], Access::LOCAL_WRITE)
        .unwrap();
    Node {
        ctx,
        qpn,
        cq,
        buf,
        t,
    }
}

impl Node {
    fn state(&self) -> QpState {
        self.ctx.qp_state(self.qpn).unwrap()
    }

    /// Modifies to `to` with what the change requires.
    fn go(&mut self, to: QpState) -> Result<(), VerbsError> {
        let mask = M::STATE | required(self.t, self.state(), to);
        self.ctx.modify_qp(self.qpn, &full(to), mask)
    }

    fn sge(&self, len: u32, bad_lkey: bool) -> Sge {
        Sge {
            addr: self.buf.addr,
            length: len,
            lkey: if bad_lkey {
                self.buf.lkey ^ 0x0101
            } else {
                self.buf.lkey
            },
        }
    }

    /// Posts a send of `len` bytes: a SEND on UC, a datagram on UD.
    fn send(&mut self, wr_id: u64, len: u32, bad_lkey: bool) {
        let sge = self.sge(len, bad_lkey);
        match self.t {
            QpType::Ud | QpType::Gsi => self.ctx.post_send_ud(
                self.qpn,
                UdSendWr {
                    wr_id,
                    dest: remote(2),
                    remote_qpn: 0x77,
                    remote_qkey: 0x1111,
                    sge,
                    imm: None,
                    signaled: true,
                    solicited: false,
                },
            ),
            _ => self
                .ctx
                .post_send(self.qpn, wr(wr_id, SendOp::Send, sge, true)),
        }
        .unwrap();
    }

    /// Brings a new QP to `s` the legal way (SQE: a send with a bad lkey, UC and UD).
    fn bring_to(&mut self, s: QpState) {
        use QpState::*;
        let path: &[QpState] = match s {
            Reset => &[],
            Init => &[Init],
            Rtr => &[Init, Rtr],
            Rts | Sqe => &[Init, Rtr, Rts],
            Sqd => &[Init, Rtr, Rts, Sqd],
            Err => &[Init, Rtr, Rts, Err],
        };
        for &step in path {
            self.go(step).unwrap();
        }
        if s == Sqe {
            self.send(1, 10, true);
        }
        assert_eq!(self.state(), s);
        self.ctx.poll_cq(self.cq, 100);
    }

    fn frames(&mut self) -> Vec<Opcode> {
        drain(&mut self.ctx, Instant::now())
            .iter()
            .map(|f| uroce::wire::parse(f).unwrap().bth.opcode())
            .collect()
    }
}

#[test]
fn every_legal_change_succeeds_and_every_other_is_einval() {
    for t in [QpType::Rc, QpType::Uc, QpType::Ud, QpType::Gsi] {
        for from in STATES {
            if t == QpType::Rc && from == QpState::Sqe {
                continue; // RC never enters SQE: a send error takes it to ERR
            }
            for to in STATES {
                let mut n = node(t);
                n.bring_to(from);
                let r = n.go(to);
                if legal(t, from, to) {
                    assert!(r.is_ok(), "{t:?} {from:?} -> {to:?}: {r:?}");
                    assert_eq!(n.state(), to, "{t:?} {from:?} -> {to:?}");
                } else {
                    let e = r.expect_err("illegal change taken");
                    assert_eq!(e.errno(), libc::EINVAL);
                    assert!(
                        matches!(
                            e,
                            VerbsError::BadModify { from: f, to: g, why: ModifyRefusal::NotInTable, .. }
                                if f == from && g == to
                        ),
                        "{t:?} {from:?} -> {to:?}: {e:?}"
                    );
                    let msg = e.to_string();
                    assert!(
                        msg.contains(&format!("{from:?} -> {to:?}"))
                            && msg.contains("not a transition"),
                        "{msg}"
                    );
                    assert_eq!(n.state(), from, "a refused modify changes nothing");
                }
            }
        }
    }
}

#[test]
fn required_attributes_are_enforced_and_named() {
    use QpState::*;
    for t in [QpType::Rc, QpType::Uc, QpType::Ud, QpType::Gsi] {
        for (from, to) in [(Reset, Init), (Init, Rtr), (Rtr, Rts)] {
            let req = required(t, from, to);
            for bit in [
                M::PKEY_INDEX,
                M::PORT,
                M::ACCESS_FLAGS,
                M::QKEY,
                M::AV,
                M::PATH_MTU,
                M::DEST_QPN,
                M::RQ_PSN,
                M::MAX_DEST_RD_ATOMIC,
                M::MIN_RNR_TIMER,
                M::SQ_PSN,
                M::TIMEOUT,
                M::RETRY_CNT,
                M::RNR_RETRY,
                M::MAX_QP_RD_ATOMIC,
            ] {
                if !req.contains(bit) {
                    continue;
                }
                let mut n = node(t);
                n.bring_to(from);
                let e = n
                    .ctx
                    .modify_qp(n.qpn, &full(to), (M::STATE | req).without(bit))
                    .expect_err("a required attribute is missing");
                assert_eq!(
                    e,
                    VerbsError::BadModify {
                        qpn: n.qpn,
                        from,
                        to,
                        why: ModifyRefusal::Missing(bit),
                    }
                );
                assert_eq!(e.errno(), libc::EINVAL);
                assert!(e.to_string().contains(&bit.to_string()), "{e}");
                assert_eq!(n.state(), from);
            }
        }
    }
    // A QP1 takes no port, a UD QP no access flags (not permitted: EINVAL).
    let mut n = node(QpType::Ud);
    let mask = M::STATE | M::PKEY_INDEX | M::PORT | M::QKEY | M::ACCESS_FLAGS;
    let e = n.ctx.modify_qp(n.qpn, &full(Init), mask).unwrap_err();
    assert!(matches!(
        e,
        VerbsError::BadModify {
            why: ModifyRefusal::NotPermitted(m),
            ..
        } if m == M::ACCESS_FLAGS
    ));
    // Out-of-range values (rdma_rxe's rxe_qp_chk_attr).
    let mut n = node(QpType::Rc);
    n.bring_to(Rtr);
    let bad = QpAttr {
        timeout: 32,
        ..full(Rts)
    };
    let e = n
        .ctx
        .modify_qp(n.qpn, &bad, M::STATE | required(QpType::Rc, Rtr, Rts))
        .unwrap_err();
    assert!(e.to_string().contains("IBV_QP_TIMEOUT"), "{e}");
    assert_eq!(n.state(), Rtr);
}

#[test]
fn modify_without_state_keeps_the_state_and_cur_state_must_match() {
    let mut n = node(QpType::Rc);
    n.bring_to(QpState::Init);
    // INIT -> INIT without IBV_QP_STATE: the access flags change.
    let a = QpAttr {
        qp_access_flags: Access::REMOTE_READ,
        ..full(QpState::Reset)
    };
    n.ctx.modify_qp(n.qpn, &a, M::ACCESS_FLAGS).unwrap();
    assert_eq!(n.state(), QpState::Init);
    let (q, _) = n.ctx.query_qp(n.qpn).unwrap();
    assert_eq!(q.qp_access_flags, Access::REMOTE_READ);
    // RTR -> RTR is not a change of the table.
    n.go(QpState::Rtr).unwrap();
    let e = n.ctx.modify_qp(n.qpn, &a, M::ACCESS_FLAGS).unwrap_err();
    assert!(matches!(
        e,
        VerbsError::BadModify {
            why: ModifyRefusal::NotInTable,
            ..
        }
    ));
    // IBV_QP_CUR_STATE naming another state.
    n.go(QpState::Rts).unwrap();
    let wrong = QpAttr {
        cur_qp_state: QpState::Sqd,
        ..full(QpState::Rts)
    };
    let e = n
        .ctx
        .modify_qp(n.qpn, &wrong, M::STATE | M::CUR_STATE)
        .unwrap_err();
    assert!(matches!(
        e,
        VerbsError::BadModify {
            why: ModifyRefusal::CurState(QpState::Sqd),
            ..
        }
    ));
    let right = QpAttr {
        cur_qp_state: QpState::Rts,
        ..full(QpState::Rts)
    };
    n.ctx
        .modify_qp(n.qpn, &right, M::STATE | M::CUR_STATE)
        .unwrap();
}

fn sqd(notify: bool) -> (QpAttr, QpAttrMask) {
    let a = QpAttr {
        qp_state: QpState::Sqd,
        en_sqd_async_notify: notify,
        ..QpAttr::default()
    };
    (a, M::STATE | M::EN_SQD_ASYNC_NOTIFY)
}

fn to_state(s: QpState) -> QpAttr {
    QpAttr {
        qp_state: s,
        ..QpAttr::default()
    }
}

/// RC, RTS → SQD with a three-packet WRITE in progress and a request posted in SQD: the
/// WRITE finishes, the new request waits; SQ_DRAINED comes once the WRITE is
/// acknowledged; SQD → RTS while draining is EINVAL (rdma_rxe's `rxe_qp_chk_attr`), after
/// it the waiting request goes out with the next PSN.
#[test]
fn rc_sqd_finishes_what_is_in_progress_and_starts_nothing_until_rts() {
    let mut p = Pair::new(RtsAttr::default(), all());
    p.post(1, write_op(&p, 0), 3000);
    let mut buf = vec![0u8; 5000];
    let n = p.a.poll_frame(p.now, &mut buf).unwrap();
    assert_eq!(
        wire::parse(&buf[..n]).unwrap().bth.opcode(),
        Opcode::RcWriteFirst
    );
    p.b.handle_frame(p.now, &buf[..n]).unwrap();

    let (a, mask) = sqd(true);
    p.a.modify_qp(p.qa, &a, mask).unwrap();
    assert_eq!(p.a.qp_state(p.qa), Some(QpState::Sqd));
    assert!(p.a.query_qp(p.qa).unwrap().0.sq_draining);
    assert_eq!(p.a.poll_async_event(), None, "WR 1 is still in flight");
    // Posting in SQD is allowed: queued, not started.
    p.post(2, write_op(&p, 8192), 100);
    let e =
        p.a.modify_qp(p.qa, &to_state(QpState::Rts), M::STATE)
            .unwrap_err();
    assert_eq!(
        e,
        VerbsError::BadModify {
            qpn: p.qa,
            from: QpState::Sqd,
            to: QpState::Rts,
            why: ModifyRefusal::Draining,
        }
    );

    p.run(|_, _| 1, 10);
    assert_eq!(
        from_a(&p),
        [
            (Opcode::RcWriteMiddle, A_PSN + 1),
            (Opcode::RcWriteLast, A_PSN + 2)
        ],
        "the rest of WR 1, nothing of WR 2"
    );
    assert_eq!(summary(&p.wcs_a()), [(1, WcStatus::Success)]);
    assert_eq!(p.a.poll_async_event(), Some(AsyncEvent::SqDrained(p.qa)));
    assert_eq!(p.a.poll_async_event(), None, "raised once");
    let (q, _) = p.a.query_qp(p.qa).unwrap();
    assert_eq!((q.qp_state, q.sq_draining), (QpState::Sqd, false));

    p.log.clear();
    p.a.modify_qp(p.qa, &to_state(QpState::Rts), M::STATE)
        .unwrap();
    p.run(|_, _| 1, 10);
    assert_eq!(from_a(&p), [(Opcode::RcWriteOnly, A_PSN + 3)]);
    assert_eq!(summary(&p.wcs_a()), [(2, WcStatus::Success)]);
    assert_eq!(p.a.poll_async_event(), None);
    assert_eq!(
        &p.b.mr_bytes(&p.rb)[8192..8292],
        &p.a.mr_bytes(&p.la)[..100]
    );
}

/// Without IBV_QP_EN_SQD_ASYNC_NOTIFY no event is raised; with nothing in flight SQD is
/// drained at once (and SQD → SQD is then taken).
#[test]
fn sqd_without_notify_raises_nothing_and_an_idle_qp_drains_at_once() {
    let mut p = Pair::new(RtsAttr::default(), all());
    let (a, mask) = sqd(false);
    p.a.modify_qp(p.qa, &a, mask).unwrap();
    assert!(!p.a.query_qp(p.qa).unwrap().0.sq_draining);
    assert_eq!(p.a.poll_async_event(), None);
    let (a, mask) = sqd(true);
    p.b.modify_qp(p.qb, &a, mask).unwrap();
    assert_eq!(p.b.poll_async_event(), Some(AsyncEvent::SqDrained(p.qb)));
    assert_eq!(p.b.poll_async_event(), None);
    // Drained: SQD -> SQD is taken (RC may change its retry counts there).
    let a = QpAttr {
        retry_cnt: 3,
        ..to_state(QpState::Sqd)
    };
    p.a.modify_qp(p.qa, &a, M::STATE | M::RETRY_CNT).unwrap();
    assert_eq!(p.a.query_qp(p.qa).unwrap().0.retry_cnt, 3);
}

/// UC: the message whose first packet is out finishes in SQD (its LAST goes out and it
/// completes), SQ_DRAINED then, and the SEND posted in SQD starts only after SQD → RTS.
#[test]
fn uc_sqd_finishes_the_message_being_sent() {
    let mut n = node(QpType::Uc);
    n.bring_to(QpState::Rts);
    n.send(1, 2000, false);
    let mut buf = vec![0u8; 5000];
    let now = Instant::now();
    assert!(n.ctx.poll_frame(now, &mut buf).is_some()); // UC SEND FIRST
    let (a, mask) = sqd(true);
    n.ctx.modify_qp(n.qpn, &a, mask).unwrap();
    n.send(2, 10, false);
    assert_eq!(n.ctx.poll_async_event(), None);
    assert_eq!(n.frames(), [Opcode::UcSendLast]);
    assert_eq!(n.ctx.poll_async_event(), Some(AsyncEvent::SqDrained(n.qpn)));
    assert_eq!(summary(&n.ctx.poll_cq(n.cq, 10)), [(1, WcStatus::Success)]);
    n.go(QpState::Rts).unwrap();
    assert_eq!(n.frames(), [Opcode::UcSendOnly]);
    assert_eq!(summary(&n.ctx.poll_cq(n.cq, 10)), [(2, WcStatus::Success)]);
}

/// UD: in SQD nothing starts (a datagram is never in progress, so the QP drains at
/// once); SQD → RTS sends what was posted meanwhile.
#[test]
fn ud_sqd_holds_datagrams_until_rts() {
    let mut n = node(QpType::Ud);
    n.bring_to(QpState::Rts);
    let (a, mask) = sqd(true);
    n.ctx.modify_qp(n.qpn, &a, mask).unwrap();
    assert_eq!(n.ctx.poll_async_event(), Some(AsyncEvent::SqDrained(n.qpn)));
    n.send(1, 100, false);
    n.send(2, 100, false);
    assert!(n.frames().is_empty());
    assert!(n.ctx.poll_cq(n.cq, 10).is_empty());
    n.go(QpState::Rts).unwrap();
    assert_eq!(n.frames(), [Opcode::UdSendOnly, Opcode::UdSendOnly]);
    assert_eq!(
        summary(&n.ctx.poll_cq(n.cq, 10)),
        [(1, WcStatus::Success), (2, WcStatus::Success)]
    );
}

/// UC and UD: a send-side error puts the QP in SQE (IBTA §10.3.1); posts complete with
/// WR_FLUSH_ERR there, receives are still taken, and SQE → RTS resumes sending with the
/// next PSN.
#[test]
fn sqe_to_rts_resumes_the_send_queue() {
    for t in [QpType::Uc, QpType::Ud] {
        let mut n = node(t);
        n.bring_to(QpState::Rts);
        n.send(1, 10, false);
        n.send(2, 10, true); // unknown lkey: LOC_PROT_ERR
        n.send(3, 10, false);
        let psn1 = drain(&mut n.ctx, Instant::now())
            .iter()
            .map(|f| uroce::wire::parse(f).unwrap().bth.psn())
            .collect::<Vec<_>>();
        assert_eq!(psn1, [700], "{t:?}: WR 1 only");
        assert_eq!(n.state(), QpState::Sqe, "{t:?}");
        assert_eq!(
            summary(&n.ctx.poll_cq(n.cq, 10)),
            [
                (1, WcStatus::Success),
                (2, WcStatus::LocProtErr),
                (3, WcStatus::WrFlushErr)
            ]
        );
        n.send(4, 10, false);
        assert_eq!(
            summary(&n.ctx.poll_cq(n.cq, 10)),
            [(4, WcStatus::WrFlushErr)]
        );
        let sge = Sge {
            addr: n.buf.addr + 4096,
            length: 2048,
            lkey: n.buf.lkey,
        };
        n.ctx.post_recv(n.qpn, RecvWr { wr_id: 40, sge }).unwrap();
        assert!(n.ctx.poll_cq(n.cq, 10).is_empty(), "the receive waits");
        // RC's SQE -> RTS is not in the table; UC / UD take it with nothing required.
        n.go(QpState::Rts).unwrap();
        n.send(5, 10, false);
        let after = drain(&mut n.ctx, Instant::now());
        let psns: Vec<u32> = after
            .iter()
            .map(|f| uroce::wire::parse(f).unwrap().bth.psn())
            .collect();
        assert_eq!(psns, [701], "{t:?}");
        assert_eq!(summary(&n.ctx.poll_cq(n.cq, 10)), [(5, WcStatus::Success)]);
    }
}

/// RTS → RTS with IBV_QP_MIN_RNR_TIMER (and a matching IBV_QP_CUR_STATE): the
/// responder's next RNR NAK carries the new timer code (12 was set at RTR).
#[test]
fn rts_to_rts_min_rnr_timer_changes_the_rnr_nak() {
    let mut p = Pair::new(RtsAttr::default(), all());
    let a = QpAttr {
        qp_state: QpState::Rts,
        cur_qp_state: QpState::Rts,
        min_rnr_timer: 5,
        ..QpAttr::default()
    };
    p.b.modify_qp(p.qb, &a, M::STATE | M::CUR_STATE | M::MIN_RNR_TIMER)
        .unwrap();
    assert_eq!(p.b.query_qp(p.qb).unwrap().0.min_rnr_timer, 5);
    p.post(1, SendOp::Send, 10); // B has no receive posted
    p.run(|_, _| 1, 0);
    let naks = p.sent(false, Opcode::RcAck);
    assert_eq!(naks[0].syndrome(), Some(Syndrome::RnrNak { timer: 5 }));
}

/// IBV_QP_TIMEOUT changes only in SQD → SQD (RTS → RTS refuses it, as the kernel's
/// table does): the retransmission timer follows the new value, packet by packet.
#[test]
fn sqd_to_sqd_timeout_changes_the_retransmission_timer() {
    let mut p = Pair::new(RtsAttr::default(), all()); // timeout 14: 67.1 ms
    let (t14, t10) = (ack_timeout(14).unwrap(), ack_timeout(10).unwrap());
    let mut buf = vec![0u8; 5000];
    p.post(1, write_op(&p, 0), 100);
    let t0 = p.now;
    assert!(p.a.poll_frame(t0, &mut buf).is_some()); // lost
                                                     // First the clean QP's recovery probe (not run here): an eighth of the timeout, at
                                                     // least 10 ms, at most half the timeout.
    assert_eq!(p.a.poll_timeout(), Some(t0 + Duration::from_millis(10)));
    p.now = t0 + t14;
    p.a.handle_timeout(p.now);
    let n = p.a.poll_frame(p.now, &mut buf).unwrap();
    assert_eq!(wire::parse(&buf[..n]).unwrap().bth.psn(), A_PSN, "resent");
    p.b.handle_frame(p.now, &buf[..n]).unwrap();
    p.run(|_, _| 1, 0);
    assert_eq!(summary(&p.wcs_a()), [(1, WcStatus::Success)]);

    let t = QpAttr {
        timeout: 10,
        ..to_state(QpState::Rts)
    };
    let e = p.a.modify_qp(p.qa, &t, M::STATE | M::TIMEOUT).unwrap_err();
    assert!(matches!(
        e,
        VerbsError::BadModify { from: QpState::Rts, to: QpState::Rts, why: ModifyRefusal::NotPermitted(m), .. }
            if m == M::TIMEOUT
    ));
    assert!(e.to_string().contains("IBV_QP_TIMEOUT"), "{e}");
    let (a, mask) = sqd(false);
    p.a.modify_qp(p.qa, &a, mask).unwrap();
    let t = QpAttr {
        timeout: 10,
        ..to_state(QpState::Sqd)
    };
    p.a.modify_qp(p.qa, &t, M::STATE | M::TIMEOUT).unwrap();
    assert_eq!(p.a.query_qp(p.qa).unwrap().0.timeout, 10);
    p.a.modify_qp(p.qa, &to_state(QpState::Rts), M::STATE)
        .unwrap();

    p.post(2, write_op(&p, 0), 100);
    let t1 = p.now;
    assert!(p.a.poll_frame(t1, &mut buf).is_some()); // lost
    assert_eq!(
        p.a.poll_timeout(),
        Some(t1 + t10 / 2),
        "the probe at half of 4.2 ms now"
    );
    p.now = t1 + t10;
    p.a.handle_timeout(p.now);
    let n = p.a.poll_frame(p.now, &mut buf).unwrap();
    assert_eq!(wire::parse(&buf[..n]).unwrap().bth.psn(), A_PSN + 1);
    let c = p.a.qp_counters(p.qa).unwrap();
    assert_eq!(c.local_ack_timeout_err, 2, "the timer ran out at 4.2 ms");
    assert_eq!(p.a.poll_timeout(), Some(p.now + t10 / 2));
}

/// A QP moved to RESET takes its completions still in its CQ with it (mlx4 / mlx5 clean
/// the CQ on the way to RESET): a QP restated from ERR (rdma-core's test_mr_rereg_pd)
/// finds only its new work's completions, and another QP's completions stay.
#[test]
fn reset_takes_the_qps_completions_out_of_its_cq() {
    let mut p = Pair::new(RtsAttr::default(), all());
    p.post(1, write_op(&p, 0), 100);
    p.post(2, write_op(&p, 0), 100);
    p.a.modify_qp_err(p.qa, p.now).unwrap();
    // Two flushed completions wait in A's CQ; B's CQ holds one of B's.
    p.post_recv(3);
    p.b.modify_qp_err(p.qb, p.now).unwrap();
    p.a.modify_qp(p.qa, &to_state(QpState::Reset), M::STATE)
        .unwrap();
    assert!(
        p.wcs_a().is_empty(),
        "A's flushed completions went with RESET"
    );
    // B's CQ is its own: untouched by A's RESET.
    assert_eq!(summary(&p.wcs_b()), [(3, WcStatus::WrFlushErr)]);
    // RESET again (RESET -> RESET) with nothing posted: nothing to take, nothing refused.
    p.a.modify_qp(p.qa, &to_state(QpState::Reset), M::STATE)
        .unwrap();
    assert!(p.wcs_a().is_empty());
}

/// ERR → RESET and RTS → RESET clear the queues without completions and forget the
/// attributes (rdma_rxe's `rxe_qp_reset`); RESET → INIT → RTR → RTS brings the QPs back
/// and they carry traffic with fresh PSNs.
#[test]
fn reset_brings_a_qp_back_with_fresh_psns() {
    let mut p = Pair::new(RtsAttr::default(), all());
    p.post_recv(1);
    p.post(1, SendOp::Send, 100);
    p.run(|_, _| 1, 10);
    assert_eq!(summary(&p.wcs_a()), [(1, WcStatus::Success)]);
    assert_eq!(summary(&p.wcs_b()), [(1, WcStatus::Success)]);

    // A: a request flushed on the way to ERR, then ERR -> RESET.
    p.post(2, write_op(&p, 0), 100);
    p.a.modify_qp_err(p.qa, p.now).unwrap();
    assert_eq!(summary(&p.wcs_a()), [(2, WcStatus::WrFlushErr)]);
    p.a.modify_qp(p.qa, &to_state(QpState::Reset), M::STATE)
        .unwrap();
    // B: RTS -> RESET with a receive posted: it goes without a completion.
    p.post_recv(2);
    p.b.modify_qp(p.qb, &to_state(QpState::Reset), M::STATE)
        .unwrap();
    assert!(p.wcs_b().is_empty());
    assert!(drain(&mut p.a, p.now).is_empty() && drain(&mut p.b, p.now).is_empty());
    let (q, init) = p.a.query_qp(p.qa).unwrap();
    assert_eq!(
        q,
        QpAttr {
            qp_state: QpState::Reset,
            cur_qp_state: QpState::Reset,
            ..QpAttr::default()
        },
        "every attribute forgotten"
    );
    assert_eq!(init.caps.max_send_wr, 64);
    let e = p.b.post_recv(
        p.qb,
        RecvWr {
            wr_id: 9,
            sge: Sge {
                addr: p.recv.addr,
                length: 8,
                lkey: p.recv.lkey,
            },
        },
    );
    assert!(matches!(e, Err(VerbsError::BadState { .. })), "{e:?}");

    // Up again, with new PSNs both ways.
    let (a_psn, b_psn) = (0x30_0000, 0x40_0000);
    for (c, q, peer, rq, sq) in [
        (&mut p.a, p.qa, (2u8, p.qb), b_psn, a_psn),
        (&mut p.b, p.qb, (1u8, p.qa), a_psn, b_psn),
    ] {
        c.modify_qp_init(q, InitAttr::default()).unwrap();
        c.modify_qp_rtr(
            q,
            RtrAttr {
                remote: remote(peer.0),
                dest_qpn: peer.1,
                rq_psn: rq,
                path_mtu: Mtu::M1024,
                max_dest_rd_atomic: 4,
                min_rnr_timer: 12,
            },
        )
        .unwrap();
        c.modify_qp_rts(
            q,
            RtsAttr {
                sq_psn: sq,
                ..RtsAttr::default()
            },
        )
        .unwrap();
    }
    p.log.clear();
    p.post_recv(3);
    p.post(3, SendOp::Send, 100);
    p.post(4, write_op(&p, 0), 2000);
    p.run(|_, _| 1, 10);
    assert_eq!(
        from_a(&p),
        [
            (Opcode::RcSendOnly, a_psn),
            (Opcode::RcWriteFirst, a_psn + 1),
            (Opcode::RcWriteLast, a_psn + 2)
        ]
    );
    assert_eq!(
        summary(&p.wcs_a()),
        [(3, WcStatus::Success), (4, WcStatus::Success)]
    );
    assert_eq!(summary(&p.wcs_b()), [(3, WcStatus::Success)]);
    let acks: Vec<u32> = p
        .sent(false, Opcode::RcAck)
        .iter()
        .map(|s| s.psn())
        .collect();
    assert_eq!(acks.last(), Some(&(a_psn + 2)));
}

/// ibv_query_qp: the state, every attribute as set, and what the QP was created with.
#[test]
fn query_qp_returns_what_was_set() {
    let ex = QpInitEx {
        max_inline_data: 64,
        sq_sig_all: true,
        ..QpInitEx::default()
    };
    let p = Pair::custom_ex(
        RtsAttr {
            timeout: 17,
            retry_cnt: 5,
            rnr_retry: 3,
            max_rd_atomic: 8,
            sq_psn: 0,
        },
        all(),
        A_PSN,
        InitAttr::default(),
        4,
        Mtu::M2048,
        ex,
    );
    let (q, init) = p.a.query_qp(p.qa).unwrap();
    assert_eq!(q.qp_state, QpState::Rts);
    assert_eq!(q.cur_qp_state, QpState::Rts);
    assert_eq!(q.qp_access_flags, InitAttr::default().access);
    assert_eq!(q.pkey, 0xffff);
    assert_eq!(q.port_num, 1);
    assert_eq!(q.ah_attr, remote(2));
    assert_eq!(q.path_mtu, Mtu::M2048);
    assert_eq!(q.dest_qp_num, p.qb);
    assert_eq!(q.rq_psn, B_PSN);
    assert_eq!(q.sq_psn, A_PSN);
    assert_eq!(q.max_dest_rd_atomic, 4);
    assert_eq!(q.min_rnr_timer, 12);
    assert_eq!(
        (q.timeout, q.retry_cnt, q.rnr_retry, q.max_rd_atomic),
        (17, 5, 3, 8)
    );
    assert!(!q.sq_draining);
    assert_eq!(
        init,
        QpInitAttr {
            caps: QpCaps {
                qp_type: QpType::Rc,
                send_cq: p.cqa,
                recv_cq: p.cqa,
                max_send_wr: 64,
                max_recv_wr: 64,
            },
            ex,
        }
    );
    // A UD QP: its Q_Key; QP1 reports the well-known one.
    for (t, qkey) in [(QpType::Ud, 0x1111), (QpType::Gsi, 0x8001_0000)] {
        let mut n = node(t);
        n.bring_to(QpState::Rts);
        let (q, init) = n.ctx.query_qp(n.qpn).unwrap();
        assert_eq!((q.qp_state, q.qkey, q.sq_psn), (QpState::Rts, qkey, 700));
        assert_eq!(init.caps.qp_type, t);
    }
    assert!(matches!(
        p.a.query_qp(0x999),
        Err(VerbsError::NoSuchQp(0x999))
    ));
}

/// The receive side of a QP in SQD works (IBTA §10.3.1: SQD drains the send queue
/// only): B in SQD takes A's SEND and answers with its ACK, a response and not a request.
#[test]
fn rc_in_sqd_still_receives_and_acknowledges() {
    let mut p = Pair::new(RtsAttr::default(), all());
    let (a, mask) = sqd(true);
    p.b.modify_qp(p.qb, &a, mask).unwrap();
    assert_eq!(p.b.poll_async_event(), Some(AsyncEvent::SqDrained(p.qb)));
    p.post_recv(1);
    p.post(1, SendOp::Send, 100);
    p.run(|_, _| 1, 10);
    assert_eq!(summary(&p.wcs_b()), [(1, WcStatus::Success)]);
    assert_eq!(summary(&p.wcs_a()), [(1, WcStatus::Success)]);
    assert_eq!(p.sent(false, Opcode::RcAck).len(), 1);
    assert_eq!(p.b.qp_state(p.qb), Some(QpState::Sqd));
}

/// While SQD drains, RESET is refused as RTS is (rdma_rxe's `rxe_qp_chk_attr` takes only
/// ERR then); SQD → ERR flushes what is in flight and what waits.
#[test]
fn sqd_while_draining_takes_only_err() {
    let mut p = Pair::new(RtsAttr::default(), all());
    p.post(1, write_op(&p, 0), 100);
    let mut buf = vec![0u8; 5000];
    assert!(p.a.poll_frame(p.now, &mut buf).is_some()); // lost: WR 1 stays in flight
    let (a, mask) = sqd(true);
    p.a.modify_qp(p.qa, &a, mask).unwrap();
    p.post(2, SendOp::Send, 10);
    for to in [QpState::Reset, QpState::Sqd] {
        let e = p.a.modify_qp(p.qa, &to_state(to), M::STATE).unwrap_err();
        assert!(
            matches!(
                e,
                VerbsError::BadModify {
                    why: ModifyRefusal::Draining,
                    ..
                }
            ),
            "{to:?}: {e:?}"
        );
    }
    // Its retransmission timer still runs in SQD.
    assert!(p.a.poll_timeout().is_some());
    p.a.modify_qp(p.qa, &to_state(QpState::Err), M::STATE)
        .unwrap();
    assert_eq!(
        summary(&p.wcs_a()),
        [(1, WcStatus::WrFlushErr), (2, WcStatus::WrFlushErr)]
    );
    assert_eq!(p.a.poll_async_event(), None, "never drained");
}

/// The QPs' shared UDP source ports are set before any QP exists: a QP's port is fixed for
/// its life, and changing it under a QP that sends could reorder its packets.
#[test]
fn udp_source_ports_are_shared_only_before_qps_exist() {
    let mut empty = Context::new(
        ContextConfig {
            mac: [2, 0, 0, 0, 0, 9],
            ip: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 9)),
            seed: 9,
            udp_sport_base: 0xc000,
            tos: 0,
        },
        Instant::now(),
    );
    assert!(empty.set_udp_sports(4).is_ok());
    assert_eq!(empty.udp_sports(), 4);
    let (mut c, _, _) = ctx(1);
    assert!(matches!(
        c.set_udp_sports(4),
        Err(uroce::verbs::VerbsError::Busy)
    ));
    assert_eq!(c.udp_sports(), 0);
}
