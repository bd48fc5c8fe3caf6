//! The queue pair's state (`ibv_qp_state`).

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
