//! The distro's unmodified `ibv_rc_pingpong`, `ibv_uc_pingpong`, `ibv_ud_pingpong` and
//! `ibv_srq_pingpong` (rdma-core's examples, ibverbs-utils) and perftest's `ib_write_bw`,
//! `ib_read_bw`, `ib_send_bw`, `ib_atomic_bw` and the four `_lat` tools run on the built
//! library at both ends of a veth pair between two network namespaces, over the UDP
//! backend and over AF_XDP: both ends exit 0 after every iteration (with `-c`, rc/uc/ud
//! check the data they receive; `ibv_rc_pingpong -N` posts through the extended API's
//! `ibv_wr_*` calls). Needs root, iproute2, ibverbs-utils and perftest; skips
//! (saying which is missing) otherwise.

mod common;

use std::path::Path;
use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

use common::{in_ns, text};
use uroce_tools::netns::{self, VethPair};

fn ready() -> bool {
    if let Err(e) = netns::check_privileges() {
        eprintln!("SKIP: {e}");
        return false;
    }
    for tool in [
        "ibv_rc_pingpong",
        "ibv_uc_pingpong",
        "ibv_ud_pingpong",
        "ibv_srq_pingpong",
    ] {
        if !Path::new("/usr/bin").join(tool).exists() {
            eprintln!("SKIP: /usr/bin/{tool} is missing (apt-get install ibverbs-utils)");
            return false;
        }
    }
    true
}

/// Starts `server` in the first namespace, then `client` in the second, tried again while
/// it fails to connect (the server listens on TCP shortly after it starts; 10 s at most);
/// the server's output and the client's.
fn serve_and_connect(
    pair: &VethPair,
    lib: &Path,
    env: &[(&str, &str)],
    server: &[&str],
    client: &[&str],
) -> (Output, Output) {
    let srv = in_ns(&pair.ns[0], lib, env, server)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("server");
    let deadline = Instant::now() + Duration::from_secs(10);
    let cli = loop {
        std::thread::sleep(Duration::from_millis(300));
        let o = in_ns(&pair.ns[1], lib, env, client)
            .output()
            .expect("client");
        let t = text(&o);
        let refused = !o.status.success()
            && (t.contains("onnect") || t.contains("Unable to open file descriptor"));
        if !refused || Instant::now() > deadline {
            break o;
        }
    };
    (srv.wait_with_output().expect("server output"), cli)
}

/// Runs `tool ARGS` as server in the first namespace and as client of it in the second,
/// on `backend`, both ends on GID index 1 (the IPv4 address); panics with both outputs
/// unless both exit 0 and report their results.
fn run(pair: &VethPair, lib: &Path, backend: &str, tool: &str, args: &[&str], port: u16) {
    run_on_gid(pair, lib, backend, tool, args, port, "1");
}

/// [`run`] with both ends on GID index `gid_index`.
fn run_on_gid(
    pair: &VethPair,
    lib: &Path,
    backend: &str,
    tool: &str,
    args: &[&str],
    port: u16,
    gid_index: &str,
) {
    // rdma-core's examples take the GID index as -g, perftest as -x.
    let (gid, done) = match tool.starts_with("ibv_") {
        true => ("-g", " iters in "),
        false => ("-x", "#bytes"),
    };
    let env = [("UROCE_BACKEND", backend)];
    let port = port.to_string();
    let dev = |i: usize| format!("uroce_{}", pair.ifaces[i]);
    let (d0, d1) = (dev(0), dev(1));
    let mut server: Vec<&str> = vec![
        "timeout", "60", tool, "-d", &d0, gid, gid_index, "-p", &port,
    ];
    server.extend_from_slice(args);
    let addr = pair.addrs[0].to_string();
    let mut client: Vec<&str> = vec![
        "timeout", "60", tool, "-d", &d1, gid, gid_index, "-p", &port,
    ];
    client.extend_from_slice(args);
    client.push(&addr);
    let (srv, cli) = serve_and_connect(pair, lib, &env, &server, &client);
    let what = format!(
        "{tool} {} over {backend}\n-- server:\n{}\n-- client:\n{}",
        args.join(" "),
        text(&srv),
        text(&cli)
    );
    assert!(srv.status.success() && cli.status.success(), "{what}");
    // perftest's READ and atomic latency servers print no table: the client measures.
    assert!(text(&cli).contains(done), "{what}");
    eprintln!(
        "ok: {tool} {} over {backend} on GID {gid_index}",
        args.join(" ")
    );
}

