//! Address handles for UD: `ibv_create_ah`, `ibv_destroy_ah`, and the two that build one
//! from a received datagram, `ibv_init_ah_from_wc` and `ibv_create_ah_from_wc`.
//!
//! An address handle is where a datagram goes: the IP address of its GID and the next
//! hop's MAC address, resolved when it is created ([`crate::qp::remote_of`]). A UD
//! receive's first 40 bytes hold the GRH; over RoCE v2 with IPv4 they hold the IPv4
//! header in their last 20 bytes (as rdma_rxe and ConnectX write it), over IPv6 the IPv6
//! header: the sender's address is read from whichever it is.
//!
//! Safe code: the exported verbs are wrappers in `exports.rs` that read the caller's
//! structures through `ffi.rs`; an address handle's C object is freed through the
//! registry-checked `ffi::take_ah`.

#![deny(unsafe_code)]

use std::ffi::c_int;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use libc::EINVAL;
use uroce::verbs::Remote;

use crate::abi::{ibv_ah, ibv_ah_attr, ibv_context, ibv_pd, ibv_wc};
use crate::device::{shared_of, with_inner};
use crate::qp::{gid_of, remote_of};
use crate::resources::{disown, null_with, own, owner_of};

/// An address handle handed out.
#[derive(Debug, Clone, Copy)]
pub(crate) struct AhEntry {
    pub remote: Remote,
    pub pd: usize,
}

/// `IBV_WC_GRH`.
const WC_GRH: u32 = 1;

/// The sender's address in a received GRH area (40 bytes): an IPv6 header (version 6
/// in its first nibble), or an IPv4 header in bytes 20..40.
pub fn sender_of(grh: &[u8; 40]) -> Option<IpAddr> {
    if grh[0] >> 4 == 6 {
        let src: [u8; 16] = grh[8..24].try_into().ok()?;
        return Some(IpAddr::V6(Ipv6Addr::from(src)));
    }
    if grh[20] >> 4 == 4 {
        let src: [u8; 4] = grh[32..36].try_into().ok()?;
        return Some(IpAddr::V4(Ipv4Addr::from(src)));
    }
    None
}

/// `ibv_create_ah`: NULL with errno EINVAL for an address without a GRH or of the other
/// IP version, EHOSTUNREACH when the next hop's MAC address cannot be found. `attr` is
/// the caller's (None for NULL: EINVAL).
pub(crate) fn create_ah(pd: *mut ibv_pd, attr: Option<ibv_ah_attr>) -> *mut ibv_ah {
    let Some(ctx) = owner_of(pd) else {
        return null_with(EINVAL);
    };
    let Some(a) = attr else {
        return null_with(EINVAL);
    };
    let Some(shared) = shared_of(ctx) else {
        return null_with(EINVAL);
    };
    // Where it goes first, without the lock (it may take an ARP exchange).
    let remote = match remote_of(&shared, &a) {
        Ok(r) => r,
        Err(e) => return null_with(e),
    };
    let mut g = shared.lock();
    let made = (|| {
        let inner = &mut *g;
        if !inner.pds.contains_key(&(pd as usize)) {
            return Err(EINVAL);
        }
        let ah = Box::into_raw(Box::new(ibv_ah {
            context: ctx,
            pd,
            handle: 0,
        }));
        inner.ahs.insert(
            ah as usize,
            AhEntry {
                remote,
                pd: pd as usize,
            },
        );
        if let Some(mut r) = inner.routes_mut() {
            r.ahs.insert(ah as usize, remote);
        }
        own(ah, ctx);
        Ok(ah)
    })();
    drop(g);
    made.unwrap_or_else(null_with)
}

/// `ibv_destroy_ah`: 0, or EINVAL for an unknown handle.
pub(crate) fn destroy_ah(ah: *mut ibv_ah) -> c_int {
    let Some(ctx) = owner_of(ah) else {
        return EINVAL;
    };
    with_inner(ctx, |inner| {
        if !inner.ahs.contains_key(&(ah as usize)) {
            return EINVAL;
        }
        // Disowned first, then its C object freed as it leaves the registry.
        disown(ah);
        crate::ffi::take_ah(inner, ah);
        0
    })
    .unwrap_or(EINVAL)
}

/// `ibv_init_ah_from_wc`: the address vector that answers the sender of a UD receive
/// `wc` whose GRH area is `grh`; EINVAL with no GRH in the completion, an unreadable GRH
/// (or a NULL argument: None).
pub(crate) fn init_ah_from_wc(
    ctx: *mut ibv_context,
    port_num: u8,
    wc: Option<ibv_wc>,
    grh: Option<[u8; 40]>,
) -> Result<ibv_ah_attr, c_int> {
    let shared = shared_of(ctx).ok_or(EINVAL)?;
    let (Some(w), Some(g)) = (wc, grh) else {
        return Err(EINVAL);
    };
    // Our own GID, the one the answer goes from (rdma-core looks up the GRH's
    // destination GID in the table): the context's address, or GID 0 for a link-local
    // sender (`qp::remote_of`).
    let sender = (w.wc_flags & WC_GRH != 0).then(|| sender_of(&g)).flatten();
    let (device, local) = {
        let g = shared.lock();
        let ll = g.uroce.link_local();
        match (sender, ll) {
            (Some(IpAddr::V6(s)), Some(ll)) if s.is_unicast_link_local() => {
                (g.device, IpAddr::V6(ll))
            }
            _ => (g.device, g.uroce.config().ip),
        }
    };
    let own = gid_of(local).raw;
    let sgid_index = uroce::net::addresses::interface_info(device.iface())
        .ok()
        .and_then(|i| crate::device::gids(&i).iter().position(|g| g.raw == own));
    let (Some(ip), Some(sgid_index)) = (sender, sgid_index) else {
        return Err(EINVAL);
    };
    let mut a = ibv_ah_attr {
        is_global: 1,
        port_num,
        ..Default::default()
    };
    a.grh.dgid = gid_of(ip);
    a.grh.sgid_index = sgid_index as u8;
    a.grh.hop_limit = 64;
    Ok(a)
}

/// `ibv_create_ah_from_wc`: [`init_ah_from_wc`] then [`create_ah`].
pub(crate) fn create_ah_from_wc(
    pd: *mut ibv_pd,
    wc: Option<ibv_wc>,
    grh: Option<[u8; 40]>,
    port_num: u8,
) -> *mut ibv_ah {
    let Some(ctx) = owner_of(pd) else {
        return null_with(EINVAL);
    };
    match init_ah_from_wc(ctx, port_num, wc, grh) {
        Ok(a) => create_ah(pd, Some(a)),
        Err(e) => null_with(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sender_from_an_ipv4_or_ipv6_grh() {
        let mut g = [0u8; 40];
        assert_eq!(sender_of(&g), None);
        g[20] = 0x45;
        g[32..36].copy_from_slice(&[10, 0, 0, 7]);
        assert_eq!(sender_of(&g), Some("10.0.0.7".parse().unwrap()));
        let mut g = [0u8; 40];
        g[0] = 0x60;
        g[8..24].copy_from_slice(&"fd00::7".parse::<Ipv6Addr>().unwrap().octets());
        assert_eq!(sender_of(&g), Some("fd00::7".parse().unwrap()));
    }
}
