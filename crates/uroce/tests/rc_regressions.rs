//! Regressions from a review of the transports: each test was written to show a bug
//! (deregistered buffers, completion order, duplicate READs, RNR and retries, stale NAKs,
//! ACKs for unsent PSNs, oversized messages) and now checks the fixed behaviour.

mod common;

use common::*;
use uroce::mem::Access;
use uroce::verbs::{InitAttr, Mtu, QpState, RtsAttr, SendOp, SendWr, Sge, WcStatus};
use uroce::wire::{AethRepr, BthRepr, ExtHeaders, NakCode, Opcode, Syndrome};

// The bug was a panic when the region of a posted receive or READ went away. A region a
// request may still read or write (a READ's destination, a send not yet completed, a
// receive being filled) cannot go: deregistration is refused (EBUSY). A receive waiting on
// the receive queue does not hold its region: gone by the time a SEND arrives, the
// receive fails as a NIC's lkey check fails it (LOC_QP_OP_ERR), and the SEND is NAKed
// Remote Operational Error (REM_OP_ERR at the sender).
#[test]
fn rc_recv_mr_deregistered_under_a_posted_receive_fails_it() {
    let mut p = Pair::new(RtsAttr::default(), all());
    p.post_recv(0);
    let recv = p.recv;
    assert!(p.b.dereg_mr(&recv).unwrap().is_some());
    p.post(1, SendOp::Send, 100);
    p.run(|_, _| 1, 10);
    let wa = p.wcs_a();
    assert_eq!(
        (wa[0].wr_id, wa[0].status),
        (1, WcStatus::RemOpErr),
        "{wa:?}"
    );
    let wb = p.wcs_b();
    assert_eq!(
        (wb[0].wr_id, wb[0].status),
        (0, WcStatus::LocQpOpErr),
        "{wb:?}"
    );
    assert_eq!(p.b.qp_state(p.qb), Some(QpState::Err));
}

#[test]
fn rc_read_destination_cannot_be_deregistered_under_the_read() {
    let mut p = Pair::new(RtsAttr::default(), all());
    p.post(
        1,
        SendOp::Read {
            remote_addr: p.rb.addr,
            rkey: p.rb.rkey,
        },
        100,
    );
    let la = p.la;
    let busy = p.a.dereg_mr(&la).unwrap_err();
    assert_eq!(busy.errno(), libc::EBUSY, "{busy}");
    p.run(|_, _| 1, 10);
    let wc = p.wcs_a();
    assert_eq!(wc[0].status, WcStatus::Success, "{wc:?}");
    let bytes = p.a.dereg_mr(&la).unwrap().unwrap();
    assert_eq!(&bytes[..100], &p.b.mr_bytes(&p.rb)[..100]);
}

// ---- 2. completions out of order: READ then a WRITE that gets a fatal NAK ----
#[test]
fn a_fatal_nak_behind_an_unanswered_read_keeps_completion_order() {
    let mut p = Pair::new(RtsAttr::default(), all());
    p.post(
        1,
        SendOp::Read {
            remote_addr: p.rb.addr,
            rkey: p.rb.rkey,
        },
        100,
    );
    p.post(
        2,
        SendOp::Write {
            remote_addr: p.rb.addr,
            rkey: p.rb.rkey ^ 0x5555,
        },
        100,
    );
    p.run(|_, _| 1, 10);
    let wc: Vec<(u64, WcStatus)> = p.wcs_a().iter().map(|w| (w.wr_id, w.status)).collect();
    let b_sent: Vec<Opcode> = p
        .log
        .iter()
        .filter(|s| !s.from_a)
        .map(|s| s.opcode())
        .collect();
    println!("A completions: {wc:?}\nB sent: {b_sent:?}");
    assert_eq!(wc[0].0, 1, "completions must be in posting order: {wc:?}");
}

