//! Message rate of 4 KiB RDMA WRITEs spread over many QPs on one loop, sans-IO: two
//! contexts back to back, N RC QP pairs, each message posted on the next QP in turn
//! (signaled), its packet built by A and placed by B, B's ACK taken by A, the completion
//! polled; the clock moves 1 µs per message and each side's timers run when due, as an
//! event loop runs them. One message is in flight at a time, so every message has its own
//! ACK whatever N is (with several in flight on one QP the responder would coalesce ACKs
//! and one QP would look better than many for that reason alone).
//!
//! - `many_qps` runs 1, 100, 1,000 and 10,000 QPs in the same run, three rounds, and
//!   prints each rate and its ratio to the 1-QP rate of the same round (wall time: noisy
//!   on a shared machine, ratios within a round only);
//! - `many_qps N M` builds N QP pairs and sends M messages, for counting instructions:
//!   `valgrind --tool=callgrind target/release/examples/many_qps N M` for two values of
//!   M; the difference divided by the difference in M is the marginal cost of a message
//!   (set-up cancels out). `scripts/bench-qps.sh` does both.

use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};

use uroce::mem::{Access, Mr};
use uroce::verbs::{
    Context, ContextConfig, CqId, InitAttr, Mtu, QpCaps, QpType, Remote, RtrAttr, RtsAttr, SendOp,
    SendWr, Sge, WcStatus, WorkCompletion,
};

/// 4 KiB messages, one packet each at path MTU 4096.
const SIZE: u32 = 4096;

struct Ends {
    a: Context,
    b: Context,
    qa: Vec<u32>,
    cqa: CqId,
    cqb: CqId,
    la: Mr,
    rb: Mr,
    now: Instant,
    buf: Vec<u8>,
    wcs: Vec<WorkCompletion>,
    next: u64,
}

fn context(last: u8, now: Instant) -> Context {
    Context::new(
        ContextConfig {
            mac: [2, 0, 0, 0, 0, last],
            ip: IpAddr::V4(Ipv4Addr::new(10, 0, 0, last)),
            seed: u64::from(last),
            udp_sport_base: 0xc000,
            tos: 0,
        },
        now,
    )
}

/// Two contexts with `n` RC QP pairs in RTS, connected one to one.
fn ends(n: u32) -> Ends {
    let now = Instant::now();
    let (mut a, mut b) = (context(1, now), context(2, now));
    let all = Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ;
    let side = |c: &mut Context| {
        let cq = c.create_cq(4095).expect("cq");
        let pd = c.alloc_pd();
        let caps = QpCaps {
            qp_type: QpType::Rc,
            send_cq: cq,
            recv_cq: cq,
            max_send_wr: 64,
            max_recv_wr: 64,
        };
        let qps: Vec<u32> = (0..n)
            .map(|_| {
                let q = c.create_qp(pd, caps).expect("qp");
                c.modify_qp_init(q, InitAttr::default()).expect("init");
                q
            })
            .collect();
        let mr = c.reg_mr(pd, vec![0x5a; SIZE as usize], all).expect("mr");
        (cq, qps, mr)
    };
    let (cqa, qa, la) = side(&mut a);
    let (cqb, qb, rb) = side(&mut b);
    for (c, mine, theirs, peer) in [(&mut a, &qa, &qb, 2u8), (&mut b, &qb, &qa, 1)] {
        let remote = Remote {
            ip: IpAddr::V4(Ipv4Addr::new(10, 0, 0, peer)),
            mac: [2, 0, 0, 0, 0, peer],
        };
        for (&q, &dest_qpn) in mine.iter().zip(theirs) {
            let rtr = RtrAttr {
                remote,
                dest_qpn,
                rq_psn: 0,
                path_mtu: Mtu::M4096,
                max_dest_rd_atomic: 16,
                min_rnr_timer: 1,
            };
            c.modify_qp_rtr(q, rtr).expect("rtr");
            c.modify_qp_rts(q, RtsAttr::default()).expect("rts");
        }
    }
    Ends {
        a,
        b,
        qa,
        cqa,
        cqb,
        la,
        rb,
        now,
        buf: vec![0; 9000],
        wcs: Vec::with_capacity(64),
        next: 0,
    }
}

impl Ends {
    /// Sends `m` messages, each on the next QP in turn.
    fn run(&mut self, m: u64) {
        let n = self.qa.len() as u64;
        for _ in 0..m {
            let q = self.qa[(self.next % n) as usize];
            let wr = SendWr {
                wr_id: self.next,
                op: SendOp::Write {
                    remote_addr: self.rb.addr,
                    rkey: self.rb.rkey,
                },
                sge: Sge {
                    addr: self.la.addr,
                    length: SIZE,
                    lkey: self.la.lkey,
                },
                signaled: true,
                solicited: false,
            };
            self.a.post_send(q, wr).expect("post");
            self.next += 1;
            let now = self.now;
            let k = self.a.poll_frame(now, &mut self.buf).expect("a WRITE");
            self.b.handle_frame(now, &self.buf[..k]).expect("placed");
            let k = self.b.poll_frame(now, &mut self.buf).expect("an ACK");
            self.a.handle_frame(now, &self.buf[..k]).expect("taken");
            self.a.poll_cq_into(self.cqa, 16, &mut self.wcs);
            self.b.poll_cq_into(self.cqb, 16, &mut self.wcs);
            assert!(self.wcs.iter().all(|w| w.status == WcStatus::Success));
            self.wcs.clear();
            self.now += Duration::from_micros(1);
            for c in [&mut self.a, &mut self.b] {
                if c.poll_timeout().is_some_and(|t| t <= self.now) {
                    c.handle_timeout(self.now);
                }
            }
        }
    }
}

fn main() {
    let args: Vec<u64> = std::env::args()
        .skip(1)
        .map(|a| a.parse().expect("usage: many_qps [QPS MESSAGES]"))
        .collect();
    if let [n, m] = args[..] {
        let mut e = ends(n as u32);
        e.run(m);
        println!("{m} messages over {n} QPs");
        return;
    }
    const MESSAGES: u64 = 200_000;
    println!("4 KiB RDMA WRITEs, one loop, sans-IO: Mmsg/s and ratio to 1 QP (same round)");
    for round in 1..=3 {
        let mut base = 0.0;
        for n in [1u32, 100, 1_000, 10_000] {
            let mut e = ends(n);
            e.run(u64::from(n).max(20_000)); // every QP used once, caches warm
            let t = Instant::now();
            e.run(MESSAGES);
            let rate = MESSAGES as f64 / t.elapsed().as_secs_f64() / 1e6;
            if n == 1 {
                base = rate;
            }
            println!(
                "round {round}  {n:>6} QPs  {rate:.3} Mmsg/s  {:.2}x",
                rate / base
            );
        }
    }
}
