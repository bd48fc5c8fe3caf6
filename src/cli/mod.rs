//! One module per subcommand.

pub mod decode;
pub mod demo;
pub mod perf;
pub mod sim;
pub mod simcc;
