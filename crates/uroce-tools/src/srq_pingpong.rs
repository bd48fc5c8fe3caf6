//! `uroce pingpong --srq [N]`: wire- and exchange-compatible with rdma-core's
//! `ibv_srq_pingpong`: N RC QPs (default 16) whose receives all come from one shared
//! receive queue.
//!
//! Exchange (TCP, default port 18515): the client sends 256 address messages (rdma-core's
//! `MAX_QP`), each `LLLL:QQQQQQ:PPPPPP:<32 hex GID>` and a NUL as ibv_rc_pingpong's; the
//! first N are its QPs, the rest all zeros. The server reads them, moves its QPs to RTS
//! towards the client's first N, and answers with its own 256; the client ends with
//! `done` and a NUL. Both ends must use the same N.
//!
//! Flow, as `srq_pingpong.c` has it: every side posts `rx_depth` receives to its SRQ
//! before the exchange and tops it up to `rx_depth` when no more than N are left; the
//! client starts with one SEND on every QP; a QP sends again once its previous SEND
//! completed and a message arrived on it (the server: once a message arrived), until
//! `iters` SENDs completed in all; each side stops after `iters` SENDs and `iters`
//! receives, counted over all QPs.

use std::io::Write;
use std::net::{IpAddr, Ipv6Addr};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context as _};

use crate::pingpong::{linger, open_session, read_exact, summary, Dest, PingpongConfig, Session};
use uroce::datapath::event_loop::Endpoint;
use uroce::mem::Access;
use uroce::verbs::{
    Context, InitAttr, QpCaps, QpInitEx, QpType, RecvWr, Remote, RtrAttr, RtsAttr, SendOp, SendWr,
    Sge, SrqAttr, WcOpcode, WcStatus,
};

/// The number of address messages each side sends (rdma-core's `MAX_QP`).
pub const MAX_QP: usize = 256;

/// What a run did.
#[derive(Debug, Clone)]
pub struct SrqPingpongResult {
    /// Our QPs' addresses.
    pub local: Vec<Dest>,
    /// The peer's, for each of our QPs.
    pub remote: Vec<Dest>,
    /// Bytes moved both ways.
    pub bytes: u64,
    /// Seconds.
    pub secs: f64,
    /// Iterations.
    pub iters: u32,
    /// The datapath used.
    pub datapath: String,
}

impl SrqPingpongResult {
    /// The two summary lines ibv_srq_pingpong prints.
    pub fn summary(&self) -> [String; 2] {
        summary(self.bytes, self.secs, self.iters)
    }
}

/// The 256 address messages of one side: its QPs' addresses, then zeros.
pub fn exchange_block(dests: &[Dest]) -> Vec<u8> {
    let zero = Dest {
        lid: 0,
        qpn: 0,
        psn: 0,
        gid: Ipv6Addr::UNSPECIFIED,
    };
    (0..MAX_QP)
        .flat_map(|i| dests.get(i).unwrap_or(&zero).to_wire())
        .collect()
}

/// Reads the peer's 256 messages and keeps the first `n`.
fn read_block(tcp: &mut std::net::TcpStream, n: usize) -> anyhow::Result<Vec<Dest>> {
    let mut v = Vec::with_capacity(n);
    for i in 0..MAX_QP {
        let msg = read_exact(tcp, 52)?;
        if i < n {
            v.push(Dest::from_wire(&msg)?);
        }
    }
    if let Some(d) = v.iter().find(|d| d.qpn == 0) {
        bail!(
            "the peer has fewer QPs than {n} (a zero address: {d:?}); use the same -q on both ends"
        );
    }
    Ok(v)
}

/// The receive and send work request ids, as srq_pingpong.c numbers them (a bit each in
/// the per-QP `pending` mask).
const RECV_WRID: u64 = 1;
const SEND_WRID: u64 = 2;

