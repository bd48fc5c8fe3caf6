//! The shared memory between a process and `uroce daemon`: two single-producer,
//! single-consumer rings of packet slots in one sealed memfd, one ring each way.
//!
//! Layout (all offsets from the start of the mapping, indices little-endian `u32` that
//! only grow, modulo 2^32):
//!
//! ```text
//! 0      ring 0 (process -> daemon): head @0, tail @64, consumer sleeping @128
//! 4096   ring 1 (daemon -> process): same
//! 8192   ring 0's slots, then ring 1's: SLOTS x SLOT bytes each
//! ```
//!
//! A slot is a [`SlotHeader`] (how the packet is addressed) and up to
//! [`crate::datapath::MAX_FRAME`] bytes.
//!
//! The producer writes a slot, then publishes it by storing `head + 1` (release); the
//! consumer reads `head` (acquire), copies what it needs, and frees the slot by storing
//! `tail + 1` (release). A consumer about to sleep stores 1 in its `sleeping` word and
//! looks again; a producer that finds it set after publishing clears it and writes the
//! ring's eventfd: the doorbell costs a system call only when someone sleeps.
//!
//! The daemon creates and seals the memfd (it can neither shrink nor grow), so a process
//! cannot make the daemon's mapping fault. Everything the other side wrote is untrusted on
//! the daemon's side: indices are checked ([`RingError`]) and slots are copied out with
//! ([`Ring::read_header`], [`Ring::copy_data`]) before they are looked at.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::atomic::{fence, AtomicU32, Ordering};

use crate::datapath::MAX_FRAME;

/// Slots in each ring.
pub const SLOTS: u32 = 1024;
/// Bytes of a slot: its header and the largest frame, rounded to cache lines.
pub const SLOT: usize = HEADER_LEN + MAX_FRAME + 64;
/// Bytes of a slot's header.
pub const HEADER_LEN: usize = 128;
const CONTROL: usize = 4096;
/// Bytes of the whole shared region.
pub const REGION: usize = 2 * CONTROL + 2 * SLOTS as usize * SLOT;

/// Which of the two rings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dir {
    /// Packets the process sends.
    ToDaemon = 0,
    /// Packets the process receives.
    ToProcess = 1,
}

/// What the other side did to a ring that breaks its rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum RingError {
    /// `head` and `tail` are more than a ring apart.
    #[error("ring indices out of order (head {head}, tail {tail})")]
    Indices {
        /// The producer's index.
        head: u32,
        /// The consumer's index.
        tail: u32,
    },
}

/// One mapping of a shared region.
#[derive(Debug)]
pub struct Region {
    base: NonNull<u8>,
    fd: OwnedFd,
}

// SAFETY: the region is plain shared memory; every access goes through atomics or through
// the ring protocol that gives one side a slot at a time.
unsafe impl Send for Region {}
// SAFETY: as above; the methods that write take `&self` only for slots the caller owns by
// the ring protocol (one producer and one consumer per ring, enforced by the callers).
unsafe impl Sync for Region {}

impl Region {
    /// Creates a sealed memfd of [`REGION`] bytes and maps it (the daemon's side).
    pub fn create(name: &str) -> io::Result<Self> {
        let cname = std::ffi::CString::new(name).map_err(io::Error::other)?;
        // SAFETY: a NUL-terminated name and valid flags; the result is checked.
        let fd = unsafe {
            libc::memfd_create(cname.as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING)
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: memfd_create returned a new descriptor we own.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: a descriptor we own and a length.
        if unsafe { libc::ftruncate(fd.as_raw_fd(), REGION as libc::off_t) } != 0 {
            return Err(io::Error::last_os_error());
        }
        let seals = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL;
        // SAFETY: F_ADD_SEALS on a memfd made with MFD_ALLOW_SEALING.
        if unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, seals) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Self::map(fd)
    }

