//! Memory windows (IBTA Vol. 1 §10.6.7; ibverbs `ibv_alloc_mw`, `ibv_bind_mw`,
//! IBV_WR_BIND_MW, IBV_WR_LOCAL_INV, IBV_WR_SEND_WITH_INV): a window is an rkey of its own
//! that grants remote access to part of a memory region, bound and unbound while the
//! region stays registered.
//!
//! - A type 1 window is bound by the Bind Memory Window verb (`Context::bind_mw`) and
//!   stays valid until it is deallocated; binding it again (length 0 unbinds it) is the
//!   only way to change what it grants. It cannot be invalidated (o10-37.2.26).
//! - A type 2 window (type 2B, as rdma_rxe and mlx5 have it) is bound by a BIND_MW work
//!   request, only while it is free (o10-37.2.30), and only to a QP of its own protection
//!   domain (C10-72); it is then tied to that QP: only requests arriving on that QP may
//!   use its rkey, and it is freed again by LOCAL_INV on the QP's send queue or by a
//!   peer's SEND with Invalidate arriving on that QP.
//!
//! An rkey names a window by its upper 24 bits, which never change; the low 8 bits (the
//! "key") are the binder's choice at each bind, `ibv_inc_rkey` of the last one by
//! convention ([`inc_rkey`]), so a peer holding the rkey of an earlier binding is refused.
//! While a window is bound, the rkey table of [`Memory`] holds a copy of what it grants,
//! so [`Memory::check_remote`] finds a window, like a region, in one lookup.

use super::{Access, AccessError, KeyMap, Memory, PdId, RegError, RemoteKey, Span};

/// ibverbs' `ibv_inc_rkey`: the next key of a window, its low 8 bits incremented
/// (wrapping), its upper 24 bits kept.
pub fn inc_rkey(rkey: u32) -> u32 {
    (rkey & !0xff) | (rkey.wrapping_add(1) & 0xff)
}

/// The type of a memory window (ibv_mw_type).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MwType {
    /// IBV_MW_TYPE_1: bound by `Context::bind_mw`, never invalidated.
    Type1,
    /// IBV_MW_TYPE_2: bound by a BIND_MW work request to one QP; invalidated by LOCAL_INV
    /// or a peer's SEND with Invalidate.
    Type2,
}

/// Which window: the upper 24 bits of its rkeys, the same for every binding.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MwId(pub u32);

/// What the application keeps of a memory window (ibv_mw).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Mw {
    /// Protection domain.
    pub pd: PdId,
    /// Type 1 or type 2.
    pub mw_type: MwType,
    /// The rkey: the one it was allocated with, then (type 1) the one `Context::bind_mw`
    /// gave it. For a type 2 window the application tracks the rkey of its last BIND_MW
    /// work request, as with ibverbs.
    pub rkey: u32,
}

impl Mw {
    /// The window, whatever its current key.
    pub fn id(&self) -> MwId {
        MwId(self.rkey >> 8)
    }
}

/// What a bind asks for (ibv_mw_bind_info, plus the new rkey of ibv_send_wr's `bind_mw`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BindRequest {
    /// The window.
    pub mw: MwId,
    /// The rkey the window takes: only its low 8 bits are used.
    pub rkey: u32,
    /// The memory region's lkey (not looked at when `length` is 0).
    pub mr_lkey: u32,
    /// First byte granted (an address inside the region).
    pub addr: u64,
    /// Bytes granted; 0 unbinds a type 1 window.
    pub length: u64,
    /// Rights granted: REMOTE_READ, REMOTE_WRITE, REMOTE_ATOMIC (other bits ignored).
    pub access: Access,
}

