//! The bytes behind a memory region, as memory shared with a device: the one module of
//! `mem` with `unsafe`.
//!
//! A region's bytes are either the stack's own (`reg_mr` of a `Vec<u8>`, handed back at
//! deregistration) or the program's, registered in place by
//! [`crate::endpoint::Context::reg_mr_raw`] as ibverbs registers them (`ibv_reg_mr`: the
//! NIC reads and writes the process's pages where they are, while the process runs).
//! Both are kept the same way, as a pointer and a length ([`Buffer`]), and reached the
//! same way, through [`SharedBytes`] (read) and [`SharedBytesMut`] (read and write): a
//! pointer, a length and a borrow of the buffer, never a Rust reference to the bytes.
//! Copies in and out are `ptr::copy_nonoverlapping` between the bytes and the stack's
//! own slices (a received frame, a frame being built), and a remote atomic is an
//! `AtomicU64` operation on the word itself (the model is rust-vmm's `VolatileSlice`
//! for guest memory, which a guest changes under the VMM at any time).
//!
//! Why no reference: a `&[u8]` or `&mut [u8]` tells the compiler that nothing else
//! changes (or, for `&mut`, reads) the bytes while it lives, and the program may well
//! do so, from another thread, while the stack copies (perftest's `ib_write_lat` spins
//! on the last byte of its buffer while a WRITE lands there). A raw copy claims nothing
//! beyond the copy itself. A byte that the program writes while the stack copies it is
//! read as one value or the other, as with a NIC's DMA; ibverbs leaves such bytes
//! unsettled, and the stack never relies on what it read twice. (In the letter of Rust's
//! memory model a non-atomic copy racing a write is still a data race, as it is for every
//! device-shared memory in Rust; a byte-wise atomic memcpy, RFC 3301, is not in the
//! language yet.) Atomics are exact: a remote FETCH_ADD or CMP_SWAP is a SeqCst
//! `fetch_add` / `compare_exchange` on the 8-byte aligned word, so it never loses an
//! update against the program's own `__atomic_*` on the same word (IBV_ATOMIC_GLOB).
//!
//! The stack's own bytes are held as a pointer too (from `Box::leak`, or an allocation of
//! ours when the `Vec`'s was not 8-byte aligned, so that an aligned VA is an aligned word
//! for atomics) rather than as a `Box<[u8]>`, whose moves would assert that nothing else
//! points into it. Only they may also be lent as `&[u8]` / `&mut [u8]`
//! ([`Buffer::owned_bytes`]): nothing outside the stack may reach them (the contract of
//! `reg_mr_raw` keeps in-place regions off the context's own bytes), and the stack writes
//! them only through `&mut Buffer`.

#![allow(unsafe_code)]

use std::alloc::Layout;
use std::marker::PhantomData;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};

use super::RegError;

/// Who owns a [`Buffer`]'s bytes, and how they go back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Owner {
    /// The program's, registered in place: never freed or handed back by the stack.
    Program,
    /// A `Vec<u8>`'s allocation, as a leaked `Box<[u8]>` of exactly `len` bytes.
    Boxed,
    /// An allocation of ours with this layout (the `Vec` was not 8-byte aligned).
    Aligned(Layout),
}

/// The bytes of one region: a pointer, a length, and who owns them.
pub(crate) struct Buffer {
    ptr: NonNull<u8>,
    len: usize,
    owner: Owner,
}

// SAFETY: a `Buffer` is a pointer to bytes with no thread affinity. Owned bytes are a
// heap allocation only this `Buffer` reaches. The program's bytes stay valid until the
// region is deregistered, whichever thread the context runs on (the contract of
// `Context::reg_mr_raw`), and the stack reaches them only through raw copies and atomics
// (`SharedBytes`, `SharedBytesMut`), which make no claim about other threads.
unsafe impl Send for Buffer {}
// SAFETY: `&Buffer` gives only read views (`view`) and, for owned bytes, `&[u8]`;
// writing needs `&mut Buffer`. Reads from several threads through `&Buffer` are reads,
// which never race with each other; the stack writes owned bytes only through `&mut`.
unsafe impl Sync for Buffer {}

