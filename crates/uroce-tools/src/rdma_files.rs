//! The RDMA files a program reads, shown to a program under `uroce run`: uroce's devices
//! in `/sys/class/infiniband`, `/sys/class/infiniband_verbs` and `/dev/infiniband`, where
//! the kernel's RDMA subsystem puts a device (the tree itself: `ibverbs::sysfs`).
//!
//! How: `uroce run` enters a private mount namespace of its own (`unshare(CLONE_NEWNS)`,
//! propagation private, so nothing reaches the host's mounts), and there lays a tmpfs over
//! each directory that holds one of those names (`/sys/class`, `/dev`: sysfs allows no
//! new directory, and the host may have no RDMA subsystem at all). Every other entry of
//! the directory is put back as it was: a directory or a file is a bind mount of the
//! original (recursive, so `/dev/pts` and `/dev/shm` keep their mounts and
//! `/sys/class/net` still lists the interfaces of the namespace sysfs was mounted in), a
//! symbolic link the same link. The original stays reachable through a descriptor opened
//! before the tmpfs covered it (`/proc/self/fd/N/<name>`). Then the tree is written in
//! the tmpfs; each character device of `/dev/infiniband` is `/dev/null` bound there
//! (it opens read-write, as UCX checks; uroce's libraries never open it), and a
//! directory that shows another (a virtual interface's sysfs directory under the
//! device's `device/net/`) a bind mount of it. The program,
//! exec'd afterwards, inherits the namespace; nothing outlives it.
//!
//! Privilege: mounts need CAP_SYS_ADMIN. Without it and with no capability at all (an
//! ordinary user), `uroce run` first enters a user namespace of its own that maps only
//! the caller's uid and gid to themselves (the program keeps its identity; other users'
//! files show as the overflow uid), where it holds the capability over its mount
//! namespace. A process holding some capabilities but not CAP_SYS_ADMIN (AF_XDP's, granted
//! to the binary) does not: a user namespace would cost it those in the host's network
//! namespace. Where neither works, the program runs without the files and `uroce run`
//! says why on stderr.
//!
//! Failure after the namespace is entered returns to the mount namespace as it was
//! before the changes (a saved descriptor of it, `setns`), so a program never sees a half
//! laid tree.

use std::ffi::CString;
use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use ibverbs::sysfs::{Entry, Node, REPLACED};

/// CAP_SYS_ADMIN's bit in the capability sets.
const CAP_SYS_ADMIN: u32 = 21;

/// How `uroce run` may get its own mount namespace, from its effective capabilities.
#[derive(Debug, PartialEq, Eq)]
pub enum Plan {
    /// It holds CAP_SYS_ADMIN: a mount namespace.
    MountNamespace,
    /// It holds no capability: a user namespace mapping its own ids, then a mount
    /// namespace in it.
    UserNamespace,
    /// It holds capabilities a user namespace would cost, and not CAP_SYS_ADMIN.
    No,
}

/// The plan for effective capabilities `cap_eff` (as /proc/self/status shows them).
pub fn plan(cap_eff: u64) -> Plan {
    if cap_eff & (1 << CAP_SYS_ADMIN) != 0 {
        Plan::MountNamespace
    } else if cap_eff == 0 {
        Plan::UserNamespace
    } else {
        Plan::No
    }
}

fn cstr(p: &Path) -> io::Result<CString> {
    CString::new(p.as_os_str().as_bytes()).map_err(io::Error::other)
}

fn os_err(r: libc::c_int, what: impl FnOnce() -> String) -> io::Result<()> {
    if r == 0 {
        Ok(())
    } else {
        let e = io::Error::last_os_error();
        Err(io::Error::new(e.kind(), format!("{}: {e}", what())))
    }
}

