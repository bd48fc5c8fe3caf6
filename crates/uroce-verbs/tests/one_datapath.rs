//! Two programs on one address never split the host silently: until a shared datapath
//! lands, the second one's first `ibv_create_qp` fails with EADDRINUSE, whichever
//! datapath the first one holds. A C program against the distro's
//! `<infiniband/verbs.h>`, two copies of it in one network namespace:
//! - default backend (`auto`): the first takes AF_XDP on the interface; the second's
//!   AF_XDP is refused (EBUSY / EEXIST from the kernel) and it must not fall back to the
//!   UDP backend, which would receive nothing while the first's XDP program takes every
//!   RoCE frame;
//! - the first on the UDP backend (`UROCE_BACKEND=udp`), the second `auto`: taking AF_XDP
//!   would steal the first's traffic: EADDRINUSE too;
//! - both on the UDP backend: the second's bind of UDP/4791 is EADDRINUSE (as before);
//! - once the first has exited, a new program gets its datapath.
//!
//! Needs root, iproute2, gcc and libibverbs-dev; skips (saying which is missing)
//! otherwise.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Child, Stdio};

use common::{in_ns, text};
use uroce_tools::netns::VethPair;

const PROGRAM: &str = r#"
#include <errno.h>
#include <infiniband/verbs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(c) do { if (!(c)) { printf("FAIL line %d: %s (errno %d)\n", __LINE__, #c, errno); exit(1); } } while (0)

/* Creates a QP (which opens the datapath) and says how it went; with "hold", keeps it
   until its standard input closes. */
int main(int argc, char **argv) {
    struct ibv_device **list = ibv_get_device_list(NULL);
    CHECK(list && list[0]);
    struct ibv_context *ctx = ibv_open_device(list[0]);
    CHECK(ctx);
    struct ibv_pd *pd = ibv_alloc_pd(ctx);
    struct ibv_cq *cq = ibv_create_cq(ctx, 4, NULL, NULL, 0);
    CHECK(pd && cq);
    struct ibv_qp_init_attr ia;
    memset(&ia, 0, sizeof ia);
    ia.send_cq = cq; ia.recv_cq = cq; ia.qp_type = IBV_QPT_RC;
    ia.cap.max_send_wr = 1; ia.cap.max_recv_wr = 1; ia.cap.max_send_sge = 1; ia.cap.max_recv_sge = 1;
    errno = 0;
    struct ibv_qp *qp = ibv_create_qp(pd, &ia);
    if (!qp) {
        printf("create_qp failed: %s\n", strerror(errno));
        return 0;
    }
    printf("create_qp ok\n");
    fflush(stdout);
    if (argc > 1 && strcmp(argv[1], "hold") == 0) {
        char buf[16];
        while (fgets(buf, sizeof buf, stdin)) {}
    }
    CHECK(ibv_destroy_qp(qp) == 0);
    return 0;
}
"#;

/// A program holding its datapath until its standard input closes, started once it has.
fn hold(pair: &VethPair, lib: &std::path::Path, exe: &str, backend: Option<&str>) -> Child {
    let env: Vec<(&str, &str)> = backend.map(|b| ("UROCE_BACKEND", b)).into_iter().collect();
    let mut child = in_ns(&pair.ns[0], lib, &env, &["timeout", "60", exe, "hold"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("ip netns exec");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .expect("first line");
    assert_eq!(line.trim(), "create_qp ok", "the first program");
    child
}

/// What the second program said.
fn second(pair: &VethPair, lib: &std::path::Path, exe: &str, backend: Option<&str>) -> String {
    let env: Vec<(&str, &str)> = backend.map(|b| ("UROCE_BACKEND", b)).into_iter().collect();
    let out = in_ns(&pair.ns[0], lib, &env, &["timeout", "30", exe])
        .output()
        .expect("ip netns exec");
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    t.trim().to_string()
}

fn release(mut first: Child) {
    drop(first.stdin.take());
    assert!(first.wait().unwrap().success());
}

/// Whether an XDP program is attached to the namespace's interface now.
fn xdp_attached(pair: &VethPair) -> bool {
    let out = std::process::Command::new("ip")
        .args(["-n", &pair.ns[0], "link", "show", &pair.ifaces[0]])
        .output()
        .expect("ip link");
    String::from_utf8_lossy(&out.stdout).contains("prog/xdp")
}

#[test]
fn a_second_program_on_one_address_gets_eaddrinuse() {
    if !common::can_run_c_in_namespaces() {
        return;
    }
    let lib = common::library_dir("onedp");
    let Some(exe) = common::compile_c(&lib, "onedp", PROGRAM, &["-libverbs"]) else {
        return;
    };
    let pair = VethPair::create("onedp", 1500).expect("veth pair");
    let exe = exe.to_str().unwrap().to_string();
    let refused = "create_qp failed: Address already in use";

    // Default backend: the first takes AF_XDP.
    let first = hold(&pair, &lib, &exe, None);
    if xdp_attached(&pair) {
        assert_eq!(
            second(&pair, &lib, &exe, None),
            refused,
            "auto after AF_XDP"
        );
    } else {
        eprintln!("SKIP (part): AF_XDP could not be set up here, the first program took UDP");
    }
    release(first);

    // The first on UDP: a second on `auto` must not take AF_XDP from under it.
    let first = hold(&pair, &lib, &exe, Some("udp"));
    assert_eq!(second(&pair, &lib, &exe, None), refused, "auto after UDP");
    assert_eq!(
        second(&pair, &lib, &exe, Some("udp")),
        refused,
        "udp after UDP"
    );
    release(first);

    // Nothing held any more: a program gets its datapath.
    assert_eq!(second(&pair, &lib, &exe, None), "create_qp ok");
    drop(pair);
    let _ = std::fs::remove_dir_all(&lib);
}
