//! The CM endpoint: one per port (one per local address), sans-IO in quinn-proto's
//! shape. The caller hands it the MADs that arrive on QP 1 (`handle_mad`, in
//! [`super::receive`]) and the time; it hands back MADs to send (`poll_transmit`),
//! events for the application (`poll_event`), and when it next needs the time
//! (`poll_timeout` / `handle_timeout`). The application's calls (`listen`, `connect`,
//! `accept`, `reject`, `mra`, `rtu`, `disconnect`, SIDR in [`super::sidr`]) are the
//! kernel IB CM's (`ib_send_cm_req`, `ib_send_cm_rep`...), each checked against the
//! connection's state as IBTA Vol. 1 §12.9.6 draws it.

use std::collections::{HashMap, HashSet, VecDeque};
use std::net::IpAddr;
use std::time::Instant;

use super::conn::{CmState, Conn};
use super::event::{CmEvent, CmId};
use super::params::{mtu_code, AcceptParams, ConnectParams};
use super::service_id as sid;
use super::sidr::Sidr;
use super::timing::{answer_wait, cm_time, Retransmit};
use crate::rng::Rng;
use crate::transport::{QpAttr, QpAttrMask, QpState};
use crate::wire::cm_repr::{
    gid_of, CmMad, CmRepr, DreqRepr, IdsRepr, MraRepr, PathRepr, RejRepr, RepRepr, ReqRepr,
};
use crate::wire::mad::{GSI_QKEY, GSI_QPN, MAD_LEN};

/// REJ reasons the CM sends (IBTA Vol. 1 §12.6.7.2, Table 112).
pub mod reason {
    /// No resources available: the listen backlog is full.
    pub const NO_RESOURCES: u16 = 3;
    /// Timeout: the REQ or REP went unanswered.
    pub const TIMEOUT: u16 = 4;
    /// Invalid communication ID: a REP for no REQ of this CM.
    pub const INVALID_COMM_ID: u16 = 6;
    /// Invalid service ID: nobody listens on the REQ's service (what rdma_cm answers a
    /// REQ to a port without a listener with, `cm_match_req`).
    pub const INVALID_SERVICE_ID: u16 = 8;
    /// Invalid transport service type: neither RC nor UC.
    pub const INVALID_TRANSPORT_TYPE: u16 = 9;
    /// Stale connection: the REQ's communication ID or QP belongs to a connection this
    /// CM still knows (time wait, or an established connection of the same QP).
    pub const STALE_CONNECTION: u16 = 10;
    /// Invalid path MTU: a reserved MTU code.
    pub const INVALID_PATH_MTU: u16 = 26;
    /// Consumer reject: the application said no (`reject`).
    pub const CONSUMER_REJECT: u16 = 28;
}

/// Which message a REJ or MRA refers to (their 2-bit "message rejected / MRAed" field).
pub(super) mod msg {
    pub const REQ: u8 = 0;
    pub const REP: u8 = 1;
}

/// What the endpoint needs to know about its port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CmConfig {
    /// The local address (the GID its REQs carry is this address's, IPv4-mapped).
    pub local_ip: IpAddr,
    /// The CA GUID its REQs and REPs carry ([`ca_guid_from_mac`]).
    pub ca_guid: u64,
    /// Seed of the communication IDs and transaction IDs (distinct per run, so that a
    /// restarted endpoint's IDs are not its previous life's: IBTA §12.9.8.3.1).
    pub seed: u64,
    /// Packet life time of the paths (5 bits; rdma_cm over RoCE: 16,
    /// `CMA_IBOE_PACKET_LIFETIME`); the local ACK timeout is one more, and every wait
    /// for an answer adds twice it.
    pub packet_life_time: u8,
    /// The P_Key its REQs carry.
    pub pkey: u16,
    /// REQs the application has not answered yet (ReqRcvd, MraReqSent) that the endpoint
    /// keeps at most (rdma_listen's backlog); a REQ beyond them is rejected with reason 3,
    /// no resources available.
    pub backlog: usize,
}

