//! IBV_ATOMIC_GLOB, tried by a C program against the distro's `<infiniband/verbs.h>` on the
//! built library, in a network namespace, over the UDP backend and over AF_XDP: a thread
//! hammers one 8-byte word of a registered buffer with `__atomic_fetch_add` while a peer
//! QP (RC, connected through the device's own GID) runs FETCH_ADDs on the same word, and
//! at the end the word is exactly the sum of both sides' adds, and every FETCH_ADD saw a
//! different original value. Also: `ibv_query_device` says IBV_ATOMIC_GLOB, a
//! CMP_SWAP on the hammered word swaps only what it compared, and a FETCH_ADD at an
//! address that is not 8-byte aligned completes IBV_WC_REM_INV_REQ_ERR (IBTA §9.4.5, the
//! responder's NAK Invalid Request; rdma_rxe's misaligned-atomic error) with the word
//! untouched.
//!
//! Needs root, iproute2, gcc and libibverbs-dev; skips (saying which is missing)
//! otherwise.

mod common;

use common::{in_ns, text};
use uroce_tools::netns::VethPair;

const PROGRAM: &str = r#"
#include <errno.h>
#include <infiniband/verbs.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(c) do { if (!(c)) { printf("FAIL line %d: %s (errno %d)\n", __LINE__, #c, errno); exit(1); } } while (0)

/* Remote FETCH_ADDs, posted BATCH at a time (each with its own result slot). */
#define N 4000
#define BATCH 16

static struct ibv_cq *cq;
static uint64_t *word;
static volatile int done;
static uint64_t local_adds;

static void *hammer(void *arg) {
    (void)arg;
    uint64_t n = 0;
    while (!__atomic_load_n(&done, __ATOMIC_ACQUIRE)) {
        __atomic_fetch_add(word, 1, __ATOMIC_SEQ_CST);
        n++;
    }
    local_adds = n;
    return NULL;
}

static struct ibv_wc wait_wc(void) {
    struct ibv_wc wc;
    for (long i = 0; i < 2000000000; i++) {
        int n = ibv_poll_cq(cq, 1, &wc);
        CHECK(n >= 0);
        if (n == 1) return wc;
    }
    printf("FAIL: no completion\n");
    exit(1);
}

static struct ibv_qp *rc_qp(struct ibv_pd *pd) {
    struct ibv_qp_init_attr ia;
    memset(&ia, 0, sizeof ia);
    ia.send_cq = cq; ia.recv_cq = cq; ia.qp_type = IBV_QPT_RC;
    ia.cap.max_send_wr = BATCH; ia.cap.max_recv_wr = 1; ia.cap.max_send_sge = 1; ia.cap.max_recv_sge = 1;
    struct ibv_qp *qp = ibv_create_qp(pd, &ia);
    CHECK(qp);
    return qp;
}

static void to_rts(struct ibv_qp *qp, uint32_t dest, union ibv_gid gid) {
    struct ibv_qp_attr a;
    memset(&a, 0, sizeof a);
    a.qp_state = IBV_QPS_INIT; a.pkey_index = 0; a.port_num = 1;
    a.qp_access_flags = IBV_ACCESS_REMOTE_ATOMIC;
    CHECK(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) == 0);
    memset(&a, 0, sizeof a);
    a.qp_state = IBV_QPS_RTR; a.path_mtu = IBV_MTU_1024; a.dest_qp_num = dest; a.rq_psn = 1;
    a.max_dest_rd_atomic = 16; a.min_rnr_timer = 1;
    a.ah_attr.is_global = 1; a.ah_attr.grh.dgid = gid; a.ah_attr.grh.sgid_index = 1;
    a.ah_attr.grh.hop_limit = 1; a.ah_attr.port_num = 1;
    CHECK(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                        IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER) == 0);
    memset(&a, 0, sizeof a);
    a.qp_state = IBV_QPS_RTS; a.timeout = 14; a.retry_cnt = 7; a.rnr_retry = 7; a.sq_psn = 1;
    a.max_rd_atomic = 16;
    CHECK(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                        IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC) == 0);
}

