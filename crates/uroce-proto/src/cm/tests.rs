//! State machine tests: two endpoints wired back to back through a loop that can drop
//! any MAD, plus the MADs rdma_rxe's CM sent (`crates/uroce/tests/data/rdma_cm.pcap`) fed to one
//! endpoint, whose answers must be rxe's byte for byte.

use std::net::IpAddr;
use std::time::Instant;

use super::*;
use crate::transport::{Mtu, QpAttrMask as M, QpState};
use crate::wire::cm::CmAttr;
use crate::wire::cm_repr::{CmMad, CmRepr};
use crate::wire::mad::MAD_LEN;

fn ip(n: u8) -> IpAddr {
    IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 0, n))
}

const SVC: u64 = 0x0106_1c06; // RDMA CM TCP port space, port 7174

fn endpoint(n: u8) -> CmEndpoint {
    CmEndpoint::new(CmConfig {
        packet_life_time: 8, // 1 ms
        ..CmConfig::new(ip(n), ca_guid_from_mac([2, 0, 0, 0, 0, n]), u64::from(n))
    })
}

fn params() -> ConnectParams {
    ConnectParams {
        remote_cm_response_timeout: 10, // 4 ms
        local_cm_response_timeout: 10,
        max_cm_retries: 3,
        responder_resources: 4,
        initiator_depth: 2,
        path_mtu: Mtu::M2048,
        retry_count: 6,
        rnr_retry_count: 5,
        private_data: b"hello".to_vec(),
        ..ConnectParams::new(SVC, ip(2), 0x11, 0x1000)
    }
}

fn attr_of(mad: &[u8]) -> CmAttr {
    CmMad::parse(mad).unwrap().unwrap().msg.attr()
}

struct Net {
    a: CmEndpoint,
    b: CmEndpoint,
    now: Instant,
}

impl Net {
    fn new() -> Self {
        let mut b = endpoint(2);
        b.listen(SVC).unwrap();
        Self {
            a: endpoint(1),
            b,
            now: Instant::now(),
        }
    }

    /// Moves MADs both ways until none is left, dropping those `drop` picks (by
    /// direction and attribute); returns what was sent, in order.
    fn pump_with(&mut self, mut drop: impl FnMut(bool, CmAttr) -> bool) -> Vec<(bool, CmAttr)> {
        let mut seen = Vec::new();
        loop {
            let mut moved = false;
            while let Some(m) = self.a.poll_transmit() {
                assert_eq!((m.to, m.remote_qpn, m.qkey), (ip(2), 1, 0x8001_0000));
                let at = attr_of(&m.mad);
                seen.push((true, at));
                if !drop(true, at) {
                    self.b.handle_mad(self.now, ip(1), 1, &m.mad);
                }
                moved = true;
            }
            while let Some(m) = self.b.poll_transmit() {
                assert_eq!(m.to, ip(1));
                let at = attr_of(&m.mad);
                seen.push((false, at));
                if !drop(false, at) {
                    self.a.handle_mad(self.now, ip(2), 1, &m.mad);
                }
                moved = true;
            }
            if !moved {
                return seen;
            }
        }
    }

    fn pump(&mut self) -> Vec<(bool, CmAttr)> {
        self.pump_with(|_, _| false)
    }

    /// Jumps to the earliest timer of either side and runs both sides' timers.
    fn next_timeout(&mut self) -> bool {
        let t = [self.a.poll_timeout(), self.b.poll_timeout()]
            .into_iter()
            .flatten()
            .min();
        let Some(t) = t else { return false };
        self.now = self.now.max(t);
        self.a.handle_timeout(self.now);
        self.b.handle_timeout(self.now);
        true
    }

    fn ev_a(&mut self) -> Vec<CmEvent> {
        std::iter::from_fn(|| self.a.poll_event()).collect()
    }
    fn ev_b(&mut self) -> Vec<CmEvent> {
        std::iter::from_fn(|| self.b.poll_event()).collect()
    }

    /// A connects, B accepts, A sends the RTU: both established.
    fn connect(&mut self) -> (CmId, CmId) {
        let ia = self.a.connect(self.now, &params()).unwrap();
        self.pump();
        let [CmEvent::ConnectRequest { id: ib, .. }] = self.ev_b()[..] else {
            panic!("no ConnectRequest")
        };
        self.b
            .accept(self.now, ib, &AcceptParams::new(0x22, 0x2000))
            .unwrap();
        self.pump();
        assert!(matches!(self.ev_a()[..], [CmEvent::ConnectReply { .. }]));
        self.a.rtu(ia, &[]).unwrap();
        self.pump();
        assert_eq!(self.ev_a(), [CmEvent::Established { id: ia }]);
        assert_eq!(self.ev_b(), [CmEvent::Established { id: ib }]);
        (ia, ib)
    }
}

use CmAttr::*;

