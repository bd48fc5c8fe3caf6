//! Every symbol Debian 12's libibverbs exports, bound to its version node.
//!
//! A name with a default version (`ibv_alloc_pd@@IBVERBS_1.1`) is a `#[no_mangle]`
//! function of that name and a `.symver NAME, NAME@@NODE` directive (`default_version!`).
//! An older, non-default version (`ibv_alloc_pd@IBVERBS_1.0`, the ABI of libibverbs 1.0,
//! whose structures differ) is a private function made global and given that version by
//! `.symver` ([`compat!`]); those all answer "unsupported". See build.rs for why the
//! versions live in the object and not only in the version script.
//!
//! An entry point uroce does not implement yet answers as libibverbs documents an
//! unsupported verb: a pointer-returning call returns NULL with errno `EOPNOTSUPP`; a call
//! documented to return an errno value returns `EOPNOTSUPP`; one documented to return -1
//! and set errno does that. They take no arguments here: under the x86-64 System V
//! calling convention a callee may ignore the arguments its caller passes.

use std::ffi::{c_char, c_int, c_void};
use std::sync::atomic::AtomicBool;

use libc::{EIO, EOPNOTSUPP};

use crate::ffi::{self, set_errno};
use crate::util;

/// Binds the `#[no_mangle]` function `$name` to the default version `$name@@$node`.
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

macro_rules! stub_ret {
    (ptr) => { *mut c_void };
    (errno) => { c_int };
    (minus1) => { c_int };
    (neg_isize) => { isize };
    (zero) => { c_int };
    (zero_u64) => { u64 };
    (void) => { () };
}

/// The answer of an unsupported entry point of kind `$kind`, through the C boundary
/// ([`crate::ffi`]; a panic there answers EIO as the kind says a failure).
macro_rules! stub_body {
    ($name:expr, ptr) => {
        ffi::ptr($name, || ffi::null_with(EOPNOTSUPP))
    };
    ($name:expr, errno) => {
        ffi::errno($name, || EOPNOTSUPP)
    };
    ($name:expr, minus1) => {
        ffi::minus1($name, || {
            set_errno(EOPNOTSUPP);
            -1
        })
    };
    ($name:expr, neg_isize) => {
        ffi::call($name, || -(EIO as isize), || -(EOPNOTSUPP as isize))
    };
    ($name:expr, zero) => {
        ffi::call($name, || 0, || 0)
    };
    ($name:expr, zero_u64) => {
        ffi::call($name, || 0, || 0)
    };
    ($name:expr, void) => {
        ffi::void($name, || ())
    };
}

/// Exported, not implemented: `name: kind @@ "NODE";`.
macro_rules! unsupported {
    ($($name:ident : $kind:ident @@ $node:literal;)*) => { $(
        #[no_mangle]
        pub extern "C" fn $name() -> stub_ret!($kind) {
            stub_body!(stringify!($name), $kind)
        }
        default_version!($name, $node);
    )* };
}

/// A non-default version, unsupported: `name: kind @ "NODE";`.
macro_rules! compat {
    ($($name:ident : $kind:ident @ $node:literal;)*) => { $(
        #[allow(non_snake_case)]
        mod $name {
            #[allow(unused_imports)]
            use super::*;
            extern "C" fn compat() -> stub_ret!($kind) {
                stub_body!(concat!(stringify!($name), "@", $node), $kind)
            }
            core::arch::global_asm!(
                ".globl {0}",
                concat!(".symver {0}, ", stringify!($name), "@", $node),
                sym compat
            );
        }
    )* };
}

// The libibverbs 1.0 ABI (and ibv_register_driver, the provider interface before
// rdma-core): never implemented.
mod compat {
    use super::*;
    compat! {
    ibv_ack_async_event: void @ "IBVERBS_1.0";
    ibv_ack_cq_events: void @ "IBVERBS_1.0";
    ibv_alloc_pd: ptr @ "IBVERBS_1.0";
    ibv_attach_mcast: errno @ "IBVERBS_1.0";
    ibv_close_device: minus1 @ "IBVERBS_1.0";
    ibv_create_ah: ptr @ "IBVERBS_1.0";
    ibv_create_cq: ptr @ "IBVERBS_1.0";
    ibv_create_qp: ptr @ "IBVERBS_1.0";
    ibv_create_srq: ptr @ "IBVERBS_1.0";
    ibv_dealloc_pd: errno @ "IBVERBS_1.0";
    ibv_dereg_mr: errno @ "IBVERBS_1.0";
    ibv_destroy_ah: errno @ "IBVERBS_1.0";
    ibv_destroy_cq: errno @ "IBVERBS_1.0";
    ibv_destroy_qp: errno @ "IBVERBS_1.0";
    ibv_destroy_srq: errno @ "IBVERBS_1.0";
    ibv_detach_mcast: errno @ "IBVERBS_1.0";
    ibv_free_device_list: void @ "IBVERBS_1.0";
    ibv_get_async_event: minus1 @ "IBVERBS_1.0";
    ibv_get_cq_event: minus1 @ "IBVERBS_1.0";
    ibv_get_device_guid: zero_u64 @ "IBVERBS_1.0";
    ibv_get_device_list: ptr @ "IBVERBS_1.0";
    ibv_get_device_name: ptr @ "IBVERBS_1.0";
    ibv_modify_qp: errno @ "IBVERBS_1.0";
    ibv_modify_srq: errno @ "IBVERBS_1.0";
    ibv_open_device: ptr @ "IBVERBS_1.0";
    ibv_query_device: errno @ "IBVERBS_1.0";
    ibv_query_gid: minus1 @ "IBVERBS_1.0";
    ibv_query_pkey: minus1 @ "IBVERBS_1.0";
    ibv_query_port: errno @ "IBVERBS_1.0";
    ibv_query_qp: errno @ "IBVERBS_1.0";
    ibv_query_srq: errno @ "IBVERBS_1.0";
    ibv_reg_mr: ptr @ "IBVERBS_1.0";
    ibv_resize_cq: errno @ "IBVERBS_1.0";
    ibv_register_driver: void @ "IBVERBS_1.1";
    }
}

// The verbs uroce does not implement yet.
unsupported! {
    ibv_attach_mcast: errno @@ "IBVERBS_1.1";
    ibv_detach_mcast: errno @@ "IBVERBS_1.1";
    ibv_get_device_index: minus1 @@ "IBVERBS_1.9";
    ibv_get_pkey_index: minus1 @@ "IBVERBS_1.5";
    ibv_get_sysfs_path: ptr @@ "IBVERBS_1.0";
    ibv_import_device: ptr @@ "IBVERBS_1.10";
    ibv_import_dm: ptr @@ "IBVERBS_1.13";
    ibv_import_mr: ptr @@ "IBVERBS_1.10";
    ibv_import_pd: ptr @@ "IBVERBS_1.10";
    ibv_query_ece: errno @@ "IBVERBS_1.10";
    ibv_query_qp_data_in_order: zero @@ "IBVERBS_1.14";
    ibv_read_sysfs_file: minus1 @@ "IBVERBS_1.0";
    ibv_reg_dmabuf_mr: ptr @@ "IBVERBS_1.12";
    ibv_resolve_eth_l2_from_gid: errno @@ "IBVERBS_1.1";
    ibv_set_ece: errno @@ "IBVERBS_1.10";
    ibv_unimport_dm: void @@ "IBVERBS_1.13";
    ibv_unimport_mr: void @@ "IBVERBS_1.10";
    ibv_unimport_pd: void @@ "IBVERBS_1.10";
}

