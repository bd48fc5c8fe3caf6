//! The UDP socket backend: RoCEv2 over an ordinary UDP socket on port 4791.
//!
//! The kernel builds Ethernet, IP and UDP, so uroce must know what it will put in the
//! fields the ICRC covers: the UDP source port (one socket per source port the context
//! gives its QPs: one per QP for ECMP entropy, or a pool they share), the IP identification (0: Linux sends ID 0 on unconnected sockets
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
//! Frames are batched: `send_with` queues up to 64 datagrams that `flush` hands over with
//! one `sendmmsg` per source port among them (grouped by port, each QP's datagrams in
//! their order: with many QPs taking turns, runs of one port would be one datagram
//! long). How many ports, hence sockets, there are is the context's choice
//! ([`crate::verbs::Context::set_udp_sports`]): one per QP by default, or a pool the QPs
//! share. Within a port's send, a run of datagrams to the
//! same destination and QP with the same TOS and size (the last may be shorter) is one
//! message with UDP_SEGMENT (GSO): the kernel cuts it back into those datagrams, once
//! for up to 64 KiB instead of once per packet, or hands it whole to a device that
//! segments. Each segment is still one RoCE packet with its own BTH and ICRC. The kernel
//! numbers the IPv4 identification of a GSO send's segments 0, 1, 2... (the first gets
//! the 0 of an unconnected socket with DF), and the ICRC covers it: before the send, the
//! ICRC of segment k is moved to identification k (CRC-32 is affine, so that is an XOR of
//! a per-length constant, [`crate::wire::icrc::ident_basis`], no pass over the bytes).
//! A datagram whose payload the context left in place (an RC SEND or WRITE of 1 KiB or
//! more, [`crate::verbs::Context::poll_transmit_in_place`]) is three pieces of the send's
//! gather list: its headers from the slot, the payload from the program's region, the pad
//! and ICRC from the slot; the kernel's copy into its buffers is the only one. What waits
//! for room in the kernel has its payload copied into its slot first (`gather_queued`).
//! Where the kernel refuses a GSO send (EIO from a device without checksum offload,
//! EINVAL or ENOPROTOOPT from a kernel without UDP_SEGMENT, before 4.18) the backend
//! sends datagram by datagram from then on. `receive` takes up to 32 datagrams with one
//! `recvmmsg`; with UDP_GRO on the receive socket (Linux 5.0 and later; on a steered
//! socket only where its owner hands on the packets of another class that a coalesced
//! run brings: engine shards' `handoff`, the daemon's fast path passing them on through
//! its rings) one datagram may hold a run of
//! packets, split back by the segment size the kernel reports in a control message, each
//! handed up as its own `Received::Datagram` from the receive buffer, no copy, and what
//! the caller's budget leaves is handed up by the next call. `UROCE_UDP_GSO=0` in the
//! environment turns both off (comparisons, odd kernels).
//!
//! A peer whose IPv4 identification is not 0 (rdma_rxe numbers its packets, and GSO
//! segments are numbered, ours included) sends an ICRC over a field the socket does not
//! show. The backend puts its guess into the datagram's header (segment j of a
//! coalesced run: j, which our own GSO sends use) and leaves the ICRC to the context,
//! which takes the identification that fits where the guess does not
//! ([`crate::wire::DatagramRepr::fit_icrc`]) and may place a payload before it checks
//! (`Context::place`): so the check is the one CRC pass over a packet's bytes. Packets
//! whose identification was solved for keep 16 of the ICRC's 32 bits of protection (a
//! damaged packet passes with odds of 1 in 65536 instead of 1 in 4 billion); the AF_XDP
//! backend sees the real header and keeps all 32.

use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6, UdpSocket};
use std::os::fd::AsRawFd;
use std::time::Duration;

use super::{Backend, Received, Transmit, MAX_FRAME};
use crate::endpoint::InPlace;
use crate::wire::{self, icrc::IdentBases, DatagramRepr, IpRepr};

/// RoCEv2 over UDP sockets bound to one local address (IPv4 or IPv6).
pub struct UdpBackend {
    /// The address, plain (no scope): what received datagrams are addressed to as the
    /// ICRC covers it.
    local: IpAddr,
    /// The interface index a link-local IPv6 `local` is scoped to (0 otherwise): its
    /// sockets are bound with it, which ties them to that interface, and link-local
    /// destinations are sent to through it ([`UdpBackend::bind_link_local`]).
    scope: u32,
    rx: UdpSocket,
    tx: HashMap<u16, UdpSocket>,
    /// Queued datagrams: `TX_BATCH` slots of `MAX_FRAME` bytes, each UDP payload at the
    /// start of its slot, with its length, source port, destination and TOS.
    txbuf: Vec<u8>,
    txq: Vec<Queued>,
    /// The first of `txq` not yet handed to the kernel (after a full send buffer).
    tx_next: usize,
    /// Times the kernel had no room for queued datagrams (they waited, none was lost).
    pub tx_blocked: u64,
    /// `sendmmsg` calls made (system calls on the send side).
    pub tx_calls: u64,
    /// Receive slots of `rx_slot` bytes (a whole coalesced datagram with GRO), the
    /// control-message space of each, what `recvmmsg` said of each, how many it filled
    /// and the next packet to hand up (slot, offset).
    rxbuf: Vec<u8>,
    rx_slot: usize,
    rxcmsg: Vec<[u64; 8]>,
    rxmeta: [RxMeta; RX_BATCH],
    rx_have: usize,
    rx_at: (usize, usize),
    /// Runs of datagrams go to the kernel as one GSO send (UDP_SEGMENT) while this holds;
    /// it stops holding for good when the kernel refuses one.
    gso: bool,
    /// Why GSO was turned off: the errno of the refused send, if that was it.
    pub gso_disabled_by: Option<i32>,
    /// The receive socket has UDP_GRO on: the kernel may hand up several packets as one
    /// datagram.
    gro: bool,
    /// Received datagrams that came coalesced (with a UDP_GRO segment size).
    pub gro_datagrams: u64,
    /// Datagrams the kernel refused (counted, the transport retransmits).
    pub send_failures: u64,
    /// ICRC bases for the identification, by transport length: a GSO run's datagrams
    /// are renumbered with them (`set_ident`).
    bases: IdentBases,
    /// Several loops' backends share this address: source-port sockets too.
    shared_ports: bool,
    /// What [`Backend::rx_capacity`] says: a quarter of the receive buffer the kernel
    /// granted (see `with_socket`).
    rx_capacity: u64,
}

/// A UDP socket bound to `addr` with SO_REUSEPORT set before the bind.
fn bind_reuseport(addr: SocketAddr) -> io::Result<UdpSocket> {
    bind_with(addr, true, false)
}

/// Sockets of the daemon's fast path: [`CLASSES`] sockets of one reuseport group on
/// `local` port 4791, bound in order (the kernel numbers a group's sockets in the order
/// they bind, and the daemon keeps every one open for its life, so the numbering holds),
/// with a steering program handing each datagram to socket `DestQP >> CLASS_SHIFT`: QPNs
/// `k << CLASS_SHIFT ..` go to socket `k`. Socket 0 (QP 1 and the daemon's own) is the
/// daemon's; it gives socket `k` to one process with QPNs of that class only. Each asks
/// for a deep receive buffer (forced where the daemon may).
pub fn bind_classes(local: IpAddr) -> io::Result<Vec<UdpSocket>> {
    check_local(local)?;
    let addr = SocketAddr::new(local, wire::ROCEV2_UDP_PORT);
    let mut v = Vec::with_capacity(CLASSES as usize);
    for k in 0..CLASSES {
        let s = bind_group_member(addr, k).map_err(|e| bind_error(addr, e))?;
        if k == 0 {
            attach_qpn_steering(s.as_raw_fd(), Steer::Shift(CLASS_SHIFT))?;
        } else if !force_rcvbuf(s.as_raw_fd(), 16 << 20) {
            let _ = setsockopt_int(s.as_raw_fd(), libc::SOL_SOCKET, libc::SO_RCVBUF, 16 << 20);
        }
        v.push(s);
    }
    Ok(v)
}

