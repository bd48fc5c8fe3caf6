//! The built library exports exactly the symbols and version nodes of Debian 12's
//! librdmacm (abi/librdmacm.symbols), and the distro's library, when present, agrees.

mod common;

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

const DISTRO: &str = "/usr/lib/x86_64-linux-gnu/librdmacm.so.1";

const NODES: [&str; 4] = ["RDMACM_1.0", "RDMACM_1.1", "RDMACM_1.2", "RDMACM_1.3"];

/// `TYPE name@[@]VERSION` of every defined dynamic symbol but the version nodes' own.
fn exported(lib: &Path) -> BTreeSet<String> {
    let out = Command::new("readelf")
        .args(["--dyn-syms", "-W"])
        .arg(lib)
        .output()
        .expect("readelf");
    assert!(out.status.success(), "readelf failed on {}", lib.display());
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            // Num: Value Size Type Bind Vis Ndx Name
            let numbered = f
                .first()
                .and_then(|n| n.strip_suffix(':'))
                .is_some_and(|n| n.parse::<u32>().is_ok());
            if f.len() < 8 || !numbered || f[6] == "UND" || f[6] == "ABS" {
                return None;
            }
            Some(format!("{} {}", f[3], f[7]))
        })
        .collect()
}

/// The names in the version definition section, in order (the base first).
fn version_definitions(lib: &Path) -> Vec<String> {
    let out = Command::new("readelf")
        .arg("-V")
        .arg(lib)
        .output()
        .expect("readelf");
    let text = String::from_utf8(out.stdout).unwrap();
    let section = text
        .split("Version definition section")
        .nth(1)
        .expect("no version definitions");
    let section = section.split("Version needs section").next().unwrap();
    section
        .lines()
        .filter_map(|l| l.split("Name: ").nth(1).map(|n| n.trim().to_string()))
        .collect()
}

/// The list in the repository, without its `#` comment lines.
fn expected() -> BTreeSet<String> {
    let list = include_str!("../abi/librdmacm.symbols");
    list.lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .map(str::to_string)
        .collect()
}

fn readelf_missing() -> bool {
    if Command::new("readelf").arg("--version").output().is_err() {
        eprintln!("SKIP: readelf (binutils) is not installed");
        return true;
    }
    false
}

#[test]
fn exports_match_the_list_in_the_repository() {
    if readelf_missing() {
        return;
    }
    let ours = exported(&common::built_library());
    let want = expected();
    let missing: Vec<_> = want.difference(&ours).collect();
    let extra: Vec<_> = ours.difference(&want).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "missing {missing:?}\nextra {extra:?}"
    );
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
