//! Handing a packet to the member of a steered group that owns its QP.
//!
//! A reuseport group steered by destination QP ([`super::udp::UdpBackend::bind_steered`])
//! puts each datagram on the socket of its QP's class, `DestQP mod N`. With UDP GRO on
//! those sockets the kernel may coalesce a run of one flow (one source address and port)
//! before the steering program sees it, and steer the whole run by its first packet: when
//! a peer's QPs of two classes share a source port (rare: uroce, rdma_rxe and ConnectX
//! pick one per QP), some of a run belongs to another member. [`Member`] wraps each
//! member's backend: what it receives for another class goes into that member's inbox
//! (a copy, and a doorbell rung for its thread), and each member takes its inbox before
//! its socket. So the group may coalesce, as a single socket does, and still loses no
//! packet to the wrong engine.

use std::collections::VecDeque;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::daemon::proto::{drain, eventfd, ring};
use super::{Backend, Received, Transmit};
use crate::wire::DatagramRepr;

/// Receives in a row, all of whose packets were other members', before a receive
/// reports nothing ([`Member`]'s `receive`): 16 batches.
const HANDED_OVER_ROUNDS: usize = 15;

/// Most packets an inbox holds; past it, packets for that member are lost as on a
/// congested link (RC retransmits).
const DEPTH: usize = 4096;

/// Datagrams kept aside (copies) to be handed up later, oldest first, with the buffers
/// of those handed up kept for the next ones (no allocation once warm): a member's
/// inbox here, the drop-in library's local delivery.
#[derive(Default)]
pub struct Parked {
    queue: VecDeque<(DatagramRepr, Vec<u8>)>,
    spare: Vec<Vec<u8>>,
}

impl Parked {
    /// Keeps a copy of `roce` under `datagram`; false, nothing kept, when [`DEPTH`]
    /// datagrams wait already (lost as on a congested link: RC retransmits).
    pub fn park(&mut self, datagram: DatagramRepr, roce: &[u8]) -> bool {
        if self.queue.len() >= DEPTH {
            return false;
        }
        let mut b = self.spare.pop().unwrap_or_default();
        b.clear();
        b.extend_from_slice(roce);
        self.queue.push_back((datagram, b));
        true
    }

    /// Hands up to `max` of them to `handle`, oldest first (the context verifies each);
    /// how many.
    pub fn hand_up(&mut self, max: usize, handle: &mut dyn FnMut(Received<'_>)) -> usize {
        let mut n = 0;
        while n < max {
            let Some((datagram, roce)) = self.queue.pop_front() else {
                break;
            };
            handle(Received::Datagram {
                datagram: &datagram,
                roce: &roce,
            });
            self.spare.push(roce);
            n += 1;
        }
        n
    }

    /// Whether datagrams wait.
    pub fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }
}

/// The inboxes of a group of `N` members, one per QP class.
pub struct Group {
    inboxes: Vec<Inbox>,
}

struct Inbox {
    queue: Mutex<Parked>,
    bell: OwnedFd,
}

impl Group {
    /// A group of `count` members (at least 1).
    pub fn new(count: usize) -> io::Result<Arc<Self>> {
        let inboxes = (0..count.max(1))
            .map(|_| {
                Ok(Inbox {
                    queue: Mutex::new(Parked::default()),
                    bell: eventfd()?,
                })
            })
            .collect::<io::Result<_>>()?;
        Ok(Arc::new(Self { inboxes }))
    }

    /// The number of members.
    pub fn len(&self) -> usize {
        self.inboxes.len()
    }

    /// Never: a group has a member at least.
    pub fn is_empty(&self) -> bool {
        self.inboxes.is_empty()
    }
}

/// The class of a RoCE packet (BTH first): its DestQP mod `count`; None for one too short
/// to have a BTH (the member's own context refuses it).
fn class_of(roce: &[u8], count: usize) -> Option<usize> {
    crate::wire::bth::dest_qp_of(roce).map(|qpn| qpn as usize % count)
}

