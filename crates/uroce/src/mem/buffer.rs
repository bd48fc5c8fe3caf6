//! The bytes behind a memory region: the one place in `mem` that holds a raw pointer.
//!
//! A region's bytes are either the stack's own (`reg_mr` of a `Vec<u8>`, handed back at
//! deregistration) or the application's, registered in place by
//! [`crate::endpoint::Context::reg_mr_raw`] as ibverbs registers them (`ibv_reg_mr`: the
//! NIC reads and writes the process's pages where they are). Both are kept the same way,
//! as a pointer and a length, and reached the same way: a bounds-checked slice of exactly
//! the bytes one access needs, shared through `&self` or exclusive through `&mut self`.
//! Since [`super::Memory`] hands these out only through its own `&self` / `&mut self`, no
//! two slices the stack makes alias while one of them is writable, even when regions
//! overlap (ibverbs lets the same memory be registered more than once).
//!
//! The stack's own bytes are held as a pointer too (from `Box::leak`) rather than as
//! a `Box<[u8]>`: a box asserts that nothing else points into it, and an application may
//! legitimately register memory overlapping a region it learnt the address of.

#![allow(unsafe_code)]

use std::ptr::NonNull;

use super::RegError;

/// The bytes of one region: a pointer, a length, and whether the stack owns them.
pub(crate) struct Buffer {
    ptr: NonNull<u8>,
    len: usize,
    /// Allocated by [`Buffer::owned`] (a `Box<[u8]>` leaked into a pointer): freed on
    /// drop, or handed back by [`Buffer::into_vec`].
    owned: bool,
}

// SAFETY: a `Buffer` is a pointer to bytes, with no thread affinity. Owned bytes are a
// heap allocation only this `Buffer` reaches. Borrowed bytes stay valid until the region
// is deregistered, whichever thread the context runs on, and nothing else touches them
// during a call into the context (the contract of `Context::reg_mr_raw`); the stack only
// reaches them through `&self` (reads) or `&mut self` (writes), so moving the `Buffer` to
// another thread cannot make two threads' accesses race.
unsafe impl Send for Buffer {}
// SAFETY: `&Buffer` gives only shared, read-only slices (`slice`); writing needs
// `&mut Buffer`. Reads from several threads through `&Buffer` are reads of bytes nothing
// writes meanwhile (the contract of `Context::reg_mr_raw` for borrowed bytes; owned bytes
// are written only through `&mut`).
unsafe impl Sync for Buffer {}

impl Buffer {
    /// Takes ownership of `data`. Zero bytes is refused (EINVAL), as ibverbs refuses a
    /// region of no pages (the kernel's `ib_umem_get`).
    pub(crate) fn owned(data: Vec<u8>) -> Result<Self, RegError> {
        if data.is_empty() {
            return Err(RegError::ZeroLength);
        }
        let len = data.len();
        let ptr = NonNull::from(Box::leak(data.into_boxed_slice())).cast::<u8>();
        Ok(Self {
            ptr,
            len,
            owned: true,
        })
    }

    /// Borrows `len` bytes at `addr`, which the caller owns. A null `addr` is refused
    /// (EFAULT: the kernel cannot pin the pages at address 0), as are zero bytes and a
    /// range that wraps around the address space or exceeds `isize::MAX` (EINVAL, the
    /// checks of `ib_umem_get`).
    ///
    /// # Safety
    ///
    /// The caller keeps the contract stated on
    /// [`crate::endpoint::Context::reg_mr_raw`], this function's only caller: `addr` is
    /// valid for reads and writes of `len` bytes until the region is deregistered, and
    /// nothing else accesses those bytes while the stack may (during calls into the
    /// context, and while a slice it handed out lives).
    pub(crate) unsafe fn borrowed(addr: *mut u8, len: usize) -> Result<Self, RegError> {
        let ptr = NonNull::new(addr).ok_or(RegError::BadAddress)?;
        if len == 0 {
            return Err(RegError::ZeroLength);
        }
        if len > isize::MAX as usize || (addr as usize).checked_add(len).is_none() {
            return Err(RegError::BadLength);
        }
        Ok(Self {
            ptr,
            len,
            owned: false,
        })
    }

    /// The address of the first byte: the region's virtual address, as ibverbs' iova is
    /// the registered address (what peers put in a RETH).
    pub(crate) fn addr(&self) -> u64 {
        self.ptr.as_ptr() as u64
    }

    /// The length in bytes.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The bytes `[offset, offset + len)`, `None` if they are not all inside.
    pub(crate) fn slice(&self, offset: usize, len: usize) -> Option<&[u8]> {
        let end = offset.checked_add(len)?;
        if end > self.len {
            return None;
        }
        // SAFETY: `offset + len <= self.len` was checked just above, so the range lies
        // inside the `self.len` bytes at `ptr`, which are valid for reads: owned bytes
        // are our live allocation; borrowed bytes are valid until deregistration, which
        // drops this `Buffer` first. The slice borrows `self`, so no `&mut` slice from
        // this buffer (which needs `&mut self`) exists while it lives, and the contract
        // of `reg_mr_raw` keeps the application off the bytes meanwhile. The range is at
        // most `isize::MAX` bytes (checked at registration; a `Vec` never exceeds it).
        Some(unsafe { std::slice::from_raw_parts(self.ptr.as_ptr().add(offset), len) })
    }

