//! `uroce demo`: two uroce endpoints in two network namespaces joined by a veth pair,
//! doing RC RDMA WRITE, READ, SEND and atomics and UD datagrams over the UDP backend,
//! with every byte checked. Everything it makes is removed when it ends, also on Ctrl-C.

use std::net::{IpAddr, Ipv4Addr};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::netns::{self, VethPair};
use uroce::datapath::event_loop::Endpoint;
use uroce::datapath::impair::Impairment;
use uroce::datapath::Backend;
use uroce::mem::{Access, Mr};
use uroce::transport::QpCounters;
use uroce::verbs::{
    Context, ContextConfig, InitAttr, Mtu, QpCaps, QpType, RecvWr, Remote, RtrAttr, RtsAttr,
    SendOp, SendWr, Sge, UdSendWr, WcStatus,
};

/// What to run.
#[derive(Debug, Clone)]
pub struct DemoConfig {
    /// Messages per operation kind.
    pub messages: usize,
    /// Bytes per RC message.
    pub size: u32,
    /// Path MTU.
    pub mtu: Mtu,
    /// `tc netem` arguments for both veth ends, e.g. `loss 5%`.
    pub netem: Option<String>,
    /// Loss and reordering each endpoint puts on what it receives (seeded), for kernels
    /// without netem.
    pub impair: Impairment,
    /// Capture every frame on the veth (namespaces only).
    pub capture: bool,
    /// Which datapath.
    pub backend: BackendChoice,
}

pub use crate::backend::BackendChoice;

/// What happened.
#[derive(Debug, Clone, Default)]
pub struct DemoReport {
    /// One line per phase.
    pub lines: Vec<String>,
    /// Everything verified.
    pub ok: bool,
    /// Frames captured on the veth, when asked for.
    pub captured: Vec<Vec<u8>>,
    /// The client's RC QP (requester of WRITE, READ, SEND and atomics).
    pub client_rc: QpCounters,
    /// The server's RC QP (their responder).
    pub server_rc: QpCounters,
    /// Frames the kernel dropped because an endpoint's receive buffers were full
    /// (client, server; AF_XDP counts them).
    pub rx_overruns: [u64; 2],
}

#[derive(Debug, Clone, Copy)]
struct Info {
    rc_qpn: u32,
    ud_qpn: u32,
    addr: u64,
    rkey: u32,
    atomic_addr: u64,
    atomic_rkey: u32,
}

const QKEY: u32 = 0x1111_1111;
const PHASE_LIMIT: Duration = Duration::from_secs(20);

fn pattern(i: usize, buf: &mut [u8]) {
    for (j, b) in buf.iter_mut().enumerate() {
        *b = (i.wrapping_mul(131) ^ j.wrapping_mul(7)).wrapping_add(j >> 8) as u8;
    }
}

struct Side {
    ep: Endpoint<Box<dyn Backend + Send>>,
    rc: u32,
    ud: u32,
    cq: uroce::verbs::CqId,
    mr: Mr,
    atomic: Mr,
}

/// Where one side runs.
#[derive(Debug, Clone)]
struct Place {
    addr: Ipv4Addr,
    mac: [u8; 6],
    iface: Option<String>,
}