// The provider interface (IBVERBS_PRIVATE_34): libmlx5, libefa and the other providers
// import these. Registration is accepted and ignored (uroce is the only "provider"); the
// kernel command calls, which only a provider's own device would reach, are unsupported.
unsupported! {
    __ioctl_final_num_attrs: zero @@ "IBVERBS_PRIVATE_34";
    __verbs_log: void @@ "IBVERBS_PRIVATE_34";
    _verbs_init_and_alloc_context: ptr @@ "IBVERBS_PRIVATE_34";
    execute_ioctl: errno @@ "IBVERBS_PRIVATE_34";
    ibv_cmd_advise_mr: errno @@ "IBVERBS_PRIVATE_34";
    ibv_cmd_alloc_dm: errno @@ "IBVERBS_PRIVATE_34";
    ibv_cmd_alloc_mw: errno @@ "IBVERBS_PRIVATE_34";
    ibv_cmd_alloc_pd: errno @@ "IBVERBS_PRIVATE_34";
    ibv_cmd_attach_mcast: errno @@ "IBVERBS_PRIVATE_34";
    ibv_cmd_close_xrcd: errno @@ "IBVERBS_PRIVATE_34";
    ibv_cmd_create_ah: errno @@ "IBVERBS_PRIVATE_34";
    ibv_cmd_create_counters: errno @@ "IBVERBS_PRIVATE_34";
    ibv_cmd_create_cq: errno @@ "IBVERBS_PRIVATE_34";
    ibv_cmd_create_cq_ex: errno @@ "IBVERBS_PRIVATE_34";
    ibv_cmd_create_flow: errno @@ "IBVERBS_PRIVATE_34";
    ibv_cmd_create_flow_action_esp: errno @@ "IBVERBS_PRIVATE_34";
    ibv_cmd_create_qp: errno @@ "IBVERBS_PRIVATE_34";
    ibv_cmd_create_qp_ex2: errno @@ "IBVERBS_PRIVATE_34";
    ibv_cmd_create_qp_ex: errno @@ "IBVERBS_PRIVATE_34";
    ibv_cmd_create_rwq_ind_table: errno @@ "IBVERBS_PRIVATE_34";
    ibv_cmd_create_srq: errno @@ "IBVERBS_PRIVATE_34";
    ibv_cmd_create_srq_ex: errno @@ "IBVERBS_PRIVATE_34";
    ibv_cmd_create_wq: errno @@ "IBVERBS_PRIVATE_34";
    ibv_cmd_dealloc_mw: errno @@ "IBVERBS_PRIVATE_34";
    ibv_cmd_dealloc_pd: errno @@ "IBVERBS_PRIVATE_34";
    ibv_cmd_dereg_mr: errno @@ "IBVERBS_PRIVATE_34";
    ibv_cmd_destroy_ah: errno @@ "IBVERBS_PRIVATE_34";
    ibv_cmd_destroy_counters: errno @@ "IBVERBS_PRIVATE_34";
    ibv_cmd_destroy_cq: errno @@ "IBVERBS_PRIVATE_34";
    ibv_cmd_destroy_flow: errno @@ "IBVERBS_PRIVATE_34";
    ibv_cmd_destroy_flow_action: errno @@ "IBVERBS_PRIVATE_34";
    ibv_cmd_destroy_qp: errno @@ "IBVERBS_PRIVATE_34";
    ibv_cmd_destroy_rwq_ind_table: errno @@ "IBVERBS_PRIVATE_34";
    ibv_cmd_destroy_srq: errno @@ "IBVERBS_PRIVATE_34";
    ibv_cmd_destroy_wq: errno @@ "IBVERBS_PRIVATE_34";
    ibv_cmd_detach_mcast: errno @@ "IBVERBS_PRIVATE_34";
    ibv_cmd_free_dm: errno @@ "IBVERBS_PRIVATE_34";
    ibv_cmd_get_context: errno @@ "IBVERBS_PRIVATE_34";
    ibv_cmd_modify_cq: errno @@ "IBVERBS_PRIVATE_34";
    ibv_cmd_modify_flow_action_esp: errno @@ "IBVERBS_PRIVATE_34";
    ibv_cmd_modify_qp: errno @@ "IBVERBS_PRIVATE_34";
    ibv_cmd_modify_qp_ex: errno @@ "IBVERBS_PRIVATE_34";
    ibv_cmd_modify_srq: errno @@ "IBVERBS_PRIVATE_34";
    ibv_cmd_modify_wq: errno @@ "IBVERBS_PRIVATE_34";
    ibv_cmd_open_qp: errno @@ "IBVERBS_PRIVATE_34";
    ibv_cmd_open_xrcd: errno @@ "IBVERBS_PRIVATE_34";
    ibv_cmd_poll_cq: errno @@ "IBVERBS_PRIVATE_34";
    ibv_cmd_post_recv: errno @@ "IBVERBS_PRIVATE_34";
    ibv_cmd_post_send: errno @@ "IBVERBS_PRIVATE_34";
    ibv_cmd_post_srq_recv: errno @@ "IBVERBS_PRIVATE_34";
    ibv_cmd_query_context: errno @@ "IBVERBS_PRIVATE_34";
    ibv_cmd_query_device_any: errno @@ "IBVERBS_PRIVATE_34";
    ibv_cmd_query_mr: errno @@ "IBVERBS_PRIVATE_34";
    ibv_cmd_query_port: errno @@ "IBVERBS_PRIVATE_34";
    ibv_cmd_query_qp: errno @@ "IBVERBS_PRIVATE_34";
    ibv_cmd_query_srq: errno @@ "IBVERBS_PRIVATE_34";
    ibv_cmd_read_counters: errno @@ "IBVERBS_PRIVATE_34";
    ibv_cmd_reg_dm_mr: errno @@ "IBVERBS_PRIVATE_34";
    ibv_cmd_reg_dmabuf_mr: errno @@ "IBVERBS_PRIVATE_34";
    ibv_cmd_reg_mr: errno @@ "IBVERBS_PRIVATE_34";
    ibv_cmd_req_notify_cq: errno @@ "IBVERBS_PRIVATE_34";
    ibv_cmd_rereg_mr: errno @@ "IBVERBS_PRIVATE_34";
    ibv_cmd_resize_cq: errno @@ "IBVERBS_PRIVATE_34";
    ibv_copy_ah_attr_from_kern: void @@ "IBVERBS_1.1";
    ibv_copy_path_rec_from_kern: void @@ "IBVERBS_1.0";
    ibv_copy_path_rec_to_kern: void @@ "IBVERBS_1.0";
    ibv_copy_qp_attr_from_kern: void @@ "IBVERBS_1.0";
    ibv_read_ibdev_sysfs_file: minus1 @@ "IBVERBS_PRIVATE_34";
    verbs_init_cq: void @@ "IBVERBS_PRIVATE_34";
    verbs_open_device: ptr @@ "IBVERBS_PRIVATE_34";
    verbs_register_driver_34: void @@ "IBVERBS_PRIVATE_34";
    verbs_set_ops: void @@ "IBVERBS_PRIVATE_34";
    verbs_uninit_context: void @@ "IBVERBS_PRIVATE_34";
}

/// Read by providers; uroce has no device to disassociate.
#[no_mangle]
pub static verbs_allow_disassociate_destroy: AtomicBool = AtomicBool::new(false);
default_version!(verbs_allow_disassociate_destroy, "IBVERBS_PRIVATE_34");

// Fork: uroce pins nothing and no device reaches the memory, so fork needs no care.

/// `ibv_fork_init`: nothing to prepare.
#[no_mangle]
pub extern "C" fn ibv_fork_init() -> c_int {
    ffi::call("ibv_fork_init", || EIO, || 0)
}
default_version!(ibv_fork_init, "IBVERBS_1.1");

/// `ibv_is_fork_initialized`: `IBV_FORK_UNNEEDED`.
#[no_mangle]
pub extern "C" fn ibv_is_fork_initialized() -> c_int {
    ffi::call("ibv_is_fork_initialized", || 2, || 2)
}
default_version!(ibv_is_fork_initialized, "IBVERBS_1.13");

/// `ibv_dontfork_range`: nothing to protect.
#[no_mangle]
pub extern "C" fn ibv_dontfork_range(_base: *mut c_void, _size: usize) -> c_int {
    ffi::call("ibv_dontfork_range", || EIO, || 0)
}
default_version!(ibv_dontfork_range, "IBVERBS_1.1");

/// `ibv_dofork_range`: nothing to release.
#[no_mangle]
pub extern "C" fn ibv_dofork_range(_base: *mut c_void, _size: usize) -> c_int {
    ffi::call("ibv_dofork_range", || EIO, || 0)
}
default_version!(ibv_dofork_range, "IBVERBS_1.1");

// Rates and names: answered without a device.

/// `ibv_rate_to_mult`.
#[no_mangle]
pub extern "C" fn ibv_rate_to_mult(rate: c_int) -> c_int {
    ffi::call("ibv_rate_to_mult", || -1, || util::rate_to_mult(rate))
}
default_version!(ibv_rate_to_mult, "IBVERBS_1.0");

/// `mult_to_ibv_rate`.
#[no_mangle]
pub extern "C" fn mult_to_ibv_rate(mult: c_int) -> c_int {
    ffi::call("mult_to_ibv_rate", || 0, || util::mult_to_rate(mult))
}
default_version!(mult_to_ibv_rate, "IBVERBS_1.0");

/// `ibv_rate_to_mbps`.
#[no_mangle]
pub extern "C" fn ibv_rate_to_mbps(rate: c_int) -> c_int {
    ffi::call("ibv_rate_to_mbps", || -1, || util::rate_to_mbps(rate))
}
default_version!(ibv_rate_to_mbps, "IBVERBS_1.1");

/// `mbps_to_ibv_rate`.
#[no_mangle]
pub extern "C" fn mbps_to_ibv_rate(mbps: c_int) -> c_int {
    ffi::call("mbps_to_ibv_rate", || 0, || util::mbps_to_rate(mbps))
}
default_version!(mbps_to_ibv_rate, "IBVERBS_1.1");

/// `ibv_node_type_str`.
#[no_mangle]
pub extern "C" fn ibv_node_type_str(node_type: c_int) -> *const c_char {
    ffi::call("ibv_node_type_str", util::unknown, || {
        util::node_type_str(node_type).as_ptr()
    })
}
default_version!(ibv_node_type_str, "IBVERBS_1.1");

/// `ibv_port_state_str`.
#[no_mangle]
pub extern "C" fn ibv_port_state_str(state: c_int) -> *const c_char {
    ffi::call("ibv_port_state_str", util::unknown, || {
        util::port_state_str(state).as_ptr()
    })
}
default_version!(ibv_port_state_str, "IBVERBS_1.1");

/// `ibv_event_type_str`.
#[no_mangle]
pub extern "C" fn ibv_event_type_str(event: c_int) -> *const c_char {
    ffi::call("ibv_event_type_str", util::unknown, || {
        util::event_type_str(event).as_ptr()
    })
}
default_version!(ibv_event_type_str, "IBVERBS_1.1");

/// `ibv_wc_status_str`.
#[no_mangle]
pub extern "C" fn ibv_wc_status_str(status: c_int) -> *const c_char {
    ffi::call("ibv_wc_status_str", util::unknown, || {
        util::wc_status_str(status).as_ptr()
    })
}
default_version!(ibv_wc_status_str, "IBVERBS_1.1");

// ---------------------------------------------------------------------------------------
// Queue pairs (`qp.rs`, safe code): each turns its C arguments into values through the
// audited helpers of `ffi.rs` and calls its body there.

/// `ibv_create_qp`: a QP in RESET; `attr->cap` is updated with what was granted.
///
/// # Safety
/// `attr` is NULL or points at a readable and writable `struct ibv_qp_init_attr` that
/// nothing else touches during the call.
#[no_mangle]
pub unsafe extern "C" fn ibv_create_qp(
    pd: *mut crate::abi::ibv_pd,
    attr: *mut crate::abi::ibv_qp_init_attr,
) -> *mut crate::abi::ibv_qp {
    ffi::ptr("ibv_create_qp", move || {
        // SAFETY: the caller's contract.
        let attr = unsafe { ffi::in_out(attr) };
        crate::qp::create_qp(pd, attr)
    })
}
default_version!(ibv_create_qp, "IBVERBS_1.1");

