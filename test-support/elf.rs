//! What a built shared library exports, read with binutils' `readelf`: shared by the
//! drop-in library crates' `tests/exports.rs`, included by path.
#![allow(dead_code)]

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

/// `TYPE name@[@]VERSION` of every defined dynamic symbol but the version nodes' own.
pub fn exported(lib: &Path) -> BTreeSet<String> {
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
pub fn version_definitions(lib: &Path) -> Vec<String> {
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

/// The lines of a symbol list kept in the repository, without blank and `#` lines.
pub fn symbol_list(text: &str) -> BTreeSet<String> {
    text.lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .map(str::to_string)
        .collect()
}

/// Fails listing what `lib` exports beyond `want` and what it lacks of it.
pub fn assert_exports(lib: &Path, want: &BTreeSet<String>) {
    let ours = exported(lib);
    let missing: Vec<_> = want.difference(&ours).collect();
    let extra: Vec<_> = ours.difference(want).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "missing {missing:?}\nextra {extra:?}"
    );
}

/// True (and a SKIP line) when binutils' readelf is not installed.
pub fn readelf_missing() -> bool {
    if Command::new("readelf").arg("--version").output().is_err() {
        eprintln!("SKIP: readelf (binutils) is not installed");
        return true;
    }
    false
}
