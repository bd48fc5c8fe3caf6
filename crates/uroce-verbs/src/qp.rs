//! Queue pairs: `ibv_create_qp`, `ibv_modify_qp`, `ibv_query_qp`, `ibv_destroy_qp`, and
//! the posting operations of `ibv_context_ops` (the inline `ibv_post_send` and
//! `ibv_post_recv`), converted to uroce's verbs.
//!
//! The first QP of a context opens its datapath and starts its progress thread
//! ([`crate::engine`]). A post hands what it made sendable to the datapath before it
//! returns. Peer addresses come from the address vector's GID (RoCE v2: an IPv4-mapped
//! or IPv6 address; `is_global` must be set, as RoCE has no LIDs); over AF_XDP the next
//! hop's MAC address is resolved from the kernel's tables (netlink), else by ARP / NDP on
//! the datapath, never by running a program.
//!
//! Safe code: the exported verbs and the posting ops are wrappers in `exports.rs` that
//! turn their C arguments into values through `ffi.rs` (the QP objects through its
//! registry-checked `qp_object` / `take_qp`, the posted lists as `ffi::WrList`).

#![deny(unsafe_code)]

use std::ffi::c_int;
use std::net::{IpAddr, Ipv6Addr};
use std::sync::Arc;

use libc::{EINVAL, EOPNOTSUPP};
use uroce::datapath::Backend;
use uroce::verbs::{
    Mtu, QpAttr, QpAttrMask, QpCaps, QpInitAttr, QpInitEx, QpState, QpType, Remote,
};

use crate::abi::{ibv_ah_attr, ibv_gid, ibv_pd, ibv_qp, ibv_qp_attr, ibv_qp_cap, ibv_qp_init_attr};
use crate::device::{shared_of, with_inner};
use crate::engine::{Inner, QpEntry, Shared};
use crate::resources::{access_of, disown, null_with, own, owner_of};

// enum ibv_qp_type.
const IBV_QPT_RC: c_int = 2;
const IBV_QPT_UC: c_int = 3;
const IBV_QPT_UD: c_int = 4;

/// uroce's QP type for `enum ibv_qp_type`; EOPNOTSUPP for raw packet, XRC and driver QPs.
fn qp_type_of(t: c_int) -> Result<QpType, c_int> {
    match t {
        IBV_QPT_RC => Ok(QpType::Rc),
        IBV_QPT_UC => Ok(QpType::Uc),
        IBV_QPT_UD => Ok(QpType::Ud),
        8..=10 | 0xff => Err(EOPNOTSUPP),
        _ => Err(EINVAL),
    }
}

/// `enum ibv_qp_state` → uroce's.
fn state_of(s: c_int) -> Result<QpState, c_int> {
    Ok(match s {
        0 => QpState::Reset,
        1 => QpState::Init,
        2 => QpState::Rtr,
        3 => QpState::Rts,
        4 => QpState::Sqd,
        5 => QpState::Sqe,
        6 => QpState::Err,
        _ => return Err(EINVAL),
    })
}

/// uroce's state → `enum ibv_qp_state`.
fn state_code(s: QpState) -> c_int {
    match s {
        QpState::Reset => 0,
        QpState::Init => 1,
        QpState::Rtr => 2,
        QpState::Rts => 3,
        QpState::Sqd => 4,
        QpState::Sqe => 5,
        QpState::Err => 6,
    }
}

/// `enum ibv_mtu` (1 = 256 ... 5 = 4096).
fn mtu_of(m: c_int) -> Result<Mtu, c_int> {
    u32::try_from(m)
        .ok()
        .filter(|m| (1..=5).contains(m))
        .and_then(|m| Mtu::from_bytes(128 << m))
        .ok_or(EINVAL)
}

fn mtu_code(m: Mtu) -> c_int {
    (m.bytes() / 256).trailing_zeros() as c_int + 1
}

/// The peer's IP address in an address vector's GID; RoCE v2 needs the GRH (EINVAL
/// without `is_global`).
pub(crate) fn ip_of(ah: &ibv_ah_attr) -> Result<IpAddr, c_int> {
    if ah.is_global == 0 {
        return Err(EINVAL);
    }
    let gid = Ipv6Addr::from(ah.grh.dgid.raw);
    Ok(gid.to_ipv4_mapped().map_or(IpAddr::V6(gid), IpAddr::V4))
}

