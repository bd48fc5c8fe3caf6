//! `uroce pingpong`: wire- and exchange-compatible with rdma-core's `ibv_rc_pingpong` and
//! `ibv_ud_pingpong`, so either end can be uroce or another RoCE stack.
//!
//! Exchange (TCP, default port 18515): the client sends `LLLL:QQQQQQ:PPPPPP:<32 hex GID>`
//! and a NUL (LID, QPN, PSN in hex; the GID's 16 bytes in wire order); the server answers
//! in the same format once its QP is ready; the client ends with `done` and a NUL. Then
//! SENDs go back and forth `iters` times, each side sending only after its previous send
//! completed and a message arrived.
//!
//! With `-e` (`events`), as ibv_*_pingpong -e: the CQ is armed with `req_notify_cq`, and
//! it is polled only after a completion event came (`poll_cq_event`), which is acknowledged
//! and the CQ armed again before polling, so no completion goes unseen.

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv6Addr, SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context as _};

use crate::backend::open_backend_lossy;
use crate::link::{local_link, peer_mac};
use uroce::datapath::event_loop::Endpoint;
use uroce::datapath::Backend;
use uroce::mem::Access;
use uroce::verbs::{
    Context, ContextConfig, InitAttr, Mtu, QpCaps, QpType, RecvWr, Remote, RtrAttr, RtsAttr,
    SendOp, SendWr, Sge, UdSendWr, WcOpcode, WcStatus,
};

/// Options, named after ibv_*_pingpong's.
#[derive(Debug, Clone)]
pub struct PingpongConfig {
    /// UD instead of RC.
    pub ud: bool,
    /// TCP port (`-p`).
    pub port: u16,
    /// Message size (`-s`).
    pub size: u32,
    /// Iterations (`-n`).
    pub iters: u32,
    /// Path MTU (`-m`).
    pub mtu: Mtu,
    /// Receive queue depth (`-r`).
    pub rx_depth: u32,
    /// Check received buffers (`-c`).
    pub validate: bool,
    /// Sleep on CQ events instead of polling (`-e`).
    pub events: bool,
    /// `auto`, `xdp` or `udp`.
    pub backend: String,
    /// Interface for AF_XDP.
    pub iface: Option<String>,
    /// Loss and reordering of received frames on purpose (recovery tests).
    pub impair: uroce::datapath::impair::Impairment,
}

/// One side's address as exchanged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dest {
    /// LID (0 on RoCE).
    pub lid: u16,
    /// QPN.
    pub qpn: u32,
    /// First PSN.
    pub psn: u32,
    /// GID.
    pub gid: Ipv6Addr,
}

impl Dest {
    /// The 52-byte wire form (with its NUL).
    pub fn to_wire(&self) -> Vec<u8> {
        let gid: String = self
            .gid
            .octets()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        let mut v =
            format!("{:04x}:{:06x}:{:06x}:{gid}", self.lid, self.qpn, self.psn).into_bytes();
        v.push(0);
        v
    }

    /// Parses the wire form.
    pub fn from_wire(b: &[u8]) -> anyhow::Result<Self> {
        let text = std::str::from_utf8(b).map_err(|_| anyhow!("address message is not text"))?;
        let text = text.trim_end_matches('\0');
        let parts: Vec<&str> = text.split(':').collect();
        let [lid, qpn, psn, gid] = parts[..] else {
            bail!("address message `{text}` is not LID:QPN:PSN:GID");
        };
        let hex = |s: &str| {
            u32::from_str_radix(s, 16).map_err(|_| anyhow!("`{s}` is not hex in `{text}`"))
        };
        if gid.len() != 32 {
            bail!("GID `{gid}` is not 32 hex digits");
        }
        let mut g = [0u8; 16];
        for (i, b) in g.iter_mut().enumerate() {
            *b = u8::from_str_radix(&gid[2 * i..2 * i + 2], 16)
                .map_err(|_| anyhow!("GID `{gid}` is not hex"))?;
        }
        Ok(Self {
            lid: hex(lid)? as u16,
            qpn: hex(qpn)? & 0xff_ffff,
            psn: hex(psn)? & 0xff_ffff,
            gid: g.into(),
        })
    }
}

/// What a run did.
#[derive(Debug, Clone)]
pub struct PingpongResult {
    /// Our address.
    pub local: Dest,
    /// The peer's.
    pub remote: Dest,
    /// Bytes moved both ways.
    pub bytes: u64,
    /// Seconds.
    pub secs: f64,
    /// Iterations.
    pub iters: u32,
    /// The datapath used.
    pub datapath: String,
    /// Completion events taken (with `-e`; 0 without).
    pub cq_events: u64,
}

