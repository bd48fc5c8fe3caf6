//! Completion queues, completion channels and the asynchronous event queue.
//!
//! - `ibv_poll_cq` (inline, through `ibv_context_ops.poll_cq`) converts uroce's completions
//!   to `struct ibv_wc`; a poll that finds fewer than it asked for first takes what the
//!   datapath received, so a program that spins on it needs no other thread to make
//!   progress.
//! - A completion channel is a semaphore eventfd (one count per completion event) and the
//!   queue of CQs whose events wait: `ibv_get_cq_event` blocks on the fd (or fails with
//!   EAGAIN when the program made it non-blocking, EINTR when a signal interrupts it, as
//!   with libibverbs), then takes the
//!   oldest event. `ibv_ack_cq_events` acknowledges them; a CQ with events taken and not
//!   acknowledged cannot be destroyed (EBUSY, where libibverbs would wait for ever);
//!   events not taken yet go with it.
//! - The context's `async_fd` is another semaphore eventfd counting the events queued for
//!   `ibv_get_async_event`.
//!
//! Safe code: the exported verbs and the `poll_cq` / `req_notify_cq` ops are wrappers in
//! `exports.rs`; the CQ and channel objects are reached through the registry-checked
//! `ffi::cq_object` / `take_cq` and `ffi::channel_object` / `take_channel`.

#![deny(unsafe_code)]

use std::ffi::{c_int, c_void};
use std::mem::MaybeUninit;
use std::os::fd::AsRawFd;

use libc::{EBUSY, EINVAL};
use uroce::verbs::{WcOpcode, WcStatus, WorkCompletion};

use crate::abi::{ibv_async_event, ibv_comp_channel, ibv_context, ibv_cq, ibv_wc};
use crate::device::{shared_of, with_inner};
use crate::engine::{self, ChannelEntry, CqEntry};
use crate::ffi::{channel_object, cq_object, take_channel, take_cq};
use crate::resources::{disown, null_with, own, owner_of};

/// `ibv_create_comp_channel`: a channel whose `fd` becomes readable with each completion
/// event of the CQs created on it.
pub(crate) fn create_comp_channel(ctx: *mut ibv_context) -> *mut ibv_comp_channel {
    let made = with_inner(ctx, |inner| {
        let fd = engine::semaphore().map_err(|e| e.raw_os_error().unwrap_or(libc::EMFILE))?;
        let ch = Box::into_raw(Box::new(ibv_comp_channel {
            context: ctx,
            fd: fd.as_raw_fd(),
            refcnt: 0,
        }));
        inner.channels.insert(
            ch as usize,
            ChannelEntry {
                fd,
                events: Default::default(),
            },
        );
        own(ch, ctx);
        Ok(ch)
    });
    match made {
        Some(Ok(ch)) => ch,
        Some(Err(e)) => null_with(e),
        None => null_with(EINVAL),
    }
}

/// `ibv_destroy_comp_channel`: 0, EBUSY while a CQ uses it, EINVAL for an unknown one.
pub(crate) fn destroy_comp_channel(channel: *mut ibv_comp_channel) -> c_int {
    let Some(ctx) = owner_of(channel) else {
        return EINVAL;
    };
    with_inner(ctx, |inner| {
        let c = channel as usize;
        if !inner.channels.contains_key(&c) {
            return EINVAL;
        }
        if inner.cqs.values().any(|e| e.channel == c) {
            return EBUSY;
        }
        // Disowned first, then its C object freed as it leaves the registry.
        disown(channel);
        take_channel(inner, channel);
        0
    })
    .unwrap_or(EINVAL)
}