/// The GID of an IP address (IPv4-mapped for IPv4).
pub(crate) fn gid_of(ip: IpAddr) -> ibv_gid {
    let raw = match ip {
        IpAddr::V4(v) => v.to_ipv6_mapped().octets(),
        IpAddr::V6(v) => v.octets(),
    };
    ibv_gid { raw }
}

/// Where packets to `ah`'s GID go: the IP address and the next hop's MAC address (our
/// own for our own address; zeros where the datapath lets the kernel build the link
/// header). Opens the datapath if it is not open yet. EINVAL when the source GID
/// (`grh.sgid_index`) is not the device's address the context sends to that destination
/// from, or the destination is of the other IP version; EHOSTUNREACH when the MAC cannot
/// be found.
///
/// A context sends from one address, the device's first IPv4 one (else its first), and,
/// where the datapath serves the interface's link-local address
/// (`Backend::serves_link_local`: AF_XDP, which writes the IP header itself; the UDP
/// backend with a second socket bound to that address with its scope; a daemon that says
/// it does), also from GID 0, the default GID (fe80:: with the EUI-64 of the MAC), to a
/// destination GID that is IPv6 link-local, as a NIC does: libfabric's dgram and rdm
/// endpoints name GID 0 at both ends. Where it does not (that socket could not be
/// bound), GID 0 stays EINVAL.
/// Called without the context's lock: finding a MAC may take an ARP exchange (up to
/// `neighbours::GIVE_UP`), during which the context's other verbs and its progress
/// thread go on; each ARP frame takes the lock only to be sent.
pub(crate) fn remote_of(shared: &Arc<Shared>, ah: &ibv_ah_attr) -> Result<Remote, c_int> {
    let ip = ip_of(ah)?;
    let (device, local, needs_l2) = {
        let mut g = shared.lock();
        shared.start(&mut g)?;
        let needs = g.backend().is_some_and(|b| b.needs_link_addresses());
        let link_local = g.backend().is_some_and(|b| b.serves_link_local());
        let source = match (ip, g.uroce.link_local()) {
            (IpAddr::V6(to), Some(ll)) if link_local && to.is_unicast_link_local() => {
                IpAddr::V6(ll)
            }
            _ => g.uroce.config().ip,
        };
        (g.device, source, needs)
    };
    if ip.is_ipv4() != local.is_ipv4() {
        return Err(EINVAL);
    }
    // The source GID must be the one this context sends to `ip` from.
    let info = uroce::net::addresses::interface_info(device.iface()).map_err(|_| libc::ENODEV)?;
    let sgid = crate::device::gids(&info)
        .get(usize::from(ah.grh.sgid_index))
        .map(|g| g.raw);
    if sgid != Some(gid_of(local).raw) {
        return Err(EINVAL);
    }
    remote_to(shared, ip, needs_l2)
}

/// Where packets to `ip` go (the IP address and the next hop's MAC address), as
/// [`remote_of`] finds them, for a destination that is not named by an AH (QP 1's MADs,
/// `crate::gsi`). The datapath is open; `needs_l2` is whether it needs the MAC.
pub(crate) fn remote_to(shared: &Arc<Shared>, ip: IpAddr, needs_l2: bool) -> Result<Remote, c_int> {
    remote_within(shared, ip, needs_l2, uroce::net::neighbours::GIVE_UP)
}

/// [`remote_to`], giving up on the MAC after `timeout`.
pub(crate) fn remote_within(
    shared: &Arc<Shared>,
    ip: IpAddr,
    needs_l2: bool,
    timeout: std::time::Duration,
) -> Result<Remote, c_int> {
    remote_within_weak(&Arc::downgrade(shared), ip, needs_l2, timeout)
}

/// [`remote_within`] for a caller that must not keep the device open while it waits (a
/// thread of QP 1's, `crate::gsi`): the device is reached for each frame sent, and the
/// answer is EHOSTUNREACH once it is closed.
pub(crate) fn remote_within_weak(
    shared: &std::sync::Weak<Shared>,
    ip: IpAddr,
    needs_l2: bool,
    timeout: std::time::Duration,
) -> Result<Remote, c_int> {
    let (device, local) = {
        let s = shared.upgrade().ok_or(libc::EHOSTUNREACH)?;
        let g = s.lock();
        (g.device, g.uroce.config().ip)
    };
    let mac = device.mac();
    if ip == local || Some(ip) == own_link_local(device) {
        return Ok(Remote { ip, mac });
    }
    if !needs_l2 {
        return Ok(Remote { ip, mac: [0; 6] });
    }
    if let Some(peer) = mac_of_link_local(ip) {
        // As the kernel's RoCE address resolution does for a link-local GID: the MAC is
        // in its EUI-64 (no neighbour discovery).
        return Ok(Remote { ip, mac: peer });
    }
    let r = uroce::net::resolve::resolve(
        device.iface(),
        mac,
        local,
        ip,
        &mut |f| match shared.upgrade() {
            Some(s) if !s.is_stopping() => match s.lock().backend() {
                Some(b) => b.send(f),
                None => Err(std::io::Error::other("the datapath is closed")),
            },
            _ => Err(std::io::Error::other("the device is closed")),
        },
        timeout,
    )
    .map_err(|_| libc::EHOSTUNREACH)?;
    Ok(Remote { ip, mac: r.mac })
}

