//! Views over decoded frames for `uroce decode`: filters (`--qp`, `--opcode`, `--ip`),
//! per-QP statistics (`--stats`) and the PSN-over-time picture (`--plot FILE.svg`).
//!
//! A "QP" here is what a capture can tell apart: the packets sent to one destination QP
//! number at one destination IP address. An RC connection is two of them, the requests
//! to the responder's QP and the responses (ACKs, NAKs, READ responses) to the
//! requester's, both in the requester's PSN space.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt::Write as _;
use std::net::IpAddr;

use serde::Serialize;

use crate::decode::FrameRecord;

/// Which frames to show. Every condition given must hold.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Filter {
    /// The BTH destination QP, or the DETH source QP, is this.
    pub qp: Option<u32>,
    /// The opcode, by name or number ([`Filter::opcode_matches`]).
    pub opcode: Option<String>,
    /// The IP source or destination address is this.
    pub ip: Option<IpAddr>,
}

impl Filter {
    /// True when no condition is set.
    pub fn is_empty(&self) -> bool {
        self.qp.is_none() && self.opcode.is_none() && self.ip.is_none()
    }

    /// Whether record `r` passes.
    pub fn matches(&self, r: &FrameRecord) -> bool {
        if let Some(qp) = self.qp {
            if r.dest_qp != Some(qp) && r.deth.map(|d| d.src_qp) != Some(qp) {
                return false;
            }
        }
        if let Some(op) = &self.opcode {
            if !Self::opcode_matches(op, r) {
                return false;
            }
        }
        if let Some(ip) = self.ip {
            let ip = ip.to_string();
            if r.src.as_deref() != Some(&ip) && r.dst.as_deref() != Some(&ip) {
                return false;
            }
        }
        true
    }

    /// `want` is the opcode's name (case does not matter), its name without the
    /// transport prefix (`SEND_ONLY` matches `RC_SEND_ONLY` and `UD_SEND_ONLY`), or its
    /// value (`0x04`, `4`).
    pub fn opcode_matches(want: &str, r: &FrameRecord) -> bool {
        let Some(op) = r.opcode else {
            return false;
        };
        if let Some(v) = parse_number(want) {
            return u64::from(op) == v;
        }
        let Some(name) = r.opcode_name else {
            return false;
        };
        let want = want.to_ascii_uppercase();
        if name == want {
            return true;
        }
        ["RC_", "UC_", "RD_", "UD_"]
            .iter()
            .any(|p| name.strip_prefix(p) == Some(want.as_str()))
    }
}

/// A number in decimal or `0x` hexadecimal.
pub fn parse_number(s: &str) -> Option<u64> {
    match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(h) => u64::from_str_radix(h, 16).ok(),
        None => s.parse().ok(),
    }
}

const OP_RDMA_READ_REQUEST: u8 = 0x0c;
const OP_READ_RESPONSE_FIRST: u8 = 0x0d;
const OP_READ_RESPONSE_ONLY: u8 = 0x10;
const OP_ACK: u8 = 0x11;
const OP_ATOMIC_ACK: u8 = 0x12;
const OP_CMP_SWAP: u8 = 0x13;
const OP_FETCH_ADD: u8 = 0x14;
const OP_CNP: u8 = 0x81;

/// Whether a packet with this opcode carries a PSN of its own that is sent once, unless
/// retransmitted: RC and UC packets other than acknowledgements.
fn sent_once(op: u8) -> bool {
    (op < 0x40) && op != OP_ACK && op != OP_ATOMIC_ACK
}

/// FIRST and MIDDLE packets of RC and UC messages, and READ response FIRST and MIDDLE:
/// their payload is one path MTU.
fn is_first_or_middle(op: u8) -> bool {
    matches!(op & 0x1f, 0x00 | 0x01 | 0x06 | 0x07) && op < 0x40 || matches!(op, 0x0d | 0x0e)
}

/// Whether a packet with this opcode is a request, in its sender's PSN space: anything
/// but acknowledgements, READ responses and CNPs.
fn is_request(op: u8) -> bool {
    !matches!(
        op,
        OP_ACK | OP_ATOMIC_ACK | OP_CNP | OP_READ_RESPONSE_FIRST..=OP_READ_RESPONSE_ONLY
    )
}

