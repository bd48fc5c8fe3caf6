//! An RC workload between two endpoints over a [`Link`], with every byte and every atomic
//! result checked end to end. This is what `uroce sim` runs, and what the property tests
//! and the transport benchmark drive.

use std::collections::{BTreeMap, VecDeque};
use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};

use super::{Link, LinkConfig, LinkStats, Rng};
use crate::mem::{Access, Mr};
use crate::verbs::{
    Context, ContextConfig, CqId, InitAttr, Mtu, QpCaps, QpState, RecvWr, Remote, RtrAttr, RtsAttr,
    SendOp, SendWr, Sge, WcOpcode, WcStatus,
};

/// Relative weights of the operations in a workload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mix {
    /// SEND (half of them with immediate data).
    pub send: u32,
    /// RDMA WRITE (a quarter with immediate data).
    pub write: u32,
    /// RDMA READ.
    pub read: u32,
    /// Atomics (half compare-and-swap, half fetch-and-add).
    pub atomic: u32,
}

impl Default for Mix {
    fn default() -> Self {
        Self {
            send: 4,
            write: 3,
            read: 2,
            atomic: 1,
        }
    }
}

/// A workload.
#[derive(Debug, Clone, PartialEq)]
pub struct SimConfig {
    /// Operations to run.
    pub ops: usize,
    /// Operation mix.
    pub mix: Mix,
    /// Message sizes, uniform in this inclusive range (atomics are 8 bytes).
    pub size: (u32, u32),
    /// The link.
    pub link: LinkConfig,
    /// Seed of everything random.
    pub seed: u64,
    /// Path MTU.
    pub mtu: Mtu,
    /// Operations in flight at once.
    pub window: usize,
    /// Receives the server keeps posted (fewer than `window` exercises RNR NAKs).
    pub recv_depth: usize,
    /// RTS attributes of both QPs (retry counts, timeout, PSN start is set per QP).
    pub rts: RtsAttr,
    /// First PSN of the client's send queue (set near 2^24 to cross the wrap).
    pub client_psn: u32,
    /// Give up after this much simulated time.
    pub time_limit: Duration,
    /// Fill and compare payloads (off only to measure the transport alone; completion
    /// status, order and atomic results are still checked).
    pub verify: bool,
    /// DCQCN on both endpoints, with these parameters.
    pub dcqcn: Option<crate::congestion::dcqcn::Params>,
    /// Hand each frame to its endpoint as a UDP backend does ([`as_datagram`]), not
    /// whole: the path on which the context finds the IPv4 identification and places
    /// READ responses before their check.
    pub datagrams: bool,
}

impl Default for SimConfig {
    fn default() -> Self {
        Self {
            ops: 1000,
            mix: Mix::default(),
            size: (1, 65536),
            link: LinkConfig::default(),
            seed: 1,
            mtu: Mtu::M1024,
            window: 32,
            recv_depth: 32,
            rts: RtsAttr {
                timeout: 10, // 4.2 ms
                retry_cnt: 7,
                rnr_retry: 7,
                ..RtsAttr::default()
            },
            client_psn: 0x12_3456,
            time_limit: Duration::from_secs(600),
            verify: true,
            dcqcn: None,
            datagrams: false,
        }
    }
}

