//! A process's end of `uroce daemon`: [`DaemonBackend`], a [`Backend`] whose packets
//! move through the shared rings, and [`Control`], the requests that are not packets
//! (QPNs, listening service IDs).

use std::io;
use std::net::IpAddr;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::proto::{self, Reply, Request};
use super::ring::{Dir, Region, RingError, SlotHeader, HEADER_LEN};
use crate::datapath::udp::{UdpBackend, CLASS_SHIFT};
use crate::datapath::{Backend, Received, Transmit, MAX_FRAME};
use crate::wire::bth::dest_qp_of;

fn ring_error(e: RingError) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, e)
}

/// The control connection to a daemon, shareable by the threads of a process.
#[derive(Debug, Clone)]
pub struct Control {
    sock: Arc<Mutex<OwnedFd>>,
    client: u32,
}

impl Control {
    fn call(&self, req: Request) -> io::Result<Reply> {
        let sock = self.sock.lock().unwrap_or_else(|e| e.into_inner());
        proto::send(sock.as_raw_fd(), &req.encode(), &[])?;
        let Some((msg, _)) = proto::recv(sock.as_raw_fd(), 0)? else {
            return Err(io::Error::new(
                io::ErrorKind::ConnectionReset,
                "uroce daemon went away",
            ));
        };
        match Reply::decode(&msg) {
            Some(Reply::Err(errno)) => Err(io::Error::from_raw_os_error(errno)),
            Some(r) => Ok(r),
            None => Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "a reply from uroce daemon that is not one",
            )),
        }
    }

    /// The daemon's number for this process.
    pub fn client(&self) -> u32 {
        self.client
    }

    /// `count` QPNs of this process's own (at least): returns the first; they run
    /// contiguously. No other process is given them, and none had them recently.
    pub fn claim_qpns(&self, count: u32) -> io::Result<(u32, u32)> {
        match self.call(Request::ClaimQpns { count })? {
            Reply::Qpns { first, count } => Ok((first, count)),
            _ => Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "unexpected reply",
            )),
        }
    }

    /// Connection requests for `service_id` at `ip` (unspecified: any address) come to
    /// this process (`on`), or no longer do. EADDRINUSE when another process listens.
    pub fn listen(&self, service_id: u64, ip: IpAddr, on: bool) -> io::Result<()> {
        self.call(Request::Listen { service_id, ip, on })
            .map(|_| ())
    }
}

/// A datapath that is a daemon's: packets through shared memory, switched by the daemon.
#[derive(Debug)]
pub struct DaemonBackend {
    region: Region,
    /// What this process writes into the ring to the daemon.
    outbox: Outbox,
    /// We wait on this one for packets received.
    to_process: Wake,
    needs_link: bool,
    /// The daemon serves the interface's link-local address (its welcome says so).
    link_local: bool,
    rx_capacity: u64,
    control: Control,
    /// The fast path, when the daemon gave this process a socket of its own.
    fast: Option<Fast>,
}

/// The fast path over UDP: a socket of the daemon's reuseport group on `addr`, to which
/// the kernel steers the datagrams for this process's QPNs (the daemon hands it QPNs of
/// the socket's class only), so data moves between the process and the kernel as in
/// direct mode, with no ring and no daemon thread on the way. Packets from another
/// address and QP 1's (connection management, which the daemon switches by service ID
/// and communication ID) still go through the rings.
struct Fast {
    udp: UdpBackend,
    addr: IpAddr,
    /// The socket's class: the QPNs `class << CLASS_SHIFT ..` are this process's.
    class: u32,
    /// Datagrams the socket received for another class and could not pass on to the
    /// daemon ([`SlotHeader::Misdelivered`]) for want of room in the ring (counted with
    /// the socket's overruns).
    lost: u64,
    /// This process is in the daemon's network namespace: it sends through the socket
    /// too (the sockets of its source ports are made in its own namespace; in another
    /// one they would send there, so such a process sends through the rings).
    sends: bool,
    /// A packet built into the socket's buffer that belongs to the rings, waiting for a
    /// free slot (the rings were full when it was built); its bytes are in `moved`.
    held: Option<Transmit>,
    /// The bytes of such a packet, copied out of the socket's buffer (kept for the next,
    /// so that link-local traffic, which all takes this way, allocates nothing).
    moved: Vec<u8>,
}

