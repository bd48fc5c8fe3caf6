//! The UDP socket backend: RoCEv2 over an ordinary UDP socket on port 4791.
//!
//! The kernel builds Ethernet, IP and UDP, so uroce must know what it will put in the
//! fields the ICRC covers: the UDP source port (one socket per QP source port, so ECMP
//! entropy is kept), the IP identification (0: Linux sends ID 0 on unconnected sockets
//! with "don't fragment" set, which uroce asks for with IP_PMTUDISC_DO), DF, and the
//! lengths. On receive the socket gives the UDP payload and the source address; the
//! IPv4 and UDP headers are rebuilt the same way so the context can verify the ICRC.
//! The ECN bits of received packets are read with IP_RECVTOS, so CE marks reach the
//! notification point.
//!
//! IPv4 only. A peer whose IP identification is not 0 (rdma_rxe numbers its packets)
//! fails the ICRC check here: that is what the AF_XDP backend is for.

use std::collections::HashMap;
use std::io;
use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::os::fd::AsRawFd;
use std::time::Duration;

use super::Backend;
use crate::wire::{self, EthernetRepr, IpRepr, Ipv4Repr, UdpRepr};

/// RoCEv2 over UDP sockets bound to one local IPv4 address.
pub struct UdpBackend {
    local: Ipv4Addr,
    /// Drop this share of received datagrams (seeded), to test recovery where `tc netem`
    /// is not available.
    drop: f64,
    rng: crate::sim::Rng,
    /// Datagrams dropped on purpose.
    pub dropped: u64,
    rx: UdpSocket,
    tx: HashMap<u16, UdpSocket>,
    tos: u8,
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
    /// Binds port 4791 on `local`. `tos` is the IP TOS byte sent (DSCP and ECN).
    pub fn bind(local: Ipv4Addr) -> io::Result<Self> {
        let rx = UdpSocket::bind(SocketAddrV4::new(local, wire::ROCEV2_UDP_PORT))
            .map_err(|e| io::Error::new(e.kind(), format!("binding UDP {local}:4791: {e}")))?;
        setsockopt_int(rx.as_raw_fd(), libc::IPPROTO_IP, libc::IP_RECVTOS, 1)?;
        // A deep receive buffer: bursts of a full send window must not overflow it (as
        // root the limit in net.core.rmem_max does not apply).
        let big = 16 << 20;
        if setsockopt_int(rx.as_raw_fd(), libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, big).is_err() {
            let _ = setsockopt_int(rx.as_raw_fd(), libc::SOL_SOCKET, libc::SO_RCVBUF, big);
        }
        Ok(Self {
            local,
            drop: 0.0,
            rng: crate::sim::Rng::new(u64::from(u32::from(local))),
            dropped: 0,
            rx,
            tx: HashMap::new(),
            tos: 0,
        })
    }

    /// Drops a share `p` of received datagrams, as a lossy path would.
    pub fn set_drop(&mut self, p: f64) {
        self.drop = p;
    }

    fn socket_for(&mut self, sport: u16) -> io::Result<&UdpSocket> {
        if !self.tx.contains_key(&sport) {
            let s = if sport == wire::ROCEV2_UDP_PORT {
                self.rx.try_clone()?
            } else {
                UdpSocket::bind(SocketAddrV4::new(self.local, sport))?
            };
            let fd = s.as_raw_fd();
            // DF set and IP ID 0: the ICRC covers both.
            setsockopt_int(
                fd,
                libc::IPPROTO_IP,
                libc::IP_MTU_DISCOVER,
                libc::IP_PMTUDISC_DO,
            )?;
            setsockopt_int(fd, libc::IPPROTO_IP, libc::IP_TOS, i32::from(self.tos))?;
            self.tx.insert(sport, s);
        }
        self.tx
            .get(&sport)
            .ok_or_else(|| io::Error::other("socket table"))
    }
}

