//! The extended verbs API from a C program against the distro's `<infiniband/verbs.h>`,
//! run on the built library in a network namespace (UDP backend and AF_XDP):
//! - `ibv_create_cq_ex` (a completion channel, `wc_flags` of the standard fields) polled
//!   with `ibv_start_poll` / `ibv_next_poll` / `ibv_end_poll` and the `ibv_wc_read_*`
//!   readers; ENOENT on an empty CQ; a completion timestamp is EOPNOTSUPP;
//! - `ibv_create_qp_ex` with `send_ops_flags` and the `ibv_wr_*` builders between two RC
//!   QPs of one device (loopback through its own GID): one batch of RDMA WRITE and WRITE
//!   with immediate, RDMA READ, fetch-and-add and compare-and-swap in one batch, SEND with
//!   immediate from inline data, SEND of an SGE list and of an inline list, each with its
//!   data checked in the program's buffers; a type 2 window bound, used, invalidated
//!   (`ibv_wr_bind_mw`, `ibv_wr_local_inv`, `ibv_wr_send_inv`); UD SENDs through
//!   `ibv_wr_set_ud_addr`;
//! - the refusals: operations a QP type does not take (EOPNOTSUPP at create); a batch
//!   before RTS (EINVAL), an operation not asked for, an SGE list longer than
//!   `max_send_sge`, inline data longer than `max_inline_data`, a UD send without
//!   destination (each fails `ibv_wr_complete` and posts nothing); an aborted batch posts
//!   nothing; `ibv_qp_to_qp_ex` of an `ibv_create_qp` QP is NULL.
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
#include <arpa/inet.h>

#define CHECK(c) do { if (!(c)) { printf("FAIL line %d: %s (errno %d)\n", __LINE__, #c, errno); exit(1); } } while (0)

static struct ibv_cq_ex *cqx;

struct done { uint64_t wr_id; int status, opcode; uint32_t byte_len, imm, qp_num, src_qp, flags; };

/* The next completion of cqx, through the extended interface; start_poll on the empty
   CQ answers ENOENT while waiting. */
static struct done next_done(void) {
    struct ibv_poll_cq_attr pa = { 0 };
    for (long i = 0; i < 200000000; i++) {
        int r = ibv_start_poll(cqx, &pa);
        if (r == ENOENT) continue;
        CHECK(r == 0);
        struct done d = { cqx->wr_id, cqx->status, ibv_wc_read_opcode(cqx), ibv_wc_read_byte_len(cqx),
                          ibv_wc_read_imm_data(cqx), ibv_wc_read_qp_num(cqx), ibv_wc_read_src_qp(cqx),
                          ibv_wc_read_wc_flags(cqx) };
        ibv_end_poll(cqx);
        return d;
    }
    printf("FAIL: no completion\n");
    exit(1);
}

static void to_rts(struct ibv_qp *qp, uint32_t dest, union ibv_gid gid) {
    struct ibv_qp_attr a;
    memset(&a, 0, sizeof a);
    a.qp_state = IBV_QPS_INIT; a.port_num = 1;
    a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
    CHECK(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) == 0);
    memset(&a, 0, sizeof a);
    a.qp_state = IBV_QPS_RTR; a.path_mtu = IBV_MTU_1024; a.dest_qp_num = dest; a.rq_psn = 7;
    a.max_dest_rd_atomic = 4; a.min_rnr_timer = 1;
    a.ah_attr.is_global = 1; a.ah_attr.grh.dgid = gid; a.ah_attr.grh.sgid_index = 1;
    a.ah_attr.grh.hop_limit = 1; a.ah_attr.port_num = 1;
    CHECK(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                        IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER) == 0);
    memset(&a, 0, sizeof a);
    a.qp_state = IBV_QPS_RTS; a.timeout = 14; a.retry_cnt = 7; a.rnr_retry = 7; a.sq_psn = 7;
    a.max_rd_atomic = 4;
    CHECK(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                        IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC) == 0);
}