impl std::fmt::Debug for Fast {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fast")
            .field("addr", &self.addr)
            .field("held", &self.held.is_some())
            .finish()
    }
}

/// Whether a packet built for `addr`'s fast path goes out through its socket: from that
/// address, and not to QP 1.
fn takes_fast_path(t: &Transmit, roce: &[u8], addr: IpAddr) -> bool {
    t.datagram.src() == addr && dest_qp_of(roce).is_some_and(|q| q != 1)
}

/// Slots written before they are published even without a flush, so that the daemon
/// works on a long batch while the rest is written.
const PUBLISH_EVERY: u32 = 32;

/// What writes a slot's data and says its header and length ([`Outbox::write`]).
type SlotFill<'a> = dyn FnMut(&mut [u8]) -> Option<(SlotHeader, usize)> + 'a;

/// The producer's end of the ring to the daemon.
#[derive(Debug)]
struct Outbox {
    /// The daemon waits on this one for packets to send.
    bell: OwnedFd,
    /// The next slot to write when slots are written and not published yet: they are
    /// published together ([`Backend::flush`], or every [`PUBLISH_EVERY`]), so the
    /// daemon takes a batch at a time (and sends it as one, GSO over UDP) instead of
    /// chasing each packet.
    unpublished: Option<u32>,
}

impl Outbox {
    /// Writes one slot of `region`'s ring to the daemon with `fill`, which writes the data
    /// and returns the slot's header and the data's length (None: nothing to write);
    /// whether a slot was written. `WouldBlock` when the ring is full (`fill` not called).
    fn write(&mut self, region: &Region, fill: &mut SlotFill<'_>) -> io::Result<bool> {
        let ring = region.ring(Dir::ToDaemon);
        let index = self.unpublished.unwrap_or_else(|| ring.published());
        if !ring.is_free(index).map_err(ring_error)? {
            // Full: make sure the daemon has all of it and is awake to empty it.
            self.flush(region);
            if ring.consumer_needs_wake() {
                proto::ring(self.bell.as_raw_fd());
            }
            return Err(io::ErrorKind::WouldBlock.into());
        }
        // SAFETY: a free slot of the ring this outbox alone produces into (the backend
        // owning it is not Clone and holds `&mut self`), not yet published (the daemon
        // does not look at it).
        let slot = unsafe { ring.slot_mut(index) };
        let (head, body) = slot.split_at_mut(HEADER_LEN);
        let Some((header, len)) = fill(&mut body[..MAX_FRAME]) else {
            return Ok(false);
        };
        header.write(head.try_into().expect("header"), len.min(MAX_FRAME) as u32);
        let next = index.wrapping_add(1);
        if next.wrapping_sub(ring.published()) >= PUBLISH_EVERY {
            ring.publish(index);
            self.unpublished = None;
            if ring.consumer_needs_wake() {
                proto::ring(self.bell.as_raw_fd());
            }
        } else {
            self.unpublished = Some(next);
        }
        Ok(true)
    }

    /// Publishes what was written to the ring and wakes the daemon if it sleeps. With
    /// nothing new published the daemon is not rung: it looked at the ring before it
    /// went to sleep (with the fast path most flushes publish nothing, and a doorbell
    /// each would wake the daemon's thread for nothing, thousands of times a second).
    fn flush(&mut self, region: &Region) {
        let ring = region.ring(Dir::ToDaemon);
        if let Some(next) = self.unpublished.take() {
            ring.publish(next.wrapping_sub(1));
            if ring.consumer_needs_wake() {
                proto::ring(self.bell.as_raw_fd());
            }
        }
    }
}

