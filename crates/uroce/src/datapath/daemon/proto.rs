//! The control messages between a process and `uroce daemon`, on a `SOCK_SEQPACKET` Unix
//! socket: fixed 40-byte requests and replies, little-endian, one per message; the
//! daemon's welcome carries the shared region and the two doorbells as `SCM_RIGHTS`.
//!
//! The socket lives at [`socket_path`]: one per interface and network namespace (two
//! namespaces may each have an `eth0`), under `/run/uroce` for the system's daemon and
//! under the user's runtime directory for a user's own (UDP backend).

use std::io;
use std::net::{IpAddr, Ipv6Addr};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};

/// Bumped when the messages or the shared region's layout change (2: the welcome says
/// whether the daemon serves the interface's link-local address; 3: it may hand the
/// process a socket of its own, the fast path; 4: a datagram's IPv4 identification in
/// the rings is the receiving backend's guess, which the process's context checks).
pub const VERSION: u32 = 4;
/// Bytes of every message.
pub const MSG_LEN: usize = 40;

/// What a process asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Request {
    /// The first message: the version the process speaks.
    Hello {
        /// [`VERSION`].
        version: u32,
    },
    /// `count` QPNs of its own, contiguous (rounded up to whole blocks of
    /// [`QPN_BLOCK`]).
    ClaimQpns {
        /// How many.
        count: u32,
    },
    /// Connection requests (CM REQ, SIDR REQ) for `service_id` to `ip` (the unspecified
    /// address: any of the interface's) are for this process; `on: false` stops it.
    Listen {
        /// The CM service ID (RDMA CM: port space and port).
        service_id: u64,
        /// The address listened on.
        ip: IpAddr,
        /// Start or stop.
        on: bool,
    },
}

/// QPNs are handed out and switched in blocks of this many.
pub const QPN_BLOCK: u32 = 64;

/// What the daemon answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reply {
    /// To `Hello`: who the process is to the daemon and how the datapath behaves; the
    /// message carries three descriptors: the region, the doorbell the daemon waits on,
    /// the doorbell the process waits on.
    Welcome {
        /// The daemon's number for this process.
        client: u32,
        /// Whether frames need next-hop MAC addresses (the daemon runs AF_XDP).
        needs_link_addresses: bool,
        /// Whether the daemon sends from and receives at the interface's IPv6 link-local
        /// address ([`crate::datapath::Backend::serves_link_local`]: AF_XDP, or UDP with
        /// a socket bound to it).
        serves_link_local: bool,
        /// Bytes the receive path holds before it drops
        /// ([`crate::datapath::Backend::rx_capacity`]).
        rx_capacity: u64,
        /// The fast path over UDP: the class (1 to 63) of the socket of its own the
        /// message carries as a fourth descriptor, one of the daemon's reuseport group on
        /// `fast_addr` (`udp::bind_classes`), to which the kernel steers the datagrams
        /// for the QPNs of that class, the ones this process is given; 0: none, every
        /// packet goes through the rings.
        fast_class: u8,
        /// The address the fast path's socket is bound to: packets from it, except QP 1's
        /// (the daemon switches connection management), go out through the socket.
        fast_addr: IpAddr,
        /// The daemon's network namespace ([`netns_id`]): a process in another one (it
        /// reached the daemon's socket by its path) receives on the fast path's socket
        /// but sends through the rings, since the sockets it would send from are of its
        /// own namespace.
        fast_netns: u64,
    },
    /// To `ClaimQpns`.
    Qpns {
        /// The first QPN.
        first: u32,
        /// How many.
        count: u32,
    },
    /// Done.
    Ok,
    /// Refused, with an errno (EADDRINUSE: listened on by another process; ENOSPC: no
    /// QPNs left; EPROTO: a message the daemon does not understand).
    Err(i32),
}

