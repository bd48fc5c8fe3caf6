//! Work-request flags and limits, packet by packet: IBV_SEND_FENCE, IBV_SEND_INLINE with
//! `max_inline_data`, `sq_sig_all`, `max_rd_atomic` on the requester and
//! `max_dest_rd_atomic` on the responder, and the errno of each post-time refusal
//! (ibverbs / rdma_rxe: ENOMEM for a full queue, EINVAL for a request over a cap).

mod common;
use common::*;

use uroce::verbs::{VerbsError, MAX_INLINE_DATA};

fn read_op(p: &Pair, off: u64) -> SendOp {
    SendOp::Read {
        remote_addr: p.rb.addr + off,
        rkey: p.rb.rkey,
    }
}

fn sge(p: &Pair, off: u64, len: u32) -> Sge {
    Sge {
        addr: p.la.addr + off,
        length: len,
        lkey: p.la.lkey,
    }
}

/// Index in the log of the first frame matching `f`.
fn first(p: &Pair, f: impl Fn(&Seen) -> bool) -> usize {
    p.log.iter().position(f).unwrap()
}

/// rdma_rxe's `rxe_wqe_is_fenced`: a request with IBV_SEND_FENCE does not start while a
/// READ or atomic posted before it waits for its response. A WRITE fenced behind a
/// 4-packet READ goes on the wire only after the READ's last response came back;
/// unfenced, it goes straight behind the READ request.
#[test]
fn fenced_write_waits_for_the_read_response() {
    for fenced in [true, false] {
        let mut p = Pair::new(RtsAttr::default(), all());
        let read = wr(1, read_op(&p, 0), sge(&p, 0, 4096), true);
        p.a.post_send(p.qa, read).unwrap();
        let write = wr(2, write_op(&p, 8192), sge(&p, 8192, 100), true);
        let flags = if fenced {
            SendFlags::FENCE
        } else {
            SendFlags::NONE
        };
        p.a.post_send_with(p.qa, write, flags).unwrap();
        p.run(|_, _| 1, 10);
        let w = first(&p, |s| s.from_a && s.opcode() == Opcode::RcWriteOnly);
        let req = first(&p, |s| s.from_a && s.opcode() == Opcode::RcReadRequest);
        let last = first(&p, |s| {
            !s.from_a && s.opcode() == Opcode::RcReadResponseLast
        });
        if fenced {
            assert!(
                w > last,
                "fenced WRITE at {w} before READ response at {last}"
            );
        } else {
            assert_eq!(w, req + 1, "unfenced WRITE goes right behind the READ");
        }
        let wcs = p.wcs_a();
        assert_eq!(wcs.len(), 2);
        assert!(wcs.iter().all(|c| c.status == WcStatus::Success));
        assert_eq!((wcs[0].wr_id, wcs[1].wr_id), (1, 2));
    }
}

