//! The unreliable connected transport (IBTA Vol. 1 §9.7 as it applies to UC, §9.7.5.2.3
//! and C9-...): SEND and RDMA WRITE (with and without immediate), messages cut by path MTU,
//! no acknowledgements and no retransmission. A lost packet loses its whole message: the
//! responder drops what it has of it, puts the receive back, and resynchronises on the
//! next FIRST or ONLY packet. A partial message never completes as good.

use std::collections::VecDeque;

use crate::mem::{Access, Memory, PdId, Span};
use crate::transport::{message_packet, psn_add, psn_diff, Io, OutPacket, QpCounters, RecvBuf};
use crate::transport::{
    CqId, QpState, RecvWr, Remote, SendWr, VerbsError, WcOpcode, WcStatus, WorkCompletion,
};
use crate::wire::{BthRepr, Opcode, RocePacket, TransportKind};

#[derive(Debug, Clone, Copy)]
struct Wqe {
    wr: SendWr,
    span: Option<Span>,
    npkts: u32,
    sent: u32,
    status: Option<WcStatus>,
}

#[derive(Debug, Clone, Copy)]
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

/// One UC queue pair.
pub struct UcQp {
    pub(crate) qpn: u32,
    pd: PdId,
    pub(crate) state: QpState,
    send_cq: CqId,
    recv_cq: CqId,
    access: Access,
    pkey: u16,
    mtu: u32,
    remote: Option<Remote>,
    dest_qpn: u32,
    next_psn: u32,
    epsn: u32,
    sq: VecDeque<Wqe>,
    rq: VecDeque<RecvBuf>,
    cur: Option<InMsg>,
    max_send_wr: usize,
    max_recv_wr: usize,
    pub(crate) counters: QpCounters,
}

impl UcQp {
    pub(crate) fn new(
        qpn: u32,
        pd: PdId,
        send_cq: CqId,
        recv_cq: CqId,
        max_send_wr: usize,
        max_recv_wr: usize,
    ) -> Self {
        Self {
            qpn,
            pd,
            state: QpState::Reset,
            send_cq,
            recv_cq,
            access: Access::NONE,
            pkey: 0xffff,
            mtu: 1024,
            remote: None,
            dest_qpn: 0,
            next_psn: 0,
            epsn: 0,
            sq: VecDeque::new(),
            rq: VecDeque::new(),
            cur: None,
            max_send_wr,
            max_recv_wr,
            counters: QpCounters::default(),
        }
    }

    pub(crate) fn dest_qpn(&self) -> u32 {
        self.dest_qpn
    }

    fn bad_state(&self, what: &'static str) -> VerbsError {
        VerbsError::BadState {
            qpn: self.qpn,
            state: self.state,
            what,
        }
    }

    pub(crate) fn modify_init(&mut self, pkey: u16, access: Access) -> Result<(), VerbsError> {
        if self.state != QpState::Reset {
            return Err(self.bad_state("RESET -> INIT"));
        }
        self.pkey = pkey;
        self.access = access;
        self.state = QpState::Init;
        Ok(())
    }

    pub(crate) fn modify_rtr(
        &mut self,
        remote: Remote,
        dest_qpn: u32,
        rq_psn: u32,
        mtu: u32,
    ) -> Result<(), VerbsError> {
        if self.state != QpState::Init {
            return Err(self.bad_state("INIT -> RTR"));
        }
        self.remote = Some(remote);
        self.dest_qpn = dest_qpn & 0xff_ffff;
        self.epsn = rq_psn & 0xff_ffff;
        self.mtu = mtu;
        self.state = QpState::Rtr;
        Ok(())
    }

    pub(crate) fn modify_rts(&mut self, sq_psn: u32) -> Result<(), VerbsError> {
        if self.state != QpState::Rtr {
            return Err(self.bad_state("RTR -> RTS"));
        }
        self.next_psn = sq_psn & 0xff_ffff;
        self.state = QpState::Rts;
        Ok(())
    }

    pub(crate) fn enter_err(&mut self, io: &mut Io<'_>) {
        self.state = QpState::Err;
        for w in self.sq.drain(..) {
            io.wcs
                .push((self.send_cq, send_wc(self.qpn, &w.wr, WcStatus::WrFlushErr)));
        }
        let cur = match self.cur.take() {
            Some(InMsg::Send { rwqe, .. }) => Some(rwqe),
            _ => None,
        };
        let rq: Vec<RecvBuf> = cur.into_iter().chain(self.rq.drain(..)).collect();
        for r in rq {
            io.wcs.push((
                self.recv_cq,
                self.recv_wc(r.wr_id, WcStatus::WrFlushErr, WcOpcode::Recv, 0, None),
            ));
        }
    }

