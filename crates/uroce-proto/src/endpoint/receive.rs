//! Packets in: a whole Ethernet frame ([`Context::handle_frame`]) or a UDP payload with
//! the addressing a socket reported ([`Context::handle_datagram`]), verified (lengths,
//! fields, ICRC), then to the QP it names or, for a CNP, to that QP's reaction point.

use std::time::Instant;

use super::{CnpJob, Context};
use crate::mem::Span;
use crate::transport::{Io, Remote};
use crate::wire::{self, DatagramRepr, Opcode, RocePacket, WireError};

/// Where the BTH starts in an untagged Ethernet frame with IPv4 without options:
/// Ethernet 14, IPv4 20, UDP 8.
const FRAME_BTH: usize = 14 + 20 + 8;

/// The opcodes whose payload may be placed before the ICRC is checked
/// (`Context::place`; the QP decides whether this packet's is).
const PLACED: [Opcode; 4] = {
    use Opcode::*;
    [
        RcReadResponseFirst,
        RcReadResponseMiddle,
        RcReadResponseLast,
        RcReadResponseOnly,
    ]
};

/// One received packet as a backend has it.
#[derive(Debug, Clone, Copy)]
pub enum Received<'a> {
    /// A whole Ethernet frame (AF_XDP, a packet socket, a simulated link): the endpoint
    /// parses Ethernet, IP and UDP from the frame itself
    /// ([`super::Context::handle_frame`]).
    Frame(&'a [u8]),
    /// A UDP payload and the addressing the socket reported
    /// ([`super::Context::handle_datagram`]).
    Datagram {
        /// IP and UDP as they were on the wire, as far as the socket tells. A socket does
        /// not tell the IPv4 identification, which the ICRC covers: the backend guesses
        /// it (segment j of a coalesced GSO send most likely left with identification
        /// j), and the context takes another that fits the ICRC where the guess does not
        /// ([`DatagramRepr::fit_icrc`]).
        datagram: &'a DatagramRepr,
        /// BTH to ICRC. The context computes the ICRC, after placing the payload where
        /// it may (`Context::place`).
        roce: &'a [u8],
    },
}

