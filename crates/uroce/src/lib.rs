//! uroce: a software RoCEv2 / InfiniBand transport stack in user space.
//!
//! Layers (see `DESIGN.md`): [`wire`] formats and the ICRC, [`transport`] the RC, UC and UD
//! state machines around one QP shell, [`congestion`] DCQCN, [`mem`] protection domains
//! and memory regions, [`endpoint`] the sans-IO device context (packets and time in,
//! datagrams out), [`verbs`] the façade a program uses under ibverbs' names, [`datapath`]
//! the backends that put datagrams on a network, [`net`] what the host knows (addresses,
//! routes, neighbours, over rtnetlink), [`cm`] the connection manager (IBTA chapter 12,
//! sans-IO: CM MADs in and out of QP 1), [`pcap`] capture files, [`rng`] the seeded
//! generator, [`sim`] deterministic simulated links. The `uroce` command line lives in the
//! `uroce-tools` crate.
//!
//! `unsafe` lives in [`datapath`] and [`net`] (the kernel's interfaces), and in `mem`'s
//! `shared.rs` with [`endpoint::Context::reg_mr_raw`] (the program's memory registered in
//! place and shared with it, its contract stated there); every other module forbids it.

pub mod cm;
pub mod congestion;
pub mod datapath;
pub mod endpoint;
#[doc(hidden)]
pub mod fuzzing;
pub mod mem;
pub mod net;
pub mod pcap;
pub mod rng;
pub mod sim;
pub mod transport;
pub mod verbs;
pub mod wire;