impl CmConfig {
    /// A configuration for `local_ip` with rdma_cm's packet life time over RoCE.
    pub fn new(local_ip: IpAddr, ca_guid: u64, seed: u64) -> Self {
        Self {
            local_ip,
            ca_guid,
            seed,
            packet_life_time: 16,
            pkey: 0xffff,
            backlog: 1024,
        }
    }
}

/// The CA GUID of an Ethernet port: its MAC as a modified EUI-64 (the universal/local
/// bit flipped, 0xfffe in the middle), as rdma_rxe makes its node GUID
/// (`rxe_set_guid` via `addrconf_addr_eui48`).
pub fn ca_guid_from_mac(mac: [u8; 6]) -> u64 {
    u64::from_be_bytes([
        mac[0] ^ 2,
        mac[1],
        mac[2],
        0xff,
        0xfe,
        mac[3],
        mac[4],
        mac[5],
    ])
}

/// A MAD to send: a UD SEND from the local QP 1 to QP 1 at `to`, with the Q_Key
/// 0x80010000.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutMad {
    /// The peer's address.
    pub to: IpAddr,
    /// The destination QP (always 1, the GSI).
    pub remote_qpn: u32,
    /// The destination Q_Key (always 0x80010000).
    pub qkey: u32,
    /// The 256-byte MAD.
    pub mad: [u8; MAD_LEN],
}

/// What the endpoint counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CmCounters {
    /// MADs handed to `handle_mad`.
    pub rx_mads: u64,
    /// Shorter than a MAD, or a message whose fixed fields do not fit: dropped.
    pub rx_malformed: u64,
    /// Not a CM MAD this endpoint handles (another class or version, a method other
    /// than Send, LAP / APR, ClassPortInfo, an unknown attribute): dropped.
    pub rx_unsupported: u64,
    /// A message for a connection in a state where it means nothing (a late RTU, a
    /// REP to an established connection's peer...), or from an address that is not the
    /// connection's peer: dropped.
    pub rx_unexpected: u64,
    /// A duplicate (a REQ, REP, DREQ or SIDR_REQ again): answered as IBTA asks.
    pub rx_duplicates: u64,
    /// A REQ or REP for a stale connection: rejected with reason 10.
    pub rx_stale: u64,
    /// A REQ nobody listens for: rejected with reason 8.
    pub rx_no_listener: u64,
    /// A REQ beyond the backlog: rejected with reason 3.
    pub rx_backlog_full: u64,
    /// A REP, REJ, MRA, RTU, DREQ or DREP naming no connection of this CM.
    pub rx_unknown_id: u64,
    /// MADs handed out by `poll_transmit`.
    pub tx_mads: u64,
    /// Of those, sent again after a timeout.
    pub retransmits: u64,
    /// Messages given up on after their retries.
    pub timeouts: u64,
    /// REJs sent.
    pub rejects_sent: u64,
}

/// An application call that the CM refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CmError {
    /// No connection or SIDR exchange has this ID.
    #[error("no CM connection or SIDR exchange with ID {0:#x}")]
    NoSuchId(u32),
    /// The call is not allowed in the connection's state.
    #[error("{call} is not allowed in CM state {state:?}")]
    WrongState {
        /// The call.
        call: &'static str,
        /// The connection's state.
        state: CmState,
    },
    /// The private data does not fit the message.
    #[error("{len} bytes of private data, the {what} holds {max}")]
    PrivateDataTooLong {
        /// The message.
        what: &'static str,
        /// Its room.
        max: usize,
        /// What was given.
        len: usize,
    },
    /// A parameter does not fit its field.
    #[error("invalid CM parameter: {0}")]
    InvalidParam(&'static str),
    /// Already listening on the service ID.
    #[error("already listening on service ID {0:#x}")]
    AlreadyListening(u64),
    /// The peer's address family is not the local address's.
    #[error("the peer's address family is not the local address's")]
    AddressFamily,
}