impl Request {
    /// The message's bytes.
    pub fn encode(&self) -> [u8; MSG_LEN] {
        let mut b = [0u8; MSG_LEN];
        match *self {
            Self::Hello { version } => {
                b[0] = 1;
                b[4..8].copy_from_slice(&version.to_le_bytes());
            }
            Self::ClaimQpns { count } => {
                b[0] = 2;
                b[4..8].copy_from_slice(&count.to_le_bytes());
            }
            Self::Listen { service_id, ip, on } => {
                b[0] = 3;
                b[1] = on as u8;
                b[8..16].copy_from_slice(&service_id.to_le_bytes());
                b[16..32].copy_from_slice(&ipv6_of(ip).octets());
            }
        }
        b
    }

    /// Reads a message; `None` when it is not one.
    pub fn decode(b: &[u8]) -> Option<Self> {
        if b.len() != MSG_LEN {
            return None;
        }
        let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().expect("4"));
        Some(match b[0] {
            1 => Self::Hello { version: u32_at(4) },
            2 => Self::ClaimQpns { count: u32_at(4) },
            3 if b[1] <= 1 => Self::Listen {
                on: b[1] == 1,
                service_id: u64::from_le_bytes(b[8..16].try_into().expect("8")),
                ip: ip_of(b[16..32].try_into().expect("16")),
            },
            _ => return None,
        })
    }
}

impl Reply {
    /// The message's bytes.
    pub fn encode(&self) -> [u8; MSG_LEN] {
        let mut b = [0u8; MSG_LEN];
        match *self {
            Self::Welcome {
                client,
                needs_link_addresses,
                serves_link_local,
                rx_capacity,
                fast_class,
                fast_addr,
                fast_netns,
            } => {
                b[0] = 1;
                b[1] = needs_link_addresses as u8;
                b[2] = serves_link_local as u8;
                b[3] = fast_class;
                b[4..8].copy_from_slice(&client.to_le_bytes());
                b[8..16].copy_from_slice(&rx_capacity.to_le_bytes());
                b[16..32].copy_from_slice(&ipv6_of(fast_addr).octets());
                b[32..40].copy_from_slice(&fast_netns.to_le_bytes());
            }
            Self::Qpns { first, count } => {
                b[0] = 2;
                b[4..8].copy_from_slice(&first.to_le_bytes());
                b[8..12].copy_from_slice(&count.to_le_bytes());
            }
            Self::Ok => b[0] = 3,
            Self::Err(errno) => {
                b[0] = 4;
                b[4..8].copy_from_slice(&errno.to_le_bytes());
            }
        }
        b
    }

    /// Reads a message; `None` when it is not one.
    pub fn decode(b: &[u8]) -> Option<Self> {
        if b.len() != MSG_LEN {
            return None;
        }
        let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().expect("4"));
        Some(match b[0] {
            1 => Self::Welcome {
                needs_link_addresses: b[1] != 0,
                serves_link_local: b[2] != 0,
                client: u32_at(4),
                rx_capacity: u64::from_le_bytes(b[8..16].try_into().expect("8")),
                fast_class: b[3],
                fast_addr: ip_of(b[16..32].try_into().expect("16")),
                fast_netns: u64::from_le_bytes(b[32..40].try_into().expect("8")),
            },
            2 => Self::Qpns {
                first: u32_at(4),
                count: u32_at(8),
            },
            3 => Self::Ok,
            4 => Self::Err(u32_at(4) as i32),
            _ => return None,
        })
    }
}

fn ipv6_of(ip: IpAddr) -> Ipv6Addr {
    match ip {
        IpAddr::V4(a) if a.is_unspecified() => Ipv6Addr::UNSPECIFIED,
        IpAddr::V4(a) => a.to_ipv6_mapped(),
        IpAddr::V6(a) => a,
    }
}

fn ip_of(b: [u8; 16]) -> IpAddr {
    let a = Ipv6Addr::from(b);
    match a.to_ipv4_mapped() {
        Some(v4) => IpAddr::V4(v4),
        None => IpAddr::V6(a),
    }
}

/// The inode of this process's network namespace: interfaces are named per namespace, so
/// the socket's path says which namespace's `eth0` it serves.
pub fn netns_id() -> io::Result<u64> {
    use std::os::unix::fs::MetadataExt;
    Ok(std::fs::metadata("/proc/self/ns/net")?.ino())
}

