//! The QP of an id: the attributes the CM negotiated, in the form `ibv_modify_qp` takes,
//! applied as librdmacm applies them (`ucma_modify_qp_rtr`, `ucma_modify_qp_rts`), and
//! the INIT attributes of a QP not connected yet (`ucma_init_conn_qp`,
//! `ucma_init_ud_qp`).

#![deny(unsafe_code)]

use std::ffi::c_int;

use uroce::cm::mtu_code;
use uroce::mem::Access;
use uroce::verbs::{QpAttr, QpAttrMask, QpState};

use crate::abi::RDMA_UDP_QKEY;
use crate::events::ah_to;
use crate::state::State;
use crate::verbs::verbs;
use crate::verbs_abi::ibv_qp_attr;

/// IBV_QP_* mask bits used here.
pub(crate) const IBV_QP_STATE: c_int = 1;
pub(crate) const IBV_QP_ACCESS_FLAGS: c_int = 1 << 3;
pub(crate) const IBV_QP_PKEY_INDEX: c_int = 1 << 4;
pub(crate) const IBV_QP_PORT: c_int = 1 << 5;
pub(crate) const IBV_QP_QKEY: c_int = 1 << 6;
pub(crate) const IBV_QP_SQ_PSN: c_int = 1 << 16;

/// The ibverbs number of a QP state.
pub(crate) fn state_code(s: QpState) -> c_int {
    match s {
        QpState::Reset => 0,
        QpState::Init => 1,
        QpState::Rtr => 2,
        QpState::Rts => 3,
        QpState::Sqd => 4,
        QpState::Sqe => 5,
        QpState::Err => 6,
    }
}

/// The QP state of an ibverbs number.
pub(crate) fn state_of(code: c_int) -> Option<QpState> {
    Some(match code {
        0 => QpState::Reset,
        1 => QpState::Init,
        2 => QpState::Rtr,
        3 => QpState::Rts,
        4 => QpState::Sqd,
        5 => QpState::Sqe,
        6 => QpState::Err,
        _ => return None,
    })
}

fn access_bits(a: Access) -> u32 {
    [
        (Access::LOCAL_WRITE, 1),
        (Access::REMOTE_WRITE, 2),
        (Access::REMOTE_READ, 4),
        (Access::REMOTE_ATOMIC, 8),
    ]
    .iter()
    .filter(|(f, _)| a.contains(*f))
    .fold(0, |m, (_, b)| m | b)
}

/// The CM's attributes for moving id `i`'s QP to `to`, as `ibv_modify_qp` takes them
/// (`rdma_init_qp_attr`): the address vector from the device's GID and the id's TOS,
/// the ACK timeout from RDMA_OPTION_ID_ACK_TIMEOUT when set.
pub(crate) fn cm_attr(g: &State, i: usize, to: QpState) -> Result<(ibv_qp_attr, c_int), c_int> {
    let id = g.ids.get(&i).ok_or(libc::EINVAL)?;
    let (d, cm) = (id.dev.ok_or(libc::EINVAL)?, id.cm.ok_or(libc::EINVAL)?);
    let dev = &g.devices.as_ref().ok_or(libc::EINVAL)?[d];
    let (a, mask): (QpAttr, QpAttrMask) = dev.cm.qp_attr(cm, to).map_err(|_| libc::EINVAL)?;
    let mut c = ibv_qp_attr {
        qp_state: state_code(a.qp_state),
        qp_access_flags: access_bits(a.qp_access_flags),
        pkey_index: 0,
        port_num: 1,
        qkey: a.qkey,
        path_mtu: c_int::from(mtu_code(a.path_mtu)),
        dest_qp_num: a.dest_qp_num,
        rq_psn: a.rq_psn,
        sq_psn: a.sq_psn,
        max_rd_atomic: a.max_rd_atomic,
        max_dest_rd_atomic: a.max_dest_rd_atomic,
        min_rnr_timer: a.min_rnr_timer,
        timeout: a.timeout,
        retry_cnt: a.retry_cnt,
        rnr_retry: a.rnr_retry,
        ..ibv_qp_attr::default()
    };
    let mut bits = mask.bits() as c_int;
    if mask.contains(QpAttrMask::AV) {
        c.ah_attr = ah_to(g, d, a.ah_attr.ip, id.tos);
    }
    if let (Some(t), true) = (id.ack_timeout, mask.contains(QpAttrMask::TIMEOUT)) {
        c.timeout = t;
    }
    // The PSN this side's REQ or REP carries is where its receive queue starts (the
    // CM's RTR rq_psn); a passive id's is chosen at the REQ, before `rdma_accept` tells
    // the CM.
    if to == QpState::Rtr {
        c.rq_psn = id.psn;
    }
    if to == QpState::Init {
        bits |= IBV_QP_PKEY_INDEX | IBV_QP_PORT;
    }
    Ok((c, bits))
}

/// Moves id `i`'s QP to `to` with the CM's attributes.
pub(crate) fn modify_from_cm(g: &State, i: usize, to: QpState) -> Result<(), c_int> {
    let (mut attr, mask) = cm_attr(g, i, to)?;
    let qp = g.id(i)?.obj.id.qp;
    if qp.is_null() {
        return Err(libc::EINVAL);
    }
    let v = verbs()?;
    match v.modify_qp(qp, &mut attr, mask) {
        0 => Ok(()),
        e => Err(e),
    }
}

/// A new QP's move to INIT before any connection (`ucma_init_conn_qp`: P_Key index,
/// port, no remote access yet), and for UD on to RTS with the UDP port space's Q_Key
/// (`ucma_init_ud_qp`).
pub(crate) fn init_new_qp(
    qp: *mut crate::verbs_abi::ibv_qp,
    ud: bool,
    sq_psn: u32,
) -> Result<(), c_int> {
    let v = verbs()?;
    let mut a = ibv_qp_attr {
        qp_state: 1,
        pkey_index: 0,
        port_num: 1,
        qkey: RDMA_UDP_QKEY,
        ..ibv_qp_attr::default()
    };
    let mask = IBV_QP_STATE
        | IBV_QP_PKEY_INDEX
        | IBV_QP_PORT
        | if ud { IBV_QP_QKEY } else { IBV_QP_ACCESS_FLAGS };
    let r = v.modify_qp(qp, &mut a, mask);
    if r != 0 {
        return Err(r);
    }
    if !ud {
        return Ok(());
    }
    let mut a = ibv_qp_attr {
        qp_state: 2,
        ..ibv_qp_attr::default()
    };
    let r = v.modify_qp(qp, &mut a, IBV_QP_STATE);
    if r != 0 {
        return Err(r);
    }
    let mut a = ibv_qp_attr {
        qp_state: 3,
        sq_psn,
        ..ibv_qp_attr::default()
    };
    match v.modify_qp(qp, &mut a, IBV_QP_STATE | IBV_QP_SQ_PSN) {
        0 => Ok(()),
        e => Err(e),
    }
}

/// Moves id `i`'s QP (RC or UC) to the error state, if it has one.
pub(crate) fn to_error(g: &State, i: usize) {
    let Some(id) = g.ids.get(&i) else { return };
    let (qp, qp_type) = (id.obj.id.qp, id.obj.id.qp_type);
    if qp.is_null() || qp_type == 4 {
        return;
    }
    if let Ok(v) = verbs() {
        let mut a = ibv_qp_attr {
            qp_state: 6,
            ..ibv_qp_attr::default()
        };
        v.modify_qp(qp, &mut a, IBV_QP_STATE);
    }
}
