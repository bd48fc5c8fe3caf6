//! perftest compatibility: `uroce perf ... --perftest` (client) and any `uroce perf`
//! server speak the out-of-band exchange of linux-rdma perftest 4.5 (version string
//! "6.06"), so `ib_write_bw`, `ib_read_bw`, `ib_send_bw`, `ib_atomic_bw` and the `_lat`
//! tools can sit on either end.
//!
//! The exchange runs over TCP (port 18515), in lock step: the client writes each message
//! first and the server answers with its own. Every message is written in one call,
//! because perftest reads each with a single `read()` of the exact length.
//!
//! 1. version, 16 bytes NUL-padded; a peer below 5.70 is refused (as perftest does);
//! 2. page size (cycle buffer) and cache line, 4 bytes big-endian each, both sides keep
//!    the larger; the MTU as an ASCII `enum ibv_mtu` digit and a NUL, both keep the smaller;
//! 3. the 108-byte keys message `LID:OUT_READS:QPN:PSN:RKEY:VADDR:GID[16]:SRQN:` in
//!    lowercase hex, several times (a fixed number per test, see [`Test::keys_before`]);
//! 4. after the run: bandwidth tests but SEND exchange the client's results (five
//!    big-endian 8-byte values: size, iterations, peak, average, message rate), then a
//!    last keys message and `done\0`; `ib_write_lat` ends with no exchange at all.
//!
//! The data path follows perftest's: a bandwidth requester cycles the remote address in
//! steps of the message size rounded up to the cache line while the size is at most half
//! the cycle buffer; atomics are FETCH_AND_ADD of 1 (or CMP_AND_SWAP 0/0); the WRITE
//! latency test ping-pongs a counter in the last byte of each message, the server first.

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, TcpStream};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context as _};

use crate::backend::open_backend_lossy;
use crate::link::{local_link, peer_mac};
use uroce::datapath::event_loop::Endpoint;
use uroce::datapath::Backend;
use uroce::mem::{Access, Mr};
use uroce::verbs::{
    CqId, InitAttr, Mtu, QpCaps, QpType, RecvWr, Remote, RtrAttr, RtsAttr, SendOp, SendWr, Sge,
    WcStatus,
};

/// The version uroce announces: perftest 4.5's.
pub const VERSION: &str = "6.06";
/// Oldest peer version perftest itself accepts.
const MIN_VERSION: f64 = 5.70;
/// Length of the keys message with a GID.
pub const KEY_LEN: usize = 108;
/// perftest's `-s` default for bandwidth tests.
pub const DEFAULT_SIZE_BW: u32 = 65536;
/// perftest's `-s` default for latency tests.
pub const DEFAULT_SIZE_LAT: u32 = 2;

/// Which perftest operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verb {
    /// RDMA WRITE (`ib_write_*`).
    Write,
    /// RDMA READ (`ib_read_*`).
    Read,
    /// SEND (`ib_send_*`).
    Send,
    /// FETCH_AND_ADD, or CMP_AND_SWAP (`ib_atomic_*`).
    Atomic,
}

/// One perftest test: an operation, bandwidth or latency.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Test {
    /// The operation.
    pub verb: Verb,
    /// `_lat` rather than `_bw`.
    pub latency: bool,
}

impl Test {
    /// perftest's tool name.
    pub fn tool(self) -> &'static str {
        match (self.verb, self.latency) {
            (Verb::Write, false) => "ib_write_bw",
            (Verb::Read, false) => "ib_read_bw",
            (Verb::Send, false) => "ib_send_bw",
            (Verb::Atomic, false) => "ib_atomic_bw",
            (Verb::Write, true) => "ib_write_lat",
            (Verb::Read, true) => "ib_read_lat",
            (Verb::Send, true) => "ib_send_lat",
            (Verb::Atomic, true) => "ib_atomic_lat",
        }
    }

    /// Keys messages exchanged before traffic starts.
    pub fn keys_before(self) -> usize {
        match (self.verb, self.latency) {
            (Verb::Send, false) | (_, true) => 4,
            _ => 3,
        }
    }

    /// perftest's default iteration count.
    pub fn default_iters(self) -> u64 {
        if self
            == (Test {
                verb: Verb::Write,
                latency: false,
            })
        {
            5000
        } else {
            1000
        }
    }

    fn title(self) -> String {
        let verb = match self.verb {
            Verb::Write => "RDMA_Write",
            Verb::Read => "RDMA_Read",
            Verb::Send => "Send",
            Verb::Atomic => "Atomic",
        };
        format!(
            "{verb} {}Test",
            if self.latency { "Latency " } else { "BW " }
        )
    }
}

/// Options of a perftest-compatible run (named after perftest's flags).
#[derive(Debug, Clone)]
pub struct Config {
    /// The test.
    pub test: Test,
    /// `-s`: bytes per message (atomics: always 8).
    pub size: u32,
    /// `-n`: iterations.
    pub iters: u64,
    /// `-m`: requested MTU (the smaller of both sides' wins); default: what the interface
    /// carries.
    pub mtu: Option<Mtu>,
    /// `-t`: operations in flight (bandwidth).
    pub tx_depth: u32,
    /// `-A CMP_AND_SWAP` instead of FETCH_AND_ADD.
    pub compare_swap: bool,
    /// `--report_gbits`.
    pub report_gbits: bool,
    /// `-p`: TCP port.
    pub port: u16,
    /// Datapath: auto, xdp or udp.
    pub backend: String,
    /// Interface for AF_XDP.
    pub iface: Option<String>,
    /// Loss and reordering of received frames on purpose (recovery tests).
    pub impair: uroce::datapath::impair::Impairment,
    /// DSCP, UDP source ports and DCQCN.
    pub traffic: crate::traffic::Traffic,
}

/// The keys message (perftest's `KEY_PRINT_FMT_GID`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Keys {
    /// LID (0 on RoCE).
    pub lid: u16,
    /// READ / atomic operations the sender accepts in flight (its max_dest_rd_atomic).
    pub out_reads: u16,
    /// QP number.
    pub qpn: u32,
    /// First PSN the sender sends.
    pub psn: u32,
    /// rkey of the buffer.
    pub rkey: u32,
    /// Address of the buffer the peer targets.
    pub vaddr: u64,
    /// GID (IPv4-mapped for RoCEv2 over IPv4).
    pub gid: [u8; 16],
    /// SRQ number (0).
    pub srqn: u32,
}