pub(super) fn check_pd(what: &'static str, max: usize, pd: &[u8]) -> Result<(), CmError> {
    if pd.len() > max {
        Err(CmError::PrivateDataTooLong {
            what,
            max,
            len: pd.len(),
        })
    } else {
        Ok(())
    }
}

/// The connection manager of one port.
#[derive(Debug)]
pub struct CmEndpoint {
    pub(super) cfg: CmConfig,
    rng: Rng,
    /// The high 32 bits of the transaction IDs of the REQs this side sends.
    tid_hi: u32,
    pub(super) listens: HashSet<u64>,
    pub(super) conns: HashMap<u32, Conn>,
    pub(super) sidrs: HashMap<u32, Sidr>,
    out: VecDeque<OutMad>,
    pub(super) events: VecDeque<CmEvent>,
    pub(super) counters: CmCounters,
}

impl CmEndpoint {
    /// An endpoint with no connections and no listens.
    pub fn new(cfg: CmConfig) -> Self {
        let mut rng = Rng::new(cfg.seed ^ 0x636d_5f65_6e64_7074);
        let tid_hi = rng.next_u64() as u32;
        Self {
            cfg,
            rng,
            tid_hi,
            listens: HashSet::new(),
            conns: HashMap::new(),
            sidrs: HashMap::new(),
            out: VecDeque::new(),
            events: VecDeque::new(),
            counters: CmCounters::default(),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &CmConfig {
        &self.cfg
    }

    /// What the endpoint counted.
    pub fn counters(&self) -> CmCounters {
        self.counters
    }

    /// The state of connection `id`, `None` once it is forgotten.
    pub fn state(&self, id: CmId) -> Option<CmState> {
        self.conns.get(&id.0).map(|c| c.state)
    }

    /// The peer and service ID of connection `id`.
    pub fn peer(&self, id: CmId) -> Option<(IpAddr, u64)> {
        self.conns.get(&id.0).map(|c| (c.peer, c.service_id))
    }

    /// The connections the endpoint knows (any state but forgotten).
    pub fn connections(&self) -> usize {
        self.conns.len()
    }

    /// The next MAD to send.
    pub fn poll_transmit(&mut self) -> Option<OutMad> {
        let m = self.out.pop_front()?;
        self.counters.tx_mads += 1;
        Some(m)
    }

    /// The next event for the application.
    pub fn poll_event(&mut self) -> Option<CmEvent> {
        self.events.pop_front()
    }

    /// When `handle_timeout` is next due (the earliest retransmission, time wait or
    /// SIDR deadline), `None` with nothing pending.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let c = self.conns.values().filter_map(Conn::deadline);
        let s = self.sidrs.values().filter_map(Sidr::deadline);
        c.chain(s).min()
    }

    /// Accepts REQs (and SIDR_REQs) for `service_id` (`ib_cm_listen`).
    pub fn listen(&mut self, service_id: u64) -> Result<(), CmError> {
        if !self.listens.insert(service_id) {
            return Err(CmError::AlreadyListening(service_id));
        }
        Ok(())
    }

    /// Stops accepting REQs for `service_id`; connections made stay. Returns whether it
    /// was listened on.
    pub fn stop_listen(&mut self, service_id: u64) -> bool {
        self.listens.remove(&service_id)
    }

    pub(super) fn new_id(&mut self) -> u32 {
        loop {
            let v = self.rng.next_u64() as u32;
            if v != 0 && !self.conns.contains_key(&v) && !self.sidrs.contains_key(&v) {
                return v;
            }
        }
    }

    pub(super) fn new_tid(&self, id: u32) -> u64 {
        (u64::from(self.tid_hi) << 32) | u64::from(id)
    }

    /// Queues `msg` for `to` and returns the MAD's bytes.
    pub(super) fn send(&mut self, to: IpAddr, tid: u64, msg: CmRepr<'_>) -> [u8; MAD_LEN] {
        // Every message is built from checked parameters (private data lengths, field
        // widths), so emitting cannot fail; if it ever did, a zeroed MAD would go out,
        // which every CM drops, rather than a panic.
        let mad = CmMad { tid, msg }.to_bytes().unwrap_or([0; MAD_LEN]);
        self.queue(to, mad);
        mad
    }

    pub(super) fn queue(&mut self, to: IpAddr, mad: [u8; MAD_LEN]) {
        self.out.push_back(OutMad {
            to,
            remote_qpn: GSI_QPN,
            qkey: GSI_QKEY,
            mad,
        });
    }

    /// Sends a REJ (`cm_issue_rej` / `ib_send_cm_rej`).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn send_rej(
        &mut self,
        to: IpAddr,
        tid: u64,
        local_comm_id: u32,
        remote_comm_id: u32,
        message_rejected: u8,
        reason: u16,
        private_data: &[u8],
    ) {
        self.counters.rejects_sent += 1;
        self.send(
            to,
            tid,
            CmRepr::Rej(RejRepr {
                local_comm_id,
                remote_comm_id,
                message_rejected,
                reason,
                reject_info: &[],
                private_data,
            }),
        );
    }

