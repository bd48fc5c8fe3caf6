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
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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
    /// `cap.max_send_sge`: the most scatter/gather entries a send work request may carry
    /// (`Context::post_send_sgl`; EINVAL beyond, as rdma_rxe's `validate_send_wr`). At
    /// most [`super::MAX_SGE`]; 0 is granted as 1. Default 1, what `ibv_create_qp` with
    /// `cap.max_send_sge = 1` grants: one entry per request.
    pub max_send_sge: u32,
    /// `cap.max_recv_sge`: the same for receive work requests (`Context::post_recv_sgl`;
    /// rdma_rxe's `post_one_recv`). Default 1.
    pub max_recv_sge: u32,
}

impl Default for QpInitEx {
    fn default() -> Self {
        Self {
            max_inline_data: 0,
            sq_sig_all: false,
            srq: None,
            max_send_sge: 1,
            max_recv_sge: 1,
        }
    }
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

/// Which fields of a [`QpAttr`] a modify names (ibv_qp_attr_mask): the IBV_QP_* bits
/// uroce takes, with ibverbs' values. uroce has no alternate path (APM), so
/// IBV_QP_ALT_PATH and IBV_QP_PATH_MIG_STATE are not among them.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct QpAttrMask(u32);

impl QpAttrMask {
    /// No attribute.
    pub const NONE: QpAttrMask = QpAttrMask(0);
    /// IBV_QP_STATE: `qp_state`, the state to move to (absent: the state stays).
    pub const STATE: QpAttrMask = QpAttrMask(1);
    /// IBV_QP_CUR_STATE: `cur_qp_state`, the state the caller believes the QP is in.
    pub const CUR_STATE: QpAttrMask = QpAttrMask(1 << 1);
    /// IBV_QP_EN_SQD_ASYNC_NOTIFY: `en_sqd_async_notify`.
    pub const EN_SQD_ASYNC_NOTIFY: QpAttrMask = QpAttrMask(1 << 2);
    /// IBV_QP_ACCESS_FLAGS: `qp_access_flags`.
    pub const ACCESS_FLAGS: QpAttrMask = QpAttrMask(1 << 3);
    /// IBV_QP_PKEY_INDEX: `pkey` (uroce has no P_Key table: the P_Key itself).
    pub const PKEY_INDEX: QpAttrMask = QpAttrMask(1 << 4);
    /// IBV_QP_PORT: `port_num`.
    pub const PORT: QpAttrMask = QpAttrMask(1 << 5);
    /// IBV_QP_QKEY: `qkey`.
    pub const QKEY: QpAttrMask = QpAttrMask(1 << 6);
    /// IBV_QP_AV: `ah_attr`, the peer's address.
    pub const AV: QpAttrMask = QpAttrMask(1 << 7);
    /// IBV_QP_PATH_MTU: `path_mtu`.
    pub const PATH_MTU: QpAttrMask = QpAttrMask(1 << 8);
    /// IBV_QP_TIMEOUT: `timeout`.
    pub const TIMEOUT: QpAttrMask = QpAttrMask(1 << 9);
    /// IBV_QP_RETRY_CNT: `retry_cnt`.
    pub const RETRY_CNT: QpAttrMask = QpAttrMask(1 << 10);
    /// IBV_QP_RNR_RETRY: `rnr_retry`.
    pub const RNR_RETRY: QpAttrMask = QpAttrMask(1 << 11);
    /// IBV_QP_RQ_PSN: `rq_psn`.
    pub const RQ_PSN: QpAttrMask = QpAttrMask(1 << 12);
    /// IBV_QP_MAX_QP_RD_ATOMIC: `max_rd_atomic`.
    pub const MAX_QP_RD_ATOMIC: QpAttrMask = QpAttrMask(1 << 13);
    /// IBV_QP_MIN_RNR_TIMER: `min_rnr_timer`.
    pub const MIN_RNR_TIMER: QpAttrMask = QpAttrMask(1 << 15);
    /// IBV_QP_SQ_PSN: `sq_psn`.
    pub const SQ_PSN: QpAttrMask = QpAttrMask(1 << 16);
    /// IBV_QP_MAX_DEST_RD_ATOMIC: `max_dest_rd_atomic`.
    pub const MAX_DEST_RD_ATOMIC: QpAttrMask = QpAttrMask(1 << 17);
    /// IBV_QP_DEST_QPN: `dest_qp_num`.
    pub const DEST_QPN: QpAttrMask = QpAttrMask(1 << 20);