impl PingpongResult {
    /// The two summary lines ibv_*_pingpong prints.
    pub fn summary(&self) -> [String; 2] {
        summary(self.bytes, self.secs, self.iters)
    }
}

/// The two summary lines ibv_*_pingpong (and ibv_srq_pingpong) print.
pub(crate) fn summary(bytes: u64, secs: f64, iters: u32) -> [String; 2] {
    let usec = secs * 1e6;
    [
        format!(
            "{} bytes in {:.2} seconds = {:.2} Mbit/sec",
            bytes,
            secs,
            bytes as f64 * 8.0 / usec.max(1e-9)
        ),
        format!(
            "{} iters in {:.2} seconds = {:.2} usec/iter",
            iters,
            secs,
            usec / f64::from(iters.max(1))
        ),
    ]
}

/// Stays on the link after the last completion until it has been quiet for
/// `LINGER_QUIET` (at most `LINGER_MAX`), so that a peer whose last ACK from us was lost
/// gets its retransmission answered: ibv_rc_pingpong waits for that ACK, and a peer
/// retransmits only after its ACK timeout (67 ms for ibv_rc_pingpong's timeout 14).
pub(crate) fn linger<B: uroce::datapath::Backend>(
    ep: &mut uroce::datapath::event_loop::Endpoint<B>,
) {
    const LINGER_QUIET: Duration = Duration::from_millis(500);
    const LINGER_MAX: Duration = Duration::from_secs(3);
    let start = Instant::now();
    let mut seen = ep.ctx.counters().rx_frames;
    let mut quiet_since = start;
    while start.elapsed() < LINGER_MAX && !uroce::datapath::interrupted() {
        let _ = ep.run_until(Instant::now() + Duration::from_millis(20), |_| false);
        let now = ep.ctx.counters().rx_frames;
        if now != seen {
            seen = now;
            quiet_since = Instant::now();
        } else if quiet_since.elapsed() >= LINGER_QUIET {
            return;
        }
    }
}

pub(crate) fn read_exact(s: &mut TcpStream, n: usize) -> anyhow::Result<Vec<u8>> {
    let mut b = vec![0u8; n];
    s.read_exact(&mut b)
        .context("Couldn't read remote address")?;
    Ok(b)
}

const GRH: u32 = 40;

/// What both pingpongs start from: the TCP connection of the exchange, the datapath, and
/// a context on the local address with one CQ and one PD.
pub(crate) struct Session {
    pub tcp: TcpStream,
    pub backend: Box<dyn Backend + Send>,
    pub datapath: String,
    pub local: std::net::Ipv4Addr,
    pub peer_ip: std::net::Ipv4Addr,
    pub next_mac: [u8; 6],
    pub ctx: Context,
    pub cq: uroce::verbs::CqId,
    pub pd: uroce::verbs::PdId,
}

/// Connects (or accepts, when `server` is `None`) the exchange's TCP connection, opens
/// the datapath on the interface of the local address, and makes the context.
pub(crate) fn open_session(
    cfg: &PingpongConfig,
    server: Option<IpAddr>,
) -> anyhow::Result<Session> {
    uroce::datapath::catch_interrupts();
    let tcp = match server {
        Some(addr) => TcpStream::connect((addr, cfg.port))
            .with_context(|| format!("Couldn't connect to {addr}:{}", cfg.port))?,
        None => {
            let l = TcpListener::bind(SocketAddr::from(([0, 0, 0, 0], cfg.port)))
                .with_context(|| format!("Couldn't listen to port {}", cfg.port))?;
            l.accept()?.0
        }
    };
    let IpAddr::V4(local) = tcp.local_addr()?.ip() else {
        bail!("IPv4 only for now");
    };
    let IpAddr::V4(peer_ip) = tcp.peer_addr()?.ip() else {
        bail!("IPv4 only for now");
    };
    let link = local_link(cfg.iface.as_deref(), local)?;
    let iface = link.iface.clone();
    let (mut backend, datapath): (Box<dyn Backend + Send>, String) =
        open_backend_lossy(&cfg.backend, cfg.mtu, local, &iface, cfg.impair)?;
    let mac = link.mac_for(&*backend)?;
    let next_mac = peer_mac(&mut backend, &iface, mac, local, peer_ip)?;
    let mut ctx = Context::new(
        ContextConfig {
            mac,
            ip: IpAddr::V4(local),
            seed: u64::from(u32::from(local)) ^ 0x7070,
            udp_sport_base: 0xc000,
            tos: 0,
        },
        std::time::Instant::now(),
    );
    crate::backend::adopt_qpns(&mut ctx, &mut *backend, 1)?;
    let cq = ctx
        .create_cq(uroce::verbs::MAX_CQE)
        .expect("MAX_CQE is a valid CQ depth");
    let pd = ctx.alloc_pd();
    Ok(Session {
        tcp,
        backend,
        datapath,
        local,
        peer_ip,
        next_mac,
        ctx,
        cq,
        pd,
    })
}