/// What `--stats` says about one QP.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct QpStats {
    /// Destination IP address.
    pub dst: String,
    /// Destination QP.
    pub qp: u32,
    /// RoCE frames to this QP, and their bytes on the wire.
    pub frames: u64,
    pub bytes: u64,
    /// First and last PSN of the requests (every packet but ACKs, READ responses and
    /// CNPs, whose PSNs belong to the other side's requests), and the lowest and
    /// highest; absent when the QP got no request.
    pub psn_first: Option<u32>,
    pub psn_last: Option<u32>,
    pub psn_min: Option<u32>,
    pub psn_max: Option<u32>,
    /// RC / UC packets (not ACKs) whose PSN this QP had already been sent.
    pub retransmissions: u64,
    /// NAKs received: PSN sequence error, RNR, any other code.
    pub seq_naks: u64,
    pub rnr_naks: u64,
    pub other_naks: u64,
    /// Frames marked ECN CE.
    pub ce: u64,
    /// CNPs received.
    pub cnps: u64,
    /// READ and atomic round trips, request sent (first time) to first response, for the
    /// requests this QP made.
    pub round_trips: u64,
    pub rtt_min_us: Option<f64>,
    pub rtt_avg_us: Option<f64>,
    pub rtt_max_us: Option<f64>,
    #[serde(skip)]
    rtt_sum_us: f64,
    #[serde(skip)]
    seen: HashSet<u32>,
    /// READ requests sent to this QP: first PSN and length.
    #[serde(skip)]
    reads: Vec<(u32, u32)>,
}

/// A point of the PSN-over-time picture.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mark {
    Data,
    Retransmission,
    Ack,
    SeqNak,
    RnrNak,
    OtherNak,
    Cnp,
}

/// A QP as a capture tells them apart: destination address and QP number.
type QpKey = (String, u32);

/// A point of the plot: capture time, PSN, what the packet was.
type Point = (u64, u32, Mark);

/// Per-QP statistics and the points of the plot, fed one record at a time.
#[derive(Debug, Default)]
pub struct Stats {
    qps: BTreeMap<QpKey, QpStats>,
    /// READ / atomic requests waiting for their response: (requester, responder, PSN)
    /// to the time of the first request.
    pending: HashMap<(String, String, u32), u64>,
    points: BTreeMap<QpKey, Vec<Point>>,
    first_ts: Option<u64>,
    /// The path MTU as the capture shows it: the largest payload of a FIRST or MIDDLE
    /// packet (those are exactly one MTU long).
    pmtu: Option<u32>,
}

impl Stats {
    /// Adds one decoded frame of `wire_len` bytes captured at `ts_ns`.
    pub fn add(&mut self, r: &FrameRecord, wire_len: usize, ts_ns: Option<u64>) {
        let (Some(op), Some(qp), Some(psn), Some(dst), Some(src)) =
            (r.opcode, r.dest_qp, r.psn, r.dst.clone(), r.src.clone())
        else {
            return;
        };
        let ts = ts_ns.unwrap_or(0);
        self.first_ts = Some(self.first_ts.map_or(ts, |t| t.min(ts)));
        let key = (dst.clone(), qp);
        let q = self.qps.entry(key.clone()).or_insert_with(|| QpStats {
            dst: dst.clone(),
            qp,
            ..Default::default()
        });
        q.frames += 1;
        q.bytes += wire_len as u64;
        if is_request(op) {
            q.psn_first.get_or_insert(psn);
            q.psn_last = Some(psn);
            q.psn_min = Some(q.psn_min.map_or(psn, |m| m.min(psn)));
            q.psn_max = Some(q.psn_max.map_or(psn, |m| m.max(psn)));
        }
        if r.ecn == Some("CE") {
            q.ce += 1;
        }
        if is_first_or_middle(op) {
            if let Some(n) = r.payload_len {
                let n = n as u32;
                self.pmtu = Some(self.pmtu.map_or(n, |m| m.max(n)));
            }
        }
        let mut mark = Mark::Data;
        if op == OP_CNP {
            q.cnps += 1;
            mark = Mark::Cnp;
        } else if sent_once(op) {
            // A READ request may also ask again for the rest of an earlier READ, from
            // the PSN of the first response that went missing: a PSN inside the earlier
            // request's range, never sent as a request itself.
            let pmtu = self.pmtu.unwrap_or(4096).max(256);
            let again_read = op == OP_RDMA_READ_REQUEST
                && q.reads.iter().any(|&(p, len)| {
                    let packets = len.div_ceil(pmtu).max(1);
                    psn.wrapping_sub(p) & 0x00ff_ffff < packets
                });
            if !q.seen.insert(psn) || again_read {
                q.retransmissions += 1;
                mark = Mark::Retransmission;
            }
            if op == OP_RDMA_READ_REQUEST && !again_read {
                if let Some(x) = r.reth {
                    q.reads.push((psn, x.len));
                }
            }
        }
        if let Some(a) = &r.aeth {
            mark = Mark::Ack;
            match (a.kind, a.nak_code) {
                ("RNR_NAK", _) => {
                    q.rnr_naks += 1;
                    mark = Mark::RnrNak;
                }
                ("NAK", Some(0)) => {
                    q.seq_naks += 1;
                    mark = Mark::SeqNak;
                }
                ("NAK", _) => {
                    q.other_naks += 1;
                    mark = Mark::OtherNak;
                }
                _ => {}
            }
            if mark == Mark::Ack && op != OP_ACK && op != OP_ATOMIC_ACK {
                mark = Mark::Data; // a READ response carries data
            }
        }
        if r.ok || r.icrc_ok {
            self.points.entry(key).or_default().push((ts, psn, mark));
        }
        match op {
            OP_RDMA_READ_REQUEST | OP_CMP_SWAP | OP_FETCH_ADD => {
                self.pending.entry((src, dst, psn)).or_insert(ts);
            }
            OP_READ_RESPONSE_FIRST | OP_READ_RESPONSE_ONLY | OP_ATOMIC_ACK => {
                if let Some(t0) = self.pending.remove(&(dst.clone(), src, psn)) {
                    let us = ts.saturating_sub(t0) as f64 / 1000.0;
                    if let Some(q) = self.qps.get_mut(&(dst, qp)) {
                        q.round_trips += 1;
                        q.rtt_sum_us += us;
                        q.rtt_min_us = Some(q.rtt_min_us.map_or(us, |m| m.min(us)));
                        q.rtt_max_us = Some(q.rtt_max_us.map_or(us, |m| m.max(us)));
                        q.rtt_avg_us = Some(q.rtt_sum_us / q.round_trips as f64);
                    }
                }
            }
            _ => {}
        }
    }

