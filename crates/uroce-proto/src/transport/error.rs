//! The error of a verbs call itself (not of a work request, which completes with a
//! [`super::WcStatus`]).

use super::{ModifyRefusal, QpState};

/// Errors of the verbs calls themselves (not of work requests, which complete with a status).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VerbsError {
    /// No QP with this number.
    #[error("no QP {0:#x}")]
    NoSuchQp(u32),
    /// No CQ with this handle.
    #[error("no such completion queue")]
    NoSuchCq,
    /// No shared receive queue with this handle.
    #[error("no such shared receive queue")]
    NoSuchSrq,
    /// The resource is still in use (an SRQ or a CQ with QPs on it): EBUSY.
    #[error("resource busy: still in use")]
    Busy,
    /// The call is not allowed in the QP's current state.
    #[error("QP {qpn:#x} is in state {state:?}: {what} not allowed")]
    BadState {
        qpn: u32,
        state: QpState,
        what: &'static str,
    },
    /// A modify the QP state table refuses (`ibv_modify_qp`'s EINVAL): the change, and
    /// why (not in the table, a required attribute missing, one not permitted...).
    #[error("QP {qpn:#x}: modify {from:?} -> {to:?} refused: {why}")]
    BadModify {
        qpn: u32,
        from: QpState,
        to: QpState,
        why: ModifyRefusal,
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

impl VerbsError {
    /// The errno ibverbs returns for the same refusal (`ibv_post_send`, `ibv_post_recv`,
    /// `ibv_create_qp`, `ibv_modify_qp`, `ibv_dealloc_pd`, `ibv_reg_mr`, `ibv_dereg_mr`
    /// return it; rdma_rxe's `rxe_post_send` and `validate_send_wr`, the kernel's
    /// `ib_umem_get`): ENOMEM for a full queue, EBUSY for a protection domain, memory
    /// region or SRQ still in use, EFAULT for a null address to register, EINVAL for
    /// everything else (a bad state, a work request over one of the QP's caps, an
    /// unknown handle, a region of length 0).
    pub fn errno(&self) -> i32 {
        use crate::mem::RegError;
        match self {
            Self::QueueFull(_) => errno::ENOMEM,
            Self::Reg(RegError::Busy | RegError::RegionInUse(_)) | Self::Busy => errno::EBUSY,
            Self::Reg(RegError::BadAddress) => errno::EFAULT,
            Self::NoSuchQp(_)
            | Self::NoSuchCq
            | Self::NoSuchSrq
            | Self::BadState { .. }
            | Self::BadModify { .. }
            | Self::InvalidWr(_)
            | Self::Reg(_) => errno::EINVAL,
        }
    }
}

/// The errno values [`VerbsError::errno`] returns, as Linux numbers them (the generic
/// `asm-generic/errno-base.h` values, the same on every architecture Linux runs on). Written
/// out here so that this sans-IO crate needs no `libc`; `uroce`'s tests check them against
/// `libc`'s.
pub mod errno {
    /// Out of memory (a full queue).
    pub const ENOMEM: i32 = 12;
    /// Bad address (a null address to register).
    pub const EFAULT: i32 = 14;
    /// Device or resource busy (still in use).
    pub const EBUSY: i32 = 16;
    /// Invalid argument.
    pub const EINVAL: i32 = 22;
}
