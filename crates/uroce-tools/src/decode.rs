//! Turning captured frames into records: the engine of `uroce decode`.
//!
//! One [`FrameRecord`] per frame, serialised as one JSON object per line (keys of absent
//! headers omitted) or as a compact tcpdump-like line.

use serde::Serialize;

use uroce::pcap::{Frame, LinkType};
use uroce::wire::{self, aeth, bth, cm, ethernet, ipv6, mad, Dissection, Syndrome, WireError};

/// RETH fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct RethJson {
    pub va: u64,
    pub rkey: u32,
    pub len: u32,
}

/// AETH fields, the syndrome decoded (IBTA Vol. 1 §9.3.5, §9.7.5.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct AethJson {
    /// The syndrome byte as on the wire.
    pub syndrome: u8,
    pub msn: u32,
    /// `ACK`, `RNR_NAK`, `NAK` or `RESERVED`.
    pub kind: &'static str,
    /// ACK: the 5-bit credit code.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub credit_code: Option<u8>,
    /// ACK: the credits it grants; absent for code 31 ("no credits": not used).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub credits: Option<u32>,
    /// RNR NAK: the 5-bit timer code.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rnr_timer: Option<u8>,
    /// RNR NAK: the minimum wait that code stands for, in microseconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rnr_timer_us: Option<u64>,
    /// NAK: the 5-bit code.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nak_code: Option<u8>,
    /// NAK: the code's name (`PSN_SEQUENCE_ERROR`, `INVALID_REQUEST`, ...).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nak: Option<&'static str>,
}

impl AethJson {
    fn new(syndrome: u8, msn: u32) -> Self {
        let mut a = Self {
            syndrome,
            msn,
            kind: "RESERVED",
            credit_code: None,
            credits: None,
            rnr_timer: None,
            rnr_timer_us: None,
            nak_code: None,
            nak: None,
        };
        match Syndrome::from_byte(syndrome) {
            Syndrome::Ack { credits } => {
                a.kind = "ACK";
                a.credit_code = Some(credits);
                a.credits = aeth::credits_from_code(credits);
            }
            Syndrome::RnrNak { timer } => {
                a.kind = "RNR_NAK";
                a.rnr_timer = Some(timer);
                a.rnr_timer_us = Some(uroce::transport::rnr_timer_us(timer));
            }
            Syndrome::Nak(code) => {
                a.kind = "NAK";
                a.nak_code = Some(code.code());
                a.nak = Some(code.name());
            }
            Syndrome::Reserved(_) => {}
        }
        a
    }

    /// The compact text: `ACK credits 8`, `ACK no credits`, `RNR_NAK 640us`, `NAK
    /// PSN_SEQUENCE_ERROR`.
    fn text(&self) -> String {
        match self.kind {
            "ACK" => match self.credits {
                Some(c) => format!("ACK credits {c}"),
                None => "ACK no credits".to_string(),
            },
            "RNR_NAK" => format!(
                "RNR_NAK timer {} ({}us)",
                self.rnr_timer.unwrap_or(0),
                self.rnr_timer_us.unwrap_or(0)
            ),
            "NAK" => format!(
                "NAK {} ({})",
                self.nak.unwrap_or("?"),
                self.nak_code.unwrap_or(0)
            ),
            _ => format!("reserved syndrome {:#04x}", self.syndrome),
        }
    }
}

/// The name of an ECN codepoint (RFC 3168).
pub fn ecn_name(ecn: u8) -> &'static str {
    match ecn & 3 {
        0 => "Not-ECT",
        1 => "ECT(1)",
        2 => "ECT(0)",
        _ => "CE",
    }
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

/// The common MAD header of a UD SEND to QP 1.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MadJson {
    pub base_version: u8,
    pub mgmt_class: u8,
    /// The class's name (`CM`, `SubnAdm`...), when it has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub class: Option<&'static str>,
    pub class_version: u8,
    pub method: u8,
    /// The method's name (`Send`, `GetResp`...), when it has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub method_name: Option<&'static str>,
    pub response: bool,
    pub status: u16,
    pub tid: u64,
    pub attr_id: u16,
    /// The attribute's name (`ConnectRequest`...), for the CM class.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub attr: Option<&'static str>,
    pub attr_mod: u32,
}

