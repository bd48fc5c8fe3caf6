//! `uroce demo`: two uroce endpoints in two network namespaces joined by a veth pair,
//! doing RC RDMA WRITE, READ, SEND and atomics and UD datagrams over the UDP backend,
//! with every byte checked. Everything it makes is removed when it ends, also on Ctrl-C.

use std::net::{IpAddr, Ipv4Addr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context as _};

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
    /// Frames the veth pair's two ends counted as dropped (client side, server side), as
    /// `ip -s link` shows them; `None` without the veth pair or when the counters cannot
    /// be read.
    pub path_drops: Option<[u64; 2]>,
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
) -> anyhow::Result<(Side, String)> {
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
    let cq = ctx
        .create_cq(uroce::verbs::MAX_CQE)
        .expect("MAX_CQE is a valid CQ depth");
    let pd = ctx.alloc_pd();
    let caps = |t| QpCaps {
        qp_type: t,
        send_cq: cq,
        recv_cq: cq,
        max_send_wr: 1024,
        max_recv_wr: 1024,
    };
    let rc = ctx.create_qp(pd, caps(QpType::Rc))?;
    let ud = ctx.create_qp(pd, caps(QpType::Ud))?;
    let all = Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ;
    let mr = ctx.reg_mr(pd, vec![0; region], all)?;
    let atomic = ctx.reg_mr(pd, vec![0; 8], Access::LOCAL_WRITE | Access::REMOTE_ATOMIC)?;
    ctx.modify_qp_init(rc, InitAttr::default())?;
    ctx.modify_qp_init(
        ud,
        InitAttr {
            qkey: QKEY,
            ..InitAttr::default()
        },
    )?;
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

fn connect(s: &mut Side, peer: &Place, peer_rc: u32, mtu: Mtu) -> anyhow::Result<()> {
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
    ctx.modify_qp_rtr(s.rc, rtr)?;
    ctx.modify_qp_rts(
        s.rc,
        RtsAttr {
            sq_psn: 0x100,
            timeout: 12,
            ..RtsAttr::default()
        },
    )?;
    ctx.modify_qp_rtr_ud(s.ud, mtu)?;
    ctx.modify_qp_rts(s.ud, RtsAttr::default())?;
    Ok(())
}

/// Posts `ops` on the client RC QP and waits for them all; returns elapsed time.
fn run_phase(s: &mut Side, ops: Vec<(SendOp, Sge)>) -> anyhow::Result<Duration> {
    let t = Instant::now();
    let n = ops.len();
    let mut done = 0;
    let mut err = None;
    let mut queued = ops.into_iter().enumerate().peekable();
    let (rc, cq) = (s.rc, s.cq);
    let deadline = t + PHASE_LIMIT;
    let finished = s.ep.run_until(deadline, |ctx| {
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
                err = Some(anyhow!(
                    "work request {} completed with {}",
                    wc.wr_id,
                    wc.status.name()
                ));
            }
            done += 1;
        }
        done >= n || err.is_some()
    })?;
    if let Some(e) = err {
        return Err(e);
    }
    if !finished {
        bail!(
            "{done} of {n} operations completed before the time limit or an interrupt ({:?}, {} send errors)",
            s.ep.ctx.counters(),
            s.ep.send_errors
        );
    }
    Ok(t.elapsed())
}

fn rate(bytes: u64, d: Duration) -> String {
    format!(
        "{:.2} Gb/s",
        bytes as f64 * 8.0 / d.as_secs_f64().max(1e-9) / 1e9
    )
}

/// What both sides agree on before they start.
#[derive(Debug, Clone, Copy)]
struct Plan {
    /// Messages per phase.
    n: usize,
    /// Bytes per RC message.
    size: u32,
    /// Bytes of the RC region (`n * size`).
    region: usize,
    /// Bytes per UD datagram.
    ud_size: u32,
    mtu: Mtu,
    impair: Impairment,
}

