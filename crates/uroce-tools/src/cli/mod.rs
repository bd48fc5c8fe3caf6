//! One module per subcommand.

pub mod decode;
pub mod decode_live;
pub mod demo;
pub mod devices;
pub mod fuzz_peer;
pub mod impair;
pub mod lossy;
pub mod perf;
pub mod pingpong;
pub mod run;
pub mod sim;
pub mod simcc;
pub mod traffic;
