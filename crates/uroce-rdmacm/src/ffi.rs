//! The C boundary of `librdmacm.so.1`: every function C calls goes through here.
//!
//! Each exported function runs its body inside [`minus1`], [`ptr`], [`void`] or [`call`],
//! which catch a panic (`std::panic::catch_unwind`: a panic that reached an `extern "C"`
//! function would abort the host program) and answer it as `<rdma/rdma_cma.h>`
//! documents a failure, with `EIO`: -1 with errno `EIO` for the calls returning an int
//! (`rdma_create_id`, `rdma_connect`, `rdma_get_cm_event`...), NULL with errno `EIO` for
//! those returning a pointer (`rdma_create_event_channel`, `rdma_get_devices`), nothing
//! for the destroy and free calls, port 0 for `rdma_get_src_port` / `rdma_get_dst_port`.
//! The library's one lock is taken poisoned or not (`state::lock`), so a call after a
//! panic finds the state as the panicking call left it between two steps. Nothing here
//! installs a panic hook: the default one reports a panic on stderr, which is the
//! runtime's output, not this library's.
//!
//! The test hook is uroce-verbs' (its `src/ffi.rs` says why it is made so): in a debug
//! build only, `UROCE_TEST_PANIC=<entry point>` makes the first call of that entry point
//! in the process panic inside its entry (`tests/panic.rs`).

use std::ffi::c_int;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};

use libc::EIO;

#[path = "../../uroce-verbs/src/catch.rs"]
mod catch;
pub use catch::TEST_PANIC_ENV;
pub(crate) use catch::{call, set_errno};

/// Threads started with every signal blocked, uroce-verbs' own file.
#[path = "../../uroce-verbs/src/quiet.rs"]
pub(crate) mod quiet;

/// A call that returns 0 (or a count) or -1 with errno: -1 with errno EIO on a panic.
pub(crate) fn minus1<R: From<i8>>(name: &'static str, body: impl FnOnce() -> R) -> R {
    call(
        name,
        || {
            set_errno(EIO);
            R::from(-1)
        },
        body,
    )
}

/// A call that returns a pointer, NULL with errno on failure: NULL with errno EIO on a
/// panic.
pub(crate) fn ptr<T>(name: &'static str, body: impl FnOnce() -> *mut T) -> *mut T {
    call(
        name,
        || {
            set_errno(EIO);
            std::ptr::null_mut()
        },
        body,
    )
}

/// A call with nothing to return (the destroy and free calls): errno EIO on a panic.
pub(crate) fn void(name: &'static str, body: impl FnOnce()) {
    call(name, || set_errno(EIO), body)
}

// ---------------------------------------------------------------------------------
// What turns C pointers into Rust values. Each `unsafe fn` states its C contract; the
// exported functions (`exports.rs`) are the only callers, each citing the contract of the
// C call it implements. The rest of the crate sees references, slices and values.

/// The C structures an all-zero value of which is valid (null pointers, zero numbers,
/// zero-length unions): what `zeroed` makes.
///
/// # Safety
/// Every field of the type is a number, a raw pointer, an array or union of those, or
/// another `Zeroable` type.
pub(crate) unsafe trait Zeroable: Sized {}

// SAFETY: C structures of numbers, raw pointers and unions of those.
unsafe impl Zeroable for crate::state::IdBox {}
// SAFETY: as above.
unsafe impl Zeroable for crate::state::EventBox {}
// SAFETY: as above.
unsafe impl Zeroable for crate::abi::rdma_sockaddr {}
// SAFETY: as above.
unsafe impl Zeroable for crate::verbs_abi::ibv_port_attr {}
// SAFETY: as above.
unsafe impl Zeroable for crate::verbs_abi::ibv_device_attr {}
// SAFETY: as above.
unsafe impl Zeroable for libc::addrinfo {}

/// An all-zero `T`.
pub(crate) fn zeroed<T: Zeroable>() -> T {
    // SAFETY: `Zeroable`'s contract: all zeros is a valid `T`.
    unsafe { std::mem::zeroed() }
}

/// A C object this library allocates and hands to the program by address (an
/// `rdma_cm_id`, an `rdma_event_channel`, an `rdma_cm_event`): a leaked box that the
/// library's state owns, whose address the program holds until it gives it back
/// (`rdma_destroy_id`, `rdma_destroy_event_channel`, `rdma_ack_cm_event`). Dropping it
/// frees the object. The program looks the objects up only by address (the state's
/// maps are keyed by it), so a pointer the program passes is never dereferenced before
/// it is found there.
pub(crate) struct CBox<T>(std::ptr::NonNull<T>);