/// Member `class` of a [`Group`] around its backend.
pub struct Member {
    inner: Box<dyn Backend + Send>,
    class: usize,
    group: Arc<Group>,
    /// What was taken from the inbox and not handed up yet.
    taken: Parked,
    /// Packets this member handed to another.
    pub handed_over: u64,
}

impl Member {
    /// Member `class` of `group` on `inner`, the socket the group's steering gives that
    /// class.
    pub fn new(inner: Box<dyn Backend + Send>, class: usize, group: Arc<Group>) -> Self {
        Self {
            inner,
            class,
            group,
            taken: Parked::default(),
            handed_over: 0,
        }
    }

    fn my_inbox(&self) -> &Inbox {
        &self.group.inboxes[self.class]
    }
}

impl Backend for Member {
    fn takes_payload_in_place(&self) -> bool {
        self.inner.takes_payload_in_place()
    }

    fn send_with(
        &mut self,
        build: &mut dyn FnMut(&mut [u8]) -> Option<Transmit>,
    ) -> io::Result<bool> {
        self.inner.send_with(build)
    }

    fn send_frame_with(
        &mut self,
        build: &mut dyn FnMut(&mut [u8]) -> Option<usize>,
    ) -> io::Result<bool> {
        self.inner.send_frame_with(build)
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
        if self.taken.is_empty() {
            let inbox = &self.group.inboxes[self.class];
            drain(inbox.bell.as_raw_fd());
            let mut q = inbox.queue.lock().unwrap_or_else(|e| e.into_inner());
            // The inbox's datagrams for the buffers handed up before: those go to the
            // members that park here next.
            std::mem::swap(&mut *q, &mut self.taken);
        }
        let n = self.taken.hand_up(max, handle);
        let wait = if n > 0 { Duration::ZERO } else { timeout };
        let Self {
            inner,
            class,
            group,
            handed_over,
            ..
        } = self;
        let count = group.len();
        let mut mine = 0;
        // On through what the inner backend still holds while all it hands up is another
        // member's: the socket does not show segments taken already as readable, so a
        // caller told "nothing" would sleep with this member's own packets behind them.
        // Bounded all the same: an inner backend of several sockets (`BySource`) reads a
        // fresh batch on one while another holds some, and a stream of other members'
        // packets must not keep the caller from its timers (that stream keeps a socket
        // readable, so the caller does not sleep long).
        let mut wait = wait;
        for round in 0.. {
            let got = inner.receive(wait, max - n, &mut |r| {
                let to = match &r {
                    Received::Datagram { roce, .. } => class_of(roce, count),
                    Received::Frame(_) => None,
                };
                match (to, &r) {
                    (Some(k), Received::Datagram { datagram, roce, .. }) if k != *class => {
                        let inbox = &group.inboxes[k];
                        let mut q = inbox.queue.lock().unwrap_or_else(|e| e.into_inner());
                        if q.park(**datagram, roce) {
                            *handed_over += 1;
                        }
                        drop(q);
                        ring(inbox.bell.as_raw_fd());
                    }
                    _ => {
                        handle(r);
                        mine += 1;
                    }
                }
            })?;
            if mine > 0 || got == 0 || !inner.holds_received() || round >= HANDED_OVER_ROUNDS {
                break;
            }
            wait = Duration::ZERO;
        }
        Ok(n + mine)
    }

    fn wait_fds(&self) -> Vec<RawFd> {
        let mut v = self.inner.wait_fds();
        v.push(self.my_inbox().bell.as_raw_fd());
        v
    }

    fn holds_received(&self) -> bool {
        !self.taken.is_empty() || self.inner.holds_received()
    }

    fn needs_link_addresses(&self) -> bool {
        self.inner.needs_link_addresses()
    }

    fn serves_link_local(&self) -> bool {
        self.inner.serves_link_local()
    }

    fn rx_overruns(&self) -> u64 {
        self.inner.rx_overruns()
    }

