//! Loopback addresses, as the kernel's rdma_cm takes them (`cma_any_addr`,
//! `cma_resolve_loopback`) and as libfabric's `fi_getinfo -p verbs` relies on (it binds
//! 127.0.0.1 when given no source address, and takes the devices' addresses when that
//! leaves the id without a device): a C program on the distro's `<rdma/rdma_cma.h>` over
//! both drop-in libraries, in a network namespace over the UDP backend:
//! - `rdma_getaddrinfo` with neither node nor service answers the hints' destination
//!   (EINVAL with no address at all);
//! - `rdma_bind_addr` of 127.0.0.1 and of ::1 succeeds as a wildcard bind does: no device
//!   (`verbs` NULL), the loopback source address kept;
//! - `rdma_resolve_addr` with no source to 127.0.0.1 gives ADDR_RESOLVED on the first
//!   device;
//! - a listener bound to 127.0.0.1 and a client connecting to 127.0.0.1 in the same
//!   process: CONNECT_REQUEST, accept, ESTABLISHED on both, and a SEND whose bytes arrive;
//! - that listener also hears a REQ for the device's own address, its connection's local
//!   address being that address.
//!
//! Needs root, iproute2, gcc and librdmacm-dev; skips (saying which is missing) otherwise.

mod common;

use common::{in_ns, text};
use uroce_tools::netns::{self, VethPair};

const PROGRAM: &str = r#"
#include <errno.h>
#include <poll.h>
#include <rdma/rdma_cma.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>

#define CHECK(c) do { if (!(c)) { printf("FAIL line %d: %s (errno %d)\n", __LINE__, #c, errno); exit(1); } } while (0)

static struct rdma_cm_event *next(struct rdma_event_channel *ch) {
    struct pollfd p = { .fd = ch->fd, .events = POLLIN };
    CHECK(poll(&p, 1, 10000) == 1);
    struct rdma_cm_event *e;
    CHECK(rdma_get_cm_event(ch, &e) == 0);
    printf("%s status %d\n", rdma_event_str(e->event), e->status);
    return e;
}

static void expect(struct rdma_event_channel *ch, enum rdma_cm_event_type want) {
    struct rdma_cm_event *e = next(ch);
    CHECK(e->event == want && e->status == 0);
    rdma_ack_cm_event(e);
}

static struct ibv_qp_init_attr caps(void) {
    struct ibv_qp_init_attr a;
    memset(&a, 0, sizeof a);
    a.qp_type = IBV_QPT_RC;
    a.cap.max_send_wr = a.cap.max_recv_wr = 4;
    a.cap.max_send_sge = a.cap.max_recv_sge = 1;
    a.cap.max_inline_data = 64;
    return a;
}

static struct ibv_wc wait_wc(struct ibv_cq *cq) {
    struct ibv_wc wc;
    for (long i = 0; i < 100000000; i++) {
        int n = ibv_poll_cq(cq, 1, &wc);
        CHECK(n >= 0);
        if (n == 1) return wc;
    }
    printf("FAIL: no completion\n");
    exit(1);
}

