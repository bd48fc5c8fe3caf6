//! The distro's unmodified `ibv_devinfo` and `ibv_devices` run on the built library in a
//! network namespace holding one veth end (so the interface list is known) and print
//! uroce's device: its name, GUID, an active Ethernet port with the MTU of the interface
//! and the RoCE v2 GIDs of its addresses. Needs root, iproute2 and ibverbs-utils; skips
//! (saying which is missing) otherwise.

mod common;

use std::path::Path;
use std::process::Command;

use common::{in_ns, text};
use uroce_tools::netns::{self, VethPair};

fn ready() -> bool {
    if let Err(e) = netns::check_privileges() {
        eprintln!("SKIP: {e}");
        return false;
    }
    for tool in ["/usr/bin/ibv_devinfo", "/usr/bin/ibv_devices"] {
        if !Path::new(tool).exists() {
            eprintln!("SKIP: {tool} is missing (apt-get install ibverbs-utils)");
            return false;
        }
    }
    true
}

#[test]
fn ibv_devinfo_and_ibv_devices_show_the_veth() {
    if !ready() {
        return;
    }
    let lib = common::library_dir("devinfo");
    let pair = VethPair::create("vdi", 9000).expect("veth pair");
    let (ns, iface) = (&pair.ns[0], &pair.ifaces[0]);
    let dev = format!("uroce_{iface}");

    let list = in_ns(ns, &lib, &[], &["ibv_devinfo", "-l"])
        .output()
        .expect("ip netns exec");
    let out = text(&list);
    assert!(list.status.success(), "{out}");
    assert!(
        out.contains("1 HCA found:") && out.contains(&format!("\t{dev}\n")),
        "{out}"
    );

    let info = in_ns(ns, &lib, &[], &["ibv_devinfo", "-v"])
        .output()
        .expect("ip netns exec");
    let out = text(&info);
    assert!(info.status.success(), "{out}");
    let mac = pair.mac(0).expect("mac");
    let guid = format!(
        "{:02x}{:02x}:{:02x}ff:fe{:02x}:{:02x}{:02x}",
        mac[0] ^ 2,
        mac[1],
        mac[2],
        mac[3],
        mac[4],
        mac[5]
    );
    for want in [
        format!("hca_id:\t{dev}\n"),
        format!("node_guid:\t\t\t{guid}\n"),
        "phys_port_cnt:\t\t\t1\n".to_string(),
        "state:\t\t\tPORT_ACTIVE (4)\n".to_string(),
        "max_mtu:\t\t4096 (5)\n".to_string(),
        "active_mtu:\t\t4096 (5)\n".to_string(),
        "link_layer:\t\tEthernet\n".to_string(),
        "phys_state:\t\tLINK_UP (5)\n".to_string(),
        format!("\t\t::ffff:{}, RoCE v2\n", pair.addrs[0]),
    ] {
        assert!(out.contains(&want), "missing {want:?} in:\n{out}");
    }
    // The IPv4-mapped GID is in the table (after the IPv6 link-local one, once the kernel
    // has finished duplicate address detection on it).
    let gid_line = out
        .lines()
        .find(|l| l.contains(&format!("::ffff:{}", pair.addrs[0])))
        .unwrap();
    assert!(gid_line.trim_start().starts_with("GID["), "{gid_line}");

    let devices = in_ns(ns, &lib, &[], &["ibv_devices"])
        .output()
        .expect("ip netns exec");
    let out = text(&devices);
    assert!(devices.status.success(), "{out}");
    let line = out
        .lines()
        .find(|l| l.contains(&dev))
        .unwrap_or_else(|| panic!("{out}"));
    assert!(line.contains(&guid.replace(':', "")), "{out}");

    // The port follows the link: down, it says so.
    let down = Command::new("ip")
        .args(["-n", ns, "link", "set", iface, "down"])
        .status()
        .unwrap();
    assert!(down.success());
    let info = in_ns(ns, &lib, &[], &["ibv_devinfo"])
        .output()
        .expect("ip netns exec");
    assert!(
        text(&info).contains("state:\t\t\tPORT_DOWN (1)\n"),
        "{}",
        text(&info)
    );

    // UROCE_IFACES selects interfaces: none of these exist, so no device.
    let none = in_ns(
        ns,
        &lib,
        &[("UROCE_IFACES", "nosuch0,nosuch1")],
        &["ibv_devinfo", "-l"],
    )
    .output()
    .expect("ip netns exec");
    assert!(text(&none).contains("0 HCAs found:"), "{}", text(&none));
    drop(pair);
    let _ = std::fs::remove_dir_all(&lib);
}

/// A C program against the distro header, linked with `-libverbs` and run on the built
/// library: the device verbs' answers, and the unsupported ones failing cleanly.
const DEVICE_PROGRAM: &str = r#"
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <infiniband/verbs.h>

#define CHECK(c) do { if (!(c)) { printf("FAIL line %d: %s (errno %d)\n", __LINE__, #c, errno); return 1; } } while (0)

