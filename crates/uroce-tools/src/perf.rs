//! `uroce perf`: RC bandwidth and latency between two hosts, perftest style. The server
//! is `uroce perf OP` with no address; the client names it. They exchange QPNs, PSN, rkeys
//! and addresses as one JSON line each over TCP (default port 18515), resolve the next
//! hop's MAC (ARP / NDP on the AF_XDP path), then move data over the chosen datapath.

use std::io::{BufRead, BufReader, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};

use serde::{Deserialize, Serialize};

use crate::backend::open_backend_lossy;
use crate::link::{local_link, peer_mac};
pub use crate::traffic::Traffic;
use uroce::datapath::event_loop::Endpoint;
use uroce::datapath::impair::Impairment;
use uroce::datapath::Backend;
use uroce::mem::Access;
use uroce::verbs::{
    Context, InitAttr, Mtu, QpCaps, QpType, RecvWr, Remote, RtrAttr, RtsAttr, SendOp, SendWr, Sge,
    WcStatus,
};

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

/// One side's line of the exchange.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Hello {
    pub(crate) op: PerfOp,
    pub(crate) size: u32,
    pub(crate) qpn: u32,
    pub(crate) psn: u32,
    pub(crate) rkey: u32,
    pub(crate) addr: u64,
    /// Every QP's number (the first is `qpn`).
    #[serde(default)]
    pub(crate) qpns: Vec<u32>,
    /// Event loops (threads) on the sender's side, one QP each, when above 1.
    #[serde(default)]
    pub(crate) threads: u32,
    /// Each QP's rkey and buffer address, when they differ (one region per loop).
    #[serde(default)]
    pub(crate) rkeys: Vec<u32>,
    #[serde(default)]
    pub(crate) addrs: Vec<u64>,
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

struct Setup {
    ep: Endpoint<Box<dyn Backend + Send>>,
    /// The QPs; the first one carries raw mode's template.
    qps: Vec<u32>,
    cq: uroce::verbs::CqId,
    mr: uroce::mem::Mr,
    datapath: String,
    iface: String,
    local: IpAddr,
}

/// Messages in flight per QP (and message slots in the region).
pub(crate) const WINDOW: usize = 32;

fn setup(cfg: &PerfConfig, local: IpAddr) -> anyhow::Result<Setup> {
    let link = local_link(cfg.iface.as_deref(), local)?;
    let iface = link.iface.clone();
    let (backend, datapath) = open_backend_lossy(&cfg.backend, cfg.mtu, local, &iface, cfg.impair)?;
    let mac = link.mac_for(&*backend)?;
    let mut ctx = cfg.traffic.context(&iface, mac, local, seed_of(local))?;
    let (cq, qps, mr) = rc_resources(&mut ctx, cfg.qps, cfg.size)?;
    Ok(Setup {
        ep: Endpoint::new(ctx, backend),
        qps,
        cq,
        mr,
        datapath: datapath + &cfg.traffic.describe(),
        iface,
        local,
    })
}

/// What one perf loop needs in `ctx`: a CQ, `qps` RC QPs in INIT on it, and a region
/// of `WINDOW` message slots that the peer may write and read.
pub(crate) fn rc_resources(
    ctx: &mut Context,
    qps: u32,
    size: u32,
) -> anyhow::Result<(uroce::verbs::CqId, Vec<u32>, uroce::mem::Mr)> {
    let cq = ctx.create_cq();
    let pd = ctx.alloc_pd();
    let caps = QpCaps {
        qp_type: QpType::Rc,
        send_cq: cq,
        recv_cq: cq,
        max_send_wr: 1024,
        max_recv_wr: 1024,
    };
    let mut v = Vec::new();
    for _ in 0..qps.max(1) {
        let qp = ctx.create_qp(pd, caps)?;
        ctx.modify_qp_init(qp, InitAttr::default())?;
        v.push(qp);
    }
    let all = Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ;
    let mr = ctx.reg_mr(pd, vec![0x5a; size.max(8) as usize * WINDOW], all)?;
    Ok((cq, v, mr))
}

/// Writes `v` as one JSON line.
pub(crate) fn send_json(tcp: &TcpStream, v: &impl Serialize) -> anyhow::Result<()> {
    let line = serde_json::to_string(v)?;
    writeln!(&mut &*tcp, "{line}")?;
    Ok(())
}

