//! Turning captured frames into records: the engine of `uroce decode`.
//!
//! One [`FrameRecord`] per frame, serialised as one JSON object per line (keys of absent
//! headers omitted) or as a compact tcpdump-like line.

use serde::Serialize;

use uroce::pcap::{Frame, LinkType};
use uroce::wire::{self, bth, ethernet, Dissection, Syndrome, WireError};

/// RETH fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct RethJson {
    pub va: u64,
    pub rkey: u32,
    pub len: u32,
}

/// AETH fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct AethJson {
    pub syndrome: u8,
    pub msn: u32,
}

/// DETH fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct DethJson {
    pub qkey: u32,
    pub src_qp: u32,
}

/// AtomicETH fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct AtomicJson {
    pub va: u64,
    pub rkey: u32,
    pub swap_add: u64,
    pub compare: u64,
}

/// What `uroce decode` says about one frame.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FrameRecord {
    /// 1-based frame number in the capture.
    pub frame: usize,
    /// A well-formed RoCEv2 packet with a good ICRC.
    pub ok: bool,
    /// Why not, when not ok.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The ICRC was computed and matched.
    pub icrc_ok: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub opcode: Option<u8>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub opcode_name: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub psn: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dest_qp: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ack_req: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub solicited: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pkey: Option<u16>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fecn: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub becn: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pad: Option<u8>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub payload_len: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ip: Option<u8>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reth: Option<RethJson>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub aeth: Option<AethJson>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub deth: Option<DethJson>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub imm: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ieth: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub atomic: Option<AtomicJson>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub atomic_ack: Option<u64>,
    /// For the human line only.
    #[serde(skip)]
    pub addrs: Option<String>,
    /// The frame is addressed to UDP port 4791, even if it is damaged or cut short.
    #[serde(skip)]
    pub to_roce_port: bool,
}

impl FrameRecord {
    fn empty(frame: usize) -> Self {
        Self {
            frame,
            ok: false,
            error: None,
            icrc_ok: false,
            opcode: None,
            opcode_name: None,
            psn: None,
            dest_qp: None,
            ack_req: None,
            solicited: None,
            pkey: None,
            fecn: None,
            becn: None,
            pad: None,
            payload_len: None,
            ip: None,
            reth: None,
            aeth: None,
            deth: None,
            imm: None,
            ieth: None,
            atomic: None,
            atomic_ack: None,
            addrs: None,
            to_roce_port: false,
        }
    }

    /// True when the frame was addressed to UDP port 4791 (whether or not it was valid).
    pub fn is_roce(&self) -> bool {
        self.to_roce_port || self.opcode.is_some()
    }

    /// One JSON object, no trailing newline.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
    }
}

/// Decodes frame number `index` (1-based) of a capture.
pub fn record(index: usize, frame: &Frame<'_>) -> FrameRecord {
    let mut r = FrameRecord::empty(index);
    let (dissection, ip) = match frame.link {
        LinkType::Ethernet => {
            let d = wire::dissect(frame.data);
            let start = ethernet::Frame::new_checked(frame.data)
                .map(|f| f.header_len())
                .unwrap_or(frame.data.len());
            (d, &frame.data[start..])
        }
        LinkType::RawIp => (wire::dissect_ip(frame.data), frame.data),
        LinkType::LinuxSll | LinkType::LinuxSll2 => {
            let (hl, proto_at) = if frame.link == LinkType::LinuxSll {
                (16, 14)
            } else {
                (20, 0)
            };
            if frame.data.len() < hl {
                r.error = Some(format!(
                    "Linux cooked header truncated: need {hl} bytes, have {}",
                    frame.data.len()
                ));
                return r;
            }
            let proto = u16::from_be_bytes([frame.data[proto_at], frame.data[proto_at + 1]]);
            if proto != ethernet::ETHERTYPE_IPV4 && proto != ethernet::ETHERTYPE_IPV6 {
                r.error = Some(
                    WireError::UnsupportedEthertype {
                        ethertype: proto,
                        offset: proto_at,
                    }
                    .to_string(),
                );
                return r;
            }
            let ip = &frame.data[hl..];
            let d = wire::dissect_ip(ip);
            let d = Dissection {
                error: d.error.map(|e| e.shifted(hl)),
                ..d
            };
            (d, ip)
        }
        LinkType::Other(n) => {
            r.error = Some(format!("unsupported capture link type {n}"));
            return r;
        }
    };
    r.to_roce_port = to_roce_port(ip);
    fill(&mut r, &dissection, udp_payload_of(ip));
    if dissection.is_ok() && (frame.orig_len as usize) > frame.data.len() {
        r.ok = false;
        r.error = Some(format!(
            "frame captured short: {} of {} bytes (snap length)",
            frame.data.len(),
            frame.orig_len
        ));
    }
    r
}

