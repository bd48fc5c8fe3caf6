//! Protection domains and memory regions over the application's own memory: the C
//! objects (`ibv_pd`, `ibv_mr`, and in the other modules `ibv_cq`, `ibv_qp`...) are boxes handed to the program,
//! each known to its context by address (so a pointer that is not one of ours, or one
//! already destroyed, is refused with EINVAL instead of being freed) and to [`OWNERS`]
//! (object → context), so a verb finds its context without reading the object.
//!
//! `ibv_reg_mr` registers the caller's buffer in place (`Context::reg_mr_raw`): the
//! region's address is the buffer's, and the stack will read and write it there, as a
//! NIC does. The C contract is the safety contract: the memory stays valid until
//! `ibv_dereg_mr` succeeds.
//!
//! Safe code: the exported verbs are wrappers in `exports.rs`; the program's memory
//! arrives as an `ffi::ProgramMemory` (made from `ibv_reg_mr`'s contract, which is where
//! the registration's unsafety is argued), and the PD and MR objects are freed through
//! the registry-checked `ffi::take_pd` / `take_mr`.

#![deny(unsafe_code)]

use std::collections::HashMap;
use std::ffi::{c_int, c_uint};
use std::sync::Mutex;

use libc::{EBUSY, EINVAL, EOPNOTSUPP};
use uroce::verbs::Access;

use crate::abi::{ibv_context, ibv_mr, ibv_pd};
use crate::device::with_inner;
use crate::ffi::ProgramMemory;

/// Object address → the `ibv_context` it belongs to.
static OWNERS: Mutex<Option<HashMap<usize, usize>>> = Mutex::new(None);

fn owners() -> std::sync::MutexGuard<'static, Option<HashMap<usize, usize>>> {
    OWNERS.lock().unwrap_or_else(|e| e.into_inner())
}

pub(crate) fn owner_of<T>(obj: *const T) -> Option<*mut ibv_context> {
    owners()
        .as_ref()
        .and_then(|m| m.get(&(obj as usize)))
        .map(|&c| c as *mut ibv_context)
}

pub(crate) fn own<T>(obj: *const T, ctx: *mut ibv_context) {
    owners()
        .get_or_insert_with(HashMap::new)
        .insert(obj as usize, ctx as usize);
}

pub(crate) fn disown<T>(obj: *const T) {
    if let Some(m) = owners().as_mut() {
        m.remove(&(obj as usize));
    }
}

pub(crate) use crate::ffi::null_with;

// ibv_access_flags.
const ACCESS_DATA: c_uint = 0x1f; // LOCAL_WRITE .. MW_BIND, uroce's Access bits
const ACCESS_ZERO_BASED: c_uint = 1 << 5;
const ACCESS_ON_DEMAND: c_uint = 1 << 6;
const ACCESS_HUGETLB: c_uint = 1 << 7;
/// IBV_ACCESS_OPTIONAL_RANGE: hints a provider may ignore (relaxed ordering).
const ACCESS_OPTIONAL: c_uint = 0x3ff0_0000;
/// IBV_ACCESS_LOCAL_WRITE .. IBV_ACCESS_MW_BIND and uroce's rights, one to one.
const ACCESS_BITS: [(c_uint, Access); 5] = [
    (1, Access::LOCAL_WRITE),
    (2, Access::REMOTE_WRITE),
    (4, Access::REMOTE_READ),
    (8, Access::REMOTE_ATOMIC),
    (16, Access::MW_BIND),
];

/// uroce's rights for ibverbs' access flags, or the errno ibverbs gives: EOPNOTSUPP for
/// zero-based and on-demand regions, EINVAL for unknown bits.
pub fn access_of(flags: c_uint) -> Result<Access, c_int> {
    if flags & (ACCESS_ZERO_BASED | ACCESS_ON_DEMAND) != 0 {
        return Err(EOPNOTSUPP);
    }
    if flags & !(ACCESS_DATA | ACCESS_HUGETLB | ACCESS_OPTIONAL) != 0 {
        return Err(EINVAL);
    }
    Ok(ACCESS_BITS
        .iter()
        .filter(|(b, _)| flags & b != 0)
        .fold(Access::NONE, |a, (_, r)| a | *r))
}

