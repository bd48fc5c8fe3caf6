//! `uroce run [--iface IF] [--backend B] -- PROGRAM ARGS...`: starts an unmodified ibverbs
//! or RDMA CM program on uroce's `libibverbs.so.1` (crates/uroce-verbs) and
//! `librdmacm.so.1` (crates/uroce-rdmacm).
//!
//! It sets what a user could set by hand and then becomes the program (exec, so signals
//! and the exit status are the program's own):
//! - `LD_LIBRARY_PATH`: the directory holding uroce's `libibverbs.so.1` (and its
//!   `librdmacm.so.1`), in front of what was there: `$UROCE_LIBDIR` if set, else the
//!   directory of this `uroce` binary (`cargo build` puts the libraries and their `.so.1`
//!   links next to it), else its `deps/` (where `cargo test` leaves them; a `uroce-run/`
//!   directory beside the binary then holds the `.so.1` links);
//! - `UROCE_IFACES`: the interfaces that become devices (`--iface`, comma-separated);
//! - `UROCE_BACKEND`: `daemon` once a `uroce daemon` serves each of the program's
//!   interfaces (started here when none does, `--backend` its datapath: auto, xdp, udp),
//!   so that any number of programs share the host's interfaces; with `--no-daemon` the
//!   datapath the program opens itself (`direct` for auto, `xdp`, `udp`);
//! - `NCCL_IBVERBS_LIB`, unless set: the path of uroce's `libibverbs.so.1` (NCCL opens
//!   `libibverbs.so` first, which a directory holding only the `.so.1` link leaves to the
//!   distribution's library).
//!
//! and, unless `--no-rdma-files`, shows the program uroce's devices where the kernel's
//! RDMA subsystem puts a device (`/sys/class/infiniband`, `/sys/class/infiniband_verbs`,
//! `/dev/infiniband`: crate::rdma_files), in a mount namespace of its own, with the
//! values the library reports for the devices it will list.

use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context as _};

/// Arguments of `uroce run`.
#[derive(clap::Args)]
pub struct Args {
    /// Interfaces that become devices (`uroce_<iface>`), comma-separated; default: every
    /// Ethernet interface of the namespace.
    #[arg(long)]
    iface: Option<String>,
    /// Datapath of the `uroce daemon` started for the interface when none serves it (one
    /// that runs keeps its own), or with --no-daemon the program's own: auto (the faster on
    /// the interface, printed with its reason: UDP on veth, AF_XDP on a NIC with zero-copy
    /// or native XDP), xdp or udp.
    #[arg(long, default_value = "auto", value_parser = ["auto", "xdp", "udp"])]
    backend: String,
    /// Open the datapath in the program itself (direct mode: one uroce process per
    /// interface) instead of through the `uroce daemon` serving the interface, which is
    /// started when none runs (`--backend` is then the daemon's datapath).
    #[arg(long)]
    no_daemon: bool,
    /// Spread each device's QPs over N engines, each with its own lock and thread
    /// (UROCE_SHARDS; 1 to 64). Through the daemon each engine attaches as a process of
    /// its own (over UDP with its own socket); with --no-daemon, over the UDP backend only
    /// (AF_XDP gives a process one queue), so --no-daemon --backend xdp is refused.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=64))]
    shards: Option<u32>,
    /// Do not show uroce's devices in /sys/class/infiniband, /sys/class/infiniband_verbs
    /// and /dev/infiniband (shown by default, in a mount namespace of the program's own).
    #[arg(long)]
    no_rdma_files: bool,
    /// The program and its arguments (after `--`).
    #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true)]
    program: Vec<OsString>,
}

