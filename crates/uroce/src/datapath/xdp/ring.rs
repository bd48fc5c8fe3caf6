//! The UMEM and the four single-producer / single-consumer rings shared with the kernel.

use std::io;
use std::sync::atomic::{AtomicU32, Ordering};

use super::RingOffset;

/// Anonymous memory registered as the UMEM.
pub(super) struct Umem {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the UMEM is plain memory owned by this value; the kernel touches only frames
// handed to it through the rings.
unsafe impl Send for Umem {}

impl Umem {
    pub(super) fn new(len: usize) -> io::Result<Self> {
        // SAFETY: anonymous private mapping; the pointer is checked before use.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Self { ptr: p.cast(), len })
    }
    pub(super) fn addr(&self) -> *mut u8 {
        self.ptr
    }
    pub(super) fn len(&self) -> usize {
        self.len
    }
    /// The `len` bytes at offset `at`, writable (a TX frame we own).
    ///
    /// # Safety
    /// The range must be a frame the kernel does not own: taken from the free TX list and
    /// not yet on the TX ring.
    ///
    /// # Panics
    /// If the range is outside the mapping (a bug in the caller's address arithmetic).
    pub(super) unsafe fn slice_mut(&mut self, at: u64, len: usize) -> &mut [u8] {
        let at = at as usize;
        assert!(
            at.checked_add(len).is_some_and(|end| end <= self.len),
            "UMEM range out of bounds"
        );
        // SAFETY: bounds checked above; the caller guarantees the kernel does not touch
        // the frame, and `&mut self` keeps any other slice of the UMEM from being alive.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.add(at), len) }
    }
    /// Copies `len` bytes from offset `from` to offset `to`.
    ///
    /// # Safety
    /// `from` must be part of a frame taken from the RX ring and not yet given back, `to`
    /// a range the kernel never writes (never offered through the fill ring), and the two
    /// must not overlap.
    ///
    /// # Panics
    /// If either range is outside the mapping.
    pub(super) unsafe fn copy(&mut self, from: u64, to: u64, len: usize) {
        let (from, to) = (from as usize, to as usize);
        assert!(
            from.checked_add(len).is_some_and(|end| end <= self.len)
                && to.checked_add(len).is_some_and(|end| end <= self.len),
            "UMEM range out of bounds"
        );
        // SAFETY: both ranges are inside the mapping (checked above), do not overlap and
        // are not written by the kernel meanwhile (the caller's guarantee).
        unsafe { std::ptr::copy_nonoverlapping(self.ptr.add(from), self.ptr.add(to), len) }
    }

