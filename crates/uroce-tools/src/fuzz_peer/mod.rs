//! `uroce fuzz-peer`: fuzz a live RoCE peer's parsers and state machines.
//!
//! The fuzzer connects to a peer tool that already runs (a `uroce perf` server, perftest
//! bandwidth servers, `ibv_rc_pingpong`) with the exchange uroce speaks, so the peer
//! brings RC QPs into RTS with keys the fuzzer knows: N fuzz QPs, whose requester side
//! exists only here as a number, and one known-good QP that uroce's own transport runs
//! (`ibv_rc_pingpong` has one QP: it is fuzzed and probed, [`Driver::liveness`]). Then,
//! in bursts:
//!
//! 1. frames from the seeded, structure-aware [`mutate::Generator`], each rendered against
//!    what is known of its target responder (expected PSN, open message, region) and
//!    sent raw; the peer's answer to each ([`verdict::Outcome`]) is counted and judged
//!    against what the IBTA rules ask for that frame ([`verdict::judge`]), and teaches the
//!    fuzzer the responder's new state ([`verdict::learn`]); a QP the peer takes to the
//!    error state is left and the next one used;
//! 2. between bursts, the oracles: a legitimate operation on the known-good QP must
//!    complete within a deadline (liveness), and `--check-cmd` must exit 0.
//!
//! A finding (a failed oracle; with `--verdicts stop`, also a wrong verdict) stops the run,
//! writes the frames since the last good check to the capture, and, where the peer can be
//! restarted (`--restart-cmd`), shrinks them to the shortest sequence that still
//! reproduces against a fresh peer ([`shrink`]).
//!
//! Here: the configuration, the run, the summary. The frames are in `mutate`, the verdicts
//! in `verdict`, the connection and the datapath in `session`, the fault planted for the
//! tests in `planted`.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use serde::Serialize;

mod ip_edges;
pub mod mutate;
pub mod planted;
pub mod session;
pub mod shrink;
pub mod verdict;

use mutate::{frame_of, render, Expect, Generator, Spec};
pub use session::{PeerConfig, PeerTool, PerftestVerb, Session};
use verdict::{judge, learn, Mismatch, Outcome};

/// How long a run goes on.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Limit {
    /// This many fuzz frames.
    Frames(u64),
    /// This long.
    Time(Duration),
}

/// What a wrong verdict does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VerdictMode {
    /// It is a finding: the run stops and shrinks it.
    Stop,
    /// It is counted and reported; the run goes on (a peer known to answer otherwise).
    Count,
}

/// Options of a run.
#[derive(Debug, Clone)]
pub struct FuzzConfig {
    /// The peer.
    pub peer: PeerConfig,
    /// The seed of the frames (and of the first PSN).
    pub seed: u64,
    /// How long.
    pub limit: Limit,
    /// Fuzz frames between two checks of the oracles.
    pub burst: u32,
    /// How long to wait for the answer to one frame.
    pub wait: Duration,
    /// How long the known-good operation may take.
    pub deadline: Duration,
    /// Run between bursts (`sh -c`); a non-zero exit is a finding.
    pub check_cmd: Option<String>,
    /// Restarts the peer (`sh -c`), returning once it listens again (the fuzzer also
    /// retries connecting for `peer.connect_for`).
    pub restart_cmd: Option<String>,
    /// Where the frames of a finding go (the shrunk sequence next to it, `-shrunk.pcap`);
    /// `uroce-fuzz-finding-SEED.pcap` in the current directory when not given.
    pub pcap: Option<PathBuf>,
    /// What a wrong verdict does.
    pub verdicts: VerdictMode,
    /// Most replays the shrinking may take.
    pub shrink_budget: u32,
    /// A line per frame on the progress output (spec, PSN, expected PSN, answer).
    pub verbose: bool,
    /// Send these frames (a finding's shrunk sequence, say) instead of generated ones.
    pub replay: Option<Vec<Spec>>,
}

/// A wrong verdict, counted per frame kind, expectation and answer.
#[derive(Debug, Clone, Serialize)]
pub struct MismatchCount {
    /// The frame kind.
    pub kind: String,
    /// What the rules ask.
    pub expected: Expect,
    /// What the peer answered.
    pub got: String,
    /// How often.
    pub count: u64,
    /// The first such frame.
    pub example: Mismatch,
}

