//! The middleware matrix (`scripts/compat-matrix.sh`): qperf, UCX (ucx_info,
//! ucx_perftest over rc_verbs and ud_verbs), Open MPI over UCX, libfabric's fi_pingpong
//! (msg, dgram, rdm) and pyverbs, each unmodified between two network namespaces on the
//! built libraries. Every row must pass (or be the refusal it expects); a row whose
//! package is missing skips and says which. README.md's table comes from this script.
//!
//! Needs root and iproute2; skips (saying why) otherwise.

use std::path::Path;
use std::process::Command;

use uroce_tools::netns;

#[test]
fn the_middleware_matrix_runs_unmodified_on_uroce() {
    if let Err(why) = netns::check_privileges() {
        eprintln!("SKIP: {why}");
        return;
    }
    let bin = Path::new(env!("CARGO_BIN_EXE_uroce"));
    let dir = bin.parent().unwrap();
    if !dir.join("libibverbs.so.1").exists() && !dir.join("deps/libibverbs.so").exists() {
        eprintln!(
            "SKIP: no libibverbs.so.1 in {} (cargo build -p uroce-verbs)",
            dir.display()
        );
        return;
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("compat-matrix");
    let _ = std::fs::remove_dir_all(&out);
    let run = Command::new("timeout")
        .arg("900")
        .arg(root.join("scripts/compat-matrix.sh"))
        .arg("--bin")
        .arg(bin)
        .arg("--out")
        .arg(&out)
        .arg("--markdown")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&run.stdout);
    let stderr = String::from_utf8_lossy(&run.stderr);
    eprintln!("{stdout}\n{stderr}");
    let rows = std::fs::read_to_string(out.join("rows.tsv")).unwrap_or_default();
    let rows: Vec<Vec<&str>> = rows.lines().map(|l| l.split('\t').collect()).collect();
    let failed: Vec<&Vec<&str>> = rows.iter().filter(|r| r[1] == "fail").collect();
    let mut logs = String::new();
    for r in &failed {
        for side in ["client", "server"] {
            if let Ok(t) = std::fs::read_to_string(out.join(format!("{}.{side}", r[0]))) {
                let tail: Vec<&str> = t.lines().rev().take(25).collect();
                logs += &format!("--- {} ({side}), last lines:\n", r[0]);
                logs += &tail.into_iter().rev().collect::<Vec<_>>().join("\n");
                logs += "\n";
            }
        }
    }
    assert!(failed.is_empty(), "rows failed: {failed:?}\n{logs}");
    assert_eq!(run.status.code(), Some(0), "{stderr}");
    // Every case reported: pass, the refusal it expects, or a skip naming a package.
    for case in [
        "qperf-rc_bw",
        "qperf-rc_lat",
        "qperf-rc_rdma_write_bw",
        "qperf-rc_rdma_read_lat",
        "qperf-uc_bw",
        "qperf-ud_lat",
        "ucx_info",
        "ucx-tag_bw-rc",
        "ucx-tag_lat-rc",
        "ucx-tag_bw-ud",
        "ucx-tag_lat-ud",
        "ompi-ucx",
        "fi-msg",
        "fi-dgram",
        "fi-rdm",
        "pyverbs",
    ] {
        let r = rows
            .iter()
            .find(|r| r[0] == case)
            .unwrap_or_else(|| panic!("no row for {case}: {rows:?}"));
        match r[1] {
            "pass" => {}
            "refused" => assert!(case.starts_with("qperf-u"), "{r:?}"),
            "skip" => assert!(r[3].contains("missing") || r[3].contains("cannot import")),
            other => panic!("{case}: {other}: {r:?}"),
        }
    }
}
