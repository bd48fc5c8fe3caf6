//! The unreliable connected transport (IBTA Vol. 1 §9.7 as it applies to UC, §9.7.5.2.3
//! and C9-...): SEND and RDMA WRITE (with and without immediate), messages cut by path MTU,
//! no acknowledgements and no retransmission. A lost packet loses its whole message: the
//! responder drops what it has of it, puts the receive back, and resynchronises on the
//! next FIRST or ONLY packet. A partial message never completes as good. A packet whose
//! transport header breaks the opcode table (a reserved opcode, a bad pad count) touches
//! no responder state: it is dropped and counted as rdma_rxe drops it before its
//! responder sees it, and the PSN rules then drop what is left of its message.

use std::collections::VecDeque;

use crate::mem::{Access, Span};
use crate::transport::Local;
use crate::transport::{message_packet, psn_add, psn_diff, Io, OutPacket, RecvBuf};
use crate::transport::{
    Connected, Fatal, InitAttr, Peer, QpAttr, QpAttrMask, QpCore, Remote, RtrAttr, RtsAttr,
    SendFlags, SendOp, SendWr, Service, VerbsError, WcOpcode, WcStatus, WorkCompletion,
};
use crate::wire::{BthRepr, Opcode, RocePacket, TransportKind};

#[derive(Debug, Clone)]
struct Wqe {
    wr: SendWr,
    span: Local,
    npkts: u32,
    sent: u32,
    status: Option<WcStatus>,
}

#[derive(Debug, Clone)]
enum InMsg {
    Send {
        rwqe: RecvBuf,
        offset: usize,
    },
    Write {
        span: Option<Span>,
        offset: u64,
        total: u64,
    },
}

/// The UC part of one queue pair.
pub struct UcQp {
    access: Access,
    pkey: u16,
    mtu: u32,
    remote: Option<Remote>,
    dest_qpn: u32,
    next_psn: u32,
    epsn: u32,
    sq: VecDeque<Wqe>,
    cur: Option<InMsg>,
    /// SQD: no message is started; the one being sent goes on to its last packet.
    draining: bool,
}

impl UcQp {
    pub(crate) fn new() -> Self {
        Self {
            access: Access::NONE,
            pkey: 0xffff,
            mtu: 1024,
            remote: None,
            dest_qpn: 0,
            next_psn: 0,
            epsn: 0,
            sq: VecDeque::new(),
            cur: None,
            draining: false,
        }
    }

    /// Drops the message being received (a packet of it was lost): its receive goes back
    /// to the head of the queue it came from (the QP's, or its SRQ) for the next message,
    /// which overwrites what the dropped one left in it. (rdma_rxe completes a WQE taken
    /// from an SRQ for a dropped UC message in error instead, its class E; giving it back
    /// loses no WQE and reports nothing the application could act on.)
    fn abort_message(&mut self, core: &mut QpCore, io: &mut Io<'_>) {
        if let Some(m) = self.cur.take() {
            core.counters.uc_msg_dropped += 1;
            if let InMsg::Send { rwqe, .. } = m {
                io.give_back_recv(&mut core.rq, rwqe);
            }
        }
    }

