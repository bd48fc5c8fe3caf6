//! The built library exports exactly the symbols and version nodes of Debian 12's
//! librdmacm (abi/librdmacm.symbols), and the distro's library, when present, agrees.

mod common;

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

const DISTRO: &str = "/usr/lib/x86_64-linux-gnu/librdmacm.so.1";

const NODES: [&str; 4] = ["RDMACM_1.0", "RDMACM_1.1", "RDMACM_1.2", "RDMACM_1.3"];

#[path = "../../../test-support/elf.rs"]
mod elf;

use elf::{exported, readelf_missing, version_definitions};

/// The list in the repository.
fn expected() -> BTreeSet<String> {
    elf::symbol_list(include_str!("../abi/librdmacm.symbols"))
}

#[test]
fn exports_match_the_list_in_the_repository() {
    if readelf_missing() {
        return;
    }
    let want = expected();
    elf::assert_exports(&common::built_library(), &want);
    assert_eq!(want.len(), 68);
}

#[test]
fn version_nodes_and_soname() {
    if readelf_missing() {
        return;
    }
    let lib = common::built_library();
    let defs = version_definitions(&lib);
    let mut want = vec!["librdmacm.so.1".to_string()];
    want.extend(NODES.iter().map(|n| n.to_string()));
    assert_eq!(defs, want);
    let out = Command::new("readelf")
        .arg("-d")
        .arg(&lib)
        .output()
        .unwrap();
    let dynamic = String::from_utf8(out.stdout).unwrap();
    assert!(
        dynamic.contains("Library soname: [librdmacm.so.1]"),
        "{dynamic}"
    );
    // Its own verbs come from the program's libibverbs.so.1 at run time, not at link time.
    assert!(!dynamic.contains("libibverbs"), "{dynamic}");
}

#[test]
fn the_soname_link_is_next_to_the_library() {
    let link = common::profile_dir().join("librdmacm.so.1");
    let target = std::fs::read_link(&link)
        .unwrap_or_else(|e| panic!("{} is not a symbolic link: {e}", link.display()));
    assert_eq!(target, Path::new("librdmacm.so"));
}

#[test]
fn the_distro_library_exports_the_same() {
    if readelf_missing() {
        return;
    }
    if !Path::new(DISTRO).exists() {
        eprintln!("SKIP: {DISTRO} is not installed (apt-get install librdmacm1)");
        return;
    }
    assert_eq!(exported(Path::new(DISTRO)), expected());
    let defs = version_definitions(Path::new(DISTRO));
    assert_eq!(&defs[1..], &NODES.map(String::from)[..]);
}
