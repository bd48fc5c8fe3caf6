//! `uroce perf --threads N`: one event loop per thread, each with its own context, one QP
//! and its own backend. Over AF_XDP each loop owns one queue of the interface
//! ([`XdpBackend::open_per_queue`]; over veth a frame sent on queue k arrives on the
//! peer's queue k, so loop k talks to the peer's loop k). Over the UDP backend the kernel
//! hands each datagram to the loop owning its destination QP (SO_REUSEPORT and a steering
//! program, see [`UdpBackend::bind_steered`]). The application thread posts to the loops
//! and takes their completions through their queues ([`Worker`]).

use std::net::{IpAddr, TcpStream};
use std::time::Duration;

use anyhow::{anyhow, bail};

use super::exchange::{peer_stopped, read_json, send_json, Hello};
use super::setup::rc_resources;
use super::{Meter, PerfConfig, PerfOp, PerfResult};
use crate::backend::seed_of;
use crate::link::{local_link, peer_mac};
use uroce::datapath::event_loop::Endpoint;
use uroce::datapath::worker::{Idle, Worker};
use uroce::datapath::Backend;
use uroce::mem::Mr;
use uroce::verbs::{
    Context, CqId, RecvWr, Remote, RtrAttr, RtsAttr, SendOp, SendWr, Sge, WcStatus, WorkCompletion,
};

/// Messages in flight per loop.
const WINDOW: u64 = super::setup::WINDOW as u64;

type Boxed = Box<dyn Backend + Send>;

struct Lane {
    ctx: Context,
    cq: CqId,
    qpn: u32,
    mr: Mr,
    backend: Boxed,
}

/// The loops' datapath: AF_XDP with one queue per loop, else steered UDP sockets.
struct Lanes {
    lanes: Vec<Lane>,
    datapath: String,
    iface: String,
    mac: [u8; 6],
}

fn backends(
    cfg: &PerfConfig,
    local: IpAddr,
    n: u32,
) -> anyhow::Result<(Vec<Boxed>, String, String, [u8; 6])> {
    let link = local_link(cfg.iface.as_deref(), local)?;
    let iface = link.iface.clone();
    let (v, what) = match cfg.backend.strip_prefix(crate::backend::VIA_DAEMON) {
        // Through the daemon: each loop a process of the daemon's of its own.
        Some(kind) => {
            let mut v = Vec::new();
            let mut what = String::new();
            for k in 0..n {
                let (b, w) = crate::backend::open_daemon(&iface, kind)?;
                v.push(crate::backend::impaired(
                    b,
                    cfg.impair,
                    seed_of(local) ^ u64::from(k),
                ));
                what = w;
            }
            (v, format!("{what}, {n} loops on threads"))
        }
        None => {
            let choice = crate::backend::BackendChoice::parse(&cfg.backend)?;
            crate::backend::open_per_loop(choice, &iface, local, n, cfg.mtu, cfg.impair)?
        }
    };
    let mac = match v.first() {
        Some(b) => link.mac_for(&**b)?,
        None => bail!("{what}: no loop"),
    };
    Ok((v, what, iface, mac))
}

fn lanes(cfg: &PerfConfig, local: IpAddr, n: u32) -> anyhow::Result<Lanes> {
    if n > 64 {
        bail!("--threads {n} is above 64");
    }
    let (backends, datapath, iface, mac) = backends(cfg, local, n)?;
    let mut v = Vec::new();
    for (k, mut backend) in (0..n).zip(backends) {
        let seed = seed_of(local) ^ (u64::from(k) << 40);
        let mut ctx = cfg.traffic.context(&iface, mac, local, seed)?;
        ctx.set_qpn_space(16 * n + k, n);
        crate::backend::adopt_qpns(&mut ctx, &mut *backend, 1)?;
        let (cq, qpns, mr) = rc_resources(&mut ctx, 1, cfg.size)?;
        let qpn = qpns[0];
        v.push(Lane {
            ctx,
            cq,
            qpn,
            mr,
            backend,
        });
    }
    Ok(Lanes {
        lanes: v,
        datapath,
        iface,
        mac,
    })
}

