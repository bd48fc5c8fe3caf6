//! Every symbol Debian 12's librdmacm exports, bound to its version node.
//!
//! All 68 are functions with a default version (`rdma_create_id@@RDMACM_1.0`): a
//! `#[no_mangle]` function of that name and a `.symver NAME, NAME@@NODE` directive
//! ([`default_version!`]); librdmacm has no older `@` versions. See
//! crates/uroce-verbs/drop_in_link.rs for why the versions live in the object and not only
//! in the version script.
//!
//! An entry point uroce does not implement yet is one line of an [`unsupported!`] list,
//! with its C signature as Rust types and what it answers, as `<rdma/rdma_cma.h>`,
//! `<rdma/rdma_verbs.h>` and `<rdma/rsocket.h>` document failure: `minus1` returns -1
//! with errno `ENOSYS` (most calls), `ptr` returns NULL with errno `ENOSYS`, `void`
//! returns (the destroy / free calls, which cannot fail), `port` returns port 0 (the
//! answer of rdma-core's `rdma_get_src_port` for an id without an IP address). To
//! implement one, write it elsewhere as `#[no_mangle] pub unsafe extern "C" fn` with
//! `default_version!(name, "RDMACM_1.x");` after it and delete its line here;
//! tests/exports.rs keeps the set of names and nodes whole.

use std::ffi::{c_char, c_int, c_long, c_void, CStr};

use libc::{fd_set, iovec, msghdr, nfds_t, off_t, pollfd, sockaddr, socklen_t, timeval, ENOSYS};

use crate::abi::*;
use crate::api;
use crate::ffi;
use crate::verbs_abi::{ibv_context, ibv_pd, ibv_qp_attr, ibv_qp_init_attr};

/// Binds the `#[no_mangle]` item `$name` to the default version `$name@@$node`.
macro_rules! default_version {
    ($name:ident, $node:literal) => {
        core::arch::global_asm!(concat!(
            ".symver ",
            stringify!($name),
            ", ",
            stringify!($name),
            "@@",
            $node
        ));
    };
}
#[allow(unused_imports)]
pub(crate) use default_version;

pub(crate) use crate::ffi::set_errno;

/// The return type of an unsupported entry point of kind `$kind`.
macro_rules! stub_ret {
    (minus1) => { c_int };
    (minus1_ssize) => { isize };
    (minus1_off) => { off_t };
    (minus1_size) => { usize };
    (ptr, $pointee:ty) => { *mut $pointee };
    (port) => { u16 };
    (void) => { () };
}

/// What an unsupported entry point of kind `$kind` answers, through the C boundary
/// ([`crate::ffi`]: a panic there answers EIO as the kind says a failure).
macro_rules! stub_body {
    ($name:expr, minus1) => {
        ffi::minus1($name, || {
            set_errno(ENOSYS);
            -1
        })
    };
    ($name:expr, minus1_ssize) => {
        ffi::minus1($name, || {
            set_errno(ENOSYS);
            -1
        })
    };
    ($name:expr, minus1_off) => {
        ffi::minus1($name, || {
            set_errno(ENOSYS);
            -1
        })
    };
    ($name:expr, minus1_size) => {
        ffi::call(
            $name,
            || {
                set_errno(libc::EIO);
                usize::MAX
            },
            || {
                set_errno(ENOSYS);
                usize::MAX
            },
        )
    };
    ($name:expr, ptr, $pointee:ty) => {
        ffi::ptr($name, || {
            set_errno(ENOSYS);
            std::ptr::null_mut()
        })
    };
    ($name:expr, port) => {
        ffi::call($name, || 0, || 0)
    };
    ($name:expr, void) => {
        ffi::void($name, || ())
    };
}

/// Exported, not implemented:
/// `fn name(arg: Type, ...) -> kind @@ "NODE";` or `-> ptr<Pointee> @@ "NODE";`.
/// The arguments are taken and ignored (nothing is dereferenced, so the functions are
/// safe to call with anything).
macro_rules! unsupported {
    ($(fn $name:ident($($arg:ident: $ty:ty),* $(,)?) -> $kind:ident $(<$pointee:ty>)? @@ $node:literal;)*) => { $(
        #[no_mangle]
        #[allow(unused_variables)]
        pub extern "C" fn $name($($arg: $ty),*) -> stub_ret!($kind $(, $pointee)?) {
            stub_body!(stringify!($name), $kind $(, $pointee)?)
        }
        default_version!($name, $node);
    )* };
}