/// A finding.
#[derive(Debug, Clone, Serialize)]
pub struct Finding {
    /// `liveness`, `check-cmd` or `verdict`.
    pub oracle: String,
    /// What happened.
    pub detail: String,
    /// Frames since the last good check.
    pub frames: usize,
    /// The capture of those frames.
    pub pcap: Option<String>,
    /// Whether replaying them against a fresh peer did it again (`None`: no
    /// `--restart-cmd`, not tried).
    pub reproduced: Option<bool>,
    /// The shortest sequence found that still does it.
    pub shrunk: Option<Vec<Spec>>,
    /// Its capture.
    pub shrunk_pcap: Option<String>,
    /// Replays the shrinking took.
    pub replays: u32,
}

/// What a run did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Summary {
    /// The seed.
    pub seed: u64,
    /// The datapath.
    pub datapath: String,
    /// Fuzz frames sent.
    pub frames_sent: u64,
    /// Checks of the oracles passed.
    pub checks_passed: u64,
    /// Frames per kind.
    pub kinds: BTreeMap<String, u64>,
    /// The peer's answers ("ACK", "NAK INVALID_REQUEST", "silence", ...).
    pub answers: BTreeMap<String, u64>,
    /// Answers that came outside a frame's window.
    pub stray_answers: u64,
    /// CNPs the peer sent (its answer to CE-marked frames where it runs DCQCN).
    pub cnps: u64,
    /// Frames sent marked ECN CE (`ip` frames with the `ecn_ce` edge).
    pub ce_marked: u64,
    /// Wrong verdicts (with `--verdicts count`; with `stop` the first is a finding).
    pub mismatches: Vec<MismatchCount>,
    /// Fuzz QPs of the peer used (each ends in the error state or at the end of the run).
    pub qps_used: u64,
    /// Times the peer was restarted (QPs used up, replays).
    pub peer_restarts: u64,
    /// Findings.
    pub findings: Vec<Finding>,
    /// Wrong verdicts (with `--verdicts stop`) that a fresh peer did not give again
    /// when replayed: not findings; the run went on after each.
    pub unconfirmed: Vec<Finding>,
    /// Seconds the run took.
    pub secs: f64,
    /// Why the run ended.
    pub ended: String,
}

/// The name of a spec's kind ("bad_rkey").
pub fn kind_name(s: &Spec) -> String {
    serde_json::to_value(s)
        .ok()
        .and_then(|v| v.get("kind").and_then(|k| k.as_str()).map(str::to_string))
        .unwrap_or_default()
}

/// The first PSN of the run: close below the 24-bit wrap for half the seeds, so that the
/// wrap is crossed early.
pub fn first_psn(seed: u64) -> u32 {
    let mut r = uroce::sim::Rng::new(seed ^ 0x5eed_0f95);
    if r.chance(0.5) {
        0xff_ffff - r.range(0, 48) as u32
    } else {
        r.next_u64() as u32 & 0xff_ffff
    }
}

/// Runs `sh -c cmd`; Err with its output when it fails.
fn shell(cmd: &str) -> anyhow::Result<Result<(), String>> {
    let o = Command::new("sh")
        .args(["-c", cmd])
        .output()
        .with_context(|| format!("running {cmd:?}"))?;
    if o.status.success() {
        return Ok(Ok(()));
    }
    let mut t = String::from_utf8_lossy(&o.stdout).to_string();
    t.push_str(&String::from_utf8_lossy(&o.stderr));
    let t: String = t.chars().take(2000).collect();
    Ok(Err(format!(
        "{cmd:?} exited with {}: {}",
        o.status,
        t.trim()
    )))
}

/// The fuzzing state over one session: which fuzz QP the next frame goes to.
pub(crate) struct Driver {
    pub(crate) sess: Session,
    /// The QP in use.
    cur: usize,
    /// QPs in the error state (or whose state is lost): they take no more frames.
    dead: Vec<bool>,
    /// Whether frames go to each QP left in turn (a perftest server's QPs, `-q N`)
    /// rather than to one QP until it is gone (a uroce perf server's many).
    spread: bool,
}