impl Keys {
    /// The 108 bytes on the wire: lowercase hex fields, each followed by ':', then NUL.
    pub fn to_wire(&self) -> [u8; KEY_LEN] {
        let mut s = format!(
            "{:04x}:{:04x}:{:06x}:{:06x}:{:08x}:{:016x}:",
            self.lid, self.out_reads, self.qpn, self.psn, self.rkey, self.vaddr
        );
        for b in self.gid {
            s.push_str(&format!("{b:02x}:"));
        }
        s.push_str(&format!("{:08x}:", self.srqn));
        let mut out = [0u8; KEY_LEN];
        let n = s.len().min(KEY_LEN - 1);
        out[..n].copy_from_slice(&s.as_bytes()[..n]);
        out
    }

    /// Parses a keys message; says which field is wrong.
    pub fn from_wire(b: &[u8]) -> anyhow::Result<Self> {
        let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
        let text =
            std::str::from_utf8(&b[..end]).map_err(|_| anyhow!("keys message is not ASCII"))?;
        let f: Vec<&str> = text.split(':').collect();
        if f.len() != 24 || !f[23].is_empty() {
            bail!(
                "keys message has {} fields, not 23: {text:?}",
                f.len().saturating_sub(1)
            );
        }
        let hex = |i: usize, what: &str| {
            u64::from_str_radix(f[i], 16)
                .map_err(|_| anyhow!("keys message: bad {what} {:?}", f[i]))
        };
        let mut gid = [0u8; 16];
        for (k, g) in gid.iter_mut().enumerate() {
            *g = hex(6 + k, "GID byte")? as u8;
        }
        Ok(Self {
            lid: hex(0, "LID")? as u16,
            out_reads: hex(1, "outstanding reads")? as u16,
            qpn: hex(2, "QPN")? as u32 & 0xff_ffff,
            psn: hex(3, "PSN")? as u32 & 0xff_ffff,
            rkey: hex(4, "rkey")? as u32,
            vaddr: hex(5, "address")?,
            gid,
            srqn: hex(22, "SRQN")? as u32,
        })
    }

    /// The peer's IPv4 address from an IPv4-mapped GID.
    pub fn ipv4(&self) -> Option<Ipv4Addr> {
        let g = std::net::Ipv6Addr::from(self.gid);
        g.to_ipv4_mapped()
    }
}

/// `enum ibv_mtu` (1 = 256 ... 5 = 4096).
fn mtu_enum(m: Mtu) -> u8 {
    match m {
        Mtu::M256 => 1,
        Mtu::M512 => 2,
        Mtu::M1024 => 3,
        Mtu::M2048 => 4,
        Mtu::M4096 => 5,
    }
}

fn mtu_from_enum(e: u8) -> Option<Mtu> {
    Some(match e {
        1 => Mtu::M256,
        2 => Mtu::M512,
        3 => Mtu::M1024,
        4 => Mtu::M2048,
        5 => Mtu::M4096,
        _ => return None,
    })
}

/// The TCP side of the exchange.
struct Oob {
    tcp: TcpStream,
    client: bool,
}

impl Oob {
    /// Reads exactly `n` bytes, running `poll` (the datapath) while none arrive, so the
    /// QP keeps answering the peer while we wait on it.
    fn read(
        &mut self,
        n: usize,
        poll: &mut dyn FnMut() -> anyhow::Result<()>,
    ) -> anyhow::Result<Vec<u8>> {
        let mut buf = vec![0u8; n];
        let mut got = 0;
        self.tcp.set_nonblocking(true)?;
        while got < n {
            match self.tcp.read(&mut buf[got..]) {
                Ok(0) => bail!("the peer closed the exchange connection"),
                Ok(k) => got += k,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    if uroce::datapath::interrupted() {
                        bail!("interrupted");
                    }
                    poll()?;
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e).context("reading from the peer"),
            }
        }
        self.tcp.set_nonblocking(false)?;
        Ok(buf)
    }

    fn write(&mut self, b: &[u8]) -> anyhow::Result<()> {
        self.tcp.write_all(b).context("writing to the peer")
    }

    /// One lock-step exchange: the client writes first, the server reads first.
    fn xchg(
        &mut self,
        mine: &[u8],
        poll: &mut dyn FnMut() -> anyhow::Result<()>,
    ) -> anyhow::Result<Vec<u8>> {
        if self.client {
            self.write(mine)?;
            self.read(mine.len(), poll)
        } else {
            let theirs = self.read(mine.len(), poll)?;
            self.write(mine)?;
            Ok(theirs)
        }
    }

    /// `done\0` each way; the peer may already have gone (perftest closes right after
    /// writing its own), so only our write must succeed.
    fn done(&mut self, poll: &mut dyn FnMut() -> anyhow::Result<()>) -> anyhow::Result<()> {
        let _ = self.write(b"done\0");
        let deadline = Instant::now() + Duration::from_secs(2);
        let mut idle = || {
            if Instant::now() > deadline {
                bail!("timeout");
            }
            poll()
        };
        let _ = self.read(5, &mut idle);
        Ok(())
    }
}

fn sleep_poll() -> anyhow::Result<()> {
    std::thread::sleep(Duration::from_millis(1));
    Ok(())
}

/// Bandwidth results (perftest's report row).
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct BwRow {
    /// Bytes per message.
    pub bytes: u64,
    /// Iterations.
    pub iterations: u64,
    /// Peak bandwidth, MB/s (or Gb/s with --report_gbits).
    pub bw_peak: f64,
    /// Average bandwidth, same unit.
    pub bw_average: f64,
    /// Messages per second, millions.
    pub msg_rate_mpps: f64,
}

/// Latency results (perftest's report row), microseconds.
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct LatRow {
    /// Bytes per message.
    pub bytes: u64,
    /// Iterations.
    pub iterations: u64,
    /// Smallest.
    pub t_min: f64,
    /// Largest (after dropping the two largest, as perftest does).
    pub t_max: f64,
    /// Median.
    pub t_typical: f64,
    /// Mean.
    pub t_avg: f64,
    /// Standard deviation.
    pub t_stdev: f64,
    /// 99th percentile.
    pub p99: f64,
    /// 99.9th percentile.
    pub p999: f64,
}