/// A fence holds through a READ's recovery: the first response packet after the READ's
/// FIRST is lost, so the requester re-requests the READ from the missing PSN (rdma_rxe's
/// completer: a READ response out of sequence is a retry from the last one received).
/// The fenced WRITE starts only once the re-requested responses have all come back (not
/// after the original, incomplete burst), and the READ's bytes are whole.
#[test]
fn fence_holds_through_a_read_with_lost_responses() {
    let mut p = Pair::new(RtsAttr::default(), all());
    for (i, b) in p.b.mr_bytes_mut(&p.rb)[..4096].iter_mut().enumerate() {
        *b = (i % 251) as u8;
    }
    let read = wr(1, read_op(&p, 0), sge(&p, 0, 4096), true);
    p.a.post_send(p.qa, read).unwrap();
    let write = wr(2, write_op(&p, 8192), sge(&p, 8192, 100), true);
    p.a.post_send_with(p.qa, write, SendFlags::FENCE).unwrap();
    let mut dropped = false;
    p.run(
        |s, _| {
            if !dropped && !s.from_a && s.opcode() == Opcode::RcReadResponseMiddle {
                dropped = true;
                return 0;
            }
            1
        },
        20,
    );
    assert!(dropped);
    let requests: Vec<usize> = (0..p.log.len())
        .filter(|&i| p.log[i].from_a && p.log[i].opcode() == Opcode::RcReadRequest)
        .collect();
    assert!(
        requests.len() >= 2,
        "the READ was re-requested: {requests:?}"
    );
    let w = first(&p, |s| s.from_a && s.opcode() == Opcode::RcWriteOnly);
    let last_response = (0..p.log.len())
        .filter(|&i| !p.log[i].from_a && p.log[i].opcode() == Opcode::RcReadResponseLast)
        .max()
        .unwrap();
    assert!(
        w > last_response && w > requests[requests.len() - 1],
        "fenced WRITE at {w} before the recovered READ (last response at {last_response})"
    );
    let wcs = p.wcs_a();
    assert_eq!(
        wcs.iter().map(|c| (c.wr_id, c.status)).collect::<Vec<_>>(),
        [(1, WcStatus::Success), (2, WcStatus::Success)]
    );
    let got = &p.a.mr_bytes(&p.la)[..4096];
    assert!(got.iter().enumerate().all(|(i, &b)| b == (i % 251) as u8));
}

/// A fence waits for atomics too, and only for READ / atomic: a fenced WRITE behind a
/// WRITE is not held.
#[test]
fn fence_waits_for_atomics_not_for_writes() {
    let mut p = Pair::new(RtsAttr::default(), all());
    let fa = SendOp::FetchAdd {
        remote_addr: p.rb.addr + 64,
        rkey: p.rb.rkey,
        add: 1,
    };
    p.a.post_send(p.qa, wr(1, fa, sge(&p, 0, 8), true)).unwrap();
    let w = wr(2, write_op(&p, 4096), sge(&p, 4096, 10), true);
    p.a.post_send_with(p.qa, w, SendFlags::FENCE).unwrap();
    let w = wr(3, write_op(&p, 8192), sge(&p, 8192, 10), true);
    p.a.post_send_with(p.qa, w, SendFlags::FENCE).unwrap();
    p.run(|_, _| 1, 10);
    let writes: Vec<usize> = (0..p.log.len())
        .filter(|&i| p.log[i].from_a && p.log[i].opcode() == Opcode::RcWriteOnly)
        .collect();
    let ack = first(&p, |s| !s.from_a && s.opcode() == Opcode::RcAtomicAck);
    assert_eq!(writes.len(), 2);
    assert!(
        writes[0] > ack,
        "fenced WRITE before the ATOMIC ACKNOWLEDGE"
    );
    // The second fenced WRITE follows the first at once: nothing to wait for.
    assert_eq!(writes[1], writes[0] + 1);
    assert_eq!(p.wcs_a().len(), 3);
}

/// IBV_SEND_INLINE: the data is copied when the request is posted. The application
/// overwrites its buffer right after posting; the SEND and the WRITE carry the bytes it
/// had at post time. The lkey is not looked at (a bogus one passes), as in ibverbs.
#[test]
fn inline_data_is_copied_at_post_time() {
    let ex = QpInitEx {
        max_inline_data: 64,
        sq_sig_all: false,
        ..QpInitEx::default()
    };
    let mut p = Pair::with_ex(ex);
    let la = p.la;
    p.a.mr_bytes_mut(&la)[..64].copy_from_slice(&[0xab; 64]);
    p.post_recv(0);
    let mut s = sge(&p, 0, 64);
    s.lkey = 0xdead_beef;
    p.a.post_send_with(p.qa, wr(1, SendOp::Send, s, true), SendFlags::INLINE)
        .unwrap();
    let w = wr(2, write_op(&p, 1000), s, true);
    p.a.post_send_with(p.qa, w, SendFlags::INLINE).unwrap();
    // The application reuses its buffer before anything went on the wire.
    p.a.mr_bytes_mut(&la)[..64].copy_from_slice(&[0x11; 64]);
    p.run(|_, _| 1, 10);
    for op in [Opcode::RcSendOnly, Opcode::RcWriteOnly] {
        let sent = p.sent(true, op);
        assert_eq!(sent.len(), 1);
        let pkt = wire::parse(&sent[0].frame).unwrap();
        assert_eq!(
            pkt.payload,
            &[0xab; 64][..],
            "{op:?} carries the posted bytes"
        );
    }
    let recv = p.recv;
    assert_eq!(&p.b.mr_bytes(&recv)[..64], &[0xab; 64][..]);
    let rb = p.rb;
    assert_eq!(&p.b.mr_bytes(&rb)[1000..1064], &[0xab; 64][..]);
    let wcs = p.wcs_a();
    assert_eq!(wcs.len(), 2);
    assert!(wcs
        .iter()
        .all(|c| c.status == WcStatus::Success && c.byte_len == 64));
}