/// What `uroce decode` says about one frame.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FrameRecord {
    /// 1-based frame number in the capture.
    pub frame: usize,
    /// When it was captured, nanoseconds since the epoch.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub time_ns: Option<u64>,
    /// Its length on the wire.
    #[serde(skip)]
    pub wire_len: usize,
    /// A well-formed RoCEv2 packet with a good ICRC.
    pub ok: bool,
    /// Why not, when not ok.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The ICRC was computed and matched.
    pub icrc_ok: bool,
    /// The stored ICRC, its 4 bytes in wire order as hex (`0x82fd002a`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub icrc: Option<String>,
    /// When the ICRC did not match: the one the packet should carry, same form.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub icrc_computed: Option<String>,
    /// IP source and destination addresses.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub src: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dst: Option<String>,
    /// UDP source and destination ports.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sport: Option<u16>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dport: Option<u16>,
    /// IP DSCP (6 bits).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dscp: Option<u8>,
    /// IP ECN: `Not-ECT`, `ECT(0)`, `ECT(1)` or `CE`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ecn: Option<&'static str>,
    /// IPv4 identification.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ip_id: Option<u16>,
    /// IPv4 TTL or IPv6 hop limit.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ttl: Option<u8>,
    /// IPv4: whether the header checksum verified.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ip_checksum_ok: Option<bool>,
    /// IPv6: the extension headers followed to UDP, in order.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ipv6_ext: Option<Vec<&'static str>>,
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
    pub migreq: Option<bool>,
    /// BTH transport header version (0 is the only one defined).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tver: Option<u8>,
    /// BTH reserved bits of byte 4 (after FECN, BECN), only when not zero.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resv6: Option<u8>,
    /// BTH reserved bits of byte 8 (after AckReq), only when not zero.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resv7: Option<u8>,
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
    /// UD SEND to QP 1: the MAD header.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mad: Option<MadJson>,
    /// A CM MAD: the message and its fields (see the README).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cm: Option<serde_json::Value>,
    /// A MAD or CM message that could not be read: what and where (offsets from the
    /// start of the MAD). The RoCE packet itself may still be `ok`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mad_error: Option<String>,
    /// The CM part of the human line.
    #[serde(skip)]
    pub cm_text: Option<String>,
    /// For the human line only.
    #[serde(skip)]
    pub addrs: Option<String>,
    /// The frame is addressed to UDP port 4791, even if it is damaged or cut short.
    #[serde(skip)]
    pub to_roce_port: bool,
}