/// Why a bind failed (completes IBV_WC_MW_BIND_ERR).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum BindError {
    /// No such window (never allocated, or deallocated).
    #[error("no such memory window")]
    NoSuchMw,
    /// A type 2 window that is bound already (o10-37.2.30).
    #[error("type 2 window already bound")]
    Bound,
    /// A type 2 window and a QP of another protection domain (C10-72), or a region of
    /// another protection domain than the window's.
    #[error("window, QP or region in different protection domains")]
    WrongPd,
    /// A type 2 window bound with length 0 (o10-37.2.40).
    #[error("type 2 window bound with length 0")]
    ZeroLength,
    /// No region with this lkey.
    #[error("no memory region with lkey {0:#x}")]
    NoSuchMr(u32),
    /// The region was registered without IBV_ACCESS_MW_BIND (C10-73).
    #[error("region registered without MW_BIND")]
    NoBindRight,
    /// REMOTE_WRITE or REMOTE_ATOMIC on a region without LOCAL_WRITE (C10-74).
    #[error("writable window on a region without LOCAL_WRITE")]
    NotWritable,
    /// The range is not inside the region (C10-75).
    #[error("window range outside its region")]
    OutOfRegion,
}

/// Why an invalidation failed (LOCAL_INV completes IBV_WC_LOC_QP_OP_ERR; a SEND with
/// Invalidate is an invalid request).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum InvalidateError {
    /// No window has this rkey now: unknown, an older key of a window, an ordinary
    /// region's rkey (uroce has no fast-registered regions, the only ones ibverbs lets
    /// a key invalidate), a deallocated window.
    #[error("rkey {0:#x} names no window that can be invalidated")]
    NoSuchKey(u32),
    /// A type 1 window (o10-37.2.26).
    #[error("type 1 windows cannot be invalidated")]
    Type1,
    /// A type 2 window that is not bound.
    #[error("window not bound")]
    NotBound,
    /// The window belongs to another protection domain, or (SEND with Invalidate) is
    /// bound to another QP.
    #[error("window of another protection domain or QP")]
    NotThisQp,
}

/// What a bound window grants: kept in the rkey table under its current rkey.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Grant {
    pd: PdId,
    /// The QP a type 2 window is bound to; `None` for type 1 (any QP of the PD).
    qpn: Option<u32>,
    /// The region, and the address of its first byte.
    mr_lkey: u32,
    mr_addr: u64,
    addr: u64,
    length: u64,
    access: Access,
}

impl Grant {
    /// The remote access check through a window (IBTA §10.6.7.1; rdma_rxe's
    /// `rxe_lookup_mw` and `check_rkey`): same PD, a type 2 window only on its QP, the
    /// right granted, `[va, va+len)` inside the window (which lies inside its region).
    pub(super) fn check(
        &self,
        pd: PdId,
        qpn: u32,
        va: u64,
        len: u64,
        need: Access,
    ) -> Result<Span, AccessError> {
        if self.pd != pd || self.qpn.is_some_and(|q| q != qpn) {
            return Err(AccessError::WrongPd);
        }
        if !self.access.contains(need) {
            return Err(AccessError::NoRight);
        }
        let oob = AccessError::OutOfBounds { va, len };
        let off = va.checked_sub(self.addr).ok_or(oob)?;
        if off.checked_add(len).ok_or(oob)? > self.length {
            return Err(oob);
        }
        Ok(Span {
            lkey: self.mr_lkey,
            offset: (va - self.mr_addr) as usize,
            len: len as usize,
        })
    }
}

/// One allocated window.
#[derive(Debug, Clone, Copy)]
pub(super) struct Window {
    pd: PdId,
    mw_type: MwType,
    rkey: u32,
    /// What it grants while bound with a length above 0.
    grant: Option<Grant>,
}

/// The windows of a context, by [`MwId`].
pub(super) type Windows = KeyMap<Window>;

