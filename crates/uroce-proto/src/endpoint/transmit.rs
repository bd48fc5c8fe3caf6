//! What the endpoint hands a backend with each datagram it produces, quinn-style: the
//! RoCE bytes (BTH to ICRC) are in the caller's buffer, and this record says where they go
//! (and, from [`Context::poll_transmit_in_place`], where a payload left in place lies).

use std::net::IpAddr;
use std::time::Instant;

use super::{udp_source_port_of, Context};
use crate::mem::Span;
use crate::transport::{Io, OutPacket, Payload};
use crate::wire::{self, cnp, DatagramRepr, ExtHeaders, FrameRepr, TransportKind, WireError};

/// One datagram to send: the RoCE part is the first `len` bytes of the buffer given to
/// [`super::Context::poll_transmit`] (with a payload left in place, `in_place` says which
/// bytes of it lie elsewhere).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transmit {
    /// IP and UDP: addresses, ports, TOS (DSCP and ECN). A UDP socket sends to
    /// `datagram.dst()` port 4791 from `datagram.udp.src_port` with this TOS; a backend that
    /// builds frames writes these headers in front ([`Transmit::emit_link_headers`]). The
    /// ICRC covers them as they are here.
    pub datagram: DatagramRepr,
    /// The next hop's MAC address, as the QP's path (or the packet a CNP answers) gives it;
    /// only a backend that builds Ethernet headers uses it.
    pub dst_mac: [u8; 6],
    /// Bytes of the RoCE part: BTH, extension headers, payload, pad and ICRC (a payload
    /// left in place included).
    pub len: usize,
    /// The payload left where it is, in registered memory, rather than copied into the
    /// buffer: only from [`Context::poll_transmit_in_place`]. `None`: all `len` bytes
    /// are in the buffer.
    pub in_place: Option<InPlace>,
}

/// A payload a [`Transmit`] left in registered memory ([`Context::poll_transmit_in_place`]):
/// the datagram is the buffer's first `at` bytes (BTH and extension headers), then the
/// `len` bytes at `addr`, then the buffer's bytes from `at` on, up to the Transmit's `len`
/// less this `len` (pad and ICRC, which covers the payload as it was read).
///
/// The bytes at `addr` stay valid until the context next handles a packet or a timeout,
/// or a verb (a deregistration, a QP's change of state): only a verb can deregister the
/// region, and only a packet handled (an ACK) or a verb (a QP taken to ERR) can complete
/// the request that reads them, after which the program may change or free them. Further
/// calls of `poll_transmit_in_place` leave them valid. So a backend sends them, or copies
/// them into its own memory (`uroce::datapath::gather`), before its caller goes back to
/// the context: that is the contract of `poll_transmit_in_place`, which the event loops
/// keep by flushing after each round of sends.
///
/// Only the context makes one (its fields are read through methods), so a Transmit that
/// has one came from `poll_transmit_in_place`, whose caller took on that contract.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InPlace {
    at: usize,
    addr: usize,
    len: usize,
}

impl InPlace {
    /// A payload of `len` bytes at `addr` that goes at offset `at` of a datagram.
    ///
    /// # Safety
    ///
    /// `addr` is valid for reads of `len` bytes for as long as
    /// [`Context::poll_transmit_in_place`] promises its payloads are: whoever sends the
    /// datagram relies on it (a test's own buffer, kept alive and unchanged until the
    /// datagram has gone, does).
    #[allow(unsafe_code)]
    pub unsafe fn new(at: usize, addr: usize, len: usize) -> Self {
        Self { at, addr, len }
    }

    /// Where the payload goes in the datagram: the bytes of the buffer before it.
    pub fn at(&self) -> usize {
        self.at
    }

    /// The payload's address (a number: reading through it is the holder's `unsafe`).
    pub fn addr(&self) -> usize {
        self.addr
    }

    /// The payload's length.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True for no bytes (never, from the context: it leaves only long payloads).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// Payloads of at least this many bytes are left in place by
/// [`Context::poll_transmit_in_place`]: a small one is copied, as cheap as the two more
/// pieces of a gather list it would take (a choice, not measured; NCCL's FIFO writes and
/// a message's short last packet stay under it, its full packets of 4 KiB above).
pub const IN_PLACE_MIN: usize = 1024;

/// Bytes to prefetch behind a payload of `len` read from a region: as many again (the
/// next packet of the message) for payloads of at least [`IN_PLACE_MIN`] bytes; none
/// for small ones, whose next packet, if any, is a cache line away.
#[inline]
fn ahead_of(len: usize) -> usize {
    if len >= IN_PLACE_MIN {
        len
    } else {
        0
    }
}

impl Transmit {
    /// Bytes Ethernet (no VLAN tag), IP and UDP take in front of the RoCE part.
    pub fn link_headers_len(&self) -> usize {
        self.datagram.link_headers_len()
    }

    /// Length of the whole Ethernet frame.
    pub fn frame_len(&self) -> usize {
        self.link_headers_len() + self.len
    }

