//! uroce-proto: the sans-IO core of uroce, a software RoCEv2 / InfiniBand transport stack
//! in user space.
//!
//! As `quinn-proto` is to `quinn`, this crate is the protocol with no IO: it never opens a
//! socket, reads a clock or makes any other system call. A caller passes received packets
//! in ([`endpoint::Context::handle_frame`], [`endpoint::Context::handle_datagram`]), takes
//! datagrams out ([`endpoint::Context::poll_transmit`]) and keeps time
//! ([`endpoint::Context::poll_timeout`], [`endpoint::Context::handle_timeout`], `now`
//! always passed in). That makes it deterministic, testable without a network or root,
//! and drivable by the simulators of [`sim`] as well as by a real datapath. The `uroce`
//! crate is the IO half (the AF_XDP and UDP datapaths, rtnetlink host queries) and
//! re-exports every module of this one under the same name, so programs use `uroce::...`.
//!
//! Layers (see `DESIGN.md`): [`wire`] formats and the ICRC, [`transport`] the RC, UC and UD
//! state machines around one QP shell, [`congestion`] DCQCN, [`mem`] protection domains
//! and memory regions, [`endpoint`] the device context, [`verbs`] the façade a program
//! uses under ibverbs' names, [`cm`] the connection manager (IBTA chapter 12: CM MADs in
//! and out of QP 1), [`pcap`] capture files (bytes in and out, no files opened), [`rng`]
//! the seeded generator, [`sim`] deterministic simulated links.
//!
//! No `libc`: the errno values [`transport::VerbsError::errno`] gives are written out in
//! [`transport::errno`]. `unsafe` is only in `mem`'s `shared.rs` with
//! [`endpoint::Context::reg_mr_raw`] (the program's memory registered in place and shared
//! with it, its contract stated there; plain pointers, no `mmap`) and in the endpoint's
//! prefetch hint; every other module forbids it.

pub mod cm;
pub mod congestion;
pub mod endpoint;
#[doc(hidden)]
pub mod fuzzing;
pub mod mem;
pub mod pcap;
pub mod rng;
pub mod sim;
pub mod transport;
pub mod verbs;
pub mod wire;