impl<T> CBox<T> {
    pub(crate) fn new(v: T) -> Self {
        Self(std::ptr::NonNull::from(Box::leak(Box::new(v))))
    }

    /// The address the program gets.
    pub(crate) fn as_ptr(&self) -> *mut T {
        self.0.as_ptr()
    }

    /// The address as the state's maps key it.
    pub(crate) fn addr(&self) -> usize {
        self.0.as_ptr() as usize
    }
}

impl<T> std::ops::Deref for CBox<T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: the box is live until this `CBox` drops, and only this `CBox` hands out
        // Rust references to it (the program reads it through its pointer: what librdmacm's
        // own objects are to a program).
        unsafe { self.0.as_ref() }
    }
}

impl<T> std::ops::DerefMut for CBox<T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: as for `deref`, with `self` borrowed mutably.
        unsafe { self.0.as_mut() }
    }
}

impl<T> Drop for CBox<T> {
    fn drop(&mut self) {
        // SAFETY: the pointer came from `Box::leak` in `new` and is freed once, here.
        drop(unsafe { Box::from_raw(self.0.as_ptr()) });
    }
}

// SAFETY: a `CBox` owns its object as a `Box` does; the raw pointers inside the C
// objects are addresses only (of the library's objects, or the program's verbs objects
// handed back to libibverbs), and every `CBox` lives in the state, under its mutex.
unsafe impl<T> Send for CBox<T> {}

/// The one member of `struct rdma_addr`'s `addr` union.
pub(crate) fn ib_addr(a: &mut crate::abi::rdma_addr_addr) -> &mut crate::abi::rdma_ib_addr {
    // SAFETY: `ibaddr` is the union's only member, and a plain-data one.
    unsafe { &mut a.ibaddr }
}

/// The IP socket address at `p`, if it is one.
///
/// # Safety
/// `p` is null or points at a sockaddr of the size its family implies.
pub(crate) unsafe fn read_sockaddr(p: *const libc::sockaddr) -> Option<SocketAddr> {
    if p.is_null() {
        return None;
    }
    // SAFETY: the caller's contract: a sockaddr of its family's size.
    unsafe {
        match c_int::from((*p).sa_family) {
            libc::AF_INET => {
                let s = p.cast::<libc::sockaddr_in>().read_unaligned();
                Some(SocketAddr::V4(SocketAddrV4::new(
                    Ipv4Addr::from(u32::from_be(s.sin_addr.s_addr)),
                    u16::from_be(s.sin_port),
                )))
            }
            libc::AF_INET6 => {
                let s = p.cast::<libc::sockaddr_in6>().read_unaligned();
                Some(SocketAddr::V6(SocketAddrV6::new(
                    Ipv6Addr::from(s.sin6_addr.s6_addr),
                    u16::from_be(s.sin6_port),
                    s.sin6_flowinfo,
                    s.sin6_scope_id,
                )))
            }
            _ => None,
        }
    }
}

/// Writes `v` through the program's out-pointer `p`.
///
/// # Safety
/// `p` is non-null, aligned and writable for a `T`.
pub(crate) unsafe fn write_out<T>(p: *mut T, v: T) {
    // SAFETY: the caller's contract.
    unsafe { p.write(v) }
}

/// A copy of the `len` bytes at `p` (none when `p` is null or `len` 0).
///
/// # Safety
/// `p` is null or points at `len` readable bytes.
pub(crate) unsafe fn bytes(p: *const std::ffi::c_void, len: usize) -> Vec<u8> {
    if p.is_null() || len == 0 {
        return Vec::new();
    }
    // SAFETY: the caller's contract.
    unsafe { std::slice::from_raw_parts(p.cast::<u8>(), len) }.to_vec()
}

/// A copy of the structure at `p`, if `p` is not null.
///
/// # Safety
/// `p` is null or points at a readable, initialised `T`.
pub(crate) unsafe fn read_in<T: Copy>(p: *const T) -> Option<T> {
    // SAFETY: the caller's contract.
    unsafe { p.as_ref() }.copied()
}

/// The program's structure at `p` to read and change for the call's duration, if `p` is
/// not null.
///
/// # Safety
/// `p` is null or points at a `T` that nothing else accesses during the call.
pub(crate) unsafe fn in_out<'a, T>(p: *mut T) -> Option<&'a mut T> {
    // SAFETY: the caller's contract.
    unsafe { p.as_mut() }
}

/// The program's structure at `p` to read for the call's duration, if `p` is not null.
///
/// # Safety
/// `p` is null or points at a readable, initialised `T`.
pub(crate) unsafe fn in_ref<'a, T>(p: *const T) -> Option<&'a T> {
    // SAFETY: the caller's contract.
    unsafe { p.as_ref() }
}

