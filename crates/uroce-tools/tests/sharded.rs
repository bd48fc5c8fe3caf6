//! The sharded engine (`UROCE_SHARDS=N`, crates/uroce-verbs/src/engine.rs): a process's
//! device in direct mode over the UDP backend split into N sans-IO contexts, each with its
//! own socket of one SO_REUSEPORT group (steered by destination QPN), its own lock and its
//! own progress thread; data QPs placed round-robin on shards 1..N-1, QP 1 and the QPs of
//! an SRQ on shard 0, regions and CQs mirrored to every shard.
//!
//! The distro's unmodified perftest (`ib_write_bw -q 4`, `ib_send_lat`, `ib_write_lat`)
//! and ibverbs-utils (`ibv_rc_pingpong`, `ibv_ud_pingpong`) between two network
//! namespaces over a veth pair, server and client each under
//! `uroce run --backend udp --no-daemon` (`UROCE_BACKEND=udp`: direct mode, no daemon)
//! with `UROCE_SHARDS=3`: every one completes at both ends; while `ib_write_bw -q 4`
//! runs, the server has more than one uroce progress thread; and a bad `UROCE_SHARDS`
//! makes a program fail at once, not hang. `tests/c/threads.c` runs four threads posting
//! and polling at once on QPs of both data shards, also sleeping on their CQs' channels,
//! two threads to a CQ, and over UD. Through a `uroce daemon` (over UDP,
//! `uroce run`'s), each shard attaches as a process of its own: `threads.c` and
//! `ib_write_bw -q 4` find each data shard's QPs in a daemon class of its own. Nothing here is timed (DESIGN.md: never a timed
//! test). Root, iproute2, perftest and ibverbs-utils (scripts/setup.sh installs them);
//! each case says why and skips otherwise. `cargo build` first: `uroce run` takes the
//! libraries from next to the uroce binary.

mod common;

use std::collections::BTreeSet;
use std::process::{Command, Output};

use common::{across, across_watching, can_run, text};
use uroce_tools::netns::VethPair;

/// The shards every case but the bad-value one asks for: shard 0 and two data shards,
/// so that four QPs land two on each.
const SHARDS: &str = "3";

/// `uroce run --iface IF --backend udp --no-daemon -- timeout -k 5 SECS ARGS` on side `i`
/// of `pair`, with `UROCE_SHARDS=shards`.
fn direct(pair: &VethPair, i: usize, shards: &str, secs: u32, args: &[&str]) -> Command {
    let udp = ["--backend", "udp", "--no-daemon"];
    let mut c = common::uroce_run(&pair.ns[i], &pair.ifaces[i], &udp);
    c.args(["timeout", "-k", "5", &secs.to_string()])
        .args(args)
        .env("UROCE_SHARDS", shards);
    c
}

/// `uroce run --iface IF --backend BACKEND --shards SHARDS -- uroce daemon --check ...;
/// timeout -k 5 SECS ARGS` on side `i` of `pair`: through the `uroce daemon` that `uroce
/// run` starts on `backend` (`udp`, `xdp`), which the program's output says it attached
/// to ([`common::daemon_check_then`]).
fn through_daemon(
    pair: &VethPair,
    i: usize,
    (backend, shards): (&str, &str),
    secs: u32,
    args: &[&str],
) -> Command {
    let options = ["--backend", backend, "--shards", shards];
    let mut c = common::uroce_run(&pair.ns[i], &pair.ifaces[i], &options);
    c.args(common::daemon_check_then(&pair.ifaces[i]))
        .args(["timeout", "-k", "5", &secs.to_string()])
        .args(args);
    c
}

/// The daemon's class of a QPN (`uroce::datapath::udp::bind_classes`: its socket of the
/// reuseport group, `QPN >> 18`).
fn daemon_class(qpn: u32) -> u32 {
    qpn >> 18
}

/// `args` as server on the pair's first side and client on its second, both sharded
/// ([`SHARDS`]); panics with both outputs unless both exit 0.
fn sharded(pair: &VethPair, args: &[&str]) -> (Output, Output) {
    let (s, c) = across(pair, |i, a| direct(pair, i, SHARDS, 60, a), args);
    check_both(args, &s, &c);
    (s, c)
}

fn check_both(args: &[&str], s: &Output, c: &Output) {
    assert!(
        s.status.success() && c.status.success(),
        "UROCE_SHARDS={SHARDS} {}\n-- server:\n{}\n-- client:\n{}",
        args.join(" "),
        text(s),
        text(c)
    );
}

