//! NCCL's own RDMA transport on uroce: the built-in `ncclNetIb` plugin of the real
//! `libnccl.so.2` (PyPI's nvidia-nccl-cu13 wheel), driven without a GPU by
//! scripts/nccl-net/harness.c (built here with gcc), between two namespaces joined by a
//! veth pair, each side under `uroce run` over AF_XDP and over the UDP backend; and
//! `ncclNetSocket` over kernel TCP on the same veth. Each side sends and receives 512 KiB
//! messages, several in flight each way at once, and checks every byte it receives; over
//! the UDP backend also with each message split over four QPs, over AF_XDP also with
//! receives of eight buffers each.
//! Without root, gcc, or the library (scripts/nccl-net/fetch.sh, called here when its cache
//! is empty, says why it cannot have it) the test says why and skips.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use uroce_tools::netns;

const SIZE: usize = 512 * 1024;
const COUNT: usize = 96;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// libnccl.so.2: `$NCCL_NET_LIB`, else what fetch.sh has or fetches; `Err` says why not.
fn library() -> Result<PathBuf, String> {
    if let Some(p) = std::env::var_os("NCCL_NET_LIB") {
        return Ok(PathBuf::from(p));
    }
    let out = Command::new(repo().join("scripts/nccl-net/fetch.sh"))
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("running scripts/nccl-net/fetch.sh: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    match out.status.code() {
        Some(0) => Ok(PathBuf::from(text.lines().last().unwrap_or("").trim())),
        Some(2) => Err("scripts/nccl-net/fetch.sh cannot have libnccl.so.2 here".into()),
        _ => panic!("scripts/nccl-net/fetch.sh failed: {:?} {text}", out.status),
    }
}