/// Inline requests reuse the QP's copy slots once the ones before them completed: three
/// full send queues of inline WRITEs, each with its own bytes, all land as posted.
#[test]
fn inline_slots_are_reused_in_order() {
    let ex = QpInitEx {
        max_inline_data: 32,
        sq_sig_all: true,
        ..QpInitEx::default()
    };
    let mut p = Pair::with_ex(ex);
    let la = p.la;
    let mut id = 0u64;
    for _round in 0..3 {
        for _ in 0..64 {
            p.a.mr_bytes_mut(&la)[..32].fill(id as u8);
            let w = wr(id, write_op(&p, id * 32), sge(&p, 0, 32), false);
            p.a.post_send_with(p.qa, w, SendFlags::INLINE).unwrap();
            id += 1;
        }
        p.run(|_, _| 1, 10);
        assert_eq!(p.wcs_a().len(), 64);
    }
    let rb = p.rb;
    for k in 0..id {
        let at = (k * 32) as usize;
        assert_eq!(
            &p.b.mr_bytes(&rb)[at..at + 32],
            &[k as u8; 32][..],
            "WR {k}"
        );
    }
}

/// `sq_sig_all`: unsignaled requests complete as if signaled; without it they do not.
#[test]
fn sq_sig_all_completes_every_request() {
    for sig_all in [true, false] {
        let ex = QpInitEx {
            max_inline_data: 0,
            sq_sig_all: sig_all,
            ..QpInitEx::default()
        };
        let mut p = Pair::with_ex(ex);
        for i in 0..3 {
            let w = wr(i, write_op(&p, i * 100), sge(&p, 0, 100), false);
            p.a.post_send(p.qa, w).unwrap();
        }
        p.run(|_, _| 1, 10);
        let wcs = p.wcs_a();
        if sig_all {
            let ids: Vec<u64> = wcs.iter().map(|c| c.wr_id).collect();
            assert_eq!(ids, [0, 1, 2]);
            assert!(wcs.iter().all(|c| c.status == WcStatus::Success));
        } else {
            assert!(wcs.is_empty());
        }
    }
}

/// READ requests whose responses have not all come back, at each point of the log.
fn reads_outstanding(p: &Pair) -> Vec<i32> {
    let mut n = 0;
    let mut v = Vec::new();
    for s in &p.log {
        match (s.from_a, s.opcode()) {
            (true, Opcode::RcReadRequest) => n += 1,
            (false, Opcode::RcReadResponseLast | Opcode::RcReadResponseOnly) => n -= 1,
            _ => {}
        }
        v.push(n);
    }
    v
}

