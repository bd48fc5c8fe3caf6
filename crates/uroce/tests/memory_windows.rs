//! Memory windows end to end, packet by packet, between two contexts back to back: type 1
//! bound by `bind_mw`, type 2 bound by a BIND_MW work request (IBTA Vol. 1 §10.6.7),
//! RDMA through a window's rkey inside and outside its range, type 2 windows tied to
//! their QP, SEND with Invalidate (IBTA §9.4.1.1, the IETH) and LOCAL_INV, the errors of
//! each as rdma_rxe gives them (`rxe_mw.c`, `rxe_do_local_ops`, `rxe_resp.c`), and a
//! region that windows are bound to refusing deregistration (EBUSY).
//!
//! B is the side whose memory the windows open; A is the peer using them.

mod common;

use std::net::{IpAddr, Ipv4Addr};

use common::*;
use uroce::mem::PdId;
use uroce::verbs::{
    inc_rkey, Mw, MwBind, MwType, QpCaps, QpType, RegError, VerbsError, WcFlags, WcOpcode,
};

/// B's region that windows are bound to: 16 KiB of `i as u8`, LOCAL_WRITE and MW_BIND
/// only (no rkey of its own grants anything).
fn window_mr(p: &mut Pair) -> Mr {
    let bytes = (0..16384u32).map(|i| (i * 7) as u8).collect();
    p.b.reg_mr(PdId(0), bytes, Access::LOCAL_WRITE | Access::MW_BIND)
        .unwrap()
}

fn rw() -> Access {
    Access::REMOTE_READ | Access::REMOTE_WRITE
}

/// Binds a type 1 window over `[mr.addr + off, + len)` through B's QP and runs until the
/// bind completed; gives the window with its new rkey.
fn bind_type1(p: &mut Pair, mr: &Mr, off: u64, len: u64, access: Access) -> Mw {
    let mut mw = p.b.alloc_mw(PdId(0), MwType::Type1).unwrap();
    let before = mw.rkey;
    let bind = MwBind {
        wr_id: 77,
        signaled: true,
        mr_lkey: mr.lkey,
        addr: mr.addr + off,
        length: len,
        access,
    };
    p.b.bind_mw(p.qb, &mut mw, bind).unwrap();
    assert_eq!(mw.rkey, inc_rkey(before), "ibv_bind_mw: the next key");
    p.run(|_, _| 1, 10);
    let wcs = p.wcs_b();
    assert_eq!(wcs.len(), 1);
    assert_eq!(
        (wcs[0].wr_id, wcs[0].opcode, wcs[0].status),
        (77, WcOpcode::BindMw, WcStatus::Success)
    );
    mw
}

/// The BIND_MW work request of a type 2 window (next key) over `[mr.addr + off, + len)`.
fn bind_op(mw: &Mw, mr: &Mr, off: u64, len: u64, access: Access) -> SendOp {
    SendOp::BindMw {
        mw: mw.id(),
        rkey: inc_rkey(mw.rkey),
        mr_lkey: mr.lkey,
        addr: mr.addr + off,
        length: len,
        access,
    }
}

/// Binds a type 2 window with a work request on B's QP `qpn`, runs, checks the
/// completion; gives the window's new rkey.
fn bind_type2(p: &mut Pair, qpn: u32, mw: &Mw, mr: &Mr, off: u64, len: u64) -> u32 {
    let op = bind_op(mw, mr, off, len, rw());
    p.b.post_send(qpn, wr(78, op, Sge::default(), true))
        .unwrap();
    p.run(|_, _| 1, 10);
    let wcs = p.wcs_b();
    assert_eq!(wcs.len(), 1);
    assert_eq!(
        (wcs[0].wr_id, wcs[0].opcode, wcs[0].status),
        (78, WcOpcode::BindMw, WcStatus::Success)
    );
    inc_rkey(mw.rkey)
}

/// A's SGE of `len` bytes at `off` in its local buffer.
fn la(p: &Pair, off: u64, len: u32) -> Sge {
    Sge {
        addr: p.la.addr + off,
        length: len,
        lkey: p.la.lkey,
    }
}

