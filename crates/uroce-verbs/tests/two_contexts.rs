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
#include <stdio.h>
#include "rc_side.h"

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
    let include = format!("-I{}/../../test-support/c", env!("CARGO_MANIFEST_DIR"));
    let Some(exe) = common::compile_c(&lib, "two_contexts", PROGRAM, &[&include, "-libverbs"])
    else {
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
