//! GID 0, the IPv6 link-local default GID (fe80:: with the MAC's EUI-64), between two
//! network namespaces through `uroce daemon`s on the UDP backend, as libfabric's dgram
//! and rdm endpoints use it: the distro's `ibv_ud_pingpong` and `ibv_rc_pingpong` with
//! `-g 0` at both ends, each under `uroce run --backend udp`, which starts a daemon per
//! namespace; the daemon binds the link-local address with its scope beside the IPv4
//! one and says so in its welcome, so the library sends from GID 0 as over AF_XDP.
//! Root, iproute2 and ibverbs-utils (scripts/setup.sh installs them); skips otherwise.
//! `cargo build` first: `uroce run` takes the libraries from next to the uroce binary.

mod common;

use std::process::Command;

use common::{across, can_run, daemon_check_then, text, uroce_run};
use uroce_tools::netns::VethPair;

/// `uroce run --iface IF --backend udp -- timeout 60 ARGS` on side `i`, the program
/// preceded by `uroce daemon --check` ([`daemon_check_then`]).
fn checked_run(pair: &VethPair, i: usize, args: &[&str]) -> Command {
    let mut c = uroce_run(&pair.ns[i], &pair.ifaces[i], &["--backend", "udp"]);
    c.args(["timeout", "60"])
        .args(daemon_check_then(&pair.ifaces[i]))
        .args(args);
    c
}

#[test]
fn gid_0_link_local_through_udp_daemons() {
    if !can_run(&["ibv_ud_pingpong", "ibv_rc_pingpong"]) {
        return;
    }
    let pair = VethPair::create("llu", 1500).unwrap();
    // The kernel drops packets to a tentative address: past duplicate address detection.
    assert!(
        pair.wait_link_local(),
        "no link-local address on the veth pair"
    );
    let cases: [&[&str]; 2] = [
        &[
            "ibv_ud_pingpong",
            "-g",
            "0",
            "-s",
            "1024",
            "-n",
            "100",
            "-c",
            "-p",
            "18791",
        ],
        &[
            "ibv_rc_pingpong",
            "-g",
            "0",
            "-n",
            "100",
            "-c",
            "-p",
            "18792",
        ],
    ];
    for args in cases {
        let (s, c) = across(&pair, |i, a| checked_run(&pair, i, a), args);
        let what = format!(
            "{}\n-- server:\n{}\n-- client:\n{}",
            args.join(" "),
            text(&s),
            text(&c)
        );
        assert!(s.status.success() && c.status.success(), "{what}");
        for o in [&s, &c] {
            let out = String::from_utf8_lossy(&o.stdout);
            assert!(out.contains("100 iters in"), "{what}");
            // Through the daemons, on UDP.
            assert!(
                out.contains("attached to uroce daemon for") && out.contains("(UDP"),
                "{what}"
            );
        }
    }
}
