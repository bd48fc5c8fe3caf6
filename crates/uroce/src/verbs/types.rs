//! The ibverbs concepts in Rust form: work requests, completions, QP states and
//! attributes. Names follow ibverbs (`IBV_WC_*`, `IBV_QPS_*`) so RDMA users find their way.

use std::net::IpAddr;

use crate::mem::Access;

/// Path MTU (ibv_mtu): the largest payload of one packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Mtu {
    /// 256 bytes.
    M256,
    /// 512 bytes.
    M512,
    /// 1024 bytes.
    M1024,
    /// 2048 bytes.
    M2048,
    /// 4096 bytes.
    M4096,
}

impl Mtu {
    /// Payload bytes per packet.
    pub fn bytes(self) -> u32 {
        match self {
            Self::M256 => 256,
            Self::M512 => 512,
            Self::M1024 => 1024,
            Self::M2048 => 2048,
            Self::M4096 => 4096,
        }
    }

    /// The largest path MTU whose packets fit an interface of link MTU `link`: IPv4,
    /// UDP, BTH, RETH and ICRC (60 bytes) around the payload. 1500 gives 1024 and 9000
    /// gives 4096, as rdma_rxe picks its active MTU. `None` below 316.
    pub fn fitting(link: u32) -> Option<Self> {
        [
            Self::M4096,
            Self::M2048,
            Self::M1024,
            Self::M512,
            Self::M256,
        ]
        .into_iter()
        .find(|m| m.bytes() + 20 + 8 + 12 + 16 + 4 <= link)
    }

    /// The MTU of exactly `n` bytes.
    pub fn from_bytes(n: u32) -> Option<Self> {
        Some(match n {
            256 => Self::M256,
            512 => Self::M512,
            1024 => Self::M1024,
            2048 => Self::M2048,
            4096 => Self::M4096,
            _ => return None,
        })
    }
}

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
    /// The completion opcode.
    pub fn wc_opcode(self) -> WcOpcode {
        match self {
            Self::Send | Self::SendWithImm(_) => WcOpcode::Send,
            Self::Write { .. } | Self::WriteWithImm { .. } => WcOpcode::RdmaWrite,
            Self::Read { .. } => WcOpcode::RdmaRead,
            Self::CompareSwap { .. } => WcOpcode::CompSwap,
            Self::FetchAdd { .. } => WcOpcode::FetchAdd,
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

/// Transport service of a QP (ibv_qp_type).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum QpType {
    /// Reliable connected.
    Rc,
    /// Unreliable connected.
    Uc,
    /// Unreliable datagram.
    Ud,
    /// QP1, the general services interface: UD with the well-known Q_Key 0x80010000.
    Gsi,
}

/// A receive work request (ibv_recv_wr with one SGE).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RecvWr {
    /// Returned in the completion.
    pub wr_id: u64,
    /// Where received data goes.
    pub sge: Sge,
}

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
    /// IBV_WC_RECV.
    Recv,
    /// IBV_WC_RECV_RDMA_WITH_IMM.
    RecvRdmaWithImm,
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
}

impl WorkCompletion {
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
        }
    }
}

/// QP state (ibv_qp_state).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum QpState {
    /// IBV_QPS_RESET.
    Reset,
    /// IBV_QPS_INIT: receives may be posted.
    Init,
    /// IBV_QPS_RTR: ready to receive.
    Rtr,
    /// IBV_QPS_RTS: ready to send.
    Rts,
    /// IBV_QPS_ERR: everything outstanding flushed.
    Err,
}

/// Where the peer is: its IP address and Ethernet address (the address vector).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Remote {
    /// The peer's IP address (its GID is the IPv4-mapped address for IPv4).
    pub ip: IpAddr,
    /// The next hop's MAC.
    pub mac: [u8; 6],
}

/// Attributes for RESET → INIT.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InitAttr {
    /// Partition key.
    pub pkey: u16,
    /// Remote operations the QP accepts (REMOTE_WRITE / REMOTE_READ / REMOTE_ATOMIC).
    pub access: Access,
    /// UD: the Q_Key incoming datagrams must carry (QP1 always uses 0x80010000).
    pub qkey: u32,
}

impl Default for InitAttr {
    fn default() -> Self {
        Self {
            pkey: 0xffff,
            access: Access::REMOTE_WRITE | Access::REMOTE_READ | Access::REMOTE_ATOMIC,
            qkey: 0,
        }
    }
}

/// Attributes for INIT → RTR.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RtrAttr {
    /// The peer.
    pub remote: Remote,
    /// The peer's QPN.
    pub dest_qpn: u32,
    /// First PSN expected from the peer.
    pub rq_psn: u32,
    /// Path MTU.
    pub path_mtu: Mtu,
    /// RDMA READ / atomic requests the responder keeps in flight.
    pub max_dest_rd_atomic: u8,
    /// RNR NAK timer code sent to the peer when no receive is posted (IBTA Table 45).
    pub min_rnr_timer: u8,
}

/// Attributes for RTR → RTS.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RtsAttr {
    /// First PSN this QP sends.
    pub sq_psn: u32,
    /// Local ACK timeout: 4.096 µs × 2^timeout (0 = infinite).
    pub timeout: u8,
    /// Transport retries (0..=6; 7 retries without limit, as Linux rdma_rxe does).
    pub retry_cnt: u8,
    /// RNR retries (0..=6, 7 = infinite).
    pub rnr_retry: u8,
    /// RDMA READ / atomic requests this QP keeps in flight.
    pub max_rd_atomic: u8,
}

impl Default for RtsAttr {
    fn default() -> Self {
        Self {
            sq_psn: 0,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            max_rd_atomic: 16,
        }
    }
}

/// Errors of the verbs calls themselves (not of work requests, which complete with a status).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VerbsError {
    /// No QP with this number.
    #[error("no QP {0:#x}")]
    NoSuchQp(u32),
    /// No CQ with this handle.
    #[error("no such completion queue")]
    NoSuchCq,
    /// The call is not allowed in the QP's current state.
    #[error("QP {qpn:#x} is in state {state:?}: {what} not allowed")]
    BadState {
        qpn: u32,
        state: QpState,
        what: &'static str,
    },
    /// A work request's parameters are invalid.
    #[error("invalid work request: {0}")]
    InvalidWr(&'static str),
    /// The queue is full.
    #[error("{0} queue full")]
    QueueFull(&'static str),
    /// Registration refused.
    #[error(transparent)]
    Reg(#[from] crate::mem::RegError),
}

/// RNR NAK timer codes in microseconds (IBTA Vol. 1 Table 45).
pub fn rnr_timer_us(code: u8) -> u64 {
    const T: [u64; 32] = [
        655_360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1_280, 1_920, 2_560,
        3_840, 5_120, 7_680, 10_240, 15_360, 20_480, 30_720, 40_960, 61_440, 81_920, 122_880,
        163_840, 245_760, 327_680, 491_520,
    ];
    T[usize::from(code & 31)]
}

/// The local ACK timeout of the `timeout` attribute: 4.096 µs × 2^timeout, `None` for 0
/// (infinite) (IBTA §9.7.6.1.3).
pub fn ack_timeout(timeout: u8) -> Option<std::time::Duration> {
    (timeout != 0).then(|| std::time::Duration::from_nanos(4096u64 << timeout.min(31)))
}
