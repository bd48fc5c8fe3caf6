//! Network namespaces joined by a veth pair, made with iproute2 and removed when dropped
//! (also when the program unwinds). Threads enter a namespace with `setns`, so one process
//! can run both ends.

use std::io;
use std::net::Ipv4Addr;
use std::process::Command;

use anyhow::bail;

/// Why the demo or a test cannot make namespaces here, in words a user can act on.
pub fn check_privileges() -> anyhow::Result<()> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        bail!(
            "creating network namespaces and veth pairs needs root (CAP_SYS_ADMIN and \
                    CAP_NET_ADMIN); run as root, or use `uroce sim`, which runs the same RDMA \
                    between two endpoints over a simulated link without privileges"
        );
    }
    match Command::new("ip").arg("-V").output() {
        Ok(o) if o.status.success() => {}
        _ => {
            bail!(
                "`ip` (iproute2) is not installed: run scripts/setup.sh, or \
                        apt-get install iproute2"
            )
        }
    }
    if !std::path::Path::new("/proc/self/ns/net").exists() {
        bail!("this kernel has no network namespaces");
    }
    Ok(())
}

fn ip(args: &[&str]) -> io::Result<()> {
    let out = Command::new("ip").args(args).output()?;
    if out.status.success() {
        Ok(())
    } else {
        Err(io::Error::other(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )))
    }
}

/// Two namespaces, `ns[0]` and `ns[1]`, with veth ends `ifaces[i]` addressed `addrs[i]/24`.
#[derive(Debug)]
pub struct VethPair {
    /// Namespace names.
    pub ns: [String; 2],
    /// Interface names, one in each namespace.
    pub ifaces: [String; 2],
    /// IPv4 addresses.
    pub addrs: [Ipv4Addr; 2],
}

impl VethPair {
    /// Creates the pair (names carry `tag` and the process id so runs do not collide).
    pub fn create(tag: &str, mtu: u32) -> io::Result<Self> {
        static SEQ: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let k = SEQ.fetch_add(1, std::sync::atomic::Ordering::SeqCst) % 100;
        let pid = std::process::id();
        let ns = [
            format!("uroce-{tag}-{pid}-{k}a"),
            format!("uroce-{tag}-{pid}-{k}b"),
        ];
        let ifaces = [
            format!("ur{}x{k}a", pid % 100_000),
            format!("ur{}x{k}b", pid % 100_000),
        ];
        let third = ((pid + k * 37) % 200 + 20) as u8;
        let addrs = [
            Ipv4Addr::new(10, 213, third, 1),
            Ipv4Addr::new(10, 213, third, 2),
        ];
        let pair = Self { ns, ifaces, addrs };
        // From here on, Drop cleans up whatever was made.
        for n in &pair.ns {
            ip(&["netns", "add", n])?;
        }
        // Two queues each way, so two AF_XDP loops can each own one (a frame sent on
        // queue k of one end arrives on queue k of the other).
        ip(&[
            "link",
            "add",
            &pair.ifaces[0],
            "numtxqueues",
            "2",
            "numrxqueues",
            "2",
            "type",
            "veth",
            "peer",
            "name",
            &pair.ifaces[1],
            "numtxqueues",
            "2",
            "numrxqueues",
            "2",
        ])?;
        let mtu = mtu.to_string();
        for i in 0..2 {
            ip(&["link", "set", &pair.ifaces[i], "netns", &pair.ns[i]])?;
            let (n, dev) = (&pair.ns[i], &pair.ifaces[i]);
            ip(&[
                "-n",
                n,
                "addr",
                "add",
                &format!("{}/24", pair.addrs[i]),
                "dev",
                dev,
            ])?;
            ip(&["-n", n, "link", "set", dev, "mtu", &mtu])?;
            ip(&["-n", n, "link", "set", dev, "up"])?;
            ip(&["-n", n, "link", "set", "lo", "up"])?;
        }
        pair.wait_up();
        Ok(pair)
    }

    /// Waits (at most 5 s) until both ends are operationally up: a veth just set up reads
    /// as down for a moment, and a port queried then (`ibv_devinfo`, the link watch) or a
    /// first frame sent then would see a link that is not there yet.
    fn wait_up(&self) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        for i in 0..2 {
            let state = format!("/sys/class/net/{}/operstate", self.ifaces[i]);
            while std::time::Instant::now() < deadline {
                let up = Command::new("ip")
                    .args(["netns", "exec", &self.ns[i], "cat", &state])
                    .output()
                    .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "up");
                if up {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
        }
    }

