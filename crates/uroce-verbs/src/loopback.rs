//! Packets to the device's own address, delivered locally, as rdma_rxe delivers them:
//! a program whose QPs talk to each other through one device and GID works over every
//! datapath. The UDP backend needs nothing (the kernel loops a datagram to our own
//! address back to our socket); a backend that builds Ethernet frames (AF_XDP) would put
//! them on the wire, where nothing sends them back, so [`Loopback`] takes them out of its
//! sends and hands them to its receives, as the datagrams they are.

#![deny(unsafe_code)]

use std::io;
use std::net::IpAddr;
use std::os::fd::RawFd;
use std::time::Duration;

use uroce::datapath::handoff::Parked;
use uroce::datapath::{Backend, Received, Transmit};

/// A backend with local delivery of what goes to one of `local`: the device's address and
/// its link-local one (GID 0, which rdma-core's tests pick first).
pub struct Loopback {
    inner: Box<dyn Backend + Send>,
    local: Vec<IpAddr>,
    /// Datagrams waiting for local delivery (past `Parked`'s depth, sends to ourselves
    /// are lost as on a congested link: RC retransmits).
    queue: Parked,
}

impl Loopback {
    /// Wraps `inner`, delivering datagrams to any of `local` locally.
    pub fn new(inner: Box<dyn Backend + Send>, local: Vec<IpAddr>) -> Self {
        Self {
            inner,
            local,
            queue: Parked::default(),
        }
    }

    /// Whether datagrams wait for local delivery.
    pub fn pending(&self) -> bool {
        !self.queue.is_empty()
    }
}

impl Backend for Loopback {
    fn takes_payload_in_place(&self) -> bool {
        self.inner.takes_payload_in_place()
    }

    fn send_with(
        &mut self,
        build: &mut dyn FnMut(&mut [u8]) -> Option<Transmit>,
    ) -> io::Result<bool> {
        let Self {
            inner,
            local,
            queue,
        } = self;
        let mut looped = false;
        let sent = inner.send_with(&mut |buf| {
            let mut t = build(buf)?;
            if !local.contains(&t.datagram.dst()) {
                return Some(t);
            }
            // Parked, it outlives this round: its payload comes into the buffer (the one
            // `unsafe` of this module).
            // SAFETY: `build` made it just now; the context was not called since.
            #[allow(unsafe_code)]
            let whole = unsafe { uroce::datapath::gather(&mut t, buf) };
            if !whole {
                return None;
            }
            queue.park(t.datagram, &buf[..t.len]);
            looped = true;
            None
        })?;
        Ok(sent || looped)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }

    fn receive(
        &mut self,
        timeout: Duration,
        max: usize,
        handle: &mut dyn FnMut(Received<'_>),
    ) -> io::Result<usize> {
        let n = self.queue.hand_up(max, handle);
        let wait = if n > 0 { Duration::ZERO } else { timeout };
        Ok(n + self.inner.receive(wait, max - n, handle)?)
    }

    fn needs_link_addresses(&self) -> bool {
        self.inner.needs_link_addresses()
    }
    fn serves_link_local(&self) -> bool {
        self.inner.serves_link_local()
    }

    fn wait_fds(&self) -> Vec<RawFd> {
        self.inner.wait_fds()
    }

    fn holds_received(&self) -> bool {
        self.pending() || self.inner.holds_received()
    }

    fn rx_overruns(&self) -> u64 {
        self.inner.rx_overruns()
    }

    fn rx_capacity(&self) -> Option<u64> {
        self.inner.rx_capacity()
    }

    fn claim_qpns(&mut self, count: u32) -> std::io::Result<Option<(u32, u32)>> {
        self.inner.claim_qpns(count)
    }

    fn send_frame_with(
        &mut self,
        build: &mut dyn FnMut(&mut [u8]) -> Option<usize>,
    ) -> io::Result<bool> {
        self.inner.send_frame_with(build)
    }
}
