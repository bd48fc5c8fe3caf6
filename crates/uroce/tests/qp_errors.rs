//! QP error rules at posting time, packet by packet: a work request posted to a QP in
//! ERR completes with WR_FLUSH_ERR (ibverbs; rdma_rxe's `rxe_post_send` refuses only a
//! state before RTS, `rxe_post_recv` one before INIT), and a send work request that
//! fails its own local check puts nothing on the wire, completes with its status once
//! those ahead of it have, moves the QP to ERR and flushes what is behind it (IBTA
//! §10.3.1; rdma_rxe: the requester marks the WQE in error, the completer completes it
//! in order and calls `rxe_qp_error`, whose flush completes every WQE, signaled or not).

mod common;

use std::net::{IpAddr, Ipv4Addr};
use std::time::Instant;

use common::*;
use uroce::mem::{Access, Mr, PdId};
use uroce::verbs::{
    Context, ContextConfig, CqId, InitAttr, Mtu, QpCaps, QpState, QpType, RecvWr, Remote, RtrAttr,
    RtsAttr, SendOp, Sge, UdSendWr, VerbsError, WcOpcode, WcStatus, WorkCompletion,
};
use uroce::wire::Opcode;

/// (wr_id, status, byte_len) of each completion, in order.
fn summary(wcs: &[WorkCompletion]) -> Vec<(u64, WcStatus, u32)> {
    wcs.iter()
        .map(|w| (w.wr_id, w.status, w.byte_len))
        .collect()
}

/// A's local buffer, `len` bytes, with its lkey spoiled when `bad_lkey`.
fn la_sge(p: &Pair, len: u32, bad_lkey: bool) -> Sge {
    Sge {
        addr: p.la.addr,
        length: len,
        lkey: if bad_lkey {
            p.la.lkey ^ 0x0101
        } else {
            p.la.lkey
        },
    }
}

fn post_recv_a(p: &mut Pair, wr_id: u64) -> Result<(), VerbsError> {
    let sge = Sge {
        addr: p.la.addr + 65536,
        length: 64,
        lkey: p.la.lkey,
    };
    p.a.post_recv(p.qa, RecvWr { wr_id, sge })
}

#[test]
fn rc_local_prot_error_behind_a_write_sends_nothing_of_it_then_err_and_flush() {
    let mut p = Pair::new(RtsAttr::default(), all());
    post_recv_a(&mut p, 20).unwrap();
    post_recv_a(&mut p, 21).unwrap();
    let w = write_op(&p, 0);
    p.a.post_send(p.qa, wr(1, w, la_sge(&p, 100, false), true))
        .unwrap();
    // Unknown lkey: LOC_PROT_ERR, but only after WR 1 completes (in order).
    p.a.post_send(p.qa, wr(2, SendOp::Send, la_sge(&p, 50, true), true))
        .unwrap();
    assert!(p.wcs_a().is_empty(), "WR 2 waits for WR 1");
    assert_eq!(p.a.qp_state(p.qa), Some(QpState::Rts));
    // Posted behind the fault: flushed, signaled or not.
    p.a.post_send(p.qa, wr(3, SendOp::Send, la_sge(&p, 10, false), true))
        .unwrap();
    p.a.post_send(p.qa, wr(4, w, la_sge(&p, 10, false), false))
        .unwrap();
    p.run(|_, _| 1, 10);
    let from_a: Vec<(Opcode, u32)> = p
        .log
        .iter()
        .filter(|s| s.from_a)
        .map(|s| (s.opcode(), s.psn()))
        .collect();
    assert_eq!(
        from_a,
        [(Opcode::RcWriteOnly, A_PSN)],
        "only WR 1 goes on the wire"
    );
    assert_eq!(
        summary(&p.wcs_a()),
        [
            (1, WcStatus::Success, 100),
            (2, WcStatus::LocProtErr, 0),
            (3, WcStatus::WrFlushErr, 0),
            (4, WcStatus::WrFlushErr, 0),
            (20, WcStatus::WrFlushErr, 0),
            (21, WcStatus::WrFlushErr, 0),
        ]
    );
    assert_eq!(p.a.qp_state(p.qa), Some(QpState::Err));
    assert_eq!(
        p.b.qp_state(p.qb),
        Some(QpState::Rts),
        "the peer is untouched"
    );
    assert!(drain(&mut p.a, p.now).is_empty());
}

