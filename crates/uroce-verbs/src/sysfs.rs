//! The files through which programs find RDMA devices without libibverbs' calls, as the
//! kernel lays them out for a device (its `ib_core` and `ib_uverbs` modules): what
//! `uroce run` shows its program (crates/uroce-tools/src/rdma_files.rs mounts them).
//!
//! - `/sys/class/infiniband/<device>/`: `node_type` (`1: CA`), `node_guid` and
//!   `sys_image_guid` (four groups of four hex digits), `node_desc`, `fw_ver`, `device`
//!   (a link to the network device's parent device, whose `net/<interface>` is the
//!   interface's directory; for a virtual interface such as a veth, which has none, a
//!   directory holding `net/<interface>`, the interface's sysfs directory shown there:
//!   rdma-core's tests and UCX look for the interface in `device/net/`, some programs
//!   only for directories), and `ports/1/`: `state` (`4: ACTIVE`), `phys_state` (`5: LinkUp`),
//!   `rate` (`2.5 Gb/sec (1X SDR)`), `link_layer` (`Ethernet`), `lid`, `sm_lid`,
//!   `lid_mask_count`, `sm_sl`, `cap_mask`, `pkeys/0`, `gids/<i>` for every entry of the
//!   table (an unused one all zeros, as the kernel shows it) and, for the used entries,
//!   `gid_attrs/types/<i>` (`RoCE v2`) and `gid_attrs/ndevs/<i>` (the interface). The
//!   kernel answers EINVAL to a read of an unused entry's type or netdev; these files
//!   are absent instead (ENOENT).
//! - `/sys/class/infiniband_verbs/`: `abi_version` (6, the uverbs ABI of every kernel
//!   since 2.6.x) and `uverbsN/` with `ibdev` (the device's name), `abi_version` and
//!   `dev` (the char device's `major:minor`, 231:192+N as ib_uverbs numbers them).
//! - `/dev/infiniband/uverbsN` and `/dev/infiniband/rdma_cm`: character devices that
//!   open read-write (UCX keeps a device only if `/dev/infiniband/<dev_name>` is one);
//!   uroce's libraries never open them, so [`Node::CharDev`] asks for a harmless one
//!   (`uroce run` binds `/dev/null` there). rdma-core's librdmacm opens `rdma_cm` and
//!   reads answers to its commands that a stand-in never writes, so `rdma_cm` is only
//!   there when the program gets uroce's librdmacm; rdma-core's libibverbs finds no
//!   provider for these devices and never opens `uverbsN`.
//!
//! Every value comes from the code behind the verbs: [`Device::port_attr_now`]
//! (`ibv_query_port`), [`device::gids`] (`ibv_query_gid`), [`Device::attr`]
//! (`ibv_query_device`); a change there changes the files. The files are a snapshot taken
//! when they are built: sysfs follows the interface live, these do not.

#![deny(unsafe_code)]

use std::ffi::c_int;
use std::net::Ipv6Addr;
use std::path::{Path, PathBuf};

use uroce::net::addresses::InterfaceInfo;

use crate::abi;
use crate::device::{self, Device, GID_TABLE_LEN};

/// One file, directory or link of the tree.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Node {
    /// A directory.
    Dir,
    /// A file with these contents (a sysfs attribute ends with a newline).
    File(String),
    /// A symbolic link to this target.
    Link(PathBuf),
    /// A character device that opens read-write and does nothing harmful.
    CharDev,
    /// A directory that shows this existing directory (a bind mount).
    BindDir(PathBuf),
}

/// A node at `path`, relative to the root (`sys/class/infiniband/...`, `dev/...`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// Where, relative to `/`.
    pub path: PathBuf,
    /// What.
    pub node: Node,
}

/// The directories the tree replaces, relative to `/`, with the directory each one sits
/// in: `uroce run` shows its own in their place.
pub const REPLACED: [(&str, &str); 3] = [
    ("sys/class", "infiniband"),
    ("sys/class", "infiniband_verbs"),
    ("dev", "infiniband"),
];

/// The uverbs ABI version the kernel's ib_uverbs reports in
/// `/sys/class/infiniband_verbs/abi_version` (`IB_USER_VERBS_ABI_VERSION`).
pub const UVERBS_ABI_VERSION: u32 = 6;

/// The major number of the kernel's ib_uverbs character devices, and the minor of
/// `uverbs0` (`IB_UVERBS_BASE_DEV`, the minor of the first `uverbs` device).
const UVERBS_MAJOR: u32 = 231;
const UVERBS_BASE_MINOR: u32 = 192;

struct Tree(Vec<Entry>);

