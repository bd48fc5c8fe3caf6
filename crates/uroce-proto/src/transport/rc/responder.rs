//! The RC responder (IBTA §9.7.5.2 and §9.7.4 for duplicates): checks PSNs, executes
//! SEND / RDMA WRITE / RDMA READ / atomics against registered memory after the access
//! check, and answers with ACKs (coalesced), NAKs, READ responses and ATOMIC ACKs, in
//! PSN order.

use std::collections::VecDeque;

use super::{Fatal, Io, OutPacket, Path, QpCounters};
use crate::mem::{Access, AccessError, Memory, PdId, Span};
use crate::transport::{psn_add, psn_diff, QpErrorEvent, RecvBuf};
use crate::transport::{CqId, WcOpcode, WcStatus, WorkCompletion};
use crate::wire::{
    AethRepr, AtomicAckEthRepr, BthRepr, ExtHeaders, NakCode, Opcode, RocePacket, Syndrome,
    TransportKind,
};

/// Credit count sent in ACKs: 31 means "no end-to-end credits" (§9.7.7.2.5).
const NO_CREDITS: u8 = 31;

#[derive(Debug, Clone)]
enum InMsg {
    Send {
        rwqe: RecvBuf,
        offset: u32,
    },
    Write {
        span: Option<Span>,
        offset: u64,
        total: u64,
    },
}

#[derive(Debug, Clone, Copy)]
enum Resp {
    Ack {
        psn: u32,
        syndrome: Syndrome,
        msn: u32,
    },
    AtomicAck {
        psn: u32,
        msn: u32,
        orig: u64,
        /// A new request (counts against max_dest_rd_atomic), not a replay.
        fresh: bool,
    },
    Read {
        first: u32,
        next: u32,
        npkts: u32,
        span: Option<Span>,
        total: u32,
        msn: u32,
        fresh: bool,
    },
}

impl Resp {
    fn fresh(&self) -> bool {
        matches!(
            self,
            Resp::AtomicAck { fresh: true, .. } | Resp::Read { fresh: true, .. }
        )
    }
    fn replay(&self) -> bool {
        matches!(
            self,
            Resp::AtomicAck { fresh: false, .. } | Resp::Read { fresh: false, .. }
        )
    }
}

/// A READ the responder executed, remembered so that only its own retransmissions are
/// answered again (§9.7.5.2.2), never an arbitrary READ with an old PSN.
#[derive(Debug, Clone, Copy)]
struct PastRead {
    first: u32,
    npkts: u32,
    va: u64,
    rkey: u32,
    len: u32,
}

/// Largest message (IBTA: 2^31 bytes).
const MAX_MESSAGE: u64 = 1 << 31;

/// Responder state of one QP. `repr(C)`: what a request packet reads (the expected
/// PSN, the access rights, the message being placed, the response queue) first.
#[derive(Debug, Default)]
#[repr(C)]
pub(crate) struct Responder {
    /// Responses to send, oldest first, ahead of `ack`.
    out: VecDeque<Resp>,
    /// The plain ACK (PSN, MSN) that waits behind everything in `out`: kept here, not in
    /// `out`, so that the common case, one ACK per request coalesced until sent, writes
    /// no queue buffer (with 10,000 QPs, a cache line not touched per request).
    ack: Option<(u32, u32)>,
    epsn: u32,
    msn: u32,
    pub(crate) pkey: u16,
    access: Access,
    nak_seq_sent: bool,
    /// A request came out of sequence or twice since the last [`Responder::take_saw_loss`]:
    /// the path between the peers loses (or the peer resent).
    saw_loss: bool,
    min_rnr_timer: u8,
    max_dest_rd_atomic: u32,
    qpn: u32,
    cq: CqId,
    pd: PdId,
    cur: Option<InMsg>,
    /// The affiliated asynchronous error of the last fatal error, when no receive work
    /// request reported it.
    event: Option<QpErrorEvent>,
    atomic_replay: VecDeque<(u32, u64)>,
    past_reads: VecDeque<PastRead>,
}

enum Verdict {
    Done,
    Nak(NakCode),
    Rnr,
    LenErr(RecvBuf),
}

