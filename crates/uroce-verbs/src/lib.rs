//! A drop-in `libibverbs.so.1` on uroce (issue 15).
//!
//! `cargo build` links this crate as `target/<profile>/libibverbs.so` with soname
//! `libibverbs.so.1` and every symbol, with its version node, that Debian 12's
//! libibverbs (rdma-core 44) exports (`abi/libibverbs.map`, `abi/libibverbs.symbols`);
//! build.rs puts a `libibverbs.so.1` link next to it. An unmodified ibverbs program run
//! with `LD_LIBRARY_PATH=target/<profile>` finds uroce's devices instead of the kernel's.
//!
//! - [`abi`]: the C structures as `<infiniband/verbs.h>` lays them out, hand written.
//! - `exports`: the exported entry points; those not implemented yet answer as
//!   libibverbs documents for an unsupported verb (NULL with errno `EOPNOTSUPP`, or the
//!   error code), and provider registration calls are accepted and ignored.
//! - [`device`]: the devices (one per usable interface) and their ports and GIDs.
//! - [`sysfs`]: the files under `/sys/class/infiniband*` and `/dev/infiniband` that
//!   describe those devices, for `uroce run` to show its program.
//! - `resources`: protection domains, memory regions over the application's memory.
//! - `cq`: completion queues, completion channels, the asynchronous event queue.
//! - `qp`: queue pairs, their state changes and the posting operations; `ah` address
//!   handles; `srq` shared receive queues; `mw` memory windows.
//! - `qp_ex` and `cq_ex`: the extended API, `ibv_create_qp_ex` with the `ibv_wr_*`
//!   work request builders and `ibv_create_cq_ex` with `ibv_start_poll` and its readers.
//! - `engine`: the progress engine of an open device: uroce's context, its datapath
//!   (AF_XDP or the UDP backend, `UROCE_BACKEND`) and the thread that drives it.
//!
//! The library never prints, never exits, never forks and never runs a program: what it
//! knows of the host it asks the kernel over rtnetlink (`uroce::net`).
//!
//! `unsafe` is confined to the C boundary, two modules: `exports` and [`ffi`]. Each
//! exported function, and each function pointer of the ops tables, is a thin wrapper in
//! `exports` (an `unsafe extern "C" fn` where it takes a pointer, whose contract is the
//! one `verbs.h` states for it) that runs inside [`ffi`]'s entry points, which turn a
//! panic into the verb's documented failure (errno `EIO`) instead of an abort of the host
//! program, turns its C arguments into values through `ffi`'s helpers and calls a safe
//! function of its module. `ffi` holds the conversions of C pointers, the
//! registry-checked access to the C objects handed out (`qp_object`, `take_qp`,
//! `cq_object`...), the `CBox` a context's `verbs_context` lives in, the program's memory
//! as `ibv_reg_mr` hands it over (`ProgramMemory`) and the eventfd and poll calls. Every
//! `unsafe` block says why it is sound (`clippy::undocumented_unsafe_blocks` is denied).
//! The crate denies `unsafe_code` everywhere else, and each other module says
//! `#![deny(unsafe_code)]` itself: `abi`, `ah`, `cq`, `cq_ex`, `device`, `engine`, `gsi`,
//! `gsi_peers`, `loopback`, `mw`, `qp`, `qp_ex`, `resources`, `srq`, `sysfs`, `util`.

#![deny(
    clippy::undocumented_unsafe_blocks,
    unsafe_op_in_unsafe_fn,
    unsafe_code
)]

pub use uroce_verbs_abi as abi;
mod ah;
mod cq;
mod cq_ex;
pub mod device;
mod engine;
#[allow(unsafe_code)]
mod exports;
#[allow(unsafe_code)]
pub mod ffi;
mod gsi;
mod gsi_peers;
mod loopback;
mod mw;
mod post;
mod qp;
mod qp_ex;
mod resources;
mod routes;
mod shard;
mod srq;
pub mod sysfs;
mod util;
