//! Responder validation, packet by packet (IBTA Vol. 1 §9.7.5.1 and the responder error
//! classes of §9.9.3; rdma_rxe's check_op_seq / check_length / check_type_state for
//! behaviour): hand-made requests go to B's QP, and each test checks what B sends back
//! (NAK code and PSN), B's QP state after, and B's completions (status, byte_len).

mod common;
use common::*;
use uroce::transport::WcOpcode;
use uroce::verbs::QpType;

const MTU: usize = 1024;

fn req(p: &Pair, op: Opcode, k: u32) -> BthRepr {
    BthRepr::new(op, p.qb, psn_add(A_PSN, k))
}

fn reth(p: &Pair, len: u32) -> ExtHeaders {
    ExtHeaders {
        reth: Some(RethRepr {
            va: p.rb.addr,
            rkey: p.rb.rkey,
            len,
        }),
        ..ExtHeaders::default()
    }
}

/// B's answers: (opcode, PSN, syndrome).
fn answers(p: &mut Pair) -> Vec<(Opcode, u32, Option<Syndrome>)> {
    drain(&mut p.b, p.now)
        .iter()
        .map(|f| {
            let pk = wire::parse(f).unwrap();
            (pk.bth.opcode(), pk.bth.psn(), pk.ext.aeth.map(|a| a.kind()))
        })
        .collect()
}

fn nak_inv(psn: u32) -> (Opcode, u32, Option<Syndrome>) {
    (
        Opcode::RcAck,
        psn,
        Some(Syndrome::Nak(NakCode::InvalidRequest)),
    )
}

/// Rewrites a frame's opcode byte and recomputes its ICRC (a reserved opcode cannot be
/// emitted through the opcode table).
fn with_opcode(mut f: Vec<u8>, opcode: u8) -> Vec<u8> {
    const ROCE: usize = 14 + 20 + 8;
    f[ROCE] = opcode;
    let n = f.len();
    let icrc = wire::icrc::compute(&f[14..34], &f[34..42], &f[ROCE..n - 4]);
    f[n - 4..].copy_from_slice(&icrc.to_le_bytes());
    assert!(wire::parse(&f).is_err());
    f
}

fn send_recv_wcs(p: &mut Pair) -> Vec<(u64, WcStatus, u32)> {
    p.wcs_b()
        .iter()
        .map(|w| (w.wr_id, w.status, w.byte_len))
        .collect()
}

/// §9.9.3 class C, "unsupported or reserved OpCode": a reserved RC opcode (0x1a) at the
/// expected PSN is NAKed Invalid Request at its PSN and B goes to ERR; the posted
/// receive is flushed (WR_FLUSH_ERR, byte_len 0).
#[test]
fn reserved_rc_opcode_is_naked_invalid_request_and_qp_goes_to_err() {
    let mut p = Pair::new(RtsAttr::default(), all());
    p.post_recv(1);
    let f = mkframe(
        1,
        2,
        req(&p, Opcode::RcSendOnly, 0),
        ExtHeaders::default(),
        &[7; 8],
    );
    let f = with_opcode(f, 0x1a);
    assert!(p.b.handle_frame(p.now, &f).is_err()); // still counted as malformed
    assert_eq!(answers(&mut p), vec![nak_inv(A_PSN)]);
    assert_eq!(p.b.qp_state(p.qb), Some(QpState::Err));
    assert_eq!(send_recv_wcs(&mut p), vec![(1, WcStatus::WrFlushErr, 0)]);
}

/// A reserved opcode ahead of the expected PSN is a sequence error like any request
/// (class B, §9.7.5.2.2): one NAK PSN Sequence Error for the expected PSN; B stays in
/// RTS. Behind it (a duplicate) it is dropped.
#[test]
fn reserved_rc_opcode_out_of_sequence_is_a_sequence_error() {
    let mut p = Pair::new(RtsAttr::default(), all());
    let f = mkframe(
        1,
        2,
        req(&p, Opcode::RcSendOnly, 3),
        ExtHeaders::default(),
        &[],
    );
    let _ = p.b.handle_frame(p.now, &with_opcode(f, 0x15));
    let f = mkframe(
        1,
        2,
        req(&p, Opcode::RcSendOnly, 0xff_ffff),
        ExtHeaders::default(),
        &[],
    );
    let _ = p.b.handle_frame(p.now, &with_opcode(f, 0x1f));
    assert_eq!(
        answers(&mut p),
        vec![(
            Opcode::RcAck,
            A_PSN,
            Some(Syndrome::Nak(NakCode::PsnSequenceError))
        )]
    );
    assert_eq!(p.b.qp_state(p.qb), Some(QpState::Rts));
}

