//! UD and UC workloads over a [`Link`]: messages that may be lost but must never arrive
//! damaged or partial. Each message carries its index as immediate data; the receiver
//! checks every byte against the sender's pattern.

use std::collections::HashSet;
use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};

use super::{Link, LinkConfig, Rng};
use crate::mem::Access;
use crate::verbs::{
    Context, ContextConfig, InitAttr, Mtu, QpCaps, QpType, RecvWr, Remote, RtrAttr, RtsAttr,
    SendOp, SendWr, Sge, UdSendWr, WcStatus,
};

/// A datagram workload.
#[derive(Debug, Clone, PartialEq)]
pub struct DgramConfig {
    /// UD or UC.
    pub transport: QpType,
    /// Messages to send.
    pub messages: usize,
    /// Sizes, uniform in this range (UD: clamped to the MTU).
    pub size: (u32, u32),
    /// The link.
    pub link: LinkConfig,
    /// Seed.
    pub seed: u64,
    /// Path MTU.
    pub mtu: Mtu,
    /// Sends in flight at once (and receives kept posted).
    pub window: usize,
}

/// What a datagram run did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct DgramReport {
    /// `ud` or `uc`.
    pub transport: String,
    /// Messages sent.
    pub sent: u64,
    /// Messages delivered intact (each byte checked).
    pub delivered: u64,
    /// Messages that did not arrive (lost, or dropped whole by UC after a loss).
    pub dropped: u64,
    /// Extra copies delivered (UD has no duplicate detection; the link duplicated them).
    pub duplicates: u64,
    /// Frames the receiver rejected as corrupt (bad ICRC or malformed).
    pub corrupted_rejected: u64,
    /// Bytes checked at the receiver.
    pub bytes_verified: u64,
    /// Frames sent.
    pub packets_sent: u64,
    /// Simulated time.
    pub sim_time_us: u64,
    /// Everything that went wrong (a damaged or partial message delivered as good).
    pub errors: Vec<String>,
}

fn pattern(seed: u64, i: u64, buf: &mut [u8]) {
    let mut r = Rng::new(seed.wrapping_mul(131).wrapping_add(i));
    for c in buf.chunks_mut(8) {
        let v = r.next_u64().to_le_bytes();
        c.copy_from_slice(&v[..c.len()]);
    }
}