    fn rx_capacity(&self) -> Option<u64> {
        self.inner.rx_capacity()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{IpAddr, Ipv4Addr};

    /// A backend that hands up the packets it was given, once.
    struct Canned(Vec<Vec<u8>>);

    impl Backend for Canned {
        fn send_with(
            &mut self,
            _: &mut dyn FnMut(&mut [u8]) -> Option<Transmit>,
        ) -> io::Result<bool> {
            Ok(false)
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
        fn receive(
            &mut self,
            _: Duration,
            max: usize,
            handle: &mut dyn FnMut(Received<'_>),
        ) -> io::Result<usize> {
            let d = datagram();
            let n = max.min(self.0.len());
            for p in self.0.drain(..n) {
                handle(Received::Datagram {
                    datagram: &d,
                    roce: &p,
                });
            }
            Ok(n)
        }
        fn holds_received(&self) -> bool {
            !self.0.is_empty()
        }
    }

    fn datagram() -> DatagramRepr {
        let a = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));
        DatagramRepr::roce(a, a, 0xc001, 0).unwrap()
    }

    /// A BTH-led packet for `qpn`, tagged with `tag` after the BTH.
    fn packet(qpn: u32, tag: u8) -> Vec<u8> {
        let mut p = vec![0u8; 16];
        p[5..8].copy_from_slice(&qpn.to_be_bytes()[1..]);
        p[12] = tag;
        p
    }

    fn taken(m: &mut Member) -> Vec<(u32, u8)> {
        let mut got = Vec::new();
        m.receive(Duration::ZERO, 64, &mut |r| {
            if let Received::Datagram { roce, .. } = r {
                let q = u32::from_be_bytes([0, roce[5], roce[6], roce[7]]);
                got.push((q, roce[12]));
            }
        })
        .unwrap();
        got
    }

    /// A run longer than a receive's batch, all of it another member's but its last
    /// packets: one receive hands those up (it used to report nothing after the first
    /// batch, all handed over, and its caller slept with them still held), and the other
    /// member finds every one of its own.
    #[test]
    fn a_members_own_packets_behind_a_batch_of_others_are_handed_up_at_once() {
        let group = Group::new(2).unwrap();
        let mut run: Vec<Vec<u8>> = (0..150).map(|k| packet(2, k as u8)).collect();
        run.extend((0..3).map(|k| packet(5, k)));
        let mut one = Member::new(Box::new(Canned(run)), 1, group.clone());
        let mut zero = Member::new(Box::new(Canned(Vec::new())), 0, group.clone());
        assert_eq!(taken(&mut one), vec![(5, 0), (5, 1), (5, 2)]);
        assert!(!one.holds_received());
        assert_eq!(one.handed_over, 150);
        let mut theirs = taken(&mut zero);
        theirs.extend(taken(&mut zero));
        theirs.extend(taken(&mut zero));
        let want: Vec<(u32, u8)> = (0..150).map(|k| (2, k as u8)).collect();
        assert_eq!(theirs, want);
    }

    /// A run steered to member 1 with packets of classes 0 and 2 in it: member 1 keeps
    /// its own, the others find theirs in their inboxes, in order, their doorbells rung.
    #[test]
    fn packets_of_another_class_reach_their_member_in_order() {
        let group = Group::new(3).unwrap();
        let run = vec![
            packet(4, 1),
            packet(3, 2),
            packet(7, 3),
            packet(5, 4),
            packet(6, 5),
        ];
        let mut one = Member::new(Box::new(Canned(run)), 1, group.clone());
        let mut zero = Member::new(Box::new(Canned(Vec::new())), 0, group.clone());
        let mut two = Member::new(Box::new(Canned(Vec::new())), 2, group.clone());
        assert_eq!(taken(&mut one), vec![(4, 1), (7, 3)]);
        assert_eq!(one.handed_over, 3);
        let bell = *zero.wait_fds().last().unwrap();
        assert!(super::super::daemon::proto::wait_readable(
            bell,
            Duration::ZERO
        ));
        assert_eq!(taken(&mut zero), vec![(3, 2), (6, 5)]);
        assert!(!super::super::daemon::proto::wait_readable(
            bell,
            Duration::ZERO
        ));
        assert_eq!(taken(&mut two), vec![(5, 4)]);
        assert!(taken(&mut two).is_empty());
    }
}
