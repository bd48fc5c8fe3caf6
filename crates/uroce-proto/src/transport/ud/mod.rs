//! The unreliable datagram transport (IBTA Vol. 1 §9.8): one packet per message, a DETH
//! carrying the Q_Key and the source QPN, no acknowledgements. The PSN is sent but not
//! checked (§9.8.3). Receives start with the 40-byte GRH area ibverbs applications expect.

use std::collections::VecDeque;

use crate::transport::Local;
use crate::transport::{psn_add, Io, OutPacket};
use crate::transport::{
    Datagram, Fatal, InitAttr, Mtu, Peer, QpAttr, QpAttrMask, QpCore, RtsAttr, Service, UdSendWr,
    WcOpcode, WcStatus, WorkCompletion,
};
use crate::wire::{grh, BthRepr, DethRepr, ExtHeaders, Opcode, RocePacket};

/// The well-known Q_Key of QP1, the general services interface (IBTA §13.5.3.1).
pub const GSI_QKEY: u32 = 0x8001_0000;
/// Bytes of GRH at the start of every UD receive buffer.
pub const GRH_LEN: usize = grh::HEADER_LEN;

#[derive(Debug, Clone)]
struct Wqe {
    wr: UdSendWr,
    span: Local,
    status: Option<WcStatus>,
}

/// The UD part of one queue pair (also QP1, the GSI).
pub struct UdQp {
    qkey: u32,
    pkey: u16,
    mtu: u32,
    next_psn: u32,
    sq: VecDeque<Wqe>,
    /// SQD: no datagram is started (each one completes as it is sent, so nothing is
    /// ever in progress).
    draining: bool,
}

impl UdQp {
    pub(crate) fn new(core: &QpCore) -> Self {
        Self {
            qkey: if core.qpn == 1 { GSI_QKEY } else { 0 },
            pkey: 0xffff,
            mtu: 1024,
            next_psn: 0,
            sq: VecDeque::new(),
            draining: false,
        }
    }
}

impl Service for UdQp {
    fn init(&mut self, core: &QpCore, a: &InitAttr) {
        self.pkey = a.pkey;
        // QP1 keeps the well-known Q_Key.
        if core.qpn != 1 {
            self.qkey = a.qkey;
        }
    }

    fn rts(&mut self, a: &RtsAttr) {
        self.next_psn = a.sq_psn & 0xff_ffff;
    }

    /// What UD changes after the transition that set it: the Q_Key (QP1 keeps its
    /// own) and the P_Key.
    fn set(&mut self, core: &QpCore, a: &QpAttr, mask: QpAttrMask) {
        if mask.contains(QpAttrMask::QKEY) && core.qpn != 1 {
            self.qkey = a.qkey;
        }
        if mask.contains(QpAttrMask::PKEY_INDEX) {
            self.pkey = a.pkey;
        }
    }

    fn reset(&mut self, core: &QpCore) {
        *self = Self::new(core);
    }

    fn set_draining(&mut self, on: bool) {
        self.draining = on;
    }

    fn peer(&self) -> Option<Peer> {
        None
    }

    fn flush_send(&mut self, flushed: &mut dyn FnMut(u64, WcOpcode)) {
        for w in self.sq.drain(..) {
            flushed(w.wr.wr_id, WcOpcode::Send);
        }
    }

    fn refers_to(&self, lkey: u32) -> bool {
        self.sq.iter().any(|w| w.span.refers_to(lkey))
    }

