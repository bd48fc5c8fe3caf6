//! Where a packet goes: the daemon's tables, with no I/O (unit-tested on their own).
//!
//! - **QPNs** are handed out in blocks of [`QPN_BLOCK`]; a packet for QPN `q` belongs to
//!   the process holding block `q / 64`. A block let go is quarantined for
//!   [`QUARANTINE`] and handed out again only after every other free block was (the
//!   counter runs on through the 2^24 space), so a peer still addressing a dead
//!   process's QP reaches no one instead of a stranger.
//! - **QP 1** is everyone's (IBTA §13.5: one GSI QP per port): a CM REQ or SIDR REQ goes
//!   to the process listening on its service ID (at the datagram's destination address,
//!   else at any); the other CM messages carry the receiver's communication ID (REP,
//!   RTU, REJ, MRA, DREQ, DREP, LAP, APR: the Remote Communication ID; SIDR REP: the
//!   Request ID), which the daemon learnt when that process sent its own first message
//!   (IBTA §12.6: the Local Communication ID of a REQ, REP, MRA or REJ; a SIDR REQ's
//!   Request ID).
//! - **Sources**: a process sends only from the interface's addresses and, where the
//!   packet names its source QP (UD's DETH), from its own QPNs or QP 1. RC and UC packets
//!   name no source QP: a flow (destination address and QPN) belongs to the first process
//!   that sends on it, until it leaves, and another's packets on it are refused (a
//!   connected QP talks to one peer QP; a process cannot inject into another's
//!   connection).

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::time::{Duration, Instant};

pub use uroce::datapath::daemon::proto::QPN_BLOCK;

/// How long a block of QPNs a process let go is not handed out again.
pub const QUARANTINE: Duration = Duration::from_secs(60);
/// QPN blocks one process may hold: 2^20 QPNs, a sixteenth of the space (a NIC's QP
/// limit is of that order; mlx5's is 2^18 per device).
const MAX_BLOCKS_PER_CLIENT: u32 = (1 << 20) / QPN_BLOCK;
/// Services one process may listen on at once.
const MAX_LISTENS_PER_CLIENT: usize = 4096;
/// RC / UC flows remembered per process (the oldest are forgotten first).
const FLOWS_PER_CLIENT: usize = 1 << 16;
/// Communication IDs remembered per process (the oldest are forgotten first).
const COMM_IDS_PER_CLIENT: usize = 16384;

const BLOCKS: u32 = (1 << 24) / QPN_BLOCK;
/// Blocks below this hold QP 0, QP 1 and the numbers below 0x100 a NIC keeps.
const FIRST_BLOCK: u32 = 0x100 / QPN_BLOCK;

/// A listen on any of the interface's addresses, IPv4 or IPv6.
const ANY: IpAddr = IpAddr::V6(std::net::Ipv6Addr::UNSPECIFIED);

/// A process attached to the daemon.
pub type ClientId = u32;

/// BTH opcodes of UD (the only ones with a DETH naming the source QP).
const UD_SEND_ONLY: u8 = 0x64;
const UD_SEND_ONLY_IMM: u8 = 0x65;
/// The CNP (RoCEv2 Annex A17.9.2): to the QP that sent what was marked, from anyone's.
const CNP: u8 = 0x81;
const BTH_LEN: usize = 12;
const DETH_LEN: usize = 8;
const MAD: usize = BTH_LEN + DETH_LEN;
const MGMT_CLASS_CM: u8 = 0x07;

/// CM attribute IDs (IBTA Vol. 1 Table 214 / §12.6).
mod attr {
    pub const REQ: u16 = 0x0010;
    pub const MRA: u16 = 0x0011;
    pub const REJ: u16 = 0x0012;
    pub const REP: u16 = 0x0013;
    pub const SIDR_REQ: u16 = 0x0017;
    pub const SIDR_REP: u16 = 0x0018;
}

/// The destination QP of a RoCE packet (BTH to ICRC).
pub use uroce::wire::bth::dest_qp_of as dest_qp;

/// A CM MAD's management class, attribute ID and data, in a UD packet to or from QP 1.
fn cm_mad(roce: &[u8]) -> Option<(u16, &[u8])> {
    if !matches!(roce.first(), Some(&UD_SEND_ONLY) | Some(&UD_SEND_ONLY_IMM)) {
        return None;
    }
    let mad = roce.get(MAD..)?;
    if mad.len() < 24 + 16 || mad[1] != MGMT_CLASS_CM {
        return None;
    }
    Some((u16::from_be_bytes([mad[16], mad[17]]), &mad[24..]))
}