/// The device's default GID as an address: fe80:: with the EUI-64 of its MAC.
pub(crate) fn own_link_local(device: &crate::device::Device) -> Option<IpAddr> {
    let g = crate::device::default_gid(device.mac());
    Some(IpAddr::V6(Ipv6Addr::from(g.raw)))
}

/// The MAC address in a link-local IPv6 address made from one (fe80::/64 with an EUI-64
/// interface id: ff:fe in its middle, the universal/local bit flipped); None otherwise.
pub(crate) fn mac_of_link_local(ip: IpAddr) -> Option<[u8; 6]> {
    let IpAddr::V6(v6) = ip else { return None };
    let o = v6.octets();
    let eui = o[0] == 0xfe && o[1] == 0x80 && o[2..8] == [0; 6] && o[11] == 0xff && o[12] == 0xfe;
    eui.then(|| [o[8] ^ 2, o[9], o[10], o[13], o[14], o[15]])
}

/// What a QP was granted, as `struct ibv_qp_cap` says it (`max_recv_wr` 0 on an SRQ).
fn cap_of(i: &QpInitAttr) -> ibv_qp_cap {
    ibv_qp_cap {
        max_send_wr: i.caps.max_send_wr as u32,
        max_recv_wr: if i.ex.srq.is_some() {
            0
        } else {
            i.caps.max_recv_wr as u32
        },
        max_send_sge: i.ex.max_send_sge.max(1),
        max_recv_sge: i.ex.max_recv_sge.max(1),
        max_inline_data: i.ex.max_inline_data,
    }
}

/// `ibv_create_qp`: a QP in RESET; `attr->cap` is updated with what was granted. EINVAL
/// for CQs or an SRQ not of the PD's context; EOPNOTSUPP for raw packet and XRC QPs.
pub(crate) fn create_qp(pd: *mut ibv_pd, attr: Option<&mut ibv_qp_init_attr>) -> *mut ibv_qp {
    let Some(a) = attr else {
        return null_with(EINVAL);
    };
    create_qp_with(pd, a, 0)
}

