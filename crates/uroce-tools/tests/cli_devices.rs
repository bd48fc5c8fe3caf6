//! `uroce devices` / `uroce info`: interfaces, path MTUs, GIDs as ibverbs tools show them.

use std::process::Command;

#[test]
fn devices_lists_loopback_with_its_ipv4_mapped_gid() {
    let out = Command::new(env!("CARGO_BIN_EXE_uroce"))
        .arg("devices")
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("lo "), "{text}");
    assert!(text.contains("mac none"), "loopback has no MAC: {text}");
    assert!(text.contains("::ffff:127.0.0.1"), "{text}");
    assert!(
        text.contains("path MTU 4096"),
        "loopback's MTU fits 4096: {text}"
    );
    let info = Command::new(env!("CARGO_BIN_EXE_uroce"))
        .args(["info", "lo"])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&info.stdout).contains("xdp: not on loopback"));
    assert!(
        String::from_utf8_lossy(&info.stdout).contains("    daemon: "),
        "says whether a uroce daemon serves it"
    );
    let bad = Command::new(env!("CARGO_BIN_EXE_uroce"))
        .args(["info", "no-such-if"])
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("no interface no-such-if"));
}