#[test]
fn connect_accept_rtu_and_the_qp_attributes_of_each_side() {
    let mut n = Net::new();
    let ia = n.a.connect(n.now, &params()).unwrap();
    assert_eq!(n.a.state(ia), Some(CmState::ReqSent));
    assert!(n.a.qp_attr(ia, QpState::Rtr).is_err(), "no peer QP yet");
    assert_eq!(n.pump(), [(true, Req)]);
    let ev = n.ev_b();
    let [CmEvent::ConnectRequest { id: ib, ref req }] = ev[..] else {
        panic!("{ev:?}")
    };
    assert_eq!(req.service_id, SVC);
    assert_eq!(req.peer, ip(1));
    assert_eq!((req.remote_qpn, req.starting_psn), (0x11, 0x1000));
    assert_eq!((req.responder_resources, req.initiator_depth), (4, 2));
    assert_eq!(
        (req.path_mtu, req.retry_count, req.rnr_retry_count),
        (Mtu::M2048, 6, 5)
    );
    assert_eq!(req.transport, Transport::Rc);
    assert_eq!(&req.private_data[..5], b"hello");
    assert_eq!(req.private_data.len(), 92);
    assert_eq!(n.b.state(ib), Some(CmState::ReqRcvd));
    // Passive side: the QP can go to RTR and RTS on what the REQ said; it sends from the
    // REQ's PSN.
    let (rtr, mask) = n.b.qp_attr(ib, QpState::Rtr).unwrap();
    assert_eq!((rtr.dest_qp_num, rtr.path_mtu), (0x11, Mtu::M2048));
    assert_eq!(n.b.qp_attr(ib, QpState::Rts).unwrap().0.sq_psn, 0x1000);
    assert_eq!(rtr.ah_attr.ip, ip(1));
    assert!(mask.contains(M::AV | M::DEST_QPN | M::RQ_PSN | M::MAX_DEST_RD_ATOMIC));
    let acc = AcceptParams {
        responder_resources: 8, // cut to the REQ's initiator depth, 2
        initiator_depth: 3,     // within the REQ's responder resources, 4
        rnr_retry_count: 4,
        private_data: b"welcome".to_vec(),
        ..AcceptParams::new(0x22, 0x2000)
    };
    n.b.accept(n.now, ib, &acc).unwrap();
    assert_eq!(n.b.state(ib), Some(CmState::RepSent));
    assert_eq!(n.pump(), [(false, Rep)]);
    let ev = n.ev_a();
    let [CmEvent::ConnectReply { id, ref rep }] = ev[..] else {
        panic!("{ev:?}")
    };
    assert_eq!(id, ia);
    assert_eq!((rep.remote_qpn, rep.starting_psn), (0x22, 0x2000));
    assert_eq!(
        (
            rep.responder_resources,
            rep.initiator_depth,
            rep.rnr_retry_count
        ),
        (2, 3, 4)
    );
    assert_eq!(&rep.private_data[..7], b"welcome");
    n.a.rtu(ia, b"rtu").unwrap();
    assert_eq!(n.pump(), [(true, Rtu)]);
    assert_eq!(n.ev_a(), [CmEvent::Established { id: ia }]);
    assert_eq!(n.ev_b(), [CmEvent::Established { id: ib }]);
    assert_eq!(n.a.state(ia), Some(CmState::Established));
    assert_eq!(n.b.state(ib), Some(CmState::Established));

    // What each QP gets: each receives from the PSN its own message carried and sends
    // from the other's (as the kernel's CM), READ credits negotiated, RNR retries from
    // the other side's message.
    let (ai, am) = n.a.qp_attr(ia, QpState::Init).unwrap();
    assert_eq!(am, M::STATE | M::ACCESS_FLAGS | M::PKEY_INDEX | M::PORT);
    assert!(ai.qp_access_flags.contains(crate::mem::Access::REMOTE_READ));
    let (ar, _) = n.a.qp_attr(ia, QpState::Rtr).unwrap();
    let (at, amask) = n.a.qp_attr(ia, QpState::Rts).unwrap();
    let (br, _) = n.b.qp_attr(ib, QpState::Rtr).unwrap();
    let (bt, _) = n.b.qp_attr(ib, QpState::Rts).unwrap();
    assert_eq!(
        (ar.dest_qp_num, ar.rq_psn, at.sq_psn),
        (0x22, 0x1000, 0x2000)
    );
    assert_eq!(
        (br.dest_qp_num, br.rq_psn, bt.sq_psn),
        (0x11, 0x2000, 0x1000)
    );
    assert_eq!((ar.path_mtu, br.path_mtu), (Mtu::M2048, Mtu::M2048));
    // A may have min(2, B's 2 resources) reads out; B accepts A's 2; B has 3 out and A
    // accepts them.
    assert_eq!((at.max_rd_atomic, br.max_dest_rd_atomic), (2, 2));
    assert_eq!((bt.max_rd_atomic, ar.max_dest_rd_atomic), (3, 3));
    assert_eq!((at.retry_cnt, bt.retry_cnt), (6, 6));
    assert_eq!((at.rnr_retry, bt.rnr_retry), (4, 5));
    assert_eq!((at.timeout, bt.timeout), (9, 9), "packet life time + 1");
    assert_eq!(
        amask,
        M::STATE | M::SQ_PSN | M::TIMEOUT | M::RETRY_CNT | M::RNR_RETRY | M::MAX_QP_RD_ATOMIC
    );
    assert!(n.a.qp_attr(ia, QpState::Sqd).is_err());
    assert_eq!(n.a.poll_timeout(), None, "nothing pending once established");
    assert_eq!(n.b.poll_timeout(), None);
}

#[test]
fn uc_connections_get_uc_attributes() {
    let mut n = Net::new();
    let p = ConnectParams {
        transport: Transport::Uc,
        ..params()
    };
    let ia = n.a.connect(n.now, &p).unwrap();
    n.pump();
    let ev = n.ev_b();
    let [CmEvent::ConnectRequest { id: ib, ref req }] = ev[..] else {
        panic!()
    };
    assert_eq!(req.transport, Transport::Uc);
    let (_, m) = n.b.qp_attr(ib, QpState::Rtr).unwrap();
    assert_eq!(m, M::STATE | M::AV | M::PATH_MTU | M::DEST_QPN | M::RQ_PSN);
    n.b.accept(n.now, ib, &AcceptParams::new(3, 4)).unwrap();
    n.pump();
    let (_, m) = n.a.qp_attr(ia, QpState::Rts).unwrap();
    assert_eq!(m, M::STATE | M::SQ_PSN);
}

#[test]
fn consumer_reject_reaches_the_active_side_with_its_private_data() {
    let mut n = Net::new();
    let ia = n.a.connect(n.now, &params()).unwrap();
    n.pump();
    let [CmEvent::ConnectRequest { id: ib, .. }] = n.ev_b()[..] else {
        panic!()
    };
    assert!(n.b.reject(ib, &[0; 149]).is_err(), "REJ holds 148 bytes");
    n.b.reject(ib, b"go away").unwrap();
    assert_eq!(n.b.state(ib), None);
    assert_eq!(n.pump(), [(false, Rej)]);
    let ev = n.ev_a();
    let [CmEvent::Rejected {
        id,
        reason: r,
        ref private_data,
        ..
    }] = ev[..]
    else {
        panic!("{ev:?}")
    };
    assert_eq!((id, r), (ia, reason::CONSUMER_REJECT));
    assert_eq!(&private_data[..7], b"go away");
    assert_eq!(n.a.state(ia), None);
    assert_eq!(n.a.poll_timeout(), None, "no REQ retried after a REJ");
}

#[test]
fn no_listener_is_reason_8_invalid_service_id() {
    let mut n = Net::new();
    let p = ConnectParams {
        service_id: SVC + 1,
        ..params()
    };
    let ia = n.a.connect(n.now, &p).unwrap();
    assert_eq!(n.pump(), [(true, Req), (false, Rej)]);
    let ev = n.ev_a();
    assert!(
        matches!(ev[..], [CmEvent::Rejected { id, reason: 8, .. }] if id == ia),
        "{ev:?}"
    );
    assert!(n.ev_b().is_empty());
    assert_eq!(n.b.counters().rx_no_listener, 1);
    assert_eq!(n.b.connections(), 0);
    // After stop_listen the listened service is refused the same way.
    assert!(n.b.stop_listen(SVC));
    n.a.connect(n.now, &params()).unwrap();
    n.pump();
    assert!(matches!(
        n.ev_a()[..],
        [CmEvent::Rejected { reason: 8, .. }]
    ));
}