/// A RDMA-writes `len` bytes at `va` under `rkey` (A's buffer holds `0xab`), runs, and
/// gives A's completion status.
fn write_through(p: &mut Pair, rkey: u32, va: u64, len: u32) -> WcStatus {
    p.a.mr_bytes_mut(&p.la)[..len as usize].fill(0xab);
    let op = SendOp::Write {
        remote_addr: va,
        rkey,
    };
    p.a.post_send(p.qa, wr(5, op, la(p, 0, len), true)).unwrap();
    p.run(|_, _| 1, 10);
    let wcs = p.wcs_a();
    assert_eq!(wcs.len(), 1, "{wcs:?}");
    wcs[0].status
}

/// Whether B answered with a NAK of `code` (the last response B sent).
fn nakked(p: &Pair, code: NakCode) -> bool {
    p.log
        .iter()
        .rev()
        .find(|s| !s.from_a)
        .is_some_and(|s| s.syndrome() == Some(Syndrome::Nak(code)))
}

/// IBTA §10.6.7.1 / C10-75: a type 1 window grants its rights inside its range: A's
/// WRITE and READ through its rkey land in (come from) B's region at the right place,
/// though the region itself grants no remote access.
#[test]
fn type1_window_grants_write_and_read_inside_it() {
    let mut p = Pair::new(RtsAttr::default(), all());
    let mr = window_mr(&mut p);
    let mw = bind_type1(&mut p, &mr, 1024, 2048, rw());
    let va = mr.addr + 1500;
    assert_eq!(write_through(&mut p, mw.rkey, va, 100), WcStatus::Success);
    assert!(p.b.mr_bytes(&mr)[1500..1600].iter().all(|&b| b == 0xab));
    assert_eq!(p.b.mr_bytes(&mr)[1499], (1499u32 * 7) as u8);
    let read = SendOp::Read {
        remote_addr: mr.addr + 2000,
        rkey: mw.rkey,
    };
    p.a.post_send(p.qa, wr(6, read, la(&p, 4096, 1072), true))
        .unwrap();
    p.run(|_, _| 1, 10);
    let wcs = p.wcs_a();
    assert_eq!(
        (wcs[0].opcode, wcs[0].status),
        (WcOpcode::RdmaRead, WcStatus::Success)
    );
    assert_eq!(
        &p.a.mr_bytes(&p.la)[4096..4096 + 1072],
        &p.b.mr_bytes(&mr)[2000..3072]
    );
}

/// Outside the window but inside its region, and a right the window does not grant:
/// NAK Remote Access Error on the wire, REM_ACCESS_ERR at A, B's QP in ERR (class C,
/// rdma_rxe `check_rkey` → RESPST_ERR_RKEY_VIOLATION). Nothing is written.
#[test]
fn type1_window_refuses_outside_its_range_and_rights() {
    for (off, len, access) in [
        (1024 - 1, 2, rw()),            // starts before the window
        (1024 + 2048 - 50, 100, rw()),  // ends after it
        (0, 8, rw()),                   // wholly outside, inside the region
        (1100, 8, Access::REMOTE_READ), // WRITE through a read-only window
    ] {
        let mut p = Pair::new(RtsAttr::default(), all());
        let mr = window_mr(&mut p);
        let mw = bind_type1(&mut p, &mr, 1024, 2048, access);
        let before = p.b.mr_bytes(&mr).to_vec();
        let st = write_through(&mut p, mw.rkey, mr.addr + off, len);
        assert_eq!(st, WcStatus::RemAccessErr, "off {off} len {len}");
        assert!(nakked(&p, NakCode::RemoteAccessError));
        assert_eq!(p.b.qp_state(p.qb), Some(QpState::Err));
        assert_eq!(p.b.mr_bytes(&mr), &before[..], "nothing written");
    }
}

/// Rebinding a type 1 window gives it the next key: the old rkey grants nothing; and a
/// bind of length 0 unbinds it (ibv_bind_mw).
#[test]
fn type1_rebind_retires_the_old_key() {
    let mut p = Pair::new(RtsAttr::default(), all());
    let mr = window_mr(&mut p);
    let mut mw = bind_type1(&mut p, &mr, 0, 4096, rw());
    let old = mw.rkey;
    let unbind = MwBind {
        wr_id: 9,
        signaled: false,
        mr_lkey: mr.lkey,
        addr: 0,
        length: 0,
        access: Access::NONE,
    };
    p.b.bind_mw(p.qb, &mut mw, unbind).unwrap();
    p.run(|_, _| 1, 10);
    assert!(p.wcs_b().is_empty(), "unsignaled bind completes silently");
    assert_ne!(mw.rkey, old);
    assert_eq!(
        write_through(&mut p, old, mr.addr, 8),
        WcStatus::RemAccessErr
    );
}

