//! The error of a verbs call itself (not of a work request, which completes with a
//! [`super::WcStatus`]).

use super::QpState;

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
    /// The resource is still in use (an SRQ with QPs on it): EBUSY.
    #[error("resource busy: still in use")]
    Busy,
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

impl VerbsError {
    /// The errno ibverbs returns for the same refusal (`ibv_post_send`, `ibv_post_recv`,
    /// `ibv_create_qp`, `ibv_modify_qp`, `ibv_dealloc_pd` return it; rdma_rxe's
    /// `rxe_post_send` and `validate_send_wr`): ENOMEM for a full queue, EBUSY for a
    /// protection domain or an SRQ still in use, EINVAL for everything else (a bad state, a work
    /// request over one of the QP's caps, an unknown handle).
    pub fn errno(&self) -> i32 {
        use crate::mem::RegError;
        match self {
            Self::QueueFull(_) => libc::ENOMEM,
            Self::Reg(RegError::Busy) | Self::Busy => libc::EBUSY,
            Self::NoSuchQp(_)
            | Self::NoSuchCq
            | Self::NoSuchSrq
            | Self::BadState { .. }
            | Self::InvalidWr(_)
            | Self::Reg(_) => libc::EINVAL,
        }
    }
}