#[test]
fn lost_req_is_sent_again_after_the_response_timeout() {
    let mut n = Net::new();
    let t0 = n.now;
    let ia = n.a.connect(n.now, &params()).unwrap();
    assert_eq!(n.pump_with(|_, a| a == Req), [(true, Req)]);
    // 4 ms response timeout + twice the 1 ms packet life time.
    assert_eq!(n.a.poll_timeout(), Some(t0 + answer_wait(10, 8)));
    assert!(n.ev_b().is_empty());
    n.next_timeout();
    assert_eq!(n.pump(), [(true, Req)]);
    assert_eq!(n.a.counters().retransmits, 1);
    let [CmEvent::ConnectRequest { id: ib, .. }] = n.ev_b()[..] else {
        panic!()
    };
    n.b.accept(n.now, ib, &AcceptParams::new(0x22, 1)).unwrap();
    n.pump();
    n.a.rtu(ia, &[]).unwrap();
    n.pump();
    assert_eq!(n.b.state(ib), Some(CmState::Established));
}

#[test]
fn lost_rep_the_rep_and_the_req_are_both_retried_and_a_duplicate_req_gets_the_rep() {
    let mut n = Net::new();
    let ia = n.a.connect(n.now, &params()).unwrap();
    n.pump();
    let [CmEvent::ConnectRequest { id: ib, .. }] = n.ev_b()[..] else {
        panic!()
    };
    n.b.accept(n.now, ib, &AcceptParams::new(0x22, 1)).unwrap();
    assert_eq!(n.pump_with(|_, a| a == Rep), [(false, Rep)]);
    // Both sides wait 4 + 2 ms: the REQ goes again, B answers it with the REP (a
    // duplicate REQ in RepSent), and B's own REP timer sends it once more.
    n.next_timeout();
    let seen = n.pump();
    assert!(
        seen.contains(&(true, Req)) && seen.contains(&(false, Rep)),
        "{seen:?}"
    );
    assert_eq!(n.b.counters().rx_duplicates, 1);
    let ev = n.ev_a();
    assert_eq!(ev.len(), 1, "one ConnectReply for two REPs: {ev:?}");
    assert!(n.ev_b().is_empty(), "no second ConnectRequest");
    n.a.rtu(ia, &[]).unwrap();
    n.pump();
    assert_eq!(n.ev_b(), [CmEvent::Established { id: ib }]);
}

#[test]
fn lost_rtu_the_rep_is_retried_and_answered_with_the_rtu_again() {
    let mut n = Net::new();
    let ia = n.a.connect(n.now, &params()).unwrap();
    n.pump();
    let [CmEvent::ConnectRequest { id: ib, .. }] = n.ev_b()[..] else {
        panic!()
    };
    n.b.accept(n.now, ib, &AcceptParams::new(0x22, 1)).unwrap();
    n.pump();
    n.ev_a();
    n.a.rtu(ia, &[]).unwrap();
    assert_eq!(n.pump_with(|_, a| a == Rtu), [(true, Rtu)]);
    assert_eq!(n.b.state(ib), Some(CmState::RepSent));
    n.next_timeout();
    assert_eq!(n.pump(), [(false, Rep), (true, Rtu)]);
    assert_eq!(n.b.state(ib), Some(CmState::Established));
    assert_eq!(n.a.counters().rx_duplicates, 1);
    assert_eq!(n.ev_a(), [CmEvent::Established { id: ia }]);
    assert_eq!(n.ev_b(), [CmEvent::Established { id: ib }]);
}

#[test]
fn a_peer_that_never_answers_is_unreachable_after_the_retries() {
    let mut n = Net::new();
    let ia = n.a.connect(n.now, &params()).unwrap();
    let mut sent = n.pump_with(|_, _| true).len();
    while n.next_timeout() {
        sent += n.pump_with(|_, _| true).len();
        if !n.ev_a().is_empty() {
            break;
        }
    }
    // One REQ and three retries, then a REJ with reason timeout.
    assert_eq!(sent, 5);
    assert_eq!(n.a.state(ia), None);
    assert_eq!(
        (n.a.counters().retransmits, n.a.counters().timeouts),
        (3, 1)
    );
    assert_eq!(n.a.poll_timeout(), None);

    // The same on the passive side when the RTU never comes: B gives up on its REP.
    let mut n = Net::new();
    let _ia = n.a.connect(n.now, &params()).unwrap();
    n.pump();
    let [CmEvent::ConnectRequest { id: ib, .. }] = n.ev_b()[..] else {
        panic!()
    };
    n.b.accept(n.now, ib, &AcceptParams::new(0x22, 1)).unwrap();
    let mut last = Vec::new();
    n.pump_with(|from_a, _| !from_a);
    while n.next_timeout() {
        last = n.pump_with(|from_a, _| !from_a);
        let ev = n.ev_b();
        if !ev.is_empty() {
            assert_eq!(ev, [CmEvent::Unreachable { id: ib }]);
            break;
        }
    }
    assert_eq!(last.last(), Some(&(false, Rej)), "REJ reason timeout");
    assert_eq!(n.b.state(ib), None);
}

#[test]
fn rej_timeout_from_the_peer_ends_the_connection() {
    let mut n = Net::new();
    let ia = n.a.connect(n.now, &params()).unwrap();
    n.pump();
    let [CmEvent::ConnectRequest { id: ib, .. }] = n.ev_b()[..] else {
        panic!()
    };
    n.b.accept(n.now, ib, &AcceptParams::new(0x22, 1)).unwrap();
    n.pump();
    // A never sends its RTU; B gives up and says so with a REJ that A hears.
    while n.b.state(ib).is_some() {
        assert!(n.next_timeout());
        n.pump_with(|from_a, _| from_a);
    }
    n.pump();
    let ev = n.ev_a();
    assert!(ev.contains(&CmEvent::ConnectReply {
        id: ia,
        rep: match &ev[0] {
            CmEvent::ConnectReply { rep, .. } => rep.clone(),
            e => panic!("{e:?}"),
        }
    }));
    assert!(
        matches!(ev.last(), Some(CmEvent::Rejected { reason: 4, .. })),
        "{ev:?}"
    );
    assert_eq!(n.a.state(ia), None);
}

