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

use common::{across, can_run, text};
use uroce_tools::netns::VethPair;

/// `uroce run --iface IF --backend udp -- timeout 60 ARGS` in namespace `ns`.
fn uroce_run(ns: &str, iface: &str, args: &[&str]) -> Command {
    let mut c = Command::new("ip");
    c.args(["netns", "exec", ns, env!("CARGO_BIN_EXE_uroce"), "run"])
        .args(["--iface", iface, "--backend", "udp", "--", "timeout", "60"])
        .args(args);
    c
}

/// What `uroce daemon --check` says of the daemon serving side `i`'s interface.
fn daemon_check(pair: &VethPair, i: usize) -> String {
    let o = Command::new("ip")
        .args(["netns", "exec", &pair.ns[i], env!("CARGO_BIN_EXE_uroce")])
        .args(["daemon", "--check", "--iface", &pair.ifaces[i]])
        .output()
        .unwrap();
    text(&o)
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
        let (s, c) = across(
            &pair,
            |i, a| uroce_run(&pair.ns[i], &pair.ifaces[i], a),
            args,
        );
        let what = format!(
            "{}\n-- server:\n{}\n-- client:\n{}",
            args.join(" "),
            text(&s),
            text(&c)
        );
        assert!(s.status.success() && c.status.success(), "{what}");
        for o in [&s, &c] {
            assert!(
                String::from_utf8_lossy(&o.stdout).contains("100 iters in"),
                "{what}"
            );
        }
    }
    // Through the daemons, on UDP (each lingers a few seconds after its last process).
    for i in 0..2 {
        let how = daemon_check(&pair, i);
        assert!(how.contains("(UDP"), "{how}");
    }
}
