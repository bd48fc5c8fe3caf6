//! A queue pair of any transport, and the calls the context makes on it.

use std::time::Instant;

use crate::transport::rc::RcQp;
use crate::transport::uc::UcQp;
use crate::transport::ud::UdQp;
use crate::transport::{Io, OutPacket, QpCounters};
use crate::verbs::QpState;
use crate::wire::RocePacket;

/// One QP.
pub(crate) enum Qp {
    Rc(RcQp),
    Uc(UcQp),
    Ud(UdQp),
}

impl Qp {
    pub(crate) fn state(&self) -> QpState {
        match self {
            Qp::Rc(q) => q.state,
            Qp::Uc(q) => q.state,
            Qp::Ud(q) => q.state,
        }
    }

    pub(crate) fn counters(&self) -> &QpCounters {
        match self {
            Qp::Rc(q) => &q.counters,
            Qp::Uc(q) => &q.counters,
            Qp::Ud(q) => &q.counters,
        }
    }

    pub(crate) fn counters_mut(&mut self) -> &mut QpCounters {
        match self {
            Qp::Rc(q) => &mut q.counters,
            Qp::Uc(q) => &mut q.counters,
            Qp::Ud(q) => &mut q.counters,
        }
    }

    /// The QPN packets of this QP's peer come from (RC / UC); UD peers name theirs in the DETH.
    pub(crate) fn peer_qpn(&self, p: &RocePacket<'_>) -> u32 {
        match self {
            Qp::Rc(q) => q.path.map_or(0, |p| p.dest_qpn),
            Qp::Uc(q) => q.dest_qpn(),
            Qp::Ud(_) => p.ext.deth.map_or(0, |d| d.src_qp),
        }
    }

    pub(crate) fn enter_err(&mut self, io: &mut Io<'_>) {
        match self {
            Qp::Rc(q) => q.enter_err(io),
            Qp::Uc(q) => q.enter_err(io),
            Qp::Ud(q) => q.enter_err(io),
        }
    }

    pub(crate) fn on_packet(&mut self, io: &mut Io<'_>, p: &RocePacket<'_>) {
        match self {
            Qp::Rc(q) => q.on_packet(io, p),
            Qp::Uc(q) => q.on_packet(io, p),
            Qp::Ud(q) => q.on_packet(io, p),
        }
    }

    pub(crate) fn next_packet(&mut self, io: &mut Io<'_>) -> Option<OutPacket> {
        let p = match self {
            Qp::Rc(q) => return q.next_packet(io),
            Qp::Uc(q) => q.next_packet(io),
            Qp::Ud(q) => q.next_packet(io),
        };
        if p.is_some() {
            self.counters_mut().packets_sent += 1;
        }
        p
    }

    pub(crate) fn poll_timeout(&self) -> Option<Instant> {
        match self {
            Qp::Rc(q) => q.poll_timeout(),
            _ => None,
        }
    }

    pub(crate) fn on_timeout(&mut self, io: &mut Io<'_>) {
        if let Qp::Rc(q) = self {
            q.on_timeout(io);
        }
    }
}
