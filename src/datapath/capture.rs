//! Capturing what crosses an interface with an AF_PACKET socket (both directions), so the
//! demo and the tests can check that every RoCE frame on the wire decodes with a good ICRC.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

/// A capture running on its own thread; [`Capture::stop`] returns the frames.
pub struct Capture {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<io::Result<Vec<Vec<u8>>>>,
}

/// An AF_PACKET socket bound to `iface` for frames of `ethertype` (`ETH_P_ALL`: all of
/// them). It is created with protocol 0, so nothing is queued before the bind names the
/// interface: no frame of another interface slips in. Needs CAP_NET_RAW.
pub(crate) fn packet_socket(iface: &str, ethertype: u16, nonblocking: bool) -> io::Result<OwnedFd> {
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

impl Capture {
    /// Starts capturing on `iface` inside namespace `ns` (`None`: the current one); with
    /// `outgoing_only`, only the frames this interface sends.
    /// Returns once the socket is open, so nothing sent afterwards is missed.
    pub fn start(ns: Option<String>, iface: String, outgoing_only: bool) -> io::Result<Self> {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let (ready_tx, ready_rx) = std::sync::mpsc::channel::<io::Result<()>>();
        let thread = std::thread::spawn(move || {
            let opened = ns
                .as_deref()
                .map_or(Ok(()), super::netns::enter)
                .and_then(|()| packet_socket(&iface, libc::ETH_P_ALL as u16, false));
            let fd = match opened {
                Ok(fd) => {
                    let _ = ready_tx.send(Ok(()));
                    fd
                }
                Err(e) => {
                    let _ = ready_tx.send(Err(io::Error::new(e.kind(), e.to_string())));
                    return Err(e);
                }
            };
            let mut frames = Vec::new();
            let mut buf = vec![0u8; 65536];
            loop {
                let mut pfd = libc::pollfd {
                    fd: fd.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                };
                // SAFETY: one valid pollfd.
                let r = unsafe { libc::poll(&mut pfd, 1, 50) };
                if r > 0 {
                    // SAFETY: sockaddr_ll is plain data; all-zero is valid.
                    let mut from: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
                    let mut flen = std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t;
                    // SAFETY: `buf` and `from` are writable for the lengths passed.
                    let n = unsafe {
                        libc::recvfrom(
                            fd.as_raw_fd(),
                            buf.as_mut_ptr().cast(),
                            buf.len(),
                            libc::MSG_DONTWAIT,
                            (&mut from as *mut libc::sockaddr_ll).cast(),
                            &mut flen,
                        )
                    };
                    if n > 0 {
                        if !outgoing_only || from.sll_pkttype == libc::PACKET_OUTGOING {
                            frames.push(buf[..n as usize].to_vec());
                        }
                        continue;
                    }
                }
                if flag.load(Ordering::SeqCst) {
                    return Ok(frames);
                }
            }
        });
        ready_rx
            .recv()
            .map_err(|_| io::Error::other("capture thread ended"))??;
        Ok(Self { stop, thread })
    }

    /// Stops and returns every frame seen.
    pub fn stop(self) -> io::Result<Vec<Vec<u8>>> {
        self.stop.store(true, Ordering::SeqCst);
        self.thread
            .join()
            .map_err(|_| io::Error::other("capture thread panicked"))?
    }
}