/// perftest's bandwidth row of `o` for messages of `size` bytes: its average Gb/s.
fn bw_row(o: &Output, size: &str) -> Option<f64> {
    let out = String::from_utf8_lossy(&o.stdout);
    let row = out
        .lines()
        .find(|l| l.split_whitespace().next() == Some(size))?;
    row.split_whitespace().nth(3)?.parse().ok()
}

/// `ib_write_bw` over four QPs, 2000 64 KiB WRITEs each (as client, the server's address
/// appended).
const WRITE_BW_4_QPS: [&str; 10] = [
    "ib_write_bw",
    "-x",
    "1",
    "-F",
    "-q",
    "4",
    "-n",
    "2000",
    "-s",
    "65536",
];

/// `ib_write_bw` over four QPs (two on each data shard), a few thousand 64 KiB WRITEs each:
/// both ends exit 0 and print their bandwidth row.
#[test]
fn ib_write_bw_over_four_qps_on_three_shards() {
    if !can_run(&["ib_write_bw"]) {
        return;
    }
    let pair = VethPair::create("shw", 1500).unwrap();
    let args = WRITE_BW_4_QPS;
    let (s, c) = sharded(&pair, &args);
    for (who, o) in [("server", &s), ("client", &c)] {
        let avg =
            bw_row(o, "65536").unwrap_or_else(|| panic!("{who}: no bandwidth row: {}", text(o)));
        assert!(avg > 0.0, "{who}: {}", text(o));
    }
}

/// `tool` (a perftest latency test, 8-byte messages) for a few hundred iterations: both
/// ends exit 0 and print their result row.
fn latency(tool: &str, tag: &str) {
    if !can_run(&[tool]) {
        return;
    }
    let pair = VethPair::create(tag, 1500).unwrap();
    let args = [tool, "-x", "1", "-F", "-n", "300", "-s", "8"];
    let (s, c) = sharded(&pair, &args);
    for o in [&s, &c] {
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(
            out.lines()
                .any(|l| l.split_whitespace().take(2).eq(["8", "300"])),
            "{tool}: no result row: {}",
            text(o)
        );
    }
}

#[test]
fn ib_send_lat_on_three_shards() {
    latency("ib_send_lat", "shs");
}

/// Each side spins on memory for the peer's WRITE, polling no CQ: only the progress
/// thread of the QP's shard moves it.
#[test]
fn ib_write_lat_on_three_shards() {
    latency("ib_write_lat", "shl");
}

/// `ibv_rc_pingpong` (polling, and waiting on a completion channel), `ibv_ud_pingpong`
/// and `ibv_srq_pingpong` (`-c`: each checks the data it receives; the SRQ's QPs on
/// shard 0).
#[test]
fn rc_and_ud_pingpong_on_three_shards() {
    if !can_run(&["ibv_rc_pingpong"]) {
        return;
    }
    let pair = VethPair::create("shp", 1500).unwrap();
    // `-e`: completions through a completion channel, so an event fired by one shard's
    // copy of the CQ must reach the program (and disarm the other copies).
    let mut cases: Vec<&[&str]> = vec![
        &["ibv_rc_pingpong", "-g", "1", "-n", "200", "-c"],
        &["ibv_rc_pingpong", "-g", "1", "-n", "200", "-c", "-e"],
    ];
    if common::have("ibv_ud_pingpong") {
        cases.push(&[
            "ibv_ud_pingpong",
            "-g",
            "1",
            "-s",
            "1024",
            "-n",
            "200",
            "-c",
        ]);
    } else {
        eprintln!("SKIP (part): ibv_ud_pingpong is not installed");
    }
    let srq: &[&str] = &["ibv_srq_pingpong", "-g", "1", "-n", "200", "-c"];
    if common::have("ibv_srq_pingpong") {
        cases.push(srq);
    } else {
        eprintln!("SKIP (part): ibv_srq_pingpong is not installed");
    }
    for args in cases {
        let (s, c) = sharded(&pair, args);
        for o in [&s, &c] {
            assert!(
                String::from_utf8_lossy(&o.stdout).contains("200 iters in"),
                "{}: {}",
                args[0],
                text(o)
            );
        }
        if args == srq {
            // QPs on an SRQ stay on shard 0: their QPNs are of its socket's class,
            // DestQP mod 3 = 1 (QP 1's).
            for o in [&s, &c] {
                let qpns = local_qpns(o);
                assert!(!qpns.is_empty(), "{}", text(o));
                assert!(qpns.iter().all(|q| q % 3 == 1), "{qpns:x?}: {}", text(o));
            }
        }
    }
}

