//! The per-packet cost of DCQCN on the send path: an RC QP with 1000 queued 64 B SENDs
//! (and 100 × 64 KiB WRITEs) drained through `poll_transmit`, frames built with ICRC,
//! with DCQCN off and on at line rate with no congestion. The target is under 5%.
//!
//! `cargo bench --bench dcqcn`

use std::hint::black_box;
use std::net::{IpAddr, Ipv4Addr};
use std::time::Instant;

use criterion::{criterion_group, criterion_main, BatchSize, BenchmarkId, Criterion, Throughput};
use uroce_proto::congestion::dcqcn::Params;
use uroce_proto::mem::Access;
use uroce_proto::verbs::{
    Context, ContextConfig, InitAttr, Mtu, QpCaps, QpType, Remote, RtrAttr, RtsAttr, SendOp,
    SendWr, Sge,
};

fn sender(dcqcn: bool, n: usize, size: u32, now: Instant) -> Context {
    let mut c = Context::new(
        ContextConfig {
            mac: [2, 0, 0, 0, 0, 1],
            ip: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)),
            seed: 1,
            udp_sport_base: 0xc000,
            tos: 0,
        },
        std::time::Instant::now(),
    );
    if dcqcn {
        c.enable_dcqcn(Params::paper(100e9), now);
    }
    let cq = c
        .create_cq(uroce_proto::verbs::MAX_CQE)
        .expect("MAX_CQE is a valid CQ depth");
    let pd = c.alloc_pd();
    let caps = QpCaps {
        qp_type: QpType::Rc,
        send_cq: cq,
        recv_cq: cq,
        max_send_wr: 4096,
        max_recv_wr: 16,
    };
    let q = c.create_qp(pd, caps).unwrap();
    let mr = c.reg_mr(pd, vec![7; 1 << 17], Access::LOCAL_WRITE).unwrap();
    c.modify_qp_init(q, InitAttr::default()).unwrap();
    let remote = Remote {
        ip: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)),
        mac: [2, 0, 0, 0, 0, 2],
    };
    let rtr = RtrAttr {
        remote,
        dest_qpn: 0x99,
        rq_psn: 0,
        path_mtu: Mtu::M4096,
        max_dest_rd_atomic: 4,
        min_rnr_timer: 1,
    };
    c.modify_qp_rtr(q, rtr).unwrap();
    c.modify_qp_rts(q, RtsAttr::default()).unwrap();
    for i in 0..n {
        let op = if size <= 64 {
            SendOp::Send
        } else {
            SendOp::Write {
                remote_addr: 0x1000,
                rkey: 1,
            }
        };
        let sge = Sge {
            addr: mr.addr,
            length: size,
            lkey: mr.lkey,
        };
        c.post_send(
            q,
            SendWr {
                wr_id: i as u64,
                op,
                sge,
                signaled: true,
                solicited: false,
            },
        )
        .unwrap();
    }
    c
}

fn bench(c: &mut Criterion) {
    let now = Instant::now();
    let mut buf = vec![0u8; 4096 + 256];
    for (size, n) in [(64u32, 1000usize), (65536, 30)] {
        let mut g = c.benchmark_group(format!("dcqcn/send_path_{size}B"));
        g.throughput(Throughput::Bytes(u64::from(size) * n as u64));
        for on in [false, true] {
            let name = if on { "on" } else { "off" };
            g.bench_function(BenchmarkId::new(name, n), |b| {
                b.iter_batched(
                    || sender(on, n, size, now),
                    |mut ctx| {
                        let mut frames = 0;
                        while let Some(len) = ctx.poll_frame(now, &mut buf) {
                            black_box(&buf[..len]);
                            frames += 1;
                        }
                        assert!(frames >= n);
                        frames
                    },
                    BatchSize::SmallInput,
                )
            });
        }
        g.finish();
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
