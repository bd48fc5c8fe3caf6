//! The built library exports exactly the symbols and version nodes of Debian 12's
//! libibverbs (abi/libibverbs.symbols), and the distro's library, when present, agrees.

mod common;

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

const DISTRO: &str = "/usr/lib/x86_64-linux-gnu/libibverbs.so.1";

const NODES: [&str; 13] = [
    "IBVERBS_1.0",
    "IBVERBS_1.1",
    "IBVERBS_1.5",
    "IBVERBS_1.6",
    "IBVERBS_1.7",
    "IBVERBS_1.8",
    "IBVERBS_1.9",
    "IBVERBS_1.10",
    "IBVERBS_1.11",
    "IBVERBS_1.12",
    "IBVERBS_1.13",
    "IBVERBS_1.14",
    "IBVERBS_PRIVATE_34",
];

/// The node of what uroce's librdmacm.so.1 asks of this library (QP 1), which Debian's
/// library does not have.
const OURS: &str = "UROCE_PRIVATE_1";

#[path = "../../../test-support/elf.rs"]
mod elf;

use elf::{exported, readelf_missing, version_definitions};

/// The list in the repository.
fn expected() -> BTreeSet<String> {
    elf::symbol_list(include_str!("../abi/libibverbs.symbols"))
}

#[test]
fn exports_match_the_list_in_the_repository() {
    if readelf_missing() {
        return;
    }
    let want = expected();
    elf::assert_exports(&common::built_library(), &want);
    assert_eq!(want.len(), 185);
}

#[test]
fn version_nodes_and_soname() {
    if readelf_missing() {
        return;
    }
    let lib = common::built_library();
    let defs = version_definitions(&lib);
    let mut want = vec!["libibverbs.so.1".to_string()];
    want.extend(NODES.iter().map(|n| n.to_string()));
    want.push(OURS.to_string());
    assert_eq!(defs, want);
    let out = Command::new("readelf")
        .arg("-d")
        .arg(&lib)
        .output()
        .unwrap();
    let dynamic = String::from_utf8(out.stdout).unwrap();
    assert!(
        dynamic.contains("Library soname: [libibverbs.so.1]"),
        "{dynamic}"
    );
}

#[test]
fn the_distro_library_exports_the_same() {
    if readelf_missing() {
        return;
    }
    if !Path::new(DISTRO).exists() {
        eprintln!("SKIP: {DISTRO} is not installed (apt-get install libibverbs1)");
        return;
    }
    let debian: BTreeSet<String> = expected()
        .into_iter()
        .filter(|s| !s.ends_with(OURS))
        .collect();
    assert_eq!(exported(Path::new(DISTRO)), debian);
    let defs = version_definitions(Path::new(DISTRO));
    assert_eq!(&defs[1..], &NODES.map(String::from)[..]);
}