// ---- 3. duplicate READ bypasses QP access / resource limit ----
#[test]
fn a_duplicate_read_gets_the_same_access_check() {
    // B's QP grants REMOTE_WRITE only; B's MR grants REMOTE_READ.
    let init = InitAttr {
        access: Access::REMOTE_WRITE,
        ..InitAttr::default()
    };
    let mut p = Pair::custom(RtsAttr::default(), all(), A_PSN, init, 1, Mtu::M1024);
    // a fresh READ at ePSN is refused (control) -- do on a separate pair
    let mut bth = BthRepr::new(
        Opcode::RcReadRequest,
        p.qb,
        psn_add(A_PSN, 0xff_ffff - 1000),
    ); // "in the past"
    bth.ack_req = true;
    let ext = ExtHeaders {
        reth: Some(RethRepr {
            va: p.rb.addr,
            rkey: p.rb.rkey,
            len: 8192,
        }),
        ..ExtHeaders::default()
    };
    // many "duplicates" with distinct PSNs: no max_dest_rd_atomic limit applies
    for i in 0..50u32 {
        let mut b2 = bth;
        b2.psn = psn_add(bth.psn, i * 8);
        let f = mkframe(1, 2, b2, ext, &[]);
        p.b.handle_frame(p.now, &f).unwrap();
    }
    let out = drain(&mut p.b, p.now);
    let mut leaked = 0;
    for f in &out {
        let pk = wire::parse(f).unwrap();
        if matches!(
            pk.bth.opcode(),
            Opcode::RcReadResponseFirst
                | Opcode::RcReadResponseMiddle
                | Opcode::RcReadResponseLast
                | Opcode::RcReadResponseOnly
        ) {
            leaked += pk.payload.len();
        }
    }
    println!(
        "B sent {} frames, {} bytes of READ data; state {:?}",
        out.len(),
        leaked,
        p.b.qp_state(p.qb)
    );
    assert_eq!(leaked, 0, "QP without REMOTE_READ returned {leaked} bytes");
}

#[test]
fn a_read_without_qp_access_is_refused() {
    let init = InitAttr {
        access: Access::REMOTE_WRITE,
        ..InitAttr::default()
    };
    let mut p = Pair::custom(RtsAttr::default(), all(), A_PSN, init, 1, Mtu::M1024);
    p.post(
        1,
        SendOp::Read {
            remote_addr: p.rb.addr,
            rkey: p.rb.rkey,
        },
        100,
    );
    p.run(|_, _| 1, 10);
    let wc: Vec<(u64, WcStatus)> = p.wcs_a().iter().map(|w| (w.wr_id, w.status)).collect();
    println!("{wc:?}");
    assert_eq!(wc[0].1, WcStatus::RemInvReqErr);
}

// ---- 4. RNR with infinite rnr_retry ends in RetryExcErr ----
#[test]
fn rnr_waits_do_not_spend_transport_retries() {
    let rts = RtsAttr {
        retry_cnt: 2,
        rnr_retry: 7,
        ..RtsAttr::default()
    };
    let mut p = Pair::new(rts, all());
    p.post(1, SendOp::Send, 3000); // 3 packets, receiver has no buffer yet
    p.run(|_, _| 1, 6); // a few RNR timer rounds (0.64 ms each)
    let wc: Vec<(u64, WcStatus)> = p.wcs_a().iter().map(|w| (w.wr_id, w.status)).collect();
    let c = p.a.qp_counters(p.qa).unwrap();
    println!(
        "A completions {wc:?}; rnr_nak_received {} packet_seq_err {} state {:?}",
        c.rnr_nak_received,
        c.packet_seq_err,
        p.a.qp_state(p.qa)
    );
    assert!(
        wc.is_empty(),
        "rnr_retry=7 must wait for a receive forever, got {wc:?}"
    );
}