impl Responder {
    pub(crate) fn new(qpn: u32, cq: CqId, pd: PdId) -> Self {
        Self {
            qpn,
            cq,
            pd,
            pkey: 0xffff,
            ..Self::default()
        }
    }

    pub(crate) fn set_access(&mut self, access: Access, pkey: u16) {
        self.access = access;
        self.pkey = pkey;
    }

    /// IBV_QP_MIN_RNR_TIMER changed (RTS → RTS, SQD → SQD): the next RNR NAK carries it.
    pub(crate) fn set_min_rnr_timer(&mut self, code: u8) {
        self.min_rnr_timer = code & 31;
    }

    /// IBV_QP_MAX_DEST_RD_ATOMIC changed (SQD → SQD).
    pub(crate) fn set_max_dest_rd_atomic(&mut self, n: u8) {
        self.max_dest_rd_atomic = u32::from(n.max(1));
    }

    pub(crate) fn start(&mut self, rq_psn: u32, max_dest_rd_atomic: u8, min_rnr_timer: u8) {
        self.epsn = rq_psn & 0xff_ffff;
        self.max_dest_rd_atomic = u32::from(max_dest_rd_atomic.max(1));
        self.min_rnr_timer = min_rnr_timer & 31;
    }

    fn queue_ack(&mut self, psn: u32) {
        // Coalesce: a newer ACK replaces an ACK still waiting at the tail, which is
        // `ack` whenever there is one (`push` moves it into `out` before anything
        // queued behind it).
        self.ack = Some((psn, self.msn));
    }

    /// Queues a response behind everything queued, the waiting ACK included.
    fn push(&mut self, r: Resp) {
        if let Some((psn, msn)) = self.ack.take() {
            self.out.push_back(Resp::Ack {
                psn,
                syndrome: Syndrome::Ack {
                    credits: NO_CREDITS,
                },
                msn,
            });
        }
        self.out.push_back(r);
    }

    /// Whether a request came out of sequence or twice since the last call; clears it.
    #[inline]
    pub(crate) fn take_saw_loss(&mut self) -> bool {
        std::mem::take(&mut self.saw_loss)
    }

    /// A request ahead of the expected PSN: counted, and NAKed PSN Sequence Error once per
    /// sequence error (§9.7.5.2.2), with the expected PSN.
    fn out_of_sequence(&mut self, c: &mut QpCounters) {
        c.out_of_sequence += 1;
        if !self.nak_seq_sent {
            self.nak_seq_sent = true;
            c.nak_sent_seq += 1;
            let e = self.epsn;
            self.queue_nak(e, Syndrome::Nak(NakCode::PsnSequenceError));
        }
    }

    fn queue_nak(&mut self, psn: u32, syndrome: Syndrome) {
        self.push(Resp::Ack {
            psn,
            syndrome,
            msn: self.msn,
        });
    }

