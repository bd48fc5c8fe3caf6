//! The UDP socket backend: RoCEv2 over an ordinary UDP socket on port 4791.
//!
//! The kernel builds Ethernet, IP and UDP, so uroce must know what it will put in the
//! fields the ICRC covers: the UDP source port (one socket per QP source port, so ECMP
//! entropy is kept), the IP identification (0: Linux sends ID 0 on unconnected sockets
//! with "don't fragment" set, which uroce asks for with IP_PMTUDISC_DO), DF, and the
//! lengths. The context writes the RoCE part and says where it goes ([`Transmit`]): those
//! bytes are sent as they are. On receive the socket gives the UDP payload, the source
//! address and port and the TOS: the context gets them as a [`DatagramRepr`] made the same
//! way ([`DatagramRepr::roce`]) and verifies the ICRC over it.
//! The TOS / traffic class byte (DSCP and ECN) goes with each datagram as an IP_TOS /
//! IPV6_TCLASS control message, so data marked ECT and CNPs in DSCP 48 share a batch. The
//! ECN bits of received packets are read with IP_RECVTOS / IPV6_RECVTCLASS, so CE marks
//! reach the notification point.
//!
//! IPv4 and IPv6. Over IPv6 the ICRC masks the traffic class, flow label and hop limit,
//! so nothing the socket hides is covered; zero UDP checksums (RoCEv2 senders use them)
//! are accepted with UDP_NO_CHECK6_RX.
//!
//! Frames are batched: `send_with` queues up to 32 datagrams that `flush` hands over with
//! one `sendmmsg` per run of the same source port, and `receive` takes up to 32 datagrams
//! with one `recvmmsg`.
//!
//! A peer whose IPv4 identification is not 0 (rdma_rxe numbers its packets)
//! sends an ICRC over a field the socket does not show: the identification is solved for
//! from the ICRC ([`crate::wire::icrc::solve_ident`]) and put into the datagram's header.
//! Such a peer's packets keep 16 of the ICRC's 32 bits of protection (a damaged packet
//! passes with odds of 1 in 65536 instead of 1 in 4 billion); the AF_XDP backend sees the
//! real header and keeps all 32.

use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6, UdpSocket};
use std::os::fd::AsRawFd;
use std::time::Duration;

use super::{Backend, Received, Transmit, MAX_FRAME};
use crate::wire::{self, DatagramRepr, IpRepr};

/// RoCEv2 over UDP sockets bound to one local address (IPv4 or IPv6).
pub struct UdpBackend {
    local: IpAddr,
    rx: UdpSocket,
    tx: HashMap<u16, UdpSocket>,
    /// Queued datagrams: `BATCH` slots of `MAX_FRAME` bytes, each UDP payload at the start
    /// of its slot, with its length, source port, destination and TOS.
    txbuf: Vec<u8>,
    txq: Vec<Queued>,
    /// Receive slots, and the control-message space of each.
    rxbuf: Vec<u8>,
    rxcmsg: Vec<[u64; 8]>,
    /// Datagrams the kernel refused (counted, the transport retransmits).
    pub send_failures: u64,
    /// Peers seen so far: how many of their packets fit identification 0 (up to
    /// `ZERO_ID_PEER`, then they are taken to send 0 always), or `NUMBERING`.
    /// At most `MAX_PEERS` entries: a flood of spoofed sources does not grow it.
    numbering: HashMap<IpAddr, u8>,
    /// ICRC bases for the identification, by transport length: each length's is computed
    /// once (17 CRC passes) and kept, at most one per length up to
    /// [`wire::icrc::MAX_IDENT_TRANSPORT`], so datagrams of ever new lengths cannot make
    /// every packet pay for one.
    bases: HashMap<usize, [u32; 16]>,
    /// Packets whose IP identification was recovered from their ICRC.
    pub idents_recovered: u64,
    /// Several loops' backends share this address: source-port sockets too.
    shared_ports: bool,
}