/// GID 0, the link-local default GID, at both ends as libfabric's dgram and rdm
/// endpoints use it: an RC connection (its data checked), a UD exchange (checked) and
/// an RDMA WRITE test between the two namespaces go over IPv6 link-local, on `backend`
/// (UDP: the library's second socket, bound to the link-local address with its scope).
fn gid_0_link_local(backend: &str, base_port: u16) {
    if !ready() {
        return;
    }
    let lib = common::library_dir(&format!("pp-gid0-{backend}"));
    let pair = VethPair::create(&format!("pg{}", &backend[..1]), 1500).expect("veth pair");
    // Over UDP the kernel must have the addresses (past duplicate address detection).
    assert!(
        pair.wait_link_local(),
        "no link-local address on the veth pair"
    );
    let cases: [(&str, &[&str]); 3] = [
        ("ibv_rc_pingpong", &["-n", "100", "-c"]),
        ("ibv_ud_pingpong", &["-s", "1024", "-n", "100", "-c"]),
        ("ib_write_bw", &["-s", "65536", "-n", "100"]),
    ];
    for (k, (tool, args)) in cases.iter().enumerate() {
        run_on_gid(&pair, &lib, backend, tool, args, base_port + k as u16, "0");
    }
    drop(pair);
    let _ = std::fs::remove_dir_all(&lib);
}

#[test]
fn gid_0_link_local_over_af_xdp() {
    gid_0_link_local("xdp", 18620);
}

#[test]
fn gid_0_link_local_over_udp() {
    gid_0_link_local("udp", 18630);
}

fn suite(backend: &str, base_port: u16) {
    if !ready() {
        return;
    }
    let lib = common::library_dir(&format!("pp-{backend}"));
    let pair = VethPair::create(&format!("pp{}", &backend[..1]), 9000).expect("veth pair");
    let cases: [(&str, &[&str]); 16] = [
        ("ibv_rc_pingpong", &["-n", "200"]),
        // -N: its sends through ibv_create_qp_ex and the ibv_wr_* API.
        ("ibv_rc_pingpong", &["-N", "-n", "200", "-c"]),
        ("ibv_rc_pingpong", &["-e", "-n", "200"]),
        ("ibv_rc_pingpong", &["-s", "65536", "-n", "50", "-c"]),
        ("ibv_uc_pingpong", &["-n", "200", "-c"]),
        ("ibv_ud_pingpong", &["-s", "2048", "-n", "200", "-c"]),
        ("ibv_srq_pingpong", &["-n", "100"]),
        ("ibv_srq_pingpong", &["-q", "4", "-e", "-n", "100"]),
        ("ib_write_bw", &["-s", "65536", "-n", "200"]),
        ("ib_read_bw", &["-s", "65536", "-n", "200"]),
        ("ib_send_bw", &["-s", "65536", "-n", "200"]),
        ("ib_atomic_bw", &["-n", "200"]),
        ("ib_write_lat", &["-n", "200"]),
        ("ib_read_lat", &["-n", "200"]),
        ("ib_send_lat", &["-n", "200"]),
        ("ib_atomic_lat", &["-n", "200"]),
    ];
    for (k, (tool, args)) in cases.iter().enumerate() {
        run(&pair, &lib, backend, tool, args, base_port + k as u16);
    }
    drop(pair);
    let _ = std::fs::remove_dir_all(&lib);
}

#[test]
fn distro_pingpongs_over_udp() {
    suite("udp", 18600);
}

#[test]
fn distro_pingpongs_over_af_xdp() {
    suite("xdp", 18700);
}

/// `uroce run` sets the library path and the device selection: `ibv_devinfo -l` in a
/// namespace lists exactly the device of the interface asked for, and `ibv_rc_pingpong`
/// started through it runs at both ends as an ordinary user (uid 65534, no
/// capabilities), where `uroce run` says that `auto` takes the UDP backend on veth and
/// why.
#[test]
fn uroce_run_starts_unmodified_programs() {
    if !ready() {
        return;
    }
    let uroce = common::profile_dir().join("uroce");
    if !uroce.exists() {
        eprintln!(
            "SKIP: {} is not built (cargo test at the root builds it)",
            uroce.display()
        );
        return;
    }
    let lib = common::library_dir("run");
    let pair = VethPair::create("run", 1500).expect("veth pair");
    let uroce = uroce.to_str().unwrap();
    let env = [("UROCE_LIBDIR", lib.to_str().unwrap())];
    let iface = &pair.ifaces[0];
    let list = in_ns(
        &pair.ns[0],
        Path::new("/nonexistent"),
        &env,
        // No daemon: a root one would hold UDP 4791 on the address for its 5 s linger,
        // where the unprivileged runs below start their own.
        &[
            uroce,
            "run",
            "--no-daemon",
            "--iface",
            iface,
            "--",
            "ibv_devinfo",
            "-l",
        ],
    )
    .output()
    .expect("uroce run");
    let out = text(&list);
    assert!(list.status.success(), "{out}");
    assert!(
        out.contains("1 HCA found:") && out.contains(&format!("uroce_{iface}")),
        "{out}"
    );
    // ibv_rc_pingpong through uroce run, as uid 65534 without capabilities.
    let addr = pair.addrs[0].to_string();
    fn unprivileged<'a>(uroce: &'a str, peer: Option<&'a str>) -> Vec<&'a str> {
        let mut v = vec![
            "setpriv",
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--inh-caps=-all",
            uroce,
            "run",
            "--",
            "timeout",
            "30",
            "ibv_rc_pingpong",
            "-g",
            "1",
            "-p",
            "18590",
        ];
        v.extend(peer);
        v
    }
    let (srv, cli) = serve_and_connect(
        &pair,
        Path::new("/nonexistent"),
        &env,
        &unprivileged(uroce, None),
        &unprivileged(uroce, Some(&addr)),
    );
    let what = format!("-- server:\n{}\n-- client:\n{}", text(&srv), text(&cli));
    assert!(srv.status.success() && cli.status.success(), "{what}");
    assert!(text(&cli).contains(" iters in "), "{what}");
    assert!(
        text(&cli).contains("auto takes UDP backend (a veth link"),
        "{what}"
    );
    drop(pair);
    let _ = std::fs::remove_dir_all(&lib);
}