fn side(
    place: &Place,
    seed: u64,
    region: usize,
    impair: Impairment,
    choice: BackendChoice,
    mtu: Mtu,
) -> Result<(Side, String), String> {
    let addr = place.addr;
    let (backend, what) = crate::backend::open(
        choice,
        place.iface.as_deref(),
        "AF_XDP needs the veth pair (root)",
        addr.into(),
        mtu,
        impair,
    )?;
    let mut ctx = Context::new(
        ContextConfig {
            mac: place.mac,
            ip: IpAddr::V4(addr),
            seed,
            udp_sport_base: 0xc000,
            tos: 0,
        },
        std::time::Instant::now(),
    );
    let cq = ctx.create_cq();
    let pd = ctx.alloc_pd();
    let e = |e: uroce::verbs::VerbsError| e.to_string();
    let caps = |t| QpCaps {
        qp_type: t,
        send_cq: cq,
        recv_cq: cq,
        max_send_wr: 1024,
        max_recv_wr: 1024,
    };
    let rc = ctx.create_qp(pd, caps(QpType::Rc)).map_err(e)?;
    let ud = ctx.create_qp(pd, caps(QpType::Ud)).map_err(e)?;
    let all = Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ;
    let mr = ctx.reg_mr(pd, vec![0; region], all).map_err(e)?;
    let atomic = ctx
        .reg_mr(pd, vec![0; 8], Access::LOCAL_WRITE | Access::REMOTE_ATOMIC)
        .map_err(e)?;
    ctx.modify_qp_init(rc, InitAttr::default()).map_err(e)?;
    ctx.modify_qp_init(
        ud,
        InitAttr {
            qkey: QKEY,
            ..InitAttr::default()
        },
    )
    .map_err(e)?;
    Ok((
        Side {
            ep: Endpoint::new(ctx, backend),
            rc,
            ud,
            cq,
            mr,
            atomic,
        },
        what,
    ))
}

fn connect(s: &mut Side, peer: &Place, peer_rc: u32, mtu: Mtu) -> Result<(), String> {
    let e = |e: uroce::verbs::VerbsError| e.to_string();
    let remote = Remote {
        ip: IpAddr::V4(peer.addr),
        mac: peer.mac,
    };
    let rtr = RtrAttr {
        remote,
        dest_qpn: peer_rc,
        rq_psn: 0x100,
        path_mtu: mtu,
        max_dest_rd_atomic: 16,
        min_rnr_timer: 12,
    };
    let ctx = &mut s.ep.ctx;
    ctx.modify_qp_rtr(s.rc, rtr).map_err(e)?;
    ctx.modify_qp_rts(
        s.rc,
        RtsAttr {
            sq_psn: 0x100,
            timeout: 12,
            ..RtsAttr::default()
        },
    )
    .map_err(e)?;
    ctx.modify_qp_rtr_ud(s.ud, mtu).map_err(e)?;
    ctx.modify_qp_rts(s.ud, RtsAttr::default()).map_err(e)
}

/// Posts `ops` on the client RC QP and waits for them all; returns elapsed time.
fn run_phase(s: &mut Side, ops: Vec<(SendOp, Sge)>) -> Result<Duration, String> {
    let t = Instant::now();
    let n = ops.len();
    let mut done = 0;
    let mut err = None;
    let mut queued = ops.into_iter().enumerate().peekable();
    let (rc, cq) = (s.rc, s.cq);
    let deadline = t + PHASE_LIMIT;
    let finished =
        s.ep.run_until(deadline, |ctx| {
            while let Some((i, (op, sge))) = queued.peek().copied() {
                let wr = SendWr {
                    wr_id: i as u64,
                    op,
                    sge,
                    signaled: true,
                    solicited: false,
                };
                if ctx.post_send(rc, wr).is_err() {
                    break; // queue full: try again next round
                }
                queued.next();
            }
            for wc in ctx.poll_cq(cq, 64) {
                if wc.status != WcStatus::Success && err.is_none() {
                    err = Some(format!(
                        "work request {} completed with {}",
                        wc.wr_id,
                        wc.status.name()
                    ));
                }
                done += 1;
            }
            done >= n || err.is_some()
        })
        .map_err(|e| e.to_string())?;
    if let Some(e) = err {
        return Err(e);
    }
    if !finished {
        return Err(format!(
            "{done} of {n} operations completed before the time limit or an interrupt ({:?}, {} send errors)",
            s.ep.ctx.counters(),
            s.ep.send_errors
        ));
    }
    Ok(t.elapsed())
}

fn rate(bytes: u64, d: Duration) -> String {
    format!(
        "{:.2} Gb/s",
        bytes as f64 * 8.0 / d.as_secs_f64().max(1e-9) / 1e9
    )
}