/// `max_rd_atomic` = 1: one READ on the wire at a time, the next request waits for the
/// previous one's last response; with 4, three READs go out back to back.
#[test]
fn max_rd_atomic_limits_reads_in_flight() {
    for (max, peak) in [(1u8, 1), (4, 3)] {
        let rts = RtsAttr {
            max_rd_atomic: max,
            ..RtsAttr::default()
        };
        let mut p = Pair::new(rts, all());
        for i in 0..3u64 {
            let r = wr(i, read_op(&p, i * 2048), sge(&p, i * 2048, 2048), true);
            p.a.post_send(p.qa, r).unwrap();
        }
        p.run(|_, _| 1, 10);
        let o = reads_outstanding(&p);
        assert_eq!(o.iter().max(), Some(&peak), "max_rd_atomic {max}: {o:?}");
        assert_eq!(p.sent(true, Opcode::RcReadRequest).len(), 3);
        let wcs = p.wcs_a();
        assert_eq!(wcs.len(), 3);
        assert!(wcs.iter().all(|c| c.status == WcStatus::Success));
    }
}

/// `max_dest_rd_atomic` = 1 at the responder, 4 at the requester: the second READ
/// arrives while the first still holds the responder's one resource and is NAKed
/// Invalid Request (uroce's responder, as the IBTA has a responder refuse requests over
/// the resources it advertised;
/// rdma_rxe instead recycles its oldest resource); the requester completes the second
/// READ with REM_INV_REQ_ERR and goes to ERR.
#[test]
fn max_dest_rd_atomic_naks_the_excess_read() {
    let rts = RtsAttr {
        max_rd_atomic: 4,
        ..RtsAttr::default()
    };
    let mut p = Pair::custom(rts, all(), A_PSN, InitAttr::default(), 1, Mtu::M1024);
    for i in 0..2u64 {
        let r = wr(i, read_op(&p, i * 512), sge(&p, i * 512, 512), true);
        p.a.post_send(p.qa, r).unwrap();
    }
    p.run(|_, _| 1, 10);
    assert_eq!(p.sent(true, Opcode::RcReadRequest).len(), 2);
    let naks: Vec<_> = p
        .sent(false, Opcode::RcAck)
        .into_iter()
        .filter(|s| matches!(s.syndrome(), Some(Syndrome::Nak(NakCode::InvalidRequest))))
        .map(|s| s.psn())
        .collect();
    assert_eq!(naks, [psn_add(A_PSN, 1)]);
    let wcs = p.wcs_a();
    assert_eq!(wcs[0].wr_id, 0);
    assert_eq!(wcs[0].status, WcStatus::Success);
    assert_eq!(wcs[1].wr_id, 1);
    assert_eq!(wcs[1].status, WcStatus::RemInvReqErr);
    assert_eq!(p.a.qp_state(p.qa), Some(QpState::Err));
}