/// A second RC connection between A and B: (A's QPN, B's QPN).
fn second_connection(p: &mut Pair) -> (u32, u32) {
    let mk = |c: &mut Context, cq| {
        c.create_qp(
            PdId(0),
            QpCaps {
                qp_type: QpType::Rc,
                send_cq: cq,
                recv_cq: cq,
                max_send_wr: 16,
                max_recv_wr: 16,
            },
        )
        .unwrap()
    };
    let qa2 = mk(&mut p.a, p.cqa);
    let qb2 = mk(&mut p.b, p.cqb);
    for (c, q, peer, dest) in [(&mut p.a, qa2, 2u8, qb2), (&mut p.b, qb2, 1u8, qa2)] {
        c.modify_qp_init(q, InitAttr::default()).unwrap();
        c.modify_qp_rtr(
            q,
            RtrAttr {
                remote: Remote {
                    ip: IpAddr::V4(Ipv4Addr::new(10, 0, 0, peer)),
                    mac: [2, 0, 0, 0, 0, peer],
                },
                dest_qpn: dest,
                rq_psn: 0x300,
                path_mtu: Mtu::M1024,
                max_dest_rd_atomic: 4,
                min_rnr_timer: 12,
            },
        )
        .unwrap();
        c.modify_qp_rts(
            q,
            RtsAttr {
                sq_psn: 0x300,
                ..RtsAttr::default()
            },
        )
        .unwrap();
    }
    (qa2, qb2)
}

/// IBTA type 2B (§10.6.7.2; rdma_rxe `rxe_lookup_mw`: `mw->qp != qp`): a type 2 window
/// bound on B's second QP grants access over that connection only; A's WRITE with its
/// rkey over the first connection is NAKed Remote Access Error.
#[test]
fn type2_window_serves_only_the_qp_it_is_bound_to() {
    let mut p = Pair::new(RtsAttr::default(), all());
    let mr = window_mr(&mut p);
    let (qa2, qb2) = second_connection(&mut p);
    let mw = p.b.alloc_mw(PdId(0), MwType::Type2).unwrap();
    let rkey = bind_type2(&mut p, qb2, &mw, &mr, 0, 4096);
    // Over the QP it is bound to: granted.
    p.a.mr_bytes_mut(&p.la)[..64].fill(0x11);
    let op = SendOp::Write {
        remote_addr: mr.addr + 64,
        rkey,
    };
    p.a.post_send(qa2, wr(1, op, la(&p, 0, 64), true)).unwrap();
    p.run(|_, _| 1, 10);
    assert_eq!(p.wcs_a()[0].status, WcStatus::Success);
    assert!(p.b.mr_bytes(&mr)[64..128].iter().all(|&b| b == 0x11));
    // Over another QP: refused.
    assert_eq!(
        write_through(&mut p, rkey, mr.addr + 64, 64),
        WcStatus::RemAccessErr
    );
    assert!(nakked(&p, NakCode::RemoteAccessError));
}

/// IBTA §9.4.1.1 and §10.6.7.2.3: A's SEND with Invalidate goes out as SEND_FIRST,
/// SEND_MIDDLE, SEND_LAST_WITH_INVALIDATE with the rkey in the IETH of the last packet
/// only; B's receive completes with WITH_INV and that rkey (ibv_wc `invalidated_rkey`),
/// and A's next WRITE under the rkey is NAKed Remote Access Error.
#[test]
fn send_with_invalidate_revokes_the_window_and_says_so() {
    let mut p = Pair::new(RtsAttr::default(), all());
    let mr = window_mr(&mut p);
    let mw = p.b.alloc_mw(PdId(0), MwType::Type2).unwrap();
    let qb = p.qb;
    let rkey = bind_type2(&mut p, qb, &mw, &mr, 0, 8192);
    assert_eq!(write_through(&mut p, rkey, mr.addr, 16), WcStatus::Success);
    p.post_recv(1);
    p.a.post_send(
        p.qa,
        wr(2, SendOp::SendWithInv(rkey), la(&p, 0, 2500), true),
    )
    .unwrap();
    p.run(|_, _| 1, 10);
    let sends: Vec<_> = p
        .log
        .iter()
        .filter(|s| s.from_a)
        .map(|s| wire::parse(&s.frame).unwrap())
        .filter(|f| f.bth.opcode() != Opcode::RcWriteOnly)
        .map(|f| (f.bth.opcode(), f.ext.ieth))
        .collect();
    assert_eq!(
        sends,
        [
            (Opcode::RcSendFirst, None),
            (Opcode::RcSendMiddle, None),
            (Opcode::RcSendLastInv, Some(rkey)),
        ]
    );
    let wa = p.wcs_a();
    assert_eq!(
        (wa[0].opcode, wa[0].status),
        (WcOpcode::Send, WcStatus::Success)
    );
    let wb = p.wcs_b();
    assert_eq!(wb.len(), 1);
    assert_eq!(
        (wb[0].wr_id, wb[0].status, wb[0].byte_len),
        (1, WcStatus::Success, 2500)
    );
    assert!(wb[0].flags.contains(WcFlags::WITH_INV));
    assert_eq!(wb[0].invalidated_rkey, Some(rkey));
    assert_eq!(
        write_through(&mut p, rkey, mr.addr, 16),
        WcStatus::RemAccessErr
    );
    assert!(nakked(&p, NakCode::RemoteAccessError));
}