int main(void) {
    int n = -1;
    struct ibv_device **list = ibv_get_device_list(&n);
    CHECK(list && n == 1 && list[1] == NULL);
    printf("name %s\n", ibv_get_device_name(list[0]));
    struct ibv_context *ctx = ibv_open_device(list[0]);
    ibv_free_device_list(list);
    CHECK(ctx);
    CHECK(ctx->device && ctx->num_comp_vectors == 1);
    /* cmd_fd is a descriptor the program may dup (rdma-core's test_shared_pd dups it
       for ibv_import_device), and importing is unsupported: EOPNOTSUPP, its skip. */
    CHECK(ctx->cmd_fd >= 0 && fcntl(ctx->cmd_fd, F_GETFD) != -1);
    int cmd_dup = dup(ctx->cmd_fd);
    CHECK(cmd_dup >= 0);
    errno = 0;
    CHECK(ibv_import_device(cmd_dup) == NULL && errno == EOPNOTSUPP);
    CHECK(close(cmd_dup) == 0);

    struct ibv_device_attr attr;
    CHECK(ibv_query_device(ctx, &attr) == 0);
    CHECK(attr.phys_port_cnt == 1 && attr.max_sge == 32);

    struct ibv_port_attr port;
    CHECK(ibv_query_port(ctx, 1, &port) == 0);
    CHECK(port.state == IBV_PORT_ACTIVE && port.link_layer == IBV_LINK_LAYER_ETHERNET);
    printf("active_mtu %d gid_tbl_len %d\n", port.active_mtu, port.gid_tbl_len);
    CHECK(ibv_query_port(ctx, 2, &port) == EINVAL);

    int found = -1;
    for (int i = 0; i < port.gid_tbl_len; i++) {
        struct ibv_gid_entry e;
        int rc = ibv_query_gid_ex(ctx, 1, i, &e, 0);
        if (rc == ENODATA) continue;
        CHECK(rc == 0 && e.gid_type == IBV_GID_TYPE_ROCE_V2 && e.gid_index == (uint32_t)i);
        union ibv_gid g;
        CHECK(ibv_query_gid(ctx, 1, i, &g) == 0 && memcmp(&g, &e.gid, 16) == 0);
        char s[INET6_ADDRSTRLEN];
        inet_ntop(AF_INET6, g.raw, s, sizeof s);
        printf("gid %d %s\n", i, s);
        if (strncmp(s, "::ffff:", 7) == 0) found = i;
    }
    CHECK(found >= 0);
    CHECK(ibv_query_gid(ctx, 1, port.gid_tbl_len, &(union ibv_gid){0}) == -1 && errno == EINVAL);

    __be16 pkey = 0;
    CHECK(ibv_query_pkey(ctx, 1, 0, &pkey) == 0 && pkey == 0xffff);
    CHECK(ibv_query_pkey(ctx, 1, 1, &pkey) == -1);

    /* Bad input: clean failures, never a crash. */
    struct ibv_pd *pd = ibv_alloc_pd(ctx);
    CHECK(pd);
    struct ibv_qp_init_attr qpa;
    memset(&qpa, 0, sizeof qpa);
    qpa.qp_type = IBV_QPT_RC;
    errno = 0;
    CHECK(ibv_create_qp(pd, &qpa) == NULL && errno == EINVAL); /* no CQs */
    struct ibv_comp_channel *ch = ibv_create_comp_channel(ctx);
    CHECK(ch && ch->fd >= 0 && ch->context == ctx);
    struct ibv_cq *cq = ibv_create_cq(ctx, 4, NULL, ch, 0);
    CHECK(cq && cq->channel == ch && cq->cqe >= 4);
    CHECK(ibv_destroy_comp_channel(ch) == EBUSY);
    /* ibv_resize_cq: smaller and larger, rounded as at creation; 0 and past max_cqe are
       EINVAL (fewer than the CQ holds is EINVAL too: uroce's unit test). */
    CHECK(ibv_resize_cq(cq, 1) == 0 && cq->cqe == 1);
    CHECK(ibv_resize_cq(cq, 20) == 0 && cq->cqe == 31);
    CHECK(ibv_resize_cq(cq, 0) == EINVAL && cq->cqe == 31);
    CHECK(ibv_resize_cq(cq, 0x7fffffff) == EINVAL && cq->cqe == 31);
    qpa.send_cq = qpa.recv_cq = cq;
    qpa.qp_type = IBV_QPT_RAW_PACKET;
    errno = 0;
    CHECK(ibv_create_qp(pd, &qpa) == NULL && errno == EOPNOTSUPP);
    CHECK(ibv_destroy_cq(cq) == 0);
    CHECK(ibv_destroy_comp_channel(ch) == 0);
    CHECK(ibv_dealloc_pd(pd) == 0);
    CHECK(ibv_fork_init() == 0);
    CHECK(strcmp(ibv_wc_status_str(IBV_WC_SUCCESS), "success") == 0);

    CHECK(ibv_close_device(ctx) == 0);
    CHECK(ibv_close_device(ctx) == -1 && errno == EINVAL);
    printf("ok\n");
    return 0;
}
"#;

#[test]
fn device_verbs_from_c() {
    if !ready() {
        return;
    }
    let lib = common::library_dir("devc");
    let Some(exe) = common::compile_c(&lib, "devices", DEVICE_PROGRAM, &["-libverbs"]) else {
        return;
    };
    let pair = VethPair::create("vdc", 1500).expect("veth pair");
    let (ns, iface) = (&pair.ns[0], &pair.ifaces[0]);
    let exe = exe.to_str().unwrap().to_string();
    let run = in_ns(ns, &lib, &[], &[&exe])
        .output()
        .expect("ip netns exec");
    let out = text(&run);
    assert!(run.status.success(), "{out}");
    assert!(out.contains(&format!("name uroce_{iface}\n")), "{out}");
    assert!(out.contains("active_mtu 3 gid_tbl_len 16\n"), "{out}");
    assert!(
        out.contains(&format!(" ::ffff:{}\n", pair.addrs[0])),
        "{out}"
    );
    assert!(out.ends_with("ok\n"), "{out}");
    drop(pair);
    let _ = std::fs::remove_dir_all(&lib);
}
