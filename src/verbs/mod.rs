//! The verbs API: a [`Context`] owns protection domains, memory regions, completion
//! queues and queue pairs, and is driven sans-IO like quinn-proto's endpoint: the caller
//! passes frames in ([`Context::handle_frame`]), takes frames out
//! ([`Context::poll_transmit`]) and keeps time ([`Context::poll_timeout`],
//! [`Context::handle_timeout`]). Nothing in here touches a socket or reads a clock.

mod types;

use std::collections::{BTreeMap, VecDeque};
use std::net::IpAddr;
use std::time::Instant;

pub use types::*;

use crate::mem::{Access, Memory, Mr, PdId};
use crate::transport::rc::{Io, QpCounters, RcQp};
use crate::wire::{self, EthernetRepr, FrameRepr, IpRepr, Ipv4Repr, Ipv6Repr, UdpRepr, WireError};

/// A completion queue handle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct CqId(pub u32);

/// The local end: addresses, and the seed that makes keys and anything random repeatable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ContextConfig {
    /// Our MAC.
    pub mac: [u8; 6],
    /// Our IP address (its GID is `::ffff:a.b.c.d` for IPv4).
    pub ip: IpAddr,
    /// Seed of the key generator.
    pub seed: u64,
    /// UDP source ports are `udp_sport_base | hash(QPN) & 0x3fff` (ECMP entropy, fixed per QP).
    pub udp_sport_base: u16,
    /// IP TOS / traffic class of every packet (DSCP and ECN).
    pub tos: u8,
}

/// Capacities of a new QP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpCaps {
    /// CQ for send completions.
    pub send_cq: CqId,
    /// CQ for receive completions.
    pub recv_cq: CqId,
    /// Send queue depth.
    pub max_send_wr: usize,
    /// Receive queue depth.
    pub max_recv_wr: usize,
}

/// Frame-level counters of a context.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ContextCounters {
    /// Frames handed to [`Context::handle_frame`].
    pub rx_frames: u64,
    /// Frames dropped because the ICRC did not verify.
    pub rx_bad_icrc: u64,
    /// Frames dropped as malformed (every other [`WireError`]).
    pub rx_malformed: u64,
    /// Frames for a QP that does not exist.
    pub rx_unknown_qp: u64,
    /// Frames for another IP address.
    pub rx_not_for_us: u64,
    /// Frames produced by [`Context::poll_transmit`].
    pub tx_frames: u64,
}

/// One RDMA device context: everything a process has open on it.
pub struct Context {
    cfg: ContextConfig,
    mem: Memory,
    cqs: Vec<VecDeque<WorkCompletion>>,
    qps: BTreeMap<u32, RcQp>,
    next_qpn: u32,
    rr_cursor: u32,
    ip_ident: u16,
    wcs: Vec<(CqId, WorkCompletion)>,
    counters: ContextCounters,
}