int main(int argc, char **argv) {
    struct ibv_context **devs = rdma_get_devices(NULL);
    CHECK(devs && devs[0]);
    const char *first = ibv_get_device_name(devs[0]->device);
    struct rdma_event_channel *ch = rdma_create_event_channel();
    CHECK(ch);

    /* rdma_getaddrinfo with neither node nor service answers the hints' addresses
       (libfabric's verbs provider asks so for the peer address it was given); with no
       address either, EINVAL. */
    struct sockaddr_in own;
    memset(&own, 0, sizeof own);
    own.sin_family = AF_INET;
    own.sin_port = htons(7473);
    CHECK(argc == 2 && inet_pton(AF_INET, argv[1], &own.sin_addr) == 1);
    struct rdma_addrinfo hints, *rai;
    memset(&hints, 0, sizeof hints);
    hints.ai_flags = RAI_FAMILY;
    hints.ai_family = AF_INET;
    hints.ai_qp_type = IBV_QPT_RC;
    hints.ai_port_space = RDMA_PS_TCP;
    errno = 0;
    CHECK(rdma_getaddrinfo(NULL, NULL, &hints, &rai) == -1 && errno == EINVAL);
    hints.ai_dst_addr = (struct sockaddr *)&own;
    hints.ai_dst_len = sizeof own;
    CHECK(rdma_getaddrinfo(NULL, NULL, &hints, &rai) == 0);
    CHECK(rai->ai_family == AF_INET && rai->ai_qp_type == IBV_QPT_RC && rai->ai_port_space == RDMA_PS_TCP);
    CHECK(rai->ai_src_len == 0 && rai->ai_dst_len == sizeof own);
    CHECK(memcmp(rai->ai_dst_addr, &own, sizeof own) == 0);
    rdma_freeaddrinfo(rai);
    printf("getaddrinfo of the hints' address\n");

    /* Binding 127.0.0.1 and ::1 is binding the wildcard: no device yet, the loopback
       source kept. */
    struct sockaddr_in lo4;
    memset(&lo4, 0, sizeof lo4);
    lo4.sin_family = AF_INET;
    lo4.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    struct rdma_cm_id *b4;
    CHECK(rdma_create_id(ch, &b4, NULL, RDMA_PS_TCP) == 0);
    CHECK(rdma_bind_addr(b4, (struct sockaddr *)&lo4) == 0);
    CHECK(b4->verbs == NULL);
    struct sockaddr_in *got = (struct sockaddr_in *)rdma_get_local_addr(b4);
    CHECK(got->sin_family == AF_INET && got->sin_addr.s_addr == htonl(INADDR_LOOPBACK));
    CHECK(rdma_get_src_port(b4) != 0);
    printf("bound 127.0.0.1\n");
    struct sockaddr_in6 lo6;
    memset(&lo6, 0, sizeof lo6);
    lo6.sin6_family = AF_INET6;
    lo6.sin6_addr = in6addr_loopback;
    struct rdma_cm_id *b6;
    CHECK(rdma_create_id(ch, &b6, NULL, RDMA_PS_TCP) == 0);
    CHECK(rdma_bind_addr(b6, (struct sockaddr *)&lo6) == 0);
    CHECK(b6->verbs == NULL);
    printf("bound ::1\n");
    CHECK(rdma_destroy_id(b4) == 0 && rdma_destroy_id(b6) == 0);

    /* A listener on 127.0.0.1 and a client connecting to it. */
    struct rdma_cm_id *listener, *client, *child = NULL;
    CHECK(rdma_create_id(ch, &listener, NULL, RDMA_PS_TCP) == 0);
    lo4.sin_port = htons(7473);
    CHECK(rdma_bind_addr(listener, (struct sockaddr *)&lo4) == 0 && rdma_listen(listener, 4) == 0);
    CHECK(rdma_create_id(ch, &client, NULL, RDMA_PS_TCP) == 0);
    CHECK(rdma_resolve_addr(client, NULL, (struct sockaddr *)&lo4, 2000) == 0);
    expect(ch, RDMA_CM_EVENT_ADDR_RESOLVED);
    CHECK(client->verbs && strcmp(ibv_get_device_name(client->verbs->device), first) == 0);
    struct sockaddr_in *peer = (struct sockaddr_in *)rdma_get_peer_addr(client);
    CHECK(peer->sin_addr.s_addr == htonl(INADDR_LOOPBACK));
    CHECK(rdma_resolve_route(client, 2000) == 0);
    expect(ch, RDMA_CM_EVENT_ROUTE_RESOLVED);
    struct ibv_qp_init_attr a = caps();
    CHECK(rdma_create_qp(client, NULL, &a) == 0);
    CHECK(rdma_connect(client, NULL) == 0);

    struct rdma_cm_event *e = next(ch);
    CHECK(e->event == RDMA_CM_EVENT_CONNECT_REQUEST && e->listen_id == listener);
    child = e->id;
    rdma_ack_cm_event(e);
    a = caps();
    CHECK(rdma_create_qp(child, NULL, &a) == 0);
    char *rx = calloc(1, 64);
    struct ibv_mr *mr = ibv_reg_mr(child->pd, rx, 64, IBV_ACCESS_LOCAL_WRITE);
    CHECK(mr);
    struct ibv_sge sge = { .addr = (uintptr_t)rx, .length = 64, .lkey = mr->lkey };
    struct ibv_recv_wr rwr = { .wr_id = 1, .sg_list = &sge, .num_sge = 1 }, *bad_r;
    CHECK(ibv_post_recv(child->qp, &rwr, &bad_r) == 0);
    CHECK(rdma_accept(child, NULL) == 0);
    int established = 0;
    for (int i = 0; i < 2; i++) {
        e = next(ch);
        CHECK(e->event == RDMA_CM_EVENT_ESTABLISHED && (e->id == client || e->id == child));
        established |= e->id == client ? 1 : 2;
        rdma_ack_cm_event(e);
    }
    CHECK(established == 3);
    printf("connected over 127.0.0.1\n");

    /* The listener on 127.0.0.1 hears the device's own address too (a peer host's
       REQ names it), its connection's local address that one. */
    struct rdma_cm_id *client2;
    CHECK(rdma_create_id(ch, &client2, NULL, RDMA_PS_TCP) == 0);
    CHECK(rdma_resolve_addr(client2, NULL, (struct sockaddr *)&own, 2000) == 0);
    expect(ch, RDMA_CM_EVENT_ADDR_RESOLVED);
    CHECK(rdma_resolve_route(client2, 2000) == 0);
    expect(ch, RDMA_CM_EVENT_ROUTE_RESOLVED);
    a = caps();
    CHECK(rdma_create_qp(client2, NULL, &a) == 0);
    CHECK(rdma_connect(client2, NULL) == 0);
    e = next(ch);
    CHECK(e->event == RDMA_CM_EVENT_CONNECT_REQUEST && e->listen_id == listener);
    struct sockaddr_in *local = (struct sockaddr_in *)rdma_get_local_addr(e->id);
    CHECK(local->sin_addr.s_addr == own.sin_addr.s_addr && local->sin_port == own.sin_port);
    CHECK(rdma_reject(e->id, NULL, 0) == 0);
    rdma_ack_cm_event(e);
    e = next(ch);
    CHECK(e->event == RDMA_CM_EVENT_REJECTED && e->id == client2);
    rdma_ack_cm_event(e);
    printf("the listener on 127.0.0.1 heard %s\n", argv[1]);

    char msg[] = "over the loopback";
    struct ibv_sge ssge = { .addr = (uintptr_t)msg, .length = sizeof msg, .lkey = 0 };
    struct ibv_send_wr swr = { .wr_id = 2, .sg_list = &ssge, .num_sge = 1,
                               .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE }, *bad_s;
    errno = ibv_post_send(client->qp, &swr, &bad_s);
    CHECK(errno == 0);
    struct ibv_wc wc = wait_wc(client->send_cq);
    CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == 2);
    wc = wait_wc(child->recv_cq);
    CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == 1 && wc.byte_len == sizeof msg);
    CHECK(strcmp(rx, msg) == 0);
    printf("received: %s\n", rx);
    printf("ok\n");
    return 0;
}
"#;