/// `ibv_modify_qp`: 0, or the errno ibverbs gives.
///
/// # Safety
/// `attr` is NULL or points at a readable `struct ibv_qp_attr`.
#[no_mangle]
pub unsafe extern "C" fn ibv_modify_qp(
    qp: *mut crate::abi::ibv_qp,
    attr: *mut crate::abi::ibv_qp_attr,
    mask: c_int,
) -> c_int {
    ffi::errno("ibv_modify_qp", move || {
        // SAFETY: the caller's contract.
        let attr = unsafe { ffi::read(attr) }.ok();
        crate::qp::modify_qp(qp, attr, mask)
    })
}
default_version!(ibv_modify_qp, "IBVERBS_1.1");

/// `ibv_query_qp`: the QP's attributes (all of them, whatever `mask` asks) and what it
/// was created with. Only the first [`crate::abi::QP_ATTR_QUERIED`] bytes of `attr` are
/// written, the fields rdma-core 44's query fills: never `rate_limit`, which an
/// `ibv_qp_attr` of older headers (NCCL's 136-byte one) does not have.
///
/// # Safety
/// `attr` and `init_attr` are NULL or point at writable structures.
#[no_mangle]
pub unsafe extern "C" fn ibv_query_qp(
    qp: *mut crate::abi::ibv_qp,
    attr: *mut crate::abi::ibv_qp_attr,
    _mask: c_int,
    init_attr: *mut crate::abi::ibv_qp_init_attr,
) -> c_int {
    ffi::errno("ibv_query_qp", move || {
        if attr.is_null() || init_attr.is_null() {
            return libc::EINVAL;
        }
        match crate::qp::query_qp(qp) {
            Ok((a, i)) => {
                // SAFETY: the caller's pointer, not NULL, to at least the fields up to
                // `rate_limit` (every verbs.h's `ibv_qp_attr` has them).
                let _ = unsafe { ffi::write_prefix(attr.cast(), &a, crate::abi::QP_ATTR_QUERIED) };
                // SAFETY: as above.
                let _ = unsafe { ffi::write(init_attr, i) };
                0
            }
            Err(e) => e,
        }
    })
}
default_version!(ibv_query_qp, "IBVERBS_1.1");

/// `ibv_destroy_qp`: 0 or EINVAL for an unknown QP.
#[no_mangle]
pub extern "C" fn ibv_destroy_qp(qp: *mut crate::abi::ibv_qp) -> c_int {
    ffi::errno("ibv_destroy_qp", move || crate::qp::destroy_qp(qp))
}
default_version!(ibv_destroy_qp, "IBVERBS_1.1");

/// `ibv_context_ops.post_send` (the inline `ibv_post_send`).
///
/// # Safety
/// As verbs.h has `ibv_post_send`'s arguments: `qp` NULL or readable, `wr` a valid list
/// (see `ffi::WrList::new`), `bad` NULL or writable.
pub(crate) unsafe extern "C" fn post_send(
    qp: *mut crate::abi::ibv_qp,
    wr: *mut crate::abi::ibv_send_wr,
    bad: *mut *mut crate::abi::ibv_send_wr,
) -> c_int {
    ffi::errno("post_send", move || {
        // SAFETY: the caller's contract (the inline ibv_post_send read `qp->context`
        // already).
        let ctx = unsafe { ffi::qp_context(qp) };
        // SAFETY: as above.
        let list = unsafe { ffi::WrList::new(wr, bad) };
        crate::post::post_send(ctx, qp, list)
    })
}

/// `ibv_context_ops.post_recv` (the inline `ibv_post_recv`), as [`post_send`].
///
/// # Safety
/// As [`post_send`].
pub(crate) unsafe extern "C" fn post_recv(
    qp: *mut crate::abi::ibv_qp,
    wr: *mut crate::abi::ibv_recv_wr,
    bad: *mut *mut crate::abi::ibv_recv_wr,
) -> c_int {
    ffi::errno("post_recv", move || {
        // SAFETY: the caller's contract.
        let ctx = unsafe { ffi::qp_context(qp) };
        // SAFETY: as above.
        let list = unsafe { ffi::WrList::new(wr, bad) };
        crate::post::post_recv(ctx, qp, list)
    })
}

// ---------------------------------------------------------------------------------------
// The extended verbs API (`qp_ex.rs` and `cq_ex.rs`, safe code): `verbs_context`'s
// `create_qp_ex` / `create_cq_ex`, `ibv_qp_to_qp_ex`, and the function pointers of
// `struct ibv_qp_ex` (the `ibv_wr_*` builders) and `struct ibv_cq_ex` (polling). Each
// callback answers a panic as its C type allows: a builder fails its batch (EIO from
// `wr_complete`, nothing posted), `wr_complete` EIO, `start_poll` / `next_poll` EIO, a
// reader 0.

/// `verbs_context.create_qp_ex`, what the inline `ibv_create_qp_ex` calls.
///
/// # Safety
/// `attr` is NULL or points at a readable and writable `struct ibv_qp_init_attr_ex`
/// that nothing else touches during the call.
pub(crate) unsafe extern "C" fn create_qp_ex(
    ctx: *mut crate::abi::ibv_context,
    attr: *mut crate::abi::ibv_qp_init_attr_ex,
) -> *mut crate::abi::ibv_qp {
    ffi::ptr("create_qp_ex", move || {
        // SAFETY: the caller's contract.
        let attr = unsafe { ffi::in_out(attr) };
        crate::qp_ex::create_qp_ex(ctx, attr)
    })
}

/// `verbs_context.create_cq_ex`, what the inline `ibv_create_cq_ex` calls.
///
/// # Safety
/// `attr` is NULL or points at a readable `struct ibv_cq_init_attr_ex`.
pub(crate) unsafe extern "C" fn create_cq_ex(
    ctx: *mut crate::abi::ibv_context,
    attr: *mut crate::abi::ibv_cq_init_attr_ex,
) -> *mut crate::abi::ibv_cq_ex {
    ffi::ptr("create_cq_ex", move || {
        // SAFETY: the caller's contract.
        let attr = unsafe { ffi::read(attr) }.ok();
        crate::cq_ex::create_cq_ex(ctx, attr)
    })
}

/// `ibv_qp_to_qp_ex`.
#[no_mangle]
pub extern "C" fn ibv_qp_to_qp_ex(qp: *mut crate::abi::ibv_qp) -> *mut crate::abi::ibv_qp_ex {
    ffi::ptr("ibv_qp_to_qp_ex", move || crate::qp_ex::qp_to_qp_ex(qp))
}
default_version!(ibv_qp_to_qp_ex, "IBVERBS_1.6");

/// The `ibv_wr_*` builders of a QP created with send operations (each refuses, at
/// `wr_complete`, an operation not asked for).
pub(crate) fn fill_wr_builders(q: &mut crate::abi::ibv_qp_ex) {
    q.wr_atomic_cmp_swp = Some(wr_atomic_cmp_swp);
    q.wr_atomic_fetch_add = Some(wr_atomic_fetch_add);
    q.wr_bind_mw = Some(wr_bind_mw);
    q.wr_local_inv = Some(wr_local_inv);
    q.wr_rdma_read = Some(wr_rdma_read);
    q.wr_rdma_write = Some(wr_rdma_write);
    q.wr_rdma_write_imm = Some(wr_rdma_write_imm);
    q.wr_send = Some(wr_send);
    q.wr_send_imm = Some(wr_send_imm);
    q.wr_send_inv = Some(wr_send_inv);
    q.wr_set_ud_addr = Some(wr_set_ud_addr);
    q.wr_set_inline_data = Some(wr_set_inline_data);
    q.wr_set_inline_data_list = Some(wr_set_inline_data_list);
    q.wr_set_sge = Some(wr_set_sge);
    q.wr_set_sge_list = Some(wr_set_sge_list);
    q.wr_start = Some(wr_start);
    q.wr_complete = Some(wr_complete);
    q.wr_abort = Some(wr_abort);
}

/// A builder's body: `$body` with the QP's extra state, `wr_id` and `wr_flags`, inside
/// the C boundary.
macro_rules! builder {
    ($name:expr, $qp:ident, |$x:ident, $id:ident, $flags:ident| $body:expr) => {
        ffi::call(
            $name,
            move || {
                // A panic fails the batch (EIO at wr_complete): it may not post without
                // this request. SAFETY: the caller's contract, as below.
                if let Some((x, _, _)) = unsafe { ffi::qp_extra($qp) } {
                    crate::qp_ex::wr_fail(x, libc::EIO);
                }
            },
            move || {
                // SAFETY: the caller's contract (verbs.h: the `ibv_qp_ex` of a live QP).
                if let Some(($x, $id, $flags)) = unsafe { ffi::qp_extra($qp) } {
                    let _ = ($id, $flags);
                    $body
                }
            },
        )
    };
}

/// An operation builder: a new request `$op` (an `ExOp`).
macro_rules! op_builder {
    ($(#[$doc:meta] $name:ident($($arg:ident: $t:ty),*) => $op:expr;)*) => { $(
        #[$doc]
        ///
        /// # Safety
        /// `qp` is NULL or the `ibv_qp_ex` of a live QP of this library.
        unsafe extern "C" fn $name(qp: *mut crate::abi::ibv_qp_ex $(, $arg: $t)*) {
            use crate::qp_ex::ExOp;
            builder!(stringify!($name), qp, |x, id, flags| {
                crate::qp_ex::wr_op(x, id, flags, $op)
            })
        }
    )* };
}

op_builder! {
    /// `ibv_wr_atomic_cmp_swp`.
    wr_atomic_cmp_swp(rkey: u32, addr: u64, compare: u64, swap: u64) =>
        ExOp::CmpSwp { rkey, addr, compare, swap };
    /// `ibv_wr_atomic_fetch_add`.
    wr_atomic_fetch_add(rkey: u32, addr: u64, add: u64) => ExOp::FetchAdd { rkey, addr, add };
    /// `ibv_wr_local_inv`.
    wr_local_inv(rkey: u32) => ExOp::LocalInv(rkey);
    /// `ibv_wr_rdma_read`.
    wr_rdma_read(rkey: u32, addr: u64) => ExOp::Read { rkey, addr };
    /// `ibv_wr_rdma_write`.
    wr_rdma_write(rkey: u32, addr: u64) => ExOp::Write { rkey, addr };
    /// `ibv_wr_rdma_write_imm` (`imm` in network order).
    wr_rdma_write_imm(rkey: u32, addr: u64, imm: u32) => ExOp::WriteImm { rkey, addr, imm };
    /// `ibv_wr_send`.
    wr_send() => ExOp::Send;
    /// `ibv_wr_send_imm` (`imm` in network order).
    wr_send_imm(imm: u32) => ExOp::SendImm(imm);
    /// `ibv_wr_send_inv`.
    wr_send_inv(rkey: u32) => ExOp::SendInv(rkey);
}

