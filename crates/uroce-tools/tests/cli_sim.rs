//! `uroce sim` from the command line: `--datagrams` runs RC over the path a UDP socket's
//! datagrams take, and is refused, with the reason, for the datagram transports.

use std::process::Command;

fn uroce(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_uroce"))
        .args(args)
        .output()
        .expect("run uroce")
}

#[test]
fn sim_over_datagrams_verifies_and_counts_what_the_path_did() {
    let out = uroce(&[
        "sim",
        "--ops",
        "200",
        "--mix",
        "read:3,write:1",
        "--size",
        "1..20000",
        "--loss",
        "0.02",
        "--corrupt",
        "0.02",
        "--seed",
        "3",
        "--datagrams",
        "--json",
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_str(text.trim()).expect("one JSON object");
    assert_eq!(v["ops_completed"], 200);
    assert!(v["errors"].as_array().is_some_and(|e| e.is_empty()), "{v}");
    for k in ["idents_recovered", "placed"] {
        assert!(v[k].as_u64().is_some_and(|n| n > 0), "{k}: {v}");
    }
}

#[test]
fn datagrams_are_refused_for_ud_and_uc() {
    for t in ["ud", "uc"] {
        let out = uroce(&["sim", "--ops", "10", "--transport", t, "--datagrams"]);
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("--datagrams is for --transport rc"), "{err}");
    }
}
