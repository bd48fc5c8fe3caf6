//! One connection of `uroce fuzz-peer` to a running peer tool: the out-of-band exchange
//! the tool speaks (a `uroce perf` server: one JSON line each way, N fuzz QPs and one
//! known-good QP in one exchange; a perftest server: its 6.06 exchange, once for the fuzz
//! QP on one port and once for the known-good QP on the next), the fuzz QPs' targets
//! ([`Target`], [`Track`]), and the datapath: frames out raw, the peer's answers to the
//! fuzz QPs taken aside ([`Response`]), everything else to the context that runs the
//! known-good QP.
//!
//! The fuzz QPs exist only on the peer: our side of each is a QPN no QP of our context
//! has, so the peer's answers come back to us and the context never sees them.

use std::io::{Read, Write};
use std::net::{IpAddr, TcpStream};
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};

use super::mutate::{Target, Track};
use super::verdict::Response;
use crate::backend::{self, BackendChoice, Boxed};
use crate::link::{local_link, peer_mac};
use crate::perf::exchange::{agreed_mtu, read_json, send_json, Hello};
use crate::perf::PerfOp;
use crate::perftest::{Keys, VERSION};
use uroce::datapath::impair::Impairment;
use uroce::datapath::Received;
use uroce::mem::{Access, Mr};
use uroce::verbs::{
    Context, CqId, InitAttr, Mtu, QpCaps, QpType, Remote, RtrAttr, RtsAttr, SendOp, SendWr, Sge,
    WcStatus,
};
use uroce::wire::{self, Opcode};

/// Which tool the peer runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PeerTool {
    /// `uroce perf write` (any op) as a server: fuzz QPs and the known-good QP in one
    /// exchange.
    UrocePerf,
    /// A perftest bandwidth server (`ib_write_bw`, `ib_read_bw`, `ib_send_bw`,
    /// `ib_atomic_bw`): one QP per server, so two servers, on `port` and `port + 1`.
    Perftest(PerftestVerb),
    /// `ibv_rc_pingpong` as a server (or `uroce pingpong`): its exchange (`LID:QPN:PSN:GID`
    /// as text both ways, `done`), one QP with no remote access rights whose receives are
    /// of its `-s` ([`PeerConfig::size`]). That QP is the fuzz QP and the liveness probe's
    /// (a SEND at its expected PSN must be ACKed, [`super::Driver::liveness`]); its own
    /// SENDs to us are ACKed here ([`Session::collect`]), or it would give up and exit.
    RcPingpong,
    /// `ibv_ud_pingpong` as a server (or `uroce pingpong --ud`): the same exchange, one
    /// UD QP (Q_Key 0x11111111) whose receives are of its `-s` (and a GRH); it answers
    /// each datagram it takes with one of its own, which is what tells a datagram taken
    /// from one dropped.
    UdPingpong,
}

/// The perftest server's operation (what the known-good QP does to it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PerftestVerb {
    /// ib_write_bw.
    Write,
    /// ib_read_bw.
    Read,
    /// ib_send_bw.
    Send,
    /// ib_atomic_bw.
    Atomic,
}

impl PeerTool {
    /// `uroce-perf`, `ib_write_bw`, `ib_read_bw`, `ib_send_bw` or `ib_atomic_bw`.
    pub fn parse(s: &str) -> anyhow::Result<Self> {
        Ok(match s {
            "uroce-perf" | "uroce" => Self::UrocePerf,
            "ib_write_bw" => Self::Perftest(PerftestVerb::Write),
            "ib_read_bw" => Self::Perftest(PerftestVerb::Read),
            "ib_send_bw" => Self::Perftest(PerftestVerb::Send),
            "ib_atomic_bw" => Self::Perftest(PerftestVerb::Atomic),
            "ibv_rc_pingpong" | "rc_pingpong" => Self::RcPingpong,
            "ibv_ud_pingpong" | "ud_pingpong" => Self::UdPingpong,
            _ => bail!("peer tool {s:?} is not uroce-perf, ib_write_bw, ib_read_bw, ib_send_bw, ib_atomic_bw, ibv_rc_pingpong or ibv_ud_pingpong"),
        })
    }
}