/// `ibv_wr_bind_mw`: `bind_info` is read now.
///
/// # Safety
/// `qp` as for the other builders; `info` is NULL or a readable `struct
/// ibv_mw_bind_info`.
unsafe extern "C" fn wr_bind_mw(
    qp: *mut crate::abi::ibv_qp_ex,
    mw: *mut crate::abi::ibv_mw,
    rkey: u32,
    info: *const crate::abi::ibv_mw_bind_info,
) {
    builder!("wr_bind_mw", qp, |x, id, flags| {
        // SAFETY: the caller's contract.
        let info = unsafe { ffi::read(info) }.unwrap_or(crate::abi::ibv_mw_bind_info {
            mr: std::ptr::null_mut(),
            addr: 0,
            length: 0,
            mw_access_flags: 0,
        });
        let op = crate::qp_ex::ExOp::BindMw {
            mw: mw as usize,
            rkey,
            info: (&info).into(),
        };
        crate::qp_ex::wr_op(x, id, flags, op)
    })
}

/// `ibv_wr_set_sge`.
///
/// # Safety
/// `qp` as for the other builders.
unsafe extern "C" fn wr_set_sge(qp: *mut crate::abi::ibv_qp_ex, lkey: u32, addr: u64, length: u32) {
    builder!("wr_set_sge", qp, |x, id, flags| {
        let sge = uroce::verbs::Sge { addr, length, lkey };
        crate::qp_ex::wr_set_sge(x, sge)
    })
}

/// `ibv_wr_set_sge_list`: the list is read now.
///
/// # Safety
/// `qp` as for the other builders; `list` is NULL or points at `n` readable `struct
/// ibv_sge`.
unsafe extern "C" fn wr_set_sge_list(
    qp: *mut crate::abi::ibv_qp_ex,
    n: usize,
    list: *const crate::abi::ibv_sge,
) {
    builder!("wr_set_sge_list", qp, |x, id, flags| {
        // SAFETY: the caller's contract (n entries), read as bytes; None for NULL.
        let raw = unsafe {
            ffi::bytes(
                list.cast::<u8>(),
                n.saturating_mul(std::mem::size_of::<crate::abi::ibv_sge>()),
            )
        };
        let sges = match (n, raw) {
            (0, _) => Some(Vec::new()),
            (_, None) => None,
            (_, Some(b)) => Some(
                b.chunks_exact(16)
                    .map(|c| uroce::verbs::Sge {
                        addr: u64::from_ne_bytes(c[..8].try_into().unwrap_or_default()),
                        length: u32::from_ne_bytes(c[8..12].try_into().unwrap_or_default()),
                        lkey: u32::from_ne_bytes(c[12..].try_into().unwrap_or_default()),
                    })
                    .collect(),
            ),
        };
        crate::qp_ex::wr_set_sges(x, sges)
    })
}

/// `ibv_wr_set_inline_data`: the bytes are copied now.
///
/// # Safety
/// `qp` as for the other builders; `addr` is NULL or points at `len` readable bytes.
unsafe extern "C" fn wr_set_inline_data(
    qp: *mut crate::abi::ibv_qp_ex,
    addr: *mut c_void,
    len: usize,
) {
    builder!("wr_set_inline_data", qp, |x, id, flags| {
        let b = if len == 0 {
            Some(&[][..])
        } else {
            // SAFETY: the caller's contract.
            unsafe { ffi::bytes(addr.cast(), len) }
        };
        crate::qp_ex::wr_set_inline(x, [b])
    })
}

/// `ibv_wr_set_inline_data_list`: the bytes are copied now.
///
/// # Safety
/// `qp` as for the other builders; `list` is NULL or points at `n` readable `struct
/// ibv_data_buf`, each naming `length` readable bytes at `addr`.
unsafe extern "C" fn wr_set_inline_data_list(
    qp: *mut crate::abi::ibv_qp_ex,
    n: usize,
    list: *const crate::abi::ibv_data_buf,
) {
    builder!("wr_set_inline_data_list", qp, |x, id, flags| {
        let parts = (0..n).map(|i| {
            // SAFETY: the caller's contract: i < n entries, each naming readable bytes.
            unsafe {
                let d = ffi::read(list.wrapping_add(i)).ok()?;
                if d.length == 0 {
                    return Some(&[][..]);
                }
                ffi::bytes(d.addr.cast::<u8>(), d.length)
            }
        });
        crate::qp_ex::wr_set_inline(x, parts)
    })
}

/// `ibv_wr_set_ud_addr`.
///
/// # Safety
/// `qp` as for the other builders.
unsafe extern "C" fn wr_set_ud_addr(
    qp: *mut crate::abi::ibv_qp_ex,
    ah: *mut crate::abi::ibv_ah,
    remote_qpn: u32,
    remote_qkey: u32,
) {
    builder!("wr_set_ud_addr", qp, |x, id, flags| {
        crate::qp_ex::wr_set_ud_addr(x, ah as usize, remote_qpn, remote_qkey)
    })
}

/// `ibv_wr_start`.
///
/// # Safety
/// `qp` as for the other builders.
unsafe extern "C" fn wr_start(qp: *mut crate::abi::ibv_qp_ex) {
    builder!("wr_start", qp, |x, id, flags| crate::qp_ex::wr_start(x))
}

/// `ibv_wr_abort`.
///
/// # Safety
/// `qp` as for the other builders.
unsafe extern "C" fn wr_abort(qp: *mut crate::abi::ibv_qp_ex) {
    builder!("wr_abort", qp, |x, id, flags| crate::qp_ex::wr_abort(x))
}

/// `ibv_wr_complete`: 0 with the batch posted, or the errno with nothing posted.
///
/// # Safety
/// `qp` as for the builders.
unsafe extern "C" fn wr_complete(qp: *mut crate::abi::ibv_qp_ex) -> c_int {
    ffi::errno("wr_complete", move || {
        // SAFETY: the caller's contract.
        let Some((x, _, _)) = (unsafe { ffi::qp_extra(qp) }) else {
            return libc::EINVAL;
        };
        let base = qp.cast::<crate::abi::ibv_qp>();
        // SAFETY: as above; `qp->context` is readable.
        let ctx = unsafe { ffi::qp_context(base) };
        crate::qp_ex::wr_complete(ctx, base, x)
    })
}

/// The polling functions of every CQ (`ibv_cq_ex`).
pub(crate) fn fill_cq_ex_ops(c: &mut crate::abi::ibv_cq_ex) {
    c.start_poll = Some(start_poll);
    c.next_poll = Some(next_poll);
    c.end_poll = Some(end_poll);
    c.read_opcode = Some(read_opcode);
    c.read_vendor_err = Some(read_vendor_err);
    c.read_byte_len = Some(read_byte_len);
    c.read_imm_data = Some(read_imm_data);
    c.read_qp_num = Some(read_qp_num);
    c.read_src_qp = Some(read_src_qp);
    c.read_wc_flags = Some(read_wc_flags);
    c.read_slid = Some(read_slid);
    c.read_sl = Some(read_sl);
    c.read_dlid_path_bits = Some(read_dlid_path_bits);
}

/// `start_poll` / `next_poll`: 0 with the completion's `status` and `wr_id` in the
/// `ibv_cq_ex`, or the errno (ENOENT: none).
///
/// # Safety
/// `cq` is NULL or the `ibv_cq_ex` of a live CQ of this library.
unsafe fn poll_step(
    cq: *mut crate::abi::ibv_cq_ex,
    step: fn(
        *mut crate::abi::ibv_context,
        *mut crate::abi::ibv_cq,
        &crate::cq_ex::CqExtra,
    ) -> Result<crate::abi::ibv_wc, c_int>,
) -> c_int {
    // SAFETY: the caller's contract.
    let Some(x) = (unsafe { ffi::cq_extra(cq) }) else {
        return libc::EINVAL;
    };
    let base = cq.cast::<crate::abi::ibv_cq>();
    // SAFETY: as above; `cq->context` is readable.
    let ctx = unsafe { ffi::cq_context(base) };
    match step(ctx, base, x) {
        Ok(wc) => {
            // SAFETY: the caller's contract; not NULL.
            unsafe { ffi::set_cq_ex_current(cq, wc.status, wc.wr_id) };
            0
        }
        Err(e) => e,
    }
}

/// `ibv_cq_ex.start_poll` (the inline `ibv_start_poll`).
///
/// # Safety
/// `cq` is NULL or the `ibv_cq_ex` of a live CQ of this library.
unsafe extern "C" fn start_poll(
    cq: *mut crate::abi::ibv_cq_ex,
    _attr: *mut crate::abi::ibv_poll_cq_attr,
) -> c_int {
    // SAFETY: the caller's contract.
    ffi::errno("start_poll", move || unsafe {
        poll_step(cq, crate::cq_ex::start_poll)
    })
}

/// `ibv_cq_ex.next_poll` (the inline `ibv_next_poll`).
///
/// # Safety
/// As [`start_poll`].
unsafe extern "C" fn next_poll(cq: *mut crate::abi::ibv_cq_ex) -> c_int {
    // SAFETY: the caller's contract.
    ffi::errno("next_poll", move || unsafe {
        poll_step(cq, crate::cq_ex::next_poll)
    })
}