    fn conn(&self, id: CmId) -> Result<&Conn, CmError> {
        self.conns.get(&id.0).ok_or(CmError::NoSuchId(id.0))
    }

    fn conn_in(
        &mut self,
        id: CmId,
        call: &'static str,
        ok: &[CmState],
    ) -> Result<&mut Conn, CmError> {
        let c = self.conns.get_mut(&id.0).ok_or(CmError::NoSuchId(id.0))?;
        if !ok.contains(&c.state) {
            return Err(CmError::WrongState {
                call,
                state: c.state,
            });
        }
        Ok(c)
    }

    /// Sends a REQ (`ib_send_cm_req`): the connection is in ReqSent, and the REQ is sent
    /// again every remote CM response timeout plus twice the packet life time, up to
    /// `max_cm_retries` times, after which the connection is `Unreachable`.
    pub fn connect(&mut self, now: Instant, p: &ConnectParams) -> Result<CmId, CmError> {
        check_pd("REQ", sid::REQ_PRIVATE_DATA, &p.private_data)?;
        if p.peer.is_ipv4() != self.cfg.local_ip.is_ipv4() {
            return Err(CmError::AddressFamily);
        }
        let narrow = [
            (p.qpn >> 24 != 0, "QPN wider than 24 bits"),
            (p.starting_psn >> 24 != 0, "PSN wider than 24 bits"),
            (p.retry_count > 7, "retry count above 7"),
            (p.rnr_retry_count > 7, "RNR retry count above 7"),
            (
                p.remote_cm_response_timeout > 31,
                "CM response timeout above 31",
            ),
            (
                p.local_cm_response_timeout > 31,
                "CM response timeout above 31",
            ),
            (p.max_cm_retries > 15, "max CM retries above 15"),
            (p.flow_label >> 20 != 0, "flow label wider than 20 bits"),
            (p.sl > 15, "SL above 15"),
        ];
        if let Some((_, why)) = narrow.iter().find(|(bad, _)| *bad) {
            return Err(CmError::InvalidParam(why));
        }
        let id = self.new_id();
        let tid = self.new_tid(id);
        let local_ack_timeout = self.cfg.packet_life_time.saturating_add(1).min(31);
        let req = ReqRepr {
            local_comm_id: id,
            service_id: p.service_id,
            local_ca_guid: self.cfg.ca_guid,
            local_qkey: 0,
            local_qpn: p.qpn,
            responder_resources: p.responder_resources,
            local_eecn: 0,
            initiator_depth: p.initiator_depth,
            remote_eecn: 0,
            remote_cm_response_timeout: p.remote_cm_response_timeout,
            transport_service_type: p.transport.code(),
            end_to_end_flow_control: false,
            starting_psn: p.starting_psn,
            local_cm_response_timeout: p.local_cm_response_timeout,
            retry_count: p.retry_count,
            pkey: self.cfg.pkey,
            path_mtu: mtu_code(p.path_mtu),
            rdc_exists: false,
            rnr_retry_count: p.rnr_retry_count,
            max_cm_retries: p.max_cm_retries,
            srq: p.srq,
            extended_transport_type: 0,
            primary: PathRepr {
                // RoCE has no LIDs: the permissive LID, as the kernel's CM writes.
                local_lid: 0xffff,
                remote_lid: 0xffff,
                local_gid: gid_of(self.cfg.local_ip),
                remote_gid: gid_of(p.peer),
                flow_label: p.flow_label,
                packet_rate: 0,
                traffic_class: p.traffic_class,
                hop_limit: p.hop_limit,
                sl: p.sl,
                subnet_local: false,
                local_ack_timeout,
            },
            alternate: PathRepr::default(),
            private_data: &p.private_data,
        };
        let mad = self.send(p.peer, tid, CmRepr::Req(req));
        let wait = answer_wait(p.remote_cm_response_timeout, self.cfg.packet_life_time);
        self.conns.insert(
            id,
            Conn {
                state: CmState::ReqSent,
                active: true,
                peer_to_peer: p.peer_to_peer,
                peer: p.peer,
                remote_id: 0,
                tid,
                service_id: p.service_id,
                transport: p.transport,
                local_qpn: p.qpn,
                remote_qpn: 0,
                local_psn: p.starting_psn,
                remote_psn: 0,
                path_mtu: p.path_mtu,
                responder_resources: p.responder_resources,
                initiator_depth: p.initiator_depth,
                retry_count: p.retry_count,
                rnr_retry_count: p.rnr_retry_count,
                min_rnr_timer: p.min_rnr_timer,
                local_ack_timeout,
                peer_response_timeout: p.remote_cm_response_timeout,
                max_cm_retries: p.max_cm_retries,
                retransmit: Some(Retransmit::new(mad, now, wait, p.max_cm_retries)),
                last_reply: None,
                timewait_until: None,
            },
        );
        Ok(CmId(id))
    }