// <rdma/rdma_cma.h>: event channels, ids, address and route resolution, connections.
unsupported! {
    fn rdma_create_qp_ex(
        id: *mut rdma_cm_id,
        qp_init_attr: *mut ibv_qp_init_attr_ex,
    ) -> minus1 @@ "RDMACM_1.0";
    fn rdma_reject_ece(
        id: *mut rdma_cm_id,
        private_data: *const c_void,
        private_data_len: u8,
    ) -> minus1 @@ "RDMACM_1.3";
    // `event` is an `enum ibv_event_type`.
    fn rdma_notify(id: *mut rdma_cm_id, event: c_int) -> minus1 @@ "RDMACM_1.0";
    fn rdma_join_multicast(
        id: *mut rdma_cm_id,
        addr: *mut sockaddr,
        context: *mut c_void,
    ) -> minus1 @@ "RDMACM_1.0";
    fn rdma_leave_multicast(id: *mut rdma_cm_id, addr: *mut sockaddr) -> minus1 @@ "RDMACM_1.0";
    fn rdma_join_multicast_ex(
        id: *mut rdma_cm_id,
        mc_join_attr: *mut rdma_cm_join_mc_attr_ex,
        context: *mut c_void,
    ) -> minus1 @@ "RDMACM_1.1";
}

/// `rdma_set_local_ece`: see `api::ece`.
///
/// # Safety
/// `id` is an id of this library or any pointer (refused); `ece` NULL (EINVAL) or
/// readable.
#[no_mangle]
pub unsafe extern "C" fn rdma_set_local_ece(id: *mut rdma_cm_id, ece: *mut ibv_ece) -> c_int {
    ffi::minus1("rdma_set_local_ece", move || {
        if ece.is_null() {
            return api::fail(libc::EINVAL);
        }
        api::ece(id)
    })
}
default_version!(rdma_set_local_ece, "RDMACM_1.3");

/// `rdma_get_remote_ece`: see `api::ece`.
///
/// # Safety
/// `id` is an id of this library or any pointer (refused); `ece` NULL (EINVAL) or
/// writable.
#[no_mangle]
pub unsafe extern "C" fn rdma_get_remote_ece(id: *mut rdma_cm_id, ece: *mut ibv_ece) -> c_int {
    ffi::minus1("rdma_get_remote_ece", move || {
        if ece.is_null() {
            return api::fail(libc::EINVAL);
        }
        let r = api::ece(id);
        if r == 0 {
            // SAFETY: the caller's pointer, not null.
            unsafe { ffi::write_out(ece, ibv_ece::default()) };
        }
        r
    })
}
default_version!(rdma_get_remote_ece, "RDMACM_1.3");

// <rdma/rdma_verbs.h>: shared receive queues on an id.
unsupported! {
    fn rdma_create_srq(
        id: *mut rdma_cm_id,
        pd: *mut ibv_pd,
        attr: *mut ibv_srq_init_attr,
    ) -> minus1 @@ "RDMACM_1.0";
    fn rdma_create_srq_ex(id: *mut rdma_cm_id, attr: *mut ibv_srq_init_attr_ex) -> minus1 @@ "RDMACM_1.0";
    fn rdma_destroy_srq(id: *mut rdma_cm_id) -> void @@ "RDMACM_1.0";
}