/// `ibv_cq_ex.end_poll` (the inline `ibv_end_poll`).
///
/// # Safety
/// As [`start_poll`].
unsafe extern "C" fn end_poll(cq: *mut crate::abi::ibv_cq_ex) {
    ffi::void("end_poll", move || {
        // SAFETY: the caller's contract.
        if let Some(x) = unsafe { ffi::cq_extra(cq) } {
            crate::cq_ex::end_poll(x);
        }
    })
}

/// The readers of the current completion: `$name` gives `$field` of its `ibv_wc`.
macro_rules! wc_reader {
    ($($(#[$doc:meta])* $name:ident -> $t:ty = |$w:ident| $get:expr;)*) => { $(
        $(#[$doc])*
        ///
        /// # Safety
        /// As [`start_poll`].
        unsafe extern "C" fn $name(cq: *mut crate::abi::ibv_cq_ex) -> $t {
            ffi::call(stringify!($name), || 0 as $t, move || {
                // SAFETY: the caller's contract.
                let x = unsafe { ffi::cq_extra(cq) };
                x.map_or(0 as $t, |x| {
                    let $w = x.current();
                    $get
                })
            })
        }
    )* };
}

wc_reader! {
    /// `ibv_wc_read_opcode`.
    read_opcode -> c_int = |w| w.opcode;
    /// `ibv_wc_read_vendor_err`.
    read_vendor_err -> u32 = |w| w.vendor_err;
    /// `ibv_wc_read_byte_len`.
    read_byte_len -> u32 = |w| w.byte_len;
    /// `ibv_wc_read_imm_data` (network order; the invalidated rkey with IBV_WC_WITH_INV).
    read_imm_data -> u32 = |w| w.imm_data;
    /// `ibv_wc_read_qp_num`.
    read_qp_num -> u32 = |w| w.qp_num;
    /// `ibv_wc_read_src_qp`.
    read_src_qp -> u32 = |w| w.src_qp;
    /// `ibv_wc_read_wc_flags`.
    read_wc_flags -> std::ffi::c_uint = |w| w.wc_flags;
    /// `ibv_wc_read_slid`.
    read_slid -> u32 = |w| u32::from(w.slid);
    /// `ibv_wc_read_sl`.
    read_sl -> u8 = |w| w.sl;
    /// `ibv_wc_read_dlid_path_bits`.
    read_dlid_path_bits -> u8 = |w| w.dlid_path_bits;
}

// ---------------------------------------------------------------------------------------
// Memory windows (`mw.rs`, safe code): the `ibv_context_ops` entries.

/// `ibv_context_ops.alloc_mw`.
///
/// # Safety
/// None beyond the ABI: `pd` is only looked up.
pub(crate) unsafe extern "C" fn alloc_mw(
    pd: *mut crate::abi::ibv_pd,
    mw_type: c_int,
) -> *mut crate::abi::ibv_mw {
    ffi::ptr("alloc_mw", move || crate::mw::alloc_mw(pd, mw_type))
}

/// `ibv_context_ops.dealloc_mw`.
///
/// # Safety
/// None beyond the ABI: `mw` is only looked up.
pub(crate) unsafe extern "C" fn dealloc_mw(mw: *mut crate::abi::ibv_mw) -> c_int {
    ffi::errno("dealloc_mw", move || crate::mw::dealloc_mw(mw))
}

/// `ibv_context_ops.bind_mw`.
///
/// # Safety
/// As verbs.h has `ibv_bind_mw`'s arguments: `mw` NULL or readable, `bind` NULL or a
/// readable `struct ibv_mw_bind`.
pub(crate) unsafe extern "C" fn bind_mw(
    qp: *mut crate::abi::ibv_qp,
    mw: *mut crate::abi::ibv_mw,
    bind: *mut crate::abi::ibv_mw_bind,
) -> c_int {
    ffi::errno("bind_mw", move || {
        if qp.is_null() || mw.is_null() {
            return libc::EINVAL;
        }
        // SAFETY: the caller's contract (the inline ibv_bind_mw read `mw->context`
        // already).
        let (ctx, b) = unsafe { (ffi::mw_context(mw), ffi::read(bind)) };
        match b {
            Ok(b) => crate::mw::bind_mw(qp, mw, ctx, b),
            Err(e) => e,
        }
    })
}

// ---------------------------------------------------------------------------------------
// Completion queues, completion channels and asynchronous events (`cq.rs`, safe code).

/// `ibv_create_comp_channel`.
#[no_mangle]
pub extern "C" fn ibv_create_comp_channel(
    ctx: *mut crate::abi::ibv_context,
) -> *mut crate::abi::ibv_comp_channel {
    ffi::ptr("ibv_create_comp_channel", move || {
        crate::cq::create_comp_channel(ctx)
    })
}
default_version!(ibv_create_comp_channel, "IBVERBS_1.0");

/// `ibv_destroy_comp_channel`.
#[no_mangle]
pub extern "C" fn ibv_destroy_comp_channel(channel: *mut crate::abi::ibv_comp_channel) -> c_int {
    ffi::errno("ibv_destroy_comp_channel", move || {
        crate::cq::destroy_comp_channel(channel)
    })
}
default_version!(ibv_destroy_comp_channel, "IBVERBS_1.0");

/// `ibv_create_cq`.
#[no_mangle]
pub extern "C" fn ibv_create_cq(
    ctx: *mut crate::abi::ibv_context,
    cqe: c_int,
    cq_context: *mut c_void,
    channel: *mut crate::abi::ibv_comp_channel,
    comp_vector: c_int,
) -> *mut crate::abi::ibv_cq {
    ffi::ptr("ibv_create_cq", move || {
        crate::cq::create_cq(ctx, cqe, cq_context, channel, comp_vector)
    })
}
default_version!(ibv_create_cq, "IBVERBS_1.1");

/// `ibv_resize_cq`.
#[no_mangle]
pub extern "C" fn ibv_resize_cq(cq: *mut crate::abi::ibv_cq, cqe: c_int) -> c_int {
    ffi::errno("ibv_resize_cq", move || crate::cq::resize_cq(cq, cqe))
}
default_version!(ibv_resize_cq, "IBVERBS_1.1");

/// `ibv_destroy_cq`.
#[no_mangle]
pub extern "C" fn ibv_destroy_cq(cq: *mut crate::abi::ibv_cq) -> c_int {
    ffi::errno("ibv_destroy_cq", move || crate::cq::destroy_cq(cq))
}
default_version!(ibv_destroy_cq, "IBVERBS_1.1");

/// `ibv_context_ops.poll_cq` (the inline `ibv_poll_cq`): up to `n` completions into
/// `wc`, their number, or -1.
///
/// # Safety
/// As verbs.h has `ibv_poll_cq`'s arguments: `cq` NULL or readable, `wc` an array of `n`
/// writable `struct ibv_wc`.
pub(crate) unsafe extern "C" fn poll_cq(
    cq: *mut crate::abi::ibv_cq,
    n: c_int,
    wc: *mut crate::abi::ibv_wc,
) -> c_int {
    ffi::minus1("poll_cq", move || {
        let Ok(n) = usize::try_from(n) else { return -1 };
        if cq.is_null() {
            return -1;
        }
        // SAFETY: the caller's contract (the inline ibv_poll_cq read `cq->context`
        // already to find this function).
        let ctx = unsafe { ffi::cq_context(cq) };
        // SAFETY: as above.
        let Some(out) = (unsafe { ffi::out_array(wc, n) }) else {
            return -1;
        };
        crate::cq::poll_cq(ctx, cq, out)
    })
}

/// `ibv_context_ops.req_notify_cq` (the inline `ibv_req_notify_cq`).
///
/// # Safety
/// `cq` is NULL or readable, as verbs.h has it.
pub(crate) unsafe extern "C" fn req_notify_cq(
    cq: *mut crate::abi::ibv_cq,
    solicited_only: c_int,
) -> c_int {
    ffi::errno("req_notify_cq", move || {
        if cq.is_null() {
            return libc::EINVAL;
        }
        // SAFETY: the caller's contract (the inline ibv_req_notify_cq read `cq->context`
        // already).
        let ctx = unsafe { ffi::cq_context(cq) };
        crate::cq::req_notify_cq(ctx, cq, solicited_only)
    })
}

/// `ibv_get_cq_event`: 0 with the CQ and its `cq_context`, or -1 with errno.
///
/// # Safety
/// `cq` and `cq_context` are NULL or writable, as verbs.h has them.
#[no_mangle]
pub unsafe extern "C" fn ibv_get_cq_event(
    channel: *mut crate::abi::ibv_comp_channel,
    cq: *mut *mut crate::abi::ibv_cq,
    cq_context: *mut *mut c_void,
) -> c_int {
    ffi::minus1("ibv_get_cq_event", move || {
        match crate::cq::get_cq_event(channel) {
            Ok((c, context)) => {
                // SAFETY: the caller's contract.
                unsafe {
                    ffi::write_opt(cq, c);
                    ffi::write_opt(cq_context, context);
                }
                0
            }
            Err(e) => {
                set_errno(e);
                -1
            }
        }
    })
}
default_version!(ibv_get_cq_event, "IBVERBS_1.1");

/// `ibv_ack_cq_events`.
#[no_mangle]
pub extern "C" fn ibv_ack_cq_events(cq: *mut crate::abi::ibv_cq, nevents: u32) {
    ffi::void("ibv_ack_cq_events", move || {
        crate::cq::ack_cq_events(cq, nevents)
    })
}
default_version!(ibv_ack_cq_events, "IBVERBS_1.1");

/// `ibv_get_async_event`: 0, or -1 with errno.
///
/// # Safety
/// `event` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ibv_get_async_event(
    ctx: *mut crate::abi::ibv_context,
    event: *mut crate::abi::ibv_async_event,
) -> c_int {
    ffi::minus1("ibv_get_async_event", move || {
        let got = if event.is_null() {
            Err(libc::EINVAL)
        } else {
            crate::cq::get_async_event(ctx)
        };
        match got {
            Ok(ev) => {
                // SAFETY: the caller's contract; not NULL.
                let _ = unsafe { ffi::write(event, ev) };
                0
            }
            Err(e) => {
                set_errno(e);
                -1
            }
        }
    })
}
default_version!(ibv_get_async_event, "IBVERBS_1.1");

/// `ibv_ack_async_event`: nothing to release (uroce's objects do not wait for it).
#[no_mangle]
pub extern "C" fn ibv_ack_async_event(_event: *mut crate::abi::ibv_async_event) {
    ffi::void("ibv_ack_async_event", move || {})
}
default_version!(ibv_ack_async_event, "IBVERBS_1.1");

// ---------------------------------------------------------------------------------------
// Shared receive queues (`srq.rs`, safe code).

/// `ibv_create_srq`: `attr->attr` is updated with what was granted.
///
/// # Safety
/// `attr` is NULL or points at a readable and writable `struct ibv_srq_init_attr` that
/// nothing else touches during the call.
#[no_mangle]
pub unsafe extern "C" fn ibv_create_srq(
    pd: *mut crate::abi::ibv_pd,
    attr: *mut crate::srq::ibv_srq_init_attr,
) -> *mut crate::abi::ibv_srq {
    ffi::ptr("ibv_create_srq", move || {
        // SAFETY: the caller's contract.
        let attr = unsafe { ffi::in_out(attr) };
        crate::srq::create_srq(pd, attr)
    })
}
default_version!(ibv_create_srq, "IBVERBS_1.1");

/// `ibv_modify_srq`: 0 or the errno.
///
/// # Safety
/// `attr` is NULL or points at a readable `struct ibv_srq_attr`.
#[no_mangle]
pub unsafe extern "C" fn ibv_modify_srq(
    srq: *mut crate::abi::ibv_srq,
    attr: *mut crate::abi::ibv_srq_attr,
    mask: c_int,
) -> c_int {
    ffi::errno("ibv_modify_srq", move || {
        // SAFETY: the caller's contract.
        let attr = unsafe { ffi::read(attr) }.ok();
        crate::srq::modify_srq(srq, attr, mask)
    })
}
default_version!(ibv_modify_srq, "IBVERBS_1.1");

/// `ibv_query_srq`: 0 or the errno.
///
/// # Safety
/// `attr` is NULL or points at a writable `struct ibv_srq_attr`.
#[no_mangle]
pub unsafe extern "C" fn ibv_query_srq(
    srq: *mut crate::abi::ibv_srq,
    attr: *mut crate::abi::ibv_srq_attr,
) -> c_int {
    ffi::errno("ibv_query_srq", move || {
        if attr.is_null() {
            return libc::EINVAL;
        }
        match crate::srq::query_srq(srq) {
            // SAFETY: the caller's contract; not NULL.
            Ok(a) => unsafe { ffi::write(attr, a) }.map_or_else(|e| e, |()| 0),
            Err(e) => e,
        }
    })
}
default_version!(ibv_query_srq, "IBVERBS_1.1");

/// `ibv_destroy_srq`.
#[no_mangle]
pub extern "C" fn ibv_destroy_srq(srq: *mut crate::abi::ibv_srq) -> c_int {
    ffi::errno("ibv_destroy_srq", move || crate::srq::destroy_srq(srq))
}
default_version!(ibv_destroy_srq, "IBVERBS_1.1");

/// `ibv_context_ops.post_srq_recv` (the inline `ibv_post_srq_recv`), as [`post_recv`].
///
/// # Safety
/// As verbs.h has `ibv_post_srq_recv`'s arguments: `srq` NULL or readable, `wr` a valid
/// list (see `ffi::WrList::new`), `bad` NULL or writable.
pub(crate) unsafe extern "C" fn post_srq_recv(
    srq: *mut crate::abi::ibv_srq,
    wr: *mut crate::abi::ibv_recv_wr,
    bad: *mut *mut crate::abi::ibv_recv_wr,
) -> c_int {
    ffi::errno("post_srq_recv", move || {
        // SAFETY: the caller's contract (the inline ibv_post_srq_recv read
        // `srq->context` already).
        let ctx = unsafe { ffi::srq_context(srq) };
        // SAFETY: as above.
        let list = unsafe { ffi::WrList::new(wr, bad) };
        crate::srq::post_srq_recv(ctx, srq, list)
    })
}

// ---------------------------------------------------------------------------------------
// Protection domains and memory regions (`resources.rs`, safe code).

/// `ibv_alloc_pd`.
#[no_mangle]
pub extern "C" fn ibv_alloc_pd(ctx: *mut crate::abi::ibv_context) -> *mut crate::abi::ibv_pd {
    ffi::ptr("ibv_alloc_pd", move || crate::resources::alloc_pd(ctx))
}
default_version!(ibv_alloc_pd, "IBVERBS_1.1");

/// `ibv_dealloc_pd`.
#[no_mangle]
pub extern "C" fn ibv_dealloc_pd(pd: *mut crate::abi::ibv_pd) -> c_int {
    ffi::errno("ibv_dealloc_pd", move || crate::resources::dealloc_pd(pd))
}
default_version!(ibv_dealloc_pd, "IBVERBS_1.1");

/// `ibv_reg_mr`: the caller's memory, in place.
///
/// # Safety
/// `addr` is valid for reads and writes of `len` bytes until `ibv_dereg_mr` succeeds
/// (see `ffi::ProgramMemory::new`).
#[no_mangle]
pub unsafe extern "C" fn ibv_reg_mr(
    pd: *mut crate::abi::ibv_pd,
    addr: *mut c_void,
    len: usize,
    access: c_int,
) -> *mut crate::abi::ibv_mr {
    ffi::ptr("ibv_reg_mr", move || {
        // SAFETY: this function's contract is ProgramMemory::new's.
        let mem = unsafe { ffi::ProgramMemory::new(addr, len) };
        crate::resources::reg_mr(pd, mem, addr as u64, access as std::ffi::c_uint)
    })
}
default_version!(ibv_reg_mr, "IBVERBS_1.1");

/// `ibv_reg_mr_iova`: only `iova == addr` (EOPNOTSUPP otherwise).
///
/// # Safety
/// As [`ibv_reg_mr`].
#[no_mangle]
pub unsafe extern "C" fn ibv_reg_mr_iova(
    pd: *mut crate::abi::ibv_pd,
    addr: *mut c_void,
    len: usize,
    iova: u64,
    access: c_int,
) -> *mut crate::abi::ibv_mr {
    ffi::ptr("ibv_reg_mr_iova", move || {
        // SAFETY: this function's contract is ProgramMemory::new's.
        let mem = unsafe { ffi::ProgramMemory::new(addr, len) };
        crate::resources::reg_mr(pd, mem, iova, access as std::ffi::c_uint)
    })
}
default_version!(ibv_reg_mr_iova, "IBVERBS_1.7");

/// `ibv_reg_mr_iova2` (what the `ibv_reg_mr` macro calls with optional access flags).
///
/// # Safety
/// As [`ibv_reg_mr`].
#[no_mangle]
pub unsafe extern "C" fn ibv_reg_mr_iova2(
    pd: *mut crate::abi::ibv_pd,
    addr: *mut c_void,
    len: usize,
    iova: u64,
    access: std::ffi::c_uint,
) -> *mut crate::abi::ibv_mr {
    ffi::ptr("ibv_reg_mr_iova2", move || {
        // SAFETY: this function's contract is ProgramMemory::new's.
        let mem = unsafe { ffi::ProgramMemory::new(addr, len) };
        crate::resources::reg_mr(pd, mem, iova, access)
    })
}
default_version!(ibv_reg_mr_iova2, "IBVERBS_1.8");

/// `ibv_rereg_mr`: 0, or an `IBV_REREG_MR_ERR_*` code with errno set (see
/// `resources::rereg_mr`). On success the caller's `ibv_mr` has the new `pd`
/// (`IBV_REREG_MR_CHANGE_PD`), `addr` and `length` (`IBV_REREG_MR_CHANGE_TRANSLATION`),
/// and the new keys.
///
/// # Safety
/// `mr` is NULL or a region this library returned; with
/// `IBV_REREG_MR_CHANGE_TRANSLATION`, `addr` and `length` are as `ibv_reg_mr`'s: valid
/// until `ibv_dereg_mr` (or another rereg) of `mr` succeeds.
#[no_mangle]
pub unsafe extern "C" fn ibv_rereg_mr(
    mr: *mut crate::abi::ibv_mr,
    flags: c_int,
    pd: *mut crate::abi::ibv_pd,
    addr: *mut c_void,
    length: usize,
    access: c_int,
) -> c_int {
    use crate::resources as r;
    let fail = |(code, errno): (c_int, c_int)| {
        set_errno(errno);
        code
    };
    ffi::call(
        "ibv_rereg_mr",
        || fail((r::REREG_ERR_CMD, EIO)),
        move || {
            let translation = flags & r::REREG_CHANGE_TRANSLATION != 0;
            if !r::rereg_input_ok(flags, !addr.is_null() && length != 0, access) {
                return fail((r::REREG_ERR_INPUT, libc::EINVAL));
            }
            let mem = match translation {
                // SAFETY: this function's contract for a new translation.
                true => unsafe { ffi::ProgramMemory::new(addr, length) },
                false => match r::mr_range(mr) {
                    // SAFETY: the region's own bytes, registered through ibv_reg_mr (or
                    // an earlier rereg) under its contract, which holds until
                    // ibv_dereg_mr of `mr` succeeds: the new registration is `mr`'s.
                    Some((a, l)) => unsafe { ffi::ProgramMemory::new(a as *mut c_void, l) },
                    None => return fail((r::REREG_ERR_INPUT, libc::EINVAL)),
                },
            };
            match r::rereg_mr(mr, flags, pd, mem, access) {
                Ok((lkey, rkey)) => {
                    // SAFETY: `mr` is a live region of ours (rereg_mr found it), a C
                    // object this library allocated; the program does not write it
                    // during the call.
                    let m = unsafe { &mut *mr };
                    if flags & r::REREG_CHANGE_PD != 0 {
                        m.pd = pd;
                    }
                    if translation {
                        m.addr = addr;
                        m.length = length;
                    }
                    m.lkey = lkey;
                    m.rkey = rkey;
                    m.handle = lkey;
                    0
                }
                Err(e) => fail(e),
            }
        },
    )
}
default_version!(ibv_rereg_mr, "IBVERBS_1.1");

/// `ibv_dereg_mr`.
#[no_mangle]
pub extern "C" fn ibv_dereg_mr(mr: *mut crate::abi::ibv_mr) -> c_int {
    ffi::errno("ibv_dereg_mr", move || crate::resources::dereg_mr(mr))
}
default_version!(ibv_dereg_mr, "IBVERBS_1.1");

// ---------------------------------------------------------------------------------------
// Address handles (`ah.rs`, safe code).

/// `ibv_create_ah`.
///
/// # Safety
/// `attr` is NULL or points at a readable `struct ibv_ah_attr`.
#[no_mangle]
pub unsafe extern "C" fn ibv_create_ah(
    pd: *mut crate::abi::ibv_pd,
    attr: *mut crate::abi::ibv_ah_attr,
) -> *mut crate::abi::ibv_ah {
    ffi::ptr("ibv_create_ah", move || {
        // SAFETY: the caller's contract.
        let attr = unsafe { ffi::read(attr) }.ok();
        crate::ah::create_ah(pd, attr)
    })
}
default_version!(ibv_create_ah, "IBVERBS_1.1");

/// `ibv_destroy_ah`.
#[no_mangle]
pub extern "C" fn ibv_destroy_ah(ah: *mut crate::abi::ibv_ah) -> c_int {
    ffi::errno("ibv_destroy_ah", move || crate::ah::destroy_ah(ah))
}
default_version!(ibv_destroy_ah, "IBVERBS_1.1");

/// `ibv_init_ah_from_wc`: 0, or -1 with errno.
///
/// # Safety
/// `wc` and `grh` (40 bytes) are NULL or readable, `ah_attr` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ibv_init_ah_from_wc(
    ctx: *mut crate::abi::ibv_context,
    port_num: u8,
    wc: *mut crate::abi::ibv_wc,
    grh: *mut u8,
    ah_attr: *mut crate::abi::ibv_ah_attr,
) -> c_int {
    ffi::minus1("ibv_init_ah_from_wc", move || {
        // SAFETY: the caller's contract.
        let (w, g) = unsafe { (ffi::read(wc).ok(), ffi::read(grh.cast::<[u8; 40]>()).ok()) };
        let got = if ah_attr.is_null() {
            Err(libc::EINVAL)
        } else {
            crate::ah::init_ah_from_wc(ctx, port_num, w, g)
        };
        match got {
            Ok(a) => {
                // SAFETY: the caller's contract; not NULL.
                let _ = unsafe { ffi::write(ah_attr, a) };
                0
            }
            Err(e) => {
                set_errno(e);
                -1
            }
        }
    })
}
default_version!(ibv_init_ah_from_wc, "IBVERBS_1.1");

