//! Entry points shared by the cargo-fuzz targets in `fuzz/` and by the corpus replay
//! test in `crates/uroce-tools/tests/fuzz_corpus.rs`. Each takes arbitrary bytes, must never panic, and
//! asserts the invariants that hold for any input (a panic here is a finding).
//!
//! The neighbour cache's entry point (`uroce::fuzzing::neighbour`) is in the `uroce` crate,
//! with the cache (`uroce::net::neighbours`); `uroce::fuzzing` re-exports these.

#![forbid(unsafe_code)]

use crate::wire::{
    self, bth, cm, cm_repr, ethernet, immdt, ipv4, ipv6, mad, udp, AethRepr, AtomicAckEthRepr,
    AtomicEthRepr, BthRepr, DethRepr, EthernetRepr, GrhRepr, Ipv4Repr, Ipv6Repr, RethRepr, UdpRepr,
};

/// Whole Ethernet frames: `parse` and `dissect` agree, and what parses re-emits and
/// parses back to the same packet.
pub fn frame(data: &[u8]) {
    let d = wire::dissect(data);
    match wire::parse(data) {
        Ok(p) => {
            assert!(
                d.is_ok(),
                "parse accepted what dissect refused: {:?}",
                d.error
            );
            assert_eq!(d.bth, Some(p.bth.repr()));
            let r = p.frame_repr();
            let mut out = vec![0u8; r.buffer_len(p.payload.len())];
            let n = r
                .emit(p.payload, &mut out)
                .expect("a parsed packet must re-emit");
            // Reserved bits and the CNP's reserved block are emitted as zero, so the
            // bytes may differ there; the representation may not.
            let again = wire::parse(&out[..n]).expect("a re-emitted packet must parse");
            assert_eq!(again.frame_repr(), r);
            assert_eq!(again.payload, p.payload);
        }
        Err(e) => {
            // The dissector follows IPv6 extension headers, which the endpoint's parser
            // refuses; anything else parse refuses, dissect must refuse too.
            let ext = d.ipv6_ext.is_some_and(|x| x.count > 0);
            assert!(
                !d.is_ok() || ext,
                "dissect accepted what parse refused: {e}"
            );
            let _ = e.to_string();
        }
    }
}

/// Packets that start at the IP header.
pub fn ip_packet(data: &[u8]) {
    let d = wire::dissect_ip(data);
    if let Ok(p) = wire::parse_ip(data) {
        assert!(d.is_ok());
        let r = p.frame_repr();
        let mut out = vec![0u8; r.buffer_len(p.payload.len())];
        r.emit(p.payload, &mut out)
            .expect("a parsed packet must re-emit");
    }
}

