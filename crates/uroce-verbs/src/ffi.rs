//! The C boundary of `libibverbs.so.1`: every function C calls goes through here.
//!
//! - **Entry points.** Each exported function, and each function pointer handed to C (the
//!   `ibv_context_ops` and `verbs_context` entries the inline verbs of verbs.h call), runs
//!   its body inside one of [`ptr`], [`errno`], [`minus1`], [`neg_errno`], [`void`] or
//!   [`call`]. They catch a panic (`std::panic::catch_unwind`; a panic that reached an
//!   `extern "C"` function would abort the host program) and answer it as the verb
//!   documents a failure, with `EIO`: NULL with errno `EIO` for a call returning a
//!   pointer (`ibv_alloc_pd`, `ibv_reg_mr`, `ibv_create_qp`...), the value `EIO` for one
//!   returning an errno value (`ibv_post_send`, `ibv_modify_qp`, `ibv_dereg_mr`...), -1
//!   with errno `EIO` for one returning -1 (`ibv_close_device`, `ibv_get_cq_event`,
//!   `ibv_query_gid`, and `ibv_poll_cq`, whose failure is negative), `-EIO` for uroce's
//!   private calls that return a negated errno. A panic leaves no lock held that a later
//!   call would refuse: every lock of this crate is taken as `lock().unwrap_or_else(|e|
//!   e.into_inner())`. Nothing here installs a panic hook: the default one reports a
//!   panic on stderr, which is the runtime's, not this library's, output. (A build with
//!   `panic = "abort"` aborts all the same; the workspace does not build so.)
//! - **Pointers.** What turns a C pointer into a Rust value is here, each `unsafe fn`
//!   stating the C contract it relies on: `write`, `write_opt` and
//!   `write_unaligned` for out-pointers, `read` and `in_out` for in-structures,
//!   `bytes` and `out_array` for the program's buffers and arrays, `write_prefix`
//!   for the extensible structures, `WrList` for the posted lists, `ProgramMemory`
//!   for the memory `ibv_reg_mr` registers, and `zeroed` for the C structures whose
//!   all-zeros value is valid. NULL where C must pass an object is EINVAL. `exports.rs`
//!   calls these with its verb's contract as the `SAFETY` reason; the rest of the crate
//!   is safe code (`unsafe_code` is denied there).
//! - **Objects.** The C objects handed to the program are boxes known to their context's
//!   registry by address; they are reached only through the registry-checked helpers
//!   (`qp_object`, `cq_object`, `channel_object`, `mw_object`: the object only
//!   when its address is a key of the registry, borrowed with the locked state) and freed
//!   only as they leave it (`take_qp`, `take_cq`, `take_channel`, `take_srq`,
//!   `take_pd`, `take_mr`, `take_ah`, `take_mw`). A context's `verbs_context` is
//!   a `CBox` its registry entry owns. The engine's eventfd and poll calls are here too
//!   (`eventfd`, `eventfd_read`, `eventfd_write`, `poll`).
//! - **The test hook.** In a debug build only (`cfg(debug_assertions)`, so never in the
//!   release library a program is deployed with), `UROCE_TEST_PANIC=<entry point>` makes
//!   the first call of that entry point in the process panic inside its entry, so a test
//!   shows a C program getting the error and going on (`tests/panic.rs`). It is an
//!   environment variable with a name nobody sets by chance rather than an exported
//!   symbol because the exported symbol set is libibverbs' own, and rather than a cargo
//!   feature because the integration tests load the library `cargo test` builds with the
//!   crate's default features.

use std::ffi::c_int;

use libc::{EINVAL, EIO};

#[path = "catch.rs"]
mod catch;
pub use catch::TEST_PANIC_ENV;
pub(crate) use catch::{call, set_errno};

/// Threads started with every signal blocked (`quiet::spawn`).
#[path = "quiet.rs"]
pub(crate) mod quiet;

/// A verb that returns a pointer, NULL with errno on failure: NULL with errno EIO on a
/// panic.
pub(crate) fn ptr<T>(name: &'static str, body: impl FnOnce() -> *mut T) -> *mut T {
    call(name, || null_with(EIO), body)
}

/// A verb that returns 0 or an errno value: EIO on a panic.
pub(crate) fn errno(name: &'static str, body: impl FnOnce() -> c_int) -> c_int {
    call(name, || EIO, body)
}

/// A verb that returns 0 (or a count) or -1 with errno: -1 with errno EIO on a panic.
pub(crate) fn minus1(name: &'static str, body: impl FnOnce() -> c_int) -> c_int {
    call(
        name,
        || {
            set_errno(EIO);
            -1
        },
        body,
    )
}

/// uroce's private calls, which return a negated errno: -EIO on a panic.
pub(crate) fn neg_errno(name: &'static str, body: impl FnOnce() -> c_int) -> c_int {
    call(name, || -EIO, body)
}

/// A verb with nothing to return: errno EIO on a panic, for what it is worth.
pub(crate) fn void(name: &'static str, body: impl FnOnce()) {
    call(name, || set_errno(EIO), body)
}

/// NULL with errno `errno`.
pub(crate) fn null_with<T>(errno: c_int) -> *mut T {
    set_errno(errno);
    std::ptr::null_mut()
}