impl Buffer {
    /// Takes ownership of `data`. Zero bytes is refused (EINVAL), as ibverbs refuses a
    /// region of no pages (the kernel's `ib_umem_get`). The bytes are 8-byte aligned
    /// (copied into an aligned allocation in the rare case the `Vec`'s is not), so that a
    /// peer's atomic at an aligned VA finds an aligned word.
    pub(crate) fn owned(data: Vec<u8>) -> Result<Self, RegError> {
        if data.is_empty() {
            return Err(RegError::ZeroLength);
        }
        let len = data.len();
        let boxed = data.into_boxed_slice();
        if boxed.as_ptr().align_offset(8) == 0 {
            let ptr = NonNull::from(Box::leak(boxed)).cast::<u8>();
            return Ok(Self {
                ptr,
                len,
                owner: Owner::Boxed,
            });
        }
        let layout = Layout::from_size_align(len, 8).map_err(|_| RegError::BadLength)?;
        // SAFETY: `layout` has a non-zero size (`len > 0` was checked above).
        let p = unsafe { std::alloc::alloc(layout) };
        let Some(ptr) = NonNull::new(p) else {
            std::alloc::handle_alloc_error(layout);
        };
        // SAFETY: `ptr` is a fresh allocation of `len` bytes, valid for writes and
        // disjoint from `boxed`, whose `len` bytes are valid for reads.
        unsafe { std::ptr::copy_nonoverlapping(boxed.as_ptr(), ptr.as_ptr(), len) };
        Ok(Self {
            ptr,
            len,
            owner: Owner::Aligned(layout),
        })
    }

    /// Borrows `len` bytes at `addr`, which the program owns. A null `addr` is refused
    /// (EFAULT: the kernel cannot pin the pages at address 0), as are zero bytes and a
    /// range that wraps around the address space or exceeds `isize::MAX` (EINVAL, the
    /// checks of `ib_umem_get`).
    ///
    /// # Safety
    ///
    /// The caller keeps the contract stated on
    /// [`crate::endpoint::Context::reg_mr_raw`], this function's only caller: `addr` is
    /// valid for reads and writes of `len` bytes until the region is deregistered, and
    /// is not the stack's own memory (no region registered with `reg_mr` overlaps it).
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
            owner: Owner::Program,
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

    /// The pointer to `[offset, offset + len)`, `None` if the range is not all inside.
    fn at(&self, offset: usize, len: usize) -> Option<NonNull<u8>> {
        if offset.checked_add(len)? > self.len {
            return None;
        }
        // SAFETY: `offset <= self.len`, so the result is inside the buffer's bytes or one
        // past their end, all within one allocation (or the program's registered range,
        // which was checked not to wrap around and to be at most `isize::MAX` long).
        Some(unsafe { self.ptr.add(offset) })
    }