/// ibverbs' access flags for uroce's rights (what `ibv_query_qp` reports).
pub fn access_bits(a: Access) -> c_uint {
    ACCESS_BITS
        .iter()
        .filter(|(_, r)| a.contains(*r))
        .fold(0, |b, (bit, _)| b | bit)
}

/// `ibv_alloc_pd`.
pub(crate) fn alloc_pd(ctx: *mut ibv_context) -> *mut ibv_pd {
    let made = with_inner(ctx, |inner| {
        let id = inner.uroce.alloc_pd();
        for s in &inner.shards {
            s.lock().uroce.mirror_pd(id);
        }
        let pd = Box::into_raw(Box::new(ibv_pd {
            context: ctx,
            handle: id.0,
        }));
        inner.pds.insert(pd as usize, id);
        own(pd, ctx);
        pd
    });
    made.unwrap_or_else(|| null_with(EINVAL))
}

/// `ibv_dealloc_pd`: 0, EBUSY while a memory region, QP, SRQ, address handle or memory
/// window uses it, EINVAL for an unknown PD.
pub(crate) fn dealloc_pd(pd: *mut ibv_pd) -> c_int {
    let Some(ctx) = owner_of(pd) else {
        return EINVAL;
    };
    with_inner(ctx, |inner| {
        let Some(&id) = inner.pds.get(&(pd as usize)) else {
            return EINVAL;
        };
        let p = pd as usize;
        if inner.mrs.values().any(|m| m.pd == id)
            || inner.qps.values().any(|q| q.pd == p)
            || inner.ahs.values().any(|a| a.pd == p)
            || inner.srqs.values().any(|s| s.pd == p)
            || inner.mws.values().any(|m| m.1 == p)
        {
            return EBUSY;
        }
        // Disowned first, then its C object freed as it leaves the registry.
        disown(pd);
        crate::ffi::take_pd(inner, pd);
        0
    })
    .unwrap_or(EINVAL)
}

/// `ibv_reg_mr` / `ibv_reg_mr_iova` / `ibv_reg_mr_iova2`: registers the program's memory
/// `mem` as a memory region of `pd`, in place (only `iova` equal to its address:
/// EOPNOTSUPP otherwise).
pub(crate) fn reg_mr(
    pd: *mut ibv_pd,
    mem: ProgramMemory,
    iova: u64,
    access: c_uint,
) -> *mut ibv_mr {
    let Some(ctx) = owner_of(pd) else {
        return null_with(EINVAL);
    };
    let (addr, len) = (mem.addr(), mem.len());
    if iova != addr as u64 {
        // uroce's region address is the buffer's own.
        return null_with(EOPNOTSUPP);
    }
    let rights = match access_of(access) {
        Ok(a) => a,
        Err(e) => return null_with(e),
    };
    let made = with_inner(ctx, |inner| {
        let Some(&id) = inner.pds.get(&(pd as usize)) else {
            return Err(EINVAL);
        };
        let mr = mem
            .register(&mut inner.uroce, id, rights)
            .map_err(|e| e.errno())?;
        mirror_region(inner, &mr)?;
        let c = Box::into_raw(Box::new(ibv_mr {
            context: ctx,
            pd,
            addr,
            length: len,
            handle: mr.lkey,
            lkey: mr.lkey,
            rkey: mr.rkey,
        }));
        inner.mrs.insert(c as usize, mr);
        own(c, ctx);
        Ok(c)
    });
    match made {
        Some(Ok(mr)) => mr,
        Some(Err(e)) => null_with(e),
        None => null_with(EINVAL),
    }
}

/// `IBV_REREG_MR_CHANGE_TRANSLATION`: new address and length.
pub(crate) const REREG_CHANGE_TRANSLATION: c_int = 1;
/// `IBV_REREG_MR_CHANGE_PD`: a new protection domain.
pub(crate) const REREG_CHANGE_PD: c_int = 2;
/// `IBV_REREG_MR_CHANGE_ACCESS`: new access flags.
pub(crate) const REREG_CHANGE_ACCESS: c_int = 4;
/// `IBV_REREG_MR_ERR_INPUT`: the input was refused; the region is as it was.
pub(crate) const REREG_ERR_INPUT: c_int = -1;
/// `IBV_REREG_MR_ERR_CMD`: the provider refused the change. rdma-core says the region
/// should not be used after it; uroce leaves it as it was.
pub(crate) const REREG_ERR_CMD: c_int = -4;

