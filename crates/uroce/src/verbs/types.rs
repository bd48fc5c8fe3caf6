//! The verbs concepts the transports do not need. Work requests, completions, QP states
//! and attributes belong to [`crate::transport`]; [`crate::verbs`] re-exports them.

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
