//! RC protocol behaviour against the spec, packet by packet: two contexts wired back to
//! back through a test harness that can drop, duplicate and inspect every frame.

mod common;

use std::time::Duration;

use common::*;
use uroce::mem::Access;
use uroce::transport::psn_add;
use uroce::verbs::{
    ack_timeout, rnr_timer_us, QpState, RtsAttr, SendOp, SendWr, Sge, WcOpcode, WcStatus,
};
use uroce::wire::{self, NakCode, Opcode, Syndrome};

#[test]
fn duplicate_send_is_acked_again_and_received_once() {
    let mut p = Pair::new(RtsAttr::default(), all());
    p.post_recv(0);
    p.post_recv(1);
    p.a.mr_bytes_mut(&p.la)[..100].fill(7);
    p.post(1, SendOp::Send, 100);
    p.run(|_, _| 1, 10);
    p.replay_first_from_a();
    let b = p.wcs_b();
    assert_eq!(b.len(), 1, "one receive completion for a duplicated SEND");
    assert_eq!(
        (b[0].status, b[0].byte_len, b[0].opcode),
        (WcStatus::Success, 100, WcOpcode::Recv)
    );
    let acks = p.sent(false, Opcode::RcAck);
    assert_eq!(acks.len(), 2, "the duplicate is acknowledged again");
    assert!(acks
        .iter()
        .all(|a| a.psn() == A_PSN && a.syndrome() == Some(Syndrome::Ack { credits: 31 })));
    assert_eq!(p.wcs_a().len(), 1);
}

#[test]
fn duplicate_atomic_executes_once_and_replays_its_result() {
    let mut p = Pair::new(RtsAttr::default(), all());
    let va = p.rb.addr + 64;
    p.b.mr_bytes_mut(&p.rb)[64..72].copy_from_slice(&100u64.to_le_bytes());
    p.post(
        1,
        SendOp::FetchAdd {
            remote_addr: va,
            rkey: p.rb.rkey,
            add: 5,
        },
        8,
    );
    p.run(|s, _| if s.from_a { 3 } else { 1 }, 10);
    assert_eq!(
        &p.b.mr_bytes(&p.rb)[64..72],
        &105u64.to_le_bytes(),
        "added once"
    );
    let acks = p.sent(false, Opcode::RcAtomicAck);
    assert_eq!(acks.len(), 3, "each duplicate gets the saved result");
    for a in acks {
        let pk = wire::parse(&a.frame).unwrap();
        assert_eq!(pk.ext.atomic_ack.unwrap().orig, 100);
    }
    let wc = p.wcs_a();
    assert_eq!(wc.len(), 1);
    assert_eq!(wc[0].status, WcStatus::Success);
    assert_eq!(&p.a.mr_bytes(&p.la)[..8], &100u64.to_le_bytes());
}

#[test]
fn duplicate_read_is_answered_again_from_memory() {
    let mut p = Pair::new(RtsAttr::default(), all());
    p.post(
        1,
        SendOp::Read {
            remote_addr: p.rb.addr + 10,
            rkey: p.rb.rkey,
        },
        3000,
    );
    p.run(|_, _| 1, 10);
    p.replay_first_from_a();
    let resp: Vec<u32> = p
        .log
        .iter()
        .filter(|s| !s.from_a)
        .map(|s| s.psn())
        .collect();
    let want: Vec<u32> = (0..3).map(|i| A_PSN + i).collect();
    assert_eq!(
        resp,
        [want.clone(), want].concat(),
        "two full sets of READ responses"
    );
    assert_eq!(p.wcs_a().len(), 1);
    assert_eq!(&p.a.mr_bytes(&p.la)[..3000], &p.b.mr_bytes(&p.rb)[10..3010]);
}

#[test]
fn psn_wraps_around_2_pow_24() {
    let mut p = Pair::with(RtsAttr::default(), all(), 0xff_fff0);
    // B expects A's PSNs from 0xfffff0 too (Pair::with sets both ends).
    for (i, b) in p.a.mr_bytes_mut(&p.la)[..40_000].iter_mut().enumerate() {
        *b = (i * 7) as u8;
    }
    p.post(1, write_op(&p, 0), 40_000); // 40 packets: 0xfffff0 ..= 0x000017
    p.run(|_, _| 1, 10);
    let psns: Vec<u32> = p.log.iter().filter(|s| s.from_a).map(|s| s.psn()).collect();
    assert_eq!(psns.first(), Some(&0xff_fff0));
    assert_eq!(psns.last(), Some(&psn_add(0xff_fff0, 39)));
    assert!(psns.contains(&0xff_ffff) && psns.contains(&0));
    assert_eq!(p.wcs_a()[0].status, WcStatus::Success);
    assert_eq!(
        &p.b.mr_bytes(&p.rb)[..40_000],
        &p.a.mr_bytes(&p.la)[..40_000]
    );
}

#[test]
fn sequence_error_gives_one_nak_then_resend() {
    let mut p = Pair::new(RtsAttr::default(), all());
    p.post_recv(0);
    p.post(1, SendOp::Send, 4096); // FIRST, MIDDLE, MIDDLE, LAST
    let mut dropped = false;
    p.run(
        |s, _| {
            if s.from_a && s.psn() == A_PSN + 1 && !dropped {
                dropped = true;
                0
            } else {
                1
            }
        },
        10,
    );
    let naks: Vec<_> = p
        .log
        .iter()
        .filter(|s| !s.from_a && s.syndrome() == Some(Syndrome::Nak(NakCode::PsnSequenceError)))
        .collect();
    assert_eq!(
        naks.len(),
        1,
        "one NAK for the sequence error, not one per packet"
    );
    assert_eq!(naks[0].psn(), A_PSN + 1, "the NAK names the expected PSN");
    let a_psns: Vec<u32> = p.log.iter().filter(|s| s.from_a).map(|s| s.psn()).collect();
    assert_eq!(
        a_psns,
        [
            A_PSN,
            A_PSN + 1,
            A_PSN + 2,
            A_PSN + 3,
            A_PSN + 1,
            A_PSN + 2,
            A_PSN + 3
        ]
    );
    assert_eq!(p.wcs_b()[0].byte_len, 4096);
    assert_eq!(p.wcs_a()[0].status, WcStatus::Success);
    assert_eq!(p.b.qp_counters(p.qb).unwrap().out_of_sequence, 2);
}

