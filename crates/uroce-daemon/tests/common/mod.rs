//! What the daemon's integration tests share: a daemon on `lo` in a network namespace of
//! its own (UDP backend, socket in a directory of the test's own), honest processes
//! attached through a real `DaemonBackend`, and UD packets built by hand.
#![allow(dead_code)]

use std::io::Read;
use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use uroce::datapath::daemon::{Control, DaemonBackend};
use uroce::datapath::{Backend, Received, Transmit};
use uroce::wire::DatagramRepr;

pub const LOCALHOST: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

/// Whether we may make namespaces (root); else says why the test does nothing.
pub fn root_or_skip(test: &str) -> bool {
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } == 0 {
        return true;
    }
    eprintln!("{test}: skipped, needs root (a network namespace of its own)");
    false
}

/// Aborts the test binary when the test it guards runs past `limit` (a wait that has
/// no timeout of its own, such as the daemon's answer to a hello, hangs no one); the
/// daemons die with it (their parent-death signal).
pub struct Watchdog(std::sync::Arc<std::sync::atomic::AtomicBool>);

impl Watchdog {
    pub fn new(test: &'static str, limit: Duration) -> Self {
        let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let d = done.clone();
        std::thread::spawn(move || {
            let deadline = Instant::now() + limit;
            while !d.load(std::sync::atomic::Ordering::Relaxed) {
                if Instant::now() >= deadline {
                    eprintln!("{test}: still running after {limit:?}, aborting");
                    std::process::abort();
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        });
        Self(done)
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.0.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

/// A directory of the test's own under /tmp, traversable by everyone (mode 0755).
pub fn temp_dir(tag: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    let dir = std::env::temp_dir().join(format!("uroced-{tag}-{}-{nanos:x}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    dir
}

/// A `uroced` on `lo` in a fresh network namespace (127.0.0.1 up), killed on drop.
pub struct Daemon {
    child: Child,
    pub dir: PathBuf,
    pub socket: PathBuf,
}

impl Daemon {
    pub fn start(tag: &str, extra: &[&str]) -> Self {
        let dir = temp_dir(tag);
        let socket = dir.join("run").join("lo.sock");
        let log = std::fs::File::create(dir.join("uroced.log")).unwrap();
        let mut cmd = Command::new("unshare");
        // SAFETY: prctl only, in the child before exec (async-signal-safe). The daemon
        // dies with the thread that started it (unshare and sh exec, keeping it).
        unsafe {
            std::os::unix::process::CommandExt::pre_exec(&mut cmd, || {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
        let child = cmd
            .args(["-n", "sh", "-c", "ip link set lo up && exec \"$0\" \"$@\""])
            .arg(env!("CARGO_BIN_EXE_uroced"))
            .args([
                "--iface",
                "lo",
                "--backend",
                "udp",
                "--threads",
                "1",
                "--socket",
            ])
            .arg(&socket)
            .args(extra)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("spawning unshare -n ... uroced");
        let mut d = Self { child, dir, socket };
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(status) = d.child.try_wait().unwrap() {
                panic!("uroced exited at start ({status}): {}", d.log());
            }
            if uroce::datapath::daemon::proto::connect(&d.socket).is_ok() {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "uroced not up in 10 s: {}",
                d.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        d
    }

    pub fn log(&self) -> String {
        let mut s = String::new();
        let _ =
            std::fs::File::open(self.dir.join("uroced.log")).map(|mut f| f.read_to_string(&mut s));
        s
    }

    /// Panics (with the daemon's log) when the daemon is gone.
    pub fn assert_alive(&mut self) {
        if let Some(status) = self.child.try_wait().unwrap() {
            panic!("uroced died ({status}): {}", self.log());
        }
    }

    /// How many descriptors the daemon holds.
    pub fn fds(&self) -> usize {
        self.fd_list().len()
    }

    /// What the daemon's descriptors are.
    pub fn fd_list(&self) -> Vec<String> {
        let dir = format!("/proc/{}/fd", self.child.id());
        let mut v: Vec<String> = std::fs::read_dir(&dir)
            .map(|d| {
                d.flatten()
                    .map(|e| {
                        let target = std::fs::read_link(e.path()).unwrap_or_default();
                        format!(
                            "{} -> {}",
                            e.file_name().to_string_lossy(),
                            target.display()
                        )
                    })
                    .collect()
            })
            .unwrap_or_default();
        v.sort();
        v
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        // SIGTERM first: the daemon says its counters on the way out (in the log, shown
        // with --nocapture); SIGKILL when it does not leave within 3 s.
        // SAFETY: kill on our own child's pid.
        unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(3);
        while matches!(self.child.try_wait(), Ok(None)) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        eprintln!("{}", self.log());
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A UD SEND only packet (BTH, DETH, payload, a zero ICRC) from `src_qp` to `dst_qp`.
pub fn ud(dst_qp: u32, src_qp: u32, payload: &[u8]) -> Vec<u8> {
    let mut p = vec![0u8; 12 + 8 + payload.len() + 4];
    p[0] = 0x64;
    p[2..4].copy_from_slice(&0xffffu16.to_be_bytes());
    p[5..8].copy_from_slice(&dst_qp.to_be_bytes()[1..]);
    p[12..16].copy_from_slice(&0x1111_1111u32.to_be_bytes());
    p[16..20].copy_from_slice(&src_qp.to_be_bytes());
    p[20..20 + payload.len()].copy_from_slice(payload);
    p
}

/// A packet as a process received it: destination QP, source QP, payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Got {
    pub dst_qp: u32,
    pub src_qp: u32,
    pub payload: Vec<u8>,
}

impl Got {
    pub fn parse(roce: &[u8]) -> Self {
        assert!(
            roce.len() >= 24,
            "a packet shorter than BTH+DETH+ICRC: {roce:?}"
        );
        Self {
            dst_qp: u32::from_be_bytes([0, roce[5], roce[6], roce[7]]),
            src_qp: u32::from_be_bytes(roce[16..20].try_into().unwrap()) & 0xff_ffff,
            payload: roce[20..roce.len() - 4].to_vec(),
        }
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.payload).into_owned()
    }
}

/// A well-behaved process: a real `DaemonBackend` and one block of QPNs.
pub struct Honest {
    pub backend: DaemonBackend,
    pub control: Control,
    pub first: u32,
    pub count: u32,
}

impl Honest {
    pub fn attach(socket: &Path) -> Self {
        let backend = DaemonBackend::connect(socket).expect("attaching to the daemon");
        let control = backend.control();
        let (first, count) = control.claim_qpns(1).expect("claiming QPNs");
        assert!(count >= 1);
        Self {
            backend,
            control,
            first,
            count,
        }
    }

    pub fn qpn(&self) -> u32 {
        self.first
    }

    pub fn owns(&self, qpn: u32) -> bool {
        (self.first..self.first + self.count).contains(&qpn)
    }

    /// Sends `roce` from 127.0.0.1 to 127.0.0.1 (the daemon delivers it locally).
    pub fn send(&mut self, roce: &[u8]) {
        let datagram = DatagramRepr::roce(LOCALHOST, LOCALHOST, 49152, 0).unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let mut build = |out: &mut [u8]| {
                out[..roce.len()].copy_from_slice(roce);
                Some(Transmit {
                    datagram,
                    dst_mac: [0; 6],
                    len: roce.len(),
                    in_place: None,
                })
            };
            match self.backend.send_with(&mut build) {
                Ok(true) => break,
                Ok(false) => unreachable!(),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    assert!(Instant::now() < deadline, "send ring full for 5 s");
                    std::thread::sleep(Duration::from_millis(1));
                }
                Err(e) => panic!("send: {e}"),
            }
        }
        self.backend.flush().unwrap();
    }

    /// What arrives within `wait`, stopping early once `enough` packets came.
    pub fn receive(&mut self, wait: Duration, enough: usize) -> Vec<Got> {
        let deadline = Instant::now() + wait;
        let mut got = Vec::new();
        while got.len() < enough {
            let now = Instant::now();
            if now >= deadline {
                break;
            }
            let slice = (deadline - now).min(Duration::from_millis(20));
            self.backend
                .receive(slice, 64, &mut |r| match r {
                    Received::Datagram { roce, .. } => got.push(Got::parse(roce)),
                    Received::Frame(f) => panic!("a frame through the UDP daemon: {f:?}"),
                })
                .expect("receive");
        }
        got
    }
}

/// `a` and `b` send each other `n` datagrams; each must receive exactly the other's
/// (from the other's QPN, to its own), nothing else.
pub fn exchange(a: &mut Honest, b: &mut Honest, round: usize, n: usize) {
    for i in 0..n {
        a.send(&ud(
            b.qpn(),
            a.qpn(),
            format!("honest {round} {i} a->b").as_bytes(),
        ));
        b.send(&ud(
            a.qpn(),
            b.qpn(),
            format!("honest {round} {i} b->a").as_bytes(),
        ));
    }
    let (a_qpn, b_qpn) = (a.qpn(), b.qpn());
    for (me, peer, dir) in [(a, b_qpn, "b->a"), (b, a_qpn, "a->b")] {
        let got = me.receive(Duration::from_secs(10), n);
        let want: Vec<String> = (0..n)
            .map(|i| format!("honest {round} {i} {dir}"))
            .collect();
        let texts: Vec<String> = got.iter().map(Got::text).collect();
        assert_eq!(texts, want, "round {round}: what {dir} brought");
        for g in &got {
            assert_eq!(
                (g.dst_qp, g.src_qp),
                (me.qpn(), peer),
                "round {round}: {g:?}"
            );
        }
        // Nothing more after them.
        let extra = me.receive(Duration::from_millis(30), 1);
        assert!(extra.is_empty(), "round {round}: unexpected {extra:?}");
    }
}