impl Fast {
    /// Takes up to `max` datagrams from the socket without waiting, handing to `handle`
    /// those of this process's class; one of another class (the kernel coalesced a run
    /// of one flow and steered it by its first packet: a peer's QPs that share a source
    /// port, or one UD QP sending to several processes) goes to the daemon through
    /// `outbox` to be switched as one it received (dropped, counted, when the ring is
    /// full: as on a congested link). How many were handed to `handle`; it takes on while
    /// all it took was passed on, so that a coalesced run's own packets behind them do
    /// not wait for the next packet or wake-up: through what the socket's buffer still
    /// holds (the socket does not show it as readable, so nothing would come back for
    /// it), and a few fresh batches at most.
    fn receive(
        &mut self,
        region: &Region,
        outbox: &mut Outbox,
        max: usize,
        handle: &mut dyn FnMut(Received<'_>),
    ) -> io::Result<usize> {
        let Self {
            udp, class, lost, ..
        } = self;
        let mut mine = 0;
        let mut passed_any = false;
        // A few fresh batches at most: a stream of other classes' packets does not keep
        // the caller here.
        for round in 0.. {
            let mut passed = 0;
            let took = udp.receive(Duration::ZERO, max, &mut |r| {
                let other = match &r {
                    Received::Datagram { datagram, roce, .. } => dest_qp_of(roce)
                        .filter(|q| q >> CLASS_SHIFT != *class)
                        .map(|_| (**datagram, *roce)),
                    Received::Frame(_) => None,
                };
                let Some((datagram, roce)) = other else {
                    mine += 1;
                    return handle(r);
                };
                passed += 1;
                let header = SlotHeader::Misdelivered { datagram };
                let written = outbox.write(region, &mut |body| {
                    let n = roce.len().min(body.len());
                    body[..n].copy_from_slice(&roce[..n]);
                    Some((header, n))
                });
                if !matches!(written, Ok(true)) {
                    *lost += 1;
                }
            })?;
            passed_any |= passed > 0;
            if mine > 0 || passed == 0 || took == 0 || max == 0 {
                break;
            }
            if round >= 3 && !udp.holds_received() {
                break;
            }
        }
        if passed_any {
            outbox.flush(region);
        }
        Ok(mine)
    }
}

/// How many of a receive's `max` packets the fast path's socket may hand up first: all,
/// unless the ring from the daemon holds packets (QP 1's, those from other addresses),
/// when a quarter is kept for them (at least one, where `max` leaves the socket one
/// too). Else a socket that fills every batch, as a busy transfer's does, would leave
/// the ring nothing until the transfer paused, and the daemon would drop what it could
/// no longer put in the full ring.
fn socket_share(max: usize, ring_waiting: bool) -> usize {
    if ring_waiting && max >= 2 {
        max - (max / 4).max(1)
    } else {
        max
    }
}

/// The daemon's doorbell for the ring to this process, and what we know of our sleeping
/// flag on that ring.
#[derive(Debug)]
struct Wake {
    /// We wait on this one for packets received.
    fd: OwnedFd,
    /// Our flag is set, and was not seen cleared since ([`Wake::arm`]).
    armed: bool,
    /// Rings the daemon made (it cleared the flag) that were not read yet.
    owed: u64,
}

impl Wake {
    /// Sets our sleeping flag on the ring from the daemon (unless it is set already), so
    /// that the daemon rings `to_process` for its next slot; true when the ring is empty
    /// and we may sleep.
    ///
    /// The rings are counted first ([`Wake::settle`]): the daemon rings (writes 1)
    /// exactly once each time it finds the flag set and clears it
    /// (`Ring::consumer_needs_wake`), and only this sets the flag, never clearing it, so
    /// a flag found clear while `armed` is one ring owed. A ring left unread keeps the
    /// descriptor readable: every poll on it (`DaemonBackend::receive`'s, and the
    /// engine's progress thread's on `wait_fds`) would return at once, a busy loop until
    /// the daemon rang again.
    fn arm(&mut self, region: &Region) -> io::Result<bool> {
        self.settle(region);
        let ring = region.ring(Dir::ToProcess);
        if !self.armed {
            ring.set_sleeping();
            self.armed = true;
        }
        Ok(ring.next_slot().map_err(ring_error)?.is_none())
    }