#[test]
fn rc_local_prot_error_with_nothing_ahead_completes_at_post() {
    let mut p = Pair::new(RtsAttr::default(), all());
    // Unsignaled: an error completion is made all the same (rxe's do_complete posts
    // any WQE whose status is not success).
    let sge = Sge {
        addr: p.la.addr + (1 << 17) - 10,
        length: 20, // runs 10 bytes past the end of its region
        lkey: p.la.lkey,
    };
    p.a.post_send(p.qa, wr(7, SendOp::Send, sge, false))
        .unwrap();
    let wc = p.wcs_a();
    assert_eq!(summary(&wc), [(7, WcStatus::LocProtErr, 0)]);
    assert_eq!(wc[0].opcode, WcOpcode::Send);
    assert_eq!(p.a.qp_state(p.qa), Some(QpState::Err));
    assert!(drain(&mut p.a, p.now).is_empty(), "nothing on the wire");
}

#[test]
fn rc_read_into_a_region_without_local_write_is_a_local_prot_error() {
    let mut p = Pair::new(RtsAttr::default(), all());
    let ro = p.a.reg_mr(PdId(0), vec![0; 4096], Access::NONE).unwrap();
    let sge = Sge {
        addr: ro.addr,
        length: 100,
        lkey: ro.lkey,
    };
    let read = SendOp::Read {
        remote_addr: p.rb.addr,
        rkey: p.rb.rkey,
    };
    p.a.post_send(p.qa, wr(1, read, sge, true)).unwrap();
    assert_eq!(summary(&p.wcs_a()), [(1, WcStatus::LocProtErr, 0)]);
    assert_eq!(p.a.qp_state(p.qa), Some(QpState::Err));
    assert!(drain(&mut p.a, p.now).is_empty());
}

#[test]
fn rc_post_to_err_completes_with_flush_send_and_receive() {
    let mut p = Pair::new(RtsAttr::default(), all());
    p.a.modify_qp_err(p.qa, p.now).unwrap();
    assert!(p.wcs_a().is_empty());
    // Signaled or not, a good buffer or a bad one: WR_FLUSH_ERR, nothing checked.
    p.a.post_send(p.qa, wr(1, SendOp::Send, la_sge(&p, 10, false), true))
        .unwrap();
    p.a.post_send(p.qa, wr(2, SendOp::Send, la_sge(&p, 10, false), false))
        .unwrap();
    p.a.post_send(p.qa, wr(3, SendOp::Send, la_sge(&p, 10, true), true))
        .unwrap();
    post_recv_a(&mut p, 4).unwrap();
    let wc = p.wcs_a();
    assert_eq!(
        summary(&wc),
        [
            (1, WcStatus::WrFlushErr, 0),
            (2, WcStatus::WrFlushErr, 0),
            (3, WcStatus::WrFlushErr, 0),
            (4, WcStatus::WrFlushErr, 0),
        ]
    );
    assert_eq!(wc[3].opcode, WcOpcode::Recv);
    assert_eq!(p.a.qp_state(p.qa), Some(QpState::Err));
    assert!(drain(&mut p.a, p.now).is_empty(), "nothing on the wire");
    // What ibverbs refuses at post time stays refused in ERR: an invalid WR.
    let atomic = SendOp::FetchAdd {
        remote_addr: p.rb.addr,
        rkey: p.rb.rkey,
        add: 1,
    };
    assert!(p
        .a
        .post_send(p.qa, wr(5, atomic, la_sge(&p, 4, false), true))
        .is_err());
}

