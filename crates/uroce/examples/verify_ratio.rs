//! Parse+verify of an RDMA WRITE ONLY frame against plain crc32fast over the same bytes,
//! as a ratio measured in the same run: the two loops alternate, 200 batches of 20000
//! each, and the fastest batch of each counts (the least disturbed by a shared machine,
//! where criterion's medians move by tens of percent). Also the ICRC alone
//! (`icrc::compute_v4`) and the headers alone (`parse_headers`).
//!
//! `cargo run --release --example verify_ratio [payload bytes...]` (default 64 1024 4096).
//!
//! Counted in instructions instead: `verify_ratio count WHAT N [payload bytes]` runs only
//! one of them N times (WHAT: `crc`, `verify`, `icrc` or `headers`; payload 4096 by
//! default), for `valgrind --tool=callgrind`; the marginal cost of one is the difference
//! between two N divided by their difference.
use std::hint::black_box;
use std::time::Instant;

use uroce::wire::{
    icrc, parse, parse_headers, BthRepr, EthernetRepr, ExtHeaders, FrameRepr, IpRepr, Ipv4Repr,
    Opcode, RethRepr, UdpRepr,
};

fn frame(len: usize) -> Vec<u8> {
    let r = FrameRepr {
        eth: Some(EthernetRepr {
            dst: [2, 0, 0, 0, 0, 2],
            src: [2, 0, 0, 0, 0, 1],
            vlan: None,
            ethertype: 0x0800,
        }),
        ip: IpRepr::V4(Ipv4Repr::new(
            [10, 0, 0, 1].into(),
            [10, 0, 0, 2].into(),
            0x02,
        )),
        udp: UdpRepr {
            src_port: 0xc001,
            dst_port: 4791,
            checksum: 0,
        },
        bth: BthRepr::new(Opcode::RcWriteOnly, 0x11, 42),
        ext: ExtHeaders {
            reth: Some(RethRepr {
                va: 0x7f00_0000_1000,
                rkey: 0x1234,
                len: len as u32,
            }),
            ..ExtHeaders::default()
        },
    };
    let payload: Vec<u8> = (0..len).map(|i| i as u8).collect();
    let mut f = vec![0u8; r.buffer_len(len)];
    r.emit(&payload, &mut f).expect("emit");
    f
}

/// The fastest of `rounds` batches of `n` runs of `f`, in ns per run.
fn batch(n: u32, f: &mut dyn FnMut()) -> f64 {
    let t = Instant::now();
    for _ in 0..n {
        f();
    }
    t.elapsed().as_nanos() as f64 / f64::from(n)
}

/// `count WHAT N [LEN]`: one of the four, N times, for callgrind.
fn count(args: &[String]) {
    let what = args.first().map(String::as_str).unwrap_or("verify");
    let n: u64 = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(10_000);
    let len: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(4096);
    let f = frame(len);
    let (ip, rest) = f[14..].split_at(20);
    let (udp, rest) = rest.split_at(8);
    let body = &rest[..rest.len() - 4];
    // One loop per case, so that the choice is not made again in every round.
    fn repeat(n: u64, g: impl Fn() -> u64) -> u64 {
        (0..n).fold(0u64, |a, _| a.wrapping_add(g()))
    }
    let acc = match what {
        "crc" => repeat(n, || u64::from(crc32fast::hash(black_box(&f)))),
        "icrc" => repeat(n, || {
            u64::from(icrc::compute_v4(
                black_box(ip),
                black_box(udp),
                black_box(body),
            ))
        }),
        "headers" => repeat(n, || {
            parse_headers(black_box(&f)).map_or(0, |p| u64::from(p.bth.psn()))
        }),
        _ => repeat(n, || {
            parse(black_box(&f)).map_or(0, |p| p.payload.len() as u64)
        }),
    };
    println!("{what} x{n}, {len} B payload ({} B frame): {acc}", f.len());
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("count") {
        return count(&args[1..]);
    }
    let lens: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let lens = if lens.is_empty() {
        vec![64, 1024, 4096]
    } else {
        lens
    };
    for len in lens {
        let f = frame(len);
        let (ip, rest) = f[14..].split_at(20);
        let (udp, rest) = rest.split_at(8);
        let body = &rest[..rest.len() - 4];
        let mut best = [f64::MAX; 4];
        for _ in 0..200 {
            let n = 20_000;
            let t = [
                batch(n, &mut || {
                    black_box(crc32fast::hash(black_box(&f)));
                }),
                batch(n, &mut || {
                    black_box(parse(black_box(&f)).map(|p| p.payload.len()).ok());
                }),
                batch(n, &mut || {
                    black_box(icrc::compute_v4(
                        black_box(ip),
                        black_box(udp),
                        black_box(body),
                    ));
                }),
                batch(n, &mut || {
                    black_box(parse_headers(black_box(&f)).map(|p| p.bth.psn()).ok());
                }),
            ];
            for (b, t) in best.iter_mut().zip(t) {
                *b = b.min(t);
            }
        }
        let [crc, pv, ic, hd] = best;
        println!(
            "{len} B payload ({} B frame): crc32fast {crc:.1} ns, parse+verify {pv:.1} ns, ratio {:.3}; ICRC alone {ic:.1} ns, headers alone {hd:.1} ns",
            f.len(),
            crc / pv
        );
    }
}
