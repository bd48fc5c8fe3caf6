//! Watching one link's state: a `NETLINK_ROUTE` socket subscribed to the `RTNLGRP_LINK`
//! multicast group (rtnetlink(7)), on which the kernel sends an `RTM_NEWLINK` each time a
//! link changes. What turns into ibverbs' port events (IBV_EVENT_PORT_ACTIVE,
//! IBV_EVENT_PORT_ERR): a RoCE port is active while its Ethernet link can carry frames.
//!
//! The socket is non-blocking and read only when asked ([`LinkWatch::poll`]), so a caller
//! decides how often the check costs its system call. If the kernel's notifications overran
//! the socket's buffer (ENOBUFS), the state is asked again with `RTM_GETLINK`.

use std::io;

use netlink_packet_route::link::{LinkFlags, LinkMessage};
use netlink_packet_route::RouteNetlinkMessage;
use netlink_sys::{protocols::NETLINK_ROUTE, Socket, SocketAddr};

use super::netlink::{decode, request, Kind};
use super::NetError;

/// `RTNLGRP_LINK` (linux/rtnetlink.h): link changes.
const RTNLGRP_LINK: u32 = 1;

/// Whether a link can carry frames: administratively up (`IFF_UP`) and operationally
/// running (`IFF_RUNNING`, which the kernel sets when the operational state is up or
/// unknown: carrier present, a veth's peer up).
pub fn link_usable(m: &LinkMessage) -> bool {
    m.header.flags.contains(LinkFlags::Up | LinkFlags::Running)
}

/// One link's state as the kernel reports it, and its changes.
pub struct LinkWatch {
    sock: Socket,
    ifindex: u32,
    up: bool,
    buf: Vec<u8>,
}

impl LinkWatch {
    /// Watches the link with index `ifindex` (in the calling thread's network namespace):
    /// subscribes first, then asks the current state, so no change in between is missed.
    pub fn new(ifindex: u32) -> Result<Self, NetError> {
        let op = "RTNLGRP_LINK";
        let io = |source: io::Error| NetError::Netlink { op, source };
        let mut sock = Socket::new(NETLINK_ROUTE).map_err(io)?;
        sock.bind(&SocketAddr::new(0, 0)).map_err(io)?;
        sock.add_membership(RTNLGRP_LINK).map_err(io)?;
        sock.set_non_blocking(true).map_err(io)?;
        let mut w = Self {
            sock,
            ifindex,
            up: false,
            buf: vec![0; 32 * 1024],
        };
        w.up = w.ask()?;
        Ok(w)
    }

    /// The link's state now, from an `RTM_GETLINK`.
    fn ask(&self) -> Result<bool, NetError> {
        let mut m = LinkMessage::default();
        m.header.index = self.ifindex;
        let answer = request(RouteNetlinkMessage::GetLink(m), Kind::Get)?;
        answer
            .iter()
            .find_map(|m| match m {
                RouteNetlinkMessage::NewLink(l) if l.header.index == self.ifindex => {
                    Some(link_usable(l))
                }
                _ => None,
            })
            .ok_or_else(|| NetError::NoInterface(format!("index {}", self.ifindex)))
    }

    /// Whether the link was usable at the last look.
    pub fn is_up(&self) -> bool {
        self.up
    }

    /// Reads the notifications queued since the last call, without blocking: `Some` with
    /// the new state if the link went from usable to not or back, `None` if it did not
    /// (or the link went and came back in between, which a caller cannot act on either).
    pub fn poll(&mut self) -> Result<Option<bool>, NetError> {
        let was = self.up;
        loop {
            match self.sock.recv(&mut &mut self.buf[..], 0) {
                Ok(0) => break,
                Ok(n) => {
                    let d = decode(&self.buf[..n], 0, Kind::Dump, "RTM_NEWLINK")?;
                    for m in d.messages {
                        match m {
                            RouteNetlinkMessage::NewLink(l) if l.header.index == self.ifindex => {
                                self.up = link_usable(&l);
                            }
                            RouteNetlinkMessage::DelLink(l) if l.header.index == self.ifindex => {
                                self.up = false;
                            }
                            _ => {}
                        }
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                // ENOBUFS: notifications were lost; what is true now is one question away.
                Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => {
                    self.up = self.ask()?;
                }
                Err(source) => {
                    return Err(NetError::Netlink {
                        op: "RTNLGRP_LINK",
                        source,
                    })
                }
            }
        }
        Ok((self.up != was).then_some(self.up))
    }
}