    /// The attributes and mask of the modify verb that takes connection `id`'s QP to
    /// `to` (INIT, RTR or RTS), as `ib_cm_init_qp_attr`; the address's MAC is zero,
    /// for the caller to fill in. RTR and RTS need the peer's QP: after the REQ
    /// (passive side) or the REP (active side); on the passive side take them after
    /// `accept`, which settles this side's PSN and READ / atomic credits. RTR's
    /// `rq_psn` is the Starting PSN this side's REQ or REP carried, RTS's `sq_psn` the
    /// peer's, as the kernel's CM sets them.
    pub fn qp_attr(&self, id: CmId, to: QpState) -> Result<(QpAttr, QpAttrMask), CmError> {
        let c = self.conn(id)?;
        c.qp_attr(to).ok_or(CmError::WrongState {
            call: "qp_attr",
            state: c.state,
        })
    }

    /// Sends the REP (`ib_send_cm_rep`) for a REQ received (ReqRcvd or MraReqSent):
    /// the connection is in RepSent, the REP sent again until the RTU comes. The
    /// responder resources and initiator depth are cut to what the REQ offered.
    pub fn accept(&mut self, now: Instant, id: CmId, p: &AcceptParams) -> Result<(), CmError> {
        check_pd("REP", sid::REP_PRIVATE_DATA, &p.private_data)?;
        if p.qpn >> 24 != 0 || p.starting_psn >> 24 != 0 {
            return Err(CmError::InvalidParam("QPN or PSN wider than 24 bits"));
        }
        if p.rnr_retry_count > 7 || p.target_ack_delay > 31 {
            return Err(CmError::InvalidParam(
                "RNR retry count or target ACK delay too wide",
            ));
        }
        let ca_guid = self.cfg.ca_guid;
        let plt = self.cfg.packet_life_time;
        let c = self.conn_in(id, "accept", &[CmState::ReqRcvd, CmState::MraReqSent])?;
        // Until now these held the REQ's bounds (see `receive`): its initiator depth
        // bounds what this side need accept, its responder resources what this side may
        // have outstanding (IBTA §12.7.30, §12.7.26).
        c.responder_resources = p.responder_resources.min(c.responder_resources);
        c.initiator_depth = p.initiator_depth.min(c.initiator_depth);
        c.local_qpn = p.qpn;
        c.local_psn = p.starting_psn;
        c.min_rnr_timer = p.min_rnr_timer;
        let rep = RepRepr {
            local_comm_id: id.0,
            remote_comm_id: c.remote_id,
            local_qkey: 0,
            local_qpn: p.qpn,
            local_eecn: 0,
            starting_psn: p.starting_psn,
            responder_resources: c.responder_resources,
            initiator_depth: c.initiator_depth,
            target_ack_delay: p.target_ack_delay,
            failover_accepted: 0,
            end_to_end_flow_control: false,
            rnr_retry_count: p.rnr_retry_count,
            srq: p.srq,
            local_ca_guid: ca_guid,
            private_data: &p.private_data,
        };
        let (peer, tid, retries) = (c.peer, c.tid, c.max_cm_retries);
        let wait = answer_wait(c.peer_response_timeout, plt);
        let mad = self.send(peer, tid, CmRepr::Rep(rep));
        if let Some(c) = self.conns.get_mut(&id.0) {
            c.state = CmState::RepSent;
            c.retransmit = Some(Retransmit::new(mad, now, wait, retries));
        }
        Ok(())
    }