impl Context {
    /// A context with nothing open.
    pub fn new(cfg: ContextConfig) -> Self {
        Self {
            cfg,
            mem: Memory::new(cfg.seed),
            cqs: Vec::new(),
            qps: BTreeMap::new(),
            next_qpn: 0x11,
            rr_cursor: 0,
            ip_ident: 0,
            wcs: Vec::new(),
            counters: ContextCounters::default(),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &ContextConfig {
        &self.cfg
    }

    /// Frame-level counters.
    pub fn counters(&self) -> ContextCounters {
        self.counters
    }

    /// Allocates a protection domain (ibv_alloc_pd).
    pub fn alloc_pd(&mut self) -> PdId {
        self.mem.alloc_pd()
    }

    /// Registers `data` as a memory region (ibv_reg_mr).
    pub fn reg_mr(&mut self, pd: PdId, data: Vec<u8>, access: Access) -> Result<Mr, VerbsError> {
        Ok(self.mem.register(pd, data, access)?)
    }

    /// Deregisters a region (ibv_dereg_mr); its keys stop working and the bytes come back.
    pub fn dereg_mr(&mut self, mr: &Mr) -> Option<Vec<u8>> {
        self.mem.deregister(mr.lkey)
    }

    /// The bytes of a region.
    pub fn mr_bytes(&self, mr: &Mr) -> &[u8] {
        self.mem.bytes(mr.lkey).unwrap_or(&[])
    }

    /// The bytes of a region, writable.
    pub fn mr_bytes_mut(&mut self, mr: &Mr) -> &mut [u8] {
        self.mem.bytes_mut(mr.lkey).unwrap_or(&mut [])
    }

    /// Creates a completion queue (ibv_create_cq).
    pub fn create_cq(&mut self) -> CqId {
        self.cqs.push(VecDeque::new());
        CqId(self.cqs.len() as u32 - 1)
    }

    /// Takes up to `max` completions, oldest first (ibv_poll_cq).
    pub fn poll_cq(&mut self, cq: CqId, max: usize) -> Vec<WorkCompletion> {
        let Some(q) = self.cqs.get_mut(cq.0 as usize) else {
            return Vec::new();
        };
        let n = max.min(q.len());
        q.drain(..n).collect()
    }

    /// Creates an RC QP in RESET (ibv_create_qp); returns its QPN.
    pub fn create_qp(&mut self, pd: PdId, caps: QpCaps) -> Result<u32, VerbsError> {
        if !self.mem.pd_exists(pd) {
            return Err(crate::mem::RegError::NoSuchPd.into());
        }
        for cq in [caps.send_cq, caps.recv_cq] {
            if cq.0 as usize >= self.cqs.len() {
                return Err(VerbsError::NoSuchCq);
            }
        }
        let qpn = self.next_qpn;
        self.next_qpn = (self.next_qpn + 1) & 0xff_ffff;
        self.qps.insert(
            qpn,
            RcQp::new(
                qpn,
                pd,
                caps.send_cq,
                caps.recv_cq,
                caps.max_send_wr,
                caps.max_recv_wr,
            ),
        );
        Ok(qpn)
    }

    fn qp(&mut self, qpn: u32) -> Result<&mut RcQp, VerbsError> {
        self.qps.get_mut(&qpn).ok_or(VerbsError::NoSuchQp(qpn))
    }

    /// RESET → INIT.
    pub fn modify_qp_init(&mut self, qpn: u32, a: InitAttr) -> Result<(), VerbsError> {
        self.qp(qpn)?.modify_init(a)
    }

    /// INIT → RTR.
    pub fn modify_qp_rtr(&mut self, qpn: u32, a: RtrAttr) -> Result<(), VerbsError> {
        if a.remote.ip.is_ipv4() != self.cfg.ip.is_ipv4() {
            return Err(VerbsError::InvalidWr("remote and local IP versions differ"));
        }
        self.qp(qpn)?.modify_rtr(a)
    }

    /// RTR → RTS.
    pub fn modify_qp_rts(&mut self, qpn: u32, a: RtsAttr) -> Result<(), VerbsError> {
        self.qp(qpn)?.modify_rts(a)
    }

    /// Any state → ERR: outstanding work requests complete with WR_FLUSH_ERR.
    pub fn modify_qp_err(&mut self, qpn: u32, now: Instant) -> Result<(), VerbsError> {
        let qp = self.qps.get_mut(&qpn).ok_or(VerbsError::NoSuchQp(qpn))?;
        let mut io = Io {
            now,
            mem: &mut self.mem,
            wcs: &mut self.wcs,
        };
        qp.enter_err(&mut io);
        self.route_completions();
        Ok(())
    }

    /// The QP's state.
    pub fn qp_state(&self, qpn: u32) -> Option<QpState> {
        self.qps.get(&qpn).map(|q| q.state)
    }

    /// The QP's counters.
    pub fn qp_counters(&self, qpn: u32) -> Option<QpCounters> {
        self.qps.get(&qpn).map(|q| q.counters)
    }

    /// Posts a send work request (ibv_post_send).
    pub fn post_send(&mut self, qpn: u32, wr: SendWr) -> Result<(), VerbsError> {
        let qp = self.qps.get_mut(&qpn).ok_or(VerbsError::NoSuchQp(qpn))?;
        qp.post_send(&self.mem, wr)
    }

    /// Posts a receive work request (ibv_post_recv).
    pub fn post_recv(&mut self, qpn: u32, wr: RecvWr) -> Result<(), VerbsError> {
        let qp = self.qps.get_mut(&qpn).ok_or(VerbsError::NoSuchQp(qpn))?;
        qp.post_recv(&self.mem, wr)
    }

    fn route_completions(&mut self) {
        for (cq, wc) in self.wcs.drain(..) {
            if let Some(q) = self.cqs.get_mut(cq.0 as usize) {
                q.push_back(wc);
            }
        }
    }

    /// Takes one received Ethernet frame. Anything malformed, corrupt or not for us is
    /// counted and dropped; the error is returned for the caller's logs.
    pub fn handle_frame(&mut self, now: Instant, frame: &[u8]) -> Result<(), WireError> {
        self.counters.rx_frames += 1;
        let p = match wire::parse(frame) {
            Ok(p) => p,
            Err(e) => {
                if matches!(e, WireError::BadIcrc { .. }) {
                    self.counters.rx_bad_icrc += 1;
                } else {
                    self.counters.rx_malformed += 1;
                }
                return Err(e);
            }
        };
        if p.ip.dst() != self.cfg.ip {
            self.counters.rx_not_for_us += 1;
            return Ok(());
        }
        let Some(qp) = self.qps.get_mut(&p.bth.dest_qp) else {
            self.counters.rx_unknown_qp += 1;
            return Ok(());
        };
        let mut io = Io {
            now,
            mem: &mut self.mem,
            wcs: &mut self.wcs,
        };
        qp.on_packet(&mut io, &p);
        self.route_completions();
        Ok(())
    }

    /// Writes the next frame to send into `buf` and returns its length; QPs take turns.
    /// `buf` must hold a full frame (4096 + 128 bytes is always enough).
    pub fn poll_transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<usize> {
        let qpns: Vec<u32> = self
            .qps
            .range(self.rr_cursor..)
            .chain(self.qps.range(..self.rr_cursor))
            .map(|(k, _)| *k)
            .collect();
        for qpn in qpns {
            let Some(qp) = self.qps.get_mut(&qpn) else {
                continue;
            };
            let mut io = Io {
                now,
                mem: &mut self.mem,
                wcs: &mut self.wcs,
            };
            let Some(pkt) = qp.next_packet(&mut io) else {
                self.route_completions();
                continue;
            };
            let Some(path) = qp.path else { continue };
            self.route_completions();
            self.rr_cursor = qpn.wrapping_add(1);
            let ip = match (self.cfg.ip, path.remote.ip) {
                (IpAddr::V4(s), IpAddr::V4(d)) => {
                    let mut r = Ipv4Repr::new(s, d, self.cfg.tos);
                    self.ip_ident = self.ip_ident.wrapping_add(1);
                    r.ident = self.ip_ident;
                    IpRepr::V4(r)
                }
                (IpAddr::V6(s), IpAddr::V6(d)) => IpRepr::V6(Ipv6Repr {
                    src: s,
                    dst: d,
                    traffic_class: self.cfg.tos,
                    flow_label: 0,
                    next_header: 17,
                    hop_limit: 64,
                }),
                _ => continue,
            };
            let repr = FrameRepr {
                eth: Some(EthernetRepr {
                    dst: path.remote.mac,
                    src: self.cfg.mac,
                    vlan: None,
                    ethertype: ip.ethertype(),
                }),
                ip,
                udp: UdpRepr {
                    src_port: udp_source_port(self.cfg.udp_sport_base, qpn),
                    dst_port: wire::ROCEV2_UDP_PORT,
                    checksum: 0,
                },
                bth: pkt.bth,
                ext: pkt.ext,
            };
            let mem = &self.mem;
            let len = pkt.payload.map_or(0, |s| s.len);
            let n = repr
                .emit_with(len, buf, |dst| match pkt.payload {
                    Some(s) if mem.read(s).len() == dst.len() => dst.copy_from_slice(mem.read(s)),
                    _ => dst.fill(0), // the region went away under a queued response
                })
                .ok()?;
            self.counters.tx_frames += 1;
            return Some(n);
        }
        None
    }

    /// The earliest time [`Context::handle_timeout`] has work to do.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.qps.values().filter_map(|q| q.poll_timeout()).min()
    }

    /// Runs the timers that are due at `now`.
    pub fn handle_timeout(&mut self, now: Instant) {
        for qp in self.qps.values_mut() {
            if qp.poll_timeout().is_some_and(|t| t <= now) {
                let mut io = Io {
                    now,
                    mem: &mut self.mem,
                    wcs: &mut self.wcs,
                };
                qp.on_timeout(&mut io);
            }
        }
        self.route_completions();
    }
}

/// The UDP source port of a QP: fixed for its life, spread for ECMP (IBTA A17.3.1).
pub fn udp_source_port(base: u16, qpn: u32) -> u16 {
    let h = qpn.wrapping_mul(0x9e37_79b1) >> 18;
    base | (h as u16 & 0x3fff)
}