/// Writes `value` to the caller's out-pointer `p`; EINVAL for NULL.
///
/// # Safety
/// `p` is NULL or valid for a write of a `T` (the verb's C contract).
pub(crate) unsafe fn write<T>(p: *mut T, value: T) -> Result<(), c_int> {
    if p.is_null() {
        return Err(EINVAL);
    }
    // SAFETY: not NULL, so writable as the caller promises.
    unsafe { p.write(value) };
    Ok(())
}

/// Writes `value` to the caller's optional out-pointer `p` (nothing for NULL).
///
/// # Safety
/// As [`write`].
pub(crate) unsafe fn write_opt<T>(p: *mut T, value: T) {
    // SAFETY: as this function's contract; NULL is refused, not written.
    let _ = unsafe { write(p, value) };
}

/// A copy of the caller's structure at `p`; EINVAL for NULL.
///
/// # Safety
/// `p` is NULL or valid for a read of a `T` (the verb's C contract).
pub(crate) unsafe fn read<T: Copy>(p: *const T) -> Result<T, c_int> {
    if p.is_null() {
        return Err(EINVAL);
    }
    // SAFETY: not NULL, so readable as the caller promises.
    Ok(unsafe { p.read() })
}

/// Writes the first `len` bytes of `value` to `dst` (an extensible structure the caller
/// says is `len` bytes long); EINVAL for NULL.
///
/// # Safety
/// `dst` is NULL or valid for writes of `len` bytes.
pub(crate) unsafe fn write_prefix<T: Copy>(
    dst: *mut std::ffi::c_void,
    value: &T,
    len: usize,
) -> Result<(), c_int> {
    if dst.is_null() {
        return Err(EINVAL);
    }
    let n = len.min(std::mem::size_of::<T>());
    // SAFETY: `value` has size_of::<T>() ≥ n readable bytes; the caller promises `dst`
    // has `len` ≥ n writable bytes; they cannot overlap (`value` is the caller's local).
    unsafe {
        std::ptr::write_bytes(dst.cast::<u8>(), 0, len);
        std::ptr::copy_nonoverlapping((value as *const T).cast::<u8>(), dst.cast::<u8>(), n);
    }
    Ok(())
}

/// A C structure whose all-zeros value is valid: integers, raw pointers, `Option`s of
/// function pointers, and glibc's `pthread_mutex_t` / `pthread_cond_t`, whose all-zeros
/// values are their static initialisers.
///
/// # Safety
/// Implement only for types that are valid when all their bytes are zero.
pub(crate) unsafe trait Zeroable: Sized {}

/// The all-zeros `T`.
pub(crate) fn zeroed<T: Zeroable>() -> T {
    // SAFETY: `Zeroable` says all zeros is a valid T.
    unsafe { std::mem::zeroed() }
}

// SAFETY: each is a `#[repr(C)]` structure of integers, raw pointers, byte arrays and
// pthread mutexes / conditions (all zeros is PTHREAD_*_INITIALIZER in glibc).
unsafe impl Zeroable for crate::abi::ibv_cq {}
// SAFETY: as above.
unsafe impl Zeroable for crate::abi::ibv_qp {}
// SAFETY: as above.
unsafe impl Zeroable for crate::abi::ibv_srq {}
// SAFETY: as above (integers and byte arrays).
unsafe impl Zeroable for crate::abi::ibv_device_attr_ex {}
// SAFETY: integers, NULL `Option`s of function pointers and byte arrays.
unsafe impl Zeroable for crate::abi::ibv_device {}
// SAFETY: as `ibv_qp`, with `Option`s of function pointers (NULL) and integers.
unsafe impl Zeroable for crate::abi::ibv_qp_ex {}
// SAFETY: as `ibv_cq`, with `Option`s of function pointers (NULL) and integers.
unsafe impl Zeroable for crate::abi::ibv_cq_ex {}
// SAFETY: integers and raw pointers.
unsafe impl Zeroable for crate::abi::ibv_cq_init_attr_ex {}
// SAFETY: integers and raw pointers.
unsafe impl Zeroable for crate::abi::ibv_qp_init_attr_ex {}
// SAFETY: integers (the union of imm_data / invalidated_rkey is one u32 here).
unsafe impl Zeroable for crate::abi::ibv_wc {}
// SAFETY: glibc's PTHREAD_MUTEX_INITIALIZER is all zeros.
unsafe impl Zeroable for libc::pthread_mutex_t {}

/// Frees an object handed to the program as `Box::into_raw(Box::new(value))`.
///
/// # Safety
/// `p` came from `Box::<T>::into_raw`, and is freed once: the caller has just
/// taken it out of the registry that knew it, under the lock that guards that registry.
unsafe fn free_c<T>(p: *mut T) {
    // SAFETY: as this function's contract.
    drop(unsafe { Box::from_raw(p) });
}

/// The object at `p`, one of this library's own (a `Box` handed out), to change a field
/// the program reads (`cq->comp_events_completed`, `qp->state`, `mw->rkey`).
///
/// # Safety
/// `p` came from `Box::<T>::into_raw` and is still registered, and the caller holds the lock of
/// the registry that knows it, so no other call of this library reaches it meanwhile.
unsafe fn object<'a, T>(p: *mut T) -> &'a mut T {
    // SAFETY: as this function's contract.
    unsafe { &mut *p }
}

