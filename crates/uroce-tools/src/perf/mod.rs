//! `uroce perf`: RC bandwidth and latency between two hosts, perftest style. The server
//! is `uroce perf OP` with no address; the client names it. They exchange QPNs, PSN, rkeys
//! and addresses as one JSON line each over TCP (default port 18515), resolve the next
//! hop's MAC (ARP / NDP on the AF_XDP path), then move data over the chosen datapath.
//!
//! Here: the configuration and result, the server and client entry points with the single
//! event loop's data path, and the meter of a timed run. The exchange with the peer is in
//! `exchange`, one loop's resources and connection in `setup`, the raw-frame ceiling in
//! `raw`, and `--threads` (loops on threads) in `threads`.

use std::net::{IpAddr, TcpStream};
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};

use serde::{Deserialize, Serialize};

use uroce::datapath::impair::Impairment;
use uroce::verbs::{Context, Mtu, RecvWr, SendOp, SendWr, Sge, WcStatus};

pub(crate) mod exchange;
mod raw;
mod setup;
mod threads;

pub use crate::traffic::Traffic;
pub use exchange::{accept_one, listen};
use exchange::{read_json, Hello};
use setup::{connect, send_hello, setup, WINDOW};

/// Most QPs `--qps` takes. An idle QP costs under 2 KiB and the loop's per-packet cost
/// does not depend on how many there are.
pub const MAX_QPS: u32 = 65_536;

/// Messages in flight in all, over every QP: `WINDOW` per QP, at most [`MAX_INFLIGHT_BYTES`]
/// of them in all but never fewer than `WINDOW` (one QP's). Spread over many QPs, each
/// message is acknowledged on its own, and a window of `WINDOW` per QP would put
/// megabytes on the wire at once (10,000 QPs: 320,000 messages) for the receiver's
/// socket or ring to drop, and every QP to retransmit at the same timeout.
fn window_for(qps: usize, size: u32) -> usize {
    let by_bytes = (MAX_INFLIGHT_BYTES / size.max(1) as usize).max(WINDOW);
    (WINDOW * qps).min(by_bytes)
}

/// Bytes of messages in flight at most when several QPs share the window.
const MAX_INFLIGHT_BYTES: usize = 1 << 20;

// How long the server polls on without sleeping after a packet came in: a latency
// test's server never sleeps between requests.
use uroce::datapath::SPIN;

/// The operation measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PerfOp {
    /// RDMA WRITE.
    Write,
    /// RDMA READ.
    Read,
    /// SEND.
    Send,
    /// No transport: the client sends frames of the size an RC WRITE packet has at the
    /// path MTU, as fast as the datapath takes them; the server counts what arrives. The
    /// datapath's ceiling, to compare the transport against.
    Raw,
}

/// Options of a run.
#[derive(Debug, Clone)]
pub struct PerfConfig {
    /// Operation.
    pub op: PerfOp,
    /// Message size.
    pub size: u32,
    /// How long the client runs.
    pub duration: Duration,
    /// Latency mode: one operation at a time.
    pub latency: bool,
    /// `xdp`, `udp` or `auto`.
    pub backend: String,
    /// Interface for AF_XDP (found from the local address when not given).
    pub iface: Option<String>,
    /// TCP port of the exchange.
    pub port: u16,
    /// Path MTU.
    pub mtu: Mtu,
    /// Loss and reordering of received frames on purpose (recovery tests).
    pub impair: Impairment,
    /// DSCP, UDP source ports and DCQCN.
    pub traffic: Traffic,
    /// QPs, driven by one loop, messages spread over them in turn (the server takes
    /// the client's count).
    pub qps: u32,
    /// Event loops, each on its own thread with one QP (UDP backend; the server takes
    /// the client's count).
    pub threads: u32,
}