/// `ibv_create_cq`: at least `cqe` entries (`cq->cqe` says how many: 2^k - 1). EINVAL
/// for `cqe` < 1 or above the maximum, a completion vector other than 0, or a channel
/// of another context.
pub(crate) fn create_cq(
    ctx: *mut ibv_context,
    cqe: c_int,
    cq_context: *mut c_void,
    channel: *mut ibv_comp_channel,
    comp_vector: c_int,
) -> *mut ibv_cq {
    let (Ok(cqe), 0) = (u32::try_from(cqe), comp_vector) else {
        return null_with(EINVAL);
    };
    let made = with_inner(ctx, |inner| {
        let ch = channel as usize;
        if !channel.is_null() && !inner.channels.contains_key(&ch) {
            return Err(EINVAL);
        }
        let id = inner.uroce.create_cq(cqe).map_err(|e| e.errno())?;
        let depth = inner.uroce.cq_depth(id).unwrap_or(cqe);
        // Each engine shard has a copy, fed by its QPs (`crate::shard`).
        inner
            .mirror(|c| c.mirror_cq(id, depth))
            .map_err(|e| e.errno())?;
        let mut c: crate::abi::ibv_cq_ex = crate::ffi::zeroed();
        c.context = ctx;
        c.channel = channel;
        c.cq_context = cq_context;
        c.handle = id.0;
        c.cqe = c_int::try_from(depth).unwrap_or(c_int::MAX);
        crate::exports::fill_cq_ex_ops(&mut c);
        let obj = crate::cq_ex::CqObject {
            cq: c,
            extra: Default::default(),
        };
        let c = Box::into_raw(Box::new(obj)).cast::<ibv_cq>();
        inner.cqs.insert(c as usize, CqEntry { id, channel: ch });
        if let Some(mut r) = inner.routes_mut() {
            let route = crate::routes::CqRoute { id, fed_by: 0 };
            r.cqs.insert(c as usize, route);
        }
        inner.cq_by_id.insert(id.0, c as usize);
        if let Some(ch) = channel_object(inner, channel) {
            ch.refcnt += 1;
        }
        own(c, ctx);
        Ok(c)
    });
    match made {
        Some(Ok(cq)) => cq,
        Some(Err(e)) => null_with(e),
        None => null_with(EINVAL),
    }
}

/// `ibv_destroy_cq`: 0; EBUSY while a QP uses it or completion events of it taken with
/// `ibv_get_cq_event` are not acknowledged; EINVAL for an unknown CQ.
pub(crate) fn destroy_cq(cq: *mut ibv_cq) -> c_int {
    let Some(ctx) = owner_of(cq) else {
        return EINVAL;
    };
    with_inner(ctx, |inner| {
        let c = cq as usize;
        let Some(e) = inner.cqs.get(&c).copied() else {
            return EINVAL;
        };
        if inner.qps.values().any(|q| q.send_cq == c || q.recv_cq == c) {
            return EBUSY;
        }
        // Events delivered to the channel and not taken yet go with the CQ (as the
        // kernel drops them); those taken and not acknowledged keep it (libibverbs would
        // wait for them for ever: EBUSY instead).
        let pending = inner.channels.get(&e.channel).map_or(0, |ch| {
            ch.events
                .iter()
                .filter(|&&(p, id)| p == c && id == e.id.0)
                .count()
        });
        if inner.uroce.cq_events_unacked(e.id) as usize > pending {
            return EBUSY;
        }
        // The CQ's channel is registered while the CQ uses it (a channel with CQs cannot
        // be destroyed).
        let channel = cq_object(inner, cq).map_or(std::ptr::null_mut(), |o| o.channel);
        if let Some(ch) = channel_object(inner, channel) {
            ch.refcnt -= 1;
        }
        // Its completions go, in the device's context and in each shard's copy, and
        // its id names nothing from then on (the contexts' own EBUSY cannot fire: no QP
        // of the device uses it, checked above).
        let _ = inner.uroce.destroy_cq(e.id);
        for s in &inner.shards {
            let mut st = s.lock();
            let _ = st.uroce.destroy_cq(e.id);
            // What its copies hold, said again: lock-free polls look at that count.
            s.publish(&st);
        }
        inner.armed.remove(&e.id.0);
        inner.cq_by_id.remove(&e.id.0);
        inner.forget_async_events_of(c);
        // Disowned first, then its C object freed as it leaves the registry.
        disown(cq);
        take_cq(inner, cq);
        0
    })
    .unwrap_or(EINVAL)
}

