//! Test support shared by the drop-in library crates (uroce-verbs, uroce-rdmacm) and the
//! command line's tests (uroce-tools), included by path from each one's
//! `tests/common/mod.rs`: where cargo left a built cdylib, a fresh directory to put on
//! `LD_LIBRARY_PATH`, compiling C against it, running programs in a network namespace,
//! whether a program is installed and what a finished one printed. Not a crate: each
//! test binary compiles its own copy.
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

/// The cdylib `<stem>.so` cargo built for this test run: `cargo test` leaves it in
/// `target/<profile>/deps/` (only `cargo build` copies it up to `target/<profile>/`, where
/// an older one may lie), so that one is taken first.
pub fn built(stem: &str) -> PathBuf {
    let dir = profile_dir();
    let lib = [
        dir.join(format!("deps/{stem}.so")),
        dir.join(format!("{stem}.so")),
    ]
    .into_iter()
    .find(|p| p.exists());
    lib.unwrap_or_else(|| {
        panic!(
            "no {stem}.so in {} or its deps/: cargo builds it with its crate (a dependency or a dev-dependency of this one)",
            dir.display()
        )
    })
}

/// A fresh directory `<prefix>-<tag>-<pid>` holding `<stem>.so.1` for each of `stems` (a
/// link to the built library), for `LD_LIBRARY_PATH`.
pub fn fresh_dir(prefix: &str, tag: &str, stems: &[&str]) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("{prefix}-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    for stem in stems {
        std::os::unix::fs::symlink(built(stem), dir.join(format!("{stem}.so.1"))).expect("symlink");
    }
    dir
}

/// Whether `program` is installed: the shell's `command -v` finds it (on the PATH, or
/// the path given). The program itself is not run (the distro's RDMA tools know no
/// `--version`; they print their usage).
pub fn have(program: &str) -> bool {
    Command::new("sh")
        .args(["-c", "command -v \"$1\"", "sh", program])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Compiles `source` (C) with gcc into `dir/name`; None (and a SKIP line) without gcc.
pub fn compile_c(dir: &Path, name: &str, source: &str, extra: &[&str]) -> Option<PathBuf> {
    if !have("gcc") {
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

/// Runs `exe` with `lib_dir` first on the library path.
pub fn run_on_library(lib_dir: &Path, exe: &Path, args: &[&str]) -> std::process::Output {
    Command::new(exe)
        .args(args)
        .env("LD_LIBRARY_PATH", lib_dir)
        .output()
        .expect("run program")
}

/// `program` in network namespace `ns` with `lib_dir` first on the library path, and `env`.
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

/// Standard output and error of a finished program, as text (stdout, then stderr, as
/// they are: tests look for lines in them and at how they end).
pub fn text(o: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}
