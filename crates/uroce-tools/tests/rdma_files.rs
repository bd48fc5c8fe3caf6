//! The RDMA files a program reads under `uroce run` (src/rdma_files.rs,
//! uroce-verbs' src/sysfs.rs): in a network namespace with a veth, the program finds the
//! device in /sys/class/infiniband, /sys/class/infiniband_verbs and /dev/infiniband, with
//! the values uroce's libibverbs reports (`ibv_devinfo -v` under `uroce run`), while
//! /sys/class/net and /dev keep what they held; UCX (`ucx_info -d`) keeps the device; an
//! ordinary user sees the files too (through a user namespace). Needs root (namespaces).

mod common;

use std::collections::BTreeMap;
use std::net::Ipv6Addr;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::{have, text, uroce_run_with};
use uroce_tools::netns::{check_privileges, VethPair};

/// `uroce run --iface IFACE --backend udp [extra] -- program...` in namespace `ns`, with
/// the uroce binary `bin` and the library of this build (`UROCE_LIBDIR`).
fn uroce_run(
    ns: &str,
    bin: &Path,
    lib: &Path,
    iface: &str,
    extra: &[&str],
    program: &[&str],
) -> Output {
    uroce_run_with(bin, ns, iface, &[&["--backend", "udp"], extra].concat())
        .args(program)
        .env("UROCE_LIBDIR", lib)
        .output()
        .expect("running uroce run")
}

/// `key: value` lines (a shell loop's `echo "$f: $(cat $f)"`, `ibv_devinfo -v`'s `key:\tvalue`).
fn values(out: &str) -> BTreeMap<String, String> {
    out.lines()
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect()
}

/// The device's GIDs and their types as `ibv_devinfo -v` prints them
/// (`GID[  1]:  ::ffff:10.0.0.1, RoCE v2`).
fn devinfo_gids(out: &str) -> BTreeMap<usize, (Ipv6Addr, String)> {
    out.lines()
        .filter_map(|l| {
            let l = l.trim().strip_prefix("GID[")?;
            let (i, rest) = l.split_once("]:")?;
            let (gid, kind) = rest.trim().split_once(", ")?;
            Some((
                i.trim().parse().ok()?,
                (gid.parse().ok()?, kind.to_string()),
            ))
        })
        .collect()
}