    /// Handles a request packet. `Err` means the QP must go to the error state (after the
    /// NAK already queued is sent).
    pub(crate) fn on_request(
        &mut self,
        path: &Path,
        io: &mut Io<'_>,
        p: &RocePacket<'_>,
        c: &mut QpCounters,
        rq: &mut VecDeque<RecvBuf>,
    ) -> Result<(), Fatal> {
        if p.bth.opcode().transport() != TransportKind::Rc {
            c.dropped += 1;
            return Ok(());
        }
        let psn = p.bth.psn();
        let d = psn_diff(psn, self.epsn);
        if d > 0 {
            // A new sequence error; not the packets behind an RNR NAK, which wait for
            // the requester's resend by design.
            self.saw_loss |= !self.nak_seq_sent;
            self.out_of_sequence(c);
            return Ok(());
        }
        if d < 0 {
            self.saw_loss = true;
            c.duplicate_request += 1;
            self.duplicate(path, io.mem, p);
            return Ok(());
        }
        self.nak_seq_sent = false;
        match self.execute(path, io, p, rq) {
            Verdict::Done => Ok(()),
            Verdict::Rnr => {
                c.nak_sent_rnr += 1;
                let t = self.min_rnr_timer;
                self.queue_nak(psn, Syndrome::RnrNak { timer: t });
                // The packets behind it are not a new sequence error: stay quiet until
                // the requester comes back to this PSN.
                self.nak_seq_sent = true;
                Ok(())
            }
            Verdict::Nak(code) => {
                match code {
                    NakCode::RemoteAccessError => c.nak_sent_access += 1,
                    _ => c.nak_sent_inv += 1,
                }
                self.queue_nak(psn, Syndrome::Nak(code));
                let status = match code {
                    NakCode::RemoteAccessError => WcStatus::RemAccessErr,
                    // The receive buffer itself failed (rdma_rxe: malformed WQE, class A).
                    NakCode::RemoteOperationalError => WcStatus::LocQpOpErr,
                    _ => WcStatus::RemInvReqErr,
                };
                if !self.fail_receiving(path, io, status) {
                    // C9-222.1.1: a class C error that no receive work request can
                    // report is an affiliated asynchronous error (rdma_rxe: an rkey
                    // violation raises IB_EVENT_QP_ACCESS_ERR).
                    self.event = Some(match code {
                        NakCode::RemoteAccessError => QpErrorEvent::AccessErr,
                        NakCode::RemoteOperationalError => QpErrorEvent::Fatal,
                        _ => QpErrorEvent::ReqErr,
                    });
                }
                Err(Fatal(status))
            }
            Verdict::LenErr(rwqe) => {
                c.nak_sent_inv += 1;
                io.wcs.push((
                    self.cq,
                    self.wc(
                        rwqe.wr_id,
                        WcStatus::LocLenErr,
                        WcOpcode::Recv,
                        0,
                        None,
                        path,
                    ),
                ));
                self.cur = None;
                self.queue_nak(psn, Syndrome::Nak(NakCode::InvalidRequest));
                Err(Fatal(WcStatus::LocLenErr))
            }
        }
    }

    /// A request whose transport header breaks the opcode table (a reserved or
    /// unsupported RC opcode, an RDMA READ request or an atomic carrying payload, a pad
    /// count that does not fit): in sequence, it is an invalid request (§9.9.3, class C:
    /// "unsupported or reserved OpCode", length errors), NAKed with Invalid Request at
    /// its PSN, and the QP goes to ERR. Out of sequence it is a sequence error like any
    /// other request (class B, §9.7.5.2.2); a duplicate cannot be replayed and is dropped.
    pub(crate) fn on_misfit(
        &mut self,
        path: &Path,
        io: &mut Io<'_>,
        m: &crate::wire::Misfit,
        c: &mut QpCounters,
    ) -> Result<(), Fatal> {
        let d = psn_diff(m.psn, self.epsn);
        if d > 0 {
            self.out_of_sequence(c);
            return Ok(());
        }
        if d < 0 {
            c.duplicate_request += 1;
            c.dropped += 1;
            return Ok(());
        }
        self.nak_seq_sent = false;
        c.nak_sent_inv += 1;
        self.queue_nak(m.psn, Syndrome::Nak(NakCode::InvalidRequest));
        if !self.fail_receiving(path, io, WcStatus::RemInvReqErr) {
            self.event = Some(QpErrorEvent::ReqErr);
        }
        Err(Fatal(WcStatus::RemInvReqErr))
    }

    /// A class C error (§9.9.3) while a SEND is being placed: that receive completes
    /// with the error (byte_len 0, as ibverbs and rdma_rxe report an error completion);
    /// the rest of the receive queue is flushed when the QP enters ERR.
    /// Whether a receive took the error.
    fn fail_receiving(&mut self, path: &Path, io: &mut Io<'_>, status: WcStatus) -> bool {
        if !matches!(self.cur, Some(InMsg::Send { .. })) {
            return false;
        }
        if let Some(InMsg::Send { rwqe, .. }) = self.cur.take() {
            let wc = self.wc(rwqe.wr_id, status, WcOpcode::Recv, 0, None, path);
            io.wcs.push((self.cq, wc));
            return true;
        }
        false
    }

    /// The affiliated asynchronous error of the fatal error just returned, if no receive
    /// work request reported it.
    pub(crate) fn take_event(&mut self) -> Option<QpErrorEvent> {
        self.event.take()
    }

