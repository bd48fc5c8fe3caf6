//! Memory: protection domains and registered memory regions (IBTA §10.6), with the one
//! bounds-and-rights check that every remote access goes through.
//!
//! A region's bytes are either the program's, registered in place (ibverbs'
//! `ibv_reg_mr`: the NIC reads and writes them where they are, while the program runs;
//! see [`crate::endpoint::Context::reg_mr_raw`] for the contract), or the stack's own, a
//! `Vec<u8>` handed over at registration and back at [`Memory::deregister`]. Either way
//! the stack reaches them through the table, by key, and only the bytes one access
//! checked, as [`SharedBytes`] / [`SharedBytesMut`]: raw copies and atomics, never a Rust
//! reference, since the program may touch its memory at any time. A packet's payload
//! moves between the wire buffer and the region once, in place, with no copy in between.
//! `shared.rs` holds the pointer, and is with `crc.rs` (a CRC over bytes read in place, for
//! a payload sent from where it lies) the only code of `mem` with `unsafe`. Keys come from
//! `keys.rs`: never the same twice in a context's life
//! (a deregistered region's rkey never names another region), and not sequential (a peer
//! that knows one rkey cannot count to the next).
//! Memory windows (`window.rs`) are rkeys of their own over part of a region; the rkey
//! table names a region or a bound window, so one lookup finds either.

#![deny(unsafe_code)]

pub(crate) mod crc;
mod keys;
mod shared;

use keys::Keys;
pub(crate) use shared::Buffer;
pub use shared::{SharedBytes, SharedBytesMut};

mod window;

pub use window::{inc_rkey, BindError, BindRequest, InvalidateError, Mw, MwId, MwType};

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// Access rights of a memory region (ibv_access_flags).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Access(u8);

impl Access {
    /// No remote access, read-only locally.
    pub const NONE: Access = Access(0);
    /// The local HCA may write (receive buffers, RDMA READ and atomic results).
    pub const LOCAL_WRITE: Access = Access(1);
    /// Peers may RDMA WRITE.
    pub const REMOTE_WRITE: Access = Access(2);
    /// Peers may RDMA READ.
    pub const REMOTE_READ: Access = Access(4);
    /// Peers may run atomics.
    pub const REMOTE_ATOMIC: Access = Access(8);
    /// Memory windows may be bound to the region (IBV_ACCESS_MW_BIND; IBTA C10-73).
    pub const MW_BIND: Access = Access(16);
    /// Every right of data access (not MW_BIND).
    pub const ALL: Access = Access(15);

    /// True when every right in `other` is in `self`.
    pub fn contains(self, other: Access) -> bool {
        self.0 & other.0 == other.0
    }
}

impl std::ops::BitOr for Access {
    type Output = Access;
    fn bitor(self, o: Access) -> Access {
        Access(self.0 | o.0)
    }
}

/// A protection domain handle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct PdId(pub u32);

/// What the application keeps of a registered region (ibv_mr).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Mr {
    /// Protection domain.
    pub pd: PdId,
    /// Local key, for scatter/gather entries of local work requests.
    pub lkey: u32,
    /// Remote key, handed to peers.
    pub rkey: u32,
    /// Virtual address of the first byte (what peers put in a RETH).
    pub addr: u64,
    /// Length in bytes.
    pub len: usize,
    /// Rights.
    pub access: Access,
}

/// Why an access was refused. The transport maps these to NAK codes and completion
/// statuses; memory is never touched when one is returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum AccessError {
    /// No region has this key (never did, or was deregistered).
    #[error("no memory region with key {0:#x}")]
    BadKey(u32),
    /// The region belongs to another protection domain.
    #[error("memory region is in another protection domain")]
    WrongPd,
    /// The range is not inside the region.
    #[error("range {va:#x}+{len} outside the region")]
    OutOfBounds { va: u64, len: u64 },
    /// The region does not grant the right.
    #[error("access right missing")]
    NoRight,
    /// An atomic's address is not 8-byte aligned.
    #[error("atomic address {0:#x} not 8-byte aligned")]
    Misaligned(u64),
}