/// How to reach the peer.
#[derive(Debug, Clone)]
pub struct PeerConfig {
    /// Its address.
    pub peer: IpAddr,
    /// The tool it runs.
    pub tool: PeerTool,
    /// TCP port of the exchange (perftest: the fuzz QP's server; the known-good one on
    /// the next port).
    pub port: u16,
    /// Interface (AF_XDP).
    pub iface: Option<String>,
    /// Datapath.
    pub backend: BackendChoice,
    /// Path MTU we ask for (a uroce perf server must have been started with the same).
    pub mtu: Mtu,
    /// Fuzz QPs to ask a uroce perf server for.
    pub fuzz_qps: u32,
    /// The first PSN of every QP (the peer's responders expect it).
    pub psn: u32,
    /// How long to keep trying to connect (a peer that is starting).
    pub connect_for: Duration,
    /// The length of the peer's receives (`ibv_rc_pingpong -s`, default 4096).
    pub size: u32,
    /// QPs of the perftest server (its `-q`). Above 1, its last QP is the known-good
    /// QP's and the rest are fuzzed; with 1, the known-good QP's server is a second one,
    /// on the next port.
    pub peer_qps: u32,
}

/// QPNs our side of a fuzz QP uses: above anything our context hands out.
const FAKE_QPN_BASE: u32 = 0x00ff_0000;

