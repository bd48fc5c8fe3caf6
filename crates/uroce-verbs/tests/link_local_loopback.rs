//! Two RC QPs of one device talking through GID 0, the link-local default GID (fe80:: with
//! the MAC's EUI-64), which rdma-core's own tests (pyverbs) pick first: a SEND, an RDMA
//! READ and a FETCH_ADD complete, and one with a bad rkey completes in error, as on
//! rdma_rxe. The device's link-local address is its own, so what goes to it is delivered
//! locally, never put on the wire (where it used to be lost, and nothing completed).
//! Over AF_XDP and over the UDP backend (whose second socket, on the link-local address,
//! makes GID 0 one it serves: `qp::remote_of`).
//!
//! Needs root, iproute2, gcc and libibverbs-dev; skips (saying which is missing)
//! otherwise.

mod common;

use common::{in_ns, text};
use uroce_tools::netns::VethPair;

const PROGRAM: &str = r#"
#include <errno.h>
#include <infiniband/verbs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CHECK(c) do { if (!(c)) { printf("FAIL line %d: %s (errno %d)\n", __LINE__, #c, errno); exit(1); } } while (0)

static struct ibv_cq *cq;

static struct ibv_wc wait_wc(void) {
    struct ibv_wc wc;
    time_t end = time(NULL) + 5;
    while (time(NULL) < end) {
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
    ia.cap.max_send_wr = 4; ia.cap.max_recv_wr = 4; ia.cap.max_send_sge = 1; ia.cap.max_recv_sge = 1;
    struct ibv_qp *qp = ibv_create_qp(pd, &ia);
    CHECK(qp);
    return qp;
}

static void to_rts(struct ibv_qp *qp, uint32_t dest, union ibv_gid gid) {
    struct ibv_qp_attr a;
    memset(&a, 0, sizeof a);
    a.qp_state = IBV_QPS_INIT; a.port_num = 1;
    a.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
    CHECK(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) == 0);
    memset(&a, 0, sizeof a);
    a.qp_state = IBV_QPS_RTR; a.path_mtu = IBV_MTU_1024; a.dest_qp_num = dest; a.rq_psn = 1;
    a.max_dest_rd_atomic = 1; a.min_rnr_timer = 12;
    a.ah_attr.is_global = 1; a.ah_attr.grh.dgid = gid; a.ah_attr.grh.sgid_index = 0;
    a.ah_attr.grh.hop_limit = 1; a.ah_attr.port_num = 1;
    CHECK(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                        IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER) == 0);
    memset(&a, 0, sizeof a);
    a.qp_state = IBV_QPS_RTS; a.timeout = 14; a.retry_cnt = 7; a.rnr_retry = 7; a.sq_psn = 1;
    a.max_rd_atomic = 1;
    CHECK(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                        IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC) == 0);
}