/// Errors of registration.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum RegError {
    /// Unknown protection domain.
    #[error("unknown protection domain")]
    NoSuchPd,
    /// ibverbs requires LOCAL_WRITE with REMOTE_WRITE or REMOTE_ATOMIC.
    #[error("REMOTE_WRITE and REMOTE_ATOMIC need LOCAL_WRITE")]
    InvalidAccess,
    /// The protection domain still has regions or memory windows.
    #[error("protection domain still has registered regions or memory windows")]
    Busy,
    /// A region of no bytes (EINVAL: the kernel's `ib_umem_get` refuses a region of no
    /// pages).
    #[error("a memory region needs at least one byte")]
    ZeroLength,
    /// A null address (EFAULT: no page at address 0 to pin).
    #[error("null address")]
    BadAddress,
    /// A range that wraps around the address space or is longer than `isize::MAX`
    /// (EINVAL, as `ib_umem_get` refuses an `addr + size` that overflows).
    #[error("address range wraps around or is too long")]
    BadLength,
    /// No region has this lkey (EINVAL, as `ibv_dereg_mr` of a handle the kernel does not
    /// know).
    #[error("no memory region with lkey {0:#x}")]
    NoSuchMr(u32),
    /// The region is still in use and stays registered (EBUSY): the reason.
    #[error("memory region in use: {0}")]
    RegionInUse(&'static str),
    /// No memory window with this handle (EINVAL).
    #[error("no such memory window")]
    NoSuchMw,
    /// A region mirrored from another context of the device names a key in use here
    /// (EINVAL: [`crate::endpoint::Context::mirror_mr_raw`]).
    #[error("memory key {0:#x} is in use")]
    KeyTaken(u32),
}

struct Region {
    mr: Mr,
    data: Buffer,
}

/// Hashes a memory key with one multiplication. The keys in the tables are a keyed
/// permutation of a counter (`keys.rs`), spread over all of `u32` as uniformly as random
/// draws, and a peer can only look keys up, never
/// add one: no input makes buckets collide beyond chance, so the flooding resistance of
/// the standard SipHash (about 70 instructions per lookup, two lookups per packet) buys
/// nothing here.
#[derive(Default)]
struct KeyHasher(u64);