    /// Maps a region the daemon handed over (the process's side). The region must be
    /// sealed against shrinking at [`REGION`] bytes or more.
    pub fn map(fd: OwnedFd) -> io::Result<Self> {
        // SAFETY: fstat into a zeroed struct on a descriptor we own.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: F_GET_SEALS on a descriptor we own.
        let seals = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GET_SEALS) };
        if (st.st_size as usize) < REGION || seals < 0 || seals & libc::F_SEAL_SHRINK == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "the shared region is not a sealed memfd of the expected size",
            ));
        }
        // SAFETY: a shared mapping of REGION bytes of a file at least that long, which
        // cannot shrink (sealed), so no access within it faults.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                REGION,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Self {
            base: NonNull::new(p.cast()).expect("mmap returned a non-null address"),
            fd,
        })
    }

    /// The memfd, to hand to the process.
    pub fn fd(&self) -> &OwnedFd {
        &self.fd
    }

    /// One of the two rings.
    pub fn ring(&self, dir: Dir) -> Ring<'_> {
        Ring { region: self, dir }
    }

    fn word(&self, offset: usize) -> &AtomicU32 {
        debug_assert!(offset + 4 <= CONTROL * 2 && offset % 4 == 0);
        // SAFETY: the offset is inside the mapping and 4-aligned (the mapping is
        // page-aligned); AtomicU32 has u32's layout, and every access to these words, by
        // either process, is atomic.
        unsafe { &*self.base.as_ptr().add(offset).cast::<AtomicU32>() }
    }

    fn slot_ptr(&self, dir: Dir, index: u32) -> *mut u8 {
        let n = (dir as usize) * SLOTS as usize + (index % SLOTS) as usize;
        // SAFETY: n < 2 * SLOTS, so the slot lies inside the mapping of REGION bytes.
        unsafe { self.base.as_ptr().add(2 * CONTROL + n * SLOT) }
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `map`, unmapped once; no `Ring` outlives `self`.
        unsafe {
            libc::munmap(self.base.as_ptr().cast(), REGION);
        }
    }
}

/// One ring of a [`Region`].
#[derive(Debug, Clone, Copy)]
pub struct Ring<'a> {
    region: &'a Region,
    dir: Dir,
}