/// What the client measured.
#[derive(Debug, Clone, Default, Serialize)]
pub struct PerfResult {
    /// Operation.
    pub op: String,
    /// Bytes per message.
    pub bytes: u32,
    /// Completed operations.
    pub iterations: u64,
    /// Average bandwidth, Gb/s.
    pub bw_gbps: f64,
    /// Messages per second, millions.
    pub msg_rate_mpps: f64,
    /// Latency percentiles, microseconds (latency mode).
    pub lat_p50_us: Option<f64>,
    /// p99.
    pub lat_p99_us: Option<f64>,
    /// p99.9.
    pub lat_p999_us: Option<f64>,
    /// The datapath used.
    pub datapath: String,
    /// Packets the client sent, and how many of them were retransmissions.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub packets_sent: Option<u64>,
    /// Retransmitted packets.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retransmits: Option<u64>,
    /// Of those, tail probes: one packet sent again after the QP heard nothing for the
    /// recovery probe's wait (a lost tail, or a receiver that stalled).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tail_probes: Option<u64>,
    /// Raw mode: frames the client sent and the server received.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub frames_sent: Option<u64>,
    /// Raw mode: frames the server received.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub frames_received: Option<u64>,
}

impl PerfResult {
    /// `done` messages of `bytes` each in `secs`: bandwidth and message rate; the rest
    /// left for the caller.
    pub(crate) fn measured(op: &str, bytes: u32, done: u64, secs: f64, datapath: String) -> Self {
        let secs = secs.max(1e-9);
        Self {
            op: op.into(),
            bytes,
            iterations: done,
            bw_gbps: done as f64 * f64::from(bytes) * 8.0 / secs / 1e9,
            msg_rate_mpps: done as f64 / secs / 1e6,
            datapath,
            ..Self::default()
        }
    }
}

/// The clock of a timed run and its progress line, once a second.
pub(crate) struct Meter {
    start: Instant,
    last: Instant,
    last_done: u64,
}

impl Meter {
    pub(crate) fn start() -> Self {
        let now = Instant::now();
        Self {
            start: now,
            last: now,
            last_done: 0,
        }
    }

    /// Seconds since the start.
    pub(crate) fn secs(&self) -> f64 {
        self.start.elapsed().as_secs_f64()
    }

    /// Reports the rate since the last line, `done` being the count of `bytes`-sized
    /// messages (0: frames, no bandwidth) so far; `note` ends the line.
    pub(crate) fn tick(
        &mut self,
        done: u64,
        bytes: u32,
        note: &str,
        progress: &mut dyn FnMut(&str),
    ) {
        if self.last.elapsed() < Duration::from_secs(1) {
            return;
        }
        let dt = self.last.elapsed().as_secs_f64();
        let n = (done - self.last_done) as f64;
        let rate = if bytes == 0 {
            format!("{:>8.3} Mframes/s", n / dt / 1e6)
        } else {
            format!(
                "{:>8.3} Gb/s  {:>8.3} Mmsg/s",
                n * f64::from(bytes) * 8.0 / dt / 1e9,
                n / dt / 1e6
            )
        };
        progress(&format!("{:>5.1} s  {rate}{note}", self.secs()));
        self.last = Instant::now();
        self.last_done = done;
    }
}

/// `cfg` with its path MTU no larger than the interface at `local` carries (one of 1500
/// bytes carries 1024): the UDP backend sends with DF set, so a packet of a 4096-byte
/// path MTU on such a link is refused by the kernel (EMSGSIZE) and nothing moves, and
/// AF_XDP would put frames on the wire that the link drops.
fn fitted_to_link(cfg: &PerfConfig, local: IpAddr) -> PerfConfig {
    let mut c = cfg.clone();
    let link = crate::link::local_link(cfg.iface.as_deref(), local)
        .ok()
        .and_then(|l| Mtu::fitting(l.mtu));
    if let Some(m) = link.filter(|m| m.bytes() < cfg.mtu.bytes()) {
        c.mtu = m;
    }
    c
}

