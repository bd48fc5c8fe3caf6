//! The verbs API: a [`Context`] owns protection domains, memory regions, completion
//! queues and queue pairs, and is driven sans-IO like quinn-proto's endpoint: the caller
//! passes frames in ([`Context::handle_frame`]), takes frames out
//! ([`Context::poll_transmit`]) and keeps time ([`Context::poll_timeout`],
//! [`Context::handle_timeout`]). Nothing in here touches a socket or reads a clock.

#![forbid(unsafe_code)]

mod qp;

use std::collections::{BTreeMap, VecDeque};
use std::net::IpAddr;
use std::time::Instant;

pub use crate::transport::{
    ack_timeout, rnr_timer_us, CqId, InitAttr, Mtu, QpCaps, QpState, QpType, RecvWr, Remote,
    RtrAttr, RtsAttr, SendOp, SendWr, Sge, UdSendWr, VerbsError, WcOpcode, WcStatus,
    WorkCompletion,
};

use std::time::Duration;

use qp::Qp;

use crate::congestion::{dcqcn, NotificationPoint, ReactionPoint, DEFAULT_CNP_DSCP};
use crate::endpoint::{Received, Transmit};
use crate::mem::{Access, Memory, Mr, PdId};
use crate::transport::{Io, OutPacket, QpCounters};
use crate::wire::{self, cnp, DatagramRepr, ExtHeaders, FrameRepr, Opcode, RocePacket, WireError};

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

/// Frame-level counters of a context.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ContextCounters {
    /// Packets handed to [`Context::handle_frame`] or [`Context::handle_datagram`].
    pub rx_frames: u64,
    /// Frames dropped because the ICRC did not verify.
    pub rx_bad_icrc: u64,
    /// Frames dropped as malformed (every other [`WireError`]).
    pub rx_malformed: u64,
    /// Frames for a QP that does not exist.
    pub rx_unknown_qp: u64,
    /// Frames for another IP address.
    pub rx_not_for_us: u64,
    /// Packets produced by [`Context::poll_transmit`].
    pub tx_frames: u64,
    /// CNPs received for a QP that does not exist.
    pub rx_cnp_unknown_qp: u64,
}

/// A CNP waiting to be sent.
#[derive(Debug, Clone, Copy)]
struct CnpJob {
    /// The QP whose flow was marked (ours: its UDP source port is used).
    from_qpn: u32,
    /// The sender's QP, which the CNP names.
    dest_qp: u32,
    pkey: u16,
    to: Remote,
}

/// One RDMA device context: everything a process has open on it.
pub struct Context {
    cfg: ContextConfig,
    mem: Memory,
    cqs: Vec<VecDeque<WorkCompletion>>,
    qps: BTreeMap<u32, Qp>,
    next_qpn: u32,
    qpn_stride: u32,
    np: NotificationPoint,
    cnp_dscp: u8,
    cnps: VecDeque<CnpJob>,
    /// DCQCN parameters, when on.
    dcqcn: Option<dcqcn::Params>,
    /// QPs whose packets the rate limiter held back in the last `poll_transmit`.
    held: Vec<u32>,
    rr_cursor: u32,
    /// Start of DCQCN rate state for QPs created after `enable_dcqcn`.
    epoch: Instant,
    wcs: Vec<(CqId, WorkCompletion)>,
    counters: ContextCounters,
}