/// A C object this library allocated and hands to the program by address (a context's
/// `verbs_context`): owned as a `Box` is, freed when dropped. Rust makes no reference to
/// it after `new`: the program reads it through its pointer.
pub(crate) struct CBox<T>(std::ptr::NonNull<T>);

impl<T> CBox<T> {
    pub(crate) fn new(v: T) -> Self {
        Self(std::ptr::NonNull::from(Box::leak(Box::new(v))))
    }

    /// The address the program gets (the object's, or a member's within it).
    pub(crate) fn as_ptr(&self) -> *mut T {
        self.0.as_ptr()
    }
}

impl<T> Drop for CBox<T> {
    fn drop(&mut self) {
        // SAFETY: the pointer came from `Box::leak` in `new` and is freed once, here.
        drop(unsafe { Box::from_raw(self.0.as_ptr()) });
    }
}

// SAFETY: a `CBox` owns its object as a `Box` does, and Rust only frees it; a
// `verbs_context`'s raw pointers (its device, `priv_`) are addresses for the program,
// never dereferenced here, and it has no drop glue of its own.
unsafe impl Send for CBox<crate::abi::verbs_context> {}

// SAFETY: as for `Send`: Rust code never reads or writes through a shared `CBox`
// (it only hands out the address, `as_ptr`), so sharing one between threads shares
// nothing but that address.
unsafe impl Sync for CBox<crate::abi::verbs_context> {}

/// A NULL-terminated `calloc`ed array of `items` (freed by the program with the call
/// that gives it back, which calls `libc::free`); NULL when the allocation fails.
pub(crate) fn calloc_list<T>(items: &[*mut T]) -> *mut *mut T {
    // SAFETY: calloc of n+1 pointers; checked for NULL. The last stays NULL, the list's
    // end.
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

/// Frees a list from [`calloc_list`] (NULL: nothing).
///
/// # Safety
/// `list` is NULL or came from [`calloc_list`] and is freed once.
pub(crate) unsafe fn free_list<T>(list: *mut *mut T) {
    // SAFETY: the caller's contract: calloc's memory, freed once.
    unsafe { libc::free(list.cast()) };
}

// ---------------------------------------------------------------------------------
// The engine's system calls on its descriptors, and its raw pointers.

// SAFETY: an event's pointer is only an address handed back to the program (which owns
// the object); this library never dereferences it, so it may move between threads.
unsafe impl Send for crate::engine::AsyncEntry {}

/// A new eventfd (close-on-exec, with `flags`).
pub(crate) fn eventfd(flags: c_int) -> std::io::Result<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd;
    // SAFETY: eventfd takes no pointers; a negative return is an error, checked.
    let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | flags) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `fd` was just opened and nothing else owns it.
    Ok(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) })
}

/// Adds `n` to an eventfd's counter: Ok, or the errno.
pub(crate) fn eventfd_write(fd: std::os::fd::RawFd, n: u64) -> Result<(), c_int> {
    // SAFETY: writes 8 bytes from a live u64; `fd` is only a number to the kernel.
    let r = unsafe { libc::write(fd, (&n as *const u64).cast(), 8) };
    if r == 8 {
        Ok(())
    } else {
        Err(last_errno())
    }
}

/// One read of an eventfd (its count, or one for a semaphore): the value, or the errno
/// (EAGAIN when non-blocking and nothing is there, EINTR when a signal came).
pub(crate) fn eventfd_read(fd: std::os::fd::RawFd) -> Result<u64, c_int> {
    let mut n: u64 = 0;
    // SAFETY: reads 8 bytes into a live u64; `fd` is only a number to the kernel.
    let r = unsafe { libc::read(fd, (&mut n as *mut u64).cast(), 8) };
    if r == 8 {
        Ok(n)
    } else {
        Err(last_errno())
    }
}

/// The `pollfd`s a progress thread sleeps on: its wake-up eventfd `wake` first, then its
/// datapath's descriptors `fds`, each for reading.
pub(crate) fn pollfds(wake: std::os::fd::RawFd, fds: Vec<std::os::fd::RawFd>) -> Vec<libc::pollfd> {
    std::iter::once(wake)
        .chain(fds)
        .map(|fd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        })
        .collect()
}

/// Sets the calling thread's timer slack (`PR_SET_TIMERSLACK`) to `ns` nanoseconds: how
/// much later than asked the kernel may end its timed sleeps. Best effort.
pub(crate) fn set_timer_slack(ns: u64) {
    // SAFETY: PR_SET_TIMERSLACK takes a number and touches no memory of ours.
    let _ = unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, ns as libc::c_ulong, 0, 0, 0) };
}

/// The calling thread's errno (EIO if it has none).
fn last_errno() -> c_int {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(EIO)
}

// ---------------------------------------------------------------------------------
// Queue pairs: the QP objects of a context's registry, and the work request lists the
// program posts.

/// The QP object `qp` if it is registered in `inner` (a key of `inner.qps`), to read and
/// change the fields the program reads (`qp->state`); the reference borrows `inner`, so
/// no other call of this library reaches the object meanwhile.
pub(crate) fn qp_object(
    inner: &mut crate::engine::Inner,
    qp: *mut crate::abi::ibv_qp,
) -> Option<&mut crate::abi::ibv_qp> {
    if !inner.qps.contains_key(&(qp as usize)) {
        return None;
    }
    // SAFETY: a key of `qps` is a live Box from `ibv_create_qp`, freed only as it leaves
    // the registry (`take_qp`); `inner` is borrowed mutably for the reference's life.
    Some(unsafe { object(qp) })
}