/// What a run did.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Outcome {
    /// perftest's tool this run is compatible with.
    pub tool: String,
    /// "client" or "server".
    pub role: String,
    /// The peer's version string.
    pub peer_version: String,
    /// Negotiated path MTU, bytes.
    pub mtu: u32,
    /// Datapath used.
    pub datapath: String,
    /// Bandwidth row (the client's numbers, on both sides where perftest shows them).
    pub bw: Option<BwRow>,
    /// Latency row.
    pub lat: Option<LatRow>,
    /// What uroce checked of the data, in words (empty when nothing could be).
    pub validated: Vec<String>,
    /// Packets uroce retransmitted.
    pub retransmits: u64,
    /// perftest-style text: header, address lines, result table.
    #[serde(skip)]
    pub text: Vec<String>,
}

struct Run {
    cfg: Config,
    oob: Oob,
    ep: Endpoint<Box<dyn Backend + Send>>,
    qp: u32,
    cq: CqId,
    mr: Mr,
    /// Bytes of one half of the buffer (perftest's INC(BUFF_SIZE)).
    half: u64,
    cycle: u64,
    cache_line: u64,
    mine: Keys,
    rem: Keys,
    mtu: Mtu,
    iface: String,
    local: Ipv4Addr,
    out: Outcome,
}

fn round_up(x: u64, to: u64) -> u64 {
    x.div_ceil(to) * to
}

/// perftest's INC(): the step between messages in the cycle buffer.
fn step(size: u64, cache_line: u64) -> u64 {
    if size > cache_line {
        round_up(size, cache_line)
    } else {
        cache_line
    }
}

/// Serves a perftest client that has connected on `tcp` (see [`crate::perf::accept_one`];
/// `uroce perf` tells a perftest client from a uroce one by its first byte).
pub fn serve(cfg: &Config, tcp: TcpStream) -> anyhow::Result<Outcome> {
    run(cfg, tcp, false)
}

/// Runs as the client of a perftest server at `server`.
pub fn client(cfg: &Config, server: IpAddr) -> anyhow::Result<Outcome> {
    uroce::datapath::catch_interrupts();
    let tcp = TcpStream::connect((server, cfg.port))
        .with_context(|| format!("Couldn't connect to {server}:{}", cfg.port))?;
    run(cfg, tcp, true)
}

fn run(cfg: &Config, tcp: TcpStream, client: bool) -> anyhow::Result<Outcome> {
    let mut cfg = cfg.clone();
    if cfg.test.verb == Verb::Atomic {
        cfg.size = 8;
    }
    if cfg.iters < 5 {
        bail!("-n {} is below perftest's minimum of 5", cfg.iters);
    }
    let _ = tcp.set_nodelay(true);
    let IpAddr::V4(local) = tcp.local_addr()?.ip().to_canonical() else {
        bail!("perftest mode is IPv4 only");
    };
    let IpAddr::V4(tcp_peer) = tcp.peer_addr()?.ip().to_canonical() else {
        bail!("perftest mode is IPv4 only");
    };
    let mut oob = Oob { tcp, client };
    // Versions, system data, MTU.
    let mut v = [0u8; 16];
    v[..VERSION.len()].copy_from_slice(VERSION.as_bytes());
    let theirs = oob.xchg(&v, &mut sleep_poll)?;
    let end = theirs.iter().position(|&c| c == 0).unwrap_or(16);
    let peer_version = String::from_utf8_lossy(&theirs[..end]).to_string();
    let pv: f64 = peer_version.trim().parse().unwrap_or(0.0);
    if pv < MIN_VERSION {
        bail!(
            "the peer's perftest version {peer_version:?} is not compatible (uroce speaks {VERSION}, needs at least {MIN_VERSION})"
        );
    }
    let be4 = |b: &[u8]| u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
    let cycle = u64::from(be4(&oob.xchg(&4096u32.to_be_bytes(), &mut sleep_poll)?).max(4096));
    let cache_line = u64::from(be4(&oob.xchg(&64u32.to_be_bytes(), &mut sleep_poll)?).max(64));
    let link = local_link(cfg.iface.as_deref(), local)?;
    let iface = link.iface.clone();
    let active = Mtu::fitting(link.mtu).unwrap_or(Mtu::M256);
    let my_mtu = match cfg.mtu {
        Some(m) if m.bytes() <= active.bytes() => m,
        _ => active,
    };
    let m = oob.xchg(&[b'0' + mtu_enum(my_mtu), 0], &mut sleep_poll)?;
    let mtu = match mtu_from_enum(m[0].wrapping_sub(b'0')) {
        Some(r) if r.bytes() < my_mtu.bytes() => r,
        _ => my_mtu,
    };

    // Resources, sized as perftest sizes its buffer.
    let size = u64::from(cfg.size);
    let half = step(size.max(cycle), cache_line);
    let (backend, datapath) = open_backend_lossy(&cfg.backend, mtu, local, &iface, cfg.impair)?;
    let mac = link.mac_for(&*backend)?;
    let seed = u64::from(u32::from(local)) ^ u64::from(std::process::id());
    let mut ctx = cfg.traffic.context(&iface, mac, IpAddr::V4(local), seed)?;
    let cq = ctx.create_cq();
    let pd = ctx.alloc_pd();
    let qp = ctx.create_qp(
        pd,
        QpCaps {
            qp_type: QpType::Rc,
            send_cq: cq,
            recv_cq: cq,
            max_send_wr: cfg.tx_depth.max(1) as usize + 1,
            max_recv_wr: 1024,
        },
    )?;
    let access = Access::LOCAL_WRITE
        | match cfg.test.verb {
            Verb::Write => Access::REMOTE_WRITE,
            Verb::Read => Access::REMOTE_READ,
            Verb::Atomic => Access::REMOTE_ATOMIC,
            Verb::Send => Access::NONE,
        };
    // The send half holds a pattern; the half the peer targets starts as another one
    // (write_lat wants zeros: its counter must start below 1).
    let mut buf = vec![0u8; 2 * half as usize];
    if !(cfg.test.verb == Verb::Write && cfg.test.latency) {
        for (i, b) in buf.iter_mut().enumerate() {
            *b = (i as u8).wrapping_mul(7).wrapping_add(0x11);
        }
    }
    let mr = ctx.reg_mr(pd, buf, access)?;
    ctx.modify_qp_init(
        qp,
        InitAttr {
            access: Access::REMOTE_WRITE | Access::REMOTE_READ | Access::REMOTE_ATOMIC,
            ..InitAttr::default()
        },
    )?;
    let seed = u64::from(std::process::id())
        ^ std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
    let psn = (uroce::sim::Rng::new(seed ^ u64::from(qp) << 32).next_u64() as u32) & 0xff_ffff;
    let out_reads = match cfg.test.verb {
        Verb::Read | Verb::Atomic => 16,
        _ => 1,
    };
    let mine = Keys {
        lid: 0,
        out_reads,
        qpn: qp,
        psn,
        rkey: mr.rkey,
        vaddr: mr.addr + half,
        gid: local.to_ipv6_mapped().octets(),
        srqn: 0,
    };
    let mut r = Run {
        out: Outcome {
            tool: cfg.test.tool().into(),
            role: if client { "client" } else { "server" }.into(),
            peer_version,
            mtu: mtu.bytes(),
            datapath: datapath + &cfg.traffic.describe(),
            ..Outcome::default()
        },
        cfg,
        oob,
        ep: Endpoint::new(ctx, backend),
        qp,
        cq,
        mr,
        half,
        cycle,
        cache_line,
        mine,
        rem: mine,
        mtu,
        iface,
        local,
    };
    r.handshake(tcp_peer)?;
    r.header();
    match (r.cfg.test.verb, r.cfg.test.latency) {
        (Verb::Send, false) => r.send_bw()?,
        (_, false) => r.rdma_bw()?,
        (Verb::Write, true) => r.write_lat()?,
        (Verb::Send, true) => r.send_lat()?,
        (_, true) => r.read_atomic_lat()?,
    }
    r.out.retransmits = r.ep.ctx.qp_counters(r.qp).map_or(0, |c| c.retransmits);
    Ok(r.out)
}