#[test]
fn duplicate_req_while_the_application_decides_makes_no_second_connection() {
    let mut n = Net::new();
    n.a.connect(n.now, &params()).unwrap();
    let req = n.a.poll_transmit().unwrap();
    n.b.handle_mad(n.now, ip(1), 1, &req.mad);
    n.b.handle_mad(n.now, ip(1), 1, &req.mad);
    assert_eq!(n.ev_b().len(), 1);
    assert_eq!(n.b.connections(), 1);
    assert!(
        n.b.poll_transmit().is_none(),
        "ReqRcvd: a duplicate is dropped"
    );
    // With an MRA sent, a duplicate REQ gets the MRA again.
    let ib = CmId(*n.b.conns.keys().next().unwrap());
    n.b.mra(ib, 20, b"wait").unwrap();
    assert_eq!(attr_of(&n.b.poll_transmit().unwrap().mad), Mra);
    n.b.handle_mad(n.now, ip(1), 1, &req.mad);
    let again = n.b.poll_transmit().unwrap();
    assert_eq!(attr_of(&again.mad), Mra);
    assert_eq!(n.b.counters().rx_duplicates, 2);
    // The same REQ from another address is another connection.
    n.b.handle_mad(n.now, ip(3), 1, &req.mad);
    assert_eq!(n.b.connections(), 2);
}

#[test]
fn mra_makes_the_active_side_wait_the_service_timeout() {
    let mut n = Net::new();
    let t0 = n.now;
    let ia = n.a.connect(n.now, &params()).unwrap();
    n.pump();
    let [CmEvent::ConnectRequest { id: ib, .. }] = n.ev_b()[..] else {
        panic!()
    };
    n.b.mra(ib, 14, &[]).unwrap(); // 67 ms
    assert_eq!(n.pump(), [(false, Mra)]);
    assert_eq!(n.a.state(ia), Some(CmState::MraReqRcvd));
    assert_eq!(n.a.poll_timeout(), Some(t0 + answer_wait(14, 8)));
    n.b.accept(n.now, ib, &AcceptParams::new(0x22, 1)).unwrap();
    n.pump();
    assert_eq!(n.a.state(ia), Some(CmState::RepRcvd));
    // An MRA for the REP from A: B waits longer for the RTU.
    let t1 = n.now;
    n.a.mra(ia, 15, &[]).unwrap();
    n.pump();
    assert_eq!(n.b.state(ib), Some(CmState::MraRepRcvd));
    assert_eq!(n.b.poll_timeout(), Some(t1 + answer_wait(15, 8)));
    n.a.rtu(ia, &[]).unwrap();
    n.pump();
    assert_eq!(n.b.state(ib), Some(CmState::Established));
    assert!(n.a.mra(ia, 15, &[]).is_err(), "no MRA once established");
}

#[test]
fn disconnect_both_sides_and_time_wait() {
    let mut n = Net::new();
    let (ia, ib) = n.connect();
    n.a.disconnect(n.now, ia, b"bye").unwrap();
    assert_eq!(n.a.state(ia), Some(CmState::DreqSent));
    assert_eq!(n.pump(), [(true, Dreq), (false, Drep)]);
    let ev = n.ev_b();
    assert!(
        matches!(&ev[..], [CmEvent::Disconnected { id, private_data }]
        if *id == ib && private_data.starts_with(b"bye"))
    );
    assert!(matches!(n.ev_a()[..], [CmEvent::Disconnected { id, .. }] if id == ia));
    assert_eq!(n.a.state(ia), Some(CmState::TimeWait));
    assert_eq!(n.b.state(ib), Some(CmState::TimeWait));
    assert!(n.a.disconnect(n.now, ia, &[]).is_err());
    while n.next_timeout() {}
    assert_eq!(n.ev_a(), [CmEvent::TimeWaitExit { id: ia }]);
    assert_eq!(n.ev_b(), [CmEvent::TimeWaitExit { id: ib }]);
    assert_eq!((n.a.connections(), n.b.connections()), (0, 0));
}

#[test]
fn simultaneous_disconnect() {
    let mut n = Net::new();
    let (ia, ib) = n.connect();
    n.a.disconnect(n.now, ia, &[]).unwrap();
    n.b.disconnect(n.now, ib, &[]).unwrap();
    let seen = n.pump();
    assert_eq!(seen.iter().filter(|s| s.1 == Drep).count(), 2, "{seen:?}");
    assert_eq!(n.ev_a().len(), 1);
    assert_eq!(n.ev_b().len(), 1);
    assert_eq!(n.a.state(ia), Some(CmState::TimeWait));
    assert_eq!(n.b.state(ib), Some(CmState::TimeWait));
}

#[test]
fn lost_dreq_is_retried_lost_drep_too_and_an_unanswered_dreq_still_disconnects() {
    let mut n = Net::new();
    let (ia, ib) = n.connect();
    n.a.disconnect(n.now, ia, &[]).unwrap();
    n.pump_with(|_, a| a == Dreq);
    n.next_timeout();
    // The DREQ again; this time its DREP is lost.
    assert_eq!(n.pump_with(|_, a| a == Drep), [(true, Dreq), (false, Drep)]);
    assert_eq!(n.b.state(ib), Some(CmState::TimeWait));
    // A's timer only (B's time wait is shorter than A's DREQ timeout here).
    n.now = n.a.poll_timeout().unwrap();
    n.a.handle_timeout(n.now);
    // B, in time wait, answers the third DREQ again.
    assert_eq!(n.pump(), [(true, Dreq), (false, Drep)]);
    assert_eq!(n.b.counters().rx_duplicates, 1);
    assert_eq!(n.a.state(ia), Some(CmState::TimeWait));
    assert_eq!(n.ev_b().len(), 1, "one Disconnected");

    // A peer gone: Disconnected (after the retries) all the same.
    let mut n = Net::new();
    let (ia, _) = n.connect();
    n.a.disconnect(n.now, ia, &[]).unwrap();
    let mut sent = 0;
    loop {
        sent += n.pump_with(|_, _| true).len();
        if !n.ev_a().is_empty() {
            break;
        }
        assert!(n.next_timeout());
    }
    assert_eq!(sent, 4);
    assert_eq!(n.a.state(ia), Some(CmState::TimeWait));
}

