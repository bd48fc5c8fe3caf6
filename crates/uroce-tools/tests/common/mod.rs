//! Helpers shared by the tests that run the distro's unmodified tools (perftest,
//! ibverbs-utils, rdmacm-utils) under `uroce run` in network namespaces: whether the
//! machine can run them, a server in one namespace and its client in the other, and a
//! child's output for a failure message. Each test binary compiles its own copy
//! (`mod common;`), using what it needs of it.
#![allow(dead_code)]

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use uroce_tools::netns::{self, VethPair};

/// Whether `tool` is on the PATH.
pub fn have(tool: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Whether this process may make network namespaces and every one of `tools` is
/// installed; says why not (a SKIP line) otherwise.
pub fn can_run(tools: &[&str]) -> bool {
    if let Err(e) = netns::check_privileges() {
        eprintln!("SKIP: {e:#}");
        return false;
    }
    if let Some(t) = tools.iter().find(|t| !have(t)) {
        eprintln!("SKIP: {t} is not installed (scripts/setup.sh installs it)");
        return false;
    }
    true
}

/// A child's status, stdout and stderr, for a failure message.
pub fn text(o: &Output) -> String {
    format!(
        "status {}\n--- stdout\n{}\n--- stderr\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Runs `args` as server in the pair's first namespace and, with the server's IPv4 address
/// added, as client in the second, each as `run(side, args)` makes it (which puts it under
/// a timeout); the client is tried again while the server is not listening yet (15 s at
/// most). Both outputs: the server's, then the client's.
pub fn across(
    pair: &VethPair,
    run: impl Fn(usize, &[&str]) -> Command,
    args: &[&str],
) -> (Output, Output) {
    across_watching(pair, run, args, |_| ())
}

/// [`across`], calling `watch` with the server's process id every 100 ms while a client
/// runs (to look at the server while it moves data).
pub fn across_watching(
    pair: &VethPair,
    run: impl Fn(usize, &[&str]) -> Command,
    args: &[&str],
    mut watch: impl FnMut(u32),
) -> (Output, Output) {
    let s = run(0, args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting the server");
    let addr = pair.addrs[0].to_string();
    let mut client = args.to_vec();
    client.push(&addr);
    let deadline = Instant::now() + Duration::from_secs(15);
    let c = loop {
        std::thread::sleep(Duration::from_millis(500));
        let mut cmd = run(1, &client);
        let attempt = std::thread::spawn(move || cmd.output().expect("running the client"));
        while !attempt.is_finished() {
            watch(s.id());
            std::thread::sleep(Duration::from_millis(100));
        }
        let o = attempt.join().expect("the client's thread");
        let refused = !o.status.success() && text(&o).contains("onnect");
        if !refused || Instant::now() > deadline {
            break o;
        }
    };
    (s.wait_with_output().expect("server output"), c)
}

/// `tests/c/NAME.c`, a plain libibverbs program, compiled once per test binary
/// (`cc -O2 -Wall -Werror ... -libverbs -lpthread`) into the target's temporary folder;
/// None, with a SKIP line, where the machine has no C compiler or no
/// `<infiniband/verbs.h>`.
pub fn c_program(name: &str) -> Option<std::path::PathBuf> {
    use std::path::Path;
    if !Path::new("/usr/include/infiniband/verbs.h").exists() {
        eprintln!("SKIP: <infiniband/verbs.h> is missing (apt-get install libibverbs-dev)");
        return None;
    }
    if !have("cc") {
        eprintln!("SKIP: no C compiler (cc)");
        return None;
    }
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/c/{name}.c"));
    // Built under a name of this process's, then renamed over the shared one: a run of
    // another test binary may be executing the old one (it keeps its inode).
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let exe = dir.join(name);
    let tmp = dir.join(format!("{name}.{}", std::process::id()));
    let out = Command::new("cc")
        .args(["-O2", "-Wall", "-Werror", "-o"])
        .arg(&tmp)
        .arg(&src)
        .arg(format!(
            "-I{}/../../test-support/c",
            env!("CARGO_MANIFEST_DIR")
        ))
        .args(["-libverbs", "-lpthread"])
        .output()
        .expect("running cc");
    assert!(out.status.success(), "cc {}: {}", src.display(), text(&out));
    std::fs::rename(&tmp, &exe).unwrap();
    Some(exe)
}