impl<'a> Ring<'a> {
    fn base(&self) -> usize {
        self.dir as usize * CONTROL
    }
    fn head(&self) -> &'a AtomicU32 {
        self.region.word(self.base())
    }
    fn tail(&self) -> &'a AtomicU32 {
        self.region.word(self.base() + 64)
    }
    fn sleeping(&self) -> &'a AtomicU32 {
        self.region.word(self.base() + 128)
    }

    /// Slots the consumer has not taken yet, checked.
    fn used(&self, head: u32, tail: u32) -> Result<u32, RingError> {
        let used = head.wrapping_sub(tail);
        if used > SLOTS {
            return Err(RingError::Indices { head, tail });
        }
        Ok(used)
    }

    // --- producer side ---

    /// The index of a free slot to write, or `None` when the ring is full.
    pub fn free_slot(&self) -> Result<Option<u32>, RingError> {
        let head = self.head().load(Ordering::Relaxed);
        let tail = self.tail().load(Ordering::Acquire);
        Ok((self.used(head, tail)? < SLOTS).then_some(head))
    }

    /// The producer's own view, for writing several slots before publishing them at
    /// once: whether slot `index` (the next after those written and not published yet,
    /// from [`Ring::published`] on) is free.
    pub fn is_free(&self, index: u32) -> Result<bool, RingError> {
        let tail = self.tail().load(Ordering::Acquire);
        Ok(self.used(index, tail)? < SLOTS)
    }

    /// The index of the next slot to publish (the producer's).
    pub fn published(&self) -> u32 {
        self.head().load(Ordering::Relaxed)
    }

    /// The slot at `index` to write (the producer's, between [`Ring::free_slot`] and
    /// [`Ring::publish`]).
    ///
    /// # Safety
    /// `index` must come from [`Ring::free_slot`] of this ring, not yet published, and the
    /// caller must be the ring's only producer; no other reference to the slot may live.
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn slot_mut(&self, index: u32) -> &'a mut [u8] {
        // SAFETY: the slot lies in the mapping (slot_ptr); by the ring protocol the
        // consumer does not look at it until it is published, and the caller is its only
        // writer.
        unsafe { std::slice::from_raw_parts_mut(self.region.slot_ptr(self.dir, index), SLOT) }
    }

    /// Writes a slot from `header` and `data` and publishes it; `false` when the ring is
    /// full. For a producer that does not trust the consumer (the daemon), the copy goes
    /// through raw pointers: the consumer scribbling on it hurts only itself.
    pub fn push(&self, header: &SlotHeader, data: &[u8]) -> Result<bool, RingError> {
        let Some(index) = self.free_slot()? else {
            return Ok(false);
        };
        let len = data.len().min(MAX_FRAME);
        let mut h = [0u8; HEADER_LEN];
        header.write(&mut h, len as u32);
        let p = self.region.slot_ptr(self.dir, index);
        // SAFETY: both copies stay inside the slot (HEADER_LEN + len <= SLOT); the source
        // buffers are ours and do not overlap the mapping.
        unsafe {
            std::ptr::copy_nonoverlapping(h.as_ptr(), p, HEADER_LEN);
            std::ptr::copy_nonoverlapping(data.as_ptr(), p.add(HEADER_LEN), len);
        }
        self.publish(index);
        Ok(true)
    }

    /// Publishes the slot at `index` (and every one before it).
    pub fn publish(&self, index: u32) {
        self.head().store(index.wrapping_add(1), Ordering::Release);
    }

    /// After publishing: whether the consumer sleeps and needs its doorbell rung (the
    /// flag is cleared, so one ring wakes it once).
    pub fn consumer_needs_wake(&self) -> bool {
        fence(Ordering::SeqCst);
        self.sleeping().load(Ordering::Relaxed) != 0
            && self.sleeping().swap(0, Ordering::AcqRel) != 0
    }

    // --- consumer side ---

    /// The index of the oldest published slot, or `None` when the ring is empty.
    pub fn next_slot(&self) -> Result<Option<u32>, RingError> {
        let tail = self.tail().load(Ordering::Relaxed);
        let head = self.head().load(Ordering::Acquire);
        Ok((self.used(head, tail)? > 0).then_some(tail))
    }

    /// The published slot at `index`, to read in place (a consumer that trusts the
    /// producer: the process reading what the daemon wrote).
    ///
    /// # Safety
    /// `index` must come from [`Ring::next_slot`] and not be released yet, and the caller
    /// must be the ring's only consumer.
    pub unsafe fn slot(&self, index: u32) -> &'a [u8] {
        // SAFETY: the slot lies in the mapping; by the protocol the producer does not
        // write it until it is released.
        unsafe { std::slice::from_raw_parts(self.region.slot_ptr(self.dir, index), SLOT) }
    }

    /// The header of the published slot at `index` and its data length, checked (at most
    /// [`MAX_FRAME`]): the daemon's way to read what an untrusted process wrote, a copy
    /// of it (whatever the other side writes meanwhile, the caller looks at the copy).
    /// `None` when the header is not valid.
    pub fn read_header(&self, index: u32) -> Option<(SlotHeader, usize)> {
        let p = self.region.slot_ptr(self.dir, index);
        let mut h = [0u8; HEADER_LEN];
        // SAFETY: the header lies inside the slot; the copy is of bytes only.
        unsafe { std::ptr::copy_nonoverlapping(p, h.as_mut_ptr(), HEADER_LEN) };
        let (header, len) = SlotHeader::read(&h)?;
        let len = len as usize;
        (len <= MAX_FRAME).then_some((header, len))
    }

    /// Copies the published slot at `index`'s data from byte `offset` on into `out`
    /// (the copy [`Ring::read_header`]'s caller then looks at). Nothing is copied when
    /// `offset + out.len()` passes [`MAX_FRAME`].
    pub fn copy_data(&self, index: u32, offset: usize, out: &mut [u8]) {
        if offset.saturating_add(out.len()) > MAX_FRAME {
            return;
        }
        let p = self.region.slot_ptr(self.dir, index);
        // SAFETY: offset + out.len() <= MAX_FRAME keeps the copy inside the slot's data;
        // `out` is the caller's own memory, not the mapping.
        unsafe {
            std::ptr::copy_nonoverlapping(p.add(HEADER_LEN + offset), out.as_mut_ptr(), out.len())
        };
    }

    /// Frees the slot at `index` (and every one before it).
    pub fn release(&self, index: u32) {
        self.tail().store(index.wrapping_add(1), Ordering::Release);
    }

    /// Sets the consumer's sleeping flag and leaves it set, whatever the ring holds: the
    /// producer's next [`Ring::consumer_needs_wake`] then clears it and rings. For a
    /// consumer that counts the producer's rings (the process: see `DaemonBackend::arm`),
    /// which only a flag it alone sets and the producer alone clears lets it do.
    pub fn set_sleeping(&self) {
        self.sleeping().store(1, Ordering::SeqCst);
        fence(Ordering::SeqCst);
    }

    /// Says the consumer is about to sleep; returns whether the ring is still empty (if
    /// not, the flag is taken back and the caller reads on instead of sleeping).
    pub fn prepare_sleep(&self) -> Result<bool, RingError> {
        self.sleeping().store(1, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        if self.next_slot()?.is_some() {
            self.sleeping().store(0, Ordering::Relaxed);
            return Ok(false);
        }
        Ok(true)
    }

    /// Whether the consumer's sleeping flag is still set (no producer rang since).
    pub fn asleep(&self) -> bool {
        self.sleeping().load(Ordering::Relaxed) != 0
    }
}