impl Tree {
    fn dir(&mut self, p: impl AsRef<Path>) {
        self.0.push(Entry {
            path: p.as_ref().to_path_buf(),
            node: Node::Dir,
        });
    }
    fn file(&mut self, p: impl AsRef<Path>, contents: impl std::fmt::Display) {
        self.0.push(Entry {
            path: p.as_ref().to_path_buf(),
            node: Node::File(format!("{contents}\n")),
        });
    }
    fn link(&mut self, p: impl AsRef<Path>, target: impl AsRef<Path>) {
        self.0.push(Entry {
            path: p.as_ref().to_path_buf(),
            node: Node::Link(target.as_ref().to_path_buf()),
        });
    }
}

/// The tree for the devices that `UROCE_IFACES`-style selection `selected` lists in the
/// calling thread's network namespace now: what a program under `uroce run --iface
/// selected` lists with `ibv_get_device_list`; with `/dev/infiniband/rdma_cm` if
/// `rdma_cm` (the program gets uroce's librdmacm). Devices whose interface vanished
/// while listing are left out. Errors: the errno of the listing.
pub fn tree(selected: Option<&str>, rdma_cm: bool) -> Result<Vec<Entry>, c_int> {
    let mut t = Tree(Vec::new());
    let class = Path::new("sys/class");
    t.dir(class.join("infiniband"));
    t.dir(class.join("infiniband_verbs"));
    t.file(
        class.join("infiniband_verbs/abi_version"),
        UVERBS_ABI_VERSION,
    );
    t.dir("dev/infiniband");
    if rdma_cm {
        t.0.push(Entry {
            path: "dev/infiniband/rdma_cm".into(),
            node: Node::CharDev,
        });
    }
    for dev in device::list_selected(selected)? {
        let Ok((info, port)) = dev.port_attr_now() else {
            continue;
        };
        let parent = net_parent(&info.name);
        device_tree(&mut t, dev, &info, &port, parent.as_deref());
    }
    Ok(t.0)
}

/// The parent device of network interface `iface` in this view of sysfs (what
/// `/sys/class/net/<iface>/device` links to), if it has one.
fn net_parent(iface: &str) -> Option<PathBuf> {
    std::fs::canonicalize(Path::new("/sys/class/net").join(iface).join("device")).ok()
}

/// A GUID as the kernel prints `node_guid`: four groups of four hex digits. `guid` is
/// in network order as `__be64` holds it.
fn guid_text(guid: u64) -> String {
    let b = guid.to_ne_bytes();
    let g = |i: usize| u16::from_be_bytes([b[i], b[i + 1]]);
    format!("{:04x}:{:04x}:{:04x}:{:04x}", g(0), g(2), g(4), g(6))
}

/// A GID as the kernel prints `gids/<i>`: eight groups of four hex digits.
fn gid_text(raw: [u8; 16]) -> String {
    let s = Ipv6Addr::from(raw).segments();
    s.map(|x| format!("{x:04x}")).join(":")
}

/// `ports/N/state` as the kernel writes it: the number and the IBTA name.
fn state_text(state: c_int) -> String {
    let name = match state {
        1 => "DOWN",
        2 => "INIT",
        3 => "ARMED",
        4 => "ACTIVE",
        5 => "ACTIVE_DEFER",
        _ => "NOP",
    };
    format!("{state}: {name}")
}

/// `ports/N/phys_state`: the number and the IBTA name (PortPhysicalState, §14.2.5.6).
fn phys_state_text(phys: u8) -> String {
    let name = match phys {
        1 => "Sleep",
        2 => "Polling",
        3 => "Disabled",
        4 => "PortConfigurationTraining",
        5 => "LinkUp",
        6 => "LinkErrorRecovery",
        7 => "Phy Test",
        _ => "<unknown>",
    };
    format!("{phys}: {name}")
}

/// `ports/N/rate` from the port's `active_speed` and `active_width` (`ibv_port_attr`'s
/// encodings, IBTA PortInfo): the lanes times a lane's rate in Gb/s, then the width and
/// speed names, as the kernel writes it (`2.5 Gb/sec (1X SDR)`, `100 Gb/sec (4X EDR)`).
/// An unknown speed counts as SDR, an unknown width as 1X.
pub fn rate_text(active_speed: u8, active_width: u8) -> String {
    // Tenths of a Gb/s per lane.
    let (tenths, name) = match active_speed {
        2 => (50, "DDR"),
        4 => (100, "QDR"),
        8 => (100, "FDR10"),
        16 => (140, "FDR"),
        32 => (250, "EDR"),
        64 => (500, "HDR"),
        128 => (1000, "NDR"),
        _ => (25, "SDR"),
    };
    let lanes = match active_width {
        2 => 4,
        4 => 8,
        8 => 12,
        16 => 2,
        _ => 1,
    };
    let t = tenths * lanes;
    let half = if t % 10 != 0 { ".5" } else { "" };
    format!("{}{half} Gb/sec ({lanes}X {name})", t / 10)
}