/// [`create_qp`], for `ibv_create_qp_ex` too: `send_ops` is its `send_ops_flags` (0 for
/// a QP of `ibv_create_qp`, whose `ibv_qp_to_qp_ex` is NULL), checked by the caller.
pub(crate) fn create_qp_with(
    pd: *mut ibv_pd,
    a: &mut ibv_qp_init_attr,
    send_ops: u64,
) -> *mut ibv_qp {
    let Some(ctx) = owner_of(pd) else {
        return null_with(EINVAL);
    };
    let Some(shared) = shared_of(ctx) else {
        return null_with(EINVAL);
    };
    let mut g = shared.lock();
    let made = (|| {
        let inner = &mut *g;
        let qp_type = qp_type_of(a.qp_type)?;
        let pd_id = *inner.pds.get(&(pd as usize)).ok_or(EINVAL)?;
        let send_cq = inner.cqs.get(&(a.send_cq as usize)).ok_or(EINVAL)?.id;
        let recv_cq = inner.cqs.get(&(a.recv_cq as usize)).ok_or(EINVAL)?.id;
        let srq = match a.srq.is_null() {
            true => None,
            false => Some(inner.srqs.get(&(a.srq as usize)).ok_or(EINVAL)?.id),
        };
        // The device's limits (ibv_query_device's max_qp_wr, as rdma_rxe's rxe_qp_chk_cap).
        let max_wr = crate::device::MAX_QP_WR;
        if a.cap.max_send_wr > max_wr || (srq.is_none() && a.cap.max_recv_wr > max_wr) {
            return Err(EINVAL);
        }
        shared.start(inner)?;
        let caps = QpCaps {
            qp_type,
            send_cq,
            recv_cq,
            max_send_wr: a.cap.max_send_wr.max(1) as usize,
            max_recv_wr: a.cap.max_recv_wr.max(1) as usize,
        };
        let ex = QpInitEx {
            max_inline_data: a.cap.max_inline_data,
            sq_sig_all: a.sq_sig_all != 0,
            srq,
            max_send_sge: a.cap.max_send_sge,
            max_recv_sge: a.cap.max_recv_sge,
        };
        let shard = inner.place_qp(srq.is_some());
        inner.next_qpn_from_daemon(shard)?;
        let (qpn, init) = inner.ctx_of(shard, |c| {
            let qpn = c.create_qp_ex(pd_id, caps, ex).map_err(|e| e.errno())?;
            Ok::<_, c_int>((qpn, c.query_qp(qpn).ok().map(|(_, i)| i)))
        })?;
        if let Some(i) = init {
            a.cap = cap_of(&i);
        }
        let mut x: crate::abi::ibv_qp_ex = crate::ffi::zeroed();
        let q = &mut x.qp_base;
        q.context = ctx;
        q.qp_context = a.qp_context;
        q.pd = pd;
        q.send_cq = a.send_cq;
        q.recv_cq = a.recv_cq;
        q.srq = a.srq;
        q.handle = qpn;
        q.qp_num = qpn;
        q.state = 0;
        q.qp_type = a.qp_type;
        if send_ops != 0 {
            crate::exports::fill_wr_builders(&mut x);
        }
        let obj = crate::qp_ex::QpObject {
            qp: x,
            extra: crate::qp_ex::QpExtra::new(crate::qp_ex::config(send_ops, a.qp_type, &a.cap)),
        };
        let q = Box::into_raw(Box::new(obj)).cast::<ibv_qp>();
        inner.qps.insert(
            q as usize,
            QpEntry {
                qpn,
                pd: pd as usize,
                send_cq: a.send_cq as usize,
                recv_cq: a.recv_cq as usize,
                ud: qp_type == QpType::Ud,
                shard,
            },
        );
        inner.qp_by_qpn.insert(qpn, q as usize);
        if let Some(mut r) = inner.routes_mut() {
            if shard != 0 {
                r.qps.insert(q as usize, inner.qps[&(q as usize)]);
            }
            // The engine's copies of its CQs may hold completions now.
            for cq in [a.send_cq, a.recv_cq] {
                if let Some(c) = r.cqs.get_mut(&(cq as usize)) {
                    c.fed_by |= 1 << shard;
                }
            }
        }
        own(q, ctx);
        Ok(q)
    })();
    drop(g);
    match made {
        Ok(q) => q,
        Err(e) => null_with(e),
    }
}

/// uroce's attributes for a C `ibv_qp_attr` under `mask`.
fn attr_of(c: &ibv_qp_attr, mask: QpAttrMask, remote: Option<Remote>) -> Result<QpAttr, c_int> {
    type M = QpAttrMask;
    let mut a = QpAttr::default();
    if mask.contains(M::STATE) {
        a.qp_state = state_of(c.qp_state)?;
    }
    if mask.contains(M::CUR_STATE) {
        a.cur_qp_state = state_of(c.cur_qp_state)?;
    }
    a.en_sqd_async_notify = c.en_sqd_async_notify != 0;
    if mask.contains(M::ACCESS_FLAGS) {
        a.qp_access_flags = access_of(c.qp_access_flags)?;
    }
    if mask.contains(M::PKEY_INDEX) && c.pkey_index != 0 {
        return Err(EINVAL);
    }
    a.port_num = c.port_num;
    a.qkey = c.qkey;
    if let Some(r) = remote {
        a.ah_attr = r;
    }
    if mask.contains(M::PATH_MTU) {
        a.path_mtu = mtu_of(c.path_mtu)?;
    }
    a.dest_qp_num = c.dest_qp_num;
    a.rq_psn = c.rq_psn;
    a.sq_psn = c.sq_psn;
    a.max_rd_atomic = c.max_rd_atomic;
    a.max_dest_rd_atomic = c.max_dest_rd_atomic;
    a.min_rnr_timer = c.min_rnr_timer;
    a.timeout = c.timeout;
    a.retry_cnt = c.retry_cnt;
    a.rnr_retry = c.rnr_retry;
    Ok(a)
}

/// The path MTU of the device's port now: its `active_mtu` (from the interface MTU), for
/// UD QPs.
fn port_mtu(inner: &Inner) -> Mtu {
    uroce::net::addresses::interface_info(inner.device.iface())
        .ok()
        .and_then(|i| mtu_of(crate::device::active_mtu(i.mtu)).ok())
        .unwrap_or(Mtu::M1024)
}