/// A UDP socket bound to `addr` with SO_REUSEPORT set before the bind.
fn bind_reuseport(addr: SocketAddr) -> io::Result<UdpSocket> {
    let family = if addr.is_ipv4() {
        libc::AF_INET
    } else {
        libc::AF_INET6
    };
    // SAFETY: plain socket call; the descriptor is owned at once.
    let fd = unsafe { libc::socket(family, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is a fresh descriptor nobody else owns.
    let sock = unsafe { <UdpSocket as std::os::fd::FromRawFd>::from_raw_fd(fd) };
    setsockopt_int(fd, libc::SOL_SOCKET, libc::SO_REUSEPORT, 1)?;
    let mut sa = zeroed_sockaddr();
    let len = to_sockaddr(addr, &mut sa);
    // SAFETY: `sa` holds a valid sockaddr of `len` bytes.
    let r = unsafe { libc::bind(fd, (&sa as *const libc::sockaddr_in6).cast(), len) };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(sock)
}

/// Attaches to the reuseport group of `fd` a classic BPF program returning the socket
/// index `DestQP mod count`. The kernel runs it with the data starting at the UDP payload,
/// so the BTH's DestQP is the low 24 bits of the word at offset 4.
fn attach_qpn_steering(fd: i32, count: u32) -> io::Result<()> {
    let code = |code: u16, k: u32| libc::sock_filter {
        code,
        jt: 0,
        jf: 0,
        k,
    };
    let mut prog = [
        code((libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16, 4),
        code(
            (libc::BPF_ALU | libc::BPF_AND | libc::BPF_K) as u16,
            0x00ff_ffff,
        ),
        code((libc::BPF_ALU | libc::BPF_MOD | libc::BPF_K) as u16, count),
        code((libc::BPF_RET | libc::BPF_A) as u16, 0),
    ];
    let fprog = libc::sock_fprog {
        len: prog.len() as u16,
        filter: prog.as_mut_ptr(),
    };
    // SAFETY: `fprog` points at `prog`, alive for the call; the kernel copies it.
    let r = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_ATTACH_REUSEPORT_CBPF,
            (&fprog as *const libc::sock_fprog).cast(),
            std::mem::size_of::<libc::sock_fprog>() as libc::socklen_t,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

#[derive(Debug, Clone, Copy)]
struct Queued {
    start: usize,
    len: usize,
    sport: u16,
    dst: SocketAddr,
    /// TOS (IPv4) or traffic class (IPv6) byte.
    tos: u8,
}

/// Packets that fit identification 0 before a peer is taken to send 0 always (a
/// numbering peer's identification is 0 by chance once in 65536 packets).
const ZERO_ID_PEER: u8 = 8;
/// A peer that numbers its identification.
const NUMBERING: u8 = u8::MAX;
/// Peers whose identification habit is remembered; past that, new peers are checked
/// packet by packet (a CRC pass each, as verification costs anyway).
const MAX_PEERS: usize = 4096;

/// Datagrams per `sendmmsg` / `recvmmsg`.
const BATCH: usize = 32;

/// Refuses an unspecified or multicast local address (see [`UdpBackend::bind`]).
fn check_local(local: IpAddr) -> io::Result<()> {
    if local.is_unspecified() || local.is_multicast() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "the UDP backend needs this host's own unicast address, not {local}: the ICRC covers the destination address"
            ),
        ));
    }
    Ok(())
}