/// True when an IP packet, however damaged, is UDP to port 4791.
fn to_roce_port(ip: &[u8]) -> bool {
    let (proto, hl) = match ip.first().map(|b| b >> 4) {
        Some(4) if ip.len() > 9 => (ip[9], usize::from(ip[0] & 0x0f) * 4),
        Some(6) if ip.len() > 6 => (ip[6], 40),
        _ => return false,
    };
    proto == 17 && ip.get(hl + 2..hl + 4) == Some(&wire::ROCEV2_UDP_PORT.to_be_bytes()[..])
}

/// The UDP payload of an IP packet whose UDP header could be read, for BTH fields of
/// packets whose opcode is unknown.
fn udp_payload_of(ip: &[u8]) -> &[u8] {
    let hl = match ip.first().map(|b| b >> 4) {
        Some(4) => usize::from(ip[0] & 0x0f) * 4,
        Some(6) => 40,
        _ => return &[],
    };
    ip.get(hl + 8..).unwrap_or(&[])
}

fn fill(r: &mut FrameRecord, d: &Dissection<'_>, udp_payload: &[u8]) {
    r.ok = d.is_ok();
    r.error = d.error.map(|e| e.to_string());
    r.icrc_ok = d.icrc_ok;
    if let Some(ip) = &d.ip {
        r.ip = Some(ip.version());
    }
    if let (Some(ip), Some(udp)) = (&d.ip, &d.udp) {
        r.addrs = Some(match ip.src() {
            std::net::IpAddr::V4(_) => {
                format!(
                    "{}:{} > {}:{}",
                    ip.src(),
                    udp.src_port,
                    ip.dst(),
                    udp.dst_port
                )
            }
            std::net::IpAddr::V6(_) => {
                format!(
                    "[{}]:{} > [{}]:{}",
                    ip.src(),
                    udp.src_port,
                    ip.dst(),
                    udp.dst_port
                )
            }
        });
    }
    if let (Some(ip), None) = (&d.ip, &d.udp) {
        r.addrs = Some(format!("{} > {}", ip.src(), ip.dst()));
        return;
    }
    if d.udp.is_none() {
        return;
    }
    if let Ok(h) = bth::Header::new_checked(udp_payload) {
        r.opcode = Some(h.opcode());
        r.opcode_name = wire::Opcode::from_u8(h.opcode()).map(|o| o.name());
        r.psn = Some(h.psn());
        r.dest_qp = Some(h.dest_qp());
        r.ack_req = Some(h.ack_req());
        r.solicited = Some(h.solicited());
        r.pkey = Some(h.pkey());
        r.fecn = Some(h.fecn());
        r.becn = Some(h.becn());
        r.pad = Some(h.pad_count());
    } else {
        r.opcode = d.opcode_raw;
    }
    r.payload_len = d.payload.map(<[u8]>::len);
    let e = &d.ext;
    r.reth = e.reth.map(|x| RethJson {
        va: x.va,
        rkey: x.rkey,
        len: x.len,
    });
    r.aeth = e.aeth.map(|x| AethJson {
        syndrome: x.syndrome,
        msn: x.msn,
    });
    r.deth = e.deth.map(|x| DethJson {
        qkey: x.qkey,
        src_qp: x.src_qp,
    });
    r.imm = e.imm;
    r.ieth = e.ieth;
    r.atomic = e.atomic.map(|x| AtomicJson {
        va: x.va,
        rkey: x.rkey,
        swap_add: x.swap_add,
        compare: x.compare,
    });
    r.atomic_ack = e.atomic_ack.map(|x| x.orig);
}

