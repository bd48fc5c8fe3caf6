//! What middleware (NCCL, UCX, libfabric, pyverbs, rdma-core's test suite) reads of the
//! verbs ABI, checked by a C program against the distro's `<infiniband/verbs.h>` run on the
//! built library in a network namespace (UDP backend), with the data checked:
//! - `verbs_context.query_port` with the 56-byte `ibv_port_attr` of newer headers
//!   (NCCL's): the whole buffer cleared, `active_speed_ex` (bytes 52-55) written and equal
//!   to `active_speed`; the exported `ibv_query_port` writes the 48 bytes of
//!   `_compat_ibv_port_attr` and nothing after; width and speed follow the interface's
//!   ethtool speed as rdma_rxe maps it;
//! - `ibv_query_qp` writes nothing from `rate_limit` on (NCCL's 136-byte `ibv_qp_attr`);
//! - `ibv_query_device`'s `vendor_id` is rxe's 0xffffff;
//! - `ibv_query_gid_table` lists every GID as `ibv_query_gid` / `ibv_query_gid_ex` do,
//!   RoCE v2, port 1, the interface's ifindex, and refuses a short table or flags;
//! - `ibv_reg_mr` with `IBV_ACCESS_RELAXED_ORDERING` (through `ibv_reg_mr_iova2`);
//! - `ibv_rereg_mr`: a new translation, PD and access (the last two keeping the keys),
//!   each seen by an RDMA WRITE between
//!   two RC QPs of the device, and rdma-core's error codes; a new translation while a
//!   receive names the region, the receive then failing (LOC_QP_OP_ERR) and the SEND
//!   that takes it too (REM_OP_ERR), as rdma-core's `test_mr_rereg_addr` expects;
//! - a UD datagram's receive reports the GRH's network type in `wc.sl` as mlx5 does
//!   (2 for IPv4, 1 for IPv6), over IPv4 and, in a namespace with only IPv6, over IPv6.
//!
//! Needs root, iproute2, gcc and libibverbs-dev; skips (saying which is missing)
//! otherwise.

mod common;

use std::process::Command;

use common::{in_ns, text};
use uroce_tools::netns::VethPair;

const PROGRAM: &str = r#"
#include <errno.h>
#include <infiniband/verbs.h>
#include <net/if.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(c) do { if (!(c)) { printf("FAIL line %d: %s (errno %d)\n", __LINE__, #c, errno); exit(1); } } while (0)

static struct ibv_cq *cq;

static struct ibv_wc wait_wc(void) {
    struct ibv_wc wc;
    for (long i = 0; i < 200000000; i++) {
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

static void connect_rc(struct ibv_qp *qp, uint32_t dest, union ibv_gid gid, int sgid) {
    struct ibv_qp_attr a;
    memset(&a, 0, sizeof a);
    a.qp_state = IBV_QPS_INIT; a.pkey_index = 0; a.port_num = 1;
    a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
    CHECK(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) == 0);
    memset(&a, 0, sizeof a);
    a.qp_state = IBV_QPS_RTR; a.path_mtu = IBV_MTU_1024; a.dest_qp_num = dest; a.rq_psn = 7;
    a.max_dest_rd_atomic = 4; a.min_rnr_timer = 1;
    a.ah_attr.is_global = 1; a.ah_attr.grh.dgid = gid; a.ah_attr.grh.sgid_index = sgid;
    a.ah_attr.grh.hop_limit = 1; a.ah_attr.port_num = 1;
    CHECK(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                        IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER) == 0);
    memset(&a, 0, sizeof a);
    a.qp_state = IBV_QPS_RTS; a.sq_psn = 7; a.timeout = 14; a.retry_cnt = 7; a.rnr_retry = 7;
    a.max_rd_atomic = 4;
    CHECK(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                        IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC) == 0);
}

/* An RDMA WRITE of `len` bytes of `src` (lkey `lkey`) to `raddr` under `rkey`; its status. */
static int write_to(struct ibv_qp *qp, void *src, uint32_t lkey, uint32_t len, void *raddr, uint32_t rkey) {
    struct ibv_sge sge = { .addr = (uintptr_t)src, .length = len, .lkey = lkey };
    struct ibv_send_wr wr, *bad;
    memset(&wr, 0, sizeof wr);
    wr.wr_id = 1; wr.sg_list = &sge; wr.num_sge = 1; wr.opcode = IBV_WR_RDMA_WRITE;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.wr.rdma.remote_addr = (uintptr_t)raddr; wr.wr.rdma.rkey = rkey;
    CHECK(ibv_post_send(qp, &wr, &bad) == 0);
    struct ibv_wc wc = wait_wc();
    CHECK(wc.wr_id == 1);
    return wc.status;
}