#[test]
fn a_dreq_for_nobody_gets_a_drep_and_a_dreq_before_the_rtu_disconnects() {
    let mut n = Net::new();
    let (ia, ib) = n.connect();
    // Forget B's side: A's DREQ names nobody there, and still gets its DREP.
    n.b.destroy(ib);
    n.a.disconnect(n.now, ia, &[]).unwrap();
    assert_eq!(n.pump(), [(true, Dreq), (false, Drep)]);
    assert_eq!(n.b.counters().rx_unknown_id, 1);
    assert!(matches!(n.ev_a()[..], [CmEvent::Disconnected { .. }]));

    // The RTU lost, then A disconnects: B (RepSent) takes the DREQ as the end.
    let mut n = Net::new();
    let ia = n.a.connect(n.now, &params()).unwrap();
    n.pump();
    let [CmEvent::ConnectRequest { id: ib, .. }] = n.ev_b()[..] else {
        panic!()
    };
    n.b.accept(n.now, ib, &AcceptParams::new(0x22, 1)).unwrap();
    n.pump();
    n.a.rtu(ia, &[]).unwrap();
    n.pump_with(|_, a| a == Rtu);
    n.a.disconnect(n.now, ia, &[]).unwrap();
    n.pump();
    assert_eq!(n.b.state(ib), Some(CmState::TimeWait));
    assert!(matches!(n.ev_b()[..], [CmEvent::Disconnected { .. }]));
}

#[test]
fn stale_req_in_time_wait_and_a_new_req_of_a_connected_qp() {
    let mut n = Net::new();
    let ia = n.a.connect(n.now, &params()).unwrap();
    let req = n.a.poll_transmit().unwrap();
    n.b.handle_mad(n.now, ip(1), 1, &req.mad);
    let [CmEvent::ConnectRequest { id: ib, .. }] = n.ev_b()[..] else {
        panic!()
    };
    n.b.accept(n.now, ib, &AcceptParams::new(0x22, 1)).unwrap();
    n.pump();
    n.a.rtu(ia, &[]).unwrap();
    n.pump();
    n.a.disconnect(n.now, ia, &[]).unwrap();
    n.pump();
    n.ev_a();
    n.ev_b();
    // The old REQ arrives late, B is in time wait: REJ stale connection.
    n.b.handle_mad(n.now, ip(1), 1, &req.mad);
    let rej = n.b.poll_transmit().unwrap();
    let CmRepr::Rej(r) = CmMad::parse(&rej.mad).unwrap().unwrap().msg else {
        panic!()
    };
    assert_eq!(
        (r.reason, r.remote_comm_id),
        (reason::STALE_CONNECTION, ia.0)
    );
    assert_eq!(n.b.counters().rx_stale, 1);

    // A new REQ of a QP that B has a connection with: REJ stale, and the old
    // connection is disconnected (the kernel's cm_match_req).
    let mut n = Net::new();
    let (ia, ib) = n.connect();
    let ia2 = n.a.connect(n.now, &params()).unwrap(); // the same QP 0x11
    let seen = n.pump();
    assert_eq!(seen[..2], [(true, Req), (false, Rej)]);
    assert!(seen.contains(&(false, Dreq)));
    let ev = n.ev_a();
    assert!(ev
        .iter()
        .any(|e| matches!(e, CmEvent::Rejected { id, reason: 10, .. } if *id == ia2)));
    assert!(ev
        .iter()
        .any(|e| matches!(e, CmEvent::Disconnected { id, .. } if *id == ia)));
    assert_eq!(n.b.state(ib), Some(CmState::TimeWait));
}

#[test]
fn rep_for_no_connection_is_rejected_invalid_comm_id_and_strays_are_counted() {
    let mut n = Net::new();
    let (ia, ib) = n.connect();
    // Replay B's REP to A under another communication ID: A knows no such REQ.
    let mut rep = CmMad {
        tid: 1,
        msg: CmRepr::Rep(crate::wire::cm_repr::RepRepr {
            local_comm_id: 77,
            remote_comm_id: 0x1234,
            local_qkey: 0,
            local_qpn: 5,
            local_eecn: 0,
            starting_psn: 1,
            responder_resources: 0,
            initiator_depth: 0,
            target_ack_delay: 0,
            failover_accepted: 0,
            end_to_end_flow_control: false,
            rnr_retry_count: 0,
            srq: false,
            local_ca_guid: 0,
            private_data: &[],
        }),
    }
    .to_bytes()
    .unwrap();
    n.a.handle_mad(n.now, ip(2), 1, &rep);
    let rej = n.a.poll_transmit().unwrap();
    let CmRepr::Rej(r) = CmMad::parse(&rej.mad).unwrap().unwrap().msg else {
        panic!()
    };
    assert_eq!((r.reason, r.remote_comm_id, r.message_rejected), (6, 77, 1));
    // An RTU or DREP for nobody, a REP from a stranger naming A's connection: dropped.
    rep[24..28].copy_from_slice(&ib.0.to_be_bytes());
    rep[28..32].copy_from_slice(&ia.0.to_be_bytes());
    n.a.handle_mad(n.now, ip(9), 1, &rep);
    let before = n.a.counters();
    let rtu = CmMad {
        tid: 1,
        msg: CmRepr::Rtu(crate::wire::cm_repr::IdsRepr {
            local_comm_id: 1,
            remote_comm_id: 2,
            private_data: &[],
        }),
    }
    .to_bytes()
    .unwrap();
    n.a.handle_mad(n.now, ip(2), 1, &rtu);
    assert_eq!(n.a.counters().rx_unknown_id, before.rx_unknown_id + 1);
    // An RTU to the active side of an established connection: unexpected.
    let rtu2 = CmMad {
        tid: 1,
        msg: CmRepr::Rtu(crate::wire::cm_repr::IdsRepr {
            local_comm_id: ib.0,
            remote_comm_id: ia.0,
            private_data: &[],
        }),
    }
    .to_bytes()
    .unwrap();
    n.a.handle_mad(n.now, ip(2), 1, &rtu2);
    assert_eq!(n.a.counters().rx_unexpected, before.rx_unexpected + 1);
    assert_eq!(n.a.state(ia), Some(CmState::Established));
    assert!(n.ev_a().is_empty());
}

