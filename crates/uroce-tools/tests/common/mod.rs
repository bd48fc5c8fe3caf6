//! Helpers shared by the tests that run uroce and the distro's unmodified tools (perftest,
//! ibverbs-utils, rdmacm-utils) in network namespaces: whether the machine can run them,
//! `uroce` (`uroce run`, `uroce daemon --check` under it) in a namespace, a server in one namespace
//! and its client in the other, and a child's output (`text`, from
//! `test-support/cdylib.rs`, as the drop-in libraries' tests have it). Each test binary
//! compiles its own copy (`mod common;`), using what it needs of it.
#![allow(dead_code, unused_imports)]

#[path = "../../../../test-support/cdylib.rs"]
pub mod cdylib;

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

pub use cdylib::{have, text};
use uroce_tools::netns::{self, VethPair};

/// `uroce ARGS` in network namespace `ns` (through `ip netns exec`, which execs it).
pub fn uroce_in(ns: &str, args: &[&str]) -> Command {
    uroce_in_with(Path::new(env!("CARGO_BIN_EXE_uroce")), ns, args)
}

/// [`uroce_in`] with the uroce binary at `bin` (a copy of the built one, say).
fn uroce_in_with(bin: &Path, ns: &str, args: &[&str]) -> Command {
    let mut c = Command::new("ip");
    c.args(["netns", "exec", ns]).arg(bin).args(args);
    c
}

/// `uroce run --iface IFACE OPTIONS --` in network namespace `ns`: the caller appends the
/// program and its arguments.
pub fn uroce_run(ns: &str, iface: &str, options: &[&str]) -> Command {
    uroce_run_with(Path::new(env!("CARGO_BIN_EXE_uroce")), ns, iface, options)
}

/// [`uroce_run`] with the uroce binary at `bin`.
pub fn uroce_run_with(bin: &Path, ns: &str, iface: &str, options: &[&str]) -> Command {
    let mut c = uroce_in_with(bin, ns, &["run", "--iface", iface]);
    c.args(options).arg("--");
    c
}

/// The start of a command line that runs `uroce daemon --check --iface IFACE` and then
/// execs the rest of the line (the program and its arguments, appended after these):
/// the check fails (and the line with it, exit status 97, before the program starts)
/// unless a daemon serves the interface, else says on stdout how it attached (`...
/// (AF_XDP)`, `... (UDP)`, `... (UDP, fast path: ...)`). As the program of `uroce run`
/// it asks of the daemon `uroce run` made sure of for the program, while the program
/// runs on it, not of one lingering after it left.
pub fn daemon_check_then(iface: &str) -> [&str; 6] {
    const SCRIPT: &str =
        "u=$1 i=$2; shift 2; \"$u\" daemon --check --iface \"$i\" || exit 97; exec \"$@\"";
    ["sh", "-c", SCRIPT, "sh", env!("CARGO_BIN_EXE_uroce"), iface]
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
/// (`cc -O2 -Wall -Werror ... -libverbs -lpthread`, with `test-support/c` on the include
/// path) into the target's temporary folder; None, with a SKIP line, where the machine
/// has no C compiler or no `<infiniband/verbs.h>`.
pub fn c_program(name: &str) -> Option<std::path::PathBuf> {
    use std::collections::HashMap;
    use std::path::PathBuf;
    use std::sync::Mutex;
    if !Path::new("/usr/include/infiniband/verbs.h").exists() {
        eprintln!("SKIP: <infiniband/verbs.h> is missing (apt-get install libibverbs-dev)");
        return None;
    }
    if !have("cc") {
        eprintln!("SKIP: no C compiler (cc)");
        return None;
    }
    // Held while one compiles: the test binary's other threads wait for it.
    static BUILT: Mutex<Option<HashMap<String, PathBuf>>> = Mutex::new(None);
    let mut built = BUILT.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(exe) = built.get_or_insert_with(HashMap::new).get(name) {
        return Some(exe.clone());
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
    built
        .get_or_insert_with(HashMap::new)
        .insert(name.into(), exe.clone());
    Some(exe)
}