/// How the packet in a slot is addressed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlotHeader {
    /// A RoCE datagram (BTH to ICRC) and its IP and UDP headers; `dst_mac` is the next
    /// hop for a datapath that builds frames.
    Datagram {
        /// IP and UDP.
        datagram: crate::wire::DatagramRepr,
        /// Next hop (sends over AF_XDP).
        dst_mac: [u8; 6],
    },
    /// A whole Ethernet frame (received over AF_XDP).
    Frame,
    /// From a process to the daemon: a RoCE datagram its socket of the fast path received
    /// for a QPN of another class (UDP GRO coalesces a run of one flow and the kernel
    /// steers it by its first packet), for the daemon to switch as one it received.
    Misdelivered {
        /// IP and UDP, as received.
        datagram: crate::wire::DatagramRepr,
    },
}

const KIND_DATAGRAM: u8 = 1;
const KIND_FRAME: u8 = 2;
const KIND_MISDELIVERED: u8 = 3;

impl SlotHeader {
    /// Writes the header and the data length into a slot header's bytes.
    pub fn write(&self, h: &mut [u8; HEADER_LEN], len: u32) {
        use crate::wire::IpRepr;
        h.fill(0);
        h[0..4].copy_from_slice(&len.to_le_bytes());
        let (datagram, dst_mac) = match self {
            Self::Frame => {
                h[4] = KIND_FRAME;
                return;
            }
            Self::Datagram { datagram, dst_mac } => {
                h[4] = KIND_DATAGRAM;
                (datagram, *dst_mac)
            }
            Self::Misdelivered { datagram } => {
                h[4] = KIND_MISDELIVERED;
                (datagram, [0; 6])
            }
        };
        // Bytes 5 and 12 to 16 are left zero (they carried an ICRC a backend computed,
        // until the context computed every one; a reader ignores them).
        h[6..12].copy_from_slice(&dst_mac);
        h[22..24].copy_from_slice(&datagram.udp.src_port.to_le_bytes());
        h[24..26].copy_from_slice(&datagram.udp.dst_port.to_le_bytes());
        h[26..28].copy_from_slice(&datagram.udp.checksum.to_le_bytes());
        match datagram.ip {
            IpRepr::V4(ip) => {
                h[16] = 4;
                h[17] = ip.tos;
                h[18] = ip.ttl;
                h[19] = ip.dont_frag as u8;
                h[20..22].copy_from_slice(&ip.ident.to_le_bytes());
                h[32..36].copy_from_slice(&ip.src.octets());
                h[48..52].copy_from_slice(&ip.dst.octets());
                h[64] = ip.protocol;
                let n = usize::from(ip.options_len.min(40));
                h[65] = n as u8;
                h[66..66 + n].copy_from_slice(&ip.options[..n]);
            }
            IpRepr::V6(ip) => {
                h[16] = 6;
                h[17] = ip.traffic_class;
                h[18] = ip.hop_limit;
                h[28..32].copy_from_slice(&ip.flow_label.to_le_bytes());
                h[32..48].copy_from_slice(&ip.src.octets());
                h[48..64].copy_from_slice(&ip.dst.octets());
                h[64] = ip.next_header;
            }
        }
    }

