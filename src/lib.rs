//! uroce: a software RoCEv2 / InfiniBand transport stack in user space.
//!
//! Layers (see `DESIGN.md`): [`wire`] formats and the ICRC, [`capture`] for reading pcap
//! and pcapng files, [`decode`] for turning frames into lines a person or a program reads.

pub mod capture;
pub mod congestion;
pub mod datapath;
pub mod decode;
pub mod demo;
#[doc(hidden)]
pub mod fuzzing;
pub mod mem;
pub mod perf;
mod perf_loops;
pub mod perftest;
pub mod pingpong;
pub mod sim;
pub mod transport;
pub mod verbs;
pub mod wire;
