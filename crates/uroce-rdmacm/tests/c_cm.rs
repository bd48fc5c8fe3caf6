//! A C program on the distro's `<rdma/rdma_cma.h>`, server and client at both ends of a
//! veth pair on both drop-in libraries, for what the distro's tools do not use:
//! - `rdma_set_option`: TOS and ACK_TIMEOUT show in what `rdma_init_qp_attr` gives for RTR
//!   (the GRH's traffic class) and RTS (the timeout); REUSEADDR and AFONLY are taken; an
//!   unknown option is ENOSYS and an empty value EINVAL;
//! - `rdma_reject` with private data: the client's REJECTED event has status 28 (consumer
//!   reject) and the server's bytes, and the server had the client's REQ private data;
//! - `rdma_accept`'s private data reaches the client's ESTABLISHED event;
//! - `rdma_migrate_id`: the accepted id's events come on the channel it was moved to, and
//!   none on the old one;
//! - after a disconnect, DISCONNECTED then TIMEWAIT_EXIT on both sides;
//! - all of it again over IPv6 (ends with IPv6 addresses only).
//!
//! Needs root, iproute2, gcc and librdmacm-dev; skips (saying which is missing) otherwise.

mod common;

use std::process::Stdio;
use std::time::Duration;

use common::{in_ns, text};
use uroce_tools::netns::{self, VethPair};

const PROGRAM: &str = r#"
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <rdma/rdma_cma.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>

#define CHECK(c) do { if (!(c)) { printf("FAIL line %d: %s (errno %d)\n", __LINE__, #c, errno); exit(1); } } while (0)

/* The next event on `ch` within `ms`, which must be `want`. */
static struct rdma_cm_event *expect(struct rdma_event_channel *ch, enum rdma_cm_event_type want, int ms) {
    struct pollfd p = { .fd = ch->fd, .events = POLLIN };
    int n = poll(&p, 1, ms);
    if (n != 1) { printf("FAIL: no %s within %d ms\n", rdma_event_str(want), ms); exit(1); }
    struct rdma_cm_event *e;
    CHECK(rdma_get_cm_event(ch, &e) == 0);
    if (e->event != want) {
        printf("FAIL: %s (status %d) where %s was due\n", rdma_event_str(e->event), e->status, rdma_event_str(want));
        exit(1);
    }
    printf("%s status %d\n", rdma_event_str(e->event), e->status);
    return e;
}

static struct ibv_qp_init_attr qp_caps(void) {
    struct ibv_qp_init_attr a;
    memset(&a, 0, sizeof a);
    a.qp_type = IBV_QPT_RC;
    a.cap.max_send_wr = a.cap.max_recv_wr = 4;
    a.cap.max_send_sge = a.cap.max_recv_sge = 1;
    return a;
}

static int server(int port, int v6) {
    struct rdma_event_channel *ch = rdma_create_event_channel(), *ch2 = rdma_create_event_channel();
    CHECK(ch && ch2);
    struct rdma_cm_id *listen;
    CHECK(rdma_create_id(ch, &listen, NULL, RDMA_PS_TCP) == 0);
    int one = 1;
    CHECK(rdma_set_option(listen, RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR, &one, sizeof one) == 0);
    CHECK(rdma_set_option(listen, RDMA_OPTION_ID, RDMA_OPTION_ID_AFONLY, &one, sizeof one) == 0);
    struct sockaddr_in sin = { .sin_family = AF_INET, .sin_port = htons(port) };
    struct sockaddr_in6 sin6 = { .sin6_family = AF_INET6, .sin6_port = htons(port) };
    CHECK(rdma_bind_addr(listen, v6 ? (struct sockaddr *)&sin6 : (struct sockaddr *)&sin) == 0);
    CHECK(rdma_listen(listen, 4) == 0);
    printf("listening\n");
    fflush(stdout);

    /* 1: rejected with private data. */
    struct rdma_cm_event *e = expect(ch, RDMA_CM_EVENT_CONNECT_REQUEST, 20000);
    CHECK(e->param.conn.private_data_len >= 13);
    CHECK(memcmp(e->param.conn.private_data, "hello-reject", 13) == 0);
    struct rdma_cm_id *id = e->id;
    CHECK(rdma_ack_cm_event(e) == 0);
    CHECK(rdma_reject(id, "nope", 5) == 0);
    CHECK(rdma_destroy_id(id) == 0);

    /* 2: accepted, its id moved to the second channel first. */
    e = expect(ch, RDMA_CM_EVENT_CONNECT_REQUEST, 20000);
    CHECK(memcmp(e->param.conn.private_data, "hello-accept", 13) == 0);
    id = e->id;
    CHECK(rdma_ack_cm_event(e) == 0);
    CHECK(rdma_migrate_id(id, ch2) == 0);
    CHECK(id->channel == ch2);
    struct ibv_qp_init_attr qa = qp_caps();
    CHECK(rdma_create_qp(id, NULL, &qa) == 0);
    struct rdma_conn_param cp;
    memset(&cp, 0, sizeof cp);
    cp.private_data = "welcome";
    cp.private_data_len = 8;
    cp.responder_resources = cp.initiator_depth = 1;
    CHECK(rdma_accept(id, &cp) == 0);
    CHECK(rdma_ack_cm_event(expect(ch2, RDMA_CM_EVENT_ESTABLISHED, 20000)) == 0);
    CHECK(rdma_ack_cm_event(expect(ch2, RDMA_CM_EVENT_DISCONNECTED, 20000)) == 0);
    CHECK(rdma_ack_cm_event(expect(ch2, RDMA_CM_EVENT_TIMEWAIT_EXIT, 20000)) == 0);
    /* Nothing of the moved id's came on the old channel. */
    struct pollfd p = { .fd = ch->fd, .events = POLLIN };
    CHECK(poll(&p, 1, 0) == 0);
    rdma_destroy_qp(id);
    CHECK(rdma_destroy_id(id) == 0);
    CHECK(rdma_destroy_id(listen) == 0);
    rdma_destroy_event_channel(ch);
    rdma_destroy_event_channel(ch2);
    printf("server ok\n");
    return 0;
}