impl Context {
    /// A context with nothing open; `now` starts its clock (DCQCN's rate state).
    pub fn new(cfg: ContextConfig, now: Instant) -> Self {
        Self {
            cfg,
            mem: Memory::new(cfg.seed),
            cqs: Vec::new(),
            qps: BTreeMap::new(),
            next_qpn: 0x11,
            qpn_stride: 1,
            np: NotificationPoint::default(),
            cnp_dscp: DEFAULT_CNP_DSCP,
            cnps: VecDeque::new(),
            dcqcn: None,
            held: Vec::new(),
            rr_cursor: 0,
            epoch: now,
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

    /// Like [`Context::poll_cq`], appending to `out` (no allocation once `out` has room):
    /// for loops that poll per packet.
    pub fn poll_cq_into(&mut self, cq: CqId, max: usize, out: &mut Vec<WorkCompletion>) -> usize {
        let Some(q) = self.cqs.get_mut(cq.0 as usize) else {
            return 0;
        };
        let n = max.min(q.len());
        out.extend(q.drain(..n));
        n
    }

    /// Makes the QPs created from now on take the numbers `first`, `first + stride`, ...
    /// (modulo 2^24): with one context per event loop, a QPN then says which loop owns
    /// it, as a NIC steers by destination QP.
    pub fn set_qpn_space(&mut self, first: u32, stride: u32) {
        self.next_qpn = first & 0xff_ffff;
        self.qpn_stride = stride.max(1);
    }

    /// The QPNs of every QP.
    pub fn qpns(&self) -> impl Iterator<Item = u32> + '_ {
        self.qps.keys().copied()
    }

    /// Creates a QP in RESET (ibv_create_qp); returns its QPN. A `Gsi` QP is QP1.
    pub fn create_qp(&mut self, pd: PdId, caps: QpCaps) -> Result<u32, VerbsError> {
        if !self.mem.pd_exists(pd) {
            return Err(crate::mem::RegError::NoSuchPd.into());
        }
        for cq in [caps.send_cq, caps.recv_cq] {
            if cq.0 as usize >= self.cqs.len() {
                return Err(VerbsError::NoSuchCq);
            }
        }
        let qpn = if caps.qp_type == QpType::Gsi {
            if self.qps.contains_key(&1) {
                return Err(VerbsError::InvalidWr("QP1 (GSI) already exists"));
            }
            1
        } else {
            let q = self.next_qpn;
            self.next_qpn = (self.next_qpn + self.qpn_stride) & 0xff_ffff;
            q
        };
        let mut rp = ReactionPoint::default();
        if let Some(p) = self.dcqcn {
            rp.dcqcn = Some(dcqcn::ReactionPoint::new(p, self.epoch));
        }
        self.qps.insert(qpn, Qp::new(qpn, pd, &caps, rp));
        Ok(qpn)
    }

    /// Turns DCQCN on for every QP, present and future: data packets carry ECT(0), the
    /// notification point follows `min_time_between_cnps` and `cnp_dscp`, and each QP's
    /// packets wait for its reaction point's rate. `now` starts the rate state.
    pub fn enable_dcqcn(&mut self, p: dcqcn::Params, now: Instant) {
        self.dcqcn = Some(p);
        self.epoch = now;
        self.np = NotificationPoint::new(p.min_time_between_cnps);
        self.cnp_dscp = p.cnp_dscp;
        self.cfg.tos = (self.cfg.tos & !0x03) | 0x02;
        for qp in self.qps.values_mut() {
            qp.rp.dcqcn = Some(dcqcn::ReactionPoint::new(p, now));
        }
    }

    /// Sets the notification point's minimum interval between CNPs of one QP.
    pub fn set_cnp_interval(&mut self, interval: Duration) {
        self.np = NotificationPoint::new(interval);
    }

    /// The reaction point of a QP: the CNPs it received.
    pub fn reaction_point(&self, qpn: u32) -> Option<&ReactionPoint> {
        self.qps.get(&qpn).map(|q| &q.rp)
    }

    fn qp(&mut self, qpn: u32) -> Result<&mut Qp, VerbsError> {
        self.qps.get_mut(&qpn).ok_or(VerbsError::NoSuchQp(qpn))
    }

    /// RESET → INIT.
    pub fn modify_qp_init(&mut self, qpn: u32, a: InitAttr) -> Result<(), VerbsError> {
        self.qp(qpn)?.modify_init(&a)
    }

    /// INIT → RTR for a connected QP (RC, UC).
    pub fn modify_qp_rtr(&mut self, qpn: u32, a: RtrAttr) -> Result<(), VerbsError> {
        if a.remote.ip.is_ipv4() != self.cfg.ip.is_ipv4() {
            return Err(VerbsError::InvalidWr("remote and local IP versions differ"));
        }
        self.qp(qpn)?.modify_rtr(&a)
    }

    /// INIT → RTR for a UD QP; `mtu` limits the datagrams it sends.
    pub fn modify_qp_rtr_ud(&mut self, qpn: u32, mtu: Mtu) -> Result<(), VerbsError> {
        self.qp(qpn)?.modify_rtr_ud(mtu)
    }

    /// RTR → RTS.
    pub fn modify_qp_rts(&mut self, qpn: u32, a: RtsAttr) -> Result<(), VerbsError> {
        self.qp(qpn)?.modify_rts(&a)
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
        self.qps.get(&qpn).map(|q| q.state())
    }

    /// The QP's counters.
    pub fn qp_counters(&self, qpn: u32) -> Option<QpCounters> {
        let qp = self.qps.get(&qpn)?;
        let mut c = *qp.counters();
        if let Some(rp) = &qp.rp.dcqcn {
            c.rp_cnp_handled = rp.counters().rp_cnp_handled;
            c.rp_cnp_ignored = rp.counters().rp_cnp_ignored;
        }
        Some(c)
    }

    /// Posts a send work request on an RC or UC QP (ibv_post_send).
    pub fn post_send(&mut self, qpn: u32, wr: SendWr) -> Result<(), VerbsError> {
        let qp = self.qps.get_mut(&qpn).ok_or(VerbsError::NoSuchQp(qpn))?;
        qp.post_send(&self.mem, wr)
    }

    /// Posts a datagram on a UD QP (ibv_post_send with an address handle).
    pub fn post_send_ud(&mut self, qpn: u32, wr: UdSendWr) -> Result<(), VerbsError> {
        if wr.dest.ip.is_ipv4() != self.cfg.ip.is_ipv4() {
            return Err(VerbsError::InvalidWr("remote and local IP versions differ"));
        }
        let qp = self.qps.get_mut(&qpn).ok_or(VerbsError::NoSuchQp(qpn))?;
        qp.post_send_ud(&self.mem, wr)
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

    /// Takes one received Ethernet frame (AF_XDP, a simulated link). Anything malformed,
    /// corrupt or not for us is counted and dropped; the error is returned for the
    /// caller's logs.
    pub fn handle_frame(&mut self, now: Instant, frame: &[u8]) -> Result<(), WireError> {
        self.counters.rx_frames += 1;
        match wire::parse(frame) {
            Ok(p) => self.handle_packet(now, &p),
            Err(e) => Err(self.count_bad(e)),
        }
    }

    /// Takes one received UDP payload (BTH to ICRC) with the IP and UDP headers it came
    /// in, as a UDP socket reports them; the ICRC is verified over those headers.
    /// Counted and dropped like [`Context::handle_frame`].
    pub fn handle_datagram(
        &mut self,
        now: Instant,
        datagram: &DatagramRepr,
        roce: &[u8],
    ) -> Result<(), WireError> {
        self.counters.rx_frames += 1;
        let parsed = datagram.header_bytes(roce.len()).and_then(|h| {
            wire::parse_datagram(datagram, &h, roce).map(|p| self.handle_packet(now, &p))
        });
        match parsed {
            Ok(r) => r,
            Err(e) => Err(self.count_bad(e)),
        }
    }

    /// Takes a received packet the way a backend hands it over.
    pub fn handle_received(&mut self, now: Instant, r: Received<'_>) -> Result<(), WireError> {
        match r {
            Received::Frame(f) => self.handle_frame(now, f),
            Received::Datagram { datagram, roce } => self.handle_datagram(now, datagram, roce),
        }
    }

    fn count_bad(&mut self, e: WireError) -> WireError {
        if matches!(e, WireError::BadIcrc { .. }) {
            self.counters.rx_bad_icrc += 1;
        } else {
            self.counters.rx_malformed += 1;
        }
        e
    }

    /// A packet whose ICRC verified: to its QP (or the reaction point, for a CNP).
    fn handle_packet(&mut self, now: Instant, p: &RocePacket<'_>) -> Result<(), WireError> {
        if p.ip.dst() != self.cfg.ip {
            self.counters.rx_not_for_us += 1;
            return Ok(());
        }
        let qpn = p.bth.dest_qp;
        if p.bth.opcode == Opcode::Cnp {
            // A CNP names the QP whose flow was marked: hand it to that QP's reaction point.
            match self.qps.get_mut(&qpn) {
                Some(qp) => {
                    qp.counters_mut().rp_cnp_handled += 1;
                    qp.rp.on_cnp(now);
                }
                None => self.counters.rx_cnp_unknown_qp += 1,
            }
            return Ok(());
        }
        let Some(qp) = self.qps.get_mut(&qpn) else {
            self.counters.rx_unknown_qp += 1;
            return Ok(());
        };
        if p.ip.ecn() == 3 {
            // Notification point: CE seen; at most one CNP per QP per interval.
            qp.counters_mut().np_ecn_marked_roce_packets += 1;
            if self.np.on_ce(qpn, now) {
                qp.counters_mut().np_cnp_sent += 1;
                self.cnps.push_back(CnpJob {
                    from_qpn: qpn,
                    dest_qp: qp.peer_qpn(p),
                    pkey: p.bth.pkey,
                    to: Remote {
                        ip: p.ip.src(),
                        mac: p.eth.map_or([0; 6], |e| e.src),
                    },
                });
            }
        }
        let mut io = Io {
            now,
            mem: &mut self.mem,
            wcs: &mut self.wcs,
        };
        qp.on_packet(&mut io, p);
        self.route_completions();
        Ok(())
    }

    /// Writes the RoCE part (BTH to ICRC) of the next datagram to send at the start of
    /// `buf` and says where it goes: CNPs first, then the QPs in turn. `buf` must hold a
    /// full packet (4096 + 128 bytes is always enough).
    pub fn poll_transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<Transmit> {
        while let Some(job) = self.cnps.pop_front() {
            let pkt = OutPacket {
                bth: cnp::bth(job.dest_qp, job.pkey),
                ext: ExtHeaders::default(),
                payload: None,
                to: job.to,
            };
            let tos = self.cnp_dscp << 2;
            if let Some(t) = self.emit(job.from_qpn, &pkt, tos, buf) {
                return Some(t);
            }
        }
        self.held.clear();
        let mut cursor = self.rr_cursor;
        for _ in 0..self.qps.len() {
            // QPs take turns, starting after the one that sent last (no allocation).
            let next = self
                .qps
                .range(cursor..)
                .next()
                .or_else(|| self.qps.iter().next());
            let Some((&qpn, _)) = next else { break };
            cursor = qpn.wrapping_add(1);
            let Some(qp) = self.qps.get_mut(&qpn) else {
                continue;
            };
            if !qp.rp.can_send(now) {
                self.held.push(qpn);
                continue;
            }
            let mut io = Io {
                now,
                mem: &mut self.mem,
                wcs: &mut self.wcs,
            };
            let pkt = qp.next_packet(&mut io);
            self.route_completions();
            let Some(pkt) = pkt else { continue };
            self.rr_cursor = cursor;
            let tos = self.cfg.tos;
            if let Some(t) = self.emit(qpn, &pkt, tos, buf) {
                if let Some(qp) = self.qps.get_mut(&qpn) {
                    qp.rp.on_sent(now, t.frame_len());
                }
                return Some(t);
            }
        }
        None
    }

    /// Writes the next whole Ethernet frame to send into `buf` (from this context's MAC)
    /// and returns its length: [`Context::poll_transmit`] with the link headers in front,
    /// for simulated links, tests and tools that move frames.
    pub fn poll_frame(&mut self, now: Instant, buf: &mut [u8]) -> Option<usize> {
        let at = wire::ethernet::HEADER_LEN + wire::datagram::roce_headers_len(self.cfg.ip);
        let t = self.poll_transmit(now, buf.get_mut(at..)?)?;
        debug_assert_eq!(t.link_headers_len(), at);
        t.emit_link_headers(self.cfg.mac, &mut buf[..at]).ok()?;
        Some(at + t.len)
    }

    /// Builds the RoCE part of `pkt` from QP `qpn` into `buf`.
    fn emit(&mut self, qpn: u32, pkt: &OutPacket, tos: u8, buf: &mut [u8]) -> Option<Transmit> {
        let sport = udp_source_port(self.cfg.udp_sport_base, qpn);
        let datagram = DatagramRepr::roce(self.cfg.ip, pkt.to.ip, sport, tos)?;
        let repr = FrameRepr {
            eth: None,
            ip: datagram.ip,
            udp: datagram.udp,
            bth: pkt.bth,
            ext: pkt.ext,
        };
        let mem = &self.mem;
        let len = pkt.payload.map_or(0, |s| s.len);
        let n = repr
            .emit_roce_with(len, buf, |dst| match pkt.payload {
                Some(s) => match mem.read(s) {
                    Some(src) if src.len() == dst.len() => dst.copy_from_slice(src),
                    _ => dst.fill(0), // the region went away under a queued response
                },
                _ => dst.fill(0), // the region went away under a queued response
            })
            .ok()?;
        self.counters.tx_frames += 1;
        Some(Transmit {
            datagram,
            dst_mac: pkt.to.mac,
            len: n,
        })
    }

    /// The earliest time [`Context::handle_timeout`] has work to do.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let qps = self.qps.values().filter_map(|q| q.poll_timeout());
        let rps = self
            .qps
            .iter()
            .filter_map(|(qpn, q)| q.rp.poll_timeout(self.held.contains(qpn)));
        qps.chain(rps).min()
    }

    /// Runs the timers that are due at `now`.
    pub fn handle_timeout(&mut self, now: Instant) {
        for qp in self.qps.values_mut() {
            qp.rp.handle_timeout(now);
        }
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