/// `ibv_create_ah_from_wc`.
///
/// # Safety
/// `wc` and `grh` (40 bytes) are NULL or readable.
#[no_mangle]
pub unsafe extern "C" fn ibv_create_ah_from_wc(
    pd: *mut crate::abi::ibv_pd,
    wc: *mut crate::abi::ibv_wc,
    grh: *mut u8,
    port_num: u8,
) -> *mut crate::abi::ibv_ah {
    ffi::ptr("ibv_create_ah_from_wc", move || {
        // SAFETY: the caller's contract.
        let (w, g) = unsafe { (ffi::read(wc).ok(), ffi::read(grh.cast::<[u8; 40]>()).ok()) };
        crate::ah::create_ah_from_wc(pd, w, g, port_num)
    })
}
default_version!(ibv_create_ah_from_wc, "IBVERBS_1.1");

// ---------------------------------------------------------------------------------------
// Devices and contexts (`device.rs`, safe code).

/// `ibv_get_device_list`.
///
/// # Safety
/// `num_devices` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ibv_get_device_list(
    num_devices: *mut c_int,
) -> *mut *mut crate::abi::ibv_device {
    ffi::ptr("ibv_get_device_list", move || {
        let devices = match crate::device::get_device_list() {
            Ok(d) => d,
            Err(e) => return ffi::null_with(e),
        };
        let arr = ffi::calloc_list(&devices);
        if arr.is_null() {
            return ffi::null_with(libc::ENOMEM);
        }
        // SAFETY: the caller's contract.
        unsafe { ffi::write_opt(num_devices, devices.len() as c_int) };
        arr
    })
}
default_version!(ibv_get_device_list, "IBVERBS_1.1");

