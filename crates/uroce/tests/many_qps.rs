//! The context's schedule (`endpoint/schedule.rs`): only QPs on the ready list are asked
//! for packets and only QPs with a due entry in the timer heap run their timers. With
//! thousands of idle QPs around, a due retransmission still fires, and exactly when;
//! busy QPs take turns; a QP held back by DCQCN's rate limiter comes back when its rate
//! allows, while the others go on.

use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};

use uroce::congestion::dcqcn::Params;
use uroce::mem::{Access, Mr};
use uroce::verbs::{
    ack_timeout, Context, ContextConfig, CqId, InitAttr, Mtu, QpCaps, QpType, Remote, RtrAttr,
    RtsAttr, SendOp, SendWr, Sge, WcStatus,
};
use uroce::wire::{self, cnp, ExtHeaders, FrameRepr, IpRepr, Ipv4Repr, Opcode, UdpRepr};

fn ip(last: u8) -> Ipv4Addr {
    Ipv4Addr::new(10, 0, 0, last)
}

struct Side {
    c: Context,
    cq: CqId,
    qps: Vec<u32>,
    mr: Mr,
}

/// A context with `n` RC QPs in INIT and a 64 KiB region.
fn side(last: u8, n: u32, t0: Instant) -> Side {
    let mut c = Context::new(
        ContextConfig {
            mac: [2, 0, 0, 0, 0, last],
            ip: IpAddr::V4(ip(last)),
            seed: u64::from(last),
            udp_sport_base: 0xc000,
            tos: 0,
        },
        t0,
    );
    let cq = c.create_cq(4095).unwrap();
    let pd = c.alloc_pd();
    let caps = QpCaps {
        qp_type: QpType::Rc,
        send_cq: cq,
        recv_cq: cq,
        max_send_wr: 64,
        max_recv_wr: 64,
    };
    let qps = (0..n)
        .map(|_| {
            let q = c.create_qp(pd, caps).unwrap();
            c.modify_qp_init(q, InitAttr::default()).unwrap();
            q
        })
        .collect();
    let all = Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ;
    let mr = c.reg_mr(pd, vec![0x5a; 1 << 16], all).unwrap();
    Side { c, cq, qps, mr }
}

/// Brings `q` of `s` to RTS towards QP `dest` of the context at `peer`.
fn connect(s: &mut Side, q: u32, peer: u8, dest: u32) {
    let rtr = RtrAttr {
        remote: Remote {
            ip: IpAddr::V4(ip(peer)),
            mac: [2, 0, 0, 0, 0, peer],
        },
        dest_qpn: dest,
        rq_psn: 0,
        path_mtu: Mtu::M1024,
        max_dest_rd_atomic: 16,
        min_rnr_timer: 1,
    };
    s.c.modify_qp_rtr(q, rtr).unwrap();
    s.c.modify_qp_rts(q, RtsAttr::default()).unwrap();
}

/// A: `idle` QPs in RTS towards QPNs nobody has, then `busy` QPs connected one to one to
/// B's. Returns both and A's busy QPs.
fn pair(idle: u32, busy: u32, t0: Instant) -> (Side, Side, Vec<u32>) {
    let mut a = side(1, idle + busy, t0);
    let mut b = side(2, busy, t0);
    for i in 0..idle {
        let q = a.qps[i as usize];
        connect(&mut a, q, 2, 0x70_0000 + i);
    }
    let mine = a.qps[idle as usize..].to_vec();
    for (&qa, &qb) in mine.iter().zip(&b.qps.clone()) {
        connect(&mut a, qa, 2, qb);
        connect(&mut b, qb, 1, qa);
    }
    (a, b, mine)
}

fn write(a: &mut Side, q: u32, id: u64, len: u32, b: &Side) {
    let wr = SendWr {
        wr_id: id,
        op: SendOp::Write {
            remote_addr: b.mr.addr,
            rkey: b.mr.rkey,
        },
        sge: Sge {
            addr: a.mr.addr,
            length: len,
            lkey: a.mr.lkey,
        },
        signaled: true,
        solicited: false,
    };
    a.c.post_send(q, wr).unwrap();
}