    /// A received datagram (ICRC verified), in RTR or RTS.
    fn on_packet(
        &mut self,
        core: &mut QpCore,
        io: &mut Io<'_>,
        p: &RocePacket<'_>,
    ) -> Result<(), Fatal> {
        let (Some(deth), true) = (
            p.ext.deth,
            matches!(p.bth.opcode(), Opcode::UdSendOnly | Opcode::UdSendOnlyImm),
        ) else {
            core.counters.dropped += 1;
            return Ok(());
        };
        if deth.qkey != self.qkey {
            core.counters.qkey_violation += 1;
            return Ok(());
        }
        if p.bth.pkey() & 0x7fff != self.pkey & 0x7fff {
            core.counters.dropped += 1;
            return Ok(());
        }
        let Some(r) = io.take_recv(&mut core.rq) else {
            core.counters.no_recv_drop += 1;
            return Ok(());
        };
        let len = p.payload.len();
        let from = Some(Peer {
            qpn: deth.src_qp,
            ip: p.ip().src(),
        });
        if r.bad {
            // Its entries failed the key check when posted: the GRH alone needs them.
            let wc = WorkCompletion::recv(
                core.qpn,
                r.wr_id,
                WcStatus::LocProtErr,
                WcOpcode::Recv,
                0,
                None,
                from,
            );
            io.wcs.push((core.recv_cq, wc));
            return Ok(());
        }
        if (r.len as usize) < GRH_LEN + len {
            io.wcs.push((
                core.recv_cq,
                WorkCompletion::recv(
                    core.qpn,
                    r.wr_id,
                    WcStatus::LocLenErr,
                    WcOpcode::Recv,
                    0,
                    None,
                    from,
                ),
            ));
            return Ok(());
        }
        let placed = match &r.local {
            Local::Empty => true,
            Local::One(span) => io.mem.write(*span).is_some_and(|mut buf| {
                let mut g = [0u8; GRH_LEN];
                grh::ud_receive_grh(p.ip(), &mut g).is_ok()
                    && buf.sub(0, GRH_LEN).is_some_and(|mut d| d.copy_from(&g))
                    && buf
                        .sub(GRH_LEN, len)
                        .is_some_and(|mut d| d.copy_from(p.payload))
            }),
            // Over several entries: the 40 bytes of GRH first, then the payload, both
            // scattered in order (ibverbs' UD receive layout, whatever the entries).
            many => {
                let mut g = [0u8; GRH_LEN];
                grh::ud_receive_grh(p.ip(), &mut g).is_ok()
                    && many.copy_in(io.mem, 0, &g)
                    && many.copy_in(io.mem, GRH_LEN, p.payload)
            }
        };
        {
            if !placed {
                // The receive buffer was deregistered after it was posted.
                core.counters.dropped += 1;
                let wc = WorkCompletion::recv(
                    core.qpn,
                    r.wr_id,
                    WcStatus::LocProtErr,
                    WcOpcode::Recv,
                    0,
                    None,
                    from,
                );
                io.wcs.push((core.recv_cq, wc));
                return Ok(());
            }
        }
        core.counters.delivered += 1;
        let byte_len = (GRH_LEN + len) as u32;
        io.wcs.push((
            core.recv_cq,
            WorkCompletion::recv(
                core.qpn,
                r.wr_id,
                WcStatus::Success,
                WcOpcode::Recv,
                byte_len,
                p.ext.imm,
                from,
            )
            .solicited(p.bth.solicited())
            .with_grh(),
        ));
        Ok(())
    }

    fn has_more(&self) -> bool {
        !self.sq.is_empty()
    }

    /// The next datagram; a work request completes when its packet is handed out.
    fn next_request(&mut self, core: &mut QpCore, io: &mut Io<'_>) -> Option<OutPacket> {
        if self.draining {
            return None; // SQD: nothing new starts
        }
        while let Some(w) = self.sq.pop_front() {
            if let Some(status) = w.status {
                io.wcs
                    .push((core.send_cq, send_wc(core.qpn, &w.wr, status)));
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
                    src_qp: core.qpn,
                }),
                imm: w.wr.imm,
                ..ExtHeaders::default()
            };
            if w.wr.signaled {
                io.wcs
                    .push((core.send_cq, send_wc(core.qpn, &w.wr, WcStatus::Success)));
            }
            return Some(OutPacket {
                bth,
                ext,
                payload: w.span.payload(0, w.span.len(), io.gather),
                to: w.wr.dest,
            });
        }
        None
    }

    fn datagram(&mut self) -> Option<&mut dyn Datagram> {
        Some(self)
    }
}

impl Datagram for UdQp {
    fn rtr(&mut self, mtu: Mtu) {
        self.mtu = mtu.bytes();
    }

    fn send_queued(&self) -> usize {
        self.sq.len()
    }

    fn post_send(&mut self, _core: &QpCore, wr: UdSendWr, local: Local) {
        // A datagram is one packet: longer than the path MTU is a local length error
        // (IBV_WC_LOC_LEN_ERR), reported in order like any other completion; the shell
        // resolved the buffer of the others.
        let status = (wr.sge.length > self.mtu).then_some(WcStatus::LocLenErr);
        self.sq.push_back(Wqe {
            wr,
            span: local,
            status,
        });
    }
}

fn send_wc(qpn: u32, wr: &UdSendWr, status: WcStatus) -> WorkCompletion {
    WorkCompletion::send(qpn, wr.wr_id, WcOpcode::Send, wr.sge.length, status)
}