    /// Notes a ring the daemon made since our flag was set (it cleared the flag), and
    /// reads the rings that landed while any are owed. The flag is looked at again after
    /// the read: the daemon may have cleared it and rung between the first look and the
    /// read, and a ring read is one whose clear is visible by then (the daemon clears,
    /// then writes; the eventfd orders its write before our read), so every ring read is
    /// counted as owed first and `owed` never falls below the rings still to come.
    fn settle(&mut self, region: &Region) {
        self.note_clear(region);
        if self.owed > 0 {
            let read = proto::drain(self.fd.as_raw_fd());
            self.count_read(region, read);
        }
    }

    /// A clear of our flag by the daemon: one ring owed.
    fn note_clear(&mut self, region: &Region) {
        if self.armed && !region.ring(Dir::ToProcess).asleep() {
            self.armed = false;
            self.owed += 1;
        }
    }

    /// `read` rings were just read from the doorbell: their clears are counted first.
    fn count_read(&mut self, region: &Region, read: u64) {
        self.note_clear(region);
        self.owed = self.owed.saturating_sub(read);
    }
}

impl DaemonBackend {
    /// Connects to the daemon listening at `path`.
    pub fn connect(path: &Path) -> io::Result<Self> {
        let sock = proto::connect(path)?;
        let hello = proto::send(
            sock.as_raw_fd(),
            &Request::Hello {
                version: proto::VERSION,
            }
            .encode(),
            &[],
        );
        // A daemon that refuses us says why and closes at once, maybe before our hello
        // goes out (EPIPE): its answer is still there to read.
        let flags = if hello.is_err() {
            libc::MSG_DONTWAIT
        } else {
            0
        };
        let received = proto::recv(sock.as_raw_fd(), flags);
        if let Err(e) = hello {
            if !matches!(&received, Ok(Some((m, _))) if matches!(Reply::decode(m), Some(Reply::Err(_))))
            {
                return Err(e);
            }
        }
        let (msg, mut fds) = received?.ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!(
                    "uroce daemon at {} closed the connection (not allowed to attach?)",
                    path.display()
                ),
            )
        })?;
        let (client, needs_link, link_local, rx_capacity, fast) = match Reply::decode(&msg) {
            Some(Reply::Welcome {
                client,
                needs_link_addresses,
                serves_link_local,
                rx_capacity,
                fast_class,
                fast_addr,
                fast_netns,
            }) if fds.len() == 3 + usize::from(fast_class != 0) => (
                client,
                needs_link_addresses,
                serves_link_local,
                rx_capacity,
                (fast_class != 0).then_some((fast_class, fast_addr, fast_netns)),
            ),
            Some(Reply::Err(errno)) => return Err(io::Error::from_raw_os_error(errno)),
            _ => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "uroce daemon's welcome is not one (another version?)",
                ))
            }
        };
        let fast = match fast {
            Some((class, addr, netns)) => {
                let sock = std::net::UdpSocket::from(fds.pop().expect("four"));
                Some(Fast {
                    // Coalescing (UDP GRO): what comes of another class is passed on.
                    udp: UdpBackend::from_class_socket(addr, sock, true)?,
                    addr,
                    class: u32::from(class),
                    lost: 0,
                    sends: proto::netns_id().is_ok_and(|me| me == netns),
                    held: None,
                    moved: Vec::new(),
                })
            }
            None => None,
        };
        let rx_capacity = fast
            .as_ref()
            .and_then(|f| f.udp.rx_capacity())
            .unwrap_or(rx_capacity);
        let to_process = fds.pop().expect("three");
        let bell = fds.pop().expect("three");
        let region = Region::map(fds.pop().expect("three"))?;
        Ok(Self {
            region,
            outbox: Outbox {
                bell,
                unpublished: None,
            },
            to_process: Wake {
                fd: to_process,
                armed: false,
                owed: 0,
            },
            needs_link,
            link_local,
            rx_capacity,
            fast,
            control: Control {
                sock: Arc::new(Mutex::new(sock)),
                client,
            },
        })
    }

    /// The first daemon serving `iface` in this network namespace that lets us in
    /// ([`proto::socket_paths`]); `Ok(None)` when none runs.
    pub fn find(iface: &str) -> io::Result<Option<Self>> {
        let mut refused = None;
        for path in proto::socket_paths(iface)? {
            match Self::connect(&path) {
                Ok(b) => return Ok(Some(b)),
                Err(e)
                    if matches!(
                        e.raw_os_error(),
                        Some(libc::ENOENT) | Some(libc::ECONNREFUSED) | Some(libc::ENOTDIR)
                    ) => {}
                Err(e) => {
                    refused = Some(io::Error::new(
                        e.kind(),
                        format!("uroce daemon at {}: {e}", path.display()),
                    ))
                }
            }
        }
        refused.map_or(Ok(None), Err)
    }

    /// The control connection, for QPNs and listens.
    pub fn control(&self) -> Control {
        self.control.clone()
    }

    /// Whether the daemon gave this process the fast path (a socket of its own).
    pub fn fast_path(&self) -> bool {
        self.fast.is_some()
    }

    /// Writes one packet into the ring to the daemon; see [`Backend::send_with`].
    fn ring_send_with(
        &mut self,
        build: &mut dyn FnMut(&mut [u8]) -> Option<Transmit>,
    ) -> io::Result<bool> {
        self.outbox.write(&self.region, &mut |body| {
            let mut t = build(body)?;
            // The ring carries whole datagrams. (Only a datagram the fast path diverted
            // here, or one a caller sent against `takes_payload_in_place`'s no, has a
            // payload in place.)
            // SAFETY: `build` made it just now; the context was not called since.
            if !unsafe { crate::datapath::gather(&mut t, body) } {
                return None;
            }
            let header = SlotHeader::Datagram {
                datagram: t.datagram,
                dst_mac: t.dst_mac,
            };
            Some((header, t.len))
        })
    }

    /// Moves a packet held for the rings into them: false while they are full.
    fn send_held(&mut self) -> io::Result<bool> {
        let Some(f) = self.fast.as_mut() else {
            return Ok(true);
        };
        let Some(t) = f.held.take() else {
            return Ok(true);
        };
        let bytes = std::mem::take(&mut f.moved);
        let r = self.ring_send_with(&mut |buf| {
            buf[..bytes.len()].copy_from_slice(&bytes);
            Some(t)
        });
        let f = self.fast.as_mut().expect("fast");
        f.moved = bytes;
        match r {
            Ok(_) => Ok(true),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                f.held = Some(t);
                Ok(false)
            }
            Err(e) => Err(e),
        }
    }

    fn take(&mut self, max: usize, handle: &mut dyn FnMut(Received<'_>)) -> io::Result<usize> {
        let ring = self.region.ring(Dir::ToProcess);
        let mut n = 0;
        while n < max {
            let Some(index) = ring.next_slot().map_err(ring_error)? else {
                break;
            };
            // SAFETY: a published slot not yet released; this backend is the ring's only
            // consumer (it is not Clone and `&mut self` is held).
            let slot = unsafe { ring.slot(index) };
            let h: &[u8; HEADER_LEN] = slot[..HEADER_LEN].try_into().expect("header");
            if let Some((header, len)) = SlotHeader::read(h) {
                let data = &slot[HEADER_LEN..HEADER_LEN + (len as usize).min(MAX_FRAME)];
                match header {
                    SlotHeader::Frame => handle(Received::Frame(data)),
                    SlotHeader::Datagram { datagram, .. } => handle(Received::Datagram {
                        datagram: &datagram,
                        roce: data,
                    }),
                    // The daemon writes none: what a process sends it.
                    SlotHeader::Misdelivered { .. } => {}
                }
            }
            ring.release(index);
            n += 1;
        }
        Ok(n)
    }
}

