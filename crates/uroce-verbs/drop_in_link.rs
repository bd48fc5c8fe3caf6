//! Links a cdylib as a distro library is linked: a soname, the version nodes of a version
//! script, and a `<soname>` symbolic link next to the cdylib in the target directory, so
//! `LD_LIBRARY_PATH=target/<profile>` is all a program needs. Included with `#[path]` by
//! this crate's build.rs (libibverbs.so.1) and by crates/uroce-rdmacm's (librdmacm.so.1).
//!
//! rustc hands the linker a version script of its own for a cdylib (one anonymous node
//! listing every `#[no_mangle]` symbol). rust-lld, rustc's default linker on
//! x86_64-unknown-linux-gnu since 1.90, merges the two scripts; GNU ld refuses to (an
//! anonymous node cannot be combined with named ones). So every exported name is bound
//! to its node by a `.symver` directive in the object (the crate's src/exports.rs), which
//! wins over either script, and the script here only defines the nodes. With an older
//! rustc (before 1.90, whose linker is the system's), this asks for the rust-lld that ships
//! with the toolchain, as rustc 1.90 does itself.
use std::path::{Path, PathBuf};
use std::process::Command;

/// The minor version of the rustc building us (`rustc 1.95.0 (...)` → 95).
fn rustc_minor() -> Option<u32> {
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let out = Command::new(rustc).arg("-V").output().ok()?;
    let text = String::from_utf8(out.stdout).ok()?;
    text.split_whitespace()
        .nth(1)?
        .split('.')
        .nth(1)?
        .parse()
        .ok()
}

/// `-fuse-ld=lld` with the toolchain's rust-lld, for a rustc that does not use it already.
fn use_rust_lld(soname: &str) {
    if rustc_minor().is_none_or(|m| m >= 90) {
        return;
    }
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let target = std::env::var("TARGET").unwrap_or_default();
    let sysroot = Command::new(rustc)
        .args(["--print", "sysroot"])
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map(|s| s.trim().to_string())
        .unwrap_or_default();
    let gcc_ld = PathBuf::from(sysroot)
        .join("lib/rustlib")
        .join(target)
        .join("bin/gcc-ld");
    if gcc_ld.join("ld.lld").exists() {
        println!("cargo:rustc-cdylib-link-arg=-B{}", gcc_ld.display());
        println!("cargo:rustc-cdylib-link-arg=-fuse-ld=lld");
    } else {
        println!("cargo:warning={soname} needs lld (rustc 1.90 or later, or rust-lld)");
    }
}

/// Links the cdylib `lib<name>.so` with soname `soname` (`lib<name>.so.1`) and the version
/// nodes of `map` (relative to the crate), and links `soname` to it in `target/<profile>`.
pub fn drop_in(map: &str, soname: &str, cdylib: &str) {
    let dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    let map = dir.join(map);
    println!("cargo:rerun-if-changed={}", map.display());
    println!("cargo:rerun-if-changed=build.rs");
    println!(
        "cargo:rustc-cdylib-link-arg=-Wl,--version-script={}",
        map.display()
    );
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,{soname}");
    // Calls between our own exports bind inside the library, as the distro library's do.
    println!("cargo:rustc-cdylib-link-arg=-Wl,-Bsymbolic");
    use_rust_lld(soname);

    // OUT_DIR is <target>/<profile>/build/<pkg>-<hash>/out.
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR"));
    if let Some(profile_dir) = out.ancestors().nth(3) {
        link_once(&profile_dir.join(soname), Path::new(cdylib));
    }
}

/// `link` → `target` (relative), unless something is there already.
fn link_once(link: &Path, target: &Path) {
    if std::fs::symlink_metadata(link).is_err() {
        if let Err(e) = std::os::unix::fs::symlink(target, link) {
            println!("cargo:warning=could not create {}: {e}", link.display());
        }
    }
}