/// `ibv_modify_qp`: 0, or the errno ibverbs gives: EINVAL for a change the QP state
/// table does not allow, a required attribute missing or one not allowed, EOPNOTSUPP for
/// attributes uroce does not have (alternate path, path migration, rate limit),
/// EHOSTUNREACH when the peer's MAC address cannot be found. `attr`: the caller's
/// attributes (None for NULL).
pub(crate) fn modify_qp(qp: *mut ibv_qp, attr: Option<ibv_qp_attr>, mask: c_int) -> c_int {
    let Some(ctx) = owner_of(qp) else {
        return EINVAL;
    };
    let Some(c) = attr else {
        return EINVAL;
    };
    let mask = match QpAttrMask::from_bits(mask as u32) {
        Ok(m) => m,
        Err(_) => return EOPNOTSUPP,
    };
    let Some(shared) = shared_of(ctx) else {
        return EINVAL;
    };
    // The peer's address first, without the lock (it may take an ARP exchange).
    let remote = match mask.contains(QpAttrMask::AV) {
        true => match remote_of(&shared, &c.ah_attr) {
            Ok(r) => Some(r),
            Err(e) => return e,
        },
        false => None,
    };
    let mut g = shared.lock();
    let inner = &mut *g;
    let (r, shard) = {
        let Some(e) = inner.qps.get(&(qp as usize)).copied() else {
            return EINVAL;
        };
        let mut mask = mask;
        let mut a = match attr_of(&c, mask, remote) {
            Ok(a) => a,
            Err(e) => return e,
        };
        let now = inner.ctx_of(e.shard, |c| c.qp_state(e.qpn));
        let ud_rtr = e.ud && a.qp_state == QpState::Rtr && now == Some(QpState::Init);
        if ud_rtr && !mask.contains(QpAttrMask::PATH_MTU) {
            // ibverbs has no path MTU for UD: the port's.
            a.path_mtu = port_mtu(inner);
            mask |= QpAttrMask::PATH_MTU;
        }
        let modified = inner.ctx_of(e.shard, |c| {
            c.modify_qp(e.qpn, &a, mask).map(|()| c.qp_state(e.qpn))
        });
        match modified {
            Ok(state) => {
                if let Some(s) = state {
                    if let Some(q) = crate::ffi::qp_object(inner, qp) {
                        q.state = state_code(s);
                    }
                }
                (0, e.shard)
            }
            Err(err) => return err.errno(),
        }
    };
    shared.finish_post(g, shard, false);
    r
}

/// `ibv_query_qp`: the QP's attributes (all of them, whatever `mask` asks) and what it
/// was created with; EINVAL for an unknown QP. The QP's `state` is brought up to date.
pub(crate) fn query_qp(qp: *mut ibv_qp) -> Result<(ibv_qp_attr, ibv_qp_init_attr), c_int> {
    let ctx = owner_of(qp).ok_or(EINVAL)?;
    with_inner(ctx, |inner| {
        let e = inner.qps.get(&(qp as usize)).copied().ok_or(EINVAL)?;
        let (a, i) = inner
            .ctx_of(e.shard, |c| c.query_qp(e.qpn))
            .map_err(|_| EINVAL)?;
        let cap = cap_of(&i);
        let mut ah = ibv_ah_attr {
            is_global: 1,
            port_num: 1,
            ..Default::default()
        };
        ah.grh.dgid = gid_of(a.ah_attr.ip);
        ah.grh.hop_limit = 64;
        let c = ibv_qp_attr {
            qp_state: state_code(a.qp_state),
            cur_qp_state: state_code(a.qp_state),
            path_mtu: mtu_code(a.path_mtu),
            path_mig_state: 0,
            qkey: a.qkey,
            rq_psn: a.rq_psn,
            sq_psn: a.sq_psn,
            dest_qp_num: a.dest_qp_num,
            qp_access_flags: crate::resources::access_bits(a.qp_access_flags),
            cap,
            ah_attr: ah,
            alt_ah_attr: Default::default(),
            pkey_index: 0,
            alt_pkey_index: 0,
            en_sqd_async_notify: u8::from(a.en_sqd_async_notify),
            sq_draining: u8::from(a.sq_draining),
            max_rd_atomic: a.max_rd_atomic,
            max_dest_rd_atomic: a.max_dest_rd_atomic,
            min_rnr_timer: a.min_rnr_timer,
            port_num: 1,
            timeout: a.timeout,
            retry_cnt: a.retry_cnt,
            rnr_retry: a.rnr_retry,
            alt_port_num: 0,
            alt_timeout: 0,
            rate_limit: 0,
        };
        // `state` is written under the lock, as rdma-core's ibv_query_qp does.
        let q = crate::ffi::qp_object(inner, qp).ok_or(EINVAL)?;
        q.state = state_code(a.qp_state);
        let init = ibv_qp_init_attr {
            qp_context: q.qp_context,
            send_cq: q.send_cq,
            recv_cq: q.recv_cq,
            srq: q.srq,
            cap,
            qp_type: q.qp_type,
            sq_sig_all: c_int::from(i.ex.sq_sig_all),
        };
        Ok((c, init))
    })
    .unwrap_or(Err(EINVAL))
}

