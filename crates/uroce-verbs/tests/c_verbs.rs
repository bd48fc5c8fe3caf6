//! A C program against the distro's `<infiniband/verbs.h>`, run on the built library in a
//! network namespace, over the UDP backend and over AF_XDP:
//! - loopback: two RC QPs of one device connected to each other through its own GID
//!   (as test suites and single-host services do; rdma_rxe delivers such packets
//!   locally): RDMA WRITE, SEND with immediate data into a two-SGE receive, RDMA READ,
//!   fetch-and-add and compare-and-swap, with the data checked in the program's own
//!   buffers; two UD QPs exchanging a datagram through an address handle, the GRH in the
//!   receive and `ibv_create_ah_from_wc` answering it;
//! - IBV_SEND_INLINE from a stack buffer that is not registered (lkeys ignored);
//! - memory windows: a type 1 window bound with `ibv_bind_mw` and a type 2 window bound by
//!   an IBV_WR_BIND_MW work request each grant a WRITE through their rkey; LOCAL_INV;
//! - a completion channel: the event of an armed CQ with its `cq_context`; a CQ with an
//!   event taken and not acknowledged is EBUSY to destroy, one with an event not taken
//!   is destroyed;
//! - the async event fd: a WRITE under a wrong rkey completes REM_ACCESS_ERR and the
//!   responder's QP reports IBV_EVENT_QP_ACCESS_ERR;
//! - bad input: a QP deeper than `max_qp_wr` is EINVAL, an address vector whose source
//!   GID is not the device's address the context sends from is EINVAL, a post on a QP before RTS fails
//!   with EINVAL, an unknown lkey completes
//!   IBV_WC_LOC_PROT_ERR (and the QP is in ERR), an SGE past its MR too, destroying a CQ
//!   or a PD still in use is EBUSY, a change the QP state table does not allow is EINVAL.
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
#include <poll.h>

#define CHECK(c) do { if (!(c)) { printf("FAIL line %d: %s (errno %d)\n", __LINE__, #c, errno); exit(1); } } while (0)

static struct ibv_cq *cq;

static struct ibv_wc wait_on(struct ibv_cq *on) {
    struct ibv_wc wc;
    for (long i = 0; i < 200000000; i++) {
        int n = ibv_poll_cq(on, 1, &wc);
        CHECK(n >= 0);
        if (n == 1) return wc;
    }
    printf("FAIL: no completion\n");
    exit(1);
}

static struct ibv_wc wait_wc(void) { return wait_on(cq); }

static void to_init(struct ibv_qp *qp) {
    struct ibv_qp_attr a;
    memset(&a, 0, sizeof a);
    a.qp_state = IBV_QPS_INIT; a.pkey_index = 0; a.port_num = 1;
    a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
    CHECK(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) == 0);
}

static int to_rtr(struct ibv_qp *qp, uint32_t dest, union ibv_gid gid, int sgid_index) {
    struct ibv_qp_attr a;
    memset(&a, 0, sizeof a);
    a.qp_state = IBV_QPS_RTR; a.path_mtu = IBV_MTU_1024; a.dest_qp_num = dest; a.rq_psn = 7;
    a.max_dest_rd_atomic = 4; a.min_rnr_timer = 1;
    a.ah_attr.is_global = 1; a.ah_attr.grh.dgid = gid; a.ah_attr.grh.sgid_index = sgid_index;
    a.ah_attr.grh.hop_limit = 1; a.ah_attr.port_num = 1;
    return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                         IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
}

static void to_rts(struct ibv_qp *qp, uint32_t dest, union ibv_gid gid) {
    struct ibv_qp_attr a;
    to_init(qp);
    CHECK(to_rtr(qp, dest, gid, 1) == 0);
    memset(&a, 0, sizeof a);
    a.qp_state = IBV_QPS_RTS; a.timeout = 14; a.retry_cnt = 7; a.rnr_retry = 7; a.sq_psn = 7;
    a.max_rd_atomic = 4;
    CHECK(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                        IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC) == 0);
    CHECK(qp->state == IBV_QPS_RTS);
}

