//! Checking hand-written `#[repr(C)]` structures and constants against a C header: the
//! `layout!` and `constants!` macros list what to compare (each invocation site has its
//! crate's `abi` module in scope), and [`check_against_c`] compiles a C program that
//! prints the C side's values. Shared by the drop-in library crates' `tests/abi_layout.rs`,
//! included by path after `common` (which has `compile_c`).
#![allow(dead_code, unused_macros)]

/// One value compared: its C expression and what Rust says it is.
pub struct Entry {
    pub c: String,
    pub rust: u64,
}

/// The C name of a field path: the Rust path itself, or the literal after `=>`.
macro_rules! cname {
    ($($rf:ident).+) => {
        stringify!($($rf).+).replace(' ', "")
    };
    ($($rf:ident).+ => $cf:literal) => {
        $cf.to_string()
    };
}

/// `struct name { field, union.member => "c_name", ... }`: the size of each structure and
/// the offset of each field, named in C as the literal after `=>` says when the Rust path
/// differs (C's anonymous unions).
macro_rules! layout {
    ($($kw:tt $ty:ident { $($($rf:ident).+ $(=> $cf:literal)?),* $(,)? })*) => {{
        let mut v: Vec<layout::Entry> = Vec::new();
        $(
            v.push(layout::Entry {
                c: format!("sizeof({} {})", stringify!($kw), stringify!($ty)),
                rust: std::mem::size_of::<abi::$ty>() as u64,
            });
            $(
                v.push(layout::Entry {
                    c: format!(
                        "offsetof({} {}, {})",
                        stringify!($kw),
                        stringify!($ty),
                        cname!($($rf).+ $(=> $cf)?)
                    ),
                    rust: std::mem::offset_of!(abi::$ty, $($rf).+) as u64,
                });
            )*
        )*
        v
    }};
}

/// The value of each constant, named as in C.
macro_rules! constants {
    ($($name:ident),* $(,)?) => {
        vec![$(layout::Entry { c: stringify!($name).to_string(), rust: abi::$name as u64 }),*]
    };
}

/// Compiles a program that includes `includes` and prints every entry's C value with
/// `compile` (the crate's `common::compile_c`), runs it, and fails listing every entry
/// where Rust differs. Returns false (the compiler said why it skipped) without gcc.
pub fn check_against_c(
    tag: &str,
    includes: &[&str],
    entries: &[Entry],
    compile: impl Fn(&std::path::Path, &str, &str, &[&str]) -> Option<std::path::PathBuf>,
) -> bool {
    let mut c = String::from("#include <stdio.h>\n#include <stddef.h>\n");
    for h in includes {
        c.push_str(&format!("#include <{h}>\n"));
    }
    c.push_str("int main(void) {\n");
    for e in entries {
        c.push_str(&format!(
            "    printf(\"%llu\\n\", (unsigned long long)({}));\n",
            e.c
        ));
    }
    c.push_str("    return 0;\n}\n");
    let dir = std::env::temp_dir().join(format!("{tag}-abi-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let Some(exe) = compile(&dir, "layout", &c, &[]) else {
        return false;
    };
    let out = std::process::Command::new(&exe)
        .output()
        .expect("run layout program");
    assert!(out.status.success());
    let values: Vec<u64> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| l.parse().unwrap())
        .collect();
    assert_eq!(values.len(), entries.len());
    let wrong: Vec<String> = entries
        .iter()
        .zip(&values)
        .filter(|(e, c)| e.rust != **c)
        .map(|(e, c)| format!("{}: C {c}, Rust {}", e.c, e.rust))
        .collect();
    assert!(wrong.is_empty(), "layout differs:\n{}", wrong.join("\n"));
    let _ = std::fs::remove_dir_all(&dir);
    true
}
