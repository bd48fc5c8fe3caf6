//! One event loop per thread: three loops on each of two loopback addresses, each loop
//! with its own context, QPN space and UDP backend; the kernel steers every datagram to
//! the loop owning its destination QP. The application posts and polls through the
//! loops' queues from the test thread; shutdown flushes what is left with WR_FLUSH_ERR.
//! No privileges needed.

use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};

use uroce::datapath::event_loop::Endpoint;
use uroce::datapath::udp::UdpBackend;
use uroce::datapath::worker::{Idle, Worker};
use uroce::mem::{Access, Mr};
use uroce::verbs::{
    Context, ContextConfig, CqId, InitAttr, Mtu, QpCaps, QpType, RecvWr, Remote, RtrAttr, RtsAttr,
    SendOp, SendWr, Sge, WcOpcode, WcStatus, WorkCompletion,
};

const LOOPS: u32 = 3;

struct Loop {
    ctx: Context,
    cq: CqId,
    qpn: u32,
    mr: Mr,
    backend: UdpBackend,
}

fn side(ip: Ipv4Addr) -> Option<Vec<Loop>> {
    let mut v = Vec::new();
    for k in 0..LOOPS {
        let backend = match UdpBackend::bind_steered(ip, k, LOOPS) {
            Ok(b) => b,
            Err(e) => {
                eprintln!("SKIP: steered UDP sockets on {ip}: {e}");
                return None;
            }
        };
        let mut ctx = Context::new(
            ContextConfig {
                mac: [0; 6],
                ip: IpAddr::V4(ip),
                seed: u64::from(k) + u64::from(u32::from(ip)),
                udp_sport_base: 0xc000,
                tos: 0,
            },
            std::time::Instant::now(),
        );
        ctx.set_qpn_space(LOOPS * 16 + k, LOOPS);
        let cq = ctx
            .create_cq(uroce::verbs::MAX_CQE)
            .expect("MAX_CQE is a valid CQ depth");
        let pd = ctx.alloc_pd();
        let caps = QpCaps {
            qp_type: QpType::Rc,
            send_cq: cq,
            recv_cq: cq,
            max_send_wr: 64,
            max_recv_wr: 64,
        };
        let qpn = ctx.create_qp(pd, caps).unwrap();
        assert_eq!(qpn % LOOPS, k, "QPN {qpn} is not in loop {k}'s space");
        let all = Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ;
        let mr = ctx.reg_mr(pd, vec![0; 1 << 16], all).unwrap();
        ctx.modify_qp_init(qpn, InitAttr::default()).unwrap();
        v.push(Loop {
            ctx,
            cq,
            qpn,
            mr,
            backend,
        });
    }
    Some(v)
}

fn connect(l: &mut Loop, peer: Ipv4Addr, dest_qpn: u32) {
    let rtr = RtrAttr {
        remote: Remote {
            ip: IpAddr::V4(peer),
            mac: [0; 6],
        },
        dest_qpn,
        rq_psn: 100,
        path_mtu: Mtu::M4096,
        max_dest_rd_atomic: 4,
        min_rnr_timer: 1,
    };
    l.ctx.modify_qp_rtr(l.qpn, rtr).unwrap();
    l.ctx
        .modify_qp_rts(
            l.qpn,
            RtsAttr {
                sq_psn: 100,
                ..RtsAttr::default()
            },
        )
        .unwrap();
}

fn pattern(k: u32, n: usize) -> Vec<u8> {
    (0..n).map(|i| (i as u32 * 13 + k * 101) as u8).collect()
}

fn wait_for(w: &Worker<UdpBackend>, n: usize, what: &str) -> Vec<WorkCompletion> {
    let mut got = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while got.len() < n {
        w.poll_cq(&mut got, 16);
        assert!(
            Instant::now() < deadline,
            "{what}: {} of {n} completions",
            got.len()
        );
        std::thread::sleep(Duration::from_micros(200));
    }
    got
}