/// Moves frames both ways at `now` until neither side has one.
fn pump(a: &mut Side, b: &mut Side, now: Instant) {
    let mut buf = vec![0u8; 9000];
    loop {
        let mut moved = false;
        while let Some(n) = a.c.poll_frame(now, &mut buf) {
            b.c.handle_frame(now, &buf[..n]).unwrap();
            moved = true;
        }
        while let Some(n) = b.c.poll_frame(now, &mut buf) {
            a.c.handle_frame(now, &buf[..n]).unwrap();
            moved = true;
        }
        if !moved {
            break;
        }
    }
}

#[test]
fn a_due_retransmission_fires_among_10000_idle_qps() {
    let t0 = Instant::now();
    let (mut a, mut b, busy) = pair(10_000, 1, t0);
    let q = busy[0];
    let mut buf = vec![0u8; 9000];
    // The QPs just brought up have nothing to send.
    assert!(a.c.poll_frame(t0, &mut buf).is_none());
    assert_eq!(a.c.poll_timeout(), None, "no QP has a timer");
    write(&mut a, q, 1, 100, &b);
    let n = a.c.poll_frame(t0, &mut buf).unwrap(); // lost
    let first = wire::parse(&buf[..n]).unwrap().bth;
    assert!(
        a.c.poll_frame(t0, &mut buf).is_none(),
        "one packet, no other QP sends"
    );
    // A clean QP's recovery probe comes first: an eighth of its ACK timeout (67 ms),
    // but at least 10 ms.
    let t = ack_timeout(RtsAttr::default().timeout).unwrap();
    assert!(t / 8 < Duration::from_millis(10));
    let due = t0 + Duration::from_millis(10);
    assert_eq!(
        a.c.poll_timeout(),
        Some(due),
        "the busy QP's recovery probe"
    );

    let early = due - Duration::from_nanos(1);
    a.c.handle_timeout(early);
    assert!(a.c.poll_frame(early, &mut buf).is_none(), "not due yet");
    a.c.handle_timeout(due);
    let n = a.c.poll_frame(due, &mut buf).unwrap();
    let again = wire::parse(&buf[..n]).unwrap().bth;
    assert_eq!(
        (again.dest_qp(), again.psn()),
        (first.dest_qp(), first.psn()),
        "resent"
    );
    assert!(a.c.poll_frame(due, &mut buf).is_none());
    let c = a.c.qp_counters(q).unwrap();
    assert_eq!(
        (c.retransmits, c.tail_probes, c.local_ack_timeout_err),
        (1, 1, 0)
    );
    let others: u64 =
        a.c.qpns()
            .filter_map(|n| a.c.qp_counters(n))
            .map(|c| c.packets_sent)
            .sum();
    assert_eq!(others, 2, "only the busy QP sent, twice");

    b.c.handle_frame(due, &buf[..n]).unwrap();
    pump(&mut a, &mut b, due);
    let wcs = a.c.poll_cq(a.cq, 4);
    assert_eq!(wcs.len(), 1);
    assert_eq!((wcs[0].wr_id, wcs[0].status), (1, WcStatus::Success));
}

/// Busy QPs take turns a run at a time (64 KiB of payload, 64 packets at most), across
/// the ends of their messages while they have more, as the schedule's `requeue` says,
/// so that a datapath gets runs of one QP's packets (one GSO send each) and QPs of
/// small messages share by bytes with those of large ones.
#[test]
fn two_busy_qps_take_turns_a_run_at_a_time() {
    let t0 = Instant::now();
    let (mut a, mut b, busy) = pair(100, 2, t0);
    // 8 messages of 16 KiB each at MTU 1024: 16 packets each, 128 per QP, posted one QP
    // after the other.
    for &q in &busy {
        for i in 0..8 {
            write(&mut a, q, u64::from(q) << 8 | i, 16 << 10, &b);
        }
    }
    let mut buf = vec![0u8; 9000];
    let mut runs: Vec<(u32, usize)> = Vec::new();
    while let Some(n) = a.c.poll_frame(t0, &mut buf) {
        let p = wire::parse(&buf[..n]).unwrap();
        match runs.last_mut() {
            Some((q, k)) if *q == p.bth.dest_qp() => *k += 1,
            _ => runs.push((p.bth.dest_qp(), 1)),
        }
        b.c.handle_frame(t0, &buf[..n]).unwrap();
    }
    let (qa, qb) = (b.qps[0], b.qps[1]);
    assert_eq!(
        runs,
        [(qa, 64), (qb, 64)].repeat(2),
        "(QP, packets in a row): the QPs alternate by 64 KiB runs, four messages each"
    );
    pump(&mut a, &mut b, t0);
    let wcs = a.c.poll_cq(a.cq, 32);
    assert_eq!(wcs.len(), 16);
    assert!(wcs.iter().all(|w| w.status == WcStatus::Success));
}