/// Takes QP `qp` out of `inner`'s registry and frees its C object: its entry, or None
/// when it is not registered.
pub(crate) fn take_qp(
    inner: &mut crate::engine::Inner,
    qp: *mut crate::abi::ibv_qp,
) -> Option<crate::engine::QpEntry> {
    let e = inner.qps.remove(&(qp as usize))?;
    if let Some(mut r) = inner.routes_mut() {
        r.qps.remove(&(qp as usize));
    }
    // SAFETY: a key of `qps` is a live Box of a `QpObject` from `ibv_create_qp` (the
    // `ibv_qp` its first member); it has just left the registry, under the context's
    // lock, so it is freed once.
    unsafe { free_c(qp.cast::<crate::qp_ex::QpObject>()) };
    Some(e)
}

/// The memory window object `mw` if it is registered in `inner` (a key of `inner.mws`),
/// as [`qp_object`].
pub(crate) fn mw_object(
    inner: &mut crate::engine::Inner,
    mw: *mut crate::abi::ibv_mw,
) -> Option<&mut crate::abi::ibv_mw> {
    if !inner.mws.contains_key(&(mw as usize)) {
        return None;
    }
    // SAFETY: a key of `mws` is a live Box from `alloc_mw`, freed only as it leaves the
    // registry (`take_mw`); `inner` is borrowed mutably for the reference's life.
    Some(unsafe { object(mw) })
}

/// uroce's side of QP `qp` if it is registered in `inner` (`ibv_qp_to_qp_ex`), as
/// [`qp_object`].
pub(crate) fn qp_extra_of(
    inner: &mut crate::engine::Inner,
    qp: *mut crate::abi::ibv_qp,
) -> Option<&crate::qp_ex::QpExtra> {
    if !inner.qps.contains_key(&(qp as usize)) {
        return None;
    }
    // SAFETY: a key of `qps` is a live Box of a `QpObject` (`create_qp_with`), freed only
    // as it leaves the registry; `inner` is borrowed for the reference's life. The
    // reference covers the `extra` member only, which C never touches.
    Some(unsafe { &(*qp.cast::<crate::qp_ex::QpObject>()).extra })
}

/// uroce's side of the `ibv_qp_ex` a work request builder was called on, with the
/// program's `wr_id` and `wr_flags` as they are now; None for NULL.
///
/// # Safety
/// `qp` is NULL or the `ibv_qp_ex` of a QP of this library (every QP is a
/// `QpObject`) that stays alive for `'a`, as verbs.h has the `ibv_wr_*` calls take the
/// `ibv_qp_ex` that `ibv_qp_to_qp_ex` gave; the program does not write `wr_id` /
/// `wr_flags` during the call.
pub(crate) unsafe fn qp_extra<'a>(
    qp: *mut crate::abi::ibv_qp_ex,
) -> Option<(&'a crate::qp_ex::QpExtra, u64, std::ffi::c_uint)> {
    if qp.is_null() {
        return None;
    }
    let obj = qp.cast::<crate::qp_ex::QpObject>();
    // SAFETY: the caller's contract: a live QpObject. The shared reference covers
    // `extra` only (which C never touches); `wr_id` and `wr_flags` are copied out.
    unsafe {
        Some((
            &*std::ptr::addr_of!((*obj).extra),
            std::ptr::addr_of!((*qp).wr_id).read(),
            std::ptr::addr_of!((*qp).wr_flags).read(),
        ))
    }
}

/// uroce's side of the `ibv_cq_ex` a polling function was called on; None for NULL.
///
/// # Safety
/// `cq` is NULL or the `ibv_cq_ex` of a CQ of this library (every CQ is a `CqObject`)
/// that stays alive for `'a`, as verbs.h has `ibv_start_poll` and the others take the
/// `ibv_cq_ex` of a live CQ.
pub(crate) unsafe fn cq_extra<'a>(
    cq: *mut crate::abi::ibv_cq_ex,
) -> Option<&'a crate::cq_ex::CqExtra> {
    if cq.is_null() {
        return None;
    }
    let obj = cq.cast::<crate::cq_ex::CqObject>();
    // SAFETY: the caller's contract; the reference covers `extra` only, which C never
    // touches.
    Some(unsafe { &*std::ptr::addr_of!((*obj).extra) })
}

/// Writes the current completion's `status` and `wr_id` into the program's `ibv_cq_ex`.
///
/// # Safety
/// As [`cq_extra`], `cq` not NULL; the program reads those fields only after the call
/// (the polling pass is its thread's).
pub(crate) unsafe fn set_cq_ex_current(cq: *mut crate::abi::ibv_cq_ex, status: c_int, wr_id: u64) {
    // SAFETY: the caller's contract: the fields of a live ibv_cq_ex, written through
    // the pointer without making a reference.
    unsafe {
        std::ptr::addr_of_mut!((*cq).status).write(status);
        std::ptr::addr_of_mut!((*cq).wr_id).write(wr_id);
    }
}