// <rdma/rsocket.h>: sockets over RDMA. Each answers as the socket call it mirrors fails:
// -1 (or (size_t)-1 for riowrite) with errno.
unsupported! {
    fn rsocket(domain: c_int, type_: c_int, protocol: c_int) -> minus1 @@ "RDMACM_1.0";
    fn rbind(socket: c_int, addr: *const sockaddr, addrlen: socklen_t) -> minus1 @@ "RDMACM_1.0";
    fn rlisten(socket: c_int, backlog: c_int) -> minus1 @@ "RDMACM_1.0";
    fn raccept(socket: c_int, addr: *mut sockaddr, addrlen: *mut socklen_t) -> minus1 @@ "RDMACM_1.0";
    fn rconnect(socket: c_int, addr: *const sockaddr, addrlen: socklen_t) -> minus1 @@ "RDMACM_1.0";
    fn rshutdown(socket: c_int, how: c_int) -> minus1 @@ "RDMACM_1.0";
    fn rclose(socket: c_int) -> minus1 @@ "RDMACM_1.0";
    fn rrecv(socket: c_int, buf: *mut c_void, len: usize, flags: c_int) -> minus1_ssize @@ "RDMACM_1.0";
    fn rrecvfrom(
        socket: c_int,
        buf: *mut c_void,
        len: usize,
        flags: c_int,
        src_addr: *mut sockaddr,
        addrlen: *mut socklen_t,
    ) -> minus1_ssize @@ "RDMACM_1.0";
    fn rrecvmsg(socket: c_int, msg: *mut msghdr, flags: c_int) -> minus1_ssize @@ "RDMACM_1.0";
    fn rsend(socket: c_int, buf: *const c_void, len: usize, flags: c_int) -> minus1_ssize @@ "RDMACM_1.0";
    fn rsendto(
        socket: c_int,
        buf: *const c_void,
        len: usize,
        flags: c_int,
        dest_addr: *const sockaddr,
        addrlen: socklen_t,
    ) -> minus1_ssize @@ "RDMACM_1.0";
    fn rsendmsg(socket: c_int, msg: *const msghdr, flags: c_int) -> minus1_ssize @@ "RDMACM_1.0";
    fn rread(socket: c_int, buf: *mut c_void, count: usize) -> minus1_ssize @@ "RDMACM_1.0";
    fn rreadv(socket: c_int, iov: *const iovec, iovcnt: c_int) -> minus1_ssize @@ "RDMACM_1.0";
    fn rwrite(socket: c_int, buf: *const c_void, count: usize) -> minus1_ssize @@ "RDMACM_1.0";
    fn rwritev(socket: c_int, iov: *const iovec, iovcnt: c_int) -> minus1_ssize @@ "RDMACM_1.0";
    fn rpoll(fds: *mut pollfd, nfds: nfds_t, timeout: c_int) -> minus1 @@ "RDMACM_1.0";
    fn rselect(
        nfds: c_int,
        readfds: *mut fd_set,
        writefds: *mut fd_set,
        exceptfds: *mut fd_set,
        timeout: *mut timeval,
    ) -> minus1 @@ "RDMACM_1.0";
    fn rgetpeername(socket: c_int, addr: *mut sockaddr, addrlen: *mut socklen_t) -> minus1 @@ "RDMACM_1.0";
    fn rgetsockname(socket: c_int, addr: *mut sockaddr, addrlen: *mut socklen_t) -> minus1 @@ "RDMACM_1.0";
    fn rsetsockopt(
        socket: c_int,
        level: c_int,
        optname: c_int,
        optval: *const c_void,
        optlen: socklen_t,
    ) -> minus1 @@ "RDMACM_1.0";
    fn rgetsockopt(
        socket: c_int,
        level: c_int,
        optname: c_int,
        optval: *mut c_void,
        optlen: *mut socklen_t,
    ) -> minus1 @@ "RDMACM_1.0";
    // C: `int rfcntl(int socket, int cmd, ... /* arg */)`. Stable Rust cannot define a
    // variadic function; under the x86-64 System V convention a caller of a variadic
    // function passes `arg` where a fixed third integer argument is, so one is taken.
    fn rfcntl(socket: c_int, cmd: c_int, arg: c_long) -> minus1 @@ "RDMACM_1.0";
    fn riomap(
        socket: c_int,
        buf: *mut c_void,
        len: usize,
        prot: c_int,
        flags: c_int,
        offset: off_t,
    ) -> minus1_off @@ "RDMACM_1.0";
    fn riounmap(socket: c_int, buf: *mut c_void, len: usize) -> minus1 @@ "RDMACM_1.0";
    fn riowrite(
        socket: c_int,
        buf: *const c_void,
        count: usize,
        offset: off_t,
        flags: c_int,
    ) -> minus1_size @@ "RDMACM_1.0";
}

// ---------------------------------------------------------------------------------------
// The implemented `<rdma/rdma_cma.h>` calls: each turns its C arguments into values
// through the audited helpers of `ffi.rs` (the only `unsafe` of these calls, each block
// citing the call's contract) and calls its safe body in `api.rs`. A pointer the library
// handed out (an id, a channel, an event) is only an address here: `api.rs` finds it in
// the state's maps, or refuses it with EINVAL, and never dereferences the program's copy.

