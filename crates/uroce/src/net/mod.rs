//! What the host knows about its network, asked of the kernel over rtnetlink (rtnetlink(7))
//! without running any program, and raw access to its links.
//!
//! - [`netlink`]: one request on a `NETLINK_ROUTE` socket and its answer (get or dump).
//! - [`addresses`]: links and their addresses (`RTM_GETLINK`, `RTM_GETADDR`): name, index,
//!   MAC, MTU, state, IPv4/IPv6 addresses with prefix lengths.
//! - [`routes`]: the kernel's route to a destination (`RTM_GETROUTE` for that address, so
//!   policy rules count), and longest prefix match over a route list.
//! - [`neighbours`]: the kernel's neighbour table (`RTM_GETNEIGH`), and a sans-IO neighbour
//!   cache speaking ARP (RFC 826) and Neighbor Discovery (RFC 4861).
//! - [`ndp`]: which frames neighbour resolution reads.
//! - [`resolve`]: the next hop and its MAC for a peer, as the AF_XDP datapath needs them.
//! - [`packet_socket`]: AF_PACKET sockets, and capturing what crosses an interface.
//! - [`link_watch`]: a link's state changes (`RTNLGRP_LINK`), for the port events.
//! - [`xdp_features`]: what a driver does with XDP (native mode, AF_XDP zero-copy), from
//!   the `netdev` generic netlink family.
//!
//! Every query runs in the calling thread's network namespace. Failures are
//! [`NetError`]s that say what is missing.

pub mod addresses;
pub mod link_watch;
pub mod ndp;
pub mod neighbours;
pub mod netlink;
pub mod packet_socket;
pub mod resolve;
pub mod routes;
pub mod xdp_features;

use std::io;
use std::net::IpAddr;

/// Why a host query failed.
#[derive(Debug, thiserror::Error)]
pub enum NetError {
    /// The netlink socket or the kernel's answer to request `op` failed with an errno.
    #[error("netlink {op}: {source}")]
    Netlink {
        /// The request ("RTM_GETROUTE").
        op: &'static str,
        /// The errno.
        source: io::Error,
    },
    /// The kernel's answer did not parse.
    #[error("netlink answer: {0}")]
    Decode(String),
    /// No interface of that name in this network namespace.
    #[error("no interface {0} in this network namespace")]
    NoInterface(String),
    /// No interface holds that address.
    #[error("no interface has the address {0}")]
    NoAddress(IpAddr),
    /// The interface has no Ethernet address (loopback, a tunnel).
    #[error("interface {0} has no MAC address")]
    NoMac(String),
    /// The kernel has no usable route to the destination.
    #[error("no route to {dst}{why}")]
    NoRoute {
        /// The destination.
        dst: IpAddr,
        /// Why, when the kernel said more (" (a prohibit route)"), else empty.
        why: String,
    },
}