/// What `gid_attrs/types/<i>` says for a GID type as `ibv_query_gid_type` reports it.
fn gid_type_text(t: c_int) -> &'static str {
    if t == abi::IBV_GID_TYPE_SYSFS_ROCE_V2 {
        "RoCE v2"
    } else {
        "IB/RoCE v1"
    }
}

/// One device's part of the tree: its `infiniband/<name>` and `infiniband_verbs/uverbsN`
/// directories and its `/dev/infiniband/uverbsN`. `parent` is the interface's parent
/// device (None for a virtual interface).
fn device_tree(
    t: &mut Tree,
    dev: &Device,
    info: &InterfaceInfo,
    port: &abi::ibv_port_attr,
    parent: Option<&Path>,
) {
    let attr = dev.attr();
    let name = dev.name();
    let root = Path::new("sys/class/infiniband").join(&name);
    t.dir(&root);
    t.file(root.join("node_type"), "1: CA");
    t.file(root.join("node_guid"), guid_text(attr.node_guid));
    t.file(root.join("sys_image_guid"), guid_text(attr.sys_image_guid));
    t.file(root.join("node_desc"), format!("uroce {}", info.name));
    let fw: Vec<u8> = attr
        .fw_ver
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    t.file(root.join("fw_ver"), String::from_utf8_lossy(&fw));
    match parent {
        Some(p) => t.link(root.join("device"), p),
        None => {
            t.dir(root.join("device"));
            t.dir(root.join("device/net"));
            t.0.push(Entry {
                path: root.join("device/net").join(&info.name),
                node: Node::BindDir(Path::new("/sys/class/net").join(&info.name)),
            });
        }
    }
    t.dir(root.join("ports"));
    let p = root.join("ports/1");
    t.dir(&p);
    t.file(p.join("state"), state_text(port.state));
    t.file(p.join("phys_state"), phys_state_text(port.phys_state));
    t.file(
        p.join("rate"),
        rate_text(port.active_speed, port.active_width),
    );
    let layer = if port.link_layer == abi::IBV_LINK_LAYER_ETHERNET {
        "Ethernet"
    } else {
        "InfiniBand"
    };
    t.file(p.join("link_layer"), layer);
    t.file(p.join("lid"), format!("0x{:x}", port.lid));
    t.file(p.join("sm_lid"), format!("0x{:x}", port.sm_lid));
    t.file(p.join("lid_mask_count"), port.lmc);
    t.file(p.join("sm_sl"), port.sm_sl);
    t.file(p.join("cap_mask"), format!("0x{:08x}", port.port_cap_flags));
    t.dir(p.join("pkeys"));
    t.file(p.join("pkeys/0"), "0xffff");
    t.dir(p.join("gids"));
    t.dir(p.join("gid_attrs"));
    t.dir(p.join("gid_attrs/types"));
    t.dir(p.join("gid_attrs/ndevs"));
    let table = device::gids(info);
    let len = usize::try_from(port.gid_tbl_len).unwrap_or(GID_TABLE_LEN);
    for i in 0..len {
        let raw = table.get(i).map_or([0; 16], |g| g.raw);
        t.file(p.join("gids").join(i.to_string()), gid_text(raw));
        if i < table.len() {
            t.file(
                p.join("gid_attrs/types").join(i.to_string()),
                gid_type_text(abi::IBV_GID_TYPE_SYSFS_ROCE_V2),
            );
            t.file(p.join("gid_attrs/ndevs").join(i.to_string()), &info.name);
        }
    }
    let n = dev.uverbs();
    let uv = Path::new("sys/class/infiniband_verbs").join(format!("uverbs{n}"));
    t.dir(&uv);
    t.file(uv.join("ibdev"), &name);
    t.file(uv.join("abi_version"), 1);
    t.file(
        uv.join("dev"),
        format!("{UVERBS_MAJOR}:{}", UVERBS_BASE_MINOR + n),
    );
    t.0.push(Entry {
        path: Path::new("dev/infiniband").join(format!("uverbs{n}")),
        node: Node::CharDev,
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use uroce::net::addresses::OperState;

    #[test]
    fn rates_as_the_kernel_writes_them() {
        assert_eq!(rate_text(1, 1), "2.5 Gb/sec (1X SDR)");
        assert_eq!(rate_text(32, 2), "100 Gb/sec (4X EDR)");
        assert_eq!(rate_text(16, 2), "56 Gb/sec (4X FDR)");
        assert_eq!(rate_text(1, 2), "10 Gb/sec (4X SDR)");
        assert_eq!(rate_text(64, 16), "100 Gb/sec (2X HDR)");
        assert_eq!(rate_text(0, 0), "2.5 Gb/sec (1X SDR)");
    }

    #[test]
    fn guids_gids_and_states_as_the_kernel_prints_them() {
        let guid = u64::from_ne_bytes([0x02, 0x11, 0x22, 0xff, 0xfe, 0x33, 0x44, 0x55]);
        assert_eq!(guid_text(guid), "0211:22ff:fe33:4455");
        let v4 = "::ffff:10.0.0.1".parse::<Ipv6Addr>().unwrap().octets();
        assert_eq!(gid_text(v4), "0000:0000:0000:0000:0000:ffff:0a00:0001");
        assert_eq!(state_text(abi::IBV_PORT_ACTIVE), "4: ACTIVE");
        assert_eq!(state_text(abi::IBV_PORT_DOWN), "1: DOWN");
        assert_eq!(phys_state_text(5), "5: LinkUp");
        assert_eq!(phys_state_text(3), "3: Disabled");
    }

    fn info() -> InterfaceInfo {
        crate::device::tests::info(&["10.0.0.1".parse().unwrap()])
    }

    fn file<'a>(t: &'a [Entry], p: &str) -> Option<&'a str> {
        t.iter()
            .find(|e| e.path == Path::new(p))
            .and_then(|e| match &e.node {
                Node::File(s) => Some(s.as_str()),
                _ => None,
            })
    }

    #[test]
    fn a_device_s_files_follow_its_port_and_gid_table() {
        let dev = Device::for_test("veth0", [2, 0, 0, 0, 0, 1], 3);
        let i = info();
        let port = crate::device::port_attr_for_test(&i);
        let mut t = Tree(Vec::new());
        device_tree(&mut t, &dev, &i, &port, None);
        let t = t.0;
        let d = "sys/class/infiniband/uroce_veth0";
        assert_eq!(file(&t, &format!("{d}/node_type")), Some("1: CA\n"));
        assert_eq!(
            file(&t, &format!("{d}/node_guid")),
            Some("0000:00ff:fe00:0001\n")
        );
        assert_eq!(file(&t, &format!("{d}/ports/1/state")), Some("4: ACTIVE\n"));
        assert_eq!(
            file(&t, &format!("{d}/ports/1/link_layer")),
            Some("Ethernet\n")
        );
        // The default GID, then the IPv4 one; the rest of the table zeros, untyped.
        assert_eq!(
            file(&t, &format!("{d}/ports/1/gids/0")),
            Some("fe80:0000:0000:0000:0000:00ff:fe00:0001\n")
        );
        assert_eq!(
            file(&t, &format!("{d}/ports/1/gids/1")),
            Some("0000:0000:0000:0000:0000:ffff:0a00:0001\n")
        );
        assert_eq!(
            file(&t, &format!("{d}/ports/1/gid_attrs/types/1")),
            Some("RoCE v2\n")
        );
        assert_eq!(
            file(&t, &format!("{d}/ports/1/gid_attrs/ndevs/1")),
            Some("veth0\n")
        );
        assert_eq!(
            file(&t, &format!("{d}/ports/1/gids/15")),
            Some("0000:0000:0000:0000:0000:0000:0000:0000\n")
        );
        assert_eq!(file(&t, &format!("{d}/ports/1/gid_attrs/types/2")), None);
        assert!(t
            .iter()
            .any(|e| e.path == Path::new(&format!("{d}/device/net/veth0"))
                && e.node == Node::BindDir("/sys/class/net/veth0".into())));
        assert_eq!(
            file(&t, "sys/class/infiniband_verbs/uverbs3/ibdev"),
            Some("uroce_veth0\n")
        );
        assert_eq!(
            file(&t, "sys/class/infiniband_verbs/uverbs3/dev"),
            Some("231:195\n")
        );
        assert!(t
            .iter()
            .any(|e| e.path == Path::new("dev/infiniband/uverbs3") && e.node == Node::CharDev));
        // A port that is down says so.
        let mut down = i.clone();
        down.oper_state = OperState::LowerLayerDown;
        let port = crate::device::port_attr_for_test(&down);
        let mut t = Tree(Vec::new());
        device_tree(
            &mut t,
            &dev,
            &down,
            &port,
            Some(Path::new("/sys/devices/x")),
        );
        assert_eq!(file(&t.0, &format!("{d}/ports/1/state")), Some("1: DOWN\n"));
        assert!(t
            .0
            .iter()
            .any(|e| e.path == Path::new(&format!("{d}/device"))
                && e.node == Node::Link("/sys/devices/x".into())));
    }
}
