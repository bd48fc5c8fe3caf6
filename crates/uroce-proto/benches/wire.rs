//! Wire-layer throughput: parse+verify and build+ICRC for 64 B, 1 KiB and 4 KiB payloads,
//! each next to plain `crc32fast` over the same number of bytes (the baseline, measured
//! in the same run), and header parsing without the ICRC.
//!
//! `cargo bench --bench wire`; the ratio parse_verify / crc32fast is what our header
//! handling costs on top of the CRC itself.

use std::hint::black_box;
use std::net::Ipv4Addr;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use uroce_proto::wire::{
    parse, parse_headers, BthRepr, EthernetRepr, ExtHeaders, FrameRepr, IpRepr, Ipv4Repr, Opcode,
    RethRepr, UdpRepr,
};

fn write_only(len: usize) -> (FrameRepr, Vec<u8>) {
    let ext = ExtHeaders {
        reth: Some(RethRepr {
            va: 0x7f00_0000_1000,
            rkey: 0x1234,
            len: len as u32,
        }),
        ..ExtHeaders::default()
    };
    let r = FrameRepr {
        eth: Some(EthernetRepr {
            dst: [2, 0, 0, 0, 0, 2],
            src: [2, 0, 0, 0, 0, 1],
            vlan: None,
            ethertype: 0x0800,
        }),
        ip: IpRepr::V4(Ipv4Repr::new(
            Ipv4Addr::new(10, 0, 0, 1),
            Ipv4Addr::new(10, 0, 0, 2),
            0x02,
        )),
        udp: UdpRepr {
            src_port: 0xc001,
            dst_port: 4791,
            checksum: 0,
        },
        bth: BthRepr::new(Opcode::RcWriteOnly, 0x11, 42),
        ext,
    };
    let payload = (0..len).map(|i| i as u8).collect();
    (r, payload)
}

fn bench(c: &mut Criterion) {
    for len in [64usize, 1024, 4096] {
        let (repr, payload) = write_only(len);
        let mut frame = vec![0u8; repr.buffer_len(len)];
        repr.emit(&payload, &mut frame).unwrap();
        let mut g = c.benchmark_group(format!("wire/{len}B"));
        g.throughput(Throughput::Bytes(frame.len() as u64));
        g.bench_function(BenchmarkId::new("crc32fast", frame.len()), |b| {
            b.iter(|| crc32fast::hash(black_box(&frame)))
        });
        g.bench_function(BenchmarkId::new("parse_verify", frame.len()), |b| {
            b.iter(|| parse(black_box(&frame)).unwrap().payload.len())
        });
        let mut out = vec![0u8; frame.len()];
        g.bench_function(BenchmarkId::new("build_icrc", frame.len()), |b| {
            b.iter(|| repr.emit(black_box(&payload), &mut out).unwrap())
        });
        g.bench_function(BenchmarkId::new("parse_headers", frame.len()), |b| {
            b.iter(|| parse_headers(black_box(&frame)).unwrap().bth.psn())
        });
        g.finish();
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
