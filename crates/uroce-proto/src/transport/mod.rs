//! Transports: pure state machines (sans-IO). Packets and time go in, packets and
//! completions come out; nothing here touches a socket or reads a clock.

#![forbid(unsafe_code)]

mod attr;
mod completion;
mod counters;
mod error;
mod qp;
pub mod rc;
mod sgl;
mod srq;
mod transition;
pub mod uc;
pub mod ud;
mod wr;

pub use attr::{
    ack_timeout, rnr_timer_us, InitAttr, Mtu, QpAttr, QpAttrMask, QpCaps, QpInitAttr, QpInitEx,
    QpType, Remote, RtrAttr, RtsAttr, MAX_INLINE_DATA,
};
pub use completion::{CqId, WcFlags, WcOpcode, WcStatus, WorkCompletion};
pub use counters::QpCounters;
pub use error::{errno, VerbsError};
pub use qp::QpState;
pub(crate) use qp::{Connected, Datagram, Fatal, Peer, Qp, QpCore, QpErrorEvent, Service};
pub(crate) use sgl::Local;
pub use sgl::{Payload, MAX_SGE};
pub(crate) use srq::Srq;
pub use srq::{SrqAttr, SrqAttrMask, SrqId, MAX_SRQ_WR};
pub use transition::ModifyRefusal;
pub use wr::{RecvWr, SendFlags, SendOp, SendWr, Sge, UdSendWr};

use std::collections::VecDeque;
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
    pub payload: Payload,
    /// Where it goes.
    pub to: Remote,
}

/// Packet `k` of `npkts` of a SEND or RDMA WRITE message on RC (`uc` false) or UC: its
/// opcode (FIRST / MIDDLE / LAST / ONLY, with immediate on the last), its extension
/// headers (RETH on the first packet of a WRITE, ImmDt on the last) and its slice of the
/// local buffer. `None` for READ and atomics, which are not cut into packets this way.
#[inline]
pub(crate) fn message_packet(
    uc: bool,
    op: SendOp,
    k: u32,
    npkts: u32,
    mtu: u32,
    local: &Local,
    staged: &mut Vec<Span>,
) -> Option<(crate::wire::Opcode, ExtHeaders, Payload)> {
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
    let total = local.len() as u64;
    let off = u64::from(k) * u64::from(mtu);
    let payload = local.payload(
        off as usize,
        (total.saturating_sub(off)).min(u64::from(mtu)) as usize,
        staged,
    );
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
#[derive(Debug, Clone)]
pub(crate) struct RecvBuf {
    pub wr_id: u64,
    /// Where the message goes, scattered over the entries in order.
    pub local: Local,
    /// The sum of the entries' lengths.
    pub len: u32,
    /// Its entries failed the key check when posted (no region of the QP's PD, out of
    /// bounds, no LOCAL_WRITE): `local` is empty, so a message with bytes for it fails
    /// there, as a NIC finds a bad lkey only when it uses the WQE (RC: NAK Remote
    /// Operational Error; UD: LOC_PROT_ERR).
    pub bad: bool,
}

impl RecvBuf {
    /// Checks a receive work request: every entry must lie inside a region of `pd` that
    /// grants LOCAL_WRITE (a zero-length entry needs no region). One that does not is
    /// still posted, marked [`RecvBuf::bad`], as a NIC takes the WQE and fails the
    /// message that uses it (rdma-core's test_mr_rereg_pd posts receives of a region
    /// moved to another PD and expects the sender's Remote Operational Error). A total
    /// length past 2^32 - 1 is EINVAL. The caller checked the count against the cap.
    pub(crate) fn check_sgl(
        mem: &Memory,
        pd: PdId,
        wr_id: u64,
        sgl: &[Sge],
    ) -> Result<Self, VerbsError> {
        let len = sgl::total_len(sgl)?;
        Ok(match sgl::resolve(mem, pd, sgl, Access::LOCAL_WRITE) {
            Ok(local) => Self {
                wr_id,
                local,
                len,
                bad: false,
            },
            Err(_) => Self {
                wr_id,
                local: Local::Empty,
                len,
                bad: true,
            },
        })
    }

    /// Whether its buffer is in the region `lkey`.
    pub(crate) fn refers_to(&self, lkey: u32) -> bool {
        self.local.refers_to(lkey)
    }
}

/// What a QP is handed while it works: memory, where completions go, and the shared
/// receive queue it takes its receives from, if it is on one.
pub(crate) struct Io<'a> {
    pub now: Instant,
    pub mem: &'a mut Memory,
    pub wcs: &'a mut Vec<(CqId, WorkCompletion)>,
    /// The QP's SRQ: where its receives come from instead of its own queue.
    pub srq: Option<&'a mut Srq>,
    /// The context's staging list: the pieces of a [`Payload::Gathered`] packet, written
    /// by the service that makes it and read when the context builds it, at once. Its
    /// room for [`MAX_SGE`] pieces is reserved when the context is made.
    pub gather: &'a mut Vec<Span>,
    /// Where the context copied the payload of the packet being handled before its ICRC
    /// was checked ([`Service::placement`]): the service does not copy it again.
    pub placed: Option<Span>,
}

impl Io<'_> {
    /// Takes the receive WQE for a new message: from the QP's SRQ when it has one
    /// (IBTA §10.2.9: a QP on an SRQ has no receive queue of its own), else from its
    /// receive queue `rq`.
    pub(crate) fn take_recv(&mut self, rq: &mut VecDeque<RecvBuf>) -> Option<RecvBuf> {
        match self.srq.as_deref_mut() {
            Some(srq) => srq.take(),
            None => rq.pop_front(),
        }
    }

    /// Whether a receive WQE waits for the next message (in the SRQ, or in `rq`).
    pub(crate) fn has_recv(&self, rq: &VecDeque<RecvBuf>) -> bool {
        match self.srq.as_deref() {
            Some(srq) => !srq.is_empty(),
            None => !rq.is_empty(),
        }
    }

    /// Gives a WQE taken for a message that was then dropped back to the head of the
    /// queue it came from, for the next message.
    pub(crate) fn give_back_recv(&mut self, rq: &mut VecDeque<RecvBuf>, r: RecvBuf) {
        match self.srq.as_deref_mut() {
            Some(srq) => srq.give_back(r),
            None => rq.push_front(r),
        }
    }
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