/// A short SEND with Invalidate is one SEND_ONLY_WITH_INVALIDATE packet with the IETH.
#[test]
fn short_send_with_invalidate_is_send_only_with_ieth() {
    let mut p = Pair::new(RtsAttr::default(), all());
    let mr = window_mr(&mut p);
    let mw = p.b.alloc_mw(PdId(0), MwType::Type2).unwrap();
    let qb = p.qb;
    let rkey = bind_type2(&mut p, qb, &mw, &mr, 0, 64);
    p.post_recv(1);
    p.a.post_send(p.qa, wr(2, SendOp::SendWithInv(rkey), la(&p, 0, 10), true))
        .unwrap();
    p.run(|_, _| 1, 10);
    let f = p.log.iter().find(|s| s.from_a).unwrap();
    let f = wire::parse(&f.frame).unwrap();
    assert_eq!(
        (f.bth.opcode(), f.ext.ieth),
        (Opcode::RcSendOnlyInv, Some(rkey))
    );
    let wb = p.wcs_b();
    assert_eq!(wb[0].invalidated_rkey, Some(rkey));
    assert_eq!(wb[0].byte_len, 10);
}

/// A SEND with Invalidate naming a key B's QP may not invalidate: a type 1 window
/// (o10-37.2.26), an ordinary region's rkey, an unknown key, a type 2 window bound to
/// B's other QP. rdma_rxe's class J: the receive completes REM_INV_REQ_ERR and the QP
/// goes to ERR; uroce also NAKs Invalid Request, so A's SEND completes REM_INV_REQ_ERR.
/// The window is not invalidated: it still serves its own QP.
#[test]
fn send_with_invalidate_of_a_key_that_cannot_be_invalidated() {
    for case in 0..4 {
        let mut p = Pair::new(RtsAttr::default(), all());
        let mr = window_mr(&mut p);
        let (qa2, qb2) = second_connection(&mut p);
        let rkey = match case {
            0 => bind_type1(&mut p, &mr, 0, 64, rw()).rkey,
            1 => p.rb.rkey,
            2 => 0x1234_5678,
            _ => {
                let mw = p.b.alloc_mw(PdId(0), MwType::Type2).unwrap();
                bind_type2(&mut p, qb2, &mw, &mr, 0, 64)
            }
        };
        p.post_recv(1);
        p.a.post_send(p.qa, wr(2, SendOp::SendWithInv(rkey), la(&p, 0, 10), true))
            .unwrap();
        p.run(|_, _| 1, 10);
        assert!(nakked(&p, NakCode::InvalidRequest), "case {case}");
        let wb = p.wcs_b();
        assert_eq!((wb[0].wr_id, wb[0].status), (1, WcStatus::RemInvReqErr));
        assert!(!wb[0].flags.contains(WcFlags::WITH_INV));
        assert_eq!(p.b.qp_state(p.qb), Some(QpState::Err));
        assert_eq!(p.wcs_a()[0].status, WcStatus::RemInvReqErr);
        if case == 3 {
            // The window on the other connection still grants access there.
            let op = SendOp::Write {
                remote_addr: mr.addr,
                rkey,
            };
            p.a.post_send(qa2, wr(3, op, la(&p, 0, 8), true)).unwrap();
            p.run(|_, _| 1, 10);
            assert_eq!(p.wcs_a()[0].status, WcStatus::Success);
        }
    }
}