fn be32(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_be_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

/// What every packet a process sends must be, whatever it carries: a BTH and an ICRC at
/// least, to UDP port 4791, from one of the interface's addresses (`local`).
fn envelope(src: IpAddr, dst_port: u16, roce: &[u8], local: &[IpAddr]) -> Result<(), Refusal> {
    if roce.len() < BTH_LEN + 4 {
        return Err(Refusal::Short);
    }
    if dst_port != uroce::wire::ROCEV2_UDP_PORT {
        return Err(Refusal::NotRoce);
    }
    if !local.contains(&src) {
        return Err(Refusal::ForeignAddress);
    }
    Ok(())
}

/// Why a packet a process sent was not let out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Shorter than a BTH and an ICRC.
    Short,
    /// From an address that is not the interface's.
    ForeignAddress,
    /// UD with a source QP that is not the process's.
    ForeignQp,
    /// Not UDP port 4791.
    NotRoce,
    /// RC or UC to a destination QP another process sends to.
    ForeignFlow,
}

/// The daemon's tables.
#[derive(Debug)]
pub struct Switch {
    /// Owner of each QPN block: 0 free, else the client's id.
    owner: Vec<ClientId>,
    freed: HashMap<u32, Instant>,
    /// Where the search for free blocks starts: of the whole space (`None`), of each QPN
    /// class (`Some`); an entry is made at the first claim, from `seed`.
    cursors: HashMap<Option<u32>, u32>,
    seed: u32,
    listeners: HashMap<(u64, IpAddr), ClientId>,
    comm_ids: HashMap<u32, ClientId>,
    learnt: HashMap<ClientId, VecDeque<u32>>,
    /// RC and UC flows (destination address and QPN) and the process sending on each.
    flows: HashMap<(IpAddr, u32), ClientId>,
    /// QPN blocks each process holds.
    blocks_of: HashMap<ClientId, u32>,
    flows_of: HashMap<ClientId, VecDeque<(IpAddr, u32)>>,
}

impl Switch {
    /// Empty tables; QPN blocks are handed out from `seed`'s block on (a daemon started
    /// again does not hand out the numbers it handed out before, most likely).
    pub fn new(seed: u32) -> Self {
        Self {
            owner: vec![0; BLOCKS as usize],
            freed: HashMap::new(),
            cursors: HashMap::new(),
            seed,
            listeners: HashMap::new(),
            comm_ids: HashMap::new(),
            learnt: HashMap::new(),
            flows: HashMap::new(),
            blocks_of: HashMap::new(),
            flows_of: HashMap::new(),
        }
    }

    /// Hands `client` at least `count` QPNs, contiguous: `(first, count)`; `None` when no
    /// run of free blocks that long is left.
    pub fn claim_qpns(&mut self, client: ClientId, count: u32, now: Instant) -> Option<(u32, u32)> {
        self.claim_qpns_in_class(client, count, None, now)
    }

    /// [`Switch::claim_qpns`] within QPN class `class` (QPNs `class << CLASS_SHIFT` and up,
    /// the ones the kernel steers to the fast path's socket of that class) when given.
    pub fn claim_qpns_in_class(
        &mut self,
        client: ClientId,
        count: u32,
        class: Option<u32>,
        now: Instant,
    ) -> Option<(u32, u32)> {
        let blocks = count.div_ceil(QPN_BLOCK).clamp(1, 1024);
        let held = self.blocks_of.get(&client).copied().unwrap_or(0);
        if held + blocks > MAX_BLOCKS_PER_CLIENT {
            // One process cannot take the host's QPNs from the others.
            return None;
        }
        let per_class = (1 << uroce::datapath::udp::CLASS_SHIFT) / QPN_BLOCK;
        let (lo, hi) = match class {
            Some(k) => ((k * per_class).max(FIRST_BLOCK), (k + 1) * per_class),
            None => (FIRST_BLOCK, BLOCKS),
        };
        let span = hi - lo;
        // The search starts where the last one in the same space (the whole, or the
        // class) ended, the first one from a random block (`seed`: a daemon started again
        // most likely does not hand out the numbers it handed out before).
        let seed = self.seed;
        let mut cursor = *self.cursors.entry(class).or_insert(lo + seed % span);
        let mut found = None;
        for _ in 0..span {
            let start = cursor;
            let fits = start + blocks <= hi
                && (start..start + blocks).all(|b| {
                    self.owner[b as usize] == 0
                        && self
                            .freed
                            .get(&b)
                            .is_none_or(|t| now.duration_since(*t) >= QUARANTINE)
                });
            cursor = if start + 1 >= hi { lo } else { start + 1 };
            if fits {
                cursor = if start + blocks >= hi {
                    lo
                } else {
                    start + blocks
                };
                found = Some(start);
                break;
            }
        }
        self.cursors.insert(class, cursor);
        let start = found?;
        for b in start..start + blocks {
            self.owner[b as usize] = client;
            self.freed.remove(&b);
        }
        *self.blocks_of.entry(client).or_default() += blocks;
        Some((start * QPN_BLOCK, blocks * QPN_BLOCK))
    }