static void ud_datagram(struct ibv_context *ctx, struct ibv_pd *pd, int gid_index, int want_sl) {
    struct ibv_qp_init_attr ia;
    memset(&ia, 0, sizeof ia);
    ia.send_cq = cq; ia.recv_cq = cq; ia.qp_type = IBV_QPT_UD;
    ia.cap.max_send_wr = 2; ia.cap.max_recv_wr = 2; ia.cap.max_send_sge = 1; ia.cap.max_recv_sge = 1;
    struct ibv_qp *q[2];
    for (int i = 0; i < 2; i++) {
        q[i] = ibv_create_qp(pd, &ia);
        CHECK(q[i]);
        struct ibv_qp_attr a;
        memset(&a, 0, sizeof a);
        a.qp_state = IBV_QPS_INIT; a.pkey_index = 0; a.port_num = 1; a.qkey = 0x11111111;
        CHECK(ibv_modify_qp(q[i], &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY) == 0);
        a.qp_state = IBV_QPS_RTR;
        CHECK(ibv_modify_qp(q[i], &a, IBV_QP_STATE) == 0);
        a.qp_state = IBV_QPS_RTS; a.sq_psn = 1;
        CHECK(ibv_modify_qp(q[i], &a, IBV_QP_STATE | IBV_QP_SQ_PSN) == 0);
    }
    static char rbuf[40 + 64], sbuf[64];
    struct ibv_mr *rmr = ibv_reg_mr(pd, rbuf, sizeof rbuf, IBV_ACCESS_LOCAL_WRITE);
    struct ibv_mr *smr = ibv_reg_mr(pd, sbuf, sizeof sbuf, 0);
    CHECK(rmr && smr);
    struct ibv_sge rs = { .addr = (uintptr_t)rbuf, .length = sizeof rbuf, .lkey = rmr->lkey };
    struct ibv_recv_wr rw, *rbad;
    memset(&rw, 0, sizeof rw);
    rw.wr_id = 5; rw.sg_list = &rs; rw.num_sge = 1;
    CHECK(ibv_post_recv(q[1], &rw, &rbad) == 0);
    union ibv_gid gid;
    CHECK(ibv_query_gid(ctx, 1, gid_index, &gid) == 0);
    struct ibv_ah_attr aa;
    memset(&aa, 0, sizeof aa);
    aa.is_global = 1; aa.grh.dgid = gid; aa.grh.sgid_index = gid_index; aa.grh.hop_limit = 1;
    aa.port_num = 1;
    struct ibv_ah *ah = ibv_create_ah(pd, &aa);
    CHECK(ah);
    strcpy(sbuf, "datagram");
    struct ibv_sge ss = { .addr = (uintptr_t)sbuf, .length = 9, .lkey = smr->lkey };
    struct ibv_send_wr sw, *sbad;
    memset(&sw, 0, sizeof sw);
    sw.wr_id = 6; sw.sg_list = &ss; sw.num_sge = 1; sw.opcode = IBV_WR_SEND;
    sw.send_flags = IBV_SEND_SIGNALED;
    sw.wr.ud.ah = ah; sw.wr.ud.remote_qpn = q[1]->qp_num; sw.wr.ud.remote_qkey = 0x11111111;
    CHECK(ibv_post_send(q[0], &sw, &sbad) == 0);
    int got_recv = 0, got_send = 0;
    while (!got_recv || !got_send) {
        struct ibv_wc wc = wait_wc();
        CHECK(wc.status == IBV_WC_SUCCESS);
        if (wc.wr_id == 6) { got_send = 1; continue; }
        CHECK(wc.wr_id == 5 && (wc.wc_flags & IBV_WC_GRH) && wc.src_qp == q[0]->qp_num);
        CHECK(strcmp(rbuf + 40, "datagram") == 0);
        printf("ud sl %d\n", wc.sl);
        CHECK(wc.sl == want_sl);
        got_recv = 1;
    }
    CHECK(ibv_destroy_ah(ah) == 0);
    CHECK(ibv_destroy_qp(q[0]) == 0 && ibv_destroy_qp(q[1]) == 0);
    CHECK(ibv_dereg_mr(rmr) == 0 && ibv_dereg_mr(smr) == 0);
}