fn setsockopt_int(fd: i32, level: i32, name: i32, value: i32) -> io::Result<()> {
    // SAFETY: `fd` is an open socket owned by the caller; the option value is a live
    // c_int on the stack whose size is passed alongside it.
    let r = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (&value as *const i32).cast(),
            std::mem::size_of::<i32>() as libc::socklen_t,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

impl UdpBackend {
    /// Binds port 4791 on `local`, which must be a unicast address of this host: the ICRC
    /// of every received datagram covers its destination address, so an unspecified one
    /// (0.0.0.0, ::) is refused.
    pub fn bind(local: impl Into<IpAddr>) -> io::Result<Self> {
        let local = local.into();
        check_local(local)?;
        let addr = SocketAddr::new(local, wire::ROCEV2_UDP_PORT);
        let rx = UdpSocket::bind(addr)
            .map_err(|e| io::Error::new(e.kind(), format!("binding UDP {addr}: {e}")))?;
        Self::with_socket(local, rx, false)
    }

    /// One of `count` backends on `local`, for the loop with index `index`: all share UDP
    /// port 4791 (SO_REUSEPORT), and a classic BPF program attached to the group hands
    /// each datagram to socket `DestQP mod count`, so it reaches the loop whose context
    /// owns that QP (give loop `index` the QPNs `index + k * count`, see
    /// [`crate::verbs::Context::set_qpn_space`]). Create them in index order: the kernel
    /// numbers the group's sockets in the order they bind.
    pub fn bind_steered(local: impl Into<IpAddr>, index: u32, count: u32) -> io::Result<Self> {
        let local = local.into();
        check_local(local)?;
        let addr = SocketAddr::new(local, wire::ROCEV2_UDP_PORT);
        let rx = bind_reuseport(addr).map_err(|e| {
            io::Error::new(e.kind(), format!("binding UDP {addr} (reuseport): {e}"))
        })?;
        if index == 0 {
            attach_qpn_steering(rx.as_raw_fd(), count.max(1))?;
        }
        Self::with_socket(local, rx, true)
    }

    fn with_socket(local: IpAddr, rx: UdpSocket, shared_ports: bool) -> io::Result<Self> {
        let fd = rx.as_raw_fd();
        if local.is_ipv4() {
            setsockopt_int(fd, libc::IPPROTO_IP, libc::IP_RECVTOS, 1)?;
        } else {
            setsockopt_int(fd, libc::IPPROTO_IPV6, libc::IPV6_RECVTCLASS, 1)?;
            setsockopt_int(fd, libc::IPPROTO_UDP, UDP_NO_CHECK6_RX, 1)?;
        }
        // A deep receive buffer: bursts of a full send window must not overflow it (as
        // root the limit in net.core.rmem_max does not apply).
        let big = 16 << 20;
        if setsockopt_int(rx.as_raw_fd(), libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, big).is_err() {
            let _ = setsockopt_int(rx.as_raw_fd(), libc::SOL_SOCKET, libc::SO_RCVBUF, big);
        }
        Ok(Self {
            local,
            rx,
            tx: HashMap::new(),
            txbuf: vec![0; BATCH * MAX_FRAME],
            txq: Vec::with_capacity(BATCH),
            rxbuf: vec![0; BATCH * MAX_FRAME],
            rxcmsg: vec![[0; 8]; BATCH],
            send_failures: 0,
            numbering: HashMap::new(),
            bases: HashMap::new(),
            idents_recovered: 0,
            shared_ports,
        })
    }

    fn socket_for(&mut self, sport: u16) -> io::Result<&UdpSocket> {
        if !self.tx.contains_key(&sport) {
            let s = if sport == wire::ROCEV2_UDP_PORT {
                self.rx.try_clone()?
            } else if self.shared_ports {
                bind_reuseport(SocketAddr::new(self.local, sport))?
            } else {
                UdpSocket::bind(SocketAddr::new(self.local, sport))?
            };
            let fd = s.as_raw_fd();
            if self.local.is_ipv4() {
                // DF set and IP ID 0: the ICRC covers both.
                setsockopt_int(
                    fd,
                    libc::IPPROTO_IP,
                    libc::IP_MTU_DISCOVER,
                    libc::IP_PMTUDISC_DO,
                )?;
            } else {
                setsockopt_int(
                    fd,
                    libc::IPPROTO_IPV6,
                    libc::IPV6_MTU_DISCOVER,
                    libc::IPV6_PMTUDISC_DO,
                )?;
            }
            self.tx.insert(sport, s);
        }
        self.tx
            .get(&sport)
            .ok_or_else(|| io::Error::other("socket table"))
    }
}

impl UdpBackend {
    /// Sends the queued datagrams: one `sendmmsg` per run of the same source port.
    fn send_queued(&mut self) -> io::Result<()> {
        let mut i = 0;
        while i < self.txq.len() {
            let sport = self.txq[i].sport;
            let run = self.txq[i..]
                .iter()
                .take_while(|q| q.sport == sport)
                .count();
            let fd = match self.socket_for(sport) {
                Ok(sock) => sock.as_raw_fd(),
                Err(_) => {
                    // The source port cannot be bound (another socket holds it): these
                    // datagrams are lost, counted, and the transport retransmits; the
                    // rest of the batch still goes.
                    self.send_failures += run as u64;
                    i += run;
                    continue;
                }
            };
            let mut names = [zeroed_sockaddr(); BATCH];
            let mut lens = [0 as libc::socklen_t; BATCH];
            let mut iovs = [libc::iovec {
                iov_base: std::ptr::null_mut(),
                iov_len: 0,
            }; BATCH];
            // SAFETY: mmsghdr is plain data; all-zero is valid.
            let mut msgs: [libc::mmsghdr; BATCH] = unsafe { std::mem::zeroed() };
            let mut ctrl = [[0u64; 4]; BATCH];
            for (k, q) in self.txq[i..i + run].iter().enumerate() {
                lens[k] = to_sockaddr(q.dst, &mut names[k]);
                iovs[k].iov_base = self.txbuf[q.start..].as_mut_ptr().cast();
                iovs[k].iov_len = q.len;
                let h = &mut msgs[k].msg_hdr;
                h.msg_name = (&mut names[k] as *mut libc::sockaddr_in6).cast();
                h.msg_namelen = lens[k];
                h.msg_iov = &mut iovs[k];
                h.msg_iovlen = 1;
                put_tos(h, &mut ctrl[k], q.dst.is_ipv4(), q.tos);
            }
            let mut sent = 0;
            while sent < run {
                // SAFETY: `msgs[sent..run]` point at live addresses and queued bytes.
                let r = unsafe {
                    libc::sendmmsg(
                        fd,
                        msgs[sent..].as_mut_ptr(),
                        (run - sent) as u32,
                        libc::MSG_DONTWAIT,
                    )
                };
                if r <= 0 {
                    // The kernel refused this datagram (full buffer, too big): count it
                    // and go on; RC retransmits, UD loses it as a datagram may be lost.
                    self.send_failures += 1;
                    sent += 1;
                } else {
                    sent += r as usize;
                }
            }
            i += run;
        }
        self.txq.clear();
        Ok(())
    }
}

impl Backend for UdpBackend {
    fn needs_link_addresses(&self) -> bool {
        false
    }

    fn rx_overruns(&self) -> u64 {
        socket_drops(self.rx.as_raw_fd())
    }

    fn send_with(
        &mut self,
        build: &mut dyn FnMut(&mut [u8]) -> Option<Transmit>,
    ) -> io::Result<bool> {
        if self.txq.len() == BATCH {
            self.send_queued()?;
        }
        let start = self.txq.len() * MAX_FRAME;
        let Some(t) = build(&mut self.txbuf[start..start + MAX_FRAME]) else {
            return Ok(false);
        };
        let dst = t.datagram.dst();
        if dst.is_ipv4() != self.local.is_ipv4() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "a datagram to {dst} on a UDP backend bound to {}",
                    self.local
                ),
            ));
        }
        self.txq.push(Queued {
            start,
            len: t.len.min(MAX_FRAME),
            sport: t.datagram.udp.src_port,
            dst: SocketAddr::new(dst, t.datagram.udp.dst_port),
            tos: t.datagram.tos(),
        });
        Ok(true)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.send_queued()
    }

    fn receive(
        &mut self,
        timeout: Duration,
        max: usize,
        handle: &mut dyn FnMut(Received<'_>),
    ) -> io::Result<usize> {
        if max == 0 {
            return Ok(0);
        }
        let fd = self.rx.as_raw_fd();
        let mut pfd = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
        // SAFETY: one valid pollfd for an open socket.
        let r = unsafe { libc::poll(&mut pfd, 1, ms) };
        if r < 0 {
            let e = io::Error::last_os_error();
            // A signal (Ctrl-C is handled by the caller's loop) is just an early wake-up.
            return if e.kind() == io::ErrorKind::Interrupted {
                Ok(0)
            } else {
                Err(e)
            };
        }
        if r == 0 {
            return Ok(0);
        }
        let want = max.min(BATCH);
        let mut names = [zeroed_sockaddr(); BATCH];
        let mut iovs = [libc::iovec {
            iov_base: std::ptr::null_mut(),
            iov_len: 0,
        }; BATCH];
        // SAFETY: mmsghdr is plain data; all-zero is valid.
        let mut msgs: [libc::mmsghdr; BATCH] = unsafe { std::mem::zeroed() };
        for k in 0..want {
            let slot = &mut self.rxbuf[k * MAX_FRAME..(k + 1) * MAX_FRAME];
            iovs[k].iov_base = slot.as_mut_ptr().cast();
            iovs[k].iov_len = slot.len();
            let h = &mut msgs[k].msg_hdr;
            h.msg_name = (&mut names[k] as *mut libc::sockaddr_in6).cast();
            h.msg_namelen = std::mem::size_of::<libc::sockaddr_in6>() as libc::socklen_t;
            h.msg_iov = &mut iovs[k];
            h.msg_iovlen = 1;
            h.msg_control = self.rxcmsg[k].as_mut_ptr().cast();
            h.msg_controllen = std::mem::size_of::<[u64; 8]>();
        }
        // SAFETY: every header points at live buffers of the lengths given with them.
        let got = unsafe {
            libc::recvmmsg(
                fd,
                msgs.as_mut_ptr(),
                want as u32,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
            )
        };
        if got < 0 {
            let e = io::Error::last_os_error();
            return if matches!(
                e.kind(),
                io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
            ) {
                Ok(0)
            } else {
                Err(e)
            };
        }
        let mut handled = 0;
        for k in 0..got as usize {
            let n = msgs[k].msg_len as usize;
            let tos = read_tos(&msgs[k].msg_hdr);
            let Some(from) = from_sockaddr(&names[k]) else {
                continue;
            };
            let Some(mut datagram) = DatagramRepr::roce(from.ip(), self.local, from.port(), tos)
            else {
                continue; // a datagram of the other IP version
            };
            let base = k * MAX_FRAME;
            let roce = &self.rxbuf[base..base + n];
            let seen = self.numbering.get(&from.ip()).copied().unwrap_or(0);
            if datagram.ip.version() == 4 && (seen < ZERO_ID_PEER || seen == NUMBERING) && n >= 16 {
                // Unknown peer, or one that numbers its packets: does ID 0 fit the ICRC?
                let transport = &roce[..n - wire::ICRC_LEN];
                let stored = wire::icrc::stored(roce).unwrap_or(0);
                let zero = datagram.icrc(transport).unwrap_or(0);
                if zero == stored {
                    if seen != NUMBERING {
                        remember(&mut self.numbering, from.ip(), seen + 1);
                    }
                } else if let Some(id) = ident(&mut self.bases, transport.len(), zero ^ stored) {
                    if let IpRepr::V4(ip) = &mut datagram.ip {
                        ip.ident = id;
                    }
                    remember(&mut self.numbering, from.ip(), NUMBERING);
                    self.idents_recovered += 1;
                }
            }
            handle(Received::Datagram {
                datagram: &datagram,
                roce,
            });
            handled += 1;
        }
        Ok(handled)
    }
}