    /// The process owning `qpn`.
    pub fn owner_of(&self, qpn: u32) -> Option<ClientId> {
        match self.owner.get((qpn / QPN_BLOCK) as usize) {
            Some(0) | None => None,
            Some(&c) => Some(c),
        }
    }

    /// Sends connection requests for `service_id` at `ip` to `client` (`on`), or stops.
    /// EADDRINUSE when another process listens there.
    pub fn listen(
        &mut self,
        client: ClientId,
        service_id: u64,
        ip: IpAddr,
        on: bool,
    ) -> Result<(), i32> {
        // Any address, of either family, is one key.
        let key = (service_id, if ip.is_unspecified() { ANY } else { ip });
        match (on, self.listeners.get(&key)) {
            (true, Some(&c)) if c != client => Err(libc::EADDRINUSE),
            (true, Some(_)) => Ok(()),
            (true, None) => {
                let n = self.listeners.values().filter(|&&c| c == client).count();
                if n >= MAX_LISTENS_PER_CLIENT {
                    // As a process's ports run out: the table stays bounded.
                    return Err(libc::ENOBUFS);
                }
                self.listeners.insert(key, client);
                Ok(())
            }
            (false, Some(&c)) if c == client => {
                self.listeners.remove(&key);
                Ok(())
            }
            (false, _) => Ok(()),
        }
    }

    /// Drops `client`'s listens (it left: a server started again may listen on its
    /// service at once, while what it sent last is still being taken).
    pub fn stop_listening(&mut self, client: ClientId) {
        self.listeners.retain(|_, c| *c != client);
    }

    /// Forgets `client`: its QPNs go to quarantine, its listens and communication IDs
    /// are dropped.
    pub fn forget(&mut self, client: ClientId, now: Instant) {
        self.blocks_of.remove(&client);
        for (b, o) in self.owner.iter_mut().enumerate() {
            if *o == client {
                *o = 0;
                self.freed.insert(b as u32, now);
            }
        }
        self.freed
            .retain(|_, t| now.duration_since(*t) < QUARANTINE);
        self.listeners.retain(|_, c| *c != client);
        for key in self.flows_of.remove(&client).unwrap_or_default() {
            if self.flows.get(&key) == Some(&client) {
                self.flows.remove(&key);
            }
        }
        if let Some(ids) = self.learnt.remove(&client) {
            for id in ids {
                if self.comm_ids.get(&id) == Some(&client) {
                    self.comm_ids.remove(&id);
                }
            }
        }
    }

    /// Checks a packet `client` sends (its source address `src`, its RoCE bytes) and
    /// learns from it what [`Switch::check_send_shared`] cannot: the flow of an RC or UC
    /// packet on a flow nobody sends on yet, the communication ID of a CM message.
    pub fn check_send(
        &mut self,
        client: ClientId,
        src: IpAddr,
        dst: IpAddr,
        dst_port: u16,
        roce: &[u8],
        local: &[IpAddr],
    ) -> Result<(), Refusal> {
        if let Some(verdict) = self.check_send_shared(client, src, dst, dst_port, roce, local) {
            return verdict;
        }
        if matches!(roce[0], UD_SEND_ONLY | UD_SEND_ONLY_IMM) {
            // From QP 1.
            self.learn(client, roce);
            return Ok(());
        }
        // RC and UC: a new flow (destination address and QP) is its first sender's.
        let key = (dst, dest_qp(roce).ok_or(Refusal::Short)?);
        self.flows.insert(key, client);
        let mine = self.flows_of.entry(client).or_default();
        mine.push_back(key);
        if mine.len() > FLOWS_PER_CLIENT {
            if let Some(old) = mine.pop_front() {
                self.flows.remove(&old);
            }
        }
        Ok(())
    }