/// `ibv_free_device_list`: the array goes; the devices stay (see `device.rs`).
///
/// # Safety
/// `list` is NULL or came from [`ibv_get_device_list`] and is freed once.
#[no_mangle]
pub unsafe extern "C" fn ibv_free_device_list(list: *mut *mut crate::abi::ibv_device) {
    ffi::void("ibv_free_device_list", move || {
        // SAFETY: the caller's contract; ibv_get_device_list's arrays are calloc_list's.
        unsafe { ffi::free_list(list) };
    })
}
default_version!(ibv_free_device_list, "IBVERBS_1.1");

/// `ibv_get_device_name`.
#[no_mangle]
pub extern "C" fn ibv_get_device_name(dev: *mut crate::abi::ibv_device) -> *const c_char {
    let failed = || ffi::null_with::<c_char>(EIO).cast_const();
    ffi::call("ibv_get_device_name", failed, || {
        crate::device::get_device_name(dev)
    })
}
default_version!(ibv_get_device_name, "IBVERBS_1.1");

/// `ibv_get_device_guid`.
#[no_mangle]
pub extern "C" fn ibv_get_device_guid(dev: *mut crate::abi::ibv_device) -> u64 {
    ffi::call(
        "ibv_get_device_guid",
        || 0,
        || crate::device::get_device_guid(dev),
    )
}
default_version!(ibv_get_device_guid, "IBVERBS_1.1");

/// `ibv_open_device`.
#[no_mangle]
pub extern "C" fn ibv_open_device(
    dev: *mut crate::abi::ibv_device,
) -> *mut crate::abi::ibv_context {
    ffi::ptr("ibv_open_device", move || crate::device::open_device(dev))
}
default_version!(ibv_open_device, "IBVERBS_1.1");

/// `ibv_close_device`: 0, or -1 with errno EINVAL for a context that is not open.
#[no_mangle]
pub extern "C" fn ibv_close_device(ctx: *mut crate::abi::ibv_context) -> c_int {
    ffi::minus1("ibv_close_device", move || crate::device::close_device(ctx))
}
default_version!(ibv_close_device, "IBVERBS_1.1");

/// `ibv_query_device`.
///
/// # Safety
/// `attr` is NULL or points at a writable `struct ibv_device_attr`.
#[no_mangle]
pub unsafe extern "C" fn ibv_query_device(
    ctx: *mut crate::abi::ibv_context,
    attr: *mut crate::abi::ibv_device_attr,
) -> c_int {
    ffi::errno("ibv_query_device", move || {
        // SAFETY: the caller's contract.
        let written = crate::device::query_device(ctx).and_then(|a| unsafe { ffi::write(attr, a) });
        written.err().unwrap_or(0)
    })
}
default_version!(ibv_query_device, "IBVERBS_1.1");

/// `verbs_context.query_port`, what the inline `ibv_query_port` calls: the first `len`
/// bytes of the port's attributes.
///
/// # Safety
/// `attr` is NULL or points at `len` writable bytes (verbs.h passes sizeof).
pub(crate) unsafe extern "C" fn query_port_ex(
    ctx: *mut crate::abi::ibv_context,
    port: u8,
    attr: *mut crate::abi::ibv_port_attr,
    len: usize,
) -> c_int {
    ffi::errno("query_port_ex", move || {
        let written = crate::device::query_port(ctx, port).and_then(|a| {
            // SAFETY: the caller's contract: `len` writable bytes, all of them cleared
            // (rdma-core clears the caller's whole structure), the rdma-core 44 fields
            // copied.
            unsafe { ffi::write_prefix(attr.cast(), &a.attr, len) }?;
            let at = crate::abi::PORT_ATTR_ACTIVE_SPEED_EX;
            if len >= at + 4 {
                // SAFETY: `attr` has `len` ≥ at + 4 writable bytes; no alignment is
                // assumed.
                unsafe {
                    attr.cast::<u8>()
                        .add(at)
                        .cast::<u32>()
                        .write_unaligned(a.active_speed_ex)
                };
            }
            Ok(())
        });
        written.err().unwrap_or(0)
    })
}

/// `ibv_query_port` as exported (`struct _compat_ibv_port_attr`, without
/// `port_cap_flags2`); the inline `ibv_query_port` of verbs.h calls [`query_port_ex`].
///
/// # Safety
/// `attr` is NULL or points at a writable `struct _compat_ibv_port_attr`.
#[no_mangle]
pub unsafe extern "C" fn ibv_query_port(
    ctx: *mut crate::abi::ibv_context,
    port: u8,
    attr: *mut c_void,
) -> c_int {
    ffi::errno("ibv_query_port", move || {
        // SAFETY: forwarded with the compat structure's size.
        unsafe { query_port_ex(ctx, port, attr.cast(), crate::abi::COMPAT_PORT_ATTR_SIZE) }
    })
}
default_version!(ibv_query_port, "IBVERBS_1.1");

/// `verbs_context.query_device_ex`, what the inline `ibv_query_device_ex` calls.
///
/// # Safety
/// `input` is NULL or points at a `struct ibv_query_device_ex_input` (its `comp_mask`, a
/// u32, first); `attr` is NULL or points at `len` writable bytes.
pub(crate) unsafe extern "C" fn query_device_ex(
    ctx: *mut crate::abi::ibv_context,
    input: *const c_void,
    attr: *mut crate::abi::ibv_device_attr_ex,
    len: usize,
) -> c_int {
    ffi::errno("query_device_ex", move || {
        // SAFETY: the caller's contract.
        let comp_mask = unsafe { ffi::read(input.cast::<u32>()) }.ok();
        let written = crate::device::query_device_ex(ctx, comp_mask).and_then(|ex| {
            // SAFETY: the caller's contract.
            unsafe { ffi::write_prefix(attr.cast(), &ex, len) }
        });
        written.err().unwrap_or(0)
    })
}

