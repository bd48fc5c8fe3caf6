/* RC QPs between two "sides" (a context, PD, CQ and registered buffer each) on one
 * device, for the C programs of the tests (crates/uroce-verbs/tests/two_contexts.rs,
 * crates/uroce-tools/tests/c/fork.c): open a side, make an RC QP, connect it to a QPN
 * over GID index 1 (the device's IPv4 address), RDMA WRITE into the other side's buffer
 * and SEND to it, each checked byte for byte; any failure prints FAIL and exits 1.
 * Included with -I test-support/c. */
#ifndef UROCE_TEST_RC_SIDE_H
#define UROCE_TEST_RC_SIDE_H

#include <errno.h>
#include <infiniband/verbs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(c) do { if (!(c)) { printf("FAIL line %d: %s (errno %d: %s)\n", __LINE__, #c, errno, strerror(errno)); exit(1); } } while (0)

struct side {
    struct ibv_context *ctx;
    struct ibv_pd *pd;
    struct ibv_cq *cq;
    struct ibv_mr *mr;
    char buf[4096];
};

static void open_side(struct ibv_device *dev, struct side *s) {
    s->ctx = ibv_open_device(dev);
    CHECK(s->ctx);
    s->pd = ibv_alloc_pd(s->ctx);
    CHECK(s->pd);
    s->cq = ibv_create_cq(s->ctx, 64, NULL, NULL, 0);
    CHECK(s->cq);
    s->mr = ibv_reg_mr(s->pd, s->buf, sizeof s->buf,
                       IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    CHECK(s->mr);
}

static struct ibv_qp *rc_qp(struct side *s) {
    struct ibv_qp_init_attr a;
    memset(&a, 0, sizeof a);
    a.send_cq = a.recv_cq = s->cq;
    a.qp_type = IBV_QPT_RC;
    a.cap.max_send_wr = a.cap.max_recv_wr = 8;
    a.cap.max_send_sge = a.cap.max_recv_sge = 1;
    struct ibv_qp *qp = ibv_create_qp(s->pd, &a);
    CHECK(qp);
    struct ibv_qp_attr m;
    memset(&m, 0, sizeof m);
    m.qp_state = IBV_QPS_INIT;
    m.port_num = 1;
    m.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
    CHECK(ibv_modify_qp(qp, &m, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) == 0);
    return qp;
}

static void connect_qp(struct ibv_qp *qp, uint32_t dest, union ibv_gid *gid) {
    struct ibv_qp_attr m;
    memset(&m, 0, sizeof m);
    m.qp_state = IBV_QPS_RTR;
    m.path_mtu = IBV_MTU_1024;
    m.dest_qp_num = dest;
    m.rq_psn = 0;
    m.max_dest_rd_atomic = 1;
    m.min_rnr_timer = 1;
    m.ah_attr.is_global = 1;
    m.ah_attr.grh.dgid = *gid;
    m.ah_attr.grh.sgid_index = 1;
    m.ah_attr.grh.hop_limit = 64;
    m.ah_attr.port_num = 1;
    CHECK(ibv_modify_qp(qp, &m, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                        IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER) == 0);
    memset(&m, 0, sizeof m);
    m.qp_state = IBV_QPS_RTS;
    m.timeout = 14;
    m.retry_cnt = 7;
    m.rnr_retry = 7;
    m.sq_psn = 0;
    m.max_rd_atomic = 1;
    CHECK(ibv_modify_qp(qp, &m, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                        IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC) == 0);
}

static struct ibv_wc wait_wc(struct ibv_cq *cq) {
    struct ibv_wc wc;
    for (long i = 0; i < 400000000; i++) {
        int n = ibv_poll_cq(cq, 1, &wc);
        CHECK(n >= 0);
        if (n == 1) {
            if (wc.status != IBV_WC_SUCCESS) {
                printf("FAIL: completion status %d (%s)\n", wc.status, ibv_wc_status_str(wc.status));
                exit(1);
            }
            return wc;
        }
    }
    printf("FAIL: no completion\n");
    exit(1);
}

static void write_to(struct side *from, struct ibv_qp *qp, struct side *to, char fill) {
    memset(from->buf, fill, 256);
    struct ibv_sge sge = { (uintptr_t)from->buf, 256, from->mr->lkey };
    struct ibv_send_wr wr, *bad;
    memset(&wr, 0, sizeof wr);
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_RDMA_WRITE;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.wr.rdma.remote_addr = (uintptr_t)to->buf + 1024;
    wr.wr.rdma.rkey = to->mr->rkey;
    CHECK(ibv_post_send(qp, &wr, &bad) == 0);
    wait_wc(from->cq);
    for (int i = 0; i < 256; i++) CHECK(to->buf[1024 + i] == fill);
}

static void send_to(struct side *from, struct ibv_qp *sq, struct side *to, struct ibv_qp *rq) {
    struct ibv_sge rsge = { (uintptr_t)to->buf + 2048, 512, to->mr->lkey };
    struct ibv_recv_wr rwr, *rbad;
    memset(&rwr, 0, sizeof rwr);
    rwr.sg_list = &rsge;
    rwr.num_sge = 1;
    CHECK(ibv_post_recv(rq, &rwr, &rbad) == 0);
    memcpy(from->buf, "from the other context", 23);
    struct ibv_sge sge = { (uintptr_t)from->buf, 23, from->mr->lkey };
    struct ibv_send_wr wr, *bad;
    memset(&wr, 0, sizeof wr);
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_SEND;
    wr.send_flags = IBV_SEND_SIGNALED;
    CHECK(ibv_post_send(sq, &wr, &bad) == 0);
    wait_wc(from->cq);
    struct ibv_wc wc = wait_wc(to->cq);
    CHECK(wc.opcode == IBV_WC_RECV && wc.byte_len == 23);
    CHECK(memcmp(to->buf + 2048, "from the other context", 23) == 0);
}

#endif