/// The registered range of the program's region `mr` (its address and length), if `mr`
/// is one.
pub(crate) fn mr_range(mr: *mut ibv_mr) -> Option<(u64, usize)> {
    let ctx = owner_of(mr)?;
    with_inner(ctx, |inner| {
        inner.mrs.get(&(mr as usize)).map(|m| (m.addr, m.len))
    })
    .flatten()
}

/// The checks `ibv_rereg_mr` makes before asking the provider (rdma-core 44's verbs.c),
/// each `IBV_REREG_MR_ERR_INPUT` with EINVAL: flags outside
/// `IBV_REREG_MR_FLAGS_SUPPORTED`, a new translation with a NULL address or a zero
/// length (`translation`: whether the new one has both), access flags without
/// `IBV_REREG_MR_CHANGE_ACCESS`.
pub(crate) fn rereg_input_ok(flags: c_int, translation: bool, access: c_int) -> bool {
    let all = REREG_CHANGE_TRANSLATION | REREG_CHANGE_PD | REREG_CHANGE_ACCESS;
    flags & !all == 0
        && (flags & REREG_CHANGE_TRANSLATION == 0 || translation)
        && (access == 0 || flags & REREG_CHANGE_ACCESS != 0)
}

/// `ibv_rereg_mr`, after [`rereg_input_ok`]: without a new translation, moves the region
/// to the new protection domain `pd` (`IBV_REREG_MR_CHANGE_PD`) with the new rights
/// (`IBV_REREG_MR_CHANGE_ACCESS`) in place, its keys kept (as rdma_rxe and NICs keep
/// them); with one, registers `mem` in the new PD with the new rights, then deregisters
/// the old registration: the C `ibv_mr` keeps its address, its keys are the new ones. The new `(lkey, rkey)`, or the `ibv_rereg_mr`
/// return code and errno: `IBV_REREG_MR_ERR_INPUT` / EINVAL for a region that is not
/// one, `IBV_REREG_MR_ERR_CMD` for what the kernel's rereg refuses (no flag: EINVAL; a
/// PD that is not the context's: EINVAL; access flags as `ibv_reg_mr` refuses them; the
/// old registration in use: EBUSY), in which case the region is as it was.
pub(crate) fn rereg_mr(
    mr: *mut ibv_mr,
    flags: c_int,
    pd: *mut ibv_pd,
    mem: ProgramMemory,
    access: c_int,
) -> Result<(u32, u32), (c_int, c_int)> {
    let Some(ctx) = owner_of(mr) else {
        return Err((REREG_ERR_INPUT, EINVAL));
    };
    let done = with_inner(ctx, |inner| {
        let Some(old) = inner.mrs.get(&(mr as usize)).copied() else {
            return Err((REREG_ERR_INPUT, EINVAL));
        };
        if flags == 0 {
            return Err((REREG_ERR_CMD, EINVAL));
        }
        let pd_id = match flags & REREG_CHANGE_PD {
            0 => old.pd,
            _ => *inner
                .pds
                .get(&(pd as usize))
                .ok_or((REREG_ERR_CMD, EINVAL))?,
        };
        let rights = match flags & REREG_CHANGE_ACCESS {
            0 => old.access,
            _ => access_of(access as c_uint).map_err(|e| (REREG_ERR_CMD, e))?,
        };
        if flags & REREG_CHANGE_TRANSLATION == 0 {
            // Same bytes: the region is changed in place and keeps its keys, as a NIC's
            // rereg keeps them (a peer holding the rkey goes on using it).
            let new = inner
                .uroce
                .modify_mr(&old, pd_id, rights)
                .map_err(|e| (REREG_ERR_CMD, e.errno()))?;
            // The shards' copies took the same checks in the device's own: they agree.
            let _ = inner.mirror(|c| c.modify_mr(&old, pd_id, rights).map(|_| ()));
            inner.mrs.insert(mr as usize, new);
            return Ok((new.lkey, new.rkey));
        }
        let new = mem
            .register(&mut inner.uroce, pd_id, rights)
            .map_err(|e| (REREG_ERR_CMD, e.errno()))?;
        mirror_region(inner, &new).map_err(|e| (REREG_ERR_CMD, e))?;
        if let Err(e) = deregister(inner, &old) {
            // Nothing refers to the new registration yet.
            let _ = deregister(inner, &new);
            return Err((REREG_ERR_CMD, e.errno()));
        }
        inner.mrs.insert(mr as usize, new);
        Ok((new.lkey, new.rkey))
    });
    done.unwrap_or(Err((REREG_ERR_INPUT, EINVAL)))
}

