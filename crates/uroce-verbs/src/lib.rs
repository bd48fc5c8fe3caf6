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
//! - `resources`: protection domains, memory regions over the application's memory.
//! - `cq`: completion queues, completion channels, the asynchronous event queue.
//! - `qp`: queue pairs, their state changes and the posting operations; `ah` address
//!   handles; `srq` shared receive queues; `mw` memory windows.
//! - `engine`: the progress engine of an open device: uroce's context, its datapath
//!   (AF_XDP or the UDP backend, `UROCE_BACKEND`) and the thread that drives it.
//!
//! The library never prints, never exits, never forks and never runs a program: what it
//! knows of the host it asks the kernel over rtnetlink (`uroce::net`).
//!
//! `unsafe` is confined to the C ABI: each exported function that takes a pointer is an
//! `unsafe extern "C" fn` whose contract is the one `verbs.h` states for it, and every
//! function C calls runs inside [`ffi`]'s entry points, which turn a panic into the
//! verb's documented failure (errno `EIO`) instead of an abort of the host program;
//! `ffi` also holds the conversions of C pointers. Every `unsafe` block says why it is
//! sound (`clippy::undocumented_unsafe_blocks` is denied). The modules made safe code so
//! far say `#![deny(unsafe_code)]` (`qp`, `mw`); their exported functions are wrappers in
//! `exports`.

#![deny(clippy::undocumented_unsafe_blocks, unsafe_op_in_unsafe_fn, unsafe_code)]

pub mod abi;
mod ah;
mod cq;
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
mod qp;
mod resources;
mod srq;
mod util;