#[test]
fn loops_on_threads_with_qpn_steering_and_a_clean_shutdown() {
    let (ia, ib) = (Ipv4Addr::new(127, 0, 0, 71), Ipv4Addr::new(127, 0, 0, 72));
    let (Some(mut a), Some(mut b)) = (side(ia), side(ib)) else {
        return;
    };
    for k in 0..LOOPS as usize {
        let (qa, qb) = (a[k].qpn, b[k].qpn);
        connect(&mut a[k], ib, qb);
        connect(&mut b[k], ia, qa);
        let data = pattern(k as u32, 40_000);
        let mr = a[k].mr;
        a[k].ctx.mr_bytes_mut(&mr)[..data.len()].copy_from_slice(&data);
    }
    let info: Vec<(u32, Mr, Mr)> = (0..LOOPS as usize)
        .map(|k| (b[k].qpn, a[k].mr, b[k].mr))
        .collect();
    let spawn = |v: Vec<Loop>| -> Vec<Worker<UdpBackend>> {
        v.into_iter()
            .map(|l| {
                Worker::spawn(
                    Endpoint::new(l.ctx, l.backend),
                    vec![l.cq],
                    Idle::Sleep(Duration::from_micros(100)),
                    256,
                )
            })
            .collect()
    };
    let (qpns_a, qpns_b): (Vec<u32>, Vec<u32>) = (
        a.iter().map(|l| l.qpn).collect(),
        b.iter().map(|l| l.qpn).collect(),
    );
    let wa = spawn(a);
    let wb = spawn(b);
    for k in 0..LOOPS as usize {
        let (_, ma, mb) = info[k];
        // B expects one SEND into the second half of its region.
        wb[k]
            .post_recv(
                qpns_b[k],
                RecvWr {
                    wr_id: 7,
                    sge: Sge {
                        addr: mb.addr + 40_000,
                        length: 20_000,
                        lkey: mb.lkey,
                    },
                },
            )
            .unwrap();
        let sge = Sge {
            addr: ma.addr,
            length: 40_000,
            lkey: ma.lkey,
        };
        let write = SendWr {
            wr_id: 1,
            op: SendOp::Write {
                remote_addr: mb.addr,
                rkey: mb.rkey,
            },
            sge,
            signaled: true,
            solicited: false,
        };
        let send = SendWr {
            wr_id: 2,
            op: SendOp::Send,
            sge: Sge {
                length: 20_000,
                ..sge
            },
            ..write
        };
        // Posts wait a little for the peer's receive to be in place (RNR would also do).
        std::thread::sleep(Duration::from_millis(5));
        wa[k].post_send(qpns_a[k], write).unwrap();
        wa[k].post_send(qpns_a[k], send).unwrap();
    }
    for k in 0..LOOPS as usize {
        let wcs = wait_for(&wa[k], 2, &format!("loop {k} sender"));
        assert!(wcs.iter().all(|w| w.status == WcStatus::Success), "{wcs:?}");
        assert_eq!(wcs.iter().map(|w| w.wr_id).collect::<Vec<_>>(), [1, 2]);
        let wcs = wait_for(&wb[k], 1, &format!("loop {k} receiver"));
        assert_eq!(wcs[0].status, WcStatus::Success);
        assert_eq!(wcs[0].byte_len, 20_000);
        assert_eq!(wcs[0].qp_num, qpns_b[k]);
    }
    // Receives nobody will match: shutdown must flush them, in order.
    for k in 0..LOOPS as usize {
        let (_, ma, _) = info[k];
        for id in 100..103 {
            wa[k]
                .post_recv(
                    qpns_a[k],
                    RecvWr {
                        wr_id: id,
                        sge: Sge {
                            addr: ma.addr,
                            length: 64,
                            lkey: ma.lkey,
                        },
                    },
                )
                .unwrap();
        }
    }
    for (k, w) in wa.into_iter().enumerate() {
        let (_, rest) = w.shutdown();
        let flushed: Vec<u64> = rest
            .iter()
            .filter(|c| c.status == WcStatus::WrFlushErr && c.opcode == WcOpcode::Recv)
            .map(|c| c.wr_id)
            .collect();
        assert_eq!(flushed, [100, 101, 102], "loop {k}: {rest:?}");
    }
    for (k, w) in wb.into_iter().enumerate() {
        let (ep, _) = w.shutdown();
        let mb = info[k].2;
        let got = ep.ctx.mr_bytes(&mb);
        assert!(
            got[..40_000] == pattern(k as u32, 40_000)[..],
            "loop {k}: WRITE data"
        );
        assert!(
            got[40_000..60_000] == pattern(k as u32, 20_000)[..],
            "loop {k}: SEND data"
        );
    }
}
