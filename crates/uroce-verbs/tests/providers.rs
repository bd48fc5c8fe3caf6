//! The distro's provider libraries (libmlx5, libefa), which perftest links, load against
//! the built library with every symbol bound at once (RTLD_NOW), and their registration
//! calls (`verbs_register_driver_34`, run from their constructors) return.

mod common;

use std::path::Path;

const PROVIDERS: [&str; 2] = [
    "/usr/lib/x86_64-linux-gnu/libmlx5.so.1",
    "/usr/lib/x86_64-linux-gnu/libefa.so.1",
];

const PROGRAM: &str = r#"
#include <dlfcn.h>
#include <stdio.h>
int main(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        if (!dlopen(argv[i], RTLD_NOW | RTLD_GLOBAL)) {
            printf("FAIL %s\n", dlerror());
            return 1;
        }
        printf("loaded %s\n", argv[i]);
    }
    /* The libibverbs that answered is uroce's: it has no kernel devices to list. */
    void *self = dlopen("libibverbs.so.1", RTLD_NOW | RTLD_NOLOAD);
    printf("libibverbs %s\n", self ? "present" : "absent");
    return 0;
}
"#;

#[test]
fn provider_libraries_load_against_it() {
    let present: Vec<&str> = PROVIDERS
        .iter()
        .copied()
        .filter(|p| Path::new(p).exists())
        .collect();
    if present.is_empty() {
        eprintln!("SKIP: no provider library installed (apt-get install ibverbs-providers)");
        return;
    }
    let dir = common::library_dir("providers");
    let Some(exe) = common::compile_c(&dir, "load_providers", PROGRAM, &["-ldl"]) else {
        return;
    };
    let out = common::run_on_library(&dir, &exe, &present);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for p in &present {
        assert!(stdout.contains(&format!("loaded {p}")), "{stdout}");
    }
    // And they loaded against ours, not the distro's (LD_DEBUG is not needed: the
    // library resolved for the providers' NEEDED entry is the first on the path).
    let maps = std::process::Command::new("ldd")
        .arg(present[0])
        .env("LD_LIBRARY_PATH", &dir)
        .output();
    if let Ok(maps) = maps {
        let text = String::from_utf8_lossy(&maps.stdout);
        assert!(text.contains(&dir.display().to_string()), "{text}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