/// Class C length error: an RDMA READ request carrying payload (the opcode table allows
/// none) is NAKed Invalid Request and B goes to ERR; nothing is read out.
#[test]
fn read_request_with_payload_is_naked_invalid_request() {
    let mut p = Pair::new(RtsAttr::default(), all());
    let f = mkframe(1, 2, req(&p, Opcode::RcWriteOnly, 0), reth(&p, 64), &[0; 4]);
    // A READ request with a RETH and 4 bytes of payload.
    let f = with_opcode(f, Opcode::RcReadRequest as u8);
    let _ = p.b.handle_frame(p.now, &f);
    assert_eq!(answers(&mut p), vec![nak_inv(A_PSN)]);
    assert_eq!(p.b.qp_state(p.qb), Some(QpState::Err));
}

/// rdma_rxe check_type_state (and IBTA's header validation, §9.6): an opcode of another
/// transport (a UC SEND to an RC QP) is dropped silently; no NAK, B stays in RTS.
#[test]
fn opcode_of_another_transport_is_dropped_silently() {
    let mut p = Pair::new(RtsAttr::default(), all());
    p.post_recv(1);
    let f = mkframe(
        1,
        2,
        req(&p, Opcode::UcSendOnly, 0),
        ExtHeaders::default(),
        &[1; 8],
    );
    p.b.handle_frame(p.now, &f).unwrap();
    assert!(answers(&mut p).is_empty());
    assert_eq!(p.b.qp_state(p.qb), Some(QpState::Rts));
    assert!(p.wcs_b().is_empty());
    assert_eq!(p.b.qp_counters(p.qb).unwrap().dropped, 1);
}

/// §9.9.3 class C, out-of-sequence opcode (rdma_rxe ERR_MISSING_OPCODE_FIRST): a SEND
/// MIDDLE with no FIRST is NAKed Invalid Request at its PSN; B goes to ERR.
#[test]
fn middle_without_first_is_naked_invalid_request() {
    let mut p = Pair::new(RtsAttr::default(), all());
    p.post_recv(1);
    let f = mkframe(
        1,
        2,
        req(&p, Opcode::RcSendMiddle, 0),
        ExtHeaders::default(),
        &[0; MTU],
    );
    p.b.handle_frame(p.now, &f).unwrap();
    assert_eq!(answers(&mut p), vec![nak_inv(A_PSN)]);
    assert_eq!(p.b.qp_state(p.qb), Some(QpState::Err));
    assert_eq!(send_recv_wcs(&mut p), vec![(1, WcStatus::WrFlushErr, 0)]);
}

/// §9.9.3 class C, out-of-sequence opcode (rdma_rxe ERR_MISSING_OPCODE_LAST_C): a new
/// SEND ONLY inside a SEND message is NAKed Invalid Request at its PSN, B goes to ERR,
/// and the receive the message was placed in completes with REM_INV_REQ_ERR and
/// byte_len 0 (as rdma_rxe's do_complete reports it); the next receive is flushed.
#[test]
fn new_request_inside_a_message_is_naked_and_fails_the_receive() {
    let mut p = Pair::new(RtsAttr::default(), all());
    p.post_recv(1);
    p.post_recv(2);
    let f = mkframe(
        1,
        2,
        req(&p, Opcode::RcSendFirst, 0),
        ExtHeaders::default(),
        &[0; MTU],
    );
    p.b.handle_frame(p.now, &f).unwrap();
    let f = mkframe(
        1,
        2,
        req(&p, Opcode::RcSendOnly, 1),
        ExtHeaders::default(),
        &[0; 8],
    );
    p.b.handle_frame(p.now, &f).unwrap();
    assert_eq!(answers(&mut p), vec![nak_inv(psn_add(A_PSN, 1))]);
    assert_eq!(p.b.qp_state(p.qb), Some(QpState::Err));
    assert_eq!(
        send_recv_wcs(&mut p),
        vec![(1, WcStatus::RemInvReqErr, 0), (2, WcStatus::WrFlushErr, 0)]
    );
}

/// A READ inside a WRITE message: class C out-of-sequence opcode, NAK Invalid Request.
#[test]
fn read_inside_a_write_is_naked_invalid_request() {
    let mut p = Pair::new(RtsAttr::default(), all());
    let f = mkframe(
        1,
        2,
        req(&p, Opcode::RcWriteFirst, 0),
        reth(&p, 2048),
        &[0; MTU],
    );
    p.b.handle_frame(p.now, &f).unwrap();
    let f = mkframe(1, 2, req(&p, Opcode::RcReadRequest, 1), reth(&p, 8), &[]);
    p.b.handle_frame(p.now, &f).unwrap();
    assert_eq!(answers(&mut p), vec![nak_inv(psn_add(A_PSN, 1))]);
    assert_eq!(p.b.qp_state(p.qb), Some(QpState::Err));
}

