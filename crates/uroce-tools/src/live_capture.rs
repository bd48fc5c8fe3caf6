//! Capturing what crosses an interface (both directions) on a thread of its own, so the
//! demo and the tests can check that every RoCE frame on the wire decodes with a good ICRC.

use std::io;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use uroce::net::packet_socket::packet_socket;

/// A capture running on its own thread; [`Capture::stop`] returns the frames.
pub struct Capture {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<io::Result<Vec<Vec<u8>>>>,
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
                .map_or(Ok(()), crate::netns::enter)
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