static struct ibv_qp *qp_ex(struct ibv_context *ctx, struct ibv_pd *pd, int type, uint64_t ops) {
    struct ibv_qp_init_attr_ex ia;
    memset(&ia, 0, sizeof ia);
    ia.send_cq = ibv_cq_ex_to_cq(cqx); ia.recv_cq = ibv_cq_ex_to_cq(cqx); ia.qp_type = type;
    ia.cap.max_send_wr = 8; ia.cap.max_recv_wr = 8; ia.cap.max_send_sge = 2; ia.cap.max_recv_sge = 2;
    ia.cap.max_inline_data = 64;
    ia.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
    ia.pd = pd; ia.send_ops_flags = ops;
    return ibv_create_qp_ex(ctx, &ia);
}

static void post_recv(struct ibv_qp *qp, uint64_t id, void *addr, uint32_t len, uint32_t lkey) {
    struct ibv_sge s = { (uintptr_t)addr, len, lkey };
    struct ibv_recv_wr r = { .wr_id = id, .next = NULL, .sg_list = &s, .num_sge = 1 }, *bad;
    CHECK(ibv_post_recv(qp, &r, &bad) == 0);
}

/* No completion comes for a while: nothing was posted. */
static void nothing_completes(void) {
    struct ibv_poll_cq_attr pa = { 0 };
    for (int i = 0; i < 20000; i++) CHECK(ibv_start_poll(cqx, &pa) == ENOENT);
}

