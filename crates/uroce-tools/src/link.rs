//! The local end of a tool's link, shared by `uroce perf`, the perftest-compatible mode
//! and `uroce pingpong`: the interface a tool runs on (its name, MAC and MTU) and the MAC
//! address of the next hop towards the peer.

use std::net::IpAddr;

use uroce::datapath::Backend;

/// The interface a tool runs on, as the kernel describes it.
pub(crate) struct LocalLink {
    /// Its name.
    pub iface: String,
    /// Its MAC address; `None` for an interface without one (loopback).
    pub mac: Option<[u8; 6]>,
    /// Its MTU in bytes.
    pub mtu: u32,
}

impl LocalLink {
    /// The MAC address the context's frames come from. AF_XDP puts it on the wire, so the
    /// interface must have one; the UDP backend leaves the link header to the kernel and
    /// the context's MAC goes nowhere (loopback's all-zero address is then fine).
    pub(crate) fn mac_for(&self, backend: &dyn Backend) -> anyhow::Result<[u8; 6]> {
        match self.mac {
            Some(m) => Ok(m),
            None if !backend.needs_link_addresses() => Ok([0; 6]),
            None => Err(uroce::net::NetError::NoMac(self.iface.clone()).into()),
        }
    }
}

/// The interface to run on: `iface`, else the one holding `local`; an error when there is
/// no such interface (or the kernel could not be asked).
pub(crate) fn local_link(
    iface: Option<&str>,
    local: impl Into<IpAddr>,
) -> anyhow::Result<LocalLink> {
    let info = match iface {
        Some(i) => uroce::net::addresses::interface_info(i),
        None => uroce::net::addresses::interface_with_address(local.into()),
    }
    // As text: a NetError's message already ends with its source's, which `{:#}` would
    // print a second time.
    .map_err(|e| anyhow::Error::msg(e.to_string()))?;
    Ok(LocalLink {
        iface: info.name,
        mac: info.mac,
        mtu: info.mtu,
    })
}

/// The MAC address frames to `peer` go to: the peer's, or its gateway's when it is not
/// on the link. With AF_XDP it is resolved from the kernel's neighbour table, else by ARP
/// sent on the AF_XDP path; the UDP backend leaves the link header to the kernel.
pub(crate) fn peer_mac(
    backend: &mut dyn Backend,
    iface: &str,
    my_mac: [u8; 6],
    local: impl Into<IpAddr>,
    peer: impl Into<IpAddr>,
) -> anyhow::Result<[u8; 6]> {
    if !backend.needs_link_addresses() {
        return Ok([0; 6]);
    }
    let (local, peer) = (local.into(), peer.into());
    if local == peer {
        // A peer on our own address: through `uroce daemon`, delivered locally.
        return Ok(my_mac);
    }
    uroce::net::resolve::resolve(
        iface,
        my_mac,
        local,
        peer,
        &mut |f| backend.send(f),
        uroce::net::neighbours::GIVE_UP,
    )
    .map(|r| r.mac)
    .map_err(anyhow::Error::msg)
}