#[test]
fn post_send_before_rts_and_post_recv_in_reset_stay_refused() {
    let (mut c, _cq, q) = ctx(1);
    let mr = c
        .reg_mr(PdId(0), vec![0; 4096], Access::LOCAL_WRITE)
        .unwrap();
    let sge = Sge {
        addr: mr.addr,
        length: 8,
        lkey: mr.lkey,
    };
    assert!(matches!(
        c.post_recv(q, RecvWr { wr_id: 1, sge }),
        Err(VerbsError::BadState { .. })
    ));
    c.modify_qp_init(q, InitAttr::default()).unwrap();
    assert!(matches!(
        c.post_send(q, wr(1, SendOp::Send, sge, true)),
        Err(VerbsError::BadState { .. })
    ));
    c.post_recv(q, RecvWr { wr_id: 1, sge }).unwrap();
}

// ---- UC and UD ----

struct Node {
    ctx: Context,
    qpn: u32,
    cq: CqId,
    buf: Mr,
}

fn node(n: u8, t: QpType) -> Node {
    let mut ctx = Context::new(
        ContextConfig {
            mac: [2, 0, 0, 0, 0, n],
            ip: IpAddr::V4(Ipv4Addr::new(10, 0, 0, n)),
            seed: u64::from(n),
            udp_sport_base: 0xc000,
            tos: 0,
        },
        Instant::now(),
    );
    let cq = ctx
        .create_cq(uroce::verbs::MAX_CQE)
        .expect("MAX_CQE is a valid CQ depth");
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
    let init = InitAttr {
        qkey: 0x1111,
        ..InitAttr::default()
    };
    ctx.modify_qp_init(qpn, init).unwrap();
    Node { ctx, qpn, cq, buf }
}

fn remote(n: u8) -> Remote {
    Remote {
        ip: IpAddr::V4(Ipv4Addr::new(10, 0, 0, n)),
        mac: [2, 0, 0, 0, 0, n],
    }
}

fn rts(x: &mut Node) {
    let a = RtsAttr {
        sq_psn: 500,
        ..RtsAttr::default()
    };
    x.ctx.modify_qp_rts(x.qpn, a).unwrap();
}

/// A UC QP in RTS talking to QPN 0x77 at 10.0.0.2.
fn uc_node() -> Node {
    let mut a = node(1, QpType::Uc);
    let rtr = RtrAttr {
        remote: remote(2),
        dest_qpn: 0x77,
        rq_psn: 500,
        path_mtu: Mtu::M1024,
        max_dest_rd_atomic: 0,
        min_rnr_timer: 0,
    };
    a.ctx.modify_qp_rtr(a.qpn, rtr).unwrap();
    rts(&mut a);
    a
}

fn ud_node() -> Node {
    let mut a = node(1, QpType::Ud);
    a.ctx.modify_qp_rtr_ud(a.qpn, Mtu::M1024).unwrap();
    rts(&mut a);
    a
}

fn sge(x: &Node, len: u32, bad_lkey: bool) -> Sge {
    Sge {
        addr: x.buf.addr,
        length: len,
        lkey: if bad_lkey {
            x.buf.lkey ^ 0x0101
        } else {
            x.buf.lkey
        },
    }
}

fn recv(x: &mut Node, wr_id: u64) {
    let s = Sge {
        addr: x.buf.addr + 8192,
        length: 2048,
        lkey: x.buf.lkey,
    };
    x.ctx.post_recv(x.qpn, RecvWr { wr_id, sge: s }).unwrap();
}

fn ud_wr(x: &Node, wr_id: u64, len: u32, bad_lkey: bool, signaled: bool) -> UdSendWr {
    UdSendWr {
        wr_id,
        dest: remote(2),
        remote_qpn: 0x77,
        remote_qkey: 0x1111,
        sge: sge(x, len, bad_lkey),
        imm: None,
        signaled,
        solicited: false,
    }
}

fn opcodes(frames: &[Vec<u8>]) -> Vec<Opcode> {
    frames
        .iter()
        .map(|f| uroce::wire::parse(f).unwrap().bth.opcode())
        .collect()
}