#[test]
fn reqs_with_a_bad_transport_or_mtu_are_rejected_and_garbage_is_counted() {
    let mut n = Net::new();
    n.a.connect(n.now, &params()).unwrap();
    let req = n.a.poll_transmit().unwrap().mad;
    let mut rd = req;
    rd[24 + 43] = (rd[24 + 43] & !0x06) | (2 << 1); // RD
    rd[24] ^= 1; // another communication ID
    n.b.handle_mad(n.now, ip(1), 1, &rd);
    let r = n.b.poll_transmit().unwrap().mad;
    assert_eq!(
        u16::from_be_bytes([r[24 + 10], r[24 + 11]]),
        reason::INVALID_TRANSPORT_TYPE
    );
    let mut mtu = req;
    mtu[24 + 50] = (mtu[24 + 50] & 0x0f) | (7 << 4);
    mtu[24] ^= 2;
    n.b.handle_mad(n.now, ip(1), 1, &mtu);
    let r = n.b.poll_transmit().unwrap().mad;
    assert_eq!(
        u16::from_be_bytes([r[24 + 10], r[24 + 11]]),
        reason::INVALID_PATH_MTU
    );
    assert_eq!(n.b.connections(), 0);
    // Short, wrong class, wrong version, a response, LAP, comm ID 0: dropped, counted.
    n.b.handle_mad(n.now, ip(1), 1, &req[..255]);
    n.b.handle_mad(n.now, ip(1), 1, &[]);
    let mut zero = req;
    zero[24..28].fill(0);
    n.b.handle_mad(n.now, ip(1), 1, &zero);
    for (at, v) in [
        (1, 0x04),
        (2, 1),
        (3, 0x83),
        (17, 0x19),
        (17, 0x01),
        (17, 0x99),
    ] {
        let mut m = req;
        m[at] = v;
        n.b.handle_mad(n.now, ip(1), 1, &m);
    }
    let c = n.b.counters();
    assert_eq!((c.rx_malformed, c.rx_unsupported), (3, 6));
    assert!(n.b.poll_transmit().is_none());
    assert!(n.ev_b().is_empty());
}

#[test]
fn bad_calls_are_errors() {
    let mut n = Net::new();
    let mut p = params();
    p.private_data = vec![0; 93];
    assert!(matches!(
        n.a.connect(n.now, &p),
        Err(CmError::PrivateDataTooLong {
            max: 92,
            len: 93,
            ..
        })
    ));
    p.private_data.clear();
    p.qpn = 1 << 24;
    assert!(matches!(
        n.a.connect(n.now, &p),
        Err(CmError::InvalidParam(_))
    ));
    p.qpn = 1;
    p.peer = "::1".parse().unwrap();
    assert_eq!(n.a.connect(n.now, &p), Err(CmError::AddressFamily));
    assert_eq!(n.b.listen(SVC), Err(CmError::AlreadyListening(SVC)));
    let ia = n.a.connect(n.now, &params()).unwrap();
    assert!(matches!(
        n.a.accept(n.now, ia, &AcceptParams::new(1, 1)),
        Err(CmError::WrongState { .. })
    ));
    assert!(matches!(n.a.rtu(ia, &[]), Err(CmError::WrongState { .. })));
    assert!(matches!(
        n.a.disconnect(n.now, ia, &[]),
        Err(CmError::WrongState { .. })
    ));
    assert_eq!(n.a.reject(CmId(12345), &[]), Err(CmError::NoSuchId(12345)));
    assert!(n.a.destroy(ia));
    assert!(!n.a.destroy(ia));
}

#[test]
fn sidr_resolves_a_listened_service_and_refuses_others() {
    let mut n = Net::new();
    let svc = service_id(PortSpace::Udp, 7174);
    n.b.listen(svc).unwrap();
    let pd = ip_private_data(ip(1), 4000, ip(2), b"x").unwrap();
    let sp = SidrParams {
        service_id: svc,
        peer: ip(2),
        timeout: 10,
        max_retries: 2,
        private_data: pd,
    };
    let ia = n.a.sidr_resolve(n.now, &sp).unwrap();
    // The first SIDR_REQ is lost; the second arrives.
    n.pump_with(|_, _| true);
    n.next_timeout();
    assert_eq!(n.pump(), [(true, SidrReq)]);
    let ev = n.ev_b();
    let [CmEvent::SidrRequest {
        id: ib,
        service_id: s,
        peer,
        ip: Some(h),
        ..
    }] = ev[..]
    else {
        panic!("{ev:?}")
    };
    assert_eq!(
        (s, peer, h.src_port, h.src, h.dst),
        (svc, ip(1), 4000, ip(1), ip(2))
    );
    let reply = SidrReplyParams {
        status: SIDR_VALID,
        qpn: 0x12,
        qkey: 0x0123_4567,
        private_data: vec![],
    };
    n.b.sidr_reply(n.now, ib, &reply).unwrap();
    assert!(n.b.sidr_reply(n.now, ib, &reply).is_err(), "answered once");
    // The SIDR_REP is lost: the SIDR_REQ comes again and gets it again.
    n.pump_with(|_, a| a == SidrRep);
    n.next_timeout();
    assert_eq!(n.pump(), [(true, SidrReq), (false, SidrRep)]);
    assert!(n.ev_b().is_empty(), "a duplicate makes no second event");
    assert_eq!(
        n.ev_a(),
        [CmEvent::SidrReply {
            id: ia,
            status: 0,
            qpn: 0x12,
            qkey: 0x0123_4567,
            private_data: vec![0; 136]
        }]
    );
    while n.next_timeout() {}
    assert!(n.b.sidrs.is_empty() && n.a.sidrs.is_empty());

    // Nobody listens: status 1. Nobody answers: Unreachable after the retries.
    let ia =
        n.a.sidr_resolve(
            n.now,
            &SidrParams {
                service_id: svc + 1,
                ..sp.clone()
            },
        )
        .unwrap();
    n.pump();
    assert!(matches!(n.ev_a()[..], [CmEvent::SidrReply { id, status: 1, .. }] if id == ia));
    let ia = n.a.sidr_resolve(n.now, &sp).unwrap();
    let mut sent = 0;
    loop {
        sent += n.pump_with(|_, _| true).len();
        if !n.next_timeout() {
            break;
        }
    }
    assert_eq!(sent, 3);
    assert_eq!(n.ev_a(), [CmEvent::Unreachable { id: ia }]);
}

// ---- against rdma_rxe's own MADs (crates/uroce/tests/data/rdma_cm.pcap) ----

/// The CM MAD of frame `n` of rdma_cm.pcap.
fn rxe_mad(n: usize) -> [u8; MAD_LEN] {
    let file = include_bytes!("../../../uroce/tests/data/rdma_cm.pcap");
    let f = crate::pcap::Reader::new(file)
        .unwrap()
        .nth(n - 1)
        .unwrap()
        .unwrap();
    let p = crate::wire::parse(f.data).unwrap();
    p.payload.try_into().unwrap()
}

/// The BTH PSN of frame `n` of rdma_cm.pcap.
fn rxe_psn(n: usize) -> u32 {
    let file = include_bytes!("../../../uroce/tests/data/rdma_cm.pcap");
    let f = crate::pcap::Reader::new(file)
        .unwrap()
        .nth(n - 1)
        .unwrap()
        .unwrap();
    crate::wire::parse(f.data).unwrap().bth.psn()
}

fn ip4(s: &str) -> IpAddr {
    s.parse().unwrap()
}