    /// Forgets every response not sent yet: the QP went to ERR because its CQ overran,
    /// and rdma_rxe's responder (class G) sends neither ACK nor NAK for that message.
    pub(crate) fn discard_responses(&mut self) {
        self.out.clear();
        self.ack = None;
    }

    fn wc(
        &self,
        wr_id: u64,
        status: WcStatus,
        opcode: WcOpcode,
        byte_len: u32,
        imm: Option<u32>,
        path: &Path,
    ) -> WorkCompletion {
        let from = Some(path.peer());
        WorkCompletion::recv(self.qpn, wr_id, status, opcode, byte_len, imm, from)
    }

    fn execute(
        &mut self,
        path: &Path,
        io: &mut Io<'_>,
        p: &RocePacket<'_>,
        rq: &mut VecDeque<RecvBuf>,
    ) -> Verdict {
        use Opcode::*;
        let op = p.bth.opcode();
        let psn = p.bth.psn();
        let mtu = path.mtu as usize;
        let len = p.payload.len();
        // Opcode sequence (§9.7.5.2.3): continuation packets only inside a message.
        let in_send = matches!(self.cur, Some(InMsg::Send { .. }));
        let in_write = matches!(self.cur, Some(InMsg::Write { .. }));
        let seq_ok = match op {
            RcSendMiddle | RcSendLast | RcSendLastImm | RcSendLastInv => in_send,
            RcWriteMiddle | RcWriteLast | RcWriteLastImm => in_write,
            RcSendFirst | RcSendOnly | RcSendOnlyImm | RcSendOnlyInv | RcWriteFirst
            | RcWriteOnly | RcWriteOnlyImm | RcReadRequest | RcCompareSwap | RcFetchAdd => {
                self.cur.is_none()
            }
            _ => false, // responses, FLUSH, ATOMIC WRITE: not requests this responder takes
        };
        if !seq_ok {
            return Verdict::Nak(NakCode::InvalidRequest);
        }
        // Payload sizes (§9.7.5.2.4): FIRST and MIDDLE carry exactly one MTU, LAST 1..=MTU.
        let size_ok = if op.is_first() || op.is_middle() {
            len == mtu
        } else if matches!(
            op,
            RcSendLast | RcSendLastImm | RcSendLastInv | RcWriteLast | RcWriteLastImm
        ) {
            (1..=mtu).contains(&len)
        } else {
            len <= mtu
        };
        if !size_ok {
            return Verdict::Nak(NakCode::InvalidRequest);
        }
        let last = !(op.is_first() || op.is_middle());
        match op {
            RcSendFirst | RcSendMiddle | RcSendLast | RcSendLastImm | RcSendLastInv
            | RcSendOnly | RcSendOnlyImm | RcSendOnlyInv => {
                if self.cur.is_none() {
                    let Some(rwqe) = io.take_recv(rq) else {
                        return Verdict::Rnr;
                    };
                    self.cur = Some(InMsg::Send { rwqe, offset: 0 });
                }
                let Some(InMsg::Send { rwqe, offset }) = &self.cur else {
                    return Verdict::Nak(NakCode::InvalidRequest);
                };
                let (offset, wr_id) = (*offset, rwqe.wr_id);
                let end = offset as usize + len;
                if end > rwqe.len as usize {
                    return Verdict::LenErr(rwqe.clone());
                }
                // The buffer's lkeys are checked as the message starts using them: a
                // region moved to another PD since the post fails it (as the copy
                // below fails one posted with a bad key, or deregistered since).
                if offset == 0 && !rwqe.local.in_pd(io.mem, self.pd) {
                    return Verdict::Nak(NakCode::RemoteOperationalError);
                }
                // Scattered over the receive's entries in order (rdma_rxe's `send_data_in`
                // → `copy_data`).
                if !rwqe.local.copy_in(io.mem, offset as usize, p.payload) {
                    // The receive buffer was deregistered after it was posted.
                    return Verdict::Nak(NakCode::RemoteOperationalError);
                }
                if last {
                    // SEND with Invalidate: the window the IETH names is invalidated
                    // when the message completes (IBTA §10.6.7.2.3; rdma_rxe's
                    // `execute` calls `invalidate_rkey` after placing the data). A key
                    // this QP may not invalidate (unknown, a region's, a type 1 window,
                    // a window bound to another QP) is rdma_rxe's "class J": the receive
                    // completes REM_INV_REQ_ERR and the QP goes to ERR. rdma_rxe still
                    // ACKs the message; uroce NAKs it Invalid Request, as it does every
                    // other request it fails, so the requester's SEND does not complete
                    // as a success that never happened. (The opcode table gives an IETH
                    // to SEND_LAST / SEND_ONLY with Invalidate only.)
                    let inv = p.ext.ieth;
                    if let Some(rkey) = inv {
                        if io.mem.invalidate(self.pd, Some(self.qpn), rkey).is_err() {
                            return Verdict::Nak(NakCode::InvalidRequest);
                        }
                    }
                    self.cur = None;
                    self.msn = psn_add(self.msn, 1);
                    let mut wc = self
                        .wc(
                            wr_id,
                            WcStatus::Success,
                            WcOpcode::Recv,
                            end as u32,
                            p.ext.imm,
                            path,
                        )
                        .solicited(p.bth.solicited());
                    if let Some(rkey) = inv {
                        wc = wc.with_inv(rkey);
                    }
                    io.wcs.push((self.cq, wc));
                } else if let Some(InMsg::Send { offset, .. }) = &mut self.cur {
                    *offset = end as u32;
                }
            }
            RcWriteFirst | RcWriteMiddle | RcWriteLast | RcWriteLastImm | RcWriteOnly
            | RcWriteOnlyImm => {
                let with_imm = matches!(op, RcWriteLastImm | RcWriteOnlyImm);
                if with_imm && !io.has_recv(rq) {
                    return Verdict::Rnr; // checked before any byte is written
                }
                if let Some(reth) = p.ext.reth {
                    if !self.access.contains(Access::REMOTE_WRITE)
                        || u64::from(reth.len) > MAX_MESSAGE
                    {
                        return Verdict::Nak(NakCode::InvalidRequest);
                    }
                    let total = u64::from(reth.len);
                    if (op == RcWriteOnly || op == RcWriteOnlyImm) && len as u64 != total
                        || op == RcWriteFirst && total <= len as u64
                    {
                        return Verdict::Nak(NakCode::InvalidRequest);
                    }
                    let span = if total == 0 {
                        None
                    } else {
                        match io.mem.check_remote(
                            self.pd,
                            self.qpn,
                            reth.rkey,
                            reth.va,
                            total,
                            Access::REMOTE_WRITE,
                        ) {
                            Ok(s) => Some(s),
                            Err(_) => return Verdict::Nak(NakCode::RemoteAccessError),
                        }
                    };
                    self.cur = Some(InMsg::Write {
                        span,
                        offset: 0,
                        total,
                    });
                }
                let Some(InMsg::Write {
                    span,
                    offset,
                    total,
                }) = self.cur
                else {
                    return Verdict::Nak(NakCode::InvalidRequest);
                };
                let end = offset + len as u64;
                if end > total || (last && end != total) {
                    return Verdict::Nak(NakCode::InvalidRequest);
                }
                if let Some(span) = span {
                    if !io.mem.copy_in(span.sub(offset as usize, len), p.payload) {
                        return Verdict::Nak(NakCode::RemoteAccessError);
                    }
                }
                if last {
                    self.cur = None;
                    self.msn = psn_add(self.msn, 1);
                    if with_imm {
                        if let Some(rwqe) = io.take_recv(rq) {
                            let wc = self
                                .wc(
                                    rwqe.wr_id,
                                    WcStatus::Success,
                                    WcOpcode::RecvRdmaWithImm,
                                    total as u32,
                                    p.ext.imm,
                                    path,
                                )
                                .solicited(p.bth.solicited());
                            io.wcs.push((self.cq, wc));
                        }
                    }
                } else {
                    self.cur = Some(InMsg::Write {
                        span,
                        offset: end,
                        total,
                    });
                }
            }
            RcReadRequest => {
                let Some(reth) = p.ext.reth else {
                    return Verdict::Nak(NakCode::InvalidRequest);
                };
                if !self.access.contains(Access::REMOTE_READ) || u64::from(reth.len) > MAX_MESSAGE {
                    return Verdict::Nak(NakCode::InvalidRequest);
                }
                let reads = self.out.iter().filter(|r| r.fresh()).count();
                if reads as u32 >= self.max_dest_rd_atomic {
                    return Verdict::Nak(NakCode::InvalidRequest);
                }
                let span = match read_span(io.mem, self.pd, self.qpn, reth.rkey, reth.va, reth.len)
                {
                    Ok(s) => s,
                    Err(_) => return Verdict::Nak(NakCode::RemoteAccessError),
                };
                let npkts = (reth.len as usize).div_ceil(mtu).max(1) as u32;
                self.msn = psn_add(self.msn, 1);
                self.push(Resp::Read {
                    first: psn,
                    next: psn,
                    npkts,
                    span,
                    total: reth.len,
                    msn: self.msn,
                    fresh: true,
                });
                self.past_reads.push_back(PastRead {
                    first: psn,
                    npkts,
                    va: reth.va,
                    rkey: reth.rkey,
                    len: reth.len,
                });
                let keep = (self.max_dest_rd_atomic as usize).max(16);
                while self.past_reads.len() > keep {
                    self.past_reads.pop_front();
                }
                self.epsn = psn_add(psn, npkts);
                return Verdict::Done;
            }
            RcCompareSwap | RcFetchAdd => {
                let Some(a) = p.ext.atomic else {
                    return Verdict::Nak(NakCode::InvalidRequest);
                };
                if !self.access.contains(Access::REMOTE_ATOMIC) || a.va % 8 != 0 {
                    return Verdict::Nak(NakCode::InvalidRequest);
                }
                let reads = self.out.iter().filter(|r| r.fresh()).count();
                if reads as u32 >= self.max_dest_rd_atomic {
                    return Verdict::Nak(NakCode::InvalidRequest);
                }
                let span = match io.mem.check_remote(
                    self.pd,
                    self.qpn,
                    a.rkey,
                    a.va,
                    8,
                    Access::REMOTE_ATOMIC,
                ) {
                    Ok(s) => s,
                    Err(_) => return Verdict::Nak(NakCode::RemoteAccessError),
                };
                // One atomic step on the program's own word (IBV_ATOMIC_GLOB): a local
                // `__atomic_*` on the same word never loses an update against it.
                let done = io.mem.write(span).and_then(|mut word| {
                    if op == RcFetchAdd {
                        word.fetch_add(a.swap_add)
                    } else {
                        word.compare_swap(a.compare, a.swap_add)
                    }
                });
                let Some(orig) = done else {
                    return Verdict::Nak(NakCode::RemoteAccessError);
                };
                // Executed once: a duplicate of this PSN is answered from here (§9.7.5.2.2).
                self.atomic_replay.push_back((psn, orig));
                let keep = (self.max_dest_rd_atomic as usize).max(16);
                while self.atomic_replay.len() > keep {
                    self.atomic_replay.pop_front();
                }
                self.msn = psn_add(self.msn, 1);
                self.push(Resp::AtomicAck {
                    psn,
                    msn: self.msn,
                    orig,
                    fresh: true,
                });
                self.epsn = psn_add(psn, 1);
                return Verdict::Done;
            }
            _ => return Verdict::Nak(NakCode::InvalidRequest),
        }
        self.epsn = psn_add(psn, 1);
        if p.bth.ack_req() {
            self.queue_ack(psn);
        }
        Verdict::Done
    }

