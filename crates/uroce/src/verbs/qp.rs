//! A queue pair of any transport, and the calls the context makes on it.

use std::time::Instant;

use crate::congestion::ReactionPoint;
use crate::transport::rc::RcQp;
use crate::transport::uc::UcQp;
use crate::transport::ud::UdQp;
use crate::transport::QpState;
use crate::transport::{Io, OutPacket, QpCounters};
use crate::wire::RocePacket;

/// The transport state machine of a QP.
pub(crate) enum QpKind {
    Rc(Box<RcQp>),
    Uc(UcQp),
    Ud(UdQp),
}

/// One QP: its transport, and the reaction point its packets wait for.
pub(crate) struct Qp {
    pub(crate) kind: QpKind,
    pub(crate) rp: ReactionPoint,
}

impl Qp {
    pub(crate) fn state(&self) -> QpState {
        match &self.kind {
            QpKind::Rc(q) => q.state,
            QpKind::Uc(q) => q.state,
            QpKind::Ud(q) => q.state,
        }
    }

    pub(crate) fn counters(&self) -> &QpCounters {
        match &self.kind {
            QpKind::Rc(q) => &q.counters,
            QpKind::Uc(q) => &q.counters,
            QpKind::Ud(q) => &q.counters,
        }
    }

    pub(crate) fn counters_mut(&mut self) -> &mut QpCounters {
        match &mut self.kind {
            QpKind::Rc(q) => &mut q.counters,
            QpKind::Uc(q) => &mut q.counters,
            QpKind::Ud(q) => &mut q.counters,
        }
    }

    /// The QPN packets of this QP's peer come from (RC / UC); UD peers name theirs in the DETH.
    pub(crate) fn peer_qpn(&self, p: &RocePacket<'_>) -> u32 {
        match &self.kind {
            QpKind::Rc(q) => q.path.map_or(0, |p| p.dest_qpn),
            QpKind::Uc(q) => q.dest_qpn(),
            QpKind::Ud(_) => p.ext.deth.map_or(0, |d| d.src_qp),
        }
    }

    pub(crate) fn enter_err(&mut self, io: &mut Io<'_>) {
        match &mut self.kind {
            QpKind::Rc(q) => q.enter_err(io),
            QpKind::Uc(q) => q.enter_err(io),
            QpKind::Ud(q) => q.enter_err(io),
        }
    }

    pub(crate) fn on_packet(&mut self, io: &mut Io<'_>, p: &RocePacket<'_>) {
        match &mut self.kind {
            QpKind::Rc(q) => q.on_packet(io, p),
            QpKind::Uc(q) => q.on_packet(io, p),
            QpKind::Ud(q) => q.on_packet(io, p),
        }
    }

    pub(crate) fn next_packet(&mut self, io: &mut Io<'_>) -> Option<OutPacket> {
        let p = match &mut self.kind {
            QpKind::Rc(q) => return q.next_packet(io),
            QpKind::Uc(q) => q.next_packet(io),
            QpKind::Ud(q) => q.next_packet(io),
        };
        if p.is_some() {
            self.counters_mut().packets_sent += 1;
        }
        p
    }

    pub(crate) fn poll_timeout(&self) -> Option<Instant> {
        match &self.kind {
            QpKind::Rc(q) => q.poll_timeout(),
            _ => None,
        }
    }

    pub(crate) fn on_timeout(&mut self, io: &mut Io<'_>) {
        if let QpKind::Rc(q) = &mut self.kind {
            q.on_timeout(io);
        }
    }
}
