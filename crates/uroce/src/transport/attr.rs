//! QP attributes: what creating a QP takes (its service and queues), the path (MTU, the
//! peer's address vector), what each state change of the modify verb takes, and the
//! encodings of the timers among them. Names follow ibverbs (`ibv_qp_init_attr`,
//! `ibv_qp_attr`, `ibv_mtu`).

use std::net::IpAddr;

use super::CqId;
use crate::mem::Access;

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

/// Type and capacities of a new QP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpCaps {
    /// RC, UC, UD, or QP1 (GSI).
    pub qp_type: QpType,
    /// CQ for send completions.
    pub send_cq: CqId,
    /// CQ for receive completions.
    pub recv_cq: CqId,
    /// Send queue depth.
    pub max_send_wr: usize,
    /// Receive queue depth.
    pub max_recv_wr: usize,
}

/// The largest `max_inline_data` a QP may ask for: rdma_rxe's device limit (its send WQE
/// holds 512 bytes of inline data, `RXE_MAX_INLINE_DATA`).
pub const MAX_INLINE_DATA: u32 = 512;

/// What creating a QP takes beyond [`QpCaps`] (the rest of `ibv_qp_init_attr`), given to
/// `Context::create_qp_ex`; `Context::create_qp` takes the defaults.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct QpInitEx {
    /// `cap.max_inline_data`: the most bytes an IBV_SEND_INLINE request may carry
    /// (at most [`MAX_INLINE_DATA`]; 0, the default, allows inline requests of 0 bytes
    /// only).
    pub max_inline_data: u32,
    /// `sq_sig_all`: every send work request completes as if it were signaled.
    pub sq_sig_all: bool,
    /// `srq`: the shared receive queue the QP takes its receives from (of the same PD);
    /// `post_recv` on the QP is then refused and `max_recv_wr` is not used.
    pub srq: Option<super::SrqId>,
}

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