/// `rdma_bind_addr` of a loopback address binds no device, `rdma_resolve_addr` to one
/// takes the first device, a connection over 127.0.0.1 moves data, and a listener on
/// 127.0.0.1 hears the device's own address; `rdma_getaddrinfo` of the hints' address.
#[test]
fn loopback_addresses_as_the_kernel() {
    if let Err(e) = netns::check_privileges() {
        eprintln!("SKIP: {e}");
        return;
    }
    if !std::path::Path::new("/usr/include/rdma/rdma_cma.h").exists() {
        eprintln!("SKIP: <rdma/rdma_cma.h> is missing (apt-get install librdmacm-dev)");
        return;
    }
    let lib = common::both_libraries_dir("loopback");
    let Some(exe) = common::compile_c(&lib, "loopback", PROGRAM, &["-lrdmacm", "-libverbs"]) else {
        return;
    };
    let pair = VethPair::create("rlo", 1500).expect("veth pair");
    let exe = exe.to_str().unwrap().to_string();
    let out = in_ns(
        &pair.ns[0],
        &lib,
        &[("UROCE_BACKEND", "udp")],
        &["timeout", "30", &exe, &pair.addrs[0].to_string()],
    )
    .output()
    .expect("ip netns exec");
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    let heard = format!("the listener on 127.0.0.1 heard {}", pair.addrs[0]);
    for line in [
        "getaddrinfo of the hints' address",
        "bound 127.0.0.1",
        "bound ::1",
        "connected over 127.0.0.1",
        heard.as_str(),
        "received: over the loopback",
        "ok",
    ] {
        assert!(t.lines().any(|l| l == line), "no {line:?} in:\n{t}");
    }
    drop(pair);
    let _ = std::fs::remove_dir_all(&lib);
}