    /// Rejects the REQ (passive side, ReqRcvd or MraReqSent) or the REP (active side,
    /// RepRcvd or MraRepSent) with reason 28, consumer reject (`ib_send_cm_rej`); the
    /// connection is forgotten.
    pub fn reject(&mut self, id: CmId, private_data: &[u8]) -> Result<(), CmError> {
        self.reject_with(id, reason::CONSUMER_REJECT, private_data)
    }

    /// [`CmEndpoint::reject`] with another reason ([`reason`]): an application that
    /// demultiplexes one service ID among several listeners of its own rejects a REQ none
    /// of them takes with [`reason::INVALID_SERVICE_ID`], as `cm_match_req` does.
    pub fn reject_with(&mut self, id: CmId, why: u16, private_data: &[u8]) -> Result<(), CmError> {
        check_pd("REJ", sid::REJ_PRIVATE_DATA, private_data)?;
        use CmState::*;
        let c = self.conn_in(id, "reject", &[ReqRcvd, MraReqSent, RepRcvd, MraRepSent])?;
        let which = if c.active { msg::REP } else { msg::REQ };
        let (peer, tid, remote) = (c.peer, c.tid, c.remote_id);
        self.send_rej(peer, tid, id.0, remote, which, why, private_data);
        self.conns.remove(&id.0);
        Ok(())
    }

    /// The application is gone (its id destroyed), as the kernel's `cm_destroy_id`: a
    /// REQ or REP received and not answered, or a REP sent and not acknowledged, is
    /// rejected with reason 28 and forgotten; an established connection is disconnected
    /// (the DREQ is sent again until answered, then time wait) and forgotten after; one
    /// disconnecting or in time wait runs its course. A REQ sent and not answered is
    /// forgotten at once (a REP for it is rejected with reason 6). The endpoint reports
    /// nothing more of `id` that the application must answer. Returns whether `id` existed.
    pub fn abort(&mut self, now: Instant, id: CmId) -> bool {
        use CmState::*;
        let Some(c) = self.conns.get(&id.0) else {
            return self.sidrs.remove(&id.0).is_some();
        };
        match c.state {
            ReqRcvd | MraReqSent | RepRcvd | MraRepSent | RepSent | MraRepRcvd => {
                let which = if c.active { msg::REP } else { msg::REQ };
                let (peer, tid, remote) = (c.peer, c.tid, c.remote_id);
                self.send_rej(peer, tid, id.0, remote, which, reason::CONSUMER_REJECT, &[]);
                self.conns.remove(&id.0);
            }
            Established => {
                let _ = self.disconnect(now, id, &[]);
            }
            DreqSent | TimeWait => {}
            _ => {
                self.conns.remove(&id.0);
            }
        }
        true
    }