/// One frame sent and judged.
pub(crate) struct Step {
    /// The frame as on the wire (for the capture).
    pub(crate) frame: Vec<u8>,
    pub(crate) got: Outcome,
    pub(crate) mismatch: Option<Mismatch>,
    /// PSN sent, the responder's expected PSN before, and what was expected.
    pub(crate) psn: u32,
    pub(crate) epsn: u32,
    pub(crate) expect: Expect,
    /// The fuzz QP (ours).
    pub(crate) qpn: u32,
    /// CNPs among what came back.
    pub(crate) cnps: u64,
}

impl Driver {
    pub(crate) fn new(sess: Session) -> Self {
        let n = sess.targets.len();
        let spread = sess.spread;
        Self {
            sess,
            cur: 0,
            dead: vec![false; n],
            spread,
        }
    }

    /// Whether a fuzz QP is left.
    pub(crate) fn has_target(&self) -> bool {
        self.dead.iter().any(|d| !d)
    }

    /// QPs taken so far (the one in use counts; spread, every one does).
    pub(crate) fn used(&self) -> u64 {
        if self.spread {
            return self.dead.len() as u64;
        }
        (self.dead.iter().filter(|d| **d).count() + usize::from(self.has_target())) as u64
    }

    /// Moves to the next QP left: the next in turn when spread, else the first.
    fn advance(&mut self) {
        let n = self.dead.len();
        let from = if self.spread { self.cur + 1 } else { 0 };
        if let Some(i) = (0..n).map(|k| (from + k) % n).find(|&i| !self.dead[i]) {
            self.cur = i;
        }
    }

    /// QP `i` takes no more frames.
    fn kill(&mut self, i: usize) {
        self.dead[i] = true;
        if i == self.cur {
            self.advance();
        }
    }

    /// The spec the generator makes for the QP in use.
    pub(crate) fn next_spec(&self, g: &mut Generator) -> Spec {
        let (t, tr) = &self.sess.targets[self.cur];
        g.next(tr, t)
    }

    /// Sends `spec` to the QP in use, waits for the answer, judges and learns. `None`
    /// when a late answer showed the QP had gone to the error state and none is left.
    pub(crate) fn step(&mut self, spec: &Spec, wait: Duration) -> anyhow::Result<Option<Step>> {
        // Late answers to earlier frames are not this frame's; they say the QP's state
        // is not what was learnt (a late fatal NAK: the QP is gone).
        for (q, late) in self.sess.drain()? {
            let Some(i) = self.sess.targets.iter().position(|(t, _)| t.my_qpn == q) else {
                continue;
            };
            match Outcome::of(&[late]) {
                Outcome::Nak { code, .. } if code != 0 => self.kill(i),
                _ => self.sess.targets[i].1.known = false,
            }
        }
        if !self.has_target() {
            return Ok(None);
        }
        let at = self.cur;
        let (t, mut tr) = self.sess.targets[at];
        let epsn = tr.epsn;
        let r = render(spec, &t, &tr);
        self.sess.send(&t, &r.bytes, r.whole)?;
        let frame = if r.whole {
            r.bytes.clone()
        } else {
            frame_of(&t, &r.bytes)
        };
        let mut resp = self.sess.collect(t.my_qpn, wait)?;
        // An answer the rules ask for that has not come may only be late (a loaded
        // host, a guest): wait longer before calling it silence.
        if resp.is_empty()
            && !matches!(
                r.expect,
                Expect::Any
                    | Expect::Silent
                    | Expect::NotAccepted
                    | Expect::DupAck
                    | Expect::NoAckNak
            )
        {
            resp = self.sess.collect(t.my_qpn, wait * 20)?;
        }
        let got = Outcome::of(&resp);
        let cnps = verdict::cnps(&resp);
        let mismatch = (!judge(&r, tr.epsn, &got)).then_some(Mismatch {
            spec: *spec,
            expected: r.expect,
            got,
            psn: r.psn,
            epsn: tr.epsn,
        });
        let alive = learn(&mut tr, spec, &r, &got);
        // A QP that should have answered and said nothing has gone to the error state
        // without a NAK, or its state is not what was learnt: either way it is left.
        let gone = mismatch.is_some() && got == Outcome::Silence;
        if gone {
            tr.known = false;
        }
        self.sess.targets[at].1 = tr;
        if !alive || gone {
            self.kill(at);
        } else if self.spread {
            self.advance();
        }
        Ok(Some(Step {
            frame,
            got,
            mismatch,
            psn: r.psn,
            epsn,
            expect: r.expect,
            qpn: t.my_qpn,
            cnps,
        }))
    }
}