    /// A request with a PSN already executed (§9.7.5.2.2): SEND / WRITE are acknowledged
    /// again, READ is answered again from memory, an atomic gets its saved result.
    fn duplicate(&mut self, path: &Path, mem: &Memory, p: &RocePacket<'_>) {
        let psn = p.bth.psn();
        match p.bth.opcode() {
            Opcode::RcReadRequest => {
                let Some(reth) = p.ext.reth else { return };
                // Only a retransmission of a READ this responder executed, asking for the
                // rest of it from `psn` on, is answered again; and not beyond a bound on
                // queued replays.
                let mtu = u64::from(path.mtu);
                let known = self.past_reads.iter().any(|r| {
                    let k = psn_diff(psn, r.first);
                    if k < 0 || k as u32 >= r.npkts {
                        return false;
                    }
                    let off = (k as u64 * mtu).min(u64::from(r.len));
                    r.rkey == reth.rkey
                        && reth.va == r.va.wrapping_add(off)
                        && u64::from(reth.len) == u64::from(r.len) - off
                });
                let replays = self.out.iter().filter(|r| r.replay()).count();
                if !known
                    || !self.access.contains(Access::REMOTE_READ)
                    || replays >= 2 * (self.max_dest_rd_atomic as usize).max(1)
                {
                    return;
                }
                let Ok(span) = read_span(mem, self.pd, self.qpn, reth.rkey, reth.va, reth.len)
                else {
                    return;
                };
                let npkts = (reth.len as usize).div_ceil(path.mtu as usize).max(1) as u32;
                // Replace what is still queued for this READ from `psn` on.
                self.out.retain(|r| match r {
                    Resp::Read { first, npkts, .. } => {
                        let d = psn_diff(psn, *first);
                        !(d >= 0 && (d as u32) < *npkts)
                    }
                    _ => true,
                });
                let msn = self.msn;
                self.push(Resp::Read {
                    first: psn,
                    next: psn,
                    npkts,
                    span,
                    total: reth.len,
                    msn,
                    fresh: false,
                });
            }
            Opcode::RcCompareSwap | Opcode::RcFetchAdd => {
                if let Some(&(_, orig)) = self.atomic_replay.iter().find(|(q, _)| *q == psn) {
                    let msn = self.msn;
                    let replays = self.out.iter().filter(|r| r.replay()).count();
                    if replays < 2 * (self.max_dest_rd_atomic as usize).max(1) {
                        self.push(Resp::AtomicAck {
                            psn,
                            msn,
                            orig,
                            fresh: false,
                        });
                    }
                }
            }
            _ => {
                let last = psn_add(self.epsn, 0xff_ffff);
                self.queue_ack(last);
            }
        }
    }