/// Records what is known of `peer`'s identification, while the table has room (an
/// entry already there is always updated).
fn remember(numbering: &mut HashMap<IpAddr, u8>, peer: IpAddr, v: u8) {
    if numbering.len() < MAX_PEERS || numbering.contains_key(&peer) {
        numbering.insert(peer, v);
    }
}

/// The IP identification that turns `delta` (ICRC on the wire XOR ICRC with
/// identification 0) to nothing, for a transport section of `len` bytes; each length's
/// basis is computed once and kept in `bases`.
fn ident(bases: &mut HashMap<usize, [u32; 16]>, len: usize, delta: u32) -> Option<u16> {
    let basis = match bases.get(&len) {
        Some(b) => *b,
        None => {
            let b = wire::icrc::ident_basis(20, len)?;
            bases.insert(len, b);
            b
        }
    };
    wire::icrc::solve_ident(&basis, delta)
}

/// Accept IPv6 UDP datagrams with a zero checksum (linux/udp.h).
const UDP_NO_CHECK6_RX: i32 = 102;

/// Attaches the TOS (IPv4) or traffic class (IPv6) byte to one datagram as a control
/// message in `space`, which must outlive the `sendmmsg` call.
fn put_tos(h: &mut libc::msghdr, space: &mut [u64; 4], v4: bool, tos: u8) {
    let (level, kind) = if v4 {
        (libc::IPPROTO_IP, libc::IP_TOS)
    } else {
        (libc::IPPROTO_IPV6, libc::IPV6_TCLASS)
    };
    let int = std::mem::size_of::<libc::c_int>() as u32;
    h.msg_control = space.as_mut_ptr().cast();
    // SAFETY: CMSG_SPACE / CMSG_LEN only compute sizes; `space` (32 bytes, 8-aligned)
    // holds one header and an int, so CMSG_FIRSTHDR points inside it and the writes
    // stay in it.
    unsafe {
        h.msg_controllen = libc::CMSG_SPACE(int) as usize;
        let c = libc::CMSG_FIRSTHDR(h);
        (*c).cmsg_level = level;
        (*c).cmsg_type = kind;
        (*c).cmsg_len = libc::CMSG_LEN(int) as usize;
        std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<libc::c_int>(), i32::from(tos));
    }
}