    /// Applies one in-sequence packet; false drops the message.
    fn accept(
        &mut self,
        core: &mut QpCore,
        io: &mut Io<'_>,
        p: &RocePacket<'_>,
        starts: bool,
    ) -> bool {
        use Opcode::*;
        let op = p.bth.opcode();
        let mtu = self.mtu as usize;
        let len = p.payload.len();
        let last = !(op.is_first() || op.is_middle());
        // Packet lengths (§9.7.5.1, as the RC responder has them; rdma_rxe check_length):
        // FIRST and MIDDLE carry exactly one PMTU, LAST 1 to PMTU bytes (a zero-length
        // message is an ONLY), ONLY 0 to PMTU. A UC responder drops the message (class D1,
        // §9.9.3) and resynchronises on the next FIRST or ONLY.
        let size_ok = if op.is_first() || op.is_middle() {
            len == mtu
        } else if !starts {
            (1..=mtu).contains(&len)
        } else {
            len <= mtu
        };
        if !size_ok {
            core.counters.dropped += 1;
            return false;
        }
        let is_send = matches!(
            op,
            UcSendFirst | UcSendMiddle | UcSendLast | UcSendLastImm | UcSendOnly | UcSendOnlyImm
        );
        if starts {
            if is_send {
                let Some(rwqe) = io.take_recv(&mut core.rq) else {
                    core.counters.no_recv_drop += 1;
                    return false;
                };
                self.cur = Some(InMsg::Send { rwqe, offset: 0 });
            } else {
                let Some(reth) = p.ext.reth else { return false };
                let total = u64::from(reth.len);
                // RETH length against the payload: an ONLY carries all of it, a FIRST
                // less than all of it.
                if op.is_first() && total <= len as u64 || !op.is_first() && total != len as u64 {
                    core.counters.dropped += 1;
                    return false;
                }
                let span = if total == 0 {
                    None
                } else if !self.access.contains(Access::REMOTE_WRITE) {
                    core.counters.dropped += 1;
                    return false;
                } else {
                    match io.mem.check_remote(
                        core.pd,
                        core.qpn,
                        reth.rkey,
                        reth.va,
                        total,
                        Access::REMOTE_WRITE,
                    ) {
                        Ok(s) => Some(s),
                        Err(_) => {
                            core.counters.dropped += 1;
                            return false;
                        }
                    }
                };
                self.cur = Some(InMsg::Write {
                    span,
                    offset: 0,
                    total,
                });
            }
        }
        let peer = self.peer();
        match &mut self.cur {
            Some(InMsg::Send { rwqe, offset }) if is_send => {
                let (wr_id, start) = (rwqe.wr_id, *offset);
                let end = start + len;
                if end > rwqe.len as usize {
                    self.cur = None;
                    io.wcs.push((
                        core.recv_cq,
                        WorkCompletion::recv(
                            core.qpn,
                            wr_id,
                            WcStatus::LocLenErr,
                            WcOpcode::Recv,
                            0,
                            None,
                            peer,
                        ),
                    ));
                    return true;
                }
                // Scattered over the receive's entries in order.
                if !rwqe.local.copy_in(io.mem, start, p.payload) {
                    core.counters.dropped += 1;
                    return false;
                }
                if last {
                    self.cur = None;
                    core.counters.delivered += 1;
                    io.wcs.push((
                        core.recv_cq,
                        WorkCompletion::recv(
                            core.qpn,
                            wr_id,
                            WcStatus::Success,
                            WcOpcode::Recv,
                            end as u32,
                            p.ext.imm,
                            peer,
                        )
                        .solicited(p.bth.solicited()),
                    ));
                } else {
                    *offset = end;
                }
                true
            }
            Some(InMsg::Write {
                span,
                offset,
                total,
            }) if !is_send => {
                let (span, offset, total) = (*span, *offset, *total);
                let end = offset + len as u64;
                if end > total || (last && end != total) {
                    core.counters.dropped += 1;
                    return false;
                }
                let with_imm = matches!(op, UcWriteLastImm | UcWriteOnlyImm);
                if last && with_imm && !io.has_recv(&core.rq) {
                    core.counters.no_recv_drop += 1;
                    return false;
                }
                if let Some(s) = span {
                    if !io.mem.copy_in(s.sub(offset as usize, len), p.payload) {
                        core.counters.dropped += 1;
                        return false;
                    }
                }
                if last {
                    self.cur = None;
                    core.counters.delivered += 1;
                    if with_imm {
                        if let Some(r) = io.take_recv(&mut core.rq) {
                            io.wcs.push((
                                core.recv_cq,
                                WorkCompletion::recv(
                                    core.qpn,
                                    r.wr_id,
                                    WcStatus::Success,
                                    WcOpcode::RecvRdmaWithImm,
                                    total as u32,
                                    p.ext.imm,
                                    peer,
                                )
                                .solicited(p.bth.solicited()),
                            ));
                        }
                    }
                } else {
                    self.cur = Some(InMsg::Write {
                        span,
                        offset: end,
                        total,
                    });
                }
                true
            }
            _ => {
                core.counters.dropped += 1;
                false
            }
        }
    }
}