#[test]
fn rnr_nak_then_retry_after_the_timer() {
    let mut p = Pair::new(RtsAttr::default(), all());
    p.post(1, SendOp::Send, 10);
    p.run(|_, _| 1, 0); // no receive posted: RNR NAK, no timer fired yet
    let rnr = p.log.iter().find(|s| !s.from_a).unwrap().clone();
    assert_eq!(rnr.syndrome(), Some(Syndrome::RnrNak { timer: 12 }));
    assert_eq!(rnr.psn(), A_PSN);
    assert!(p.wcs_a().is_empty());
    p.post_recv(0);
    p.run(|_, _| 1, 10);
    let resend = p.log.iter().filter(|s| s.from_a).nth(1).unwrap();
    assert_eq!(resend.psn(), A_PSN);
    assert!(
        resend.at - rnr.at >= Duration::from_micros(rnr_timer_us(12)),
        "waited the RNR timer"
    );
    assert_eq!(p.wcs_a()[0].status, WcStatus::Success);
    assert_eq!(p.a.qp_counters(p.qa).unwrap().rnr_nak_received, 1);
}

#[test]
fn rnr_retries_exhausted() {
    let mut p = Pair::new(
        RtsAttr {
            rnr_retry: 2,
            ..RtsAttr::default()
        },
        all(),
    );
    p.post(1, SendOp::Send, 10);
    p.run(|_, _| 1, 20);
    let wc = p.wcs_a();
    assert_eq!(wc[0].status, WcStatus::RnrRetryExcErr);
    assert_eq!(
        p.sent(true, Opcode::RcSendOnly).len(),
        3,
        "first try and two retries"
    );
}

#[test]
fn retries_exhausted_then_error_state_and_flush() {
    let rts = RtsAttr {
        retry_cnt: 2,
        timeout: 8,
        ..RtsAttr::default()
    }; // 1.05 ms
    let mut p = Pair::new(rts, all());
    p.post(1, write_op(&p, 0), 100);
    p.post(2, write_op(&p, 0), 100);
    p.post(3, SendOp::Send, 100);
    let before = p.b.mr_bytes(&p.rb)[..100].to_vec();
    p.run(|s, _| if s.from_a { 0 } else { 1 }, 50);
    let wc = p.wcs_a();
    let st: Vec<(u64, WcStatus)> = wc.iter().map(|w| (w.wr_id, w.status)).collect();
    assert_eq!(
        st,
        [
            (1, WcStatus::RetryExcErr),
            (2, WcStatus::WrFlushErr),
            (3, WcStatus::WrFlushErr)
        ]
    );
    assert_eq!(p.a.qp_state(p.qa), Some(QpState::Err));
    assert_eq!(p.a.qp_counters(p.qa).unwrap().local_ack_timeout_err, 3);
    // The first PSN goes on the first try, then alone in a tail probe at half the
    // timeout (a clean QP's probe waits an eighth of it, at least 10 ms, at most half),
    // then with the rest at each of the two retries, 4.096 us * 2^timeout apart, and at
    // the recovery probe half a timeout after each (a loss episode's, which resends
    // from there on), until three probes went without progress.
    let first: Vec<_> = p.log.iter().filter(|s| s.psn() == A_PSN).collect();
    let at: Vec<Duration> = first.iter().map(|s| s.at - first[0].at).collect();
    let t = ack_timeout(8).unwrap();
    assert_eq!(t, Duration::from_nanos(4096 << 8));
    assert_eq!(at, [0, 1, 2, 3, 4, 5].map(|k| t * k / 2));
    let before_retry = p.log.iter().filter(|s| s.from_a && s.at < first[2].at);
    assert_eq!(before_retry.count(), 3 + 1, "three packets, then one probe");
    let c = p.a.qp_counters(p.qa).unwrap();
    assert_eq!(c.tail_probes, 1);
    assert_eq!(&p.b.mr_bytes(&p.rb)[..100], &before[..]);
    // A post to the QP in ERR is taken and completes with WR_FLUSH_ERR, as ibverbs
    // (rdma_rxe's rxe_post_send refuses only a state before RTS); nothing is sent.
    p.a.post_send(
        p.qa,
        SendWr {
            wr_id: 9,
            op: SendOp::Send,
            sge: Sge::default(),
            signaled: true,
            solicited: false,
        },
    )
    .unwrap();
    let wc = p.wcs_a();
    assert_eq!(wc.len(), 1);
    assert_eq!((wc[0].wr_id, wc[0].status), (9, WcStatus::WrFlushErr));
    assert!(drain(&mut p.a, p.now).is_empty(), "nothing on the wire");
}

fn access_error(rb_access: Access, op: impl Fn(&Pair) -> SendOp, len: u32) {
    let mut p = Pair::new(RtsAttr::default(), rb_access);
    let before = p.b.mr_bytes(&p.rb).to_vec();
    p.post(1, op(&p), len);
    p.post(2, SendOp::Send, 1);
    p.run(|_, _| 1, 10);
    let nak = p.log.iter().find(|s| !s.from_a).unwrap();
    assert_eq!(
        nak.syndrome(),
        Some(Syndrome::Nak(NakCode::RemoteAccessError))
    );
    let wc = p.wcs_a();
    assert_eq!(wc[0].status, WcStatus::RemAccessErr);
    assert_eq!(wc[1].status, WcStatus::WrFlushErr);
    assert_eq!(p.a.qp_state(p.qa), Some(QpState::Err));
    assert_eq!(
        p.b.qp_state(p.qb),
        Some(QpState::Err),
        "class C error: the responder goes to ERR too"
    );
    assert_eq!(p.b.mr_bytes(&p.rb), &before[..], "memory untouched");
}