static int all(const unsigned char *p, size_t n, unsigned char v) {
    for (size_t i = 0; i < n; i++) if (p[i] != v) return 0;
    return 1;
}

int main(int argc, char **argv) {
    CHECK(argc == 6);
    const char *iface = argv[1];
    int want_width = atoi(argv[2]), want_speed = atoi(argv[3]), want_sl = atoi(argv[4]);
    int full = strcmp(argv[5], "full") == 0;
    struct ibv_device **list = ibv_get_device_list(NULL);
    CHECK(list && list[0]);
    struct ibv_context *ctx = ibv_open_device(list[0]);
    CHECK(ctx);

    /* 1. query_port through verbs_context with NCCL's 56-byte structure. */
    unsigned char port[56];
    memset(port, 0xAA, sizeof port);
    struct verbs_context *vctx = verbs_get_ctx_op(ctx, query_port);
    CHECK(vctx);
    CHECK(vctx->query_port(ctx, 1, (struct ibv_port_attr *)port, sizeof port) == 0);
    struct ibv_port_attr pa;
    memcpy(&pa, port, sizeof pa);
    uint32_t speed_ex;
    memcpy(&speed_ex, port + 52, 4);
    printf("port width %d speed %d speed_ex %u\n", pa.active_width, pa.active_speed, speed_ex);
    CHECK(pa.state == IBV_PORT_ACTIVE && pa.link_layer == IBV_LINK_LAYER_ETHERNET);
    CHECK(pa.active_width == want_width && pa.active_speed == want_speed);
    CHECK(speed_ex == pa.active_speed);
    CHECK(all(port + 48, 4, 0)); /* port_cap_flags2 and the padding after it */
    /* The inline ibv_query_port (the distro's 52-byte structure) agrees. */
    struct ibv_port_attr inl;
    memset(&inl, 0xAA, sizeof inl);
    CHECK(ibv_query_port(ctx, 1, &inl) == 0);
    CHECK(inl.active_width == pa.active_width && inl.active_speed == pa.active_speed);
    CHECK(inl.gid_tbl_len == pa.gid_tbl_len && inl.port_cap_flags2 == 0);
    /* The exported ibv_query_port writes the 48 bytes of _compat_ibv_port_attr only. */
    memset(port, 0xAA, sizeof port);
    CHECK((ibv_query_port)(ctx, 1, (struct _compat_ibv_port_attr *)port) == 0);
    CHECK(all(port + 48, 8, 0xAA));
    CHECK(port[offsetof(struct ibv_port_attr, active_speed)] == want_speed);

    /* 4. A vendor id as rdma_rxe's. */
    struct ibv_device_attr da;
    CHECK(ibv_query_device(ctx, &da) == 0);
    CHECK(da.vendor_id == 0xffffff && da.vendor_part_id == 0);

    /* 5. The GID table. */
    struct ibv_gid_entry table[16];
    ssize_t n = ibv_query_gid_table(ctx, table, 16, 0);
    printf("gid table %zd\n", n);
    CHECK(n >= 2);
    unsigned ifindex = if_nametoindex(iface);
    CHECK(ifindex != 0);
    for (ssize_t i = 0; i < n; i++) {
        union ibv_gid g;
        CHECK(ibv_query_gid(ctx, 1, i, &g) == 0);
        CHECK(memcmp(&g, &table[i].gid, 16) == 0);
        CHECK(table[i].gid_index == i && table[i].port_num == 1);
        CHECK(table[i].gid_type == IBV_GID_TYPE_ROCE_V2 && table[i].ndev_ifindex == ifindex);
        struct ibv_gid_entry one;
        CHECK(ibv_query_gid_ex(ctx, 1, i, &one, 0) == 0);
        CHECK(memcmp(&one, &table[i], sizeof one) == 0);
    }
    CHECK(table[0].gid.raw[0] == 0xfe && table[0].gid.raw[1] == 0x80);
    CHECK(ibv_query_gid_table(ctx, table, n - 1, 0) == -EINVAL);
    CHECK(ibv_query_gid_table(ctx, table, 16, 1) == -EINVAL);
    CHECK(_ibv_query_gid_table(ctx, table, 16, 0, sizeof table[0] - 1) == -EINVAL);

    struct ibv_pd *pd = ibv_alloc_pd(ctx);
    CHECK(pd);
    cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
    CHECK(cq);

    /* 7. The network type of a UD receive in wc.sl. */
    ud_datagram(ctx, pd, 1, want_sl);
    if (!full) {
        CHECK(ibv_destroy_cq(cq) == 0 && ibv_dealloc_pd(pd) == 0);
        CHECK(ibv_close_device(ctx) == 0);
        ibv_free_device_list(list);
        printf("ok\n");
        return 0;
    }

    /* 2. ibv_query_qp leaves rate_limit and what follows alone. */
    struct ibv_qp *a = rc_qp(pd), *b = rc_qp(pd);
    unsigned char qa[sizeof(struct ibv_qp_attr) + 16];
    memset(qa, 0xAA, sizeof qa);
    struct ibv_qp_init_attr qi;
    CHECK(ibv_query_qp(a, (struct ibv_qp_attr *)qa, IBV_QP_STATE, &qi) == 0);
    CHECK(((struct ibv_qp_attr *)qa)->qp_state == IBV_QPS_RESET);
    size_t rl = offsetof(struct ibv_qp_attr, rate_limit);
    CHECK(rl == 136);
    CHECK(all(qa + rl, sizeof qa - rl, 0xAA));

    /* 9. Relaxed ordering is a hint: accepted (the access is not a constant, so the
     * ibv_reg_mr macro calls ibv_reg_mr_iova2). */
    static char src[4096], dst1[4096], dst2[4096];
    volatile int relaxed = IBV_ACCESS_RELAXED_ORDERING;
    struct ibv_mr *smr = ibv_reg_mr(pd, src, sizeof src, IBV_ACCESS_LOCAL_WRITE | relaxed);
    CHECK(smr);
    struct ibv_mr *ro = ibv_reg_mr_iova2(pd, dst2, 64, (uintptr_t)dst2,
                                         IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_RELAXED_ORDERING);
    CHECK(ro && ibv_dereg_mr(ro) == 0);

    /* 8. ibv_rereg_mr. */
    union ibv_gid gid;
    CHECK(ibv_query_gid(ctx, 1, 1, &gid) == 0);
    connect_rc(a, b->qp_num, gid, 1);
    connect_rc(b, a->qp_num, gid, 1);
    struct ibv_mr *mr = ibv_reg_mr(pd, dst1, sizeof dst1, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    CHECK(mr);
    memset(src, 'x', 64);
    CHECK(write_to(a, src, smr->lkey, 64, dst1, mr->rkey) == IBV_WC_SUCCESS);
    CHECK(dst1[0] == 'x' && dst1[63] == 'x');
    /* rdma-core's input checks: IBV_REREG_MR_ERR_INPUT with EINVAL, the region unchanged. */
    errno = 0;
    CHECK(ibv_rereg_mr(mr, 1 << 3, NULL, NULL, 0, 0) == IBV_REREG_MR_ERR_INPUT && errno == EINVAL);
    CHECK(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_TRANSLATION, NULL, NULL, 64, 0) == IBV_REREG_MR_ERR_INPUT);
    CHECK(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_TRANSLATION, NULL, dst2, 0, 0) == IBV_REREG_MR_ERR_INPUT);
    CHECK(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_PD, pd, NULL, 0, IBV_ACCESS_LOCAL_WRITE) == IBV_REREG_MR_ERR_INPUT);
    /* What the kernel refuses: IBV_REREG_MR_ERR_CMD. */
    errno = 0;
    CHECK(ibv_rereg_mr(mr, 0, NULL, NULL, 0, 0) == IBV_REREG_MR_ERR_CMD && errno == EINVAL);
    CHECK(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_PD, (struct ibv_pd *)src, NULL, 0, 0) == IBV_REREG_MR_ERR_CMD);
    CHECK(mr->addr == dst1 && mr->pd == pd);
    /* A new translation: the region is dst2 now, under its new keys. */
    CHECK(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_TRANSLATION, NULL, dst2, 128, 0) == 0);
    CHECK(mr->addr == dst2 && mr->length == 128);
    memset(src, 'y', 64);
    CHECK(write_to(a, src, smr->lkey, 64, dst2, mr->rkey) == IBV_WC_SUCCESS);
    CHECK(dst2[0] == 'y' && dst2[63] == 'y' && dst1[0] == 'x');
    /* Another PD and back. */
    struct ibv_pd *pd2 = ibv_alloc_pd(ctx);
    CHECK(pd2);
    /* Without a new translation the keys stay (a peer holding the rkey goes on with it). */
    uint32_t lk = mr->lkey, rk = mr->rkey;
    CHECK(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_PD, pd2, NULL, 0, 0) == 0 && mr->pd == pd2);
    CHECK(mr->lkey == lk && mr->rkey == rk);
    CHECK(ibv_dealloc_pd(pd2) == EBUSY);
    CHECK(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_PD, pd, NULL, 0, 0) == 0 && mr->pd == pd);
    CHECK(ibv_dealloc_pd(pd2) == 0);
    memset(src, 'z', 64);
    CHECK(write_to(a, src, smr->lkey, 64, dst2, mr->rkey) == IBV_WC_SUCCESS);
    CHECK(dst2[0] == 'z');
    /* A region registered without remote rights has an rkey too, which a rereg granting
       REMOTE_WRITE makes work (rdma-core's test_mr_rereg_access). */
    struct ibv_mr *local_only = ibv_reg_mr(pd, dst1, 8, IBV_ACCESS_LOCAL_WRITE);
    CHECK(local_only && local_only->rkey != 0);
    uint32_t rk1 = local_only->rkey;
    CHECK(ibv_rereg_mr(local_only, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0,
                       IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE) == 0);
    CHECK(local_only->rkey == rk1);
    CHECK(write_to(a, src, smr->lkey, 8, dst1, rk1) == IBV_WC_SUCCESS && dst1[0] == 'z');
    CHECK(ibv_dereg_mr(local_only) == 0);
    /* New access without REMOTE_WRITE: the next WRITE is refused. */
    CHECK(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0, IBV_ACCESS_LOCAL_WRITE) == 0);
    memset(src, 'w', 64);
    CHECK(write_to(a, src, smr->lkey, 64, dst2, mr->rkey) == IBV_WC_REM_ACCESS_ERR);
    CHECK(dst2[0] == 'z');
    CHECK(mr->lkey == lk && mr->rkey == rk);

    /* A new translation while a receive names the region (rdma-core's
       test_mr_rereg_addr): allowed, as no message has started using the receive; when a
       SEND takes it, its old lkey fails as on a NIC: the receive completes LOC_QP_OP_ERR,
       the SEND REM_OP_ERR, and the old memory is not written. */
    static char dst3[64];
    struct ibv_qp *c = rc_qp(pd), *d = rc_qp(pd);
    connect_rc(c, d->qp_num, gid, 1);
    connect_rc(d, c->qp_num, gid, 1);
    memset(dst1, 'q', 64);
    struct ibv_mr *rmr = ibv_reg_mr(pd, dst1, 64, IBV_ACCESS_LOCAL_WRITE);
    CHECK(rmr);
    struct ibv_sge rsge = { .addr = (uintptr_t)dst1, .length = 64, .lkey = rmr->lkey };
    struct ibv_recv_wr rwr, *rbad;
    memset(&rwr, 0, sizeof rwr);
    rwr.wr_id = 7; rwr.sg_list = &rsge; rwr.num_sge = 1;
    CHECK(ibv_post_recv(d, &rwr, &rbad) == 0);
    CHECK(ibv_rereg_mr(rmr, IBV_REREG_MR_CHANGE_TRANSLATION, NULL, dst3, 64, 0) == 0);
    CHECK(rmr->addr == dst3 && rmr->lkey != rsge.lkey);
    struct ibv_sge ssge = { .addr = (uintptr_t)src, .length = 64, .lkey = smr->lkey };
    struct ibv_send_wr swr, *sbad;
    memset(&swr, 0, sizeof swr);
    swr.wr_id = 8; swr.sg_list = &ssge; swr.num_sge = 1; swr.opcode = IBV_WR_SEND;
    swr.send_flags = IBV_SEND_SIGNALED;
    CHECK(ibv_post_send(c, &swr, &sbad) == 0);
    int got_send = 0, got_recv = 0;
    for (int i = 0; i < 2; i++) {
        struct ibv_wc wc = wait_wc();
        printf("rereg under a receive: wr_id %llu status %d\n", (unsigned long long)wc.wr_id, wc.status);
        if (wc.wr_id == 8) { CHECK(wc.qp_num == c->qp_num && wc.status == IBV_WC_REM_OP_ERR); got_send = 1; }
        else { CHECK(wc.wr_id == 7 && wc.qp_num == d->qp_num && wc.status == IBV_WC_LOC_QP_OP_ERR); got_recv = 1; }
    }
    CHECK(got_send && got_recv);
    CHECK(all((unsigned char *)dst1, 64, 'q') && all((unsigned char *)dst3, 64, 0));
    CHECK(ibv_destroy_qp(c) == 0 && ibv_destroy_qp(d) == 0);
    CHECK(ibv_dereg_mr(rmr) == 0);

    CHECK(ibv_destroy_qp(a) == 0 && ibv_destroy_qp(b) == 0);
    CHECK(ibv_dereg_mr(mr) == 0 && ibv_dereg_mr(smr) == 0);
    CHECK(ibv_destroy_cq(cq) == 0 && ibv_dealloc_pd(pd) == 0);
    CHECK(ibv_close_device(ctx) == 0);
    ibv_free_device_list(list);
    printf("ok\n");
    return 0;
}
"#;