    /// [`Switch::check_send`] without changing anything, for the send threads under a
    /// shared lock: `None` when the packet teaches the switch something (the first packet
    /// of a flow, a CM message from QP 1), which needs [`Switch::check_send`].
    pub fn check_send_shared(
        &self,
        client: ClientId,
        src: IpAddr,
        dst: IpAddr,
        dst_port: u16,
        roce: &[u8],
        local: &[IpAddr],
    ) -> Option<Result<(), Refusal>> {
        if let Err(r) = envelope(src, dst_port, roce, local) {
            return Some(Err(r));
        }
        match roce[0] {
            CNP => Some(Ok(())),
            UD_SEND_ONLY | UD_SEND_ONLY_IMM => {
                let Some(src_qp) = be32(roce, BTH_LEN + 4).map(|v| v & 0xff_ffff) else {
                    return Some(Err(Refusal::Short));
                };
                match src_qp {
                    1 => None,
                    q if self.owner_of(q) == Some(client) => Some(Ok(())),
                    _ => Some(Err(Refusal::ForeignQp)),
                }
            }
            _ => match self.flows.get(&(dst, dest_qp(roce)?))? {
                &c if c == client => Some(Ok(())),
                _ => Some(Err(Refusal::ForeignFlow)),
            },
        }
    }

    fn learn(&mut self, client: ClientId, roce: &[u8]) {
        let Some((attr, data)) = cm_mad(roce) else {
            return;
        };
        let id = match attr {
            attr::REQ | attr::REP | attr::MRA | attr::REJ | attr::SIDR_REQ => be32(data, 0),
            _ => None,
        };
        let Some(id) = id.filter(|&i| i != 0) else {
            return;
        };
        // First come: a process cannot take over another's communication.
        match self.comm_ids.get(&id) {
            Some(&c) if c != client => return,
            Some(_) => return,
            None => {}
        }
        self.comm_ids.insert(id, client);
        let ids = self.learnt.entry(client).or_default();
        ids.push_back(id);
        if ids.len() > COMM_IDS_PER_CLIENT {
            if let Some(old) = ids.pop_front() {
                self.comm_ids.remove(&old);
            }
        }
    }

    /// The process a packet for QP 1 at `dst` goes to.
    pub fn route_gsi(&self, dst: IpAddr, roce: &[u8]) -> Option<ClientId> {
        let (attr, data) = cm_mad(roce)?;
        match attr {
            attr::REQ | attr::SIDR_REQ => {
                let sid = u64::from_be_bytes(data.get(8..16)?.try_into().ok()?);
                self.listeners
                    .get(&(sid, dst))
                    .or_else(|| self.listeners.get(&(sid, ANY)))
                    .copied()
            }
            attr::SIDR_REP => self.comm_ids.get(&be32(data, 0)?).copied(),
            _ => self.comm_ids.get(&be32(data, 4)?).copied(),
        }
    }

