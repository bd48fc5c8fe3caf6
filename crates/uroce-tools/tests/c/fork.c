/* After fork(2): the child opens the device anew and moves data through the shared
 * datapath (uroce daemon) while the parent moves data of its own at the same time. Written for
 * crates/uroce-tools/tests/shared_datapath.rs; prints OK on success. */
#include <errno.h>
#include <infiniband/verbs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

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

static void pair_traffic(struct ibv_device *dev, const char *who) {
    static struct side c, d;
    open_side(dev, &c);
    open_side(dev, &d);
    union ibv_gid gid;
    CHECK(ibv_query_gid(d.ctx, 1, 1, &gid) == 0);
    struct ibv_qp *qc = rc_qp(&c), *qd = rc_qp(&d);
    connect_qp(qc, qd->qp_num, &gid);
    connect_qp(qd, qc->qp_num, &gid);
    for (int i = 0; i < 300; i++) {
        write_to(&c, qc, &d, 'c' + i % 16);
        send_to(&c, qc, &d, qd);
    }
    printf("%s: traffic OK\n", who);
}

int main(void) {
    int n;
    struct ibv_device **list = ibv_get_device_list(&n);
    CHECK(list && n >= 1);
    static struct side a, b;
    open_side(list[0], &a);
    open_side(list[0], &b);
    union ibv_gid gid;
    CHECK(ibv_query_gid(b.ctx, 1, 1, &gid) == 0);
    struct ibv_qp *qa = rc_qp(&a), *qb = rc_qp(&b);
    connect_qp(qa, qb->qp_num, &gid);
    connect_qp(qb, qa->qp_num, &gid);
    write_to(&a, qa, &b, 'a');
    fflush(stdout);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        /* The parent's contexts are the parent's: the child opens its own. */
        pair_traffic(list[0], "child");
        fflush(stdout);
        _exit(0);
    }
    /* At the same time as the child: new QPs of the parent's, and its first ones. */
    pair_traffic(list[0], "parent");
    write_to(&b, qb, &a, 'b');
    send_to(&b, qb, &a, qa);
    int status;
    CHECK(waitpid(pid, &status, 0) == pid);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    printf("OK\n");
    return 0;
}
