//! The QP state table: which modify changes are legal for each service, and which
//! attributes each requires and permits (IBTA Vol. 1 §10.3.1, the QP state diagram;
//! §11.2.5.2 and the Modify QP attribute tables; ibverbs' meaning is the Linux kernel's
//! `qp_state_table`, checked by `ib_modify_qp_is_ok` in `drivers/infiniband/core/verbs.c`,
//! which every provider, rdma_rxe included, goes through).
//!
//! The table here is that one for RC, UC, UD and QP1 (GSI), with two differences:
//! - uroce has no alternate path, so IBV_QP_ALT_PATH and IBV_QP_PATH_MIG_STATE are
//!   permitted nowhere (there is no bit for them in [`QpAttrMask`]);
//! - a UD QP (and QP1) may take IBV_QP_PATH_MTU at INIT → RTR: ibverbs takes a UD QP's
//!   MTU from its port, and uroce's context has no port MTU, so the MTU its datagrams may
//!   not exceed is given here (1024 when absent).
//!
//! Everything else follows the kernel: any state → RESET and → ERR with no attribute
//! (RESET → ERR included), SQE exists for UC and UD only, and IBV_QP_TIMEOUT,
//! IBV_QP_RETRY_CNT, IBV_QP_RNR_RETRY, IBV_QP_MAX_QP_RD_ATOMIC and IBV_QP_AV change
//! after RTS only in SQD → SQD (RTS → RTS takes IBV_QP_ACCESS_FLAGS, IBV_QP_MIN_RNR_TIMER
//! (RC) and IBV_QP_QKEY (UD), as the kernel refuses IBV_QP_TIMEOUT there with EINVAL).

use super::{QpAttrMask as M, QpState, QpType};

/// Why a modify was refused (always EINVAL).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModifyRefusal {
    /// The change is not in the QP state table for this QP type.
    NotInTable,
    /// Attributes the change requires are missing from the mask.
    Missing(M),
    /// Attributes in the mask that the change does not permit.
    NotPermitted(M),
    /// IBV_QP_CUR_STATE names a state the QP is not in.
    CurState(QpState),
    /// In SQD with send work requests still in progress: only → ERR is taken (rdma_rxe's
    /// `rxe_qp_chk_attr`; IBTA §10.3.1: the attributes of SQD change once drained).
    Draining,
    /// An attribute value out of its range (the attribute named).
    BadValue(&'static str),
}

impl std::fmt::Display for ModifyRefusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::NotInTable => f.write_str("not a transition of the QP state table"),
            Self::Missing(m) => write!(f, "required attributes missing: {m}"),
            Self::NotPermitted(m) => write!(f, "attributes not permitted here: {m}"),
            Self::CurState(s) => write!(f, "IBV_QP_CUR_STATE says {s:?}"),
            Self::Draining => f.write_str("the send queue is still draining (only -> ERR)"),
            Self::BadValue(what) => write!(f, "{what} out of range"),
        }
    }
}

