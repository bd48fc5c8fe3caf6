//! Simulation: a deterministic random source, a lossy in-memory link, and workloads that
//! run two endpoints over it in simulated time.

#![forbid(unsafe_code)]

pub mod cc;
pub mod dgram;
mod link;
pub mod plot;
pub mod rc;

pub use crate::rng::Rng;
pub use link::{Link, LinkConfig, LinkStats};
