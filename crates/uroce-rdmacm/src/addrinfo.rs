//! `rdma_getaddrinfo` / `rdma_freeaddrinfo`: a name and service resolved with the
//! system's `getaddrinfo`, as RDMA address information (librdmacm's `addrinfo.c`
//! behaviour): RAI_PASSIVE gives the source address to bind and listen on (the wildcard
//! without a node), otherwise the destination to connect to, with the source the hints
//! name. The port space and QP type come from the hints, else TCP and RC. With neither
//! node nor service, the hints' own source and destination addresses are the answer
//! (libfabric's verbs provider asks so for a peer's address it was given).

use std::ffi::{c_char, c_int};

use libc::{sockaddr, sockaddr_storage, socklen_t};

use crate::abi::*;

/// One result: the C structure and the addresses it points at.
#[repr(C)]
struct AddrInfoBox {
    ai: rdma_addrinfo,
    src: sockaddr_storage,
    dst: sockaddr_storage,
}

/// `rdma_getaddrinfo`: 0, a `getaddrinfo` error code (EAI_*) when the name or service
/// cannot be resolved, or -1 with errno EINVAL / ENOMEM.
///
/// # Safety
/// `node` and `service` are null or NUL-terminated strings; `hints` is null or an
/// `rdma_addrinfo`; `res` is writable.
#[no_mangle]
pub unsafe extern "C" fn rdma_getaddrinfo(
    node: *const c_char,
    service: *const c_char,
    hints: *const rdma_addrinfo,
    res: *mut *mut rdma_addrinfo,
) -> c_int {
    crate::ffi::minus1("rdma_getaddrinfo", move || {
        // SAFETY: the caller's contract.
        let hints = unsafe { hints.as_ref() };
        let given = hints.is_some_and(|h| {
            (!h.ai_src_addr.is_null() && h.ai_src_len > 0)
                || (!h.ai_dst_addr.is_null() && h.ai_dst_len > 0)
        });
        if res.is_null() || (node.is_null() && service.is_null() && !given) {
            // SAFETY: the thread's errno.
            unsafe { *libc::__errno_location() = libc::EINVAL };
            return -1;
        }
        let flags = hints.map_or(0, |h| h.ai_flags);
        let passive = flags & RAI_PASSIVE != 0;
        let qp_type = match hints.map_or(0, |h| h.ai_qp_type) {
            0 => match hints.map_or(0, |h| h.ai_port_space) {
                RDMA_PS_UDP | RDMA_PS_IPOIB => 4,
                _ => 2,
            },
            t => t,
        };
        let port_space = match hints.map_or(0, |h| h.ai_port_space) {
            0 if qp_type == 4 => RDMA_PS_UDP,
            0 => RDMA_PS_TCP,
            ps => ps,
        };
        if node.is_null() && service.is_null() {
            // No name to resolve: the hints' own addresses are the answer.
            // SAFETY: an all-zero box is valid (null pointers, zero numbers).
            let mut b: Box<AddrInfoBox> = Box::new(unsafe { std::mem::zeroed() });
            b.ai.ai_flags = flags;
            b.ai.ai_qp_type = qp_type;
            b.ai.ai_port_space = port_space;
            if let Some(h) = hints {
                copy_hint(
                    h.ai_src_addr,
                    h.ai_src_len,
                    &mut b.src,
                    &mut b.ai.ai_src_len,
                );
                copy_hint(
                    h.ai_dst_addr,
                    h.ai_dst_len,
                    &mut b.dst,
                    &mut b.ai.ai_dst_len,
                );
            }
            if b.ai.ai_src_len > 0 {
                b.ai.ai_src_addr = (&mut b.src as *mut sockaddr_storage).cast::<sockaddr>();
            }
            if b.ai.ai_dst_len > 0 {
                b.ai.ai_dst_addr = (&mut b.dst as *mut sockaddr_storage).cast::<sockaddr>();
            }
            b.ai.ai_family = first_family(&b, b.ai.ai_dst_len == 0);
            // SAFETY: the caller's pointer. `AddrInfoBox` starts with the `rdma_addrinfo`.
            unsafe { *res = Box::into_raw(b).cast::<rdma_addrinfo>() };
            return 0;
        }
        // SAFETY: an all-zero addrinfo is a valid hints structure.
        let mut h: libc::addrinfo = unsafe { std::mem::zeroed() };
        h.ai_family = hints.map_or(0, |h| h.ai_family);
        h.ai_socktype = if qp_type == 4 {
            libc::SOCK_DGRAM
        } else {
            libc::SOCK_STREAM
        };
        if passive {
            h.ai_flags |= libc::AI_PASSIVE;
        }
        if flags & RAI_NUMERICHOST != 0 {
            h.ai_flags |= libc::AI_NUMERICHOST;
        }
        let mut ai: *mut libc::addrinfo = std::ptr::null_mut();
        // SAFETY: the strings are the caller's; `h` and `ai` are live.
        let r = unsafe { libc::getaddrinfo(node, service, &h, &mut ai) };
        if r != 0 {
            return r;
        }
        // SAFETY: an all-zero box is valid (null pointers, zero numbers).
        let mut b: Box<AddrInfoBox> = Box::new(unsafe { std::mem::zeroed() });
        // SAFETY: getaddrinfo succeeded: `ai` is a list of at least one entry whose address
        // has `ai_addrlen` bytes (at most a sockaddr_storage).
        let (family, len) = unsafe {
            let first = &*ai;
            let len = (first.ai_addrlen as usize).min(std::mem::size_of::<sockaddr_storage>());
            let to = if passive { &mut b.src } else { &mut b.dst };
            std::ptr::copy_nonoverlapping(
                first.ai_addr.cast::<u8>(),
                (to as *mut sockaddr_storage).cast::<u8>(),
                len,
            );
            libc::freeaddrinfo(ai);
            (first_family(&b, passive), len as socklen_t)
        };
        b.ai.ai_flags = flags;
        b.ai.ai_family = family;
        b.ai.ai_qp_type = qp_type;
        b.ai.ai_port_space = port_space;
        if passive {
            b.ai.ai_src_len = len;
            b.ai.ai_src_addr = (&mut b.src as *mut sockaddr_storage).cast::<sockaddr>();
        } else {
            b.ai.ai_dst_len = len;
            b.ai.ai_dst_addr = (&mut b.dst as *mut sockaddr_storage).cast::<sockaddr>();
            if let Some(h) = hints.filter(|h| !h.ai_src_addr.is_null() && h.ai_src_len > 0) {
                let n = (h.ai_src_len as usize).min(std::mem::size_of::<sockaddr_storage>());
                // SAFETY: the hints' source address has `ai_src_len` bytes.
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        h.ai_src_addr.cast::<u8>(),
                        (&mut b.src as *mut sockaddr_storage).cast::<u8>(),
                        n,
                    )
                };
                b.ai.ai_src_len = n as socklen_t;
                b.ai.ai_src_addr = (&mut b.src as *mut sockaddr_storage).cast::<sockaddr>();
            }
        }
        // SAFETY: the caller's pointer. `AddrInfoBox` starts with the `rdma_addrinfo`.
        unsafe { *res = Box::into_raw(b).cast::<rdma_addrinfo>() };
        0
    })
}
crate::exports::default_version!(rdma_getaddrinfo, "RDMACM_1.0");