/// The directory to put on `LD_LIBRARY_PATH` for the library next to the binary `exe`.
pub fn library_dir(exe: &Path) -> anyhow::Result<PathBuf> {
    if let Some(dir) = std::env::var_os("UROCE_LIBDIR") {
        let dir = PathBuf::from(dir);
        if !dir.join("libibverbs.so.1").exists() {
            bail!("UROCE_LIBDIR={} holds no libibverbs.so.1", dir.display());
        }
        return Ok(dir);
    }
    let here = exe.parent().context("the uroce binary's directory")?;
    // `exists` follows the link: a link left by an earlier build with no library is no use.
    if here.join("libibverbs.so.1").exists() {
        return Ok(here.to_path_buf());
    }
    let built = here.join("deps/libibverbs.so");
    if built.exists() {
        let dir = here.join("uroce-run");
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        for (lib, soname) in [
            (built, "libibverbs.so.1"),
            (here.join("deps/librdmacm.so"), "librdmacm.so.1"),
        ] {
            let link = dir.join(soname);
            if lib.exists() {
                // A link of a name of this process's own, renamed over the old one: another
                // `uroce run` starting at the same moment (a server and its client) never
                // finds the name missing, nor one it cannot make.
                static SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
                let n = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let tmp = dir.join(format!(".{soname}.{}.{n}", std::process::id()));
                let _ = std::fs::remove_file(&tmp);
                std::os::unix::fs::symlink(&lib, &tmp)
                    .and_then(|()| std::fs::rename(&tmp, &link))
                    .with_context(|| format!("linking {}", link.display()))?;
            } else {
                let _ = std::fs::remove_file(&link);
            }
        }
        return Ok(dir);
    }
    bail!(
        "no libibverbs.so.1 next to {} (build it with `cargo build --release`, which builds \
         crates/uroce-verbs, or point UROCE_LIBDIR at its directory)",
        exe.display()
    )
}

/// The capabilities AF_XDP needs (attaching the XDP program, the socket, ARP on the
/// datapath) that the effective set `cap_eff` (as /proc/self/status shows it) lacks.
pub fn missing_for_xdp(cap_eff: u64) -> Vec<&'static str> {
    [(12, "CAP_NET_ADMIN"), (13, "CAP_NET_RAW"), (39, "CAP_BPF")]
        .into_iter()
        .filter(|(bit, _)| cap_eff & (1u64 << bit) == 0)
        .map(|(_, name)| name)
        .collect()
}

/// The environment to add for `NCCL_IBVERBS_LIB` given its value now (`current`): the
/// path of the library in `dir` when unset, nothing when the user set it.
pub fn nccl_ibverbs_lib(dir: &Path, current: Option<OsString>) -> Option<PathBuf> {
    match current {
        Some(_) => None,
        None => Some(dir.join("libibverbs.so.1")),
    }
}

/// This process's effective capabilities.
pub fn cap_eff() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("CapEff:"))?;
    u64::from_str_radix(line.split_whitespace().nth(1)?, 16).ok()
}

/// A line for each interface (`only`, else every one here) whose AF_XDP another process
/// holds: the library cannot print, and the program's first QP there will fail with
/// EADDRINUSE (one uroce process per interface until a shared datapath lands).
pub fn held_interfaces(only: Option<&str>) -> Vec<String> {
    let list = uroce::net::addresses::interfaces().unwrap_or_default();
    list.iter()
        .filter(|i| only.is_none_or(|o| o == i.name))
        .filter_map(|i| {
            let h = uroce::datapath::holder::xdp_holder(i.index)?;
            Some(format!(
                "AF_XDP on {} is held by {h}: the program's first QP there will fail with \
                 EADDRINUSE (one uroce process per interface)",
                i.name
            ))
        })
        .collect()
}

/// What `auto` takes on interface `iface` and why ([`uroce::datapath::choice`]), for a
/// process lacking the capabilities `missing`: AF_XDP where it is the faster and can be
/// had, else the UDP backend.
pub fn auto_line(iface: &str, missing: &[&str]) -> String {
    let c = uroce::datapath::choice::choose(iface);
    if c.datapath == uroce::datapath::choice::Datapath::Xdp && !missing.is_empty() {
        format!(
            "auto takes the UDP backend: AF_XDP would be the faster ({}) but needs \
             {} (run as root or grant them)",
            c.reason,
            missing.join(", ")
        )
    } else {
        format!("auto takes {c}")
    }
}