impl Run {
    /// Runs the datapath once (busy in latency tests).
    fn poll(&mut self) -> anyhow::Result<()> {
        let wait = if self.cfg.test.latency {
            Duration::ZERO
        } else {
            Duration::from_micros(200)
        };
        self.ep.poll(wait).map_err(Into::into)
    }

    /// One keys exchange while the datapath keeps running.
    fn keys(&mut self) -> anyhow::Result<Keys> {
        let mine = self.mine.to_wire();
        let Self { oob, ep, .. } = self;
        let mut poll = || ep.poll(Duration::from_micros(200)).map_err(Into::into);
        Keys::from_wire(&oob.xchg(&mine, &mut poll)?)
    }

    /// The first keys exchange, the connection of the QP, the rest of the pre-run keys.
    fn handshake(&mut self, tcp_peer: Ipv4Addr) -> anyhow::Result<()> {
        self.rem = self.keys()?;
        let Some(peer) = self.rem.ipv4() else {
            bail!(
                "the peer's GID {} is not IPv4-mapped; uroce's is, and perftest refuses a mix (use an IPv4 RoCEv2 GID index, e.g. -x 1 with rxe)",
                std::net::Ipv6Addr::from(self.rem.gid)
            );
        };
        let peer = if peer.is_unspecified() {
            tcp_peer
        } else {
            peer
        };
        let my_mac = self.ep.ctx.config().mac;
        let remote = Remote {
            ip: IpAddr::V4(peer),
            mac: peer_mac(self.ep.backend_mut(), &self.iface, my_mac, self.local, peer)?,
        };
        self.ep.ctx.modify_qp_rtr(
            self.qp,
            RtrAttr {
                remote,
                dest_qpn: self.rem.qpn,
                rq_psn: self.rem.psn,
                path_mtu: self.mtu,
                max_dest_rd_atomic: self.mine.out_reads as u8,
                min_rnr_timer: 12,
            },
        )?;
        self.ep.ctx.modify_qp_rts(
            self.qp,
            RtsAttr {
                sq_psn: self.mine.psn,
                timeout: 14,
                retry_cnt: 7,
                rnr_retry: 7,
                max_rd_atomic: self.rem.out_reads.clamp(1, 16) as u8,
            },
        )?;
        let t = self.cfg.test;
        // Receives are up before the sync message that lets the peer send.
        let receiver = t.verb == Verb::Send && (t.latency || !self.oob.client);
        if receiver {
            let depth = self.cfg.iters.min(512);
            for i in 0..depth {
                self.post_recv(i)?;
            }
        }
        for _ in 1..t.keys_before() {
            let k = self.keys()?;
            if k.qpn != self.rem.qpn {
                bail!("the peer's keys changed during the exchange");
            }
        }
        Ok(())
    }

    fn post_recv(&mut self, i: u64) -> anyhow::Result<()> {
        let size = u64::from(self.cfg.size);
        let at = self.remote_offset(i, size);
        let sge = Sge {
            addr: self.mr.addr + self.half + at,
            length: self.cfg.size,
            lkey: self.mr.lkey,
        };
        self.ep
            .ctx
            .post_recv(self.qp, RecvWr { wr_id: i, sge })
            .map_err(Into::into)
    }

    /// Offset of message `k` inside a half buffer (perftest's cycle buffer rule).
    fn remote_offset(&self, k: u64, size: u64) -> u64 {
        if self.cfg.test.latency || size > self.cycle / 2 {
            return 0;
        }
        let inc = step(size, self.cache_line);
        (k % (self.cycle / inc)) * inc
    }