    /// The bytes `[offset, offset + len)` to read, `None` if they are not all inside.
    pub(crate) fn view(&self, offset: usize, len: usize) -> Option<SharedBytes<'_>> {
        Some(SharedBytes {
            ptr: self.at(offset, len)?,
            len,
            _buffer: PhantomData,
        })
    }

    /// The bytes `[offset, offset + len)` to read and write, `None` if they are not all
    /// inside.
    pub(crate) fn view_mut(&mut self, offset: usize, len: usize) -> Option<SharedBytesMut<'_>> {
        Some(SharedBytesMut {
            ptr: self.at(offset, len)?,
            len,
            _buffer: PhantomData,
        })
    }

    /// Asks for the cache lines of `[offset, offset + len)` (as much of it as lies inside):
    /// a hint, which reads nothing.
    pub(crate) fn prefetch(&self, offset: usize, len: usize) {
        let len = len.min(self.len.saturating_sub(offset));
        if len == 0 {
            return;
        }
        let p = self.ptr.as_ptr().wrapping_add(offset);
        crate::endpoint::prefetch::lines(p, len.div_ceil(64));
    }

    /// The stack's own bytes as a slice; `None` for the program's, which are never lent
    /// as a reference (the program may change them at any time).
    pub(crate) fn owned_bytes(&self) -> Option<&[u8]> {
        if self.owner == Owner::Program {
            return None;
        }
        // SAFETY: owned bytes are our live allocation of `self.len` initialised bytes
        // (at most `isize::MAX`, an allocation's limit). Nothing outside the stack may
        // touch them (`reg_mr_raw`'s contract keeps in-place regions off them), and the
        // stack writes them only through `&mut self`, which this borrow excludes.
        Some(unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) })
    }

    /// The stack's own bytes as a writable slice; `None` for the program's.
    pub(crate) fn owned_bytes_mut(&mut self) -> Option<&mut [u8]> {
        if self.owner == Owner::Program {
            return None;
        }
        // SAFETY: as in `owned_bytes`, and the borrow of `self` is exclusive, so no view
        // or slice of this buffer lives meanwhile.
        Some(unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) })
    }

    /// The stack's own bytes, handed back (deregistration); `None` for the program's,
    /// which stay where they are.
    pub(crate) fn into_vec(self) -> Option<Vec<u8>> {
        let me = std::mem::ManuallyDrop::new(self);
        match me.owner {
            Owner::Program => None,
            // SAFETY: `ptr` and `len` came from `Box::leak` of a `Box<[u8]>` of `len`
            // bytes in `Buffer::owned`, and the box was not rebuilt since: `me` is never
            // dropped (`ManuallyDrop`), so this is its only owner.
            Owner::Boxed => Some(unsafe { me.rebuild_box() }.into_vec()),
            Owner::Aligned(layout) => {
                let v = me.owned_bytes().map(<[u8]>::to_vec);
                // SAFETY: `ptr` was allocated with `layout` in `Buffer::owned` and is
                // freed once, here (`me` is never dropped).
                unsafe { std::alloc::dealloc(me.ptr.as_ptr(), layout) };
                v
            }
        }
    }

    /// The box `Buffer::owned` leaked.
    ///
    /// # Safety
    ///
    /// `self.owner` is `Owner::Boxed`, and the box is rebuilt once.
    unsafe fn rebuild_box(&self) -> Box<[u8]> {
        let raw = std::ptr::slice_from_raw_parts_mut(self.ptr.as_ptr(), self.len);
        // SAFETY: the caller's promise: a leaked `Box<[u8]>` of `len` bytes, rebuilt once.
        unsafe { Box::from_raw(raw) }
    }
}

impl Drop for Buffer {
    fn drop(&mut self) {
        match self.owner {
            Owner::Program => {}
            // SAFETY: the leaked box of `Buffer::owned`, rebuilt once, as the buffer goes.
            Owner::Boxed => drop(unsafe { self.rebuild_box() }),
            // SAFETY: allocated with `layout` in `Buffer::owned`, freed once, here.
            Owner::Aligned(layout) => unsafe { std::alloc::dealloc(self.ptr.as_ptr(), layout) },
        }
    }
}

/// Registered bytes to read: a pointer and a length inside one region, borrowed from its
/// table for `'a` (the region cannot be deregistered meanwhile), never a reference to
/// them. [`SharedBytes::copy_to`] copies them out with a raw copy.
#[derive(Clone, Copy)]
pub struct SharedBytes<'a> {
    ptr: NonNull<u8>,
    len: usize,
    _buffer: PhantomData<&'a Buffer>,
}

/// Registered bytes to read and write, borrowed exclusively from the region table for
/// `'a`: [`SharedBytesMut::copy_from`] copies in with a raw copy, and an 8-byte aligned
/// span is a word for the remote atomics ([`SharedBytesMut::fetch_add`],
/// [`SharedBytesMut::compare_swap`]).
pub struct SharedBytesMut<'a> {
    ptr: NonNull<u8>,
    len: usize,
    _buffer: PhantomData<&'a mut Buffer>,
}