/// Storage big enough for either socket address.
fn zeroed_sockaddr() -> libc::sockaddr_in6 {
    // SAFETY: sockaddr_in6 is plain old data; all-zero is a valid value.
    unsafe { std::mem::zeroed() }
}

/// Writes `a` into `out` as a sockaddr_in or sockaddr_in6; returns its length.
fn to_sockaddr(a: SocketAddr, out: &mut libc::sockaddr_in6) -> libc::socklen_t {
    match a {
        SocketAddr::V4(v) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: v.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from(*v.ip()).to_be(),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: a sockaddr_in (16 bytes) fits in the sockaddr_in6 (28 bytes).
            unsafe {
                (out as *mut libc::sockaddr_in6)
                    .cast::<libc::sockaddr_in>()
                    .write(sin)
            };
            std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t
        }
        SocketAddr::V6(v) => {
            *out = zeroed_sockaddr();
            out.sin6_family = libc::AF_INET6 as libc::sa_family_t;
            out.sin6_port = v.port().to_be();
            out.sin6_addr.s6_addr = v.ip().octets();
            out.sin6_flowinfo = v.flowinfo();
            out.sin6_scope_id = v.scope_id();
            std::mem::size_of::<libc::sockaddr_in6>() as libc::socklen_t
        }
    }
}

