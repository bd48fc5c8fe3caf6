//! No call aborts its host: a panic inside an `rdma_*` call is caught at the C boundary
//! (`src/ffi.rs`) and the C program gets the call's documented failure with errno EIO,
//! then goes on. The panic is forced with the debug-only test hook
//! (`UROCE_TEST_PANIC=<entry point>`: the first call of that entry point panics), in
//! `rdma_create_event_channel` (NULL, errno EIO), `rdma_create_id`, `rdma_bind_addr` and
//! `rdma_destroy_id` (-1, errno EIO). Each time the program repeats the call, which
//! succeeds (the bind with both drop-in libraries, to the veth's address), and ends with
//! exit status 0.
//!
//! Needs root, iproute2, gcc and librdmacm-dev; skips (saying which is missing)
//! otherwise, and in a release build, which has no hook.

mod common;

use common::{in_ns, text};
use uroce_tools::netns::{self, VethPair};

const PROGRAM: &str = r#"
#include <errno.h>
#include <rdma/rdma_cma.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>

#define CHECK(c) do { if (!(c)) { printf("FAIL line %d: %s (errno %d)\n", __LINE__, #c, errno); exit(1); } } while (0)

static const char *target;
static int panics_in(const char *name) { return target && strcmp(target, name) == 0; }

int main(int argc, char **argv) {
    CHECK(argc == 2);
    target = getenv("UROCE_TEST_PANIC");

    errno = 0;
    struct rdma_event_channel *ch = rdma_create_event_channel();
    if (panics_in("rdma_create_event_channel")) {
        CHECK(ch == NULL && errno == EIO);
        ch = rdma_create_event_channel();
    }
    CHECK(ch);

    struct rdma_cm_id *id = NULL;
    errno = 0;
    int r = rdma_create_id(ch, &id, NULL, RDMA_PS_TCP);
    if (panics_in("rdma_create_id")) {
        CHECK(r == -1 && errno == EIO);
        r = rdma_create_id(ch, &id, NULL, RDMA_PS_TCP);
    }
    CHECK(r == 0 && id);

    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    CHECK(inet_pton(AF_INET, argv[1], &a.sin_addr) == 1);
    errno = 0;
    r = rdma_bind_addr(id, (struct sockaddr *)&a);
    if (panics_in("rdma_bind_addr")) {
        CHECK(r == -1 && errno == EIO);
        r = rdma_bind_addr(id, (struct sockaddr *)&a);
    }
    CHECK(r == 0 && rdma_get_src_port(id) != 0 && id->verbs);

    errno = 0;
    r = rdma_destroy_id(id);
    if (panics_in("rdma_destroy_id")) {
        CHECK(r == -1 && errno == EIO);
        r = rdma_destroy_id(id);
    }
    CHECK(r == 0);
    rdma_destroy_event_channel(ch);
    printf("ok\n");
    return 0;
}
"#;

#[test]
fn a_panic_in_a_call_is_an_error_return_and_the_program_goes_on() {
    if !cfg!(debug_assertions) {
        eprintln!("SKIP: a release build has no test hook");
        return;
    }
    if let Err(e) = netns::check_privileges() {
        eprintln!("SKIP: {e}");
        return;
    }
    if !std::path::Path::new("/usr/include/rdma/rdma_cma.h").exists() {
        eprintln!("SKIP: <rdma/rdma_cma.h> is missing (apt-get install librdmacm-dev)");
        return;
    }
    let lib = common::both_libraries_dir("panic");
    let Some(exe) = common::compile_c(&lib, "panic", PROGRAM, &["-lrdmacm", "-libverbs"]) else {
        return;
    };
    let pair = VethPair::create("cpn", 1500).expect("veth pair");
    let exe = exe.to_str().unwrap().to_string();
    let addr = pair.addrs[0].to_string();
    for target in [
        "",
        "rdma_create_event_channel",
        "rdma_create_id",
        "rdma_bind_addr",
        "rdma_destroy_id",
    ] {
        let run = in_ns(
            &pair.ns[0],
            &lib,
            &[("UROCE_TEST_PANIC", target)],
            &["timeout", "60", &exe, &addr],
        )
        .output()
        .expect("ip netns exec");
        let all = text(&run);
        assert!(
            run.status.success() && String::from_utf8_lossy(&run.stdout) == "ok\n",
            "panic in {target:?}:\n{all}"
        );
        // The panic did happen (the default panic hook's report), and nothing else was
        // printed by the libraries.
        let stderr = String::from_utf8_lossy(&run.stderr);
        if target.is_empty() {
            assert!(stderr.is_empty(), "{all}");
        } else {
            assert!(
                stderr.contains(&format!("the panic asked for in {target}")),
                "{all}"
            );
        }
    }
    drop(pair);
    let _ = std::fs::remove_dir_all(&lib);
}
