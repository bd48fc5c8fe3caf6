//! QP 1's send (`uroce_gsi_send@UROCE_PRIVATE_1`, what uroce's librdmacm sends its CM
//! MADs with) never waits for ARP in the caller's thread, over AF_XDP where uroce finds
//! MACs itself: a MAD to an on-link address nobody has is held (0) while another thread
//! asks, the ones after it wait behind it (0; 16 at most, then EAGAIN), and once nobody
//! answered, sends to that
//! address are refused at once with EHOSTUNREACH. Before, each send blocked its caller (the
//! CM's thread, and with it every other connection's events) for the whole ARP exchange
//! and then failed. A MAD to a peer that answers ARP is never refused.
//!
//! Needs root, iproute2, gcc and libibverbs-dev; skips (saying which is missing)
//! otherwise.

mod common;

use common::{in_ns, text};
use uroce_tools::netns::VethPair;

const PROGRAM: &str = r#"
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <unistd.h>

#define CHECK(c) do { if (!(c)) { printf("FAIL line %d: %s\n", __LINE__, #c); exit(1); } } while (0)

typedef int (*gsi_open_fn)(struct ibv_context *);
typedef int (*gsi_send_fn)(struct ibv_context *, const uint8_t *, uint32_t, uint32_t,
                           const uint8_t *, size_t);

static void gid_of(const char *ip, uint8_t gid[16]) {
    memset(gid, 0, 16);
    gid[10] = gid[11] = 0xff;
    CHECK(inet_pton(AF_INET, ip, gid + 12) == 1);
}

int main(int argc, char **argv) {
    CHECK(argc == 3);
    struct ibv_device **list = ibv_get_device_list(NULL);
    CHECK(list && list[0]);
    struct ibv_context *ctx = ibv_open_device(list[0]);
    CHECK(ctx);
    gsi_open_fn gsi_open = (gsi_open_fn)dlvsym(RTLD_DEFAULT, "uroce_gsi_open", "UROCE_PRIVATE_1");
    gsi_send_fn gsi_send = (gsi_send_fn)dlvsym(RTLD_DEFAULT, "uroce_gsi_send", "UROCE_PRIVATE_1");
    CHECK(gsi_open && gsi_send);
    CHECK(gsi_open(ctx) >= 0);
    uint8_t mad[256], nobody[16], peer[16];
    memset(mad, 0, sizeof mad);
    mad[0] = 1;    /* base version */
    mad[1] = 0x07; /* CM class */
    mad[2] = 2;    /* class version */
    gid_of(argv[1], nobody);
    gid_of(argv[2], peer);

    /* The first MAD is held while the MAC is asked for, the second waits behind it. */
    int r = gsi_send(ctx, nobody, 1, 0x80010000u, mad, sizeof mad);
    printf("first send to nobody: %d\n", r);
    CHECK(r == 0);
    r = gsi_send(ctx, nobody, 1, 0x80010000u, mad, sizeof mad);
    CHECK(r == 0);
    /* More wait behind it, up to a bound (then EAGAIN); once nobody answered, refused
       at once. */
    int held = 2, full = 0;
    for (int i = 0; i < 100 && (r == 0 || r == EAGAIN); i++) {
        usleep(100000);
        r = gsi_send(ctx, nobody, 1, 0x80010000u, mad, sizeof mad);
        if (r == 0) held++;
        if (r == EAGAIN) full++;
    }
    printf("sends held: %d, refused as too many waiting: %d, then %d\n", held, full, r);
    CHECK(held == 16);
    CHECK(r == EHOSTUNREACH);
    CHECK(gsi_send(ctx, nobody, 1, 0x80010000u, mad, sizeof mad) == EHOSTUNREACH);

    /* A peer that answers ARP (the kernel at the other end) is never refused. */
    for (int i = 0; i < 20; i++) {
        r = gsi_send(ctx, peer, 1, 0x80010000u, mad, sizeof mad);
        CHECK(r == 0);
        usleep(50000);
    }
    CHECK(ibv_close_device(ctx) == 0);
    ibv_free_device_list(list);
    printf("ok\n");
    return 0;
}
"#;

#[test]
fn qp1_sends_do_not_wait_for_arp() {
    if !common::can_run_c_in_namespaces() {
        return;
    }
    let lib = common::library_dir("gsi");
    let Some(exe) = common::compile_c(&lib, "gsi", PROGRAM, &["-libverbs", "-ldl"]) else {
        return;
    };
    let pair = VethPair::create("gsi", 1500).expect("veth pair");
    let [_, peer] = pair.addrs;
    let o = peer.octets();
    // On the veth's subnet, and nobody's.
    let nobody = std::net::Ipv4Addr::new(o[0], o[1], o[2], 77).to_string();
    let (exe, peer) = (exe.to_str().unwrap().to_string(), peer.to_string());
    let run = in_ns(
        &pair.ns[0],
        &lib,
        &[("UROCE_BACKEND", "xdp")],
        &["timeout", "60", &exe, &nobody, &peer],
    )
    .output()
    .expect("ip netns exec");
    let out = text(&run);
    if out.contains("AF_XDP") && !run.status.success() && !out.contains("FAIL") {
        eprintln!("SKIP: AF_XDP cannot be set up here:\n{out}");
        return;
    }
    assert!(run.status.success() && out.ends_with("ok\n"), "{out}");
    eprint!("{out}");
    drop(pair);
    let _ = std::fs::remove_dir_all(&lib);
}