/// Runs the demo. Needs root for the namespaces; says so otherwise.
pub fn run(cfg: &DemoConfig) -> Result<DemoReport, String> {
    uroce::datapath::catch_interrupts();
    let mut report = DemoReport::default();
    // Two namespaces over veth where we may make them; else both ends on loopback.
    let pair = match netns::check_privileges() {
        Ok(()) => {
            Some(VethPair::create("demo", 9000).map_err(|e| format!("making the veth pair: {e}"))?)
        }
        Err(why) => {
            report.lines.push(format!("no network namespaces: {why}"));
            report.lines.push(
                "running both endpoints on loopback (127.0.0.1 and 127.0.0.2) instead".into(),
            );
            None
        }
    };
    if let Some(n) = &cfg.netem {
        let Some(pair) = &pair else {
            return Err("--netem needs the veth pair, which needs root".into());
        };
        let args: Vec<&str> = n.split_whitespace().collect();
        for i in 0..2 {
            pair.netem(i, &args).map_err(|e| format!("tc netem: {e}"))?;
        }
    }
    let capture = match (&pair, cfg.capture) {
        (Some(p), true) => Some(
            // On the server's end, which then uses the UDP backend: AF_XDP sends bypass
            // the capture taps and XDP takes received RoCE frames before them, so only a
            // kernel-stack end sees both directions.
            crate::live_capture::Capture::start(Some(p.ns[1].clone()), p.ifaces[1].clone(), false)
                .map_err(|e| format!("capturing on the veth: {e}"))?,
        ),
        _ => None,
    };
    let (n, size) = (cfg.messages.max(1), cfg.size.max(8));
    let region = n * size as usize;
    let (to_client, from_server) = mpsc::channel::<Info>();
    let (to_server, from_client) = mpsc::channel::<Info>();
    let (stop_tx, stop_rx) = mpsc::channel::<()>();
    let (ns_a, ns_b) = match &pair {
        Some(p) => (Some(p.ns[0].clone()), Some(p.ns[1].clone())),
        None => (None, None),
    };
    let (place_a, place_b) = match &pair {
        Some(p) => {
            let mac = |i| p.mac(i).map_err(|e| format!("reading the veth MAC: {e}"));
            (
                Place {
                    addr: p.addrs[0],
                    mac: mac(0)?,
                    iface: Some(p.ifaces[0].clone()),
                },
                Place {
                    addr: p.addrs[1],
                    mac: mac(1)?,
                    iface: Some(p.ifaces[1].clone()),
                },
            )
        }
        None => (
            Place {
                addr: Ipv4Addr::new(127, 0, 0, 1),
                mac: [0; 6],
                iface: None,
            },
            Place {
                addr: Ipv4Addr::new(127, 0, 0, 2),
                mac: [0; 6],
                iface: None,
            },
        ),
    };
    let (pa, pb) = (place_a.clone(), place_b.clone());
    let choice = cfg.backend;
    let server_choice = if capture.is_some() {
        BackendChoice::Udp
    } else {
        choice
    };
    let mtu = cfg.mtu;
    let impair = cfg.impair;
    let ud_size = size.min(mtu.bytes());

    type Served = (usize, usize, String, QpCounters, u64);
    let server = std::thread::spawn(move || -> Result<Served, String> {
        if let Some(ns) = &ns_b {
            netns::enter(ns).map_err(|e| format!("entering {ns}: {e}"))?;
        }
        let (mut s, what) = side(
            &pb,
            2,
            region + n * (ud_size as usize + 40) + n * size as usize,
            impair,
            server_choice,
            mtu,
        )?;
        let info = Info {
            rc_qpn: s.rc,
            ud_qpn: s.ud,
            addr: s.mr.addr,
            rkey: s.mr.rkey,
            atomic_addr: s.atomic.addr,
            atomic_rkey: s.atomic.rkey,
        };
        to_client.send(info).map_err(|e| e.to_string())?;
        let peer = from_client.recv().map_err(|e| e.to_string())?;
        connect(&mut s, &pa, peer.rc_qpn, mtu)?;
        // Receives: n for the SENDs after the RC region, n for UD datagrams after those.
        let send_base = region;
        let ud_base = region + n * size as usize;
        for i in 0..n {
            let sge = Sge {
                addr: s.mr.addr + (send_base + i * size as usize) as u64,
                length: size,
                lkey: s.mr.lkey,
            };
            s.ep.ctx
                .post_recv(
                    s.rc,
                    RecvWr {
                        wr_id: i as u64,
                        sge,
                    },
                )
                .map_err(|e| e.to_string())?;
            let slot = ud_size as usize + 40;
            let sge = Sge {
                addr: s.mr.addr + (ud_base + i * slot) as u64,
                length: slot as u32,
                lkey: s.mr.lkey,
            };
            s.ep.ctx
                .post_recv(
                    s.ud,
                    RecvWr {
                        wr_id: (1 << 32) | i as u64,
                        sge,
                    },
                )
                .map_err(|e| e.to_string())?;
        }
        let (mut sends_ok, mut ud_ok) = (0usize, 0usize);
        let mut want = vec![0u8; size as usize];
        let (mr, cq) = (s.mr, s.cq);
        let deadline = Instant::now() + PHASE_LIMIT * 6;
        s.ep.run_until(deadline, |ctx| {
            for wc in ctx.poll_cq(cq, 64) {
                if wc.status != WcStatus::Success {
                    continue;
                }
                let i = (wc.wr_id & 0xffff_ffff) as usize;
                if wc.wr_id >> 32 == 0 {
                    let Some(k) = wc.imm.map(|v| v as usize) else {
                        continue;
                    };
                    pattern(k, &mut want);
                    let at = send_base + i * size as usize;
                    if wc.byte_len == size && ctx.mr_bytes(&mr)[at..at + size as usize] == want[..]
                    {
                        sends_ok += 1;
                    }
                } else {
                    let Some(k) = wc.imm.map(|v| v as usize) else {
                        continue;
                    };
                    pattern(k, &mut want[..ud_size as usize]);
                    let at = ud_base + i * (ud_size as usize + 40) + 40;
                    if wc.byte_len == ud_size + 40
                        && ctx.mr_bytes(&mr)[at..at + ud_size as usize] == want[..ud_size as usize]
                    {
                        ud_ok += 1;
                    }
                }
            }
            stop_rx.try_recv().is_ok()
        })
        .map_err(|e| e.to_string())?;
        if std::env::var_os("UROCE_DEBUG").is_some() {
            eprintln!(
                "server: {:?} {:?}",
                s.ep.ctx.counters(),
                s.ep.ctx.qp_counters(s.rc)
            );
        }
        let counters = s.ep.ctx.qp_counters(s.rc).unwrap_or_default();
        let overruns = s.ep.backend_mut().rx_overruns();
        Ok((sends_ok, ud_ok, what, counters, overruns))
    });

    let (pa, pb) = (place_a.clone(), place_b.clone());
    let client = std::thread::spawn(move || -> Result<(Vec<String>, QpCounters, u64), String> {
        if let Some(ns) = &ns_a {
            netns::enter(ns).map_err(|e| format!("entering {ns}: {e}"))?;
        }
        let (mut s, what) = side(&pa, 1, region + 8, impair, choice, mtu)?;
        let peer = from_server.recv().map_err(|e| e.to_string())?;
        to_server
            .send(Info {
                rc_qpn: s.rc,
                ud_qpn: s.ud,
                addr: 0,
                rkey: 0,
                atomic_addr: 0,
                atomic_rkey: 0,
            })
            .map_err(|e| e.to_string())?;
        connect(&mut s, &pb, peer.rc_qpn, mtu)?;
        let mut lines = vec![format!("client datapath: {what}")];
        let sz = size as usize;
        let (mr, lkey) = (s.mr, s.mr.lkey);
        let sge = |i: usize, len: u32| Sge {
            addr: mr.addr + (i * sz) as u64,
            length: len,
            lkey,
        };
        // RDMA WRITE n messages, then READ them back into a zeroed buffer and compare.
        for i in 0..n {
            pattern(i, &mut s.ep.ctx.mr_bytes_mut(&mr)[i * sz..(i + 1) * sz]);
        }
        let writes = (0..n)
            .map(|i| {
                (
                    SendOp::Write {
                        remote_addr: peer.addr + (i * sz) as u64,
                        rkey: peer.rkey,
                    },
                    sge(i, size),
                )
            })
            .collect();
        let d = run_phase(&mut s, writes)?;
        lines.push(format!(
            "RC RDMA WRITE  {n} x {size} B   {:>9.2} ms  {}",
            d.as_secs_f64() * 1e3,
            rate((n * sz) as u64, d)
        ));
        s.ep.ctx.mr_bytes_mut(&mr)[..n * sz].fill(0);
        let reads = (0..n)
            .map(|i| {
                (
                    SendOp::Read {
                        remote_addr: peer.addr + (i * sz) as u64,
                        rkey: peer.rkey,
                    },
                    sge(i, size),
                )
            })
            .collect();
        let d = run_phase(&mut s, reads)?;
        let mut want = vec![0u8; sz];
        for i in 0..n {
            pattern(i, &mut want);
            if s.ep.ctx.mr_bytes(&mr)[i * sz..(i + 1) * sz] != want[..] {
                return Err(format!(
                    "RDMA READ of message {i} does not match what was written"
                ));
            }
        }
        lines.push(format!(
            "RC RDMA READ   {n} x {size} B   {:>9.2} ms  {}  (data verified: WRITE and READ)",
            d.as_secs_f64() * 1e3,
            rate((n * sz) as u64, d)
        ));
        // SEND with immediate n messages: the server checks each against the pattern.
        for i in 0..n {
            pattern(
                i + 1000,
                &mut s.ep.ctx.mr_bytes_mut(&mr)[i * sz..(i + 1) * sz],
            );
        }
        let sends = (0..n)
            .map(|i| (SendOp::SendWithImm((i + 1000) as u32), sge(i, size)))
            .collect();
        let d = run_phase(&mut s, sends)?;
        lines.push(format!(
            "RC SEND        {n} x {size} B   {:>9.2} ms  {}",
            d.as_secs_f64() * 1e3,
            rate((n * sz) as u64, d)
        ));
        // FETCH_ADD i+1 for i in 0..n, then READ the counter.
        let adds = (0..n)
            .map(|i| {
                (
                    SendOp::FetchAdd {
                        remote_addr: peer.atomic_addr,
                        rkey: peer.atomic_rkey,
                        add: i as u64 + 1,
                    },
                    Sge {
                        addr: mr.addr + region as u64,
                        length: 8,
                        lkey,
                    },
                )
            })
            .collect();
        let d = run_phase(&mut s, adds)?;
        lines.push(format!(
            "RC FETCH_ADD   {n} x 8 B       {:>9.2} ms  {:.0} ops/s",
            d.as_secs_f64() * 1e3,
            n as f64 / d.as_secs_f64().max(1e-9)
        ));
        // Each FETCH_ADD returned the counter before it; the last one saw 1 + 2 + ... + (n-1).
        let mut last = [0u8; 8];
        last.copy_from_slice(&s.ep.ctx.mr_bytes(&mr)[region..region + 8]);
        let want_sum = (n as u64 * (n as u64 - 1)) / 2;
        if u64::from_le_bytes(last) != want_sum {
            return Err(format!(
                "atomics: the last FETCH_ADD returned {}, expected {want_sum}",
                u64::from_le_bytes(last)
            ));
        }
        if let Some(l) = lines.last_mut() {
            l.push_str("  (results verified)");
        }
        // UD datagrams (some may be lost under netem: UD is unreliable).
        for i in 0..n {
            pattern(
                i + 5000,
                &mut s.ep.ctx.mr_bytes_mut(&mr)[i * sz..i * sz + ud_size as usize],
            );
        }
        let t = Instant::now();
        let (ud, cq) = (s.ud, s.cq);
        let mut next = 0;
        let mut sent = 0;
        s.ep.run_until(t + PHASE_LIMIT, |ctx| {
            while next < n {
                let wr = UdSendWr {
                    wr_id: next as u64,
                    dest: Remote {
                        ip: IpAddr::V4(pb.addr),
                        mac: pb.mac,
                    },
                    remote_qpn: peer.ud_qpn,
                    remote_qkey: QKEY,
                    sge: sge(next, ud_size),
                    imm: Some((next + 5000) as u32),
                    signaled: true,
                    solicited: false,
                };
                if ctx.post_send_ud(ud, wr).is_err() {
                    break;
                }
                next += 1;
            }
            sent += ctx.poll_cq(cq, 64).len();
            sent >= n
        })
        .map_err(|e| e.to_string())?;
        // Let the last datagrams land.
        let settle = Instant::now() + Duration::from_millis(200);
        s.ep.run_until(settle, |_| false)
            .map_err(|e| e.to_string())?;
        lines.push(format!(
            "UD SEND        {n} x {ud_size} B   {:>9.2} ms  sent",
            t.elapsed().as_secs_f64() * 1e3
        ));
        let counters = s.ep.ctx.qp_counters(s.rc).unwrap_or_default();
        let overruns = s.ep.backend_mut().rx_overruns();
        Ok((lines, counters, overruns))
    });

    let client_result = client
        .join()
        .map_err(|_| "the client thread panicked".to_string());
    let _ = stop_tx.send(());
    let server_result = server
        .join()
        .map_err(|_| "the server thread panicked".to_string())?;
    let place = match &pair {
        Some(p) => format!(
            "namespaces {} ({}) and {} ({}), veth MTU 9000",
            p.ns[0], p.addrs[0], p.ns[1], p.addrs[1]
        ),
        None => "loopback 127.0.0.1 and 127.0.0.2".to_string(),
    };
    report.lines.push(format!(
        "{place}, path MTU {}{}",
        mtu.bytes(),
        cfg.netem
            .as_ref()
            .map(|n| format!(", netem {n}"))
            .unwrap_or_default()
            + &if cfg.impair.is_none() {
                String::new()
            } else {
                format!(
                    ", each end dropping {:.1}% and reordering {:.1}% of what it receives",
                    cfg.impair.drop * 100.0,
                    cfg.impair.reorder * 100.0
                )
            }
    ));
    let (lines, client_rc, client_overruns) = client_result??;
    report.lines.extend(lines);
    let (sends_ok, ud_ok, server_what, server_rc, server_overruns) = server_result?;
    report.lines.push(format!(
        "RC recovery: client {} retransmits, {} sequence NAKs and {} ACK timeouts; server {} out-of-sequence and {} duplicate requests; frames dropped by the kernel for want of receive buffers: client {client_overruns}, server {server_overruns}",
        client_rc.retransmits,
        client_rc.packet_seq_err,
        client_rc.local_ack_timeout_err,
        server_rc.out_of_sequence,
        server_rc.duplicate_request
    ));
    report.rx_overruns = [client_overruns, server_overruns];
    report.client_rc = client_rc;
    report.server_rc = server_rc;
    report.lines.push(format!("server datapath: {server_what}"));
    report.lines.push(format!(
        "server verified {sends_ok}/{n} SENDs and {ud_ok}/{n} UD datagrams byte for byte"
    ));
    if let Some(c) = capture {
        report.captured = c.stop().map_err(|e| format!("capture: {e}"))?;
    }
    let lossy = cfg.netem.is_some() || cfg.impair.drop > 0.0;
    report.ok = sends_ok == n && (ud_ok == n || lossy && ud_ok > 0);
    drop(pair);
    Ok(report)
}