/// Class C length errors (rdma_rxe check_length): a LAST carries 1 to PMTU bytes, a
/// MIDDLE exactly one PMTU.
#[test]
fn zero_length_last_and_short_middle_are_naked_invalid_request() {
    for (op, len) in [(Opcode::RcSendLast, 0), (Opcode::RcSendMiddle, MTU - 4)] {
        let mut p = Pair::new(RtsAttr::default(), all());
        p.post_recv(1);
        let f = mkframe(
            1,
            2,
            req(&p, Opcode::RcSendFirst, 0),
            ExtHeaders::default(),
            &[0; MTU],
        );
        p.b.handle_frame(p.now, &f).unwrap();
        let f = mkframe(1, 2, req(&p, op, 1), ExtHeaders::default(), &vec![0; len]);
        p.b.handle_frame(p.now, &f).unwrap();
        assert_eq!(answers(&mut p), vec![nak_inv(psn_add(A_PSN, 1))], "{op:?}");
        assert_eq!(p.b.qp_state(p.qb), Some(QpState::Err));
        assert_eq!(send_recv_wcs(&mut p), vec![(1, WcStatus::RemInvReqErr, 0)]);
    }
}

// ---- UC: drop the message and resynchronise (class D1, §9.9.3) ----

fn uc_b() -> (Context, CqId, u32, Mr) {
    let mut c = Context::new(
        ContextConfig {
            mac: [2, 0, 0, 0, 0, 2],
            ip: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)),
            seed: 2,
            udp_sport_base: 0xc000,
            tos: 0,
        },
        Instant::now(),
    );
    let cq = c
        .create_cq(uroce::verbs::MAX_CQE)
        .expect("MAX_CQE is a valid CQ depth");
    let pd = c.alloc_pd();
    let caps = QpCaps {
        qp_type: QpType::Uc,
        send_cq: cq,
        recv_cq: cq,
        max_send_wr: 8,
        max_recv_wr: 8,
    };
    let q = c.create_qp(pd, caps).unwrap();
    let buf = c.reg_mr(pd, vec![0; 1 << 16], Access::LOCAL_WRITE).unwrap();
    c.modify_qp_init(q, InitAttr::default()).unwrap();
    c.modify_qp_rtr(
        q,
        RtrAttr {
            remote: Remote {
                ip: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)),
                mac: [2, 0, 0, 0, 0, 1],
            },
            dest_qpn: 0x11,
            rq_psn: 100,
            path_mtu: Mtu::M1024,
            max_dest_rd_atomic: 0,
            min_rnr_timer: 0,
        },
    )
    .unwrap();
    for wr_id in 1..=2u64 {
        let sge = Sge {
            addr: buf.addr + wr_id * 8192,
            length: 8192,
            lkey: buf.lkey,
        };
        c.post_recv(q, RecvWr { wr_id, sge }).unwrap();
    }
    (c, cq, q, buf)
}

fn uc(c: &mut Context, q: u32, op: Opcode, psn: u32, len: usize) -> Vec<u8> {
    let f = mkframe(
        1,
        2,
        BthRepr::new(op, q, psn),
        ExtHeaders::default(),
        &vec![9; len],
    );
    let _ = c.handle_frame(Instant::now(), &f);
    f
}

/// The case: a UC message whose LAST breaks the packet-length rules (0 bytes;
/// a LAST carries 1 to PMTU) is not delivered; the receive goes back and the next
/// message (an ONLY) lands in it.
#[test]
fn uc_zero_length_last_drops_the_message_and_resynchronises() {
    let (mut c, cq, q, _) = uc_b();
    uc(&mut c, q, Opcode::UcSendFirst, 100, MTU);
    uc(&mut c, q, Opcode::UcSendLast, 101, 0);
    assert!(
        c.poll_cq(cq, 8).is_empty(),
        "a bad LAST delivered the message"
    );
    uc(&mut c, q, Opcode::UcSendOnly, 102, 40);
    let wc: Vec<(u64, WcStatus, u32, WcOpcode)> = c
        .poll_cq(cq, 8)
        .iter()
        .map(|w| (w.wr_id, w.status, w.byte_len, w.opcode))
        .collect();
    assert_eq!(wc, vec![(1, WcStatus::Success, 40, WcOpcode::Recv)]);
    assert_eq!(c.qp_state(q), Some(QpState::Rtr));
    assert_eq!(c.qp_counters(q).unwrap().uc_msg_dropped, 1);
}

