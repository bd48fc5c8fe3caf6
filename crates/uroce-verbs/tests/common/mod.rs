//! Shared by the integration tests: where the built `libibverbs.so` is, and running
//! programs against it (the helpers themselves are in `test-support/cdylib.rs`, shared
//! with uroce-rdmacm's tests).
#![allow(dead_code, unused_imports)]

#[path = "../../../../test-support/cdylib.rs"]
mod cdylib;

pub use cdylib::{compile_c, have, in_ns, profile_dir, run_on_library, text};
use std::path::PathBuf;

/// This crate's cdylib, as cargo built it for this test run.
pub fn built_library() -> PathBuf {
    cdylib::built("libibverbs")
}

/// A fresh directory holding `libibverbs.so.1`, for `LD_LIBRARY_PATH`.
pub fn library_dir(tag: &str) -> PathBuf {
    cdylib::fresh_dir("uroce-verbs", tag, &["libibverbs"])
}

/// Whether a C program can be built and run in network namespaces here: root (namespaces,
/// veth) and `<infiniband/verbs.h>`. Says why not (`SKIP: ...`) when it cannot.
pub fn can_run_c_in_namespaces() -> bool {
    if let Err(e) = uroce_tools::netns::check_privileges() {
        eprintln!("SKIP: {e}");
        return false;
    }
    if !std::path::Path::new("/usr/include/infiniband/verbs.h").exists() {
        eprintln!("SKIP: <infiniband/verbs.h> is missing (apt-get install libibverbs-dev)");
        return false;
    }
    true
}