/// A fresh directory holding this build's uroce binary and libibverbs.so.1, and its
/// librdmacm.so.1 if `rdmacm` (copies: `nobody` reads them).
fn library_copy(tag: &str, rdmacm: bool) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("uroce-rdma-files-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(
        common::cdylib::built("libibverbs"),
        dir.join("libibverbs.so.1"),
    )
    .unwrap();
    if rdmacm {
        let lib = dir.join("librdmacm.so.1");
        std::fs::copy(common::cdylib::built("librdmacm"), &lib).unwrap();
        std::fs::set_permissions(lib, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let bin = dir.join("uroce");
    std::fs::copy(env!("CARGO_BIN_EXE_uroce"), &bin).unwrap();
    for p in [&dir, &bin, &dir.join("libibverbs.so.1")] {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    dir
}

/// Waits (up to 5 s) for `iface` in `ns` to be operationally up again.
fn wait_up(ns: &str, iface: &str) {
    let state = format!("/sys/class/net/{iface}/operstate");
    for _ in 0..50 {
        let o = Command::new("ip")
            .args(["netns", "exec", ns, "cat", &state])
            .output();
        if o.is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "up") {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// Prints each device's name, dev_name, dev_path and ibdev_path, whether
/// /dev/infiniband/<dev_name> is a character device, and what `<dev_path>/ibdev` and
/// `<ibdev_path>/ports/1/state` hold.
const PATHS_C: &str = r#"
#include <infiniband/verbs.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

static void line(const char *dir, const char *file, char *out, int size) {
    char p[512];
    snprintf(p, sizeof p, "%s/%s", dir, file);
    FILE *f = fopen(p, "r");
    out[0] = 0;
    if (f) {
        if (!fgets(out, size, f)) out[0] = 0;
        fclose(f);
    }
    out[strcspn(out, "\n")] = 0;
}

int main(void) {
    int n;
    struct ibv_device **l = ibv_get_device_list(&n);
    if (!l) return 1;
    for (int i = 0; i < n; i++) {
        char p[512], ibdev[64], state[64];
        struct stat st;
        snprintf(p, sizeof p, "/dev/infiniband/%s", l[i]->dev_name);
        int chr = stat(p, &st) == 0 && S_ISCHR(st.st_mode);
        line(l[i]->dev_path, "ibdev", ibdev, sizeof ibdev);
        line(l[i]->ibdev_path, "ports/1/state", state, sizeof state);
        printf("%s %s %s %s %s %s %s\n", ibv_get_device_name(l[i]), l[i]->dev_name,
               l[i]->dev_path, l[i]->ibdev_path, chr ? "char" : "none", ibdev, state);
    }
    ibv_free_device_list(l);
    return 0;
}
"#;

#[test]
fn a_program_under_uroce_run_finds_the_device_in_sys_and_dev() {
    if let Err(e) = check_privileges() {
        println!("SKIP: {e}");
        return;
    }
    let pair = VethPair::create("rf", 1500).expect("veth pair");
    let ns = pair.ns[0].as_str();
    // UCX keeps at most 15 characters of a memory domain's name (UCT_MD_NAME_MAX) and
    // then finds no device of the cut name: `uroce_` and an interface of at most 9.
    let iface = "urfiles0";
    for args in [
        &["link", "set", pair.ifaces[0].as_str(), "down"][..],
        &["link", "set", pair.ifaces[0].as_str(), "name", iface],
        &["link", "set", iface, "up"],
    ] {
        let o = Command::new("ip")
            .args(["-n", ns])
            .args(args)
            .output()
            .unwrap();
        assert!(o.status.success(), "ip {args:?}: {}", text(&o));
    }
    wait_up(ns, iface);
    let dir = library_copy("root", true);
    let bin = dir.join("uroce");
    let dev = format!("uroce_{iface}");
    let script = format!(
        "cd /sys/class/infiniband/{dev} || exit 1
         for f in node_type node_guid sys_image_guid fw_ver ports/1/state ports/1/phys_state \
                  ports/1/link_layer ports/1/gids/* ports/1/gid_attrs/types/* \
                  ports/1/gid_attrs/ndevs/* /sys/class/infiniband_verbs/uverbs0/ibdev; do
             echo \"$f: $(cat $f)\"
         done
         echo \"class: $(ls /sys/class/infiniband | tr '\\n' ' ')\"
         echo \"net: $(ls /sys/class/net | tr '\\n' ' ')\"
         echo \"device net: $(ls device/net)\"
         test -d device/net/{iface} -a ! -L device/net/{iface} && \
             echo \"device net address: $(cat device/net/{iface}/address)\"
         test -c /dev/infiniband/uverbs0 && exec 3<>/dev/infiniband/uverbs0 && echo 'uverbs0: rw'
         test -c /dev/infiniband/rdma_cm && exec 4<>/dev/infiniband/rdma_cm && echo 'rdma_cm: rw'
         test -c /dev/null && echo 'dev null: char'"
    );
    let out = uroce_run(ns, &bin, &dir, iface, &[], &["sh", "-c", &script]);
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    let v = values(&t);
    let get = |k: &str| {
        v.get(k)
            .map(String::as_str)
            .unwrap_or_else(|| panic!("{k}: {t}"))
    };
    assert_eq!(get("node_type"), "1: CA");
    assert_eq!(get("ports/1/link_layer"), "Ethernet");
    assert_eq!(get("/sys/class/infiniband_verbs/uverbs0/ibdev"), dev);
    assert_eq!(get("class").split_whitespace().collect::<Vec<_>>(), [&dev]);
    let net: Vec<&str> = get("net").split_whitespace().collect();
    assert!(net.contains(&iface) && net.contains(&"lo"), "{t}");
    assert_eq!(get("device net"), iface);
    // The interface's own directory (a directory, as under a NIC's PCI device).
    let own = Command::new("ip")
        .args(["netns", "exec", ns, "cat"])
        .arg(format!("/sys/class/net/{iface}/address"))
        .output()
        .unwrap();
    let own = String::from_utf8_lossy(&own.stdout);
    assert_eq!(get("device net address"), own.trim());
    assert_eq!(get("uverbs0"), "rw");
    assert_eq!(get("rdma_cm"), "rw");
    assert_eq!(get("dev null"), "char");

    // ibv_device's dev_name, dev_path and ibdev_path name those files (a C program on
    // the distro's header, through uroce's library).
    if !Path::new("/usr/include/infiniband/verbs.h").exists() {
        println!("SKIP (ibv_device's paths): no <infiniband/verbs.h> (scripts/setup.sh)");
    } else if let Some(exe) = common::cdylib::compile_c(&dir, "paths", PATHS_C, &["-libverbs"]) {
        let o = uroce_run(ns, &bin, &dir, iface, &[], &[exe.to_str().unwrap()]);
        let pt = text(&o);
        assert!(o.status.success(), "{pt}");
        assert_eq!(
            pt.trim(),
            format!(
                "{dev} uverbs0 /sys/class/infiniband_verbs/uverbs0 \
                 /sys/class/infiniband/{dev} char {dev} 4: ACTIVE"
            )
        );
    }

    // The same values as uroce's libibverbs reports for the device.
    if Command::new("ibv_devinfo").arg("--help").output().is_err() {
        println!("SKIP (values against ibv_devinfo): no ibv_devinfo (scripts/setup.sh)");
    } else {
        let info = uroce_run(ns, &bin, &dir, iface, &[], &["ibv_devinfo", "-v"]);
        let it = text(&info);
        assert!(info.status.success(), "{it}");
        let iv = values(&it);
        for (file, key) in [
            ("node_guid", "node_guid"),
            ("sys_image_guid", "sys_image_guid"),
            ("fw_ver", "fw_ver"),
        ] {
            assert_eq!(Some(get(file)), iv.get(key).map(String::as_str), "{key}");
        }
        // PORT_ACTIVE (4) / LINK_UP (5): the numbers.
        let num = |s: &str| {
            s.split(|c: char| !c.is_ascii_digit())
                .find(|p| !p.is_empty())
                .map(str::to_string)
        };
        assert_eq!(num(get("ports/1/state")), num(&iv["state"]));
        assert_eq!(num(get("ports/1/phys_state")), num(&iv["phys_state"]));
        let gids = devinfo_gids(&it);
        assert!(gids.len() >= 2, "{it}");
        let mut from_files = BTreeMap::new();
        for (k, val) in &v {
            let Some(i) = k.strip_prefix("ports/1/gids/") else {
                continue;
            };
            let i: usize = i.parse().unwrap();
            // Eight groups of four hex digits: an IPv6 address as it is.
            let gid: Ipv6Addr = val.parse().unwrap_or_else(|_| panic!("{k}: {val}"));
            if gid.is_unspecified() {
                assert!(!v.contains_key(&format!("ports/1/gid_attrs/types/{i}")));
                continue;
            }
            let kind = v[&format!("ports/1/gid_attrs/types/{i}")].clone();
            assert_eq!(v[&format!("ports/1/gid_attrs/ndevs/{i}")], iface);
            from_files.insert(i, (gid, kind));
        }
        assert_eq!(from_files, gids, "files:\n{t}\nibv_devinfo:\n{it}");
    }

    // UCX keeps a device only if /dev/infiniband/<dev_name> is a read-writable
    // character device: with the files it lists uroce's, without them it does not.
    if !have("ucx_info") {
        println!("SKIP (UCX): no ucx_info (apt-get install ucx-utils; scripts/setup.sh)");
    } else {
        let md = format!("Memory domain: {dev}");
        let run = uroce_run(ns, &bin, &dir, iface, &[], &["ucx_info", "-d"]);
        let with = text(&run);
        assert!(run.status.success(), "{with}");
        assert!(with.contains(&md), "{with}");
        assert!(with.contains("Transport: rc_verbs"), "{with}");
        // rdma-core's librdmacm (what a program gets without uroce's) finds no
        // /dev/infiniband/rdma_cm, as on a host without RDMA, rather than a stand-in
        // that never answers its commands.
        let only_verbs = library_copy("verbs-only", false);
        let run = uroce_run(
            ns,
            &only_verbs.join("uroce"),
            &only_verbs,
            iface,
            &[],
            &["sh", "-c", "test -e /dev/infiniband/rdma_cm || ucx_info -d"],
        );
        let _ = std::fs::remove_dir_all(&only_verbs);
        assert!(run.status.success(), "{}", text(&run));
        assert!(text(&run).contains(&md), "{}", text(&run));
        let without = text(&uroce_run(
            ns,
            &bin,
            &dir,
            iface,
            &["--no-rdma-files"],
            &["ucx_info", "-d"],
        ));
        assert!(!without.contains(&md), "{without}");
    }

    // The host's own view is untouched.
    assert!(!Path::new("/sys/class/infiniband").join(&dev).exists());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_failure_half_way_leaves_the_program_the_mounts_as_they_were() {
    if let Err(e) = check_privileges() {
        println!("SKIP: {e}");
        return;
    }
    let pair = VethPair::create("rff", 1500).expect("veth pair");
    let (ns, iface) = (pair.ns[0].as_str(), pair.ifaces[0].as_str());
    let dir = library_copy("fail", true);
    let script = "grep -c ' /sys/class \\| /dev ' /proc/self/mountinfo; \
                  ls /sys/class | wc -l; test -e /sys/class/infiniband || echo no-infiniband";
    let plain = Command::new("ip")
        .args(["netns", "exec", ns, "sh", "-c", script])
        .output()
        .unwrap();
    let out = uroce_run_with(&dir.join("uroce"), ns, iface, &["--backend", "udp"])
        .args(["sh", "-c", script])
        .env("UROCE_LIBDIR", &dir)
        .env("UROCE_TEST_RDMA_FILES_FAIL", "1")
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let t = text(&out);
    if !cfg!(debug_assertions) {
        println!("SKIP: a release build has no failure to inject");
        return;
    }
    assert!(out.status.success(), "{t}");
    assert!(t.contains("will not find uroce's devices"), "{t}");
    assert!(t.contains("UROCE_TEST_RDMA_FILES_FAIL"), "{t}");
    // The same mounts and the same /sys/class as without uroce run.
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&plain.stdout),
        "{t}"
    );
    assert!(t.contains("no-infiniband"), "{t}");
}

#[test]
fn an_ordinary_user_sees_the_files_through_a_user_namespace() {
    if let Err(e) = check_privileges() {
        println!("SKIP: {e}");
        return;
    }
    let probe = Command::new("setpriv")
        .args(["--reuid=nobody", "--regid=nogroup", "--clear-groups"])
        .args(["unshare", "--user", "--map-current-user", "--mount", "true"])
        .output();
    match probe {
        Ok(o) if o.status.success() => {}
        Ok(o) => {
            println!(
                "SKIP: this system refuses user namespaces to nobody: {}",
                text(&o)
            );
            return;
        }
        Err(e) => {
            println!("SKIP: no setpriv/unshare (util-linux): {e}");
            return;
        }
    }
    let pair = VethPair::create("rfu", 1500).expect("veth pair");
    let (ns, iface) = (pair.ns[0].as_str(), pair.ifaces[0].as_str());
    let dir = library_copy("user", false);
    let script = format!(
        "id -u; cat /sys/class/infiniband/uroce_{iface}/ports/1/gid_attrs/ndevs/1; \
         ls /sys/class/net; test -c /dev/infiniband/uverbs0 -a -r /dev/infiniband/uverbs0 \
         -a -w /dev/infiniband/uverbs0 && echo uverbs0-rw"
    );
    let out = Command::new("ip")
        .args([
            "netns",
            "exec",
            ns,
            "setpriv",
            "--reuid=nobody",
            "--regid=nogroup",
        ])
        .arg("--clear-groups")
        .arg(dir.join("uroce"))
        .args([
            "run",
            "--backend",
            "udp",
            "--iface",
            iface,
            "--",
            "sh",
            "-c",
            &script,
        ])
        .env("UROCE_LIBDIR", &dir)
        .output()
        .unwrap();
    let t = text(&out);
    let _ = std::fs::remove_dir_all(&dir);
    assert!(out.status.success(), "{t}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let mut l = stdout.lines();
    assert_eq!(l.next(), Some("65534"), "the program keeps its uid: {t}");
    assert_eq!(l.next(), Some(iface), "{t}");
    assert!(stdout.lines().any(|x| x == "lo"), "{t}");
    assert!(stdout.contains("uverbs0-rw"), "{t}");
    assert!(!t.contains("will not find"), "{t}");
}