/// `ibv_destroy_qp`: 0 or EINVAL for an unknown QP.
pub(crate) fn destroy_qp(qp: *mut ibv_qp) -> c_int {
    let Some(ctx) = owner_of(qp) else {
        return EINVAL;
    };
    with_inner(ctx, |inner| {
        let Some(e) = inner.qps.get(&(qp as usize)).copied() else {
            return EINVAL;
        };
        inner.qp_by_qpn.remove(&e.qpn);
        // Out of the routes first: a post without the device's lock finds it no more
        // (EINVAL, as for any QP not handed out) rather than a QPN gone from its shard.
        if let Some(mut r) = inner.routes_mut() {
            r.qps.remove(&(qp as usize));
        }
        let _ = inner.ctx_of(e.shard, |c| c.destroy_qp(e.qpn));
        inner.forget_async_events_of(qp as usize);
        // Disowned first, then its C object freed as it leaves the registry, so a new
        // object at this address (of any context) is owned only after.
        disown(qp);
        crate::ffi::take_qp(inner, qp);
        0
    })
    .unwrap_or(EINVAL)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mtu_codes_round_trip() {
        for (code, bytes) in [(1, 256), (2, 512), (3, 1024), (4, 2048), (5, 4096)] {
            let m = mtu_of(code).unwrap();
            assert_eq!(m.bytes(), bytes);
            assert_eq!(mtu_code(m), code);
        }
        assert_eq!(mtu_of(0), Err(EINVAL));
        assert_eq!(mtu_of(6), Err(EINVAL));
    }

    #[test]
    fn states_round_trip_and_qp_types() {
        for s in 0..=6 {
            assert_eq!(state_code(state_of(s).unwrap()), s);
        }
        assert_eq!(state_of(7), Err(EINVAL));
        assert_eq!(qp_type_of(2), Ok(QpType::Rc));
        assert_eq!(qp_type_of(4), Ok(QpType::Ud));
        assert_eq!(qp_type_of(8), Err(EOPNOTSUPP));
        assert_eq!(qp_type_of(1), Err(EINVAL));
    }

    #[test]
    fn gid_gives_the_ip_and_needs_the_grh() {
        let mut ah = ibv_ah_attr::default();
        ah.grh.dgid = gid_of("10.0.0.2".parse().unwrap());
        assert_eq!(ip_of(&ah), Err(EINVAL), "RoCE needs is_global");
        let ll = |s: &str| IpAddr::V6(s.parse().unwrap());
        assert_eq!(
            mac_of_link_local(ll("fe80::6c31:8eff:fe34:40d8")),
            Some([0x6e, 0x31, 0x8e, 0x34, 0x40, 0xd8])
        );
        assert_eq!(mac_of_link_local(ll("fe80::1")), None, "not an EUI-64");
        assert_eq!(mac_of_link_local(ll("fd00::6c31:8eff:fe34:40d8")), None);
        assert_eq!(mac_of_link_local(IpAddr::V4([10, 0, 0, 1].into())), None);
        ah.is_global = 1;
        assert_eq!(ip_of(&ah), Ok("10.0.0.2".parse().unwrap()));
        ah.grh.dgid = gid_of("fd00::2".parse().unwrap());
        assert_eq!(ip_of(&ah), Ok("fd00::2".parse().unwrap()));
    }

    #[test]
    fn unknown_qps_are_refused() {
        let mut junk = [0u64; 16];
        let p = junk.as_mut_ptr();
        assert_eq!(destroy_qp(p.cast()), EINVAL);
        assert_eq!(modify_qp(p.cast(), Some(ibv_qp_attr::default()), 1), EINVAL);
    }
}