    fn header(&mut self) {
        let t = self.cfg.test;
        let rule = "-".repeat(87);
        let mut title = t.title();
        if t.verb == Verb::Atomic {
            let op = if self.cfg.compare_swap {
                "CMP_AND_SWAP"
            } else {
                "FETCH_AND_ADD"
            };
            title = format!("Atomic {op} {}", &title["Atomic ".len()..]);
        }
        let lines = [
            rule.clone(),
            format!("                    {title}"),
            " Number of qps   : 1\t\tTransport type : IB".to_string(),
            " Connection type : RC\t\tUsing SRQ      : OFF".to_string(),
            format!(" Mtu             : {}[B]", self.mtu.bytes()),
            " Link type       : Ethernet".to_string(),
            format!(" Datapath        : {}", self.out.datapath),
            format!(" Data ex. method : Ethernet (perftest {VERSION} exchange)"),
            rule.clone(),
            Self::address_line("local", &self.mine, t),
            Self::gid_line(&self.mine),
            Self::address_line("remote", &self.rem, t),
            Self::gid_line(&self.rem),
            rule,
        ];
        self.out.text.extend(lines);
    }

    fn address_line(who: &str, k: &Keys, t: Test) -> String {
        let mut s = format!(
            " {who} address: LID {:#06x} QPN {:#06x} PSN {:#08x}",
            k.lid, k.qpn, k.psn
        );
        if t.verb == Verb::Read {
            s.push_str(&format!(" OUT {:#04x}", k.out_reads));
        }
        if matches!(t.verb, Verb::Write | Verb::Read) {
            s.push_str(&format!(" RKey {:#08x} VAddr {:#016x}", k.rkey, k.vaddr));
        }
        s
    }

    fn gid_line(k: &Keys) -> String {
        let g: Vec<String> = k.gid.iter().map(|b| format!("{b:02}")).collect();
        format!(" GID: {}", g.join(":"))
    }

    fn check_wc(&self, wc: &uroce::verbs::WorkCompletion) -> anyhow::Result<()> {
        if wc.status == WcStatus::Success {
            Ok(())
        } else {
            Err(anyhow!(
                "completion with error: wr_id {} status {} ({})",
                wc.wr_id,
                wc.status.name(),
                self.cfg.test.tool()
            ))
        }
    }

    /// Fails a run that was interrupted or has completed nothing for 30 s (a peer that
    /// stopped answering, or one run with fewer iterations that stopped posting
    /// receives: RNR retries are unlimited, as perftest sets them).
    fn stalled(&self, last: &mut Instant, done: u64, iters: u64) -> anyhow::Result<()> {
        if uroce::datapath::interrupted() {
            bail!("interrupted after {done} of {iters}");
        }
        if last.elapsed() > Duration::from_secs(30) {
            bail!(
                "no completion for 30 s after {done} of {iters} (does the peer run the same -n?)"
            );
        }
        Ok(())
    }

    fn bw_unit(&self) -> (&'static str, f64) {
        if self.cfg.report_gbits {
            ("Gb/sec", 125e6)
        } else {
            ("MB/sec", 1_048_576.0)
        }
    }

    fn bw_table(&mut self, row: BwRow) {
        let (unit, _) = self.bw_unit();
        self.out.text.push(format!(
            " #bytes     #iterations    BW peak[{unit}]    BW average[{unit}]   MsgRate[Mpps]"
        ));
        self.out.text.push(format!(
            " {:<7}    {:<10}       {:<7.2}            {:<7.2}\t\t   {:<7.6}",
            row.bytes, row.iterations, row.bw_peak, row.bw_average, row.msg_rate_mpps
        ));
        self.out.text.push("-".repeat(87));
        self.out.bw = Some(row);
    }

    fn row(&self, posted: &[Instant], completed: &[Instant], iters: u64) -> BwRow {
        let (_, factor) = self.bw_unit();
        let size = f64::from(self.cfg.size);
        let (Some(first), Some(last)) = (posted.first(), completed.last()) else {
            return BwRow::default();
        };
        let secs = last.duration_since(*first).as_secs_f64().max(1e-9);
        // The peak as perftest takes it: the best per-message time between any post and
        // a later completion; skipped above 20,000 iterations (perftest's noPeak).
        let mut peak = 0.0;
        if completed.len() <= 20_000 {
            let mut best = f64::MAX;
            for (i, p) in posted.iter().enumerate() {
                for (j, c) in completed.iter().enumerate().skip(i) {
                    let t = c.saturating_duration_since(*p).as_secs_f64() / (j - i + 1) as f64;
                    if t > 0.0 && t < best {
                        best = t;
                    }
                }
            }
            if best < f64::MAX {
                peak = size / best / factor;
            }
        }
        BwRow {
            bytes: u64::from(self.cfg.size),
            iterations: iters,
            bw_peak: peak,
            bw_average: size * iters as f64 / secs / factor,
            msg_rate_mpps: iters as f64 / secs / 1e6,
        }
    }

    /// ib_write_bw / ib_read_bw / ib_atomic_bw.
    fn rdma_bw(&mut self) -> anyhow::Result<()> {
        if self.oob.client {
            let (posted, completed) = self.requester_bw()?;
            let row = self.row(&posted, &completed, self.cfg.iters);
            self.bw_table(row);
            self.keys()?;
            for v in [
                row.bytes,
                row.iterations,
                row.bw_peak.to_bits(),
                row.bw_average.to_bits(),
                row.msg_rate_mpps.to_bits(),
            ] {
                self.xchg_poll(&v.to_be_bytes())?;
            }
        } else {
            // A perftest server has nothing to do on the data path: its QP answers. The
            // client's keys message says the run is over; then its results come.
            let before = self.ep.ctx.mr_bytes(&self.mr).to_vec();
            self.keys()?;
            let mut vals = [0u64; 5];
            for v in vals.iter_mut() {
                let b = self.xchg_poll(&[0u8; 8])?;
                *v = u64::from_be_bytes(b[..8].try_into().unwrap_or([0; 8]));
            }
            let row = BwRow {
                bytes: vals[0],
                iterations: vals[1],
                bw_peak: f64::from_bits(vals[2]),
                bw_average: f64::from_bits(vals[3]),
                msg_rate_mpps: f64::from_bits(vals[4]),
            };
            self.validate_target(&before, row.iterations)?;
            self.bw_table(row);
        }
        self.keys()?;
        self.finish()
    }

    fn xchg_poll(&mut self, mine: &[u8]) -> anyhow::Result<Vec<u8>> {
        let Self { oob, ep, .. } = self;
        let mut poll = || ep.poll(Duration::from_micros(200)).map_err(Into::into);
        oob.xchg(mine, &mut poll)
    }