int main(void) {
    struct ibv_device **list = ibv_get_device_list(NULL);
    CHECK(list && list[0]);
    struct ibv_context *ctx = ibv_open_device(list[0]);
    CHECK(ctx);
    union ibv_gid gid;
    CHECK(ibv_query_gid(ctx, 1, 0, &gid) == 0);
    CHECK(gid.raw[0] == 0xfe && gid.raw[1] == 0x80);
    struct ibv_pd *pd = ibv_alloc_pd(ctx);
    CHECK(pd);
    cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
    CHECK(cq);
    uint64_t *t = aligned_alloc(4096, 4096), *r = aligned_alloc(4096, 4096);
    CHECK(t && r);
    t[0] = 5; r[0] = 0;
    int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
    struct ibv_mr *t_mr = ibv_reg_mr(pd, t, 8, access), *r_mr = ibv_reg_mr(pd, r, 8, access);
    CHECK(t_mr && r_mr);
    struct ibv_qp *a = rc_qp(pd), *b = rc_qp(pd);
    to_rts(a, b->qp_num, gid);
    to_rts(b, a->qp_num, gid);

    /* SEND from a to b's receive. */
    struct ibv_sge rs = { (uintptr_t)t, 8, t_mr->lkey }, ss = { (uintptr_t)r, 8, r_mr->lkey };
    struct ibv_recv_wr rw = { .wr_id = 1, .sg_list = &rs, .num_sge = 1 }, *rbad;
    CHECK(ibv_post_recv(b, &rw, &rbad) == 0);
    r[0] = 9;
    struct ibv_send_wr w, *bad;
    memset(&w, 0, sizeof w);
    w.wr_id = 2; w.sg_list = &ss; w.num_sge = 1; w.opcode = IBV_WR_SEND; w.send_flags = IBV_SEND_SIGNALED;
    CHECK(ibv_post_send(a, &w, &bad) == 0);
    int seen = 0;
    for (int i = 0; i < 2; i++) {
        struct ibv_wc wc = wait_wc();
        CHECK(wc.status == IBV_WC_SUCCESS);
        seen |= 1 << wc.wr_id;
    }
    CHECK(seen == 6 && t[0] == 9);

    /* RDMA READ of b's word into a's. */
    t[0] = 11; r[0] = 0;
    memset(&w, 0, sizeof w);
    w.wr_id = 3; w.sg_list = &ss; w.num_sge = 1; w.opcode = IBV_WR_RDMA_READ; w.send_flags = IBV_SEND_SIGNALED;
    w.wr.rdma.remote_addr = (uintptr_t)t; w.wr.rdma.rkey = t_mr->rkey;
    CHECK(ibv_post_send(a, &w, &bad) == 0);
    struct ibv_wc wc = wait_wc();
    CHECK(wc.wr_id == 3 && wc.status == IBV_WC_SUCCESS && r[0] == 11);

    /* FETCH_ADD on b's word. */
    memset(&w, 0, sizeof w);
    w.wr_id = 4; w.sg_list = &ss; w.num_sge = 1; w.opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
    w.send_flags = IBV_SEND_SIGNALED;
    w.wr.atomic.remote_addr = (uintptr_t)t; w.wr.atomic.rkey = t_mr->rkey; w.wr.atomic.compare_add = 2;
    CHECK(ibv_post_send(a, &w, &bad) == 0);
    wc = wait_wc();
    CHECK(wc.wr_id == 4 && wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_FETCH_ADD);
    CHECK(r[0] == 11 && t[0] == 13);

    /* A bad rkey: the responder's NAK completes it in error. */
    w.wr_id = 5; w.wr.atomic.rkey = t_mr->rkey + 1;
    CHECK(ibv_post_send(a, &w, &bad) == 0);
    wc = wait_wc();
    CHECK(wc.wr_id == 5 && wc.status == IBV_WC_REM_ACCESS_ERR && t[0] == 13);
    printf("ok\n");
    return 0;
}
"#;

fn run(backend: &str) {
    if !common::can_run_c_in_namespaces() {
        return;
    }
    let lib = common::library_dir(&format!("ll-{backend}"));
    let Some(exe) = common::compile_c(&lib, "link_local", PROGRAM, &["-libverbs"]) else {
        return;
    };
    let pair = VethPair::create(&format!("ll{}", &backend[..1]), 1500).expect("veth pair");
    let exe = exe.to_str().unwrap().to_string();
    let run = in_ns(
        &pair.ns[0],
        &lib,
        &[("UROCE_BACKEND", backend)],
        &["timeout", "60", &exe],
    )
    .output()
    .expect("ip netns exec");
    let out = text(&run);
    assert!(
        run.status.success() && out.ends_with("ok\n"),
        "{backend}:\n{out}"
    );
    drop(pair);
    let _ = std::fs::remove_dir_all(&lib);
}

#[test]
fn qps_of_one_device_talk_through_the_link_local_gid_over_af_xdp() {
    run("xdp");
}

#[test]
fn qps_of_one_device_talk_through_the_link_local_gid_over_udp() {
    run("udp");
}
