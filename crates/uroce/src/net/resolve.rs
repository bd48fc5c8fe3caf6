//! The datapath's entry point to neighbour resolution: for a peer, the next hop and the
//! MAC address AF_XDP frames to it go to. AF_XDP builds whole Ethernet frames itself, so it
//! needs what the kernel's routing and neighbour subsystems know: the route to the peer
//! ([`route_to`]), the next hop's MAC from the kernel's neighbour table
//! ([`kernel_neighbour`]), and when that has nothing, ARP requests (RFC 826)
//! or Neighbor Solicitations (RFC 4861 §7.2.2) sent on the AF_XDP path, their replies
//! read from a [`PacketSocket`]: the XDP program passes ARP and ICMPv6 on to the kernel
//! (which keeps answering for its own addresses), and packet sockets see frames after
//! `XDP_PASS`.

use std::io;
use std::net::IpAddr;
use std::time::{Duration, Instant};

use super::addresses::{ifindex, ifname, interface_info};
use super::neighbours::{kernel_neighbour, Neighbours, RETRANSMIT};
use super::packet_socket::PacketSocket;
use super::routes::route_to;
use super::NetError;
use crate::wire::arp;
use crate::wire::ethernet::ETHERTYPE_IPV6;

/// Where a peer's MAC came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum How {
    /// The kernel's neighbour table had it.
    Kernel,
    /// An ARP reply.
    Arp,
    /// A Neighbor Advertisement.
    Ndp,
}

/// The outcome of [`resolve`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Resolved {
    /// The MAC address frames to the peer go to.
    pub mac: [u8; 6],
    /// The peer itself when on-link, else the gateway.
    pub next_hop: IpAddr,
    /// Where `mac` came from.
    pub how: How,
}

fn secs(d: Duration) -> String {
    if d.subsec_millis() == 0 {
        format!("{} s", d.as_secs())
    } else {
        format!("{:.1} s", d.as_secs_f64())
    }
}