static struct ibv_qp *rc_qp_on(struct ibv_pd *pd, struct ibv_cq *on) {
    struct ibv_qp_init_attr ia;
    memset(&ia, 0, sizeof ia);
    ia.send_cq = on; ia.recv_cq = on; ia.qp_type = IBV_QPT_RC;
    ia.cap.max_send_wr = 16; ia.cap.max_recv_wr = 16; ia.cap.max_send_sge = 2; ia.cap.max_recv_sge = 2;
    struct ibv_qp *qp = ibv_create_qp(pd, &ia);
    CHECK(qp && qp->state == IBV_QPS_RESET && ia.cap.max_recv_sge >= 2);
    return qp;
}

static struct ibv_qp *rc_qp(struct ibv_pd *pd) { return rc_qp_on(pd, cq); }

int main(void) {
    struct ibv_device **list = ibv_get_device_list(NULL);
    CHECK(list && list[0]);
    struct ibv_context *ctx = ibv_open_device(list[0]);
    CHECK(ctx);
    union ibv_gid gid;
    CHECK(ibv_query_gid(ctx, 1, 1, &gid) == 0);
    struct ibv_pd *pd = ibv_alloc_pd(ctx);
    CHECK(pd);
    cq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
    CHECK(cq);
    char *a_buf = calloc(1, 8192), *b_buf = calloc(1, 8192);
    int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                 IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_MW_BIND;
    struct ibv_mr *a_mr = ibv_reg_mr(pd, a_buf, 8192, access), *b_mr = ibv_reg_mr(pd, b_buf, 8192, access);
    CHECK(a_mr && b_mr);

    struct ibv_qp *a = rc_qp(pd), *b = rc_qp(pd);
    /* Deeper than ibv_query_device's max_qp_wr: EINVAL. */
    struct ibv_device_attr dattr;
    CHECK(ibv_query_device(ctx, &dattr) == 0);
    struct ibv_qp_init_attr deep;
    memset(&deep, 0, sizeof deep);
    deep.send_cq = cq; deep.recv_cq = cq; deep.qp_type = IBV_QPT_RC;
    deep.cap.max_send_wr = dattr.max_qp_wr + 1; deep.cap.max_recv_wr = 1;
    errno = 0;
    CHECK(ibv_create_qp(pd, &deep) == NULL && errno == EINVAL);
    /* Posting before RTS: EINVAL and bad_wr names the request. */
    struct ibv_sge sge = { (uintptr_t)a_buf, 16, a_mr->lkey };
    struct ibv_send_wr wr, *bad = NULL;
    memset(&wr, 0, sizeof wr);
    wr.wr_id = 1; wr.sg_list = &sge; wr.num_sge = 1; wr.opcode = IBV_WR_SEND; wr.send_flags = IBV_SEND_SIGNALED;
    CHECK(ibv_post_send(a, &wr, &bad) == EINVAL && bad == &wr);
    /* RESET -> RTR skips INIT: the state table refuses it. */
    struct ibv_qp_attr bogus;
    memset(&bogus, 0, sizeof bogus);
    bogus.qp_state = IBV_QPS_RTR;
    CHECK(ibv_modify_qp(a, &bogus, IBV_QP_STATE) == EINVAL);
    /* The source GID must be the device's address this context sends from: index 0
       (the default fe80:: GID) is not. */
    struct ibv_qp *g0 = rc_qp(pd);
    to_init(g0);
    CHECK(to_rtr(g0, b->qp_num, gid, 0) == EINVAL);
    CHECK(ibv_destroy_qp(g0) == 0);
    to_rts(a, b->qp_num, gid);
    to_rts(b, a->qp_num, gid);

    /* RDMA WRITE a -> b. */
    for (int i = 0; i < 4096; i++) a_buf[i] = (char)(i * 7);
    sge = (struct ibv_sge){ (uintptr_t)a_buf, 4096, a_mr->lkey };
    wr.opcode = IBV_WR_RDMA_WRITE; wr.wr_id = 2;
    wr.wr.rdma.remote_addr = (uintptr_t)b_buf; wr.wr.rdma.rkey = b_mr->rkey;
    CHECK(ibv_post_send(a, &wr, &bad) == 0);
    struct ibv_wc wc = wait_wc();
    CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == 2 && wc.opcode == IBV_WC_RDMA_WRITE && wc.qp_num == a->qp_num);
    CHECK(memcmp(a_buf, b_buf, 4096) == 0);

    /* SEND with immediate into a two-SGE receive on b. */
    struct ibv_sge rsg[2] = { { (uintptr_t)b_buf + 4096, 100, b_mr->lkey }, { (uintptr_t)b_buf + 6000, 1000, b_mr->lkey } };
    struct ibv_recv_wr rwr = { .wr_id = 9, .next = NULL, .sg_list = rsg, .num_sge = 2 }, *rbad;
    CHECK(ibv_post_recv(b, &rwr, &rbad) == 0);
    sge = (struct ibv_sge){ (uintptr_t)a_buf + 100, 300, a_mr->lkey };
    wr.opcode = IBV_WR_SEND_WITH_IMM; wr.wr_id = 3; wr.imm_data = htonl(0xfeedbeef);
    CHECK(ibv_post_send(a, &wr, &bad) == 0);
    int got_send = 0, got_recv = 0;
    while (!(got_send && got_recv)) {
        wc = wait_wc();
        CHECK(wc.status == IBV_WC_SUCCESS);
        if (wc.wr_id == 3) { CHECK(wc.opcode == IBV_WC_SEND); got_send = 1; }
        if (wc.wr_id == 9) {
            CHECK(wc.opcode == IBV_WC_RECV && wc.byte_len == 300 && (wc.wc_flags & IBV_WC_WITH_IMM));
            CHECK(ntohl(wc.imm_data) == 0xfeedbeef && wc.qp_num == b->qp_num && wc.src_qp == a->qp_num);
            got_recv = 1;
        }
    }
    CHECK(memcmp(b_buf + 4096, a_buf + 100, 100) == 0 && memcmp(b_buf + 6000, a_buf + 200, 200) == 0);

    /* RDMA READ b -> a. */
    memset(a_buf + 5000, 0, 512);
    sge = (struct ibv_sge){ (uintptr_t)a_buf + 5000, 512, a_mr->lkey };
    wr.opcode = IBV_WR_RDMA_READ; wr.wr_id = 4;
    wr.wr.rdma.remote_addr = (uintptr_t)b_buf + 1000; wr.wr.rdma.rkey = b_mr->rkey;
    CHECK(ibv_post_send(a, &wr, &bad) == 0);
    wc = wait_wc();
    CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == 4 && wc.opcode == IBV_WC_RDMA_READ);
    CHECK(memcmp(a_buf + 5000, b_buf + 1000, 512) == 0);

    /* Atomics on b's first 8 bytes. */
    uint64_t *target = (uint64_t *)(b_buf + 7168), *orig = (uint64_t *)(a_buf + 7168);
    *target = 40;
    sge = (struct ibv_sge){ (uintptr_t)orig, 8, a_mr->lkey };
    wr.opcode = IBV_WR_ATOMIC_FETCH_AND_ADD; wr.wr_id = 5;
    wr.wr.atomic.remote_addr = (uintptr_t)target; wr.wr.atomic.rkey = b_mr->rkey; wr.wr.atomic.compare_add = 2;
    CHECK(ibv_post_send(a, &wr, &bad) == 0);
    wc = wait_wc();
    CHECK(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_FETCH_ADD && *orig == 40 && *target == 42);
    wr.opcode = IBV_WR_ATOMIC_CMP_AND_SWP; wr.wr_id = 6;
    wr.wr.atomic.compare_add = 42; wr.wr.atomic.swap = 7;
    CHECK(ibv_post_send(a, &wr, &bad) == 0);
    wc = wait_wc();
    CHECK(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_COMP_SWAP && *orig == 42 && *target == 7);

    /* IBV_SEND_INLINE from memory that is not registered (a stack buffer, two SGEs, one
       with a bogus lkey, as ibverbs ignores it): the bytes are taken at post time. */
    struct ibv_qp_init_attr ii;
    memset(&ii, 0, sizeof ii);
    ii.send_cq = cq; ii.recv_cq = cq; ii.qp_type = IBV_QPT_RC;
    ii.cap.max_send_wr = 4; ii.cap.max_recv_wr = 4; ii.cap.max_send_sge = 2; ii.cap.max_recv_sge = 1;
    ii.cap.max_inline_data = 64;
    struct ibv_qp *h1 = ibv_create_qp(pd, &ii), *h2 = ibv_create_qp(pd, &ii);
    CHECK(h1 && h2 && ii.cap.max_inline_data >= 64);
    to_rts(h1, h2->qp_num, gid);
    to_rts(h2, h1->qp_num, gid);
    char stackbuf[48], expect[48];
    for (int i = 0; i < 48; i++) stackbuf[i] = expect[i] = (char)('A' + i % 26);
    struct ibv_sge isg[2] = { { (uintptr_t)stackbuf, 20, 0 }, { (uintptr_t)stackbuf + 20, 28, 0xdead } };
    wr.sg_list = isg; wr.num_sge = 2; wr.opcode = IBV_WR_RDMA_WRITE; wr.wr_id = 60;
    wr.send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
    wr.wr.rdma.remote_addr = (uintptr_t)b_buf + 3000; wr.wr.rdma.rkey = b_mr->rkey;
    CHECK(ibv_post_send(h1, &wr, &bad) == 0);
    memset(stackbuf, 0, sizeof stackbuf);
    wc = wait_wc();
    CHECK(wc.wr_id == 60 && wc.status == IBV_WC_SUCCESS && memcmp(b_buf + 3000, expect, 48) == 0);
    CHECK(ibv_destroy_qp(h1) == 0 && ibv_destroy_qp(h2) == 0);
    wr.sg_list = &sge; wr.num_sge = 1;

    /* Memory windows: a type 1 window bound with ibv_bind_mw grants a WRITE through its
       rkey; a type 2 window is bound by a BIND_MW work request, then invalidated. */
    struct ibv_mw *mw1 = ibv_alloc_mw(pd, IBV_MW_TYPE_1);
    CHECK(mw1 && mw1->type == IBV_MW_TYPE_1 && mw1->pd == pd);
    struct ibv_mw_bind mb;
    memset(&mb, 0, sizeof mb);
    mb.wr_id = 50; mb.send_flags = IBV_SEND_SIGNALED;
    mb.bind_info.mr = b_mr; mb.bind_info.addr = (uintptr_t)b_buf + 2048; mb.bind_info.length = 1024;
    mb.bind_info.mw_access_flags = IBV_ACCESS_REMOTE_WRITE;
    uint32_t old_rkey = mw1->rkey;
    CHECK(ibv_bind_mw(b, mw1, &mb) == 0 && mw1->rkey != old_rkey);
    wc = wait_wc();
    CHECK(wc.wr_id == 50 && wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_BIND_MW);
    memset(a_buf, 0x5c, 512);
    sge = (struct ibv_sge){ (uintptr_t)a_buf, 512, a_mr->lkey };
    wr.opcode = IBV_WR_RDMA_WRITE; wr.wr_id = 51; wr.send_flags = IBV_SEND_SIGNALED;
    wr.wr.rdma.remote_addr = (uintptr_t)b_buf + 2048; wr.wr.rdma.rkey = mw1->rkey;
    CHECK(ibv_post_send(a, &wr, &bad) == 0);
    wc = wait_wc();
    CHECK(wc.wr_id == 51 && wc.status == IBV_WC_SUCCESS);
    CHECK((unsigned char)b_buf[2048] == 0x5c && (unsigned char)b_buf[2559] == 0x5c);
    struct ibv_mw *mw2 = ibv_alloc_mw(pd, IBV_MW_TYPE_2);
    CHECK(mw2 && mw2->type == IBV_MW_TYPE_2);
    struct ibv_send_wr bw, *bbad;
    memset(&bw, 0, sizeof bw);
    bw.wr_id = 52; bw.opcode = IBV_WR_BIND_MW; bw.send_flags = IBV_SEND_SIGNALED;
    bw.bind_mw.mw = mw2; bw.bind_mw.rkey = ibv_inc_rkey(mw2->rkey);
    bw.bind_mw.bind_info = mb.bind_info;
    CHECK(ibv_post_send(b, &bw, &bbad) == 0);
    wc = wait_wc();
    CHECK(wc.wr_id == 52 && wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_BIND_MW);
    wr.wr_id = 53; wr.wr.rdma.rkey = bw.bind_mw.rkey;
    CHECK(ibv_post_send(a, &wr, &bad) == 0);
    wc = wait_wc();
    CHECK(wc.wr_id == 53 && wc.status == IBV_WC_SUCCESS);
    memset(&bw, 0, sizeof bw);
    bw.wr_id = 54; bw.opcode = IBV_WR_LOCAL_INV; bw.send_flags = IBV_SEND_SIGNALED;
    bw.invalidate_rkey = wr.wr.rdma.rkey;
    CHECK(ibv_post_send(b, &bw, &bbad) == 0);
    wc = wait_wc();
    CHECK(wc.wr_id == 54 && wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_LOCAL_INV);
    CHECK(ibv_dealloc_mw(mw1) == 0 && ibv_dealloc_mw(mw2) == 0);

    /* In use: the CQ and the PD cannot go. */
    CHECK(ibv_destroy_cq(cq) == EBUSY);
    CHECK(ibv_dealloc_pd(pd) == EBUSY);

    /* An SGE past its MR: LOC_PROT_ERR, and the QP is in error. */
    sge = (struct ibv_sge){ (uintptr_t)a_buf + 8000, 400, a_mr->lkey };
    wr.opcode = IBV_WR_SEND; wr.wr_id = 7; wr.send_flags = 0;
    CHECK(ibv_post_send(a, &wr, &bad) == 0);
    wc = wait_wc();
    CHECK(wc.wr_id == 7 && wc.status == IBV_WC_LOC_PROT_ERR);
    struct ibv_qp_attr qa; struct ibv_qp_init_attr qia;
    CHECK(ibv_query_qp(a, &qa, IBV_QP_STATE, &qia) == 0 && qa.qp_state == IBV_QPS_ERR);
    /* An unknown lkey on a fresh QP: LOC_PROT_ERR too. */
    struct ibv_qp *c = rc_qp(pd), *d = rc_qp(pd);
    to_rts(c, d->qp_num, gid);
    to_rts(d, c->qp_num, gid);
    sge = (struct ibv_sge){ (uintptr_t)a_buf, 16, a_mr->lkey ^ 0x5a5a00 };
    wr.wr_id = 8;
    CHECK(ibv_post_send(c, &wr, &bad) == 0);
    wc = wait_wc();
    CHECK(wc.wr_id == 8 && wc.status == IBV_WC_LOC_PROT_ERR);

    /* UD: a datagram to ourselves through an address handle, answered with one made from
       the completion and its GRH. */
    struct ibv_qp_init_attr ua;
    memset(&ua, 0, sizeof ua);
    ua.send_cq = cq; ua.recv_cq = cq; ua.qp_type = IBV_QPT_UD;
    ua.cap.max_send_wr = 4; ua.cap.max_recv_wr = 4; ua.cap.max_send_sge = 1; ua.cap.max_recv_sge = 1;
    struct ibv_qp *u1 = ibv_create_qp(pd, &ua), *u2 = ibv_create_qp(pd, &ua);
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
    struct ibv_sge usg = { (uintptr_t)b_buf, 40 + 64, b_mr->lkey };
    struct ibv_recv_wr urw = { .wr_id = 20, .next = NULL, .sg_list = &usg, .num_sge = 1 };
    CHECK(ibv_post_recv(u2, &urw, &rbad) == 0);
    struct ibv_ah_attr aha;
    memset(&aha, 0, sizeof aha);
    aha.is_global = 1; aha.grh.dgid = gid; aha.grh.sgid_index = 1; aha.port_num = 1;
    struct ibv_ah *ah = ibv_create_ah(pd, &aha);
    CHECK(ah);
    strcpy(a_buf, "datagram to myself");
    sge = (struct ibv_sge){ (uintptr_t)a_buf, 64, a_mr->lkey };
    wr.opcode = IBV_WR_SEND; wr.wr_id = 21; wr.send_flags = IBV_SEND_SIGNALED;
    wr.wr.ud.ah = ah; wr.wr.ud.remote_qpn = u2->qp_num; wr.wr.ud.remote_qkey = 0x11111111;
    CHECK(ibv_post_send(u1, &wr, &bad) == 0);
    int sent = 0, recvd = 0;
    while (!(sent && recvd)) {
        wc = wait_wc();
        CHECK(wc.status == IBV_WC_SUCCESS);
        if (wc.wr_id == 21) sent = 1;
        if (wc.wr_id == 20) {
            CHECK(wc.byte_len == 40 + 64 && (wc.wc_flags & IBV_WC_GRH) && wc.src_qp == u1->qp_num);
            CHECK(strcmp(b_buf + 40, "datagram to myself") == 0);
            struct ibv_ah *back = ibv_create_ah_from_wc(pd, &wc, (struct ibv_grh *)b_buf, 1);
            CHECK(back);
            CHECK(ibv_destroy_ah(back) == 0);
            recvd = 1;
        }
    }
    CHECK(ibv_destroy_ah(ah) == 0);

    /* A completion channel: an event taken and not acknowledged keeps its CQ (EBUSY);
       one not taken goes with it. */
    struct ibv_comp_channel *ch = ibv_create_comp_channel(ctx);
    CHECK(ch);
    struct ibv_cq *ecq = ibv_create_cq(ctx, 16, (void *)0x1234, ch, 0);
    CHECK(ecq);
    struct ibv_qp *e1 = rc_qp_on(pd, ecq), *e2 = rc_qp_on(pd, ecq);
    to_rts(e1, e2->qp_num, gid);
    to_rts(e2, e1->qp_num, gid);
    sge = (struct ibv_sge){ (uintptr_t)a_buf, 64, a_mr->lkey };
    memset(&wr, 0, sizeof wr);
    wr.sg_list = &sge; wr.num_sge = 1; wr.opcode = IBV_WR_RDMA_WRITE; wr.send_flags = IBV_SEND_SIGNALED;
    wr.wr.rdma.remote_addr = (uintptr_t)b_buf; wr.wr.rdma.rkey = b_mr->rkey;
    CHECK(ibv_req_notify_cq(ecq, 0) == 0);
    wr.wr_id = 30;
    CHECK(ibv_post_send(e1, &wr, &bad) == 0);
    struct ibv_cq *ev_cq = NULL; void *ev_ctx = NULL;
    CHECK(ibv_get_cq_event(ch, &ev_cq, &ev_ctx) == 0 && ev_cq == ecq && ev_ctx == (void *)0x1234);
    wc = wait_on(ecq);
    CHECK(wc.wr_id == 30 && wc.status == IBV_WC_SUCCESS);
    CHECK(ibv_req_notify_cq(ecq, 0) == 0);
    wr.wr_id = 31;
    CHECK(ibv_post_send(e1, &wr, &bad) == 0);
    wc = wait_on(ecq);
    CHECK(wc.wr_id == 31 && wc.status == IBV_WC_SUCCESS);
    CHECK(ibv_destroy_qp(e1) == 0 && ibv_destroy_qp(e2) == 0);
    CHECK(ibv_destroy_cq(ecq) == EBUSY);
    CHECK(ibv_destroy_comp_channel(ch) == EBUSY);
    ibv_ack_cq_events(ecq, 1);
    CHECK(ibv_destroy_cq(ecq) == 0);
    CHECK(ibv_destroy_comp_channel(ch) == 0);

    /* A WRITE under a wrong rkey: REM_ACCESS_ERR at the requester, and the responder's
       QP reports IBV_EVENT_QP_ACCESS_ERR on the context's async fd. */
    struct ibv_qp *f1 = rc_qp(pd), *f2 = rc_qp(pd);
    to_rts(f1, f2->qp_num, gid);
    to_rts(f2, f1->qp_num, gid);
    wr.wr_id = 40; wr.wr.rdma.rkey = b_mr->rkey ^ 0x100;
    CHECK(ibv_post_send(f1, &wr, &bad) == 0);
    wc = wait_wc();
    CHECK(wc.wr_id == 40 && wc.status == IBV_WC_REM_ACCESS_ERR);
    struct pollfd pfd = { .fd = ctx->async_fd, .events = POLLIN };
    CHECK(poll(&pfd, 1, 5000) == 1);
    struct ibv_async_event ev;
    CHECK(ibv_get_async_event(ctx, &ev) == 0);
    CHECK(ev.event_type == IBV_EVENT_QP_ACCESS_ERR && ev.element.qp == f2);
    ibv_ack_async_event(&ev);
    CHECK(ibv_destroy_qp(f1) == 0 && ibv_destroy_qp(f2) == 0);

    struct ibv_qp *all[6] = { a, b, c, d, u1, u2 };
    for (int i = 0; i < 6; i++) CHECK(ibv_destroy_qp(all[i]) == 0);
    CHECK(ibv_destroy_qp(a) == EINVAL);
    CHECK(ibv_dereg_mr(a_mr) == 0 && ibv_dereg_mr(b_mr) == 0);
    CHECK(ibv_destroy_cq(cq) == 0);
    CHECK(ibv_dealloc_pd(pd) == 0);
    CHECK(ibv_close_device(ctx) == 0);
    ibv_free_device_list(list);
    printf("ok\n");
    return 0;
}
"#;

