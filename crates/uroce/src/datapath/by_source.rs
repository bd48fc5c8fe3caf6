//! [`BySource`]: several backends as one, each datagram sent by the one that owns its
//! source address, and what any of them receives handed up.
//!
//! A UDP socket sends from the address it is bound to, so a context that sends from two
//! addresses over UDP needs a socket for each: its routable address and the interface's
//! IPv6 link-local one (its default GID, which libfabric's dgram and rdm endpoints name at
//! both ends), bound with its scope ([`super::udp::UdpBackend::bind_link_local`]). The
//! library's direct mode holds them in one `BySource`; `uroce daemon` keeps its own list of
//! datapaths by source, locked one by one for its threads.

use std::io;
use std::net::IpAddr;
use std::os::fd::RawFd;
use std::time::Duration;

use super::{Backend, Received, Transmit, MAX_FRAME};

/// A receive without waiting asks a backend other than the main one that had nothing the
/// last time once in this many calls.
const COLD_EVERY: u32 = 8;

/// Backends keyed by source address (see the module docs). The first one added is the
/// main one: it sends link-layer frames, claims QPNs and says whether link addresses are
/// needed.
///
/// Sending: `build` writes into the buffer of the backend the last datagram went to (a
/// context sends runs from one address); a datagram from another backend's address is
/// copied into that one's (only link-local traffic, which is little, pays for the copy
/// while routable traffic flows); when that one has no room even after a flush, the copy
/// is held and sends are refused (WouldBlock, nothing built) until it goes. Receiving: the backends in turn, without waiting, then
/// a wait on all of their descriptors. A program polling its CQ in a loop receives
/// without waiting, one `recvmmsg` per backend asked: the main backend is asked every
/// time, another one every time while it has packets ("hot") and every
/// [`COLD_EVERY`]th time otherwise, so an idle link-local socket does not double the
/// system calls of an empty poll (after a wait that saw a descriptor readable, all are
/// asked).
pub struct BySource {
    /// The source addresses each backend sends from (a field of its own, so that a
    /// `build` routing by them and a backend sending are disjoint borrows).
    sources: Vec<Vec<IpAddr>>,
    backends: Vec<Box<dyn Backend + Send>>,
    /// The part whose buffer the next `build` writes into.
    last: usize,
    /// The next part to receive from first (so one busy part does not starve the others).
    next_rx: usize,
    /// Whether each part had packets when last asked.
    hot: Vec<bool>,
    /// Receives without waiting so far, counting to the next one that asks cold parts.
    polls: u32,
    /// A datagram built in one part's buffer that another part sends.
    moved: Vec<u8>,
    /// `moved` is waiting for room in part `.0` (it had none even after a flush): sends
    /// are refused (WouldBlock) until it goes, so nothing is lost.
    held: Option<(usize, Transmit)>,
}

impl BySource {
    /// A composite of one backend, `main`, sending from `sources`.
    pub fn new(sources: Vec<IpAddr>, main: Box<dyn Backend + Send>) -> Self {
        Self {
            sources: vec![sources],
            backends: vec![main],
            last: 0,
            next_rx: 0,
            hot: vec![false],
            polls: 0,
            moved: Vec::new(),
            held: None,
        }
    }

    /// Adds `backend`, sending from `sources`.
    pub fn add(&mut self, sources: Vec<IpAddr>, backend: Box<dyn Backend + Send>) {
        self.sources.push(sources);
        self.backends.push(backend);
        self.hot.push(false);
    }

    /// Hands the held datagram to its part, flushing that part once if it has no room:
    /// whether nothing is held now.
    fn send_held(&mut self) -> io::Result<bool> {
        let Some((k, t)) = self.held else {
            return Ok(true);
        };
        let moved = &self.moved;
        let mut copy = |buf: &mut [u8]| {
            (buf.len() >= moved.len()).then(|| {
                buf[..moved.len()].copy_from_slice(moved);
                t
            })
        };
        let b = &mut self.backends[k];
        let r = match b.send_with(&mut copy) {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                b.flush()?;
                b.send_with(&mut copy)
            }
            r => r,
        };
        match r {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(false),
            Err(e) => {
                // Refused for good (too big for that part): dropped, as a failed send is.
                self.held = None;
                Err(e)
            }
            Ok(_) => {
                self.held = None;
                Ok(true)
            }
        }
    }
}