/// One header, chosen by the first byte; the rest of the input is the header's buffer.
/// Whatever parses must emit and parse back to the same representation.
pub fn header(data: &[u8]) {
    let Some((&which, b)) = data.split_first() else {
        return;
    };
    let mut out = [0u8; 128];
    match which % 12 {
        0 => {
            if let Ok(f) = ethernet::Frame::new_checked(b) {
                let r = EthernetRepr::parse(&f);
                r.emit(&mut out).expect("emit");
                let f2 = ethernet::Frame::new_checked(&out[..]).expect("reparse");
                assert_eq!(EthernetRepr::parse(&f2), r);
            }
        }
        1 => {
            if let Ok(h) = ipv4::Header::new_checked(b) {
                let r = Ipv4Repr::parse(&h);
                r.emit(&mut out, 0).expect("emit");
                let h2 = ipv4::Header::new_checked(&out[..]).expect("reparse");
                assert_eq!(Ipv4Repr::parse(&h2), r);
                assert_eq!(h2.compute_checksum(), h2.checksum());
            }
        }
        2 => {
            if let Ok(h) = ipv6::Header::new_checked(b) {
                let r = Ipv6Repr::parse(&h);
                r.emit(&mut out, 0).expect("emit");
                assert_eq!(
                    Ipv6Repr::parse(&ipv6::Header::new_checked(&out[..]).expect("reparse")),
                    r
                );
            }
        }
        3 => {
            if let Ok(h) = udp::Header::new_checked(b) {
                let r = UdpRepr::parse(&h);
                r.emit(&mut out, 0).expect("emit");
                assert_eq!(
                    UdpRepr::parse(&udp::Header::new_checked(&out[..]).expect("reparse")),
                    r
                );
            }
        }
        4 => {
            if let Ok(h) = bth::Header::new_checked(b) {
                if let Ok(r) = BthRepr::parse(&h) {
                    r.emit(&mut out).expect("emit");
                    let h2 = bth::Header::new_checked(&out[..]).expect("reparse");
                    assert_eq!(BthRepr::parse(&h2), Ok(r));
                }
            }
        }
        5 => round_trip(b, RethRepr::parse, |r, o| r.emit(o), &mut out),
        6 => round_trip(b, AethRepr::parse, |r, o| r.emit(o), &mut out),
        7 => round_trip(b, DethRepr::parse, |r, o| r.emit(o), &mut out),
        8 => round_trip(b, AtomicEthRepr::parse, |r, o| r.emit(o), &mut out),
        9 => round_trip(b, AtomicAckEthRepr::parse, |r, o| r.emit(o), &mut out),
        10 => round_trip(b, GrhRepr::parse, |r, o| r.emit(o), &mut out),
        _ => round_trip(
            b,
            |b| immdt::parse("ImmDt", b),
            |r, o| immdt::emit(*r, o),
            &mut out,
        ),
    }
}

fn round_trip<R: PartialEq + std::fmt::Debug>(
    b: &[u8],
    parse: impl Fn(&[u8]) -> Result<R, wire::WireError>,
    emit: impl Fn(&R, &mut [u8]) -> Result<(), wire::WireError>,
    out: &mut [u8],
) {
    if let Ok(r) = parse(b) {
        emit(&r, out).expect("a parsed header must emit");
        assert_eq!(parse(out).expect("an emitted header must parse"), r);
    }
}

/// A MAD (the payload of a UD SEND to QP 1): the header parses and re-emits to the same
/// representation; the CM message of its attribute ID, and the data read as every other
/// CM message as well, yield every field without a panic; the private data never runs
/// past a MAD's 232 bytes of CM data.
pub fn mad(data: &[u8]) {
    let Ok(h) = mad::Header::new_checked(data) else {
        assert!(data.len() < mad::HEADER_LEN);
        return;
    };
    let r = mad::MadRepr::parse(&h);
    let mut out = [0u8; mad::HEADER_LEN];
    r.emit(&mut out).expect("a parsed MAD header must re-emit");
    let again = mad::MadRepr::parse(&mad::Header::new_checked(&out[..]).expect("reparse"));
    assert_eq!(again, r);
    let _ = (r.class_name(), r.method_name(), r.attr_name());
    assert!(h.data().len() <= cm::DATA_LEN);
    match cm::Message::parse(r.attr_id, h.data()) {
        Ok(Some(m)) => touch_cm(&m),
        Ok(None) => {}
        Err(e) => {
            let _ = e.shifted(mad::HEADER_LEN).to_string();
        }
    }
    for id in 0x10..=0x1a {
        if let Ok(Some(m)) = cm::Message::parse(id, h.data()) {
            touch_cm(&m);
        }
    }
    // A CM MAD the connection manager reads re-emits, and what it emits reads back to
    // the same message (its private data padded to the message's room).
    if let Ok(Some(m)) = cm_repr::CmMad::parse(data) {
        let out = m.to_bytes().expect("a parsed CM MAD must re-emit");
        let again = cm_repr::CmMad::parse(&out)
            .expect("a re-emitted CM MAD must parse")
            .expect("and still be a CM MAD");
        assert_eq!(again.tid, m.tid);
        assert_eq!(again.msg.attr(), m.msg.attr());
        assert_eq!(again.to_bytes().expect("re-emit"), out);
    }
}