/// Runs the workload.
pub fn run(cfg: &DgramConfig) -> DgramReport {
    let ud = cfg.transport != QpType::Uc;
    let mut rep = DgramReport {
        transport: if ud { "ud" } else { "uc" }.into(),
        ..Default::default()
    };
    let mtu = cfg.mtu.bytes();
    let hi = if ud { cfg.size.1.min(mtu) } else { cfg.size.1 };
    let lo = cfg.size.0.min(hi);
    let grh = if ud { 40 } else { 0 };
    let slot = hi as usize + grh;
    let w = cfg.window.max(1);
    let mut rng = Rng::new(cfg.seed);
    let sizes: Vec<u32> = (0..cfg.messages)
        .map(|_| rng.range(u64::from(lo), u64::from(hi)) as u32)
        .collect();

    let mk = |n: u8| {
        let mut ctx = Context::new(
            ContextConfig {
                mac: [2, 0, 0, 0, 0, n],
                ip: IpAddr::V4(Ipv4Addr::new(10, 0, 0, n)),
                seed: cfg.seed ^ u64::from(n),
                udp_sport_base: 0xc000,
                tos: 0,
            },
            std::time::Instant::now(),
        );
        let cq = ctx
            .create_cq(crate::endpoint::MAX_CQE)
            .expect("MAX_CQE is a valid CQ depth");
        let pd = ctx.alloc_pd();
        let t = if ud { QpType::Ud } else { QpType::Uc };
        let caps = QpCaps {
            qp_type: t,
            send_cq: cq,
            recv_cq: cq,
            max_send_wr: w,
            max_recv_wr: w,
        };
        let qpn = ctx.create_qp(pd, caps).unwrap_or(0);
        let mr = ctx.reg_mr(pd, vec![0; w * slot.max(1)], Access::LOCAL_WRITE);
        (ctx, cq, qpn, mr)
    };
    let (mut a, acq, aq, amr) = mk(1);
    let (mut b, bcq, bq, bmr) = mk(2);
    let (Ok(amr), Ok(bmr)) = (amr, bmr) else {
        rep.errors.push("memory registration failed".into());
        return rep;
    };
    let qkey = 0x1111_1111;
    let remote = |n: u8| Remote {
        ip: IpAddr::V4(Ipv4Addr::new(10, 0, 0, n)),
        mac: [2, 0, 0, 0, 0, n],
    };
    for (ctx, q, peer, pq) in [(&mut a, aq, 2u8, bq), (&mut b, bq, 1, aq)] {
        let _ = ctx.modify_qp_init(
            q,
            InitAttr {
                qkey,
                ..InitAttr::default()
            },
        );
        let r = if ud {
            ctx.modify_qp_rtr_ud(q, cfg.mtu)
        } else {
            ctx.modify_qp_rtr(
                q,
                RtrAttr {
                    remote: remote(peer),
                    dest_qpn: pq,
                    rq_psn: 1000,
                    path_mtu: cfg.mtu,
                    max_dest_rd_atomic: 0,
                    min_rnr_timer: 0,
                },
            )
        };
        let r2 = ctx.modify_qp_rts(
            q,
            RtsAttr {
                sq_psn: 1000,
                ..RtsAttr::default()
            },
        );
        if let Err(e) = r.and(r2) {
            rep.errors.push(format!("QP setup failed: {e}"));
            return rep;
        }
    }
    let post_recv = |b: &mut Context, i: usize| {
        let sge = Sge {
            addr: bmr.addr + (i * slot) as u64,
            length: slot as u32,
            lkey: bmr.lkey,
        };
        b.post_recv(
            bq,
            RecvWr {
                wr_id: i as u64,
                sge,
            },
        )
    };
    for i in 0..w {
        let _ = post_recv(&mut b, i);
    }

    let t0 = Instant::now();
    let mut now = t0;
    let mut link = Link::new(cfg.link, cfg.seed);
    let mut buf = vec![0u8; 4096 + 256];
    let mut next = 0usize;
    let mut inflight = 0usize;
    let mut seen: HashSet<u32> = HashSet::new();
    let mut want = vec![0u8; slot];
    let mut idle = 0;
    loop {
        for wc in a.poll_cq(acq, usize::MAX) {
            inflight = inflight.saturating_sub(1);
            if wc.status != WcStatus::Success {
                rep.errors.push(format!(
                    "send {} completed with {}",
                    wc.wr_id,
                    wc.status.name()
                ));
            }
        }
        for wc in b.poll_cq(bcq, usize::MAX) {
            let s = wc.wr_id as usize;
            if wc.status != WcStatus::Success {
                rep.errors
                    .push(format!("receive completed with {}", wc.status.name()));
            } else if let Some(i) = wc.imm.filter(|&i| (i as usize) < cfg.messages) {
                let n = sizes[i as usize] as usize;
                pattern(cfg.seed, u64::from(i), &mut want[..n]);
                let got = &b.mr_bytes(&bmr)[s * slot + grh..s * slot + grh + n];
                if wc.byte_len as usize != n + grh || got != &want[..n] {
                    rep.errors.push(format!(
                        "message {i} delivered damaged or partial ({} bytes)",
                        wc.byte_len
                    ));
                } else if !seen.insert(i) {
                    if ud {
                        rep.duplicates += 1;
                    } else {
                        rep.errors.push(format!("message {i} delivered twice"));
                    }
                } else {
                    rep.delivered += 1;
                    rep.bytes_verified += n as u64;
                }
            } else {
                rep.errors
                    .push("a receive completed without a valid message index".into());
            }
            let _ = post_recv(&mut b, s);
        }
        while next < cfg.messages && inflight < w {
            let n = sizes[next];
            let off = (next % w) * slot;
            pattern(
                cfg.seed,
                next as u64,
                &mut a.mr_bytes_mut(&amr)[off..off + n as usize],
            );
            let sge = Sge {
                addr: amr.addr + off as u64,
                length: n,
                lkey: amr.lkey,
            };
            let r = if ud {
                a.post_send_ud(
                    aq,
                    UdSendWr {
                        wr_id: next as u64,
                        dest: remote(2),
                        remote_qpn: bq,
                        remote_qkey: qkey,
                        sge,
                        imm: Some(next as u32),
                        signaled: true,
                        solicited: false,
                    },
                )
            } else {
                a.post_send(
                    aq,
                    SendWr {
                        wr_id: next as u64,
                        op: SendOp::SendWithImm(next as u32),
                        sge,
                        signaled: true,
                        solicited: false,
                    },
                )
            };
            if let Err(e) = r {
                rep.errors.push(format!("post failed: {e}"));
                break;
            }
            inflight += 1;
            next += 1;
            rep.sent += 1;
        }
        // The sender is paced at line rate, as a NIC is: a frame goes out only when the
        // previous one has left.
        for (from, ctx) in [(0usize, &mut a), (1, &mut b)] {
            while link.free_at(from).is_none_or(|t| t <= now) {
                let Some(n) = ctx.poll_frame(now, &mut buf) else {
                    break;
                };
                link.send(from, now, buf[..n].to_vec());
            }
        }
        let more = next < cfg.messages || inflight > 0;
        let wake = link.free_at(0).filter(|&t| more && t > now);
        let Some(t) = [link.next_delivery(), wake].into_iter().flatten().min() else {
            if next >= cfg.messages && inflight == 0 {
                break;
            }
            idle += 1;
            if idle > 3 {
                rep.errors
                    .push(format!("stalled with {inflight} sends outstanding"));
                break;
            }
            continue;
        };
        idle = 0;
        now = now.max(t);
        for (to, f) in link.deliver(now) {
            let ctx = if to == 0 { &mut a } else { &mut b };
            let _ = ctx.handle_frame(now, &f);
        }
        if now - t0 > Duration::from_secs(3600) {
            rep.errors.push("time limit".into());
            break;
        }
    }
    rep.dropped = rep.sent - rep.delivered;
    rep.corrupted_rejected = b.counters().rx_bad_icrc + b.counters().rx_malformed;
    rep.packets_sent = a.counters().tx_frames;
    rep.sim_time_us = (now - t0).as_micros() as u64;
    rep
}