/// A bitwise copy of QP init attributes (`ibv_qp_init_attr` is not `Copy` only because
/// verbs_abi does not derive it): plain data and pointers, the copy owns nothing.
pub(crate) fn copy_qp_init_attr(
    a: &crate::verbs_abi::ibv_qp_init_attr,
) -> crate::verbs_abi::ibv_qp_init_attr {
    // SAFETY: a live structure of numbers and raw pointers, read once.
    unsafe { std::ptr::read(a) }
}

/// A connection parameter block's private data, copied (none when `p` is null).
///
/// # Safety
/// `p` is null or a parameter block whose private data pointer is null or has
/// `private_data_len` readable bytes.
pub(crate) unsafe fn conn_param(
    p: *const crate::abi::rdma_conn_param,
) -> (Option<crate::abi::rdma_conn_param>, Vec<u8>) {
    // SAFETY: the caller's contract.
    let Some(param) = (unsafe { read_in(p) }) else {
        return (None, Vec::new());
    };
    // SAFETY: as above.
    let data = unsafe { bytes(param.private_data, usize::from(param.private_data_len)) };
    (Some(param), data)
}

/// A NULL-terminated `calloc`ed array of `items` (freed by the program with the call
/// that gives it back, which calls `libc::free`); NULL when the allocation fails.
pub(crate) fn calloc_list<T>(items: &[*mut T]) -> *mut *mut T {
    // SAFETY: calloc of n+1 pointers; checked for null.
    let list =
        unsafe { libc::calloc(items.len() + 1, std::mem::size_of::<*mut T>()) }.cast::<*mut T>();
    if list.is_null() {
        return list;
    }
    for (i, c) in items.iter().enumerate() {
        // SAFETY: within the n+1 allocated, aligned as calloc's memory is.
        unsafe { *list.add(i) = *c };
    }
    list
}

// ---------------------------------------------------------------------------------
// The state's raw pointers, and the system calls on its descriptors.

// SAFETY: an id's raw pointers (the QP init attributes `rdma_create_ep` kept) are
// addresses of the program's verbs objects, only handed back to libibverbs; every access
// is under the state's mutex.
unsafe impl Send for crate::state::Id {}
// SAFETY: a device's context and PD are libibverbs objects this library opened, used
// from any thread as libibverbs allows, under the state's mutex.
unsafe impl Send for crate::state::Device {}

/// A new eventfd (close-on-exec, with `flags`).
pub(crate) fn eventfd(flags: c_int) -> std::io::Result<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd;
    // SAFETY: eventfd takes no pointers; a negative return is an error.
    let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | flags) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `fd` was just opened and nothing else owns it.
    Ok(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) })
}

/// Adds one to an eventfd's counter.
pub(crate) fn signal(fd: std::os::fd::RawFd) {
    let one: u64 = 1;
    // SAFETY: writes 8 bytes from a live u64 to an eventfd.
    let _ = unsafe { libc::write(fd, (&one as *const u64).cast(), 8) };
}

/// Takes one count from a semaphore eventfd, blocking unless it is non-blocking; the
/// errno of the `read(2)` otherwise: EAGAIN when non-blocking and empty, EINTR when a
/// signal interrupted the wait (librdmacm's `rdma_get_cm_event` is one `read(2)` of the
/// channel's fd and fails with its errno, and so do the calls that wait through it:
/// a synchronous id's `rdma_resolve_addr`, `rdma_connect`..., `rdma_get_request`).
pub(crate) fn take_one(fd: std::os::fd::RawFd) -> Result<(), c_int> {
    let mut n: u64 = 0;
    // SAFETY: reads 8 bytes into a live u64 from an eventfd.
    let r = unsafe { libc::read(fd, (&mut n as *mut u64).cast(), 8) };
    if r == 8 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EIO))
    }
}

/// Empties a non-blocking eventfd's counter.
pub(crate) fn drain(fd: std::os::fd::RawFd) {
    let mut n: u64 = 0;
    // SAFETY: reads 8 bytes into a live u64 from a non-blocking eventfd.
    let _ = unsafe { libc::read(fd, (&mut n as *mut u64).cast(), 8) };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_is_the_calls_failure() {
        assert_eq!(minus1::<c_int>("t", || panic!("boom")), -1);
        // SAFETY: reading this thread's errno.
        assert_eq!(unsafe { *libc::__errno_location() }, EIO);
        assert_eq!(minus1::<isize>("t", || panic!("boom")), -1);
        assert!(ptr::<u8>("t", || panic!("boom")).is_null());
        void("t", || panic!("boom"));
        assert_eq!(minus1::<c_int>("t", || 3), 3);
    }
}
