//! Who holds what a datapath needs, so that a refusal can name it: the process whose BPF
//! link attaches an XDP program to an interface (AF_XDP), or whose socket has a UDP port
//! (the UDP backend's 4791). Read from `/proc` as `ss -p` and `bpftool link` find them:
//! each process's `fdinfo` (a BPF link says `link_type: xdp` and its `ifindex`) and
//! `/proc/net/udp{,6}` (a socket's inode, matched against the `socket:[inode]` links in
//! `/proc/<pid>/fd`). Only processes in the calling thread's network namespace count (an
//! ifindex is per namespace), and only those whose `/proc` entries the caller may read (root
//! sees all). No `unsafe`.

#![forbid(unsafe_code)]

use std::fmt;
use std::fs;
use std::net::IpAddr;
use std::path::Path;

/// A process that holds a resource.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holder {
    /// Its process id.
    pub pid: u32,
    /// Its command name (`/proc/<pid>/comm`).
    pub program: String,
}

impl fmt::Display for Holder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.pid == std::process::id() {
            write!(f, "this process (pid {}, {})", self.pid, self.program)
        } else {
            write!(f, "pid {} ({})", self.pid, self.program)
        }
    }
}

/// The process ids in `/proc`, in its order.
fn pids() -> Vec<u32> {
    let Ok(dir) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect()
}

/// Whether process `pid` (one of its threads: a thread may have entered a namespace
/// of its own) is in the calling thread's network namespace.
fn same_netns(pid: u32) -> bool {
    let Ok(mine) = fs::read_link("/proc/thread-self/ns/net") else {
        return false;
    };
    let is_mine = |p: &Path| fs::read_link(p.join("ns/net")).is_ok_and(|n| n == mine);
    let base = Path::new("/proc").join(pid.to_string());
    is_mine(&base)
        || fs::read_dir(base.join("task"))
            .is_ok_and(|d| d.filter_map(Result::ok).any(|t| is_mine(&t.path())))
}

fn holder(pid: u32) -> Holder {
    let program = fs::read_to_string(format!("/proc/{pid}/comm"))
        .map(|s| s.trim_end().to_string())
        .unwrap_or_else(|_| "?".into());
    Holder { pid, program }
}

/// Whether an `fdinfo` text is a BPF link attaching XDP to interface `ifindex`.
pub fn is_xdp_link_on(fdinfo: &str, ifindex: u32) -> bool {
    let field = |name: &str| {
        fdinfo
            .lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
            .map(str::trim)
    };
    field("link_type") == Some("xdp") && field("ifindex") == Some(ifindex.to_string().as_str())
}

/// The process holding an XDP link on interface `ifindex` of the caller's namespace, if
/// one can be seen (an XDP program attached over netlink, `ip link set xdp`, has no
/// holder; nor has one whose process has just exited and whose link is being released).
pub fn xdp_holder(ifindex: u32) -> Option<Holder> {
    pids().into_iter().find_map(|pid| {
        let dir = fs::read_dir(format!("/proc/{pid}/fdinfo")).ok()?;
        let found = dir
            .filter_map(Result::ok)
            .any(|e| fs::read_to_string(e.path()).is_ok_and(|t| is_xdp_link_on(&t, ifindex)));
        (found && same_netns(pid)).then(|| holder(pid))
    })
}

/// The inodes of the sockets bound to UDP `port` on `local` or on the wildcard of its
/// family, from a `/proc/net/udp` or `udp6` table's text.
pub fn udp_inodes(table: &str, local: IpAddr, port: u16) -> Vec<u64> {
    let want = hex_addr(local);
    let any = "0".repeat(want.len());
    table
        .lines()
        .skip(1)
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let (addr, p) = f.nth(1)?.split_once(':')?;
            let inode = f.nth(7)?.parse().ok()?;
            let matches = u16::from_str_radix(p, 16).ok()? == port
                && (addr.eq_ignore_ascii_case(&want) || addr == any);
            matches.then_some(inode)
        })
        .collect()
}

/// An address as `/proc/net/udp{,6}` writes it: the bytes in memory order, each 32-bit
/// word printed as a host-order (little-endian here) hexadecimal number.
fn hex_addr(a: IpAddr) -> String {
    let bytes = match a {
        IpAddr::V4(v) => v.octets().to_vec(),
        IpAddr::V6(v) => v.octets().to_vec(),
    };
    bytes
        .chunks(4)
        .map(|w| format!("{:08X}", u32::from_ne_bytes([w[0], w[1], w[2], w[3]])))
        .collect()
}