/// Takes window `mw` out of `inner`'s registry and frees its C object, as [`take_qp`].
pub(crate) fn take_mw(
    inner: &mut crate::engine::Inner,
    mw: *mut crate::abi::ibv_mw,
) -> Option<(uroce::verbs::Mw, usize)> {
    let e = inner.mws.remove(&(mw as usize))?;
    // SAFETY: a key of `mws` is a live Box from `alloc_mw`; it has just left the
    // registry, under the context's lock, so it is freed once.
    unsafe { free_c(mw) };
    Some(e)
}

// ---------------------------------------------------------------------------------
// Protection domains and memory regions.

/// Takes PD `pd` out of `inner`'s registry and frees its C object, as [`take_qp`].
pub(crate) fn take_pd(
    inner: &mut crate::engine::Inner,
    pd: *mut crate::abi::ibv_pd,
) -> Option<uroce::verbs::PdId> {
    let e = inner.pds.remove(&(pd as usize))?;
    // SAFETY: a key of `pds` is a live Box from `ibv_alloc_pd`; it has just left the
    // registry, under the context's lock, so it is freed once.
    unsafe { free_c(pd) };
    Some(e)
}

/// Takes region `mr` out of `inner`'s registry and frees its C object, as [`take_qp`].
pub(crate) fn take_mr(
    inner: &mut crate::engine::Inner,
    mr: *mut crate::abi::ibv_mr,
) -> Option<uroce::verbs::Mr> {
    let e = inner.mrs.remove(&(mr as usize))?;
    // SAFETY: a key of `mrs` is a live Box from `ibv_reg_mr`; it has just left the
    // registry, under the context's lock, so it is freed once.
    unsafe { free_c(mr) };
    Some(e)
}

/// The memory a program hands to `ibv_reg_mr` (and `ibv_reg_mr_iova`,
/// `ibv_reg_mr_iova2`), with that verb's promise about it; registered at most once.
pub(crate) struct ProgramMemory {
    addr: *mut std::ffi::c_void,
    len: usize,
}

impl ProgramMemory {
    /// # Safety
    /// `ibv_reg_mr`'s contract: unless the registration fails, the `len` bytes at `addr`
    /// are the program's own memory and stay valid for reads and writes until
    /// `ibv_dereg_mr` of the region returned succeeds.
    pub(crate) unsafe fn new(addr: *mut std::ffi::c_void, len: usize) -> Self {
        Self { addr, len }
    }

    /// Its address.
    pub(crate) fn addr(&self) -> *mut std::ffi::c_void {
        self.addr
    }

    /// Its length in bytes.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Registers the memory in place as a region of `pd` in `uroce` with `rights`.
    pub(crate) fn register(
        self,
        uroce: &mut uroce::verbs::Context,
        pd: uroce::verbs::PdId,
        rights: uroce::verbs::Access,
    ) -> Result<uroce::verbs::Mr, uroce::verbs::VerbsError> {
        // SAFETY: `new`'s contract (ibv_reg_mr's) gives reg_mr_raw's first condition: the
        // caller's `len` bytes at `addr` stay valid for reads and writes until
        // ibv_dereg_mr succeeds. Its second, not the context's own memory, holds as the
        // bytes are the program's own: the context's own regions (`Context::reg_mr`:
        // the inline staging and GSI buffers) are allocations of this library. The stack
        // reaches the bytes only during calls into this context (under its lock, on the
        // program's threads or the progress thread), through raw copies and 8-byte
        // atomics, so the program may touch them meanwhile as ibverbs allows with a
        // NIC's DMA: reading a buffer while a peer's WRITE lands in it (perftest's
        // `ib_write_lat` polls its receive buffer), or filling one part of a region
        // while a receive lands in another; what it reads there is unsettled, as with a
        // NIC (see the README's limits).
        unsafe { uroce.reg_mr_raw(pd, self.addr.cast(), self.len, rights) }
    }
}

/// Registers region `mr` of the device's own context in `shard`, the context of one of
/// its engine shards, under the same keys (`crate::shard`).
pub(crate) fn mirror_region(
    shard: &mut uroce::verbs::Context,
    mr: &uroce::verbs::Mr,
) -> Result<(), uroce::verbs::VerbsError> {
    // SAFETY: `mr` is registered in the device's own context, either in place (the
    // program's memory, `ProgramMemory::register`: valid until ibv_dereg_mr succeeds,
    // and `resources::deregister` deregisters the mirrors with it) or as the context's
    // own buffer (the inline staging region, never deregistered: its bytes live as long
    // as the device's context, and the shards' contexts, dropped with it, reach them
    // only while the device is open). Either way the bytes stay valid for reads and
    // writes as long as the mirror can reach them, `mirror_mr_raw`'s contract; and the
    // shard reaches them as the device's context does, during calls under its lock,
    // through raw copies. Of the staging region no context makes a Rust reference once
    // shards exist (each engine writes its own slot with `Context::mr_write`,
    // `post::fill_slot`), so it is to the shards what the program's memory is.
    unsafe { shard.mirror_mr_raw(mr) }
}

/// Takes address handle `ah` out of `inner`'s registry and frees its C object, as
/// [`take_qp`].
pub(crate) fn take_ah(
    inner: &mut crate::engine::Inner,
    ah: *mut crate::abi::ibv_ah,
) -> Option<crate::ah::AhEntry> {
    let e = inner.ahs.remove(&(ah as usize))?;
    if let Some(mut r) = inner.routes_mut() {
        r.ahs.remove(&(ah as usize));
    }
    // SAFETY: a key of `ahs` is a live Box from `ibv_create_ah`; it has just left the
    // registry, under the context's lock, so it is freed once.
    unsafe { free_c(ah) };
    Some(e)
}

