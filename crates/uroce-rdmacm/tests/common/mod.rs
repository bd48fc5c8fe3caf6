//! Shared by the integration tests: where the built `librdmacm.so` is, and running
//! programs against it (the helpers themselves are in `test-support/cdylib.rs`, shared
//! with uroce-verbs' tests).
#![allow(dead_code, unused_imports)]

#[path = "../../../../test-support/cdylib.rs"]
mod cdylib;

pub use cdylib::{compile_c, have, in_ns, profile_dir, run_on_library, text};
use std::path::PathBuf;

/// This crate's cdylib, as cargo built it for this test run.
pub fn built_library() -> PathBuf {
    cdylib::built("librdmacm")
}

/// A fresh directory holding `librdmacm.so.1`, for `LD_LIBRARY_PATH`.
pub fn library_dir(tag: &str) -> PathBuf {
    cdylib::fresh_dir("uroce-rdmacm", tag, &["librdmacm"])
}

/// A fresh directory holding both drop-in libraries, `librdmacm.so.1` and uroce-verbs'
/// `libibverbs.so.1` (built beside this crate's as a dev-dependency).
pub fn both_libraries_dir(tag: &str) -> PathBuf {
    cdylib::fresh_dir("uroce-rdmacm", tag, &["librdmacm", "libibverbs"])
}