    /// The bytes `[offset, offset + len)`, writable; `None` if they are not all inside.
    pub(crate) fn slice_mut(&mut self, offset: usize, len: usize) -> Option<&mut [u8]> {
        let end = offset.checked_add(len)?;
        if end > self.len {
            return None;
        }
        // SAFETY: in bounds and valid as for `slice` (valid for writes too: owned bytes
        // are ours, borrowed bytes were registered as valid for writes). The slice
        // borrows `self` exclusively, and `Memory` reaches every buffer only through
        // itself, so no other slice the stack made, of this region or of one
        // overlapping it, lives at the same time.
        Some(unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr().add(offset), len) })
    }

    /// The stack's own bytes, handed back (deregistration); `None` for borrowed bytes,
    /// which stay where they are, the application's again.
    pub(crate) fn into_vec(self) -> Option<Vec<u8>> {
        let me = std::mem::ManuallyDrop::new(self);
        if !me.owned {
            return None;
        }
        // SAFETY: `owned` means `ptr` and `len` came from `Box::leak` of a
        // `Box<[u8]>` of `len` bytes in `Buffer::owned`, and the box was not rebuilt
        // since: `me` is never dropped (`ManuallyDrop`), so this is its only owner.
        let boxed =
            unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(me.ptr.as_ptr(), me.len)) };
        Some(boxed.into_vec())
    }
}

