//! A queue pair as the context holds it: the transport's QP (its state, queues and
//! service, [`crate::transport`]'s shell), the reaction point its packets wait for, and
//! its place in the context's schedule (`schedule.rs`).

use std::ops::{Deref, DerefMut};

use super::schedule::QpSched;
use crate::congestion::ReactionPoint;
use crate::mem::PdId;
use crate::transport::rc::RcQp;
use crate::transport::uc::UcQp;
use crate::transport::ud::UdQp;
use crate::transport::{self, QpCaps, QpType, Service};

/// One QP: its transport QP, the reaction point its packets wait for, and its place in
/// the ready list and the timer heap. It derefs to the transport QP, which the context
/// drives.
///
/// `repr(C)`: its place in the schedule and its reaction point (whose DCQCN state is a
/// pointer, `None` when DCQCN is off) come first, with the transport QP's hot fields
/// right behind them, so that a packet reads the first few cache lines of its QP only.
#[repr(C)]
pub(crate) struct Qp {
    pub(crate) sched: QpSched,
    pub(crate) rp: ReactionPoint,
    qp: transport::Qp,
}

impl Qp {
    /// A QP in RESET of the service `caps` names (QP1 for `Gsi`).
    pub(crate) fn new(qpn: u32, pd: PdId, caps: &QpCaps, rp: ReactionPoint) -> Self {
        let qp = transport::Qp::new(qpn, pd, caps, |core| -> Box<dyn Service> {
            match caps.qp_type {
                QpType::Rc => Box::new(RcQp::new(core)),
                QpType::Uc => Box::new(UcQp::new()),
                QpType::Ud | QpType::Gsi => Box::new(UdQp::new(core)),
            }
        });
        Self {
            sched: QpSched::default(),
            rp,
            qp,
        }
    }
}

impl Deref for Qp {
    type Target = transport::Qp;

    fn deref(&self) -> &transport::Qp {
        &self.qp
    }
}

impl DerefMut for Qp {
    fn deref_mut(&mut self) -> &mut transport::Qp {
        &mut self.qp
    }
}