/// Sockets of a [`bind_classes`] group: one per 2^[`CLASS_SHIFT`] QPNs of the 24-bit space.
pub const CLASSES: u32 = 64;
/// QPN `q` is steered to socket `q >> CLASS_SHIFT` of a [`bind_classes`] group.
pub const CLASS_SHIFT: u32 = 18;

/// Throws away what `sock` holds (a class socket handed to a new process: datagrams for
/// QPNs of the process before it).
pub fn drain_socket(sock: &UdpSocket) {
    let mut buf = [0u8; 64];
    // SAFETY: `buf` is writable for its length; MSG_TRUNC makes a longer datagram go
    // whole; a non-blocking read ends the loop when nothing is left.
    while unsafe {
        libc::recv(
            sock.as_raw_fd(),
            buf.as_mut_ptr().cast(),
            buf.len(),
            libc::MSG_DONTWAIT | libc::MSG_TRUNC,
        )
    } >= 0
    {}
}

/// The error of a failed bind of port 4791 on `addr`, saying who holds it when it is
/// taken (another uroce process on this address).
/// Sets the receive buffer of `fd` to `bytes` past `net.core.rmem_max`
/// (SO_RCVBUFFORCE, CAP_NET_ADMIN): whether it could.
fn force_rcvbuf(fd: i32, bytes: i32) -> bool {
    setsockopt_int(fd, libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, bytes).is_ok()
}

/// Member `index` of a reuseport group on `addr` (SO_REUSEPORT, no freebind); the first
/// is refused (AddrInUse) where a socket is bound to the port already: a group of the
/// same user would take ours in beside its own without an error, and the steering
/// program would then number the sockets of both.
fn bind_group_member(addr: SocketAddr, index: u32) -> io::Result<UdpSocket> {
    if index == 0 && super::holder::udp_bound(addr.ip(), addr.port()) {
        return Err(io::ErrorKind::AddrInUse.into());
    }
    bind_reuseport(addr)
}

fn bind_error(addr: SocketAddr, e: io::Error) -> io::Error {
    let by = if e.kind() == io::ErrorKind::AddrInUse {
        super::holder::held_by(super::holder::udp_holder(addr.ip(), addr.port()))
    } else {
        String::new()
    };
    io::Error::new(e.kind(), format!("binding UDP {addr}: {e}{by}"))
}

/// A UDP socket bound to `addr` (with its scope), with SO_REUSEPORT (`reuseport`) and
/// IPV6_FREEBIND (`freebind`: an address the kernel does not have yet, a tentative
/// link-local one) set before the bind.
fn bind_with(addr: SocketAddr, reuseport: bool, freebind: bool) -> io::Result<UdpSocket> {
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
    if reuseport {
        setsockopt_int(fd, libc::SOL_SOCKET, libc::SO_REUSEPORT, 1)?;
    }
    if freebind && addr.is_ipv6() {
        setsockopt_int(fd, libc::IPPROTO_IPV6, libc::IPV6_FREEBIND, 1)?;
    }
    let mut sa = zeroed_sockaddr();
    let len = to_sockaddr(addr, &mut sa);
    // SAFETY: `sa` holds a valid sockaddr of `len` bytes.
    let r = unsafe { libc::bind(fd, (&sa as *const libc::sockaddr_in6).cast(), len) };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(sock)
}

/// How a reuseport group's steering program picks a socket from the BTH's DestQP.
#[derive(Debug, Clone, Copy)]
enum Steer {
    /// Socket `DestQP mod count` (loops on threads, [`UdpBackend::bind_steered`]).
    Modulo(u32),
    /// Socket `DestQP >> shift` (the daemon's classes, [`bind_classes`]).
    Shift(u32),
}