    /// Every bit with its ibverbs name, in bit order.
    const NAMES: [(QpAttrMask, &'static str); 18] = [
        (Self::STATE, "IBV_QP_STATE"),
        (Self::CUR_STATE, "IBV_QP_CUR_STATE"),
        (Self::EN_SQD_ASYNC_NOTIFY, "IBV_QP_EN_SQD_ASYNC_NOTIFY"),
        (Self::ACCESS_FLAGS, "IBV_QP_ACCESS_FLAGS"),
        (Self::PKEY_INDEX, "IBV_QP_PKEY_INDEX"),
        (Self::PORT, "IBV_QP_PORT"),
        (Self::QKEY, "IBV_QP_QKEY"),
        (Self::AV, "IBV_QP_AV"),
        (Self::PATH_MTU, "IBV_QP_PATH_MTU"),
        (Self::TIMEOUT, "IBV_QP_TIMEOUT"),
        (Self::RETRY_CNT, "IBV_QP_RETRY_CNT"),
        (Self::RNR_RETRY, "IBV_QP_RNR_RETRY"),
        (Self::RQ_PSN, "IBV_QP_RQ_PSN"),
        (Self::MAX_QP_RD_ATOMIC, "IBV_QP_MAX_QP_RD_ATOMIC"),
        (Self::MIN_RNR_TIMER, "IBV_QP_MIN_RNR_TIMER"),
        (Self::SQ_PSN, "IBV_QP_SQ_PSN"),
        (Self::MAX_DEST_RD_ATOMIC, "IBV_QP_MAX_DEST_RD_ATOMIC"),
        (Self::DEST_QPN, "IBV_QP_DEST_QPN"),
    ];

    /// Both sets of bits (`|` in a `const`).
    pub const fn union(self, other: QpAttrMask) -> QpAttrMask {
        QpAttrMask(self.0 | other.0)
    }

    /// True if every bit of `other` is set.
    pub fn contains(self, other: QpAttrMask) -> bool {
        self.0 & other.0 == other.0
    }

    /// True if any bit of `other` is set.
    pub fn intersects(self, other: QpAttrMask) -> bool {
        self.0 & other.0 != 0
    }

    /// True when no bit is set.
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// The bits of `self` that `other` does not have.
    pub fn without(self, other: QpAttrMask) -> QpAttrMask {
        QpAttrMask(self.0 & !other.0)
    }

    /// The bits set in both.
    pub fn and(self, other: QpAttrMask) -> QpAttrMask {
        QpAttrMask(self.0 & other.0)
    }

    /// The raw IBV_QP_* bits.
    pub fn bits(self) -> u32 {
        self.0
    }

    /// The mask of raw IBV_QP_* bits, or the bits uroce does not take (IBV_QP_ALT_PATH,
    /// IBV_QP_PATH_MIG_STATE, IBV_QP_CAP, IBV_QP_RATE_LIMIT and unknown ones) as `Err`.
    pub fn from_bits(bits: u32) -> Result<QpAttrMask, u32> {
        let known = Self::NAMES.iter().fold(0, |a, (b, _)| a | b.0);
        match bits & !known {
            0 => Ok(QpAttrMask(bits)),
            other => Err(other),
        }
    }
}

impl std::ops::BitOr for QpAttrMask {
    type Output = QpAttrMask;
    fn bitor(self, o: QpAttrMask) -> QpAttrMask {
        QpAttrMask(self.0 | o.0)
    }
}

impl std::ops::BitOrAssign for QpAttrMask {
    fn bitor_assign(&mut self, o: QpAttrMask) {
        self.0 |= o.0;
    }
}

/// The IBV_QP_* names of the bits set, joined by `|` (`0` when none).
impl std::fmt::Display for QpAttrMask {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut first = true;
        for (bit, name) in Self::NAMES {
            if self.contains(bit) {
                if !first {
                    f.write_str(" | ")?;
                }
                f.write_str(name)?;
                first = false;
            }
        }
        if first {
            f.write_str("0")?;
        }
        Ok(())
    }
}

impl std::fmt::Debug for QpAttrMask {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "QpAttrMask({self})")
    }
}

