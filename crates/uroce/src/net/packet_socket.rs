//! AF_PACKET sockets (packet(7)): one bound to an interface for one ethertype (or all of
//! them), for capturing what crosses an interface, and [`PacketSocket`], the one the
//! neighbour resolver reads ARP and NDP frames from.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

use super::ndp::is_neighbour_frame;
use crate::wire::ethernet::ETHERTYPE_IPV6;

/// An AF_PACKET socket bound to `iface` for frames of `ethertype` (`ETH_P_ALL`: all of
/// them). It is created with protocol 0, so nothing is queued before the bind names the
/// interface: no frame of another interface slips in. Needs CAP_NET_RAW.
pub fn packet_socket(iface: &str, ethertype: u16, nonblocking: bool) -> io::Result<OwnedFd> {
    let name = CString::new(iface)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "interface name"))?;
    // SAFETY: a valid C string.
    let ifindex = unsafe { libc::if_nametoindex(name.as_ptr()) };
    if ifindex == 0 {
        return Err(io::Error::last_os_error());
    }
    let flags = if nonblocking { libc::SOCK_NONBLOCK } else { 0 };
    // SAFETY: plain socket call; the fd is owned right after.
    let fd = unsafe {
        libc::socket(
            libc::AF_PACKET,
            libc::SOCK_RAW | libc::SOCK_CLOEXEC | flags,
            0,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is a fresh socket nobody else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: sockaddr_ll is plain data; all-zero is valid before we fill it.
    let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    sll.sll_family = libc::AF_PACKET as u16;
    sll.sll_protocol = ethertype.to_be();
    sll.sll_ifindex = ifindex as i32;
    // SAFETY: `sll` is a valid sockaddr_ll of the size given.
    let r = unsafe {
        libc::bind(
            fd.as_raw_fd(),
            (&sll as *const libc::sockaddr_ll).cast(),
            std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(fd)
}

/// A non-blocking AF_PACKET socket bound to one interface and one ethertype
/// ([`libc::ETH_P_ARP`] or [`libc::ETH_P_IPV6`]), for the ARP and neighbour discovery
/// frames the XDP program passes on to the kernel. Needs CAP_NET_RAW.
#[derive(Debug)]
pub struct PacketSocket {
    fd: OwnedFd,
    protocol: u16,
}

impl PacketSocket {
    /// Opens the socket on `iface` for frames of `ethertype`.
    pub fn open(iface: &str, ethertype: u16) -> io::Result<Self> {
        let fd = packet_socket(iface, ethertype, true)?;
        Ok(Self {
            fd,
            protocol: ethertype,
        })
    }

    /// Reads the next received frame into `buf` without blocking; `None` when there is
    /// none. Frames this host sent are skipped, and on an IPv6 socket everything but
    /// Neighbor Solicitations and Advertisements (filtered here, in user space).
    pub fn recv(&self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        loop {
            // SAFETY: sockaddr_ll is plain data; all-zero is valid.
            let mut from: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
            let mut flen = std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t;
            // SAFETY: `buf` and `from` are writable for the lengths passed.
            let n = unsafe {
                libc::recvfrom(
                    self.fd.as_raw_fd(),
                    buf.as_mut_ptr().cast(),
                    buf.len(),
                    libc::MSG_DONTWAIT,
                    (&mut from as *mut libc::sockaddr_ll).cast(),
                    &mut flen,
                )
            };
            if n < 0 {
                let e = io::Error::last_os_error();
                return match e.kind() {
                    io::ErrorKind::WouldBlock => Ok(None),
                    io::ErrorKind::Interrupted => continue,
                    _ => Err(e),
                };
            }
            let n = (n as usize).min(buf.len());
            if from.sll_pkttype == libc::PACKET_OUTGOING {
                continue;
            }
            if self.protocol == ETHERTYPE_IPV6 && !is_neighbour_frame(&buf[..n]) {
                continue;
            }
            return Ok(Some(n));
        }
    }

    /// Sends one whole Ethernet frame out of the interface.
    pub fn send(&self, frame: &[u8]) -> io::Result<()> {
        loop {
            // SAFETY: `frame` is readable for its length; the socket is bound, so the
            // kernel knows the interface.
            let n =
                unsafe { libc::send(self.fd.as_raw_fd(), frame.as_ptr().cast(), frame.len(), 0) };
            if n >= 0 {
                return Ok(());
            }
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
    }

    /// Waits up to `timeout` for a frame to read; true when one is there.
    pub fn wait(&self, timeout: Duration) -> io::Result<bool> {
        crate::datapath::wait::readable(self.fd.as_raw_fd(), timeout)
    }
}

impl AsRawFd for PacketSocket {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}