/// The harness built from scripts/nccl-net/harness.c into a directory of its own.
fn build_harness(dir: &Path) -> Result<PathBuf, String> {
    let exe = dir.join("nccl-net-harness");
    let out = Command::new("gcc")
        .args(["-O2", "-Wall", "-Werror", "-o"])
        .arg(&exe)
        .arg(repo().join("scripts/nccl-net/harness.c"))
        .arg("-ldl")
        .output()
        .map_err(|e| format!("no gcc to build the harness: {e}"))?;
    assert!(
        out.status.success(),
        "gcc: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(exe)
}

/// A directory holding only a `libibverbs.so.1` link to the built library (as an install
/// of the library might be), for `UROCE_LIBDIR`.
fn lone_soname_dir(work: &Path) -> PathBuf {
    let bin = Path::new(env!("CARGO_BIN_EXE_uroce")).parent().unwrap();
    let built = [bin.join("libibverbs.so"), bin.join("deps/libibverbs.so")]
        .into_iter()
        .find(|p| p.exists())
        .expect("no built libibverbs.so next to the uroce binary or in deps/");
    let dir = work.join("lib");
    std::fs::create_dir_all(&dir).unwrap();
    let link = dir.join("libibverbs.so.1");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(built, &link).unwrap();
    dir
}

/// One side: the harness in namespace `i` of `pair`, under `uroce run` for `backend`
/// (`None`: ncclNetSocket over kernel TCP, no uroce).
fn side(
    pair: &netns::VethPair,
    i: usize,
    backend: Option<&str>,
    harness: &Path,
    lib: &Path,
    libdir: &Path,
    dir: &Path,
) -> Command {
    let iface = &pair.ifaces[i];
    let mut c = match backend {
        Some(b) => {
            let mut c = common::uroce_run(&pair.ns[i], iface, &["--backend", b]);
            // The device uroce makes of this side's veth (exactly that name). `uroce run`
            // sets NCCL_IBVERBS_LIB; `UROCE_LIBDIR` (a directory holding only the `.so.1`
            // link, where NCCL's first choice `libibverbs.so` would be the distribution's)
            // checks it does.
            c.env("NCCL_IB_HCA", format!("=uroce_{iface}"))
                .env("UROCE_LIBDIR", libdir)
                .env_remove("NCCL_IBVERBS_LIB")
                // cargo's, which holds the built `libibverbs.so` and would hide the question.
                .env_remove("LD_LIBRARY_PATH");
            c
        }
        None => {
            let mut c = Command::new("ip");
            c.args(["netns", "exec", &pair.ns[i]]);
            c
        }
    };
    c.arg(harness)
        .arg("--lib")
        .arg(lib)
        .args(["--net", if backend.is_some() { "ib" } else { "socket" }])
        .args(["--role", ["a", "b"][i], "--dir"])
        .arg(dir)
        .args(["--size", &SIZE.to_string(), "--count", &COUNT.to_string()])
        .args(["--inflight", "8", "--timeout", "40"])
        // NCCL's connection set-up (out of band) and ncclNetSocket take this interface.
        .env("NCCL_SOCKET_IFNAME", iface)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c
}

/// Runs both sides; `None` when AF_XDP cannot be set up here (printed as a skip).
fn run_pair(
    pair: &netns::VethPair,
    backend: Option<&str>,
    env: &[(&str, &str)],
    args: &[&str],
    harness: &Path,
    lib: &Path,
    libdir: &Path,
) -> Option<[Output; 2]> {
    let dir = std::env::temp_dir().join(format!(
        "uroce-nccl-net-{}-{}-{}",
        std::process::id(),
        backend.unwrap_or("tcp"),
        env.len() + args.len()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let b = side(pair, 1, backend, harness, lib, libdir, &dir)
        .envs(env.iter().copied())
        .args(args)
        .spawn()
        .unwrap();
    let a = side(pair, 0, backend, harness, lib, libdir, &dir)
        .envs(env.iter().copied())
        .args(args)
        .output()
        .unwrap();
    let b = b.wait_with_output().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let err = |o: &Output| String::from_utf8_lossy(&o.stderr).into_owned();
    if backend == Some("xdp")
        && [&a, &b]
            .iter()
            .any(|o| !o.status.success() && err(o).contains("AF_XDP"))
    {
        eprintln!(
            "SKIP: AF_XDP cannot be set up here: {} {}",
            err(&a),
            err(&b)
        );
        return None;
    }
    Some([a, b])
}

/// Checks one side's report; returns its GB/s per direction.
fn check(who: &str, net: &str, dev: &str, o: &Output) -> f64 {
    let out = String::from_utf8_lossy(&o.stdout);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{who}: {:?}\n{out}\n{err}", o.status);
    let line = out
        .lines()
        .find(|l| l.starts_with("nccl-net: net="))
        .unwrap_or_else(|| panic!("{who}: no report\n{out}\n{err}"));
    let want = format!(
        "net={net} dev={dev} role={} sent {COUNT} x {SIZE} B, received {COUNT} x {SIZE} B, every byte checked",
        &who[who.len() - 1..]
    );
    assert!(line.contains(&want), "{who}: {line}\nwanted: {want}\n{err}");
    assert!(line.ends_with(": OK"), "{who}: {line}");
    line.split(" GB/s")
        .next()
        .and_then(|h| h.rsplit(' ').next())
        .and_then(|g| g.parse().ok())
        .unwrap_or_else(|| panic!("{who}: no GB/s in {line}"))
}

#[test]
fn nccl_net_ib_over_uroce_and_net_socket_over_tcp() {
    if let Err(why) = netns::check_privileges() {
        eprintln!("SKIP: {why}");
        return;
    }
    let lib = match library() {
        Ok(l) => l,
        Err(why) => {
            eprintln!("SKIP: {why}");
            return;
        }
    };
    let work = std::env::temp_dir().join(format!("uroce-nccl-harness-{}", std::process::id()));
    std::fs::create_dir_all(&work).unwrap();
    let harness = match build_harness(&work) {
        Ok(h) => h,
        Err(why) => {
            eprintln!("SKIP: {why}");
            return;
        }
    };
    let libdir = lone_soname_dir(&work);
    let pair = netns::VethPair::create("nccl", 9000).unwrap();
    let mut ran = Vec::new();
    // NCCL's defaults (one QP a connection), then each message split over four QPs, as
    // clusters that spread flows over paths set it.
    let four_qps: &[(&str, &str)] = &[
        ("NCCL_IB_QPS_PER_CONNECTION", "4"),
        ("NCCL_IB_SPLIT_DATA_ON_QPS", "1"),
        ("NCCL_DEBUG", "INFO"),
        ("NCCL_DEBUG_SUBSYS", "NET"),
    ];
    // And receives of eight buffers each (NCCL's grouped point-to-point: one irecv of 8,
    // the sender's 8 isends go out as one chain of work requests).
    let none: &[(&str, &str)] = &[];
    for (backend, env, args) in [
        (Some("xdp"), none, &[][..]),
        (Some("udp"), none, &[][..]),
        (Some("udp"), four_qps, &[][..]),
        (Some("xdp"), none, &["--group", "8"][..]),
        (None, none, &[][..]),
    ] {
        let Some([a, b]) = run_pair(&pair, backend, env, args, &harness, &lib, &libdir) else {
            continue;
        };
        for (i, o) in [(0, &a), (1, &b)] {
            let who = format!(
                "{}{}{} side {}",
                backend.unwrap_or("tcp"),
                if env.is_empty() { "" } else { " 4 QPs" },
                if args.is_empty() { "" } else { " grouped by 8" },
                ["a", "b"][i]
            );
            let (net, dev) = match backend {
                Some(_) => ("IB", format!("uroce_{}", pair.ifaces[i])),
                None => ("Socket", pair.ifaces[i].clone()),
            };
            let gbs = check(&who, net, &dev, o);
            let group = if args.is_empty() {
                "group 1,"
            } else {
                "group 8,"
            };
            let out = String::from_utf8_lossy(&o.stdout);
            assert!(out.contains(group), "{who}: {out}");
            if !env.is_empty() {
                // NCCL's log (on stdout): four sending and four receiving QPs on this side.
                let err = String::from_utf8_lossy(&o.stdout);
                for end in ["ncclIbSenderQpsCreate", "ncclIbReceiverQpsCreateToRts"] {
                    let n = err
                        .lines()
                        .filter(|l| l.contains(end) && l.contains("QP created"))
                        .count();
                    assert_eq!(n, 4, "{who}: {n} QPs from {end}\n{err}");
                }
            }
            eprintln!("{who}: {gbs:.3} GB/s per direction");
        }
        ran.push(backend.unwrap_or("tcp"));
    }
    // AF_XDP may be impossible here (said above); the UDP backend and TCP always run.
    assert!(
        ran.contains(&"udp") && ran.contains(&"tcp"),
        "ran only {ran:?}"
    );

    // Two IPv4 addresses on each interface, no NCCL_IB_GID_INDEX: NCCL then chooses its
    // GID by reading /sys/class/infiniband/<dev>/ports/1/gid_attrs/types/<i> (which
    // `uroce run` lays out); without those files its init failed ("open failed in
    // ncclIbRoceGetVersionNum: No such file or directory").
    for i in 0..2 {
        let [a, b, c, d] = pair.addrs[i].octets();
        let second = format!("{a}.{b}.{c}.{}/24", d.wrapping_add(100));
        let st = std::process::Command::new("ip")
            .args([
                "-n",
                &pair.ns[i],
                "addr",
                "add",
                &second,
                "dev",
                &pair.ifaces[i],
            ])
            .status()
            .unwrap();
        assert!(st.success(), "adding {second}");
    }
    let [a, b] = run_pair(&pair, Some("udp"), none, &[], &harness, &lib, &libdir).unwrap();
    for (i, o) in [(0, &a), (1, &b)] {
        let who = format!("udp, two IPv4 addresses, side {}", ["a", "b"][i]);
        let gbs = check(&who, "IB", &format!("uroce_{}", pair.ifaces[i]), o);
        eprintln!("{who}: {gbs:.3} GB/s per direction");
    }

    // The checks catch damage: side b flips one byte of its message 5; side a must fail
    // on it, naming the message, and side b must stop too rather than hang.
    let dir = work.join("corrupt");
    std::fs::create_dir_all(&dir).unwrap();
    let b = side(&pair, 1, None, &harness, &lib, &libdir, &dir)
        .env("NCCL_NET_HARNESS_CORRUPT", "5")
        .spawn()
        .unwrap();
    let a = side(&pair, 0, None, &harness, &lib, &libdir, &dir)
        .output()
        .unwrap();
    let b = b.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&a.stderr);
    assert!(!a.status.success(), "damage not seen: {err}");
    assert!(err.contains("message 5 byte 524280: got"), "{err}");
    assert!(!b.status.success(), "side b did not stop");
    let _ = std::fs::remove_dir_all(&work);
}