// ---------------------------------------------------------------------------------
// Completion queues and completion channels.

/// The CQ object `cq` if it is registered in `inner` (a key of `inner.cqs`), as
/// [`qp_object`] (`cq->comp_events_completed`, `cq->channel`, `cq->cq_context`).
pub(crate) fn cq_object(
    inner: &mut crate::engine::Inner,
    cq: *mut crate::abi::ibv_cq,
) -> Option<&mut crate::abi::ibv_cq> {
    if !inner.cqs.contains_key(&(cq as usize)) {
        return None;
    }
    // SAFETY: a key of `cqs` is a live Box from `ibv_create_cq`, freed only as it leaves
    // the registry (`take_cq`); `inner` is borrowed mutably for the reference's life.
    Some(unsafe { object(cq) })
}

/// Takes CQ `cq` out of `inner`'s registry and frees its C object, as [`take_qp`].
pub(crate) fn take_cq(
    inner: &mut crate::engine::Inner,
    cq: *mut crate::abi::ibv_cq,
) -> Option<crate::engine::CqEntry> {
    let e = inner.cqs.remove(&(cq as usize))?;
    if let Some(mut r) = inner.routes_mut() {
        r.cqs.remove(&(cq as usize));
    }
    // SAFETY: a key of `cqs` is a live Box of a `CqObject` from `ibv_create_cq` (the
    // `ibv_cq` its first member); it has just left the registry, under the context's
    // lock, so it is freed once.
    unsafe { free_c(cq.cast::<crate::cq_ex::CqObject>()) };
    Some(e)
}

/// The completion channel object `ch` if it is registered in `inner` (a key of
/// `inner.channels`), as [`qp_object`] (`channel->fd`, `channel->refcnt`).
pub(crate) fn channel_object(
    inner: &mut crate::engine::Inner,
    ch: *mut crate::abi::ibv_comp_channel,
) -> Option<&mut crate::abi::ibv_comp_channel> {
    if !inner.channels.contains_key(&(ch as usize)) {
        return None;
    }
    // SAFETY: a key of `channels` is a live Box from `ibv_create_comp_channel`, freed
    // only as it leaves the registry (`take_channel`); `inner` is borrowed mutably for
    // the reference's life.
    Some(unsafe { object(ch) })
}

/// Takes channel `ch` out of `inner`'s registry and frees its C object, as [`take_qp`].
pub(crate) fn take_channel(
    inner: &mut crate::engine::Inner,
    ch: *mut crate::abi::ibv_comp_channel,
) -> Option<crate::engine::ChannelEntry> {
    let e = inner.channels.remove(&(ch as usize))?;
    // SAFETY: a key of `channels` is a live Box from `ibv_create_comp_channel`; it has
    // just left the registry, under the context's lock, so it is freed once.
    unsafe { free_c(ch) };
    Some(e)
}

/// Takes SRQ `srq` out of `inner`'s registry and frees its C object, as [`take_qp`].
pub(crate) fn take_srq(
    inner: &mut crate::engine::Inner,
    srq: *mut crate::abi::ibv_srq,
) -> Option<crate::engine::SrqEntry> {
    let e = inner.srqs.remove(&(srq as usize))?;
    // SAFETY: a key of `srqs` is a live Box from `ibv_create_srq`; it has just left the
    // registry, under the context's lock, so it is freed once.
    unsafe { free_c(srq) };
    Some(e)
}

/// The context CQ `cq` names (`cq->context`), as the inline `ibv_poll_cq` and
/// `ibv_req_notify_cq` of verbs.h read it; NULL for a NULL CQ.
///
/// # Safety
/// `cq` is NULL or readable.
pub(crate) unsafe fn cq_context(cq: *mut crate::abi::ibv_cq) -> *mut crate::abi::ibv_context {
    if cq.is_null() {
        return std::ptr::null_mut();
    }
    // SAFETY: the caller's contract.
    unsafe { (*cq).context }
}

/// The program's array of `n` `T`s at `p`, to fill (its entries may be uninitialised);
/// None for NULL with `n` > 0, empty for `n` 0.
///
/// # Safety
/// `p` is NULL or valid for writes of `n` `T`s that nothing else accesses during the
/// call.
pub(crate) unsafe fn out_array<'a, T>(
    p: *mut T,
    n: usize,
) -> Option<&'a mut [std::mem::MaybeUninit<T>]> {
    if n == 0 {
        return Some(&mut []);
    }
    if p.is_null() {
        return None;
    }
    // SAFETY: the caller's contract; MaybeUninit<T> has T's layout, and uninitialised
    // entries are valid MaybeUninit values.
    Some(unsafe { std::slice::from_raw_parts_mut(p.cast(), n) })
}

/// The context window `mw` names (`mw->context`), as [`qp_context`].
///
/// # Safety
/// `mw` is NULL or readable.
pub(crate) unsafe fn mw_context(mw: *mut crate::abi::ibv_mw) -> *mut crate::abi::ibv_context {
    if mw.is_null() {
        return std::ptr::null_mut();
    }
    // SAFETY: the caller's contract.
    unsafe { (*mw).context }
}