    /// Reads a header and the data length; `None` when it is not one [`SlotHeader::write`]
    /// could have written.
    pub fn read(h: &[u8; HEADER_LEN]) -> Option<(Self, u32)> {
        use crate::wire::{IpRepr, Ipv4Repr, Ipv6Repr, UdpRepr};
        let len = u32::from_le_bytes(h[0..4].try_into().ok()?);
        let u16_at = |i: usize| u16::from_le_bytes([h[i], h[i + 1]]);
        let header = match h[4] {
            KIND_FRAME => Self::Frame,
            kind @ (KIND_DATAGRAM | KIND_MISDELIVERED) => {
                let ip = match h[16] {
                    4 => {
                        let n = h[65];
                        if n > 40 || n % 4 != 0 {
                            return None;
                        }
                        let mut options = [0u8; 40];
                        options[..usize::from(n)].copy_from_slice(&h[66..66 + usize::from(n)]);
                        let o4 =
                            |i: usize| std::net::Ipv4Addr::new(h[i], h[i + 1], h[i + 2], h[i + 3]);
                        IpRepr::V4(Ipv4Repr {
                            src: o4(32),
                            dst: o4(48),
                            tos: h[17],
                            ident: u16_at(20),
                            dont_frag: h[19] != 0,
                            ttl: h[18],
                            protocol: h[64],
                            options,
                            options_len: n,
                        })
                    }
                    6 => {
                        let a = |i: usize| {
                            let b: [u8; 16] = h[i..i + 16].try_into().expect("16 bytes");
                            std::net::Ipv6Addr::from(b)
                        };
                        IpRepr::V6(Ipv6Repr {
                            src: a(32),
                            dst: a(48),
                            traffic_class: h[17],
                            flow_label: u32::from_le_bytes(h[28..32].try_into().ok()?) & 0xf_ffff,
                            next_header: h[64],
                            hop_limit: h[18],
                        })
                    }
                    _ => return None,
                };
                let datagram = crate::wire::DatagramRepr {
                    ip,
                    udp: UdpRepr {
                        src_port: u16_at(22),
                        dst_port: u16_at(24),
                        checksum: u16_at(26),
                    },
                };
                if kind == KIND_MISDELIVERED {
                    Self::Misdelivered { datagram }
                } else {
                    Self::Datagram {
                        datagram,
                        dst_mac: h[6..12].try_into().ok()?,
                    }
                }
            }
            _ => return None,
        };
        Some((header, len))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::DatagramRepr;

    #[test]
    fn headers_round_trip() {
        let v4 = DatagramRepr::roce(
            "10.0.0.1".parse().unwrap(),
            "10.0.0.2".parse().unwrap(),
            49152,
            0x02,
        )
        .unwrap();
        let v6 = DatagramRepr::roce(
            "fe80::1".parse().unwrap(),
            "2001:db8::2".parse().unwrap(),
            50000,
            0xb8,
        )
        .unwrap();
        for h in [
            SlotHeader::Frame,
            SlotHeader::Datagram {
                datagram: v4,
                dst_mac: [2, 0, 0, 0, 0, 1],
            },
            SlotHeader::Datagram {
                datagram: v6,
                dst_mac: [0; 6],
            },
            SlotHeader::Misdelivered { datagram: v4 },
            SlotHeader::Misdelivered { datagram: v6 },
        ] {
            let mut b = [0u8; HEADER_LEN];
            h.write(&mut b, 77);
            assert_eq!(SlotHeader::read(&b), Some((h, 77)));
            // Bytes 5 and 12 to 16 are written zero and not read (a writer of before
            // put an ICRC there).
            assert!(b[5] == 0 && b[12..16] == [0; 4]);
            b[5] = 1;
            b[12..16].copy_from_slice(&0xdead_beef_u32.to_le_bytes());
            assert_eq!(SlotHeader::read(&b), Some((h, 77)));
        }
        let mut b = [0u8; HEADER_LEN];
        b[4] = 9;
        assert_eq!(SlotHeader::read(&b), None, "an unknown kind is refused");
    }

    #[test]
    fn ring_moves_slots_in_order_and_refuses_corrupt_indices() {
        let region = Region::create("uroce-test").unwrap();
        let other = Region::map(region.fd().try_clone().unwrap()).unwrap();
        let tx = region.ring(Dir::ToDaemon);
        let rx = other.ring(Dir::ToDaemon);
        let mut out = vec![0u8; SLOT];
        assert_eq!(rx.next_slot().unwrap(), None);
        for i in 0..SLOTS {
            assert!(tx.push(&SlotHeader::Frame, &i.to_le_bytes()).unwrap());
        }
        assert!(!tx.push(&SlotHeader::Frame, b"x").unwrap(), "full");
        for i in 0..SLOTS {
            let s = rx.next_slot().unwrap().unwrap();
            let (h, len) = rx.read_header(s).unwrap();
            rx.copy_data(s, 0, &mut out[..len]);
            assert_eq!((h, len), (SlotHeader::Frame, 4));
            assert_eq!(out[..4], i.to_le_bytes());
            rx.release(s);
        }
        assert_eq!(rx.next_slot().unwrap(), None);
        // The sleeping flag: set when empty, a producer rings once.
        assert!(rx.prepare_sleep().unwrap());
        assert!(tx.push(&SlotHeader::Frame, b"y").unwrap());
        assert!(tx.consumer_needs_wake());
        assert!(!tx.consumer_needs_wake(), "one ring per sleep");
        // A hostile producer index is an error, not a read out of bounds.
        region.ring(Dir::ToDaemon).publish(12345);
        assert!(matches!(rx.next_slot(), Err(RingError::Indices { .. })));
    }

    #[test]
    fn a_region_that_is_not_sealed_is_refused() {
        // SAFETY: a plain memfd with a valid name.
        let fd = unsafe { libc::memfd_create(c"plain".as_ptr(), libc::MFD_CLOEXEC) };
        assert!(fd >= 0);
        // SAFETY: the new descriptor is ours.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: as above.
        assert_eq!(
            unsafe { libc::ftruncate(fd.as_raw_fd(), REGION as libc::off_t) },
            0
        );
        assert!(Region::map(fd).is_err());
    }
}