impl Memory {
    /// Allocates a window of `pd` (ibv_alloc_mw): unbound, granting nothing. Its rkey
    /// comes from the same generator as region keys (never handed out before), with upper
    /// 24 bits no other key has.
    pub fn alloc_mw(&mut self, pd: PdId, mw_type: MwType) -> Result<Mw, RegError> {
        if !self.pd_exists(pd) {
            return Err(RegError::NoSuchPd);
        }
        // The top bit marks a window's key (region keys never have it), and a window id
        // is never used twice: no rkey a peer may still hold, of a region or of an earlier
        // window with any key byte, ever names this window.
        let rkey = loop {
            let k = self.keys.next();
            let id = k >> 8;
            if k & super::WINDOW_KEY != 0
                && !self.windows.contains_key(&id)
                && !self.retired_windows.contains_key(&id)
            {
                break k;
            }
        };
        let w = Window {
            pd,
            mw_type,
            rkey,
            grant: None,
        };
        self.windows.insert(rkey >> 8, w);
        Ok(Mw { pd, mw_type, rkey })
    }

    /// Deallocates a window (ibv_dealloc_mw): bound or not, its rkey never grants access
    /// again (rdma_rxe's `rxe_dealloc_mw` unbinds it).
    pub fn dealloc_mw(&mut self, mw: MwId) -> Result<(), RegError> {
        let w = self.windows.remove(&mw.0).ok_or(RegError::NoSuchMw)?;
        if w.grant.is_some() {
            self.rkeys.remove(&w.rkey);
        }
        self.retired_windows.insert(mw.0, ());
        Ok(())
    }

    /// The type of a window; `None` for an unknown one.
    pub fn mw_type(&self, mw: MwId) -> Option<MwType> {
        self.windows.get(&mw.0).map(|w| w.mw_type)
    }

    /// The current rkey of a window; `None` for an unknown one.
    pub fn mw_rkey(&self, mw: MwId) -> Option<u32> {
        self.windows.get(&mw.0).map(|w| w.rkey)
    }

    /// Whether a window is bound to the region `lkey` (which then cannot be deregistered:
    /// EBUSY, IBTA §10.6.7.2.6; rdma_rxe counts them in `num_mw`).
    pub fn has_windows(&self, lkey: u32) -> bool {
        self.windows
            .values()
            .any(|w| w.grant.is_some_and(|g| g.mr_lkey == lkey))
    }

    /// Whether the protection domain has windows (which keep it from being deallocated).
    pub(super) fn pd_has_windows(&self, pd: PdId) -> bool {
        self.windows.values().any(|w| w.pd == pd)
    }

    /// Binds a window for QP `qpn` of protection domain `qp_pd`, the checks of rdma_rxe's
    /// `rxe_check_bind_mw` (IBTA C10-72 to C10-75, o10-37.2.30, o10-37.2.40) and, as its
    /// user-space provider checks, the region in the window's PD. On success the window
    /// takes the new key (the low 8 bits of `b.rkey`) and its old rkey stops working;
    /// a type 2 window is tied to `qpn`. On failure nothing changes.
    pub fn bind_mw(&mut self, qp_pd: PdId, qpn: u32, b: &BindRequest) -> Result<u32, BindError> {
        let w = *self.windows.get(&b.mw.0).ok_or(BindError::NoSuchMw)?;
        if w.mw_type == MwType::Type2 {
            if w.grant.is_some() {
                return Err(BindError::Bound);
            }
            if qp_pd != w.pd {
                return Err(BindError::WrongPd);
            }
            if b.length == 0 {
                return Err(BindError::ZeroLength);
            }
        }
        let remote = Access::REMOTE_READ | Access::REMOTE_WRITE | Access::REMOTE_ATOMIC;
        let access = Access(b.access.0 & remote.0);
        let grant = if b.length == 0 {
            None
        } else {
            let mr = self.mr(b.mr_lkey).ok_or(BindError::NoSuchMr(b.mr_lkey))?;
            if mr.pd != w.pd {
                return Err(BindError::WrongPd);
            }
            if !mr.access.contains(Access::MW_BIND) {
                return Err(BindError::NoBindRight);
            }
            let writes = Access::REMOTE_WRITE.0 | Access::REMOTE_ATOMIC.0;
            if access.0 & writes != 0 && !mr.access.contains(Access::LOCAL_WRITE) {
                return Err(BindError::NotWritable);
            }
            let end = b.addr.checked_add(b.length).ok_or(BindError::OutOfRegion)?;
            if b.addr < mr.addr || end > mr.addr + mr.len as u64 {
                return Err(BindError::OutOfRegion);
            }
            Some(Grant {
                pd: w.pd,
                qpn: (w.mw_type == MwType::Type2).then_some(qpn),
                mr_lkey: mr.lkey,
                mr_addr: mr.addr,
                addr: b.addr,
                length: b.length,
                access,
            })
        };
        if w.grant.is_some() {
            self.rkeys.remove(&w.rkey);
        }
        let rkey = (w.rkey & !0xff) | (b.rkey & 0xff);
        if let Some(g) = grant {
            self.rkeys.insert(rkey, RemoteKey::Mw(g));
        }
        self.windows.insert(b.mw.0, Window { rkey, grant, ..w });
        Ok(rkey)
    }