    /// Sends an MRA (`ib_send_cm_mra`): the answer to the REQ (passive side, ReqRcvd)
    /// or the REP (active side, RepRcvd) will take up to `service_timeout` (4.096 µs ×
    /// 2^value); a duplicate of the message is answered with this MRA again.
    pub fn mra(
        &mut self,
        id: CmId,
        service_timeout: u8,
        private_data: &[u8],
    ) -> Result<(), CmError> {
        check_pd("MRA", sid::MRA_PRIVATE_DATA, private_data)?;
        if service_timeout > 31 {
            return Err(CmError::InvalidParam("service timeout above 31"));
        }
        let c = self.conn_in(id, "mra", &[CmState::ReqRcvd, CmState::RepRcvd])?;
        let (which, next) = if c.active {
            (msg::REP, CmState::MraRepSent)
        } else {
            (msg::REQ, CmState::MraReqSent)
        };
        let (peer, tid, remote) = (c.peer, c.tid, c.remote_id);
        let mad = self.send(
            peer,
            tid,
            CmRepr::Mra(MraRepr {
                local_comm_id: id.0,
                remote_comm_id: remote,
                message_mraed: which,
                service_timeout,
                private_data,
            }),
        );
        if let Some(c) = self.conns.get_mut(&id.0) {
            c.state = next;
            c.last_reply = Some(Box::new(mad));
        }
        Ok(())
    }

    /// Sends the RTU (`ib_send_cm_rtu`) after the REP (active side, RepRcvd or
    /// MraRepSent), once the QP is in RTS: the connection is established (and says so
    /// with an `Established` event). A duplicate REP is answered with this RTU again.
    pub fn rtu(&mut self, id: CmId, private_data: &[u8]) -> Result<(), CmError> {
        check_pd("RTU", sid::RTU_PRIVATE_DATA, private_data)?;
        let c = self.conn_in(id, "rtu", &[CmState::RepRcvd, CmState::MraRepSent])?;
        let (peer, tid, remote) = (c.peer, c.tid, c.remote_id);
        let mad = self.send(
            peer,
            tid,
            CmRepr::Rtu(IdsRepr {
                local_comm_id: id.0,
                remote_comm_id: remote,
                private_data,
            }),
        );
        if let Some(c) = self.conns.get_mut(&id.0) {
            c.state = CmState::Established;
            c.last_reply = Some(Box::new(mad));
        }
        self.events.push_back(CmEvent::Established { id });
        Ok(())
    }

    /// The passive side's QP received before the RTU did (IBV_EVENT_COMM_EST): the
    /// connection is established as if the RTU had come (`ib_cm_notify`). A no-op when
    /// already established.
    pub fn notify_established(&mut self, id: CmId) -> Result<(), CmError> {
        use CmState::*;
        let c = self.conn_in(
            id,
            "notify_established",
            &[RepSent, MraRepRcvd, Established],
        )?;
        if c.state != Established {
            c.state = Established;
            c.retransmit = None;
            self.events.push_back(CmEvent::Established { id });
        }
        Ok(())
    }