/// `ibv_resize_cq`: room for at least `cqe` entries (`cq->cqe` says how many: 2^k - 1),
/// the completions it holds kept. EINVAL for an unknown CQ, `cqe` < 1 or above the
/// maximum, or fewer entries than the CQ holds (as rdma_rxe).
pub(crate) fn resize_cq(cq: *mut ibv_cq, cqe: c_int) -> c_int {
    let Some(ctx) = owner_of(cq) else {
        return EINVAL;
    };
    let Ok(cqe) = u32::try_from(cqe) else {
        return EINVAL;
    };
    with_inner(ctx, |inner| {
        let Some(e) = inner.cqs.get(&(cq as usize)).copied() else {
            return EINVAL;
        };
        // Never below what the CQ holds, counted over every shard's copy (each copy
        // checks only its own).
        let held = inner.uroce.cq_held(e.id)
            + (inner.shards.iter())
                .map(|s| s.lock().uroce.cq_held(e.id))
                .sum::<usize>();
        let depth = uroce::verbs::Context::cq_depth_for(cqe).map_or(0, |d| d as usize);
        if depth < held {
            return EINVAL;
        }
        match inner.uroce.resize_cq(e.id, cqe) {
            Ok(depth) => {
                // A shard's copy holding more than that keeps its depth: it still
                // holds all it has.
                let _ = inner.mirror(|c| c.resize_cq(e.id, cqe).map(|_| ()));
                if let Some(o) = cq_object(inner, cq) {
                    o.cqe = c_int::try_from(depth).unwrap_or(c_int::MAX);
                }
                0
            }
            Err(err) => err.errno(),
        }
    })
    .unwrap_or(EINVAL)
}

/// `IBV_WC_*` status values.
fn status_of(s: WcStatus) -> c_int {
    match s {
        WcStatus::Success => 0,
        WcStatus::LocLenErr => 1,
        WcStatus::LocQpOpErr => 2,
        WcStatus::LocProtErr => 4,
        WcStatus::WrFlushErr => 5,
        WcStatus::MwBindErr => 6,
        WcStatus::BadRespErr => 7,
        WcStatus::RemInvReqErr => 9,
        WcStatus::RemAccessErr => 10,
        WcStatus::RemOpErr => 11,
        WcStatus::RetryExcErr => 12,
        WcStatus::RnrRetryExcErr => 13,
    }
}

/// `IBV_WC_*` opcode values.
fn opcode_of(o: WcOpcode) -> c_int {
    match o {
        WcOpcode::Send => 0,
        WcOpcode::RdmaWrite => 1,
        WcOpcode::RdmaRead => 2,
        WcOpcode::CompSwap => 3,
        WcOpcode::FetchAdd => 4,
        WcOpcode::BindMw => 5,
        WcOpcode::LocalInv => 6,
        WcOpcode::Recv => 128,
        WcOpcode::RecvRdmaWithImm => 129,
    }
}

/// A completion as `struct ibv_wc`: immediate data in network order, the invalidated
/// rkey in the same union when IBV_WC_WITH_INV is set.
pub fn wc_of(w: &WorkCompletion) -> ibv_wc {
    ibv_wc {
        wr_id: w.wr_id,
        status: status_of(w.status),
        opcode: opcode_of(w.opcode),
        vendor_err: 0,
        byte_len: w.byte_len,
        imm_data: match (w.imm, w.invalidated_rkey) {
            (_, Some(rkey)) => rkey,
            (Some(imm), None) => imm.to_be(),
            (None, None) => 0,
        },
        qp_num: w.qp_num,
        src_qp: w.src_qp,
        wc_flags: w.flags.0,
        pkey_index: 0,
        slid: 0,
        sl: roce_packet_type(w),
        dlid_path_bits: 0,
    }
}

/// `L3_Header_Type` of a RoCE v2 packet as mlx5 reports it in a UD receive's `sl`:
/// IPv6.
pub const SL_ROCE_IPV6: u8 = 1;
/// As [`SL_ROCE_IPV6`], IPv4.
pub const SL_ROCE_IPV4: u8 = 2;