/// What a run did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct Report {
    /// Operations that completed successfully and verified.
    pub ops_completed: u64,
    /// Operations that completed in error or did not verify.
    pub ops_failed: u64,
    /// Bytes compared end to end (payloads and atomic results).
    pub bytes_verified: u64,
    /// Frames both endpoints sent.
    pub packets_sent: u64,
    /// Request packets sent again.
    pub retransmits: u64,
    /// NAKs sent by the responders, by kind.
    pub naks: BTreeMap<String, u64>,
    /// Simulated time the run took.
    pub sim_time_us: u64,
    /// Everything that went wrong; empty for a good run.
    pub errors: Vec<String>,
    /// Frames lost on the link on purpose.
    pub link_dropped: u64,
    /// Frames duplicated on the link.
    pub link_duplicated: u64,
    /// Frames reordered on the link.
    pub link_reordered: u64,
    /// Frames with a flipped bit.
    pub link_corrupted: u64,
    /// Frames the endpoints rejected (bad ICRC or malformed).
    pub corrupted_rejected: u64,
    /// With [`SimConfig::datagrams`]: frames a kernel would not have handed to a UDP
    /// socket (a damaged IPv4 header, another protocol or port), dropped before the
    /// endpoints.
    pub kernel_dropped: u64,
    /// With [`SimConfig::datagrams`]: datagrams whose IPv4 identification the endpoints
    /// found from the ICRC (the guess [`as_datagram`] gives is wrong for most).
    pub idents_recovered: u64,
    /// With [`SimConfig::datagrams`]: READ response payloads placed before their check.
    pub placed: u64,
    /// Local ACK timeouts.
    pub timeouts: u64,
    /// Frames the link marked ECN CE.
    pub link_ecn_marked: u64,
    /// Per-endpoint QP counters (client, server), by their mlx5 / rdma names.
    pub counters: BTreeMap<String, BTreeMap<&'static str, u64>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Send,
    SendImm,
    Write,
    WriteImm,
    Read,
    Cas,
    Faa,
}

#[derive(Debug, Clone, Copy)]
struct Op {
    kind: Kind,
    len: u32,
    /// Atomic: operand(s) and the value the model says comes back.
    a: u64,
    b: u64,
    expect: u64,
}

/// Fills `buf` with the pattern of operation `i`.
fn pattern(seed: u64, i: u64, buf: &mut [u8]) {
    let mut r = Rng::new(seed.wrapping_mul(31).wrapping_add(i));
    for chunk in buf.chunks_mut(8) {
        let v = r.next_u64().to_le_bytes();
        chunk.copy_from_slice(&v[..chunk.len()]);
    }
}

struct Side {
    ctx: Context,
    qpn: u32,
    cq: CqId,
}

fn side(ip: [u8; 4], mac_last: u8, seed: u64) -> Side {
    let mut ctx = Context::new(
        ContextConfig {
            mac: [2, 0, 0, 0, 0, mac_last],
            ip: IpAddr::V4(Ipv4Addr::from(ip)),
            seed,
            udp_sport_base: 0xc000,
            tos: 0,
        },
        std::time::Instant::now(),
    );
    let cq = ctx
        .create_cq(crate::endpoint::MAX_CQE)
        .expect("MAX_CQE is a valid CQ depth");
    let pd = ctx.alloc_pd();
    let qpn = ctx
        .create_qp(
            pd,
            QpCaps {
                qp_type: crate::verbs::QpType::Rc,
                send_cq: cq,
                recv_cq: cq,
                max_send_wr: 4096,
                max_recv_wr: 4096,
            },
        )
        .unwrap_or(0);
    Side { ctx, qpn, cq }
}

fn connect(a: &mut Side, b: &Side, cfg: &SimConfig, my_psn: u32, peer_psn: u32) {
    let remote = Remote {
        ip: b.ctx.config().ip,
        mac: b.ctx.config().mac,
    };
    let _ = a.ctx.modify_qp_init(a.qpn, InitAttr::default());
    let _ = a.ctx.modify_qp_rtr(
        a.qpn,
        RtrAttr {
            remote,
            dest_qpn: b.qpn,
            rq_psn: peer_psn,
            path_mtu: cfg.mtu,
            max_dest_rd_atomic: 16,
            min_rnr_timer: 1,
        },
    );
    let _ = a.ctx.modify_qp_rts(
        a.qpn,
        RtsAttr {
            sq_psn: my_psn,
            ..cfg.rts
        },
    );
}

