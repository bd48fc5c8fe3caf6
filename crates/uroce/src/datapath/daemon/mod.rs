//! The shared datapath: `uroce daemon` owns an interface's datapath (AF_XDP or the UDP
//! backend) and serves every process on the host that uses it, as a NIC serves every
//! process. The transport stays in each process (its sans-IO context, as in direct mode);
//! the daemon is a switch of frames between the wire and the processes, by destination
//! QPN, so to a process the daemon is one more [`crate::datapath::Backend`]:
//! [`DaemonBackend`].
//!
//! - [`proto`]: the control socket's messages and where the socket lives;
//! - [`ring`]: the shared memory (two rings of packet slots in a sealed memfd) and its
//!   doorbells;
//! - [`client`]: the process's end.
//!
//! The daemon itself is the `uroce-daemon` crate.

pub mod client;
pub mod proto;
pub mod ring;

pub use client::{Control, DaemonBackend};