    pub(crate) fn post_send(&mut self, mem: &Memory, wr: SendWr) -> Result<(), VerbsError> {
        if self.state != QpState::Rts {
            return Err(self.bad_state("post_send"));
        }
        if wr.op.is_read_or_atomic() {
            return Err(VerbsError::InvalidWr(
                "UC carries SEND and RDMA WRITE only, not READ or atomics",
            ));
        }
        if self.sq.len() >= self.max_send_wr {
            return Err(VerbsError::QueueFull("send"));
        }
        let len = wr.sge.length;
        if len > 1 << 31 {
            return Err(VerbsError::InvalidWr("message longer than 2^31 bytes"));
        }
        let span = if len == 0 {
            None
        } else {
            mem.check_local(
                self.pd,
                wr.sge.lkey,
                wr.sge.addr,
                u64::from(len),
                Access::NONE,
            )
            .ok()
        };
        let status = (len != 0 && span.is_none()).then_some(WcStatus::LocProtErr);
        let npkts = len.div_ceil(self.mtu).max(1);
        self.sq.push_back(Wqe {
            wr,
            span,
            npkts,
            sent: 0,
            status,
        });
        Ok(())
    }

    pub(crate) fn post_recv(&mut self, mem: &Memory, wr: RecvWr) -> Result<(), VerbsError> {
        if matches!(self.state, QpState::Reset | QpState::Err) {
            return Err(self.bad_state("post_recv"));
        }
        if self.rq.len() >= self.max_recv_wr {
            return Err(VerbsError::QueueFull("receive"));
        }
        self.rq.push_back(RecvBuf::check(mem, self.pd, wr)?);
        Ok(())
    }