/// Every post-time refusal with the errno ibverbs gives it: a full send or receive
/// queue is ENOMEM (rdma_rxe's `post_one_send` / `post_one_recv`), inline data over
/// `max_inline_data` EINVAL (`validate_send_wr`), a `max_inline_data` over the device's
/// limit EINVAL at creation (`rxe_qp_chk_cap`), an atomic without its 8 bytes EINVAL.
/// A refused request leaves nothing queued and nothing on the wire.
#[test]
fn post_errors_carry_ibverbs_errno() {
    let ex = QpInitEx {
        max_inline_data: 16,
        sq_sig_all: false,
        ..QpInitEx::default()
    };
    let mut p = Pair::with_ex(ex);
    // Inline over the cap: EINVAL, on READ too (checked before the flag is ignored).
    let s = sge(&p, 0, 17);
    let e =
        p.a.post_send_with(p.qa, wr(1, SendOp::Send, s, true), SendFlags::INLINE)
            .unwrap_err();
    assert!(matches!(e, VerbsError::InvalidWr(_)));
    assert_eq!(e.errno(), libc::EINVAL);
    let e =
        p.a.post_send_with(p.qa, wr(1, read_op(&p, 0), s, true), SendFlags::INLINE)
            .unwrap_err();
    assert_eq!(e.errno(), libc::EINVAL);
    // Exactly the cap passes.
    let s16 = sge(&p, 0, 16);
    p.a.post_send_with(p.qa, wr(2, SendOp::Send, s16, true), SendFlags::INLINE)
        .unwrap();
    // An atomic with a 4-byte buffer.
    let fa = SendOp::FetchAdd {
        remote_addr: p.rb.addr,
        rkey: p.rb.rkey,
        add: 1,
    };
    let e =
        p.a.post_send(p.qa, wr(3, fa, sge(&p, 0, 4), true))
            .unwrap_err();
    assert_eq!(e.errno(), libc::EINVAL);
    // Fill the send queue (64 deep, one posted): the 65th is ENOMEM, inline or not;
    // `send_queue_room` counts down to 0 as it fills (what `ibv_wr_complete` checks).
    assert_eq!(p.a.send_queue_room(p.qa), Some(63));
    for i in 0..63 {
        let w = wr(10 + i, write_op(&p, 0), sge(&p, 0, 8), true);
        p.a.post_send(p.qa, w).unwrap();
    }
    assert_eq!(p.a.send_queue_room(p.qa), Some(0));
    assert_eq!(p.a.send_queue_room(0xdead), None);
    let w = wr(99, write_op(&p, 0), sge(&p, 0, 8), true);
    let e = p.a.post_send(p.qa, w).unwrap_err();
    assert!(matches!(e, VerbsError::QueueFull("send")));
    assert_eq!(e.errno(), libc::ENOMEM);
    let e = p.a.post_send_with(p.qa, w, SendFlags::INLINE).unwrap_err();
    assert_eq!(e.errno(), libc::ENOMEM);
    // Receive queue: 64 deep.
    for i in 0..64 {
        let r = RecvWr {
            wr_id: i,
            sge: Sge {
                addr: p.recv.addr,
                length: 64,
                lkey: p.recv.lkey,
            },
        };
        p.b.post_recv(p.qb, r).unwrap();
    }
    let r = RecvWr {
        wr_id: 64,
        sge: Sge {
            addr: p.recv.addr,
            length: 64,
            lkey: p.recv.lkey,
        },
    };
    let e = p.b.post_recv(p.qb, r).unwrap_err();
    assert_eq!(e.errno(), libc::ENOMEM);
    // What was accepted all goes through; what was refused never appears.
    p.run(|_, _| 1, 10);
    let wcs = p.wcs_a();
    assert_eq!(wcs.len(), 64);
    assert!(wcs.iter().all(|c| c.status == WcStatus::Success));
    assert!(wcs.iter().all(|c| ![1, 3, 99].contains(&c.wr_id)));
    // Creation: max_inline_data over the device limit.
    let (mut c, cq, _) = ctx(3);
    let caps = QpCaps {
        qp_type: uroce::verbs::QpType::Rc,
        send_cq: cq,
        recv_cq: cq,
        max_send_wr: 4,
        max_recv_wr: 4,
    };
    let over = QpInitEx {
        max_inline_data: MAX_INLINE_DATA + 1,
        sq_sig_all: false,
        ..QpInitEx::default()
    };
    let e = c.create_qp_ex(uroce::mem::PdId(0), caps, over).unwrap_err();
    assert_eq!(e.errno(), libc::EINVAL);
    let max = QpInitEx {
        max_inline_data: MAX_INLINE_DATA,
        sq_sig_all: false,
        ..QpInitEx::default()
    };
    c.create_qp_ex(uroce::mem::PdId(0), caps, max).unwrap();
}

/// Inline data must lie in the application's memory: an address no region holds is
/// refused at post time (EINVAL) rather than read.
#[test]
fn inline_from_unknown_memory_is_refused() {
    let ex = QpInitEx {
        max_inline_data: 64,
        sq_sig_all: false,
        ..QpInitEx::default()
    };
    let mut p = Pair::with_ex(ex);
    let s = Sge {
        addr: 8,
        length: 16,
        lkey: 0,
    };
    let e =
        p.a.post_send_with(p.qa, wr(1, SendOp::Send, s, true), SendFlags::INLINE)
            .unwrap_err();
    assert_eq!(e.errno(), libc::EINVAL);
    p.run(|_, _| 1, 10);
    assert!(p.log.is_empty());
    assert_eq!(p.a.qp_state(p.qa), Some(QpState::Rts));
}