/// The known-good QP.
struct Good {
    qpn: u32,
    cq: CqId,
    mr: Mr,
    op: GoodOp,
    rkey: u32,
    addr: u64,
    next: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum GoodOp {
    Write,
    Read,
    Send,
    FetchAdd,
}

/// A connected peer.
pub struct Session {
    ctx: Context,
    backend: Boxed,
    /// What datapath this is.
    pub datapath: String,
    /// The known-good QP; `None` for a peer with one QP (`ibv_rc_pingpong`), which is
    /// probed instead.
    good: Option<Good>,
    /// Messages of the peer's requester acknowledged (the MSN of our ACKs to it).
    peer_msn: u32,
    /// Each fuzz QP: where frames go and what is known of its responder.
    pub targets: Vec<(Target, Track)>,
    /// Whether the backend sends whole Ethernet frames (IP / UDP header edges).
    pub whole_frames: bool,
    /// Whether frames go to each fuzz QP in turn, each probed between bursts (a perftest
    /// server's QPs), rather than to one QP until it is gone.
    pub spread: bool,
    /// Answers that came to a fuzz QP outside a frame's window (late, or unasked).
    pub stray: u64,
    _tcp: Vec<TcpStream>,
}

fn connect_tcp(peer: IpAddr, port: u16, for_: Duration) -> anyhow::Result<TcpStream> {
    let until = Instant::now() + for_;
    loop {
        match TcpStream::connect((peer, port)) {
            Ok(t) => {
                let _ = t.set_nodelay(true);
                return Ok(t);
            }
            Err(_) if Instant::now() < until => std::thread::sleep(Duration::from_millis(100)),
            Err(e) => return Err(e).with_context(|| format!("connecting to {peer}:{port}")),
        }
    }
}

/// Writes `mine` and reads as many bytes (perftest's lock step, client side).
fn xchg(tcp: &mut TcpStream, mine: &[u8]) -> anyhow::Result<Vec<u8>> {
    tcp.write_all(mine).context("writing to the peer")?;
    let mut b = vec![0u8; mine.len()];
    tcp.set_read_timeout(Some(Duration::from_secs(20)))?;
    tcp.read_exact(&mut b)
        .context("reading the peer's part of the exchange")?;
    Ok(b)
}

fn mtu_enum(m: Mtu) -> u8 {
    match m {
        Mtu::M256 => 1,
        Mtu::M512 => 2,
        Mtu::M1024 => 3,
        Mtu::M2048 => 4,
        Mtu::M4096 => 5,
    }
}

/// perftest's exchange as a client up to the QPs' connection: versions, page size, cache
/// line, MTU, one keys message per QP (`mine`, as many as the server has: its `-q`),
/// twice over (perftest connects its QPs after the first round and prints the second),
/// then `syncs` more (the first QP's keys again). Returns the peer's keys, a message per
/// QP, and the MTU agreed.
fn perftest_handshake(
    tcp: &mut TcpStream,
    mine: &[Keys],
    mtu: Mtu,
    syncs: usize,
) -> anyhow::Result<(Vec<Keys>, Mtu)> {
    let mut v = [0u8; 16];
    v[..VERSION.len()].copy_from_slice(VERSION.as_bytes());
    xchg(tcp, &v)?;
    xchg(tcp, &4096u32.to_be_bytes())?;
    xchg(tcp, &64u32.to_be_bytes())?;
    let m = xchg(tcp, &[b'0' + mtu_enum(mtu), 0])?;
    let theirs = match m[0].wrapping_sub(b'0') {
        1 => Mtu::M256,
        2 => Mtu::M512,
        3 => Mtu::M1024,
        4 => Mtu::M2048,
        _ => Mtu::M4096,
    };
    let agreed = if theirs.bytes() < mtu.bytes() {
        theirs
    } else {
        mtu
    };
    let mut rem = Vec::new();
    for k in mine {
        rem.push(Keys::from_wire(&xchg(tcp, &k.to_wire())?)?);
    }
    let first = mine.first().context("no keys")?;
    // ib_send_bw syncs once between the two rounds (after posting its receives), the
    // others only after: with one QP the order makes no difference, with several it
    // names each QP's keys to the right QP in the second round.
    for _ in 1..syncs {
        Keys::from_wire(&xchg(tcp, &first.to_wire())?)?;
    }
    for k in mine {
        Keys::from_wire(&xchg(tcp, &k.to_wire())?)?;
    }
    if syncs > 0 {
        Keys::from_wire(&xchg(tcp, &first.to_wire())?)?;
    }
    Ok((rem, agreed))
}

impl Session {
    /// Connects to the peer as `cfg` says; `seed` makes our keys.
    pub fn connect(cfg: &PeerConfig, seed: u64) -> anyhow::Result<Self> {
        let mut tcp = connect_tcp(cfg.peer, cfg.port, cfg.connect_for)?;
        let local = tcp.local_addr()?.ip().to_canonical();
        let link = local_link(cfg.iface.as_deref(), local)?;
        let (mut backend, datapath) = backend::open(
            cfg.backend,
            Some(&link.iface),
            "",
            local,
            cfg.mtu,
            Impairment::default(),
        )?;
        let mac = link.mac_for(&*backend)?;
        let mut ctx = crate::traffic::Traffic::default().context(&link.iface, mac, local, seed)?;
        let cq = ctx
            .create_cq(uroce::verbs::MAX_CQE)
            .expect("MAX_CQE is a valid CQ depth");
        let pd = ctx.alloc_pd();
        let qpn = ctx.create_qp(
            pd,
            QpCaps {
                qp_type: QpType::Rc,
                send_cq: cq,
                recv_cq: cq,
                max_send_wr: 64,
                max_recv_wr: 64,
            },
        )?;
        ctx.modify_qp_init(qpn, InitAttr::default())?;
        let all = Access::LOCAL_WRITE
            | Access::REMOTE_WRITE
            | Access::REMOTE_READ
            | Access::REMOTE_ATOMIC;
        let mr = ctx.reg_mr(pd, vec![0u8; 8192], all)?;
        let dst_mac = peer_mac(&mut *backend, &link.iface, mac, local, cfg.peer)?;
        let remote = Remote {
            ip: cfg.peer,
            mac: dst_mac,
        };
        let whole_frames = backend.needs_link_addresses();
        let max_payload = link.mtu.saturating_sub(64).min(4096);
        let mut targets = Vec::new();
        let mut tcps = Vec::new();
        let (write_ok, read_ok, atomic_ok) = match cfg.tool {
            PeerTool::UrocePerf => (true, true, true),
            PeerTool::Perftest(PerftestVerb::Write) => (true, false, false),
            PeerTool::Perftest(PerftestVerb::Read) => (false, true, false),
            PeerTool::Perftest(PerftestVerb::Atomic) => (false, false, true),
            PeerTool::Perftest(_) | PeerTool::RcPingpong | PeerTool::UdPingpong => {
                (false, false, false)
            }
        };
        let recv_size = match cfg.tool {
            PeerTool::RcPingpong | PeerTool::UdPingpong => cfg.size.max(1),
            _ => 0,
        };
        let target = |dest_qp: u32, my_qpn: u32, rkey: u32, va: u64, len: u64, exact, mtu: Mtu| {
            (
                Target {
                    src: local,
                    dst: cfg.peer,
                    sport: 0xc000 | (my_qpn as u16 & 0x3fff),
                    src_mac: mac,
                    dst_mac,
                    dest_qp,
                    my_qpn,
                    rkey,
                    va,
                    region_len: len,
                    region_exact: exact,
                    mtu: mtu.bytes(),
                    max_payload,
                    write_ok,
                    read_ok,
                    atomic_ok,
                    recv_size,
                    ud: cfg.tool == PeerTool::UdPingpong,
                    // rdma-core's ibv_ud_pingpong (and uroce pingpong --ud) use this one.
                    qkey: 0x1111_1111,
                },
                Track::new(cfg.psn, mtu.bytes()),
            )
        };
        let good = match cfg.tool {
            PeerTool::UrocePerf => {
                let n = cfg.fuzz_qps.clamp(1, 63);
                let mut qpns: Vec<u32> = (0..n).map(|i| FAKE_QPN_BASE + i).collect();
                qpns.push(qpn);
                let size = 4096u32;
                let mine = Hello {
                    op: PerfOp::Write,
                    size,
                    qpn: qpns[0],
                    qpns: qpns.clone(),
                    psn: cfg.psn,
                    rkey: mr.rkey,
                    addr: mr.addr,
                    threads: 1,
                    rkeys: Vec::new(),
                    addrs: Vec::new(),
                    mtu: cfg.mtu.bytes(),
                };
                send_json(&tcp, &mine)?;
                let theirs: Hello = read_json(&tcp, "hello from the uroce perf server")?;
                // The server takes the smaller of both path MTUs, and so do the rules
                // here: a frame judged at 1024 bytes against a server at 4096 (a WRITE
                // FIRST of 1024 bytes is short there) was a wrong verdict of the fuzzer's.
                let mtu = agreed_mtu(cfg.mtu, theirs.mtu);
                if theirs.qpns.len() != qpns.len() {
                    bail!(
                        "the peer made {} QPs, {} were asked for",
                        theirs.qpns.len(),
                        qpns.len()
                    );
                }
                let region = u64::from(theirs.size.max(8)) * 32;
                for (&theirs_qpn, &mine) in theirs.qpns.iter().zip(&qpns).take(n as usize) {
                    targets.push(target(
                        theirs_qpn,
                        mine,
                        theirs.rkey,
                        theirs.addr,
                        region,
                        true,
                        mtu,
                    ));
                }
                ctx.modify_qp_rtr(
                    qpn,
                    RtrAttr {
                        remote,
                        dest_qpn: theirs.qpns[n as usize],
                        rq_psn: theirs.psn,
                        path_mtu: mtu,
                        max_dest_rd_atomic: 16,
                        min_rnr_timer: 1,
                    },
                )?;
                ctx.modify_qp_rts(
                    qpn,
                    RtsAttr {
                        sq_psn: cfg.psn,
                        timeout: 12,
                        ..RtsAttr::default()
                    },
                )?;
                tcps.push(tcp);
                Some(Good {
                    qpn,
                    cq,
                    mr,
                    op: GoodOp::Write,
                    rkey: theirs.rkey,
                    addr: theirs.addr,
                    next: 0,
                })
            }
            PeerTool::RcPingpong | PeerTool::UdPingpong => {
                // The GID: the IPv6 address, or the IPv4 one mapped.
                let gid = match local {
                    IpAddr::V4(l4) => l4.to_ipv6_mapped(),
                    IpAddr::V6(l6) => l6,
                };
                // rdma-core's pp_client_exch_dest: ours, theirs, then "done".
                let mine = crate::pingpong::Dest {
                    lid: 0,
                    qpn: FAKE_QPN_BASE,
                    psn: cfg.psn,
                    gid,
                };
                let wire = mine.to_wire();
                let theirs = crate::pingpong::Dest::from_wire(&xchg(&mut tcp, &wire)?)?;
                tcp.write_all(b"done\0")
                    .context("writing done to the peer")?;
                targets.push(target(theirs.qpn, FAKE_QPN_BASE, 0, 0, 0, true, cfg.mtu));
                tcps.push(tcp);
                None
            }
            PeerTool::Perftest(verb) => {
                let IpAddr::V4(l4) = local else {
                    bail!("perftest peers are IPv4 only");
                };
                let keys_before = if verb == PerftestVerb::Send { 4 } else { 3 };
                let mut keys = Keys {
                    lid: 0,
                    out_reads: 16,
                    qpn: FAKE_QPN_BASE,
                    psn: cfg.psn,
                    rkey: mr.rkey,
                    vaddr: mr.addr,
                    gid: l4.to_ipv6_mapped().octets(),
                    srqn: 0,
                };
                // One keys message per QP of the server (`-q`), each naming one of our
                // fake QPNs; with more than one, the last is the known-good QP's (ours),
                // and no second server is needed.
                let n = cfg.peer_qps.clamp(1, 63);
                let fuzz_n = if n > 1 { n - 1 } else { 1 };
                let mut mine: Vec<Keys> = (0..fuzz_n)
                    .map(|i| Keys {
                        qpn: FAKE_QPN_BASE + i,
                        ..keys
                    })
                    .collect();
                if n > 1 {
                    mine.push(Keys { qpn, ..keys });
                }
                let (theirs, mtu) = perftest_handshake(&mut tcp, &mine, cfg.mtu, keys_before - 2)?;
                // perftest's buffer is at least its cycle buffer (4096) from the address
                // it gives each QP; how far beyond is not said.
                for (k, m) in theirs.iter().zip(&mine).take(fuzz_n as usize) {
                    targets.push(target(k.qpn, m.qpn, k.rkey, k.vaddr, 4096, false, mtu));
                }
                tcps.push(tcp);
                let (gd, mtu2) = if n > 1 {
                    (theirs[n as usize - 1], mtu)
                } else {
                    let mut tcp2 = connect_tcp(cfg.peer, cfg.port.wrapping_add(1), cfg.connect_for)
                        .context("the known-good QP's perftest server (on the next port)")?;
                    keys.qpn = qpn;
                    let (gd, mtu2) = perftest_handshake(&mut tcp2, &[keys], mtu, keys_before - 2)?;
                    tcps.push(tcp2);
                    (gd[0], mtu2)
                };
                ctx.modify_qp_rtr(
                    qpn,
                    RtrAttr {
                        remote,
                        dest_qpn: gd.qpn,
                        rq_psn: gd.psn,
                        path_mtu: mtu2,
                        max_dest_rd_atomic: 16,
                        min_rnr_timer: 12,
                    },
                )?;
                ctx.modify_qp_rts(
                    qpn,
                    RtsAttr {
                        sq_psn: cfg.psn,
                        timeout: 14,
                        retry_cnt: 7,
                        rnr_retry: 7,
                        max_rd_atomic: gd.out_reads.clamp(1, 16) as u8,
                    },
                )?;
                Some(Good {
                    qpn,
                    cq,
                    mr,
                    op: match verb {
                        PerftestVerb::Write => GoodOp::Write,
                        PerftestVerb::Read => GoodOp::Read,
                        PerftestVerb::Send => GoodOp::Send,
                        PerftestVerb::Atomic => GoodOp::FetchAdd,
                    },
                    rkey: gd.rkey,
                    addr: gd.vaddr,
                    next: 0,
                })
            }
        };
        Ok(Self {
            ctx,
            backend,
            datapath,
            good,
            peer_msn: 0,
            targets,
            whole_frames,
            spread: matches!(cfg.tool, PeerTool::Perftest(_)),
            stray: 0,
            _tcp: tcps,
        })
    }