/// `ibv_query_gid`: 0 (an unused entry reads as zeros), or -1 with errno.
///
/// # Safety
/// `gid` is NULL or points at a writable `union ibv_gid`.
#[no_mangle]
pub unsafe extern "C" fn ibv_query_gid(
    ctx: *mut crate::abi::ibv_context,
    port: u8,
    index: c_int,
    gid: *mut crate::abi::ibv_gid,
) -> c_int {
    ffi::minus1("ibv_query_gid", move || {
        let written = crate::device::query_gid(ctx, port, index).and_then(|g| {
            // SAFETY: the caller's contract.
            unsafe { ffi::write(gid, g) }
        });
        match written {
            Ok(()) => 0,
            Err(e) => {
                set_errno(e);
                -1
            }
        }
    })
}
default_version!(ibv_query_gid, "IBVERBS_1.1");

/// `ibv_query_gid_type` (rdma-core's driver.h): 0, or -1 with errno.
///
/// # Safety
/// `gid_type` is NULL or points at a writable int.
#[no_mangle]
pub unsafe extern "C" fn ibv_query_gid_type(
    ctx: *mut crate::abi::ibv_context,
    port: u8,
    index: u32,
    gid_type: *mut c_int,
) -> c_int {
    ffi::minus1("ibv_query_gid_type", move || {
        let written = crate::device::query_gid_type(ctx, port, index).and_then(|t| {
            // SAFETY: the caller's contract.
            unsafe { ffi::write(gid_type, t) }
        });
        match written {
            Ok(()) => 0,
            Err(e) => {
                set_errno(e);
                -1
            }
        }
    })
}
default_version!(ibv_query_gid_type, "IBVERBS_PRIVATE_34");

/// `_ibv_query_gid_ex` (behind the inline `ibv_query_gid_ex`): 0 or an errno value.
///
/// # Safety
/// `entry` is NULL or points at `entry_size` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn _ibv_query_gid_ex(
    ctx: *mut crate::abi::ibv_context,
    port: u32,
    index: u32,
    entry: *mut crate::abi::ibv_gid_entry,
    flags: u32,
    entry_size: usize,
) -> c_int {
    ffi::errno("_ibv_query_gid_ex", move || {
        let written =
            crate::device::query_gid_ex(ctx, port, index, flags, entry_size).and_then(|e| {
                // SAFETY: the caller's contract; `entry_size` was checked to be at least
                // size_of::<ibv_gid_entry>().
                unsafe { ffi::write(entry, e) }
            });
        written.err().unwrap_or(0)
    })
}
default_version!(_ibv_query_gid_ex, "IBVERBS_1.11");

/// `_ibv_query_gid_table` (behind the inline `ibv_query_gid_table`): the number of
/// entries written to `entries` (each `entry_size` bytes apart), or a negative errno.
///
/// # Safety
/// `entries` is NULL or points at `max_entries` writable entries of `entry_size` bytes.
#[no_mangle]
pub unsafe extern "C" fn _ibv_query_gid_table(
    ctx: *mut crate::abi::ibv_context,
    entries: *mut crate::abi::ibv_gid_entry,
    max_entries: usize,
    flags: u32,
    entry_size: usize,
) -> isize {
    ffi::call(
        "_ibv_query_gid_table",
        || -(EIO as isize),
        move || match crate::device::query_gid_table(ctx, max_entries, flags, entry_size) {
            Ok(table) if !table.is_empty() && entries.is_null() => -(libc::EINVAL as isize),
            Ok(table) => {
                for (i, e) in table.iter().enumerate() {
                    // SAFETY: i < table.len() ≤ max_entries, so the entry at i times
                    // `entry_size` (≥ its size, checked) is the caller's, writable; no
                    // alignment is assumed for a stride the caller chose.
                    unsafe {
                        entries
                            .cast::<u8>()
                            .add(i * entry_size)
                            .cast::<crate::abi::ibv_gid_entry>()
                            .write_unaligned(*e)
                    };
                }
                table.len() as isize
            }
            Err(e) => -(e as isize),
        },
    )
}
default_version!(_ibv_query_gid_table, "IBVERBS_1.11");

/// `ibv_query_pkey`: 0, or -1 with errno.
///
/// # Safety
/// `pkey` is NULL or points at a writable `__be16`.
#[no_mangle]
pub unsafe extern "C" fn ibv_query_pkey(
    ctx: *mut crate::abi::ibv_context,
    port: u8,
    index: c_int,
    pkey: *mut u16,
) -> c_int {
    ffi::minus1("ibv_query_pkey", move || {
        let written = crate::device::query_pkey(ctx, port, index).and_then(|k| {
            // SAFETY: the caller's contract.
            unsafe { ffi::write(pkey, k) }
        });
        match written {
            Ok(()) => 0,
            Err(e) => {
                set_errno(e);
                -1
            }
        }
    })
}
default_version!(ibv_query_pkey, "IBVERBS_1.1");

// ---------------------------------------------------------------------------------------
// QP 1 for uroce's librdmacm (`gsi.rs`, safe code), under the private version node.

/// `uroce_gsi_open`: a descriptor readable while MADs wait, or a negative errno.
///
/// # Safety
/// `ctx` is a context from `ibv_open_device`, or any pointer (refused with EINVAL).
#[no_mangle]
pub unsafe extern "C" fn uroce_gsi_open(ctx: *mut crate::abi::ibv_context) -> c_int {
    ffi::neg_errno("uroce_gsi_open", move || crate::gsi::gsi_open(ctx))
}
default_version!(uroce_gsi_open, "UROCE_PRIVATE_1");

/// `uroce_gsi_send`: 0 (sent or held), or an errno.
///
/// # Safety
/// `ctx` as for [`uroce_gsi_open`]; `gid` is NULL or points at 16 readable bytes, `mad`
/// NULL or at `len`.
#[no_mangle]
pub unsafe extern "C" fn uroce_gsi_send(
    ctx: *mut crate::abi::ibv_context,
    gid: *const u8,
    remote_qpn: u32,
    remote_qkey: u32,
    mad: *const u8,
    len: usize,
) -> c_int {
    ffi::errno("uroce_gsi_send", move || {
        // SAFETY: the caller's contract.
        let (gid, mad) = unsafe { (ffi::read(gid.cast::<[u8; 16]>()).ok(), ffi::bytes(mad, len)) };
        crate::gsi::gsi_send(ctx, gid, remote_qpn, remote_qkey, mad)
    })
}
default_version!(uroce_gsi_send, "UROCE_PRIVATE_1");

/// `uroce_gsi_recv`: the oldest MAD QP 1 received to `mad`, its sender's GID to `gid`
/// and QP to `src_qp`; the MAD's length, 0 when none waits, or a negative errno.
///
/// # Safety
/// `ctx` as for [`uroce_gsi_open`]; `gid` is NULL or points at 16 writable bytes,
/// `src_qp` NULL or at a writable (maybe unaligned) u32, `mad` NULL or at `len` writable
/// bytes.
#[no_mangle]
pub unsafe extern "C" fn uroce_gsi_recv(
    ctx: *mut crate::abi::ibv_context,
    gid: *mut u8,
    src_qp: *mut u32,
    mad: *mut u8,
    len: usize,
) -> c_int {
    use uroce::wire::mad::MAD_LEN;
    ffi::neg_errno("uroce_gsi_recv", move || {
        if gid.is_null() || src_qp.is_null() || mad.is_null() || len < MAD_LEN {
            return -libc::EINVAL;
        }
        let m = match crate::gsi::gsi_recv(ctx) {
            Ok(Some(m)) => m,
            Ok(None) => return 0,
            Err(e) => return -e,
        };
        // SAFETY: the caller's contract; none is NULL, and `mad` has room for MAD_LEN.
        unsafe {
            let _ = ffi::write(gid.cast::<[u8; 16]>(), m.gid);
            let _ = ffi::write_unaligned(src_qp, m.src_qp);
            if let Some(out) = ffi::out_array(mad, MAD_LEN) {
                for (o, b) in out.iter_mut().zip(m.mad) {
                    o.write(b);
                }
            }
        }
        MAD_LEN as c_int
    })
}
default_version!(uroce_gsi_recv, "UROCE_PRIVATE_1");

/// `uroce_gsi_resolve`: 0, or an errno.
///
/// # Safety
/// `ctx` as for [`uroce_gsi_open`]; `gid` is NULL or points at 16 readable bytes.
#[no_mangle]
pub unsafe extern "C" fn uroce_gsi_resolve(
    ctx: *mut crate::abi::ibv_context,
    gid: *const u8,
    timeout_ms: c_int,
) -> c_int {
    ffi::errno("uroce_gsi_resolve", move || {
        // SAFETY: the caller's contract.
        let gid = unsafe { ffi::read(gid.cast::<[u8; 16]>()) }.ok();
        crate::gsi::gsi_resolve(ctx, gid, timeout_ms)
    })
}
default_version!(uroce_gsi_resolve, "UROCE_PRIVATE_1");

/// `uroce_gsi_listen`: connection requests for `service_id` come to this process (`on`
/// non-zero) or no longer; 0, or an errno (EADDRINUSE: another process on the host
/// listens on it, through `uroce daemon`).
///
/// # Safety
/// `ctx` as for [`uroce_gsi_open`].
#[no_mangle]
pub unsafe extern "C" fn uroce_gsi_listen(
    ctx: *mut crate::abi::ibv_context,
    service_id: u64,
    on: c_int,
) -> c_int {
    ffi::errno("uroce_gsi_listen", move || {
        crate::gsi::gsi_listen(ctx, service_id, on != 0)
    })
}
default_version!(uroce_gsi_listen, "UROCE_PRIVATE_1");