    /// Unbinds every type 2 window bound to QP `qpn`, which went to RESET: brought up
    /// again, perhaps towards another peer, it must not carry the old bindings' grants
    /// (their rkeys never grant access again, as after an invalidation).
    pub fn unbind_qp_windows(&mut self, qpn: u32) {
        for w in self.windows.values_mut() {
            if w.grant.is_some_and(|g| g.qpn == Some(qpn)) {
                w.grant = None;
                self.rkeys.remove(&w.rkey);
            }
        }
    }

    /// Invalidates the type 2 window whose current rkey is `rkey`: LOCAL_INV posted on a QP
    /// of `pd` (`qpn` `None`), or a SEND with Invalidate arriving on QP `qpn` (then the
    /// window must be bound to that QP: a peer revokes only what was bound for its
    /// connection). rdma_rxe's `rxe_invalidate_mw` refuses an unknown key, a key that is
    /// not the window's current one, and a type 1 window (o10-37.2.26). The window is
    /// free again: it may be bound anew, and the rkey never grants access again.
    pub fn invalidate(
        &mut self,
        pd: PdId,
        qpn: Option<u32>,
        rkey: u32,
    ) -> Result<(), InvalidateError> {
        let none = InvalidateError::NoSuchKey(rkey);
        let w = self.windows.get_mut(&(rkey >> 8)).ok_or(none)?;
        if w.rkey != rkey {
            return Err(none);
        }
        if w.mw_type == MwType::Type1 {
            return Err(InvalidateError::Type1);
        }
        let g = w.grant.ok_or(InvalidateError::NotBound)?;
        if g.pd != pd || qpn.is_some_and(|q| g.qpn != Some(q)) {
            return Err(InvalidateError::NotThisQp);
        }
        w.grant = None;
        self.rkeys.remove(&rkey);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const QP: u32 = 0x11;

    fn setup() -> (Memory, PdId, super::super::Mr) {
        let mut m = Memory::new(7);
        let pd = m.alloc_pd();
        let mr = m
            .register(pd, vec![0; 4096], Access::LOCAL_WRITE | Access::MW_BIND)
            .unwrap();
        (m, pd, mr)
    }

    fn req(mw: &Mw, mr: &super::super::Mr, off: u64, len: u64, access: Access) -> BindRequest {
        BindRequest {
            mw: mw.id(),
            rkey: inc_rkey(mw.rkey),
            mr_lkey: mr.lkey,
            addr: mr.addr + off,
            length: len,
            access,
        }
    }

    /// ibv_inc_rkey: the low 8 bits count, wrapping; the upper 24 stay.
    #[test]
    fn inc_rkey_wraps_in_the_low_byte() {
        assert_eq!(inc_rkey(0x1234_5601), 0x1234_5602);
        assert_eq!(inc_rkey(0x1234_56ff), 0x1234_5600);
    }

    /// IBTA §10.6.7.1: a bound window grants its rights inside its range only; outside
    /// it, though inside the region, the access is out of bounds; a right it does not
    /// grant is refused; an unbound window grants nothing.
    #[test]
    fn window_grants_its_range_and_rights_only() {
        let (mut m, pd, mr) = setup();
        let mw = m.alloc_mw(pd, MwType::Type1).unwrap();
        let none = m.check_remote(pd, QP, mw.rkey, mr.addr, 1, Access::REMOTE_READ);
        assert_eq!(none, Err(AccessError::BadKey(mw.rkey)));
        let rkey = m
            .bind_mw(pd, QP, &req(&mw, &mr, 100, 200, Access::REMOTE_READ))
            .unwrap();
        assert_eq!(rkey, inc_rkey(mw.rkey));
        let s = m
            .check_remote(pd, QP, rkey, mr.addr + 100, 200, Access::REMOTE_READ)
            .unwrap();
        assert_eq!((s.lkey, s.offset, s.len), (mr.lkey, 100, 200));
        // Any QP of the PD may use a type 1 window.
        assert!(m
            .check_remote(pd, QP + 1, rkey, mr.addr + 150, 1, Access::REMOTE_READ)
            .is_ok());
        for (va, len) in [(mr.addr + 99, 1), (mr.addr + 299, 2), (mr.addr, 4096)] {
            assert_eq!(
                m.check_remote(pd, QP, rkey, va, len, Access::REMOTE_READ),
                Err(AccessError::OutOfBounds { va, len })
            );
        }
        assert_eq!(
            m.check_remote(pd, QP, rkey, mr.addr + 100, 1, Access::REMOTE_WRITE),
            Err(AccessError::NoRight)
        );
        // The key of the allocation (before the bind) grants nothing.
        assert_eq!(
            m.check_remote(pd, QP, mw.rkey, mr.addr + 100, 1, Access::REMOTE_READ),
            Err(AccessError::BadKey(mw.rkey))
        );
    }

    /// rdma_rxe `rxe_check_bind_mw`: C10-73 (MW_BIND on the region), C10-74 (writable
    /// window needs a LOCAL_WRITE region), C10-75 (range inside the region), the region
    /// in the window's PD; type 2: o10-37.2.30 (free), C10-72 (QP's PD), o10-37.2.40
    /// (length above 0). A failed bind changes nothing.
    #[test]
    fn bind_errors() {
        let (mut m, pd, mr) = setup();
        let other = m.alloc_pd();
        let plain = m.register(pd, vec![0; 64], Access::LOCAL_WRITE).unwrap();
        let ro = m.register(pd, vec![0; 64], Access::MW_BIND).unwrap();
        let elsewhere = m
            .register(other, vec![0; 64], Access::LOCAL_WRITE | Access::MW_BIND)
            .unwrap();
        let t1 = m.alloc_mw(pd, MwType::Type1).unwrap();
        let t2 = m.alloc_mw(pd, MwType::Type2).unwrap();
        let r = Access::REMOTE_READ;
        let w = Access::REMOTE_WRITE;
        assert_eq!(
            m.bind_mw(pd, QP, &req(&t1, &plain, 0, 8, r)),
            Err(BindError::NoBindRight)
        );
        assert_eq!(
            m.bind_mw(pd, QP, &req(&t1, &ro, 0, 8, w)),
            Err(BindError::NotWritable)
        );
        assert!(m.bind_mw(pd, QP, &req(&t1, &ro, 0, 8, r)).is_ok());
        assert_eq!(
            m.bind_mw(pd, QP, &req(&t1, &mr, 4000, 97, r)),
            Err(BindError::OutOfRegion)
        );
        assert_eq!(
            m.bind_mw(pd, QP, &req(&t1, &elsewhere, 0, 8, r)),
            Err(BindError::WrongPd)
        );
        assert_eq!(
            m.bind_mw(other, QP, &req(&t2, &mr, 0, 8, r)),
            Err(BindError::WrongPd)
        );
        assert_eq!(
            m.bind_mw(pd, QP, &req(&t2, &mr, 0, 0, r)),
            Err(BindError::ZeroLength)
        );
        let k = m.bind_mw(pd, QP, &req(&t2, &mr, 0, 8, r)).unwrap();
        let again = Mw { rkey: k, ..t2 };
        assert_eq!(
            m.bind_mw(pd, QP, &req(&again, &mr, 0, 8, r)),
            Err(BindError::Bound)
        );
        assert!(m.check_remote(pd, QP, k, mr.addr, 8, r).is_ok());
        let gone = MwId(0x00de_adbe);
        let mut bad = req(&t2, &mr, 0, 8, r);
        bad.mw = gone;
        assert_eq!(m.bind_mw(pd, QP, &bad), Err(BindError::NoSuchMw));
    }

    /// Type 2B (IBTA §10.6.7.2): bound to one QP, usable over that QP only; invalidated
    /// (LOCAL_INV, or SEND with Invalidate on that QP) its rkey grants nothing, and it
    /// can be bound again. Type 1 windows and regions cannot be invalidated
    /// (o10-37.2.26; rdma_rxe `rxe_invalidate_mw`).
    #[test]
    fn type2_window_is_tied_to_its_qp_and_invalidated() {
        let (mut m, pd, mr) = setup();
        let rw = Access::REMOTE_READ | Access::REMOTE_WRITE;
        let t2 = m.alloc_mw(pd, MwType::Type2).unwrap();
        let k = m.bind_mw(pd, QP, &req(&t2, &mr, 0, 64, rw)).unwrap();
        assert!(m.check_remote(pd, QP, k, mr.addr, 64, rw).is_ok());
        assert_eq!(
            m.check_remote(pd, QP + 1, k, mr.addr, 64, rw),
            Err(AccessError::WrongPd)
        );
        // Only over its own QP may a peer invalidate it; never with an older key.
        assert_eq!(
            m.invalidate(pd, Some(QP + 1), k),
            Err(InvalidateError::NotThisQp)
        );
        assert_eq!(
            m.invalidate(pd, Some(QP), t2.rkey),
            Err(InvalidateError::NoSuchKey(t2.rkey))
        );
        assert_eq!(m.invalidate(pd, Some(QP), k), Ok(()));
        assert_eq!(
            m.check_remote(pd, QP, k, mr.addr, 1, rw),
            Err(AccessError::BadKey(k))
        );
        assert_eq!(m.invalidate(pd, None, k), Err(InvalidateError::NotBound));
        // Bound again with the next key, then invalidated locally.
        let k2 = m
            .bind_mw(pd, QP, &req(&Mw { rkey: k, ..t2 }, &mr, 0, 64, rw))
            .unwrap();
        assert_eq!(k2, inc_rkey(k));
        assert_eq!(
            m.check_remote(pd, QP, k, mr.addr, 1, rw),
            Err(AccessError::BadKey(k))
        );
        assert_eq!(m.invalidate(pd, None, k2), Ok(()));
        let t1 = m.alloc_mw(pd, MwType::Type1).unwrap();
        let k1 = m.bind_mw(pd, QP, &req(&t1, &mr, 0, 8, rw)).unwrap();
        assert_eq!(m.invalidate(pd, None, k1), Err(InvalidateError::Type1));
        let remote = m.register(pd, vec![0; 8], Access::REMOTE_READ).unwrap();
        assert_eq!(
            m.invalidate(pd, None, remote.rkey),
            Err(InvalidateError::NoSuchKey(remote.rkey))
        );
        assert!(m
            .check_remote(pd, QP, remote.rkey, remote.addr, 8, Access::REMOTE_READ)
            .is_ok());
    }

    /// A region with a bound window cannot be deregistered (IBTA §10.6.7.2.6, rdma_rxe's
    /// `num_mw`); once the window is unbound or deallocated it can. A PD with windows
    /// cannot be deallocated. A deallocated window's rkey grants nothing.
    #[test]
    fn windows_hold_their_region_and_pd() {
        let (mut m, pd, mr) = setup();
        let t1 = m.alloc_mw(pd, MwType::Type1).unwrap();
        let k = m
            .bind_mw(pd, QP, &req(&t1, &mr, 0, 8, Access::REMOTE_READ))
            .unwrap();
        assert!(m.has_windows(mr.lkey));
        let mut unbind = req(&Mw { rkey: k, ..t1 }, &mr, 0, 0, Access::NONE);
        unbind.length = 0;
        let k = m.bind_mw(pd, QP, &unbind).unwrap();
        assert!(!m.has_windows(mr.lkey));
        assert_eq!(
            m.check_remote(pd, QP, k, mr.addr, 1, Access::REMOTE_READ),
            Err(AccessError::BadKey(k))
        );
        let k = m
            .bind_mw(
                pd,
                QP,
                &req(&Mw { rkey: k, ..t1 }, &mr, 0, 8, Access::REMOTE_READ),
            )
            .unwrap();
        assert_eq!(m.dealloc_pd(pd), Err(RegError::Busy));
        m.dealloc_mw(t1.id()).unwrap();
        assert!(!m.has_windows(mr.lkey));
        assert_eq!(
            m.check_remote(pd, QP, k, mr.addr, 1, Access::REMOTE_READ),
            Err(AccessError::BadKey(k))
        );
        assert_eq!(m.dealloc_mw(t1.id()), Err(RegError::NoSuchMw));
    }

    /// Window rkeys come from the seeded generator: no two windows (or a window and a
    /// region) share the upper 24 bits, and they do not count up.
    #[test]
    fn window_keys_are_distinct_and_random() {
        let (mut m, pd, mr) = setup();
        let a = m.alloc_mw(pd, MwType::Type2).unwrap();
        let b = m.alloc_mw(pd, MwType::Type2).unwrap();
        assert_ne!(a.id(), b.id());
        assert_ne!(b.id().0.wrapping_sub(a.id().0), 1);
        for k in [mr.lkey, mr.rkey] {
            assert!(k >> 8 != a.id().0 && k >> 8 != b.id().0);
        }
    }

    /// No key a peer may hold ever names something else later: region keys and window
    /// rkeys are told apart by their top bit (whatever key byte a bind uses), and a
    /// deallocated window's id is never given to a new window.
    #[test]
    fn window_keys_never_collide_with_region_keys_or_old_windows() {
        let (mut m, pd, _) = setup();
        let mut ids = std::collections::HashSet::new();
        for _ in 0..2000 {
            let w = m.alloc_mw(pd, MwType::Type2).unwrap();
            assert_ne!(w.rkey & super::super::WINDOW_KEY, 0);
            assert!(ids.insert(w.id().0), "window id {:#x} used twice", w.id().0);
            m.dealloc_mw(w.id()).unwrap();
            let r = m
                .register(pd, vec![0; 8], Access::LOCAL_WRITE | Access::REMOTE_WRITE)
                .unwrap();
            assert_eq!(r.rkey & super::super::WINDOW_KEY, 0);
            assert_eq!(r.lkey & super::super::WINDOW_KEY, 0);
            m.deregister(r.lkey).unwrap();
        }
    }

    /// RESET of a QP unbinds the type 2 windows bound to it, and only those.
    #[test]
    fn unbind_qp_windows_takes_only_that_qps_grants() {
        let (mut m, pd, mr) = setup();
        let mine = m.alloc_mw(pd, MwType::Type2).unwrap();
        let other = m.alloc_mw(pd, MwType::Type2).unwrap();
        let bind = |mw: &Mw| BindRequest {
            mw: mw.id(),
            rkey: inc_rkey(mw.rkey),
            mr_lkey: mr.lkey,
            addr: mr.addr,
            length: 16,
            access: Access::REMOTE_WRITE,
        };
        let k1 = m.bind_mw(pd, QP, &bind(&mine)).unwrap();
        let k2 = m.bind_mw(pd, QP + 1, &bind(&other)).unwrap();
        m.unbind_qp_windows(QP);
        let w = Access::REMOTE_WRITE;
        assert!(m.check_remote(pd, QP, k1, mr.addr, 8, w).is_err());
        assert!(m.check_remote(pd, QP + 1, k2, mr.addr, 8, w).is_ok());
        assert!(
            m.has_windows(mr.lkey),
            "the other QP's window still holds the region"
        );
    }
}