/// Reads one JSON line; `what` names it in the error ("hello from the server").
pub(crate) fn read_json<T: serde::de::DeserializeOwned>(
    tcp: &TcpStream,
    what: &str,
) -> anyhow::Result<T> {
    let mut line = String::new();
    BufReader::new(tcp).read_line(&mut line)?;
    serde_json::from_str(&line).with_context(|| format!("bad {what}"))
}

/// Whether the peer said stop (any byte) or went away, on a non-blocking stream; false
/// while nothing came.
pub(crate) fn peer_stopped(tcp: &TcpStream) -> bool {
    let mut probe = [0u8; 64];
    match std::io::Read::read(&mut &*tcp, &mut probe) {
        Ok(_) => true,
        Err(e) => e.kind() != std::io::ErrorKind::WouldBlock,
    }
}

/// Sends our side of the exchange: one JSON line.
fn send_hello(tcp: &TcpStream, s: &Setup, cfg: &PerfConfig, psn: u32) -> anyhow::Result<()> {
    let mine = Hello {
        op: cfg.op,
        size: cfg.size,
        qpn: s.qps[0],
        qpns: s.qps.clone(),
        psn,
        rkey: s.mr.rkey,
        addr: s.mr.addr,
        threads: 1,
        rkeys: Vec::new(),
        addrs: Vec::new(),
    };
    send_json(tcp, &mine)
}

fn connect(
    s: &mut Setup,
    cfg: &PerfConfig,
    peer: IpAddr,
    hello: &Hello,
    my_psn: u32,
) -> anyhow::Result<()> {
    let my_mac = s.ep.ctx.config().mac;
    let remote = Remote {
        ip: peer,
        mac: peer_mac(s.ep.backend_mut(), &s.iface, my_mac, s.local, peer)?,
    };
    let theirs = if hello.qpns.is_empty() {
        vec![hello.qpn]
    } else {
        hello.qpns.clone()
    };
    if theirs.len() != s.qps.len() {
        bail!(
            "the peer has {} QPs, this side {}",
            theirs.len(),
            s.qps.len()
        );
    }
    for (&qp, &dest_qpn) in s.qps.iter().zip(&theirs) {
        let rtr = RtrAttr {
            remote,
            dest_qpn,
            rq_psn: hello.psn,
            path_mtu: cfg.mtu,
            max_dest_rd_atomic: 16,
            min_rnr_timer: 1,
        };
        s.ep.ctx.modify_qp_rtr(qp, rtr)?;
        s.ep.ctx.modify_qp_rts(
            qp,
            RtsAttr {
                sq_psn: my_psn,
                timeout: 12,
                ..RtsAttr::default()
            },
        )?;
    }
    Ok(())
}

/// A seed from an address (IPv4 or IPv6).
pub(crate) fn seed_of(a: IpAddr) -> u64 {
    match a {
        IpAddr::V4(v) => u64::from(u32::from(v)),
        IpAddr::V6(v) => {
            let x = u128::from(v);
            (x as u64) ^ ((x >> 64) as u64)
        }
    }
}

/// Waits for one client on TCP `port`, over IPv6 or IPv4 (dual-stack where the host has
/// IPv6, else IPv4 only); the listener is closed once it has come.
pub fn accept_one(port: u16) -> anyhow::Result<TcpStream> {
    let l = TcpListener::bind(SocketAddr::from((std::net::Ipv6Addr::UNSPECIFIED, port)))
        .or_else(|_| TcpListener::bind(SocketAddr::from(([0, 0, 0, 0], port))))
        .with_context(|| format!("listening on TCP {port}"))?;
    Ok(l.accept()?.0)
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
    let theirs: Hello = read_json(&tcp, "hello from the client")?;
    if theirs.threads > 1 {
        return crate::perf_loops::serve(cfg, &tcp, local, peer, &theirs);
    }
    let cfg = PerfConfig {
        op: theirs.op,
        size: theirs.size,
        qps: theirs.qpns.len().max(1) as u32,
        ..cfg.clone()
    };
    let mut s = setup(&cfg, local)?;
    send_hello(&tcp, &s, &cfg, 0x200)?;
    connect(&mut s, &cfg, peer, &theirs, 0x200)?;
    if cfg.op == PerfOp::Raw {
        return raw_sink(&mut s, &tcp, peer);
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
        for &qp in &s.qps {
            for _ in 0..WINDOW * 4 {
                post_recv(&mut s.ep.ctx, qp, posted)?;
                posted += 1;
            }
        }
    }
    tcp.set_nonblocking(true)?;
    let mut probe = [0u8; 64];
    let mut received = 0u64;
    loop {
        s.ep.poll(Duration::from_millis(1))?;
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
    if cfg.threads > 1 {
        return crate::perf_loops::client(cfg, &tcp, local, peer, progress);
    }
    let mut s = setup(cfg, local)?;
    send_hello(&tcp, &s, cfg, 0x100)?;
    let theirs: Hello = read_json(&tcp, "hello from the server")?;
    connect(&mut s, cfg, peer, &theirs, 0x100)?;
    if cfg.op == PerfOp::Raw {
        return raw_source(&mut s, cfg, &theirs, &tcp, progress);
    }
    let (cq, mr) = (s.cq, s.mr);
    let qps = s.qps.clone();
    let size = cfg.size;
    let slot = u64::from(size.max(8));
    let window = if cfg.latency { 1 } else { WINDOW * qps.len() };
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
        ..PerfResult::measured(&op, size, done, secs, datapath)
    })
}