impl Driver {
    /// The liveness oracle. With a known-good QP, its operation must complete
    /// ([`Session::liveness`]), and, when frames are spread over the peer's QPs (a
    /// perftest server, `-q N`), each fuzz QP left in a known state must take a valid
    /// request ([`Self::probe`]). A peer with one QP (`ibv_rc_pingpong`,
    /// `ibv_ud_pingpong`) is probed on that QP alone. A QP already in the error state,
    /// as the rules asked, cannot be probed: the reconnection to a fresh peer is then
    /// the check.
    pub(crate) fn liveness(
        &mut self,
        wait: Duration,
        deadline: Duration,
    ) -> anyhow::Result<Result<(), String>> {
        if self.sess.has_good() {
            if let Err(why) = self.sess.liveness(deadline)? {
                return Ok(Err(why));
            }
            if !self.spread {
                return Ok(Ok(()));
            }
            for i in 0..self.dead.len() {
                if self.dead[i] || !self.sess.targets[i].1.decidable() {
                    continue;
                }
                if let Err(why) = self.probe(i, wait, deadline)? {
                    return Ok(Err(why));
                }
            }
            return Ok(Ok(()));
        }
        if !self.has_target() {
            return Ok(Ok(()));
        }
        let i = self.cur;
        self.probe(i, wait, deadline)
    }

    /// The request that probes fuzz QP `t` in state `tr`: one the peer's QP is enabled
    /// for, at its expected PSN (a SEND peer with a SEND open: a SEND LAST that fits).
    fn probe_spec(t: &mutate::Target, tr: &mutate::Track) -> Spec {
        if t.ud {
            return Spec::UdSend {
                len: 8,
                imm: false,
                psn_delta: 1,
            };
        }
        if let Some(n) = tr.send_open {
            return Spec::ContinueSend {
                last: true,
                len: t.recv_size.saturating_sub(n).clamp(1, 8),
            };
        }
        if t.write_ok {
            Spec::Write {
                len: 8,
                off: 0,
                ack_req: true,
            }
        } else if t.read_ok {
            Spec::Read { len: 8, off: 0 }
        } else if t.atomic_ok {
            Spec::Atomic {
                cmp: false,
                off: 0,
                misalign: 0,
            }
        } else {
            Spec::Send { len: 8 }
        }
    }

    /// Probes fuzz QP `i`: a valid request at its expected PSN ([`Self::probe_spec`])
    /// must be taken (ACKed, answered with READ response data or an atomic ACK; a UD
    /// datagram answered with one) before `deadline`; an RNR NAK (no receive yet) or a
    /// PSN sequence error NAK (the expected PSN learnt anew) make the probe go again.
    fn probe(
        &mut self,
        i: usize,
        wait: Duration,
        deadline: Duration,
    ) -> anyhow::Result<Result<(), String>> {
        let until = Instant::now() + deadline;
        let mut last = String::from("nothing");
        while Instant::now() < until {
            if self.dead[i] {
                return Ok(Ok(()));
            }
            let (t, mut tr) = self.sess.targets[i];
            let spec = Self::probe_spec(&t, &tr);
            let r = render(&spec, &t, &tr);
            self.sess.send(&t, &r.bytes, false)?;
            let got = Outcome::of(&self.sess.collect(t.my_qpn, wait)?);
            let alive = learn(&mut tr, &spec, &r, &got);
            let taken = match got {
                Outcome::Ack { psn } | Outcome::AtomicAck { psn } => psn == r.psn,
                Outcome::ReadResp { first, .. } => first == r.psn,
                Outcome::Datagram => true,
                _ => false,
            };
            match got {
                Outcome::Ack { psn } if !taken => {
                    // A duplicate's ACK: the responder has taken up to `psn`.
                    tr.epsn = mutate::psn_add(psn, 1);
                    tr.known = true;
                }
                Outcome::Rnr { .. } | Outcome::Silence => {
                    std::thread::sleep(Duration::from_millis(5))
                }
                _ => {}
            }
            self.sess.targets[i].1 = tr;
            if taken {
                return Ok(Ok(()));
            }
            if !alive {
                self.kill(i);
                if r.expect == Expect::Any {
                    // Its state was not known: the probe may have been out of order.
                    return Ok(Ok(()));
                }
                return Ok(Err(format!(
                    "the probe {} to fuzz QP {:#x} at its expected PSN {:#08x} was refused: {}",
                    kind_name(&spec),
                    t.dest_qp,
                    r.psn,
                    got.label()
                )));
            }
            last = got.label();
        }
        let (t, _) = self.sess.targets[i];
        Ok(Err(format!(
            "the probe to fuzz QP {:#x} at its expected PSN was not taken within {deadline:?} (last answer: {last})",
            t.dest_qp
        )))
    }
}