/// 0 after writing `v` through `out`, or -1 with the errno.
///
/// # Safety
/// `out` is non-null and writable.
unsafe fn out_or_fail<T>(out: *mut T, r: Result<T, c_int>) -> c_int {
    match r {
        Ok(v) => {
            // SAFETY: the caller's contract.
            unsafe { ffi::write_out(out, v) };
            0
        }
        Err(e) => api::fail(e),
    }
}

/// `rdma_create_event_channel`: a channel whose `fd` is readable while events wait.
#[no_mangle]
pub extern "C" fn rdma_create_event_channel() -> *mut rdma_event_channel {
    ffi::ptr("rdma_create_event_channel", api::create_event_channel)
}
default_version!(rdma_create_event_channel, "RDMACM_1.0");

/// `rdma_destroy_event_channel`: the channel's events not taken yet are freed.
///
/// # Safety
/// `channel` is a channel of this library, not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn rdma_destroy_event_channel(channel: *mut rdma_event_channel) {
    ffi::void("rdma_destroy_event_channel", move || {
        api::destroy_event_channel(channel)
    })
}
default_version!(rdma_destroy_event_channel, "RDMACM_1.0");

/// `rdma_get_cm_event`.
///
/// # Safety
/// `event` points at a writable pointer.
#[no_mangle]
pub unsafe extern "C" fn rdma_get_cm_event(
    channel: *mut rdma_event_channel,
    event: *mut *mut rdma_cm_event,
) -> c_int {
    ffi::minus1("rdma_get_cm_event", move || {
        if event.is_null() {
            return api::fail(libc::EINVAL);
        }
        let r = api::get_event(channel).map(|e| e.ptr);
        // SAFETY: the caller's pointer, not null.
        unsafe { out_or_fail(event, r) }
    })
}
default_version!(rdma_get_cm_event, "RDMACM_1.0");

/// `rdma_ack_cm_event`: frees an event taken with `rdma_get_cm_event`.
///
/// # Safety
/// `event` is an event of this library or any pointer (refused).
#[no_mangle]
pub unsafe extern "C" fn rdma_ack_cm_event(event: *mut rdma_cm_event) -> c_int {
    ffi::minus1("rdma_ack_cm_event", move || api::ack_cm_event(event))
}
default_version!(rdma_ack_cm_event, "RDMACM_1.0");

/// `rdma_create_id`: RDMA_PS_TCP / RDMA_PS_IB ids carry RC, RDMA_PS_UDP / IPOIB UD.
///
/// # Safety
/// `id` points at a writable pointer; `channel` is null or a channel of this library.
#[no_mangle]
pub unsafe extern "C" fn rdma_create_id(
    channel: *mut rdma_event_channel,
    id: *mut *mut rdma_cm_id,
    context: *mut c_void,
    ps: rdma_port_space,
) -> c_int {
    ffi::minus1("rdma_create_id", move || {
        if id.is_null() {
            return api::fail(libc::EINVAL);
        }
        let r = api::create_id(channel, context, ps, None);
        // SAFETY: the caller's pointer, not null.
        unsafe { out_or_fail(id, r) }
    })
}
default_version!(rdma_create_id, "RDMACM_1.0");

/// `rdma_destroy_id`: events of the id not taken yet are dropped; one taken must have
/// been acknowledged (it is not touched here).
///
/// # Safety
/// `id` is an id of this library, not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn rdma_destroy_id(id: *mut rdma_cm_id) -> c_int {
    ffi::minus1("rdma_destroy_id", move || api::destroy_id(id))
}
default_version!(rdma_destroy_id, "RDMACM_1.0");

/// `rdma_bind_addr`: a source address (one of a uroce device's, or the wildcard) and
/// port (0: one is chosen).
///
/// # Safety
/// `addr` points at a sockaddr_in or sockaddr_in6.
#[no_mangle]
pub unsafe extern "C" fn rdma_bind_addr(id: *mut rdma_cm_id, addr: *mut sockaddr) -> c_int {
    ffi::minus1("rdma_bind_addr", move || {
        // SAFETY: the caller's contract.
        let a = unsafe { ffi::read_sockaddr(addr) };
        api::bind_addr(id, a)
    })
}
default_version!(rdma_bind_addr, "RDMACM_1.0");