/// Registers region `mr` of the device's own context in every engine shard's too
/// (`crate::shard`); on a failure, none keeps it and the device's own lets it go: the
/// errno.
fn mirror_region(inner: &mut crate::engine::Inner, mr: &uroce::verbs::Mr) -> Result<(), c_int> {
    let Err(e) = inner.mirror(|c| crate::ffi::mirror_region(c, mr)) else {
        return Ok(());
    };
    // The mirrors made so far and the region itself go: nothing refers to them yet.
    let _ = inner.mirror(|c| c.dereg_mr(mr).map(|_| ()));
    let _ = inner.uroce.dereg_mr(mr);
    Err(e.errno())
}

/// Deregisters region `mr` in the device's own context and every shard's, or in none: a
/// work request of any engine that may still use it refuses it (EBUSY), as
/// `Context::dereg_mr` does. (A shard's own deregistration cannot fail once its check
/// passed under the same lock; if it did, the error says so and the region stays
/// registered there, never reached through a freed pointer.)
fn deregister(
    inner: &mut crate::engine::Inner,
    mr: &uroce::verbs::Mr,
) -> Result<(), uroce::verbs::VerbsError> {
    // Every shard's lock is held from its check to its deregistration (in index order,
    // under the device's lock, as the lock order allows): a shard's thread makes
    // references to a region under its own lock alone (a multi-packet SEND landing in a
    // receive, a READ being answered), so a check let go of would say nothing.
    let shards = inner.shards.clone();
    let mut held: Vec<_> = shards.iter().map(|s| s.lock()).collect();
    for st in &held {
        st.uroce.may_dereg_mr(mr)?;
    }
    inner.uroce.dereg_mr(mr)?;
    for st in &mut held {
        st.uroce.dereg_mr(mr)?;
    }
    Ok(())
}

/// `ibv_dereg_mr`: 0, or the errno (EBUSY while in use, EINVAL for an unknown region).
pub(crate) fn dereg_mr(mr: *mut ibv_mr) -> c_int {
    let Some(ctx) = owner_of(mr) else {
        return EINVAL;
    };
    with_inner(ctx, |inner| {
        let Some(m) = inner.mrs.get(&(mr as usize)).copied() else {
            return EINVAL;
        };
        if let Err(e) = deregister(inner, &m) {
            return e.errno();
        }
        // Disowned first, then its C object freed as it leaves the registry.
        disown(mr);
        crate::ffi::take_mr(inner, mr);
        0
    })
    .unwrap_or(EINVAL)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exports::{ibv_alloc_pd, ibv_dealloc_pd, ibv_dereg_mr};

    #[test]
    fn access_flags() {
        assert_eq!(access_of(0), Ok(Access::NONE));
        assert_eq!(access_of(1 | 2 | 4 | 8), Ok(Access::ALL));
        assert_eq!(access_of(16), Ok(Access::MW_BIND));
        assert_eq!(access_of(1 | (1 << 20)), Ok(Access::LOCAL_WRITE));
        assert_eq!(access_of(1 << 7), Ok(Access::NONE));
        assert_eq!(access_of(1 << 5), Err(EOPNOTSUPP));
        assert_eq!(access_of(1 << 6), Err(EOPNOTSUPP));
        assert_eq!(access_of(1 << 8), Err(EINVAL));
        for bits in 0..32 {
            assert_eq!(access_bits(access_of(bits).unwrap()), bits);
        }
    }

    #[test]
    fn unknown_objects_are_refused() {
        let mut junk = [0u64; 16];
        let p = junk.as_mut_ptr();
        assert_eq!(ibv_dealloc_pd(p.cast()), EINVAL);
        assert_eq!(ibv_dereg_mr(p.cast()), EINVAL);
        assert!(ibv_alloc_pd(p.cast()).is_null());
    }
}