#[test]
fn remote_access_error_on_bad_rkey() {
    access_error(
        all(),
        |p| SendOp::Write {
            remote_addr: p.rb.addr,
            rkey: p.rb.rkey ^ 1,
        },
        100,
    );
    access_error(
        all(),
        |p| SendOp::Read {
            remote_addr: p.rb.addr,
            rkey: p.rb.rkey.wrapping_add(1),
        },
        100,
    );
}

#[test]
fn remote_access_error_out_of_bounds() {
    access_error(
        all(),
        |p| SendOp::Write {
            remote_addr: p.rb.addr + (1 << 17) - 50,
            rkey: p.rb.rkey,
        },
        100,
    );
    access_error(
        all(),
        |p| SendOp::Write {
            remote_addr: p.rb.addr - 1,
            rkey: p.rb.rkey,
        },
        3000,
    );
    access_error(
        all(),
        |p| SendOp::Read {
            remote_addr: p.rb.addr + (1 << 17),
            rkey: p.rb.rkey,
        },
        1,
    );
    access_error(
        all(),
        |p| SendOp::FetchAdd {
            remote_addr: p.rb.addr + (1 << 17),
            rkey: p.rb.rkey,
            add: 1,
        },
        8,
    );
}

#[test]
fn remote_access_error_without_the_right() {
    let read_only = Access::REMOTE_READ;
    access_error(read_only, |p| write_op(p, 0), 100);
    access_error(
        Access::LOCAL_WRITE | Access::REMOTE_WRITE,
        |p| SendOp::Read {
            remote_addr: p.rb.addr,
            rkey: p.rb.rkey,
        },
        100,
    );
    access_error(
        Access::LOCAL_WRITE | Access::REMOTE_WRITE,
        |p| SendOp::FetchAdd {
            remote_addr: p.rb.addr,
            rkey: p.rb.rkey,
            add: 1,
        },
        8,
    );
}

#[test]
fn read_response_loss_is_recovered_by_a_partial_rerequest() {
    let mut p = Pair::new(RtsAttr::default(), all());
    p.post(
        1,
        SendOp::Read {
            remote_addr: p.rb.addr + 5,
            rkey: p.rb.rkey,
        },
        5000,
    ); // 5 responses
    let mut dropped = false;
    p.run(
        |s, _| {
            if !s.from_a && s.psn() == A_PSN + 1 && !dropped {
                dropped = true;
                0
            } else {
                1
            }
        },
        10,
    );
    let reqs = p.sent(true, Opcode::RcReadRequest);
    assert_eq!(reqs.len(), 2);
    let again = wire::parse(&reqs[1].frame).unwrap();
    assert_eq!(
        again.bth.psn(),
        A_PSN + 1,
        "asks again from the missing response"
    );
    let reth = again.ext.reth.unwrap();
    assert_eq!((reth.va, reth.len), (p.rb.addr + 5 + 1024, 5000 - 1024));
    assert_eq!(p.wcs_a()[0].status, WcStatus::Success);
    assert_eq!(&p.a.mr_bytes(&p.la)[..5000], &p.b.mr_bytes(&p.rb)[5..5005]);
}

#[test]
fn a_bad_icrc_is_dropped_and_recovered_by_retransmission() {
    let mut p = Pair::new(
        RtsAttr {
            timeout: 8,
            ..RtsAttr::default()
        },
        all(),
    );
    p.post(1, write_op(&p, 0), 10);
    let mut buf = vec![0u8; 256];
    let n = p.a.poll_frame(p.now, &mut buf).unwrap();
    buf[n - 10] ^= 0x40; // a payload bit
    assert!(matches!(
        p.b.handle_frame(p.now, &buf[..n]),
        Err(wire::WireError::BadIcrc { .. })
    ));
    assert_eq!(p.b.counters().rx_bad_icrc, 1);
    assert_eq!(
        &p.b.mr_bytes(&p.rb)[..10],
        &(0..10u8).collect::<Vec<_>>()[..],
        "nothing written"
    );
    p.run(|_, _| 1, 10);
    assert_eq!(p.wcs_a()[0].status, WcStatus::Success);
}

/// A receiver slower than the ACK timeout (a starved CPU) loses nothing, but the requester
/// times out and goes back N. When the ACKs then come for its first sends, including part
/// of a message the window had let only partly out, it must go on with that message where
/// its first send stopped: not send again what is acknowledged, and not jump to the next
/// message, which the responder would see as out of sequence (a gap where nothing was
/// lost; seen over veth under load as out-of-sequence requests and sequence NAKs).
#[test]
fn acks_after_a_spurious_timeout_resume_a_partly_sent_message() {
    let mut p = Pair::new(RtsAttr::default(), all());
    p.a.set_inflight_budget(Some(16 * 1024)); // a window of 16 packets of 1 KiB
    let (x, y, z) = (
        write_op(&p, 0),
        write_op(&p, 12 * 1024),
        write_op(&p, 76 * 1024),
    );
    p.post(1, x, 12 * 1024); // PSNs +0..+11
    p.post(2, y, 64 * 1024); // +12..+75
    p.post(3, z, 1024); // +76
    let first = drain(&mut p.a, p.now);
    assert_eq!(first.len(), 16, "X whole and the first 4 packets of Y");
    for f in &first {
        p.b.handle_frame(p.now, f).unwrap();
    }
    // B took everything; its ACKs are late.
    let acks = drain(&mut p.b, p.now);
    assert!(!acks.is_empty());
    // The ACK timeout (the clean QP's recovery probe, earlier, is not run here).
    p.now += ack_timeout(RtsAttr::default().timeout).unwrap();
    p.a.handle_timeout(p.now);
    let resent = drain(&mut p.a, p.now);
    let psns: Vec<u32> = resent
        .iter()
        .map(|f| wire::parse(f).unwrap().bth.psn())
        .collect();
    // Go-back-N from the oldest PSN in a window halved to 8: X's first 8 packets.
    assert_eq!(psns, (0..8).map(|i| psn_add(A_PSN, i)).collect::<Vec<_>>());
    // The late ACKs arrive: they acknowledge all 16 first sends.
    for f in &acks {
        p.a.handle_frame(p.now, f).unwrap();
    }
    let next = drain(&mut p.a, p.now);
    let psn = |f: &Vec<u8>| wire::parse(f).unwrap().bth.psn();
    assert_eq!(
        next.first().map(psn),
        Some(psn_add(A_PSN, 16)),
        "Y goes on after its first 4 packets"
    );
    assert!(
        next.iter().all(|f| psn(f) != psn_add(A_PSN, 76)),
        "Z waits for Y"
    );
    for f in resent.iter().chain(&next) {
        p.b.handle_frame(p.now, f).unwrap();
    }
    p.run(|_, _| 1, 10);
    let wcs = p.wcs_a();
    assert_eq!(wcs.len(), 3);
    assert!(wcs.iter().all(|w| w.status == WcStatus::Success), "{wcs:?}");
    let c = p.b.qp_counters(p.qb).unwrap();
    assert_eq!(c.out_of_sequence, 0, "{c:?}");
    assert_eq!(p.a.qp_counters(p.qa).unwrap().packet_seq_err, 0);
    assert_eq!(
        p.b.mr_bytes(&p.rb)[..77 * 1024],
        p.a.mr_bytes(&p.la)[..77 * 1024]
    );
}