    /// The statistics, by destination address and QP.
    pub fn qps(&self) -> impl Iterator<Item = &QpStats> {
        self.qps.values()
    }

    /// The table `--stats` prints.
    pub fn table(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "{:<26} {:>8} {:>7} {:>9} {:>17} {:>7} {:>7} {:>7} {:>5} {:>5} {:>5}  rd/atomic rtt us (n min/avg/max)",
            "dst", "qp", "frames", "bytes", "psn first..last", "retrans", "seq_nak", "rnr_nak", "nak", "ce", "cnp"
        );
        for q in self.qps() {
            let rtt = match (q.rtt_min_us, q.rtt_avg_us, q.rtt_max_us) {
                (Some(a), Some(b), Some(c)) => {
                    format!("{} {a:.1}/{b:.1}/{c:.1}", q.round_trips)
                }
                _ => "-".to_string(),
            };
            let _ = writeln!(
                s,
                "{:<26} {:>#8x} {:>7} {:>9} {:>17} {:>7} {:>7} {:>7} {:>5} {:>5} {:>5}  {rtt}",
                q.dst,
                q.qp,
                q.frames,
                q.bytes,
                match (q.psn_first, q.psn_last) {
                    (Some(a), Some(b)) => format!("{a}..{b}"),
                    _ => "-".to_string(),
                },
                q.retransmissions,
                q.seq_naks,
                q.rnr_naks,
                q.other_naks,
                q.ce,
                q.cnps
            );
        }
        s
    }

    /// The PSN of every packet against time, one panel per QP (SVG).
    pub fn svg(&self) -> String {
        const W: f64 = 900.0;
        const PANEL: f64 = 220.0;
        const LEFT: f64 = 90.0;
        const TOP: f64 = 40.0;
        let panels: Vec<_> = self.points.iter().filter(|(_, p)| !p.is_empty()).collect();
        let h = TOP + PANEL * panels.len().max(1) as f64 + 20.0;
        let mut s = String::new();
        let _ = writeln!(
            s,
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{h}" font-family="monospace" font-size="11">"#
        );
        let _ = writeln!(s, r#"<rect width="100%" height="100%" fill="white"/>"#);
        let _ = writeln!(
            s,
            r#"<text x="{LEFT}" y="16">PSN against time per QP: o data, x retransmission, - ACK, v PSN sequence NAK, r RNR NAK, n other NAK, | CNP</text>"#
        );
        let t0 = self.first_ts.unwrap_or(0);
        let t_end = self
            .points
            .values()
            .flatten()
            .map(|p| p.0)
            .max()
            .unwrap_or(t0)
            .max(t0.saturating_add(1));
        let span = (t_end - t0).max(1) as f64;
        for (i, ((dst, qp), pts)) in panels.iter().enumerate() {
            let y0 = TOP + PANEL * i as f64;
            let (pw, ph) = (W - LEFT - 20.0, PANEL - 50.0);
            let base = pts[0].1;
            let rel = |psn: u32| -> i64 {
                let d = psn.wrapping_sub(base) & 0x00ff_ffff;
                if d >= 0x0080_0000 {
                    i64::from(d) - 0x0100_0000
                } else {
                    i64::from(d)
                }
            };
            let lo = pts.iter().map(|p| rel(p.1)).min().unwrap_or(0);
            let top = pts.iter().map(|p| rel(p.1)).max().unwrap_or(0);
            let hi = top.max(lo + 1);
            let x = |t: u64| LEFT + t.saturating_sub(t0) as f64 / span * pw;
            let y = |psn: u32| y0 + 20.0 + ph - (rel(psn) - lo) as f64 / (hi - lo) as f64 * ph;
            let _ = writeln!(
                s,
                r##"<g><text x="{LEFT}" y="{}">{dst} QP {qp:#x}: {} packets, PSN {}..{}</text><rect x="{LEFT}" y="{}" width="{pw}" height="{ph}" fill="none" stroke="#999"/>"##,
                y0 + 14.0,
                pts.len(),
                (i64::from(base) + lo) & 0x00ff_ffff,
                (i64::from(base) + top) & 0x00ff_ffff,
                y0 + 20.0
            );
            let _ = writeln!(
                s,
                r#"<text x="4" y="{}">{}</text><text x="4" y="{}">{}</text><text x="{LEFT}" y="{}">0 s</text><text x="{}" y="{}" text-anchor="end">{:.6} s</text>"#,
                y0 + 28.0,
                (i64::from(base) + hi) & 0x00ff_ffff,
                y0 + 20.0 + ph,
                (i64::from(base) + lo) & 0x00ff_ffff,
                y0 + 20.0 + ph + 14.0,
                LEFT + pw,
                y0 + 20.0 + ph + 14.0,
                span / 1e9
            );
            for &(t, psn, mark) in pts.iter() {
                let (cx, cy) = (x(t), y(psn));
                let _ = match mark {
                    Mark::Data => writeln!(
                        s,
                        r##"<circle cx="{cx:.1}" cy="{cy:.1}" r="2" fill="#1f77b4"/>"##
                    ),
                    Mark::Retransmission => writeln!(
                        s,
                        r##"<path d="M{:.1} {:.1}l6 6m0 -6l-6 6" stroke="#d62728" stroke-width="1.5"/>"##,
                        cx - 3.0,
                        cy - 3.0
                    ),
                    Mark::Ack => writeln!(
                        s,
                        r##"<path d="M{:.1} {cy:.1}h6" stroke="#2ca02c"/>"##,
                        cx - 3.0
                    ),
                    Mark::SeqNak | Mark::RnrNak | Mark::OtherNak => {
                        let color = match mark {
                            Mark::SeqNak => "#d62728",
                            Mark::RnrNak => "#ff7f0e",
                            _ => "#8c564b",
                        };
                        writeln!(
                            s,
                            r#"<path d="M{:.1} {:.1}h8l-4 7z" fill="{color}"/>"#,
                            cx - 4.0,
                            cy - 3.5
                        )
                    }
                    Mark::Cnp => writeln!(
                        s,
                        r##"<path d="M{cx:.1} {:.1}v{ph}" stroke="#9467bd" stroke-dasharray="2,2"/>"##,
                        y0 + 20.0
                    ),
                };
            }
            s.push_str("</g>\n");
        }
        s.push_str("</svg>\n");
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_and_opcode_names() {
        assert_eq!(parse_number("0x15"), Some(0x15));
        assert_eq!(parse_number("21"), Some(21));
        assert_eq!(parse_number("x"), None);
        let mut r = crate::decode::FrameRecord::empty(1);
        assert!(!Filter::opcode_matches("SEND_ONLY", &r));
        r.opcode = Some(4);
        r.opcode_name = Some("RC_SEND_ONLY");
        for yes in [
            "RC_SEND_ONLY",
            "rc_send_only",
            "SEND_ONLY",
            "send_only",
            "4",
            "0x04",
        ] {
            assert!(Filter::opcode_matches(yes, &r), "{yes}");
        }
        for no in ["SEND", "UD_SEND_ONLY", "5", "RC_SEND_ONLY_WITH_IMMEDIATE"] {
            assert!(!Filter::opcode_matches(no, &r), "{no}");
        }
    }

    /// Frames whose capture times go backwards (a merged or edited capture) are drawn
    /// and counted, not a panic.
    #[test]
    fn times_out_of_order() {
        let mut st = Stats::default();
        for (psn, ts) in [(7u32, 50u64), (8, 10), (7, 30)] {
            let mut r = crate::decode::FrameRecord::empty(1);
            r.opcode = Some(4);
            r.dest_qp = Some(0x11);
            r.psn = Some(psn);
            r.src = Some("10.0.0.1".into());
            r.dst = Some("10.0.0.2".into());
            r.ok = true;
            st.add(&r, 60, Some(ts));
        }
        let q = st.qps().next().unwrap();
        assert_eq!((q.frames, q.retransmissions), (3, 1));
        assert_eq!((q.psn_first, q.psn_last), (Some(7), Some(7)));
        let svg = st.svg();
        assert_eq!(svg.matches("<circle").count(), 2);
        assert!(!svg.contains("NaN") && !svg.contains("inf"));
    }
}
