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

/// The RC recovery line: client retransmits, sequence NAKs, ACK timeouts and tail
/// probes, server
/// out-of-sequence requests, and the frames each kernel dropped.
#[derive(Debug, PartialEq, Eq)]
struct Recovery {
    retransmits: u64,
    seq_naks: u64,
    ack_timeouts: u64,
    tail_probes: u64,
    out_of_sequence: u64,
    dropped: (u64, u64),
}

fn rc_recovery(text: &str) -> Recovery {
    let line = text
        .lines()
        .find(|l| l.contains("RC recovery:"))
        .unwrap_or_else(|| panic!("no RC recovery line:\n{text}"));
    let number_before = |what: &str| -> u64 {
        let at = line.find(what).unwrap_or_else(|| panic!("{what}: {line}"));
        line[..at]
            .split_whitespace()
            .last()
            .and_then(|n| n.trim_end_matches(',').parse().ok())
            .unwrap_or_else(|| panic!("{what}: {line}"))
    };
    let after = |what: &str| -> u64 {
        let at = line.find(what).unwrap_or_else(|| panic!("{what}: {line}")) + what.len();
        line[at..]
            .split(|c: char| !c.is_ascii_digit())
            .find(|w| !w.is_empty())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("{what}: {line}"))
    };
    Recovery {
        retransmits: number_before(" retransmits"),
        seq_naks: number_before(" sequence NAKs"),
        ack_timeouts: number_before(" ACK timeouts"),
        tail_probes: number_before(" tail probes"),
        out_of_sequence: number_before(" out-of-sequence"),
        dropped: (after("receive buffers: client "), after(", server ")),
    }
}

/// Nothing was lost: no frame dropped by a kernel, nothing out of sequence, no sequence
/// NAK, and no retransmission but after a tail probe or an ACK timeout (a machine so
/// loaded that the receiver did not run for the 8.4 ms of a clean QP's recovery probe,
/// or the 16.8 ms of the demo's timeout: not a loss; the test runs on a shared 2-core
/// machine).
fn assert_nothing_lost(text: &str) {
    let r = rc_recovery(text);
    assert_eq!(
        (r.dropped, r.out_of_sequence, r.seq_naks),
        ((0, 0), 0, 0),
        "{r:?}\n{text}"
    );
    assert!(
        r.retransmits == 0 || r.ack_timeouts + r.tail_probes > 0,
        "{r:?}\n{text}"
    );
}

/// With the receive buffer this machine grants an unprivileged process, then with that
/// of a stock kernel's `net.core.rmem_max` (212992 bytes, which the kernel doubles: the
/// RC window shrinks to fit it, and the demo keeps no more UD datagrams in flight than it
/// holds): everything verified, nothing lost. One test, as two demos cannot share the
/// loopback addresses at once.
#[test]
fn unprivileged_demo_on_a_clean_path_loses_nothing() {
    for rcvbuf in [None, Some(212_992)] {
        let text = demo_unprivileged(rcvbuf);
        assert!(text.contains("result: OK"), "{rcvbuf:?}\n{text}");
        assert!(text.contains("64/64 UD datagrams"), "{text}");
        assert_nothing_lost(&text);
    }
}