impl<'a> SharedBytes<'a> {
    /// The length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True for no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The bytes `[offset, offset + len)` of these, `None` if not all inside.
    pub fn sub(&self, offset: usize, len: usize) -> Option<SharedBytes<'a>> {
        if offset.checked_add(len)? > self.len {
            return None;
        }
        Some(SharedBytes {
            // SAFETY: `offset <= self.len`: inside these bytes or one past their end.
            ptr: unsafe { self.ptr.add(offset) },
            len,
            _buffer: PhantomData,
        })
    }

    /// The address of the first byte, as a number: for a sender that hands it to the
    /// kernel in a gather list (`sendmsg` copies from it) while the region stays
    /// registered. Reading through it is the holder's own `unsafe`.
    pub fn addr(&self) -> usize {
        self.ptr.as_ptr() as usize
    }

    /// The CRC-32 state after `state` (as `crc32fast::Hasher` holds it) and these
    /// bytes, read in place with raw loads (`crc.rs`), never through a reference: to hash
    /// a payload that is not copied anywhere before the kernel copies it.
    pub fn crc32_update(&self, state: u32) -> u32 {
        // SAFETY: `self.ptr` is valid for reads of `self.len` bytes while `'a` lives (see
        // `copy_to`).
        unsafe { super::crc::update(state, self.ptr.as_ptr(), self.len) }
    }

    /// Copies the bytes into `dst`, which must be as long (false, nothing copied, if it
    /// is not).
    #[must_use]
    #[inline]
    pub fn copy_to(&self, dst: &mut [u8]) -> bool {
        if dst.len() != self.len {
            return false;
        }
        // SAFETY: `self.ptr` is valid for reads of `self.len` bytes while the borrow
        // `'a` of the region's buffer lives (the region stays registered, so its bytes
        // stay allocated or, the program's, valid by `reg_mr_raw`'s contract). `dst` is
        // the stack's own slice of the same length (a frame, a staging array); it cannot
        // overlap the region: owned bytes are only reached through this table, and the
        // program's are never made into a slice by the stack.
        unsafe { std::ptr::copy_nonoverlapping(self.ptr.as_ptr(), dst.as_mut_ptr(), self.len) };
        true
    }

    /// The bytes, copied into a new `Vec`.
    pub fn to_vec(&self) -> Vec<u8> {
        let mut v = vec![0; self.len];
        let copied = self.copy_to(&mut v);
        debug_assert!(copied, "the same length");
        v
    }
}