/// `tests/c/threads.c` in one namespace, one process, with `UROCE_SHARDS=shards`, over
/// `threads` threads (each with its own CQ and two RC QPs connected to each other) and
/// `extra` arguments, in direct mode or (`daemon`: its backend) through the `uroce daemon`
/// that `uroce run` starts: its output, once it exited 0 having checked every byte, and
/// each thread's two QPNs.
fn threads_qpns(
    tag: &str,
    shards: &str,
    threads: usize,
    extra: &[&str],
    daemon: Option<&str>,
) -> Option<(String, Vec<(u32, u32)>)> {
    if !can_run(&[]) {
        return None;
    }
    let exe = common::c_program("threads")?;
    let pair = VethPair::create(tag, 1500).unwrap();
    let n = threads.to_string();
    let mut args = vec![exe.to_str().unwrap(), "--threads", &n, "--iters", "2000"];
    args.extend(extra);
    let mut run = match daemon {
        Some(backend) => through_daemon(&pair, 0, (backend, shards), 120, &args),
        None => direct(&pair, 0, shards, 120, &args),
    };
    let o = run.output().unwrap();
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    let done = format!("threads: {threads} x 2000 ok");
    assert!(o.status.success() && out.contains(&done), "{}", text(&o));
    // "thread T: QPN A 0x.. B 0x..".
    let qpns: Vec<(u32, u32)> = out
        .lines()
        .filter_map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            let qpn = |s: &str| u32::from_str_radix(s.trim_start_matches("0x"), 16).ok();
            Some((qpn(w.get(4)?)?, qpn(w.get(6)?)?))
        })
        .collect();
    assert_eq!(qpns.len(), threads, "{}", text(&o));
    Some((out, qpns))
}

/// [`threads_qpns`] in direct mode, with each QPN modulo 3 (its class: shard 0's is 1,
/// the data shards' 2 and 0).
fn threads(
    tag: &str,
    shards: &str,
    threads: usize,
    extra: &[&str],
) -> Option<(String, Vec<(u32, u32)>)> {
    let (out, qpns) = threads_qpns(tag, shards, threads, extra, None)?;
    Some((out, qpns.into_iter().map(|(a, b)| (a % 3, b % 3)).collect()))
}

/// Four threads post and poll at once (inline SENDs, 4 KiB RDMA WRITEs with immediate,
/// every byte checked) on `UROCE_SHARDS=3`. Each thread's QPs are one on each data shard
/// (their QPNs in the two data classes), so the threads' posts and polls run on both
/// shards side by side, without the device's lock, and their inline data is staged in
/// each shard's own slot (a slot shared by two shards garbles messages here).
#[test]
fn threads_post_and_poll_side_by_side_on_two_shards() {
    let Some((out, classes)) = threads("sht", SHARDS, 4, &[]) else {
        return;
    };
    for (a, b) in classes {
        assert!(a != b && a != 1 && b != 1, "{out}");
    }
}

/// Each thread's CQ is fed by both data shards (its QP A on one, B on the other), and
/// the thread polls it only after its event (`--events`: armed before the posts and
/// again after each event, then polled empty; a wait lasts up to the iteration's 30 s):
/// an event lost between the shards' copies of the CQ leaves a thread stuck, and the run
/// fails (tried: with the shards' events dropped, it does).
#[test]
fn threads_sleep_on_cqs_that_two_shards_feed() {
    let Some((out, classes)) = threads("she", SHARDS, 4, &["--events"]) else {
        return;
    };
    for (a, b) in classes {
        assert!(a != b && a != 1 && b != 1, "{out}");
    }
}

/// Two threads share each CQ (`--share-cq`), both polling it and sleeping on its
/// channel, each handling whatever completion it takes for either thread (posting the
/// other's answer too): the CQ's copies in the two data shards are polled by two threads
/// at once, every byte still checks, and some completions were taken by the thread
/// whose they were not.
#[test]
fn two_threads_poll_one_cq_that_two_shards_feed() {
    let Some((out, classes)) = threads("shc", SHARDS, 4, &["--share-cq", "--events"]) else {
        return;
    };
    let cross: u64 = out
        .lines()
        .find_map(|l| l.strip_prefix("cross-handled ")?.trim().parse().ok())
        .unwrap_or_else(|| panic!("no cross-handled count: {out}"));
    assert!(cross > 0, "{out}");
    for (a, b) in classes {
        assert!(a != b && a != 1 && b != 1, "{out}");
    }
}