/// Runs `uroce run`: only returns on failure to start the program.
pub fn run_cmd(a: Args) -> anyhow::Result<ExitCode> {
    if a.shards.is_some_and(|n| n > 1) && a.no_daemon && a.backend == "xdp" {
        bail!("--shards with --no-daemon needs the UDP backend (AF_XDP gives a process one queue): use --backend udp or auto, or leave out --no-daemon");
    }
    // The library never prints: say here why `auto` will take the UDP backend.
    let caps = cap_eff();
    let missing = caps.map(missing_for_xdp).unwrap_or_default();
    if a.backend == "auto" {
        for i in device_interfaces(a.iface.as_deref()) {
            eprintln!("uroce run: {i}: {}", auto_line(&i, &missing));
            let shards = a.shards.unwrap_or(1);
            if shards > 1
                && a.no_daemon
                && uroce::datapath::choice::choose(&i).datapath
                    != uroce::datapath::choice::Datapath::Udp
            {
                eprintln!(
                    "uroce run: {i}: --shards {shards} with --no-daemon applies over the UDP \
                     backend only; auto takes AF_XDP here (one engine): --backend udp, or the \
                     daemon, for {shards}"
                );
            }
        }
    } else if a.backend == "xdp" && !missing.is_empty() {
        bail!(
            "--backend xdp needs {}; run as root, grant them, or use --backend udp",
            missing.join(", ")
        );
    }
    let mut backend = a.backend.clone();
    if !a.no_daemon {
        match start_daemons(a.iface.as_deref(), &a.backend) {
            Ok(()) => backend = "daemon".into(),
            Err(e) => eprintln!("uroce run: {e:#}; the program opens the datapath itself"),
        }
    }
    match a.shards.filter(|&n| n > 1) {
        Some(n) if backend == "daemon" => eprintln!(
            "uroce run: --shards {n}: each of a device's {n} engines attaches to the daemon \
             as a process of its own (its own rings and, over UDP, a socket of its own)"
        ),
        _ => {}
    }
    if backend == "auto" {
        // Not through a daemon: never attach to one that runs.
        backend = "direct".into();
    }
    if backend != "udp" && backend != "daemon" {
        for line in held_interfaces(a.iface.as_deref()) {
            eprintln!("uroce run: {line}");
        }
    }
    let exe = std::env::current_exe().context("finding the uroce binary")?;
    let dir = library_dir(&exe)?;
    let mut path = OsString::from(dir.as_os_str());
    if let Some(old) = std::env::var_os("LD_LIBRARY_PATH").filter(|o| !o.is_empty()) {
        path.push(":");
        path.push(old);
    }
    if !a.no_rdma_files {
        let rdma_cm = dir.join("librdmacm.so.1").exists();
        // The selection the program's library will read: --iface, else the caller's own.
        let selected = a
            .iface
            .clone()
            .or_else(|| std::env::var(ibverbs::device::IFACES_ENV).ok());
        rdma_files(selected.as_deref(), rdma_cm, caps.unwrap_or(0));
    }
    let mut cmd = std::process::Command::new(&a.program[0]);
    cmd.args(&a.program[1..])
        .env("LD_LIBRARY_PATH", path)
        .env("UROCE_BACKEND", &backend);
    if let Some(i) = &a.iface {
        cmd.env("UROCE_IFACES", i);
    }
    if let Some(n) = a.shards {
        cmd.env("UROCE_SHARDS", n.to_string());
    }
    if let Some(lib) = nccl_ibverbs_lib(&dir, std::env::var_os("NCCL_IBVERBS_LIB")) {
        cmd.env("NCCL_IBVERBS_LIB", lib);
    }
    let e = cmd.exec();
    bail!("starting {}: {e}", a.program[0].to_string_lossy())
}

/// The interfaces of the devices the program's library will list (`--iface`, else
/// `UROCE_IFACES`: the library's own [`ibverbs::device::usable`]) that a daemon can serve:
/// with an IP address, and up unless named.
fn device_interfaces(iface: Option<&str>) -> Vec<String> {
    let selected = iface
        .map(str::to_string)
        .or_else(|| std::env::var(ibverbs::device::IFACES_ENV).ok());
    uroce::net::addresses::interfaces()
        .unwrap_or_default()
        .into_iter()
        .filter(|i| ibverbs::device::usable(i, selected.as_deref()))
        .filter(|i| !i.addrs.is_empty() && (i.up || selected.is_some()))
        .map(|i| i.name)
        .collect()
}

/// Makes sure a `uroce daemon` serves each interface the program will use.
fn start_daemons(iface: Option<&str>, backend: &str) -> anyhow::Result<()> {
    for i in device_interfaces(iface) {
        uroce_tools::daemon_start::ensure(&i, backend)
            .with_context(|| format!("no uroce daemon for {i}"))?;
    }
    Ok(())
}