/// IBV_WR_LOCAL_INV: B invalidates its type 2 window; the completion is IBV_WC_LOCAL_INV
/// and A's WRITE under the rkey is refused. Bound again with the next key, the window
/// works again under that key only.
#[test]
fn local_invalidate_revokes_the_window() {
    let mut p = Pair::new(RtsAttr::default(), all());
    let mr = window_mr(&mut p);
    let mw = p.b.alloc_mw(PdId(0), MwType::Type2).unwrap();
    let qb = p.qb;
    let rkey = bind_type2(&mut p, qb, &mw, &mr, 0, 4096);
    let inv = SendOp::LocalInv { rkey };
    p.b.post_send(p.qb, wr(4, inv, Sge::default(), true))
        .unwrap();
    p.run(|_, _| 1, 10);
    let wb = p.wcs_b();
    assert_eq!(
        (wb[0].wr_id, wb[0].opcode, wb[0].status),
        (4, WcOpcode::LocalInv, WcStatus::Success)
    );
    assert!(
        p.log.iter().all(|s| s.from_a),
        "LOCAL_INV puts nothing on the wire"
    );
    let again = Mw { rkey, ..mw };
    let qb = p.qb;
    let rkey2 = bind_type2(&mut p, qb, &again, &mr, 0, 4096);
    assert_eq!(rkey2, inc_rkey(rkey));
    assert_eq!(write_through(&mut p, rkey2, mr.addr, 8), WcStatus::Success);
    assert_eq!(
        write_through(&mut p, rkey, mr.addr, 8),
        WcStatus::RemAccessErr
    );
}

/// rdma_rxe `rxe_do_local_ops`: a LOCAL_INV that fails (a type 1 window, o10-37.2.26; a
/// key no window has) completes IBV_WC_LOC_QP_OP_ERR in order, the QP goes to ERR and
/// the request behind it is flushed without reaching the wire.
#[test]
fn local_invalidate_of_a_key_that_cannot_be_invalidated() {
    for type1 in [true, false] {
        let mut p = Pair::new(RtsAttr::default(), all());
        let mr = window_mr(&mut p);
        let rkey = if type1 {
            bind_type1(&mut p, &mr, 0, 64, rw()).rkey
        } else {
            0x4242_4242
        };
        let n = p.log.len();
        p.b.post_send(p.qb, wr(1, SendOp::LocalInv { rkey }, Sge::default(), true))
            .unwrap();
        p.b.post_send(p.qb, wr(2, SendOp::Send, Sge::default(), true))
            .unwrap();
        p.run(|_, _| 1, 10);
        let wb = p.wcs_b();
        let got: Vec<_> = wb.iter().map(|w| (w.wr_id, w.opcode, w.status)).collect();
        assert_eq!(
            got,
            [
                (1, WcOpcode::LocalInv, WcStatus::LocQpOpErr),
                (2, WcOpcode::Send, WcStatus::WrFlushErr)
            ]
        );
        assert_eq!(p.b.qp_state(p.qb), Some(QpState::Err));
        assert_eq!(p.log.len(), n, "nothing on the wire");
    }
}

/// rdma_rxe `rxe_check_bind_mw` through a BIND_MW work request: each failure completes
/// IBV_WC_MW_BIND_ERR (`rxe_do_local_ops`) and takes the QP to ERR: a region without
/// MW_BIND (C10-73), a writable window on a region without LOCAL_WRITE (C10-74), a range
/// outside the region (C10-75), a window already bound (o10-37.2.30), length 0
/// (o10-37.2.40), a window of another PD than the QP's (C10-72).
#[test]
fn bind_errors_complete_mw_bind_err() {
    for case in 0..6 {
        let mut p = Pair::new(RtsAttr::default(), all());
        let mr = window_mr(&mut p);
        let plain =
            p.b.reg_mr(PdId(0), vec![0; 64], Access::LOCAL_WRITE)
                .unwrap();
        let ro = p.b.reg_mr(PdId(0), vec![0; 64], Access::MW_BIND).unwrap();
        let other_pd = p.b.alloc_pd();
        let mw = p.b.alloc_mw(PdId(0), MwType::Type2).unwrap();
        let op = match case {
            0 => bind_op(&mw, &plain, 0, 8, rw()),
            1 => bind_op(&mw, &ro, 0, 8, rw()),
            2 => bind_op(&mw, &mr, 16384 - 8, 16, rw()),
            3 => {
                let qb = p.qb;
                let rkey = bind_type2(&mut p, qb, &mw, &mr, 0, 8);
                bind_op(&Mw { rkey, ..mw }, &mr, 0, 8, rw())
            }
            4 => bind_op(&mw, &mr, 0, 0, rw()),
            _ => {
                let elsewhere = p.b.alloc_mw(other_pd, MwType::Type2).unwrap();
                bind_op(&elsewhere, &mr, 0, 8, rw())
            }
        };
        p.b.post_send(p.qb, wr(1, op, Sge::default(), true))
            .unwrap();
        p.b.post_send(p.qb, wr(2, SendOp::Send, Sge::default(), false))
            .unwrap();
        p.run(|_, _| 1, 10);
        let got: Vec<_> = p
            .wcs_b()
            .iter()
            .map(|w| (w.wr_id, w.opcode, w.status))
            .collect();
        assert_eq!(
            got,
            [
                (1, WcOpcode::BindMw, WcStatus::MwBindErr),
                (2, WcOpcode::Send, WcStatus::WrFlushErr)
            ],
            "case {case}"
        );
        assert_eq!(p.b.qp_state(p.qb), Some(QpState::Err));
    }
}