/// `ibv_wc.sl` of a completion. On RoCE there is no service level in the packet; mlx5
/// (rdma-core's mlx5 provider copies the CQE's 4-bit `sl` field, which for a RoCE receive
/// holds the packet's L3 header type) reports for a UD receive whether its GRH came as
/// an IPv6 header (1) or an IPv4 one (2), and UCX's ud_verbs relies on it to find the
/// destination GID in the 40 GRH bytes (`sl & 7 == 2`: IPv4, the address in the last 4).
/// uroce reports the same for receives with a GRH (UD); 0 otherwise, as before.
fn roce_packet_type(w: &WorkCompletion) -> u8 {
    if w.flags.0 & uroce::transport::WcFlags::GRH.0 == 0 {
        return 0;
    }
    match w.sender {
        Some(std::net::IpAddr::V4(_)) => SL_ROCE_IPV4,
        Some(std::net::IpAddr::V6(_)) => SL_ROCE_IPV6,
        None => 0,
    }
}

/// `ibv_context_ops.poll_cq` (the inline `ibv_poll_cq`): up to `wc.len()` completions
/// into `wc`, their number, or -1 for a CQ that is not one of ours. `ctx` is
/// `cq->context`.
pub(crate) fn poll_cq(
    ctx: *mut ibv_context,
    cq: *mut ibv_cq,
    wc: &mut [MaybeUninit<ibv_wc>],
) -> c_int {
    let n = wc.len();
    poll_with(ctx, cq, n, |i, w| {
        wc[i].write(w);
    })
}

/// One completion of `cq` (for `ibv_start_poll` / `ibv_next_poll`): Some, None when
/// there is none, EINVAL for a CQ that is not one of ours.
pub(crate) fn poll_one(ctx: *mut ibv_context, cq: *mut ibv_cq) -> Result<Option<ibv_wc>, c_int> {
    let mut got = None;
    match poll_with(ctx, cq, 1, |_, w| got = Some(w)) {
        -1 => Err(EINVAL),
        _ => Ok(got),
    }
}

/// Up to `n` completions of `cq`, each given to `out` with its index: their number, or
/// -1 for a CQ that is not one of ours.
fn poll_with(
    ctx: *mut ibv_context,
    cq: *mut ibv_cq,
    n: usize,
    mut out: impl FnMut(usize, ibv_wc),
) -> c_int {
    let Some(shared) = shared_of(ctx) else {
        return -1;
    };
    // A CQ only engine shards feed: their copies, without the device's lock.
    if let Some(got) = shared.poll_on_shards(cq as usize, n, |i, w| out(i, wc_of(w))) {
        return got as c_int;
    }
    let mut g = shared.lock();
    let Some(e) = g.cqs.get(&(cq as usize)).copied() else {
        return -1;
    };
    let inner = &mut *g;
    inner.wcs.clear();
    // The engine shards' copies first (none without shards), then the device's own.
    inner.poll_shards(e.id, n);
    let mut got = inner.wcs.len();
    got += inner.uroce.poll_cq_into(e.id, n - got, &mut inner.wcs);
    if got < n && inner.started() {
        inner.pump(true);
        got += inner.uroce.poll_cq_into(e.id, n - got, &mut inner.wcs);
    }
    shared.app_polled();
    for (i, w) in inner.wcs.iter().take(n).enumerate() {
        out(i, wc_of(w));
    }
    got as c_int
}

/// `ibv_context_ops.req_notify_cq` (the inline `ibv_req_notify_cq`): 0 or the errno.
/// `ctx` is `cq->context`.
pub(crate) fn req_notify_cq(
    ctx: *mut ibv_context,
    cq: *mut ibv_cq,
    solicited_only: c_int,
) -> c_int {
    with_inner(ctx, |inner| {
        let Some(e) = inner.cqs.get(&(cq as usize)).copied() else {
            return EINVAL;
        };
        // Every copy is armed; the first to fire takes the others' arms back.
        let solicited = solicited_only != 0;
        let armed = inner
            .uroce
            .req_notify_cq(e.id, solicited)
            .and_then(|()| inner.mirror(|c| c.req_notify_cq(e.id, solicited)));
        match armed {
            Ok(()) => {
                if !inner.shards.is_empty() {
                    inner.armed.insert(e.id.0);
                }
                0
            }
            Err(e) => e.errno(),
        }
    })
    .unwrap_or(EINVAL)
}