    /// The `len` bytes at offset `at` (an RX frame the kernel handed to us).
    ///
    /// # Safety
    /// The range must be a frame taken from the RX ring and not yet given back through
    /// the fill ring.
    ///
    /// # Panics
    /// If the range is outside the mapping.
    pub(super) unsafe fn slice(&self, at: u64, len: usize) -> &[u8] {
        let at = at as usize;
        assert!(
            at.checked_add(len).is_some_and(|end| end <= self.len),
            "UMEM range out of bounds"
        );
        // SAFETY: bounds checked above; the kernel does not write a frame between
        // producing it on the RX ring and getting it back through the fill ring.
        unsafe { std::slice::from_raw_parts(self.ptr.add(at), len) }
    }
}

impl Drop for Umem {
    fn drop(&mut self) {
        // SAFETY: unmapping our own mapping once.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

/// One ring: producer and consumer indices, flags, and `size` entries of `entry` bytes.
pub(super) struct Ring {
    map: *mut u8,
    map_len: usize,
    producer: *const AtomicU32,
    consumer: *const AtomicU32,
    flags: *const AtomicU32,
    desc: *mut u8,
    size: u32,
    entry: usize,
    /// Our cached copy of the index we own (producer for fill / TX, consumer for RX /
    /// completion), published by submit / release.
    local: u32,
}

// SAFETY: the ring memory lives as long as this value and is only used from the thread
// that owns the backend.
unsafe impl Send for Ring {}

const XDP_RING_NEED_WAKEUP: u32 = 1;

impl Ring {
    pub(super) fn map(
        fd: i32,
        pgoff: u64,
        off: &RingOffset,
        size: u32,
        entry: usize,
    ) -> io::Result<Self> {
        let map_len = off.desc as usize + size as usize * entry;
        // SAFETY: mapping the ring the kernel set up for this socket at its documented offset.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_POPULATE,
                fd,
                pgoff as libc::off_t,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let base: *mut u8 = p.cast();
        // SAFETY: the offsets come from XDP_MMAP_OFFSETS and lie inside the mapping.
        let (producer, consumer, flags, desc) = unsafe {
            (
                base.add(off.producer as usize) as *const AtomicU32,
                base.add(off.consumer as usize) as *const AtomicU32,
                base.add(off.flags as usize) as *const AtomicU32,
                base.add(off.desc as usize),
            )
        };
        let mut r = Self {
            map: base,
            map_len,
            producer,
            consumer,
            flags,
            desc,
            size,
            entry,
            local: 0,
        };
        // Start from where the kernel's indices are.
        r.local = if pgoff == 0 || pgoff == 0x1_8000_0000 {
            r.cons().load(Ordering::Acquire)
        } else {
            r.prod().load(Ordering::Acquire)
        };
        Ok(r)
    }

    fn prod(&self) -> &AtomicU32 {
        // SAFETY: points into the live mapping (see `map`).
        unsafe { &*self.producer }
    }
    fn cons(&self) -> &AtomicU32 {
        // SAFETY: as above.
        unsafe { &*self.consumer }
    }

    fn slot(&self, idx: u32) -> *mut u8 {
        // SAFETY: the index is reduced modulo the ring size (a power of two).
        unsafe { self.desc.add((idx & (self.size - 1)) as usize * self.entry) }
    }

    /// Entries the ring holds.
    pub(super) fn size(&self) -> u32 {
        self.size
    }

    /// Producer rings: entries we may still fill.
    pub(super) fn free_slots(&self) -> u32 {
        self.size - self.local.wrapping_sub(self.cons().load(Ordering::Acquire))
    }

    /// Producer rings: entries produced that the kernel has not consumed yet.
    pub(super) fn in_flight(&self) -> u32 {
        self.local.wrapping_sub(self.cons().load(Ordering::Acquire))
    }

    /// Fill ring: offers a frame address.
    pub(super) fn push_addr(&mut self, addr: u64) {
        if self.free_slots() == 0 {
            return;
        }
        // SAFETY: a slot we own as producer.
        unsafe { (self.slot(self.local) as *mut u64).write_unaligned(addr) };
        self.local = self.local.wrapping_add(1);
    }

    /// TX ring: queues a descriptor.
    pub(super) fn push_desc(&mut self, addr: u64, len: u32, options: u32) {
        let p = self.slot(self.local);
        // SAFETY: a 16-byte xdp_desc slot we own as producer.
        unsafe {
            (p as *mut u64).write_unaligned(addr);
            (p.add(8) as *mut u32).write_unaligned(len);
            (p.add(12) as *mut u32).write_unaligned(options);
        }
        self.local = self.local.wrapping_add(1);
    }

    /// Publishes what we produced.
    pub(super) fn submit(&mut self) {
        self.prod().store(self.local, Ordering::Release);
    }

    /// Completion ring: the next finished TX frame.
    pub(super) fn pop_addr(&mut self) -> Option<u64> {
        if self.local == self.prod().load(Ordering::Acquire) {
            return None;
        }
        // SAFETY: a slot the kernel produced and we have not released.
        let a = unsafe { (self.slot(self.local) as *const u64).read_unaligned() };
        self.local = self.local.wrapping_add(1);
        Some(a)
    }

    /// RX ring: the next received descriptor (address, length, options).
    pub(super) fn pop_desc(&mut self) -> Option<(u64, u32, u32)> {
        if self.local == self.prod().load(Ordering::Acquire) {
            return None;
        }
        let p = self.slot(self.local);
        // SAFETY: a 16-byte xdp_desc the kernel produced.
        let d = unsafe {
            (
                (p as *const u64).read_unaligned(),
                (p.add(8) as *const u32).read_unaligned(),
                (p.add(12) as *const u32).read_unaligned(),
            )
        };
        self.local = self.local.wrapping_add(1);
        Some(d)
    }

    /// Consumer rings: gives the consumed entries back.
    pub(super) fn release(&mut self) {
        self.cons().store(self.local, Ordering::Release);
    }

    /// The kernel asks to be woken (NEED_WAKEUP).
    pub(super) fn needs_wakeup(&self) -> bool {
        // SAFETY: points into the live mapping.
        unsafe { &*self.flags }.load(Ordering::Acquire) & XDP_RING_NEED_WAKEUP != 0
    }
}

impl Drop for Ring {
    fn drop(&mut self) {
        // SAFETY: unmapping our own mapping once.
        unsafe { libc::munmap(self.map.cast(), self.map_len) };
    }
}