impl Service for UcQp {
    fn init(&mut self, _core: &QpCore, a: &InitAttr) {
        self.pkey = a.pkey;
        self.access = a.access;
    }

    fn rts(&mut self, a: &RtsAttr) {
        self.next_psn = a.sq_psn & 0xff_ffff;
    }

    /// What UC changes after the transition that set it: the access rights, the P_Key,
    /// the peer's address.
    fn set(&mut self, _core: &QpCore, a: &QpAttr, mask: QpAttrMask) {
        if mask.contains(QpAttrMask::ACCESS_FLAGS) {
            self.access = a.qp_access_flags;
        }
        if mask.contains(QpAttrMask::PKEY_INDEX) {
            self.pkey = a.pkey;
        }
        if mask.contains(QpAttrMask::AV) && self.remote.is_some() {
            self.remote = Some(a.ah_attr);
        }
    }

    fn reset(&mut self, _core: &QpCore) {
        *self = Self::new();
    }

    fn set_draining(&mut self, on: bool) {
        self.draining = on;
    }

    /// A message some of whose packets are out.
    fn send_in_progress(&self) -> bool {
        self.sq.front().is_some_and(|w| w.sent > 0)
    }

    fn peer(&self) -> Option<Peer> {
        self.remote.map(|r| Peer {
            qpn: self.dest_qpn,
            ip: r.ip,
        })
    }

    fn flush_send(&mut self, flushed: &mut dyn FnMut(u64, WcOpcode)) {
        for w in self.sq.drain(..) {
            flushed(w.wr.wr_id, w.wr.op.wc_opcode());
        }
    }

    fn refers_to(&self, lkey: u32) -> bool {
        let receiving = matches!(&self.cur, Some(InMsg::Send { rwqe, .. }) if rwqe.refers_to(lkey));
        receiving || self.sq.iter().any(|w| w.span.refers_to(lkey))
    }

    fn take_receiving(&mut self) -> Option<RecvBuf> {
        match self.cur.take() {
            Some(InMsg::Send { rwqe, .. }) => Some(rwqe),
            _ => None,
        }
    }

    /// A received packet (ICRC verified), in RTR or RTS.
    fn on_packet(
        &mut self,
        core: &mut QpCore,
        io: &mut Io<'_>,
        p: &RocePacket<'_>,
    ) -> Result<(), Fatal> {
        if p.bth.opcode().transport() != TransportKind::Uc {
            core.counters.dropped += 1;
            return Ok(());
        }
        // A connected QP takes packets from its peer only.
        if p.bth.pkey() & 0x7fff != self.pkey & 0x7fff
            || self.remote.is_some_and(|r| r.ip != p.ip().src())
        {
            core.counters.dropped += 1;
            return Ok(());
        }
        let op = p.bth.opcode();
        let starts = op.is_first()
            || matches!(
                op,
                Opcode::UcSendOnly
                    | Opcode::UcSendOnlyImm
                    | Opcode::UcWriteOnly
                    | Opcode::UcWriteOnlyImm
            );
        let d = psn_diff(p.bth.psn(), self.epsn);
        if d < 0 {
            // Behind the expected PSN: a duplicate the link made (UC never resends), dropped
            // so that no message is delivered twice. rdma_rxe takes a FIRST or ONLY there
            // as a new message; uroce keeps its at-most-once delivery (tests/dgram_sim.rs).
            core.counters.dropped += 1;
            return Ok(());
        }
        if d > 0 {
            // A gap: the message in progress is lost whole; only a FIRST or ONLY
            // packet starts the next one.
            self.abort_message(core, io);
            if !starts {
                core.counters.dropped += 1;
                return Ok(());
            }
        }
        self.epsn = psn_add(p.bth.psn(), 1);
        if starts && self.cur.is_some() {
            self.abort_message(core, io); // the LAST of the previous message never came
        }
        if !starts && self.cur.is_none() {
            core.counters.dropped += 1; // the rest of a message already dropped
            return Ok(());
        }
        if !self.accept(core, io, p, starts) {
            self.abort_message(core, io);
        }
        Ok(())
    }

