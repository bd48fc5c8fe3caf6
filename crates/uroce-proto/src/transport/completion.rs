//! Completions (`ibv_wc`): the completion queue they go to, their opcodes and statuses.
//! Names follow ibverbs (`IBV_WC_*`).

use std::net::IpAddr;

use super::Peer;

/// A completion queue handle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct CqId(pub u32);

/// Completion status (ibv_wc_status).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WcStatus {
    /// IBV_WC_SUCCESS.
    Success,
    /// IBV_WC_LOC_LEN_ERR: a receive buffer too small, or a message too long.
    LocLenErr,
    /// IBV_WC_LOC_QP_OP_ERR.
    LocQpOpErr,
    /// IBV_WC_LOC_PROT_ERR: a local SGE outside its region or without the right.
    LocProtErr,
    /// IBV_WC_WR_FLUSH_ERR: flushed because the QP went to the error state.
    WrFlushErr,
    /// IBV_WC_BAD_RESP_ERR: an unexpected response from the responder.
    BadRespErr,
    /// IBV_WC_REM_INV_REQ_ERR: NAK invalid request.
    RemInvReqErr,
    /// IBV_WC_REM_ACCESS_ERR: NAK remote access error (rkey, bounds, rights).
    RemAccessErr,
    /// IBV_WC_REM_OP_ERR: NAK remote operational error.
    RemOpErr,
    /// IBV_WC_RETRY_EXC_ERR: transport retries exhausted.
    RetryExcErr,
    /// IBV_WC_RNR_RETRY_EXC_ERR: RNR retries exhausted.
    RnrRetryExcErr,
    /// IBV_WC_MW_BIND_ERR: a memory window bind failed (a check of IBTA C10-72 to
    /// C10-75).
    MwBindErr,
}

impl WcStatus {
    /// The ibverbs name without its prefix, like `RETRY_EXC_ERR`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Success => "SUCCESS",
            Self::LocLenErr => "LOC_LEN_ERR",
            Self::LocQpOpErr => "LOC_QP_OP_ERR",
            Self::LocProtErr => "LOC_PROT_ERR",
            Self::WrFlushErr => "WR_FLUSH_ERR",
            Self::BadRespErr => "BAD_RESP_ERR",
            Self::RemInvReqErr => "REM_INV_REQ_ERR",
            Self::RemAccessErr => "REM_ACCESS_ERR",
            Self::RemOpErr => "REM_OP_ERR",
            Self::RetryExcErr => "RETRY_EXC_ERR",
            Self::RnrRetryExcErr => "RNR_RETRY_EXC_ERR",
            Self::MwBindErr => "MW_BIND_ERR",
        }
    }
}

/// Completion opcode (ibv_wc_opcode).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WcOpcode {
    /// IBV_WC_SEND.
    Send,
    /// IBV_WC_RDMA_WRITE.
    RdmaWrite,
    /// IBV_WC_RDMA_READ.
    RdmaRead,
    /// IBV_WC_COMP_SWAP.
    CompSwap,
    /// IBV_WC_FETCH_ADD.
    FetchAdd,
    /// IBV_WC_BIND_MW.
    BindMw,
    /// IBV_WC_LOCAL_INV.
    LocalInv,
    /// IBV_WC_RECV.
    Recv,
    /// IBV_WC_RECV_RDMA_WITH_IMM.
    RecvRdmaWithImm,
}

/// Completion flags (ibv_wc_flags), with ibverbs' bit values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct WcFlags(pub u32);

impl WcFlags {
    /// No flag.
    pub const NONE: Self = Self(0);
    /// IBV_WC_GRH: the first 40 bytes of the receive buffer hold a GRH (UD receives).
    pub const GRH: Self = Self(1 << 0);
    /// IBV_WC_WITH_IMM: the message carried immediate data ([`WorkCompletion::imm`]).
    pub const WITH_IMM: Self = Self(1 << 1);
    /// IBV_WC_WITH_INV: the message (a SEND with Invalidate) invalidated the rkey in
    /// [`WorkCompletion::invalidated_rkey`].
    pub const WITH_INV: Self = Self(1 << 3);