    fn finish(&mut self) -> anyhow::Result<()> {
        let Self { oob, ep, .. } = self;
        let mut poll = || ep.poll(Duration::from_micros(200)).map_err(Into::into);
        oob.done(&mut poll)
    }

    /// What a responder can check of its own memory after a bandwidth run by a perftest
    /// client: READs leave it unchanged; FETCH_AND_ADD of 1 adds `iters` over the slots;
    /// CMP_AND_SWAP 0/0 leaves non-zero words alone. WRITEs bring random bytes: nothing.
    fn validate_target(&mut self, before: &[u8], iters: u64) -> anyhow::Result<()> {
        let now = self.ep.ctx.mr_bytes(&self.mr);
        let h = self.half as usize;
        match self.cfg.test.verb {
            Verb::Read => {
                if now != before {
                    bail!("RDMA READs changed the responder's memory");
                }
                self.out
                    .validated
                    .push("memory read by the peer is unchanged".into());
            }
            Verb::Atomic => {
                let word = |b: &[u8], at: usize| {
                    u64::from_le_bytes(b[h + at..h + at + 8].try_into().unwrap_or([0; 8]))
                };
                let mut added = 0u64;
                for k in 0..(self.cycle / step(8, self.cache_line)) as usize {
                    let at = k * step(8, self.cache_line) as usize;
                    added = added.wrapping_add(word(now, at).wrapping_sub(word(before, at)));
                }
                // The atomic type does not cross the wire: CMP_AND_SWAP 0/0 leaves the
                // (non-zero) words alone, FETCH_AND_ADD adds one per operation; with -D
                // the client reports the iterations it sampled, fewer than it ran.
                if added != 0 && added < iters {
                    bail!(
                        "the atomics added {added} over the target words: neither 0 (CMP_AND_SWAP) nor at least {iters} (FETCH_AND_ADD)"
                    );
                }
                self.out.validated.push(if added == 0 {
                    format!("target words unchanged by {iters} CMP_AND_SWAP 0/0")
                } else {
                    format!("target words grew by {added} over {iters} reported FETCH_AND_ADDs")
                });
            }
            _ => {}
        }
        Ok(())
    }

    /// The test's operation on the peer's buffer at `remote_addr`.
    fn op_at(&self, remote_addr: u64) -> SendOp {
        let rkey = self.rem.rkey;
        match self.cfg.test.verb {
            Verb::Write => SendOp::Write { remote_addr, rkey },
            Verb::Read => SendOp::Read { remote_addr, rkey },
            Verb::Atomic if self.cfg.compare_swap => SendOp::CompareSwap {
                remote_addr,
                rkey,
                compare: 0,
                swap: 0,
            },
            Verb::Atomic => SendOp::FetchAdd {
                remote_addr,
                rkey,
                add: 1,
            },
            Verb::Send => SendOp::Send,
        }
    }

    /// Posts one signaled `op` of `-s` bytes from offset `off` of the local buffer.
    fn post(&mut self, wr_id: u64, op: SendOp, off: u64) -> anyhow::Result<()> {
        let sge = Sge {
            addr: self.mr.addr + off,
            length: self.cfg.size,
            lkey: self.mr.lkey,
        };
        let wr = SendWr {
            wr_id,
            op,
            sge,
            signaled: true,
            solicited: false,
        };
        self.ep.ctx.post_send(self.qp, wr).map_err(Into::into)
    }

    /// Posts `iters` SEND / READ / WRITE / atomic operations, `tx_depth` in flight,
    /// cycling the addresses as perftest does; checks what comes back where it can.
    fn requester_bw(&mut self) -> anyhow::Result<(Vec<Instant>, Vec<Instant>)> {
        let iters = self.cfg.iters;
        let size = u64::from(self.cfg.size);
        let keep = iters <= 20_000;
        let mut posted = Vec::with_capacity(if keep { iters as usize } else { 1 });
        let mut completed = Vec::with_capacity(posted.capacity());
        let (mut next, mut done) = (0u64, 0u64);
        let depth = u64::from(self.cfg.tx_depth.max(1));
        // READ: every read of one remote slot must bring the same bytes. Atomics: per
        // slot, FETCH_AND_ADD returns 1 more each time, CMP_AND_SWAP 0/0 the same word.
        let slots = if size > self.cycle / 2 {
            1
        } else {
            self.cycle / step(size, self.cache_line)
        };
        let mut seen: Vec<Option<Vec<u8>>> = vec![None; slots as usize];
        let mut last_word: Vec<Option<u64>> = vec![None; slots as usize];
        let mut mismatches = 0u64;
        let mut wcs = Vec::with_capacity(64);
        let mut progress = Instant::now();
        while done < iters {
            self.stalled(&mut progress, done, iters)?;
            while next < iters && next - done < depth {
                let off = self.remote_offset(next, size);
                self.post(next, self.op_at(self.rem.vaddr + off), off)?;
                if keep {
                    posted.push(Instant::now());
                }
                next += 1;
            }
            self.poll()?;
            wcs.clear();
            self.ep.ctx.poll_cq_into(self.cq, 64, &mut wcs);
            for wc in &wcs {
                self.check_wc(wc)?;
                if keep {
                    completed.push(Instant::now());
                }
                done += 1;
                progress = Instant::now();
                let off = self.remote_offset(wc.wr_id, size) as usize;
                let slot = (off as u64 / step(size, self.cache_line)) as usize;
                let local = &self.ep.ctx.mr_bytes(&self.mr)[off..off + size as usize];
                match self.cfg.test.verb {
                    Verb::Read => match &seen[slot] {
                        Some(first) if first.as_slice() != local => mismatches += 1,
                        Some(_) => {}
                        None => seen[slot] = Some(local.to_vec()),
                    },
                    Verb::Atomic => {
                        let w = u64::from_le_bytes(local[..8].try_into().unwrap_or([0; 8]));
                        if let Some(prev) = last_word[slot] {
                            let want = if self.cfg.compare_swap {
                                if prev == 0 {
                                    0
                                } else {
                                    prev
                                }
                            } else {
                                prev.wrapping_add(1)
                            };
                            if w != want {
                                mismatches += 1;
                            }
                        }
                        last_word[slot] = Some(w);
                    }
                    _ => {}
                }
            }
        }
        match self.cfg.test.verb {
            Verb::Read if mismatches == 0 => self.out.validated.push(format!(
                "{iters} READs of each remote slot returned the same bytes"
            )),
            Verb::Atomic if mismatches == 0 => self.out.validated.push(format!(
                "{iters} atomics returned the sequence each remote word must show"
            )),
            Verb::Read | Verb::Atomic => bail!(
                "{mismatches} of {iters} responses did not match what the remote memory must hold"
            ),
            _ => {}
        }
        Ok((posted, completed))
    }