/// The same late ACK, when it also says a READ's responses were lost (it acknowledges a
/// request after the READ while the READ has none of its data: an implied NAK, IBTA
/// §9.7.5.1.4): the READ is asked for again at once, from its first missing response, not
/// skipped by going on after the furthest PSN sent (which left it to another timeout).
#[test]
fn a_late_ack_that_implies_lost_read_responses_asks_for_them_again() {
    let mut p = Pair::new(RtsAttr::default(), all());
    let read = SendOp::Read {
        remote_addr: p.rb.addr,
        rkey: p.rb.rkey,
    };
    let w = write_op(&p, 0);
    p.post(1, w, 5 * 1024); // PSNs +0..+4
    p.post(2, read, 10 * 1024); // +5..+14
    let w = write_op(&p, 16 * 1024);
    p.post(3, w, 1024); // +15
    let first = drain(&mut p.a, p.now);
    assert_eq!(first.len(), 7);
    for f in &first {
        p.b.handle_frame(p.now, f).unwrap();
    }
    // Of B's answers only the ACK of +15 gets through, late: the READ's responses and the
    // first ACK are lost.
    let psn = |f: &Vec<u8>| wire::parse(f).unwrap().bth.psn();
    let last_ack = drain(&mut p.b, p.now)
        .into_iter()
        .find(|f| psn(f) == psn_add(A_PSN, 15))
        .expect("B acknowledges the last WRITE");
    p.now = p.a.poll_timeout().expect("the ACK timer runs");
    p.a.handle_timeout(p.now);
    p.a.handle_frame(p.now, &last_ack).unwrap();
    let next = drain(&mut p.a, p.now);
    let first_out = wire::parse(next.first().expect("A sends at once")).unwrap();
    assert_eq!(first_out.bth.opcode(), Opcode::RcReadRequest);
    assert_eq!(first_out.bth.psn(), psn_add(A_PSN, 5));
    for f in &next {
        p.b.handle_frame(p.now, f).unwrap();
    }
    p.run(|_, _| 1, 10);
    let wcs = p.wcs_a();
    assert_eq!(wcs.len(), 3);
    assert!(wcs.iter().all(|w| w.status == WcStatus::Success), "{wcs:?}");
    assert_eq!(
        p.a.mr_bytes(&p.la)[..10 * 1024],
        p.b.mr_bytes(&p.rb)[..10 * 1024]
    );
}

/// `Context::set_inflight_budget`: a requester keeps no more bytes in flight (in packets
/// of its path MTU) than the budget, present QPs and those created later alike, and
/// sends the rest as ACKs come back; without a budget a 64-packet WRITE goes out whole.
#[test]
fn the_inflight_budget_bounds_the_window() {
    for budget in [None, Some(16 * 1024), Some(100)] {
        let mut p = Pair::new(RtsAttr::default(), all());
        p.a.set_inflight_budget(budget);
        let op = write_op(&p, 0);
        p.post(1, op, 64 * 1024); // 64 packets of the 1024-byte path MTU
        let burst = drain(&mut p.a, p.now).len();
        let want = match budget {
            None => 64,
            Some(b) => (b / 1024).max(8) as usize, // never below 8 packets
        };
        assert_eq!(burst, want, "{budget:?}");
        // B never answers here: A sends nothing more until ACKs come.
        assert!(drain(&mut p.a, p.now).is_empty(), "{budget:?}");
    }
    // The whole message still gets there under a budget, as ACKs open the window.
    let mut p = Pair::new(RtsAttr::default(), all());
    p.a.set_inflight_budget(Some(16 * 1024));
    let op = write_op(&p, 0);
    p.post(1, op, 64 * 1024);
    p.run(|_, _| 1, 0);
    let wcs = p.wcs_a();
    assert_eq!(wcs.len(), 1);
    assert_eq!(wcs[0].status, WcStatus::Success);
    assert_eq!(p.sent(true, Opcode::RcWriteMiddle).len(), 62);
    assert_eq!(
        p.b.mr_bytes(&p.rb)[..64 * 1024],
        p.a.mr_bytes(&p.la)[..64 * 1024]
    );
}