    /// Sends a DREQ (`ib_send_cm_dreq`) on an established connection: DreqSent, the
    /// DREQ sent again until the DREP comes; then, or when the retries are spent, the
    /// connection is `Disconnected` and in time wait.
    pub fn disconnect(
        &mut self,
        now: Instant,
        id: CmId,
        private_data: &[u8],
    ) -> Result<(), CmError> {
        check_pd("DREQ", sid::DREQ_PRIVATE_DATA, private_data)?;
        let plt = self.cfg.packet_life_time;
        let c = self.conn_in(id, "disconnect", &[CmState::Established])?;
        let (peer, tid, remote, rqpn) = (c.peer, c.tid, c.remote_id, c.remote_qpn);
        let wait = answer_wait(c.peer_response_timeout, plt);
        let retries = c.max_cm_retries;
        let mad = self.send(
            peer,
            tid,
            CmRepr::Dreq(DreqRepr {
                local_comm_id: id.0,
                remote_comm_id: remote,
                remote_qpn: rqpn,
                private_data,
            }),
        );
        if let Some(c) = self.conns.get_mut(&id.0) {
            c.state = CmState::DreqSent;
            c.retransmit = Some(Retransmit::new(mad, now, wait, retries));
        }
        Ok(())
    }

    /// Forgets connection or SIDR exchange `id` at once, whatever its state, sending
    /// nothing (the application destroyed it). Returns whether it existed.
    pub fn destroy(&mut self, id: CmId) -> bool {
        self.conns.remove(&id.0).is_some() | self.sidrs.remove(&id.0).is_some()
    }

    /// Enters time wait (IBTA §12.9.6.4): the connection stays known, so stale
    /// messages for it are recognised, for the local ACK timeout of its path plus
    /// twice the packet life time (the kernel's `cm_enter_timewait`).
    pub(super) fn enter_timewait(&mut self, now: Instant, id: u32) {
        let plt = self.cfg.packet_life_time;
        if let Some(c) = self.conns.get_mut(&id) {
            c.state = CmState::TimeWait;
            c.retransmit = None;
            c.timewait_until = Some(now + cm_time(c.local_ack_timeout) + 2 * cm_time(plt));
        }
    }

    /// Runs every timer due at `now`: sends a message again, or gives up on it (REQ or
    /// REP: a REJ with reason timeout and `Unreachable`; DREQ: `Disconnected` and time
    /// wait; SIDR_REQ: `Unreachable`), and ends time waits (`TimeWaitExit`).
    pub fn handle_timeout(&mut self, now: Instant) {
        let mut due: Vec<u32> = self
            .conns
            .iter()
            .filter(|(_, c)| c.deadline().is_some_and(|d| d <= now))
            .map(|(&id, _)| id)
            .collect();
        due.sort_unstable();
        for id in due {
            self.conn_timeout(now, id);
        }
        self.sidr_timeouts(now);
    }

    fn conn_timeout(&mut self, now: Instant, id: u32) {
        let Some(c) = self.conns.get_mut(&id) else {
            return;
        };
        if let Some(r) = c.retransmit.as_mut() {
            if r.retries_left > 0 {
                r.retries_left -= 1;
                r.deadline = now + r.wait;
                let (peer, mad) = (c.peer, *r.mad);
                self.counters.retransmits += 1;
                self.queue(peer, mad);
                return;
            }
            self.counters.timeouts += 1;
            let (state, peer, tid, remote) = (c.state, c.peer, c.tid, c.remote_id);
            use CmState::*;
            match state {
                ReqSent | MraReqRcvd | RepSent | MraRepRcvd => {
                    let which = if matches!(state, ReqSent | MraReqRcvd) {
                        msg::REQ
                    } else {
                        msg::REP
                    };
                    // IBTA §12.6.7: a REJ with reason Timeout tells the peer to give up too.
                    self.send_rej(peer, tid, id, remote, which, reason::TIMEOUT, &[]);
                    self.conns.remove(&id);
                    self.events.push_back(CmEvent::Unreachable { id: CmId(id) });
                }
                DreqSent => {
                    self.enter_timewait(now, id);
                    self.events.push_back(CmEvent::Disconnected {
                        id: CmId(id),
                        private_data: Vec::new(),
                    });
                }
                _ => c.retransmit = None,
            }
        } else if c.timewait_until.is_some_and(|t| t <= now) {
            self.conns.remove(&id);
            self.events
                .push_back(CmEvent::TimeWaitExit { id: CmId(id) });
        }
    }
}