    /// Sends one frame: the RoCE part through the backend's datagram path (any backend),
    /// or a whole Ethernet frame (AF_XDP only).
    pub fn send(&mut self, t: &Target, bytes: &[u8], whole: bool) -> anyhow::Result<()> {
        if whole {
            self.backend.send(bytes)?;
            return Ok(());
        }
        let datagram =
            wire::DatagramRepr::roce(t.src, t.dst, t.sport, 0).context("mixed IP versions")?;
        let mut copy = |buf: &mut [u8]| {
            let n = bytes.len().min(buf.len());
            buf[..n].copy_from_slice(&bytes[..n]);
            Some(uroce::datapath::Transmit {
                datagram,
                dst_mac: t.dst_mac,
                len: n,
                in_place: None,
            })
        };
        loop {
            match self.backend.send_with(&mut copy) {
                Ok(_) => break,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    self.backend.flush()?;
                }
                Err(e) => return Err(e.into()),
            }
        }
        self.backend.flush()?;
        Ok(())
    }

    /// One round of the datapath: the context's frames out, up to `wait` for frames in;
    /// answers to a fuzz QP go to `sink` with that QP's number, the rest to the context.
    fn pump(&mut self, wait: Duration, sink: &mut Vec<(u32, Response)>) -> anyhow::Result<()> {
        let now = Instant::now();
        let Self { ctx, backend, .. } = self;
        while let Ok(true) = backend.send_with(&mut |buf| ctx.poll_transmit(now, buf)) {}
        let _ = backend.flush();
        let wait = ctx
            .poll_timeout()
            .map_or(wait, |t| t.saturating_duration_since(now).min(wait));
        let mut requests = Vec::new();
        backend.receive(wait, 64, &mut |r| match fuzz_answer(&r) {
            Some((q, a)) if is_request(a.opcode) => requests.push((q, a)),
            Some(a) => sink.push(a),
            None => {
                let _ = ctx.handle_received(Instant::now(), r);
            }
        })?;
        ctx.handle_timeout(Instant::now());
        for (q, a) in requests {
            self.ack_peer_request(q, a)?;
        }
        Ok(())
    }