/// Copies a hint's address (`addr`, `len` bytes) into `to`, its length into `to_len`;
/// nothing for a null or empty one.
fn copy_hint(
    addr: *mut sockaddr,
    len: socklen_t,
    to: &mut sockaddr_storage,
    to_len: &mut socklen_t,
) {
    if addr.is_null() || len == 0 {
        return;
    }
    let n = (len as usize).min(std::mem::size_of::<sockaddr_storage>());
    // SAFETY: the hints' address has `len` bytes (the caller's contract); `to` has room
    // for `n`.
    unsafe {
        std::ptr::copy_nonoverlapping(
            addr.cast::<u8>(),
            (to as *mut sockaddr_storage).cast::<u8>(),
            n,
        )
    };
    *to_len = n as socklen_t;
}

fn first_family(b: &AddrInfoBox, passive: bool) -> c_int {
    c_int::from(if passive {
        b.src.ss_family
    } else {
        b.dst.ss_family
    })
}

/// `rdma_freeaddrinfo`.
///
/// # Safety
/// `res` is null or a list from `rdma_getaddrinfo`.
#[no_mangle]
pub unsafe extern "C" fn rdma_freeaddrinfo(res: *mut rdma_addrinfo) {
    crate::ffi::void("rdma_freeaddrinfo", move || {
        let mut p = res;
        while !p.is_null() {
            // SAFETY: every entry is an `AddrInfoBox` leaked by rdma_getaddrinfo.
            let b = unsafe { Box::from_raw(p.cast::<AddrInfoBox>()) };
            p = b.ai.ai_next;
        }
    })
}
crate::exports::default_version!(rdma_freeaddrinfo, "RDMACM_1.0");