impl Received<'_> {
    /// Bytes received (the frame, or the UDP payload).
    pub fn len(&self) -> usize {
        match self {
            Self::Frame(f) => f.len(),
            Self::Datagram { roce, .. } => roce.len(),
        }
    }

    /// True when nothing was received.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Context {
    /// Takes one received Ethernet frame (AF_XDP, a simulated link). Anything malformed,
    /// corrupt or not for us is counted and dropped; the error is returned for the
    /// caller's logs.
    pub fn handle_frame(&mut self, now: Instant, frame: &[u8]) -> Result<(), WireError> {
        self.counters.rx_frames += 1;
        // The QP the common frame (untagged IPv4 without options) names, asked of the
        // cache while the frame is parsed and its ICRC verified; a guess from another
        // kind of frame costs a wasted fetch (`prefetch.rs`).
        if let Some(qpn) = frame.get(FRAME_BTH..).and_then(wire::bth::dest_qp_of) {
            self.qps.prefetch(qpn);
        }
        match wire::parse(frame) {
            Ok(p) => {
                self.handle_packet(now, &p, None);
                Ok(())
            }
            Err(e) => {
                if e.is_misfit() {
                    if let Some(m) = wire::parse_misfit(frame) {
                        self.handle_misfit(now, &m);
                    }
                }
                Err(self.count_bad(e))
            }
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
        self.handle_datagram_with(now, datagram, roce, false)
    }

    /// [`Context::handle_datagram`], where `guessed` says whether the IPv4 identification
    /// in `datagram` is a backend's guess (see [`Received::Datagram`]) rather than the one
    /// the packet was sent with.
    fn handle_datagram_with(
        &mut self,
        now: Instant,
        datagram: &DatagramRepr,
        roce: &[u8],
        guessed: bool,
    ) -> Result<(), WireError> {
        self.counters.rx_frames += 1;
        if let Some(qpn) = wire::bth::dest_qp_of(roce) {
            self.qps.prefetch(qpn);
        }
        if let Some(r) = self.place(now, datagram, roce, guessed) {
            return r;
        }
        let mut d = *datagram;
        let icrc = if guessed {
            self.fitted_icrc(&mut d, roce)
        } else {
            None
        };
        let parsed = d.header_bytes(roce.len()).and_then(|h| {
            wire::parse_datagram_computed(&d, &h, roce, icrc)
                .map(|p| self.handle_packet(now, &p, None))
        });
        match parsed {
            Ok(()) => Ok(()),
            Err(e) => {
                if e.is_misfit() {
                    let m = d
                        .header_bytes(roce.len())
                        .ok()
                        .and_then(|h| wire::parse_datagram_misfit(&d, &h, roce));
                    if let Some(m) = m {
                        self.handle_misfit(now, &m);
                    }
                }
                Err(self.count_bad(e))
            }
        }
    }

    /// The ICRC of `roce` under `d`'s headers, where it fits the stored one under
    /// another IPv4 identification than `d`'s (the backend's guess), that one taken into
    /// `d` ([`DatagramRepr::fit_icrc`]); `None` where there is none to compute (too short:
    /// parsing says why).
    fn fitted_icrc(&mut self, d: &mut DatagramRepr, roce: &[u8]) -> Option<u32> {
        let (icrc, moved) = d.fit_icrc_of(roce, &mut self.ident_bases)?;
        if moved {
            self.counters.rx_idents_recovered += 1;
        }
        Some(icrc)
    }

    /// [`DatagramRepr::fit_icrc`] where the identification is a guess, counting those
    /// found (it moves the guess only where `computed` is not `stored` and another
    /// fits); else whether `computed` is `stored`.
    fn fit(
        &mut self,
        d: &mut DatagramRepr,
        len: usize,
        (computed, stored): (u32, u32),
        guessed: bool,
    ) -> bool {
        if !guessed {
            return computed == stored;
        }
        let fits = d.fit_icrc(len, computed, stored, &mut self.ident_bases);
        if fits && computed != stored {
            self.counters.rx_idents_recovered += 1;
        }
        fits
    }

    /// Places the payload of the READ response its RC QP expects next in the READ's
    /// buffer, which the program lent to the work request and may not touch before it
    /// completes ([`crate::transport::Service::placement`]), before checking its ICRC:
    /// the copy reads the bytes into the cache, and the check after it reads them from
    /// there while the copy's stores drain to memory; checked first, they wait for it
    /// (on RDMA WRITEs, which are not placed so, 4 to 12% of the CPU per GB of the NCCL
    /// harness, `scripts/nccl-net`). `None`: not such a packet; the caller checks, then
    /// handles it.
    ///
    /// The bytes of a packet that fails its check stay where the expected response's
    /// own go (a response must be exactly as long as its place), in a part of the buffer
    /// no verified response filled yet; the READ completes only once responses that pass
    /// their check have written them. The packet is dropped and counted, the QP unmoved,
    /// as for any damaged packet. Requests are never placed so: an RDMA WRITE's target
    /// is the program's memory, read while it is written, and a damaged packet claiming
    /// the PSN of a SEND's shorter LAST would leave bytes past the message's end.
    fn place(
        &mut self,
        now: Instant,
        datagram: &DatagramRepr,
        roce: &[u8],
        guessed: bool,
    ) -> Option<Result<(), WireError>> {
        let op = Opcode::from_u8(*roce.first()?)?;
        if !PLACED.contains(&op) || !self.is_own(datagram.ip.dst()) {
            return None;
        }
        let mut d = *datagram;
        let h = d.header_bytes(roce.len()).ok()?;
        let p = wire::parse_datagram_unverified(&d, &h, roce).ok()?;
        let span = self.qps.get(&p.bth.dest_qp())?.placement(&p)?;
        // The headers before the payload, the pad after it.
        let at = (p.payload.as_ptr() as usize).checked_sub(roce.as_ptr() as usize)?;
        let body = &roce[..roce.len() - wire::ICRC_LEN];
        let (head, rest) = body.split_at_checked(at)?;
        let tail = rest.get(p.payload.len()..)?;
        // The pseudo-header is hashed first, then the payload copied and hashed from
        // the cache: between the copy and the hash nothing is stored.
        let mut copied = false;
        let mem = &mut self.mem;
        let computed = wire::icrc::compute_for_parts(
            &d.ip,
            &d.udp,
            head,
            p.payload.len(),
            |state| {
                copied = mem.copy_in(span, p.payload);
                crate::mem::crc::update_slice(state, p.payload)
            },
            tail,
        )
        .ok()?;
        if !copied {
            return None; // the region went away: the copy after the check fails it
        }
        self.counters.rx_placed += 1;
        if !self.fit(&mut d, body.len(), (computed, p.icrc), guessed) {
            let e = WireError::BadIcrc {
                computed,
                found: p.icrc,
                offset: body.len(),
            };
            return Some(Err(self.count_bad(e)));
        }
        self.handle_packet(now, &p, Some(span));
        Some(Ok(()))
    }

    /// Takes a received packet the way a backend hands it over.
    pub fn handle_received(&mut self, now: Instant, r: Received<'_>) -> Result<(), WireError> {
        match r {
            Received::Frame(f) => self.handle_frame(now, f),
            Received::Datagram { datagram, roce } => {
                self.handle_datagram_with(now, datagram, roce, true)
            }
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

    /// A packet whose ICRC verified but whose transport header breaks the opcode table's
    /// rules (a reserved opcode, payload on a READ request or an atomic, a bad pad count):
    /// still counted as malformed, and shown to the QP it names, whose service decides
    /// (an RC responder answers NAK Invalid Request, IBTA Vol. 1 §9.9.3 class C; UC drops
    /// the message; UD drops).
    fn handle_misfit(&mut self, now: Instant, m: &wire::Misfit) {
        if !self.is_own(m.ip.dst()) {
            return;
        }
        let Some(qp) = self.qps.get_mut(&m.dest_qp) else {
            return;
        };
        let srq = qp.srq();
        let mut io = Io {
            now,
            mem: &mut self.mem,
            wcs: &mut self.wcs,
            gather: &mut self.gather,
            placed: None,
            srq: super::srq_mut(&mut self.srqs, srq),
        };
        qp.on_misfit(&mut io, m);
        self.sched.touch(m.dest_qp, qp);
        let due = qp.events_due()
            || super::srq_mut(&mut self.srqs, srq).is_some_and(|s| s.limit_reached());
        if due {
            self.take_qp_events(m.dest_qp);
        }
        self.route_completions();
    }

    /// A packet whose ICRC verified: to its QP (or the reaction point, for a CNP).
    /// `placed`: where its payload was copied already ([`Context::place`]).
    fn handle_packet(&mut self, now: Instant, p: &RocePacket<'_>, placed: Option<Span>) {
        if !self.is_own(p.ip().dst()) {
            self.counters.rx_not_for_us += 1;
            return;
        }
        let qpn = p.bth.dest_qp();
        if p.bth.opcode() == Opcode::Cnp {
            // A CNP names the QP whose flow was marked: hand it to that QP's reaction point.
            match self.qps.get_mut(&qpn) {
                Some(qp) => {
                    qp.counters_mut().rp_cnp_handled += 1;
                    qp.rp.on_cnp(now);
                    self.sched.rearm(qpn, qp);
                }
                None => self.counters.rx_cnp_unknown_qp += 1,
            }
            return;
        }
        let Some(qp) = self.qps.get_mut(&qpn) else {
            self.counters.rx_unknown_qp += 1;
            return;
        };
        if p.ip().ecn() == 3 {
            // Notification point: CE seen; at most one CNP per QP per interval.
            qp.counters_mut().np_ecn_marked_roce_packets += 1;
            if self.np.on_ce(qpn, now) {
                qp.counters_mut().np_cnp_sent += 1;
                self.cnps.push_back(CnpJob {
                    from_qpn: qpn,
                    dest_qp: qp.peer_qpn(p),
                    pkey: p.bth.pkey(),
                    to: Remote {
                        ip: p.ip().src(),
                        mac: p.eth.map_or([0; 6], |e| e.src),
                    },
                });
            }
        }
        let srq = qp.srq();
        let mut io = Io {
            now,
            mem: &mut self.mem,
            wcs: &mut self.wcs,
            gather: &mut self.gather,
            placed,
            srq: super::srq_mut(&mut self.srqs, srq),
        };
        qp.on_packet(&mut io, p);
        // Only a response (an ACK or NAK, a READ response, an atomic ACK) reaches the
        // requester, whose timers are the only ones a packet moves (RC's retransmission
        // timer and RNR wait; UC and UD have none): a request leaves the QP's time where
        // it was, and does not ask for it (with 10,000 QPs that is a cache line of the
        // responder's QP not read), unless it armed the requester's tail probe (a request
        // out of sequence: the path loses, `QpCore::timer_started`). A request that takes
        // the QP to ERR stops its timers: the entry in the heap then fires, finds nothing
        // due and goes.
        self.sched.wake(qpn, qp);
        if p.bth.opcode().is_rc_response() || qp.take_timer_started() {
            self.sched.rearm(qpn, qp);
        }
        let due = qp.events_due()
            || super::srq_mut(&mut self.srqs, srq).is_some_and(|s| s.limit_reached());
        if due {
            self.take_qp_events(p.bth.dest_qp());
        }
        self.route_completions();
    }
}