/// Mixed: the distro's `ibv_rc_pingpong` on the library against `uroce pingpong` (uroce's
/// own loop, no library), and perftest's `ib_write_bw` on the library against `uroce perf
/// write`, each way.
#[test]
fn library_against_uroce_tools() {
    if !ready() {
        return;
    }
    let uroce = common::profile_dir().join("uroce");
    if !uroce.exists() {
        eprintln!(
            "SKIP: {} is not built (cargo test at the root builds it)",
            uroce.display()
        );
        return;
    }
    let uroce = uroce.to_str().unwrap().to_string();
    let lib = common::library_dir("mixed");
    let pair = VethPair::create("mix", 9000).expect("veth pair");
    let addr = pair.addrs[0].to_string();
    let d = |i: usize| format!("uroce_{}", pair.ifaces[i]);
    let (d0, d1) = (d(0), d(1));
    let env = [("UROCE_BACKEND", "udp")];
    // (server, client), each with its own address argument last for the client.
    let pp_lib = |dev: &str, port: &str| -> Vec<String> {
        [
            "timeout",
            "30",
            "ibv_rc_pingpong",
            "-d",
            dev,
            "-g",
            "1",
            "-p",
            port,
            "-s",
            "4096",
            "-n",
            "100",
            "-c",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    };
    let pp_tool = |port: &str| -> Vec<String> {
        [
            &uroce,
            "pingpong",
            "--no-daemon",
            "--backend",
            "udp",
            "-p",
            port,
            "-s",
            "4096",
            "-n",
            "100",
            "-c",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    };
    let bw_lib = |dev: &str, port: &str| -> Vec<String> {
        [
            "timeout",
            "30",
            "ib_write_bw",
            "-d",
            dev,
            "-x",
            "1",
            "-F",
            "-p",
            port,
            "-s",
            "65536",
            "-n",
            "200",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    };
    let bw_tool = |port: &str| -> Vec<String> {
        [
            &uroce,
            "perf",
            "write",
            "--no-daemon",
            "--backend",
            "udp",
            "-p",
            port,
            "-s",
            "65536",
            "-n",
            "200",
            "-m",
            "4096",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    };
    let runs: Vec<(&str, Vec<String>, Vec<String>)> = vec![
        (
            "ibv_rc_pingpong server, uroce pingpong client",
            pp_lib(&d0, "18601"),
            pp_tool("18601"),
        ),
        (
            "uroce pingpong server, ibv_rc_pingpong client",
            pp_tool("18602"),
            pp_lib(&d1, "18602"),
        ),
        (
            "ib_write_bw server, uroce perf client",
            bw_lib(&d0, "18603"),
            {
                let mut v = bw_tool("18603");
                v.push("--perftest".into());
                v
            },
        ),
        (
            "uroce perf server, ib_write_bw client",
            bw_tool("18604"),
            bw_lib(&d1, "18604"),
        ),
    ];
    for (what, server, mut client) in runs {
        client.push(addr.clone());
        let s: Vec<&str> = server.iter().map(String::as_str).collect();
        let c: Vec<&str> = client.iter().map(String::as_str).collect();
        let (srv, cli) = serve_and_connect(&pair, &lib, &env, &s, &c);
        let out = format!(
            "{what}\n-- server:\n{}\n-- client:\n{}",
            text(&srv),
            text(&cli)
        );
        assert!(srv.status.success() && cli.status.success(), "{out}");
        eprintln!("ok: {what}");
    }
    drop(pair);
    let _ = std::fs::remove_dir_all(&lib);
}