/// UD (`--ud`): four threads' UD QPs, one on each data shard, send inline and 1000-byte
/// SENDs through address handles (found in the shards' route table, without the
/// device's lock) and answer, every byte checked after its GRH.
#[test]
fn threads_send_ud_side_by_side_on_two_shards() {
    let Some((out, classes)) = threads("shu", SHARDS, 4, &["--ud", "--size", "1000"]) else {
        return;
    };
    for (a, b) in classes {
        assert!(a != b && a != 1 && b != 1, "{out}");
    }
}

/// Through a `uroce daemon` (over UDP, `uroce run`'s own), each engine of a sharded
/// process attaches as a process of its own: its own rings and socket of the daemon's
/// reuseport group, its QPs numbered in that socket's class. Four threads post and poll
/// on their two QPs, connected to each other, every byte checked: each thread's QPs are
/// one on each data shard, so their QPNs are in two different classes, the same two for
/// every thread (one engine would number all in its one class), and the datagrams
/// between them go from one shard's socket to the other's through the kernel.
#[test]
fn threads_through_a_daemon_run_on_shards_of_their_own_classes() {
    let Some((out, qpns)) = threads_qpns("shd", SHARDS, 4, &[], Some("udp")) else {
        return;
    };
    assert!(
        out.contains("attached to uroce daemon for") && out.contains("fast path"),
        "{out}"
    );
    on_two_engines(&qpns, daemon_class, &out);
}

/// Through a `uroce daemon` on AF_XDP (no fast path: every packet in the rings), each
/// engine is a client of the daemon of its own, with QPNs from blocks of its own (64 at a
/// time), and the datagrams between the two data shards' QPs go through the daemon's
/// switch (its local delivery between clients): every byte checks, and each thread's QPs
/// are in two blocks, the same two for every thread.
#[test]
fn threads_through_an_af_xdp_daemon_run_on_shards_of_their_own() {
    let Some((out, qpns)) = threads_qpns("shx", SHARDS, 4, &[], Some("xdp")) else {
        return;
    };
    assert!(out.contains("(AF_XDP)"), "{out}");
    let block = |q: u32| q / uroce::datapath::daemon::proto::QPN_BLOCK;
    on_two_engines(&qpns, block, &out);
}

/// Each thread's two QPNs (`qpns`) are of two different engines, and all of the same
/// two, as `engine_of` tells a QPN's engine (its daemon class or block); `out` is what
/// the program printed.
fn on_two_engines(qpns: &[(u32, u32)], engine_of: impl Fn(u32) -> u32, out: &str) {
    let engines: BTreeSet<u32> = qpns
        .iter()
        .flat_map(|&(a, b)| [engine_of(a), engine_of(b)])
        .collect();
    assert_eq!(engines.len(), 2, "{out}");
    for &(a, b) in qpns {
        assert_ne!(engine_of(a), engine_of(b), "{out}");
    }
}

/// `ib_write_bw -q 4` between two namespaces, each end sharded through its own `uroce
/// daemon` over UDP: both ends finish, and each end's four QPs are two on each data
/// shard, in two classes of its daemon.
#[test]
fn ib_write_bw_through_daemons_on_three_shards() {
    if !can_run(&["ib_write_bw"]) {
        return;
    }
    let pair = VethPair::create("shb", 1500).unwrap();
    let args = WRITE_BW_4_QPS;
    let (s, c) = across(
        &pair,
        |i, a| through_daemon(&pair, i, ("udp", SHARDS), 60, a),
        &args,
    );
    check_both(&args, &s, &c);
    for (who, o) in [("server", &s), ("client", &c)] {
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(out.contains("fast path"), "{who}: {}", text(o));
        // `uroce run --shards` says how the engines attach.
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            err.contains("engines attaches to the daemon as a process of its own"),
            "{who}: {}",
            text(o)
        );
        assert!(bw_row(o, "65536").is_some(), "{who}: {}", text(o));
        let qpns = perftest_local_qpns(o);
        assert_eq!(qpns.len(), 4, "{who}: {}", text(o));
        let classes: BTreeSet<u32> = qpns.iter().map(|&q| daemon_class(q)).collect();
        assert_eq!(classes.len(), 2, "{who}: {}", text(o));
    }
}