    /// Writes Ethernet (from `src_mac`), IP and UDP into `buf`, which must be exactly
    /// [`Transmit::link_headers_len`] bytes: the space right in front of the RoCE part.
    pub fn emit_link_headers(&self, src_mac: [u8; 6], buf: &mut [u8]) -> Result<(), WireError> {
        self.datagram
            .emit_link(src_mac, self.dst_mac, buf, self.len)
    }
}

impl Context {
    /// Writes the RoCE part (BTH to ICRC) of the next datagram to send at the start of
    /// `buf` and says where it goes: CNPs first, then the QPs in turn. `buf` must hold a
    /// full packet (4096 + 128 bytes is always enough).
    pub fn poll_transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<Transmit> {
        self.poll_transmit_as(now, buf, false)
    }

    /// [`Context::poll_transmit`] for a backend that sends from a gather list: the payload
    /// of an RC SEND or WRITE of at least [`IN_PLACE_MIN`] bytes from one registered range
    /// stays where it is, and the Transmit says where ([`Transmit::in_place`]); the buffer
    /// holds the rest. The kernel copies those bytes into its own buffers as it sends them
    /// (the backend copies them into its buffer only for a datagram that must wait). The
    /// ICRC covers them as they were read here: ibverbs forbids the program to change a
    /// request's buffer until it completes, and one that does anyway gets a datagram the
    /// peer drops for its ICRC, and RC resends it. Only requests: a READ response's bytes
    /// are the responder program's, which may change them at any time (a reader then gets
    /// either value, as from a NIC, never a drop); and only RC: a UC or UD send completes
    /// as its last packet is built, after which the program may change or free its buffer.
    ///
    /// # Safety
    ///
    /// Every Transmit with a payload in place that this returns is sent, or made whole in
    /// its buffer (`uroce::datapath::gather`), before this context is called for anything
    /// but this function (see [`InPlace`]); and it goes only to a backend that takes such
    /// datagrams (`uroce::datapath::Backend::takes_payload_in_place`).
    #[allow(unsafe_code)]
    pub unsafe fn poll_transmit_in_place(
        &mut self,
        now: Instant,
        buf: &mut [u8],
    ) -> Option<Transmit> {
        self.poll_transmit_as(now, buf, true)
    }

    fn poll_transmit_as(
        &mut self,
        now: Instant,
        buf: &mut [u8],
        in_place: bool,
    ) -> Option<Transmit> {
        while let Some(job) = self.cnps.pop_front() {
            let pkt = OutPacket {
                bth: cnp::bth(job.dest_qp, job.pkey),
                ext: ExtHeaders::default(),
                payload: Payload::None,
                to: job.to,
            };
            let tos = self.cnp_dscp << 2;
            if let Some(t) = self.emit(job.from_qpn, &pkt, tos, buf, false) {
                return Some(t);
            }
        }
        // Only the QPs on the ready list are asked, starting with the one at the head;
        // one that sends goes back (`Schedule::requeue`: at the head while it may have
        // more, up to a run, else at the tail), one with nothing to send or held
        // back by its rate limiter leaves. At most as many questions as QPs were ready.
        for _ in 0..self.sched.ready_len() {
            let Some(qpn) = self.sched.pop_ready() else {
                break;
            };
            let Some(qp) = self.qps.get_mut(&qpn) else {
                continue;
            };
            if !qp.rp.can_send(now) {
                // Back when the pacer lets it go: a timer (`handle_timeout`).
                qp.sched.ready = false;
                qp.sched.held = true;
                self.sched.rearm(qpn, qp);
                continue;
            }
            qp.sched.held = false;
            let mut io = Io {
                now,
                mem: &mut self.mem,
                wcs: &mut self.wcs,
                gather: &mut self.gather,
                placed: None,
                srq: super::srq_mut(&mut self.srqs, qp.srq()),
            };
            let pkt = qp.next_packet(&mut io);
            let due = qp.events_due();
            let paced = qp.rp.dcqcn.is_some();
            match &pkt {
                Some(p) => {
                    let op = p.bth.opcode;
                    // Alone on the list, head and tail are one: the service is not
                    // asked whether it has more.
                    let more = op.is_first()
                        || op.is_middle()
                        || self.sched.ready_len() > 0 && qp.has_more();
                    self.sched.requeue(qpn, p.payload.len(), more)
                }
                None => qp.sched.ready = false,
            }
            // Only a timer the packet started can bring the QP's time earlier than the
            // one it has in the heap (a packet sent while the retransmission timer runs
            // leaves it; a time that moves later needs nothing, see `schedule.rs`).
            if qp.take_timer_started() {
                self.sched.rearm(qpn, qp);
            }
            self.route_completions();
            if due {
                self.take_qp_events(qpn);
            }
            let Some(pkt) = pkt else { continue };
            let tos = self.cfg.tos;
            if let Some(t) = self.emit(qpn, &pkt, tos, buf, in_place) {
                // The QP is looked up again only when it has a rate limiter to tell.
                if paced {
                    if let Some(qp) = self.qps.get_mut(&qpn) {
                        // The byte counter may have raised the rate (and ended the
                        // increase timer): its next time.
                        qp.rp.on_sent(now, t.frame_len());
                        self.sched.rearm(qpn, qp);
                    }
                }
                self.tidy_timers();
                return Some(t);
            }
            // Not built (counted in `tx_dropped`; RC resends it): the others' turn.
            self.sched.demote(qpn);
        }
        self.tidy_timers();
        None
    }