/// rdma_rxe at 10.78.0.11 (guest 1, rping -s) and 10.78.0.12 (guest 2, rping -c).
fn rxe_like(n: u8) -> CmEndpoint {
    CmEndpoint::new(CmConfig::new(
        ip4(&format!("10.78.0.{n}")),
        ca_guid_from_mac([0x52, 0x54, 0, 0x77, 0, ((n / 10) << 4) | (n % 10)]),
        7,
    ))
}

fn set_ids(mad: &mut [u8; MAD_LEN], tid: u64, local: u32, remote: Option<u32>) {
    mad[8..16].copy_from_slice(&tid.to_be_bytes());
    mad[24..28].copy_from_slice(&local.to_be_bytes());
    if let Some(r) = remote {
        mad[28..32].copy_from_slice(&r.to_be_bytes());
    }
}

#[test]
fn our_req_rtu_and_dreq_are_rxes_field_for_field() {
    let rxe_req = rxe_mad(1);
    let CmRepr::Req(r) = CmMad::parse(&rxe_req).unwrap().unwrap().msg else {
        panic!()
    };
    assert_eq!(
        ca_guid_from_mac([0x52, 0x54, 0, 0x77, 0, 0x12]),
        r.local_ca_guid
    );
    let mut a = rxe_like(12);
    let p = ConnectParams {
        flow_label: r.primary.flow_label,
        private_data: r.private_data.to_vec(),
        ..ConnectParams::new(r.service_id, ip4("10.78.0.11"), r.local_qpn, r.starting_psn)
    };
    let now = Instant::now();
    let ia = a.connect(now, &p).unwrap();
    let mut ours = a.poll_transmit().unwrap().mad;
    let our_tid = u64::from_be_bytes(ours[8..16].try_into().unwrap());
    // Everything but the transaction and communication IDs (random per run) is rxe's.
    set_ids(&mut ours, 0x2_1ad9_448e, 0x8e44_d91a, None);
    assert_eq!(
        CmMad::parse(&ours).unwrap(),
        CmMad::parse(&rxe_req).unwrap()
    );
    assert_eq!(ours, rxe_req);

    // rxe's REP (frame 2) addressed to our connection: our RTU is frame 3.
    let mut rep = rxe_mad(2);
    set_ids(&mut rep, our_tid, 0x44a2_8b16, Some(ia.0));
    a.handle_mad(now, ip4("10.78.0.11"), 1, &rep);
    assert!(matches!(a.poll_event(), Some(CmEvent::ConnectReply { .. })));
    a.rtu(ia, &[]).unwrap();
    let mut rtu = a.poll_transmit().unwrap().mad;
    set_ids(&mut rtu, 0x2_1ad9_448e, 0x8e44_d91a, None);
    assert_eq!(rtu, rxe_mad(3));
    // The attributes rping's QP got from it: rxe's REP said QP 0x11 and PSN 0x7871b3,
    // from which the active side sends (its first SEND, frame 4); it receives from its
    // own REQ's PSN, where the passive side's first RDMA READ request goes (frame 6).
    let (rtr, _) = a.qp_attr(ia, QpState::Rtr).unwrap();
    let (rts, _) = a.qp_attr(ia, QpState::Rts).unwrap();
    assert_eq!(
        (rtr.dest_qp_num, rtr.rq_psn, rts.sq_psn, rtr.path_mtu),
        (0x11, r.starting_psn, 0x78_71b3, Mtu::M1024)
    );
    assert_eq!((rxe_psn(4), rxe_psn(6)), (rts.sq_psn, rtr.rq_psn));
    // The DREQ (frame 40).
    a.disconnect(now, ia, &[]).unwrap();
    let mut dreq = a.poll_transmit().unwrap().mad;
    set_ids(&mut dreq, 0x2_1ad9_448e, 0x8e44_d91a, None);
    assert_eq!(dreq, rxe_mad(40));
}

#[test]
fn our_answers_to_rxes_req_are_rxes_rep_drep_and_rej() {
    let mut b = rxe_like(11);
    b.listen(0x0106_1c06).unwrap();
    let now = Instant::now();
    let from = ip4("10.78.0.12");
    b.handle_mad(now, from, 1, &rxe_mad(1));
    let Some(CmEvent::ConnectRequest { id, req }) = b.poll_event() else {
        panic!()
    };
    let h = req.ip.unwrap();
    assert_eq!((h.src, h.dst, h.src_port), (from, ip4("10.78.0.11"), 59576));
    let rxe_rep = rxe_mad(2);
    let CmRepr::Rep(r) = CmMad::parse(&rxe_rep).unwrap().unwrap().msg else {
        panic!()
    };
    b.accept(now, id, &AcceptParams::new(r.local_qpn, r.starting_psn))
        .unwrap();
    let mut rep = b.poll_transmit().unwrap().mad;
    set_ids(&mut rep, 0x2_1ad9_448e, 0x44a2_8b16, None);
    assert_eq!(rep, rxe_mad(2), "REP");
    // rxe's RTU and DREQ, addressed to our ID: our DREP is frame 41.
    for f in [3, 40] {
        let mut m = rxe_mad(f);
        m[28..32].copy_from_slice(&id.0.to_be_bytes());
        b.handle_mad(now, from, 1, &m);
    }
    let mut drep = b.poll_transmit().unwrap().mad;
    set_ids(&mut drep, 0x2_1ad9_448e, 0x44a2_8b16, None);
    assert_eq!(drep, rxe_mad(41), "DREP");
    // The REQ to port 7777, which nobody listens on: rxe's REJ (frame 49) byte for byte.
    b.handle_mad(now, from, 1, &rxe_mad(48));
    assert_eq!(b.poll_transmit().unwrap().mad, rxe_mad(49), "REJ reason 8");
    // udaddy's SIDR_REQ (frame 42): our SIDR_REP with the QP and Q_Key rxe gave is
    // frame 43.
    b.listen(0x0111_1c06).unwrap();
    while b.poll_event().is_some() {}
    b.handle_mad(now, from, 1, &rxe_mad(42));
    let Some(CmEvent::SidrRequest {
        id, ip: Some(h), ..
    }) = b.poll_event()
    else {
        panic!()
    };
    assert_eq!(h.dst, ip4("10.78.0.11"));
    let reply = SidrReplyParams {
        status: SIDR_VALID,
        qpn: 0x12,
        qkey: 0x0123_4567,
        private_data: vec![],
    };
    b.sidr_reply(now, id, &reply).unwrap();
    assert_eq!(b.poll_transmit().unwrap().mad, rxe_mad(43), "SIDR_REP");
    // And the IPv6 REQ (frame 50) carries an IPv6 header.
    let mut b6 = CmEndpoint::new(CmConfig::new(ip4("fe80::5054:ff:fe77:11"), 1, 1));
    b6.listen(0x0106_1c06).unwrap();
    b6.handle_mad(now, ip4("fe80::5054:ff:fe77:12"), 1, &rxe_mad(50));
    let Some(CmEvent::ConnectRequest { req, .. }) = b6.poll_event() else {
        panic!()
    };
    assert_eq!(req.ip.unwrap().src, ip4("fe80::5054:ff:fe77:12"));
}