impl Backend for BySource {
    /// Where every part takes them: a datagram for another part is made whole first.
    fn takes_payload_in_place(&self) -> bool {
        self.backends.iter().all(|b| b.takes_payload_in_place())
    }

    fn send_with(
        &mut self,
        build: &mut dyn FnMut(&mut [u8]) -> Option<Transmit>,
    ) -> io::Result<bool> {
        if !self.send_held()? {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        let here = self.last;
        let mut elsewhere: Option<(usize, Transmit)> = None;
        let mut unknown = None;
        let (sources, moved) = (&self.sources, &mut self.moved);
        let mut route = |buf: &mut [u8]| {
            let mut t = build(buf)?;
            match sources.iter().position(|s| s.contains(&t.datagram.src())) {
                Some(k) if k == here => Some(t),
                Some(k) => {
                    // Held, it outlives this round: its payload comes into the buffer.
                    // SAFETY: `build` made it just now; the context was not called since.
                    if !unsafe { super::gather(&mut t, buf) } {
                        return None;
                    }
                    let len = t.len.min(buf.len()).min(MAX_FRAME);
                    moved.clear();
                    moved.extend_from_slice(&buf[..len]);
                    elsewhere = Some((k, t));
                    None
                }
                None => {
                    unknown = Some(t.datagram.src());
                    None
                }
            }
        };
        let sent = self.backends[here].send_with(&mut route)?;
        if let Some(src) = unknown {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("no datapath here sends from {src}"),
            ));
        }
        let Some((k, t)) = elsewhere else {
            return Ok(sent);
        };
        // Runs from the new address go straight into its buffer.
        self.last = k;
        self.held = Some((k, t));
        // Queued here or held: either way it goes, and the caller's datagram was taken.
        self.send_held()?;
        Ok(true)
    }

    fn send_frame_with(
        &mut self,
        build: &mut dyn FnMut(&mut [u8]) -> Option<usize>,
    ) -> io::Result<bool> {
        self.backends[0].send_frame_with(build)
    }

    fn flush(&mut self) -> io::Result<()> {
        let mut first = self.send_held().map(|_| ());
        for b in &mut self.backends {
            if let Err(e) = b.flush() {
                if first.is_ok() {
                    first = Err(e);
                }
            }
        }
        first
    }

    fn receive(
        &mut self,
        timeout: Duration,
        max: usize,
        handle: &mut dyn FnMut(Received<'_>),
    ) -> io::Result<usize> {
        let n = self.backends.len();
        let mut got = self.receive_each(max, false, handle)?;
        if got > 0 || timeout.is_zero() || max == 0 {
            return Ok(got);
        }
        let fds = self.wait_fds();
        if fds.len() < n {
            // A part that cannot say when it has packets: each waits its share.
            let share = timeout / n as u32;
            let start = self.next_rx;
            for i in 0..n {
                let k = (start + i) % n;
                got += self.backends[k].receive(share, max - got, handle)?;
                if got > 0 {
                    break;
                }
            }
            return Ok(got);
        }
        let mut p: Vec<libc::pollfd> = fds
            .iter()
            .map(|&fd| libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            })
            .collect();
        if super::wait::poll(&mut p, timeout)? == 0 {
            // The wait ran out with nothing readable (or a signal came): no part has
            // anything to ask for.
            return Ok(0);
        }
        self.receive_each(max, true, handle)
    }

    fn wait_fds(&self) -> Vec<RawFd> {
        self.backends.iter().flat_map(|b| b.wait_fds()).collect()
    }

    fn holds_received(&self) -> bool {
        self.backends.iter().any(|b| b.holds_received())
    }

    fn needs_link_addresses(&self) -> bool {
        self.backends[0].needs_link_addresses()
    }

    fn serves_link_local(&self) -> bool {
        self.backends.iter().any(|b| b.serves_link_local())
    }

    fn rx_overruns(&self) -> u64 {
        self.backends.iter().map(|b| b.rx_overruns()).sum()
    }

    fn rx_capacity(&self) -> Option<u64> {
        // The smallest: RC windows are sized so that no part's buffer overflows.
        self.backends.iter().filter_map(|b| b.rx_capacity()).min()
    }

    fn claim_qpns(&mut self, count: u32) -> io::Result<Option<(u32, u32)>> {
        self.backends[0].claim_qpns(count)
    }
}

