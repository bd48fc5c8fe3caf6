//! No verb aborts its host: a panic inside a verb is caught at the C boundary
//! (`src/ffi.rs`) and the C program gets the verb's documented failure with errno EIO,
//! then goes on. The panic is forced with the debug-only test hook
//! (`UROCE_TEST_PANIC=<entry point>`: the first call of that entry point panics), in a
//! verb of each failure convention: `ibv_alloc_pd` (NULL, errno EIO), `ibv_query_gid`
//! (-1, errno EIO), `ibv_dealloc_pd` (the value EIO), and `poll_cq`, the function pointer
//! the inline `ibv_poll_cq` calls (a negative count, errno EIO), and `wr_send`, the
//! `ibv_wr_send` builder (its batch fails: `ibv_wr_complete` returns EIO and posts
//! nothing). Each time the program
//! repeats the call, which succeeds, and ends with exit status 0.
//!
//! Needs root, iproute2, gcc and libibverbs-dev; skips (saying which is missing)
//! otherwise, and in a release build, which has no hook.

mod common;

use common::{in_ns, text};
use uroce_tools::netns::VethPair;

const PROGRAM: &str = r#"
#include <errno.h>
#include <infiniband/verbs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(c) do { if (!(c)) { printf("FAIL line %d: %s (errno %d)\n", __LINE__, #c, errno); exit(1); } } while (0)

static const char *target;
static int panics_in(const char *name) { return target && strcmp(target, name) == 0; }

int main(void) {
    target = getenv("UROCE_TEST_PANIC");
    struct ibv_device **list = ibv_get_device_list(NULL);
    CHECK(list && list[0]);
    struct ibv_context *ctx = ibv_open_device(list[0]);
    ibv_free_device_list(list);
    CHECK(ctx);

    errno = 0;
    struct ibv_pd *pd = ibv_alloc_pd(ctx);
    if (panics_in("ibv_alloc_pd")) {
        CHECK(pd == NULL && errno == EIO);
        pd = ibv_alloc_pd(ctx);
    }
    CHECK(pd);

    union ibv_gid gid;
    errno = 0;
    int r = ibv_query_gid(ctx, 1, 0, &gid);
    if (panics_in("ibv_query_gid")) {
        CHECK(r == -1 && errno == EIO);
        r = ibv_query_gid(ctx, 1, 0, &gid);
    }
    CHECK(r == 0 && gid.raw[0] == 0xfe);

    struct ibv_cq *cq = ibv_create_cq(ctx, 4, NULL, NULL, 0);
    CHECK(cq);
    struct ibv_wc wc;
    errno = 0;
    r = ibv_poll_cq(cq, 1, &wc);
    if (panics_in("poll_cq")) {
        CHECK(r < 0 && errno == EIO);
        r = ibv_poll_cq(cq, 1, &wc);
    }
    CHECK(r == 0);

    /* A work request builder of the extended API: the batch fails with EIO, nothing is
       posted; built again it reaches the post (refused before RTS). */
    struct ibv_qp_init_attr_ex ia;
    memset(&ia, 0, sizeof ia);
    ia.send_cq = cq; ia.recv_cq = cq; ia.qp_type = IBV_QPT_RC;
    ia.cap.max_send_wr = 1; ia.cap.max_recv_wr = 1; ia.cap.max_send_sge = 1; ia.cap.max_recv_sge = 1;
    ia.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
    ia.pd = pd; ia.send_ops_flags = IBV_QP_EX_WITH_SEND;
    struct ibv_qp *qp = ibv_create_qp_ex(ctx, &ia);
    CHECK(qp);
    struct ibv_qp_ex *qx = ibv_qp_to_qp_ex(qp);
    CHECK(qx);
    ibv_wr_start(qx);
    ibv_wr_send(qx);
    r = ibv_wr_complete(qx);
    if (panics_in("wr_send")) {
        CHECK(r == EIO);
        ibv_wr_start(qx);
        ibv_wr_send(qx);
        r = ibv_wr_complete(qx);
    }
    CHECK(r == EINVAL);
    CHECK(ibv_destroy_qp(qp) == 0);
    CHECK(ibv_destroy_cq(cq) == 0);

    r = ibv_dealloc_pd(pd);
    if (panics_in("ibv_dealloc_pd")) {
        CHECK(r == EIO);
        r = ibv_dealloc_pd(pd);
    }
    CHECK(r == 0);
    CHECK(ibv_close_device(ctx) == 0);
    printf("ok\n");
    return 0;
}
"#;

#[test]
fn a_panic_in_a_verb_is_an_error_return_and_the_program_goes_on() {
    if !cfg!(debug_assertions) {
        eprintln!("SKIP: a release build has no test hook");
        return;
    }
    if !common::can_run_c_in_namespaces() {
        return;
    }
    let lib = common::library_dir("panic");
    let Some(exe) = common::compile_c(&lib, "panic", PROGRAM, &["-libverbs"]) else {
        return;
    };
    let pair = VethPair::create("vpn", 1500).expect("veth pair");
    let exe = exe.to_str().unwrap().to_string();
    for target in [
        "",
        "ibv_alloc_pd",
        "ibv_query_gid",
        "poll_cq",
        "wr_send",
        "ibv_dealloc_pd",
    ] {
        let run = in_ns(
            &pair.ns[0],
            &lib,
            &[("UROCE_TEST_PANIC", target)],
            &["timeout", "60", &exe],
        )
        .output()
        .expect("ip netns exec");
        let all = text(&run);
        assert!(
            run.status.success() && String::from_utf8_lossy(&run.stdout) == "ok\n",
            "panic in {target:?}:\n{all}"
        );
        // The panic did happen (the default panic hook's report), and nothing else was
        // printed by the library.
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
