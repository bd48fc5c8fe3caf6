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
//!
//! Here: the tests and their options, the run's state and its start (versions, page size,
//! cache line and MTU, then the resources, sized as perftest sizes them). The exchange's
//! TCP side, keys exchanges and the QP's connection are in `exchange`, the keys message in
//! `keys`, one operation the perftest way in `ops`, the data paths in `bw` and `lat`, and
//! the tables and `--json` outcome in `report`.

use std::net::{IpAddr, Ipv4Addr, TcpStream};

use anyhow::{bail, Context as _};

use crate::backend::open_backend_lossy;
use crate::link::local_link;
use uroce::datapath::event_loop::Endpoint;
use uroce::datapath::Backend;
use uroce::mem::{Access, Mr};
use uroce::verbs::{CqId, InitAttr, Mtu, QpCaps, QpType};

mod bw;
mod exchange;
mod keys;
mod lat;
mod ops;
mod report;

pub use exchange::VERSION;
use exchange::{mtu_enum, mtu_from_enum, sleep_poll, Oob, MIN_VERSION};
pub use keys::{Keys, KEY_LEN};
use ops::step;
pub use report::{BwRow, LatRow, Outcome};

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

/// One run: the configuration, the exchange, the endpoint with its QP, CQ and region,
/// both sides' keys and what the run reports.
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
    let (mut backend, datapath) = open_backend_lossy(&cfg.backend, mtu, local, &iface, cfg.impair)?;
    let mac = link.mac_for(&*backend)?;
    let seed = u64::from(u32::from(local)) ^ u64::from(std::process::id());
    let mut ctx = cfg.traffic.context(&iface, mac, IpAddr::V4(local), seed)?;
    crate::backend::adopt_qpns(&mut ctx, &mut *backend, 1)?;
    let cq = ctx
        .create_cq(uroce::verbs::MAX_CQE)
        .expect("MAX_CQE is a valid CQ depth");
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
