//! Shared by the integration tests: where the built library is, and compiling C against
//! it. (The same as crates/uroce-verbs/tests/common, for librdmacm.so.)
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

/// `target/<profile>`, the directory of this test binary's parent (`deps/`).
pub fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    exe.parent()
        .and_then(Path::parent)
        .expect("target/<profile>")
        .to_path_buf()
}

/// The cdylib cargo built for this test run (`librdmacm.so`): `cargo test` leaves it in
/// `target/<profile>/deps/` (only `cargo build` copies it up to `target/<profile>/`, where
/// an older one may lie), so that one is taken first.
pub fn built_library() -> PathBuf {
    let dir = profile_dir();
    let lib = [dir.join("deps/librdmacm.so"), dir.join("librdmacm.so")]
        .into_iter()
        .find(|p| p.exists());
    lib.unwrap_or_else(|| {
        panic!(
            "no librdmacm.so in {} or its deps/: cargo builds it with the crate",
            dir.display()
        )
    })
}

/// A fresh directory holding `librdmacm.so.1` (a link to the built library), for
/// `LD_LIBRARY_PATH`.
pub fn library_dir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("uroce-rdmacm-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    std::os::unix::fs::symlink(built_library(), dir.join("librdmacm.so.1")).expect("symlink");
    dir
}

/// Compiles `source` (C) with gcc into `dir/name`; None (and a SKIP line) without gcc.
pub fn compile_c(dir: &Path, name: &str, source: &str, extra: &[&str]) -> Option<PathBuf> {
    if Command::new("gcc").arg("--version").output().is_err() {
        eprintln!("SKIP: gcc is not installed");
        return None;
    }
    let src = dir.join(format!("{name}.c"));
    std::fs::write(&src, source).expect("write C source");
    let exe = dir.join(name);
    let out = Command::new("gcc")
        .args(["-O0", "-Wall", "-Werror", "-o"])
        .arg(&exe)
        .arg(&src)
        .args(extra)
        .output()
        .expect("gcc");
    assert!(
        out.status.success(),
        "gcc failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    Some(exe)
}

/// Standard output and error of a finished program, as text.
pub fn text(o: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// A fresh directory holding both drop-in libraries, `librdmacm.so.1` and uroce-verbs'
/// `libibverbs.so.1` (built beside this crate's as a dev-dependency), for
/// `LD_LIBRARY_PATH`.
pub fn both_libraries_dir(tag: &str) -> PathBuf {
    let dir = library_dir(tag);
    let dirp = profile_dir();
    let verbs = [dirp.join("deps/libibverbs.so"), dirp.join("libibverbs.so")]
        .into_iter()
        .find(|p| p.exists())
        .expect("libibverbs.so: uroce-verbs is built as a dev-dependency");
    std::os::unix::fs::symlink(verbs, dir.join("libibverbs.so.1")).expect("symlink");
    dir
}

/// `program` in network namespace `ns` with `lib_dir` first on the library path.
pub fn in_ns(ns: &str, lib_dir: &Path, env: &[(&str, &str)], program: &[&str]) -> Command {
    let mut cmd = Command::new("ip");
    cmd.args(["netns", "exec", ns])
        .args(program)
        .env("LD_LIBRARY_PATH", lib_dir);
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd
}
