//! Protection domains, memory regions over the program's own memory and completion
//! queues, from a C program on the built library (in a veth namespace, as root): what
//! succeeds, what fails with the errno ibverbs gives, and double frees refused.

mod common;

use std::process::Command;

use uroce_tools::netns::VethPair;

const PROGRAM: &str = r#"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <infiniband/verbs.h>

#define CHECK(c) do { if (!(c)) { printf("FAIL line %d: %s (errno %d)\n", __LINE__, #c, errno); return 1; } } while (0)

int main(void) {
    struct ibv_device **list = ibv_get_device_list(NULL);
    CHECK(list && list[0]);
    struct ibv_context *ctx = ibv_open_device(list[0]);
    ibv_free_device_list(list);
    CHECK(ctx);

    struct ibv_pd *pd = ibv_alloc_pd(ctx);
    CHECK(pd && pd->context == ctx);
    struct ibv_pd *pd2 = ibv_alloc_pd(ctx);
    CHECK(pd2 && pd2 != pd);

    size_t len = 1 << 20;
    char *buf = malloc(len);
    CHECK(buf);
    struct ibv_mr *mr = ibv_reg_mr(pd, buf, len,
        IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
    CHECK(mr && mr->addr == buf && mr->length == len && mr->pd == pd && mr->context == ctx);
    printf("lkey %08x rkey %08x\n", mr->lkey, mr->rkey);

    void *page = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(page != MAP_FAILED);
    struct ibv_mr *mr2 = ibv_reg_mr(pd2, page, 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_RELAXED_ORDERING);
    CHECK(mr2 && mr2->addr == page && mr2->lkey != mr->lkey);

    /* Refusals, as ibverbs gives them. */
    errno = 0;
    CHECK(ibv_reg_mr(pd, buf, len, IBV_ACCESS_REMOTE_WRITE) == NULL && errno == EINVAL);
    errno = 0;
    CHECK(ibv_reg_mr(pd, buf, 0, IBV_ACCESS_LOCAL_WRITE) == NULL && errno == EINVAL);
    errno = 0;
    CHECK(ibv_reg_mr(pd, buf, len, IBV_ACCESS_ON_DEMAND) == NULL && errno == EOPNOTSUPP);
    errno = 0;
    CHECK(ibv_reg_mr_iova(pd, buf, len, 0x1000, IBV_ACCESS_LOCAL_WRITE) == NULL && errno == EOPNOTSUPP);
    CHECK(ibv_dealloc_pd(pd) == EBUSY);

    struct ibv_cq *cq = ibv_create_cq(ctx, 10, (void *)0x1234, NULL, 0);
    CHECK(cq && cq->context == ctx && cq->cqe == 15 && cq->cq_context == (void *)0x1234);
    struct ibv_cq *big = ibv_create_cq(ctx, 4096, NULL, NULL, 0);
    CHECK(big && big->cqe == 8191);
    errno = 0;
    CHECK(ibv_create_cq(ctx, 0, NULL, NULL, 0) == NULL && errno == EINVAL);
    errno = 0;
    CHECK(ibv_create_cq(ctx, 1 << 23, NULL, NULL, 0) == NULL && errno == EINVAL);
    errno = 0;
    CHECK(ibv_create_cq(ctx, 16, NULL, NULL, 1) == NULL && errno == EINVAL);
    struct ibv_wc wc;
    CHECK(ibv_poll_cq(cq, 1, &wc) == 0);

    /* The memory is the program's: still usable while registered, and after. */
    memset(buf, 0x5a, len);
    CHECK(ibv_destroy_cq(cq) == 0);
    CHECK(ibv_destroy_cq(cq) == EINVAL);
    CHECK(ibv_destroy_cq(big) == 0);
    CHECK(ibv_dereg_mr(mr) == 0);
    CHECK(ibv_dereg_mr(mr) == EINVAL);
    CHECK(ibv_dealloc_pd(pd) == 0);
    CHECK(ibv_dealloc_pd(pd) == EINVAL);
    CHECK(ibv_dereg_mr(mr2) == 0);
    CHECK(ibv_dealloc_pd(pd2) == 0);
    CHECK(buf[len - 1] == 0x5a);
    free(buf);
    munmap(page, 4096);
    CHECK(ibv_close_device(ctx) == 0);
    printf("ok\n");
    return 0;
}
"#;

#[test]
fn pd_mr_cq_from_c() {
    if !common::can_run_c_in_namespaces() {
        return;
    }
    let lib = common::library_dir("pdmrcq");
    let Some(exe) = common::compile_c(&lib, "pd_mr_cq", PROGRAM, &["-libverbs"]) else {
        return;
    };
    let pair = VethPair::create("vpm", 1500).expect("veth pair");
    let out = Command::new("ip")
        .args(["netns", "exec", &pair.ns[0]])
        .arg(&exe)
        .env("LD_LIBRARY_PATH", &lib)
        .output()
        .expect("run");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{text}");
    assert!(text.ends_with("ok\n"), "{text}");
    drop(pair);
    let _ = std::fs::remove_dir_all(&lib);
}