/// Connects, after running the restart command when `restart`.
fn connect(cfg: &FuzzConfig, restart: bool) -> anyhow::Result<Session> {
    let cmd = if restart {
        Some(
            cfg.restart_cmd
                .as_deref()
                .context("no --restart-cmd to restart the peer with")?,
        )
    } else {
        None
    };
    // The AF_XDP socket of a session just closed may hold its queue a moment longer
    // (EBUSY): a new session is tried again until `connect_for` runs out. A peer that
    // serves one exchange (a pingpong, perftest) may have spent it on the try that
    // failed, so it is restarted again first. `connect_for` counts from the end of the
    // restart command (which may wait for the old peer to go), and the tries end at
    // three times it in all.
    let start = Instant::now();
    loop {
        if let Some(cmd) = cmd {
            if let Err(why) = shell(cmd)? {
                bail!("restarting the peer: {why}");
            }
        }
        let tried = Instant::now();
        match Session::connect(&cfg.peer, cfg.seed) {
            Ok(s) => return Ok(s),
            Err(_)
                if tried.elapsed() < cfg.peer.connect_for
                    && start.elapsed() < 3 * cfg.peer.connect_for =>
            {
                std::thread::sleep(Duration::from_millis(100));
            }
            Err(e) if restart => {
                return Err(e).context(format!(
                    "no session with the peer {:.1} s after its restart command",
                    tried.elapsed().as_secs_f64()
                ))
            }
            Err(e) => return Err(e),
        }
    }
}

fn write_pcap(path: &std::path::Path, frames: &[Vec<u8>]) -> anyhow::Result<()> {
    let bytes = uroce::pcap::write_pcap(frames.iter().map(Vec::as_slice));
    std::fs::write(path, bytes).with_context(|| format!("writing {}", path.display()))
}

fn shrunk_path(p: &std::path::Path) -> PathBuf {
    let stem = p
        .file_stem()
        .map_or("fuzz".into(), |s| s.to_string_lossy().to_string());
    p.with_file_name(format!("{stem}-shrunk.pcap"))
}