    /// Acknowledges a request the peer's requester sent to fuzz QP `qpn` (the pingpong
    /// peer's own SENDs): an ACK of each packet's PSN (IBTA Vol. 1 §9.7.5.1.1: an ACK
    /// covers its PSN and all before it), the MSN counting the messages ended.
    fn ack_peer_request(&mut self, qpn: u32, req: Response) -> anyhow::Result<()> {
        let Some((t, _)) = self.targets.iter().find(|(t, _)| t.my_qpn == qpn) else {
            return Ok(());
        };
        let t = *t;
        let ends = Opcode::from_u8(req.opcode).is_some_and(|o| !(o.is_first() || o.is_middle()));
        if ends {
            self.peer_msn = (self.peer_msn + 1) & 0xff_ffff;
        }
        let ack = super::mutate::ack_for(&t, req.psn, self.peer_msn);
        self.send(&t, &ack, false)
    }

    /// Takes what arrived since the last look; answers to fuzz QPs (late ones) are
    /// returned and counted as stray.
    pub fn drain(&mut self) -> anyhow::Result<Vec<(u32, Response)>> {
        let mut sink = Vec::new();
        self.pump(Duration::ZERO, &mut sink)?;
        self.stray += sink.len() as u64;
        Ok(sink)
    }

    /// What came back to fuzz QP `qpn` within `wait`: as soon as something came, a
    /// short while more for the rest of it (a READ's responses).
    pub fn collect(&mut self, qpn: u32, wait: Duration) -> anyhow::Result<Vec<Response>> {
        let mut until = Instant::now() + wait;
        let mut got = Vec::new();
        let mut sink = Vec::new();
        loop {
            let now = Instant::now();
            if now >= until {
                break;
            }
            self.pump((until - now).min(Duration::from_millis(1)), &mut sink)?;
            for (q, r) in sink.drain(..) {
                if q == qpn {
                    // The rest of it (a READ's responses) follows closely: wait while
                    // it keeps coming.
                    until = Instant::now() + (wait / 4).max(Duration::from_millis(1));
                    got.push(r);
                } else {
                    self.stray += 1;
                }
            }
        }
        Ok(got)
    }