/// Go-back-N resends a whole window; where the window overflowed a queue, the resent
/// packets meet that queue still full and are lost in turn. A loss among the packets
/// resent after a cut, a round trip or more after it, is a new loss episode and halves
/// the window again (a duplicate of the NAK that made the cut does not): without the
/// second cut, each round resent as much as the last into the same queue (a simulated
/// 25 Gb/s link with a 1 ms queue and 64 WRITEs of 64 KiB in flight resent 64,117
/// packets for 25,600).
#[test]
fn a_loss_among_resent_packets_halves_the_window_again() {
    let mut p = Pair::new(RtsAttr::default(), all());
    p.a.set_inflight_budget(Some(32 * 1024)); // a window of 32 packets of 1 KiB
    p.post(1, write_op(&p, 0), 64 * 1024); // PSNs +0..+63
    let psn = |f: &Vec<u8>| wire::parse(f).unwrap().bth.psn();
    let psns = |fs: &[Vec<u8>]| fs.iter().map(psn).collect::<Vec<u32>>();
    let range = |from: u32, n: u32| {
        (from..from + n)
            .map(|i| psn_add(A_PSN, i))
            .collect::<Vec<_>>()
    };
    let first = drain(&mut p.a, p.now);
    assert_eq!(psns(&first), range(0, 32));
    // The first is lost: B answers the rest with one sequence NAK for +0.
    for f in &first[1..] {
        p.b.handle_frame(p.now, f).unwrap();
    }
    for f in &drain(&mut p.b, p.now) {
        p.a.handle_frame(p.now, f).unwrap();
    }
    let resent = drain(&mut p.a, p.now);
    assert_eq!(
        psns(&resent),
        range(0, 16),
        "go back N in a window halved to 16"
    );
    // A round trip later, of those, +4 is lost: B acknowledges +0..+3 and asks for +4.
    p.now += Duration::from_millis(1);
    for (i, f) in resent.iter().enumerate() {
        if i != 4 {
            p.b.handle_frame(p.now, f).unwrap();
        }
    }
    let answers = drain(&mut p.b, p.now);
    for f in &answers {
        p.a.handle_frame(p.now, f).unwrap();
    }
    let again = drain(&mut p.a, p.now);
    assert_eq!(
        psns(&again),
        range(4, 8),
        "a resent packet lost: the window halves again, to 8"
    );
    // The same NAK again (a duplicate) is the same episode: no third cut.
    for f in &answers {
        p.a.handle_frame(p.now, f).unwrap();
    }
    assert_eq!(psns(&drain(&mut p.a, p.now)), range(4, 8), "still 8");
    for f in again.iter() {
        p.b.handle_frame(p.now, f).unwrap();
    }
    p.run(|_, _| 1, 10);
    let wcs = p.wcs_a();
    assert_eq!(wcs.len(), 1);
    assert_eq!(wcs[0].status, WcStatus::Success);
    assert_eq!(
        p.b.mr_bytes(&p.rb)[..64 * 1024],
        p.a.mr_bytes(&p.la)[..64 * 1024]
    );
}

/// An RNR NAK says the receiver had no buffer, not that the path lost a packet: RNR NAKs
/// one after another (a receiver that posts its buffers late) cut the window once for
/// the episode, not once each, as sequence NAKs beyond the last cut do.
#[test]
fn rnr_naks_one_after_another_cut_the_window_once() {
    let mut p = Pair::new(RtsAttr::default(), all());
    p.a.set_inflight_budget(Some(32 * 1024)); // a window of 32 packets of 1 KiB
    for id in 1..=3 {
        p.post(id, SendOp::Send, 10); // PSNs +0, +1, +2
    }
    // No receive: an RNR NAK at +0. Then one receive per RNR wait: SEND 1 lands and
    // SEND 2 is RNR-NAKed at +1, then SEND 2 lands and SEND 3 is RNR-NAKed at +2.
    p.run(|_, _| 1, 0);
    for id in 0..3 {
        p.post_recv(id);
        p.run(|_, _| 1, 1);
    }
    p.run(|_, _| 1, 10);
    let wcs = p.wcs_a();
    assert_eq!(wcs.len(), 3, "{wcs:?}");
    assert!(wcs.iter().all(|w| w.status == WcStatus::Success), "{wcs:?}");
    assert_eq!(p.a.qp_counters(p.qa).unwrap().rnr_nak_received, 3);
    // The window is what the first RNR NAK left of 32: a 32 KiB WRITE's first burst.
    p.post(4, write_op(&p, 0), 32 * 1024);
    let burst = drain(&mut p.a, p.now);
    assert_eq!(burst.len(), 16, "cut once, to 16");
}

/// A pair whose requester has a round trip measured (a clean WRITE, 1 us each way) and
/// lost a packet lately (the first of a second WRITE, recovered by a sequence NAK): it
/// arms the tail probe. Both WRITEs completed, and were taken off the CQ.
fn lossy_pair() -> Pair {
    let mut p = Pair::new(RtsAttr::default(), all());
    let one_way = Duration::from_micros(1);
    p.post(1, write_op(&p, 0), 1024);
    exchange(&mut p, one_way);
    write_losing_its_first_packet(&mut p, 2, one_way);
    let wcs = p.wcs_a();
    let status: Vec<_> = wcs.iter().map(|w| w.status).collect();
    assert_eq!(status, [WcStatus::Success; 2]);
    assert_eq!(p.a.qp_counters(p.qa).unwrap().packet_seq_err, 1);
    p
}

/// A's 4 KiB WRITE (four packets) whose first packet is lost: B takes the rest out of
/// sequence and NAKs, and the pair runs to the end, each frame taking `one_way`.
fn write_losing_its_first_packet(p: &mut Pair, wr_id: u64, one_way: Duration) {
    p.post(wr_id, write_op(p, 0), 4096);
    let first = drain(&mut p.a, p.now);
    p.now += one_way;
    for f in &first[1..] {
        p.b.handle_frame(p.now, f).unwrap();
    }
    exchange(p, one_way);
}