/// `ibv_get_cq_event`: waits for the channel's next completion event (unless its fd was
/// made non-blocking: then EAGAIN when there is none); the CQ and its `cq_context`, or
/// the errno: EINTR when a signal interrupts the wait (libibverbs' one `read(2)` of the
/// channel's fd fails so when the handler was installed without SA_RESTART).
pub(crate) fn get_cq_event(
    channel: *mut ibv_comp_channel,
) -> Result<(*mut ibv_cq, *mut c_void), c_int> {
    let ctx = owner_of(channel).ok_or(EINVAL)?;
    // A registered channel's fd is ours until it is destroyed.
    let fd = with_inner(ctx, |inner| channel_object(inner, channel).map(|c| c.fd))
        .flatten()
        .ok_or(EINVAL)?;
    if let Some(shared) = shared_of(ctx) {
        shared.app_waits();
    }
    loop {
        engine::take_one(fd)?;
        // The oldest event, unless its CQ was destroyed since (then the next one).
        let got = with_inner(ctx, |inner| {
            let (c, id) = inner
                .channels
                .get_mut(&(channel as usize))?
                .events
                .pop_front()?;
            let live = inner.cqs.get(&c).is_some_and(|e| e.id.0 == id);
            Some(if live {
                cq_object(inner, c as *mut ibv_cq).map(|o| (c as *mut ibv_cq, o.cq_context))
            } else {
                None
            })
        })
        .flatten();
        match got {
            Some(Some(found)) => return Ok(found),
            Some(None) => continue,
            None => return Err(EINVAL),
        }
    }
}

/// `ibv_ack_cq_events`: acknowledges `nevents` events of `cq` taken with
/// `ibv_get_cq_event`.
pub(crate) fn ack_cq_events(cq: *mut ibv_cq, nevents: u32) {
    let Some(ctx) = owner_of(cq) else { return };
    with_inner(ctx, |inner| {
        if let Some(e) = inner.cqs.get(&(cq as usize)).copied() {
            inner.uroce.ack_cq_events(e.id, nevents);
            if let Some(cq) = cq_object(inner, cq) {
                cq.comp_events_completed = cq.comp_events_completed.wrapping_add(nevents);
            }
        }
    });
}

/// `ibv_get_async_event`: waits for the context's next asynchronous event (non-blocking
/// if the program made `async_fd` so); the event, or the errno (EINTR when a signal
/// interrupts the wait, as with `ibv_get_cq_event`).
pub(crate) fn get_async_event(ctx: *mut ibv_context) -> Result<ibv_async_event, c_int> {
    let shared = shared_of(ctx).ok_or(EINVAL)?;
    shared.app_waits();
    loop {
        engine::take_one(shared.async_fd.as_raw_fd())?;
        let got = shared.lock().async_events.pop_front();
        match got {
            // Its object was destroyed since: the next one.
            Some(e) if e.event.event_type == engine::FORGOTTEN => continue,
            Some(e) => return Ok(e.event),
            None => return Err(libc::EAGAIN),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exports::{
        ibv_create_comp_channel, ibv_create_cq, ibv_destroy_comp_channel, ibv_destroy_cq,
    };

    #[test]
    fn unknown_objects_are_refused() {
        let mut junk = [0u64; 16];
        let p = junk.as_mut_ptr();
        assert_eq!(ibv_destroy_cq(p.cast()), EINVAL);
        assert_eq!(ibv_destroy_comp_channel(p.cast()), EINVAL);
        assert!(
            ibv_create_cq(p.cast(), 1, std::ptr::null_mut(), std::ptr::null_mut(), 0).is_null()
        );
        assert!(ibv_create_comp_channel(p.cast()).is_null());
    }

    #[test]
    fn wc_carries_imm_in_network_order_and_inv_rkey_as_is() {
        let mut w = WorkCompletion::send(7, 0x12, WcOpcode::Recv, 100, WcStatus::Success);
        w.imm = Some(0x0102_0304);
        let c = wc_of(&w);
        assert_eq!(c.imm_data.to_ne_bytes(), [1, 2, 3, 4]);
        assert_eq!((c.opcode, c.status, c.byte_len), (128, 0, 100));
        assert_eq!((c.qp_num, c.wr_id), (7, 0x12));
        w.invalidated_rkey = Some(0xabcd);
        assert_eq!(wc_of(&w).imm_data, 0xabcd);
    }
}