/// What the server thread is told while it runs: when to stop, and where to count the UD
/// datagrams it has taken (the client's credit).
struct Control {
    stop: mpsc::Receiver<()>,
    ud_taken: Arc<AtomicUsize>,
}

/// What the server thread reports.
struct Served {
    sends_ok: usize,
    ud_ok: usize,
    what: String,
    rc: QpCounters,
    overruns: u64,
}

/// What the client thread reports.
struct Driven {
    lines: Vec<String>,
    rc: QpCounters,
    overruns: u64,
}

/// Runs the demo. Needs root for the namespaces; says so otherwise.
pub fn run(cfg: &DemoConfig) -> anyhow::Result<DemoReport> {
    uroce::datapath::catch_interrupts();
    let mut report = DemoReport::default();
    let pair = veth_pair(&mut report.lines)?;
    if let Some(n) = &cfg.netem {
        let Some(pair) = &pair else {
            bail!("--netem needs the veth pair, which needs root");
        };
        let args: Vec<&str> = n.split_whitespace().collect();
        for i in 0..2 {
            pair.netem(i, &args).context("tc netem")?;
        }
    }
    if let (Some(p), true) = (&pair, cfg.capture) {
        // The UDP backend sends runs of packets as UDP GSO, which crosses a veth whole:
        // have the kernel cut them at the sending end, as a NIC puts them on a wire, so
        // the capture holds every frame (best effort: without ethtool it may hold 64 KiB
        // GSO packets, which do not decode as one RoCE frame).
        for i in 0..2 {
            let _ = std::process::Command::new("ip")
                .args(["netns", "exec", &p.ns[i], "ethtool", "-K", &p.ifaces[i]])
                .args(["tx-udp-segmentation", "off"])
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .status();
        }
    }
    let capture = match (&pair, cfg.capture) {
        (Some(p), true) => Some(
            // On the server's end, which then uses the UDP backend: AF_XDP sends bypass
            // the capture taps and XDP takes received RoCE frames before them, so only a
            // kernel-stack end sees both directions.
            crate::live_capture::Capture::start(Some(p.ns[1].clone()), p.ifaces[1].clone(), false)
                .context("capturing on the veth")?,
        ),
        _ => None,
    };
    let (n, size) = (cfg.messages.max(1), cfg.size.max(8));
    let plan = Plan {
        n,
        size,
        region: n * size as usize,
        ud_size: size.min(cfg.mtu.bytes()),
        mtu: cfg.mtu,
        impair: cfg.impair,
    };
    let (place_a, place_b) = places(&pair)?;
    let (ns_a, ns_b) = match &pair {
        Some(p) => (Some(p.ns[0].clone()), Some(p.ns[1].clone())),
        None => (None, None),
    };
    let server_choice = if capture.is_some() {
        BackendChoice::Udp
    } else {
        cfg.backend
    };
    let (to_client, from_server) = mpsc::channel::<Info>();
    let (to_server, from_client) = mpsc::channel::<Info>();
    let (stop_tx, stop_rx) = mpsc::channel::<()>();
    // UD datagrams the server has taken: the client keeps no more in flight than the
    // server's receive buffer holds (UD has no window of its own).
    let ud_taken = Arc::new(AtomicUsize::new(0));
    let (pa, pb) = (place_a.clone(), place_b.clone());
    let taken = ud_taken.clone();
    let server = std::thread::spawn(move || -> anyhow::Result<Served> {
        enter(ns_b.as_deref())?;
        serve(
            &plan,
            &pb,
            &pa,
            server_choice,
            to_client,
            from_client,
            Control {
                stop: stop_rx,
                ud_taken: taken,
            },
        )
    });
    let (pa, pb) = (place_a, place_b);
    let choice = cfg.backend;
    let client = std::thread::spawn(move || -> anyhow::Result<Driven> {
        enter(ns_a.as_deref())?;
        drive(&plan, &pa, &pb, choice, from_server, to_server, &ud_taken)
    });
    let client_result = client
        .join()
        .map_err(|_| anyhow!("the client thread panicked"));
    let _ = stop_tx.send(());
    let server_result = server
        .join()
        .map_err(|_| anyhow!("the server thread panicked"))?;
    report.lines.push(where_line(cfg, &pair));
    let client = client_result??;
    report.lines.extend(client.lines);
    let server = server_result?;
    report.lines.push(format!(
        "RC recovery: client {} retransmits, {} sequence NAKs, {} RNR NAKs, {} ACK timeouts and {} tail probes; server {} out-of-sequence and {} duplicate requests; frames dropped by the kernel for want of receive buffers: client {}, server {}",
        client.rc.retransmits,
        client.rc.packet_seq_err,
        client.rc.rnr_nak_received,
        client.rc.local_ack_timeout_err,
        client.rc.tail_probes,
        server.rc.out_of_sequence,
        server.rc.duplicate_request,
        client.overruns,
        server.overruns,
    ));
    report.rx_overruns = [client.overruns, server.overruns];
    if let Some(p) = &pair {
        if let (Ok(a), Ok(b)) = (p.drops(0), p.drops(1)) {
            report.path_drops = Some([a, b]);
            report.lines.push(format!(
                "frames the veth pair counted as dropped (ip -s link): client side {a}, server side {b}"
            ));
        }
    }
    report.client_rc = client.rc;
    report.server_rc = server.rc;
    report
        .lines
        .push(format!("server datapath: {}", server.what));
    report.lines.push(format!(
        "server verified {}/{n} SENDs and {}/{n} UD datagrams byte for byte",
        server.sends_ok, server.ud_ok
    ));
    if let Some(c) = capture {
        report.captured = c.stop().context("capture")?;
    }
    let lossy = cfg.netem.is_some() || cfg.impair.drop > 0.0;
    report.ok = server.sends_ok == n && (server.ud_ok == n || lossy && server.ud_ok > 0);
    drop(pair);
    Ok(report)
}