/// Finds the MAC address frames from `local` on `iface` to `peer` go to: the next hop of
/// the kernel's route to `peer` from `local` ([`route_to`]; the gateway when `peer` is
/// off-link; a route through another interface is an error), its MAC from the kernel's
/// neighbour table if there, else from ARP requests (IPv4) or Neighbor Solicitations (IPv6)
/// from `my_mac`/`local`, sent with `send` (the AF_XDP backend's send, so they leave on the
/// AF_XDP path) every [`RETRANSMIT`], with the reply read from a [`PacketSocket`]. Gives up
/// after `timeout` (the datapath passes [`GIVE_UP`](super::neighbours::GIVE_UP)). Runs in the calling thread's network
/// namespace.
pub fn resolve(
    iface: &str,
    my_mac: [u8; 6],
    local: IpAddr,
    peer: IpAddr,
    send: &mut dyn FnMut(&[u8]) -> io::Result<()>,
    timeout: Duration,
) -> Result<Resolved, String> {
    if local.is_ipv4() != peer.is_ipv4() {
        return Err(format!(
            "local address {local} and peer {peer} are not of the same IP version"
        ));
    }
    let oif = ifindex(iface).map_err(|e| e.to_string())?;
    // The kernel's own route to the peer from our address, after policy rules.
    let route = match route_to(peer, Some(local)) {
        Ok(r) => r,
        Err(NetError::NoRoute { why, .. }) => {
            return Err(format!("no route to {peer} on {iface}{why}"))
        }
        Err(e) => return Err(format!("the route to {peer}: {e}")),
    };
    if route.oif != oif {
        let other = ifname(route.oif).unwrap_or_else(|| format!("interface #{}", route.oif));
        return Err(format!(
            "the route to {peer} goes out of {other}, not {iface} (see `ip route get {peer}`)"
        ));
    }
    let hop = route.next_hop();
    if let Some(mac) = kernel_neighbour(oif, hop)
        .map_err(|e| format!("the kernel's neighbour entry for {hop} on {iface}: {e}"))?
    {
        return Ok(Resolved {
            mac,
            next_hop: hop,
            how: How::Kernel,
        });
    }
    let (ethertype, how, request, reply) = if peer.is_ipv4() {
        (arp::ETHERTYPE_ARP, How::Arp, "ARP request", "ARP reply")
    } else {
        (
            ETHERTYPE_IPV6,
            How::Ndp,
            "neighbor solicitation",
            "neighbor advertisement",
        )
    };
    // Open before the first request goes out, so the reply cannot slip past.
    let sock = PacketSocket::open(iface, ethertype).map_err(|e| {
        if e.kind() == io::ErrorKind::PermissionDenied {
            format!(
                "opening an AF_PACKET socket on {iface} to read the {reply} needs CAP_NET_RAW \
                 (run as root, or setcap cap_net_raw+ep on the binary): {e}"
            )
        } else {
            format!("opening an AF_PACKET socket on {iface} to read the {reply}: {e}")
        }
    })?;
    // Requests come from `local`, except that a link-local next hop (an IPv6 router) is
    // asked from a link-local address of the interface, as the kernel would.
    let mut mine = vec![local];
    if let IpAddr::V6(h) = hop {
        if h.is_unicast_link_local() && !matches!(local, IpAddr::V6(l) if l.is_unicast_link_local())
        {
            let addrs = interface_info(iface).map_err(|e| e.to_string())?.addrs;
            mine.extend(addrs.into_iter().map(|(a, _)| a).filter(|a| match a {
                IpAddr::V6(a) => a.is_unicast_link_local(),
                IpAddr::V4(_) => false,
            }));
        }
    }
    let mut n = Neighbours::new(my_mac, &mine);
    // The kernel answers for its own addresses; answering too would only double it.
    n.set_answering(false);
    n.set_timing(RETRANSMIT, timeout);
    let start = Instant::now();
    n.request(hop, start);
    let mut tx = [0u8; 128];
    let mut rx = vec![0u8; 65536];
    loop {
        let now = Instant::now();
        while let Some(len) = n.poll_transmit(now, &mut tx) {
            send(&tx[..len])
                .map_err(|e| format!("sending a {request} for {hop} on {iface}: {e}"))?;
        }
        if let Some(mac) = n.lookup(hop) {
            return Ok(Resolved {
                mac,
                next_hop: hop,
                how,
            });
        }
        if n.failed(hop) || now >= start + timeout {
            let via = if hop == peer {
                String::new()
            } else {
                format!(" (next hop for {peer})")
            };
            return Err(format!(
                "no {reply} from {hop}{via} on {iface} after {}",
                secs(timeout)
            ));
        }
        let wake = n
            .poll_timeout()
            .unwrap_or(now + RETRANSMIT)
            .min(start + timeout);
        let ready = sock
            .wait(wake.saturating_duration_since(now))
            .map_err(|e| format!("waiting for the {reply} on {iface}: {e}"))?;
        if ready {
            while let Some(len) = sock
                .recv(&mut rx)
                .map_err(|e| format!("reading the {reply} on {iface}: {e}"))?
            {
                n.handle_frame(Instant::now(), &rx[..len]);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ME: [u8; 6] = [0x02, 0, 0, 0, 0, 0x01];

    fn v4(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    /// Meaningful without CAP_NET_RAW (CI as a normal user); as root there is nothing to see.
    #[test]
    fn resolve_explains_a_missing_cap_net_raw() {
        if PacketSocket::open("lo", arp::ETHERTYPE_ARP).is_ok() {
            return;
        }
        let e = resolve(
            "lo",
            ME,
            v4("127.0.0.1"),
            v4("127.0.0.2"),
            &mut |_| Ok(()),
            Duration::from_millis(10),
        )
        .unwrap_err();
        assert!(e.contains("CAP_NET_RAW"), "{e}");
    }

    #[test]
    fn resolve_reports_a_missing_interface() {
        let e = resolve(
            "uroce-no-such0",
            ME,
            v4("10.0.0.1"),
            v4("10.0.0.2"),
            &mut |_| Ok(()),
            Duration::from_millis(10),
        )
        .unwrap_err();
        assert!(e.contains("no interface"), "{e}");
        let e = resolve(
            "lo",
            ME,
            v4("10.0.0.1"),
            v4("fd00::2"),
            &mut |_| Ok(()),
            Duration::from_millis(10),
        )
        .unwrap_err();
        assert!(e.contains("same IP version"), "{e}");
    }
}