/// Attaches to the reuseport group of `fd` a classic BPF program returning the socket
/// index `steer` computes. The kernel runs it with the data starting at the UDP payload,
/// so the BTH's DestQP is the low 24 bits of the word at offset 4.
fn attach_qpn_steering(fd: i32, steer: Steer) -> io::Result<()> {
    let code = |code: u16, k: u32| libc::sock_filter {
        code,
        jt: 0,
        jf: 0,
        k,
    };
    let pick = match steer {
        Steer::Modulo(count) => code((libc::BPF_ALU | libc::BPF_MOD | libc::BPF_K) as u16, count),
        Steer::Shift(shift) => code((libc::BPF_ALU | libc::BPF_RSH | libc::BPF_K) as u16, shift),
    };
    let mut prog = [
        code((libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16, 4),
        code(
            (libc::BPF_ALU | libc::BPF_AND | libc::BPF_K) as u16,
            0x00ff_ffff,
        ),
        pick,
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
    /// The BTH's destination QP: one GSO send goes to one QP (a steered receiver hands
    /// a coalesced datagram to the loop of its first packet's QP).
    dest_qp: u32,
    /// The IPv4 identification the stored ICRC covers (0 as the context wrote it).
    ident: u16,
    /// The payload the context left in registered memory ([`Transmit::in_place`]): the
    /// slot holds the rest, and the send's gather list takes the payload from there.
    in_place: Option<InPlace>,
}

impl Queued {
    /// Bytes of the datagram in its slot: all of it, or all but a payload left in place.
    fn in_slot(&self) -> usize {
        self.len - self.in_place.map_or(0, |p| p.len())
    }
}

/// Datagrams queued before `send_with` hands them to the kernel: enough for four GSO
/// sends of 4 KiB packets.
const TX_BATCH: usize = 64;
/// Receive slots per `recvmmsg`: without GRO one packet each, with it up to 64 KiB.
const RX_BATCH: usize = 32;
/// Bytes of a receive slot with GRO: the largest UDP payload.
const GRO_SLOT: usize = 1 << 16;
/// Receive slots with GRO (1 MiB in all).
const GRO_SLOTS: usize = 16;

/// Whether GSO and GRO are tried (`UROCE_UDP_GSO=0` in the environment turns both off,
/// for comparisons; read once per backend, not per packet).
fn offloads_wanted() -> bool {
    std::env::var_os("UROCE_UDP_GSO").is_none_or(|v| v != "0")
}

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

fn getsockopt_int(fd: i32, level: i32, name: i32) -> io::Result<i32> {
    let mut value: i32 = 0;
    let mut len = std::mem::size_of::<i32>() as libc::socklen_t;
    // SAFETY: `fd` is an open socket owned by the caller; the kernel writes at most `len`
    // bytes into the live c_int on the stack.
    let r = unsafe { libc::getsockopt(fd, level, name, (&mut value as *mut i32).cast(), &mut len) };
    if r == 0 {
        Ok(value)
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
        let rx = UdpSocket::bind(addr).map_err(|e| bind_error(addr, e))?;
        Self::with_socket(local, 0, rx, false, true)
    }

    /// Binds port 4791 on the link-local IPv6 address `local` of the interface with index
    /// `ifindex` (its scope: a link-local address is only one with it). The sockets are
    /// then the interface's (the kernel sets SO_BINDTODEVICE from the scope), so
    /// link-local traffic leaves through it, and datagrams to link-local destinations are
    /// given that scope too. What this backend hands up carries the plain addresses, as
    /// the ICRC covers them.
    ///
    /// The address is bound with IPV6_FREEBIND: the interface's default GID (fe80:: with
    /// the EUI-64 of its MAC) is the device's from the start, as over AF_XDP, while the
    /// kernel's address may still be tentative (duplicate address detection, a second or
    /// two after the link comes up); packets to it arrive once the kernel has it.
    pub fn bind_link_local(local: Ipv6Addr, ifindex: u32) -> io::Result<Self> {
        Self::link_local(local, ifindex, None)
    }

    /// [`UdpBackend::bind_link_local`] as one of `count` backends steered by destination
    /// QP, as [`UdpBackend::bind_steered_coalescing`] binds them (UDP GRO on: the caller
    /// hands a packet of another class to its owner): this one is socket `index`.
    pub fn bind_link_local_steered(
        local: Ipv6Addr,
        ifindex: u32,
        index: u32,
        count: u32,
    ) -> io::Result<Self> {
        Self::link_local(local, ifindex, Some((index, count)))
    }

    fn link_local(local: Ipv6Addr, ifindex: u32, steer: Option<(u32, u32)>) -> io::Result<Self> {
        if !local.is_unicast_link_local() || ifindex == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{local} with scope {ifindex} is not a scoped link-local address"),
            ));
        }
        let addr = SocketAddr::V6(SocketAddrV6::new(local, wire::ROCEV2_UDP_PORT, 0, ifindex));
        let rx = match steer {
            Some((0, _)) if super::holder::udp_bound(IpAddr::V6(local), addr.port()) => {
                Err(io::ErrorKind::AddrInUse.into())
            }
            _ => bind_with(addr, steer.is_some(), true),
        }
        .map_err(|e| bind_error(addr, e))?;
        if let Some((0, count)) = steer {
            attach_qpn_steering(rx.as_raw_fd(), Steer::Modulo(count.max(1)))?;
        }
        Self::with_socket(IpAddr::V6(local), ifindex, rx, steer.is_some(), true)
    }

    /// The socket address of `port` on this backend's address, with its scope.
    fn local_at(&self, port: u16) -> SocketAddr {
        match self.local {
            IpAddr::V6(a) if self.scope != 0 => {
                SocketAddr::V6(SocketAddrV6::new(a, port, 0, self.scope))
            }
            a => SocketAddr::new(a, port),
        }
    }

    /// A backend on `rx`, one socket of a reuseport group [`bind_classes`] made (the
    /// uroce daemon's, handed to a process): it receives the datagrams steered to it,
    /// with UDP GRO where `coalesce` (the kernel may then steer a coalesced run of one
    /// flow by its first packet, so two QPs of different classes that share a peer's
    /// source port may have packets on the wrong socket: the caller passes those on).
    pub fn from_class_socket(local: IpAddr, rx: UdpSocket, coalesce: bool) -> io::Result<Self> {
        check_local(local)?;
        Self::with_socket(local, 0, rx, true, coalesce)
    }

    /// The socket it receives on, given back (a class socket the caller keeps in its
    /// group); what it took and did not hand up yet is dropped.
    pub fn into_socket(self) -> UdpSocket {
        self.rx
    }

    /// One of `count` backends on `local`, for the loop with index `index`: all share UDP
    /// port 4791 (SO_REUSEPORT), and a classic BPF program attached to the group hands
    /// each datagram to socket `DestQP mod count`, so it reaches the loop whose context
    /// owns that QP (give loop `index` the QPNs `index + k * count`, see
    /// [`crate::verbs::Context::set_qpn_space`]). Create them in index order: the kernel
    /// numbers the group's sockets in the order they bind.
    pub fn bind_steered(local: impl Into<IpAddr>, index: u32, count: u32) -> io::Result<Self> {
        Self::steered(local.into(), index, count, false)
    }

    /// [`UdpBackend::bind_steered`] with UDP GRO on: the kernel may coalesce a run of one
    /// flow before the group's steering program sees it, and steer it by its first
    /// packet, so a peer's QPs of two classes that share a source port may have packets
    /// on the wrong socket. The caller hands those over to their owner
    /// ([`super::handoff::Member`]). [`UdpBackend::bind_link_local_steered`] coalesces
    /// too, for the same caller.
    pub fn bind_steered_coalescing(
        local: impl Into<IpAddr>,
        index: u32,
        count: u32,
    ) -> io::Result<Self> {
        Self::steered(local.into(), index, count, true)
    }

    fn steered(local: IpAddr, index: u32, count: u32, gro: bool) -> io::Result<Self> {
        check_local(local)?;
        let addr = SocketAddr::new(local, wire::ROCEV2_UDP_PORT);
        let rx = bind_group_member(addr, index).map_err(|e| bind_error(addr, e))?;
        if index == 0 {
            attach_qpn_steering(rx.as_raw_fd(), Steer::Modulo(count.max(1)))?;
        }
        Self::with_socket(local, 0, rx, true, gro)
    }

    fn with_socket(
        local: IpAddr,
        scope: u32,
        rx: UdpSocket,
        shared_ports: bool,
        coalesce: bool,
    ) -> io::Result<Self> {
        let fd = rx.as_raw_fd();
        if local.is_ipv4() {
            setsockopt_int(fd, libc::IPPROTO_IP, libc::IP_RECVTOS, 1)?;
        } else {
            setsockopt_int(fd, libc::IPPROTO_IPV6, libc::IPV6_RECVTCLASS, 1)?;
            setsockopt_int(fd, libc::IPPROTO_UDP, UDP_NO_CHECK6_RX, 1)?;
        }
        // A deep receive buffer: bursts of a full send window must not overflow it (as
        // root the limit in net.core.rmem_max does not apply; without root it does, and
        // the window is made to fit what was granted). UROCE_UDP_RCVBUF=<bytes> asks for
        // less (tests: an unprivileged process's buffer on a machine where rmem_max is
        // generous).
        let big = std::env::var("UROCE_UDP_RCVBUF")
            .ok()
            .and_then(|v| v.parse::<i32>().ok())
            .unwrap_or(16 << 20);
        // A socket handed over already as deep (the daemon's, forced as root) is left as
        // it is: SO_RCVBUF would cut it down to rmem_max. (Not when UROCE_UDP_RCVBUF asks
        // for a size: a fresh socket's default may be deeper than that, and the size asked
        // is what is tested.)
        let asked = std::env::var_os("UROCE_UDP_RCVBUF").is_some();
        let deep = !asked
            && getsockopt_int(fd, libc::SOL_SOCKET, libc::SO_RCVBUF).is_ok_and(|v| v / 2 >= big);
        let forced = deep || !asked && force_rcvbuf(fd, big);
        if !forced {
            let _ = setsockopt_int(fd, libc::SOL_SOCKET, libc::SO_RCVBUF, big);
        }
        // The kernel reports twice what it granted (socket(7): the other half is its
        // bookkeeping) and charges each queued packet its buffer's true size, up to twice
        // the packet's bytes for one of a path MTU in a buffer of its own: a quarter of
        // the figure is what packets may take.
        let rx_capacity = getsockopt_int(fd, libc::SOL_SOCKET, libc::SO_RCVBUF)
            .map_or(0, |v| u64::try_from(v).unwrap_or(0) / 4);
        // GRO: the kernel may hand up a run of packets of one flow as one datagram with
        // the segment size in a control message. Not on steered sockets unless the
        // caller hands packets over (`coalesce`): packets of two QPs sharing a source
        // port would be coalesced and reach the first one's loop.
        let gro =
            offloads_wanted() && coalesce && setsockopt_int(fd, libc::SOL_UDP, UDP_GRO, 1).is_ok();
        if !gro {
            // Said off too: a socket handed over (a class of the daemon's group) may have
            // had it on from an earlier holder, and coalesced runs would not fit this
            // backend's slots (their tails cut off).
            let _ = setsockopt_int(fd, libc::SOL_UDP, UDP_GRO, 0);
        }
        let (slot, slots) = if gro {
            (GRO_SLOT, GRO_SLOTS)
        } else {
            (MAX_FRAME, RX_BATCH)
        };
        Ok(Self {
            local,
            scope,
            rx,
            tx: HashMap::new(),
            txbuf: vec![0; TX_BATCH * MAX_FRAME],
            txq: Vec::with_capacity(TX_BATCH),
            tx_next: 0,
            tx_blocked: 0,
            tx_calls: 0,
            rxbuf: vec![0; slots * slot],
            rx_slot: slot,
            rxcmsg: vec![[0; 8]; RX_BATCH],
            rxmeta: [RxMeta::default(); RX_BATCH],
            rx_have: 0,
            rx_at: (0, 0),
            gso: offloads_wanted(),
            gso_disabled_by: None,
            gro,
            gro_datagrams: 0,
            send_failures: 0,
            bases: IdentBases::default(),
            shared_ports,
            rx_capacity,
        })
    }

    /// Whether runs of datagrams still go as GSO sends, and whether received datagrams
    /// may come coalesced (GRO).
    pub fn offloads(&self) -> (bool, bool) {
        (self.gso, self.gro)
    }

    fn socket_for(&mut self, sport: u16) -> io::Result<&UdpSocket> {
        if !self.tx.contains_key(&sport) {
            let s = if sport == wire::ROCEV2_UDP_PORT {
                self.rx.try_clone()?
            } else {
                bind_with(self.local_at(sport), self.shared_ports, self.scope != 0)?
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

/// Most UDP payload bytes one GSO send may carry: the IP datagram stays within 65535
/// bytes (IPv4: 20-byte header, IPv6: 40, and 8 of UDP).
fn gso_max_bytes(v4: bool) -> usize {
    if v4 {
        65535 - 20 - 8
    } else {
        65535 - 40 - 8
    }
}

/// Most segments the kernel takes in one GSO send (UDP_MAX_SEGMENTS, linux/udp.h).
const GSO_MAX_SEGMENTS: usize = 64;

/// How many of the datagrams at the start of `q` (at least one) go in one send: a run of
/// datagrams to the same destination and QP, from the same source port, with the same
/// TOS, all of the first one's size except the last, which may be shorter, at most
/// `max_segments` of them and `max_bytes` in all. One GSO send carries such a run: the
/// kernel cuts it back into datagrams of the first one's size.
fn gso_run(q: &[Queued], max_segments: usize, max_bytes: usize) -> usize {
    let Some(first) = q.first() else {
        return 0;
    };
    let mut n = 1;
    let mut bytes = first.len;
    for d in &q[1..] {
        if n == max_segments
            || bytes + d.len > max_bytes
            || d.sport != first.sport
            || d.dst != first.dst
            || d.tos != first.tos
            || d.dest_qp != first.dest_qp
            || d.len > first.len
        {
            break;
        }
        n += 1;
        bytes += d.len;
        if d.len < first.len {
            break; // a shorter datagram ends the run
        }
    }
    n
}

/// The ICRC change that moving an IPv4 packet of `transport_len` bytes (BTH to ICRC)
/// from identification `from` to `to` makes (CRC-32 is affine, so it is the XOR of each
/// changed bit's effect); `None` when the length is beyond what the bases cover.
fn ident_delta(bases: &mut IdentBases, transport_len: usize, from: u16, to: u16) -> Option<u32> {
    let diff = from ^ to;
    if diff == 0 {
        return Some(0);
    }
    Some(wire::icrc::ident_effect(&bases.get(transport_len)?, diff))
}

impl UdpBackend {
    /// Makes the ICRC of queued datagram `i` cover identification `id` (rewriting the
    /// stored ICRC in place); false when it cannot (a length beyond the bases).
    fn set_ident(&mut self, i: usize, id: u16) -> bool {
        let q = self.txq[i];
        if !q.dst.is_ipv4() || q.ident == id {
            return true;
        }
        let slot = q.in_slot();
        if slot < wire::ICRC_LEN {
            return false;
        }
        let Some(d) = ident_delta(&mut self.bases, q.len - wire::ICRC_LEN, q.ident, id) else {
            return false;
        };
        // The ICRC is the last of the slot's bytes, whether or not the payload is there.
        let at = q.start + slot - wire::ICRC_LEN;
        let icrc = wire::icrc::stored(&self.txbuf[q.start..q.start + slot]).unwrap_or(0) ^ d;
        let mut b = [0u8; 4];
        wire::icrc::store(icrc, &mut b);
        self.txbuf[at..at + 4].copy_from_slice(&b);
        self.txq[i].ident = id;
        true
    }

    /// Sends the queued datagrams: one `sendmmsg` per source port in the batch, each
    /// message of it a GSO send of a run of datagrams ([`gso_run`]) while the kernel
    /// takes them, or one datagram.
    ///
    /// When the kernel has no room (a full socket send buffer: EAGAIN, or ENOBUFS), what
    /// is left stays queued, from `tx_next`, for the next call: nothing is lost on a
    /// clean path (before, those datagrams were counted as sent and dropped, and RC had
    /// to retransmit them).
    fn send_queued(&mut self) -> io::Result<()> {
        // One `sendmmsg` per source port, not per run of it: datagrams of QPs that took
        // turns (a different port each) are grouped by port, and within a port by
        // destination (address, then QP: GSO runs, which go to one of each), keeping the
        // order of each (port, destination) pair, which is the only order RoCE asks for
        // (a QP's packets all leave from its port to its peer). A slot's offset (`start`)
        // grows with the order it was queued in: it is the tie-break, and the sort (in
        // place, no allocation) is stable in effect.
        self.txq[self.tx_next..].sort_unstable_by_key(|q| (q.sport, q.dst, q.dest_qp, q.start));
        let mut i = self.tx_next;
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
            let end = i + run;
            while i < end {
                match self.send_some(fd, i, end) {
                    Some(n) => i += n,
                    None => {
                        self.tx_next = i;
                        self.tx_blocked += 1;
                        self.gather_queued();
                        return Ok(());
                    }
                }
            }
        }
        self.txq.clear();
        self.tx_next = 0;
        Ok(())
    }

    /// Copies into their slots the payloads that datagrams the kernel had no room for
    /// left in place: they wait in the backend's own memory, since bytes in place are
    /// valid only until the caller goes back to its context ([`InPlace`]).
    fn gather_queued(&mut self) {
        let mut i = self.tx_next;
        while i < self.txq.len() {
            let q = self.txq[i];
            let Some(p) = q.in_place else {
                i += 1;
                continue;
            };
            let slot = &mut self.txbuf[q.start..q.start + MAX_FRAME];
            // SAFETY: this runs inside `send_with` or `flush`, whose caller built these
            // datagrams since it last went back to its context (the contract of
            // `Context::poll_transmit_in_place`), so the payloads are still valid.
            if unsafe { super::gather_bytes(p, q.len, slot) } {
                self.txq[i].in_place = None;
                i += 1;
            } else {
                // Cannot happen (`send_with` checks that a datagram fits its slot); were it
                // to, the datagram is dropped and counted, never sent from a stale address.
                self.txq.remove(i);
                self.send_failures += 1;
            }
        }
    }

    /// One `sendmmsg` of queued datagrams `from..end` (one source port): returns how many
    /// datagrams it dealt with (sent or counted as failed), `None` when the kernel had no
    /// room for the first (they stay queued).
    fn send_some(&mut self, fd: i32, from: usize, end: usize) -> Option<usize> {
        let v4 = self.local.is_ipv4();
        let mut names = [zeroed_sockaddr(); TX_BATCH];
        // Up to three pieces a datagram: its slot's bytes, or the headers, the payload
        // left in place and the pad and ICRC.
        let mut iovs = [libc::iovec {
            iov_base: std::ptr::null_mut(),
            iov_len: 0,
        }; 3 * TX_BATCH];
        let mut piece = 0;
        // SAFETY: mmsghdr is plain data; all-zero is valid.
        let mut msgs: [libc::mmsghdr; TX_BATCH] = unsafe { std::mem::zeroed() };
        let mut ctrl = [[0u64; 6]; TX_BATCH];
        // Datagrams in each message.
        let mut counts = [0usize; TX_BATCH];
        let mut nmsg = 0;
        let mut at = from;
        while at < end {
            let n = if self.gso {
                gso_run(&self.txq[at..end], GSO_MAX_SEGMENTS, gso_max_bytes(v4))
            } else {
                1
            };
            // Segment k of a GSO send leaves with identification k (the kernel numbers
            // them from the 0 an unconnected socket with DF gives): each ICRC must
            // cover its own. A single datagram leaves with 0.
            let mut n_ok = n;
            for k in 0..n {
                let id = if n > 1 { k as u16 } else { 0 };
                if !self.set_ident(at + k, id) {
                    n_ok = k.max(1);
                    break;
                }
            }
            let n = n_ok;
            let q = self.txq[at];
            let m = nmsg;
            let first = piece;
            for k in 0..n {
                let d = self.txq[at + k];
                let slot = self.txbuf[d.start..].as_mut_ptr();
                let mut put = |base: *mut u8, len: usize| {
                    iovs[piece] = libc::iovec {
                        iov_base: base.cast(),
                        iov_len: len,
                    };
                    piece += 1;
                };
                match d.in_place {
                    None => put(slot, d.len),
                    Some(p) => {
                        put(slot, p.at());
                        // The kernel reads the payload where it lies (a registered
                        // region's bytes, valid for this call: see `gather_queued`).
                        put(p.addr() as *mut u8, p.len());
                        put(slot.wrapping_add(p.at()), d.len - p.len() - p.at());
                    }
                }
            }
            let len = to_sockaddr(q.dst, &mut names[m]);
            let h = &mut msgs[m].msg_hdr;
            h.msg_name = (&mut names[m] as *mut libc::sockaddr_in6).cast();
            h.msg_namelen = len;
            h.msg_iov = &mut iovs[first];
            h.msg_iovlen = piece - first;
            put_cmsgs(h, &mut ctrl[m], v4, q.tos, (n > 1).then_some(q.len as u16));
            counts[m] = n;
            nmsg += 1;
            at += n;
        }
        // SAFETY: `msgs[..nmsg]` point at live addresses, control messages and queued
        // bytes, all alive for the call.
        let r = unsafe { libc::sendmmsg(fd, msgs.as_mut_ptr(), nmsg as u32, libc::MSG_DONTWAIT) };
        self.tx_calls += 1;
        if r > 0 {
            return Some(counts[..r as usize].iter().sum());
        }
        let e = io::Error::last_os_error();
        if e.kind() == io::ErrorKind::WouldBlock || e.raw_os_error() == Some(libc::ENOBUFS) {
            return None;
        }
        if counts[0] > 1 {
            // The kernel refused a GSO send: EIO where the device has no checksum
            // offload, EINVAL / ENOPROTOOPT where UDP_SEGMENT is unknown or the segment
            // does not fit the path. From now on this backend sends datagram by datagram;
            // this run goes again (`set_ident` puts its ICRCs back to identification 0).
            if matches!(
                e.raw_os_error(),
                Some(libc::EIO | libc::EINVAL | libc::ENOPROTOOPT | libc::EMSGSIZE)
            ) {
                self.gso = false;
                self.gso_disabled_by = e.raw_os_error();
                return Some(0); // the run goes again, datagram by datagram
            }
            self.send_failures += counts[0] as u64;
            return Some(counts[0]);
        }
        // The kernel refused this datagram (too big, no route): count it and go on; RC
        // retransmits, UD loses it as a datagram may be lost.
        self.send_failures += 1;
        Some(1)
    }
}

impl Backend for UdpBackend {
    /// Yes: a payload left in place is one piece of the send's gather list, and what the
    /// kernel has no room for is copied into its slot before `send_with` or `flush`
    /// returns.
    fn takes_payload_in_place(&self) -> bool {
        true
    }

    fn needs_link_addresses(&self) -> bool {
        false
    }

    fn serves_link_local(&self) -> bool {
        self.scope != 0
    }

    fn wait_fds(&self) -> Vec<std::os::fd::RawFd> {
        vec![self.rx.as_raw_fd()]
    }

    /// Segments of a coalesced datagram received and not handed up yet.
    fn holds_received(&self) -> bool {
        self.rx_at.0 < self.rx_have
    }

    fn rx_overruns(&self) -> u64 {
        socket_drops(self.rx.as_raw_fd())
    }

    fn rx_capacity(&self) -> Option<u64> {
        Some(self.rx_capacity)
    }

    fn send_with(
        &mut self,
        build: &mut dyn FnMut(&mut [u8]) -> Option<Transmit>,
    ) -> io::Result<bool> {
        if self.txq.len() == TX_BATCH {
            self.send_queued()?;
            if !self.txq.is_empty() {
                // The kernel has no room for what is queued: build nothing more now.
                return Err(io::Error::from(io::ErrorKind::WouldBlock));
            }
        }
        let start = self.txq.len() * MAX_FRAME;
        let Some(t) = build(&mut self.txbuf[start..start + MAX_FRAME]) else {
            return Ok(false);
        };
        if let Some(p) = t.in_place {
            // What the context makes always fits; anything else is refused, never sent.
            let fits = t.len <= MAX_FRAME
                && p.len() <= t.len
                && p.at() + wire::ICRC_LEN <= t.len - p.len();
            if !fits {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!(
                        "a datagram of {} bytes with {p:?} does not fit a slot",
                        t.len
                    ),
                ));
            }
        }
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
            dst: match dst {
                // A link-local destination is reached through our interface.
                IpAddr::V6(d) if self.scope != 0 && d.is_unicast_link_local() => {
                    SocketAddr::V6(SocketAddrV6::new(d, t.datagram.udp.dst_port, 0, self.scope))
                }
                d => SocketAddr::new(d, t.datagram.udp.dst_port),
            },
            tos: t.datagram.tos(),
            dest_qp: wire::bth::dest_qp_of(&self.txbuf[start..]).unwrap_or(0),
            ident: 0,
            in_place: t.in_place,
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
        let mut handled = self.hand_up(max, handle);
        if handled > 0 {
            // Segments of a coalesced datagram were left from the last call.
            return Ok(handled);
        }
        let fd = self.rx.as_raw_fd();
        // Without a timeout the non-blocking recvmmsg below is the test: a receive that
        // finds datagrams makes one system call instead of poll and recvmmsg (an empty one
        // still makes one: recvmmsg's EAGAIN instead of poll's 0).
        // A signal (Ctrl-C is handled by the caller's loop) is just an early wake-up.
        if !timeout.is_zero() && !super::wait::readable(fd, timeout)? {
            return Ok(0);
        }
        let slot = self.rx_slot;
        let slots = self.rxbuf.len() / slot;
        // Without GRO a datagram is one packet: no more than `max` are taken. With GRO
        // one may hold many; what `max` leaves is handed up by the next call.
        let want = if self.gro { slots } else { max.min(slots) };
        let mut names = [zeroed_sockaddr(); RX_BATCH];
        let mut iovs = [libc::iovec {
            iov_base: std::ptr::null_mut(),
            iov_len: 0,
        }; RX_BATCH];
        // SAFETY: mmsghdr is plain data; all-zero is valid.
        let mut msgs: [libc::mmsghdr; RX_BATCH] = unsafe { std::mem::zeroed() };
        for k in 0..want {
            let buf = &mut self.rxbuf[k * slot..(k + 1) * slot];
            iovs[k].iov_base = buf.as_mut_ptr().cast();
            iovs[k].iov_len = buf.len();
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
        for k in 0..got as usize {
            let h = &msgs[k].msg_hdr;
            let len = msgs[k].msg_len as usize;
            let (tos, seg) = read_cmsgs(h);
            self.rxmeta[k] = RxMeta {
                from: from_sockaddr(&names[k]),
                len,
                seg: seg.map_or(len, usize::from),
                tos,
            };
            if seg.is_some() {
                self.gro_datagrams += 1;
            }
        }
        self.rx_have = got as usize;
        self.rx_at = (0, 0);
        handled += self.hand_up(max, handle);
        Ok(handled)
    }
}

/// What `recvmmsg` said of one receive slot: the sender, the bytes, the size of each
/// packet in it (the UDP_GRO control message's, else the whole), the TOS.
#[derive(Debug, Clone, Copy, Default)]
struct RxMeta {
    from: Option<SocketAddr>,
    len: usize,
    seg: usize,
    tos: u8,
}

/// The next packet of a received datagram of `len` bytes coalesced from packets of `seg`
/// bytes (the last may be shorter), starting at `at`: its offset and length, or `None`
/// past the end. A datagram without GRO is one packet (`seg` = `len`).
fn next_segment(len: usize, seg: usize, at: usize) -> Option<(usize, usize)> {
    if at >= len {
        return None;
    }
    let seg = if seg == 0 { len } else { seg };
    Some((at, seg.min(len - at)))
}

impl UdpBackend {
    /// Hands up to `max` received packets, from where the last call left off, to
    /// `handle`; returns how many.
    fn hand_up(&mut self, max: usize, handle: &mut dyn FnMut(Received<'_>)) -> usize {
        let mut handled = 0;
        while handled < max && self.rx_at.0 < self.rx_have {
            let (k, at) = self.rx_at;
            let m = self.rxmeta[k];
            let Some((off, n)) = next_segment(m.len, m.seg, at) else {
                self.rx_at = (k + 1, 0);
                continue;
            };
            self.rx_at = (k, off + n);
            let Some(from) = m.from else {
                continue;
            };
            let Some(mut datagram) = DatagramRepr::roce(from.ip(), self.local, from.port(), m.tos)
            else {
                continue; // a datagram of the other IP version
            };
            let base = k * self.rx_slot + off;
            let roce = &self.rxbuf[base..base + n];
            // The socket does not show the IPv4 identification, which the ICRC covers:
            // segment j of a coalesced GSO send most likely left with identification j
            // (ours do, see `set_ident`); the context takes another that fits the ICRC
            // where that guess does not.
            if let IpRepr::V4(ip) = &mut datagram.ip {
                ip.ident = (off / m.seg.max(1)) as u16;
            }
            handle(Received::Datagram {
                datagram: &datagram,
                roce,
            });
            handled += 1;
        }
        handled
    }
}

/// Accept IPv6 UDP datagrams with a zero checksum (linux/udp.h).
const UDP_NO_CHECK6_RX: i32 = 102;

/// UDP_SEGMENT and UDP_GRO (linux/udp.h), at level SOL_UDP.
const UDP_SEGMENT: i32 = 103;
const UDP_GRO: i32 = 104;

/// Attaches the TOS (IPv4) or traffic class (IPv6) byte to one message as a control
/// message in `space`, which must outlive the `sendmmsg` call, and for a GSO send the
/// segment size (UDP_SEGMENT).
fn put_cmsgs(h: &mut libc::msghdr, space: &mut [u64; 6], v4: bool, tos: u8, gso: Option<u16>) {
    let (level, kind) = if v4 {
        (libc::IPPROTO_IP, libc::IP_TOS)
    } else {
        (libc::IPPROTO_IPV6, libc::IPV6_TCLASS)
    };
    let int = std::mem::size_of::<libc::c_int>() as u32;
    let short = std::mem::size_of::<u16>() as u32;
    h.msg_control = space.as_mut_ptr().cast();
    // SAFETY: CMSG_SPACE / CMSG_LEN only compute sizes; `space` (48 bytes, 8-aligned)
    // holds two headers with an int and a u16 (24 bytes each on 64-bit Linux), so
    // CMSG_FIRSTHDR / CMSG_NXTHDR point inside it and the writes stay in it.
    unsafe {
        h.msg_controllen =
            libc::CMSG_SPACE(int) as usize + gso.map_or(0, |_| libc::CMSG_SPACE(short) as usize);
        debug_assert!(h.msg_controllen <= std::mem::size_of_val(space));
        let c = libc::CMSG_FIRSTHDR(h);
        (*c).cmsg_level = level;
        (*c).cmsg_type = kind;
        (*c).cmsg_len = libc::CMSG_LEN(int) as usize;
        std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<libc::c_int>(), i32::from(tos));
        if let Some(size) = gso {
            let c = libc::CMSG_NXTHDR(h, c);
            (*c).cmsg_level = libc::SOL_UDP;
            (*c).cmsg_type = UDP_SEGMENT;
            (*c).cmsg_len = libc::CMSG_LEN(short) as usize;
            std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<u16>(), size);
        }
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
/// IPV6_TCLASS one (0 if there is none), and the segment size of a coalesced datagram
/// from a UDP_GRO one.
fn read_cmsgs(msg: &libc::msghdr) -> (u8, Option<u16>) {
    let (mut tos, mut seg) = (0, None);
    // SAFETY: walking the control buffer with the libc CMSG macros, which stay inside
    // `msg_controllen` bytes of the buffer recvmsg filled.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(msg);
        while !c.is_null() {
            let (level, kind) = ((*c).cmsg_level, (*c).cmsg_type);
            if level == libc::IPPROTO_IP && kind == libc::IP_TOS {
                tos = *libc::CMSG_DATA(c);
            } else if level == libc::IPPROTO_IPV6 && kind == libc::IPV6_TCLASS {
                tos = (libc::CMSG_DATA(c) as *const i32).read_unaligned() as u8;
            } else if level == libc::SOL_UDP && kind == UDP_GRO {
                // The kernel writes an int holding the segment size.
                let v = (libc::CMSG_DATA(c) as *const i32).read_unaligned();
                seg = u16::try_from(v).ok().filter(|&s| s > 0);
            }
            c = libc::CMSG_NXTHDR(msg, c);
        }
    }
    (tos, seg)
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
        to(repr, len, None)
    }

    /// A datagram of `len` bytes (payload in place: `in_place`) where `repr` sends it.
    fn to(repr: &FrameRepr, len: usize, in_place: Option<InPlace>) -> Transmit {
        Transmit {
            datagram: DatagramRepr {
                ip: repr.ip,
                udp: repr.udp,
            },
            dst_mac: [0; 6],
            len,
            in_place,
        }
    }

    /// The RoCE part of `repr` around `payload`, which stays where it is (as the context's
    /// `poll_transmit_in_place` leaves a registered region's bytes), and where it goes.
    fn transmit_in_place(repr: &FrameRepr, payload: &[u8], buf: &mut [u8]) -> Transmit {
        let (len, at) = repr
            .emit_roce_around(payload.len(), buf, |state| {
                let mut h = crc32fast::Hasher::new_with_initial(state);
                h.update(payload);
                h.finalize()
            })
            .unwrap();
        // SAFETY: every test keeps `payload` alive and unchanged until it has flushed.
        let p = unsafe { InPlace::new(at, payload.as_ptr() as usize, payload.len()) };
        to(repr, len, Some(p))
    }

    /// Receives until `n` datagrams came or 5 s passed; returns (PSN, payload, the
    /// identification guessed) of each, every ICRC checked against the bytes.
    fn receive_payloads(rx: &mut UdpBackend, n: usize) -> Vec<(u32, Vec<u8>, u16)> {
        let mut got = Vec::new();
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while got.len() < n && std::time::Instant::now() < deadline {
            rx.receive(Duration::from_millis(50), 64, &mut |r| {
                let Received::Datagram { datagram, roce, .. } = r else {
                    panic!("a UDP backend hands up datagrams")
                };
                let h = datagram.header_bytes(roce.len()).unwrap();
                // Parsing checks the ICRC, here under the identification guessed.
                let p = wire::parse_datagram(datagram, &h, roce).unwrap();
                let IpRepr::V4(ip) = datagram.ip else {
                    panic!("not IPv4")
                };
                got.push((p.bth.psn(), p.payload.to_vec(), ip.ident));
            })
            .unwrap();
        }
        got
    }

    /// Datagrams whose payloads stay in the sender's memory go out as gather lists, GSO
    /// runs included (the ICRC moved to each segment's identification where it lies in
    /// the slot, behind the headers): every packet arrives whole, its ICRC right. One
    /// shorter payload (copied, as the context copies short ones) ends a run.
    #[test]
    fn payloads_in_place_go_out_as_gather_lists() {
        let (a, b) = (Ipv4Addr::new(127, 0, 81, 1), Ipv4Addr::new(127, 0, 81, 2));
        let mut tx = UdpBackend::bind(a).unwrap();
        let mut rx = UdpBackend::bind(b).unwrap();
        let payloads: Vec<Vec<u8>> = (0..40u32)
            .map(|i| (0..1026).map(|k| (k as u32 * 7 + i) as u8).collect())
            .collect();
        for (i, pl) in payloads.iter().enumerate() {
            let repr = frame(a, b, 0, i as u32);
            if i == 19 {
                tx.send_with(&mut |buf| Some(transmit(&repr, &pl[..300], buf)))
                    .unwrap();
            } else {
                tx.send_with(&mut |buf| Some(transmit_in_place(&repr, pl, buf)))
                    .unwrap();
            }
        }
        tx.flush().unwrap();
        assert_eq!(tx.send_failures, 0);
        let mut got = receive_payloads(&mut rx, 40);
        got.sort_by_key(|g| g.0);
        assert_eq!(got.len(), 40);
        for (i, (psn, bytes, _)) in got.iter().enumerate() {
            assert_eq!(*psn, i as u32);
            let want = if i == 19 {
                &payloads[i][..300]
            } else {
                &payloads[i][..]
            };
            assert_eq!(&bytes[..], want, "packet {i}");
        }
        if tx.offloads().0 && rx.offloads().1 {
            let numbered = got.iter().any(|g| g.2 != 0);
            assert!(numbered, "no GSO segment was numbered");
        }
    }

    /// What the kernel has no room for waits in the backend's own memory: a payload left
    /// in place is copied into its slot before the call returns, so the datagram that
    /// goes later carries the bytes as they were when it was built, whatever the sender's
    /// memory holds by then.
    #[test]
    fn what_waits_for_room_is_copied_into_the_slot() {
        let (a, b) = (Ipv4Addr::new(127, 0, 82, 1), Ipv4Addr::new(127, 0, 82, 2));
        let mut tx = UdpBackend::bind(a).unwrap();
        let mut rx = UdpBackend::bind(b).unwrap();
        let mut memory: Vec<u8> = (0..4096).map(|k| (k % 199) as u8).collect();
        let before = memory.clone();
        for i in 0..4 {
            let repr = frame(a, b, 0, i);
            let pl = &memory[i as usize * 1024..(i as usize + 1) * 1024];
            tx.send_with(&mut |buf| Some(transmit_in_place(&repr, pl, buf)))
                .unwrap();
        }
        // As `send_queued` does when the kernel took the first and has no room for the
        // rest: those are copied into their slots.
        tx.tx_next = 1;
        tx.gather_queued();
        assert!(tx.txq[0].in_place.is_some(), "the one sent is left alone");
        assert!(tx.txq[1..].iter().all(|q| q.in_place.is_none()));
        // The caller's round ends; the sender's memory changes; then the rest goes.
        memory.fill(0xaa);
        tx.flush().unwrap();
        let mut got = receive_payloads(&mut rx, 3);
        got.sort_by_key(|g| g.0);
        assert_eq!(got.len(), 3);
        for (psn, bytes, _) in &got {
            let i = *psn as usize;
            assert!((1..4).contains(&i), "PSN {psn}");
            assert_eq!(&bytes[..], &before[i * 1024..(i + 1) * 1024], "packet {i}");
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

    /// Receives until `n` frames came or 5 s passed, `max` per call; returns (PSN, TOS,
    /// the IPv4 identification the backend guessed) in arrival order. Each ICRC is
    /// checked under the guess: it fits the segments of our own GSO sends.
    fn receive_all(rx: &mut impl Backend, n: usize, max: usize) -> Vec<(u32, u8, u16)> {
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
                    let IpRepr::V4(ip) = p.ip().repr() else {
                        panic!("not IPv4")
                    };
                    got.push((p.bth.psn(), ip.tos, ip.ident));
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

    /// Each datagram keeps its own TOS byte inside one batch (ECT data, DSCP 48 CNPs,
    /// best effort), in order, as the receiver reads it back.
    #[test]
    fn each_datagram_carries_its_own_tos() {
        let (a, b) = (Ipv4Addr::new(127, 0, 75, 1), Ipv4Addr::new(127, 0, 75, 2));
        let mut tx = UdpBackend::bind(a).unwrap();
        let mut rx = UdpBackend::bind(b).unwrap();
        let tos = [0x02, 0xc0, 0x02, 0x00, 0xc0, 0x03, 0x02];
        send_all(&mut tx, a, b, &tos);
        let got: Vec<(u32, u8)> = receive_all(&mut rx, tos.len(), 64)
            .iter()
            .map(|g| (g.0, g.1))
            .collect();
        let want: Vec<(u32, u8)> = tos
            .iter()
            .enumerate()
            .map(|(i, &t)| (i as u32, t))
            .collect();
        assert_eq!(got, want);
    }

    /// Datagrams the receive socket drops for want of buffer space are counted (every
    /// datagram sent is either received or counted), and say so through `rx_overruns`.
    /// The kernel counts what it drops as it had it: a GSO send that reached the socket
    /// whole (loopback) is one drop for all its packets.
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
        let drops = rx.rx_overruns();
        assert!(drops > 0, "{received} of {sent} received");
        if tx.offloads().0 {
            // Runs of at most 16 packets of 4024 bytes (65507 / 4024).
            assert!(received + drops <= sent, "{received} + {drops} of {sent}");
            assert!(
                received + 16 * drops >= sent,
                "{received} + 16 x {drops} of {sent}"
            );
        } else {
            assert_eq!(received + drops, sent);
        }
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

    /// A queued datagram of `len` bytes from `sport` to `dst`, QP `qp`.
    fn q(len: usize, sport: u16, dst: u8, qp: u32) -> Queued {
        Queued {
            start: 0,
            len,
            sport,
            dst: SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, 0, 0, dst)), 4791),
            tos: 0,
            dest_qp: qp,
            ident: 0,
            in_place: None,
        }
    }

    /// Interleaved datagrams to two peers never share a GSO send: each run is one.
    #[test]
    fn runs_do_not_mix_peers() {
        let v: Vec<Queued> = (0..8)
            .map(|i| q(4112, 0xc000, 1 + (i % 2) as u8, 5))
            .collect();
        let mut at = 0;
        while at < v.len() {
            assert_eq!(gso_run(&v[at..], 64, 65507), 1, "at {at}");
            at += 1;
        }
        // Two QPs behind one address and port do not share one either.
        let w = [q(4112, 0xc000, 1, 5), q(4112, 0xc000, 1, 6)];
        assert_eq!(gso_run(&w, 64, 65507), 1);
        // Nor two TOS bytes (an ECT data packet and a DSCP 48 CNP).
        let mut x = [q(4112, 0xc000, 1, 5), q(4112, 0xc000, 1, 5)];
        x[1].tos = 0xc0;
        assert_eq!(gso_run(&x, 64, 65507), 1);
    }

    /// A run keeps the first datagram's size; only its last may be shorter, and a longer
    /// datagram, a shorter one's successor or the byte and segment limits end it.
    #[test]
    fn runs_never_mix_sizes_but_the_last() {
        let same =
            |n: usize, len: usize| -> Vec<Queued> { (0..n).map(|_| q(len, 7, 1, 5)).collect() };
        let mut v = same(5, 4112);
        v.push(q(1000, 7, 1, 5));
        v.push(q(1000, 7, 1, 5));
        assert_eq!(gso_run(&v, 64, 65507), 6, "five full and the short one");
        assert_eq!(gso_run(&v[6..], 64, 65507), 1);
        let mut w = same(3, 1000);
        w.push(q(4112, 7, 1, 5));
        assert_eq!(
            gso_run(&w, 64, 65507),
            3,
            "a longer datagram starts a new run"
        );
        // 15 packets of 4112 bytes fit in 65507, 16 do not.
        assert_eq!(gso_run(&same(40, 4112), 64, 65507), 15);
        assert_eq!(gso_run(&same(100, 100), 64, 65507), 64);
        assert_eq!(gso_run(&same(1, 100), 64, 65507), 1);
        assert_eq!(gso_run(&[], 64, 65507), 0);
    }

    /// A coalesced datagram of N full segments and a short last one splits back into
    /// its packets; one without a segment size is one packet.
    #[test]
    fn gro_datagrams_split_by_segment_size() {
        let split = |len: usize, seg: usize| {
            let mut out = Vec::new();
            let mut at = 0;
            while let Some((off, n)) = next_segment(len, seg, at) {
                out.push((off, n));
                at = off + n;
            }
            out
        };
        assert_eq!(
            split(3 * 4112 + 60, 4112),
            vec![(0, 4112), (4112, 4112), (8224, 4112), (12336, 60)]
        );
        assert_eq!(split(2 * 500, 500), vec![(0, 500), (500, 500)]);
        assert_eq!(split(700, 700), vec![(0, 700)]);
        assert_eq!(split(700, 0), vec![(0, 700)]);
        assert_eq!(split(0, 700), vec![]);
    }

    /// The control messages of a received datagram: the TOS alone (no UDP_GRO: one
    /// packet), or with UDP_GRO's segment size.
    #[test]
    fn gro_segment_size_is_read_from_the_control_message() {
        let mut space = [0u64; 6];
        // SAFETY: msghdr is plain data; all-zero is valid.
        let mut h: libc::msghdr = unsafe { std::mem::zeroed() };
        put_cmsgs(&mut h, &mut space, true, 0x02, None);
        assert_eq!(read_cmsgs(&h), (0x02, None));
        // The kernel's UDP_GRO message holds an int; UDP_SEGMENT's (what put_cmsgs
        // writes) a u16: write the int over it.
        put_cmsgs(&mut h, &mut space, true, 0xc1, Some(4112));
        // SAFETY: the second header put_cmsgs wrote, inside `space`.
        unsafe {
            let c = libc::CMSG_NXTHDR(&h, libc::CMSG_FIRSTHDR(&h));
            (*c).cmsg_type = UDP_GRO;
            (*c).cmsg_len = libc::CMSG_LEN(4) as usize;
            std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<i32>(), 4112);
        }
        assert_eq!(read_cmsgs(&h), (0xc1, Some(4112)));
    }

    /// Rewriting a queued datagram's ICRC for identification k and back: the ICRC
    /// matches the packet with that identification.
    #[test]
    fn ident_delta_moves_the_icrc_to_the_identification() {
        let (a, b) = (Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(10, 0, 0, 2));
        let repr = frame(a, b, 0, 9);
        let mut buf = [0u8; 600];
        let t = transmit(&repr, &[3; 500], &mut buf);
        let roce = &buf[..t.len];
        let body = &roce[..t.len - 4];
        let mut bases = IdentBases::default();
        for id in [1u16, 2, 7, 0x8000, 0xffff] {
            let mut d = t.datagram;
            if let IpRepr::V4(ip) = &mut d.ip {
                ip.ident = id;
            }
            let want = d.icrc(body).unwrap();
            let got = wire::icrc::stored(roce).unwrap()
                ^ ident_delta(&mut bases, body.len(), 0, id).unwrap();
            assert_eq!(got, want, "id {id}");
        }
        assert_eq!(ident_delta(&mut bases, body.len(), 5, 5), Some(0));
    }

    /// Runs to one peer leave as GSO sends and come back coalesced (loopback has both
    /// offloads): every packet is handed up alone, in order, with a good ICRC under the
    /// identification guessed for its segment (the parse in `receive_all` checks it, and
    /// a segment after the first of a run fits only its own number), and the budget
    /// holds.
    #[test]
    fn gso_sends_and_gro_receives_keep_every_packet() {
        let (a, b) = (Ipv4Addr::new(127, 0, 78, 1), Ipv4Addr::new(127, 0, 78, 2));
        let mut tx = UdpBackend::bind(a).unwrap();
        let mut rx = UdpBackend::bind(b).unwrap();
        let n = 40;
        for i in 0..n {
            let repr = frame(a, b, 0, i);
            let len = if i == 19 { 300 } else { 1000 };
            tx.send_with(&mut |buf| Some(transmit(&repr, &vec![i as u8; len], buf)))
                .unwrap();
        }
        tx.flush().unwrap();
        assert_eq!(tx.send_failures, 0);
        let mut got_numbered = false;
        for max in [7, 64] {
            if max == 64 {
                for i in 0..n {
                    let repr = frame(a, b, 0, i);
                    tx.send_with(&mut |buf| Some(transmit(&repr, &[1; 1000], buf)))
                        .unwrap();
                }
                tx.flush().unwrap();
            }
            let got = receive_all(&mut rx, n as usize, max);
            let psns: Vec<u32> = got.iter().map(|g| g.0).collect();
            assert_eq!(psns, (0..n).collect::<Vec<_>>(), "max {max}");
            got_numbered |= got.iter().any(|g| g.2 != 0);
        }
        if tx.offloads().0 && rx.offloads().1 {
            assert!(rx.gro_datagrams > 0, "nothing came coalesced");
            assert!(got_numbered, "no segment was numbered");
        }
    }

    /// Where the kernel refuses a GSO send (here: a socket without UDP checksums, EINVAL;
    /// a device without checksum offload gives EIO), the backend turns GSO off and sends
    /// the same datagrams one by one, their ICRCs back to identification 0.
    #[test]
    fn a_refused_gso_send_falls_back_to_single_datagrams() {
        let (a, b) = (Ipv4Addr::new(127, 0, 79, 1), Ipv4Addr::new(127, 0, 79, 2));
        let mut tx = UdpBackend::bind(a).unwrap();
        let mut rx = UdpBackend::bind(b).unwrap();
        if !tx.offloads().0 {
            return;
        }
        let sport = frame(a, b, 0, 0).udp.src_port;
        let fd = tx.socket_for(sport).unwrap().as_raw_fd();
        setsockopt_int(fd, libc::SOL_SOCKET, libc::SO_NO_CHECK, 1).unwrap();
        for i in 0..20 {
            let repr = frame(a, b, 0, i);
            tx.send_with(&mut |buf| Some(transmit(&repr, &[5; 700], buf)))
                .unwrap();
        }
        tx.flush().unwrap();
        assert!(!tx.offloads().0);
        assert_eq!(tx.gso_disabled_by, Some(libc::EINVAL));
        assert_eq!(tx.send_failures, 0);
        let got = receive_all(&mut rx, 20, 64);
        let psns: Vec<u32> = got.iter().map(|g| g.0).collect();
        assert_eq!(psns, (0..20).collect::<Vec<_>>());
        assert!(
            got.iter().all(|g| g.2 == 0),
            "every datagram left with identification 0, and came alone"
        );
    }

    /// Datagrams of QPs that take turns, each QP with its own source port, go with one
    /// `sendmmsg` per port, not one per datagram, and each port's datagrams arrive in
    /// the order they were queued.
    #[test]
    fn a_batch_sends_once_per_source_port() {
        let (a, b) = (Ipv4Addr::new(127, 0, 74, 1), Ipv4Addr::new(127, 0, 74, 2));
        let mut rx = UdpBackend::bind(b).unwrap();
        let mut tx = UdpBackend::bind(a).unwrap();
        for i in 0..12u32 {
            let mut repr = frame(a, b, 0, i);
            repr.udp.src_port = 0xc001 + (i % 3) as u16;
            repr.bth.dest_qp = 0x20 + i % 3;
            let queued = tx
                .send_with(&mut |buf| Some(transmit(&repr, &[i as u8; 40], buf)))
                .unwrap();
            assert!(queued);
        }
        tx.flush().unwrap();
        assert_eq!(tx.tx_calls, 3, "one sendmmsg per source port");
        let got = receive_all(&mut rx, 12, 32);
        assert_eq!(got.len(), 12);
        for port in 0..3 {
            let psns: Vec<u32> = got
                .iter()
                .map(|&(psn, _, _)| psn)
                .filter(|psn| psn % 3 == port)
                .collect();
            let want: Vec<u32> = (0..12).filter(|psn| psn % 3 == port).collect();
            assert_eq!(psns, want, "port {port}'s datagrams in order");
        }
    }
}