impl FrameRecord {
    /// A record with nothing decoded yet.
    pub(crate) fn empty(frame: usize) -> Self {
        Self {
            frame,
            time_ns: None,
            wire_len: 0,
            ok: false,
            error: None,
            icrc_ok: false,
            icrc: None,
            icrc_computed: None,
            src: None,
            dst: None,
            sport: None,
            dport: None,
            dscp: None,
            ecn: None,
            ip_id: None,
            ttl: None,
            ip_checksum_ok: None,
            ipv6_ext: None,
            opcode: None,
            opcode_name: None,
            psn: None,
            dest_qp: None,
            ack_req: None,
            solicited: None,
            migreq: None,
            tver: None,
            resv6: None,
            resv7: None,
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
            mad: None,
            cm: None,
            mad_error: None,
            cm_text: None,
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
    r.time_ns = frame.ts_ns;
    r.wire_len = frame.orig_len as usize;
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
    fill(&mut r, &dissection, udp_payload_of(ip, &dissection));
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

/// True when an IP packet, however damaged, is UDP to port 4791 (IPv6 extension
/// headers followed as far as they can be).
fn to_roce_port(ip: &[u8]) -> bool {
    let (proto, hl) = match ip.first().map(|b| b >> 4) {
        Some(4) if ip.len() > 9 => (ip[9], usize::from(ip[0] & 0x0f) * 4),
        Some(6) if ip.len() > 6 => {
            match ipv6::walk_extensions(ip.get(40..).unwrap_or(&[]), ip[6]) {
                Ok(e) => (e.protocol, 40 + e.len),
                Err(_) => (ip[6], 40),
            }
        }
        _ => return false,
    };
    proto == 17 && ip.get(hl + 2..hl + 4) == Some(&wire::ROCEV2_UDP_PORT.to_be_bytes()[..])
}

/// The UDP payload of an IP packet whose UDP header could be read, for BTH fields of
/// packets whose opcode is unknown.
fn udp_payload_of<'a>(ip: &'a [u8], d: &Dissection<'_>) -> &'a [u8] {
    let hl = match ip.first().map(|b| b >> 4) {
        Some(4) => usize::from(ip[0] & 0x0f) * 4,
        Some(6) => 40 + d.ipv6_ext.map_or(0, |e| e.len),
        _ => return &[],
    };
    ip.get(hl + 8..).unwrap_or(&[])
}

/// A 32-bit ICRC value as its 4 wire bytes in hex.
fn icrc_hex(v: u32) -> String {
    format!("{:#010x}", v.swap_bytes())
}

fn fill(r: &mut FrameRecord, d: &Dissection<'_>, udp_payload: &[u8]) {
    r.ok = d.is_ok();
    let errors: Vec<String> = d.errors().map(ToString::to_string).collect();
    r.error = (!errors.is_empty()).then(|| errors.join("; "));
    r.icrc_ok = d.icrc_ok;
    r.icrc = d.icrc.map(icrc_hex);
    if !d.icrc_ok {
        r.icrc_computed = d.icrc_computed.map(icrc_hex);
    }
    if let Some(ip) = &d.ip {
        r.ip = Some(ip.version());
        r.src = Some(ip.src().to_string());
        r.dst = Some(ip.dst().to_string());
        r.dscp = Some(ip.dscp());
        r.ecn = Some(ecn_name(ip.ecn()));
        r.ip_id = ip.ident();
        r.ttl = Some(ip.ttl());
        r.ip_checksum_ok = d.ipv4_checksum_ok;
        r.ipv6_ext = d.ipv6_ext.map(|e| {
            e.kinds()
                .iter()
                .map(|&k| ipv6::extension_name(k).unwrap_or("?"))
                .collect()
        });
    }
    if let Some(u) = &d.udp {
        r.sport = Some(u.src_port);
        r.dport = Some(u.dst_port);
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
        r.migreq = Some(h.mig_req());
        r.tver = Some(h.tver());
        r.resv6 = Some(h.resv6()).filter(|&v| v != 0);
        r.resv7 = Some(h.resv7()).filter(|&v| v != 0);
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
    r.aeth = e.aeth.map(|x| AethJson::new(x.syndrome, x.msn));
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
    if let (Some(b), Some(p)) = (d.bth, d.payload) {
        let ud_send = matches!(
            b.opcode,
            wire::Opcode::UdSendOnly | wire::Opcode::UdSendOnlyImm
        );
        if ud_send && b.dest_qp == mad::GSI_QPN {
            fill_mad(r, p);
        }
    }
}

/// The MAD of a UD SEND to QP 1, and its CM message.
fn fill_mad(r: &mut FrameRecord, payload: &[u8]) {
    let h = match mad::Header::new_checked(payload) {
        Ok(h) => h,
        Err(e) => {
            r.mad_error = Some(e.to_string());
            return;
        }
    };
    let m = mad::MadRepr::parse(&h);
    r.mad = Some(MadJson {
        base_version: m.base_version,
        mgmt_class: m.mgmt_class,
        class: m.class_name(),
        class_version: m.class_version,
        method: m.method,
        method_name: m.method_name(),
        response: m.response,
        status: m.status,
        tid: m.tid,
        attr_id: m.attr_id,
        attr: m.attr_name(),
        attr_mod: m.attr_mod,
    });
    if m.mgmt_class != mad::CLASS_CM {
        return;
    }
    match cm::Message::parse(m.attr_id, h.data()) {
        Ok(Some(msg)) => {
            let (j, t) = cm_fields(&msg);
            r.cm = Some(j);
            r.cm_text = Some(t);
        }
        Ok(None) => {}
        Err(e) => {
            r.mad_error = Some(e.shifted(mad::HEADER_LEN).to_string() + " (offset in the MAD)")
        }
    }
}

/// A CM message's fields as JSON, and its compact text.
fn cm_fields(msg: &cm::Message<&[u8]>) -> (serde_json::Value, String) {
    use serde_json::{Map, Value};
    let mut j = Map::new();
    let name = msg.attr().name();
    j.insert("msg".into(), name.into());
    let mut put = |k: &str, v: Value| {
        j.insert(k.to_string(), v);
    };
    let sid_text = |sid: u64| match cm::rdma_cm_service(sid) {
        Some((ps, port)) => match cm::port_space_name(ps) {
            Some(n) => format!("sid {sid:#x} ({n} port {port})"),
            None => format!("sid {sid:#x} (ps {ps:#06x} port {port})"),
        },
        None => format!("sid {sid:#x}"),
    };
    let t = match msg {
        cm::Message::Req(m) => {
            put("local_comm_id", m.local_comm_id().into());
            put("service_id", m.service_id().into());
            put("local_ca_guid", m.local_ca_guid().into());
            put("local_qkey", m.local_qkey().into());
            put("local_qpn", m.local_qpn().into());
            put("responder_resources", m.responder_resources().into());
            put("initiator_depth", m.initiator_depth().into());
            put(
                "remote_cm_response_timeout",
                m.remote_cm_response_timeout().into(),
            );
            put(
                "transport",
                cm::transport_name(m.transport_service_type()).into(),
            );
            put(
                "end_to_end_flow_control",
                m.end_to_end_flow_control().into(),
            );
            put("starting_psn", m.starting_psn().into());
            put(
                "local_cm_response_timeout",
                m.local_cm_response_timeout().into(),
            );
            put("retry_count", m.retry_count().into());
            put("pkey", m.pkey().into());
            put("path_mtu", m.path_mtu().into());
            if let Some(b) = cm::mtu_bytes(m.path_mtu()) {
                put("path_mtu_bytes", b.into());
            }
            put("rnr_retry_count", m.rnr_retry_count().into());
            put("max_cm_retries", m.max_cm_retries().into());
            put("srq", m.srq().into());
            put(
                "primary_local_gid",
                m.primary_local_gid().to_string().into(),
            );
            put(
                "primary_remote_gid",
                m.primary_remote_gid().to_string().into(),
            );
            put("primary_flow_label", m.primary_flow_label().into());
            put("primary_traffic_class", m.primary_traffic_class().into());
            put("primary_hop_limit", m.primary_hop_limit().into());
            put("primary_sl", m.primary_sl().into());
            put(
                "primary_local_ack_timeout",
                m.primary_local_ack_timeout().into(),
            );
            format!(
                "{name} comm {:#x} {} {} qpn {:#x} psn {} mtu {} retry {} rnr_retry {} rd_atom {}/{}",
                m.local_comm_id(),
                sid_text(m.service_id()),
                cm::transport_name(m.transport_service_type()),
                m.local_qpn(),
                m.starting_psn(),
                cm::mtu_bytes(m.path_mtu()).unwrap_or(0),
                m.retry_count(),
                m.rnr_retry_count(),
                m.responder_resources(),
                m.initiator_depth()
            )
        }
        cm::Message::Mra(m) => {
            put("local_comm_id", m.local_comm_id().into());
            put("remote_comm_id", m.remote_comm_id().into());
            put("message_mraed", m.message_mraed().into());
            put("service_timeout", m.service_timeout().into());
            format!(
                "{name} comm {:#x}/{:#x} of {} timeout {}",
                m.local_comm_id(),
                m.remote_comm_id(),
                ["REQ", "REP", "LAP", "?"][usize::from(m.message_mraed() & 3)],
                m.service_timeout()
            )
        }
        cm::Message::Rej(m) => {
            put("local_comm_id", m.local_comm_id().into());
            put("remote_comm_id", m.remote_comm_id().into());
            put("message_rejected", m.message_rejected().into());
            put("reason", m.reason().into());
            if let Some(n) = cm::reject_reason_name(m.reason()) {
                put("reason_name", n.into());
            }
            put("reject_info_len", m.reject_info_len().into());
            format!(
                "{name} comm {:#x}/{:#x} of {} reason {} ({})",
                m.local_comm_id(),
                m.remote_comm_id(),
                ["REQ", "REP", "other", "?"][usize::from(m.message_rejected() & 3)],
                m.reason(),
                cm::reject_reason_name(m.reason()).unwrap_or("unknown")
            )
        }
        cm::Message::Rep(m) => {
            put("local_comm_id", m.local_comm_id().into());
            put("remote_comm_id", m.remote_comm_id().into());
            put("local_qkey", m.local_qkey().into());
            put("local_qpn", m.local_qpn().into());
            put("starting_psn", m.starting_psn().into());
            put("responder_resources", m.responder_resources().into());
            put("initiator_depth", m.initiator_depth().into());
            put("target_ack_delay", m.target_ack_delay().into());
            put("failover_accepted", m.failover_accepted().into());
            put(
                "end_to_end_flow_control",
                m.end_to_end_flow_control().into(),
            );
            put("rnr_retry_count", m.rnr_retry_count().into());
            put("srq", m.srq().into());
            put("local_ca_guid", m.local_ca_guid().into());
            format!(
                "{name} comm {:#x}/{:#x} qpn {:#x} psn {} rnr_retry {} rd_atom {}/{}",
                m.local_comm_id(),
                m.remote_comm_id(),
                m.local_qpn(),
                m.starting_psn(),
                m.rnr_retry_count(),
                m.responder_resources(),
                m.initiator_depth()
            )
        }
        cm::Message::Rtu(m) => {
            put("local_comm_id", m.local_comm_id().into());
            put("remote_comm_id", m.remote_comm_id().into());
            format!(
                "{name} comm {:#x}/{:#x}",
                m.local_comm_id(),
                m.remote_comm_id()
            )
        }
        cm::Message::Dreq(m) => {
            put("local_comm_id", m.local_comm_id().into());
            put("remote_comm_id", m.remote_comm_id().into());
            put("remote_qpn", m.remote_qpn().into());
            format!(
                "{name} comm {:#x}/{:#x} qpn {:#x}",
                m.local_comm_id(),
                m.remote_comm_id(),
                m.remote_qpn()
            )
        }
        cm::Message::Drep(m) => {
            put("local_comm_id", m.local_comm_id().into());
            put("remote_comm_id", m.remote_comm_id().into());
            format!(
                "{name} comm {:#x}/{:#x}",
                m.local_comm_id(),
                m.remote_comm_id()
            )
        }
        cm::Message::SidrReq(m) => {
            put("request_id", m.request_id().into());
            put("pkey", m.pkey().into());
            put("service_id", m.service_id().into());
            format!(
                "{name} req {:#x} {}",
                m.request_id(),
                sid_text(m.service_id())
            )
        }
        cm::Message::SidrRep(m) => {
            put("request_id", m.request_id().into());
            put("status", m.status().into());
            if let Some(n) = cm::sidr_status_name(m.status()) {
                put("status_name", n.into());
            }
            put("qpn", m.qpn().into());
            put("service_id", m.service_id().into());
            put("qkey", m.qkey().into());
            format!(
                "{name} req {:#x} status {} ({}) qpn {:#x} qkey {:#x}",
                m.request_id(),
                m.status(),
                cm::sidr_status_name(m.status()).unwrap_or("unknown"),
                m.qpn(),
                m.qkey()
            )
        }
        cm::Message::Lap(m) => {
            put("local_comm_id", m.local_comm_id().into());
            put("remote_comm_id", m.remote_comm_id().into());
            put("remote_qpn", m.remote_qpn().into());
            put(
                "remote_cm_response_timeout",
                m.remote_cm_response_timeout().into(),
            );
            put(
                "alternate_local_gid",
                m.alternate_local_gid().to_string().into(),
            );
            put(
                "alternate_remote_gid",
                m.alternate_remote_gid().to_string().into(),
            );
            format!(
                "{name} comm {:#x}/{:#x} qpn {:#x} alt {} > {}",
                m.local_comm_id(),
                m.remote_comm_id(),
                m.remote_qpn(),
                m.alternate_local_gid(),
                m.alternate_remote_gid()
            )
        }
        cm::Message::Apr(m) => {
            put("local_comm_id", m.local_comm_id().into());
            put("remote_comm_id", m.remote_comm_id().into());
            put("ap_status", m.ap_status().into());
            format!(
                "{name} comm {:#x}/{:#x} status {}",
                m.local_comm_id(),
                m.remote_comm_id(),
                m.ap_status()
            )
        }
    };
    if let Some(h) = msg.rdma_cm_header() {
        let (src, dst) = (h.src_addr(), h.dst_addr());
        let mut ip = Map::new();
        ip.insert("ip_version".into(), h.ip_version().into());
        ip.insert("src_port".into(), h.src_port().into());
        ip.insert("src".into(), src.map(|a| a.to_string()).into());
        ip.insert("dst".into(), dst.map(|a| a.to_string()).into());
        j.insert("rdma_cm".into(), Value::Object(ip));
        let show = |a: Option<std::net::IpAddr>| match a {
            Some(std::net::IpAddr::V6(a)) => format!("[{a}]"),
            Some(a) => a.to_string(),
            None => String::new(),
        };
        return (
            Value::Object(j),
            format!(
                "cm[{t} rdma_cm[IPv{} {}:{} > {}]]",
                h.ip_version(),
                show(src),
                h.src_port(),
                show(dst)
            ),
        );
    }
    (Value::Object(j), format!("cm[{t}]"))
}

/// The compact human line for a record, like tcpdump's.
pub fn human_line(r: &FrameRecord) -> String {
    use std::fmt::Write;
    let mut s = format!("{:>5} ", r.frame);
    if let Some(a) = &r.addrs {
        let _ = write!(s, "IPv{} {a} ", r.ip.unwrap_or(0));
        if let Some(ext) = &r.ipv6_ext {
            let _ = write!(s, "ext[{}] ", ext.join(","));
        }
        if let Some(id) = r.ip_id {
            let _ = write!(s, "id {id} ");
        }
        if let Some(t) = r.ttl {
            let _ = write!(s, "ttl {t} ");
        }
        if let Some(d) = r.dscp.filter(|&d| d != 0) {
            let _ = write!(s, "dscp {d} ");
        }
        if let Some(e) = r.ecn.filter(|&e| e != "Not-ECT") {
            let _ = write!(s, "{e} ");
        }
        if r.ip_checksum_ok == Some(false) {
            s.push_str("bad-ip-csum ");
        }
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
        (r.migreq, "M"),
        (r.fecn, "FECN"),
        (r.becn, "BECN"),
    ] {
        if flag == Some(true) {
            let _ = write!(s, " {name}");
        }
    }
    if let Some(t) = r.tver.filter(|&t| t != 0) {
        let _ = write!(s, " tver {t}");
    }
    if let Some(v) = r.resv6 {
        let _ = write!(s, " resv6 {v:#04x}");
    }
    if let Some(v) = r.resv7 {
        let _ = write!(s, " resv7 {v:#04x}");
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
        let _ = write!(s, " aeth[{} msn {}]", x.text(), x.msn);
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
    if let Some(m) = &r.mad {
        let class = m
            .class
            .map_or(format!("class {:#04x}", m.mgmt_class), str::to_string);
        let method = m.method_name.map_or(
            format!("method {:#04x}", m.method | (u8::from(m.response) << 7)),
            str::to_string,
        );
        let attr = m
            .attr
            .map_or(format!("attr {:#06x}", m.attr_id), str::to_string);
        let _ = write!(
            s,
            " mad[{class} v{} {method} tid {:#x} {attr}",
            m.class_version, m.tid
        );
        if m.status != 0 {
            let _ = write!(s, " status {:#06x}", m.status);
        }
        s.push(']');
    }
    if let Some(c) = &r.cm_text {
        let _ = write!(s, " {c}");
    }
    if let Some(e) = &r.mad_error {
        let _ = write!(s, " mad[!! {e}]");
    }
    if let Some(p) = r.pad {
        if p != 0 {
            let _ = write!(s, " pad {p}");
        }
    }
    if r.ok {
        s.push_str(" icrc ok");
    } else if let Some(e) = &r.error {
        if r.icrc_ok {
            s.push_str(" icrc ok");
        }
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
            ts_ns: None,
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