    /// ib_send_bw: the client sends `iters` messages; the server counts them.
    fn send_bw(&mut self) -> anyhow::Result<()> {
        let iters = self.cfg.iters;
        if self.oob.client {
            let (posted, completed) = self.requester_bw()?;
            let row = self.row(&posted, &completed, iters);
            self.bw_table(row);
        } else {
            let mut posted_recv = iters.min(512);
            let (mut got, mut bad_len) = (0u64, 0u64);
            let mut first = None;
            let mut last = Instant::now();
            let mut wcs = Vec::with_capacity(64);
            let mut idle = Instant::now();
            while got < iters {
                self.poll()?;
                wcs.clear();
                self.ep.ctx.poll_cq_into(self.cq, 64, &mut wcs);
                for wc in &wcs {
                    self.check_wc(wc)?;
                    got += 1;
                    first.get_or_insert_with(Instant::now);
                    last = Instant::now();
                    idle = last;
                    if wc.byte_len != self.cfg.size {
                        bad_len += 1;
                    }
                    if posted_recv < iters {
                        self.post_recv(posted_recv)?;
                        posted_recv += 1;
                    }
                }
                if idle.elapsed() > Duration::from_secs(30) {
                    bail!("no SEND arrived for 30 s after {got} of {iters}");
                }
                if uroce::datapath::interrupted() {
                    bail!("interrupted");
                }
            }
            if bad_len > 0 {
                bail!(
                    "{bad_len} receives had a length other than {}",
                    self.cfg.size
                );
            }
            self.out.validated.push(format!(
                "{iters} receives of exactly {} bytes",
                self.cfg.size
            ));
            let secs = first.map_or(1e-9, |f| last.duration_since(f).as_secs_f64().max(1e-9));
            let (_, factor) = self.bw_unit();
            let row = BwRow {
                bytes: u64::from(self.cfg.size),
                iterations: iters,
                bw_peak: 0.0,
                bw_average: f64::from(self.cfg.size) * iters as f64 / secs / factor,
                msg_rate_mpps: iters as f64 / secs / 1e6,
            };
            self.bw_table(row);
        }
        self.keys()?;
        self.finish()
    }