    /// Whether a response waits to be sent.
    #[inline]
    pub(crate) fn has_response(&self) -> bool {
        self.ack.is_some() || !self.out.is_empty()
    }

    /// The next response packet.
    #[inline(never)]
    pub(crate) fn next_packet(&mut self, path: &Path) -> Option<OutPacket> {
        let Some(r) = self.out.front_mut() else {
            // Only the ACK at the tail waits (or nothing).
            let (psn, msn) = self.ack.take()?;
            let syndrome = Syndrome::Ack {
                credits: NO_CREDITS,
            };
            let mut bth = BthRepr::new(Opcode::RcAck, path.dest_qpn, psn);
            bth.pkey = path.pkey;
            return Some(OutPacket {
                bth,
                ext: ExtHeaders {
                    aeth: Some(AethRepr::new(syndrome, msn)),
                    ..ExtHeaders::default()
                },
                payload: crate::transport::Payload::None,
                to: path.remote,
            });
        };
        let mut ext = ExtHeaders::default();
        let (opcode, psn, payload) = match *r {
            Resp::Ack { psn, syndrome, msn } => {
                ext.aeth = Some(AethRepr::new(syndrome, msn));
                self.out.pop_front();
                (Opcode::RcAck, psn, None)
            }
            Resp::AtomicAck { psn, msn, orig, .. } => {
                ext.aeth = Some(AethRepr::new(
                    Syndrome::Ack {
                        credits: NO_CREDITS,
                    },
                    msn,
                ));
                ext.atomic_ack = Some(AtomicAckEthRepr { orig });
                self.out.pop_front();
                (Opcode::RcAtomicAck, psn, None)
            }
            Resp::Read {
                first,
                ref mut next,
                npkts,
                span,
                total,
                msn,
                ..
            } => {
                let psn = *next;
                let k = psn_diff(psn, first) as u32;
                let off = k as usize * path.mtu as usize;
                let len = (total as usize - off.min(total as usize)).min(path.mtu as usize);
                let op = match (k == 0, k + 1 == npkts) {
                    (true, true) => Opcode::RcReadResponseOnly,
                    (true, false) => Opcode::RcReadResponseFirst,
                    (false, true) => Opcode::RcReadResponseLast,
                    (false, false) => Opcode::RcReadResponseMiddle,
                };
                if op != Opcode::RcReadResponseMiddle {
                    ext.aeth = Some(AethRepr::new(
                        Syndrome::Ack {
                            credits: NO_CREDITS,
                        },
                        msn,
                    ));
                }
                *next = psn_add(psn, 1);
                if k + 1 == npkts {
                    self.out.pop_front();
                }
                (op, psn, span.map(|s| s.sub(off, len)))
            }
        };
        let mut bth = BthRepr::new(opcode, path.dest_qpn, psn);
        bth.pkey = path.pkey;
        Some(OutPacket {
            bth,
            ext,
            payload: payload.into(),
            to: path.remote,
        })
    }

