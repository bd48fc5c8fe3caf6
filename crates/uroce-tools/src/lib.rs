//! The tools behind the `uroce` command line, as a library so that the tests and the fuzz
//! targets reach them: the demo, `perf` (native and perftest-compatible), `pingpong`
//! (ibv_*_pingpong-compatible; `srq_pingpong` for ibv_srq_pingpong), the frame decoder,
//! network namespaces and veth pairs, the RDMA files `uroce run` shows its program.

pub mod backend;
pub mod daemon_start;
pub mod decode;
pub mod decode_views;
pub mod demo;
pub mod fuzz_peer;
#[doc(hidden)]
pub mod fuzzing;
mod link;
pub mod live_capture;
pub mod netns;
pub mod perf;
pub mod perftest;
pub mod pingpong;
pub mod rdma_files;
pub mod srq_pingpong;
pub mod traffic;
