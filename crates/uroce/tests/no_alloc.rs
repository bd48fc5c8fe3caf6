//! No allocation per packet on the send or receive path after warm-up: two RC endpoints
//! back to back, RDMA WRITEs and SENDs through post_send, poll_transmit, handle_frame and
//! poll_cq_into, counted with a counting global allocator; then the same through
//! [`Endpoint`] and the UDP socket backend on loopback (batched sendmmsg / recvmmsg).

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use uroce::datapath::event_loop::Endpoint;
use uroce::datapath::udp::UdpBackend;

use uroce::mem::Access;
use uroce::verbs::{
    Context, ContextConfig, CqId, InitAttr, Mtu, QpCaps, QpInitEx, QpType, RecvWr, Remote, RtrAttr,
    RtsAttr, SendFlags, SendOp, SendWr, Sge, SrqAttr, WorkCompletion,
};

struct Counting;

thread_local! {
    /// Allocations made by this thread: the test harness's own thread (printing another
    /// test's result) allocates while a test measures, and must not count.
    static ALLOCS: Cell<u64> = const { Cell::new(0) };
}

fn count() {
    // `try_with`: an allocation while the thread's locals are torn down is not counted.
    let _ = ALLOCS.try_with(|c| c.set(c.get() + 1));
}

/// Allocations this thread has made so far.
fn allocs() -> u64 {
    ALLOCS.with(Cell::get)
}

// SAFETY: forwards to the system allocator, only counting calls.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        count();
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        count();
        unsafe { System.realloc(p, l, n) }
    }
}

#[global_allocator]
static A: Counting = Counting;

/// One test at a time, as before the count was per thread (the UDP backend's test binds
/// sockets of its own).
static SERIAL: Mutex<()> = Mutex::new(());

fn ctx(n: u8) -> (Context, CqId, u32, uroce::mem::Mr) {
    ctx_at(Ipv4Addr::new(10, 0, 0, n), n)
}

fn ctx_at(ip: Ipv4Addr, n: u8) -> (Context, CqId, u32, uroce::mem::Mr) {
    let mut c = Context::new(
        ContextConfig {
            mac: [2, 0, 0, 0, 0, n],
            ip: IpAddr::V4(ip),
            seed: u64::from(n),
            udp_sport_base: 0xc000,
            tos: 0,
        },
        std::time::Instant::now(),
    );
    let cq = c
        .create_cq(uroce::verbs::MAX_CQE)
        .expect("MAX_CQE is a valid CQ depth");
    let pd = c.alloc_pd();
    let caps = QpCaps {
        qp_type: QpType::Rc,
        send_cq: cq,
        recv_cq: cq,
        max_send_wr: 256,
        max_recv_wr: 256,
    };
    // Room for the scatter/gather lists of `steady_state_with_sge_lists_...`.
    let ex = QpInitEx {
        max_send_sge: 4,
        max_recv_sge: 4,
        ..QpInitEx::default()
    };
    let q = c.create_qp_ex(pd, caps, ex).unwrap();
    let all = Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ;
    let mr = c.reg_mr(pd, vec![1; 1 << 20], all).unwrap();
    (c, cq, q, mr)
}

#[test]
fn steady_state_send_and_receive_do_not_allocate() {
    steady_state(false, false);
}

/// The same with every send and receive a list of SGEs whose boundaries the 4096-byte
/// packets cross (3000, 0, 5000, 8384 bytes): a list of several SGEs costs one
/// allocation when it is posted (the WQE's shared list) and none per packet, gathered
/// or scattered.
#[test]
fn steady_state_with_sge_lists_allocates_once_per_post_and_never_per_packet() {
    steady_state(false, true);
}

/// The same with B's receives taken from a shared receive queue (post_srq_recv, and the
/// responder taking its WQEs through the SRQ).
#[test]
fn steady_state_with_an_srq_does_not_allocate() {
    steady_state(true, false);
}

