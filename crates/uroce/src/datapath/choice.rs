//! Which datapath `auto` takes on an interface, and why.
//!
//! AF_XDP pays where the driver hands frames to the socket's memory itself: zero-copy,
//! or native XDP on a NIC. On veth and other virtual links there is neither: every frame
//! is copied into the socket's memory one at a time, while the UDP backend moves up to
//! 64 KiB per system call with GSO and GRO. Measured on veth (MTU 9000, 16 cores), one QP
//! of `uroce perf write` moved 18-22 Gb/s over UDP against 7-8 Gb/s over AF_XDP, and NCCL's
//! IB transport twice as much. So `auto` takes:
//! - AF_XDP when the driver offers AF_XDP zero-copy (`xsk-zerocopy`), or runs XDP natively
//!   on a device of its own (a NIC: no link kind, a device behind it in sysfs);
//! - the UDP backend on a virtual link (veth, bridge, macvlan, tun, loopback...) and on a
//!   NIC whose driver has no native XDP (generic XDP copies too);
//! - AF_XDP, as before, when the kernel says nothing (no `netdev` family before Linux 6.3)
//!   about a NIC.
//!
//! [`decide`] is the rule, with no I/O; [`choose`] asks the kernel the facts.

use std::fmt;

use crate::net::xdp_features::{BASIC, REDIRECT, XSK_ZEROCOPY};

/// A datapath `auto` can take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Datapath {
    /// AF_XDP with uroce's XDP program.
    Xdp,
    /// The UDP socket backend (GSO/GRO).
    Udp,
}

/// What the kernel says about an interface, for [`decide`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Facts {
    /// The `netdev` family's `xdp-features` bits; `None` when the kernel does not say.
    pub xdp_features: Option<u64>,
    /// The link's kind ("veth", "bridge", ...) for a virtual link; "virtual" for one with
    /// no kind and no device behind it (loopback); `None` for a NIC or when unknown.
    pub virtual_kind: Option<String>,
    /// The NIC's driver ("mlx5_core", "ice"), when sysfs names one.
    pub driver: Option<String>,
}

/// The datapath `auto` takes on an interface and why, in words for `uroce devices`,
/// `uroce run` and the daemon's log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Choice {
    /// The datapath.
    pub datapath: Datapath,
    /// Why ("veth link: AF_XDP would copy every frame ...").
    pub reason: String,
}

impl fmt::Display for Choice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let d = match self.datapath {
            Datapath::Xdp => "AF_XDP",
            Datapath::Udp => "UDP backend",
        };
        write!(f, "{d} ({})", self.reason)
    }
}

/// The rule (see the module's documentation).
pub fn decide(facts: &Facts) -> Choice {
    let zero_copy = facts.xdp_features.is_some_and(|f| f & XSK_ZEROCOPY != 0);
    let native = facts
        .xdp_features
        .is_some_and(|f| f & (BASIC | REDIRECT) == BASIC | REDIRECT);
    let driver = facts
        .driver
        .as_deref()
        .map_or(String::new(), |d| format!(" ({d})"));
    let (datapath, reason) = if zero_copy {
        (
            Datapath::Xdp,
            format!("the driver{driver} offers AF_XDP zero-copy"),
        )
    } else if let Some(kind) = &facts.virtual_kind {
        (
            Datapath::Udp,
            format!(
                "a {kind} link: AF_XDP would copy every frame there, the UDP backend moves \
                 up to 64 KiB per system call with GSO/GRO"
            ),
        )
    } else if native {
        (
            Datapath::Xdp,
            format!("native XDP in the NIC's driver{driver}"),
        )
    } else if facts.xdp_features.is_some() {
        (
            Datapath::Udp,
            format!(
                "the NIC's driver{driver} has no native XDP: AF_XDP would run in generic \
                 mode, copying every frame"
            ),
        )
    } else {
        (
            Datapath::Xdp,
            "a NIC whose XDP features the kernel does not report (before Linux 6.3): \
             AF_XDP tried first"
                .to_string(),
        )
    };
    Choice { datapath, reason }
}

/// The facts about interface `iface` in the calling thread's network namespace: its
/// XDP features (netdev generic netlink), its link kind (rtnetlink), and its driver
/// (sysfs). What cannot be read is left unknown.
pub fn facts(iface: &str) -> Facts {
    let index = crate::net::addresses::ifindex(iface).ok();
    let xdp_features = index.and_then(|i| crate::net::xdp_features::xdp_features(i).ok());
    let kind = index.and_then(|i| crate::net::addresses::link_kind(i).ok().flatten());
    let sys = std::path::Path::new("/sys/class/net").join(iface);
    let driver = std::fs::read_link(sys.join("device/driver"))
        .ok()
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()));
    // No kind and no device behind it (loopback): virtual too. Sysfs shows the namespace
    // it was mounted in, so an interface it does not list at all is left unknown.
    let virtual_kind = kind
        .or_else(|| (sys.exists() && !sys.join("device").exists()).then(|| "virtual".to_string()));
    Facts {
        xdp_features,
        virtual_kind,
        driver,
    }
}

/// The datapath `auto` takes on `iface`, and why.
pub fn choose(iface: &str) -> Choice {
    decide(&facts(iface))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(f: Option<u64>, kind: Option<&str>, driver: Option<&str>) -> Facts {
        Facts {
            xdp_features: f,
            virtual_kind: kind.map(str::to_string),
            driver: driver.map(str::to_string),
        }
    }

    #[test]
    fn veth_takes_udp_and_zero_copy_takes_xdp() {
        // veth: native XDP and redirect, no zero-copy.
        let c = decide(&facts(Some(BASIC | REDIRECT | 32), Some("veth"), None));
        assert_eq!(c.datapath, Datapath::Udp);
        assert!(c.reason.contains("veth"), "{c}");
        let c = decide(&facts(Some(0x7f), None, Some("mlx5_core")));
        assert_eq!(c.datapath, Datapath::Xdp);
        assert_eq!(
            c.to_string(),
            "AF_XDP (the driver (mlx5_core) offers AF_XDP zero-copy)"
        );
    }

    #[test]
    fn a_nic_takes_xdp_only_with_native_xdp() {
        let native = decide(&facts(Some(BASIC | REDIRECT), None, Some("virtio_net")));
        assert_eq!(native.datapath, Datapath::Xdp);
        let generic = decide(&facts(Some(0), None, Some("r8169")));
        assert_eq!(generic.datapath, Datapath::Udp);
        assert!(generic.reason.contains("generic"), "{generic}");
        // An old kernel says nothing: a NIC is tried with AF_XDP as it always was, a
        // virtual link still takes UDP.
        assert_eq!(decide(&facts(None, None, None)).datapath, Datapath::Xdp);
        assert_eq!(
            decide(&facts(None, Some("virtual"), None)).datapath,
            Datapath::Udp
        );
    }

    #[test]
    fn loopback_is_virtual() {
        let c = choose("lo");
        assert_eq!(c.datapath, Datapath::Udp, "{c}");
    }
}