/// Runs one side: the server when `server` is `None`.
pub fn run(cfg: &PingpongConfig, server: Option<IpAddr>) -> anyhow::Result<PingpongResult> {
    let Session {
        mut tcp,
        backend,
        datapath,
        local,
        peer_ip,
        next_mac,
        mut ctx,
        cq,
        pd,
    } = open_session(cfg, server)?;
    let qp_type = if cfg.ud { QpType::Ud } else { QpType::Rc };
    let depth = cfg.rx_depth.max(2) as usize;
    let caps = QpCaps {
        qp_type,
        send_cq: cq,
        recv_cq: cq,
        max_send_wr: 4,
        max_recv_wr: depth,
    };
    let qpn = ctx.create_qp(pd, caps)?;
    let slot = if cfg.ud { cfg.size + GRH } else { cfg.size };
    let mr = ctx.reg_mr(pd, vec![0; slot as usize * 2], Access::LOCAL_WRITE)?;
    ctx.modify_qp_init(
        qpn,
        InitAttr {
            qkey: 0x1111_1111,
            ..InitAttr::default()
        },
    )?;
    // Receives are posted before the exchange, as rdma-core does: the peer may send the
    // moment it has our address (UD has no RNR retry to save a datagram that finds none).
    let (recv_at, send_at) = (mr.addr, mr.addr + u64::from(slot));
    let post_recv = |ctx: &mut Context| {
        let sge = Sge {
            addr: recv_at,
            length: slot,
            lkey: mr.lkey,
        };
        ctx.post_recv(qpn, RecvWr { wr_id: 2, sge })
    };
    for _ in 0..depth {
        post_recv(&mut ctx)?;
    }
    let psn = (u32::from(local).wrapping_mul(2_654_435_761) ^ std::process::id()) & 0xff_ffff;
    let me = Dest {
        lid: 0,
        qpn,
        psn,
        gid: local.to_ipv6_mapped(),
    };
    let connect = |ctx: &mut Context, rem: &Dest| -> anyhow::Result<()> {
        if cfg.ud {
            ctx.modify_qp_rtr_ud(qpn, cfg.mtu)?;
            return ctx
                .modify_qp_rts(
                    qpn,
                    RtsAttr {
                        sq_psn: psn,
                        ..RtsAttr::default()
                    },
                )
                .map_err(Into::into);
        }
        let remote = Remote {
            ip: IpAddr::V4(peer_ip),
            mac: next_mac,
        };
        let rtr = RtrAttr {
            remote,
            dest_qpn: rem.qpn,
            rq_psn: rem.psn,
            path_mtu: cfg.mtu,
            max_dest_rd_atomic: 1,
            min_rnr_timer: 12,
        };
        ctx.modify_qp_rtr(qpn, rtr)?;
        ctx.modify_qp_rts(
            qpn,
            RtsAttr {
                sq_psn: psn,
                timeout: 14,
                retry_cnt: 7,
                rnr_retry: 7,
                max_rd_atomic: 1,
            },
        )
        .map_err(Into::into)
    };
    let rem = if server.is_some() {
        tcp.write_all(&me.to_wire())
            .context("Couldn't send local address")?;
        let rem = Dest::from_wire(&read_exact(&mut tcp, 52)?)?;
        connect(&mut ctx, &rem)?;
        tcp.write_all(b"done\0")?;
        rem
    } else {
        let rem = Dest::from_wire(&read_exact(&mut tcp, 52)?)?;
        connect(&mut ctx, &rem)?;
        tcp.write_all(&me.to_wire())
            .context("Couldn't send local address")?;
        let done = read_exact(&mut tcp, 5)?;
        if &done[..4] != b"done" {
            bail!("Couldn't read done from the client");
        }
        rem
    };
    let mut ep = Endpoint::new(ctx, backend);
    let dest = Remote {
        ip: IpAddr::V4(peer_ip),
        mac: next_mac,
    };
    let post_send = |ctx: &mut Context| -> anyhow::Result<()> {
        let sge = Sge {
            addr: send_at,
            length: cfg.size,
            lkey: mr.lkey,
        };
        if cfg.ud {
            let wr = UdSendWr {
                wr_id: 1,
                dest,
                remote_qpn: rem.qpn,
                remote_qkey: 0x1111_1111,
                sge,
                imm: None,
                signaled: true,
                solicited: false,
            };
            ctx.post_send_ud(qpn, wr).map_err(Into::into)
        } else {
            ctx.post_send(
                qpn,
                SendWr {
                    wr_id: 1,
                    op: SendOp::Send,
                    sge,
                    signaled: true,
                    solicited: false,
                },
            )
            .map_err(Into::into)
        }
    };
    let (mut scnt, mut rcnt) = (0u32, 0u32);
    let mut pending_send = false;
    let mut pending_recv = true;
    let start = Instant::now();
    if server.is_some() {
        post_send(&mut ep.ctx)?;
        pending_send = true;
    }
    let deadline =
        start + Duration::from_secs(10) + Duration::from_millis(u64::from(cfg.iters) * 20);
    let mut err = None;
    let mut cq_events = 0u64;
    if cfg.events {
        ep.ctx.req_notify_cq(cq, false)?;
    }
    let finished = ep.run_until(deadline, |ctx| {
        if cfg.events {
            // ibv_get_cq_event, ibv_ack_cq_events, ibv_req_notify_cq, then poll: a
            // completion that arrives after the poll fires the new arm.
            let mut fired = false;
            while let Some(c) = ctx.poll_cq_event() {
                ctx.ack_cq_events(c, 1);
                fired |= c == cq;
            }
            if !fired {
                return false;
            }
            cq_events += 1;
            if let Err(e) = ctx.req_notify_cq(cq, false) {
                err = Some(anyhow!("Couldn't request CQ notification: {e}"));
                return true;
            }
        }
        // In event mode the CQ is drained: what is in it now fires no event.
        let batch = if cfg.events { usize::MAX } else { 16 };
        for wc in ctx.poll_cq(cq, batch) {
            if wc.status != WcStatus::Success {
                err = Some(anyhow!(
                    "Failed status {} for wr_id {}",
                    wc.status.name(),
                    wc.wr_id
                ));
                return true;
            }
            if wc.opcode == WcOpcode::Send {
                scnt += 1;
                pending_send = false;
            } else {
                rcnt += 1;
                pending_recv = false;
                if cfg.validate
                    && ctx.mr_bytes(&mr)[..slot as usize]
                        .iter()
                        .skip(if cfg.ud { GRH as usize } else { 0 })
                        .step_by(4096)
                        .any(|&b| b != 0)
                {
                    err = Some(anyhow!(
                        "Invalid data in received buffer (iteration {rcnt})"
                    ));
                    return true;
                }
                let _ = post_recv(ctx);
            }
            if scnt < cfg.iters && !pending_send && !pending_recv {
                if let Err(x) = post_send(ctx) {
                    err = Some(x);
                    return true;
                }
                pending_send = true;
                pending_recv = true;
            }
        }
        rcnt >= cfg.iters && scnt >= cfg.iters
    })?;
    linger(&mut ep);
    if let Some(x) = err {
        return Err(x);
    }
    if !finished {
        bail!(
            "timed out after {scnt} sends and {rcnt} receives of {}",
            cfg.iters
        );
    }
    let secs = start.elapsed().as_secs_f64();
    Ok(PingpongResult {
        local: me,
        remote: rem,
        bytes: u64::from(cfg.size) * u64::from(cfg.iters) * 2,
        secs,
        iters: cfg.iters,
        datapath,
        cq_events,
    })
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use super::*;

    #[test]
    fn wire_format_matches_rdma_core() {
        // As seen on the wire from ibv_rc_pingpong (shared/interop/README.md).
        let w = b"0000:000012:1443b7:00000000000000000000ffff0a4d000c\0";
        let d = Dest::from_wire(w).unwrap();
        assert_eq!((d.lid, d.qpn, d.psn), (0, 0x12, 0x1443b7));
        assert_eq!(d.gid, Ipv4Addr::new(10, 77, 0, 12).to_ipv6_mapped());
        assert_eq!(d.to_wire(), w.to_vec());
        assert!(Dest::from_wire(b"0000:12:34\0").is_err());
        assert!(Dest::from_wire(b"zzzz:000012:1443b7:00000000000000000000ffff0a4d000c\0").is_err());
    }
}
