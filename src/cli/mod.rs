//! One module per subcommand.

pub mod decode;
pub mod sim;
pub mod simcc;