/// The same checks through `bind_mw` (type 1): a region without MW_BIND completes
/// IBV_WC_MW_BIND_ERR.
#[test]
fn type1_bind_error_completes_mw_bind_err() {
    let mut p = Pair::new(RtsAttr::default(), all());
    let plain =
        p.b.reg_mr(PdId(0), vec![0; 64], Access::LOCAL_WRITE)
            .unwrap();
    let mut mw = p.b.alloc_mw(PdId(0), MwType::Type1).unwrap();
    let bind = MwBind {
        wr_id: 3,
        signaled: false,
        mr_lkey: plain.lkey,
        addr: plain.addr,
        length: 8,
        access: Access::REMOTE_READ,
    };
    p.b.bind_mw(p.qb, &mut mw, bind).unwrap();
    p.run(|_, _| 1, 10);
    let wb = p.wcs_b();
    assert_eq!(
        (wb[0].wr_id, wb[0].opcode, wb[0].status),
        (3, WcOpcode::BindMw, WcStatus::MwBindErr)
    );
    assert_eq!(p.b.qp_state(p.qb), Some(QpState::Err));
}

/// Refused at post time with EINVAL: `bind_mw` of a type 2 window (ibverbs binds type 2
/// with a work request only), a BIND_MW work request naming a type 1 window, and the
/// memory-window operations on UC (no SEND with Invalidate opcode there).
#[test]
fn window_type_mismatches_are_refused_at_post() {
    let mut p = Pair::new(RtsAttr::default(), all());
    let mr = window_mr(&mut p);
    let mut t2 = p.b.alloc_mw(PdId(0), MwType::Type2).unwrap();
    let t1 = p.b.alloc_mw(PdId(0), MwType::Type1).unwrap();
    let bind = MwBind {
        wr_id: 1,
        signaled: true,
        mr_lkey: mr.lkey,
        addr: mr.addr,
        length: 8,
        access: rw(),
    };
    let rkey = t2.rkey;
    let e = p.b.bind_mw(p.qb, &mut t2, bind).unwrap_err();
    assert_eq!(e.errno(), libc::EINVAL);
    assert_eq!(t2.rkey, rkey, "a refused bind leaves the key");
    let e =
        p.b.post_send(
            p.qb,
            wr(1, bind_op(&t1, &mr, 0, 8, rw()), Sge::default(), true),
        )
        .unwrap_err();
    assert_eq!(e.errno(), libc::EINVAL);
    p.run(|_, _| 1, 10);
    assert!(p.wcs_b().is_empty());
    assert_eq!(p.b.qp_state(p.qb), Some(QpState::Rts));
    // UC has no SEND with Invalidate opcode; uroce runs the local operations on RC only.
    let cq = p.b.create_cq(16).unwrap();
    let uc =
        p.b.create_qp(
            PdId(0),
            QpCaps {
                qp_type: QpType::Uc,
                send_cq: cq,
                recv_cq: cq,
                max_send_wr: 4,
                max_recv_wr: 4,
            },
        )
        .unwrap();
    p.b.modify_qp_init(uc, InitAttr::default()).unwrap();
    let rtr = RtrAttr {
        remote: Remote {
            ip: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)),
            mac: [2, 0, 0, 0, 0, 1],
        },
        dest_qpn: 0x99,
        rq_psn: 0,
        path_mtu: Mtu::M1024,
        max_dest_rd_atomic: 0,
        min_rnr_timer: 0,
    };
    p.b.modify_qp_rtr(uc, rtr).unwrap();
    p.b.modify_qp_rts(uc, RtsAttr::default()).unwrap();
    let t2b = p.b.alloc_mw(PdId(0), MwType::Type2).unwrap();
    for op in [
        SendOp::SendWithInv(1),
        SendOp::LocalInv { rkey: 1 },
        bind_op(&t2b, &mr, 0, 8, rw()),
    ] {
        let e =
            p.b.post_send(uc, wr(1, op, Sge::default(), true))
                .unwrap_err();
        assert_eq!(e.errno(), libc::EINVAL, "{op:?}");
    }
}

