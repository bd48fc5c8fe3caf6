//! The RC transport alone (no I/O): two endpoints over a lossless in-memory link, then
//! with 1% loss, for 64 B SENDs and 64 KiB RDMA WRITEs; next to a plain memcpy of the same
//! bytes measured in the same run, so the ratio says what the transport costs per byte.
//!
//! `cargo bench --bench rc`

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use uroce_proto::sim::rc::{run, Mix, SimConfig};
use uroce_proto::sim::LinkConfig;
use uroce_proto::verbs::Mtu;

fn workload(kind: &str, size: u32, ops: usize, loss: f64) -> SimConfig {
    let mix = match kind {
        "send" => Mix {
            send: 1,
            write: 0,
            read: 0,
            atomic: 0,
        },
        _ => Mix {
            send: 0,
            write: 1,
            read: 0,
            atomic: 0,
        },
    };
    SimConfig {
        ops,
        mix,
        size: (size, size),
        seed: 7,
        mtu: Mtu::M4096,
        window: 64,
        recv_depth: 64,
        verify: false,
        link: LinkConfig {
            loss,
            delay: Duration::from_micros(1),
            bandwidth_bps: 0,
            ..LinkConfig::default()
        },
        ..SimConfig::default()
    }
}

fn bench(c: &mut Criterion) {
    for (kind, size, ops) in [("send", 64u32, 2000usize), ("write", 65536, 100)] {
        let bytes = size as u64 * ops as u64;
        let mut g = c.benchmark_group(format!("rc/{kind}_{size}B"));
        g.throughput(Throughput::Bytes(bytes));
        g.sample_size(20);
        let src = vec![1u8; bytes as usize];
        let mut dst = vec![0u8; bytes as usize];
        g.bench_function(BenchmarkId::new("memcpy", ops), |b| {
            b.iter(|| {
                for (d, s) in dst.chunks_mut(size as usize).zip(src.chunks(size as usize)) {
                    d.copy_from_slice(black_box(s));
                }
            })
        });
        for loss in [0.0, 0.01] {
            let cfg = workload(kind, size, ops, loss);
            let name = if loss == 0.0 { "lossless" } else { "loss_1pct" };
            g.bench_function(BenchmarkId::new(name, ops), |b| {
                b.iter(|| {
                    let r = run(black_box(&cfg));
                    assert!(r.errors.is_empty(), "{:?}", r.errors);
                    r.ops_completed
                })
            });
        }
        g.finish();
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