/// A READ request lost with nothing sent behind it raises no sequence NAK. On a QP that
/// lost a packet lately, the tail probe asks again after a few round trips (here its
/// floor, 20 us: the harness's `run` moves time only to fire timers) instead of the ACK timeout
/// (67 ms at `timeout` 14), and no retry is spent.
#[test]
fn a_lost_read_request_is_probed_on_a_lossy_qp() {
    let mut p = lossy_pair();
    let read = lost_read_request(&mut p);
    assert!(
        read < Duration::from_millis(1),
        "asked again {read:?} after the first, by the probe"
    );
    let c = p.a.qp_counters(p.qa).unwrap();
    assert_eq!(c.local_ack_timeout_err, 0, "no timeout");
}

/// NCCL's ACK timeout (`timeout` 20: 4.3 s).
fn nccl_timeout() -> RtsAttr {
    RtsAttr {
        timeout: 20,
        ..RtsAttr::default()
    }
}

/// The same READ request lost on a QP that never lost anything (its round trip measured
/// by a clean WRITE) is asked for again after an eighth of the ACK timeout (537 ms of
/// NCCL's 4.3 s), not the whole of it: a clean QP's probe waits long enough that a
/// receiver that stalls for less sees no spurious resend. No retry is spent.
#[test]
fn a_lost_read_request_on_a_clean_qp_is_probed_at_an_eighth_of_the_timeout() {
    let mut p = Pair::new(nccl_timeout(), all());
    p.post(1, write_op(&p, 0), 1024);
    exchange(&mut p, Duration::from_micros(1));
    assert_eq!(p.wcs_a().len(), 1);
    let read = lost_read_request(&mut p);
    let eighth = ack_timeout(20).unwrap() / 8;
    assert!(
        read >= eighth && read < eighth + Duration::from_millis(1),
        "asked again after {read:?}"
    );
    let c = p.a.qp_counters(p.qa).unwrap();
    assert_eq!(
        (c.retransmits, c.tail_probes, c.local_ack_timeout_err),
        (1, 1, 0)
    );
}

/// And on a QP that has no round trip measured yet (its first request lost), the same:
/// before, no probe ran without one, and the first request of a connection waited for
/// the whole timeout.
#[test]
fn a_lost_first_request_is_probed_at_an_eighth_of_the_timeout() {
    let mut p = Pair::new(nccl_timeout(), all());
    let read = lost_read_request(&mut p);
    let eighth = ack_timeout(20).unwrap() / 8;
    assert!(
        read >= eighth && read < eighth + Duration::from_millis(1),
        "asked again after {read:?}"
    );
    assert_eq!(p.a.qp_counters(p.qa).unwrap().local_ack_timeout_err, 0);
}

/// Posts a 2 KiB READ whose first request is lost, runs the pair to the end, checks the
/// data, and says how long after the first request the second went.
fn lost_read_request(p: &mut Pair) -> Duration {
    let read = SendOp::Read {
        remote_addr: p.rb.addr,
        rkey: p.rb.rkey,
    };
    p.post(3, read, 2048);
    let mut lost = false;
    p.run(
        |s, _| {
            let drop = s.from_a && s.opcode() == Opcode::RcReadRequest && !lost;
            lost |= drop;
            usize::from(!drop)
        },
        10,
    );
    let wcs = p.wcs_a();
    assert_eq!(wcs.len(), 1);
    assert_eq!((wcs[0].wr_id, wcs[0].status), (3, WcStatus::Success));
    assert_eq!(p.a.mr_bytes(&p.la)[..2048], p.b.mr_bytes(&p.rb)[..2048]);
    let reqs = p.sent(true, Opcode::RcReadRequest);
    assert_eq!(reqs.len(), 2, "the lost request and the one asking again");
    reqs[1].at - reqs[0].at
}

/// Where only the ACKs were lost, the tail probe costs one packet: the packet at `una`
/// goes again asking for an ACK, the responder answers the duplicate with an ACK of
/// everything it holds, and nothing else is resent.
#[test]
fn a_tail_probe_after_lost_acks_resends_one_packet() {
    let mut p = lossy_pair();
    let before = p.a.qp_counters(p.qa).unwrap().retransmits;
    // Eight packets all arrive; every answer of B's to them is lost.
    p.post(3, write_op(&p, 0), 8 * 1024);
    let start = p.log.len();
    let mut from_a = 0;
    p.run(
        |s, _| {
            from_a += usize::from(s.from_a);
            usize::from(s.from_a || from_a > 8)
        },
        10,
    );
    let wcs = p.wcs_a();
    assert_eq!((wcs.len(), wcs[0].status), (1, WcStatus::Success));
    let c = p.a.qp_counters(p.qa).unwrap();
    assert_eq!(c.retransmits - before, 1, "one probe packet");
    assert_eq!(c.local_ack_timeout_err, 0);
    let from_a: Vec<u32> = p.log[start..]
        .iter()
        .filter(|s| s.from_a)
        .map(|s| s.psn())
        .collect();
    assert_eq!(from_a.len(), 9, "eight packets and the probe: {from_a:?}");
    assert_eq!(from_a[8], from_a[0], "the probe is the packet at una");
}