/// Runs the server: answers one client, then returns.
pub fn server(cfg: &PerfConfig) -> anyhow::Result<String> {
    uroce::datapath::catch_interrupts();
    serve(cfg, accept_one(cfg.port)?)
}

/// Serves a uroce perf client that has connected on `tcp`.
pub fn serve(cfg: &PerfConfig, tcp: TcpStream) -> anyhow::Result<String> {
    let local = tcp.local_addr()?.ip().to_canonical();
    let peer = tcp.peer_addr()?.ip().to_canonical();
    let cfg = &fitted_to_link(cfg, local);
    let theirs: Hello = read_json(&tcp, "hello from the client")?;
    if theirs.threads > 1 {
        return threads::serve(cfg, &tcp, local, peer, &theirs);
    }
    let cfg = PerfConfig {
        op: theirs.op,
        size: theirs.size,
        qps: theirs.qpns.len().max(1) as u32,
        mtu: exchange::agreed_mtu(cfg.mtu, theirs.mtu),
        ..cfg.clone()
    };
    let mut s = setup(&cfg, local)?;
    send_hello(&tcp, &s, &cfg, 0x200)?;
    connect(&mut s, &cfg, peer, &theirs, 0x200)?;
    if cfg.op == PerfOp::Raw {
        return raw::raw_sink(&mut s, &tcp, peer);
    }
    let (cq, mr) = (s.cq, s.mr);
    let slot = cfg.size.max(8);
    let post_recv = |ctx: &mut Context, qp: u32, i: u64| {
        let sge = Sge {
            addr: mr.addr + (i % WINDOW as u64) * u64::from(slot),
            length: slot,
            lkey: mr.lkey,
        };
        ctx.post_recv(qp, RecvWr { wr_id: i, sge })
    };
    let mut posted = 0u64;
    if cfg.op == PerfOp::Send {
        // Enough receives on each QP for its share of the client's window, four times
        // over, and at least 8.
        let per_qp = (4 * window_for(s.qps.len(), cfg.size) / s.qps.len()).clamp(8, WINDOW * 4);
        for &qp in &s.qps {
            for _ in 0..per_qp {
                post_recv(&mut s.ep.ctx, qp, posted)?;
                posted += 1;
            }
        }
    }
    tcp.set_nonblocking(true)?;
    let mut probe = [0u8; 64];
    let mut received = 0u64;
    // As a NIC's queue engine, the server polls on for SPIN after a packet before it
    // sleeps on the socket: a client's next request in a latency test then waits for no
    // wake-up (the client itself polls busily).
    let mut last_packet: Option<Instant> = None;
    loop {
        let busy = last_packet.is_some_and(|t| t.elapsed() < SPIN);
        if s.ep.poll(if busy {
            Duration::ZERO
        } else {
            Duration::from_millis(1)
        })? > 0
        {
            last_packet = Some(Instant::now());
        }
        for wc in s.ep.ctx.poll_cq(cq, 64) {
            if wc.status == WcStatus::Success {
                received += 1;
                let _ = post_recv(&mut s.ep.ctx, wc.qp_num, posted);
                posted += 1;
            }
        }
        match std::io::Read::read(&mut &tcp, &mut probe) {
            Ok(0) => break, // the client is done
            Ok(_) => break,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(_) => break,
        }
        if uroce::datapath::interrupted() {
            break;
        }
    }
    Ok(format!(
        "served {:?} of {} B from {peer} over {} ({received} receives)",
        cfg.op, cfg.size, s.datapath
    ))
}

