//! Kernel TCP's 8-byte request/response round trip, the baseline `scripts/bench-datapath.sh`
//! puts beside uroce's 8-byte RC WRITE round trip: one connection, TCP_NODELAY, the client
//! sends 8 bytes and waits for 8 back, N times after a warm-up, and prints the p50 / p99 /
//! p99.9 round trip in microseconds as JSON.
//!
//! `tcp_rr server PORT` (answers one connection, then exits) and
//! `tcp_rr client ADDR:PORT N`.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::Instant;

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn main() -> std::io::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    match args.get(1).map(String::as_str) {
        Some("server") => {
            let port = args.get(2).map_or("18790", String::as_str);
            let listener = TcpListener::bind(format!("0.0.0.0:{port}"))?;
            let (mut s, _) = listener.accept()?;
            s.set_nodelay(true)?;
            let mut buf = [0u8; 8];
            while s.read_exact(&mut buf).is_ok() {
                s.write_all(&buf)?;
            }
            Ok(())
        }
        Some("client") => {
            let addr = args.get(2).map_or("127.0.0.1:18790", String::as_str);
            let n: usize = args.get(3).and_then(|v| v.parse().ok()).unwrap_or(10_000);
            let mut s = TcpStream::connect(addr)?;
            s.set_nodelay(true)?;
            let mut buf = [7u8; 8];
            for _ in 0..n / 10 {
                s.write_all(&buf)?;
                s.read_exact(&mut buf)?;
            }
            let mut rtt = Vec::with_capacity(n);
            for _ in 0..n {
                let t = Instant::now();
                s.write_all(&buf)?;
                s.read_exact(&mut buf)?;
                rtt.push(t.elapsed().as_secs_f64() * 1e6);
            }
            rtt.sort_by(f64::total_cmp);
            println!(
                "{{\"lat_p50_us\": {:.2}, \"lat_p99_us\": {:.2}, \"lat_p999_us\": {:.2}, \"n\": {n}}}",
                percentile(&rtt, 0.5),
                percentile(&rtt, 0.99),
                percentile(&rtt, 0.999)
            );
            Ok(())
        }
        _ => {
            eprintln!("usage: tcp_rr server PORT | tcp_rr client ADDR:PORT N");
            std::process::exit(2);
        }
    }
}