    /// Waits (at most 5 s) until both ends have an IPv6 link-local address past duplicate
    /// address detection (a second or two after the link comes up): the kernel drops
    /// packets to a tentative address, so over the UDP backend GID 0 (the link-local
    /// default GID) receives nothing before. Returns whether both have one.
    pub fn wait_link_local(&self) -> bool {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        (0..2).all(|i| loop {
            let o = Command::new("ip")
                .args([
                    "-n",
                    &self.ns[i],
                    "-6",
                    "addr",
                    "show",
                    "dev",
                    &self.ifaces[i],
                ])
                .args(["scope", "link"])
                .output();
            let text = o.map(|o| String::from_utf8_lossy(&o.stdout).into_owned());
            let ready = text
                .as_deref()
                .is_ok_and(|t| t.contains("inet6 fe80") && !t.contains("tentative"));
            if ready {
                break true;
            }
            if std::time::Instant::now() >= deadline {
                break false;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        })
    }

    /// Runs `tc qdisc add dev IFACE root netem ARGS` on side `i` (loss, delay, reorder).
    pub fn netem(&self, i: usize, args: &[&str]) -> io::Result<()> {
        let mut cmd = vec![
            "netns",
            "exec",
            &self.ns[i],
            "tc",
            "qdisc",
            "add",
            "dev",
            &self.ifaces[i],
            "root",
            "netem",
        ];
        cmd.extend_from_slice(args);
        ip(&cmd)
    }
}

impl VethPair {
    /// The MAC address of side `i`'s interface.
    pub fn mac(&self, i: usize) -> io::Result<[u8; 6]> {
        let out = Command::new("ip")
            .args([
                "-n",
                &self.ns[i],
                "-j",
                "link",
                "show",
                "dev",
                &self.ifaces[i],
            ])
            .output()?;
        let v: serde_json::Value = serde_json::from_slice(&out.stdout)
            .map_err(|e| io::Error::other(format!("ip -j link: {e}")))?;
        let text = v[0]["address"].as_str().unwrap_or("");
        let mut mac = [0u8; 6];
        let parts: Vec<u8> = text
            .split(':')
            .filter_map(|h| u8::from_str_radix(h, 16).ok())
            .collect();
        if parts.len() != 6 {
            return Err(io::Error::other(format!(
                "no MAC address for {}",
                self.ifaces[i]
            )));
        }
        mac.copy_from_slice(&parts);
        Ok(mac)
    }
}

impl VethPair {
    /// Frames side `i`'s interface dropped, as `ip -s link` counts them (receive and
    /// transmit). On veth this counted the frames its XDP program could not hand to a full
    /// AF_XDP socket (seen equal to that socket's own count); which of veth's other drops
    /// it shows depends on the kernel.
    pub fn drops(&self, i: usize) -> io::Result<u64> {
        let out = Command::new("ip")
            .args(["-n", &self.ns[i], "-s", "-j", "link", "show", "dev"])
            .arg(&self.ifaces[i])
            .output()?;
        let v: serde_json::Value = serde_json::from_slice(&out.stdout)
            .map_err(|e| io::Error::other(format!("ip -s -j link: {e}")))?;
        let s = &v[0]["stats64"];
        match (s["rx"]["dropped"].as_u64(), s["tx"]["dropped"].as_u64()) {
            (Some(rx), Some(tx)) => Ok(rx + tx),
            _ => Err(io::Error::other(format!(
                "no drop counters for {}",
                self.ifaces[i]
            ))),
        }
    }
}

impl Drop for VethPair {
    fn drop(&mut self) {
        for n in &self.ns {
            let _ = ip(&["netns", "del", n]);
        }
    }
}

/// Moves the calling thread into namespace `ns` (sockets it opens afterwards live there).
pub fn enter(ns: &str) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let f = std::fs::File::open(format!("/run/netns/{ns}"))?;
    // SAFETY: `f` is an open namespace file; setns only changes this thread's namespace.
    let r = unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}