impl SharedBytesMut<'_> {
    /// The length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True for no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The same bytes, to read.
    pub fn as_shared(&self) -> SharedBytes<'_> {
        SharedBytes {
            ptr: self.ptr,
            len: self.len,
            _buffer: PhantomData,
        }
    }

    /// The bytes `[offset, offset + len)` of these, writable; `None` if not all inside.
    pub fn sub(&mut self, offset: usize, len: usize) -> Option<SharedBytesMut<'_>> {
        if offset.checked_add(len)? > self.len {
            return None;
        }
        Some(SharedBytesMut {
            // SAFETY: `offset <= self.len`: inside these bytes or one past their end.
            ptr: unsafe { self.ptr.add(offset) },
            len,
            _buffer: PhantomData,
        })
    }

    /// Copies `src` into the bytes, which must be as long (false, nothing copied, if
    /// they are not).
    #[must_use]
    #[inline]
    pub fn copy_from(&mut self, src: &[u8]) -> bool {
        if src.len() != self.len {
            return false;
        }
        // SAFETY: `self.ptr` is valid for writes of `self.len` bytes while the exclusive
        // borrow of the region's buffer lives (owned bytes are ours; the program's were
        // registered valid for writes). `src` is the stack's own slice (a received
        // frame's payload, a staging array) of the same length, never inside a region.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), self.ptr.as_ptr(), self.len) };
        true
    }

    /// The bytes as one 8-byte word for an atomic, `None` unless they are exactly 8
    /// bytes at an 8-byte aligned address.
    fn word(&mut self) -> Option<&AtomicU64> {
        if self.len != 8 || self.ptr.as_ptr().align_offset(8) != 0 {
            return None;
        }
        // SAFETY: 8 bytes, aligned to 8 (checked just above), valid for reads and writes
        // while the exclusive borrow of the buffer lives, which outlives the returned
        // reference. The reference is to an atomic (an `UnsafeCell`), so it claims
        // nothing about other accesses except that concurrent ones be atomic too: the
        // stack's own are (it holds `&mut` of the buffer), and the program's atomics on
        // the word are; a plain store of the program's racing with a remote atomic is the
        // program's race, as with a NIC.
        Some(unsafe { AtomicU64::from_ptr(self.ptr.as_ptr().cast::<u64>()) })
    }

    /// FETCH_ADD (IBTA §9.4.5): adds `add` to the word, wrapping, in one atomic step;
    /// gives the value before. `None`, nothing changed, unless the bytes are one 8-byte
    /// aligned word. The word is in the host's byte order, as the program's own
    /// `uint64_t` (rdma_rxe does the same).
    pub fn fetch_add(&mut self, add: u64) -> Option<u64> {
        Some(self.word()?.fetch_add(add, Ordering::SeqCst))
    }

    /// CMP_SWAP (IBTA §9.4.5): writes `swap` if the word equals `compare`, in one atomic
    /// step; gives the value before either way. `None`, nothing changed, unless the
    /// bytes are one 8-byte aligned word.
    pub fn compare_swap(&mut self, compare: u64, swap: u64) -> Option<u64> {
        let w = self.word()?;
        Some(
            match w.compare_exchange(compare, swap, Ordering::SeqCst, Ordering::SeqCst) {
                Ok(v) | Err(v) => v,
            },
        )
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Access, AccessError, Memory, Mr, PdId};
    use super::*;

    #[test]
    fn owned_bytes_come_back_whole() {
        let b = Buffer::owned((0..100u8).collect()).unwrap();
        assert_eq!(
            b.owner,
            Owner::Boxed,
            "a Vec's allocation is 8-byte aligned here"
        );
        assert_eq!(b.len(), 100);
        assert_eq!(b.view(98, 2).unwrap().to_vec(), [98u8, 99]);
        assert_eq!(b.into_vec(), Some((0..100u8).collect::<Vec<_>>()));
    }

    /// An atomic needs exactly one 8-byte word at an 8-byte aligned address; a view
    /// that is not one changes nothing.
    #[test]
    fn atomics_need_one_aligned_word() {
        let mut b = Buffer::owned(vec![0u8; 24]).unwrap();
        assert_eq!(b.addr() % 8, 0, "owned bytes are 8-byte aligned");
        assert_eq!(b.view_mut(1, 8).unwrap().fetch_add(1), None, "misaligned");
        assert_eq!(b.view_mut(1, 8).unwrap().compare_swap(0, 1), None);
        assert_eq!(b.view_mut(8, 4).unwrap().fetch_add(1), None, "not one word");
        assert_eq!(b.view_mut(8, 8).unwrap().fetch_add(5), Some(0));
        assert_eq!(b.view_mut(8, 8).unwrap().compare_swap(5, 9), Some(5));
        assert_eq!(
            b.view_mut(8, 8).unwrap().compare_swap(5, 1),
            Some(9),
            "no swap"
        );
        assert_eq!(
            b.view_mut(8, 8).unwrap().fetch_add(u64::MAX),
            Some(9),
            "wraps"
        );
        let back = b.into_vec().unwrap();
        assert_eq!(u64::from_ne_bytes(back[8..16].try_into().unwrap()), 8);
        assert_eq!(back[..8], [0; 8]);
    }

    /// The aligned copy that `owned` makes of a `Vec` whose bytes are not 8-byte aligned
    /// (the system allocator never gives one, so built by hand): read, handed back, freed.
    #[test]
    fn aligned_copy_round_trips() {
        let layout = Layout::from_size_align(5, 8).unwrap();
        // SAFETY: a non-zero size.
        let p = NonNull::new(unsafe { std::alloc::alloc(layout) }).unwrap();
        // SAFETY: 5 fresh bytes, valid for writes.
        unsafe { std::ptr::copy_nonoverlapping([1u8, 2, 3, 4, 5].as_ptr(), p.as_ptr(), 5) };
        let b = Buffer {
            ptr: p,
            len: 5,
            owner: Owner::Aligned(layout),
        };
        assert_eq!(b.owned_bytes(), Some(&[1u8, 2, 3, 4, 5][..]));
        assert_eq!(b.into_vec(), Some(vec![1, 2, 3, 4, 5]));
        let dropped = Buffer::owned(vec![1; 3]).unwrap();
        drop(dropped);
    }

    #[test]
    fn views_stay_inside() {
        let mut b = Buffer::owned(vec![0; 16]).unwrap();
        assert!(b.view(0, 16).is_some());
        assert!(b.view(16, 0).is_some(), "an empty view at the end");
        assert!(b.view(1, 16).is_none());
        assert!(b.view(17, 0).is_none());
        assert!(b.view(usize::MAX, 2).is_none(), "offset + len overflows");
        assert!(b.view_mut(8, 9).is_none());
        assert!(b.view_mut(8, 8).unwrap().copy_from(&[7; 8]));
        assert!(
            !b.view_mut(8, 8).unwrap().copy_from(&[7; 7]),
            "lengths differ"
        );
        assert_eq!(b.view(6, 4).unwrap().to_vec(), [0u8, 0, 7, 7]);
        let v = b.view(4, 8).unwrap();
        assert_eq!(v.sub(2, 4).unwrap().to_vec(), [0u8, 0, 7, 7]);
        assert!(v.sub(5, 4).is_none());
        let mut short = [0u8; 3];
        assert!(!v.copy_to(&mut short), "lengths differ");
        let mut w = b.view_mut(0, 16).unwrap();
        assert!(w.sub(15, 1).unwrap().copy_from(&[1]));
        assert!(w.sub(15, 2).is_none());
        assert_eq!(w.as_shared().sub(14, 2).unwrap().to_vec(), [7u8, 1]);
        assert_eq!(b.owned_bytes_mut().map(|s| s.len()), Some(16));
    }

    /// The program's bytes, in place: written through a view, read through the
    /// program's pointer; not the stack's to give back, free, or lend as a slice.
    #[test]
    fn borrowed_bytes_are_written_in_place() {
        let mut mine = vec![1u8; 32];
        let p = mine.as_mut_ptr();
        // SAFETY: `mine` outlives `b` and is not touched while `b` lives.
        let mut b = unsafe { Buffer::borrowed(p, 32) }.unwrap();
        assert_eq!(b.owner, Owner::Program);
        assert_eq!(b.addr(), p as u64);
        assert!(b.view_mut(4, 2).unwrap().copy_from(&[9, 9]));
        assert!(b.owned_bytes().is_none() && b.owned_bytes_mut().is_none());
        assert_eq!(b.into_vec(), None);
        assert_eq!(&mine[2..8], &[1, 1, 9, 9, 1, 1]);
    }

    /// A word the program adds to with its own atomics from another thread, while the
    /// stack adds to it through a view (a remote FETCH_ADD): no update is lost, and every
    /// value the stack saw before its add is distinct.
    #[test]
    fn remote_and_local_atomics_on_one_word_lose_nothing() {
        const N: u64 = 100_000;
        let mut mine = vec![0u64; 2];
        let p = mine.as_mut_ptr();
        // SAFETY: `mine` outlives `b` and the thread (joined before it is read), and is
        // reached only through `p` meanwhile, with atomics on the word at `p`.
        let mut b = unsafe { Buffer::borrowed(p.cast::<u8>(), 16) }.unwrap();
        let word = p as usize;
        let local = std::thread::spawn(move || {
            // SAFETY: an aligned `u64` that outlives the thread, accessed only atomically.
            let w = unsafe { AtomicU64::from_ptr(word as *mut u64) };
            for _ in 0..N {
                w.fetch_add(1 << 32, Ordering::SeqCst);
            }
        });
        let mut seen = Vec::with_capacity(N as usize);
        for _ in 0..N {
            seen.push(b.view_mut(0, 8).unwrap().fetch_add(1).unwrap());
        }
        local.join().unwrap();
        drop(b);
        assert_eq!(mine[0], N << 32 | N);
        seen.sort_unstable();
        seen.dedup();
        assert_eq!(seen.len() as u64, N, "each original value once");
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

    /// A region over the program's memory (ibv_reg_mr: iova = addr): its address is the
    /// program's pointer, the access check bounds it there, and what the stack writes
    /// lands in the program's bytes, in place, as what the program wrote is what it reads.
    #[test]
    fn in_place_region_is_the_programs_memory() {
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
        assert_eq!(m.read(inline).map(|b| b.to_vec()), Some(vec![1u8, 2, 3, 4]));
        assert_eq!(m.bytes(mr.lkey), None, "the program's bytes are never lent");
        assert_eq!(m.deregister(mr.lkey), Ok(None), "nothing to hand back");
        assert_eq!(&mine[60..], &[1, 2, 3, 4]);
        assert_eq!(
            m.check_remote(pd, 0, mr.rkey, addr, 1, Access::REMOTE_WRITE),
            Err(AccessError::BadKey(mr.rkey)),
            "a deregistered region's rkey grants nothing"
        );
        assert!(m.read(s).is_none(), "nor does a span checked before");
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
        assert!(m.write(s).unwrap().copy_from(&[7, 8]));
        let t = m
            .check_remote(pd, 0, tail.rkey, tail.addr, 2, Access::REMOTE_READ)
            .unwrap();
        assert_eq!(m.read(t).map(|b| b.to_vec()), Some(vec![7u8, 8]));
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
