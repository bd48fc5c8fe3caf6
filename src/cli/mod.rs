//! One module per subcommand.

pub mod decode;
pub mod demo;
pub mod sim;
pub mod simcc;