    /// Whether the peer gave a known-good QP (else the fuzz QP is probed).
    pub fn has_good(&self) -> bool {
        self.good.is_some()
    }

    /// The liveness oracle: one operation on the known-good QP must complete
    /// successfully within `deadline`. Err says what happened instead.
    pub fn liveness(&mut self, deadline: Duration) -> anyhow::Result<Result<(), String>> {
        let Some(g) = &mut self.good else {
            return Ok(Ok(()));
        };
        let i = g.next;
        g.next += 1;
        let len = if g.op == GoodOp::FetchAdd { 8 } else { 64 };
        let op = match g.op {
            GoodOp::Write => SendOp::Write {
                remote_addr: g.addr + (i % 16) * 64,
                rkey: g.rkey,
            },
            GoodOp::Read => SendOp::Read {
                remote_addr: g.addr + (i % 16) * 64,
                rkey: g.rkey,
            },
            GoodOp::Send => SendOp::Send,
            GoodOp::FetchAdd => SendOp::FetchAdd {
                remote_addr: g.addr,
                rkey: g.rkey,
                add: 1,
            },
        };
        let wr = SendWr {
            wr_id: i,
            op,
            sge: Sge {
                addr: g.mr.addr + (i % 64) * 64,
                length: len,
                lkey: g.mr.lkey,
            },
            signaled: true,
            solicited: false,
        };
        let (qpn, cq) = (g.qpn, g.cq);
        if let Err(e) = self.ctx.post_send(qpn, wr) {
            return Ok(Err(format!(
                "the known-good QP refused a work request: {e}"
            )));
        }
        let until = Instant::now() + deadline;
        let mut sink = Vec::new();
        while Instant::now() < until {
            self.pump(Duration::from_millis(1), &mut sink)?;
            self.stray += sink.len() as u64;
            sink.clear();
            for wc in self.ctx.poll_cq(cq, 16) {
                if wc.wr_id != i {
                    continue;
                }
                return Ok(if wc.status == WcStatus::Success {
                    Ok(())
                } else {
                    Err(format!(
                        "the known-good QP's {} completed with {}",
                        op_name(op),
                        wc.status.name()
                    ))
                });
            }
        }
        Ok(Err(format!(
            "the known-good QP's {} did not complete within {deadline:?}",
            op_name(op)
        )))
    }
}