/// Runs the client against `server` and measures.
pub fn client(
    cfg: &PerfConfig,
    server: IpAddr,
    progress: &mut dyn FnMut(&str),
) -> anyhow::Result<PerfResult> {
    uroce::datapath::catch_interrupts();
    let tcp = TcpStream::connect((server, cfg.port))
        .with_context(|| format!("connecting to {server}:{}", cfg.port))?;
    let local = tcp.local_addr()?.ip().to_canonical();
    let peer = server;
    let cfg = &fitted_to_link(cfg, local);
    if cfg.threads > 1 {
        return threads::client(cfg, &tcp, local, peer, progress);
    }
    let mut s = setup(cfg, local)?;
    send_hello(&tcp, &s, cfg, 0x100)?;
    let theirs: Hello = read_json(&tcp, "hello from the server")?;
    connect(&mut s, cfg, peer, &theirs, 0x100)?;
    if cfg.op == PerfOp::Raw {
        return raw::raw_source(&mut s, cfg, &theirs, &tcp, progress);
    }
    let (cq, mr) = (s.cq, s.mr);
    let qps = s.qps.clone();
    let size = cfg.size;
    let slot = u64::from(size.max(8));
    let window = if cfg.latency {
        1
    } else {
        window_for(qps.len(), size)
    };
    let mut inflight = 0usize;
    let mut next = 0u64;
    let mut done = 0u64;
    let mut posted_at = vec![Instant::now(); WINDOW];
    let mut lats: Vec<f64> = Vec::new();
    let mut meter = Meter::start();
    while meter.secs() < cfg.duration.as_secs_f64() && !uroce::datapath::interrupted() {
        while inflight < window {
            let i = (next % WINDOW as u64) as usize;
            let sge = Sge {
                addr: mr.addr + i as u64 * slot,
                length: size,
                lkey: mr.lkey,
            };
            let remote_addr = theirs.addr + i as u64 * slot;
            let op = match cfg.op {
                PerfOp::Write => SendOp::Write {
                    remote_addr,
                    rkey: theirs.rkey,
                },
                PerfOp::Read => SendOp::Read {
                    remote_addr,
                    rkey: theirs.rkey,
                },
                PerfOp::Send | PerfOp::Raw => SendOp::Send,
            };
            s.ep.ctx.post_send(
                qps[(next % qps.len() as u64) as usize],
                SendWr {
                    wr_id: next,
                    op,
                    sge,
                    signaled: true,
                    solicited: false,
                },
            )?;
            posted_at[i] = Instant::now();
            next += 1;
            inflight += 1;
        }
        s.ep.poll(if cfg.latency {
            Duration::ZERO
        } else {
            Duration::from_millis(1)
        })?;
        for wc in s.ep.ctx.poll_cq(cq, 64) {
            if wc.status != WcStatus::Success {
                bail!("operation {} completed with {}", wc.wr_id, wc.status.name());
            }
            if cfg.latency {
                lats.push(
                    posted_at[(wc.wr_id % WINDOW as u64) as usize]
                        .elapsed()
                        .as_secs_f64()
                        * 1e6,
                );
            }
            inflight -= 1;
            done += 1;
        }
        meter.tick(done, size, "", progress);
    }
    let secs = meter.secs();
    lats.sort_by(|a, b| a.total_cmp(b));
    let pct = |p: f64| {
        (!lats.is_empty()).then(|| lats[((lats.len() as f64 * p) as usize).min(lats.len() - 1)])
    };
    let op = format!("{:?}", cfg.op).to_lowercase();
    let datapath = s.datapath.clone();
    Ok(PerfResult {
        lat_p50_us: pct(0.5),
        lat_p99_us: pct(0.99),
        lat_p999_us: pct(0.999),
        packets_sent: Some(
            qps.iter()
                .filter_map(|&q| s.ep.ctx.qp_counters(q))
                .map(|c| c.packets_sent)
                .sum(),
        ),
        retransmits: Some(
            qps.iter()
                .filter_map(|&q| s.ep.ctx.qp_counters(q))
                .map(|c| c.retransmits)
                .sum(),
        ),
        tail_probes: Some(
            qps.iter()
                .filter_map(|&q| s.ep.ctx.qp_counters(q))
                .map(|c| c.tail_probes)
                .sum(),
        ),
        ..PerfResult::measured(&op, size, done, secs, datapath)
    })
}