/// The attributes of a QP (ibv_qp_attr, the fields uroce uses): what `Context::modify_qp`
/// takes, under a [`QpAttrMask`] naming the fields that count, and what
/// `Context::query_qp` gives back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpAttr {
    /// `qp_state`: the state to move to (IBV_QP_STATE); the QP's state in a query.
    pub qp_state: super::QpState,
    /// `cur_qp_state` (IBV_QP_CUR_STATE): must be the QP's state.
    pub cur_qp_state: super::QpState,
    /// `en_sqd_async_notify` (RTS → SQD): raise `AsyncEvent::SqDrained` once drained.
    pub en_sqd_async_notify: bool,
    /// `sq_draining` (query only): in SQD, send work requests are still in progress.
    pub sq_draining: bool,
    /// `qp_access_flags`: the remote operations the QP accepts (REMOTE_WRITE /
    /// REMOTE_READ / REMOTE_ATOMIC).
    pub qp_access_flags: Access,
    /// The P_Key (IBV_QP_PKEY_INDEX: uroce's table is this one entry).
    pub pkey: u16,
    /// `port_num`: 1, uroce's only port.
    pub port_num: u8,
    /// `qkey`: the Q_Key incoming datagrams must carry (UD; QP1 keeps 0x80010000).
    pub qkey: u32,
    /// `ah_attr`: the peer's address (RC, UC).
    pub ah_attr: Remote,
    /// `path_mtu`.
    pub path_mtu: Mtu,
    /// `dest_qp_num`: the peer's QPN (RC, UC).
    pub dest_qp_num: u32,
    /// `rq_psn`: the first PSN expected from the peer.
    pub rq_psn: u32,
    /// `sq_psn`: the first PSN this QP sends.
    pub sq_psn: u32,
    /// `max_rd_atomic`: RDMA READ / atomic requests this QP keeps in flight (RC).
    pub max_rd_atomic: u8,
    /// `max_dest_rd_atomic`: RDMA READ / atomic requests the responder keeps (RC).
    pub max_dest_rd_atomic: u8,
    /// `min_rnr_timer`: the RNR NAK timer code sent to the peer (IBTA Table 45; RC).
    pub min_rnr_timer: u8,
    /// `timeout`: local ACK timeout, 4.096 µs × 2^timeout, 0 infinite (RC; 0..=31).
    pub timeout: u8,
    /// `retry_cnt`: transport retries (RC; 0..=7, 7 without limit as in rdma_rxe).
    pub retry_cnt: u8,
    /// `rnr_retry`: RNR retries (RC; 0..=7, 7 infinite).
    pub rnr_retry: u8,
}

impl Default for QpAttr {
    /// Zeroed as a C program's `struct ibv_qp_attr attr = {}`, with `port_num` 1, the
    /// full-member default P_Key 0xffff and an MTU of 1024.
    fn default() -> Self {
        Self {
            qp_state: super::QpState::Reset,
            cur_qp_state: super::QpState::Reset,
            en_sqd_async_notify: false,
            sq_draining: false,
            qp_access_flags: Access::NONE,
            pkey: 0xffff,
            port_num: 1,
            qkey: 0,
            ah_attr: Remote {
                ip: IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED),
                mac: [0; 6],
            },
            path_mtu: Mtu::M1024,
            dest_qp_num: 0,
            rq_psn: 0,
            sq_psn: 0,
            max_rd_atomic: 0,
            max_dest_rd_atomic: 0,
            min_rnr_timer: 0,
            timeout: 0,
            retry_cnt: 0,
            rnr_retry: 0,
        }
    }
}