/// How an operation of the known-good QP is called in a finding.
fn op_name(op: SendOp) -> &'static str {
    match op {
        SendOp::Write { .. } => "RDMA WRITE",
        SendOp::Read { .. } => "RDMA READ",
        SendOp::Send => "SEND",
        _ => "FETCH_ADD",
    }
}

/// Whether an RC opcode is a request (of the peer's requester), not an answer.
fn is_request(opcode: u8) -> bool {
    matches!(opcode, 0x00..=0x0c | 0x13..=0x17)
}

/// The fuzz QP a received packet answers, and what it says; `None` for anything else.
fn fuzz_answer(r: &Received<'_>) -> Option<(u32, Response)> {
    let (qp, resp) = match r {
        Received::Frame(f) => {
            let p = wire::parse(f).ok()?;
            (p.bth.dest_qp(), Response::of(&p))
        }
        Received::Datagram { datagram, roce } => {
            // The IPv4 identification is the backend's guess: take the one the ICRC fits
            // (a peer such as rdma_rxe numbers its packets).
            let mut d = **datagram;
            thread_local! {
                static BASES: std::cell::RefCell<wire::icrc::IdentBases> =
                    std::cell::RefCell::default();
            }
            let (icrc, _) = BASES.with_borrow_mut(|b| d.fit_icrc_of(roce, b))?;
            let h = d.header_bytes(roce.len()).ok()?;
            let p = wire::parse_datagram_computed(&d, &h, roce, Some(icrc)).ok()?;
            (p.bth.dest_qp(), Response::of(&p))
        }
    };
    (FAKE_QPN_BASE..FAKE_QPN_BASE + 64)
        .contains(&qp)
        .then_some((qp, resp))
}