impl Hasher for KeyHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 << 8 | u64::from(b)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }

    fn write_u32(&mut self, k: u32) {
        self.0 = u64::from(k).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

type KeyMap<V> = HashMap<u32, V, BuildHasherDefault<KeyHasher>>;

/// What an rkey names: a region (by its lkey), or a bound memory window with what it
/// grants, so that one lookup finds either.
#[derive(Debug, Clone, Copy)]
enum RemoteKey {
    Mr(u32),
    Mw(window::Grant),
}

/// The protection domains, regions and memory windows of one context.
pub struct Memory {
    pds: Vec<bool>,
    by_lkey: KeyMap<Region>,
    rkeys: KeyMap<RemoteKey>,
    windows: window::Windows,
    /// The ids of deallocated windows, never given to a window again (a peer may still
    /// hold one of their rkeys).
    retired_windows: KeyMap<()>,
    keys: Keys,
}

/// The top bit of every window rkey, clear in every region key.
const WINDOW_KEY: u32 = 1 << 31;

impl Memory {
    /// An empty table whose keys come from `seed`.
    pub fn new(seed: u64) -> Self {
        Self {
            pds: Vec::new(),
            by_lkey: KeyMap::default(),
            rkeys: KeyMap::default(),
            windows: KeyMap::default(),
            retired_windows: KeyMap::default(),
            keys: Keys::new(&mut crate::rng::Rng::new(seed ^ 0x6d65_6d6f_7279)),
        }
    }

    /// Allocates a protection domain.
    pub fn alloc_pd(&mut self) -> PdId {
        self.pds.push(true);
        PdId(self.pds.len() as u32 - 1)
    }

    /// Frees a protection domain that has no regions or memory windows left.
    pub fn dealloc_pd(&mut self, pd: PdId) -> Result<(), RegError> {
        if !self.pd_exists(pd) {
            return Err(RegError::NoSuchPd);
        }
        if self.by_lkey.values().any(|r| r.mr.pd == pd) || self.pd_has_windows(pd) {
            return Err(RegError::Busy);
        }
        self.pds[pd.0 as usize] = false;
        Ok(())
    }

    /// Makes protection domain `pd` live, as another table of the device allocated it
    /// (`Context::mirror_pd`); the ids below it this table lacks stay unallocated.
    pub fn mirror_pd(&mut self, pd: PdId) {
        let at = pd.0 as usize;
        if self.pds.len() <= at {
            self.pds.resize(at + 1, false);
        }
        self.pds[at] = true;
    }

    /// True for a live protection domain.
    pub fn pd_exists(&self, pd: PdId) -> bool {
        self.pds.get(pd.0 as usize).copied().unwrap_or(false)
    }

    /// A region key never handed out before in this context ([`keys`]); 0 is never a
    /// key. Region keys have the top bit clear and window rkeys have it set
    /// ([`WINDOW_KEY`]), so no key of a region can ever be one of a window's, whatever
    /// key byte the application binds a window with.
    fn fresh_key(&mut self) -> u32 {
        loop {
            let k = self.keys.next();
            if k != 0
                && k & WINDOW_KEY == 0
                && !self.by_lkey.contains_key(&k)
                && !self.rkeys.contains_key(&k)
            {
                return k;
            }
        }
    }

    /// Registers `data` as a region of `pd` with `access`; the stack owns the bytes until
    /// [`Memory::deregister`] hands them back. Empty `data` is refused
    /// ([`RegError::ZeroLength`]), as ibverbs refuses a region of length 0.
    pub fn register(&mut self, pd: PdId, data: Vec<u8>, access: Access) -> Result<Mr, RegError> {
        self.register_buffer(pd, Buffer::owned(data)?, access)
    }

    /// The checks of registration beyond the bytes: the PD, and the access rights.
    fn check_reg(&self, pd: PdId, access: Access) -> Result<(), RegError> {
        if !self.pd_exists(pd) {
            return Err(RegError::NoSuchPd);
        }
        let needs_local = Access::REMOTE_WRITE | Access::REMOTE_ATOMIC;
        if access.0 & needs_local.0 != 0 && !access.contains(Access::LOCAL_WRITE) {
            return Err(RegError::InvalidAccess);
        }
        Ok(())
    }

    /// Registers the bytes of `data` (the stack's own, or the application's) as a region
    /// of `pd` with `access`: the region's address is the bytes' address.
    pub(crate) fn register_buffer(
        &mut self,
        pd: PdId,
        data: Buffer,
        access: Access,
    ) -> Result<Mr, RegError> {
        self.check_reg(pd, access)?;
        let lkey = self.fresh_key();
        // Every region has an rkey, remote rights or not, as on a NIC: the access check
        // refuses what the rights do not allow, and a rereg that grants them later
        // ([`Memory::modify`]) leaves the key a peer was given working.
        let rkey = self.fresh_key();
        self.rkeys.insert(rkey, RemoteKey::Mr(lkey));
        let mr = Mr {
            pd,
            lkey,
            rkey,
            addr: data.addr(),
            len: data.len(),
            access,
        };
        self.by_lkey.insert(lkey, Region { mr, data });
        Ok(mr)
    }

    /// Registers `data` as region `mr` of another table of the device: its keys, PD and
    /// rights, the address being `data`'s (`Context::mirror_mr_raw`). [`RegError::KeyTaken`]
    /// when one of its keys names something here already.
    pub(crate) fn register_buffer_as(&mut self, mr: &Mr, data: Buffer) -> Result<(), RegError> {
        self.check_reg(mr.pd, mr.access)?;
        for k in [mr.lkey, mr.rkey] {
            if self.by_lkey.contains_key(&k) || self.rkeys.contains_key(&k) {
                return Err(RegError::KeyTaken(k));
            }
        }
        self.rkeys.insert(mr.rkey, RemoteKey::Mr(mr.lkey));
        let mr = Mr {
            addr: data.addr(),
            len: data.len(),
            ..*mr
        };
        self.by_lkey.insert(mr.lkey, Region { mr, data });
        Ok(())
    }

    /// Whether the region `lkey` may be deregistered as far as this table knows:
    /// [`RegError::NoSuchMr`] (EINVAL) for an unknown key. The checks of what refers to a
    /// region from inside `mem` belong here, each a [`RegError::RegionInUse`] (EBUSY);
    /// work requests are the context's to check (`Context::dereg_mr` walks the QPs).
    pub fn may_deregister(&self, lkey: u32) -> Result<(), RegError> {
        if !self.by_lkey.contains_key(&lkey) {
            return Err(RegError::NoSuchMr(lkey));
        }
        // IBTA §10.6.7.2.6: a region with windows bound to it cannot be deregistered.
        if self.has_windows(lkey) {
            return Err(RegError::RegionInUse(
                "memory windows are bound to the region",
            ));
        }
        Ok(())
    }

    /// Deregisters a region if [`Memory::may_deregister`] lets it go: its keys stop
    /// working at once and the stack never touches its bytes again. The stack's own bytes
    /// come back (`Some`); the application's stay where they are (`None`). Refused, the
    /// region stays registered and usable.
    pub fn deregister(&mut self, lkey: u32) -> Result<Option<Vec<u8>>, RegError> {
        self.may_deregister(lkey)?;
        let r = self.by_lkey.remove(&lkey).ok_or(RegError::NoSuchMr(lkey))?;
        if r.mr.rkey != 0 {
            self.rkeys.remove(&r.mr.rkey);
        }
        Ok(r.data.into_vec())
    }

    /// Moves the region `lkey` to `pd` with `access`, its bytes and keys kept (ibv_rereg_mr
    /// without a new translation, as a NIC's or rdma_rxe's rereg keeps them, so a peer's
    /// rkey goes on naming it): the same checks as registration, refused
    /// ([`RegError::RegionInUse`]) while windows are bound to it.
    pub fn modify(&mut self, lkey: u32, pd: PdId, access: Access) -> Result<Mr, RegError> {
        self.may_deregister(lkey)?;
        self.check_reg(pd, access)?;
        let r = self
            .by_lkey
            .get_mut(&lkey)
            .ok_or(RegError::NoSuchMr(lkey))?;
        r.mr.pd = pd;
        r.mr.access = access;
        Ok(r.mr)
    }

    /// The region registered under `lkey`.
    pub fn mr(&self, lkey: u32) -> Option<Mr> {
        self.by_lkey.get(&lkey).map(|r| r.mr)
    }

    /// The whole region's bytes as a slice, for a region whose bytes the stack owns
    /// ([`Memory::register`]); `None` for the program's memory registered in place, which
    /// the program may change at any time and so is never lent as a reference (read it
    /// with [`Memory::view`]).
    pub fn bytes(&self, lkey: u32) -> Option<&[u8]> {
        self.by_lkey.get(&lkey)?.data.owned_bytes()
    }

    /// The whole region's bytes, writable, for a region whose bytes the stack owns;
    /// `None` for the program's (write them with [`Memory::view_mut`]).
    pub fn bytes_mut(&mut self, lkey: u32) -> Option<&mut [u8]> {
        self.by_lkey.get_mut(&lkey)?.data.owned_bytes_mut()
    }

    /// The whole region's bytes, whoever owns them, to copy out.
    pub fn view(&self, lkey: u32) -> Option<SharedBytes<'_>> {
        let r = self.by_lkey.get(&lkey)?;
        r.data.view(0, r.data.len())
    }

    /// The whole region's bytes, whoever owns them, to copy in.
    pub fn view_mut(&mut self, lkey: u32) -> Option<SharedBytesMut<'_>> {
        let r = self.by_lkey.get_mut(&lkey)?;
        let len = r.data.len();
        r.data.view_mut(0, len)
    }

    /// The one check for remote access (IBTA §10.6.3.2, C10-..), for a request arriving
    /// on QP `qpn` of `pd`: key valid, same PD, `[va, va+len)` inside the region, right
    /// granted. Gives the region's lkey and the offset of `va` in it. The rkey may name a
    /// region or a bound memory window (one lookup finds either): a window grants its own
    /// rights inside its own range, and a type 2 window only to the QP it is bound to
    /// (`window.rs`). Zero-length accesses need no key: callers do not call this for them,
    /// as the spec allows zero-length RDMA without one.
    pub fn check_remote(
        &self,
        pd: PdId,
        qpn: u32,
        rkey: u32,
        va: u64,
        len: u64,
        need: Access,
    ) -> Result<Span, AccessError> {
        match self.rkeys.get(&rkey) {
            Some(RemoteKey::Mr(lkey)) => self.check(pd, *lkey, va, len, need),
            Some(RemoteKey::Mw(g)) => g.check(pd, qpn, va, len, need),
            None => Err(AccessError::BadKey(rkey)),
        }
    }

    /// The same check for a local scatter/gather entry.
    pub fn check_local(
        &self,
        pd: PdId,
        lkey: u32,
        addr: u64,
        len: u64,
        need: Access,
    ) -> Result<Span, AccessError> {
        self.check(pd, lkey, addr, len, need)
    }

    fn check(
        &self,
        pd: PdId,
        lkey: u32,
        va: u64,
        len: u64,
        need: Access,
    ) -> Result<Span, AccessError> {
        let r = self.by_lkey.get(&lkey).ok_or(AccessError::BadKey(lkey))?;
        if r.mr.pd != pd {
            return Err(AccessError::WrongPd);
        }
        if !r.mr.access.contains(need) {
            return Err(AccessError::NoRight);
        }
        let oob = AccessError::OutOfBounds { va, len };
        let off = va.checked_sub(r.mr.addr).ok_or(oob)?;
        let end = off.checked_add(len).ok_or(oob)?;
        if end > r.mr.len as u64 {
            return Err(oob);
        }
        Ok(Span {
            lkey,
            offset: off as usize,
            len: len as usize,
        })
    }

    /// The bytes at `[addr, addr + len)` in whichever region holds them, with no key, PD
    /// or access check: what an IBV_SEND_INLINE request reads, as a NIC's driver copies
    /// inline data from the process's memory without looking at the lkey. `None` if no
    /// region holds the whole range.
    pub fn find(&self, addr: u64, len: u64) -> Option<Span> {
        self.by_lkey.values().find_map(|r| {
            let off = addr.checked_sub(r.mr.addr)?;
            (off.checked_add(len)? <= r.mr.len as u64).then_some(Span {
                lkey: r.mr.lkey,
                offset: off as usize,
                len: len as usize,
            })
        })
    }

    /// [`Memory::read`], asking as well for the cache lines of the `ahead` bytes that
    /// follow the span in its region (a hint: those a message's next packet reads, so
    /// that their misses overlap this packet's work).
    pub fn read_ahead(&self, s: Span, ahead: usize) -> Option<SharedBytes<'_>> {
        let data = &self.by_lkey.get(&s.lkey)?.data;
        let view = data.view(s.offset, s.len)?;
        data.prefetch(s.offset + s.len, ahead);
        Some(view)
    }

    /// Bytes of a checked span, to copy out; `None` if its region went away since the
    /// check.
    pub fn read(&self, s: Span) -> Option<SharedBytes<'_>> {
        self.by_lkey.get(&s.lkey)?.data.view(s.offset, s.len)
    }

    /// Bytes of a checked span, to copy in or for an atomic; `None` if its region went
    /// away since the check.
    pub fn write(&mut self, s: Span) -> Option<SharedBytesMut<'_>> {
        self.by_lkey
            .get_mut(&s.lkey)?
            .data
            .view_mut(s.offset, s.len)
    }

    /// Copies `data` into a checked span of the same length; false (and nothing written)
    /// if the region went away or the lengths differ.
    pub fn copy_in(&mut self, s: Span, data: &[u8]) -> bool {
        self.write(s).is_some_and(|mut dst| dst.copy_from(data))
    }

    /// Copies a checked span out into `dst` of the same length; false (`dst` untouched)
    /// if the region went away or the lengths differ.
    pub fn copy_out(&self, s: Span, dst: &mut [u8]) -> bool {
        self.read(s).is_some_and(|src| src.copy_to(dst))
    }
}

