//! The mesh: `tests/c/mesh.c`, a plain libibverbs program, run unmodified under
//! `uroce run` by P processes on each side of a veth pair (side A in one network
//! namespace, side B in the other), each with Q RC QPs to Q different processes of the
//! other side: RDMA WRITE, RDMA READ and SEND every iteration, every byte checked.
//!
//! `uroce run` starts a `uroce daemon` per namespace for the interface, which every
//! process of that side shares (the shared datapath): 8 processes x 4 QPs per side
//! all-to-all, and a process killed with SIGKILL mid-transfer while the others finish.
//! Needs root, iproute2, a C compiler and
//! `<infiniband/verbs.h>`; says why and skips otherwise. `cargo build` first: `uroce run`
//! takes libibverbs.so.1 from next to the uroce binary.

mod common;

use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use uroce_tools::netns::{self, VethPair};

/// Why this machine cannot run the mesh, if it cannot.
fn cannot_run() -> Option<String> {
    if let Err(e) = netns::check_privileges() {
        return Some(format!("{e:#}"));
    }
    mesh_exe()
        .is_none()
        .then(|| "mesh.c cannot be compiled here (above)".into())
}

/// mesh.c, compiled once per test binary ([`common::c_program`]).
fn mesh_exe() -> Option<PathBuf> {
    common::c_program("mesh")
}

/// Which side of the mesh: A runs in the pair's first namespace, B in the second.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Side {
    A,
    B,
}

impl Side {
    fn index(self) -> usize {
        self as usize
    }
    fn name(self) -> &'static str {
        ["A", "B"][self.index()]
    }
}

/// One process of the mesh: its side, rank, child and where its output goes.
struct Proc {
    side: Side,
    rank: usize,
    child: Child,
    out: PathBuf,
    err: PathBuf,
    status: Option<ExitStatus>,
}

impl Proc {
    fn label(&self) -> String {
        format!("{}/{}", self.side.name(), self.rank)
    }
    fn stdout(&self) -> String {
        std::fs::read_to_string(&self.out).unwrap_or_default()
    }
    fn stderr(&self) -> String {
        std::fs::read_to_string(&self.err).unwrap_or_default()
    }
}

