//! AF_PACKET sockets: one bound to an interface for one ethertype (or all of them), for
//! the neighbour code's ARP and NDP frames and for capturing what crosses an interface.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

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