    /// Whether the receive a SEND is being placed in, or a READ response not sent yet,
    /// has its buffer in the region `lkey` (`dereg_mr` is EBUSY while one does).
    pub(crate) fn refers_to(&self, lkey: u32) -> bool {
        matches!(&self.cur, Some(InMsg::Send { rwqe, .. }) if rwqe.refers_to(lkey))
            || self
                .out
                .iter()
                .any(|r| matches!(r, Resp::Read { span: Some(s), .. } if s.lkey == lkey))
    }

    /// QP to ERR: takes out the receive a SEND is being placed in, to be flushed ahead
    /// of the receive queue; queued NAKs still go out.
    pub(crate) fn take_receiving(&mut self) -> Option<RecvBuf> {
        let receiving = match self.cur.take() {
            Some(InMsg::Send { rwqe, .. }) => Some(rwqe),
            _ => None,
        };
        // What was queued before the fatal NAK (READ responses, atomic ACKs) still goes
        // out ahead of it, in PSN order.
        receiving
    }
}

/// The access check of a READ; zero-length reads need no key (§9.7.4.1.2).
fn read_span(
    mem: &Memory,
    pd: PdId,
    qpn: u32,
    rkey: u32,
    va: u64,
    len: u32,
) -> Result<Option<Span>, AccessError> {
    if len == 0 {
        return Ok(None);
    }
    mem.check_remote(pd, qpn, rkey, va, u64::from(len), Access::REMOTE_READ)
        .map(Some)
}