impl Drop for Buffer {
    fn drop(&mut self) {
        if self.owned {
            // SAFETY: as in `into_vec`: the pointer and length of a `Box<[u8]>` given up
            // by `Buffer::owned`, rebuilt once, here, as the buffer goes away.
            drop(unsafe {
                Box::from_raw(std::ptr::slice_from_raw_parts_mut(
                    self.ptr.as_ptr(),
                    self.len,
                ))
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Access, AccessError, Memory, Mr, PdId};
    use super::*;

    #[test]
    fn owned_bytes_come_back_whole() {
        let b = Buffer::owned((0..100u8).collect()).unwrap();
        assert!(b.owned);
        assert_eq!(b.len(), 100);
        assert_eq!(b.slice(98, 2), Some(&[98u8, 99][..]));
        assert_eq!(b.into_vec(), Some((0..100u8).collect::<Vec<_>>()));
    }

    #[test]
    fn slices_stay_inside() {
        let mut b = Buffer::owned(vec![0; 16]).unwrap();
        assert!(b.slice(0, 16).is_some());
        assert!(b.slice(16, 0).is_some(), "an empty slice at the end");
        assert!(b.slice(1, 16).is_none());
        assert!(b.slice(17, 0).is_none());
        assert!(b.slice(usize::MAX, 2).is_none(), "offset + len overflows");
        assert!(b.slice_mut(8, 9).is_none());
        b.slice_mut(8, 8).unwrap().fill(7);
        assert_eq!(b.slice(6, 4), Some(&[0u8, 0, 7, 7][..]));
    }

    /// Borrowed bytes are the caller's, in place: written through the buffer, read
    /// through the caller's pointer; and they are not the stack's to give back or free.
    #[test]
    fn borrowed_bytes_are_written_in_place() {
        let mut mine = vec![1u8; 32];
        let p = mine.as_mut_ptr();
        // SAFETY: `mine` outlives `b` and is not touched while `b` lives.
        let mut b = unsafe { Buffer::borrowed(p, 32) }.unwrap();
        assert!(!b.owned);
        assert_eq!(b.addr(), p as u64);
        b.slice_mut(4, 2).unwrap().copy_from_slice(&[9, 9]);
        assert_eq!(b.into_vec(), None);
        assert_eq!(&mine[2..8], &[1, 1, 9, 9, 1, 1]);
    }

    /// ibverbs' refusals (the kernel's `ib_umem_get`): no pages (EINVAL), a null
    /// address (EFAULT), a range past the end of the address space (EINVAL).
    #[test]
    fn borrowed_refusals() {
        let mut x = [0u8; 4];
        // SAFETY: refused before any access; none of these buffers is created.
        unsafe {
            assert_eq!(
                Buffer::borrowed(x.as_mut_ptr(), 0).err(),
                Some(RegError::ZeroLength)
            );
            assert_eq!(
                Buffer::borrowed(std::ptr::null_mut(), 4).err(),
                Some(RegError::BadAddress)
            );
            assert_eq!(
                Buffer::borrowed(x.as_mut_ptr(), usize::MAX).err(),
                Some(RegError::BadLength)
            );
        }
        assert_eq!(Buffer::owned(Vec::new()).err(), Some(RegError::ZeroLength));
    }

    /// Registers `mine` in place, as `Context::reg_mr_raw` does.
    /// Registers `len` bytes at `p` in place, as `Context::reg_mr_raw` does.
    ///
    /// # Safety
    ///
    /// `p` is valid for `len` bytes until the region is deregistered or `m` dropped, and
    /// the caller touches those bytes only through `p` (or pointers made from it)
    /// meanwhile: every test below keeps its `Vec` alive and unmoved, reaches it through
    /// `Vec::as_mut_ptr` alone (which never invalidates another pointer to it), and
    /// reads it through the `Vec` itself only after the last deregistration.
    unsafe fn register_in_place(
        m: &mut Memory,
        pd: PdId,
        p: *mut u8,
        len: usize,
        access: Access,
    ) -> Mr {
        // SAFETY: the caller's promise above is `Buffer::borrowed`'s contract.
        let data = unsafe { Buffer::borrowed(p, len) }.unwrap();
        m.register_buffer(pd, data, access).unwrap()
    }

    /// A region over the caller's memory (ibv_reg_mr: iova = addr): its address is the
    /// caller's pointer, the access check bounds it there, and what the stack writes
    /// lands in the caller's bytes, in place, as what the caller wrote is what it reads.
    #[test]
    fn in_place_region_is_the_callers_memory() {
        let mut mine = vec![0u8; 64];
        let addr = mine.as_mut_ptr() as u64;
        let mut m = Memory::new(2);
        let pd = m.alloc_pd();
        // SAFETY: `mine` as `register_in_place` asks.
        let mr = unsafe { register_in_place(&mut m, pd, mine.as_mut_ptr(), 64, Access::ALL) };
        assert_eq!((mr.addr, mr.len), (addr, 64));
        let s = m
            .check_remote(pd, 0, mr.rkey, addr + 60, 4, Access::REMOTE_WRITE)
            .unwrap();
        assert!(m.copy_in(s, &[1, 2, 3, 4]));
        assert_eq!(
            m.check_remote(pd, 0, mr.rkey, addr + 61, 4, Access::REMOTE_WRITE),
            Err(AccessError::OutOfBounds {
                va: addr + 61,
                len: 4
            })
        );
        let inline = m.find(addr + 60, 4).unwrap();
        assert_eq!(m.read(inline), Some(&[1u8, 2, 3, 4][..]));
        assert_eq!(m.bytes(mr.lkey).map(<[u8]>::len), Some(64));
        assert_eq!(m.deregister(mr.lkey), Ok(None), "nothing to hand back");
        assert_eq!(&mine[60..], &[1, 2, 3, 4]);
        assert_eq!(
            m.check_remote(pd, 0, mr.rkey, addr, 1, Access::REMOTE_WRITE),
            Err(AccessError::BadKey(mr.rkey)),
            "a deregistered region's rkey grants nothing"
        );
        assert_eq!(m.read(s), None, "nor does a span checked before");
    }

    /// Owned and in-place regions side by side, the same memory registered twice (as
    /// ibverbs allows): each is checked against its own bounds and keys, and a write
    /// through one is seen through the other.
    #[test]
    fn owned_and_in_place_regions_overlapping() {
        let mut mine = vec![0u8; 32];
        let mut m = Memory::new(3);
        let pd = m.alloc_pd();
        let owned = m.register(pd, vec![5; 16], Access::LOCAL_WRITE).unwrap();
        let p = mine.as_mut_ptr();
        // SAFETY: `mine` as `register_in_place` asks, both regions made from `p`.
        let (whole, tail) = unsafe {
            (
                register_in_place(&mut m, pd, p, 32, Access::LOCAL_WRITE),
                register_in_place(&mut m, pd, p.add(16), 16, Access::REMOTE_READ),
            )
        };
        assert_eq!(tail.addr, whole.addr + 16);
        let s = m
            .check_local(pd, whole.lkey, whole.addr + 16, 2, Access::LOCAL_WRITE)
            .unwrap();
        m.write(s).unwrap().copy_from_slice(&[7, 8]);
        let t = m
            .check_remote(pd, 0, tail.rkey, tail.addr, 2, Access::REMOTE_READ)
            .unwrap();
        assert_eq!(m.read(t), Some(&[7u8, 8][..]));
        assert_eq!(
            m.check_local(pd, tail.lkey, tail.addr, 2, Access::LOCAL_WRITE),
            Err(AccessError::NoRight),
            "the tail's own rights, not the whole's"
        );
        assert_eq!(m.bytes(owned.lkey), Some(&[5u8; 16][..]));
        assert_eq!(m.deregister(tail.lkey), Ok(None));
        assert_eq!(m.deregister(whole.lkey), Ok(None));
        assert_eq!(m.deregister(owned.lkey), Ok(Some(vec![5; 16])));
        assert_eq!(&mine[16..18], &[7, 8]);
    }
}