fn ip(args: &[&str]) {
    let ok = Command::new("ip")
        .args(args)
        .status()
        .expect("ip")
        .success();
    assert!(ok, "ip {args:?}");
}

/// The interface's ethtool speed as the kernel reports it in the namespace (None when
/// unknown), and the IB width and speed uroce must report for it.
fn expected_width_speed(ns: &str, iface: &str) -> (u8, u8) {
    let out = Command::new("ip")
        .args(["netns", "exec", ns, "cat"])
        .arg(format!("/sys/class/net/{iface}/speed"))
        .output()
        .expect("cat speed");
    let mbps = String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse::<i64>()
        .ok()
        .filter(|&s| s > 0)
        .map(|s| s as u32);
    eprintln!("{iface}: ethtool speed {mbps:?}");
    ibverbs::device::width_and_speed(mbps)
}

fn run(lib: &std::path::Path, exe: &str, ns: &str, iface: &str, sl: u8, mode: &str) {
    let (w, s) = expected_width_speed(ns, iface);
    let (w, s, sl) = (w.to_string(), s.to_string(), sl.to_string());
    let out = in_ns(
        ns,
        lib,
        &[("UROCE_BACKEND", "udp")],
        &["timeout", "60", exe, iface, &w, &s, &sl, mode],
    )
    .output()
    .expect("ip netns exec");
    let o = text(&out);
    eprintln!("{o}");
    assert!(out.status.success() && o.ends_with("ok\n"), "{mode}:\n{o}");
}

