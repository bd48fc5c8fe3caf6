//! Parses one captured 1 KiB RDMA WRITE frame N times (headers only, or with the ICRC
//! when the second argument is `verify`), for counting instructions with callgrind:
//! `valgrind --tool=callgrind target/release/examples/parse_loop 100000 [verify]`.
use std::hint::black_box;

use uroce::wire::{RocePacket, WireError};

fn main() {
    let data = std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/ib_write_bw.pcap"
    ))
    .expect("capture");
    let frames: Vec<Vec<u8>> = uroce::pcap::Reader::new(&data)
        .expect("pcap")
        .filter_map(|f| f.ok().map(|f| f.data.to_vec()))
        .filter(|f| uroce::wire::parse(f).is_ok())
        .collect();
    let f = &frames[1];
    let n: u64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(1_000_000);
    let verify = std::env::args().nth(2).as_deref() == Some("verify");
    let t = std::time::Instant::now();
    // One loop per mode, so that the choice is not made again for every frame (the
    // compiler did this itself until the packet's layout changed).
    fn repeat(n: u64, f: &[u8], parse: fn(&[u8]) -> Result<RocePacket<'_>, WireError>) -> u32 {
        let mut acc = 0u32;
        for _ in 0..n {
            let p = parse(black_box(f));
            acc = acc.wrapping_add(p.map(|p| p.bth.psn()).unwrap_or(0));
        }
        acc
    }
    let acc = if verify {
        repeat(n, f, uroce::wire::parse)
    } else {
        repeat(n, f, uroce::wire::parse_headers)
    };
    println!(
        "{:.1} ns/frame ({acc})",
        t.elapsed().as_nanos() as f64 / n as f64
    );
}