    /// The next packet; a work request completes when its last packet is handed out.
    pub(crate) fn next_packet(&mut self, io: &mut Io<'_>) -> Option<OutPacket> {
        if self.state != QpState::Rts {
            return None;
        }
        let remote = self.remote?;
        loop {
            let w = self.sq.front_mut()?;
            if let Some(status) = w.status {
                let wr = w.wr;
                self.sq.pop_front();
                io.wcs.push((self.send_cq, send_wc(self.qpn, &wr, status)));
                continue;
            }
            let k = w.sent;
            let last = k + 1 == w.npkts;
            let Some((opcode, ext, payload)) =
                message_packet(true, w.wr.op, k, w.npkts, self.mtu, w.span)
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
                        .push((self.send_cq, send_wc(self.qpn, &wr, WcStatus::Success)));
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

    /// Drops the message being received (a packet of it was lost): its receive goes back
    /// to the head of the queue for the next message.
    fn abort_message(&mut self) {
        if let Some(m) = self.cur.take() {
            self.counters.uc_msg_dropped += 1;
            if let InMsg::Send { rwqe, .. } = m {
                self.rq.push_front(rwqe);
            }
        }
    }

    /// A received packet (ICRC verified).
    pub(crate) fn on_packet(&mut self, io: &mut Io<'_>, p: &RocePacket<'_>) {
        if !matches!(self.state, QpState::Rtr | QpState::Rts)
            || p.bth.opcode.transport() != TransportKind::Uc
        {
            self.counters.dropped += 1;
            return;
        }
        // A connected QP takes packets from its peer only.
        if p.bth.pkey & 0x7fff != self.pkey & 0x7fff
            || self.remote.is_some_and(|r| r.ip != p.ip.src())
        {
            self.counters.dropped += 1;
            return;
        }
        let op = p.bth.opcode;
        let starts = op.is_first()
            || matches!(
                op,
                Opcode::UcSendOnly
                    | Opcode::UcSendOnlyImm
                    | Opcode::UcWriteOnly
                    | Opcode::UcWriteOnlyImm
            );
        let d = psn_diff(p.bth.psn, self.epsn);
        if d < 0 {
            self.counters.dropped += 1; // a duplicate: UC drops it silently
            return;
        }
        if d > 0 {
            // A gap: the message in progress is lost whole; only a FIRST or ONLY
            // packet starts the next one.
            self.abort_message();
            if !starts {
                self.counters.dropped += 1;
                return;
            }
        }
        self.epsn = psn_add(p.bth.psn, 1);
        if starts && self.cur.is_some() {
            self.abort_message(); // the LAST of the previous message never came
        }
        if !starts && self.cur.is_none() {
            self.counters.dropped += 1; // the rest of a message already dropped
            return;
        }
        if !self.accept(io, p, starts) {
            self.abort_message();
        }
    }

    /// Applies one in-sequence packet; false drops the message.
    fn accept(&mut self, io: &mut Io<'_>, p: &RocePacket<'_>, starts: bool) -> bool {
        use Opcode::*;
        let op = p.bth.opcode;
        let mtu = self.mtu as usize;
        let len = p.payload.len();
        let last = !(op.is_first() || op.is_middle());
        if (op.is_first() || op.is_middle()) && len != mtu || len > mtu {
            self.counters.dropped += 1;
            return false;
        }
        let is_send = matches!(
            op,
            UcSendFirst | UcSendMiddle | UcSendLast | UcSendLastImm | UcSendOnly | UcSendOnlyImm
        );
        if starts {
            if is_send {
                let Some(rwqe) = self.rq.pop_front() else {
                    self.counters.no_recv_drop += 1;
                    return false;
                };
                self.cur = Some(InMsg::Send { rwqe, offset: 0 });
            } else {
                let Some(reth) = p.ext.reth else { return false };
                let total = u64::from(reth.len);
                let span = if total == 0 {
                    None
                } else if !self.access.contains(Access::REMOTE_WRITE) {
                    self.counters.dropped += 1;
                    return false;
                } else {
                    match io.mem.check_remote(
                        self.pd,
                        reth.rkey,
                        reth.va,
                        total,
                        Access::REMOTE_WRITE,
                    ) {
                        Ok(s) => Some(s),
                        Err(_) => {
                            self.counters.dropped += 1;
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
        match self.cur {
            Some(InMsg::Send { rwqe, offset }) if is_send => {
                let end = offset + len;
                if end > rwqe.len as usize {
                    self.cur = None;
                    io.wcs.push((
                        self.recv_cq,
                        self.recv_wc(rwqe.wr_id, WcStatus::LocLenErr, WcOpcode::Recv, 0, None),
                    ));
                    return true;
                }
                if let Some(s) = rwqe.span {
                    if !io.mem.copy_in(s.sub(offset, len), p.payload) {
                        self.counters.dropped += 1;
                        return false;
                    }
                }
                if last {
                    self.cur = None;
                    self.counters.delivered += 1;
                    io.wcs.push((
                        self.recv_cq,
                        self.recv_wc(
                            rwqe.wr_id,
                            WcStatus::Success,
                            WcOpcode::Recv,
                            end as u32,
                            p.ext.imm,
                        ),
                    ));
                } else {
                    self.cur = Some(InMsg::Send { rwqe, offset: end });
                }
                true
            }
            Some(InMsg::Write {
                span,
                offset,
                total,
            }) if !is_send => {
                let end = offset + len as u64;
                if end > total || (last && end != total) {
                    self.counters.dropped += 1;
                    return false;
                }
                let with_imm = matches!(op, UcWriteLastImm | UcWriteOnlyImm);
                if last && with_imm && self.rq.is_empty() {
                    self.counters.no_recv_drop += 1;
                    return false;
                }
                if let Some(s) = span {
                    if !io.mem.copy_in(s.sub(offset as usize, len), p.payload) {
                        self.counters.dropped += 1;
                        return false;
                    }
                }
                if last {
                    self.cur = None;
                    self.counters.delivered += 1;
                    if with_imm {
                        if let Some(r) = self.rq.pop_front() {
                            io.wcs.push((
                                self.recv_cq,
                                self.recv_wc(
                                    r.wr_id,
                                    WcStatus::Success,
                                    WcOpcode::RecvRdmaWithImm,
                                    total as u32,
                                    p.ext.imm,
                                ),
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
                self.counters.dropped += 1;
                false
            }
        }
    }

    fn recv_wc(
        &self,
        wr_id: u64,
        status: WcStatus,
        opcode: WcOpcode,
        byte_len: u32,
        imm: Option<u32>,
    ) -> WorkCompletion {
        WorkCompletion {
            wr_id,
            status,
            opcode,
            byte_len,
            imm,
            qp_num: self.qpn,
            src_qp: self.dest_qpn,
            sender: self.remote.map(|r| r.ip),
        }
    }
}

fn send_wc(qpn: u32, wr: &SendWr, status: WcStatus) -> WorkCompletion {
    WorkCompletion::send(qpn, wr.wr_id, wr.op.wc_opcode(), wr.sge.length, status)
}