/// Where the daemon for `iface` in this network namespace listens: the system's
/// (`system: true`, `/run/uroce/net-NS/IFACE.sock`) or this user's own
/// (`$XDG_RUNTIME_DIR/uroce/...`, else `/tmp/uroce-UID/...`).
pub fn socket_path(iface: &str, system: bool) -> io::Result<PathBuf> {
    let ns = netns_id()?;
    let dir = if system {
        PathBuf::from("/run/uroce")
    } else {
        match std::env::var_os("XDG_RUNTIME_DIR") {
            Some(d) if Path::new(&d).is_absolute() => PathBuf::from(d).join("uroce"),
            // SAFETY: getuid cannot fail.
            _ => PathBuf::from(format!("/tmp/uroce-{}", unsafe { libc::getuid() })),
        }
    };
    Ok(dir.join(format!("net-{ns}")).join(format!("{iface}.sock")))
}

/// The paths a process tries, in order: the system's daemon, then its user's own (the
/// same for root).
pub fn socket_paths(iface: &str) -> io::Result<Vec<PathBuf>> {
    let mut v = vec![socket_path(iface, true)?];
    let user = socket_path(iface, false)?;
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } != 0 && !v.contains(&user) {
        v.push(user);
    }
    Ok(v)
}

fn cvt(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

fn sockaddr_un(path: &Path) -> io::Result<(libc::sockaddr_un, libc::socklen_t)> {
    use std::os::unix::ffi::OsStrExt;
    // SAFETY: sockaddr_un is plain data; zeroed is a valid value.
    let mut a: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    a.sun_family = libc::AF_UNIX as libc::sa_family_t;
    let bytes = path.as_os_str().as_bytes();
    if bytes.len() >= a.sun_path.len() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("socket path too long: {}", path.display()),
        ));
    }
    for (d, s) in a.sun_path.iter_mut().zip(bytes) {
        *d = *s as libc::c_char;
    }
    let len = std::mem::size_of::<libc::sa_family_t>() + bytes.len() + 1;
    Ok((a, len as libc::socklen_t))
}

fn seqpacket() -> io::Result<OwnedFd> {
    // SAFETY: socket(2) with constant arguments; the result is checked.
    let fd =
        cvt(unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC, 0) })?;
    // SAFETY: a new descriptor we own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Connects to a daemon's socket.
pub fn connect(path: &Path) -> io::Result<OwnedFd> {
    let fd = seqpacket()?;
    let (a, len) = sockaddr_un(path)?;
    // SAFETY: a valid sockaddr_un of `len` bytes.
    cvt(unsafe { libc::connect(fd.as_raw_fd(), (&a as *const libc::sockaddr_un).cast(), len) })?;
    Ok(fd)
}

/// Binds and listens on `path` (the daemon).
pub fn listen(path: &Path) -> io::Result<OwnedFd> {
    let fd = seqpacket()?;
    let (a, len) = sockaddr_un(path)?;
    // SAFETY: a valid sockaddr_un of `len` bytes.
    cvt(unsafe { libc::bind(fd.as_raw_fd(), (&a as *const libc::sockaddr_un).cast(), len) })?;
    // SAFETY: a bound socket we own.
    cvt(unsafe { libc::listen(fd.as_raw_fd(), 64) })?;
    Ok(fd)
}

/// Accepts one connection, non-blocking and close-on-exec.
pub fn accept(listener: RawFd) -> io::Result<OwnedFd> {
    // SAFETY: accept4 without an address; the result is checked.
    let fd = cvt(unsafe {
        libc::accept4(
            listener,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK,
        )
    })?;
    // SAFETY: a new descriptor we own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// The uid, gid and pid of the process at the other end (`SO_PEERCRED`: what the kernel
/// recorded at connect, which the peer cannot forge).
pub fn peer_cred(fd: RawFd) -> io::Result<libc::ucred> {
    // SAFETY: ucred is plain data.
    let mut c: libc::ucred = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: a buffer of `len` bytes for SO_PEERCRED.
    cvt(unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut c as *mut libc::ucred).cast(),
            &mut len,
        )
    })?;
    Ok(c)
}

