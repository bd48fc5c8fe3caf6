//! The unreliable datagram transport (IBTA Vol. 1 §9.8): one packet per message, a DETH
//! carrying the Q_Key and the source QPN, no acknowledgements. The PSN is sent but not
//! checked (§9.8.3). Receives start with the 40-byte GRH area ibverbs applications expect.

use std::collections::VecDeque;

use crate::mem::{Access, Memory, PdId, Span};
use crate::transport::{psn_add, Io, OutPacket, QpCounters, RecvBuf};
use crate::transport::{
    CqId, QpState, RecvWr, UdSendWr, VerbsError, WcOpcode, WcStatus, WorkCompletion,
};
use crate::wire::{grh, BthRepr, DethRepr, ExtHeaders, Opcode, RocePacket};

/// The well-known Q_Key of QP1, the general services interface (IBTA §13.5.3.1).
pub const GSI_QKEY: u32 = 0x8001_0000;
/// Bytes of GRH at the start of every UD receive buffer.
pub const GRH_LEN: usize = grh::HEADER_LEN;

#[derive(Debug, Clone, Copy)]
struct Wqe {
    wr: UdSendWr,
    span: Option<Span>,
    status: Option<WcStatus>,
}

/// One UD queue pair (also QP1, the GSI).
pub struct UdQp {
    pub(crate) qpn: u32,
    pd: PdId,
    pub(crate) state: QpState,
    send_cq: CqId,
    recv_cq: CqId,
    qkey: u32,
    pkey: u16,
    mtu: u32,
    next_psn: u32,
    sq: VecDeque<Wqe>,
    rq: VecDeque<RecvBuf>,
    max_send_wr: usize,
    max_recv_wr: usize,
    pub(crate) counters: QpCounters,
}