#[test]
fn middleware_abi_over_ipv4() {
    if !common::can_run_c_in_namespaces() {
        return;
    }
    let lib = common::library_dir("abi4");
    let Some(exe) = common::compile_c(&lib, "abi", PROGRAM, &["-libverbs"]) else {
        return;
    };
    let pair = VethPair::create("abi4", 1500).expect("veth pair");
    let exe = exe.to_str().unwrap().to_string();
    run(&lib, &exe, &pair.ns[0], &pair.ifaces[0], 2, "full");
    drop(pair);
    let _ = std::fs::remove_dir_all(&lib);
}

/// With only IPv6 addresses the datagram goes over IPv6 and `wc.sl` says so.
#[test]
fn ud_receive_reports_ipv6() {
    if !common::can_run_c_in_namespaces() {
        return;
    }
    let lib = common::library_dir("abi6");
    let Some(exe) = common::compile_c(&lib, "abi", PROGRAM, &["-libverbs"]) else {
        return;
    };
    let pair = VethPair::create("abi6", 1500).expect("veth pair");
    let (ns, dev) = (&pair.ns[0], &pair.ifaces[0]);
    let v4 = format!("{}/24", pair.addrs[0]);
    ip(&["-n", ns, "addr", "del", &v4, "dev", dev]);
    ip(&[
        "-n",
        ns,
        "addr",
        "add",
        "fd00:a61::1/64",
        "dev",
        dev,
        "nodad",
    ]);
    let exe = exe.to_str().unwrap().to_string();
    run(&lib, &exe, ns, dev, 1, "ud");
    drop(pair);
    let _ = std::fs::remove_dir_all(&lib);
}