int main(void) {
    struct ibv_device **list = ibv_get_device_list(NULL);
    CHECK(list && list[0]);
    struct ibv_context *ctx = ibv_open_device(list[0]);
    CHECK(ctx);
    union ibv_gid gid;
    CHECK(ibv_query_gid(ctx, 1, 1, &gid) == 0);
    struct ibv_pd *pd = ibv_alloc_pd(ctx);
    CHECK(pd);

    /* The CQ: on a completion channel, with the standard fields. A timestamp is refused. */
    struct ibv_comp_channel *ch = ibv_create_comp_channel(ctx);
    CHECK(ch);
    struct ibv_cq_init_attr_ex ca;
    memset(&ca, 0, sizeof ca);
    ca.cqe = 64; ca.cq_context = (void *)0x5678; ca.channel = ch;
    ca.wc_flags = IBV_WC_EX_WITH_COMPLETION_TIMESTAMP;
    errno = 0;
    CHECK(ibv_create_cq_ex(ctx, &ca) == NULL && errno == EOPNOTSUPP);
    ca.wc_flags = IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_IMM | IBV_WC_EX_WITH_QP_NUM | IBV_WC_EX_WITH_SRC_QP;
    cqx = ibv_create_cq_ex(ctx, &ca);
    CHECK(cqx && cqx->cqe >= 64 && ibv_cq_ex_to_cq(cqx)->channel == ch);
    struct ibv_poll_cq_attr pa = { 0 };
    CHECK(ibv_start_poll(cqx, &pa) == ENOENT);
    struct done d;

    char *a_buf = calloc(1, 8192), *b_buf = calloc(1, 8192);
    int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                 IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_MW_BIND;
    struct ibv_mr *a_mr = ibv_reg_mr(pd, a_buf, 8192, access), *b_mr = ibv_reg_mr(pd, b_buf, 8192, access);
    CHECK(a_mr && b_mr);

    /* What a QP type does not take is refused at create. */
    errno = 0;
    CHECK(qp_ex(ctx, pd, IBV_QPT_UD, IBV_QP_EX_WITH_RDMA_WRITE) == NULL && errno == EOPNOTSUPP);
    errno = 0;
    CHECK(qp_ex(ctx, pd, IBV_QPT_RC, IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_TSO) == NULL && errno == EOPNOTSUPP);
    errno = 0;
    CHECK(qp_ex(ctx, pd, IBV_QPT_UC, IBV_QP_EX_WITH_RDMA_READ) == NULL && errno == EOPNOTSUPP);

    uint64_t ops = IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM | IBV_QP_EX_WITH_SEND |
                   IBV_QP_EX_WITH_SEND_WITH_IMM | IBV_QP_EX_WITH_RDMA_READ |
                   IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP | IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD |
                   IBV_QP_EX_WITH_SEND_WITH_INV;
    struct ibv_qp *a = qp_ex(ctx, pd, IBV_QPT_RC, ops),
                  *b = qp_ex(ctx, pd, IBV_QPT_RC, IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_BIND_MW | IBV_QP_EX_WITH_LOCAL_INV);
    CHECK(a && b && a->state == IBV_QPS_RESET);
    struct ibv_qp_ex *ax = ibv_qp_to_qp_ex(a), *bx = ibv_qp_to_qp_ex(b);
    CHECK(ax && bx && &ax->qp_base == a);
    /* Before RTS a batch is refused, as ibv_post_send refuses the request. */
    ibv_wr_start(ax);
    ax->wr_id = 90; ax->wr_flags = IBV_SEND_SIGNALED;
    ibv_wr_rdma_write(ax, b_mr->rkey, (uintptr_t)b_buf);
    ibv_wr_set_sge(ax, a_mr->lkey, (uintptr_t)a_buf, 8);
    CHECK(ibv_wr_complete(ax) == EINVAL);
    to_rts(a, b->qp_num, gid);
    to_rts(b, a->qp_num, gid);

    /* One batch: RDMA WRITE, then WRITE with immediate into a receive of b. */
    for (int i = 0; i < 4096; i++) a_buf[i] = (char)(i * 7 + 1);
    post_recv(b, 100, b_buf + 6000, 16, b_mr->lkey);
    ibv_wr_start(ax);
    ax->wr_id = 1; ax->wr_flags = IBV_SEND_SIGNALED;
    ibv_wr_rdma_write(ax, b_mr->rkey, (uintptr_t)b_buf);
    ibv_wr_set_sge(ax, a_mr->lkey, (uintptr_t)a_buf, 4000);
    ax->wr_id = 2;
    ibv_wr_rdma_write_imm(ax, b_mr->rkey, (uintptr_t)b_buf + 4000, htonl(0xabcd0123));
    ibv_wr_set_sge(ax, a_mr->lkey, (uintptr_t)a_buf + 4000, 96);
    CHECK(ibv_wr_complete(ax) == 0);
    int seen = 0;
    while (seen != 7) {
        struct done d = next_done();
        CHECK(d.status == IBV_WC_SUCCESS);
        if (d.wr_id == 1) { CHECK(d.opcode == IBV_WC_RDMA_WRITE && d.qp_num == a->qp_num); seen |= 1; }
        if (d.wr_id == 2) { CHECK(d.opcode == IBV_WC_RDMA_WRITE); seen |= 2; }
        if (d.wr_id == 100) {
            CHECK(d.opcode == IBV_WC_RECV_RDMA_WITH_IMM && (d.flags & IBV_WC_WITH_IMM));
            CHECK(ntohl(d.imm) == 0xabcd0123 && d.qp_num == b->qp_num && d.src_qp == a->qp_num);
            seen |= 4;
        }
    }
    CHECK(memcmp(a_buf, b_buf, 4096) == 0);

    /* READ, fetch-and-add and compare-and-swap in one batch; next_poll walks them. */
    uint64_t *target = (uint64_t *)(b_buf + 7168), *orig = (uint64_t *)(a_buf + 7168), *orig2 = orig + 1;
    *target = 40;
    memset(a_buf + 5000, 0, 512);
    ibv_wr_start(ax);
    ax->wr_id = 3; ax->wr_flags = IBV_SEND_SIGNALED;
    ibv_wr_rdma_read(ax, b_mr->rkey, (uintptr_t)b_buf + 1000);
    ibv_wr_set_sge(ax, a_mr->lkey, (uintptr_t)a_buf + 5000, 512);
    ax->wr_id = 4;
    ibv_wr_atomic_fetch_add(ax, b_mr->rkey, (uintptr_t)target, 2);
    ibv_wr_set_sge(ax, a_mr->lkey, (uintptr_t)orig, 8);
    ax->wr_id = 5;
    ibv_wr_atomic_cmp_swp(ax, b_mr->rkey, (uintptr_t)target, 42, 7);
    ibv_wr_set_sge(ax, a_mr->lkey, (uintptr_t)orig2, 8);
    CHECK(ibv_wr_complete(ax) == 0);
    int got = 0;
    uint64_t order[3];
    while (got < 3) {
        while (ibv_start_poll(cqx, &pa) == ENOENT) ;
        int more = 0;
        do {
            CHECK(cqx->status == IBV_WC_SUCCESS && got < 3);
            int op = ibv_wc_read_opcode(cqx);
            CHECK((cqx->wr_id == 3 && op == IBV_WC_RDMA_READ) || (cqx->wr_id == 4 && op == IBV_WC_FETCH_ADD) ||
                  (cqx->wr_id == 5 && op == IBV_WC_COMP_SWAP));
            order[got++] = cqx->wr_id;
            more = ibv_next_poll(cqx);
            CHECK(more == 0 || more == ENOENT);
        } while (more == 0);
        ibv_end_poll(cqx);
    }
    CHECK(order[0] == 3 && order[1] == 4 && order[2] == 5);
    CHECK(memcmp(a_buf + 5000, b_buf + 1000, 512) == 0);
    CHECK(*orig == 40 && *orig2 == 42 && *target == 7);

    /* SEND with immediate from inline data (the stack buffer is reused at once), a SEND
       of an SGE list, a SEND of an inline list. */
    post_recv(b, 101, b_buf + 100, 64, b_mr->lkey);
    post_recv(b, 102, b_buf + 200, 64, b_mr->lkey);
    post_recv(b, 103, b_buf + 300, 64, b_mr->lkey);
    char stackbuf[40];
    strcpy(stackbuf, "inline from the stack");
    strcpy(a_buf + 600, "first half|");
    strcpy(a_buf + 700, "second half");
    struct ibv_sge two[2] = { { (uintptr_t)a_buf + 600, 11, a_mr->lkey }, { (uintptr_t)a_buf + 700, 12, a_mr->lkey } };
    char p1[] = "in", p2[] = "line list";
    struct ibv_data_buf bufs[2] = { { p1, 2 }, { p2, 10 } };
    ibv_wr_start(ax);
    ax->wr_id = 6; ax->wr_flags = IBV_SEND_SIGNALED;
    ibv_wr_send_imm(ax, htonl(77));
    ibv_wr_set_inline_data(ax, stackbuf, strlen(stackbuf) + 1);
    memset(stackbuf, 0, sizeof stackbuf);
    ax->wr_id = 7;
    ibv_wr_send(ax);
    ibv_wr_set_sge_list(ax, 2, two);
    ax->wr_id = 8;
    ibv_wr_send(ax);
    ibv_wr_set_inline_data_list(ax, 2, bufs);
    CHECK(ibv_wr_complete(ax) == 0);
    seen = 0;
    while (seen != 0x3f) {
        struct done d = next_done();
        CHECK(d.status == IBV_WC_SUCCESS);
        if (d.wr_id >= 6 && d.wr_id <= 8) { CHECK(d.opcode == IBV_WC_SEND); seen |= 1 << (d.wr_id - 6); }
        if (d.wr_id == 101) {
            CHECK(d.opcode == IBV_WC_RECV && (d.flags & IBV_WC_WITH_IMM) && ntohl(d.imm) == 77 && d.byte_len == 22);
            seen |= 8;
        }
        if (d.wr_id == 102) { CHECK(d.byte_len == 23 && !(d.flags & IBV_WC_WITH_IMM)); seen |= 16; }
        if (d.wr_id == 103) { CHECK(d.byte_len == 12); seen |= 32; }
    }
    CHECK(strcmp(b_buf + 100, "inline from the stack") == 0);
    CHECK(strcmp(b_buf + 200, "first half|second half") == 0);
    CHECK(strcmp(b_buf + 300, "inline list") == 0);

    /* Memory windows: b binds a type 2 window over its buffer (ibv_wr_bind_mw), a WRITEs
       through its rkey; b invalidates it (ibv_wr_local_inv), binds it again, and a's SEND
       with invalidate invalidates that rkey at b. */
    struct ibv_mw *mw = ibv_alloc_mw(pd, IBV_MW_TYPE_2);
    /* With engine shards (UROCE_SHARDS) a device whose QPs live on them allocates no
       windows (EOPNOTSUPP): this part is skipped then, and only then. */
    const char *shards = getenv("UROCE_SHARDS");
    CHECK(mw || (errno == EOPNOTSUPP && shards && strcmp(shards, "1") != 0));
    if (mw) {
        struct ibv_mw_bind_info bi = { b_mr, (uintptr_t)b_buf + 2048, 1024, IBV_ACCESS_REMOTE_WRITE };
        uint32_t rkey = ibv_inc_rkey(mw->rkey);
        ibv_wr_start(bx);
        bx->wr_id = 60; bx->wr_flags = IBV_SEND_SIGNALED;
        ibv_wr_bind_mw(bx, mw, rkey, &bi);
        CHECK(ibv_wr_complete(bx) == 0);
        d = next_done();
        CHECK(d.wr_id == 60 && d.status == IBV_WC_SUCCESS && d.opcode == IBV_WC_BIND_MW);
        memset(a_buf, 0x5c, 512);
        ibv_wr_start(ax);
        ax->wr_id = 61; ax->wr_flags = IBV_SEND_SIGNALED;
        ibv_wr_rdma_write(ax, rkey, (uintptr_t)b_buf + 2048);
        ibv_wr_set_sge(ax, a_mr->lkey, (uintptr_t)a_buf, 512);
        CHECK(ibv_wr_complete(ax) == 0);
        d = next_done();
        CHECK(d.wr_id == 61 && d.status == IBV_WC_SUCCESS);
        CHECK((unsigned char)b_buf[2048] == 0x5c && (unsigned char)b_buf[2559] == 0x5c);
        ibv_wr_start(bx);
        bx->wr_id = 62;
        ibv_wr_local_inv(bx, rkey);
        CHECK(ibv_wr_complete(bx) == 0);
        d = next_done();
        CHECK(d.wr_id == 62 && d.status == IBV_WC_SUCCESS && d.opcode == IBV_WC_LOCAL_INV);
        rkey = ibv_inc_rkey(rkey);
        ibv_wr_start(bx);
        bx->wr_id = 63;
        ibv_wr_bind_mw(bx, mw, rkey, &bi);
        CHECK(ibv_wr_complete(bx) == 0);
        d = next_done();
        CHECK(d.wr_id == 63 && d.status == IBV_WC_SUCCESS);
        post_recv(b, 104, b_buf + 400, 64, b_mr->lkey);
        ibv_wr_start(ax);
        ax->wr_id = 64;
        ibv_wr_send_inv(ax, rkey);
        ibv_wr_set_sge(ax, a_mr->lkey, (uintptr_t)a_buf, 16);
        CHECK(ibv_wr_complete(ax) == 0);
        seen = 0;
        while (seen != 3) {
            d = next_done();
            CHECK(d.status == IBV_WC_SUCCESS);
            if (d.wr_id == 64) seen |= 1;
            if (d.wr_id == 104) { CHECK((d.flags & IBV_WC_WITH_INV) && d.imm == rkey && d.byte_len == 16); seen |= 2; }
        }
        CHECK(ibv_dealloc_mw(mw) == 0);
    }

    /* An operation b was not created for: wr_complete refuses the batch, nothing is
       posted (b's first request, a SEND it may make, goes neither). */
    memset(a_buf + 2000, 0x11, 64);
    ibv_wr_start(bx);
    bx->wr_id = 50; bx->wr_flags = IBV_SEND_SIGNALED;
    ibv_wr_send(bx);
    ibv_wr_set_sge(bx, b_mr->lkey, (uintptr_t)b_buf, 8);
    ibv_wr_rdma_write(bx, a_mr->rkey, (uintptr_t)a_buf + 2000);
    ibv_wr_set_sge(bx, b_mr->lkey, (uintptr_t)b_buf, 64);
    CHECK(ibv_wr_complete(bx) == EINVAL);
    /* More SGEs than max_send_sge, more inline data than max_inline_data. */
    struct ibv_sge three[3] = { two[0], two[1], two[0] };
    ibv_wr_start(ax);
    ax->wr_id = 51;
    ibv_wr_send(ax);
    ibv_wr_set_sge_list(ax, 3, three);
    CHECK(ibv_wr_complete(ax) == EINVAL);
    char big[4096];
    memset(big, 1, sizeof big);
    ibv_wr_start(ax);
    ax->wr_id = 52;
    ibv_wr_rdma_write(ax, b_mr->rkey, (uintptr_t)b_buf);
    ibv_wr_set_inline_data(ax, big, sizeof big);
    CHECK(ibv_wr_complete(ax) == ENOMEM);
    /* An aborted batch. */
    ibv_wr_start(ax);
    ax->wr_id = 53;
    ibv_wr_rdma_write(ax, b_mr->rkey, (uintptr_t)b_buf);
    ibv_wr_set_sge(ax, a_mr->lkey, (uintptr_t)a_buf, 64);
    ibv_wr_abort(ax);
    nothing_completes();
    CHECK((unsigned char)a_buf[2000] == 0x11 && (unsigned char)a_buf[2063] == 0x11);

    /* The completion channel: an armed CQ's event names it and its cq_context. */
    CHECK(ibv_req_notify_cq(ibv_cq_ex_to_cq(cqx), 0) == 0);
    ibv_wr_start(ax);
    ax->wr_id = 9; ax->wr_flags = IBV_SEND_SIGNALED;
    ibv_wr_rdma_write(ax, b_mr->rkey, (uintptr_t)b_buf + 5000);
    ibv_wr_set_sge(ax, a_mr->lkey, (uintptr_t)a_buf, 8);
    CHECK(ibv_wr_complete(ax) == 0);
    struct ibv_cq *ev_cq; void *ev_ctx;
    CHECK(ibv_get_cq_event(ch, &ev_cq, &ev_ctx) == 0);
    CHECK(ev_cq == ibv_cq_ex_to_cq(cqx) && ev_ctx == (void *)0x5678);
    ibv_ack_cq_events(ev_cq, 1);
    d = next_done();
    CHECK(d.wr_id == 9 && d.status == IBV_WC_SUCCESS);

    /* UD through ibv_wr_set_ud_addr. */
    struct ibv_qp *u1 = qp_ex(ctx, pd, IBV_QPT_UD, IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM);
    struct ibv_qp *u2 = qp_ex(ctx, pd, IBV_QPT_UD, IBV_QP_EX_WITH_SEND);
    CHECK(u1 && u2);
    struct ibv_qp *uds[2] = { u1, u2 };
    for (int i = 0; i < 2; i++) {
        struct ibv_qp_attr x;
        memset(&x, 0, sizeof x);
        x.qp_state = IBV_QPS_INIT; x.port_num = 1; x.qkey = 0x11111111;
        CHECK(ibv_modify_qp(uds[i], &x, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY) == 0);
        x.qp_state = IBV_QPS_RTR;
        CHECK(ibv_modify_qp(uds[i], &x, IBV_QP_STATE) == 0);
        x.qp_state = IBV_QPS_RTS; x.sq_psn = 1;
        CHECK(ibv_modify_qp(uds[i], &x, IBV_QP_STATE | IBV_QP_SQ_PSN) == 0);
    }
    struct ibv_ah_attr aha;
    memset(&aha, 0, sizeof aha);
    aha.is_global = 1; aha.grh.dgid = gid; aha.grh.sgid_index = 1; aha.port_num = 1;
    struct ibv_ah *ah = ibv_create_ah(pd, &aha);
    CHECK(ah);
    post_recv(u2, 200, b_buf + 1000, 40 + 64, b_mr->lkey);
    struct ibv_qp_ex *u1x = ibv_qp_to_qp_ex(u1);
    CHECK(u1x);
    /* Without a destination: refused. */
    ibv_wr_start(u1x);
    u1x->wr_id = 29; u1x->wr_flags = IBV_SEND_SIGNALED;
    ibv_wr_send(u1x);
    CHECK(ibv_wr_complete(u1x) == EINVAL);
    strcpy(a_buf + 3000, "a datagram, ex");
    ibv_wr_start(u1x);
    u1x->wr_id = 30; u1x->wr_flags = IBV_SEND_SIGNALED;
    ibv_wr_send_imm(u1x, htonl(5));
    ibv_wr_set_ud_addr(u1x, ah, u2->qp_num, 0x11111111);
    ibv_wr_set_sge(u1x, a_mr->lkey, (uintptr_t)a_buf + 3000, 64);
    CHECK(ibv_wr_complete(u1x) == 0);
    seen = 0;
    while (seen != 3) {
        d = next_done();
        CHECK(d.status == IBV_WC_SUCCESS);
        if (d.wr_id == 30) seen |= 1;
        if (d.wr_id == 200) {
            CHECK(d.byte_len == 40 + 64 && d.src_qp == u1->qp_num && ntohl(d.imm) == 5);
            seen |= 2;
        }
    }
    CHECK(strcmp(b_buf + 1040, "a datagram, ex") == 0);

    /* A QP of ibv_create_qp has no ibv_qp_ex. */
    struct ibv_qp_init_attr pi;
    memset(&pi, 0, sizeof pi);
    pi.send_cq = ibv_cq_ex_to_cq(cqx); pi.recv_cq = pi.send_cq; pi.qp_type = IBV_QPT_RC;
    pi.cap.max_send_wr = 1; pi.cap.max_recv_wr = 1; pi.cap.max_send_sge = 1; pi.cap.max_recv_sge = 1;
    struct ibv_qp *plain = ibv_create_qp(pd, &pi);
    CHECK(plain && ibv_qp_to_qp_ex(plain) == NULL);

    CHECK(ibv_start_poll(cqx, &pa) == ENOENT);
    CHECK(ibv_destroy_ah(ah) == 0);
    struct ibv_qp *all[5] = { a, b, u1, u2, plain };
    for (int i = 0; i < 5; i++) CHECK(ibv_destroy_qp(all[i]) == 0);
    CHECK(ibv_dereg_mr(a_mr) == 0 && ibv_dereg_mr(b_mr) == 0);
    CHECK(ibv_destroy_cq(ibv_cq_ex_to_cq(cqx)) == 0);
    CHECK(ibv_destroy_comp_channel(ch) == 0);
    CHECK(ibv_dealloc_pd(pd) == 0);
    CHECK(ibv_close_device(ctx) == 0);
    ibv_free_device_list(list);
    printf("ok\n");
    return 0;
}
"#;

