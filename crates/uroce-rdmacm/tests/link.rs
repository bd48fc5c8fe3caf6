//! Programs built against the distro's librdmacm load the built one instead when it is
//! first on `LD_LIBRARY_PATH`, and their versioned references (RDMACM_1.0 … RDMACM_1.3)
//! resolve to its definitions: a C program linked with `-lrdmacm`, and the distro's
//! unmodified `rping` / `udaddy` (which only print their usage here). Skips (saying so)
//! without gcc, the header (`apt-get install librdmacm-dev`) or the tools (`rdmacm-utils`).

mod common;

use std::path::Path;
use std::process::Command;

/// Prints where `rdma_event_str@RDMACM_1.0` was found and the name of every event from -1
/// to 17; with the argument `stubs`, also what one entry point of each version node
/// answers.
const PROGRAM: &str = r#"
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <rdma/rdma_cma.h>

int main(int argc, char **argv)
{
	Dl_info info;
	void *sym = dlvsym(RTLD_DEFAULT, "rdma_event_str", "RDMACM_1.0");
	if (!sym || !dladdr(sym, &info)) {
		printf("rdma_event_str@RDMACM_1.0 not found\n");
		return 2;
	}
	printf("library %s\n", info.dli_fname);
	for (int e = -1; e <= 17; e++)
		printf("event %d %s\n", e, rdma_event_str(e));
	if (argc > 1 && strcmp(argv[1], "stubs") == 0) {
		errno = 0;
		struct rdma_event_channel *ch = rdma_create_event_channel();
		printf("rdma_create_event_channel %s errno %d\n", ch ? "channel" : "NULL", errno);
		errno = 0;
		int r = rdma_join_multicast_ex(NULL, NULL, NULL);
		printf("rdma_join_multicast_ex %d errno %d\n", r, errno);
		errno = 0;
		r = rdma_establish(NULL);
		printf("rdma_establish %d errno %d\n", r, errno);
		errno = 0;
		r = rdma_set_local_ece(NULL, NULL);
		printf("rdma_set_local_ece %d errno %d\n", r, errno);
	}
	return 0;
}
"#;

const DISTRO: &str = "/usr/lib/x86_64-linux-gnu/librdmacm.so.1";

fn header_missing() -> bool {
    let header = Path::new("/usr/include/rdma/rdma_cma.h");
    if !header.exists() {
        eprintln!(
            "SKIP: {} is missing (apt-get install librdmacm-dev)",
            header.display()
        );
        return true;
    }
    false
}

/// The version nodes of librdmacm.so.1 that `exe` references (`readelf -V`).
fn needed_versions(exe: &Path) -> Vec<String> {
    let out = Command::new("readelf")
        .arg("-V")
        .arg(exe)
        .output()
        .expect("readelf");
    let text = String::from_utf8(out.stdout).unwrap();
    let Some(needs) = text.split("File: librdmacm.so.1").nth(1) else {
        return Vec::new();
    };
    let mut v: Vec<String> = needs
        .lines()
        .skip(1)
        .take_while(|l| !l.contains("File:"))
        .filter_map(|l| l.split("Name: ").nth(1))
        .filter_map(|n| n.split_whitespace().next().map(str::to_string))
        .collect();
    v.sort();
    v
}

#[test]
fn a_program_linked_with_lrdmacm_runs_on_ours() {
    if header_missing() {
        return;
    }
    let lib_dir = common::library_dir("link");
    let Some(exe) = common::compile_c(&lib_dir, "cm_link", PROGRAM, &["-lrdmacm"]) else {
        return;
    };
    // The program asks for every node, so running it proves each one resolves.
    assert_eq!(
        needed_versions(&exe),
        ["RDMACM_1.0", "RDMACM_1.1", "RDMACM_1.2", "RDMACM_1.3"]
    );
    let out = Command::new(&exe)
        .arg("stubs")
        .env("LD_LIBRARY_PATH", &lib_dir)
        .output()
        .expect("run program");
    let text = common::text(&out);
    assert!(out.status.success(), "{text}");
    let ours = lib_dir.join("librdmacm.so.1");
    assert!(
        text.contains(&format!("library {}\n", ours.display())),
        "{text}"
    );
    for line in [
        "event -1 UNKNOWN EVENT",
        "event 0 RDMA_CM_EVENT_ADDR_RESOLVED",
        "event 9 RDMA_CM_EVENT_ESTABLISHED",
        "event 15 RDMA_CM_EVENT_TIMEWAIT_EXIT",
        "event 16 UNKNOWN EVENT",
        "rdma_create_event_channel channel errno 0",
        "rdma_join_multicast_ex -1 errno 38",
        "rdma_establish -1 errno 22",
        "rdma_set_local_ece -1 errno 22",
    ] {
        assert!(
            text.contains(&format!("{line}\n")),
            "no {line:?} in\n{text}"
        );
    }

    // The distro's library names the events the same.
    if !Path::new(DISTRO).exists() {
        eprintln!("SKIP: {DISTRO} is not installed: not compared");
        let _ = std::fs::remove_dir_all(&lib_dir);
        return;
    }
    // cargo runs tests with target/<profile> on LD_LIBRARY_PATH: take it away.
    let distro = Command::new(&exe)
        .env_remove("LD_LIBRARY_PATH")
        .output()
        .expect("run program");
    let distro_text = common::text(&distro);
    assert!(distro.status.success(), "{distro_text}");
    // The loader may name it /lib/... or /usr/lib/... (merged /usr).
    let library = distro_text.lines().next().unwrap_or_default();
    assert!(
        library.ends_with("/x86_64-linux-gnu/librdmacm.so.1"),
        "{distro_text}"
    );
    let events = |t: &str| -> Vec<String> {
        t.lines()
            .filter(|l| l.starts_with("event "))
            .map(str::to_string)
            .collect()
    };
    assert_eq!(events(&text).len(), 19);
    assert_eq!(events(&text), events(&distro_text));
    let _ = std::fs::remove_dir_all(&lib_dir);
}

/// Runs a distro tool with `-h` on our library with `LD_DEBUG=libs`: the loader must
/// initialise our `librdmacm.so.1`, and the tool must get as far as its usage text.
fn tool_loads_ours(tool: &str, usage: &str) {
    if Command::new(tool).arg("-h").output().is_err() {
        eprintln!("SKIP: {tool} is not installed (apt-get install rdmacm-utils)");
        return;
    }
    let lib_dir = common::library_dir(tool);
    let out = Command::new(tool)
        .arg("-h")
        .env("LD_LIBRARY_PATH", &lib_dir)
        .env("LD_DEBUG", "libs")
        .output()
        .expect("run tool");
    let text = common::text(&out);
    let ours = lib_dir.join("librdmacm.so.1");
    assert!(
        text.contains(&format!("calling init: {}\n", ours.display())),
        "{tool} did not load {}:\n{text}",
        ours.display()
    );
    let inits = text
        .lines()
        .filter(|l| l.contains("calling init:") && l.ends_with("/librdmacm.so.1"))
        .count();
    assert_eq!(
        inits, 1,
        "{tool} loaded another librdmacm.so.1 too:\n{text}"
    );
    assert!(text.contains(usage), "{tool} printed no usage:\n{text}");
    let _ = std::fs::remove_dir_all(&lib_dir);
}

#[test]
fn the_distro_rping_loads_ours() {
    tool_loads_ours("rping", "rping -c");
}

#[test]
fn the_distro_udaddy_loads_ours() {
    tool_loads_ours("udaddy", "usage: udaddy");
}