fn hello(cfg: &PerfConfig, lanes: &[Lane], psn: u32) -> Hello {
    Hello {
        op: cfg.op,
        size: cfg.size,
        qpn: lanes[0].qpn,
        psn,
        rkey: lanes[0].mr.rkey,
        addr: lanes[0].mr.addr,
        qpns: lanes.iter().map(|l| l.qpn).collect(),
        threads: lanes.len() as u32,
        rkeys: lanes.iter().map(|l| l.mr.rkey).collect(),
        addrs: lanes.iter().map(|l| l.mr.addr).collect(),
        mtu: cfg.mtu.bytes(),
    }
}

/// Connects lane `k` to the peer's QP `k`; starts its loop.
fn start(
    l: Lanes,
    cfg: &PerfConfig,
    local: IpAddr,
    peer: IpAddr,
    theirs: &Hello,
    my_psn: u32,
) -> anyhow::Result<Vec<(Worker<Boxed>, u32, Mr)>> {
    let mut lanes = l.lanes;
    if theirs.qpns.len() != lanes.len() {
        bail!(
            "the peer has {} loops, this side {}",
            theirs.qpns.len(),
            lanes.len()
        );
    }
    let mac = peer_mac(&mut *lanes[0].backend, &l.iface, l.mac, local, peer)?;
    let mut out = Vec::new();
    for (k, mut l) in lanes.into_iter().enumerate() {
        let rtr = RtrAttr {
            remote: Remote { ip: peer, mac },
            dest_qpn: theirs.qpns[k],
            rq_psn: theirs.psn,
            path_mtu: super::exchange::agreed_mtu(cfg.mtu, theirs.mtu),
            max_dest_rd_atomic: 16,
            min_rnr_timer: 1,
        };
        l.ctx.modify_qp_rtr(l.qpn, rtr)?;
        l.ctx.modify_qp_rts(
            l.qpn,
            RtsAttr {
                sq_psn: my_psn,
                timeout: 12,
                ..RtsAttr::default()
            },
        )?;
        let w = Worker::spawn(
            Endpoint::new(l.ctx, l.backend),
            vec![l.cq],
            Idle::Sleep(Duration::from_micros(200)),
            4096,
        );
        out.push((w, l.qpn, l.mr));
    }
    Ok(out)
}