/// Runs a workload to the end (or until it cannot go on) and reports.
pub fn run(cfg: &SimConfig) -> Report {
    let mut rep = Report::default();
    let mut rng = Rng::new(cfg.seed);
    let max = cfg.size.1.max(8) as usize;
    let slots = cfg.window.max(1);
    let mut client = side([10, 0, 0, 1], 1, cfg.seed ^ 0xc1);
    let mut server = side([10, 0, 0, 2], 2, cfg.seed ^ 0x5e);
    let server_psn = rng.next_u64() as u32 & 0xff_ffff;
    connect(&mut client, &server, cfg, cfg.client_psn, server_psn);
    connect(&mut server, &client, cfg, server_psn, cfg.client_psn);

    let cpd = crate::mem::PdId(0);
    let local = client
        .ctx
        .reg_mr(cpd, vec![0; slots * max], Access::LOCAL_WRITE);
    let spd = crate::mem::PdId(0);
    let all = Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ;
    let data = server.ctx.reg_mr(spd, vec![0; slots * max], all);
    let recv = server.ctx.reg_mr(
        spd,
        vec![0; cfg.recv_depth.max(1) * max],
        Access::LOCAL_WRITE,
    );
    let atom = server
        .ctx
        .reg_mr(spd, vec![0; 8], Access::LOCAL_WRITE | Access::REMOTE_ATOMIC);
    let (Ok(local), Ok(data), Ok(recv), Ok(atom)) = (local, data, recv, atom) else {
        rep.errors.push("memory registration failed".into());
        return rep;
    };
    let post_recv = |s: &mut Side, slot: usize, recv: &Mr| {
        s.ctx.post_recv(
            s.qpn,
            RecvWr {
                wr_id: slot as u64,
                sge: Sge {
                    addr: recv.addr + (slot * max) as u64,
                    length: max as u32,
                    lkey: recv.lkey,
                },
            },
        )
    };
    for slot in 0..cfg.recv_depth {
        let _ = post_recv(&mut server, slot, &recv);
    }

    // The operations, decided up front from the seed.
    let total_w = (cfg.mix.send + cfg.mix.write + cfg.mix.read + cfg.mix.atomic).max(1);
    let mut model: u64 = 0;
    let ops: Vec<Op> = (0..cfg.ops)
        .map(|_| {
            let pick = rng.range(0, u64::from(total_w) - 1) as u32;
            let coin = rng.next_u64();
            let m = &cfg.mix;
            let kind = if pick < m.send {
                if coin & 1 == 0 {
                    Kind::Send
                } else {
                    Kind::SendImm
                }
            } else if pick < m.send + m.write {
                if coin & 3 == 0 {
                    Kind::WriteImm
                } else {
                    Kind::Write
                }
            } else if pick < m.send + m.write + m.read {
                Kind::Read
            } else if coin & 1 == 0 {
                Kind::Cas
            } else {
                Kind::Faa
            };
            let len = if matches!(kind, Kind::Cas | Kind::Faa) {
                8
            } else {
                rng.range(u64::from(cfg.size.0), u64::from(cfg.size.1)) as u32
            };
            let (a, b, expect) = match kind {
                Kind::Faa => {
                    let add = rng.next_u64() >> 8;
                    let e = model;
                    model = model.wrapping_add(add);
                    (add, 0, e)
                }
                Kind::Cas => {
                    let compare = if rng.chance(0.5) {
                        model
                    } else {
                        rng.next_u64()
                    };
                    let swap = rng.next_u64();
                    let e = model;
                    if model == compare {
                        model = swap;
                    }
                    (compare, swap, e)
                }
                _ => (0, 0, 0),
            };
            Op {
                kind,
                len,
                a,
                b,
                expect,
            }
        })
        .collect();

    let t0 = Instant::now();
    let mut now = t0;
    if let Some(p) = cfg.dcqcn {
        client.ctx.enable_dcqcn(p, t0);
        server.ctx.enable_dcqcn(p, t0);
    }
    let mut link = Link::new(cfg.link, cfg.seed);
    let mut buf = vec![0u8; 4096 + 256];
    let mut next_post = 0usize;
    let mut next_done = 0usize;
    // SENDs in posting order, and how many the receiver verified.
    let mut sends: VecDeque<usize> = VecDeque::new();
    let mut sends_verified: Vec<bool> = vec![false; cfg.ops];
    let mut done_flags: Vec<bool> = vec![false; cfg.ops];

    // Frames handed up as datagrams, for the identification guess.
    let mut delivered = 0u64;
    loop {
        // Receiver: verify receives against the SENDs in order, repost.
        for wc in server.ctx.poll_cq(server.cq, usize::MAX) {
            if wc.status != WcStatus::Success {
                if wc.status != WcStatus::WrFlushErr {
                    rep.errors.push(format!(
                        "server receive completed with {}",
                        wc.status.name()
                    ));
                }
                continue;
            }
            let slot = wc.wr_id as usize;
            let Some(i) = sends.pop_front() else {
                rep.errors
                    .push("a receive completed with no SEND outstanding".into());
                continue;
            };
            let op = ops[i];
            let with_imm = matches!(op.kind, Kind::SendImm | Kind::WriteImm);
            let want_opcode = if op.kind == Kind::WriteImm {
                WcOpcode::RecvRdmaWithImm
            } else {
                WcOpcode::Recv
            };
            if wc.opcode != want_opcode
                || wc.byte_len != op.len
                || wc.imm.is_some() != with_imm
                || (with_imm && wc.imm != Some(i as u32))
            {
                rep.errors.push(format!(
                    "op {i}: receive completion {:?} len {} imm {:?} does not match {:?} of {} bytes",
                    wc.opcode, wc.byte_len, wc.imm, op.kind, op.len
                ));
            } else if op.kind != Kind::WriteImm && cfg.verify {
                let mut want = vec![0u8; op.len as usize];
                pattern(cfg.seed, i as u64, &mut want);
                let got = &server.ctx.mr_bytes(&recv)[slot * max..slot * max + op.len as usize];
                if got != &want[..] {
                    rep.errors
                        .push(format!("op {i}: SEND data differs at the receiver"));
                }
            }
            sends_verified[i] = true;
            let _ = post_recv(&mut server, slot, &recv);
        }
        // Requester: completions in order, each verified.
        for wc in client.ctx.poll_cq(client.cq, usize::MAX) {
            let i = wc.wr_id as usize;
            if i >= cfg.ops || done_flags[i] {
                rep.errors
                    .push(format!("completion for op {i} duplicated or unknown"));
                continue;
            }
            if i != next_done {
                rep.errors
                    .push(format!("op {i} completed before op {next_done}"));
            }
            done_flags[i] = true;
            next_done = next_done.max(i + 1);
            if wc.status != WcStatus::Success {
                rep.ops_failed += 1;
                if wc.status != WcStatus::WrFlushErr || rep.errors.is_empty() {
                    rep.errors.push(format!(
                        "op {i} ({:?}) completed with {}",
                        ops[i].kind,
                        wc.status.name()
                    ));
                }
                continue;
            }
            let op = ops[i];
            let slot = i % slots;
            let n = op.len as usize;
            let mut want = vec![0u8; if cfg.verify { n } else { 0 }];
            let ok = match op.kind {
                Kind::Send | Kind::SendImm => sends_verified[i],
                Kind::Write | Kind::Read if !cfg.verify => true,
                Kind::WriteImm if !cfg.verify => sends_verified[i],
                Kind::Write | Kind::WriteImm => {
                    pattern(cfg.seed, i as u64, &mut want);
                    let got = &server.ctx.mr_bytes(&data)[slot * max..slot * max + n];
                    got == &want[..] && (op.kind == Kind::Write || sends_verified[i])
                }
                Kind::Read => {
                    pattern(cfg.seed, i as u64, &mut want);
                    client.ctx.mr_bytes(&local)[slot * max..slot * max + n] == want[..]
                }
                Kind::Cas | Kind::Faa => {
                    let got = &client.ctx.mr_bytes(&local)[slot * max..slot * max + 8];
                    got == op.expect.to_le_bytes()
                }
            };
            if ok {
                rep.ops_completed += 1;
                rep.bytes_verified += u64::from(op.len);
            } else {
                rep.ops_failed += 1;
                rep.errors.push(format!(
                    "op {i} ({:?}, {} bytes): data does not verify",
                    op.kind, op.len
                ));
            }
        }
        // Post what the window allows.
        while next_post < cfg.ops && next_post - next_done < slots {
            let i = next_post;
            let op = ops[i];
            let slot = i % slots;
            let laddr = local.addr + (slot * max) as u64;
            let raddr = data.addr + (slot * max) as u64;
            let n = op.len as usize;
            match op.kind {
                _ if !cfg.verify => {}
                Kind::Send | Kind::SendImm | Kind::Write | Kind::WriteImm => {
                    pattern(
                        cfg.seed,
                        i as u64,
                        &mut client.ctx.mr_bytes_mut(&local)[slot * max..slot * max + n],
                    );
                }
                Kind::Read => {
                    pattern(
                        cfg.seed,
                        i as u64,
                        &mut server.ctx.mr_bytes_mut(&data)[slot * max..slot * max + n],
                    );
                }
                _ => {}
            }
            let sop = match op.kind {
                Kind::Send => SendOp::Send,
                Kind::SendImm => SendOp::SendWithImm(i as u32),
                Kind::Write => SendOp::Write {
                    remote_addr: raddr,
                    rkey: data.rkey,
                },
                Kind::WriteImm => SendOp::WriteWithImm {
                    remote_addr: raddr,
                    rkey: data.rkey,
                    imm: i as u32,
                },
                Kind::Read => SendOp::Read {
                    remote_addr: raddr,
                    rkey: data.rkey,
                },
                Kind::Cas => SendOp::CompareSwap {
                    remote_addr: atom.addr,
                    rkey: atom.rkey,
                    compare: op.a,
                    swap: op.b,
                },
                Kind::Faa => SendOp::FetchAdd {
                    remote_addr: atom.addr,
                    rkey: atom.rkey,
                    add: op.a,
                },
            };
            let wr = SendWr {
                wr_id: i as u64,
                op: sop,
                sge: Sge {
                    addr: laddr,
                    length: op.len,
                    lkey: local.lkey,
                },
                signaled: true,
                solicited: false,
            };
            if let Err(e) = client.ctx.post_send(client.qpn, wr) {
                rep.errors.push(format!("op {i}: post_send failed: {e}"));
                break;
            }
            if matches!(op.kind, Kind::Send | Kind::SendImm | Kind::WriteImm) {
                sends.push_back(i);
            }
            next_post += 1;
        }
        if next_done >= cfg.ops {
            break;
        }
        if client.ctx.qp_state(client.qpn) == Some(QpState::Err) && next_post == next_done {
            break;
        }
        // Frames out.
        for (from, s) in [(0usize, &mut client), (1, &mut server)] {
            while let Some(n) = s.ctx.poll_frame(now, &mut buf) {
                link.send(from, now, buf[..n].to_vec());
            }
        }
        // Next event.
        let next = [
            link.next_delivery(),
            client.ctx.poll_timeout(),
            server.ctx.poll_timeout(),
        ]
        .into_iter()
        .flatten()
        .min();
        let Some(t) = next else {
            rep.errors.push(format!(
                "stalled: nothing to do with {} operations outstanding",
                next_post - next_done
            ));
            break;
        };
        now = now.max(t);
        if now - t0 > cfg.time_limit {
            rep.errors.push(format!(
                "time limit reached with {} operations outstanding",
                next_post - next_done
            ));
            break;
        }
        for (to, frame) in link.deliver(now) {
            let s = if to == 0 { &mut client } else { &mut server };
            if !cfg.datagrams {
                let _ = s.ctx.handle_frame(now, &frame);
                continue;
            }
            delivered += 1;
            match as_datagram(&frame, delivered) {
                Some((datagram, roce)) => {
                    let r = crate::endpoint::Received::Datagram {
                        datagram: &datagram,
                        roce: &frame[roce],
                    };
                    let _ = s.ctx.handle_received(now, r);
                }
                None => rep.kernel_dropped += 1,
            }
        }
        client.ctx.handle_timeout(now);
        server.ctx.handle_timeout(now);
    }

    // Every atomic executed exactly once: the cell holds what the model says. Only when
    // every operation completed: atomics still outstanding at a time limit may or may not
    // have run, and the model counts them all.
    let mut cell = [0u8; 8];
    cell.copy_from_slice(&server.ctx.mr_bytes(&atom)[..8]);
    if rep.ops_failed == 0 && next_done >= cfg.ops && u64::from_le_bytes(cell) != model {
        rep.errors.push(format!(
            "atomic cell holds {:#x}, the model says {model:#x}: an atomic ran twice or not at all",
            u64::from_le_bytes(cell)
        ));
    }
    if rep.ops_completed + rep.ops_failed < cfg.ops as u64 && rep.errors.is_empty() {
        rep.errors.push("not every operation completed".into());
    }
    let ls: LinkStats = link.stats();
    rep.sim_time_us = (now - t0).as_micros() as u64;
    rep.link_dropped = ls.dropped + ls.queue_drops;
    rep.link_duplicated = ls.duplicated;
    rep.link_reordered = ls.reordered;
    rep.link_corrupted = ls.corrupted;
    rep.link_ecn_marked = ls.ecn_marked;
    for (name, s) in [("client", &client), ("server", &server)] {
        if let Some(q) = s.ctx.qp_counters(s.qpn) {
            rep.counters.insert(name.to_string(), q.named());
        }
    }
    for s in [&client, &server] {
        let cc = s.ctx.counters();
        rep.packets_sent += cc.tx_frames;
        rep.corrupted_rejected += cc.rx_bad_icrc + cc.rx_malformed;
        rep.idents_recovered += cc.rx_idents_recovered;
        rep.placed += cc.rx_placed;
        if let Some(q) = s.ctx.qp_counters(s.qpn) {
            rep.retransmits += q.retransmits;
            rep.timeouts += q.local_ack_timeout_err;
            for (k, v) in [
                ("psn_seq_err", q.nak_sent_seq),
                ("rnr", q.nak_sent_rnr),
                ("invalid_request", q.nak_sent_inv),
                ("remote_access", q.nak_sent_access),
            ] {
                *rep.naks.entry(k.to_string()).or_default() += v;
            }
        }
    }
    rep
}