fn suite(backend: &str) {
    if !common::can_run_c_in_namespaces() {
        return;
    }
    let lib = common::library_dir(&format!("cv-{backend}"));
    let Some(exe) = common::compile_c(&lib, "verbs", PROGRAM, &["-libverbs"]) else {
        return;
    };
    let pair = VethPair::create(&format!("cv{}", &backend[..1]), 1500).expect("veth pair");
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
fn loopback_and_bad_input_over_udp() {
    suite("udp");
}

#[test]
fn loopback_and_bad_input_over_af_xdp() {
    suite("xdp");
}

const PORT_PROGRAM: &str = r#"
#include <errno.h>
#include <infiniband/verbs.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(c) do { if (!(c)) { printf("FAIL line %d: %s (errno %d)\n", __LINE__, #c, errno); exit(1); } } while (0)

int main(void) {
    struct ibv_device **list = ibv_get_device_list(NULL);
    CHECK(list && list[0]);
    struct ibv_context *ctx = ibv_open_device(list[0]);
    CHECK(ctx);
    struct ibv_device_attr attr;
    CHECK(ibv_query_device(ctx, &attr) == 0 && (attr.device_cap_flags & IBV_DEVICE_PORT_ACTIVE_EVENT));
    struct ibv_pd *pd = ibv_alloc_pd(ctx);
    struct ibv_cq *cq = ibv_create_cq(ctx, 4, NULL, NULL, 0);
    struct ibv_qp_init_attr ia;
    memset(&ia, 0, sizeof ia);
    ia.send_cq = cq; ia.recv_cq = cq; ia.qp_type = IBV_QPT_RC;
    ia.cap.max_send_wr = 1; ia.cap.max_recv_wr = 1; ia.cap.max_send_sge = 1; ia.cap.max_recv_sge = 1;
    struct ibv_qp *qp = ibv_create_qp(pd, &ia);
    CHECK(qp);
    printf("ready\n");
    fflush(stdout);
    for (;;) {
        struct pollfd p = { .fd = ctx->async_fd, .events = POLLIN };
        CHECK(poll(&p, 1, 20000) == 1);
        struct ibv_async_event ev;
        CHECK(ibv_get_async_event(ctx, &ev) == 0);
        printf("event %s port %d\n", ibv_event_type_str(ev.event_type), ev.element.port_num);
        fflush(stdout);
        ibv_ack_async_event(&ev);
        if (ev.event_type == IBV_EVENT_PORT_ACTIVE) break;
    }
    CHECK(ibv_destroy_qp(qp) == 0 && ibv_destroy_cq(cq) == 0 && ibv_dealloc_pd(pd) == 0);
    CHECK(ibv_close_device(ctx) == 0);
    printf("ok\n");
    return 0;
}
"#;

/// The async event fd reports the port: with a QP open (the datapath running), taking the
/// veth's peer end down gives IBV_EVENT_PORT_ERR on port 1, bringing it up
/// IBV_EVENT_PORT_ACTIVE, and nothing else in between.
#[test]
fn port_events_follow_the_link() {
    use std::io::BufRead;
    if !common::can_run_c_in_namespaces() {
        return;
    }
    let lib = common::library_dir("port");
    let Some(exe) = common::compile_c(&lib, "port", PORT_PROGRAM, &["-libverbs"]) else {
        return;
    };
    let pair = VethPair::create("cvp", 1500).expect("veth pair");
    let exe = exe.to_str().unwrap().to_string();
    let mut child = in_ns(
        &pair.ns[0],
        &lib,
        &[("UROCE_BACKEND", "udp")],
        &["timeout", "60", &exe],
    )
    .stdout(std::process::Stdio::piped())
    .spawn()
    .expect("ip netns exec");
    let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let mut next = || lines.next().and_then(Result::ok).unwrap_or_default();
    let link = |state: &str| {
        let ok = std::process::Command::new("ip")
            .args(["-n", &pair.ns[1], "link", "set", &pair.ifaces[1], state])
            .status()
            .expect("ip link")
            .success();
        assert!(ok, "ip link set {state}");
    };
    assert_eq!(next(), "ready");
    link("down");
    assert_eq!(next(), "event port error port 1");
    link("up");
    assert_eq!(next(), "event port active port 1");
    assert_eq!(next(), "ok");
    assert!(child.wait().unwrap().success());
    drop(pair);
    let _ = std::fs::remove_dir_all(&lib);
}