#[test]
fn a_flood_of_reqs_stops_at_the_backlog() {
    let mut n = Net::new();
    n.b.cfg.backlog = 3;
    n.a.connect(n.now, &params()).unwrap();
    let req = n.a.poll_transmit().unwrap().mad;
    for k in 0..5u8 {
        let mut m = req;
        m[27] ^= k.wrapping_add(1); // another communication ID each
        m[24 + 34] = k; // and another QP
        n.b.handle_mad(n.now, ip(1), 1, &m);
    }
    assert_eq!(n.b.connections(), 3);
    assert_eq!(n.b.counters().rx_backlog_full, 2);
    let rejs: Vec<_> = std::iter::from_fn(|| n.b.poll_transmit()).collect();
    assert_eq!(rejs.len(), 2);
    let CmRepr::Rej(r) = CmMad::parse(&rejs[0].mad).unwrap().unwrap().msg else {
        panic!()
    };
    assert_eq!(r.reason, reason::NO_RESOURCES);
    // Answering one makes room for one more.
    let ib = match n.ev_b().first() {
        Some(CmEvent::ConnectRequest { id, .. }) => *id,
        e => panic!("{e:?}"),
    };
    n.b.reject(ib, &[]).unwrap();
    let mut m = req;
    m[27] ^= 0x77;
    m[24 + 34] = 9;
    n.b.handle_mad(n.now, ip(1), 1, &m);
    assert_eq!(n.b.connections(), 3);
    assert_eq!(n.b.counters().rx_backlog_full, 2);
}

#[test]
fn simultaneous_connect_makes_the_larger_guid_the_active_side() {
    // Both sides connect peer to peer to the same service; neither listens.
    let mut n = Net::new();
    n.b.stop_listen(SVC);
    let pa = ConnectParams {
        peer_to_peer: true,
        ..params()
    };
    let pb = ConnectParams {
        peer: ip(1),
        qpn: 0x33,
        starting_psn: 0x3000,
        ..pa.clone()
    };
    let ia = n.a.connect(n.now, &pa).unwrap();
    let ib = n.b.connect(n.now, &pb).unwrap();
    // B's CA GUID (from MAC ...:02) is the larger: B stays active, A becomes passive.
    assert!(n.b.config().ca_guid > n.a.config().ca_guid);
    assert_eq!(n.pump(), [(true, Req), (false, Req)]);
    let ev = n.ev_a();
    let [CmEvent::ConnectRequest { id, ref req }] = ev[..] else {
        panic!("{ev:?}")
    };
    assert_eq!((id, req.remote_qpn), (ia, 0x33));
    assert!(n.ev_b().is_empty(), "B drops A's REQ");
    assert_eq!(n.a.state(ia), Some(CmState::ReqRcvd));
    n.a.accept(n.now, ia, &AcceptParams::new(0x11, 0x1000))
        .unwrap();
    n.pump();
    assert!(matches!(n.ev_b()[..], [CmEvent::ConnectReply { id, .. }] if id == ib));
    n.b.rtu(ib, &[]).unwrap();
    n.pump();
    assert_eq!(n.a.state(ia), Some(CmState::Established));
    assert_eq!(n.b.state(ib), Some(CmState::Established));
    let (ar, _) = n.a.qp_attr(ia, QpState::Rtr).unwrap();
    let (br, _) = n.b.qp_attr(ib, QpState::Rtr).unwrap();
    assert_eq!((ar.dest_qp_num, ar.rq_psn), (0x33, 0x1000));
    assert_eq!((br.dest_qp_num, br.rq_psn), (0x11, 0x3000));
    // Without peer_to_peer, the same crossing is two REQs nobody listens for.
    let mut n = Net::new();
    n.b.stop_listen(SVC);
    n.a.connect(n.now, &params()).unwrap();
    n.b.connect(
        n.now,
        &ConnectParams {
            peer: ip(1),
            ..params()
        },
    )
    .unwrap();
    n.pump();
    assert!(matches!(
        n.ev_a()[..],
        [CmEvent::Rejected { reason: 8, .. }]
    ));
    assert!(matches!(
        n.ev_b()[..],
        [CmEvent::Rejected { reason: 8, .. }]
    ));
}

#[test]
fn abort_after_the_rep_rejects_and_abort_when_established_disconnects() {
    // The passive application goes away after accepting: a REJ (28), not an RTU into
    // nothing; the active side learns it as Rejected.
    let mut n = Net::new();
    let ia = n.a.connect(n.now, &params()).unwrap();
    n.pump();
    let [CmEvent::ConnectRequest { id: ib, .. }] = n.ev_b()[..] else {
        panic!("no ConnectRequest")
    };
    n.b.accept(n.now, ib, &AcceptParams::new(0x22, 0x2000))
        .unwrap();
    // The REP is on its way when B's application goes away.
    assert!(n.b.abort(n.now, ib));
    assert_eq!(n.b.state(ib), None);
    let seen = n.pump();
    assert!(seen.contains(&(false, Rej)), "{seen:?}");
    let ev = n.ev_a();
    assert!(
        ev.iter()
            .any(|e| matches!(e, CmEvent::Rejected { id, reason: 28, .. } if *id == ia)),
        "{ev:?}"
    );
    // Established: the DREQ goes out, and again when it is lost, until the DREP.
    let mut n = Net::new();
    let (ia, ib) = n.connect();
    assert!(n.a.abort(n.now, ia));
    let mut first = true;
    let seen = n.pump_with(|from_a, at| {
        let lose = from_a && at == Dreq && first;
        first &= !lose;
        lose
    });
    assert_eq!(seen, [(true, Dreq)]);
    assert!(n.next_timeout());
    assert_eq!(n.pump(), [(true, Dreq), (false, Drep)]);
    assert!(matches!(n.ev_b()[..], [CmEvent::Disconnected { id, .. }] if id == ib));
    while n.next_timeout() {}
    assert_eq!(n.a.connections(), 0);
    assert!(!n.a.abort(n.now, ia));
}