impl UdQp {
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
            qkey: if qpn == 1 { GSI_QKEY } else { 0 },
            pkey: 0xffff,
            mtu: 1024,
            next_psn: 0,
            sq: VecDeque::new(),
            rq: VecDeque::new(),
            max_send_wr,
            max_recv_wr,
            counters: QpCounters::default(),
        }
    }

    fn bad_state(&self, what: &'static str) -> VerbsError {
        VerbsError::BadState {
            qpn: self.qpn,
            state: self.state,
            what,
        }
    }

    pub(crate) fn modify_init(&mut self, pkey: u16, qkey: u32) -> Result<(), VerbsError> {
        if self.state != QpState::Reset {
            return Err(self.bad_state("RESET -> INIT"));
        }
        self.pkey = pkey;
        if self.qpn != 1 {
            self.qkey = qkey;
        }
        self.state = QpState::Init;
        Ok(())
    }

    pub(crate) fn modify_rtr(&mut self, mtu: u32) -> Result<(), VerbsError> {
        if self.state != QpState::Init {
            return Err(self.bad_state("INIT -> RTR"));
        }
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
        for r in self.rq.drain(..) {
            io.wcs.push((
                self.recv_cq,
                recv_wc(self.qpn, r.wr_id, WcStatus::WrFlushErr, 0, None, 0, None),
            ));
        }
    }

    pub(crate) fn post_send(&mut self, mem: &Memory, wr: UdSendWr) -> Result<(), VerbsError> {
        if self.state != QpState::Rts {
            return Err(self.bad_state("post_send"));
        }
        if self.sq.len() >= self.max_send_wr {
            return Err(VerbsError::QueueFull("send"));
        }
        let len = wr.sge.length;
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
        // A datagram is one packet: longer than the path MTU is a local length error
        // (IBV_WC_LOC_LEN_ERR), reported in order like any other completion.
        let status = if len > self.mtu {
            Some(WcStatus::LocLenErr)
        } else if len != 0 && span.is_none() {
            Some(WcStatus::LocProtErr)
        } else {
            None
        };
        self.sq.push_back(Wqe { wr, span, status });
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

    /// The next datagram; a work request completes when its packet is handed out.
    pub(crate) fn next_packet(&mut self, io: &mut Io<'_>) -> Option<OutPacket> {
        if self.state != QpState::Rts {
            return None;
        }
        while let Some(w) = self.sq.pop_front() {
            if let Some(status) = w.status {
                io.wcs
                    .push((self.send_cq, send_wc(self.qpn, &w.wr, status)));
                continue;
            }
            let op = if w.wr.imm.is_some() {
                Opcode::UdSendOnlyImm
            } else {
                Opcode::UdSendOnly
            };
            let mut bth = BthRepr::new(op, w.wr.remote_qpn & 0xff_ffff, self.next_psn);
            bth.pkey = self.pkey;
            bth.solicited = w.wr.solicited;
            self.next_psn = psn_add(self.next_psn, 1);
            // Q_Key rule (IBTA §10.2.5): bit 31 set in the work request means "use the
            // QP's own Q_Key".
            let qkey = if w.wr.remote_qkey & 0x8000_0000 != 0 {
                self.qkey
            } else {
                w.wr.remote_qkey
            };
            let ext = ExtHeaders {
                deth: Some(DethRepr {
                    qkey,
                    src_qp: self.qpn,
                }),
                imm: w.wr.imm,
                ..ExtHeaders::default()
            };
            if w.wr.signaled {
                io.wcs
                    .push((self.send_cq, send_wc(self.qpn, &w.wr, WcStatus::Success)));
            }
            return Some(OutPacket {
                bth,
                ext,
                payload: w.span,
                to: w.wr.dest,
            });
        }
        None
    }

    /// A received datagram (ICRC verified).
    pub(crate) fn on_packet(&mut self, io: &mut Io<'_>, p: &RocePacket<'_>) {
        if !matches!(self.state, QpState::Rtr | QpState::Rts) {
            self.counters.dropped += 1;
            return;
        }
        let (Some(deth), true) = (
            p.ext.deth,
            matches!(p.bth.opcode, Opcode::UdSendOnly | Opcode::UdSendOnlyImm),
        ) else {
            self.counters.dropped += 1;
            return;
        };
        if deth.qkey != self.qkey {
            self.counters.qkey_violation += 1;
            return;
        }
        if p.bth.pkey & 0x7fff != self.pkey & 0x7fff {
            self.counters.dropped += 1;
            return;
        }
        let Some(r) = self.rq.pop_front() else {
            self.counters.no_recv_drop += 1;
            return;
        };
        let len = p.payload.len();
        let sender = Some(p.ip.src());
        if (r.len as usize) < GRH_LEN + len {
            io.wcs.push((
                self.recv_cq,
                recv_wc(
                    self.qpn,
                    r.wr_id,
                    WcStatus::LocLenErr,
                    0,
                    None,
                    deth.src_qp,
                    sender,
                ),
            ));
            return;
        }
        if let Some(span) = r.span {
            let placed = io.mem.write(span).is_some_and(|buf| {
                grh::ud_receive_grh(&p.ip, p.ip_header, buf).is_ok()
                    && buf
                        .get_mut(GRH_LEN..GRH_LEN + len)
                        .map(|d| d.copy_from_slice(p.payload))
                        .is_some()
            });
            if !placed {
                // The receive buffer was deregistered after it was posted.
                self.counters.dropped += 1;
                let wc = recv_wc(
                    self.qpn,
                    r.wr_id,
                    WcStatus::LocProtErr,
                    0,
                    None,
                    deth.src_qp,
                    sender,
                );
                io.wcs.push((self.recv_cq, wc));
                return;
            }
        }
        self.counters.delivered += 1;
        let byte_len = (GRH_LEN + len) as u32;
        io.wcs.push((
            self.recv_cq,
            recv_wc(
                self.qpn,
                r.wr_id,
                WcStatus::Success,
                byte_len,
                p.ext.imm,
                deth.src_qp,
                sender,
            ),
        ));
    }
}

fn send_wc(qpn: u32, wr: &UdSendWr, status: WcStatus) -> WorkCompletion {
    WorkCompletion::send(qpn, wr.wr_id, WcOpcode::Send, wr.sge.length, status)
}

fn recv_wc(
    qpn: u32,
    wr_id: u64,
    status: WcStatus,
    byte_len: u32,
    imm: Option<u32>,
    src_qp: u32,
    sender: Option<std::net::IpAddr>,
) -> WorkCompletion {
    WorkCompletion {
        wr_id,
        status,
        opcode: WcOpcode::Recv,
        byte_len,
        imm,
        qp_num: qpn,
        src_qp,
        sender,
    }
}