#[cfg(test)]
mod tests {
    use std::net::{IpAddr, Ipv4Addr};

    use super::*;
    use crate::transport::Remote;

    /// The ACK kept out of the queue still goes in PSN order: ACKs coalesce while
    /// nothing is queued behind them, a NAK queued after one goes out after it, and an
    /// ACK queued after the NAK after that.
    #[test]
    fn the_waiting_ack_keeps_its_place_in_the_queue() {
        let path = Path {
            remote: Remote {
                ip: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)),
                mac: [2, 0, 0, 0, 0, 2],
            },
            dest_qpn: 0x99,
            mtu: 1024,
            pkey: 0xffff,
        };
        let mut r = Responder::new(0x11, CqId(0), PdId(0));
        assert!(!r.has_response());
        r.queue_ack(1);
        r.queue_ack(2); // coalesced with 1
        r.queue_nak(3, Syndrome::Nak(NakCode::PsnSequenceError));
        r.queue_ack(4);
        r.queue_ack(5); // coalesced with 4
        let mut sent = Vec::new();
        while let Some(p) = r.next_packet(&path) {
            assert_eq!(p.bth.opcode, Opcode::RcAck);
            let kind = p.ext.aeth.expect("an AETH").kind();
            sent.push((p.bth.psn, matches!(kind, Syndrome::Ack { .. })));
        }
        assert_eq!(sent, [(2, true), (3, false), (5, true)]);
        assert!(!r.has_response());
        r.queue_ack(6);
        r.discard_responses();
        assert!(!r.has_response(), "the waiting ACK is discarded too");
    }
}
