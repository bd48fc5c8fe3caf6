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
use crate::ffi;
use crate::verbs_abi::ibv_pd;

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
    fn rdma_set_local_ece(id: *mut rdma_cm_id, ece: *mut ibv_ece) -> minus1 @@ "RDMACM_1.3";
    fn rdma_get_remote_ece(id: *mut rdma_cm_id, ece: *mut ibv_ece) -> minus1 @@ "RDMACM_1.3";
}

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