/// The compact human line for a record, like tcpdump's.
pub fn human_line(r: &FrameRecord) -> String {
    use std::fmt::Write;
    let mut s = format!("{:>5} ", r.frame);
    if let Some(a) = &r.addrs {
        let _ = write!(s, "IPv{} {a} ", r.ip.unwrap_or(0));
    }
    match (r.opcode, r.opcode_name) {
        (Some(_), Some(name)) => s.push_str(name),
        (Some(op), None) => {
            let _ = write!(s, "opcode {op:#04x}");
        }
        _ => {}
    }
    if let Some(qp) = r.dest_qp {
        let _ = write!(s, " qp {qp:#08x}");
    }
    if let Some(psn) = r.psn {
        let _ = write!(s, " psn {psn}");
    }
    for (flag, name) in [
        (r.ack_req, "A"),
        (r.solicited, "SE"),
        (r.fecn, "FECN"),
        (r.becn, "BECN"),
    ] {
        if flag == Some(true) {
            let _ = write!(s, " {name}");
        }
    }
    if let Some(p) = r.pkey {
        if p != 0xffff {
            let _ = write!(s, " pkey {p:#06x}");
        }
    }
    if let Some(x) = r.reth {
        let _ = write!(s, " reth[va {:#x} rkey {:#x} len {}]", x.va, x.rkey, x.len);
    }
    if let Some(x) = r.aeth {
        let kind = match Syndrome::from_byte(x.syndrome) {
            Syndrome::Ack { credits } => format!("ACK credits {credits}"),
            Syndrome::RnrNak { timer } => format!("RNR-NAK timer {timer}"),
            Syndrome::Nak(code) => format!("NAK {code:?}"),
            Syndrome::Reserved(b) => format!("reserved {b:#04x}"),
        };
        let _ = write!(s, " aeth[{kind} msn {}]", x.msn);
    }
    if let Some(x) = r.deth {
        let _ = write!(s, " deth[qkey {:#x} src_qp {:#x}]", x.qkey, x.src_qp);
    }
    if let Some(x) = r.atomic {
        let _ = write!(
            s,
            " atomic[va {:#x} rkey {:#x} swap_add {:#x} compare {:#x}]",
            x.va, x.rkey, x.swap_add, x.compare
        );
    }
    if let Some(x) = r.atomic_ack {
        let _ = write!(s, " orig {x:#x}");
    }
    if let Some(x) = r.imm {
        let _ = write!(s, " imm {x:#010x}");
    }
    if let Some(x) = r.ieth {
        let _ = write!(s, " inv_rkey {x:#x}");
    }
    if let Some(n) = r.payload_len {
        let _ = write!(s, " len {n}");
    }
    if let Some(p) = r.pad {
        if p != 0 {
            let _ = write!(s, " pad {p}");
        }
    }
    if r.ok {
        s.push_str(" icrc ok");
    } else if let Some(e) = &r.error {
        let _ = write!(s, " !! {e}");
    }
    s.trim_end().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn non_roce_frame_says_why() {
        // An ARP frame.
        let mut f = vec![0xffu8; 42];
        f[12] = 0x08;
        f[13] = 0x06;
        let frame = Frame {
            link: LinkType::Ethernet,
            data: &f,
            orig_len: 42,
        };
        let r = record(3, &frame);
        assert!(!r.ok && !r.icrc_ok && r.opcode.is_none());
        assert!(r.error.as_deref().unwrap().contains("ethertype 0x0806"));
        let j: serde_json::Value = serde_json::from_str(&r.to_json()).unwrap();
        assert_eq!(j["frame"], 3);
        assert!(j.get("psn").is_none());
        assert!(human_line(&r).contains("not RoCEv2"));
    }
}