/// Every process's status, stdout and stderr, for a failure message.
fn report(procs: &[Proc]) -> String {
    let dir = procs
        .first()
        .map(|p| p.out.parent().unwrap().display().to_string());
    let head = format!(
        "(the run's files are left in {})\n",
        dir.unwrap_or_default()
    );
    head + &procs
        .iter()
        .map(|p| {
            format!(
                "--- {} ({}):\n{}{}",
                p.label(),
                p.status
                    .map_or("still running: killed".to_string(), |s| format!("{s}")),
                p.stdout(),
                p.stderr()
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// How long the whole mesh may take before its processes are killed and the test fails.
fn deadline(procs_per_side: usize, qps: usize, iters: usize) -> Duration {
    Duration::from_secs(30 + (procs_per_side * qps * iters / 200) as u64)
}

/// Runs the mesh: `procs_per_side` processes on each side, `qps` QPs each, `iters`
/// iterations per QP, over `backend` (`udp` or `xdp`). `die`: that process (side, rank)
/// SIGKILLs itself after that many iterations, and every process tolerates a dead peer.
/// Panics with every process's output unless each one exits 0 (the dying one: killed by
/// SIGKILL). Returns each process's stdout, side A's ranks first.
fn run_mesh(
    backend: &str,
    procs_per_side: usize,
    qps: usize,
    iters: usize,
    die: Option<(Side, usize, usize)>,
) -> Option<Vec<String>> {
    if let Some(why) = cannot_run() {
        eprintln!("SKIP: {why}");
        return None;
    }
    let pair = VethPair::create("mesh", 1500).expect("veth pair");
    Some(run_mesh_on(&pair, backend, procs_per_side, qps, iters, die))
}

/// The pids of the `uroce daemon`s running in namespace `ns`.
fn daemons_in(ns: &str) -> Vec<u32> {
    let o = Command::new("ip")
        .args(["netns", "pids", ns])
        .output()
        .unwrap();
    String::from_utf8_lossy(&o.stdout)
        .split_whitespace()
        .filter_map(|p| p.parse::<u32>().ok())
        .filter(|p| {
            std::fs::read(format!("/proc/{p}/cmdline"))
                .is_ok_and(|c| c.split(|&b| b == 0).any(|a| a == b"daemon"))
        })
        .collect()
}

/// [`run_mesh`] on a veth pair made already.
fn run_mesh_on(
    pair: &VethPair,
    backend: &str,
    procs_per_side: usize,
    qps: usize,
    iters: usize,
    die: Option<(Side, usize, usize)>,
) -> Vec<String> {
    let exe = mesh_exe().expect("cannot_run said it compiles");
    static SEQ: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let dir = std::env::temp_dir().join(format!(
        "uroce-mesh-{}-{}",
        std::process::id(),
        SEQ.fetch_add(1, std::sync::atomic::Ordering::SeqCst)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();

    let mut procs = Vec::new();
    // Side B first: the processes meet through files, so the order only spreads the start.
    for side in [Side::B, Side::A] {
        let i = side.index();
        for rank in 0..procs_per_side {
            let tag = format!("{}-{rank}", side.name());
            let (out, err) = (
                dir.join(format!("{tag}.out")),
                dir.join(format!("{tag}.err")),
            );
            let mut c = common::uroce_run(&pair.ns[i], &pair.ifaces[i], &["--backend", backend]);
            c.arg(&exe)
                .args(["--side", side.name(), "--rank", &rank.to_string()])
                .args(["--ranks", &procs_per_side.to_string()])
                .args(["--qps", &qps.to_string(), "--iters", &iters.to_string()])
                .arg("--dir")
                .arg(&dir)
                .args(["--timeout", "30"])
                .env("UROCE_BACKEND", backend)
                .stdin(Stdio::null())
                .stdout(std::fs::File::create(&out).unwrap())
                .stderr(std::fs::File::create(&err).unwrap());
            if let Some((s, r, after)) = die {
                c.arg("--tolerate-dead-peer");
                if (s, r) == (side, rank) {
                    c.args(["--die-after", &after.to_string()]);
                }
            }
            let child = c.spawn().expect("spawning ip netns exec uroce run mesh");
            procs.push(Proc {
                side,
                rank,
                child,
                out,
                err,
                status: None,
            });
        }
    }

    // Every child under one deadline: one that hangs is killed, and the test fails with
    // what every process said.
    // Once a process failed, the others get a few seconds to say what they saw (a peer
    // gone: retries exhausted), not their whole timeout.
    let limit = deadline(procs_per_side, qps, iters);
    let start = Instant::now();
    let mut failed_at: Option<Instant> = None;
    while procs.iter().any(|p| p.status.is_none()) {
        for p in procs.iter_mut().filter(|p| p.status.is_none()) {
            p.status = p.child.try_wait().expect("waiting for a mesh process");
            let dying = die.is_some_and(|(s, r, _)| (s, r) == (p.side, p.rank));
            if p.status.is_some_and(|s| !s.success()) && !dying && failed_at.is_none() {
                failed_at = Some(Instant::now());
            }
        }
        let late = failed_at.is_some_and(|t| t.elapsed() > Duration::from_secs(5));
        if start.elapsed() > limit || late {
            for p in procs.iter_mut().filter(|p| p.status.is_none()) {
                let _ = p.child.kill();
                let _ = p.child.wait();
            }
            let why = if late {
                "a process failed".to_string()
            } else {
                format!("it did not finish in {limit:?}")
            };
            panic!(
                "the mesh ({backend}, {procs_per_side} x {qps} QPs x {iters}) was stopped, {why}:\n{}",
                report(&procs)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }

    let what = format!("{backend}, {procs_per_side} processes per side x {qps} QPs x {iters}");
    for p in &procs {
        let status = p.status.unwrap();
        if die.is_some_and(|(s, r, _)| (s, r) == (p.side, p.rank)) {
            // SIGKILL itself (through `ip netns exec` and `uroce run`, which exec, it is
            // this child; a shell between would turn it into exit code 137).
            assert!(
                status.signal() == Some(libc::SIGKILL) || status.code() == Some(128 + 9),
                "{} should have died by SIGKILL ({what}): {status}\n{}",
                p.label(),
                report(&procs)
            );
            continue;
        }
        assert!(
            status.success(),
            "{} failed ({what}): {status}\n{}",
            p.label(),
            report(&procs)
        );
        // How many of this process's QPs talk to the dying process.
        let dead_qps = die.map_or(0, |(s, r, _)| {
            (0..qps)
                .filter(|j| {
                    let peer = if p.side == Side::A {
                        (p.rank + j) % procs_per_side
                    } else {
                        (p.rank + procs_per_side * qps - j) % procs_per_side
                    };
                    s != p.side && peer == r
                })
                .count()
        });
        let mut line = format!(
            "mesh {}/{}: {} qps x {iters} iters ok, ",
            p.side.name(),
            p.rank,
            qps - dead_qps
        );
        if dead_qps > 0 {
            line += &format!("{dead_qps} dead peer QP");
        }
        assert!(
            p.stdout().contains(&line),
            "{}: no '{line}' ({what}):\n{}",
            p.label(),
            report(&procs)
        );
    }
    let mut outs: Vec<_> = procs.iter().map(|p| (p.side, p.rank, p.stdout())).collect();
    outs.sort_by_key(|(s, r, _)| (s.index(), *r));
    for (_, _, o) in &outs {
        eprint!("{o}");
    }
    let _ = std::fs::remove_dir_all(&dir);
    outs.into_iter().map(|(_, _, o)| o).collect()
}

#[test]
fn mesh_one_process_per_side_udp() {
    run_mesh("udp", 1, 4, 500, None);
}

#[test]
fn mesh_one_process_per_side_xdp() {
    run_mesh("xdp", 1, 4, 500, None);
}

#[test]
fn mesh_eight_processes_per_side_udp() {
    run_mesh("udp", 8, 4, 100, None);
}

#[test]
fn mesh_eight_processes_per_side_xdp() {
    run_mesh("xdp", 8, 4, 100, None);
}

/// One process of side A is SIGKILLed mid-transfer; the four processes of side B it talked
/// to see that QP fail, report the peer dead and finish their other QPs; every other
/// process of side A finishes untouched.
#[test]
fn mesh_kill_9_one_process() {
    if let Some(why) = cannot_run() {
        eprintln!("SKIP: {why}");
        return;
    }
    let pair = VethPair::create("mesh", 1500).expect("veth pair");
    run_mesh_on(&pair, "udp", 4, 4, 200, Some((Side::A, 1, 20)));
    // The same daemons serve new processes after it (within their linger).
    let before = [daemons_in(&pair.ns[0]), daemons_in(&pair.ns[1])];
    assert!(
        before.iter().all(|d| d.len() == 1),
        "one daemon per side: {before:?}"
    );
    run_mesh_on(&pair, "udp", 2, 2, 50, None);
    let after = [daemons_in(&pair.ns[0]), daemons_in(&pair.ns[1])];
    assert_eq!(
        before, after,
        "the daemons that saw the kill served the next mesh"
    );
}

/// The same with one process per side, which runs today: side A's only process dies
/// after 20 iterations, and side B's, all four of whose QPs lose their peer, reports each
/// as dead and exits 0.
#[test]
fn mesh_kill_9_one_process_per_side() {
    run_mesh("udp", 1, 4, 500, Some((Side::A, 0, 20)));
}