    /// Writes the next whole Ethernet frame to send into `buf` (from this context's MAC)
    /// and returns its length: [`Context::poll_transmit`] with the link headers in front,
    /// for simulated links, tests and tools that move frames.
    pub fn poll_frame(&mut self, now: Instant, buf: &mut [u8]) -> Option<usize> {
        // Room for the longer IPv6 headers when a packet may go from the link-local
        // address; the frame is moved to the start of `buf` when its headers are shorter.
        let widest = match self.link_local {
            Some(ll) => IpAddr::V6(ll),
            None => self.cfg.ip,
        };
        let room = wire::ethernet::HEADER_LEN + wire::datagram::roce_headers_len(widest);
        let t = self.poll_transmit(now, buf.get_mut(room..)?)?;
        let at = room.checked_sub(t.link_headers_len())?;
        t.emit_link_headers(self.cfg.mac, &mut buf[at..room]).ok()?;
        if at > 0 {
            buf.copy_within(at..room + t.len, 0);
        }
        Some(room - at + t.len)
    }

    /// Builds the RoCE part of `pkt` from QP `qpn` into `buf`, its payload left in place
    /// where `in_place` allows ([`Context::poll_transmit_in_place`]).
    /// A packet the transport produced that cannot be built (`buf` too small for it, a
    /// peer of the other IP version) is counted in `tx_dropped`; RC recovers it as a loss.
    fn emit(
        &mut self,
        qpn: u32,
        pkt: &OutPacket,
        tos: u8,
        buf: &mut [u8],
        in_place: bool,
    ) -> Option<Transmit> {
        let sport = udp_source_port_of(self.cfg.udp_sport_base, qpn, self.udp_sports);
        let from = self.source_for(pkt.to.ip);
        let Some(datagram) = DatagramRepr::roce(from, pkt.to.ip, sport, tos) else {
            self.counters.tx_dropped += 1;
            return None;
        };
        let repr = FrameRepr {
            eth: None,
            ip: datagram.ip,
            udp: datagram.udp,
            bth: pkt.bth,
            ext: pkt.ext,
        };
        let mem = &self.mem;
        let staged = &self.gather;
        let len = pkt.payload.len();
        let op = pkt.bth.opcode;
        if in_place
            && len >= IN_PLACE_MIN
            && op.transport() == TransportKind::Rc
            && !op.is_rc_response()
        {
            if let Payload::Span(s) = pkt.payload {
                return self.emit_in_place(datagram, repr, pkt, s, buf);
            }
        }
        let mut whole = true;
        let built = repr.emit_roce_with(len, buf, |dst| match pkt.payload {
            Payload::Span(s) => {
                whole = mem
                    .read_ahead(s, ahead_of(s.len))
                    .is_some_and(|src| src.copy_to(dst))
            }
            p => whole = p.copy_out(mem, staged, dst),
        });
        // A payload whose region went away is not sent, never sent as something else:
        // `dereg_mr` refuses a region a queued packet reads from (EBUSY), so this is a
        // last line of defence; the peer's retransmission then meets the key check.
        let (Ok(n), true) = (built, whole) else {
            self.counters.tx_dropped += 1;
            return None;
        };
        self.counters.tx_frames += 1;
        Some(Transmit {
            datagram,
            dst_mac: pkt.to.mac,
            len: n,
            in_place: None,
        })
    }

    /// [`Context::emit`] of a packet whose payload, span `s` of a registered region,
    /// stays where it is: headers, pad and ICRC in `buf`, the ICRC hashed over the
    /// payload as it lies (raw loads, `SharedBytes::crc32_update`).
    fn emit_in_place(
        &mut self,
        datagram: DatagramRepr,
        repr: FrameRepr,
        pkt: &OutPacket,
        s: Span,
        buf: &mut [u8],
    ) -> Option<Transmit> {
        // As in `emit`: a payload whose region went away is not sent.
        let Some(src) = self.mem.read_ahead(s, ahead_of(s.len)) else {
            self.counters.tx_dropped += 1;
            return None;
        };
        let Ok((n, at)) = repr.emit_roce_around(s.len, buf, |state| src.crc32_update(state)) else {
            self.counters.tx_dropped += 1;
            return None;
        };
        let addr = src.addr();
        self.counters.tx_frames += 1;
        Some(Transmit {
            datagram,
            dst_mac: pkt.to.mac,
            len: n,
            in_place: Some(InPlace {
                at,
                addr,
                len: s.len,
            }),
        })
    }
}