/// Sends one message with `fds` attached.
pub fn send(fd: RawFd, msg: &[u8; MSG_LEN], fds: &[RawFd]) -> io::Result<()> {
    let mut iov = libc::iovec {
        iov_base: msg.as_ptr() as *mut libc::c_void,
        iov_len: msg.len(),
    };
    let mut cbuf = [0u64; 8];
    // SAFETY: msghdr is plain data.
    let mut m: libc::msghdr = unsafe { std::mem::zeroed() };
    m.msg_iov = &mut iov;
    m.msg_iovlen = 1;
    if !fds.is_empty() {
        let bytes = std::mem::size_of_val(fds);
        // SAFETY: CMSG_SPACE is a pure computation.
        let space = unsafe { libc::CMSG_SPACE(bytes as u32) } as usize;
        assert!(
            space <= std::mem::size_of_val(&cbuf),
            "too many descriptors"
        );
        m.msg_control = cbuf.as_mut_ptr().cast();
        m.msg_controllen = space;
        // SAFETY: the control buffer holds one header of `space` bytes (checked above),
        // so CMSG_FIRSTHDR is non-null and CMSG_DATA has room for `bytes`.
        unsafe {
            let c = libc::CMSG_FIRSTHDR(&m);
            (*c).cmsg_level = libc::SOL_SOCKET;
            (*c).cmsg_type = libc::SCM_RIGHTS;
            (*c).cmsg_len = libc::CMSG_LEN(bytes as u32) as usize;
            std::ptr::copy_nonoverlapping(fds.as_ptr(), libc::CMSG_DATA(c).cast(), fds.len());
        }
    }
    // SAFETY: a msghdr whose buffers live across the call.
    let n = unsafe { libc::sendmsg(fd, &m, libc::MSG_NOSIGNAL) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Receives one message and up to 4 descriptors; `Ok(None)` at end of stream.
pub fn recv(fd: RawFd, flags: libc::c_int) -> io::Result<Option<(Vec<u8>, Vec<OwnedFd>)>> {
    let mut buf = [0u8; 64];
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    let mut cbuf = [0u64; 8];
    // SAFETY: msghdr is plain data.
    let mut m: libc::msghdr = unsafe { std::mem::zeroed() };
    m.msg_iov = &mut iov;
    m.msg_iovlen = 1;
    m.msg_control = cbuf.as_mut_ptr().cast();
    m.msg_controllen = std::mem::size_of_val(&cbuf);
    // SAFETY: a msghdr whose buffers live across the call.
    let n = unsafe { libc::recvmsg(fd, &mut m, flags | libc::MSG_CMSG_CLOEXEC) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut fds = Vec::new();
    // SAFETY: walking the control messages the kernel wrote into `cbuf`, within
    // msg_controllen; SCM_RIGHTS data are descriptors now ours.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&m);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_RIGHTS {
                let data = libc::CMSG_DATA(c).cast::<RawFd>();
                let count = ((*c).cmsg_len - libc::CMSG_LEN(0) as usize) / 4;
                for i in 0..count {
                    fds.push(OwnedFd::from_raw_fd(std::ptr::read_unaligned(data.add(i))));
                }
            }
            c = libc::CMSG_NXTHDR(&m, c);
        }
    }
    if n == 0 {
        return Ok(None);
    }
    Ok(Some((buf[..n as usize].to_vec(), fds)))
}

/// A non-blocking, close-on-exec eventfd: a doorbell.
pub fn eventfd() -> io::Result<OwnedFd> {
    // SAFETY: eventfd(2) with constant flags; the result is checked.
    let fd = cvt(unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) })?;
    // SAFETY: a new descriptor we own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Rings a doorbell.
