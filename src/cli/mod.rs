//! One module per subcommand.

pub mod decode;
