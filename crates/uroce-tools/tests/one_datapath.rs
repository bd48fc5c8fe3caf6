//! One uroce datapath per interface, said where a CLI prints it: `auto` takes the UDP
//! backend on veth and says why; with AF_XDP held on an interface (here by this test
//! process), a tool's `auto` backend is EADDRINUSE naming the holder, never the UDP
//! backend beside it (which would receive nothing while the
//! holder's XDP program takes every RoCE frame), and `uroce run` says before starting
//! the program that its first QP there will fail. Needs root and iproute2; skips
//! otherwise, and when AF_XDP cannot be set up here.

mod common;

use std::net::IpAddr;

use uroce::datapath::impair::Impairment;
use uroce::verbs::Mtu;
use uroce_tools::backend::{open, BackendChoice};
use uroce_tools::netns::{self, VethPair};

#[test]
fn a_held_interface_is_eaddrinuse_naming_the_holder() {
    if let Err(e) = netns::check_privileges() {
        eprintln!("SKIP: {e}");
        return;
    }
    let pair = VethPair::create("onedpt", 1500).expect("veth pair");
    let (ns, iface) = (pair.ns[0].clone(), pair.ifaces[0].clone());
    let local = IpAddr::V4(pair.addrs[0]);
    let me = std::process::id();
    // On a thread of its own: it enters the namespace.
    let t = std::thread::spawn(move || {
        netns::enter(&ns).expect("setns");
        let auto = || {
            open(
                BackendChoice::Auto,
                Some(&iface),
                "",
                local,
                Mtu::M1024,
                Impairment::default(),
            )
        };
        // On veth, `auto` takes the UDP backend, and says why.
        let (udp, what) = auto().expect("auto");
        assert!(what.starts_with("UDP backend (auto: a veth link"), "{what}");
        drop(udp);
        let first = open(
            BackendChoice::Xdp,
            Some(&iface),
            "",
            local,
            Mtu::M1024,
            Impairment::default(),
        );
        let first = match first {
            Ok((b, _)) => b,
            Err(e) => {
                eprintln!("SKIP: AF_XDP cannot be set up here: {e:#}");
                return;
            }
        };
        let second = auto().map(|(_, w)| w);
        let e = second.expect_err("a second AF_XDP datapath on the interface");
        let text = format!("{e:#}");
        assert!(
            text.contains("in use") && text.contains(&format!("held by this process (pid {me}")),
            "{text}"
        );
        let io = e
            .chain()
            .find_map(|c| c.downcast_ref::<std::io::Error>())
            .expect("an io::Error in the chain");
        assert_eq!(io.kind(), std::io::ErrorKind::AddrInUse, "{text}");

        // `uroce run` in the namespace names the holder before the program starts.
        let out = common::uroce_run(&ns, &iface, &[])
            .arg("true")
            .output()
            .expect("uroce run");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains(&format!("AF_XDP on {iface} is held by pid {me}"))
                && err.contains("EADDRINUSE"),
            "{err}"
        );
        drop(first);
        // Let go: the interface is free again, for a tool and for `uroce run`.
        let (_again, what) = auto().expect("the datapath once let go");
        assert!(what.starts_with("UDP backend"), "{what}");
    });
    t.join().unwrap();
    drop(pair);
}