impl BySource {
    /// What the parts have received, without waiting, up to `max` in all, starting with
    /// a different part each call: every part when `all`, else the main one, the hot
    /// ones, and the cold ones every [`COLD_EVERY`]th call (see [`BySource`]).
    fn receive_each(
        &mut self,
        max: usize,
        all: bool,
        handle: &mut dyn FnMut(Received<'_>),
    ) -> io::Result<usize> {
        let n = self.backends.len();
        let start = self.next_rx;
        self.next_rx = (start + 1) % n;
        self.polls = self.polls.wrapping_add(1);
        let cold_too = all || self.polls % COLD_EVERY == 0;
        let mut got = 0;
        for i in 0..n {
            if got >= max {
                break;
            }
            let k = (start + i) % n;
            if k != 0 && !self.hot[k] && !cold_too {
                continue;
            }
            let here = self.backends[k].receive(Duration::ZERO, max - got, handle)?;
            self.hot[k] = here > 0;
            got += here;
        }
        Ok(got)
    }
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use super::*;
    use crate::datapath::udp::UdpBackend;
    use crate::wire::{self, BthRepr, DatagramRepr, ExtHeaders, IpRepr, Ipv4Repr, Opcode, UdpRepr};

    /// A UD SEND from `a` to `b` with PSN `psn`, written into `buf`, and where it goes.
    fn ud_send(a: Ipv4Addr, b: Ipv4Addr, psn: u32, buf: &mut [u8]) -> Transmit {
        let repr = wire::FrameRepr {
            eth: None,
            ip: IpRepr::V4(Ipv4Repr::new(a, b, 0)),
            udp: UdpRepr {
                src_port: 0xc000,
                dst_port: wire::ROCEV2_UDP_PORT,
                checksum: 0,
            },
            bth: BthRepr::new(Opcode::UdSendOnly, 0x12, psn),
            ext: ExtHeaders {
                deth: Some(wire::DethRepr {
                    qkey: 0x1111,
                    src_qp: 0x34,
                }),
                ..ExtHeaders::default()
            },
        };
        let len = repr.emit_roce_with(16, buf, |d| d.fill(psn as u8)).unwrap();
        Transmit {
            datagram: DatagramRepr {
                ip: repr.ip,
                udp: repr.udp,
            },
            dst_mac: [0; 6],
            len,
            in_place: None,
        }
    }

    /// Receives until `n` datagrams came (5 s at most): their (source, destination, PSN).
    fn receive(rx: &mut impl Backend, n: usize) -> Vec<(IpAddr, IpAddr, u32)> {
        let mut got = Vec::new();
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while got.len() < n && std::time::Instant::now() < deadline {
            rx.receive(Duration::from_millis(50), 8, &mut |r| {
                if let Received::Datagram { datagram, roce, .. } = r {
                    let psn = u32::from_be_bytes([0, roce[9], roce[10], roce[11]]);
                    got.push((datagram.src(), datagram.dst(), psn));
                }
            })
            .unwrap();
        }
        got
    }

    #[test]
    fn each_datagram_leaves_from_the_backend_of_its_source_and_both_receive() {
        let (a1, a2, peer) = (
            Ipv4Addr::new(127, 61, 0, 1),
            Ipv4Addr::new(127, 61, 0, 2),
            Ipv4Addr::new(127, 61, 0, 3),
        );
        let mut b = BySource::new(vec![a1.into()], Box::new(UdpBackend::bind(a1).unwrap()));
        b.add(vec![a2.into()], Box::new(UdpBackend::bind(a2).unwrap()));
        let mut p = UdpBackend::bind(peer).unwrap();
        // Sources alternate, so datagrams move between the two backends' buffers.
        let from = [a1, a2, a2, a1, a2];
        for (psn, &src) in from.iter().enumerate() {
            let sent = b
                .send_with(&mut |buf| Some(ud_send(src, peer, psn as u32, buf)))
                .unwrap();
            assert!(sent || src != a1, "queued in the main backend");
        }
        b.flush().unwrap();
        let mut got = receive(&mut p, from.len());
        got.sort_by_key(|g| g.2);
        let want: Vec<_> = from
            .iter()
            .enumerate()
            .map(|(k, &s)| (IpAddr::V4(s), IpAddr::V4(peer), k as u32))
            .collect();
        assert_eq!(got, want, "each from its own address, in one piece");
        // Answers to either address come back through the composite.
        for (psn, dst) in [(10, a1), (11, a2)] {
            p.send_with(&mut |buf| Some(ud_send(peer, dst, psn, buf)))
                .unwrap();
        }
        p.flush().unwrap();
        let mut back = receive(&mut b, 2);
        back.sort_by_key(|g| g.2);
        assert_eq!(
            back,
            vec![(peer.into(), a1.into(), 10), (peer.into(), a2.into(), 11)]
        );
        // A source no backend has is refused, not sent from the wrong address.
        let other = Ipv4Addr::new(127, 61, 0, 9);
        let e = b
            .send_with(&mut |buf| Some(ud_send(other, peer, 0, buf)))
            .unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        assert!(!b.serves_link_local());
    }

    /// A backend that takes datagrams while `room` lasts; `flush` does not make room.
    #[derive(Clone, Default)]
    struct Stuck {
        room: std::sync::Arc<std::sync::atomic::AtomicUsize>,
        took: std::sync::Arc<std::sync::Mutex<Vec<u32>>>,
    }

    impl Backend for Stuck {
        fn send_with(
            &mut self,
            build: &mut dyn FnMut(&mut [u8]) -> Option<Transmit>,
        ) -> io::Result<bool> {
            use std::sync::atomic::Ordering::SeqCst;
            if self.room.load(SeqCst) == 0 {
                return Err(io::ErrorKind::WouldBlock.into());
            }
            let mut buf = vec![0u8; MAX_FRAME];
            let Some(_) = build(&mut buf) else {
                return Ok(false);
            };
            self.room.fetch_sub(1, SeqCst);
            let psn = u32::from_be_bytes([0, buf[9], buf[10], buf[11]]);
            self.took.lock().unwrap().push(psn);
            Ok(true)
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
        fn receive(
            &mut self,
            _: Duration,
            _: usize,
            _: &mut dyn FnMut(Received<'_>),
        ) -> io::Result<usize> {
            Ok(0)
        }
    }

    /// A datagram for a part that has no room even after a flush is held, not dropped:
    /// sends are refused (nothing built) until it goes, and it goes first.
    #[test]
    fn a_datagram_for_a_full_part_is_held_until_it_has_room() {
        let (a1, a2, peer) = (
            Ipv4Addr::new(127, 62, 0, 1),
            Ipv4Addr::new(127, 62, 0, 2),
            Ipv4Addr::new(127, 62, 0, 3),
        );
        let stuck = Stuck::default();
        let mut b = BySource::new(vec![a1.into()], Box::new(UdpBackend::bind(a1).unwrap()));
        b.add(vec![a2.into()], Box::new(stuck.clone()));
        assert!(b
            .send_with(&mut |buf| Some(ud_send(a2, peer, 7, buf)))
            .unwrap());
        let mut built = false;
        let e = b
            .send_with(&mut |buf| {
                built = true;
                Some(ud_send(a1, peer, 8, buf))
            })
            .unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::WouldBlock);
        assert!(!built, "a refused send builds nothing");
        b.flush().unwrap();
        assert!(b.held.is_some());
        // Room again: the held datagram goes at the next flush, then sends go on.
        stuck.room.store(2, std::sync::atomic::Ordering::SeqCst);
        b.flush().unwrap();
        assert!(b.held.is_none());
        assert!(b
            .send_with(&mut |buf| Some(ud_send(a2, peer, 9, buf)))
            .unwrap());
        assert_eq!(*stuck.took.lock().unwrap(), vec![7, 9]);
    }
}