pub fn ring(fd: RawFd) {
    let one = 1u64;
    // SAFETY: writing 8 bytes from a local to an eventfd; a full counter (EAGAIN) already
    // wakes the sleeper.
    unsafe { libc::write(fd, (&one as *const u64).cast(), 8) };
}

/// Empties a doorbell; how many rings it held (0 when none).
pub fn drain(fd: RawFd) -> u64 {
    let mut v = 0u64;
    // SAFETY: reading 8 bytes into a local from a non-blocking eventfd.
    let n = unsafe { libc::read(fd, (&mut v as *mut u64).cast(), 8) };
    if n == 8 {
        v
    } else {
        0
    }
}

/// Waits up to `timeout` for `fd` to become readable; true when it did.
pub fn wait_readable(fd: RawFd, timeout: std::time::Duration) -> bool {
    crate::datapath::wait::readable(fd, timeout).unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_round_trip() {
        for r in [
            Request::Hello { version: VERSION },
            Request::ClaimQpns { count: 100 },
            Request::Listen {
                service_id: 0x0106_0000_0000_1c06,
                ip: "10.1.2.3".parse().unwrap(),
                on: true,
            },
            Request::Listen {
                service_id: 1,
                ip: "0.0.0.0".parse().unwrap(),
                on: false,
            },
            Request::Listen {
                service_id: 1,
                ip: "fe80::1".parse().unwrap(),
                on: true,
            },
        ] {
            let back = Request::decode(&r.encode()).unwrap();
            match (r, back) {
                // The unspecified IPv4 address travels as ::, which stands for any.
                (Request::Listen { ip, .. }, Request::Listen { ip: b, .. })
                    if ip.is_unspecified() =>
                {
                    assert!(b.is_unspecified())
                }
                _ => assert_eq!(back, r),
            }
        }
        for r in [
            Reply::Welcome {
                client: 7,
                needs_link_addresses: true,
                serves_link_local: true,
                rx_capacity: 1 << 22,
                fast_class: 0,
                fast_addr: IpAddr::V6(Ipv6Addr::UNSPECIFIED),
                fast_netns: 0,
            },
            Reply::Welcome {
                client: 8,
                needs_link_addresses: false,
                serves_link_local: true,
                rx_capacity: 1 << 20,
                fast_class: 5,
                fast_addr: "10.0.0.1".parse().unwrap(),
                fast_netns: 4026531840,
            },
            Reply::Qpns {
                first: 0x1000,
                count: 64,
            },
            Reply::Ok,
            Reply::Err(libc::EADDRINUSE),
        ] {
            assert_eq!(Reply::decode(&r.encode()), Some(r));
        }
        assert_eq!(Request::decode(&[9u8; MSG_LEN]), None);
        assert_eq!(
            Request::decode(&[1u8; 5]),
            None,
            "a short message is refused"
        );
    }

    #[test]
    fn descriptors_travel_with_a_message() {
        let dir = std::env::temp_dir().join(format!("uroce-proto-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("s.sock");
        let _ = std::fs::remove_file(&path);
        let l = listen(&path).unwrap();
        let c = connect(&path).unwrap();
        let s = accept(l.as_raw_fd()).unwrap();
        let bell = eventfd().unwrap();
        send(
            c.as_raw_fd(),
            &Request::ClaimQpns { count: 3 }.encode(),
            &[bell.as_raw_fd()],
        )
        .unwrap();
        assert!(wait_readable(
            s.as_raw_fd(),
            std::time::Duration::from_secs(5)
        ));
        let (msg, fds) = recv(s.as_raw_fd(), 0).unwrap().unwrap();
        assert_eq!(Request::decode(&msg), Some(Request::ClaimQpns { count: 3 }));
        assert_eq!(fds.len(), 1);
        ring(fds[0].as_raw_fd());
        assert!(wait_readable(bell.as_raw_fd(), std::time::Duration::ZERO));
        let me = peer_cred(s.as_raw_fd()).unwrap();
        assert_eq!(me.pid as u32, std::process::id());
        drop(c);
        assert!(recv(s.as_raw_fd(), 0).unwrap().is_none(), "end of stream");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