// ---- 5. UC: one spoofed FIRST/ONLY far ahead blackholes the QP ----
#[test]
fn ud_recv_mr_deregistered_under_a_posted_receive_fails_it() {
    let mut ctx = Context::new(
        ContextConfig {
            mac: [2, 0, 0, 0, 0, 2],
            ip: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)),
            seed: 5,
            udp_sport_base: 0xc000,
            tos: 0,
        },
        std::time::Instant::now(),
    );
    let cq = ctx
        .create_cq(uroce::verbs::MAX_CQE)
        .expect("MAX_CQE is a valid CQ depth");
    let pd = ctx.alloc_pd();
    let q = ctx
        .create_qp(
            pd,
            QpCaps {
                qp_type: uroce::verbs::QpType::Ud,
                send_cq: cq,
                recv_cq: cq,
                max_send_wr: 8,
                max_recv_wr: 8,
            },
        )
        .unwrap();
    let mr = ctx.reg_mr(pd, vec![0; 8192], Access::LOCAL_WRITE).unwrap();
    ctx.modify_qp_init(
        q,
        InitAttr {
            qkey: 0x1234,
            ..InitAttr::default()
        },
    )
    .unwrap();
    ctx.modify_qp_rtr_ud(q, Mtu::M1024).unwrap();
    ctx.post_recv(
        q,
        RecvWr {
            wr_id: 1,
            sge: Sge {
                addr: mr.addr,
                length: 2048,
                lkey: mr.lkey,
            },
        },
    )
    .unwrap();
    let ext = ExtHeaders {
        deth: Some(DethRepr {
            qkey: 0x1234,
            src_qp: 7,
        }),
        ..ExtHeaders::default()
    };
    let f = mkframe(1, 2, BthRepr::new(Opcode::UdSendOnly, q, 0), ext, &[1; 10]);
    let _ = ctx.handle_frame(Instant::now(), &f);
    let wc = ctx.poll_cq(cq, 8);
    assert_eq!(wc.len(), 1);
    assert_eq!((wc[0].status, wc[0].byte_len), (WcStatus::Success, 40 + 10));
    let bytes = ctx.dereg_mr(&mr).unwrap().unwrap();
    assert_eq!(&bytes[40..50], &[1; 10], "after the 40-byte GRH area");
    // A receive posted into a region deregistered since: the datagram fails it.
    let mr = ctx.reg_mr(pd, vec![0; 8192], Access::LOCAL_WRITE).unwrap();
    let sge = Sge {
        addr: mr.addr,
        length: 2048,
        lkey: mr.lkey,
    };
    ctx.post_recv(q, RecvWr { wr_id: 2, sge }).unwrap();
    assert!(ctx.dereg_mr(&mr).unwrap().is_some());
    let _ = ctx.handle_frame(Instant::now(), &f);
    let wc = ctx.poll_cq(cq, 8);
    assert_eq!((wc.len(), wc[0].wr_id), (1, 2), "{wc:?}");
    assert_eq!(wc[0].status, WcStatus::LocProtErr);
}

// ---- 6. ghost ACK for PSNs never sent completes a SEND ----
#[test]
fn an_ack_for_psns_not_yet_sent_is_ignored() {
    let mut p = Pair::new(RtsAttr::default(), all());
    p.post(1, SendOp::Send, 4096); // 4 packets
    let mut buf = vec![0u8; 5000];
    let n = p.a.poll_frame(p.now, &mut buf).unwrap(); // only packet 0 leaves
    let _ = n;
    let ext = ExtHeaders {
        aeth: Some(AethRepr::new(Syndrome::Ack { credits: 31 }, 1)),
        ..ExtHeaders::default()
    };
    let f = mkframe(
        2,
        1,
        BthRepr::new(Opcode::RcAck, p.qa, psn_add(A_PSN, 3)),
        ext,
        &[],
    );
    p.a.handle_frame(p.now, &f).unwrap();
    let rest = drain(&mut p.a, p.now);
    let wc: Vec<(u64, WcStatus)> = p.wcs_a().iter().map(|w| (w.wr_id, w.status)).collect();
    println!("completions {wc:?}, further packets sent {}", rest.len());
    assert!(
        wc.is_empty(),
        "a SEND completed although 3 of its 4 packets were never sent"
    );
}