/// A reserved UC opcode inside a message (class D1): the message is dropped, its LAST
/// that follows is dropped too, and the next ONLY is delivered in the first receive.
#[test]
fn uc_reserved_opcode_drops_the_message_and_resynchronises() {
    let (mut c, cq, q, _) = uc_b();
    uc(&mut c, q, Opcode::UcSendFirst, 100, MTU);
    let f = mkframe(
        1,
        2,
        BthRepr::new(Opcode::UcSendMiddle, q, 101),
        ExtHeaders::default(),
        &[0; MTU],
    );
    let _ = c.handle_frame(Instant::now(), &with_opcode(f, 0x3a));
    uc(&mut c, q, Opcode::UcSendLast, 102, 8);
    assert!(c.poll_cq(cq, 8).is_empty());
    uc(&mut c, q, Opcode::UcSendOnly, 103, 16);
    let wc: Vec<(u64, WcStatus, u32)> = c
        .poll_cq(cq, 8)
        .iter()
        .map(|w| (w.wr_id, w.status, w.byte_len))
        .collect();
    assert_eq!(wc, vec![(1, WcStatus::Success, 16)]);
    assert_eq!(c.qp_state(q), Some(QpState::Rtr));
}

/// Issue 26: a reserved UC opcode (0x3f) at the expected PSN moves nothing: the good SEND
/// ONLY at the same PSN that follows is delivered (the misfit used to advance the expected
/// PSN, and the good packet was dropped as a duplicate).
#[test]
fn uc_reserved_opcode_at_the_expected_psn_leaves_the_responder_as_it_was() {
    let (mut c, cq, q, _) = uc_b();
    let f = mkframe(
        1,
        2,
        BthRepr::new(Opcode::UcSendOnly, q, 100),
        ExtHeaders::default(),
        &[5; 24],
    );
    let _ = c.handle_frame(Instant::now(), &with_opcode(f, 0x3f));
    assert!(c.poll_cq(cq, 8).is_empty());
    assert_eq!(c.qp_counters(q).unwrap().uc_msg_dropped, 0);
    uc(&mut c, q, Opcode::UcSendOnly, 100, 40);
    let wc: Vec<(u64, WcStatus, u32)> = c
        .poll_cq(cq, 8)
        .iter()
        .map(|w| (w.wr_id, w.status, w.byte_len))
        .collect();
    assert_eq!(wc, vec![(1, WcStatus::Success, 40)]);
    // Inside a message it leaves the message alone too: the PSN rules drop what follows.
    uc(&mut c, q, Opcode::UcSendFirst, 101, MTU);
    let f = mkframe(
        1,
        2,
        BthRepr::new(Opcode::UcSendLast, q, 102),
        ExtHeaders::default(),
        &[0; 8],
    );
    let _ = c.handle_frame(Instant::now(), &with_opcode(f, 0x3f));
    uc(&mut c, q, Opcode::UcSendLast, 102, 8);
    let wc: Vec<(u64, WcStatus, u32)> = c
        .poll_cq(cq, 8)
        .iter()
        .map(|w| (w.wr_id, w.status, w.byte_len))
        .collect();
    assert_eq!(wc, vec![(2, WcStatus::Success, MTU as u32 + 8)]);
    assert_eq!(c.qp_state(q), Some(QpState::Rtr));
}

/// RC misfits out of sequence or behind it leave the responder as it was: one sequence
/// NAK for the expected PSN (class B), the duplicate dropped, and the SEND at the
/// expected PSN then completes and is acknowledged as if nothing had come before it.
#[test]
fn rc_misfits_out_of_sequence_leave_the_responder_as_it_was() {
    let mut p = Pair::new(RtsAttr::default(), all());
    p.post_recv(1);
    for k in [2, 0xff_fffe] {
        let f = mkframe(
            1,
            2,
            req(&p, Opcode::RcSendOnly, k),
            ExtHeaders::default(),
            &[1; 8],
        );
        let _ = p.b.handle_frame(p.now, &with_opcode(f, 0x1b));
    }
    let mut bth = req(&p, Opcode::RcSendOnly, 0);
    bth.ack_req = true;
    let f = mkframe(1, 2, bth, ExtHeaders::default(), &[7; 32]);
    p.b.handle_frame(p.now, &f).unwrap();
    assert_eq!(
        answers(&mut p),
        vec![
            (
                Opcode::RcAck,
                A_PSN,
                Some(Syndrome::Nak(NakCode::PsnSequenceError))
            ),
            (Opcode::RcAck, A_PSN, Some(Syndrome::Ack { credits: 31 })),
        ]
    );
    assert_eq!(send_recv_wcs(&mut p), vec![(1, WcStatus::Success, 32)]);
    assert_eq!(p.b.qp_state(p.qb), Some(QpState::Rts));
}