impl Backend for UdpBackend {
    fn send(&mut self, frame: &[u8]) -> io::Result<()> {
        let p = wire::parse_headers(frame)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
        let IpRepr::V4(ip) = p.ip else {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "the UDP backend is IPv4 only",
            ));
        };
        if ip.tos != self.tos {
            self.tos = ip.tos;
            for s in self.tx.values() {
                setsockopt_int(
                    s.as_raw_fd(),
                    libc::IPPROTO_IP,
                    libc::IP_TOS,
                    i32::from(ip.tos),
                )?;
            }
        }
        let l = p.frame_repr().layout(p.payload.len());
        let udp_payload = &frame[l.bth..frame.len() - p.trailer.len()];
        let sock = self.socket_for(p.udp.src_port)?;
        sock.send_to(udp_payload, SocketAddrV4::new(ip.dst, p.udp.dst_port))?;
        Ok(())
    }

    fn recv(&mut self, buf: &mut [u8], timeout: Duration) -> io::Result<Option<usize>> {
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
                Ok(None)
            } else {
                Err(e)
            };
        }
        if r == 0 {
            return Ok(None);
        }
        let mut data = [0u8; 4096 + 128];
        let mut from: libc::sockaddr_in = unsafe_zeroed_sockaddr();
        let mut cmsg = [0u64; 16];
        let mut iov = libc::iovec {
            iov_base: data.as_mut_ptr().cast(),
            iov_len: data.len(),
        };
        // SAFETY: msghdr is plain data; every pointer in it refers to a live local buffer
        // of the length given next to it.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_name = (&mut from as *mut libc::sockaddr_in).cast();
        msg.msg_namelen = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = cmsg.as_mut_ptr().cast();
        msg.msg_controllen = std::mem::size_of_val(&cmsg);
        // SAFETY: `msg` is fully initialised above.
        let n = unsafe { libc::recvmsg(fd, &mut msg, libc::MSG_DONTWAIT) };
        if n < 0 {
            let e = io::Error::last_os_error();
            return if e.kind() == io::ErrorKind::WouldBlock {
                Ok(None)
            } else {
                Err(e)
            };
        }
        let n = n as usize;
        if self.rng.chance(self.drop) {
            self.dropped += 1;
            return Ok(None);
        }
        let tos = read_tos(&msg);
        let src = Ipv4Addr::from(u32::from_be(from.sin_addr.s_addr));
        let sport = u16::from_be(from.sin_port);
        // Rebuild Ethernet / IPv4 / UDP as they were on the wire, then the transport bytes.
        let mut ip = Ipv4Repr::new(src, self.local, tos);
        ip.ident = 0;
        let eth = EthernetRepr {
            dst: [0; 6],
            src: [0; 6],
            vlan: None,
            ethertype: 0x0800,
        };
        let hdr = 14 + 20 + 8;
        if buf.len() < hdr + n {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "receive buffer too small",
            ));
        }
        eth.emit(buf)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
        ip.emit(&mut buf[14..], 8 + n)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
        UdpRepr {
            src_port: sport,
            dst_port: wire::ROCEV2_UDP_PORT,
            checksum: 0,
        }
        .emit(&mut buf[34..], n)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
        buf[hdr..hdr + n].copy_from_slice(&data[..n]);
        Ok(Some(hdr + n))
    }
}

fn unsafe_zeroed_sockaddr() -> libc::sockaddr_in {
    // SAFETY: sockaddr_in is plain old data; all-zero is a valid value.
    unsafe { std::mem::zeroed() }
}

/// The TOS byte from an IP_TOS control message, 0 if there is none.
fn read_tos(msg: &libc::msghdr) -> u8 {
    // SAFETY: walking the control buffer with the libc CMSG macros, which stay inside
    // `msg_controllen` bytes of the buffer recvmsg filled.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::IPPROTO_IP && (*c).cmsg_type == libc::IP_TOS {
                return *libc::CMSG_DATA(c);
            }
            c = libc::CMSG_NXTHDR(msg, c);
        }
    }
    0
}
