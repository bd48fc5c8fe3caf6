//! Transports: pure state machines (sans-IO). Packets and time go in, packets and
//! completions come out; nothing here touches a socket or reads a clock.

mod attr;
mod completion;
mod error;
mod qp;
pub mod rc;
pub mod uc;
pub mod ud;
mod wr;

pub use attr::{ack_timeout, rnr_timer_us, InitAttr, Mtu, Remote, RtrAttr, RtsAttr};
pub use completion::{CqId, WcOpcode, WcStatus, WorkCompletion};
pub use error::VerbsError;
pub use qp::QpState;
pub use wr::{RecvWr, SendOp, SendWr, Sge, UdSendWr};

use std::collections::BTreeMap;
use std::time::Instant;

use crate::mem::{Access, Memory, PdId, Span};
use crate::wire::{BthRepr, ExtHeaders};

/// A packet a QP wants sent: headers, and the registered bytes that are its payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutPacket {
    /// BTH (the pad count is filled in by the frame builder).
    pub bth: BthRepr,
    /// Extension headers.
    pub ext: ExtHeaders,
    /// Payload, read from registered memory when the frame is built.
    pub payload: Option<Span>,
    /// Where it goes.
    pub to: Remote,
}

/// Counters of one QP, named as mlx5 / rdma statistics name them where they exist.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QpCounters {
    /// Packets sent (requests, responses, ACKs).
    pub packets_sent: u64,
    /// Request packets sent again (go-back-N, READ re-requests).
    pub retransmits: u64,
    /// Local ACK timeouts that led to a retransmission.
    pub local_ack_timeout_err: u64,
    /// PSN sequence error NAKs received.
    pub packet_seq_err: u64,
    /// RNR NAKs received.
    pub rnr_nak_received: u64,
    /// RNR retries exhausted.
    pub rnr_nak_retry_err: u64,
    /// Out-of-sequence requests the responder saw (one NAK each sequence error).
    pub out_of_sequence: u64,
    /// Duplicate requests the responder answered again.
    pub duplicate_request: u64,
    /// NAKs sent by kind.
    pub nak_sent_seq: u64,
    /// RNR NAKs sent.
    pub nak_sent_rnr: u64,
    /// Invalid-request NAKs sent.
    pub nak_sent_inv: u64,
    /// Remote-access-error NAKs sent.
    pub nak_sent_access: u64,
    /// Packets dropped as unexpected or malformed for this QP.
    pub dropped: u64,
    /// UD: datagrams dropped for a Q_Key that is not the QP's.
    pub qkey_violation: u64,
    /// UD / UC: messages dropped because no receive was posted.
    pub no_recv_drop: u64,
    /// UC: messages dropped whole because a packet of theirs was lost.
    pub uc_msg_dropped: u64,
    /// UD / UC: messages delivered.
    pub delivered: u64,
    /// np_ecn_marked_roce_packets: packets received with ECN CE.
    pub np_ecn_marked_roce_packets: u64,
    /// np_cnp_sent: CNPs sent for this QP's flows.
    pub np_cnp_sent: u64,
    /// rp_cnp_handled: CNPs received for this QP (and acted on, when DCQCN is on).
    pub rp_cnp_handled: u64,
    /// rp_cnp_ignored: CNPs DCQCN ignored (inside `rate_reduce_monitor_period`).
    pub rp_cnp_ignored: u64,
}

impl QpCounters {
    /// The counters by name, as operators know them from mlx5 and rdma statistics.
    pub fn named(&self) -> BTreeMap<&'static str, u64> {
        BTreeMap::from([
            ("packets_sent", self.packets_sent),
            ("retransmits", self.retransmits),
            ("local_ack_timeout_err", self.local_ack_timeout_err),
            ("packet_seq_err", self.packet_seq_err),
            ("rnr_nak_received", self.rnr_nak_received),
            ("rnr_nak_retry_err", self.rnr_nak_retry_err),
            ("out_of_sequence", self.out_of_sequence),
            ("duplicate_request", self.duplicate_request),
            ("nak_sent_seq", self.nak_sent_seq),
            ("nak_sent_rnr", self.nak_sent_rnr),
            ("nak_sent_inv", self.nak_sent_inv),
            ("nak_sent_access", self.nak_sent_access),
            ("dropped", self.dropped),
            (
                "np_ecn_marked_roce_packets",
                self.np_ecn_marked_roce_packets,
            ),
            ("np_cnp_sent", self.np_cnp_sent),
            ("rp_cnp_handled", self.rp_cnp_handled),
            ("rp_cnp_ignored", self.rp_cnp_ignored),
        ])
    }
}