/// The connection manager: two endpoints (A at 10.0.0.1 connecting, B at 10.0.0.2
/// listening on the RDMA CM TCP port 7174 and UDP port 7174) driven by a script of
/// one-byte operations and their arguments: a MAD from the input to B or A (op 0 / 1;
/// with bit 7, its communication IDs replaced by ones the endpoints know, so the fuzzer
/// reaches live connections; with bit 6, handed over cut short), time going by and the
/// timers run (2), A connecting or, with bit 7 of the argument, resolving, or with bit
/// 6, B connecting to A peer to peer (3), A (4) or
/// B (5, 6) acting on a connection it knows (accept, reject, MRA, RTU, disconnect, SIDR
/// reply, QP attributes, destroy), and the MADs they sent delivered, some dropped (7). Nothing may panic, every MAD sent
/// must parse as the CM message it was built as, and after `handle_timeout(now)` no timer
/// is still due at `now`.
pub fn cm(data: &[u8]) {
    use crate::cm::{
        service_id, AcceptParams, CmConfig, CmEndpoint, CmEvent, CmId, ConnectParams, PortSpace,
        SidrParams, SidrReplyParams, Transport,
    };
    use crate::transport::QpState;
    use std::net::{IpAddr, Ipv4Addr};
    use std::time::{Duration, Instant};

    const SVC: u64 = service_id(PortSpace::Tcp, 7174);
    const UDP_SVC: u64 = service_id(PortSpace::Udp, 7174);
    let ips = [
        IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)),
        IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)),
    ];
    let mk = |i: usize| {
        CmEndpoint::new(CmConfig {
            packet_life_time: 4,
            ..CmConfig::new(ips[i], i as u64 + 1, i as u64 + 1)
        })
    };
    let mut ep = [mk(0), mk(1)];
    ep[1].listen(SVC).expect("listen");
    ep[1].listen(UDP_SVC).expect("listen");
    let mut ids: [Vec<CmId>; 2] = [Vec::new(), Vec::new()];
    let mut wire: Vec<(usize, [u8; mad::MAD_LEN])> = Vec::new();
    let mut fed = [0u64; 2];
    let mut now = Instant::now();
    let mut it = data;
    let next = |it: &mut &[u8]| -> u8 {
        let (&b, rest) = it.split_first().unwrap_or((&0, &[]));
        *it = rest;
        b
    };
    let pick = |ids: &[CmId], k: u8| ids.get(usize::from(k) % ids.len().max(1)).copied();
    let mut steps = 0;
    while !it.is_empty() && steps < 512 {
        steps += 1;
        let op = next(&mut it);
        match op & 7 {
            0 | 1 => {
                let to = usize::from(op & 1 == 0);
                let n = it.len().min(mad::MAD_LEN);
                let mut m = [0u8; mad::MAD_LEN];
                m[..n].copy_from_slice(&it[..n]);
                it = &it[n..];
                if op & 0x80 != 0 {
                    // The receiver's ID where a reply names it, the sender's before it.
                    if let Some(r) = ids[to].first() {
                        m[28..32].copy_from_slice(&r.0.to_be_bytes());
                    }
                    if let Some(s) = ids[1 - to].first() {
                        m[24..28].copy_from_slice(&s.0.to_be_bytes());
                    }
                }
                let len = if op & 0x40 != 0 { n } else { mad::MAD_LEN };
                ep[to].handle_mad(now, ips[1 - to], 1, &m[..len]);
                fed[to] += 1;
            }
            2 => {
                let k = next(&mut it);
                now += Duration::from_micros(u64::from(k) << (k & 15));
                for e in &mut ep {
                    e.handle_timeout(now);
                    assert!(
                        e.poll_timeout().is_none_or(|t| t > now),
                        "a timer is still due after handle_timeout"
                    );
                }
            }
            3 => {
                let k = next(&mut it);
                if k & 0x80 != 0 {
                    let p = SidrParams {
                        service_id: if k & 1 == 0 { UDP_SVC } else { UDP_SVC + 1 },
                        peer: ips[1],
                        timeout: k & 7,
                        max_retries: k >> 4 & 3,
                        private_data: vec![k; usize::from(k & 0x3f)],
                    };
                    if let Ok(id) = ep[0].sidr_resolve(now, &p) {
                        ids[0].push(id);
                    }
                } else {
                    // Bit 6: B connects to A, both peer to peer (simultaneous connect).
                    let side = usize::from(k & 0x40 != 0);
                    let p = ConnectParams {
                        transport: if k & 2 == 0 {
                            Transport::Rc
                        } else {
                            Transport::Uc
                        },
                        remote_cm_response_timeout: k & 7,
                        max_cm_retries: k >> 3 & 3,
                        peer_to_peer: side == 1 || k & 4 != 0,
                        private_data: vec![k; usize::from(k & 0x3f) + 30],
                        ..ConnectParams::new(SVC + u64::from(k & 1), ips[1 - side], 0x11, 0x100)
                    };
                    if let Ok(id) = ep[side].connect(now, &p) {
                        ids[side].push(id);
                    }
                }
            }
            4..=6 => {
                let side = usize::from(op & 7 != 4);
                let (k, w) = (next(&mut it), next(&mut it));
                let Some(id) = pick(&ids[side], w) else {
                    continue;
                };
                let e = &mut ep[side];
                let pd = vec![w; usize::from(k >> 3)];
                let _ = match k & 7 {
                    0 => e
                        .accept(now, id, &AcceptParams::new(0x22, u32::from(w)))
                        .is_ok(),
                    1 => e.reject(id, &pd).is_ok(),
                    2 => e.mra(id, w & 31, &pd).is_ok(),
                    3 => e.rtu(id, &pd).is_ok(),
                    4 => e.disconnect(now, id, &pd).is_ok(),
                    5 => {
                        let r = SidrReplyParams {
                            status: w & 3,
                            qpn: 0x12,
                            qkey: 0x0123_4567,
                            private_data: pd,
                        };
                        e.sidr_reply(now, id, &r).is_ok()
                    }
                    6 => [QpState::Init, QpState::Rtr, QpState::Rts]
                        .iter()
                        .all(|&s| e.qp_attr(id, s).is_ok()),
                    _ => e.destroy(id) || e.notify_established(id).is_ok(),
                };
            }
            _ => {
                let mask = next(&mut it);
                for (i, e) in ep.iter_mut().enumerate() {
                    while let Some(m) = e.poll_transmit() {
                        wire.push((1 - i, m.mad));
                    }
                }
                for (k, (to, m)) in std::mem::take(&mut wire).into_iter().enumerate() {
                    if mask >> (k % 8) & 1 == 0 {
                        ep[to].handle_mad(now, ips[1 - to], 1, &m);
                        fed[to] += 1;
                    }
                }
            }
        }
        for (i, e) in ep.iter_mut().enumerate() {
            while let Some(ev) = e.poll_event() {
                match ev {
                    CmEvent::ConnectRequest { id, .. } | CmEvent::SidrRequest { id, .. } => {
                        ids[i].push(id)
                    }
                    CmEvent::TimeWaitExit { id } => ids[i].retain(|x| *x != id),
                    _ => {}
                }
            }
            assert_eq!(e.counters().rx_mads, fed[i]);
            // What it sends parses back; it stays queued for delivery.
            while let Some(m) = e.poll_transmit() {
                assert!(
                    matches!(cm_repr::CmMad::parse(&m.mad), Ok(Some(_))),
                    "the CM sent a MAD it cannot read"
                );
                wire.push((1 - i, m.mad));
            }
        }
    }
}

