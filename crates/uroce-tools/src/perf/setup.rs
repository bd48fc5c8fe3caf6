//! One event loop's resources for `uroce perf`: its datapath and context on the local
//! link, the CQ, the RC QPs and the region of message slots, our side of the exchange and
//! the connection of the QPs to the peer's.

use crate::backend::seed_of;
use std::net::{IpAddr, TcpStream};

use anyhow::bail;

use super::exchange::{send_json, Hello};
use super::PerfConfig;
use crate::backend::open_backend_lossy;
use crate::link::{local_link, peer_mac};
use uroce::datapath::event_loop::Endpoint;
use uroce::datapath::Backend;
use uroce::mem::Access;
use uroce::verbs::{Context, InitAttr, QpCaps, QpType, Remote, RtrAttr, RtsAttr};

pub(super) struct Setup {
    pub(super) ep: Endpoint<Box<dyn Backend + Send>>,
    /// The QPs; the first one carries raw mode's template.
    pub(super) qps: Vec<u32>,
    pub(super) cq: uroce::verbs::CqId,
    pub(super) mr: uroce::mem::Mr,
    pub(super) datapath: String,
    pub(super) iface: String,
    pub(super) local: IpAddr,
}

/// Messages in flight per QP (and message slots in the region).
pub(super) const WINDOW: usize = 32;

pub(super) fn setup(cfg: &PerfConfig, local: IpAddr) -> anyhow::Result<Setup> {
    // The UDP backend sends each source port's datagrams through a socket of its own:
    // with a port per QP (`--udp-sports 0`) a descriptor per QP, beyond the usual limit
    // of 1024; by default the QPs share a few ports.
    let link = local_link(cfg.iface.as_deref(), local)?;
    let iface = link.iface.clone();
    let (mut backend, datapath) =
        open_backend_lossy(&cfg.backend, cfg.mtu, local, &iface, cfg.impair)?;
    let udp = datapath.starts_with("UDP");
    let sports = cfg.traffic.udp_sports_for(udp);
    let sockets = match sports {
        0 => cfg.qps,
        n => cfg.qps.min(u32::from(n)),
    };
    let want = u64::from(sockets) + 256;
    let files = raise_open_files(want);
    if udp && files < want {
        bail!(
            "--qps {} over the UDP backend with a source port per QP needs a socket per QP: \
             the open-files limit is {files}, raise it to {want} (ulimit -n), share ports \
             (--udp-sports N) or use AF_XDP",
            cfg.qps
        );
    }
    let mac = link.mac_for(&*backend)?;
    let mut ctx = cfg.traffic.context(&iface, mac, local, seed_of(local))?;
    crate::backend::adopt_qpns(&mut ctx, &mut *backend, cfg.qps)?;
    ctx.set_udp_sports(sports)
        .map_err(|e| anyhow::anyhow!("sharing UDP source ports: {e}"))?;
    let (cq, qps, mr) = rc_resources(&mut ctx, cfg.qps, cfg.size)?;
    Ok(Setup {
        ep: Endpoint::new(ctx, backend),
        qps,
        cq,
        mr,
        datapath: datapath
            + &cfg.traffic.describe()
            + &match (cfg.traffic.udp_sports, sports) {
                (None, n) if n > 0 => format!(", {n} UDP source ports"),
                _ => String::new(),
            },
        iface,
        local,
    })
}

/// Raises the soft limit on open files (RLIMIT_NOFILE) towards `want`, as far as the hard
/// limit allows; returns the soft limit now in force.
fn raise_open_files(want: u64) -> u64 {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes the limits into `r`, a valid rlimit.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) } != 0 {
        return 0;
    }
    if r.rlim_cur < want {
        let raised = libc::rlimit {
            rlim_cur: want.min(r.rlim_max),
            rlim_max: r.rlim_max,
        };
        // SAFETY: setrlimit reads `raised`, a valid rlimit.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
            return raised.rlim_cur;
        }
    }
    r.rlim_cur
}

/// What one perf loop needs in `ctx`: a CQ, `qps` RC QPs in INIT on it, and a region
/// of `WINDOW` message slots that the peer may write and read.
pub(super) fn rc_resources(
    ctx: &mut Context,
    qps: u32,
    size: u32,
) -> anyhow::Result<(uroce::verbs::CqId, Vec<u32>, uroce::mem::Mr)> {
    let cq = ctx
        .create_cq(uroce::verbs::MAX_CQE)
        .expect("MAX_CQE is a valid CQ depth");
    let pd = ctx.alloc_pd();
    let caps = QpCaps {
        qp_type: QpType::Rc,
        send_cq: cq,
        recv_cq: cq,
        max_send_wr: 1024,
        max_recv_wr: 1024,
    };
    let mut v = Vec::new();
    for _ in 0..qps.max(1) {
        let qp = ctx.create_qp(pd, caps)?;
        ctx.modify_qp_init(qp, InitAttr::default())?;
        v.push(qp);
    }
    let all = Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ;
    let mr = ctx.reg_mr(pd, vec![0x5a; size.max(8) as usize * WINDOW], all)?;
    Ok((cq, v, mr))
}

/// Sends our side of the exchange: one JSON line.
pub(super) fn send_hello(
    tcp: &TcpStream,
    s: &Setup,
    cfg: &PerfConfig,
    psn: u32,
) -> anyhow::Result<()> {
    let mine = Hello {
        op: cfg.op,
        size: cfg.size,
        qpn: s.qps[0],
        qpns: s.qps.clone(),
        psn,
        rkey: s.mr.rkey,
        addr: s.mr.addr,
        threads: 1,
        rkeys: Vec::new(),
        addrs: Vec::new(),
        mtu: cfg.mtu.bytes(),
    };
    send_json(tcp, &mine)
}

pub(super) fn connect(
    s: &mut Setup,
    cfg: &PerfConfig,
    peer: IpAddr,
    hello: &Hello,
    my_psn: u32,
) -> anyhow::Result<()> {
    let my_mac = s.ep.ctx.config().mac;
    let remote = Remote {
        ip: peer,
        mac: peer_mac(s.ep.backend_mut(), &s.iface, my_mac, s.local, peer)?,
    };
    let theirs = if hello.qpns.is_empty() {
        vec![hello.qpn]
    } else {
        hello.qpns.clone()
    };
    if theirs.len() != s.qps.len() {
        bail!(
            "the peer has {} QPs, this side {}",
            theirs.len(),
            s.qps.len()
        );
    }
    for (&qp, &dest_qpn) in s.qps.iter().zip(&theirs) {
        let rtr = RtrAttr {
            remote,
            dest_qpn,
            rq_psn: hello.psn,
            path_mtu: super::exchange::agreed_mtu(cfg.mtu, hello.mtu),
            max_dest_rd_atomic: 16,
            min_rnr_timer: 1,
        };
        s.ep.ctx.modify_qp_rtr(qp, rtr)?;
        s.ep.ctx.modify_qp_rts(
            qp,
            RtsAttr {
                sq_psn: my_psn,
                timeout: 12,
                ..RtsAttr::default()
            },
        )?;
    }
    Ok(())
}
