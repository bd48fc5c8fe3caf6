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
//!
//! This module is the crate's boundary with that library: the rest of the crate calls
//! the safe methods of [`Verbs`], whose pointer arguments are, by the crate's own
//! invariant, objects of the loaded libibverbs (contexts it opened, and the PDs, CQs,
//! completion channels and QPs of an id, made by it or handed to it by the program with
//! `rdma_create_qp` / `rdma_create_ep`, which the program keeps alive as `rdma_cma.h`
//! requires) or null where `verbs.h` allows it. The fields, the raw entry points, are
//! private to this module.

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
            $($field: unsafe extern "C" fn($($arg),*) $(-> $ret)?,)*
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
    gsi_listen = "uroce_gsi_listen" @ "UROCE_PRIVATE_1": fn(*mut ibv_context, u64, c_int) -> c_int;
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

impl Verbs {
    /// `ibv_get_device_list`: the devices (never freed: the contexts keep them).
    pub fn device_list(&self) -> Vec<*mut ibv_device> {
        let mut n: c_int = 0;
        // SAFETY: `n` is a live int.
        let list = unsafe { (self.get_device_list)(&mut n) };
        if list.is_null() {
            return Vec::new();
        }
        (0..usize::try_from(n).unwrap_or(0))
            // SAFETY: the list holds `n` device pointers.
            .map(|i| unsafe { *list.add(i) })
            .collect()
    }

    /// `ibv_open_device` of a device of [`Verbs::device_list`].
    pub fn open_device(&self, dev: *mut ibv_device) -> *mut ibv_context {
        // SAFETY: a device of the list (the module's invariant).
        unsafe { (self.open_device)(dev) }
    }

    /// `ibv_query_gid` of port 1.
    pub fn query_gid(&self, ctx: *mut ibv_context, index: c_int) -> Option<[u8; 16]> {
        let mut gid = ibv_gid { raw: [0; 16] };
        // SAFETY: an open context and a live ibv_gid.
        match unsafe { (self.query_gid)(ctx, 1, index, &mut gid) } {
            0 => Some(gid.raw),
            _ => None,
        }
    }

    /// `ibv_query_port` of port 1.
    pub fn query_port(&self, ctx: *mut ibv_context) -> Option<ibv_port_attr> {
        let mut port: ibv_port_attr = crate::ffi::zeroed();
        // SAFETY: an open context, into a live local of the size it expects.
        (unsafe { (self.query_port)(ctx, 1, &mut port) } == 0).then_some(port)
    }

    /// `ibv_query_device`.
    pub fn query_device(&self, ctx: *mut ibv_context) -> Option<ibv_device_attr> {
        let mut attr: ibv_device_attr = crate::ffi::zeroed();
        // SAFETY: an open context, into a live local.
        (unsafe { (self.query_device)(ctx, &mut attr) } == 0).then_some(attr)
    }

    /// `ibv_alloc_pd`.
    pub fn alloc_pd(&self, ctx: *mut ibv_context) -> *mut ibv_pd {
        // SAFETY: an open context.
        unsafe { (self.alloc_pd)(ctx) }
    }

    /// `ibv_create_comp_channel`.
    pub fn create_comp_channel(&self, ctx: *mut ibv_context) -> *mut ibv_comp_channel {
        // SAFETY: an open context.
        unsafe { (self.create_comp_channel)(ctx) }
    }

    /// `ibv_destroy_comp_channel`.
    pub fn destroy_comp_channel(&self, ch: *mut ibv_comp_channel) -> c_int {
        // SAFETY: a channel of the loaded library, destroyed once (callers clear it).
        unsafe { (self.destroy_comp_channel)(ch) }
    }

    /// `ibv_create_cq` (`cq_context` is handed back to the program only).
    pub fn create_cq(
        &self,
        ctx: *mut ibv_context,
        cqe: c_int,
        cq_context: *mut c_void,
        ch: *mut ibv_comp_channel,
    ) -> *mut ibv_cq {
        // SAFETY: an open context and a channel of it (or null).
        unsafe { (self.create_cq)(ctx, cqe, cq_context, ch, 0) }
    }