    fn has_more(&self) -> bool {
        !self.sq.is_empty()
    }

    /// The next packet; a work request completes when its last packet is handed out.
    fn next_request(&mut self, core: &mut QpCore, io: &mut Io<'_>) -> Option<OutPacket> {
        let remote = self.remote?;
        loop {
            let w = self.sq.front_mut()?;
            if self.draining && w.sent == 0 {
                return None; // SQD: nothing new starts
            }
            if let Some(status) = w.status {
                let wr = w.wr;
                self.sq.pop_front();
                io.wcs.push((core.send_cq, send_wc(core.qpn, &wr, status)));
                continue;
            }
            let k = w.sent;
            let last = k + 1 == w.npkts;
            let Some((opcode, ext, payload)) =
                message_packet(true, w.wr.op, k, w.npkts, self.mtu, &w.span, io.gather)
            else {
                self.sq.pop_front();
                continue;
            };
            let mut bth = BthRepr::new(opcode, self.dest_qpn, self.next_psn);
            bth.pkey = self.pkey;
            bth.solicited = last && w.wr.solicited;
            self.next_psn = psn_add(self.next_psn, 1);
            w.sent += 1;
            if last {
                let wr = w.wr;
                self.sq.pop_front();
                if wr.signaled {
                    io.wcs
                        .push((core.send_cq, send_wc(core.qpn, &wr, WcStatus::Success)));
                }
            }
            return Some(OutPacket {
                bth,
                ext,
                payload,
                to: remote,
            });
        }
    }

    fn connected(&mut self) -> Option<&mut dyn Connected> {
        Some(self)
    }
}

impl Connected for UcQp {
    fn rtr(&mut self, _core: &QpCore, a: &RtrAttr) {
        self.remote = Some(a.remote);
        self.dest_qpn = a.dest_qpn & 0xff_ffff;
        self.epsn = a.rq_psn & 0xff_ffff;
        self.mtu = a.path_mtu.bytes();
    }

    fn check_op(&self, op: SendOp) -> Result<(), VerbsError> {
        if op.is_read_or_atomic() {
            return Err(VerbsError::InvalidWr(
                "UC carries SEND and RDMA WRITE only, not READ or atomics",
            ));
        }
        // UC has no SEND with Invalidate opcode (IBTA Table 35); uroce runs BIND_MW and
        // LOCAL_INV on RC only (rdma_rxe also takes BIND_MW on UC).
        if op.is_local() || matches!(op, SendOp::SendWithInv(_)) {
            return Err(VerbsError::InvalidWr(
                "UC takes no SEND_WITH_INV, BIND_MW or LOCAL_INV (RC only in uroce)",
            ));
        }
        Ok(())
    }

    fn send_queued(&self) -> usize {
        self.sq.len()
    }

    fn post_send(&mut self, _core: &QpCore, wr: SendWr, _flags: SendFlags, local: Local) {
        // The shell refused messages longer than 2^31 bytes and resolved the buffer.
        let npkts = wr.sge.length.div_ceil(self.mtu).max(1);
        self.sq.push_back(Wqe {
            wr,
            span: local,
            npkts,
            sent: 0,
            status: None,
        });
    }
}

fn send_wc(qpn: u32, wr: &SendWr, status: WcStatus) -> WorkCompletion {
    WorkCompletion::send(qpn, wr.wr_id, wr.op.wc_opcode(), wr.sge.length, status)
}