/// `rdma_resolve_addr`: the source address from `src` or the host's routes, the device
/// that has it.
///
/// # Safety
/// `src` is null or a sockaddr; `dst` a sockaddr.
#[no_mangle]
pub unsafe extern "C" fn rdma_resolve_addr(
    id: *mut rdma_cm_id,
    src: *mut sockaddr,
    dst: *mut sockaddr,
    timeout_ms: c_int,
) -> c_int {
    ffi::minus1("rdma_resolve_addr", move || {
        // SAFETY: the caller's contract.
        let (src, dst) = unsafe { (ffi::read_sockaddr(src), ffi::read_sockaddr(dst)) };
        api::resolve_addr(id, src, dst, timeout_ms)
    })
}
default_version!(rdma_resolve_addr, "RDMACM_1.0");

/// `rdma_resolve_route`: over RoCE the path is made locally.
///
/// # Safety
/// `id` is an id of this library.
#[no_mangle]
pub unsafe extern "C" fn rdma_resolve_route(id: *mut rdma_cm_id, _timeout_ms: c_int) -> c_int {
    ffi::minus1("rdma_resolve_route", move || api::resolve_route(id))
}
default_version!(rdma_resolve_route, "RDMACM_1.0");

/// `rdma_listen`.
///
/// # Safety
/// `id` is an id of this library.
#[no_mangle]
pub unsafe extern "C" fn rdma_listen(id: *mut rdma_cm_id, backlog: c_int) -> c_int {
    ffi::minus1("rdma_listen", move || api::listen(id, backlog))
}
default_version!(rdma_listen, "RDMACM_1.0");

/// `rdma_connect`: a REQ (RC, UC) or a SIDR_REQ (UD) to the resolved peer.
///
/// # Safety
/// `conn_param` is null or a parameter block.
#[no_mangle]
pub unsafe extern "C" fn rdma_connect(
    id: *mut rdma_cm_id,
    conn_param: *mut rdma_conn_param,
) -> c_int {
    ffi::minus1("rdma_connect", move || {
        // SAFETY: the caller's contract.
        let (param, user) = unsafe { ffi::conn_param(conn_param) };
        api::connect(id, param, user)
    })
}
default_version!(rdma_connect, "RDMACM_1.0");

/// `rdma_accept`: answers the CONNECT_REQUEST of id `id` with a REP or a SIDR_REP.
///
/// # Safety
/// `conn_param` is null or a parameter block.
#[no_mangle]
pub unsafe extern "C" fn rdma_accept(
    id: *mut rdma_cm_id,
    conn_param: *mut rdma_conn_param,
) -> c_int {
    ffi::minus1("rdma_accept", move || {
        // SAFETY: the caller's contract.
        let (param, user) = unsafe { ffi::conn_param(conn_param) };
        api::accept(id, param, user)
    })
}
default_version!(rdma_accept, "RDMACM_1.0");

/// `rdma_reject`: a REJ or a SIDR_REP with status "rejected".
///
/// # Safety
/// `private_data` is null or `len` readable bytes.
#[no_mangle]
pub unsafe extern "C" fn rdma_reject(
    id: *mut rdma_cm_id,
    private_data: *const c_void,
    len: u8,
) -> c_int {
    ffi::minus1("rdma_reject", move || {
        // SAFETY: the caller's contract.
        let user = unsafe { ffi::bytes(private_data, usize::from(len)) };
        api::reject(id, user)
    })
}
default_version!(rdma_reject, "RDMACM_1.0");

/// `rdma_disconnect`.
///
/// # Safety
/// `id` is an id of this library.
#[no_mangle]
pub unsafe extern "C" fn rdma_disconnect(id: *mut rdma_cm_id) -> c_int {
    ffi::minus1("rdma_disconnect", move || api::disconnect(id))
}
default_version!(rdma_disconnect, "RDMACM_1.0");

/// `rdma_establish`.
///
/// # Safety
/// `id` is an id of this library.
#[no_mangle]
pub unsafe extern "C" fn rdma_establish(id: *mut rdma_cm_id) -> c_int {
    ffi::minus1("rdma_establish", move || api::establish(id))
}
default_version!(rdma_establish, "RDMACM_1.2");

