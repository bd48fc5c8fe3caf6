//! The ibverbs calls this library makes, found at run time in the `libibverbs.so.1` the
//! process has loaded (uroce's, crates/uroce-verbs), as Debian's librdmacm calls the
//! libibverbs it is linked with.
//!
//! They are looked up with `dlvsym` by name and version node rather than linked: a link
//! against uroce's libibverbs at build time would need it built first, and a Rust
//! dependency on that crate would put a second copy of its engine (and every `ibv_*`
//! export) in this library. The QP 1 entry points (`uroce_gsi_*`, node
//! `UROCE_PRIVATE_1`) exist only in uroce's library: without them the loaded
//! libibverbs is another one (Debian's, talking to a kernel uroce is not), and every call
//! that needs a device fails with ENODEV.

use std::ffi::{c_int, c_void, CStr};
use std::sync::OnceLock;

use crate::verbs_abi::{
    ibv_comp_channel, ibv_context, ibv_cq, ibv_device, ibv_device_attr, ibv_gid, ibv_pd,
    ibv_port_attr, ibv_qp, ibv_qp_attr, ibv_qp_init_attr,
};

macro_rules! verbs_table {
    ($($field:ident = $name:literal @ $node:literal : fn($($arg:ty),*) $(-> $ret:ty)?;)*) => {
        /// The entry points, resolved once.
        #[allow(non_snake_case)]
        pub struct Verbs {
            $(pub $field: unsafe extern "C" fn($($arg),*) $(-> $ret)?,)*
        }

        impl Verbs {
            /// Every entry point from `lib` (a `dlopen` handle); the first name missing.
            fn resolve(lib: *mut c_void) -> Result<Self, &'static str> {
                Ok(Self {
                    $($field: {
                        let name = concat!($name, "\0");
                        let node = concat!($node, "\0");
                        // SAFETY: `lib` is a live handle; both strings are NUL-terminated.
                        let p = unsafe {
                            libc::dlvsym(lib, name.as_ptr().cast(), node.as_ptr().cast())
                        };
                        if p.is_null() {
                            return Err($name);
                        }
                        // SAFETY: the symbol of that name and version has this C
                        // signature (verbs.h, or src/gsi.rs of uroce-verbs for ours).
                        unsafe {
                            std::mem::transmute::<
                                *mut c_void,
                                unsafe extern "C" fn($($arg),*) $(-> $ret)?,
                            >(p)
                        }
                    },)*
                })
            }
        }
    };
}

verbs_table! {
    get_device_list = "ibv_get_device_list" @ "IBVERBS_1.1": fn(*mut c_int) -> *mut *mut ibv_device;
    open_device = "ibv_open_device" @ "IBVERBS_1.1": fn(*mut ibv_device) -> *mut ibv_context;
    query_device = "ibv_query_device" @ "IBVERBS_1.1": fn(*mut ibv_context, *mut ibv_device_attr) -> c_int;
    query_port = "ibv_query_port" @ "IBVERBS_1.1": fn(*mut ibv_context, u8, *mut ibv_port_attr) -> c_int;
    query_gid = "ibv_query_gid" @ "IBVERBS_1.1": fn(*mut ibv_context, u8, c_int, *mut ibv_gid) -> c_int;
    alloc_pd = "ibv_alloc_pd" @ "IBVERBS_1.1": fn(*mut ibv_context) -> *mut ibv_pd;
    create_comp_channel = "ibv_create_comp_channel" @ "IBVERBS_1.0": fn(*mut ibv_context) -> *mut ibv_comp_channel;
    destroy_comp_channel = "ibv_destroy_comp_channel" @ "IBVERBS_1.0": fn(*mut ibv_comp_channel) -> c_int;
    create_cq = "ibv_create_cq" @ "IBVERBS_1.1": fn(*mut ibv_context, c_int, *mut c_void, *mut ibv_comp_channel, c_int) -> *mut ibv_cq;
    destroy_cq = "ibv_destroy_cq" @ "IBVERBS_1.1": fn(*mut ibv_cq) -> c_int;
    create_qp = "ibv_create_qp" @ "IBVERBS_1.1": fn(*mut ibv_pd, *mut ibv_qp_init_attr) -> *mut ibv_qp;
    modify_qp = "ibv_modify_qp" @ "IBVERBS_1.1": fn(*mut ibv_qp, *mut ibv_qp_attr, c_int) -> c_int;
    destroy_qp = "ibv_destroy_qp" @ "IBVERBS_1.1": fn(*mut ibv_qp) -> c_int;
    gsi_open = "uroce_gsi_open" @ "UROCE_PRIVATE_1": fn(*mut ibv_context) -> c_int;
    gsi_send = "uroce_gsi_send" @ "UROCE_PRIVATE_1": fn(*mut ibv_context, *const u8, u32, u32, *const u8, usize) -> c_int;
    gsi_recv = "uroce_gsi_recv" @ "UROCE_PRIVATE_1": fn(*mut ibv_context, *mut u8, *mut u32, *mut u8, usize) -> c_int;
    gsi_resolve = "uroce_gsi_resolve" @ "UROCE_PRIVATE_1": fn(*mut ibv_context, *const u8, c_int) -> c_int;
}

/// The soname of the library the entry points come from.
const LIBIBVERBS: &CStr = c"libibverbs.so.1";

/// uroce's libibverbs.so.1 entry points, or ENODEV when the process has another
/// libibverbs (or none can be loaded).
pub fn verbs() -> Result<&'static Verbs, c_int> {
    static VERBS: OnceLock<Result<Verbs, &'static str>> = OnceLock::new();
    VERBS
        .get_or_init(|| {
            // The library the program was linked with (loaded already), else load it.
            // SAFETY: dlopen with a NUL-terminated name; a null return is checked.
            let mut lib =
                unsafe { libc::dlopen(LIBIBVERBS.as_ptr(), libc::RTLD_NOW | libc::RTLD_NOLOAD) };
            if lib.is_null() {
                // SAFETY: as above.
                lib = unsafe {
                    libc::dlopen(LIBIBVERBS.as_ptr(), libc::RTLD_NOW | libc::RTLD_GLOBAL)
                };
            }
            if lib.is_null() {
                return Err("libibverbs.so.1");
            }
            Verbs::resolve(lib)
        })
        .as_ref()
        .map_err(|_| libc::ENODEV)
}