/// Packet `k` of `npkts` of a SEND or RDMA WRITE message on RC (`uc` false) or UC: its
/// opcode (FIRST / MIDDLE / LAST / ONLY, with immediate on the last), its extension
/// headers (RETH on the first packet of a WRITE, ImmDt on the last) and its slice of the
/// local buffer. `None` for READ and atomics, which are not cut into packets this way.
pub(crate) fn message_packet(
    uc: bool,
    op: SendOp,
    k: u32,
    npkts: u32,
    mtu: u32,
    local: Option<Span>,
) -> Option<(crate::wire::Opcode, ExtHeaders, Option<Span>)> {
    use crate::wire::{Opcode::*, RethRepr};
    let (first, last) = (k == 0, k + 1 == npkts);
    let (write, imm, reth) = match op {
        SendOp::Send => (false, None, None),
        SendOp::SendWithImm(i) => (false, Some(i), None),
        SendOp::Write { remote_addr, rkey } => (true, None, Some((remote_addr, rkey))),
        SendOp::WriteWithImm {
            remote_addr,
            rkey,
            imm,
        } => (true, Some(imm), Some((remote_addr, rkey))),
        _ => return None,
    };
    let total = local.map_or(0, |s| s.len) as u64;
    let off = u64::from(k) * u64::from(mtu);
    let payload = local.map(|s| {
        s.sub(
            off as usize,
            (total.saturating_sub(off)).min(u64::from(mtu)) as usize,
        )
    });
    let mut ext = ExtHeaders::default();
    if first {
        ext.reth = reth.map(|(va, rkey)| RethRepr {
            va,
            rkey,
            len: total as u32,
        });
    }
    if last {
        ext.imm = imm;
    }
    let rc = match (write, first, last, imm.is_some()) {
        (false, true, true, false) => RcSendOnly,
        (false, true, true, true) => RcSendOnlyImm,
        (false, true, false, _) => RcSendFirst,
        (false, false, true, false) => RcSendLast,
        (false, false, true, true) => RcSendLastImm,
        (false, false, false, _) => RcSendMiddle,
        (true, true, true, false) => RcWriteOnly,
        (true, true, true, true) => RcWriteOnlyImm,
        (true, true, false, _) => RcWriteFirst,
        (true, false, true, false) => RcWriteLast,
        (true, false, true, true) => RcWriteLastImm,
        (true, false, false, _) => RcWriteMiddle,
    };
    // UC's SEND and WRITE opcodes are RC's plus 0x20 (IBTA Table 35).
    let opcode = if uc {
        crate::wire::Opcode::from_u8(rc.value() + 0x20)?
    } else {
        rc
    };
    Some((opcode, ext, payload))
}

/// A posted receive, its buffer checked when it was posted.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RecvBuf {
    pub wr_id: u64,
    pub span: Option<Span>,
    pub len: u32,
}

impl RecvBuf {
    /// Checks a receive work request: its buffer must lie inside a region of `pd` that
    /// grants LOCAL_WRITE (a zero-length buffer needs no region).
    pub(crate) fn check(mem: &Memory, pd: PdId, wr: RecvWr) -> Result<Self, VerbsError> {
        let span = if wr.sge.length == 0 {
            None
        } else {
            let len = u64::from(wr.sge.length);
            let s = mem
                .check_local(pd, wr.sge.lkey, wr.sge.addr, len, Access::LOCAL_WRITE)
                .map_err(|_| {
                    VerbsError::InvalidWr(
                        "receive buffer outside its region or without LOCAL_WRITE",
                    )
                })?;
            Some(s)
        };
        Ok(Self {
            wr_id: wr.wr_id,
            span,
            len: wr.sge.length,
        })
    }
}

/// What a QP is handed while it works: memory, and where completions go.
pub(crate) struct Io<'a> {
    pub now: Instant,
    pub mem: &'a mut Memory,
    pub wcs: &'a mut Vec<(CqId, WorkCompletion)>,
}

/// PSNs are 24 bits.
pub const PSN_MASK: u32 = 0x00ff_ffff;

/// `psn + n` modulo 2^24.
pub fn psn_add(psn: u32, n: u32) -> u32 {
    psn.wrapping_add(n) & PSN_MASK
}

/// The signed distance `a - b` in 24-bit PSN space (IBTA §9.7.1: half the space is the
/// past, half the future).
pub fn psn_diff(a: u32, b: u32) -> i32 {
    ((a.wrapping_sub(b) << 8) as i32) >> 8
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn psn_wraps() {
        assert_eq!(psn_add(0xff_ffff, 1), 0);
        assert_eq!(psn_diff(0, 0xff_ffff), 1);
        assert_eq!(psn_diff(0xff_ffff, 0), -1);
        assert_eq!(psn_diff(5, 3), 2);
        assert_eq!(psn_diff(0x40_0000, 0), 0x40_0000);
        assert_eq!(psn_diff(0x80_0000, 0), -0x80_0000);
    }
}