/// `rdma_create_qp`.
///
/// # Safety
/// `pd` is null or a PD of the id's device; `attr` is null or QP init attributes, which
/// nothing else touches during the call.
#[no_mangle]
pub unsafe extern "C" fn rdma_create_qp(
    id: *mut rdma_cm_id,
    pd: *mut ibv_pd,
    attr: *mut ibv_qp_init_attr,
) -> c_int {
    ffi::minus1("rdma_create_qp", move || {
        // SAFETY: the caller's contract.
        let attr = unsafe { ffi::in_out(attr) };
        api::create_qp(id, pd, attr)
    })
}
default_version!(rdma_create_qp, "RDMACM_1.0");

/// `rdma_destroy_qp`.
///
/// # Safety
/// `id` is an id of this library.
#[no_mangle]
pub unsafe extern "C" fn rdma_destroy_qp(id: *mut rdma_cm_id) {
    ffi::void("rdma_destroy_qp", move || api::destroy_qp(id))
}
default_version!(rdma_destroy_qp, "RDMACM_1.0");

/// `rdma_init_qp_attr`.
///
/// # Safety
/// `qp_attr` and `qp_attr_mask` are null or writable.
#[no_mangle]
pub unsafe extern "C" fn rdma_init_qp_attr(
    id: *mut rdma_cm_id,
    qp_attr: *mut ibv_qp_attr,
    qp_attr_mask: *mut c_int,
) -> c_int {
    ffi::minus1("rdma_init_qp_attr", move || {
        // SAFETY: the caller's contract.
        let (attr, mask) = unsafe { (ffi::in_out(qp_attr), ffi::in_out(qp_attr_mask)) };
        let (Some(attr), Some(mask)) = (attr, mask) else {
            return api::fail(libc::EINVAL);
        };
        api::init_qp_attr(id, attr, mask)
    })
}
default_version!(rdma_init_qp_attr, "RDMACM_1.2");

/// `rdma_set_option`.
///
/// # Safety
/// `optval` points at `optlen` readable bytes.
#[no_mangle]
pub unsafe extern "C" fn rdma_set_option(
    id: *mut rdma_cm_id,
    level: c_int,
    optname: c_int,
    optval: *mut c_void,
    optlen: usize,
) -> c_int {
    ffi::minus1("rdma_set_option", move || {
        if optval.is_null() || optlen == 0 {
            return api::fail(libc::EINVAL);
        }
        // SAFETY: the caller's contract (at least one byte; four read at most).
        let val = unsafe { ffi::bytes(optval, optlen.min(4)) };
        api::set_option(id, level, optname, &val)
    })
}
default_version!(rdma_set_option, "RDMACM_1.0");

/// `rdma_get_devices`: the open contexts of every uroce device, NULL-terminated (free
/// with `rdma_free_devices`).
///
/// # Safety
/// `num_devices` is null or writable.
#[no_mangle]
pub unsafe extern "C" fn rdma_get_devices(num_devices: *mut c_int) -> *mut *mut ibv_context {
    ffi::ptr("rdma_get_devices", move || {
        let ctxs = match api::device_contexts() {
            Ok(v) => v,
            Err(e) => {
                set_errno(e);
                return std::ptr::null_mut();
            }
        };
        let list = ffi::calloc_list(&ctxs);
        if list.is_null() {
            set_errno(libc::ENOMEM);
            return list;
        }
        if !num_devices.is_null() {
            // SAFETY: the caller's pointer, not null.
            unsafe { ffi::write_out(num_devices, ctxs.len() as c_int) };
        }
        list
    })
}
default_version!(rdma_get_devices, "RDMACM_1.0");

/// `rdma_free_devices`.
///
/// # Safety
/// `list` came from `rdma_get_devices`.
#[no_mangle]
pub unsafe extern "C" fn rdma_free_devices(list: *mut *mut ibv_context) {
    ffi::void("rdma_free_devices", move || {
        // SAFETY: the caller's contract: calloc'ed by rdma_get_devices.
        unsafe { libc::free(list.cast()) };
    })
}
default_version!(rdma_free_devices, "RDMACM_1.0");