/// mount(2): `src` on `target` with file system type `fstype` (None for a bind).
fn mount(
    src: &Path,
    target: &Path,
    fstype: Option<&str>,
    flags: libc::c_ulong,
    data: Option<&str>,
) -> io::Result<()> {
    let (s, t) = (cstr(src)?, cstr(target)?);
    let f = fstype.map(|f| CString::new(f).unwrap_or_default());
    let d = data.map(|d| CString::new(d).unwrap_or_default());
    // SAFETY: every pointer is a NUL-terminated string that outlives the call, or NULL
    // where mount(2) allows it (the type of a bind mount, the data).
    let r = unsafe {
        libc::mount(
            s.as_ptr(),
            t.as_ptr(),
            f.as_ref().map_or(std::ptr::null(), |f| f.as_ptr()),
            flags,
            d.as_ref()
                .map_or(std::ptr::null(), |d| d.as_ptr().cast::<libc::c_void>()),
        )
    };
    os_err(r, || {
        format!(
            "mounting {} on {}",
            fstype.unwrap_or(&src.display().to_string()),
            target.display()
        )
    })
}

/// Enters a user namespace mapping the caller's uid and gid to themselves.
fn enter_user_namespace() -> io::Result<()> {
    // SAFETY: getuid and getgid have no preconditions.
    let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
    // SAFETY: unshare changes only this (single-threaded) process's namespaces.
    let r = unsafe { libc::unshare(libc::CLONE_NEWUSER) };
    os_err(r, || "entering a user namespace (unshare)".into())?;
    // An unprivileged process may map its gid only once setgroups is denied.
    std::fs::write("/proc/self/setgroups", "deny")?;
    std::fs::write("/proc/self/uid_map", format!("{uid} {uid} 1"))?;
    std::fs::write("/proc/self/gid_map", format!("{gid} {gid} 1"))?;
    Ok(())
}

fn unshare_mounts() -> io::Result<()> {
    // SAFETY: unshare changes only this process's mount namespace.
    let r = unsafe { libc::unshare(libc::CLONE_NEWNS) };
    os_err(r, || "entering a mount namespace (unshare)".into())
}

/// Lays the tree `entries` over the host's directories in a mount namespace of this
/// process's own, as the module docs say. Err: why not (the process is then in the mount
/// namespace it started in, or for [`Plan::UserNamespace`] in its user namespace with
/// the mounts as they were).
pub fn lay_over(entries: &[Entry], cap_eff: u64) -> Result<(), String> {
    match plan(cap_eff) {
        Plan::MountNamespace => {}
        Plan::UserNamespace => enter_user_namespace().map_err(|e| {
            format!(
                "needs CAP_SYS_ADMIN, or a user namespace where it has it, which this \
                 system refuses ({e})"
            )
        })?,
        Plan::No => {
            return Err(
                "needs CAP_SYS_ADMIN (this process holds other capabilities, which \
                 a user namespace would cost it)"
                    .into(),
            )
        }
    }
    // The namespace to return to if laying the tree fails part way.
    let before = File::open("/proc/self/ns/mnt").map_err(|e| format!("/proc/self/ns/mnt: {e}"))?;
    let cwd = std::env::current_dir().ok();
    unshare_mounts().map_err(|e| e.to_string())?;
    let laid = mount(
        Path::new("none"),
        Path::new("/"),
        None,
        libc::MS_REC | libc::MS_PRIVATE,
        None,
    )
    .and_then(|()| lay(entries));
    if let Err(e) = laid {
        // SAFETY: `before` is an open mount namespace descriptor; setns changes only
        // this process's namespace (and its root and working directory, restored below).
        let back = unsafe { libc::setns(before.as_raw_fd(), libc::CLONE_NEWNS) };
        if back != 0 {
            // The mounts made so far stay: there is no other way back.
            return Err(format!(
                "{e}; and returning to the original mount namespace failed: {}",
                io::Error::last_os_error()
            ));
        }
        if let Some(d) = cwd {
            let _ = std::env::set_current_dir(d);
        }
        return Err(e.to_string());
    }
    Ok(())
}