/// IBTA §10.6.7.2.6 (rdma_rxe `rxe_dereg_mr` with `num_mw`): a region that a window is
/// bound to cannot be deregistered: EBUSY, and it stays usable through the window;
/// once the window is deallocated, deregistration succeeds, and the window's rkey
/// grants nothing (deallocated windows never grant access again).
#[test]
fn dereg_of_a_region_with_a_bound_window_is_ebusy() {
    let mut p = Pair::new(RtsAttr::default(), all());
    let mr = window_mr(&mut p);
    let mw = bind_type1(&mut p, &mr, 0, 64, rw());
    let e = p.b.dereg_mr(&mr).unwrap_err();
    assert_eq!(
        e,
        VerbsError::Reg(RegError::RegionInUse(
            "memory windows are bound to the region"
        ))
    );
    assert_eq!(e.errno(), libc::EBUSY);
    assert_eq!(
        write_through(&mut p, mw.rkey, mr.addr, 8),
        WcStatus::Success
    );
    assert_eq!(p.b.dealloc_mw(&mw), Ok(()));
    assert_eq!(p.b.dealloc_mw(&mw).unwrap_err().errno(), libc::EINVAL);
    assert_eq!(p.b.dereg_mr(&mr).unwrap().map(|v| v.len()), Some(16384));
    assert_eq!(
        write_through(&mut p, mw.rkey, mr.addr, 8),
        WcStatus::RemAccessErr
    );
}

/// A deallocated window never grants access again, bound region or not.
#[test]
fn deallocated_window_grants_nothing() {
    let mut p = Pair::new(RtsAttr::default(), all());
    let mr = window_mr(&mut p);
    let mw = p.b.alloc_mw(PdId(0), MwType::Type2).unwrap();
    let qb = p.qb;
    let rkey = bind_type2(&mut p, qb, &mw, &mr, 0, 64);
    p.b.dealloc_mw(&mw).unwrap();
    assert_eq!(
        write_through(&mut p, rkey, mr.addr, 8),
        WcStatus::RemAccessErr
    );
    assert!(nakked(&p, NakCode::RemoteAccessError));
}

/// Local operations complete in order with the other send requests (rdma_rxe runs them
/// when the requester reaches them; ibverbs completes the send queue in order): a SEND,
/// a BIND_MW and a LOCAL_INV posted in that order complete SEND, BIND_MW, LOCAL_INV,
/// and only the SEND goes on the wire.
#[test]
fn local_operations_complete_in_order_with_sends() {
    let mut p = Pair::new(RtsAttr::default(), all());
    let mr = window_mr(&mut p);
    let sge = Sge {
        addr: p.la.addr,
        length: 64,
        lkey: p.la.lkey,
    };
    p.a.post_recv(p.qa, RecvWr { wr_id: 50, sge }).unwrap();
    let mw = p.b.alloc_mw(PdId(0), MwType::Type2).unwrap();
    let rkey = inc_rkey(mw.rkey);
    p.b.post_send(p.qb, wr(1, SendOp::Send, Sge::default(), true))
        .unwrap();
    p.b.post_send(
        p.qb,
        wr(2, bind_op(&mw, &mr, 0, 64, rw()), Sge::default(), true),
    )
    .unwrap();
    p.b.post_send(p.qb, wr(3, SendOp::LocalInv { rkey }, Sge::default(), true))
        .unwrap();
    p.run(|_, _| 1, 10);
    let got: Vec<_> = p
        .wcs_b()
        .iter()
        .map(|w| (w.wr_id, w.opcode, w.status))
        .collect();
    assert_eq!(
        got,
        [
            (1, WcOpcode::Send, WcStatus::Success),
            (2, WcOpcode::BindMw, WcStatus::Success),
            (3, WcOpcode::LocalInv, WcStatus::Success),
        ]
    );
    let from_b: Vec<_> = p
        .log
        .iter()
        .filter(|s| !s.from_a)
        .map(|s| s.opcode())
        .collect();
    assert_eq!(from_b, [Opcode::RcSendOnly]);
    assert_eq!(p.wcs_a()[0].wr_id, 50, "A received the SEND");
    assert_eq!(
        write_through(&mut p, rkey, mr.addr, 8),
        WcStatus::RemAccessErr
    );
}

