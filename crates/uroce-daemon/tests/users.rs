//! Who may attach to a daemon root runs: root, and another user only when the daemon
//! was started with `--allow-uid` for it (the socket's mode keeps the others out, and
//! SO_PEERCRED those that get through the mode).

mod common;

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::Daemon;

const NOBODY: u32 = 65534;

/// `uroced --check` against `socket` as `uid`: (success, what it said).
fn check_as(uid: u32, socket: &Path) -> (bool, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_uroced"));
    cmd.args(["--check", "--iface", "lo", "--socket"])
        .arg(socket)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if uid != 0 {
        cmd.uid(uid).gid(uid);
    }
    let mut child = cmd.spawn().expect("spawning uroced --check");
    let deadline = Instant::now() + Duration::from_secs(10);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("uroced --check as {uid} did not finish in 10 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), said)
}

fn refused(said: &str) -> bool {
    let s = said.to_lowercase();
    s.contains("permission denied") || s.contains("not allowed")
}

fn start(tag: &str, extra: &[&str]) -> Daemon {
    use std::os::unix::fs::PermissionsExt;
    let d = Daemon::start(tag, extra);
    // The socket's directory must not be what keeps another user out.
    let run = d.socket.parent().unwrap();
    std::fs::set_permissions(run, std::fs::Permissions::from_mode(0o755)).unwrap();
    d
}

#[test]
fn another_user_attaches_only_when_let_in() {
    if !common::root_or_skip("another_user_attaches_only_when_let_in") {
        return;
    }
    let _watchdog = common::Watchdog::new(
        "another_user_attaches_only_when_let_in",
        Duration::from_secs(120),
    );
    // Not let in: the socket is 0600.
    {
        let mut d = start("users-closed", &[]);
        let (ok, said) = check_as(0, &d.socket);
        assert!(ok, "root attaches: {said}");
        assert!(said.contains("attached to uroce daemon for lo"), "{said}");
        let (ok, said) = check_as(NOBODY, &d.socket);
        assert!(
            !ok,
            "uid {NOBODY} attached to a daemon it was not let into: {said}"
        );
        assert!(refused(&said), "the refusal says why: {said}");
        d.assert_alive();
    }
    // Another user is let in: the socket's mode lets everyone connect, and the daemon
    // refuses those not let in by their credentials.
    {
        let mut d = start("users-other", &["--allow-uid", "65533"]);
        let (ok, said) = check_as(NOBODY, &d.socket);
        assert!(!ok, "uid {NOBODY} attached, only 65533 was let in: {said}");
        assert!(refused(&said), "the refusal says why: {said}");
        let (ok, said) = check_as(65533, &d.socket);
        assert!(ok, "uid 65533 was let in: {said}");
        d.assert_alive();
    }
    // Let in.
    {
        let mut d = start("users-open", &["--allow-uid", &NOBODY.to_string()]);
        let (ok, said) = check_as(NOBODY, &d.socket);
        assert!(ok, "uid {NOBODY} was let in: {said}");
        assert!(said.contains("attached to uroce daemon for lo"), "{said}");
        let (ok, said) = check_as(0, &d.socket);
        assert!(ok, "root still attaches: {said}");
        d.assert_alive();
    }
}