/// `rdma_get_src_port`.
///
/// # Safety
/// `id` is an id of this library.
#[no_mangle]
pub unsafe extern "C" fn rdma_get_src_port(id: *mut rdma_cm_id) -> u16 {
    ffi::call("rdma_get_src_port", || 0, move || api::port_of_id(id, true))
}
default_version!(rdma_get_src_port, "RDMACM_1.0");

/// `rdma_get_dst_port`.
///
/// # Safety
/// `id` is an id of this library.
#[no_mangle]
pub unsafe extern "C" fn rdma_get_dst_port(id: *mut rdma_cm_id) -> u16 {
    ffi::call(
        "rdma_get_dst_port",
        || 0,
        move || api::port_of_id(id, false),
    )
}
default_version!(rdma_get_dst_port, "RDMACM_1.0");

/// `rdma_create_ep`.
///
/// # Safety
/// `id` is writable; `res` an `rdma_addrinfo` whose addresses are null or sockaddrs;
/// `pd` null or a PD; `qp_init_attr` null or QP init attributes.
#[no_mangle]
pub unsafe extern "C" fn rdma_create_ep(
    id: *mut *mut rdma_cm_id,
    res: *mut rdma_addrinfo,
    pd: *mut ibv_pd,
    qp_init_attr: *mut ibv_qp_init_attr,
) -> c_int {
    ffi::minus1("rdma_create_ep", move || {
        // SAFETY: the caller's contract.
        let Some(r) = (unsafe { ffi::in_ref(res) }) else {
            return api::fail(libc::EINVAL);
        };
        if id.is_null() {
            return api::fail(libc::EINVAL);
        }
        let info = api::EpInfo {
            flags: r.ai_flags,
            qp_type: r.ai_qp_type,
            port_space: r.ai_port_space,
            // SAFETY: as above.
            src: unsafe { ffi::read_sockaddr(r.ai_src_addr) },
            // SAFETY: as above.
            dst: unsafe { ffi::read_sockaddr(r.ai_dst_addr) },
        };
        // SAFETY: as above.
        let attr = unsafe { ffi::in_out(qp_init_attr) };
        let r = api::create_ep(info, pd, attr);
        // SAFETY: the caller's pointer, not null.
        unsafe { out_or_fail(id, r) }
    })
}
default_version!(rdma_create_ep, "RDMACM_1.0");

/// `rdma_destroy_ep`.
///
/// # Safety
/// `id` is an id of this library, not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn rdma_destroy_ep(id: *mut rdma_cm_id) {
    ffi::void("rdma_destroy_ep", move || api::destroy_ep(id))
}
default_version!(rdma_destroy_ep, "RDMACM_1.0");

/// `rdma_get_request`.
///
/// # Safety
/// `listen` is an id of this library; `id` is writable.
#[no_mangle]
pub unsafe extern "C" fn rdma_get_request(
    listen: *mut rdma_cm_id,
    id: *mut *mut rdma_cm_id,
) -> c_int {
    ffi::minus1("rdma_get_request", move || {
        if id.is_null() {
            return api::fail(libc::EINVAL);
        }
        let r = api::get_request(listen);
        // SAFETY: the caller's pointer, not null.
        unsafe { out_or_fail(id, r) }
    })
}
default_version!(rdma_get_request, "RDMACM_1.0");

/// `rdma_migrate_id`.
///
/// # Safety
/// `id` is an id of this library; `channel` null or a channel of this library.
#[no_mangle]
pub unsafe extern "C" fn rdma_migrate_id(
    id: *mut rdma_cm_id,
    channel: *mut rdma_event_channel,
) -> c_int {
    ffi::minus1("rdma_migrate_id", move || api::migrate_id(id, channel))
}
default_version!(rdma_migrate_id, "RDMACM_1.0");