/// A range inside a region that passed [`Memory::check_remote`] or
/// [`Memory::check_local`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span {
    /// The region.
    pub lkey: u32,
    /// Offset in the region.
    pub offset: usize,
    /// Length.
    pub len: usize,
}

impl Span {
    /// The sub-range `[from, from+len)` of this span (callers keep it inside).
    pub fn sub(self, from: usize, len: usize) -> Span {
        let from = from.min(self.len);
        Span {
            lkey: self.lkey,
            offset: self.offset + from,
            len: len.min(self.len - from),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_region_has_an_rkey_and_modify_keeps_the_keys() {
        let mut m = Memory::new(3);
        let pd = m.alloc_pd();
        let other = m.alloc_pd();
        // A local-only region has an rkey too, which grants nothing remote.
        let a = m.register(pd, vec![0; 64], Access::LOCAL_WRITE).unwrap();
        assert_ne!(a.rkey, 0);
        assert_eq!(
            m.check_remote(pd, 0, a.rkey, a.addr, 8, Access::REMOTE_WRITE),
            Err(AccessError::NoRight)
        );
        // New rights in place: the same keys, the rkey a peer holds now works.
        let b = m
            .modify(a.lkey, pd, Access::LOCAL_WRITE | Access::REMOTE_WRITE)
            .unwrap();
        assert_eq!(
            (b.lkey, b.rkey, b.addr, b.len),
            (a.lkey, a.rkey, a.addr, a.len)
        );
        assert!(m
            .check_remote(pd, 0, a.rkey, a.addr, 8, Access::REMOTE_WRITE)
            .is_ok());
        // Another PD: the keys stay, the old PD's QPs are refused.
        let c = m
            .modify(a.lkey, other, Access::LOCAL_WRITE | Access::REMOTE_WRITE)
            .unwrap();
        assert_eq!((c.lkey, c.rkey, c.pd), (a.lkey, a.rkey, other));
        assert_eq!(
            m.check_remote(pd, 0, a.rkey, a.addr, 8, Access::REMOTE_WRITE),
            Err(AccessError::WrongPd)
        );
        // Registration's checks hold: REMOTE_WRITE needs LOCAL_WRITE, the PD must live.
        assert_eq!(
            m.modify(a.lkey, pd, Access::REMOTE_WRITE),
            Err(RegError::InvalidAccess)
        );
        assert!(m.modify(a.lkey ^ 1, pd, Access::NONE).is_err());
        assert_eq!(m.mr(a.lkey).map(|r| r.pd), Some(other));
    }

    #[test]
    fn rights_bounds_keys() {
        let mut m = Memory::new(1);
        let pd = m.alloc_pd();
        let other = m.alloc_pd();
        let a = m
            .register(pd, vec![0; 100], Access::LOCAL_WRITE | Access::REMOTE_WRITE)
            .unwrap();
        let b = m.register(pd, vec![0; 100], Access::REMOTE_READ).unwrap();
        assert_ne!(a.rkey, b.rkey);
        assert_ne!(b.rkey.wrapping_sub(a.rkey), 1, "keys are not sequential");
        assert!(m
            .check_remote(pd, 0, a.rkey, a.addr, 100, Access::REMOTE_WRITE)
            .is_ok());
        assert_eq!(
            m.check_remote(pd, 0, a.rkey, a.addr + 1, 100, Access::REMOTE_WRITE),
            Err(AccessError::OutOfBounds {
                va: a.addr + 1,
                len: 100
            })
        );
        assert_eq!(
            m.check_remote(pd, 0, a.rkey, a.addr - 1, 1, Access::REMOTE_WRITE),
            Err(AccessError::OutOfBounds {
                va: a.addr - 1,
                len: 1
            })
        );
        assert_eq!(
            m.check_remote(pd, 0, a.rkey, u64::MAX, 2, Access::REMOTE_WRITE),
            Err(AccessError::OutOfBounds {
                va: u64::MAX,
                len: 2
            })
        );
        assert_eq!(
            m.check_remote(pd, 0, a.rkey, a.addr, 1, Access::REMOTE_READ),
            Err(AccessError::NoRight)
        );
        assert_eq!(
            m.check_remote(other, 0, a.rkey, a.addr, 1, Access::REMOTE_WRITE),
            Err(AccessError::WrongPd)
        );
        assert_eq!(
            m.register(pd, vec![0; 1], Access::REMOTE_WRITE),
            Err(RegError::InvalidAccess)
        );
        assert_eq!(m.dealloc_pd(pd), Err(RegError::Busy));
        assert_eq!(
            m.deregister(a.lkey).map(|v| v.map(|v| v.len())),
            Ok(Some(100))
        );
        assert_eq!(
            m.check_remote(pd, 0, a.rkey, a.addr, 1, Access::REMOTE_WRITE),
            Err(AccessError::BadKey(a.rkey))
        );
    }

    /// ibv_dereg_mr of a handle that is not (or no longer) registered: EINVAL, never a
    /// panic; and ibv_reg_mr's refusal of a region of length 0 (EINVAL, the kernel's
    /// `ib_umem_get`). Regions over the caller's memory are tested in `shared.rs`, the
    /// one module allowed the `unsafe` their registration takes.
    #[test]
    fn deregistration_and_registration_refusals() {
        let mut m = Memory::new(4);
        let pd = m.alloc_pd();
        let mr = m.register(pd, vec![1; 8], Access::NONE).unwrap();
        assert_eq!(m.may_deregister(mr.lkey), Ok(()));
        assert_eq!(m.deregister(mr.lkey), Ok(Some(vec![1; 8])));
        assert_eq!(m.may_deregister(mr.lkey), Err(RegError::NoSuchMr(mr.lkey)));
        assert_eq!(m.deregister(mr.lkey), Err(RegError::NoSuchMr(mr.lkey)));
        assert_eq!(m.deregister(0x1234), Err(RegError::NoSuchMr(0x1234)));
        assert_eq!(
            m.register(pd, Vec::new(), Access::NONE),
            Err(RegError::ZeroLength)
        );
        assert_eq!(m.dealloc_pd(pd), Ok(()), "no region left in the PD");
    }
}