/// Runs one side with `num_qp` QPs on one SRQ: the server when `server` is `None`.
pub fn run(
    cfg: &PingpongConfig,
    num_qp: u32,
    server: Option<IpAddr>,
) -> anyhow::Result<SrqPingpongResult> {
    let n = num_qp as usize;
    if n == 0 || n > MAX_QP {
        bail!("--srq {num_qp}: 1 to {MAX_QP} QPs");
    }
    if num_qp > cfg.rx_depth {
        bail!(
            "rx_depth {} is too small for {num_qp} QPs -- must have at least one receive per QP.",
            cfg.rx_depth
        );
    }
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
    let rx_depth = cfg.rx_depth;
    let srq = ctx.create_srq(
        pd,
        SrqAttr {
            max_wr: rx_depth,
            max_sge: 1,
            srq_limit: 0,
        },
    )?;
    let mut qpns = Vec::with_capacity(n);
    for _ in 0..n {
        let caps = QpCaps {
            qp_type: QpType::Rc,
            send_cq: cq,
            recv_cq: cq,
            max_send_wr: 1,
            max_recv_wr: 0,
        };
        let ex = QpInitEx {
            srq: Some(srq),
            ..QpInitEx::default()
        };
        let q = ctx.create_qp_ex(pd, caps, ex)?;
        ctx.modify_qp_init(q, InitAttr::default())?;
        qpns.push(q);
    }
    let size = cfg.size;
    let mr = ctx.reg_mr(pd, vec![0; size as usize * 2], Access::LOCAL_WRITE)?;
    let (recv_at, send_at) = (mr.addr, mr.addr + u64::from(size));
    // Every receive lands in the same buffer, as in srq_pingpong.c.
    let post_recvs = |ctx: &mut Context, k: u32| -> u32 {
        let sge = Sge {
            addr: recv_at,
            length: size,
            lkey: mr.lkey,
        };
        (0..k)
            .take_while(|_| {
                ctx.post_srq_recv(
                    srq,
                    RecvWr {
                        wr_id: RECV_WRID,
                        sge,
                    },
                )
                .is_ok()
            })
            .count() as u32
    };
    let mut routs = post_recvs(&mut ctx, rx_depth);
    if routs < rx_depth {
        bail!("Couldn't post receive ({routs})");
    }
    let seed = u32::from(local).wrapping_mul(2_654_435_761) ^ std::process::id();
    let me: Vec<Dest> = qpns
        .iter()
        .enumerate()
        .map(|(i, &qpn)| Dest {
            lid: 0,
            qpn,
            psn: seed.wrapping_add(i as u32 * 0x9e37) & 0xff_ffff,
            gid: local.to_ipv6_mapped(),
        })
        .collect();
    let remote = Remote {
        ip: IpAddr::V4(peer_ip),
        mac: next_mac,
    };
    let connect = |ctx: &mut Context, rem: &[Dest]| -> anyhow::Result<()> {
        for (i, &qpn) in qpns.iter().enumerate() {
            let rtr = RtrAttr {
                remote,
                dest_qpn: rem[i].qpn,
                rq_psn: rem[i].psn,
                path_mtu: cfg.mtu,
                max_dest_rd_atomic: 1,
                min_rnr_timer: 12,
            };
            ctx.modify_qp_rtr(qpn, rtr)
                .with_context(|| format!("Failed to modify QP[{i}] to RTR"))?;
            let rts = RtsAttr {
                sq_psn: me[i].psn,
                timeout: 14,
                retry_cnt: 7,
                rnr_retry: 7,
                max_rd_atomic: 1,
            };
            ctx.modify_qp_rts(qpn, rts)
                .with_context(|| format!("Failed to modify QP[{i}] to RTS"))?;
        }
        Ok(())
    };
    let rem = if server.is_some() {
        tcp.write_all(&exchange_block(&me))
            .context("Couldn't send local address")?;
        let rem = read_block(&mut tcp, n)?;
        tcp.write_all(b"done\0").context("client write")?;
        connect(&mut ctx, &rem)?;
        rem
    } else {
        let rem = read_block(&mut tcp, n)?;
        connect(&mut ctx, &rem)?;
        tcp.write_all(&exchange_block(&me))
            .context("Couldn't send local address")?;
        let done = read_exact(&mut tcp, 5)?;
        if &done[..4] != b"done" {
            bail!("Couldn't read done from the client");
        }
        rem
    };
    let mut ep = Endpoint::new(ctx, backend);
    let post_send = |ctx: &mut Context, i: usize| -> anyhow::Result<()> {
        let sge = Sge {
            addr: send_at,
            length: size,
            lkey: mr.lkey,
        };
        let wr = SendWr {
            wr_id: SEND_WRID,
            op: SendOp::Send,
            sge,
            signaled: true,
            solicited: false,
        };
        ctx.post_send(qpns[i], wr)
            .map_err(|e| anyhow!("Couldn't post send: {e}"))
    };
    let mut pending = vec![RECV_WRID; n];
    if server.is_some() {
        for (i, p) in pending.iter_mut().enumerate() {
            post_send(&mut ep.ctx, i)?;
            *p = SEND_WRID | RECV_WRID;
        }
    }
    let (mut scnt, mut rcnt) = (0u32, 0u32);
    let iters = cfg.iters;
    let start = Instant::now();
    let deadline = start + Duration::from_secs(10) + Duration::from_millis(u64::from(iters) * 20);
    let mut err = None;
    let finished = ep.run_until(deadline, |ctx| {
        for wc in ctx.poll_cq(cq, 64) {
            if wc.status != WcStatus::Success {
                err = Some(anyhow!(
                    "Failed status {} for wr_id {}",
                    wc.status.name(),
                    wc.wr_id
                ));
                return true;
            }
            let Some(i) = qpns.iter().position(|&q| q == wc.qp_num) else {
                err = Some(anyhow!("Couldn't find QPN {:06x}", wc.qp_num));
                return true;
            };
            if wc.opcode == WcOpcode::Send {
                scnt += 1;
            } else {
                routs -= 1;
                if routs <= num_qp {
                    routs += post_recvs(ctx, rx_depth - routs);
                    if routs < rx_depth {
                        err = Some(anyhow!("Couldn't post receive ({routs})"));
                        return true;
                    }
                }
                rcnt += 1;
            }
            pending[i] &= !wc.wr_id;
            if scnt < iters && pending[i] == 0 {
                if let Err(e) = post_send(ctx, i) {
                    err = Some(e);
                    return true;
                }
                pending[i] = RECV_WRID | SEND_WRID;
            }
        }
        rcnt >= iters && scnt >= iters
    })?;
    linger(&mut ep);
    if let Some(e) = err {
        return Err(e);
    }
    if !finished {
        bail!("timed out after {scnt} sends and {rcnt} receives of {iters}");
    }
    Ok(SrqPingpongResult {
        local: me,
        remote: rem,
        bytes: u64::from(size) * u64::from(iters) * 2,
        secs: start.elapsed().as_secs_f64(),
        iters,
        datapath,
    })
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use super::*;

    /// srq_pingpong.c writes `MAX_QP` (256) messages of 52 bytes whatever its QP count,
    /// the unused ones from a zeroed `my_dest`.
    #[test]
    fn exchange_block_is_256_messages_zero_padded() {
        let d = Dest {
            lid: 0,
            qpn: 0x12,
            psn: 0x1443b7,
            gid: Ipv4Addr::new(10, 77, 0, 12).to_ipv6_mapped(),
        };
        let b = exchange_block(&[d, d]);
        assert_eq!(b.len(), 256 * 52);
        assert_eq!(&b[..52], &d.to_wire()[..]);
        assert_eq!(&b[52..104], &d.to_wire()[..]);
        assert_eq!(
            &b[104..156],
            b"0000:000000:000000:00000000000000000000000000000000\0"
        );
        assert_eq!(Dest::from_wire(&b[104..156]).unwrap().qpn, 0);
    }
}