/// The name of event `event`, as rdma-core's `rdma_event_str` (librdmacm/cma.c) gives it:
/// the enumerator's own name, `"UNKNOWN EVENT"` for a number that is none.
pub fn event_name(event: rdma_cm_event_type) -> &'static CStr {
    match event {
        RDMA_CM_EVENT_ADDR_RESOLVED => c"RDMA_CM_EVENT_ADDR_RESOLVED",
        RDMA_CM_EVENT_ADDR_ERROR => c"RDMA_CM_EVENT_ADDR_ERROR",
        RDMA_CM_EVENT_ROUTE_RESOLVED => c"RDMA_CM_EVENT_ROUTE_RESOLVED",
        RDMA_CM_EVENT_ROUTE_ERROR => c"RDMA_CM_EVENT_ROUTE_ERROR",
        RDMA_CM_EVENT_CONNECT_REQUEST => c"RDMA_CM_EVENT_CONNECT_REQUEST",
        RDMA_CM_EVENT_CONNECT_RESPONSE => c"RDMA_CM_EVENT_CONNECT_RESPONSE",
        RDMA_CM_EVENT_CONNECT_ERROR => c"RDMA_CM_EVENT_CONNECT_ERROR",
        RDMA_CM_EVENT_UNREACHABLE => c"RDMA_CM_EVENT_UNREACHABLE",
        RDMA_CM_EVENT_REJECTED => c"RDMA_CM_EVENT_REJECTED",
        RDMA_CM_EVENT_ESTABLISHED => c"RDMA_CM_EVENT_ESTABLISHED",
        RDMA_CM_EVENT_DISCONNECTED => c"RDMA_CM_EVENT_DISCONNECTED",
        RDMA_CM_EVENT_DEVICE_REMOVAL => c"RDMA_CM_EVENT_DEVICE_REMOVAL",
        RDMA_CM_EVENT_MULTICAST_JOIN => c"RDMA_CM_EVENT_MULTICAST_JOIN",
        RDMA_CM_EVENT_MULTICAST_ERROR => c"RDMA_CM_EVENT_MULTICAST_ERROR",
        RDMA_CM_EVENT_ADDR_CHANGE => c"RDMA_CM_EVENT_ADDR_CHANGE",
        RDMA_CM_EVENT_TIMEWAIT_EXIT => c"RDMA_CM_EVENT_TIMEWAIT_EXIT",
        _ => c"UNKNOWN EVENT",
    }
}

/// `const char *rdma_event_str(enum rdma_cm_event_type event)`: a static string, never
/// NULL.
#[no_mangle]
pub extern "C" fn rdma_event_str(event: rdma_cm_event_type) -> *const c_char {
    let failed = || c"UNKNOWN EVENT".as_ptr();
    ffi::call("rdma_event_str", failed, || event_name(event).as_ptr())
}
default_version!(rdma_event_str, "RDMACM_1.0");

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_event_is_named_after_its_enumerator() {
        let names = [
            "ADDR_RESOLVED",
            "ADDR_ERROR",
            "ROUTE_RESOLVED",
            "ROUTE_ERROR",
            "CONNECT_REQUEST",
            "CONNECT_RESPONSE",
            "CONNECT_ERROR",
            "UNREACHABLE",
            "REJECTED",
            "ESTABLISHED",
            "DISCONNECTED",
            "DEVICE_REMOVAL",
            "MULTICAST_JOIN",
            "MULTICAST_ERROR",
            "ADDR_CHANGE",
            "TIMEWAIT_EXIT",
        ];
        for (n, name) in names.iter().enumerate() {
            let got = event_name(n as c_int).to_str().unwrap();
            assert_eq!(got, format!("RDMA_CM_EVENT_{name}"));
        }
        assert_eq!(RDMA_CM_EVENT_TIMEWAIT_EXIT as usize, names.len() - 1);
    }

    #[test]
    fn numbers_outside_the_enum_are_unknown() {
        for n in [-1, 16, 17, 255, c_int::MIN, c_int::MAX] {
            assert_eq!(event_name(n), c"UNKNOWN EVENT", "{n}");
        }
    }

    #[test]
    fn rdma_event_str_returns_the_static_name() {
        let p = rdma_event_str(RDMA_CM_EVENT_ESTABLISHED);
        // SAFETY: rdma_event_str returns a pointer to a static NUL-terminated string.
        let s = unsafe { CStr::from_ptr(p) };
        assert_eq!(s, c"RDMA_CM_EVENT_ESTABLISHED");
    }

    #[test]
    fn a_stub_answers_minus_one_with_enosys() {
        set_errno(0);
        let r = rdma_join_multicast(
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
        );
        assert_eq!(r, -1);
        // SAFETY: __errno_location points to this thread's errno.
        assert_eq!(unsafe { *libc::__errno_location() }, ENOSYS);
    }
}