/// The attributes a change from `from` to `to` requires and permits for a QP of type
/// `t` (IBV_QP_STATE aside, always permitted); `None` when the change is not in the
/// table.
pub(crate) fn masks(t: QpType, from: QpState, to: QpState) -> Option<(M, M)> {
    use QpState::*;
    let ud = matches!(t, QpType::Ud | QpType::Gsi);
    let rc = t == QpType::Rc;
    let none = M::NONE;
    Some(match (from, to) {
        (_, Reset) | (_, Err) => (none, none),
        (Reset, Init) => match t {
            QpType::Rc | QpType::Uc => (M::PKEY_INDEX | M::PORT | M::ACCESS_FLAGS, none),
            QpType::Ud => (M::PKEY_INDEX | M::PORT | M::QKEY, none),
            QpType::Gsi => (M::PKEY_INDEX | M::QKEY, none),
        },
        (Init, Init) => match t {
            QpType::Rc | QpType::Uc => (none, M::PKEY_INDEX | M::PORT | M::ACCESS_FLAGS),
            QpType::Ud => (none, M::PKEY_INDEX | M::PORT | M::QKEY),
            QpType::Gsi => (none, M::PKEY_INDEX | M::QKEY),
        },
        (Init, Rtr) if ud => (none, M::PKEY_INDEX | M::QKEY | M::PATH_MTU),
        (Init, Rtr) => {
            let mut req = M::AV | M::PATH_MTU | M::DEST_QPN | M::RQ_PSN;
            if rc {
                req |= M::MAX_DEST_RD_ATOMIC | M::MIN_RNR_TIMER;
            }
            (req, M::ACCESS_FLAGS | M::PKEY_INDEX)
        }
        (Rtr, Rts) => {
            let req = if rc {
                M::TIMEOUT | M::RETRY_CNT | M::RNR_RETRY | M::SQ_PSN | M::MAX_QP_RD_ATOMIC
            } else {
                M::SQ_PSN
            };
            (req, rts_optional(t))
        }
        (Rts, Rts) | (Sqd, Rts) => (none, rts_optional(t)),
        (Sqe, Rts) if !matches!(t, QpType::Rc) => (none, rts_optional(t)),
        (Rts, Sqd) => (none, M::EN_SQD_ASYNC_NOTIFY),
        (Sqd, Sqd) => match t {
            QpType::Ud | QpType::Gsi => (none, M::PKEY_INDEX | M::QKEY),
            QpType::Uc => (none, M::AV | M::ACCESS_FLAGS | M::PKEY_INDEX),
            QpType::Rc => (
                none,
                M::PORT
                    | M::AV
                    | M::TIMEOUT
                    | M::RETRY_CNT
                    | M::RNR_RETRY
                    | M::MAX_QP_RD_ATOMIC
                    | M::MAX_DEST_RD_ATOMIC
                    | M::ACCESS_FLAGS
                    | M::PKEY_INDEX
                    | M::MIN_RNR_TIMER,
            ),
        },
        _ => return None,
    })
}

/// What RTR → RTS, RTS → RTS, SQD → RTS and SQE → RTS permit besides their required
/// attributes.
fn rts_optional(t: QpType) -> M {
    match t {
        QpType::Ud | QpType::Gsi => M::CUR_STATE | M::QKEY,
        QpType::Uc => M::CUR_STATE | M::ACCESS_FLAGS,
        QpType::Rc => M::CUR_STATE | M::ACCESS_FLAGS | M::MIN_RNR_TIMER,
    }
}

