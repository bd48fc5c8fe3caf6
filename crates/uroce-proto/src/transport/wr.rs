//! Work requests (`ibv_send_wr`, `ibv_recv_wr`, one SGE each): what a send or a receive
//! asks of a QP.

use super::{Remote, WcOpcode};

/// One scatter/gather element: a range of a registered region.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Sge {
    /// Virtual address (inside the region of `lkey`).
    pub addr: u64,
    /// Length in bytes.
    pub length: u32,
    /// The region's local key.
    pub lkey: u32,
}

/// What a send work request does (ibv_wr_opcode).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SendOp {
    /// SEND: consumes a receive at the peer.
    Send,
    /// SEND with immediate data.
    SendWithImm(u32),
    /// IBV_WR_SEND_WITH_INV (RC): a SEND whose last packet carries `rkey` in an IETH; the
    /// responder invalidates that memory window when the message completes (IBTA
    /// §9.4.1.1 and §10.6.7.2.3) and reports it in the receive completion.
    SendWithInv(u32),
    /// RDMA WRITE to `remote_addr` under `rkey`.
    Write { remote_addr: u64, rkey: u32 },
    /// RDMA WRITE with immediate data: also consumes a receive at the peer.
    WriteWithImm {
        remote_addr: u64,
        rkey: u32,
        imm: u32,
    },
    /// RDMA READ from `remote_addr` into the local SGE.
    Read { remote_addr: u64, rkey: u32 },
    /// 64-bit compare and swap; the original value lands in the local SGE (8 bytes).
    CompareSwap {
        remote_addr: u64,
        rkey: u32,
        compare: u64,
        swap: u64,
    },
    /// 64-bit fetch and add; the original value lands in the local SGE (8 bytes).
    FetchAdd {
        remote_addr: u64,
        rkey: u32,
        add: u64,
    },
    /// IBV_WR_BIND_MW (RC): binds the type 2 window `mw` (IBTA §10.6.7.2.2; type 1
    /// windows are bound with `Context::bind_mw`). It puts nothing on the wire: the
    /// requester executes it when it reaches it in the send queue, in order with the
    /// other requests, and it completes IBV_WC_BIND_MW, or IBV_WC_MW_BIND_ERR (the QP
    /// then goes to ERR, as rdma_rxe's `rxe_do_local_ops` does). The window's rkey takes
    /// the low 8 bits of `rkey` (`mem::inc_rkey` of the last one, by convention) and is
    /// tied to this QP. `length` 0 is refused for a type 2 window; the SGE is not used.
    BindMw {
        mw: crate::mem::MwId,
        rkey: u32,
        mr_lkey: u32,
        addr: u64,
        length: u64,
        access: crate::mem::Access,
    },
    /// IBV_WR_LOCAL_INV (RC): invalidates the type 2 window whose current rkey is `rkey`,
    /// executed in order like `BindMw`; completes IBV_WC_LOCAL_INV, or
    /// IBV_WC_LOC_QP_OP_ERR for a key that cannot be invalidated (rdma_rxe), the QP then
    /// going to ERR. The SGE is not used.
    LocalInv { rkey: u32 },
}

impl SendOp {
    /// True for operations the responder answers with data (READ, atomics).
    pub fn is_read_or_atomic(self) -> bool {
        matches!(
            self,
            Self::Read { .. } | Self::CompareSwap { .. } | Self::FetchAdd { .. }
        )
    }
    /// True for atomics.
    pub fn is_atomic(self) -> bool {
        matches!(self, Self::CompareSwap { .. } | Self::FetchAdd { .. })
    }
    /// True for the operations the requester executes locally, with nothing on the wire
    /// (BIND_MW, LOCAL_INV).
    pub fn is_local(self) -> bool {
        matches!(self, Self::BindMw { .. } | Self::LocalInv { .. })
    }
    /// The completion opcode.
    pub fn wc_opcode(self) -> WcOpcode {
        match self {
            Self::Send | Self::SendWithImm(_) | Self::SendWithInv(_) => WcOpcode::Send,
            Self::Write { .. } | Self::WriteWithImm { .. } => WcOpcode::RdmaWrite,
            Self::Read { .. } => WcOpcode::RdmaRead,
            Self::CompareSwap { .. } => WcOpcode::CompSwap,
            Self::FetchAdd { .. } => WcOpcode::FetchAdd,
            Self::BindMw { .. } => WcOpcode::BindMw,
            Self::LocalInv { .. } => WcOpcode::LocalInv,
        }
    }
}

/// A send work request (ibv_send_wr with one SGE).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SendWr {
    /// Returned in the completion.
    pub wr_id: u64,
    /// The operation.
    pub op: SendOp,
    /// Local buffer: the data to send or write, or where READ / atomic results go.
    pub sge: Sge,
    /// Generate a completion on success (errors always complete).
    pub signaled: bool,
    /// Set the solicited-event bit on the last packet.
    pub solicited: bool,
}

/// The flags of `ibv_send_flags` that [`SendWr`] and [`UdSendWr`] do not carry as fields
/// (`signaled` and `solicited` are fields): given to `Context::post_send_with` and
/// `Context::post_send_ud_with`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct SendFlags(u8);

impl SendFlags {
    /// No flag.
    pub const NONE: SendFlags = SendFlags(0);
    /// IBV_SEND_FENCE: the request does not start while an RDMA READ or atomic posted
    /// before it on the same QP is still waiting for its response (RC).
    pub const FENCE: SendFlags = SendFlags(1);
    /// IBV_SEND_INLINE: the data is copied out of the application's memory when the
    /// request is posted, so the buffer may be reused at once; its `lkey` is not
    /// looked at. At most the QP's `max_inline_data` bytes; SEND and RDMA WRITE only
    /// (ignored on READ and atomics, as rdma_rxe's `init_send_wqe` ignores it).
    pub const INLINE: SendFlags = SendFlags(2);

    /// True if every flag of `other` is set.
    pub fn contains(self, other: SendFlags) -> bool {
        self.0 & other.0 == other.0
    }
}

impl std::ops::BitOr for SendFlags {
    type Output = SendFlags;
    fn bitor(self, o: SendFlags) -> SendFlags {
        SendFlags(self.0 | o.0)
    }
}

/// A UD send work request (ibv_send_wr with its `wr.ud` part): always a SEND.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct UdSendWr {
    /// Returned in the completion.
    pub wr_id: u64,
    /// Where the datagram goes (the address handle).
    pub dest: Remote,
    /// The destination QP.
    pub remote_qpn: u32,
    /// The destination's Q_Key; with bit 31 set, the sending QP's own Q_Key is used.
    pub remote_qkey: u32,
    /// The data (at most one path MTU).
    pub sge: Sge,
    /// Immediate data.
    pub imm: Option<u32>,
    /// Generate a completion on success.
    pub signaled: bool,
    /// Set the solicited-event bit.
    pub solicited: bool,
}

/// A receive work request (ibv_recv_wr with one SGE).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RecvWr {
    /// Returned in the completion.
    pub wr_id: u64,
    /// Where received data goes.
    pub sge: Sge,
}