/// The address the kernel wrote into `s` (either family).
fn from_sockaddr(s: &libc::sockaddr_in6) -> Option<SocketAddr> {
    match i32::from(s.sin6_family) {
        libc::AF_INET => {
            // SAFETY: the kernel wrote a sockaddr_in here (family AF_INET).
            let v = unsafe {
                (s as *const libc::sockaddr_in6)
                    .cast::<libc::sockaddr_in>()
                    .read()
            };
            Some(SocketAddr::V4(SocketAddrV4::new(
                Ipv4Addr::from(u32::from_be(v.sin_addr.s_addr)),
                u16::from_be(v.sin_port),
            )))
        }
        libc::AF_INET6 => Some(SocketAddr::V6(SocketAddrV6::new(
            Ipv6Addr::from(s.sin6_addr.s6_addr),
            u16::from_be(s.sin6_port),
            s.sin6_flowinfo,
            s.sin6_scope_id,
        ))),
        _ => None,
    }
}

/// The TOS byte from an IP_TOS control message, or the traffic class from an
/// IPV6_TCLASS one; 0 if there is none.
fn read_tos(msg: &libc::msghdr) -> u8 {
    // SAFETY: walking the control buffer with the libc CMSG macros, which stay inside
    // `msg_controllen` bytes of the buffer recvmsg filled.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::IPPROTO_IP && (*c).cmsg_type == libc::IP_TOS {
                return *libc::CMSG_DATA(c);
            }
            if (*c).cmsg_level == libc::IPPROTO_IPV6 && (*c).cmsg_type == libc::IPV6_TCLASS {
                return (libc::CMSG_DATA(c) as *const i32).read_unaligned() as u8;
            }
            c = libc::CMSG_NXTHDR(msg, c);
        }
    }
    0
}