/// The server side: one loop per client loop.
pub(super) fn serve(
    cfg: &PerfConfig,
    tcp: &TcpStream,
    local: IpAddr,
    peer: IpAddr,
    theirs: &Hello,
) -> anyhow::Result<String> {
    let cfg = PerfConfig {
        op: theirs.op,
        size: theirs.size,
        threads: theirs.threads,
        ..cfg.clone()
    };
    if cfg.op == PerfOp::Raw {
        bail!("raw frames with --threads are not supported");
    }
    let lanes = lanes(&cfg, local, theirs.threads)?;
    let datapath = lanes.datapath.clone();
    send_json(tcp, &hello(&cfg, &lanes.lanes, 0x200))?;
    let workers = start(lanes, &cfg, local, peer, theirs, 0x200)?;
    let slot = cfg.size.max(8);
    let post_recv = |w: &Worker<Boxed>, qpn: u32, mr: Mr, i: u64| {
        let sge = Sge {
            addr: mr.addr + (i % WINDOW) * u64::from(slot),
            length: slot,
            lkey: mr.lkey,
        };
        let _ = w.post_recv(qpn, RecvWr { wr_id: i, sge });
    };
    if cfg.op == PerfOp::Send {
        for (w, qpn, mr) in &workers {
            for i in 0..WINDOW * 4 {
                post_recv(w, *qpn, *mr, i);
            }
        }
    }
    tcp.set_nonblocking(true)?;
    let mut received = 0u64;
    let mut wcs: Vec<WorkCompletion> = Vec::with_capacity(256);
    loop {
        for (w, qpn, mr) in &workers {
            wcs.clear();
            w.poll_cq(&mut wcs, 256);
            for wc in &wcs {
                if wc.status == WcStatus::Success {
                    received += 1;
                    post_recv(w, *qpn, *mr, wc.wr_id + WINDOW * 4);
                }
            }
        }
        if peer_stopped(tcp) || uroce::datapath::interrupted() {
            break;
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    for (w, _, _) in workers {
        let _ = w.shutdown();
    }
    Ok(format!(
        "served {:?} of {} B from {peer} over {datapath} ({received} receives)",
        cfg.op, cfg.size
    ))
}

/// The client side: messages go to the loops in turn, `WINDOW` in flight on each.
pub(super) fn client(
    cfg: &PerfConfig,
    tcp: &TcpStream,
    local: IpAddr,
    peer: IpAddr,
    progress: &mut dyn FnMut(&str),
) -> anyhow::Result<PerfResult> {
    if cfg.op == PerfOp::Raw || cfg.latency {
        bail!("--threads is for bandwidth (write, read, send)");
    }
    let lanes = lanes(cfg, local, cfg.threads)?;
    let datapath = lanes.datapath.clone();
    send_json(tcp, &hello(cfg, &lanes.lanes, 0x100))?;
    let theirs: Hello = read_json(tcp, "hello from the server")?;
    let workers = start(lanes, cfg, local, peer, &theirs, 0x100)?;
    let n = workers.len();
    let size = cfg.size;
    let slot = u64::from(size.max(8));
    let mut next = vec![0u64; n];
    let mut inflight = vec![0u64; n];
    let mut done = 0u64;
    let mut wcs: Vec<WorkCompletion> = Vec::with_capacity(256);
    let mut meter = Meter::start();
    let mut failure = None;
    'run: while meter.secs() < cfg.duration.as_secs_f64() && !uroce::datapath::interrupted() {
        for (k, (w, qpn, mr)) in workers.iter().enumerate() {
            while inflight[k] < WINDOW {
                let i = next[k] % WINDOW;
                let remote_addr = theirs.addrs.get(k).copied().unwrap_or(theirs.addr) + i * slot;
                let rkey = theirs.rkeys.get(k).copied().unwrap_or(theirs.rkey);
                let op = match cfg.op {
                    PerfOp::Read => SendOp::Read { remote_addr, rkey },
                    PerfOp::Send => SendOp::Send,
                    _ => SendOp::Write { remote_addr, rkey },
                };
                let wr = SendWr {
                    wr_id: next[k],
                    op,
                    sge: Sge {
                        addr: mr.addr + i * slot,
                        length: size,
                        lkey: mr.lkey,
                    },
                    signaled: true,
                    solicited: false,
                };
                if w.post_send(*qpn, wr).is_err() {
                    break; // the loop's queue is full: come back later
                }
                next[k] += 1;
                inflight[k] += 1;
            }
            wcs.clear();
            w.poll_cq(&mut wcs, 256);
            for wc in &wcs {
                if wc.status != WcStatus::Success {
                    failure = Some(anyhow!(
                        "loop {k}: operation {} completed with {}",
                        wc.wr_id,
                        wc.status.name()
                    ));
                    break 'run;
                }
                inflight[k] -= 1;
                done += 1;
            }
        }
        meter.tick(done, size, &format!("  ({n} loops)"), progress);
        std::thread::yield_now();
    }
    let secs = meter.secs();
    let mut sent = 0;
    let mut resent = 0;
    let mut probes = 0;
    for (w, qpn, _) in workers {
        let (ep, _) = w.shutdown();
        if let Some(c) = ep.ctx.qp_counters(qpn) {
            sent += c.packets_sent;
            resent += c.retransmits;
            probes += c.tail_probes;
        }
    }
    if let Some(f) = failure {
        return Err(f);
    }
    let op = format!("{:?}", cfg.op).to_lowercase();
    Ok(PerfResult {
        packets_sent: Some(sent),
        retransmits: Some(resent),
        tail_probes: Some(probes),
        ..PerfResult::measured(&op, size, done, secs, datapath)
    })
}