/// The context QP `qp` names (`qp->context`), as the inline posting verbs of verbs.h
/// read it; NULL for a NULL QP.
///
/// # Safety
/// `qp` is NULL or readable.
pub(crate) unsafe fn qp_context(qp: *mut crate::abi::ibv_qp) -> *mut crate::abi::ibv_context {
    if qp.is_null() {
        return std::ptr::null_mut();
    }
    // SAFETY: the caller's contract.
    unsafe { (*qp).context }
}

/// The context SRQ `srq` names, as [`qp_context`].
///
/// # Safety
/// `srq` is NULL or readable.
pub(crate) unsafe fn srq_context(srq: *mut crate::abi::ibv_srq) -> *mut crate::abi::ibv_context {
    if srq.is_null() {
        return std::ptr::null_mut();
    }
    // SAFETY: the caller's contract.
    unsafe { (*srq).context }
}

/// The program's structure at `p` to read and change for the call's duration, if `p` is
/// not NULL.
///
/// # Safety
/// `p` is NULL or points at a `T` that nothing else accesses during the call.
pub(crate) unsafe fn in_out<'a, T>(p: *mut T) -> Option<&'a mut T> {
    // SAFETY: the caller's contract.
    unsafe { p.as_mut() }
}

/// The program's `len` bytes at `p`, for the call's duration; None for NULL.
///
/// # Safety
/// `p` is NULL or valid for reads of `len` bytes that nothing writes during the call.
pub(crate) unsafe fn bytes<'a>(p: *const u8, len: usize) -> Option<&'a [u8]> {
    if p.is_null() {
        return None;
    }
    // SAFETY: the caller's contract.
    Some(unsafe { std::slice::from_raw_parts(p, len) })
}

/// Writes `value` to the caller's out-pointer `p`, which may be unaligned; EINVAL for
/// NULL.
///
/// # Safety
/// `p` is NULL or valid for a write of `size_of::<T>()` bytes.
pub(crate) unsafe fn write_unaligned<T>(p: *mut T, value: T) -> Result<(), c_int> {
    if p.is_null() {
        return Err(EINVAL);
    }
    // SAFETY: not NULL, so writable as the caller promises; no alignment assumed.
    unsafe { p.write_unaligned(value) };
    Ok(())
}

/// A work request of `ibv_post_send` / `ibv_post_recv` / `ibv_post_srq_recv`.
pub(crate) trait WorkRequest {
    fn next_wr(&self) -> *mut Self;
    fn sg(&self) -> (*const crate::abi::ibv_sge, c_int);
}

impl WorkRequest for crate::abi::ibv_send_wr {
    fn next_wr(&self) -> *mut Self {
        self.next
    }
    fn sg(&self) -> (*const crate::abi::ibv_sge, c_int) {
        (self.sg_list, self.num_sge)
    }
}

impl WorkRequest for crate::abi::ibv_recv_wr {
    fn next_wr(&self) -> *mut Self {
        self.next
    }
    fn sg(&self) -> (*const crate::abi::ibv_sge, c_int) {
        (self.sg_list, self.num_sge)
    }
}

/// The list of work requests a post hands over, and its `bad_wr` out-pointer.
pub(crate) struct WrList<W> {
    head: *mut W,
    bad: *mut *mut W,
}

// A list is two addresses: a copy hands over the same list (`post`: a post tries the
// shard path, then the device's lock).
impl<W> Clone for WrList<W> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<W> Copy for WrList<W> {}

impl<W: WorkRequest> WrList<W> {
    /// # Safety
    /// The posting verb's contract (verbs.h): `head` is NULL or a `next`-linked,
    /// NULL-terminated list of readable requests, each one's `sg_list` pointing at its
    /// `num_sge` readable SGEs and, for a send with IBV_SEND_INLINE, each SGE naming
    /// `length` readable bytes at `addr`, all for the call's duration; the union members
    /// a request's opcode (and QP type) names are filled; `bad` is NULL or writable.
    pub(crate) unsafe fn new(head: *mut W, bad: *mut *mut W) -> Self {
        Self { head, bad }
    }

    /// Refuses the whole list: `*bad` is its first request; EINVAL.
    pub(crate) fn refuse(self) -> c_int {
        self.set_bad(self.head);
        EINVAL
    }

    fn set_bad(&self, wr: *mut W) {
        if !self.bad.is_null() {
            // SAFETY: `bad` is writable (`new`'s contract).
            unsafe { *self.bad = wr };
        }
    }

    /// Calls `one` for each request in order; on the first failure sets `*bad` to it and
    /// returns its errno (0 when all were taken).
    pub(crate) fn each(self, mut one: impl FnMut(Wr<'_, W>) -> Result<(), c_int>) -> c_int {
        let mut wr = self.head;
        while !wr.is_null() {
            // SAFETY: a node of the list (`new`'s contract).
            let w = unsafe { &*wr };
            if let Err(e) = one(Wr(w)) {
                self.set_bad(wr);
                return e;
            }
            wr = w.next_wr();
        }
        0
    }
}

/// One request of a [`WrList`], with what its contract makes readable.
pub(crate) struct Wr<'a, W>(&'a W);

impl<W> std::ops::Deref for Wr<'_, W> {
    type Target = W;
    fn deref(&self) -> &W {
        self.0
    }
}