/// Runs the fuzzer; `progress` gets a line about once a second.
pub fn run(cfg: &FuzzConfig, progress: &mut dyn FnMut(&str)) -> anyhow::Result<Summary> {
    uroce::datapath::catch_interrupts();
    let start = Instant::now();
    let mut sum = Summary {
        seed: cfg.seed,
        ..Summary::default()
    };
    let first = connect(cfg, false)?;
    // Every later session (a fresh peer, a replay) takes the datapath the first one got:
    // the frames are generated for it (whole frames or RoCE bytes), and `auto` falling
    // back to UDP while the last AF_XDP socket still holds its queue would not send them.
    let mut pinned = cfg.clone();
    pinned.peer.backend = if first.whole_frames {
        crate::backend::BackendChoice::Xdp
    } else {
        crate::backend::BackendChoice::Udp
    };
    let cfg = &pinned;
    let mut d = Driver::new(first);
    sum.datapath = d.sess.datapath.clone();
    let mut gen = Generator::new(cfg.seed, d.sess.whole_frames);
    let mut since_specs: Vec<Spec> = Vec::new();
    let mut since_frames: Vec<Vec<u8>> = Vec::new();
    let mut mismatches: BTreeMap<(String, String, String), MismatchCount> = BTreeMap::new();
    let mut last_line = Instant::now();
    let mut used_before = 0u64;
    let done = |sum: &Summary| match (&cfg.replay, cfg.limit) {
        (Some(v), _) => sum.frames_sent >= v.len() as u64,
        (None, Limit::Frames(n)) => sum.frames_sent >= n,
        (None, Limit::Time(t)) => start.elapsed() >= t,
    };
    let mut finding: Option<(shrink::Want, String)> = None;
    'outer: loop {
        'run: while !done(&sum) {
            if uroce::datapath::interrupted() {
                sum.ended = "interrupted".into();
                break;
            }
            for _ in 0..cfg.burst {
                if done(&sum) {
                    break;
                }
                if !d.has_target() {
                    // Every fuzz QP of this peer is in the error state: a fresh peer (the
                    // restart command's, or a new connection to a server that keeps
                    // serving, `uroce perf --keep-serving`), or stop.
                    used_before += d.used();
                    sum.stray_answers += d.sess.stray;
                    drop(d);
                    d = match connect(cfg, cfg.restart_cmd.is_some()) {
                        Ok(s) => Driver::new(s),
                        Err(e) if cfg.restart_cmd.is_none() => {
                            sum.ended = format!("every fuzz QP of the peer is in the error state and it took no new connection ({e:#}); run the peer as a server that keeps serving (uroce perf --keep-serving) or give --restart-cmd to go on with a fresh peer");
                            break 'outer;
                        }
                        Err(e) => return Err(e),
                    };
                    sum.peer_restarts += 1;
                    // The frames sent to the old peer are no cause of anything now.
                    since_specs.clear();
                    since_frames.clear();
                    continue;
                }
                let spec = match &cfg.replay {
                    Some(v) => v[sum.frames_sent as usize],
                    None => d.next_spec(&mut gen),
                };
                let Some(st) = d.step(&spec, cfg.wait)? else {
                    continue;
                };
                sum.frames_sent += 1;
                if cfg.verbose {
                    progress(&format!(
                        "qp {:#x} psn {:#08x} (expected {:#08x}) {spec:?}: {} (rules: {:?})",
                        st.qpn,
                        st.psn,
                        st.epsn,
                        st.got.label(),
                        st.expect
                    ));
                }
                *sum.kinds.entry(kind_name(&spec)).or_default() += 1;
                *sum.answers.entry(st.got.label()).or_default() += 1;
                sum.cnps += st.cnps;
                if spec
                    == (Spec::Ip {
                        edge: mutate::IpEdge::EcnCe,
                    })
                {
                    sum.ce_marked += 1;
                }
                since_specs.push(spec);
                since_frames.push(st.frame);
                if let Some(m) = st.mismatch {
                    // Silence where the rules ask for an answer: the peer may have stopped
                    // answering altogether, which the liveness oracle tells.
                    if m.got == Outcome::Silence {
                        if let Err(why) = d.liveness(cfg.wait, cfg.deadline)? {
                            finding = Some((shrink::Want::Liveness, why));
                            break 'run;
                        }
                    }
                    let key = (
                        kind_name(&m.spec),
                        format!("{:?}", m.expected),
                        m.got.label(),
                    );
                    mismatches
                        .entry(key.clone())
                        .or_insert_with(|| MismatchCount {
                            kind: key.0.clone(),
                            expected: m.expected,
                            got: key.2.clone(),
                            count: 0,
                            example: m.clone(),
                        })
                        .count += 1;
                    if cfg.verdicts == VerdictMode::Stop {
                        finding = Some((
                        shrink::Want::Verdict(key.0.clone(), m.expected),
                        format!(
                            "{} frame {:?}: the rules ask {:?}, the peer answered {} (PSN {:#08x}, expected PSN {:#08x})",
                            key.0, m.spec, m.expected, key.2, m.psn, m.epsn
                        ),
                    ));
                        break 'run;
                    }
                }
                if last_line.elapsed() >= Duration::from_secs(1) {
                    last_line = Instant::now();
                    progress(&line(&sum, start, used_before + d.used(), mismatches.len()));
                }
            }
            // The oracles.
            if let Err(why) = d.liveness(cfg.wait, cfg.deadline)? {
                finding = Some((shrink::Want::Liveness, why));
                break;
            }
            if let Some(cmd) = &cfg.check_cmd {
                if let Err(why) = shell(cmd)? {
                    finding = Some((shrink::Want::CheckCmd, why));
                    break;
                }
            }
            sum.checks_passed += 1;
            since_specs.clear();
            since_frames.clear();
        }
        used_before += d.used();
        sum.stray_answers += d.sess.stray;
        drop(d);
        let Some((want, detail)) = finding.take() else {
            if sum.ended.is_empty() {
                sum.ended = "limit reached".into();
            }
            break 'outer;
        };
        let f = investigate(
            cfg,
            &want,
            detail,
            &since_specs,
            &since_frames,
            &mut sum,
            progress,
        )?;
        // A wrong verdict a fresh peer does not give again is noted, and the run goes on
        // (an answer late past the window, on a loaded host, looks like one).
        if matches!(want, shrink::Want::Verdict(..)) && f.reproduced == Some(false) && !done(&sum) {
            progress("the wrong verdict did not come again from a fresh peer: noted as unconfirmed; going on");
            sum.unconfirmed.push(f);
            d = Driver::new(connect(cfg, true)?);
            sum.peer_restarts += 1;
            since_specs.clear();
            since_frames.clear();
            continue 'outer;
        }
        sum.ended = format!("finding ({})", f.oracle);
        sum.findings.push(f);
        break 'outer;
    }
    sum.qps_used = used_before;
    sum.mismatches = mismatches.into_values().collect();
    sum.secs = start.elapsed().as_secs_f64();
    progress(&line(&sum, start, sum.qps_used, sum.mismatches.len()));
    Ok(sum)
}