fn lay(entries: &[Entry]) -> io::Result<()> {
    let mut parents: Vec<&str> = REPLACED.iter().map(|(p, _)| *p).collect();
    parents.dedup();
    for parent in parents {
        let names: Vec<&str> = REPLACED
            .iter()
            .filter(|(p, _)| *p == parent)
            .map(|(_, n)| *n)
            .collect();
        cover(&Path::new("/").join(parent), &names)?;
    }
    // A debug build fails here, half way, when a test asks (tests/rdma_files.rs: the
    // program must then see the mounts as they were).
    #[cfg(debug_assertions)]
    if std::env::var_os("UROCE_TEST_RDMA_FILES_FAIL").is_some() {
        return Err(io::Error::other(
            "failing as UROCE_TEST_RDMA_FILES_FAIL asks",
        ));
    }
    for e in entries {
        let path = Path::new("/").join(&e.path);
        let at = |r: io::Result<()>| {
            r.map_err(|err| io::Error::new(err.kind(), format!("{}: {err}", path.display())))
        };
        match &e.node {
            Node::Dir => at(std::fs::create_dir_all(&path))?,
            Node::File(text) => {
                at(std::fs::write(&path, text))?;
                at(std::fs::set_permissions(
                    &path,
                    std::fs::Permissions::from_mode(0o444),
                ))?;
            }
            Node::Link(target) => at(std::os::unix::fs::symlink(target, &path))?,
            Node::CharDev => {
                at(File::create(&path).map(drop))?;
                mount(Path::new("/dev/null"), &path, None, libc::MS_BIND, None)?;
            }
            Node::BindDir(source) => {
                at(std::fs::create_dir_all(&path))?;
                mount(source, &path, None, libc::MS_BIND | libc::MS_REC, None)?;
            }
        }
    }
    Ok(())
}

/// Covers directory `dir` with a tmpfs that holds what `dir` held, less `left_out`
/// (which the tree then provides).
fn cover(dir: &Path, left_out: &[&str]) -> io::Result<()> {
    let mode = std::fs::metadata(dir)?.permissions().mode() & 0o7777;
    let mut kept: Vec<(PathBuf, std::fs::FileType)> = Vec::new();
    for e in std::fs::read_dir(dir)? {
        let e = e?;
        let name = e.file_name();
        if left_out.iter().any(|n| name.as_bytes() == n.as_bytes()) {
            continue;
        }
        kept.push((PathBuf::from(name), e.file_type()?));
    }
    let original = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_PATH | libc::O_DIRECTORY)
        .open(dir)?;
    let through = PathBuf::from(format!("/proc/self/fd/{}", original.as_raw_fd()));
    mount(
        Path::new("tmpfs"),
        dir,
        Some("tmpfs"),
        libc::MS_NOSUID,
        Some(&format!("mode={mode:o}")),
    )?;
    for (name, kind) in kept {
        let (from, to) = (through.join(&name), dir.join(&name));
        if kind.is_symlink() {
            std::os::unix::fs::symlink(std::fs::read_link(&from)?, &to)?;
            continue;
        }
        if kind.is_dir() {
            std::fs::create_dir(&to)?;
        } else {
            File::create(&to)?;
        }
        mount(&from, &to, None, libc::MS_BIND | libc::MS_REC, None)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_plan_follows_the_capabilities() {
        assert_eq!(plan(0x1ff_ffff_ffff), Plan::MountNamespace);
        assert_eq!(plan(1 << CAP_SYS_ADMIN), Plan::MountNamespace);
        assert_eq!(plan(0), Plan::UserNamespace);
        // CAP_NET_ADMIN, CAP_NET_RAW, CAP_BPF granted for AF_XDP.
        assert_eq!(plan(1 << 12 | 1 << 13 | 1 << 39), Plan::No);
    }
}