/// A CNP from B (10.0.0.2) to A's QP `qpn`.
fn cnp_to(qpn: u32) -> Vec<u8> {
    let r = FrameRepr {
        eth: Some(wire::EthernetRepr {
            dst: [2, 0, 0, 0, 0, 1],
            src: [2, 0, 0, 0, 0, 2],
            vlan: None,
            ethertype: 0x0800,
        }),
        ip: IpRepr::V4(Ipv4Repr::new(ip(2), ip(1), 48 << 2)),
        udp: UdpRepr {
            src_port: 0xc001,
            dst_port: 4791,
            checksum: 0,
        },
        bth: cnp::bth(qpn, 0xffff),
        ext: ExtHeaders::default(),
    };
    let mut f = vec![0u8; r.buffer_len(0)];
    r.emit(&[], &mut f).unwrap();
    f
}

#[test]
fn a_qp_held_by_dcqcn_resumes_when_its_rate_allows() {
    let t0 = Instant::now();
    let (mut a, mut b, busy) = pair(1_000, 2, t0);
    a.c.enable_dcqcn(Params::paper(40e9), t0);
    let (slow, fast) = (busy[0], busy[1]);
    for &q in &busy {
        write(&mut a, q, u64::from(q), 16 * 1024, &b); // 16 packets each
    }
    // The CNP halves `slow`'s rate (alpha 1): 20 Gb/s, a 1024-byte packet's frame every
    // ~430 ns.
    a.c.handle_frame(t0, &cnp_to(slow)).unwrap();
    assert_eq!(a.c.reaction_point(slow).unwrap().cnps, 1);
    let at_t0 = sent(&mut a, &mut b, t0);
    let (qs, qf) = (b.qps[0], b.qps[1]);
    assert_eq!(
        at_t0.iter().filter(|&&d| d == qs).count(),
        1,
        "the slow QP sends one packet, then waits for its rate: {at_t0:x?}"
    );
    assert_eq!(
        at_t0.iter().filter(|&&d| d == qf).count(),
        16,
        "the other goes on"
    );
    let due = a.c.poll_timeout().expect("the pacer's release is a timer");
    assert!(
        due > t0 && due < t0 + Duration::from_micros(1),
        "{:?}",
        due - t0
    );
    let early = due - Duration::from_nanos(1);
    a.c.handle_timeout(early);
    assert!(sent(&mut a, &mut b, early).is_empty(), "not yet");
    // Each release lets one packet go; the slow QP sends the other 15 in 15 turns.
    let mut now = due;
    for _ in 0..15 {
        now = a.c.poll_timeout().unwrap().max(now);
        a.c.handle_timeout(now);
        assert_eq!(sent(&mut a, &mut b, now), [qs], "released: one packet");
    }
    assert!(
        now - t0 > Duration::from_nanos(15 * 400),
        "paced at about 20 Gb/s: {:?}",
        now - t0
    );
    pump(&mut a, &mut b, now);
    let wcs = a.c.poll_cq(a.cq, 4);
    assert_eq!(wcs.len(), 2);
    assert!(wcs.iter().all(|w| w.status == WcStatus::Success));
    assert_eq!(a.c.qp_counters(fast).unwrap().packets_sent, 16);
}

/// A's frames at `now`, handed to B; the destination QPNs.
fn sent(a: &mut Side, b: &mut Side, now: Instant) -> Vec<u32> {
    let mut buf = vec![0u8; 9000];
    let mut v = Vec::new();
    while let Some(n) = a.c.poll_frame(now, &mut buf) {
        let p = wire::parse(&buf[..n]).unwrap();
        assert_ne!(p.bth.opcode(), Opcode::Cnp);
        v.push(p.bth.dest_qp());
        b.c.handle_frame(now, &buf[..n]).unwrap();
    }
    v
}