impl QpAttr {
    /// `self` with the fields `mask` names taken from `new`.
    pub(crate) fn merged(mut self, new: &QpAttr, mask: QpAttrMask) -> QpAttr {
        type M = QpAttrMask;
        let take = |bit: M| mask.contains(bit);
        if take(M::EN_SQD_ASYNC_NOTIFY) {
            self.en_sqd_async_notify = new.en_sqd_async_notify;
        }
        if take(M::ACCESS_FLAGS) {
            self.qp_access_flags = new.qp_access_flags;
        }
        if take(M::PKEY_INDEX) {
            self.pkey = new.pkey;
        }
        if take(M::PORT) {
            self.port_num = new.port_num;
        }
        if take(M::QKEY) {
            self.qkey = new.qkey;
        }
        if take(M::AV) {
            self.ah_attr = new.ah_attr;
        }
        if take(M::PATH_MTU) {
            self.path_mtu = new.path_mtu;
        }
        if take(M::DEST_QPN) {
            self.dest_qp_num = new.dest_qp_num & 0xff_ffff;
        }
        if take(M::RQ_PSN) {
            self.rq_psn = new.rq_psn & 0xff_ffff;
        }
        if take(M::SQ_PSN) {
            self.sq_psn = new.sq_psn & 0xff_ffff;
        }
        if take(M::MAX_QP_RD_ATOMIC) {
            self.max_rd_atomic = new.max_rd_atomic;
        }
        if take(M::MAX_DEST_RD_ATOMIC) {
            self.max_dest_rd_atomic = new.max_dest_rd_atomic;
        }
        if take(M::MIN_RNR_TIMER) {
            self.min_rnr_timer = new.min_rnr_timer;
        }
        if take(M::TIMEOUT) {
            self.timeout = new.timeout;
        }
        if take(M::RETRY_CNT) {
            self.retry_cnt = new.retry_cnt;
        }
        if take(M::RNR_RETRY) {
            self.rnr_retry = new.rnr_retry;
        }
        self
    }

    /// The RESET → INIT part.
    pub(crate) fn init_attr(&self) -> InitAttr {
        InitAttr {
            pkey: self.pkey,
            access: self.qp_access_flags,
            qkey: self.qkey,
        }
    }

    /// The INIT → RTR part.
    pub(crate) fn rtr_attr(&self) -> RtrAttr {
        RtrAttr {
            remote: self.ah_attr,
            dest_qpn: self.dest_qp_num,
            rq_psn: self.rq_psn,
            path_mtu: self.path_mtu,
            max_dest_rd_atomic: self.max_dest_rd_atomic,
            min_rnr_timer: self.min_rnr_timer,
        }
    }

    /// The RTR → RTS part.
    pub(crate) fn rts_attr(&self) -> RtsAttr {
        RtsAttr {
            sq_psn: self.sq_psn,
            timeout: self.timeout,
            retry_cnt: self.retry_cnt,
            rnr_retry: self.rnr_retry,
            max_rd_atomic: self.max_rd_atomic,
        }
    }
}

/// What `Context::query_qp` gives back besides the [`QpAttr`]: what the QP was created
/// with (ibv_qp_init_attr: its type, CQs and `cap.max_send_wr` / `cap.max_recv_wr` in
/// [`QpCaps`], `cap.max_inline_data` and `sq_sig_all` in [`QpInitEx`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpInitAttr {
    /// Type, CQs, queue depths.
    pub caps: QpCaps,
    /// The rest of what `create_qp_ex` took.
    pub ex: QpInitEx,
}