/// SO_MEMINFO (asm-generic/socket.h) and the index of the drop count in its answer
/// (SK_MEMINFO_DROPS, linux/sock_diag.h).
const SO_MEMINFO: i32 = 55;
const SK_MEMINFO_DROPS: usize = 8;

/// How many datagrams socket `fd` has dropped, for want of buffer space mostly.
fn socket_drops(fd: i32) -> u64 {
    let mut v = [0u32; 16];
    let mut len = std::mem::size_of_val(&v) as libc::socklen_t;
    // SAFETY: `v` is writable and `len` its size; the kernel writes at most that.
    let r = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            SO_MEMINFO,
            v.as_mut_ptr().cast(),
            &mut len,
        )
    };
    if r == 0 && len as usize > SK_MEMINFO_DROPS * 4 {
        u64::from(v[SK_MEMINFO_DROPS])
    } else {
        0
    }
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use super::*;
    use crate::datapath::impair::{Impaired, Impairment};
    use crate::wire::{BthRepr, EthernetRepr, ExtHeaders, FrameRepr, Ipv4Repr, Opcode, UdpRepr};

    /// A UD SEND frame from `a` to `b` with TOS `tos` and PSN `psn`.
    fn frame(a: Ipv4Addr, b: Ipv4Addr, tos: u8, psn: u32) -> FrameRepr {
        FrameRepr {
            eth: Some(EthernetRepr {
                dst: [0; 6],
                src: [0; 6],
                vlan: None,
                ethertype: wire::ethernet::ETHERTYPE_IPV4,
            }),
            ip: IpRepr::V4(Ipv4Repr::new(a, b, tos)),
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
        }
    }

    /// The RoCE part of `repr` with `payload` written into `buf`, and where it goes.
    fn transmit(repr: &FrameRepr, payload: &[u8], buf: &mut [u8]) -> Transmit {
        let len = repr
            .emit_roce_with(payload.len(), buf, |d| d.copy_from_slice(payload))
            .unwrap();
        Transmit {
            datagram: DatagramRepr {
                ip: repr.ip,
                udp: repr.udp,
            },
            dst_mac: [0; 6],
            len,
        }
    }

    /// Sends one frame per entry of `tos` (PSN = index) from `a` to `b`.
    fn send_all(tx: &mut UdpBackend, a: Ipv4Addr, b: Ipv4Addr, tos: &[u8]) {
        for (i, &t) in tos.iter().enumerate() {
            let repr = frame(a, b, t, i as u32);
            let queued = tx
                .send_with(&mut |buf| Some(transmit(&repr, &[i as u8; 40], buf)))
                .unwrap();
            assert!(queued);
        }
        tx.flush().unwrap();
    }

    /// Receives until `n` frames came or 5 s passed, `max` per call; returns (PSN, TOS)
    /// in arrival order.
    fn receive_all(rx: &mut impl Backend, n: usize, max: usize) -> Vec<(u32, u8)> {
        let mut got = Vec::new();
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while got.len() < n && std::time::Instant::now() < deadline {
            let before = got.len();
            let k = rx
                .receive(Duration::from_millis(50), max, &mut |r| {
                    let Received::Datagram { datagram, roce } = r else {
                        panic!("a UDP backend hands up datagrams")
                    };
                    let h = datagram.header_bytes(roce.len()).unwrap();
                    let p = wire::parse_datagram(datagram, &h, roce).unwrap();
                    let IpRepr::V4(ip) = p.ip else {
                        panic!("not IPv4")
                    };
                    got.push((p.bth.psn, ip.tos));
                })
                .unwrap();
            assert_eq!(k, got.len() - before);
            assert!(k <= max, "{k} frames handed up for max {max}");
        }
        got
    }

    /// An unspecified local address is refused (the ICRC covers the destination).
    #[test]
    fn binding_the_unspecified_address_is_refused() {
        for a in [
            IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            IpAddr::V6(Ipv6Addr::UNSPECIFIED),
        ] {
            let e = UdpBackend::bind(a).err().expect("refused");
            assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
            assert!(e.to_string().contains("unicast"), "{e}");
        }
    }

    /// Each length's identification basis is computed once; the peer table stops growing
    /// at its bound.
    #[test]
    fn identification_state_is_bounded() {
        let mut bases = HashMap::new();
        for _ in 0..3 {
            let _ = ident(&mut bases, 64, 0x1234_5678);
        }
        let _ = ident(&mut bases, 68, 1);
        assert_eq!(bases.len(), 2);
        assert_eq!(
            ident(&mut bases, wire::icrc::MAX_IDENT_TRANSPORT + 4, 1),
            None
        );
        let mut peers = HashMap::new();
        for i in 0..(MAX_PEERS as u32 + 100) {
            remember(&mut peers, IpAddr::V4(Ipv4Addr::from(i)), 1);
        }
        assert_eq!(peers.len(), MAX_PEERS);
        remember(&mut peers, IpAddr::V4(Ipv4Addr::from(0)), NUMBERING);
        assert_eq!(peers[&IpAddr::V4(Ipv4Addr::from(0))], NUMBERING);
    }

    /// Each datagram keeps its own TOS byte inside one batch (ECT data, DSCP 48 CNPs,
    /// best effort), in order, as the receiver reads it back.
    #[test]
    fn each_datagram_carries_its_own_tos() {
        let (a, b) = (Ipv4Addr::new(127, 0, 75, 1), Ipv4Addr::new(127, 0, 75, 2));
        let mut tx = UdpBackend::bind(a).unwrap();
        let mut rx = UdpBackend::bind(b).unwrap();
        let tos = [0x02, 0xc0, 0x02, 0x00, 0xc0, 0x03, 0x02];
        send_all(&mut tx, a, b, &tos);
        let got = receive_all(&mut rx, tos.len(), 64);
        let want: Vec<(u32, u8)> = tos
            .iter()
            .enumerate()
            .map(|(i, &t)| (i as u32, t))
            .collect();
        assert_eq!(got, want);
    }

    /// Datagrams the receive socket drops for want of buffer space are counted (every
    /// datagram sent is either received or counted), and say so through `rx_overruns`.
    #[test]
    fn receive_overflows_are_counted() {
        let (a, b) = (Ipv4Addr::new(127, 0, 77, 1), Ipv4Addr::new(127, 0, 77, 2));
        let mut tx = UdpBackend::bind(a).unwrap();
        let mut rx = UdpBackend::bind(b).unwrap();
        // Far more than the 16 MiB receive buffer holds, none read meanwhile.
        let n = 12_000;
        let repr = frame(a, b, 0, 0);
        for _ in 0..n {
            tx.send_with(&mut |buf| Some(transmit(&repr, &[7; 4000], buf)))
                .unwrap();
        }
        tx.flush().unwrap();
        let sent = n - tx.send_failures;
        let mut received = 0u64;
        while rx
            .receive(Duration::from_millis(100), 64, &mut |_| received += 1)
            .unwrap()
            > 0
        {}
        assert!(rx.rx_overruns() > 0, "{received} of {sent} received");
        assert_eq!(received + rx.rx_overruns(), sent);
    }

    /// Reordering on receive swaps neighbours, loses nothing and never hands up more
    /// than `max` frames per call, one at a time included.
    #[test]
    fn reordering_keeps_every_frame_and_the_budget() {
        let (a, b) = (Ipv4Addr::new(127, 0, 76, 1), Ipv4Addr::new(127, 0, 76, 2));
        let mut tx = UdpBackend::bind(a).unwrap();
        let mut rx = Impaired::new(
            UdpBackend::bind(b).unwrap(),
            Impairment {
                drop: 0.0,
                reorder: 0.3,
            },
            7,
        );
        for max in [1, 3, 64] {
            send_all(&mut tx, a, b, &[0; 30]);
            let got = receive_all(&mut rx, 30, max);
            let mut psns: Vec<u32> = got.iter().map(|g| g.0).collect();
            let swapped = psns.windows(2).filter(|w| w[0] > w[1]).count();
            psns.sort_unstable();
            assert_eq!(psns, (0..30).collect::<Vec<_>>(), "max {max}");
            assert!(swapped > 0, "max {max}: nothing was reordered");
        }
        assert!(rx.stats().reordered > 5, "{:?}", rx.stats());
    }
}
