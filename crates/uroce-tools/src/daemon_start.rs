//! Starting a `uroce daemon` for an interface when none serves it (`uroce run`,
//! `uroce perf`, `uroce pingpong`): the tools may fork, the library never does.
//!
//! The daemon is this same binary (`uroce daemon --iface IF --linger 5`), started in a
//! session of its own with its output in a log file next to its socket, so it outlives
//! the tool that started it and leaves some seconds after its last process.

use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use uroce::datapath::daemon::proto;

/// Seconds a daemon a tool started stays after its last process left.
pub const LINGER_S: u64 = 5;

/// Whether a daemon serving `iface` in this network namespace answers at one of the
/// paths a process tries.
pub fn running(iface: &str) -> bool {
    proto::socket_paths(iface)
        .map(|v| v.iter().any(|p| proto::connect(p).is_ok()))
        .unwrap_or(false)
}

/// Makes sure a daemon serves `iface` (datapath `backend`: auto, xdp or udp); returns its
/// socket, and whether this call started it.
pub fn ensure(iface: &str, backend: &str) -> anyhow::Result<(PathBuf, bool)> {
    // SAFETY: geteuid cannot fail.
    let path = proto::socket_path(iface, unsafe { libc::geteuid() } == 0)?;
    if proto::connect(&path).is_ok() {
        return Ok((path, false));
    }
    let exe = std::env::current_exe().context("finding the uroce binary")?;
    let dir = path.parent().context("socket directory")?;
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    // One starter at a time (eight ranks of a job start at once): the others wait here,
    // then find the daemon the first one started.
    let lock_path = dir.join(format!("{iface}.lock"));
    let lock = std::fs::File::create(&lock_path)
        .with_context(|| format!("creating {}", lock_path.display()))?;
    // SAFETY: flock on a descriptor we own; released when `lock` is closed.
    if unsafe { libc::flock(std::os::fd::AsRawFd::as_raw_fd(&lock), libc::LOCK_EX) } != 0 {
        return Err(std::io::Error::last_os_error())
            .with_context(|| format!("locking {}", lock_path.display()));
    }
    if proto::connect(&path).is_ok() {
        return Ok((path, false));
    }
    let log_path = dir.join(format!("{iface}.log"));
    let log = std::fs::File::create(&log_path)
        .with_context(|| format!("creating {}", log_path.display()))?;
    let mut cmd = std::process::Command::new(exe);
    cmd.args(["daemon", "--iface", iface, "--backend", backend, "--linger"])
        .arg(LINGER_S.to_string())
        .stdin(std::process::Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log);
    // SAFETY: between fork and exec only async-signal-safe calls: a second fork, whose
    // parent leaves at once (so the daemon is no child of the program `uroce run`
    // becomes, and init reaps it), and setsid (its own session: no terminal's signals).
    unsafe {
        cmd.pre_exec(|| {
            match libc::fork() {
                -1 => return Err(std::io::Error::last_os_error()),
                0 => {}
                _ => libc::_exit(0),
            }
            libc::setsid();
            Ok(())
        });
    }
    let mut child = cmd.spawn().context("starting uroce daemon")?;
    let _ = child.wait();
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(10) {
        if proto::connect(&path).is_ok() {
            return Ok((path, true));
        }
        // The daemon says why it could not start in its log, and leaves.
        let log = std::fs::read_to_string(&log_path).unwrap_or_default();
        if let Some(why) = log.lines().find(|l| l.starts_with("uroce:")) {
            // Another tool may have started one at the same moment and won the socket.
            if why.contains("already serves") {
                return Ok((path, false));
            }
            bail!("uroce daemon for {iface} could not start: {why}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    bail!(
        "uroce daemon for {iface} did not come up in 10 s (see {})",
        log_path.display()
    )
}