static int cmp_u64(const void *x, const void *y) {
    uint64_t a = *(const uint64_t *)x, b = *(const uint64_t *)y;
    return a < b ? -1 : a > b;
}

int main(void) {
    struct ibv_device **list = ibv_get_device_list(NULL);
    CHECK(list && list[0]);
    struct ibv_context *ctx = ibv_open_device(list[0]);
    CHECK(ctx);
    struct ibv_device_attr dattr;
    CHECK(ibv_query_device(ctx, &dattr) == 0);
    CHECK(dattr.atomic_cap == IBV_ATOMIC_GLOB);
    union ibv_gid gid;
    CHECK(ibv_query_gid(ctx, 1, 1, &gid) == 0);
    struct ibv_pd *pd = ibv_alloc_pd(ctx);
    CHECK(pd);
    cq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
    CHECK(cq);
    /* The target word, in a buffer of its own (B's side), and A's result slots. */
    uint64_t *target = aligned_alloc(64, 64), *results = aligned_alloc(64, 8 * BATCH);
    uint64_t *seen = calloc(N, sizeof *seen);
    CHECK(target && results && seen);
    memset(target, 0, 64);
    word = target;
    int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_ATOMIC;
    struct ibv_mr *t_mr = ibv_reg_mr(pd, target, 64, access);
    struct ibv_mr *r_mr = ibv_reg_mr(pd, results, 8 * BATCH, IBV_ACCESS_LOCAL_WRITE);
    CHECK(t_mr && r_mr);
    struct ibv_qp *a = rc_qp(pd), *b = rc_qp(pd);
    to_rts(a, b->qp_num, gid);
    to_rts(b, a->qp_num, gid);

    pthread_t t;
    CHECK(pthread_create(&t, NULL, hammer, NULL) == 0);
    /* Wait until the hammer has started, so that the two sides overlap. */
    while (__atomic_load_n(word, __ATOMIC_SEQ_CST) == 0) {}
    struct ibv_sge sge[BATCH];
    struct ibv_send_wr wr[BATCH], *bad = NULL;
    int got = 0;
    while (got < N) {
        int n = N - got < BATCH ? N - got : BATCH;
        for (int i = 0; i < n; i++) {
            sge[i] = (struct ibv_sge){ (uintptr_t)&results[i], 8, r_mr->lkey };
            memset(&wr[i], 0, sizeof wr[i]);
            wr[i].wr_id = got + i; wr[i].sg_list = &sge[i]; wr[i].num_sge = 1;
            wr[i].opcode = IBV_WR_ATOMIC_FETCH_AND_ADD; wr[i].send_flags = IBV_SEND_SIGNALED;
            wr[i].wr.atomic.remote_addr = (uintptr_t)target; wr[i].wr.atomic.rkey = t_mr->rkey;
            wr[i].wr.atomic.compare_add = 1;
            wr[i].next = i + 1 < n ? &wr[i + 1] : NULL;
        }
        CHECK(ibv_post_send(a, &wr[0], &bad) == 0);
        for (int i = 0; i < n; i++) {
            struct ibv_wc wc = wait_wc();
            CHECK(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_FETCH_ADD);
            CHECK(wc.wr_id >= (uint64_t)got && wc.wr_id < (uint64_t)(got + n));
        }
        for (int i = 0; i < n; i++) seen[got + i] = results[i];
        got += n;
    }
    __atomic_store_n(&done, 1, __ATOMIC_RELEASE);
    CHECK(pthread_join(t, NULL) == 0);
    uint64_t final = __atomic_load_n(word, __ATOMIC_SEQ_CST);
    printf("local adds %llu, remote adds %d, word %llu\n", (unsigned long long)local_adds, N,
           (unsigned long long)final);
    CHECK(local_adds > 0);
    CHECK(final == local_adds + N);
    qsort(seen, N, sizeof *seen, cmp_u64);
    for (int i = 1; i < N; i++) CHECK(seen[i] != seen[i - 1]);
    CHECK(seen[N - 1] < final);

    /* CMP_SWAP on the same word: swaps what it compared, leaves a mismatch alone. */
    struct ibv_send_wr cw;
    memset(&cw, 0, sizeof cw);
    sge[0] = (struct ibv_sge){ (uintptr_t)&results[0], 8, r_mr->lkey };
    cw.wr_id = 100; cw.sg_list = &sge[0]; cw.num_sge = 1; cw.opcode = IBV_WR_ATOMIC_CMP_AND_SWP;
    cw.send_flags = IBV_SEND_SIGNALED; cw.wr.atomic.remote_addr = (uintptr_t)target;
    cw.wr.atomic.rkey = t_mr->rkey; cw.wr.atomic.compare_add = final; cw.wr.atomic.swap = 7;
    CHECK(ibv_post_send(a, &cw, &bad) == 0);
    struct ibv_wc wc = wait_wc();
    CHECK(wc.wr_id == 100 && wc.status == IBV_WC_SUCCESS && results[0] == final && *word == 7);
    cw.wr_id = 101; cw.wr.atomic.compare_add = final; cw.wr.atomic.swap = 9;
    CHECK(ibv_post_send(a, &cw, &bad) == 0);
    wc = wait_wc();
    CHECK(wc.wr_id == 101 && wc.status == IBV_WC_SUCCESS && results[0] == 7 && *word == 7);

    /* A FETCH_ADD whose address is not 8-byte aligned: NAK Invalid Request, the word
       untouched. */
    cw.wr_id = 102; cw.opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
    cw.wr.atomic.remote_addr = (uintptr_t)target + 4; cw.wr.atomic.compare_add = 1;
    CHECK(ibv_post_send(a, &cw, &bad) == 0);
    wc = wait_wc();
    CHECK(wc.wr_id == 102 && wc.status == IBV_WC_REM_INV_REQ_ERR);
    CHECK(target[0] == 7 && target[1] == 0);

    CHECK(ibv_destroy_qp(a) == 0 && ibv_destroy_qp(b) == 0);
    CHECK(ibv_dereg_mr(t_mr) == 0 && ibv_dereg_mr(r_mr) == 0);
    CHECK(ibv_destroy_cq(cq) == 0);
    CHECK(ibv_dealloc_pd(pd) == 0);
    CHECK(ibv_close_device(ctx) == 0);
    ibv_free_device_list(list);
    printf("ok\n");
    return 0;
}
"#;

fn hammer(backend: &str) {
    if !common::can_run_c_in_namespaces() {
        return;
    }
    let lib = common::library_dir(&format!("ag-{backend}"));
    let Some(exe) = common::compile_c(&lib, "atomic", PROGRAM, &["-libverbs", "-lpthread"]) else {
        return;
    };
    let pair = VethPair::create(&format!("ag{}", &backend[..1]), 1500).expect("veth pair");
    let exe = exe.to_str().unwrap().to_string();
    let run = in_ns(
        &pair.ns[0],
        &lib,
        &[("UROCE_BACKEND", backend)],
        &["timeout", "120", &exe],
    )
    .output()
    .expect("ip netns exec");
    let out = text(&run);
    assert!(
        run.status.success() && out.ends_with("ok\n"),
        "{backend}:\n{out}"
    );
    eprint!("{backend}: {out}");
    drop(pair);
    let _ = std::fs::remove_dir_all(&lib);
}

#[test]
fn remote_fetch_add_and_local_atomics_lose_nothing_over_udp() {
    hammer("udp");
}

#[test]
fn remote_fetch_add_and_local_atomics_lose_nothing_over_af_xdp() {
    hammer("xdp");
}