/// `open` again, 200 ms apart for up to a second, while it fails because interface
/// `ifindex` is held ([`super::xdp::is_held`]) and no process can be seen holding it: a
/// program that just exited may still be letting go of its XDP program and socket. With a
/// holder to be seen, the first answer is the answer (`auto` then refuses with EADDRINUSE
/// rather than split the host).
pub fn retry_while_letting_go<T>(
    ifindex: u32,
    open: impl Fn() -> std::io::Result<T>,
) -> std::io::Result<T> {
    let mut r = open();
    for _ in 0..5 {
        match &r {
            Err(e) if super::xdp::is_held(e) && xdp_holder(ifindex).is_none() => {
                std::thread::sleep(std::time::Duration::from_millis(200));
                r = open();
            }
            _ => break,
        }
    }
    r
}

/// The inodes of the sockets bound to UDP `port` on `local` (or the wildcard) in the
/// caller's namespace (none when the table cannot be read).
fn bound_inodes(local: IpAddr, port: u16) -> Vec<u64> {
    let table = if local.is_ipv4() { "udp" } else { "udp6" };
    fs::read_to_string(Path::new("/proc/thread-self/net").join(table))
        .map(|text| udp_inodes(&text, local, port))
        .unwrap_or_default()
}

/// Whether a socket (of any process, or the kernel's) is bound to UDP `port` on `local`
/// (or the wildcard) in the caller's namespace. A SO_REUSEPORT group of the same user
/// takes more members without an error, so a group that must be a process's own asks
/// this before it binds (`udp::bind_classes`, `UdpBackend::bind_steered`).
pub fn udp_bound(local: IpAddr, port: u16) -> bool {
    !bound_inodes(local, port).is_empty()
}

/// The process holding UDP `port` on `local` (or the wildcard) in the caller's
/// namespace, if one can be seen.
pub fn udp_holder(local: IpAddr, port: u16) -> Option<Holder> {
    let inodes = bound_inodes(local, port);
    if inodes.is_empty() {
        return None;
    }
    let links: Vec<String> = inodes.iter().map(|i| format!("socket:[{i}]")).collect();
    pids().into_iter().find_map(|pid| {
        let dir = fs::read_dir(format!("/proc/{pid}/fd")).ok()?;
        let found = dir.filter_map(Result::ok).any(|e| {
            fs::read_link(e.path()).is_ok_and(|l| links.iter().any(|s| l.as_os_str() == s.as_str()))
        });
        found.then(|| holder(pid))
    })
}

/// " (held by <holder>)", or nothing when no holder can be seen: for error messages.
pub fn held_by(h: Option<Holder>) -> String {
    h.map_or_else(String::new, |h| format!(" (held by {h})"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, Ipv6Addr, UdpSocket};

    #[test]
    fn an_xdp_links_fdinfo_names_its_interface() {
        let link = "pos:\t0\nflags:\t02000002\nlink_type:\txdp\nlink_id:\t7\nprog_tag:\tb4a8\nprog_id:\t9\nifindex:\t3\n";
        assert!(is_xdp_link_on(link, 3));
        assert!(!is_xdp_link_on(link, 33));
        let tc = link.replace("link_type:\txdp", "link_type:\ttcx");
        assert!(!is_xdp_link_on(&tc, 3));
        assert!(!is_xdp_link_on("map_type:\t17\nifindex:\t3\n", 3));
    }

    #[test]
    fn the_udp_table_gives_the_sockets_on_a_port() {
        // 10.1.2.3:4791 (0x12B7) and the wildcard on 4791, another port, as a little-endian
        // host writes them.
        let t = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode ref pointer drops\n\
                 1: 0302010A:12B7 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 111 2 0 0\n\
                 2: 00000000:12B7 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 222 2 0 0\n\
                 3: 0302010A:0035 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 333 2 0 0\n";
        if cfg!(target_endian = "little") {
            let a = IpAddr::V4(Ipv4Addr::new(10, 1, 2, 3));
            assert_eq!(udp_inodes(t, a, 4791), vec![111, 222]);
            assert_eq!(udp_inodes(t, a, 53), vec![333]);
            assert!(udp_inodes(t, IpAddr::V4(Ipv4Addr::new(10, 1, 2, 4)), 53).is_empty());
        }
    }

    #[test]
    fn a_bound_socket_is_found_with_its_process() {
        let s = UdpSocket::bind((Ipv6Addr::LOCALHOST, 0))
            .or_else(|_| UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)))
            .expect("bind");
        let a = s.local_addr().unwrap();
        let h = udp_holder(a.ip(), a.port()).expect("our own socket is seen");
        assert_eq!(h.pid, std::process::id());
        assert!(h.to_string().starts_with("this process"));
        drop(s);
        assert_eq!(udp_holder(a.ip(), a.port()), None);
    }
}