/// The QPNs perftest prints for its own QPs (" local address: LID .. QPN 0x.. PSN ..").
fn perftest_local_qpns(o: &Output) -> Vec<u32> {
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter(|l| l.trim_start().starts_with("local address"))
        .filter_map(|l| {
            let hex = l.split("QPN 0x").nth(1)?.split_whitespace().next()?;
            u32::from_str_radix(hex, 16).ok()
        })
        .collect()
}

/// Memory windows with shards: `ibv_alloc_mw` once QPs live on the data shards is
/// EOPNOTSUPP (windows are not mirrored, DESIGN.md "Engine shards"), and the QPs go on
/// working; a window allocated first keeps every later QP on shard 0 (class 1), where the
/// same traffic runs (its CQs polled under the device's lock). With one engine both
/// allocations succeed.
#[test]
fn memory_windows_keep_a_device_on_shard_0() {
    let Some((out, _)) = threads("shm", SHARDS, 2, &["--mw-after"]) else {
        return;
    };
    assert!(
        out.contains("ibv_alloc_mw: Operation not supported"),
        "{out}"
    );
    let (out, classes) = threads("shm", SHARDS, 2, &["--mw-first"]).unwrap();
    assert!(out.contains("ibv_alloc_mw: ok"), "{out}");
    assert!(classes.iter().all(|&c| c == (1, 1)), "{out}");
    let (out, _) = threads("shm", "1", 2, &["--mw-after"]).unwrap();
    assert!(out.contains("ibv_alloc_mw: ok"), "{out}");
}

/// The QPNs an rdma-core example prints for its own QPs ("local address: ..., QPN
/// 0x..., ...").
fn local_qpns(o: &Output) -> Vec<u32> {
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter(|l| l.contains("local address"))
        .filter_map(|l| {
            let hex = l.split("QPN 0x").nth(1)?.split(',').next()?;
            u32::from_str_radix(hex.trim(), 16).ok()
        })
        .collect()
}

/// The `uroce` threads (progress threads: `uroce-<iface>` unsharded, one per shard
/// sharded) of process `pid` and of every process under it (`uroce run` execs the
/// program under `timeout`, which forks it): each as "PID/TID name".
fn uroce_threads(pid: u32) -> BTreeSet<String> {
    let mut tree = vec![pid];
    let mut k = 0;
    while k < tree.len() {
        tree.extend(children(tree[k]));
        k += 1;
    }
    let mut names = BTreeSet::new();
    for p in tree {
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{p}/task")) else {
            continue;
        };
        for t in tasks.flatten() {
            let comm = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
            if comm.starts_with("uroce") {
                let tid = t.file_name().to_string_lossy().into_owned();
                names.insert(format!("{p}/{tid} {}", comm.trim_end()));
            }
        }
    }
    names
}

/// The processes whose parent is `pid` (from /proc/*/stat).
fn children(pid: u32) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|p| {
            let stat = std::fs::read_to_string(format!("/proc/{p}/stat")).unwrap_or_default();
            // "pid (comm) state ppid ...": comm may hold spaces and parentheses.
            let after = stat.rsplit_once(')').map_or("", |(_, a)| a);
            after.split_whitespace().nth(1) == Some(&pid.to_string())
        })
        .collect()
}

/// While `ib_write_bw -q 4 -D 2` runs, the server has more than one uroce progress
/// thread (unsharded it has one per device, `uroce-<iface>`): shard 0's and those of the
/// two data shards, `uroce-s1-<iface>` and `uroce-s2-<iface>` (the kernel keeps 15 bytes
/// of a thread's name), each holding two of the four QPs.
#[test]
fn a_sharded_server_runs_a_progress_thread_per_shard() {
    if !can_run(&["ib_write_bw"]) {
        return;
    }
    let pair = VethPair::create("sht", 1500).unwrap();
    let args = [
        "ib_write_bw",
        "-x",
        "1",
        "-F",
        "-q",
        "4",
        "-D",
        "2",
        "-s",
        "65536",
    ];
    // Every thread name seen, and the most seen at once.
    let mut seen = BTreeSet::new();
    let mut most = 0;
    let (s, c) = across_watching(
        &pair,
        |i, a| direct(&pair, i, SHARDS, 60, a),
        &args,
        |pid| {
            let now = uroce_threads(pid);
            most = most.max(now.len());
            seen.extend(now);
        },
    );
    check_both(&args, &s, &c);
    assert!(
        bw_row(&c, "65536").is_some(),
        "client: no bandwidth row: {}",
        text(&c)
    );
    assert!(
        most > 1,
        "UROCE_SHARDS={SHARDS}: at most {most} uroce thread(s) at once in the server; seen: \
         {seen:?}\n-- server:\n{}",
        text(&s)
    );
    for k in 1..3 {
        let shard = format!("uroce-s{k}-");
        assert!(
            seen.iter()
                .any(|t| t.split_once(' ').unwrap().1.starts_with(&shard)),
            "no {shard}<iface> thread in the server; seen: {seen:?}"
        );
    }
    eprintln!("server's uroce threads, at most {most} at once: {seen:?}");
}

