//! A drop-in `librdmacm.so.1` on uroce (issue 19), in progress: the ABI is complete, the
//! connection manager is not written yet.
//!
//! `cargo build` links this crate as `target/<profile>/librdmacm.so` with soname
//! `librdmacm.so.1` and every symbol, with its version node (RDMACM_1.0 … RDMACM_1.3),
//! that Debian 12's librdmacm (rdma-core 44) exports (`abi/librdmacm.map`,
//! `abi/librdmacm.symbols`); build.rs puts a `librdmacm.so.1` link next to it, beside
//! uroce-verbs' `libibverbs.so.1`. An unmodified RDMA CM program (`rping`, `udaddy`,
//! perftest's `-R`) run with `LD_LIBRARY_PATH=target/<profile>` loads both.
//!
//! - [`abi`]: the C structures and constants of `<rdma/rdma_cma.h>` (and the parts of
//!   `<infiniband/sa.h>` and `<infiniband/verbs.h>` it needs), hand written.
//! - [`verbs_abi`]: the uroce-verbs-abi crate, the structures of `<infiniband/verbs.h>`,
//!   shared with uroce-verbs rather than by depending on that crate (below).
//! - `exports`: the exported entry points. `rdma_event_str` answers as librdmacm does;
//!   every other one answers "unsupported" as the headers document failure (-1 with errno
//!   `ENOSYS`, NULL with errno `ENOSYS`, nothing for the destroy calls).
//!
//! - [`ffi`]: the C boundary every exported call goes through: a panic becomes -1 (or
//!   NULL) with errno `EIO`, never an abort of the host program.
//!   With `exports` (the exported functions, thin wrappers), `verbs` (the calls into the
//!   loaded libibverbs) and `addrinfo` it holds all the crate's `unsafe`: `api`,
//!   `events`, `qp` and `state` are `#![deny(unsafe_code)]`.
//!
//! The plan. Ids, event channels (a pollable fd per channel), address and route resolution
//! from the host's routes and neighbours, and connection establishment run on uroce's
//! sans-IO connection manager (`uroce::cm`), whose MADs travel on QP 1 of the device.
//! The verbs objects an id holds (context, PD, CQs, QP) must be those of the program's own
//! libibverbs.so.1, because the program uses them directly (the inline functions of
//! `<rdma/rdma_verbs.h>`, `id->qp` in `ibv_post_send`). So this library does not link a
//! verbs implementation of its own (depending on the uroce-verbs crate would export its
//! `ibv_*` symbols from librdmacm.so as well and start a second verbs engine in the
//! process): it calls the ibverbs functions of the `libibverbs.so.1` already loaded,
//! found with `dlopen(RTLD_NOLOAD)` and `dlvsym` at their versions. When that library is
//! not uroce's (the distro's libibverbs talking to the kernel), the calls that need a
//! device refuse with an errno saying there is no such device, rather than mixing two
//! verbs implementations.
//!
//! The library never prints, never exits, never forks and never runs a program.

#![deny(clippy::undocumented_unsafe_blocks, unsafe_op_in_unsafe_fn)]

pub mod abi;
mod addrinfo;
mod api;
mod events;
mod exports;
pub mod ffi;
mod qp;
mod state;
mod verbs;

/// The C structures of `<infiniband/verbs.h>`: the uroce-verbs-abi crate, which uroce-verbs
/// uses as its `abi` too, so both libraries agree on one definition.
pub use uroce_verbs_abi as verbs_abi;

pub use exports::event_name;