/// What the raw sink counted, sent back to the client at the end.
#[derive(Debug, Serialize, Deserialize)]
struct RawCount {
    frames: u64,
    bytes: u64,
}

/// Server side of `raw`: counts frames until the client says stop, then tells it.
fn raw_sink(s: &mut Setup, tcp: &TcpStream, peer: IpAddr) -> anyhow::Result<String> {
    tcp.set_nonblocking(true)?;
    let mut count = RawCount {
        frames: 0,
        bytes: 0,
    };
    let mut rounds = 0u32;
    loop {
        let backend = s.ep.backend_mut();
        backend.receive(Duration::from_millis(1), 256, &mut |f| {
            count.frames += 1;
            count.bytes += f.len() as u64;
        })?;
        rounds += 1;
        if (rounds % 64 == 0 || count.frames == 0) && peer_stopped(tcp) {
            break;
        }
        if uroce::datapath::interrupted() {
            break;
        }
    }
    // Frames still in flight when the client stopped.
    let quiet = Instant::now() + Duration::from_millis(20);
    while Instant::now() < quiet {
        s.ep.backend_mut()
            .receive(Duration::from_millis(1), 256, &mut |f| {
                count.frames += 1;
                count.bytes += f.len() as u64;
            })?;
    }
    tcp.set_nonblocking(false)?;
    send_json(tcp, &count)?;
    Ok(format!(
        "counted {} raw frames ({} bytes) from {peer} over {}",
        count.frames, count.bytes, s.datapath
    ))
}

/// Client side of `raw`: one real RC WRITE packet carrying a full path MTU of payload is
/// built once, then sent again and again through the backend alone.
fn raw_source(
    s: &mut Setup,
    cfg: &PerfConfig,
    theirs: &Hello,
    tcp: &TcpStream,
    progress: &mut dyn FnMut(&str),
) -> anyhow::Result<PerfResult> {
    let payload = cfg.mtu.bytes();
    let (qp, mr) = (s.qps[0], s.mr);
    s.ep.ctx.post_send(
        qp,
        SendWr {
            wr_id: 0,
            op: SendOp::Write {
                remote_addr: theirs.addr,
                rkey: theirs.rkey,
            },
            sge: Sge {
                addr: mr.addr,
                length: payload.min(mr.len as u32),
                lkey: mr.lkey,
            },
            signaled: false,
            solicited: false,
        },
    )?;
    let mut template = vec![0u8; uroce::datapath::MAX_FRAME];
    let n =
        s.ep.ctx
            .poll_frame(Instant::now(), &mut template)
            .context("the context built no frame")?;
    template.truncate(n);
    let backend = s.ep.backend_mut();
    let mut meter = Meter::start();
    let mut sent = 0u64;
    let mut copy = |buf: &mut [u8]| {
        buf[..template.len()].copy_from_slice(&template);
        Some(template.len())
    };
    // Whole frames as built: the backend alone, no transport.
    while meter.secs() < cfg.duration.as_secs_f64() && !uroce::datapath::interrupted() {
        for _ in 0..64 {
            match backend.send_frame_with(&mut copy) {
                Ok(true) => sent += 1,
                Ok(false) => {}
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) => return Err(e.into()),
            }
        }
        backend.flush()?;
        meter.tick(sent, 0, " sent", progress);
    }
    let secs = meter.secs();
    backend.flush()?;
    writeln!(&mut &*tcp, "stop")?;
    let count: RawCount = read_json(tcp, "count from the server")?;
    Ok(PerfResult {
        frames_sent: Some(sent),
        frames_received: Some(count.frames),
        ..PerfResult::measured("raw", payload, count.frames, secs, s.datapath.clone())
    })
}