    /// `ibv_destroy_cq`.
    pub fn destroy_cq(&self, cq: *mut ibv_cq) -> c_int {
        // SAFETY: a CQ of the loaded library, destroyed once (callers clear it).
        unsafe { (self.destroy_cq)(cq) }
    }

    /// `ibv_create_qp`.
    pub fn create_qp(&self, pd: *mut ibv_pd, attr: &mut ibv_qp_init_attr) -> *mut ibv_qp {
        // SAFETY: a PD of the loaded library; live attributes whose CQs and SRQ are its
        // objects or null.
        unsafe { (self.create_qp)(pd, attr) }
    }

    /// `ibv_modify_qp`: 0 or an errno.
    pub fn modify_qp(&self, qp: *mut ibv_qp, attr: &mut ibv_qp_attr, mask: c_int) -> c_int {
        // SAFETY: a QP of the loaded library and a live attribute struct.
        unsafe { (self.modify_qp)(qp, attr, mask) }
    }

    /// `ibv_destroy_qp`.
    pub fn destroy_qp(&self, qp: *mut ibv_qp) -> c_int {
        // SAFETY: a QP of the loaded library, destroyed once (callers clear it).
        unsafe { (self.destroy_qp)(qp) }
    }

    /// `uroce_gsi_open`: QP 1's descriptor, or a negative errno.
    pub fn gsi_open(&self, ctx: *mut ibv_context) -> c_int {
        // SAFETY: an open context.
        unsafe { (self.gsi_open)(ctx) }
    }

    /// `uroce_gsi_send`: a MAD to `gid`'s QP `qpn`.
    pub fn gsi_send(
        &self,
        ctx: *mut ibv_context,
        gid: &[u8; 16],
        qpn: u32,
        qkey: u32,
        mad: &[u8],
    ) -> c_int {
        // SAFETY: an open context; the GID and the MAD are live.
        unsafe { (self.gsi_send)(ctx, gid.as_ptr(), qpn, qkey, mad.as_ptr(), mad.len()) }
    }

    /// `uroce_gsi_recv`: a MAD into `buf` (its length), or 0 / negative for none.
    pub fn gsi_recv(
        &self,
        ctx: *mut ibv_context,
        gid: &mut [u8; 16],
        src_qp: &mut u32,
        buf: &mut [u8],
    ) -> c_int {
        // SAFETY: an open context; 16 bytes, a u32 and the buffer, all live.
        unsafe { (self.gsi_recv)(ctx, gid.as_mut_ptr(), src_qp, buf.as_mut_ptr(), buf.len()) }
    }

    /// `uroce_gsi_resolve`: finds `gid`'s MAC; 0 or an errno.
    pub fn gsi_resolve(&self, ctx: *mut ibv_context, gid: &[u8; 16], timeout_ms: c_int) -> c_int {
        // SAFETY: an open context; 16 live bytes.
        unsafe { (self.gsi_resolve)(ctx, gid.as_ptr(), timeout_ms) }
    }

    /// `uroce_gsi_listen`: connection requests for `service_id` are this process's
    /// (`on`) or no longer; 0 or an errno (EADDRINUSE: another process on the host
    /// listens on it).
    pub fn gsi_listen(&self, ctx: *mut ibv_context, service_id: u64, on: bool) -> c_int {
        // SAFETY: an open context.
        unsafe { (self.gsi_listen)(ctx, service_id, on as c_int) }
    }
}

/// A QP's number (`qp->qp_num`) of a live, non-null QP of the loaded library.
pub fn qp_num(qp: *mut ibv_qp) -> u32 {
    // SAFETY: the module's invariant; callers check null.
    unsafe { (*qp).qp_num }
}

/// A QP's type (`qp->qp_type`), as [`qp_num`].
pub fn qp_type(qp: *mut ibv_qp) -> c_int {
    // SAFETY: as for `qp_num`.
    unsafe { (*qp).qp_type }
}