// ---- 7. responder counts queued duplicate READ responses against max_dest_rd_atomic ----
#[test]
fn replayed_reads_do_not_count_against_max_dest_rd_atomic() {
    let rts = RtsAttr {
        max_rd_atomic: 1,
        ..RtsAttr::default()
    };
    let mut p = Pair::custom(rts, all(), A_PSN, InitAttr::default(), 1, Mtu::M1024);
    let reth = |len| ExtHeaders {
        reth: Some(RethRepr {
            va: p.rb.addr,
            rkey: p.rb.rkey,
            len,
        }),
        ..ExtHeaders::default()
    };
    let read1 = mkframe(
        1,
        2,
        BthRepr::new(Opcode::RcReadRequest, p.qb, A_PSN),
        reth(3000),
        &[],
    );
    p.b.handle_frame(p.now, &read1).unwrap();
    let r1 = drain(&mut p.b, p.now); // 3 responses go out (delayed in the network)
    assert_eq!(r1.len(), 3);
    // requester's ACK timer fires first: READ1 retransmitted, reaches B
    p.b.handle_frame(p.now, &read1).unwrap();
    // responses reach A, A completes READ1 and issues READ2 at A_PSN+3, which reaches B
    // before B's transmit side has drained the duplicate responses
    let read2 = mkframe(
        1,
        2,
        BthRepr::new(Opcode::RcReadRequest, p.qb, psn_add(A_PSN, 3)),
        reth(100),
        &[],
    );
    p.b.handle_frame(p.now, &read2).unwrap();
    let st = p.b.qp_state(p.qb);
    let out = drain(&mut p.b, p.now);
    let naks: Vec<_> = out
        .iter()
        .filter_map(|f| wire::parse(f).unwrap().ext.aeth.map(|a| a.kind()))
        .collect();
    println!("B state {st:?}; syndromes sent {naks:?}");
    assert_eq!(
        st,
        Some(QpState::Rts),
        "a legal READ2 was refused as over the limit"
    );
}

// ---- 8. 2^31-byte message at MTU 256 = 2^23 PSNs: psn_diff sign flips ----
#[test]
fn a_message_needing_the_whole_psn_window_is_refused_at_post() {
    let mut p = Pair::custom(
        RtsAttr::default(),
        all(),
        A_PSN,
        InitAttr::default(),
        4,
        Mtu::M256,
    );
    let pd = uroce::mem::PdId(0);
    let big =
        p.a.reg_mr(pd, vec![0u8; 1 << 31], Access::LOCAL_WRITE)
            .unwrap();
    let wr = SendWr {
        wr_id: 1,
        op: SendOp::Read {
            remote_addr: p.rb.addr,
            rkey: p.rb.rkey,
        },
        sge: Sge {
            addr: big.addr,
            length: 1 << 31,
            lkey: big.lkey,
        },
        signaled: true,
        solicited: false,
    };
    assert!(matches!(
        p.a.post_send(p.qa, wr),
        Err(uroce::verbs::VerbsError::InvalidWr(_))
    ));
}

// ---- 9. stale fatal NAK for an already acknowledged PSN kills an idle QP ----
#[test]
fn a_stale_nak_for_an_acknowledged_psn_is_ignored() {
    let mut p = Pair::new(RtsAttr::default(), all());
    p.post(
        1,
        SendOp::Write {
            remote_addr: p.rb.addr,
            rkey: p.rb.rkey,
        },
        100,
    );
    p.run(|_, _| 1, 10);
    assert_eq!(p.wcs_a()[0].status, WcStatus::Success);
    let ext = ExtHeaders {
        aeth: Some(AethRepr::new(Syndrome::Nak(NakCode::RemoteAccessError), 1)),
        ..ExtHeaders::default()
    };
    let f = mkframe(2, 1, BthRepr::new(Opcode::RcAck, p.qa, A_PSN), ext, &[]); // PSN of the WRITE already ACKed
    p.a.handle_frame(p.now, &f).unwrap();
    println!("state after stale NAK {:?}", p.a.qp_state(p.qa));
    assert_eq!(p.a.qp_state(p.qa), Some(QpState::Rts));
}