/// A frame as a UDP socket bound to port 4791 would hand it up: the RoCE bytes (the UDP
/// payload, without the Ethernet padding) and the addressing the socket reports
/// (addresses, source port, TOS), with the IPv4 identification, which no socket reports,
/// a guess: segment `n mod 4` of a coalesced receive, wrong for three frames in four of
/// this link, whose senders give every packet identification 0. `None`, roughly what a
/// kernel would not deliver there: not IPv4 and UDP to port 4791, an IPv4 header with a
/// bad checksum, or (which the endpoints never send, so only damage makes) with options
/// or lengths that disagree. What the kernel checks and this does not (a damaged link
/// header, a nonzero UDP checksum made wrong) reaches the endpoint, whose ICRC check
/// must refuse it where it covers the bits. (IPv6 is not simulated here.)
pub fn as_datagram(
    frame: &[u8],
    n: u64,
) -> Option<(crate::wire::DatagramRepr, std::ops::Range<usize>)> {
    use crate::wire::{ipv4, udp, DatagramRepr, IpRepr};
    const ETH: usize = 14;
    if frame.get(12..14)? != [0x08, 0x00] {
        return None;
    }
    let ip = ipv4::Header::new_checked(frame.get(ETH..)?).ok()?;
    if ip.header_len() != ipv4::MIN_HEADER_LEN
        || ip.protocol() != ipv4::PROTO_UDP
        || ip.compute_checksum() != ip.checksum()
    {
        return None;
    }
    let total = usize::from(ip.total_len());
    let at = ETH + ipv4::MIN_HEADER_LEN;
    let u = udp::Header::new_checked(frame.get(at..)?).ok()?;
    if u.dst_port() != crate::wire::ROCEV2_UDP_PORT
        || usize::from(u.len()) < udp::HEADER_LEN
        || ipv4::MIN_HEADER_LEN + usize::from(u.len()) != total
    {
        return None;
    }
    let roce = at + udp::HEADER_LEN..ETH + total;
    frame.get(roce.clone())?;
    let mut d = DatagramRepr::roce(ip.src().into(), ip.dst().into(), u.src_port(), ip.tos())?;
    if let IpRepr::V4(v4) = &mut d.ip {
        v4.ident = (n % 4) as u16;
    }
    Some((d, roce))
}