/// A burst's last packets lost (nothing behind them to raise a NAK, and only the last
/// asked for an ACK): the tail probe resends the packet at `una`, the responder answers
/// the duplicate with an ACK of what it took in order, and when nothing else moves
/// `una` for the confirming wait (20 us here), go-back-N resends the rest from there at
/// once, not one packet a probe.
#[test]
fn a_lost_tail_is_resent_after_one_probe() {
    let mut p = lossy_pair();
    let one_way = Duration::from_micros(1);
    let before = p.a.qp_counters(p.qa).unwrap().retransmits;
    p.post(3, write_op(&p, 0), 8 * 1024);
    let burst = drain(&mut p.a, p.now);
    assert_eq!(burst.len(), 8);
    let psn = |f: &Vec<u8>| wire::parse(f).unwrap().bth.psn();
    let first = psn(&burst[0]);
    // The first copies of +5, +6 and +7 are lost.
    p.now += one_way;
    for f in &burst[..5] {
        p.b.handle_frame(p.now, f).unwrap();
    }
    assert!(drain(&mut p.b, p.now).is_empty(), "no ACK asked for yet");
    let probe = sent_next(&mut p.a, &mut p.now);
    assert_eq!(
        probe.iter().map(psn).collect::<Vec<_>>(),
        [first],
        "the probe"
    );
    p.now += one_way;
    p.b.handle_frame(p.now, &probe[0]).unwrap();
    let answer = drain(&mut p.b, p.now);
    p.now += one_way;
    let answered = p.now;
    for f in &answer {
        p.a.handle_frame(p.now, f).unwrap();
    }
    let resent = sent_next(&mut p.a, &mut p.now);
    assert!(
        p.now - answered <= Duration::from_micros(20),
        "+5 goes again {:?} after the probe's answer: the wait for another response \
         (two round trips, 20 us at least)",
        p.now - answered
    );
    // All three at once: a go-back-N, not a second probe (+5 alone).
    let offsets: Vec<u32> = resent.iter().map(|f| psn(f) - first).collect();
    assert_eq!(offsets, [5, 6, 7], "go-back-N from +5");
    p.now += one_way;
    for f in &resent {
        p.b.handle_frame(p.now, f).unwrap();
    }
    exchange(&mut p, one_way);
    let wcs = p.wcs_a();
    assert_eq!((wcs.len(), wcs[0].status), (1, WcStatus::Success));
    let c = p.a.qp_counters(p.qa).unwrap();
    assert_eq!(c.local_ack_timeout_err, 0);
    assert_eq!(c.retransmits - before, 4, "the probe and +5..+7");
    assert_eq!(p.a.mr_bytes(&p.la)[..8192], p.b.mr_bytes(&p.rb)[..8192]);
}

/// The frames `side` sends next, its timers fired as they come due (the heap may wake it
/// early, for an entry a later time replaced: on to the next).
fn sent_next(side: &mut uroce::verbs::Context, now: &mut std::time::Instant) -> Vec<Vec<u8>> {
    loop {
        *now = side.poll_timeout().expect("a timer").max(*now);
        side.handle_timeout(*now);
        let sent = drain(side, *now);
        if !sent.is_empty() {
            return sent;
        }
    }
}

/// Moves frames both ways until both sides are quiet, each frame taking `one_way` to
/// arrive (the clock moves by it before each delivery), timers fired when due.
fn exchange(p: &mut Pair, one_way: Duration) {
    loop {
        let from_a = drain(&mut p.a, p.now);
        let from_b = drain(&mut p.b, p.now);
        if from_a.is_empty() && from_b.is_empty() {
            return;
        }
        p.now += one_way;
        for f in &from_a {
            p.b.handle_frame(p.now, f).unwrap();
        }
        for f in &from_b {
            p.a.handle_frame(p.now, f).unwrap();
        }
        p.a.handle_timeout(p.now);
        p.b.handle_timeout(p.now);
    }
}

/// A probe is spurious when the ACKs were only late (a receiver that stalled), and
/// nothing but the probe is resent:
/// - ACKs sooner than half a round trip after the probe answer the first copies
///   (without that test the ACK of the first packet would meet the cursor the probe left
///   behind it, and go-back-N would resend the seven packets still in flight);
/// - ACKs later than that may be the probe's answer, but the next one moving `una`
///   within a round trip says the first copies are arriving: no go-back-N.
#[test]
fn late_acks_after_a_tail_probe_resend_nothing_more() {
    late_acks_after_a_tail_probe(Duration::from_micros(1));
    late_acks_after_a_tail_probe(Duration::from_micros(60));
}

/// [`late_acks_after_a_tail_probe_resend_nothing_more`], the held ACKs arriving `late`
/// after the probe left, on a QP whose round trip is 100 us.
fn late_acks_after_a_tail_probe(late: Duration) {
    let mut p = Pair::new(RtsAttr::default(), all());
    // A round trip of 100 us, measured on a clean path (no probe drops a sample): one
    // ACK-requesting packet in 16 is timed, and the smoothed figure takes an eighth of
    // each sample.
    for i in 0..400 {
        p.post(10 + i, write_op(&p, 0), 64);
        exchange(&mut p, Duration::from_micros(50));
        assert_eq!(p.wcs_a().len(), 1);
    }
    // Then a loss (the first packet of a WRITE; a sequence NAK): the QP is lossy.
    write_losing_its_first_packet(&mut p, 1, Duration::from_micros(50));
    assert_eq!(p.wcs_a().len(), 1);
    assert_eq!(p.a.qp_counters(p.qa).unwrap().packet_seq_err, 1);
    let before = p.a.qp_counters(p.qa).unwrap().retransmits;
    // Eight one-packet WRITEs, each asking for an ACK; B takes them all, but its ACKs
    // are held (B stalls) past the probe's wait.
    for i in 0..8 {
        p.post(100 + i, write_op(&p, 0), 64);
    }
    let sent = drain(&mut p.a, p.now);
    assert_eq!(sent.len(), 8);
    p.now += Duration::from_micros(50);
    p.b.handle_frame(p.now, &sent[0]).unwrap();
    let ack0 = drain(&mut p.b, p.now);
    for f in &sent[1..] {
        p.b.handle_frame(p.now, f).unwrap();
    }
    let acks = drain(&mut p.b, p.now);
    let sent_at = p.now;
    let probe = sent_next(&mut p.a, &mut p.now);
    assert!(
        p.now < sent_at + Duration::from_millis(1),
        "a probe, not the timeout"
    );
    assert_eq!(probe.len(), 1, "the tail probe: one packet");
    assert_eq!(
        wire::parse(&probe[0]).unwrap().bth.psn(),
        wire::parse(&sent[0]).unwrap().bth.psn()
    );
    // The held ACKs arrive `late` after the probe left, the first packet's first: it
    // moves `una` just to where the probe left the cursor; the others 1 us later.
    p.now += late;
    assert_eq!(ack0.len(), 1);
    p.a.handle_frame(p.now, &ack0[0]).unwrap();
    assert!(
        drain(&mut p.a, p.now).is_empty(),
        "{late:?}: nothing resent"
    );
    p.now += Duration::from_micros(1);
    p.a.handle_timeout(p.now);
    for f in &acks {
        p.a.handle_frame(p.now, f).unwrap();
    }
    assert!(
        drain(&mut p.a, p.now).is_empty(),
        "{late:?}: nothing resent"
    );
    p.now += Duration::from_micros(50);
    p.b.handle_frame(p.now, &probe[0]).unwrap();
    exchange(&mut p, Duration::from_micros(50));
    assert_eq!(p.wcs_a().len(), 8);
    let c = p.a.qp_counters(p.qa).unwrap();
    assert_eq!(c.retransmits - before, 1, "{late:?}: the probe alone");
    assert_eq!(c.local_ack_timeout_err, 0);
}