/// A failing local operation behind a request still waiting for its ACK completes after
/// it, in order (rdma_rxe: the requester marks the WQE in error, the completer completes
/// the send queue in order, then `rxe_qp_error`): SEND success, BIND_MW MW_BIND_ERR, the
/// SEND behind it WR_FLUSH_ERR and never on the wire.
#[test]
fn failed_bind_behind_an_outstanding_send_completes_in_order() {
    let mut p = Pair::new(RtsAttr::default(), all());
    let plain =
        p.b.reg_mr(PdId(0), vec![0; 64], Access::LOCAL_WRITE)
            .unwrap();
    let sge = Sge {
        addr: p.la.addr,
        length: 64,
        lkey: p.la.lkey,
    };
    p.a.post_recv(p.qa, RecvWr { wr_id: 50, sge }).unwrap();
    let mw = p.b.alloc_mw(PdId(0), MwType::Type2).unwrap();
    p.b.post_send(p.qb, wr(1, SendOp::Send, Sge::default(), true))
        .unwrap();
    let bad = bind_op(&mw, &plain, 0, 8, rw());
    p.b.post_send(p.qb, wr(2, bad, Sge::default(), true))
        .unwrap();
    p.b.post_send(p.qb, wr(3, SendOp::Send, Sge::default(), true))
        .unwrap();
    // B's SEND goes out; its ACK is not in yet: the failed bind waits for it.
    let mut buf = vec![0u8; 5000];
    let n = p.b.poll_frame(p.now, &mut buf).unwrap();
    assert!(
        p.b.poll_frame(p.now, &mut buf).is_none(),
        "nothing behind the bind"
    );
    assert!(
        p.wcs_b().is_empty(),
        "the bind waits for the SEND ahead of it"
    );
    assert_eq!(p.b.qp_state(p.qb), Some(QpState::Rts));
    p.a.handle_frame(p.now, &buf[..n]).unwrap();
    p.run(|_, _| 1, 10);
    let got: Vec<_> = p
        .wcs_b()
        .iter()
        .map(|w| (w.wr_id, w.opcode, w.status))
        .collect();
    assert_eq!(
        got,
        [
            (1, WcOpcode::Send, WcStatus::Success),
            (2, WcOpcode::BindMw, WcStatus::MwBindErr),
            (3, WcOpcode::Send, WcStatus::WrFlushErr),
        ]
    );
    assert_eq!(p.b.qp_state(p.qb), Some(QpState::Err));
    assert!(p.log.iter().all(|s| s.from_a), "B sent nothing more");
}

/// A QP moved to RESET keeps none of its type 2 windows' bindings: brought up again
/// (perhaps towards another peer), the old rkey must grant nothing. Unbound, the window
/// no longer holds its region, which may then be deregistered.
#[test]
fn reset_unbinds_the_qps_type2_windows() {
    use uroce::verbs::{QpAttr, QpAttrMask, QpState};
    let mut p = Pair::new(RtsAttr::default(), all());
    let mr = window_mr(&mut p);
    let mw = p.b.alloc_mw(PdId(0), MwType::Type2).unwrap();
    let qb = p.qb;
    let rkey = bind_type2(&mut p, qb, &mw, &mr, 0, 64);
    assert_eq!(write_through(&mut p, rkey, mr.addr, 8), WcStatus::Success);
    assert_eq!(p.b.dereg_mr(&mr).unwrap_err().errno(), libc::EBUSY);
    let reset = QpAttr {
        qp_state: QpState::Reset,
        ..QpAttr::default()
    };
    p.b.modify_qp(qb, &reset, QpAttrMask::STATE).unwrap();
    assert!(
        p.b.dereg_mr(&mr).is_ok(),
        "the window no longer holds the region"
    );
}
