//! Two contexts of one device in one process, as middleware opens them (Open MPI through
//! UCX and again through libfabric; a program beside librdmacm): both create QPs, a QP
//! of the first context connected to one of the second moves data both ways (RDMA WRITE
//! one way, SEND the other, checked), and after the first context is closed the second
//! still works (its QP talks to a third QP of its own). Over the UDP backend and AF_XDP;
//! without the shared engine the second context's first QP failed with EADDRINUSE (UDP)
//! or EIO (AF_XDP).
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

int main(void) {
    int n;
    struct ibv_device **list = ibv_get_device_list(&n);
    CHECK(list && n >= 1);
    static struct side a, b;
    open_side(list[0], &a);
    open_side(list[0], &b);
    CHECK(a.ctx != b.ctx);
    union ibv_gid gid;
    CHECK(ibv_query_gid(b.ctx, 1, 1, &gid) == 0);
    struct ibv_qp *qa = rc_qp(&a), *qb = rc_qp(&b);
    CHECK(qa->qp_num != qb->qp_num);
    connect_qp(qa, qb->qp_num, &gid);
    connect_qp(qb, qa->qp_num, &gid);
    write_to(&a, qa, &b, 'a');
    write_to(&b, qb, &a, 'b');
    send_to(&b, qb, &a, qa);
    /* The first context goes; the second keeps its engine. */
    CHECK(ibv_destroy_qp(qa) == 0);
    CHECK(ibv_dereg_mr(a.mr) == 0);
    CHECK(ibv_destroy_cq(a.cq) == 0);
    CHECK(ibv_dealloc_pd(a.pd) == 0);
    CHECK(ibv_close_device(a.ctx) == 0);
    static struct side c;
    c.ctx = b.ctx;
    c.pd = b.pd;
    c.cq = ibv_create_cq(b.ctx, 64, NULL, NULL, 0);
    CHECK(c.cq);
    c.mr = ibv_reg_mr(c.pd, c.buf, sizeof c.buf, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    CHECK(c.mr);
    struct ibv_qp *qc = rc_qp(&c), *qb2 = rc_qp(&b);
    connect_qp(qc, qb2->qp_num, &gid);
    connect_qp(qb2, qc->qp_num, &gid);
    write_to(&b, qb2, &c, 'c');
    send_to(&c, qc, &b, qb2);
    printf("OK\n");
    return 0;
}
"#;

fn run(backend: &str, tag: &str) {
    if !common::can_run_c_in_namespaces() {
        return;
    }
    let lib = common::library_dir(tag);
    let Some(exe) = common::compile_c(&lib, "two_contexts", PROGRAM, &["-libverbs"]) else {
        return;
    };
    let pair = VethPair::create(tag, 1500).expect("veth pair");
    let iface = pair.ifaces[0].clone();
    let out = in_ns(
        &pair.ns[0],
        &lib,
        &[("UROCE_IFACES", &iface), ("UROCE_BACKEND", backend)],
        &["timeout", "60", exe.to_str().unwrap()],
    )
    .output()
    .expect("run");
    let t = text(&out);
    assert!(out.status.success() && t.contains("OK"), "{backend}: {t}");
}

#[test]
fn two_contexts_of_one_device_share_its_datapath_over_udp() {
    run("udp", "twoctxu");
}

#[test]
fn two_contexts_of_one_device_share_its_datapath_over_af_xdp() {
    run("xdp", "twoctxx");
}