fn steady_state(with_srq: bool, lists: bool) {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (mut a, cqa, qa, ma) = ctx(1);
    let (mut b, cqb, mut qb, mb) = ctx(2);
    let srq = with_srq.then(|| {
        let pd = uroce::mem::PdId(0);
        let attr = SrqAttr {
            max_wr: 256,
            max_sge: 1,
            srq_limit: 0,
        };
        let srq = b.create_srq(pd, attr).unwrap();
        let caps = QpCaps {
            qp_type: QpType::Rc,
            send_cq: cqb,
            recv_cq: cqb,
            max_send_wr: 256,
            max_recv_wr: 0,
        };
        let ex = QpInitEx {
            srq: Some(srq),
            ..QpInitEx::default()
        };
        qb = b.create_qp_ex(pd, caps, ex).unwrap();
        srq
    });
    for (c, q, peer, pq) in [(&mut a, qa, 2u8, qb), (&mut b, qb, 1, qa)] {
        c.modify_qp_init(q, InitAttr::default()).unwrap();
        let remote = Remote {
            ip: IpAddr::V4(Ipv4Addr::new(10, 0, 0, peer)),
            mac: [2, 0, 0, 0, 0, peer],
        };
        let rtr = RtrAttr {
            remote,
            dest_qpn: pq,
            rq_psn: 7,
            path_mtu: Mtu::M4096,
            max_dest_rd_atomic: 4,
            min_rnr_timer: 1,
        };
        c.modify_qp_rtr(q, rtr).unwrap();
        c.modify_qp_rts(
            q,
            RtsAttr {
                sq_psn: 7,
                ..RtsAttr::default()
            },
        )
        .unwrap();
    }
    let now = Instant::now();
    let mut buf = vec![0u8; 4096 + 256];
    let mut wcs: Vec<WorkCompletion> = Vec::with_capacity(1024);
    let list = |base: u64, lkey: u32| {
        let mut at = base;
        [3000, 0, 5000, 8384].map(|length| {
            let s = Sge {
                addr: at,
                length,
                lkey,
            };
            at += u64::from(length) + 100;
            s
        })
    };
    let mut round = |a: &mut Context, b: &mut Context, i: u64| {
        let sge = Sge {
            addr: ma.addr,
            length: 16384,
            lkey: ma.lkey,
        };
        let op = if i % 2 == 0 {
            SendOp::Write {
                remote_addr: mb.addr,
                rkey: mb.rkey,
            }
        } else {
            SendOp::Send
        };
        if i % 2 == 1 {
            let rsge = Sge {
                addr: mb.addr + 65536,
                length: 16384,
                lkey: mb.lkey,
            };
            let wr = RecvWr {
                wr_id: i,
                sge: rsge,
            };
            match srq {
                Some(srq) => b.post_srq_recv(srq, wr).unwrap(),
                None if lists => b
                    .post_recv_sgl(qb, i, &list(mb.addr + 65536, mb.lkey))
                    .unwrap(),
                None => b.post_recv(qb, wr).unwrap(),
            }
        }
        let mut wr = SendWr {
            wr_id: i,
            op,
            sge,
            signaled: true,
            solicited: false,
        };
        if lists {
            wr.sge = Sge::default();
            let l = list(ma.addr, ma.lkey);
            a.post_send_sgl(qa, wr, &l, SendFlags::NONE).unwrap();
        } else {
            a.post_send(qa, wr).unwrap();
        }
        loop {
            let mut moved = false;
            while let Some(n) = a.poll_frame(now, &mut buf) {
                b.handle_frame(now, &buf[..n]).unwrap();
                moved = true;
            }
            while let Some(n) = b.poll_frame(now, &mut buf) {
                a.handle_frame(now, &buf[..n]).unwrap();
                moved = true;
            }
            if !moved {
                break;
            }
        }
        wcs.clear();
        a.poll_cq_into(cqa, 64, &mut wcs);
        b.poll_cq_into(cqb, 64, &mut wcs);
        wcs.len()
    };
    for i in 0..200 {
        round(&mut a, &mut b, i);
    }
    let before = allocs();
    let mut completions = 0;
    for i in 200..400 {
        completions += round(&mut a, &mut b, i);
    }
    let allocs = allocs() - before;
    assert!(completions >= 300, "{completions} completions");
    // With lists: one per send post (200) and one per receive post (100 SENDs).
    let posts = if lists { 300 } else { 0 };
    assert_eq!(
        allocs, posts,
        "{allocs} allocations in 200 messages (800 data packets) after warm-up"
    );
}

fn connect(c: &mut Context, q: u32, peer: Ipv4Addr, pq: u32) {
    c.modify_qp_init(q, InitAttr::default()).unwrap();
    let rtr = RtrAttr {
        remote: Remote {
            ip: IpAddr::V4(peer),
            mac: [0; 6],
        },
        dest_qpn: pq,
        rq_psn: 9,
        path_mtu: Mtu::M4096,
        max_dest_rd_atomic: 4,
        min_rnr_timer: 1,
    };
    c.modify_qp_rtr(q, rtr).unwrap();
    c.modify_qp_rts(
        q,
        RtsAttr {
            sq_psn: 9,
            ..RtsAttr::default()
        },
    )
    .unwrap();
}