impl Drop for DaemonBackend {
    /// Publishes what is written: the daemon takes what the ring holds after the
    /// connection closes, before it forgets the process (so a program that exits right
    /// after its last send completes, `ibv_ud_pingpong`'s server, whose last UD reply
    /// nothing would resend, loses nothing, with or without this drop).
    fn drop(&mut self) {
        let _ = self.flush();
    }
}

impl Backend for DaemonBackend {
    /// With the fast path, which sends from the process's own UDP socket.
    fn takes_payload_in_place(&self) -> bool {
        self.fast
            .as_ref()
            .is_some_and(|f| f.sends && f.udp.takes_payload_in_place())
    }

    fn send_with(
        &mut self,
        build: &mut dyn FnMut(&mut [u8]) -> Option<Transmit>,
    ) -> io::Result<bool> {
        let Some(f) = self.fast.as_mut() else {
            return self.ring_send_with(build);
        };
        // A packet of QP 1 (or from another address) built into the socket's buffer
        // goes to the rings: held until they have room, nothing built meanwhile.
        if f.held.is_some() && !self.send_held()? {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        let f = self.fast.as_mut().expect("fast");
        if !f.sends {
            return self.ring_send_with(build);
        }
        let addr = f.addr;
        let mut held = None;
        let moved = &mut f.moved;
        let queued = f.udp.send_with(&mut |buf| {
            let mut t = build(buf)?;
            if takes_fast_path(&t, buf, addr) {
                Some(t)
            } else {
                // Held for the rings, it outlives this round: made whole first.
                // SAFETY: `build` made it just now; the context was not called since.
                if !unsafe { crate::datapath::gather(&mut t, buf) } {
                    return None;
                }
                moved.clear();
                moved.extend_from_slice(&buf[..t.len.min(MAX_FRAME)]);
                held = Some(t);
                None
            }
        })?;
        if held.is_none() {
            return Ok(queued);
        }
        f.held = held;
        self.send_held()?;
        Ok(true)
    }

    /// ARP requests and neighbour solicitations (the library's own neighbour
    /// resolution over AF_XDP); the daemon sends no other link-layer frame for a process.
    fn send_frame_with(
        &mut self,
        build: &mut dyn FnMut(&mut [u8]) -> Option<usize>,
    ) -> io::Result<bool> {
        if !self.needs_link {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "the daemon's datapath (UDP) does not send link-layer frames",
            ));
        }
        // Datagrams written before go first.
        self.flush()?;
        let written = (self.outbox).write(&self.region, &mut |body| {
            build(body).map(|len| (SlotHeader::Frame, len))
        })?;
        // Published at once, the daemon rung if it sleeps (it would otherwise find the
        // frame only at its next wake-up, up to 100 ms on).
        self.outbox.flush(&self.region);
        Ok(written)
    }

    fn flush(&mut self) -> io::Result<()> {
        let held = if self.fast.as_ref().is_some_and(|f| f.held.is_some()) {
            self.send_held().map(|_| ())
        } else {
            Ok(())
        };
        self.outbox.flush(&self.region);
        // The socket's queue is flushed whatever the rings said: a payload left in place
        // must be sent or copied before this returns (`takes_payload_in_place`).
        let udp = match self.fast.as_mut() {
            Some(f) => f.udp.flush(),
            None => Ok(()),
        };
        held.and(udp)
    }

    fn receive(
        &mut self,
        timeout: Duration,
        max: usize,
        handle: &mut dyn FnMut(Received<'_>),
    ) -> io::Result<usize> {
        let mut got = 0;
        if let Some(f) = self.fast.as_mut() {
            // The socket first, without waiting: it carries the data. The rings after it
            // even so (their packets, QP 1's and those from other addresses, must not
            // wait for the data to stop): see `socket_share`.
            let ring_waiting = (self.region.ring(Dir::ToProcess).next_slot())
                .map_err(ring_error)?
                .is_some();
            let socket_max = socket_share(max, ring_waiting);
            got = f.receive(&self.region, &mut self.outbox, socket_max, handle)?;
            if max == 0 {
                return Ok(0);
            }
            // Wait for either, the socket or the daemon's doorbell, when neither has
            // anything.
            let idle = got == 0 && !timeout.is_zero() && self.to_process.arm(&self.region)?;
            if idle {
                let mut fds: Vec<libc::pollfd> = f
                    .udp
                    .wait_fds()
                    .into_iter()
                    .chain([self.to_process.fd.as_raw_fd()])
                    .map(|fd| libc::pollfd {
                        fd,
                        events: libc::POLLIN,
                        revents: 0,
                    })
                    .collect();
                crate::datapath::wait::poll(&mut fds, timeout)?;
                got = f.receive(&self.region, &mut self.outbox, max, handle)?;
            }
        }
        // The daemon rang since we last slept: take the ring's count down so that
        // waiting on the doorbell blocks again.
        self.to_process.settle(&self.region);
        let n = self.take(max - got, handle)? + got;
        if n > 0 || max == 0 || self.fast.is_some() {
            // With the fast path, no waiting on the rings alone: what they bring is QP 1's.
            // The flag is set all the same, for whoever sleeps on `wait_fds` next (the
            // engine's progress thread); a slot that came meanwhile is taken now.
            if self.fast.is_some() && n == 0 && !self.to_process.arm(&self.region)? {
                return self.take(max, handle);
            }
            return Ok(n);
        }
        if !self.to_process.arm(&self.region)? {
            return self.take(max, handle);
        }
        if timeout.is_zero() {
            // A program polling an empty queue: give the CPU to whoever is ready to run
            // on it, the daemon's thread with our packet most likely, instead of spinning
            // out our time slice (on a host with fewer cores than pollers, the daemon
            // would otherwise wait for the scheduler's tick). With a core to spare it
            // returns at once.
            // SAFETY: sched_yield has no preconditions.
            unsafe { libc::sched_yield() };
            return Ok(0);
        }
        proto::wait_readable(self.to_process.fd.as_raw_fd(), timeout);
        self.take(max, handle)
    }

    fn wait_fds(&self) -> Vec<RawFd> {
        let mut v = vec![self.to_process.fd.as_raw_fd()];
        if let Some(f) = &self.fast {
            v.extend(f.udp.wait_fds());
        }
        v
    }

    fn holds_received(&self) -> bool {
        self.fast.as_ref().is_some_and(|f| f.udp.holds_received())
    }

    fn claim_qpns(&mut self, count: u32) -> io::Result<Option<(u32, u32)>> {
        self.control.claim_qpns(count).map(Some)
    }

    fn needs_link_addresses(&self) -> bool {
        self.needs_link
    }

    fn serves_link_local(&self) -> bool {
        self.link_local
    }

    /// The fast path's socket's overruns and the packets it could not pass on.
    fn rx_overruns(&self) -> u64 {
        self.fast
            .as_ref()
            .map_or(0, |f| f.udp.rx_overruns() + f.lost)
    }

    fn rx_capacity(&self) -> Option<u64> {
        Some(self.rx_capacity)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ring_keeps_a_share_of_each_receive_while_it_holds_packets() {
        assert_eq!(socket_share(64, false), 64);
        assert_eq!(socket_share(64, true), 48);
        assert_eq!(socket_share(3, true), 2);
        assert_eq!(socket_share(2, true), 1);
        assert_eq!(socket_share(1, true), 1, "the socket is not shut out");
        assert_eq!(socket_share(0, true), 0);
    }

    /// Whether a poll on the doorbell returns at once.
    fn rung(w: &Wake) -> bool {
        proto::wait_readable(w.fd.as_raw_fd(), Duration::ZERO)
    }

    /// The consumer's take of the oldest slot.
    fn take_one(region: &Region) {
        let ring = region.ring(Dir::ToProcess);
        let i = ring.next_slot().unwrap().expect("a slot");
        ring.release(i);
    }

    /// The daemon rings exactly once per clear of the flag, and every ring is read before
    /// the process sleeps again: one that lands after the check that drained, and one
    /// made between a check and the take that emptied the ring, would otherwise keep
    /// the doorbell readable, every poll on it returning at once (the engine's progress
    /// thread spinning until the daemon's next ring). And a slot published while the
    /// flag is set is found by the arm, not slept on.
    #[test]
    fn every_ring_is_read_before_the_next_sleep() {
        let region = Region::create("uroce-test-wake").unwrap();
        let mut w = Wake {
            fd: proto::eventfd().unwrap(),
            armed: false,
            owed: 0,
        };
        let bell = w.fd.as_raw_fd();
        let daemon = region.ring(Dir::ToProcess);
        assert!(w.arm(&region).unwrap(), "empty: the process may sleep");

        // The daemon publishes and clears the flag; its ring lands only after the
        // process saw the clear and drained nothing.
        assert!(daemon.push(&SlotHeader::Frame, b"a").unwrap());
        assert!(daemon.consumer_needs_wake());
        w.settle(&region);
        assert_eq!((w.armed, w.owed), (false, 1));
        take_one(&region);
        proto::ring(bell);
        assert!(w.arm(&region).unwrap());
        assert!(!rung(&w), "the late ring was read");
        assert_eq!(w.owed, 0);

        // The process is awake for its socket (the flag still set, nothing seen), and
        // the daemon publishes and rings before the process takes the slot.
        w.settle(&region);
        assert!(w.armed);
        assert!(daemon.push(&SlotHeader::Frame, b"b").unwrap());
        assert!(daemon.consumer_needs_wake());
        proto::ring(bell);
        take_one(&region);
        assert!(w.arm(&region).unwrap());
        assert!(!rung(&w), "the hidden ring was read");

        // A clear and its ring that come between `settle`'s look at the flag and its
        // read (a ring owed and not landed, the flag set again; then the daemon clears
        // and rings, and the owed ring lands, before the read): both rings are counted,
        // none is owed after, and the next arm sets the flag again (else the process
        // would sleep with the flag clear, and the daemon ring nobody).
        assert!(daemon.push(&SlotHeader::Frame, b"r").unwrap());
        assert!(daemon.consumer_needs_wake());
        w.settle(&region);
        assert_eq!((w.armed, w.owed), (false, 1), "its ring not landed yet");
        take_one(&region);
        assert!(w.arm(&region).unwrap(), "armed again, the ring still owed");
        assert_eq!((w.armed, w.owed), (true, 1));
        assert!(daemon.push(&SlotHeader::Frame, b"s").unwrap());
        assert!(daemon.consumer_needs_wake());
        proto::ring(bell);
        proto::ring(bell);
        let read = proto::drain(bell);
        assert_eq!(read, 2);
        w.count_read(&region, read);
        assert_eq!((w.armed, w.owed), (false, 0));
        take_one(&region);
        assert!(w.arm(&region).unwrap());
        assert!(
            region.ring(Dir::ToProcess).asleep(),
            "armed again: the daemon rings"
        );

        // A slot published while the flag is set: the arm says so, and the daemon's ring
        // for it is read at the next.
        assert!(daemon.push(&SlotHeader::Frame, b"c").unwrap());
        assert!(
            !w.arm(&region).unwrap(),
            "a slot waits: take it, do not sleep"
        );
        assert!(daemon.consumer_needs_wake());
        proto::ring(bell);
        take_one(&region);
        assert!(w.arm(&region).unwrap());
        assert!(!rung(&w));
        // Asleep with nothing owed, a new publish wakes the process.
        assert!(daemon.push(&SlotHeader::Frame, b"d").unwrap());
        assert!(daemon.consumer_needs_wake());
        proto::ring(bell);
        assert!(rung(&w));
    }
}