fn suite(backend: &str) {
    suite_with(backend, "1");
}

/// The program on `backend` with `UROCE_SHARDS=shards`.
fn suite_with(backend: &str, shards: &str) {
    if !common::can_run_c_in_namespaces() {
        return;
    }
    let lib = common::library_dir(&format!("cvx-{backend}-{shards}"));
    let Some(exe) = common::compile_c(&lib, "verbs_ex", PROGRAM, &["-libverbs"]) else {
        return;
    };
    let tag = format!("cx{}{shards}", &backend[..1]);
    let pair = VethPair::create(&tag, 1500).expect("veth pair");
    let exe = exe.to_str().unwrap().to_string();
    let run = in_ns(
        &pair.ns[0],
        &lib,
        &[("UROCE_BACKEND", backend), ("UROCE_SHARDS", shards)],
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
fn extended_api_over_udp() {
    suite("udp");
}

#[test]
fn extended_api_over_af_xdp() {
    suite("xdp");
}

/// With three engine shards (direct mode over UDP): the batches of `ibv_wr_*` go in
/// whole on QPs of the data shards (each under its shard's lock from the room check to
/// the last post), inline data staged in the shard's slot; the memory-window part is
/// skipped (EOPNOTSUPP, DESIGN.md "Engine shards").
#[test]
fn extended_api_over_udp_on_three_shards() {
    suite_with("udp", "3");
}