/// Shows the program the RDMA files of the devices it will list (interfaces `iface`, as
/// `UROCE_IFACES` selects them; `/dev/infiniband/rdma_cm` only if `rdma_cm`, when it
/// gets uroce's librdmacm), or says on stderr why it will not see them.
fn rdma_files(iface: Option<&str>, rdma_cm: bool, cap_eff: u64) {
    let shown = ibverbs::sysfs::tree(iface, rdma_cm)
        .map_err(|e| {
            format!(
                "listing the devices: {}",
                std::io::Error::from_raw_os_error(e)
            )
        })
        .and_then(|tree| uroce_tools::rdma_files::lay_over(&tree, cap_eff));
    if let Err(why) = shown {
        eprintln!(
            "uroce run: the program will not find uroce's devices in /sys/class/infiniband \
             and /dev/infiniband (what UCX and NCCL look for): {why}"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_the_capabilities_af_xdp_lacks() {
        assert!(missing_for_xdp(u64::MAX).is_empty());
        assert_eq!(
            missing_for_xdp(0),
            vec!["CAP_NET_ADMIN", "CAP_NET_RAW", "CAP_BPF"]
        );
        // A root shell in CI: 0x000001ffffffffff.
        assert!(missing_for_xdp(0x1ff_ffff_ffff).is_empty());
        assert_eq!(
            missing_for_xdp(1 << 12 | 1 << 13),
            vec!["CAP_NET_ADMIN", "CAP_BPF"][1..].to_vec()
        );
    }

    #[test]
    fn points_nccl_at_the_library_unless_told_otherwise() {
        let dir = Path::new("/opt/uroce/lib");
        assert_eq!(
            nccl_ibverbs_lib(dir, None),
            Some(PathBuf::from("/opt/uroce/lib/libibverbs.so.1"))
        );
        assert_eq!(nccl_ibverbs_lib(dir, Some("/x/libibverbs.so".into())), None);
    }

    #[test]
    fn finds_the_library_next_to_the_binary_or_in_deps() {
        let root = std::env::temp_dir().join(format!("uroce-run-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(root.join("deps")).unwrap();
        let exe = root.join("uroce");
        assert!(library_dir(&exe).is_err(), "no library anywhere");
        std::fs::write(root.join("deps/libibverbs.so"), b"").unwrap();
        let dir = library_dir(&exe).unwrap();
        assert_eq!(dir, root.join("uroce-run"));
        assert!(dir.join("libibverbs.so.1").exists());
        assert!(!dir.join("librdmacm.so.1").exists());
        std::fs::write(root.join("deps/librdmacm.so"), b"").unwrap();
        assert!(library_dir(&exe).unwrap().join("librdmacm.so.1").exists());
        std::fs::write(root.join("libibverbs.so"), b"").unwrap();
        std::os::unix::fs::symlink("libibverbs.so", root.join("libibverbs.so.1")).unwrap();
        assert_eq!(library_dir(&exe).unwrap(), root);
        let _ = std::fs::remove_dir_all(&root);
    }

    /// Two `uroce run` starting at once (a server and its client) both link the
    /// libraries: neither fails (it used to, EEXIST, one removing the link the other had
    /// just made) and the link is never missing.
    #[test]
    fn links_the_library_while_others_do_the_same() {
        let root = std::env::temp_dir().join(format!("uroce-run-race-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(root.join("deps")).unwrap();
        std::fs::write(root.join("deps/libibverbs.so"), b"").unwrap();
        std::fs::write(root.join("deps/librdmacm.so"), b"").unwrap();
        let exe = root.join("uroce");
        let dir = library_dir(&exe).unwrap();
        let link = dir.join("libibverbs.so.1");
        let stop = std::sync::atomic::AtomicBool::new(false);
        std::thread::scope(|s| {
            let watcher = s.spawn(|| {
                let mut missing = 0;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    missing += usize::from(!link.exists());
                }
                missing
            });
            let workers: Vec<_> = (0..4)
                .map(|_| s.spawn(|| (0..200).try_for_each(|_| library_dir(&exe).map(|_| ()))))
                .collect();
            let results: Vec<anyhow::Result<()>> =
                workers.into_iter().map(|w| w.join().unwrap()).collect();
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
            let missing = watcher.join().unwrap();
            for r in results {
                r.unwrap();
            }
            assert_eq!(missing, 0, "the link went missing");
        });
        let left: Vec<_> = std::fs::read_dir(&dir).unwrap().flatten().collect();
        assert_eq!(left.len(), 2, "temporary links left behind: {left:?}");
        let _ = std::fs::remove_dir_all(&root);
    }
}
