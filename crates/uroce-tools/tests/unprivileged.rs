//! `uroce demo` as a new user runs it, without root: both endpoints on loopback over the
//! UDP backend, whose receive buffer is what `net.core.rmem_max` allows. A clean path must
//! show no retransmission and no frame dropped by the kernel: each RC QP's window is
//! bounded by what the receiver's buffer holds (`Backend::rx_capacity`), and a full
//! socket send buffer keeps datagrams queued rather than losing them.
//!
//! Run as root, the test drops to user `nobody` with `setpriv` (util-linux); not root, it
//! runs the demo as it is.

use std::os::unix::fs::PermissionsExt;
use std::process::Command;

/// Runs `uroce demo --messages 64` as `nobody` (when root), with `UROCE_UDP_RCVBUF` set to
/// `rcvbuf` when given; returns what it printed.
fn demo_unprivileged(rcvbuf: Option<u32>) -> String {
    // A copy nobody may run, in a directory nobody may enter.
    let dir = std::env::temp_dir().join(format!("uroce-unpriv-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let bin = dir.join("uroce");
    std::fs::copy(env!("CARGO_BIN_EXE_uroce"), &bin).unwrap();
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let mut cmd = if root {
        let mut c = Command::new("setpriv");
        c.args(["--reuid=nobody", "--regid=nogroup", "--clear-groups"])
            .arg(&bin);
        c
    } else {
        Command::new(&bin)
    };
    cmd.args(["demo", "--messages", "64"]).current_dir(&dir);
    if let Some(b) = rcvbuf {
        cmd.env("UROCE_UDP_RCVBUF", b.to_string());
    }
    let out = cmd.output().expect("running uroce demo");
    let _ = std::fs::remove_dir_all(&dir);
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(
        text.contains("running both endpoints on loopback"),
        "the demo did not fall back to loopback:\n{text}"
    );
    text
}

/// The RC recovery line's client retransmits and server out-of-sequence requests.
fn rc_recovery(text: &str) -> (u64, u64) {
    let line = text
        .lines()
        .find(|l| l.contains("RC recovery:"))
        .unwrap_or_else(|| panic!("no RC recovery line:\n{text}"));
    let number_before = |what: &str| -> u64 {
        let at = line.find(what).unwrap_or_else(|| panic!("{what}: {line}"));
        line[..at]
            .split_whitespace()
            .last()
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("{what}: {line}"))
    };
    (
        number_before(" retransmits"),
        number_before(" out-of-sequence"),
    )
}

/// With the receive buffer this machine grants an unprivileged process: everything
/// verified, no retransmission, no frame dropped by either kernel. Then with the receive
/// buffer of a stock kernel's `net.core.rmem_max` (212992 bytes, which the kernel
/// doubles): the RC window shrinks to fit it and RC still sends nothing twice. (The UD
/// phase sends its 64 datagrams in one burst, which such a buffer may not hold: UD has no
/// window, so only RC is checked there.) One test, as two demos cannot share the
/// loopback addresses at once.
#[test]
fn unprivileged_demo_on_a_clean_path_loses_nothing() {
    let text = demo_unprivileged(None);
    assert!(text.contains("result: OK"), "{text}");
    assert_eq!(rc_recovery(&text), (0, 0), "{text}");
    assert!(
        text.contains(
            "frames dropped by the kernel for want of receive buffers: client 0, server 0"
        ),
        "{text}"
    );

    let text = demo_unprivileged(Some(212_992));
    assert_eq!(rc_recovery(&text), (0, 0), "{text}");
    assert!(text.contains("data verified: WRITE and READ"), "{text}");
}