#[test]
fn endpoints_over_the_udp_backend_do_not_allocate() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let (ia, ib) = (Ipv4Addr::new(127, 0, 0, 61), Ipv4Addr::new(127, 0, 0, 62));
    let (Ok(ua), Ok(ub)) = (UdpBackend::bind(ia), UdpBackend::bind(ib)) else {
        eprintln!("SKIP: cannot bind UDP 4791 on 127.0.0.61/62 here");
        return;
    };
    let (mut a, cqa, qa, ma) = ctx_at(ia, 61);
    let (mut b, cqb, qb, mb) = ctx_at(ib, 62);
    connect(&mut a, qa, ib, qb);
    connect(&mut b, qb, ia, qa);
    let mut ea = Endpoint::new(a, ua);
    let mut eb = Endpoint::new(b, ub);
    let mut wcs: Vec<WorkCompletion> = Vec::with_capacity(1024);
    let mut round = |ea: &mut Endpoint<UdpBackend>, eb: &mut Endpoint<UdpBackend>, i: u64| {
        let sge = Sge {
            addr: ma.addr,
            length: 16384,
            lkey: ma.lkey,
        };
        let op = if i % 2 == 0 {
            SendOp::Write {
                remote_addr: mb.addr,
                rkey: mb.rkey,
            }
        } else {
            eb.ctx
                .post_recv(
                    qb,
                    RecvWr {
                        wr_id: i,
                        sge: Sge {
                            addr: mb.addr + 65536,
                            length: 16384,
                            lkey: mb.lkey,
                        },
                    },
                )
                .unwrap();
            SendOp::Send
        };
        ea.ctx
            .post_send(
                qa,
                SendWr {
                    wr_id: i,
                    op,
                    sge,
                    signaled: true,
                    solicited: false,
                },
            )
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        let mut done = 0;
        while done < 1 + (i % 2) as usize && Instant::now() < deadline {
            ea.poll(Duration::ZERO).unwrap();
            eb.poll(Duration::ZERO).unwrap();
            wcs.clear();
            ea.ctx.poll_cq_into(cqa, 64, &mut wcs);
            eb.ctx.poll_cq_into(cqb, 64, &mut wcs);
            done += wcs.len();
        }
        assert_eq!(done, 1 + (i % 2) as usize, "message {i} did not complete");
    };
    for i in 0..100 {
        round(&mut ea, &mut eb, i);
    }
    let before = allocs();
    for i in 100..300 {
        round(&mut ea, &mut eb, i);
    }
    let allocs = allocs() - before;
    assert_eq!(
        allocs, 0,
        "{allocs} allocations in 200 messages through Endpoint and the UDP backend"
    );
}

/// 4 KiB WRITEs spread over 1,000 QP pairs in turn, the clock moving 50 µs per message so
/// that retransmission timers come due and fire early (moved later by the ACKs) as they
/// do in a loop: after two rounds over every QP, neither the ready list nor the timer heap
/// nor the QP lookup allocates.
#[test]
fn many_qps_in_turn_do_not_allocate() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    const N: usize = 1_000;
    let (mut a, cqa, qa0, ma) = ctx(1);
    let (mut b, cqb, qb0, mb) = ctx(2);
    let caps = |cq| QpCaps {
        qp_type: QpType::Rc,
        send_cq: cq,
        recv_cq: cq,
        max_send_wr: 16,
        max_recv_wr: 16,
    };
    let pd = uroce::mem::PdId(0);
    let mut qas = vec![qa0];
    let mut qbs = vec![qb0];
    for _ in 1..N {
        qas.push(a.create_qp(pd, caps(cqa)).unwrap());
        qbs.push(b.create_qp(pd, caps(cqb)).unwrap());
    }
    for (c, mine, theirs, peer) in [(&mut a, &qas, &qbs, 2u8), (&mut b, &qbs, &qas, 1)] {
        let remote = Remote {
            ip: IpAddr::V4(Ipv4Addr::new(10, 0, 0, peer)),
            mac: [2, 0, 0, 0, 0, peer],
        };
        for (&q, &dest_qpn) in mine.iter().zip(theirs) {
            c.modify_qp_init(q, InitAttr::default()).unwrap();
            let rtr = RtrAttr {
                remote,
                dest_qpn,
                rq_psn: 0,
                path_mtu: Mtu::M4096,
                max_dest_rd_atomic: 4,
                min_rnr_timer: 1,
            };
            c.modify_qp_rtr(q, rtr).unwrap();
            c.modify_qp_rts(q, RtsAttr::default()).unwrap();
        }
    }
    let mut now = Instant::now();
    let mut buf = vec![0u8; 4096 + 256];
    let mut wcs: Vec<WorkCompletion> = Vec::with_capacity(64);
    let mut send = |a: &mut Context, b: &mut Context, i: usize, now: Instant| {
        let wr = SendWr {
            wr_id: i as u64,
            op: SendOp::Write {
                remote_addr: mb.addr,
                rkey: mb.rkey,
            },
            sge: Sge {
                addr: ma.addr,
                length: 4096,
                lkey: ma.lkey,
            },
            signaled: true,
            solicited: false,
        };
        a.post_send(qas[i % N], wr).unwrap();
        let n = a.poll_frame(now, &mut buf).unwrap();
        b.handle_frame(now, &buf[..n]).unwrap();
        let n = b.poll_frame(now, &mut buf).unwrap();
        a.handle_frame(now, &buf[..n]).unwrap();
        assert!(a.poll_frame(now, &mut buf).is_none());
        a.poll_cq_into(cqa, 16, &mut wcs);
        assert_eq!(wcs.len(), 1);
        wcs.clear();
        for c in [a, b] {
            if c.poll_timeout().is_some_and(|t| t <= now) {
                c.handle_timeout(now);
            }
        }
    };
    for i in 0..2 * N {
        send(&mut a, &mut b, i, now);
        now += Duration::from_micros(50);
    }
    let before = allocs();
    for i in 2 * N..5 * N {
        send(&mut a, &mut b, i, now);
        now += Duration::from_micros(50);
    }
    let allocs = allocs() - before;
    assert_eq!(allocs, 0, "{allocs} allocations in {} messages", 3 * N);
}