/// Two namespaces over veth where we may make them; else `None`, both ends on loopback
/// (said in `lines`).
fn veth_pair(lines: &mut Vec<String>) -> anyhow::Result<Option<VethPair>> {
    match netns::check_privileges() {
        Ok(()) => VethPair::create("demo", 9000)
            .map(Some)
            .context("making the veth pair"),
        Err(why) => {
            lines.push(format!("no network namespaces: {why:#}"));
            lines.push(
                "running both endpoints on loopback (127.0.0.1 and 127.0.0.2) instead".into(),
            );
            Ok(None)
        }
    }
}

/// Where the client and the server run: the veth's two ends, or two loopback addresses.
fn places(pair: &Option<VethPair>) -> anyhow::Result<(Place, Place)> {
    Ok(match pair {
        Some(p) => {
            let mac = |i| p.mac(i).context("reading the veth MAC");
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
    })
}

/// This thread into namespace `ns`, if any.
fn enter(ns: Option<&str>) -> anyhow::Result<()> {
    match ns {
        Some(ns) => netns::enter(ns).with_context(|| format!("entering {ns}")),
        None => Ok(()),
    }
}

/// The report's first line: where the two ends ran, and what was done to their path.
fn where_line(cfg: &DemoConfig, pair: &Option<VethPair>) -> String {
    let place = match pair {
        Some(p) => format!(
            "namespaces {} ({}) and {} ({}), veth MTU 9000",
            p.ns[0], p.addrs[0], p.ns[1], p.addrs[1]
        ),
        None => "loopback 127.0.0.1 and 127.0.0.2".to_string(),
    };
    let netem = cfg
        .netem
        .as_ref()
        .map(|n| format!(", netem {n}"))
        .unwrap_or_default();
    let impair = if cfg.impair.is_none() {
        String::new()
    } else {
        format!(
            ", each end dropping {:.1}% and reordering {:.1}% of what it receives",
            cfg.impair.drop * 100.0,
            cfg.impair.reorder * 100.0
        )
    };
    format!("{place}, path MTU {}{netem}{impair}", cfg.mtu.bytes())
}

/// The server: posts a receive per SEND and per UD datagram, and checks each one that
/// arrives against the pattern until the client is done.
fn serve(
    plan: &Plan,
    me: &Place,
    peer: &Place,
    choice: BackendChoice,
    to_client: mpsc::Sender<Info>,
    from_client: mpsc::Receiver<Info>,
    control: Control,
) -> anyhow::Result<Served> {
    let Control { stop, ud_taken } = control;
    let (n, size, ud_size) = (plan.n, plan.size, plan.ud_size);
    // The RC region, then n receive slots for the SENDs, then n for UD datagrams.
    let send_base = plan.region;
    let ud_base = plan.region + n * size as usize;
    let ud_slot = ud_size as usize + 40;
    let (mut s, what) = side(me, 2, ud_base + n * ud_slot, plan.impair, choice, plan.mtu)?;
    to_client.send(Info {
        rc_qpn: s.rc,
        ud_qpn: s.ud,
        addr: s.mr.addr,
        rkey: s.mr.rkey,
        atomic_addr: s.atomic.addr,
        atomic_rkey: s.atomic.rkey,
    })?;
    let theirs = from_client.recv()?;
    connect(&mut s, peer, theirs.rc_qpn, plan.mtu)?;
    for i in 0..n {
        let recv = |qp, wr_id, at: usize, length| {
            let sge = Sge {
                addr: s.mr.addr + at as u64,
                length,
                lkey: s.mr.lkey,
            };
            (qp, RecvWr { wr_id, sge })
        };
        for (qp, wr) in [
            recv(s.rc, i as u64, send_base + i * size as usize, size),
            recv(
                s.ud,
                (1 << 32) | i as u64,
                ud_base + i * ud_slot,
                ud_slot as u32,
            ),
        ] {
            s.ep.ctx.post_recv(qp, wr)?;
        }
    }
    let (mut sends_ok, mut ud_ok) = (0usize, 0usize);
    let mut want = vec![0u8; size as usize];
    let (mr, cq) = (s.mr, s.cq);
    let deadline = Instant::now() + PHASE_LIMIT * 6;
    s.ep.run_until(deadline, |ctx| {
        for wc in ctx.poll_cq(cq, 64) {
            if wc.wr_id >> 32 == 1 {
                ud_taken.fetch_add(1, Ordering::Relaxed);
            }
            let Some(k) = wc.imm.map(|v| v as usize) else {
                continue;
            };
            if wc.status != WcStatus::Success {
                continue;
            }
            let i = (wc.wr_id & 0xffff_ffff) as usize;
            let (at, len) = if wc.wr_id >> 32 == 0 {
                (send_base + i * size as usize, size)
            } else {
                (ud_base + i * ud_slot + 40, ud_size)
            };
            let want = &mut want[..len as usize];
            pattern(k, want);
            let ok = ctx.mr_bytes(&mr)[at..at + len as usize] == want[..];
            if wc.wr_id >> 32 == 0 {
                sends_ok += usize::from(ok && wc.byte_len == size);
            } else {
                ud_ok += usize::from(ok && wc.byte_len == ud_size + 40);
            }
        }
        stop.try_recv().is_ok()
    })?;
    if std::env::var_os("UROCE_DEBUG").is_some() {
        eprintln!(
            "server: {:?} {:?}",
            s.ep.ctx.counters(),
            s.ep.ctx.qp_counters(s.rc)
        );
    }
    Ok(Served {
        sends_ok,
        ud_ok,
        what,
        rc: s.ep.ctx.qp_counters(s.rc).unwrap_or_default(),
        overruns: s.ep.backend_mut().rx_overruns(),
    })
}

/// The client: RC WRITE, READ back and compare, SEND, FETCH_ADD, then UD datagrams.
fn drive(
    plan: &Plan,
    me: &Place,
    peer: &Place,
    choice: BackendChoice,
    from_server: mpsc::Receiver<Info>,
    to_server: mpsc::Sender<Info>,
    ud_taken: &AtomicUsize,
) -> anyhow::Result<Driven> {
    let (mut s, what) = side(me, 1, plan.region + 8, plan.impair, choice, plan.mtu)?;
    let theirs = from_server.recv()?;
    to_server.send(Info {
        rc_qpn: s.rc,
        ud_qpn: s.ud,
        addr: 0,
        rkey: 0,
        atomic_addr: 0,
        atomic_rkey: 0,
    })?;
    connect(&mut s, peer, theirs.rc_qpn, plan.mtu)?;
    let mut lines = vec![format!("client datapath: {what}")];
    rc_phases(&mut s, plan, &theirs, &mut lines)?;
    ud_phase(&mut s, plan, peer, &theirs, ud_taken, &mut lines)?;
    Ok(Driven {
        lines,
        rc: s.ep.ctx.qp_counters(s.rc).unwrap_or_default(),
        overruns: s.ep.backend_mut().rx_overruns(),
    })
}

/// The RC phases, each verified: WRITE then READ back, SEND with immediate (the server
/// checks), FETCH_ADD (the results add up).
fn rc_phases(
    s: &mut Side,
    plan: &Plan,
    peer: &Info,
    lines: &mut Vec<String>,
) -> anyhow::Result<()> {
    let (n, size, region) = (plan.n, plan.size, plan.region);
    let sz = size as usize;
    let (mr, lkey) = (s.mr, s.mr.lkey);
    let sge = |i: usize| Sge {
        addr: mr.addr + (i * sz) as u64,
        length: size,
        lkey,
    };
    let timed = |what: &str, d: Duration| {
        format!(
            "{what:<14} {n} x {size} B   {:>9.2} ms  {}",
            d.as_secs_f64() * 1e3,
            rate((n * sz) as u64, d)
        )
    };
    // RDMA WRITE n messages, then READ them back into a zeroed buffer and compare.
    for i in 0..n {
        pattern(i, &mut s.ep.ctx.mr_bytes_mut(&mr)[i * sz..(i + 1) * sz]);
    }
    let at = |i: usize| peer.addr + (i * sz) as u64;
    let writes = (0..n)
        .map(|i| {
            let op = SendOp::Write {
                remote_addr: at(i),
                rkey: peer.rkey,
            };
            (op, sge(i))
        })
        .collect();
    let d = run_phase(s, writes)?;
    lines.push(timed("RC RDMA WRITE", d));
    s.ep.ctx.mr_bytes_mut(&mr)[..n * sz].fill(0);
    let reads = (0..n)
        .map(|i| {
            let op = SendOp::Read {
                remote_addr: at(i),
                rkey: peer.rkey,
            };
            (op, sge(i))
        })
        .collect();
    let d = run_phase(s, reads)?;
    let mut want = vec![0u8; sz];
    for i in 0..n {
        pattern(i, &mut want);
        if s.ep.ctx.mr_bytes(&mr)[i * sz..(i + 1) * sz] != want[..] {
            bail!("RDMA READ of message {i} does not match what was written");
        }
    }
    lines.push(timed("RC RDMA READ", d) + "  (data verified: WRITE and READ)");
    // SEND with immediate n messages: the server checks each against the pattern.
    for i in 0..n {
        pattern(
            i + 1000,
            &mut s.ep.ctx.mr_bytes_mut(&mr)[i * sz..(i + 1) * sz],
        );
    }
    let sends = (0..n)
        .map(|i| (SendOp::SendWithImm((i + 1000) as u32), sge(i)))
        .collect();
    let d = run_phase(s, sends)?;
    lines.push(timed("RC SEND", d));
    // FETCH_ADD i+1 for i in 0..n, then check what the last one returned.
    let adds = (0..n)
        .map(|i| {
            let op = SendOp::FetchAdd {
                remote_addr: peer.atomic_addr,
                rkey: peer.atomic_rkey,
                add: i as u64 + 1,
            };
            let sge = Sge {
                addr: mr.addr + region as u64,
                length: 8,
                lkey,
            };
            (op, sge)
        })
        .collect();
    let d = run_phase(s, adds)?;
    // Each FETCH_ADD returned the counter before it; the last one saw 1 + 2 + ... + (n-1).
    let mut last = [0u8; 8];
    last.copy_from_slice(&s.ep.ctx.mr_bytes(&mr)[region..region + 8]);
    let want_sum = (n as u64 * (n as u64 - 1)) / 2;
    if u64::from_le_bytes(last) != want_sum {
        bail!(
            "atomics: the last FETCH_ADD returned {}, expected {want_sum}",
            u64::from_le_bytes(last)
        );
    }
    lines.push(format!(
        "RC FETCH_ADD   {n} x 8 B       {:>9.2} ms  {:.0} ops/s  (results verified)",
        d.as_secs_f64() * 1e3,
        n as f64 / d.as_secs_f64().max(1e-9)
    ));
    Ok(())
}

/// UD datagrams to the server's UD QP (some may be lost on a lossy path: UD is
/// unreliable; the server counts what arrived intact).
fn ud_phase(
    s: &mut Side,
    plan: &Plan,
    peer: &Place,
    theirs: &Info,
    ud_taken: &AtomicUsize,
    lines: &mut Vec<String>,
) -> anyhow::Result<()> {
    let (n, ud_size) = (plan.n, plan.ud_size);
    // No more datagrams in flight than the receiver's buffer holds, taking the server's
    // to be like ours (an unprivileged process's may hold a few dozen): what the server
    // has taken says how many may go. Datagrams a lossy path loses are written off when
    // the server takes nothing for a while.
    let window =
        s.ep.backend_mut()
            .rx_capacity()
            .map_or(n, |c| (c / u64::from(ud_size.max(1))).max(4) as usize);
    let (mut written_off, mut last_taken, mut since) = (0, 0, Instant::now());
    let sz = plan.size as usize;
    let mr = s.mr;
    for i in 0..n {
        pattern(
            i + 5000,
            &mut s.ep.ctx.mr_bytes_mut(&mr)[i * sz..i * sz + ud_size as usize],
        );
    }
    let t = Instant::now();
    let (ud, cq) = (s.ud, s.cq);
    let dest = Remote {
        ip: IpAddr::V4(peer.addr),
        mac: peer.mac,
    };
    let mut next = 0;
    let mut sent = 0;
    s.ep.run_until(t + PHASE_LIMIT, |ctx| {
        let taken = ud_taken.load(Ordering::Relaxed);
        if taken != last_taken {
            (last_taken, since) = (taken, Instant::now());
        } else if since.elapsed() > Duration::from_millis(20) {
            written_off = next - taken;
        }
        while next < n && next - (taken + written_off).min(next) < window {
            let wr = UdSendWr {
                wr_id: next as u64,
                dest,
                remote_qpn: theirs.ud_qpn,
                remote_qkey: QKEY,
                sge: Sge {
                    addr: mr.addr + (next * sz) as u64,
                    length: ud_size,
                    lkey: mr.lkey,
                },
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
    })?;
    // The time is that of the sends; the settle that lets the last datagrams land
    // is not part of it.
    let took = t.elapsed();
    let settle = Instant::now() + Duration::from_millis(200);
    s.ep.run_until(settle, |_| false)?;
    lines.push(format!(
        "UD SEND        {n} x {ud_size} B   {:>9.2} ms  sent",
        took.as_secs_f64() * 1e3
    ));
    Ok(())
}