/// Checks a change from `from` to `to` with the attributes `mask` names, as
/// `ib_modify_qp_is_ok` does: the change must be in the table, every required attribute
/// named, and nothing named that the change does not permit.
pub(crate) fn check(t: QpType, from: QpState, to: QpState, mask: M) -> Result<(), ModifyRefusal> {
    let (req, opt) = masks(t, from, to).ok_or(ModifyRefusal::NotInTable)?;
    let missing = req.without(mask);
    if !missing.is_empty() {
        return Err(ModifyRefusal::Missing(missing));
    }
    let extra = mask.without(req | opt | M::STATE);
    if !extra.is_empty() {
        return Err(ModifyRefusal::NotPermitted(extra));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use QpState::{Init, Reset, Rtr, Rts, Sqd, Sqe};

    const STATES: [QpState; 7] = [Reset, Init, Rtr, Rts, Sqd, Sqe, QpState::Err];
    const TYPES: [QpType; 4] = [QpType::Rc, QpType::Uc, QpType::Ud, QpType::Gsi];

    /// The legal changes of IBTA §10.3.1 / the kernel's table, per type.
    fn legal(t: QpType, from: QpState, to: QpState) -> bool {
        matches!(
            (from, to),
            (_, Reset)
                | (_, QpState::Err)
                | (Reset, Init)
                | (Init, Init)
                | (Init, Rtr)
                | (Rtr, Rts)
                | (Rts, Rts)
                | (Rts, Sqd)
                | (Sqd, Sqd)
                | (Sqd, Rts)
        ) || (from, to) == (Sqe, Rts) && t != QpType::Rc
    }

    #[test]
    fn exactly_the_legal_changes_are_in_the_table() {
        for t in TYPES {
            for from in STATES {
                for to in STATES {
                    assert_eq!(
                        masks(t, from, to).is_some(),
                        legal(t, from, to),
                        "{t:?} {from:?} -> {to:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn a_missing_required_attribute_is_named() {
        let have = M::STATE | M::PKEY_INDEX | M::PORT;
        assert_eq!(
            check(QpType::Rc, Reset, Init, have),
            Err(ModifyRefusal::Missing(M::ACCESS_FLAGS))
        );
        let r = check(QpType::Rc, Reset, Init, have).unwrap_err();
        assert_eq!(
            r.to_string(),
            "required attributes missing: IBV_QP_ACCESS_FLAGS"
        );
        // UD needs a Q_Key and no access flags; QP1 no port.
        assert!(check(QpType::Ud, Reset, Init, have | M::QKEY).is_ok());
        assert_eq!(
            check(QpType::Ud, Reset, Init, have | M::ACCESS_FLAGS | M::QKEY),
            Err(ModifyRefusal::NotPermitted(M::ACCESS_FLAGS))
        );
        assert!(check(QpType::Gsi, Reset, Init, M::PKEY_INDEX | M::QKEY).is_ok());
    }

    #[test]
    fn rc_rtr_and_rts_need_their_attributes() {
        let rtr = M::AV | M::PATH_MTU | M::DEST_QPN | M::RQ_PSN;
        assert_eq!(
            check(QpType::Rc, Init, Rtr, rtr),
            Err(ModifyRefusal::Missing(
                M::MAX_DEST_RD_ATOMIC | M::MIN_RNR_TIMER
            ))
        );
        assert!(check(QpType::Uc, Init, Rtr, rtr).is_ok());
        assert_eq!(
            check(QpType::Rc, Rtr, Rts, M::SQ_PSN),
            Err(ModifyRefusal::Missing(
                M::TIMEOUT | M::RETRY_CNT | M::RNR_RETRY | M::MAX_QP_RD_ATOMIC
            ))
        );
        assert!(check(QpType::Ud, Rtr, Rts, M::SQ_PSN).is_ok());
    }

    #[test]
    fn timeout_changes_in_sqd_not_in_rts() {
        // The kernel's table: IBV_QP_TIMEOUT after RTR -> RTS only in SQD -> SQD.
        assert_eq!(
            check(QpType::Rc, Rts, Rts, M::TIMEOUT),
            Err(ModifyRefusal::NotPermitted(M::TIMEOUT))
        );
        assert!(check(QpType::Rc, Rts, Rts, M::MIN_RNR_TIMER | M::ACCESS_FLAGS).is_ok());
        assert!(check(QpType::Rc, Sqd, Sqd, M::TIMEOUT | M::RETRY_CNT).is_ok());
        assert!(check(QpType::Uc, Sqd, Sqd, M::TIMEOUT).is_err());
        assert!(check(QpType::Ud, Rts, Rts, M::QKEY).is_ok());
    }

    #[test]
    fn cur_state_only_where_permitted() {
        assert!(check(QpType::Rc, Rts, Rts, M::CUR_STATE).is_ok());
        assert!(check(QpType::Rc, Init, Init, M::CUR_STATE).is_err());
        assert!(check(QpType::Rc, Rts, Sqd, M::CUR_STATE).is_err());
    }

    #[test]
    fn refusals_read_well() {
        assert_eq!(
            ModifyRefusal::NotPermitted(M::TIMEOUT | M::AV).to_string(),
            "attributes not permitted here: IBV_QP_AV | IBV_QP_TIMEOUT"
        );
        assert_eq!(format!("{}", M::NONE), "0");
    }
}