/// UC: a local protection error takes the QP to SQE, not ERR (IBTA §10.3.1, Send Queue
/// Error of an unreliable service; rdma_rxe goes to ERR, see `Qp::settle_fault`): the
/// send queue is flushed, the posted receive stays.
#[test]
fn uc_local_prot_error_sends_nothing_of_it_then_sqe_and_send_flush() {
    let mut a = uc_node();
    recv(&mut a, 30);
    let now = Instant::now();
    a.ctx
        .post_send(a.qpn, wr(1, SendOp::Send, sge(&a, 2000, false), true))
        .unwrap();
    a.ctx
        .post_send(a.qpn, wr(2, SendOp::Send, sge(&a, 10, true), false))
        .unwrap();
    a.ctx
        .post_send(a.qpn, wr(3, SendOp::Send, sge(&a, 10, false), true))
        .unwrap();
    let frames = drain(&mut a.ctx, now);
    assert_eq!(
        opcodes(&frames),
        [Opcode::UcSendFirst, Opcode::UcSendLast],
        "WR 1 only"
    );
    assert_eq!(
        summary(&a.ctx.poll_cq(a.cq, 10)),
        [
            (1, WcStatus::Success, 2000),
            (2, WcStatus::LocProtErr, 0),
            (3, WcStatus::WrFlushErr, 0),
        ]
    );
    assert_eq!(a.ctx.qp_state(a.qpn), Some(QpState::Sqe));
    // And a post now is flushed at once.
    a.ctx
        .post_send(a.qpn, wr(4, SendOp::Send, sge(&a, 10, false), false))
        .unwrap();
    assert_eq!(
        summary(&a.ctx.poll_cq(a.cq, 10)),
        [(4, WcStatus::WrFlushErr, 0)]
    );
    assert!(drain(&mut a.ctx, now).is_empty());
}

/// UD: as UC, SQE with the send queue flushed and the receive queue working.
#[test]
fn ud_local_prot_error_goes_to_sqe_and_flushes_the_send_queue() {
    let mut a = ud_node();
    recv(&mut a, 30);
    let now = Instant::now();
    a.ctx
        .post_send_ud(a.qpn, ud_wr(&a, 1, 100, false, true))
        .unwrap();
    a.ctx
        .post_send_ud(a.qpn, ud_wr(&a, 2, 100, true, true))
        .unwrap();
    a.ctx
        .post_send_ud(a.qpn, ud_wr(&a, 3, 100, false, false))
        .unwrap();
    let frames = drain(&mut a.ctx, now);
    assert_eq!(opcodes(&frames), [Opcode::UdSendOnly], "WR 1 only");
    assert_eq!(
        summary(&a.ctx.poll_cq(a.cq, 10)),
        [
            (1, WcStatus::Success, 100),
            (2, WcStatus::LocProtErr, 0),
            (3, WcStatus::WrFlushErr, 0),
        ]
    );
    assert_eq!(a.ctx.qp_state(a.qpn), Some(QpState::Sqe));
    a.ctx
        .post_send_ud(a.qpn, ud_wr(&a, 4, 100, false, true))
        .unwrap();
    recv(&mut a, 31);
    assert_eq!(
        summary(&a.ctx.poll_cq(a.cq, 10)),
        [(4, WcStatus::WrFlushErr, 0)],
        "sends flushed, the receive waits for a datagram"
    );
    assert!(drain(&mut a.ctx, now).is_empty());
}

#[test]
fn ud_longer_than_the_mtu_does_not_take_the_qp_to_err() {
    // rdma_rxe (rxe_req.c, C10-93.1.1) sends nothing for a UD message longer than the
    // MTU and does not error the QP; uroce completes it with LOC_LEN_ERR, in RTS.
    let mut a = ud_node();
    let now = Instant::now();
    a.ctx
        .post_send_ud(a.qpn, ud_wr(&a, 1, 1025, false, true))
        .unwrap();
    a.ctx
        .post_send_ud(a.qpn, ud_wr(&a, 2, 1024, false, true))
        .unwrap();
    let frames = drain(&mut a.ctx, now);
    assert_eq!(opcodes(&frames), [Opcode::UdSendOnly], "WR 2 only");
    assert_eq!(
        summary(&a.ctx.poll_cq(a.cq, 10)),
        [(1, WcStatus::LocLenErr, 0), (2, WcStatus::Success, 1024)]
    );
    assert_eq!(a.ctx.qp_state(a.qpn), Some(QpState::Rts));
}