/* An id resolved to addr:port, with a QP, the options set. */
static struct rdma_cm_id *resolved(struct rdma_event_channel *ch, const char *addr, int port) {
    struct rdma_cm_id *id;
    CHECK(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) == 0);
    uint8_t tos = 0x68, timeout = 18;
    CHECK(rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, &tos, sizeof tos) == 0);
    CHECK(rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT, &timeout, sizeof timeout) == 0);
    int x = 1;
    errno = 0;
    CHECK(rdma_set_option(id, 99, 1, &x, sizeof x) == -1 && errno == ENOSYS);
    errno = 0;
    CHECK(rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, &tos, 0) == -1 && errno == EINVAL);
    struct sockaddr_in sin = { .sin_family = AF_INET, .sin_port = htons(port) };
    struct sockaddr_in6 sin6 = { .sin6_family = AF_INET6, .sin6_port = htons(port) };
    struct sockaddr *to = (struct sockaddr *)&sin;
    if (strchr(addr, ':')) {
        CHECK(inet_pton(AF_INET6, addr, &sin6.sin6_addr) == 1);
        to = (struct sockaddr *)&sin6;
    } else {
        CHECK(inet_pton(AF_INET, addr, &sin.sin_addr) == 1);
    }
    CHECK(rdma_resolve_addr(id, NULL, to, 2000) == 0);
    CHECK(rdma_ack_cm_event(expect(ch, RDMA_CM_EVENT_ADDR_RESOLVED, 5000)) == 0);
    CHECK(rdma_resolve_route(id, 2000) == 0);
    CHECK(rdma_ack_cm_event(expect(ch, RDMA_CM_EVENT_ROUTE_RESOLVED, 5000)) == 0);
    struct ibv_qp_init_attr qa = qp_caps();
    CHECK(rdma_create_qp(id, NULL, &qa) == 0);
    return id;
}

static void connect_with(struct rdma_cm_id *id, const char *data) {
    struct rdma_conn_param cp;
    memset(&cp, 0, sizeof cp);
    cp.private_data = data;
    cp.private_data_len = strlen(data) + 1;
    cp.responder_resources = cp.initiator_depth = 1;
    cp.retry_count = 7;
    CHECK(rdma_connect(id, &cp) == 0);
}