    /// The process a packet for `qpn` at `dst` goes to.
    pub fn route(&self, dst: IpAddr, roce: &[u8]) -> Option<ClientId> {
        match dest_qp(roce)? {
            1 => self.route_gsi(dst, roce),
            q => self.owner_of(q),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ud(dest_qp: u32, src_qp: u32, attr: u16, data: &[(usize, &[u8])]) -> Vec<u8> {
        let mut p = vec![0u8; MAD + 256 + 4];
        p[0] = UD_SEND_ONLY;
        p[5..8].copy_from_slice(&dest_qp.to_be_bytes()[1..]);
        p[BTH_LEN + 4..BTH_LEN + 8].copy_from_slice(&src_qp.to_be_bytes());
        p[MAD + 1] = MGMT_CLASS_CM;
        p[MAD + 16..MAD + 18].copy_from_slice(&attr.to_be_bytes());
        for (at, b) in data {
            p[MAD + 24 + at..MAD + 24 + at + b.len()].copy_from_slice(b);
        }
        p
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn qpn_blocks_are_owned_and_quarantined() {
        let t0 = Instant::now();
        let mut s = Switch::new(0);
        let (a, n) = s.claim_qpns(1, 100, t0).unwrap();
        assert_eq!((a, n), (0x100, 128), "two blocks, above the reserved QPNs");
        let (b, _) = s.claim_qpns(2, 1, t0).unwrap();
        assert_eq!(b, 0x180);
        assert_eq!(s.owner_of(0x100 + 127), Some(1));
        assert_eq!(s.owner_of(0x180), Some(2));
        assert_eq!(s.owner_of(0x1c0), None);
        s.forget(1, t0);
        assert_eq!(s.owner_of(0x100), None);
        // Wrap the counter round: the quarantined blocks are skipped.
        s.cursors.insert(None, FIRST_BLOCK);
        let (c, _) = s.claim_qpns(3, 1, t0 + Duration::from_secs(1)).unwrap();
        assert_eq!(c, 0x1c0, "a block freed a second ago is not handed out");
        s.cursors.insert(None, FIRST_BLOCK);
        let (d, _) = s.claim_qpns(3, 1, t0 + QUARANTINE).unwrap();
        assert_eq!(d, 0x100, "after the quarantine it is");
        // One process cannot take them all.
        let mut claimed = 0;
        while s.claim_qpns(4, 1 << 16, t0).is_some() {
            claimed += 1 << 16;
        }
        assert_eq!(claimed, 1 << 20);
        assert!(s.claim_qpns(5, 1, t0).is_some(), "others still get QPNs");
        s.forget(4, t0);
        assert!(
            s.claim_qpns(4, 1, t0).is_some(),
            "its own again once it left"
        );
    }

    #[test]
    fn a_class_claim_stays_in_its_class() {
        let mut s = Switch::new(12345);
        let now = Instant::now();
        let shift = uroce::datapath::udp::CLASS_SHIFT;
        for _ in 0..3 {
            let (first, count) = s.claim_qpns_in_class(1, 65_536, Some(5), now).unwrap();
            assert_eq!(first >> shift, 5, "{first:#x}");
            assert_eq!((first + count - 1) >> shift, 5, "{first:#x} + {count}");
        }
        // A class holds 2^18 QPNs (4096 blocks): 1024 single blocks are left, all of it.
        let mut more = 0;
        while let Some((first, _)) = s.claim_qpns_in_class(2, 64, Some(5), now) {
            assert_eq!(first >> shift, 5, "{first:#x}");
            more += 1;
        }
        assert_eq!(more, 1024);
        // A process after another in a class: whatever the first held is quarantined,
        // and the rest of the class still holds a run of 65,536.
        let mut s = Switch::new(777);
        let (a, _) = s.claim_qpns_in_class(1, 65_536, Some(1), now).unwrap();
        s.forget(1, now);
        let (b, _) = s
            .claim_qpns_in_class(2, 65_536, Some(1), now)
            .expect("a second run in the class");
        assert!(b >= a + 65_536 || b + 65_536 <= a, "{a:#x} {b:#x}");
        // Class 0 (the daemon's socket) never hands out QPN block 0 (QP 0 and QP 1).
        let (first, _) = s.claim_qpns_in_class(3, 64, Some(0), now).unwrap();
        assert!(
            first >= FIRST_BLOCK * QPN_BLOCK && first >> shift == 0,
            "{first:#x}"
        );
    }

    /// A process that left gives its listens up at once, before it is forgotten: a
    /// server started again takes its service, and requests reach the new one.
    #[test]
    fn a_process_that_left_gives_up_its_listens_at_once() {
        let mut s = Switch::new(0);
        let sid: u64 = 0x0106_0000_0000_1c07;
        assert_eq!(s.listen(7, sid, ip("10.0.0.1"), true), Ok(()));
        assert_eq!(
            s.listen(8, sid, ip("10.0.0.1"), true),
            Err(libc::EADDRINUSE)
        );
        s.stop_listening(7);
        assert_eq!(s.listen(8, sid, ip("10.0.0.1"), true), Ok(()));
        let req = ud(1, 1, attr::REQ, &[(8, &sid.to_be_bytes())]);
        assert_eq!(s.route(ip("10.0.0.1"), &req), Some(8));
    }

    #[test]
    fn connection_requests_go_to_the_listener_and_replies_by_comm_id() {
        let t0 = Instant::now();
        let mut s = Switch::new(0);
        let local = [ip("10.0.0.1")];
        let sid: u64 = 0x0106_0000_0000_1c06;
        assert_eq!(s.listen(7, sid, ip("0.0.0.0"), true), Ok(()));
        assert_eq!(s.listen(8, sid, ip("0.0.0.0"), true), Err(libc::EADDRINUSE));
        let req = ud(
            1,
            1,
            attr::REQ,
            &[(0, &0xaaaa_0001u32.to_be_bytes()), (8, &sid.to_be_bytes())],
        );
        assert_eq!(s.route(ip("10.0.0.1"), &req), Some(7));
        // Process 8 connects out: its REQ teaches the daemon its comm ID; the REP that
        // answers names it as the remote one.
        s.claim_qpns(8, 1, t0).unwrap();
        assert_eq!(
            s.check_send(8, ip("10.0.0.1"), ip("10.0.0.2"), 4791, &req, &local),
            Ok(())
        );
        let rep = ud(
            1,
            1,
            attr::REP,
            &[(0, &5u32.to_be_bytes()), (4, &0xaaaa_0001u32.to_be_bytes())],
        );
        assert_eq!(s.route(ip("10.0.0.1"), &rep), Some(8));
        // Another process cannot take the comm ID over.
        assert_eq!(
            s.check_send(9, ip("10.0.0.1"), ip("10.0.0.2"), 4791, &req, &local),
            Ok(())
        );
        assert_eq!(s.route(ip("10.0.0.1"), &rep), Some(8));
        // SIDR: the reply carries the request ID.
        let sidr = ud(
            1,
            1,
            attr::SIDR_REQ,
            &[(0, &77u32.to_be_bytes()), (8, &sid.to_be_bytes())],
        );
        assert_eq!(s.route(ip("10.0.0.1"), &sidr), Some(7));
        s.check_send(8, ip("10.0.0.1"), ip("10.0.0.2"), 4791, &sidr, &local)
            .unwrap();
        let sidr_rep = ud(1, 1, attr::SIDR_REP, &[(0, &77u32.to_be_bytes())]);
        assert_eq!(s.route(ip("10.0.0.1"), &sidr_rep), Some(8));
        // Gone: all of it forgotten.
        s.forget(8, t0);
        assert_eq!(s.route(ip("10.0.0.1"), &rep), None);
        s.forget(7, t0);
        assert_eq!(s.route(ip("10.0.0.1"), &req), None);
        assert_eq!(s.listen(8, sid, ip("0.0.0.0"), true), Ok(()));
    }

    #[test]
    fn sources_are_checked() {
        let t0 = Instant::now();
        let mut s = Switch::new(0);
        let local = [ip("10.0.0.1")];
        let (mine, _) = s.claim_qpns(1, 1, t0).unwrap();
        let (theirs, _) = s.claim_qpns(2, 1, t0).unwrap();
        let ok = ud(0x200, mine, 0, &[]);
        assert_eq!(
            s.check_send(1, ip("10.0.0.1"), ip("10.0.0.2"), 4791, &ok, &local),
            Ok(())
        );
        let forged = ud(0x200, theirs, 0, &[]);
        assert_eq!(
            s.check_send(1, ip("10.0.0.1"), ip("10.0.0.2"), 4791, &forged, &local),
            Err(Refusal::ForeignQp)
        );
        assert_eq!(
            s.check_send(1, ip("10.9.9.9"), ip("10.0.0.2"), 4791, &ok, &local),
            Err(Refusal::ForeignAddress)
        );
        assert_eq!(
            s.check_send(1, ip("10.0.0.1"), ip("10.0.0.2"), 53, &ok, &local),
            Err(Refusal::NotRoce)
        );
        assert_eq!(
            s.check_send(1, ip("10.0.0.1"), ip("10.0.0.2"), 4791, &[0; 8], &local),
            Err(Refusal::Short)
        );
        // RC names no source QP: a flow is its first sender's, until it leaves.
        let mut rc = vec![0u8; 32];
        rc[0] = 0x04;
        rc[5..8].copy_from_slice(&[0, 0x12, 0x34]);
        assert_eq!(
            s.check_send(2, ip("10.0.0.1"), ip("10.0.0.9"), 4791, &rc, &local),
            Ok(())
        );
        assert_eq!(
            s.check_send(1, ip("10.0.0.1"), ip("10.0.0.9"), 4791, &rc, &local),
            Err(Refusal::ForeignFlow)
        );
        assert_eq!(
            s.check_send_shared(1, ip("10.0.0.1"), ip("10.0.0.9"), 4791, &rc, &local),
            Some(Err(Refusal::ForeignFlow))
        );
        assert_eq!(
            s.check_send_shared(2, ip("10.0.0.1"), ip("10.0.0.9"), 4791, &rc, &local),
            Some(Ok(()))
        );
        assert_eq!(
            s.check_send_shared(2, ip("10.0.0.1"), ip("10.0.0.8"), 4791, &rc, &local),
            None,
            "a new flow needs the switch changed"
        );
        s.forget(2, t0);
        assert_eq!(
            s.check_send(1, ip("10.0.0.1"), ip("10.0.0.2"), 4791, &rc, &local),
            Ok(())
        );
    }
}