impl<W: WorkRequest> Wr<'_, W> {
    /// The request's SGEs, into `out`; EINVAL for a negative count or more than `out`
    /// holds.
    pub(crate) fn sges<'b>(
        &self,
        out: &'b mut [uroce::verbs::Sge; uroce::verbs::MAX_SGE as usize],
    ) -> Result<&'b [uroce::verbs::Sge], c_int> {
        let (list, n) = self.0.sg();
        let n = usize::try_from(n).map_err(|_| EINVAL)?;
        if n > out.len() || (n > 0 && list.is_null()) {
            return Err(EINVAL);
        }
        for (i, o) in out.iter_mut().take(n).enumerate() {
            // SAFETY: i < n entries (the list's contract).
            let s = unsafe { list.add(i).read() };
            *o = uroce::verbs::Sge {
                addr: s.addr,
                length: s.length,
                lkey: s.lkey,
            };
        }
        Ok(&out[..n])
    }
}

impl Wr<'_, crate::abi::ibv_send_wr> {
    /// `wr.ud`, for a SEND or SEND_WITH_IMM request posted to a UD QP (the caller's
    /// QP type: verbs.h has UD sends fill `wr.ud`); None for another opcode.
    pub(crate) fn ud(&self) -> Option<crate::abi::ibv_send_wr_ud> {
        if !matches!(
            self.0.opcode,
            crate::abi::IBV_WR_SEND | crate::abi::IBV_WR_SEND_WITH_IMM
        ) {
            return None;
        }
        // SAFETY: the member the opcode of a UD send names (the list's contract).
        Some(unsafe { self.0.wr.ud })
    }

    /// `wr.rdma`, for an RDMA WRITE (with immediate) or READ; None otherwise.
    pub(crate) fn rdma(&self) -> Option<crate::abi::ibv_send_wr_rdma> {
        if !matches!(
            self.0.opcode,
            crate::abi::IBV_WR_RDMA_WRITE
                | crate::abi::IBV_WR_RDMA_WRITE_WITH_IMM
                | crate::abi::IBV_WR_RDMA_READ
        ) {
            return None;
        }
        // SAFETY: the member the opcode names (the list's contract).
        Some(unsafe { self.0.wr.rdma })
    }

    /// `wr.atomic`, for an atomic; None otherwise.
    pub(crate) fn atomic(&self) -> Option<crate::abi::ibv_send_wr_atomic> {
        if !matches!(
            self.0.opcode,
            crate::abi::IBV_WR_ATOMIC_CMP_AND_SWP | crate::abi::IBV_WR_ATOMIC_FETCH_AND_ADD
        ) {
            return None;
        }
        // SAFETY: the member the opcode names (the list's contract).
        Some(unsafe { self.0.wr.atomic })
    }

    /// `bind_mw`, for IBV_WR_BIND_MW; None otherwise.
    pub(crate) fn bind_mw(&self) -> Option<crate::abi::ibv_send_wr_bind_mw> {
        if self.0.opcode != crate::abi::IBV_WR_BIND_MW {
            return None;
        }
        // SAFETY: the member the opcode names (the list's contract).
        Some(unsafe { self.0.ext.bind_mw })
    }

    /// Copies the bytes the request's SGEs name (IBV_SEND_INLINE: read at post time,
    /// registered or not) into `dst`: the count; EINVAL when the request is not inline
    /// or they do not fit.
    pub(crate) fn gather_inline(&self, dst: &mut [u8]) -> Result<usize, c_int> {
        if self.0.send_flags & crate::abi::IBV_SEND_INLINE == 0 {
            return Err(EINVAL);
        }
        let mut buf = [uroce::verbs::Sge::default(); uroce::verbs::MAX_SGE as usize];
        let list = self.sges(&mut buf)?;
        let total: u64 = list.iter().map(|s| u64::from(s.length)).sum();
        if total > dst.len() as u64 {
            return Err(EINVAL);
        }
        let mut at = 0;
        for s in list.iter().filter(|s| s.length > 0) {
            let n = s.length as usize;
            // SAFETY: an inline request's SGEs name readable bytes (the list's contract);
            // `dst` has room for all of them (checked above).
            unsafe {
                std::ptr::copy_nonoverlapping(s.addr as *const u8, dst[at..at + n].as_mut_ptr(), n)
            };
            at += n;
        }
        Ok(at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_is_the_verbs_failure() {
        assert!(ptr::<u8>("t", || panic!("boom")).is_null());
        // SAFETY: reading this thread's errno.
        assert_eq!(unsafe { *libc::__errno_location() }, EIO);
        assert_eq!(errno("t", || panic!("boom")), EIO);
        assert_eq!(minus1("t", || panic!("boom")), -1);
        assert_eq!(neg_errno("t", || panic!("boom")), -EIO);
        void("t", || panic!("boom"));
        assert_eq!(errno("t", || 7), 7);
    }

    #[test]
    fn null_pointers_are_einval() {
        // SAFETY: NULL is refused before any access.
        unsafe {
            assert_eq!(write(std::ptr::null_mut::<u32>(), 1), Err(EINVAL));
            assert_eq!(read(std::ptr::null::<u32>()), Err(EINVAL));
        }
        let mut x = 0u32;
        // SAFETY: a live local.
        unsafe {
            assert_eq!(write(&mut x, 5), Ok(()));
            assert_eq!(read(&x), Ok(5));
        }
    }
}