/// `UROCE_SHARDS` out of range (1 to 64) or not a number: the device does not open
/// (`ibv_open_device` fails, EINVAL), so the program exits non-zero at once
/// (`ibv_rc_pingpong`: "Couldn't get context for uroce_<iface>") instead of waiting for a
/// client it could not serve.
#[test]
fn a_bad_shard_count_fails_cleanly() {
    if !can_run(&["ibv_rc_pingpong"]) {
        return;
    }
    let pair = VethPair::create("shb", 1500).unwrap();
    for bad in ["0", "abc", "65"] {
        fails_at_once(&pair, bad, "Couldn't get context");
    }
}

/// `ibv_rc_pingpong` as a server on the pair's first side with `UROCE_SHARDS=shards`
/// fails, at once (not stopped by its `timeout`), saying `why` on stderr.
fn fails_at_once(pair: &VethPair, shards: &str, why: &str) {
    let o = direct(
        pair,
        0,
        shards,
        20,
        &["ibv_rc_pingpong", "-g", "1", "-n", "10"],
    )
    .output()
    .expect("running ibv_rc_pingpong");
    // `timeout` exits 124 when it had to stop the program (137 with SIGKILL).
    assert!(
        !o.status.success() && !matches!(o.status.code(), Some(124 | 137)),
        "UROCE_SHARDS={shards}: {}",
        text(&o)
    );
    assert!(
        String::from_utf8_lossy(&o.stderr).contains(why),
        "UROCE_SHARDS={shards}: {}",
        text(&o)
    );
}

/// A sharded process where UDP 4791 of its address is bound already (here by a socket
/// with SO_REUSEPORT of the same user, which a reuseport group would take in beside its
/// own, the steering mixing them) is refused at its first QP, as a plain bind would be:
/// `ibv_rc_pingpong` fails at once ("Couldn't create QP"), it does not wait for a peer.
#[test]
fn a_sharded_process_does_not_join_a_group_it_does_not_own() {
    if !can_run(&["ibv_rc_pingpong", "python3"]) {
        return;
    }
    let pair = VethPair::create("shx", 1500).unwrap();
    let hold = format!(
        "import socket,time\n\
         s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)\n\
         s.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEPORT,1)\n\
         s.bind(('{}',4791))\n\
         print('bound',flush=True)\n\
         time.sleep(30)",
        pair.addrs[0]
    );
    let mut holder = Command::new("ip")
        .args(["netns", "exec", &pair.ns[0], "python3", "-c", &hold])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("starting the holder");
    let mut line = String::new();
    let out = holder.stdout.take().expect("the holder's stdout");
    std::io::BufRead::read_line(&mut std::io::BufReader::new(out), &mut line).unwrap();
    assert_eq!(line.trim(), "bound");
    fails_at_once(&pair, SHARDS, "Couldn't create QP");
    let _ = holder.kill();
    let _ = holder.wait();
}

/// `uroce run --shards N` checks N (1 to 64) and refuses AF_XDP in direct mode
/// (`--no-daemon`), which gives a process one queue, before it starts anything.
#[test]
fn uroce_run_checks_its_shards() {
    let run = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_uroce"))
            .arg("run")
            .args(args)
            .args(["--", "true"])
            .output()
            .expect("running uroce run")
    };
    for bad in ["0", "65", "two"] {
        let o = run(&["--shards", bad]);
        assert_eq!(o.status.code(), Some(2), "--shards {bad}: {}", text(&o));
        assert!(text(&o).contains("--shards"), "{}", text(&o));
    }
    let o = run(&["--shards", "3", "--backend", "xdp", "--no-daemon"]);
    assert!(!o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("UDP backend"), "{}", text(&o));
}