static int client(const char *addr, int port) {
    struct rdma_event_channel *ch = rdma_create_event_channel();
    CHECK(ch);

    /* 1: rejected, with the server's bytes. */
    struct rdma_cm_id *id = resolved(ch, addr, port);
    connect_with(id, "hello-reject");
    struct rdma_cm_event *e = expect(ch, RDMA_CM_EVENT_REJECTED, 20000);
    CHECK(e->status == 28);
    CHECK(e->param.conn.private_data_len >= 5);
    CHECK(memcmp(e->param.conn.private_data, "nope", 5) == 0);
    CHECK(rdma_ack_cm_event(e) == 0);
    rdma_destroy_qp(id);
    CHECK(rdma_destroy_id(id) == 0);

    /* 2: accepted; what the options set shows in the QP's attributes. */
    id = resolved(ch, addr, port);
    connect_with(id, "hello-accept");
    e = expect(ch, RDMA_CM_EVENT_ESTABLISHED, 20000);
    CHECK(e->param.conn.private_data_len >= 8);
    CHECK(memcmp(e->param.conn.private_data, "welcome", 8) == 0);
    CHECK(rdma_ack_cm_event(e) == 0);
    struct ibv_qp_attr attr;
    int mask;
    memset(&attr, 0, sizeof attr);
    attr.qp_state = IBV_QPS_RTR;
    CHECK(rdma_init_qp_attr(id, &attr, &mask) == 0);
    printf("RTR traffic class 0x%x\n", attr.ah_attr.grh.traffic_class);
    CHECK(attr.ah_attr.grh.traffic_class == 0x68);
    memset(&attr, 0, sizeof attr);
    attr.qp_state = IBV_QPS_RTS;
    CHECK(rdma_init_qp_attr(id, &attr, &mask) == 0);
    printf("RTS timeout %u\n", attr.timeout);
    CHECK((mask & IBV_QP_TIMEOUT) && attr.timeout == 18);
    CHECK(rdma_disconnect(id) == 0);
    CHECK(rdma_ack_cm_event(expect(ch, RDMA_CM_EVENT_DISCONNECTED, 20000)) == 0);
    CHECK(rdma_ack_cm_event(expect(ch, RDMA_CM_EVENT_TIMEWAIT_EXIT, 20000)) == 0);
    rdma_destroy_qp(id);
    CHECK(rdma_destroy_id(id) == 0);
    rdma_destroy_event_channel(ch);
    printf("client ok\n");
    return 0;
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc == 3 && strcmp(argv[1], "s") == 0) return server(atoi(argv[2]), 0);
    if (argc == 3 && strcmp(argv[1], "s6") == 0) return server(atoi(argv[2]), 1);
    if (argc == 4 && strcmp(argv[1], "c") == 0) return client(argv[2], atoi(argv[3]));
    printf("usage: s|s6 PORT | c ADDR PORT\n");
    return 2;
}
"#;

fn suite(backend: &str, port: u16, v6: bool) {
    if let Err(e) = netns::check_privileges() {
        eprintln!("SKIP: {e}");
        return;
    }
    if !std::path::Path::new("/usr/include/rdma/rdma_cma.h").exists() {
        eprintln!("SKIP: <rdma/rdma_cma.h> is missing (apt-get install librdmacm-dev)");
        return;
    }
    let lib = common::both_libraries_dir(&format!("ccm-{backend}{}", if v6 { "6" } else { "" }));
    let Some(exe) = common::compile_c(&lib, "cm", PROGRAM, &["-lrdmacm", "-libverbs"]) else {
        return;
    };
    let tag = format!("cc{}{}", &backend[..1], if v6 { "6" } else { "" });
    let pair = VethPair::create(&tag, 1500).expect("veth pair");
    let exe = exe.to_str().unwrap().to_string();
    let (mut a, port) = (pair.addrs[0].to_string(), port.to_string());
    let mode = if v6 {
        // IPv6 only: each end's IPv4 address taken away (a device sends from IPv6 only
        // when it has no IPv4 address), a ULA of its own given, without duplicate address
        // detection's wait.
        for i in 0..2 {
            let ip = |args: &[&str]| {
                let ok = std::process::Command::new("ip")
                    .args(["-n", &pair.ns[i]])
                    .args(args)
                    .status()
                    .is_ok_and(|s| s.success());
                assert!(ok, "ip {args:?}");
            };
            ip(&["-4", "addr", "flush", "dev", &pair.ifaces[i]]);
            let addr = format!("fd00:77::{}/64", i + 1);
            ip(&["addr", "add", &addr, "dev", &pair.ifaces[i], "nodad"]);
        }
        a = "fd00:77::1".into();
        "s6"
    } else {
        "s"
    };
    // Short CM timers, so that the time waits end within the test.
    let env = [
        ("UROCE_BACKEND", backend),
        ("UROCE_CM_RESPONSE_TIMEOUT", "14"),
    ];
    let srv = in_ns(
        &pair.ns[0],
        &lib,
        &env,
        &["timeout", "60", &exe, mode, &port],
    )
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .expect("server");
    std::thread::sleep(Duration::from_millis(700));
    let cli = in_ns(
        &pair.ns[1],
        &lib,
        &env,
        &["timeout", "60", &exe, "c", &a, &port],
    )
    .output()
    .expect("client");
    let srv = srv.wait_with_output().expect("server output");
    let what = format!(
        "over {backend}{}\n-- server:\n{}\n-- client:\n{}",
        if v6 { ", IPv6" } else { "" },
        text(&srv),
        text(&cli)
    );
    assert!(
        srv.status.success() && text(&srv).contains("server ok"),
        "{what}"
    );
    assert!(
        cli.status.success() && text(&cli).contains("client ok"),
        "{what}"
    );
    eprintln!("{what}");
    drop(pair);
    let _ = std::fs::remove_dir_all(&lib);
}

#[test]
fn options_reject_data_migrate_and_time_wait_over_udp() {
    suite("udp", 7471, false);
}

#[test]
fn options_reject_data_migrate_and_time_wait_over_af_xdp() {
    suite("xdp", 7472, false);
}

#[test]
fn the_same_over_ipv6_over_udp() {
    suite("udp", 7473, true);
}

#[test]
fn the_same_over_ipv6_over_af_xdp() {
    suite("xdp", 7474, true);
}