/// A QP whose own requests are few (NCCL's receiver writing its ready-to-receive FIFO on
/// the QP that takes the data) never loses one often enough to count as lossy by
/// itself. Its responder taking a request out of sequence says the path loses, and its
/// requester's tail probe waits a few round trips: B's lost 64-byte WRITE goes again
/// within a millisecond, not at a clean QP's probe wait (10 ms) or the ACK timeout
/// (67 ms). Whether B's WRITE was lost after the responder saw the loss, or before it
/// (its clean probe already armed, and brought forward).
#[test]
fn a_responder_that_saw_a_loss_arms_its_requesters_tail_probe() {
    responder_loss_and_a_lost_write_of_its_own(false);
    responder_loss_and_a_lost_write_of_its_own(true);
}

/// [`a_responder_that_saw_a_loss_arms_its_requesters_tail_probe`]: B's WRITE lost
/// before A's loss reaches B's responder (`lost_first`), or after.
fn responder_loss_and_a_lost_write_of_its_own(lost_first: bool) {
    let mut p = Pair::new(RtsAttr::default(), all());
    let one_way = Duration::from_micros(1);
    let ra =
        p.a.reg_mr(uroce::mem::PdId(0), vec![0; 4096], all())
            .unwrap();
    let b_write = |p: &mut Pair, wr_id: u64| {
        let op = SendOp::Write {
            remote_addr: ra.addr,
            rkey: ra.rkey,
        };
        let sge = Sge {
            addr: p.recv.addr,
            length: 64,
            lkey: p.recv.lkey,
        };
        p.b.post_send(p.qb, wr(wr_id, op, sge, true)).unwrap();
    };
    // B's round trip measured: a clean WRITE of its own.
    b_write(&mut p, 1);
    exchange(&mut p, one_way);
    assert_eq!(p.wcs_b().len(), 1);
    let lose_b_write = |p: &mut Pair| {
        b_write(p, 3);
        let lost = drain(&mut p.b, p.now);
        assert_eq!(lost.len(), 1);
        p.now
    };
    let mut sent = None;
    if lost_first {
        let at = lose_b_write(&mut p);
        // A clean QP's probe, 10 ms on (the context may name a stale entry of the
        // first WRITE's a little earlier).
        let due = p.b.poll_timeout().unwrap();
        assert!(due > at + Duration::from_millis(9), "{:?}", due - at);
        sent = Some(at);
    }
    // A's WRITE to B loses its first packet: B's responder takes the rest out of
    // sequence (and NAKs); B's requester lost nothing.
    write_losing_its_first_packet(&mut p, 2, one_way);
    assert_eq!(p.wcs_a().len(), 1);
    assert!(p.b.qp_counters(p.qb).unwrap().out_of_sequence > 0);
    let sent = sent.unwrap_or_else(|| lose_b_write(&mut p));
    let again = sent_next(&mut p.b, &mut p.now);
    assert!(
        p.now - sent < Duration::from_millis(1),
        "lost first: {lost_first}; sent again after {:?}",
        p.now - sent
    );
    p.now += one_way;
    p.a.handle_frame(p.now, &again[0]).unwrap();
    exchange(&mut p, one_way);
    let wcs = p.wcs_b();
    assert_eq!((wcs.len(), wcs[0].status), (1, WcStatus::Success));
    let c = p.b.qp_counters(p.qb).unwrap();
    assert_eq!((c.tail_probes, c.local_ack_timeout_err), (1, 0));
}

/// A sender that does not run for a while (a process descheduled, the rest of a
/// message waiting to go) after everything it sent was acknowledged lost nothing: when
/// it runs again, the recovery probe does not go off, and the rest goes out as first
/// sends, its timers running from there.
#[test]
fn a_sender_that_stalls_with_nothing_in_flight_does_not_probe() {
    let mut p = Pair::new(RtsAttr::default(), all());
    p.a.set_inflight_budget(Some(8 * 1024)); // a window of 8 packets of 1 KiB
    p.post(1, write_op(&p, 0), 16 * 1024);
    let first = drain(&mut p.a, p.now);
    assert_eq!(first.len(), 8, "a window");
    for f in &first {
        p.b.handle_frame(p.now, f).unwrap();
    }
    // B's ACK of all 8 arrives, and A does not run again for 15 ms; then its timers
    // are looked at first.
    for f in &drain(&mut p.b, p.now) {
        p.a.handle_frame(p.now, f).unwrap();
    }
    p.now += Duration::from_millis(15);
    p.a.handle_timeout(p.now);
    let rest = drain(&mut p.a, p.now);
    assert_eq!(rest.len(), 8, "the rest, at once");
    let c = p.a.qp_counters(p.qa).unwrap();
    assert_eq!((c.retransmits, c.tail_probes), (0, 0));
    let due = p.a.poll_timeout().expect("the timers run");
    assert_eq!(due, p.now + Duration::from_millis(10), "from the new sends");
    for f in &rest {
        p.b.handle_frame(p.now, f).unwrap();
    }
    exchange(&mut p, Duration::from_micros(1));
    let wcs = p.wcs_a();
    assert_eq!((wcs.len(), wcs[0].status), (1, WcStatus::Success));
}