/// What a finding is: its frames written to the capture, then, where the peer can be
/// restarted, replayed against a fresh one and shrunk.
fn investigate(
    cfg: &FuzzConfig,
    want: &shrink::Want,
    detail: String,
    since_specs: &[Spec],
    since_frames: &[Vec<u8>],
    sum: &mut Summary,
    progress: &mut dyn FnMut(&str),
) -> anyhow::Result<Finding> {
    let oracle = match want {
        shrink::Want::Liveness => "liveness",
        shrink::Want::CheckCmd => "check-cmd",
        shrink::Want::Verdict(..) => "verdict",
    }
    .to_string();
    let path = cfg
        .pcap
        .clone()
        .unwrap_or_else(|| PathBuf::from(format!("uroce-fuzz-finding-{}.pcap", cfg.seed)));
    write_pcap(&path, since_frames)?;
    let mut f = Finding {
        oracle: oracle.clone(),
        detail,
        frames: since_specs.len(),
        pcap: Some(path.display().to_string()),
        reproduced: None,
        shrunk: None,
        shrunk_pcap: None,
        replays: 0,
    };
    if cfg.restart_cmd.is_some() {
        progress(&format!(
            "finding ({oracle}): shrinking {} frames against a fresh peer each time",
            since_specs.len()
        ));
        let out = shrink::shrink(cfg, want, since_specs, &mut sum.peer_restarts)?;
        f.reproduced = Some(out.reproduced);
        f.replays = out.replays;
        if out.reproduced {
            let sp = shrunk_path(&path);
            write_pcap(&sp, &out.frames)?;
            f.shrunk_pcap = Some(sp.display().to_string());
            f.shrunk = Some(out.specs);
        }
    }
    Ok(f)
}

/// The progress line: frames, answers by kind, QPs, restarts, findings.
fn line(sum: &Summary, start: Instant, qps: u64, mismatches: usize) -> String {
    let mut answers: Vec<String> = sum
        .answers
        .iter()
        .map(|(k, v)| format!("{k} {v}"))
        .collect();
    answers.sort();
    format!(
        "{:>6.1} s  frames {}  answers: {}  QPs {}  restarts {}  wrong verdicts {}  findings {}",
        start.elapsed().as_secs_f64(),
        sum.frames_sent,
        answers.join(", "),
        qps,
        sum.peer_restarts,
        mismatches,
        sum.findings.len()
    )
}