/// Reads every field of a CM message.
fn touch_cm(m: &cm::Message<&[u8]>) {
    assert!(m.private_data().len() <= cm::DATA_LEN);
    let _ = m.attr().name();
    if let Some(h) = m.rdma_cm_header() {
        assert!(matches!(h.ip_version(), 4 | 6));
        let _ = (h.src_port(), h.src_addr(), h.dst_addr(), h.cma_version());
    }
    match m {
        cm::Message::Req(x) => {
            let _ = (
                x.local_comm_id(),
                x.service_id(),
                x.local_ca_guid(),
                x.local_qkey(),
                x.local_qpn(),
                x.responder_resources(),
                x.local_eecn(),
                x.initiator_depth(),
                x.remote_eecn(),
                x.remote_cm_response_timeout(),
                x.transport_service_type(),
                x.end_to_end_flow_control(),
            );
            let _ = (
                x.starting_psn(),
                x.local_cm_response_timeout(),
                x.retry_count(),
                x.pkey(),
                cm::mtu_bytes(x.path_mtu()),
                x.rdc_exists(),
                x.rnr_retry_count(),
                x.max_cm_retries(),
                x.srq(),
                x.extended_transport_type(),
                x.primary_local_lid(),
                x.primary_remote_lid(),
            );
            let _ = (
                x.primary_local_gid(),
                x.primary_remote_gid(),
                x.primary_flow_label(),
                x.primary_packet_rate(),
                x.primary_traffic_class(),
                x.primary_hop_limit(),
                x.primary_sl(),
                x.primary_subnet_local(),
                x.primary_local_ack_timeout(),
                x.alternate_local_gid(),
                x.alternate_remote_gid(),
            );
        }
        cm::Message::Mra(x) => {
            let _ = (
                x.local_comm_id(),
                x.remote_comm_id(),
                x.message_mraed(),
                x.service_timeout(),
            );
        }
        cm::Message::Rej(x) => {
            let _ = (
                x.message_rejected(),
                x.reject_info(),
                cm::reject_reason_name(x.reason()),
            );
            assert!(x.reject_info().len() <= 72);
        }
        cm::Message::Rep(x) => {
            let _ = (
                x.local_qkey(),
                x.local_qpn(),
                x.local_eecn(),
                x.starting_psn(),
                x.responder_resources(),
                x.initiator_depth(),
                x.target_ack_delay(),
                x.failover_accepted(),
                x.end_to_end_flow_control(),
                x.rnr_retry_count(),
                x.srq(),
                x.local_ca_guid(),
            );
        }
        cm::Message::Rtu(x) => {
            let _ = (x.local_comm_id(), x.remote_comm_id());
        }
        cm::Message::Dreq(x) => {
            let _ = x.remote_qpn();
        }
        cm::Message::Drep(x) => {
            let _ = x.remote_comm_id();
        }
        cm::Message::SidrReq(x) => {
            let _ = (x.request_id(), x.pkey(), x.service_id());
        }
        cm::Message::SidrRep(x) => {
            let _ = (
                x.request_id(),
                cm::sidr_status_name(x.status()),
                x.additional_info_len(),
                x.qpn(),
                x.service_id(),
                x.qkey(),
            );
        }
        cm::Message::Lap(x) => {
            let _ = (
                x.remote_qpn(),
                x.remote_cm_response_timeout(),
                x.alternate_local_gid(),
                x.alternate_remote_gid(),
                x.alternate_flow_label(),
                x.alternate_traffic_class(),
                x.alternate_hop_limit(),
                x.alternate_sl(),
                x.alternate_local_ack_timeout(),
            );
        }
        cm::Message::Apr(x) => {
            let _ = (x.additional_info_len(), x.ap_status());
        }
    }
}