    /// Whether every bit of `other` is set.
    pub fn contains(self, other: Self) -> bool {
        self.0 & other.0 == other.0
    }
}

impl std::ops::BitOr for WcFlags {
    type Output = Self;

    fn bitor(self, o: Self) -> Self {
        Self(self.0 | o.0)
    }
}

/// A work completion (ibv_wc).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct WorkCompletion {
    /// The work request's id.
    pub wr_id: u64,
    /// Outcome.
    pub status: WcStatus,
    /// What completed.
    pub opcode: WcOpcode,
    /// Bytes received (receives) or transferred.
    pub byte_len: u32,
    /// Immediate data, when the message carried some.
    pub imm: Option<u32>,
    /// The QP this completion belongs to.
    pub qp_num: u32,
    /// The remote QP (the sender, for receives).
    pub src_qp: u32,
    /// The sender's address, for receives (its GID is `::ffff:a.b.c.d` for IPv4).
    pub sender: Option<IpAddr>,
    /// ibv_wc's `wc_flags`: WITH_IMM when `imm` is set, WITH_INV when
    /// `invalidated_rkey` is, GRH on a UD receive.
    pub flags: WcFlags,
    /// The rkey a SEND with Invalidate invalidated (ibv_wc's `invalidated_rkey`).
    pub invalidated_rkey: Option<u32>,
    /// The message's last packet had the solicited-event bit set (what a CQ armed for
    /// solicited completions only waits for; ibv_wc does not show it).
    solicited: bool,
}

impl WorkCompletion {
    /// The completion of a receive work request on QP `qpn`, from `from` (the peer of a
    /// connected QP, the sender of a datagram; none when a flush completes it unreceived).
    pub(crate) fn recv(
        qpn: u32,
        wr_id: u64,
        status: WcStatus,
        opcode: WcOpcode,
        byte_len: u32,
        imm: Option<u32>,
        from: Option<Peer>,
    ) -> Self {
        Self {
            wr_id,
            status,
            opcode,
            byte_len,
            imm,
            qp_num: qpn,
            src_qp: from.map_or(0, |p| p.qpn),
            sender: from.map(|p| p.ip),
            flags: if imm.is_some() {
                WcFlags::WITH_IMM
            } else {
                WcFlags::NONE
            },
            invalidated_rkey: None,
            solicited: false,
        }
    }

    /// This receive completes a SEND with Invalidate that invalidated `rkey`.
    pub(crate) fn with_inv(mut self, rkey: u32) -> Self {
        self.flags = self.flags | WcFlags::WITH_INV;
        self.invalidated_rkey = Some(rkey);
        self
    }

    /// This receive completes a message whose last packet had the solicited-event bit
    /// `se` (BTH SE, IBTA §9.2.1).
    pub(crate) fn solicited(mut self, se: bool) -> Self {
        self.solicited = se;
        self
    }

    /// This receive placed a GRH in front of the payload (UD).
    pub(crate) fn with_grh(mut self) -> Self {
        self.flags = self.flags | WcFlags::GRH;
        self
    }

    /// Whether a CQ armed for solicited completions only takes this one as its event:
    /// a receive of a solicited message, or any unsuccessful completion (ibverbs'
    /// `ibv_req_notify_cq`; IBTA §11.4.2.2).
    pub fn wakes_solicited(&self) -> bool {
        self.solicited || self.status != WcStatus::Success
    }

    /// The completion of a send-side work request of `length` bytes on QP `qpn`
    /// (byte_len is reported only on success).
    pub fn send(qpn: u32, wr_id: u64, opcode: WcOpcode, length: u32, status: WcStatus) -> Self {
        Self {
            wr_id,
            status,
            opcode,
            byte_len: if status == WcStatus::Success {
                length
            } else {
                0
            },
            imm: None,
            qp_num: qpn,
            src_qp: 0,
            sender: None,
            flags: WcFlags::NONE,
            invalidated_rkey: None,
            solicited: false,
        }
    }
}