    /// Waits for one completion of the given kind (send side or receive side).
    fn wait_wc(
        &mut self,
        recv: bool,
        stash: &mut Vec<uroce::verbs::WorkCompletion>,
    ) -> anyhow::Result<uroce::verbs::WorkCompletion> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(i) = stash
                .iter()
                .position(|w| (w.opcode == uroce::verbs::WcOpcode::Recv) == recv)
            {
                let wc = stash.remove(i);
                self.check_wc(&wc)?;
                return Ok(wc);
            }
            self.poll()?;
            self.ep.ctx.poll_cq_into(self.cq, 16, stash);
            if Instant::now() > deadline || uroce::datapath::interrupted() {
                bail!(
                    "the peer stopped answering ({})",
                    if recv {
                        "no SEND arrived"
                    } else {
                        "no completion"
                    }
                );
            }
        }
    }

    fn lat_table(&mut self, stamps: &[Instant], rtt_factor: f64) {
        let mut d: Vec<f64> = stamps
            .windows(2)
            .map(|w| w[1].duration_since(w[0]).as_secs_f64() * 1e6 / rtt_factor)
            .collect();
        d.sort_by(|a, b| a.total_cmp(b));
        // perftest drops the two largest samples.
        d.truncate(d.len().saturating_sub(2));
        let row = if d.is_empty() {
            LatRow::default()
        } else {
            let n = d.len();
            let avg = d.iter().sum::<f64>() / n as f64;
            let var = d.iter().map(|x| (x - avg) * (x - avg)).sum::<f64>() / n as f64;
            let pct = |p: f64| d[(((n - 1) as f64 * p).ceil() as usize).min(n - 1)];
            LatRow {
                bytes: u64::from(self.cfg.size),
                iterations: self.cfg.iters,
                t_min: d[0],
                t_max: d[n - 1],
                t_typical: d[n / 2],
                t_avg: avg,
                t_stdev: var.sqrt(),
                p99: pct(0.99),
                p999: pct(0.999),
            }
        };
        self.out.text.push(" #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] ".into());
        self.out.text.push(format!(
            " {:<7} {:<10}  {:<7.2}        {:<7.2}      {:<7.2}  \t       {:<7.2}     \t{:<7.2}\t\t{:<7.2} \t\t{:<7.2}",
            row.bytes, row.iterations, row.t_min, row.t_max, row.t_typical, row.t_avg, row.t_stdev, row.p99, row.p999
        ));
        self.out.text.push("-".repeat(87));
        self.out.lat = Some(row);
    }

    /// ib_write_lat: a counter ping-pongs in the last byte of each WRITE, the server
    /// first; each side waits for the counter it expects in its own buffer.
    fn write_lat(&mut self) -> anyhow::Result<()> {
        let iters = self.cfg.iters;
        let size = self.cfg.size as usize;
        let server = !self.oob.client;
        let watch = self.half as usize + size - 1;
        let mut stamps = Vec::with_capacity(iters as usize);
        let mut stash = Vec::new();
        let (mut scnt, mut rcnt) = (0u64, 0u64);
        while scnt < iters {
            if !(scnt == 0 && server) {
                rcnt += 1;
                let want = rcnt as u8;
                let deadline = Instant::now() + Duration::from_secs(30);
                while self.ep.ctx.mr_bytes(&self.mr)[watch] != want {
                    self.poll()?;
                    if Instant::now() > deadline || uroce::datapath::interrupted() {
                        bail!("counter {want} never arrived (after {scnt} sent)");
                    }
                }
            }
            scnt += 1;
            self.ep.ctx.mr_bytes_mut(&self.mr)[size - 1] = scnt as u8;
            stamps.push(Instant::now());
            self.post(scnt, self.op_at(self.rem.vaddr), 0)?;
            self.wait_wc(false, &mut stash)?;
        }
        // The server also takes the client's last counter.
        if server {
            rcnt += 1;
            let want = rcnt as u8;
            let deadline = Instant::now() + Duration::from_secs(30);
            while self.ep.ctx.mr_bytes(&self.mr)[watch] != want {
                self.poll()?;
                if Instant::now() > deadline {
                    bail!("last counter {want} never arrived");
                }
            }
        }
        self.out.validated.push(format!(
            "all {iters} counters arrived in order in the last byte"
        ));
        self.lat_table(&stamps, 2.0);
        // No closing exchange in ib_write_lat: keep acknowledging until the peer leaves.
        let Self { oob, ep, .. } = self;
        let deadline = Instant::now() + Duration::from_secs(2);
        let mut poll = || {
            if Instant::now() > deadline {
                bail!("linger over");
            }
            ep.poll(Duration::from_micros(200)).map_err(Into::into)
        };
        let _ = oob.read(1, &mut poll);
        Ok(())
    }

    /// ib_read_lat / ib_atomic_lat: the client runs one operation at a time; the server
    /// waits for the closing exchange, answering meanwhile.
    fn read_atomic_lat(&mut self) -> anyhow::Result<()> {
        if !self.oob.client {
            let before = self.ep.ctx.mr_bytes(&self.mr).to_vec();
            self.keys()?;
            if self.cfg.test.verb == Verb::Read {
                self.validate_target(&before, 0)?;
            }
            return self.finish();
        }
        let iters = self.cfg.iters;
        let mut stamps = Vec::with_capacity(iters as usize);
        let mut stash = Vec::new();
        // The previous response and this one, reused (no allocation per operation).
        let (mut prev, mut got) = (Vec::new(), Vec::new());
        let mut bad = 0u64;
        for i in 0..iters {
            stamps.push(Instant::now());
            self.post(i, self.op_at(self.rem.vaddr), 0)?;
            self.wait_wc(false, &mut stash)?;
            got.clear();
            got.extend_from_slice(&self.ep.ctx.mr_bytes(&self.mr)[..self.cfg.size as usize]);
            if i > 0 {
                let ok = match self.cfg.test.verb {
                    Verb::Read => prev == got,
                    _ if self.cfg.compare_swap => true,
                    _ => {
                        let w = |b: &[u8]| u64::from_le_bytes(b[..8].try_into().unwrap_or([0; 8]));
                        w(&got) == w(&prev).wrapping_add(1)
                    }
                };
                if !ok {
                    bad += 1;
                }
            }
            std::mem::swap(&mut prev, &mut got);
        }
        if bad > 0 {
            bail!("{bad} of {iters} responses broke the expected sequence");
        }
        self.out.validated.push(format!(
            "{iters} responses showed what the remote word or bytes must hold"
        ));
        self.lat_table(&stamps, 1.0);
        self.keys()?;
        self.finish()
    }

    /// ib_send_lat: SEND ping-pong, the client first.
    fn send_lat(&mut self) -> anyhow::Result<()> {
        let iters = self.cfg.iters;
        let client = self.oob.client;
        let depth = iters.min(512);
        let mut stamps = Vec::with_capacity(iters as usize);
        let mut stash = Vec::new();
        let (mut scnt, mut rcnt) = (0u64, 0u64);
        while scnt < iters || rcnt < iters {
            if rcnt < iters && !(scnt == 0 && client) {
                let wc = self.wait_wc(true, &mut stash)?;
                if wc.byte_len != self.cfg.size {
                    bail!("a SEND of {} bytes, not {}", wc.byte_len, self.cfg.size);
                }
                rcnt += 1;
                if rcnt + depth <= iters {
                    self.post_recv(rcnt + depth)?;
                }
            }
            if scnt < iters {
                scnt += 1;
                stamps.push(Instant::now());
                self.post(scnt, SendOp::Send, 0)?;
                self.wait_wc(false, &mut stash)?;
            }
        }
        self.out.validated.push(format!(
            "{iters} SENDs received, each of {} bytes",
            self.cfg.size
        ));
        self.lat_table(&stamps, 2.0);
        self.keys()?;
        self.finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_message_matches_perftest_capture() {
        // From ../shared/interop: an ib_write_bw client's keys message.
        let wire = b"0000:0001:000015:f8eeaf:000006b3:000055b98d793000:00:00:00:00:00:00:00:00:00:00:ff:ff:0a:4d:00:0c:00000000:\0";
        assert_eq!(wire.len(), KEY_LEN);
        let k = Keys::from_wire(wire).unwrap();
        assert_eq!(k.qpn, 0x15);
        assert_eq!(k.psn, 0xf8eeaf);
        assert_eq!(k.rkey, 0x6b3);
        assert_eq!(k.vaddr, 0x55b9_8d79_3000);
        assert_eq!(k.ipv4(), Some(Ipv4Addr::new(10, 77, 0, 12)));
        assert_eq!(&k.to_wire()[..], &wire[..]);
    }

    #[test]
    fn bad_keys_messages_are_refused() {
        assert!(Keys::from_wire(b"0000:0001\0").is_err());
        let mut w = Keys::from_wire(b"0000:0001:000015:f8eeaf:000006b3:000055b98d793000:00:00:00:00:00:00:00:00:00:00:ff:ff:0a:4d:00:0c:00000000:\0")
            .unwrap()
            .to_wire();
        w[12] = b'z';
        assert!(format!("{:#}", Keys::from_wire(&w).unwrap_err()).contains("QPN"));
    }

    #[test]
    fn cycle_buffer_offsets_follow_perftest() {
        assert_eq!(step(8, 64), 64);
        assert_eq!(step(100, 64), 128);
        assert_eq!(step(4096, 64), 4096);
        assert_eq!(Mtu::fitting(1500), Some(Mtu::M1024));
        assert_eq!(Mtu::fitting(9000), Some(Mtu::M4096));
        assert_eq!(Mtu::fitting(2200), Some(Mtu::M2048));
        assert_eq!(Mtu::fitting(300), None);
    }
}
