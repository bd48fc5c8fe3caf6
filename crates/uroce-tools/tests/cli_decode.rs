//! `uroce decode` end to end: the binary on real and damaged captures.

mod common;

use std::net::Ipv6Addr;
use std::process::Command;

use serde_json::Value;
use uroce::pcap::{write_pcap, Reader};
use uroce::wire::{
    cnp, BthRepr, DethRepr, EthernetRepr, ExtHeaders, FrameRepr, IpRepr, Ipv6Repr, Opcode, UdpRepr,
};

fn data(name: &str) -> String {
    format!("{}/../uroce/tests/data/{name}", env!("CARGO_MANIFEST_DIR"))
}

fn decode(args: &[&str]) -> (i32, Vec<Value>, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_uroce"))
        .arg("decode")
        .args(args)
        .output()
        .unwrap();
    let lines = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or(Value::String(l.to_string())))
        .collect();
    (
        out.status.code().unwrap_or(-1),
        lines,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn tmp(name: &str, bytes: &[u8]) -> String {
    let p = std::env::temp_dir().join(format!("uroce-test-{}-{name}", std::process::id()));
    std::fs::write(&p, bytes).unwrap();
    p.to_string_lossy().into_owned()
}

#[test]
fn json_for_a_real_send() {
    let (code, lines, _) = decode(&["--json", &data("rc_pingpong.pcap")]);
    assert_eq!(code, 0);
    assert_eq!(lines.len(), 91);
    let f = &lines[9];
    assert_eq!(f["frame"], 10);
    assert_eq!(f["ok"], true);
    assert_eq!(f["icrc_ok"], true);
    assert_eq!(f["opcode"], 4);
    assert_eq!(f["opcode_name"], "RC_SEND_ONLY");
    assert_eq!(f["dest_qp"], 0x12);
    assert_eq!(f["psn"], 0x1443b7);
    assert_eq!(f["ack_req"], true);
    assert_eq!(f["payload_len"], 1024);
    assert_eq!(f["pad"], 0);
    assert_eq!(f["pkey"], 0xffff);
    assert_eq!(f["ip"], 4);
    assert!(f.get("reth").is_none() && f.get("error").is_none());
    // The TCP exchange before it.
    assert_eq!(lines[0]["ok"], false);
    assert!(lines[0]["error"].as_str().unwrap().contains("not UDP"));
}

fn ud_over_ipv6() -> Vec<u8> {
    let r = FrameRepr {
        eth: Some(EthernetRepr {
            dst: [2, 0, 0, 0, 0, 2],
            src: [2, 0, 0, 0, 0, 1],
            vlan: None,
            ethertype: 0x86dd,
        }),
        ip: IpRepr::V6(Ipv6Repr {
            src: Ipv6Addr::LOCALHOST,
            dst: "fd00::2".parse().unwrap(),
            traffic_class: 0x03, // ECN CE
            flow_label: 7,
            next_header: 17,
            hop_limit: 64,
        }),
        udp: UdpRepr {
            src_port: 50000,
            dst_port: 4791,
            checksum: 0,
        },
        bth: BthRepr::new(Opcode::UdSendOnlyImm, 0x33, 9),
        ext: ExtHeaders {
            deth: Some(DethRepr {
                qkey: 0x1111_1111,
                src_qp: 0x44,
            }),
            imm: Some(0xdead_beef),
            ..Default::default()
        },
    };
    let mut f = vec![0u8; r.buffer_len(13)];
    r.emit(&[7; 13], &mut f).unwrap();
    f
}

#[test]
fn damaged_frames_are_reported_not_fatal() {
    let file = std::fs::read(data("ib_write_bw.pcap")).unwrap();
    let good: Vec<Vec<u8>> = Reader::new(&file)
        .unwrap()
        .map(|f| f.unwrap().data.to_vec())
        .filter(|f| uroce::wire::parse(f).is_ok())
        .take(1)
        .collect();
    let good = &good[0];
    let mut flipped = good.clone();
    flipped[100] ^= 0x10; // a payload bit
    let truncated = &good[..50];
    let mut bad_port = good.clone();
    bad_port[37] = 0x35; // UDP dst 4661
    let v6 = ud_over_ipv6();
    let frames: Vec<&[u8]> = vec![good, &flipped, truncated, &bad_port, &v6];
    let path = tmp("damaged.pcap", &write_pcap(frames));
    let (code, l, _) = decode(&["--json", &path]);
    assert_eq!(code, 0);
    assert_eq!(l.len(), 5);
    assert_eq!(l[0]["ok"], true);
    assert_eq!(
        (l[1]["ok"].clone(), l[1]["icrc_ok"].clone()),
        (false.into(), false.into())
    );
    assert!(l[1]["error"].as_str().unwrap().contains("ICRC"));
    assert_eq!(l[1]["opcode_name"], "RC_RDMA_WRITE_FIRST");
    assert_eq!(l[1]["reth"]["len"], 4096);
    assert_eq!(l[2]["ok"], false);
    assert!(l[2]["error"].as_str().unwrap().contains("truncated"));
    assert!(l[3]["error"].as_str().unwrap().contains("port 4661"));
    assert_eq!(l[4]["ok"], true);
    assert_eq!(l[4]["ip"], 6);
    assert_eq!(l[4]["imm"], 0xdead_beef_u32);
    assert_eq!(l[4]["deth"]["src_qp"], 0x44);
    assert_eq!(l[4]["payload_len"], 13);
    assert_eq!(l[4]["pad"], 3);
    // --check turns bad RoCE frames into a failing exit status.
    let (code, _, err) = decode(&["--check", &path]);
    assert_eq!(code, 1);
    assert!(err.contains("2 RoCEv2 frame(s)"), "{err}");
}

#[test]
fn broken_capture_files_fail_clearly() {
    let (code, l, err) = decode(&[&tmp("garbage.pcap", b"this is not a capture")]);
    assert_eq!(code, 2);
    assert!(l.is_empty());
    assert!(err.contains("not a pcap or pcapng file"), "{err}");

    let file = std::fs::read(data("ib_atomic_bw.pcap")).unwrap();
    let cut = tmp("cut.pcap", &file[..file.len() - 10]);
    let (code, l, err) = decode(&["--json", &cut]);
    assert_eq!(code, 2);
    assert_eq!(l.len(), 78, "frames before the damage are still printed");
    assert!(err.contains("truncated"), "{err}");

    let (code, _, err) = decode(&["/nonexistent/file.pcap"]);
    assert_eq!(code, 2);
    assert!(err.contains("No such file"), "{err}");
}

/// CNPs as uroce's notification point sends them (BTH opcode 0x81, BECN, addressed to the
/// marked flow's sender QP) decode as CNPs with a good ICRC.
#[test]
fn decode_reads_cnps() {
    let dest_qp = 0x12;
    let frames: Vec<Vec<u8>> = (0..20u16)
        .map(|i| {
            let mut ip = uroce::wire::Ipv4Repr::new(
                std::net::Ipv4Addr::new(10, 0, 0, 2),
                std::net::Ipv4Addr::new(10, 0, 0, 1),
                48 << 2,
            );
            ip.ident = i;
            let r = FrameRepr {
                eth: Some(EthernetRepr {
                    dst: [2, 0, 0, 0, 0, 1],
                    src: [2, 0, 0, 0, 0, 2],
                    vlan: None,
                    ethertype: 0x0800,
                }),
                ip: IpRepr::V4(ip),
                udp: UdpRepr {
                    src_port: 0xc001,
                    dst_port: 4791,
                    checksum: 0,
                },
                bth: cnp::bth(dest_qp, 0xffff),
                ext: ExtHeaders::default(),
            };
            let mut f = vec![0u8; r.buffer_len(0)];
            r.emit(&[], &mut f).unwrap();
            f
        })
        .collect();
    let path = tmp("cnp.pcap", &write_pcap(frames.iter().map(|f| &f[..])));
    let (code, lines, _) = decode(&["--json", "--check", &path]);
    assert_eq!(code, 0);
    assert_eq!(lines.len(), 20);
    for v in &lines {
        assert_eq!(v["opcode"], 0x81);
        assert_eq!(v["opcode_name"], "CNP");
        assert_eq!(v["becn"], true);
        assert_eq!(v["dest_qp"], dest_qp);
        assert_eq!(v["ok"], true);
    }
}

fn be16(b: &[u8], at: usize) -> u64 {
    u64::from(u16::from_be_bytes([b[at], b[at + 1]]))
}

fn be24(b: &[u8], at: usize) -> u64 {
    u64::from(u32::from_be_bytes([0, b[at], b[at + 1], b[at + 2]]))
}

/// Recomputes the ICRC of an Ethernet + IPv4 (no options) RoCEv2 frame after a test
/// changed bytes it covers, and the IPv4 header checksum.
fn refresh(f: &mut [u8]) {
    f[24] = 0;
    f[25] = 0;
    let c = uroce::wire::ipv4::header_checksum(&f[14..34]);
    f[24..26].copy_from_slice(&c.to_be_bytes());
    let n = f.len();
    let crc = uroce::wire::icrc::compute(&f[14..34], &f[34..42], &f[42..n - 4]);
    f[n - 4..].copy_from_slice(&crc.to_le_bytes());
}

fn frames_of(name: &str) -> Vec<Vec<u8>> {
    let file = std::fs::read(data(name)).unwrap();
    Reader::new(&file)
        .unwrap()
        .map(|f| f.unwrap().data.to_vec())
        .collect()
}

/// Every IPv4 RoCEv2 frame of every capture: the JSON's IP, UDP and BTH fields and the
/// ICRC agree with a decode written here from the byte offsets of RFC 791, RFC 768 and
/// IBTA Vol. 1 §9.2 (Ethernet 14 bytes, IPv4 20, UDP 8, then the BTH), independent of
/// the library's parsers.
#[test]
fn json_fields_agree_with_a_decode_by_offsets() {
    let mut checked = 0;
    for name in [
        "rc_pingpong.pcap",
        "ud_pingpong.pcap",
        "ib_send_bw.pcap",
        "ib_write_bw.pcap",
        "ib_read_bw.pcap",
        "ib_atomic_bw.pcap",
        "rdma_cm.pcap",
        "rnr_nak.pcap",
        "uroce_write_loss.pcap",
        "rxe_write_loss.pcap",
    ] {
        let frames = frames_of(name);
        let (code, lines, _) = decode(&["--json", &data(name)]);
        assert_eq!(code, 0);
        assert_eq!(lines.len(), frames.len());
        for (f, j) in frames.iter().zip(&lines) {
            if f[12..14] != [0x08, 0x00] || f[23] != 17 || be16(f, 36) != 4791 {
                continue;
            }
            let ctx = format!("{name} frame {}", j["frame"]);
            let ip = |at: usize| format!("{}.{}.{}.{}", f[at], f[at + 1], f[at + 2], f[at + 3]);
            assert_eq!(j["src"], ip(26), "{ctx}");
            assert_eq!(j["dst"], ip(30), "{ctx}");
            assert_eq!(j["sport"], be16(f, 34), "{ctx}");
            assert_eq!(j["dport"], 4791, "{ctx}");
            assert_eq!(j["dscp"], u64::from(f[15] >> 2), "{ctx}");
            let ecn = ["Not-ECT", "ECT(1)", "ECT(0)", "CE"][usize::from(f[15] & 3)];
            assert_eq!(j["ecn"], ecn, "{ctx}");
            assert_eq!(j["ip_id"], be16(f, 18), "{ctx}");
            assert_eq!(j["ttl"], u64::from(f[22]), "{ctx}");
            let n = f.len();
            let icrc = format!(
                "0x{:02x}{:02x}{:02x}{:02x}",
                f[n - 4],
                f[n - 3],
                f[n - 2],
                f[n - 1]
            );
            assert_eq!(j["icrc"], icrc, "{ctx}");
            let bth = 42;
            assert_eq!(j["opcode"], u64::from(f[bth]), "{ctx}");
            assert_eq!(j["solicited"], f[bth + 1] & 0x80 != 0, "{ctx}");
            assert_eq!(j["migreq"], f[bth + 1] & 0x40 != 0, "{ctx}");
            assert_eq!(j["pad"], u64::from((f[bth + 1] >> 4) & 3), "{ctx}");
            assert_eq!(j["tver"], u64::from(f[bth + 1] & 0xf), "{ctx}");
            assert_eq!(j["pkey"], be16(f, bth + 2), "{ctx}");
            assert_eq!(j["dest_qp"], be24(f, bth + 5), "{ctx}");
            assert_eq!(j["ack_req"], f[bth + 8] & 0x80 != 0, "{ctx}");
            assert_eq!(j["psn"], be24(f, bth + 9), "{ctx}");
            assert_eq!(j["ok"], true, "{ctx}");
            checked += 1;
        }
    }
    assert_eq!(
        checked,
        460 + 75 + 64 + 184 + 94,
        "rdma_cm.pcap has 17 IPv6 frames"
    );
}

/// A CE-marked frame and one with a broken IPv4 header checksum, made from a real frame:
/// the mark is shown, and the broken checksum is reported beside a complete decode.
#[test]
fn ce_marks_and_bad_ip_checksums() {
    let good = frames_of("ib_write_bw.pcap")
        .into_iter()
        .find(|f| uroce::wire::parse(f).is_ok())
        .unwrap();
    let mut ce = good.clone();
    ce[15] = (26 << 2) | 3; // DSCP 26, CE
    refresh(&mut ce);
    let mut bad_csum = good.clone();
    bad_csum[24] ^= 0x5a;
    let mut both = bad_csum.clone();
    both[70] ^= 0x01; // a payload bit as well
    let path = tmp("ce.pcap", &write_pcap([&ce[..], &bad_csum, &both]));
    let (code, l, _) = decode(&["--json", &path]);
    assert_eq!(code, 0);
    assert_eq!(
        (l[0]["ecn"].clone(), l[0]["dscp"].clone()),
        ("CE".into(), 26.into())
    );
    assert_eq!(l[0]["ok"], true);
    assert_eq!(l[0]["ip_checksum_ok"], true);

    assert_eq!(l[1]["ok"], false);
    assert_eq!(l[1]["ip_checksum_ok"], false);
    assert_eq!(
        l[1]["icrc_ok"], true,
        "the ICRC does not cover the checksum"
    );
    assert_eq!(l[1]["opcode_name"], "RC_RDMA_WRITE_FIRST");
    assert_eq!(l[1]["reth"]["len"], 4096);
    let e = l[1]["error"].as_str().unwrap();
    assert!(
        e.starts_with("bad IPv4 header checksum at offset 24"),
        "{e}"
    );
    assert!(!e.contains("ICRC"), "{e}");

    let e = l[2]["error"].as_str().unwrap();
    assert!(e.contains("checksum") && e.contains("; bad ICRC"), "{e}");
    assert_eq!(l[2]["icrc_ok"], false);
    assert!(l[2]["icrc_computed"].is_string());

    let (_, text, _) = decode(&[&path]);
    let t0 = text[0].as_str().unwrap();
    assert!(t0.contains(" dscp 26 CE "), "{t0}");
    let t1 = text[1].as_str().unwrap();
    assert!(
        t1.contains("bad-ip-csum RC_RDMA_WRITE_FIRST") && t1.contains("icrc ok !! bad IPv4"),
        "{t1}"
    );
}

/// The ICRC in the "bad ICRC" message is in wire byte order: the 4 last bytes of the
/// frame as they are.
#[test]
fn bad_icrc_message_shows_wire_order() {
    let mut f = frames_of("rc_pingpong.pcap").swap_remove(9);
    f[60] ^= 0x80;
    let n = f.len();
    let wire = format!(
        "found 0x{:02x}{:02x}{:02x}{:02x} (bytes in wire order)",
        f[n - 4],
        f[n - 3],
        f[n - 2],
        f[n - 1]
    );
    let path = tmp("badicrc.pcap", &write_pcap([&f[..]]));
    let (_, l, _) = decode(&["--json", &path]);
    let e = l[0]["error"].as_str().unwrap();
    assert!(e.contains(&wire), "{e} does not contain {wire}");
    // The computed value, in the same order, is what a fixed frame carries.
    let mut fixed = f.clone();
    refresh(&mut fixed);
    let want = format!(
        "0x{:02x}{:02x}{:02x}{:02x}",
        fixed[n - 4],
        fixed[n - 3],
        fixed[n - 2],
        fixed[n - 1]
    );
    assert_eq!(l[0]["icrc_computed"], want);
    assert!(e.contains(&format!("computed {want}")), "{e}");
}

/// AETH syndromes decoded: ACK with credits or "no credits" (code 31), RNR NAK with its
/// timer in microseconds (IBTA Table 45: code 12 is 0.64 ms), NAK with its code's name;
/// BTH MigReq, TVer and reserved bits shown.
#[test]
fn aeth_syndromes_and_bth_bits() {
    let rnr = frames_of("rnr_nak.pcap").swap_remove(4);
    assert_eq!(rnr[42 + 12], 0x2c, "the capture's RNR NAK, timer code 12");
    let mut ack5 = rnr.clone();
    ack5[54] = 5; // ACK, credit code 5: 6 credits
    refresh(&mut ack5);
    let mut ack31 = rnr.clone();
    ack31[54] = 31;
    refresh(&mut ack31);
    let mut nak = rnr.clone();
    nak[54] = 0x60; // NAK PSN sequence error
    refresh(&mut nak);
    let mut nak2 = rnr.clone();
    nak2[54] = 0x62; // NAK remote access error
    refresh(&mut nak2);
    let mut bits = rnr.clone();
    bits[43] |= 0x40 | 0x01; // MigReq, TVer 1
    bits[46] |= 0x05; // resv6
    bits[50] |= 0x11; // resv7
    refresh(&mut bits);
    let path = tmp(
        "aeth.pcap",
        &write_pcap([&rnr[..], &ack5, &ack31, &nak, &nak2, &bits]),
    );
    let (_, l, _) = decode(&["--json", &path]);
    let a: Vec<&Value> = l.iter().map(|j| &j["aeth"]).collect();
    assert_eq!(
        (
            a[0]["kind"].clone(),
            a[0]["rnr_timer"].clone(),
            a[0]["rnr_timer_us"].clone()
        ),
        ("RNR_NAK".into(), 12.into(), 640.into())
    );
    assert_eq!(
        (a[1]["kind"].clone(), a[1]["credits"].clone()),
        ("ACK".into(), 6.into())
    );
    assert_eq!(a[1]["credit_code"], 5);
    assert_eq!(a[2]["kind"], "ACK");
    assert_eq!(a[2]["credit_code"], 31);
    assert!(a[2].get("credits").is_none());
    assert_eq!(
        (a[3]["kind"].clone(), a[3]["nak"].clone()),
        ("NAK".into(), "PSN_SEQUENCE_ERROR".into())
    );
    assert_eq!(
        (a[4]["nak_code"].clone(), a[4]["nak"].clone()),
        (2.into(), "REMOTE_ACCESS_ERROR".into())
    );
    let b = &l[5];
    assert_eq!(
        (b["migreq"].clone(), b["tver"].clone()),
        (true.into(), 1.into())
    );
    assert_eq!(
        (b["resv6"].clone(), b["resv7"].clone()),
        (5.into(), 0x11.into())
    );
    assert_eq!(
        b["ok"], false,
        "TVer 1 is not a RoCEv2 packet uroce accepts"
    );
    assert!(b["error"]
        .as_str()
        .unwrap()
        .contains("transport header version 1"));
    assert!(l[0].get("resv6").is_none() && l[0].get("resv7").is_none());

    let (_, t, _) = decode(&[&path]);
    let t: Vec<&str> = t.iter().map(|v| v.as_str().unwrap()).collect();
    assert!(
        t[0].contains("aeth[RNR_NAK timer 12 (640us) msn 0]"),
        "{}",
        t[0]
    );
    assert!(t[1].contains("aeth[ACK credits 6 msn 0]"), "{}", t[1]);
    assert!(t[2].contains("aeth[ACK no credits msn 0]"), "{}", t[2]);
    assert!(
        t[3].contains("aeth[NAK PSN_SEQUENCE_ERROR (0) msn 0]"),
        "{}",
        t[3]
    );
    assert!(t[5].contains(" M tver 1 resv6 0x05 resv7 0x11"), "{}", t[5]);
}

/// The CM exchange of `rping`, `udaddy` and a refused connect, captured from rdma_rxe:
/// MAD header and CM fields as read by hand from the frames' bytes (offsets of IBTA Vol.
/// 1 chapter 12), and checked against the data packets that follow them (the PSNs and
/// QPNs the CM agreed on are the ones the RC and UD packets then carry).
#[test]
fn cm_messages_of_a_real_rdma_cm_exchange() {
    let (code, l, _) = decode(&["--json", "--check", &data("rdma_cm.pcap")]);
    assert_eq!(code, 0);
    assert_eq!(l.len(), 92);
    let cm_frames: Vec<usize> = l
        .iter()
        .filter(|j| j.get("cm").is_some())
        .map(|j| j["frame"].as_u64().unwrap() as usize)
        .collect();
    assert_eq!(
        cm_frames,
        [1, 2, 3, 40, 41, 42, 43, 48, 49, 50, 51, 52, 65, 66, 67, 68, 69, 90, 91, 92]
    );
    let f = |n: usize| &l[n - 1];

    let req = f(1);
    let m = &req["mad"];
    assert_eq!(
        (
            m["base_version"].clone(),
            m["mgmt_class"].clone(),
            m["class_version"].clone()
        ),
        (1.into(), 7.into(), 2.into())
    );
    assert_eq!(
        (m["method"].clone(), m["method_name"].clone()),
        (3.into(), "Send".into())
    );
    assert_eq!(m["tid"], 0x0000_0002_1ad9_448e_u64);
    assert_eq!(
        (m["attr_id"].clone(), m["attr"].clone()),
        (0x10.into(), "ConnectRequest".into())
    );
    let c = &req["cm"];
    assert_eq!(c["msg"], "REQ");
    assert_eq!(c["local_comm_id"], 0x8e44_d91a_u32);
    assert_eq!(
        c["service_id"], 0x0106_1c06_u64,
        "RDMA CM TCP port space, port 7174"
    );
    assert_eq!(c["local_ca_guid"], 0x5054_00ff_fe77_0012_u64);
    assert_eq!(c["local_qpn"], 0x11);
    assert_eq!(c["starting_psn"], 0xd6_52c1);
    assert_eq!(
        (c["path_mtu"].clone(), c["path_mtu_bytes"].clone()),
        (3.into(), 1024.into())
    );
    assert_eq!(
        (c["retry_count"].clone(), c["rnr_retry_count"].clone()),
        (7.into(), 7.into())
    );
    assert_eq!(
        (
            c["responder_resources"].clone(),
            c["initiator_depth"].clone()
        ),
        (1.into(), 1.into())
    );
    assert_eq!(c["transport"], "RC");
    assert_eq!(c["primary_local_gid"], "::ffff:10.78.0.12");
    let ip = &c["rdma_cm"];
    assert_eq!(
        (ip["ip_version"].clone(), ip["src_port"].clone()),
        (4.into(), 0xe8b8.into())
    );
    assert_eq!(
        (ip["src"].clone(), ip["dst"].clone()),
        ("10.78.0.12".into(), "10.78.0.11".into())
    );

    let rep = &f(2)["cm"];
    assert_eq!(rep["msg"], "REP");
    assert_eq!(
        (rep["local_comm_id"].clone(), rep["remote_comm_id"].clone()),
        (0x44a2_8b16_u32.into(), 0x8e44_d91a_u32.into())
    );
    assert_eq!(
        (rep["local_qpn"].clone(), rep["starting_psn"].clone()),
        (0x11.into(), 0x78_71b3.into())
    );
    // The active side (10.78.0.12) sends from the REP's PSN, the passive side from the
    // REQ's, each to the QP the other named.
    assert_eq!(
        (f(4)["src"].clone(), f(4)["psn"].clone()),
        ("10.78.0.12".into(), rep["starting_psn"].clone())
    );
    assert_eq!(f(4)["dest_qp"], rep["local_qpn"]);
    assert_eq!(
        (f(6)["src"].clone(), f(6)["psn"].clone()),
        ("10.78.0.11".into(), c["starting_psn"].clone())
    );
    assert_eq!(f(6)["dest_qp"], c["local_qpn"]);
    assert_eq!(f(3)["cm"]["msg"], "RTU");
    assert_eq!(
        (
            f(40)["cm"]["msg"].clone(),
            f(40)["cm"]["remote_qpn"].clone()
        ),
        ("DREQ".into(), 0x11.into())
    );
    assert_eq!(f(41)["cm"]["msg"], "DREP");

    // udaddy: SIDR in the UDP port space; the QP and Q_Key it resolves are those of the
    // UD data that follows.
    let sreq = &f(42)["cm"];
    assert_eq!(
        (sreq["msg"].clone(), sreq["service_id"].clone()),
        ("SIDR_REQ".into(), 0x0111_1c06_u64.into())
    );
    assert_eq!(sreq["rdma_cm"]["ip_version"], 4);
    let srep = &f(43)["cm"];
    assert_eq!(
        (
            srep["msg"].clone(),
            srep["status"].clone(),
            srep["status_name"].clone()
        ),
        ("SIDR_REP".into(), 0.into(), "valid".into())
    );
    assert_eq!(srep["request_id"], sreq["request_id"]);
    assert_eq!(f(44)["dest_qp"], srep["qpn"]);
    assert_eq!(f(44)["deth"]["qkey"], srep["qkey"]);

    // Nobody listens on port 7777: REJ of the REQ, reason 8.
    assert_eq!(f(48)["cm"]["service_id"], 0x0106_1e61_u64);
    let rej = &f(49)["cm"];
    assert_eq!(
        (
            rej["msg"].clone(),
            rej["reason"].clone(),
            rej["reason_name"].clone()
        ),
        ("REJ".into(), 8.into(), "invalid service ID".into())
    );
    assert_eq!(
        (
            rej["message_rejected"].clone(),
            rej["remote_comm_id"].clone()
        ),
        (0.into(), f(48)["cm"]["local_comm_id"].clone())
    );

    // Over IPv6 link-local addresses.
    let ip6 = &f(50)["cm"]["rdma_cm"];
    assert_eq!(
        (
            ip6["ip_version"].clone(),
            ip6["src"].clone(),
            ip6["dst"].clone()
        ),
        (
            6.into(),
            "fe80::5054:ff:fe77:12".into(),
            "fe80::5054:ff:fe77:11".into()
        )
    );

    let (_, t, _) = decode(&[&data("rdma_cm.pcap")]);
    let t1 = t[0].as_str().unwrap();
    assert!(
        t1.contains("mad[CM v2 Send tid 0x21ad9448e ConnectRequest] cm[REQ comm 0x8e44d91a sid 0x1061c06 (TCP port 7174) RC qpn 0x11 psn 14045889 mtu 1024 retry 7 rnr_retry 7 rd_atom 1/1 rdma_cm[IPv4 10.78.0.12:59576 > 10.78.0.11]]"),
        "{t1}"
    );
    assert!(t[48]
        .as_str()
        .unwrap()
        .contains("cm[REJ comm 0x0/0x8c44d91a of REQ reason 8 (invalid service ID)]"));
}

/// A MAD too short for its CM message: the packet decodes, the MAD error says what and
/// where, nothing else is made up.
#[test]
fn short_cm_message_is_reported() {
    let frame = |payload: &[u8]| {
        let r = FrameRepr {
            eth: Some(EthernetRepr {
                dst: [2, 0, 0, 0, 0, 2],
                src: [2, 0, 0, 0, 0, 1],
                vlan: None,
                ethertype: 0x0800,
            }),
            ip: IpRepr::V4(uroce::wire::Ipv4Repr::new(
                [10, 0, 0, 1].into(),
                [10, 0, 0, 2].into(),
                0,
            )),
            udp: UdpRepr {
                src_port: 50000,
                dst_port: 4791,
                checksum: 0,
            },
            bth: BthRepr::new(Opcode::UdSendOnly, 1, 3),
            ext: ExtHeaders {
                deth: Some(DethRepr {
                    qkey: 0x8001_0000,
                    src_qp: 1,
                }),
                ..Default::default()
            },
        };
        let mut f = vec![0u8; r.buffer_len(payload.len())];
        r.emit(payload, &mut f).unwrap();
        f
    };
    let mut mad = vec![0u8; 100];
    mad[..4].copy_from_slice(&[1, 7, 2, 3]);
    mad[16..18].copy_from_slice(&[0x00, 0x13]); // REP, which needs 36 bytes of CM data
    let short_rep = frame(&mad[..56]);
    let short_hdr = frame(&mad[..20]);
    let sa = {
        let mut m = mad.clone();
        m[1] = 0x03; // SubnAdm: header only
        m[3] = 0x81; // GetResp
        frame(&m)
    };
    let path = tmp(
        "shortmad.pcap",
        &write_pcap([&short_rep[..], &short_hdr, &sa]),
    );
    let (code, l, _) = decode(&["--json", "--check", &path]);
    assert_eq!(code, 0, "the RoCE packets are fine");
    assert_eq!(l[0]["mad"]["attr"], "ConnectReply");
    assert!(l[0].get("cm").is_none());
    assert_eq!(
        l[0]["mad_error"],
        "CM REP truncated at offset 24: need 36 bytes, have 32 (offset in the MAD)"
    );
    assert!(l[1].get("mad").is_none());
    assert!(l[1]["mad_error"]
        .as_str()
        .unwrap()
        .starts_with("MAD header truncated at offset 0: need 24 bytes, have 20"));
    assert_eq!(
        (
            l[2]["mad"]["class"].clone(),
            l[2]["mad"]["method_name"].clone(),
            l[2]["mad"]["response"].clone()
        ),
        ("SubnAdm".into(), "GetResp".into(), true.into())
    );
    assert!(l[2].get("cm").is_none() && l[2].get("mad_error").is_none());
}

fn frame_numbers(lines: &[Value]) -> Vec<u64> {
    lines.iter().map(|j| j["frame"].as_u64().unwrap()).collect()
}

/// `--qp`, `--opcode` and `--ip` keep the frames they name, with their numbers in the
/// capture, and nothing else.
#[test]
fn filters() {
    let cm = data("rdma_cm.pcap");
    let (_, l, _) = decode(&["--json", "--qp", "0x12", &cm]);
    assert_eq!(
        frame_numbers(&l),
        [44, 45, 46, 47],
        "UD QP 0x12: to it and from it"
    );
    let (_, l, _) = decode(&["--json", "--opcode", "send_only_with_immediate", &cm]);
    assert_eq!(frame_numbers(&l), [44, 45, 46, 47]);
    let (_, l, _) = decode(&[
        "--json",
        "--opcode",
        "UD_SEND_ONLY_WITH_IMMEDIATE",
        "--qp",
        "18",
        &cm,
    ]);
    assert_eq!(frame_numbers(&l), [44, 45, 46, 47]);
    let (_, l, _) = decode(&[
        "--json",
        "--ip",
        "fe80::5054:ff:fe77:11",
        "--opcode",
        "0x64",
        &cm,
    ]);
    assert_eq!(
        frame_numbers(&l),
        [50, 51, 52, 65, 66],
        "the IPv6 CM exchange"
    );
    let (_, l, _) = decode(&["--json", "--ip", "10.78.0.11", "--qp", "1", &cm]);
    assert_eq!(l.len(), 15, "CM over IPv4: 9 + 6 MADs");
    assert!(l
        .iter()
        .all(|j| j["dest_qp"] == 1 && j["mad"]["mgmt_class"] == 7));
    let (_, l, _) = decode(&[
        "--json",
        "--opcode",
        "RDMA_READ_REQUEST",
        &data("ib_read_bw.pcap"),
    ]);
    assert_eq!(l.len(), 20);
    let (_, l, _) = decode(&["--opcode", "CNP", &data("rc_pingpong.pcap")]);
    assert!(l.is_empty());
    let (code, _, err) = decode(&["--qp", "0x1000000", &cm]);
    assert_eq!(code, 2);
    assert!(err.contains("not a QP number"), "{err}");
    let (code, l, err) = decode(&["-c", "3", &cm]);
    assert_eq!((code, l.len()), (2, 0));
    assert!(err.contains("-w and -c go with -i IFACE"), "{err}");
    let (code, _, err) = decode(&["-i", "no-such-if0", "-c", "1"]);
    assert_eq!(code, 2);
    assert!(err.contains("cannot read interface no-such-if0"), "{err}");
}

fn stats(path: &str) -> Vec<Value> {
    let (code, l, _) = decode(&["--stats", "--json", path]);
    assert_eq!(code, 0);
    l
}

fn qp<'a>(s: &'a [Value], dst: &str, qp: u32) -> &'a Value {
    s.iter()
        .find(|q| q["dst"] == dst && q["qp"] == qp)
        .unwrap_or_else(|| panic!("no QP {qp:#x} at {dst} in {s:?}"))
}

/// `--stats` on real captures: the RNR loop of rnr_nak.pcap (31 SENDs of one PSN, 30
/// RNR NAKs: 30 retransmissions), ib_read_bw's 20 READs (20 round trips, timed by the
/// capture), and a CE mark, a PSN sequence NAK and CNPs made by the test.
#[test]
fn stats_on_captures() {
    let s = stats(&data("rnr_nak.pcap"));
    assert_eq!(s.len(), 4);
    let req = qp(&s, "10.78.0.11", 0x15);
    assert_eq!(
        (req["frames"].clone(), req["retransmissions"].clone()),
        (31.into(), 30.into())
    );
    assert_eq!(
        (req["psn_first"].clone(), req["psn_last"].clone()),
        (5_480_991.into(), 5_480_991.into())
    );
    assert_eq!(req["bytes"], 31 * 74);
    let acks = qp(&s, "10.78.0.12", 0x17);
    assert_eq!(
        (acks["frames"].clone(), acks["rnr_naks"].clone()),
        (30.into(), 30.into())
    );
    assert_eq!(
        (acks["retransmissions"].clone(), acks["seq_naks"].clone()),
        (0.into(), 0.into())
    );
    assert!(
        acks["psn_first"].is_null(),
        "ACKs carry the other side's PSNs"
    );

    let s = stats(&data("ib_read_bw.pcap"));
    let requester = qp(&s, "10.77.0.12", 0x16);
    assert_eq!(requester["round_trips"], 20);
    let (min, avg, max) = (
        requester["rtt_min_us"].as_f64().unwrap(),
        requester["rtt_avg_us"].as_f64().unwrap(),
        requester["rtt_max_us"].as_f64().unwrap(),
    );
    assert!(
        0.0 < min && min <= avg && avg <= max && max < 1e6,
        "{min} {avg} {max}"
    );
    let responder = qp(&s, "10.77.0.11", 0x16);
    assert_eq!(
        (
            responder["frames"].clone(),
            responder["retransmissions"].clone()
        ),
        (20.into(), 0.into())
    );
    // The first READ: request at frame 20, first response... read the capture's own
    // times for it and compare with the minimum, which cannot be larger.
    let (_, l, _) = decode(&["--json", &data("ib_read_bw.pcap")]);
    let t = |op: &str| {
        l.iter()
            .find(|j| j["opcode_name"] == op)
            .map(|j| j["time_ns"].as_u64().unwrap())
            .unwrap()
    };
    let first_rtt = (t("RC_RDMA_READ_RESPONSE_FIRST") - t("RC_RDMA_READ_REQUEST")) as f64 / 1000.0;
    assert!(
        min <= first_rtt && first_rtt <= max,
        "{min} {first_rtt} {max}"
    );

    // Made frames: one SEND marked CE, the same SEND again (a retransmission), a NAK PSN
    // sequence error and 3 CNPs to the sender.
    let f = frames_of("rc_pingpong.pcap");
    let mut send = f[9].clone();
    send[15] |= 3;
    refresh(&mut send);
    let mut nak = f[10].clone();
    assert_eq!(nak[42], 0x11, "frame 11 is the ACK of frame 10");
    nak[54] = 0x60;
    refresh(&mut nak);
    let cnp = {
        let mut c = f[10].clone();
        c.truncate(42);
        c.extend_from_slice(&[0x81, 0, 0xff, 0xff, 0x40, 0, 0, 0x12, 0, 0, 0, 0]);
        c.extend_from_slice(&[0; 16 + 4]);
        let len = (c.len() - 14) as u16;
        c[16..18].copy_from_slice(&len.to_be_bytes());
        c[38..40].copy_from_slice(&(len - 20).to_be_bytes());
        refresh(&mut c);
        c
    };
    let path = tmp(
        "stats.pcap",
        &write_pcap([&send[..], &send, &nak, &cnp, &cnp, &cnp]),
    );
    let s = stats(&path);
    let to_server = qp(&s, "10.77.0.11", 0x12);
    assert_eq!(
        (
            to_server["ce"].clone(),
            to_server["retransmissions"].clone()
        ),
        (2.into(), 1.into())
    );
    let to_client = qp(&s, "10.77.0.12", 0x12);
    assert_eq!(
        (to_client["seq_naks"].clone(), to_client["cnps"].clone()),
        (1.into(), 3.into())
    );
    assert_eq!(
        (to_client["frames"].clone(), to_client["ce"].clone()),
        (4.into(), 0.into())
    );

    // The table says the same.
    let (_, t, _) = decode(&["--stats", &data("rnr_nak.pcap")]);
    let row = t
        .iter()
        .map(|v| v.as_str().unwrap().split_whitespace().collect::<Vec<_>>())
        .find(|w| w[0] == "10.78.0.11" && w[1] == "0x15")
        .unwrap();
    assert_eq!(&row[2..6], ["31", "2294", "5480991..5480991", "30"]);
}

/// `--plot`: one panel per QP, the retransmissions and RNR NAKs of rnr_nak.pcap marked,
/// every mark inside its panel.
#[test]
fn plot_marks_retransmissions_and_naks() {
    let svg = std::env::temp_dir().join(format!("uroce-test-{}-rnr.svg", std::process::id()));
    let (code, l, _) = decode(&["--plot", &svg.to_string_lossy(), &data("rnr_nak.pcap")]);
    assert_eq!(code, 0);
    assert_eq!(l.len(), 64, "the frames are still printed");
    let s = std::fs::read_to_string(&svg).unwrap();
    assert!(s.starts_with("<svg") && s.trim_end().ends_with("</svg>"));
    assert_eq!(s.matches("<g>").count(), 4, "one panel per QP");
    assert!(s.contains("10.78.0.11 QP 0x15: 31 packets, PSN 5480991..5480991"));
    assert_eq!(
        s.matches(r##"stroke="#d62728" stroke-width="1.5""##)
            .count(),
        30,
        "retransmissions"
    );
    assert_eq!(s.matches(r##"fill="#ff7f0e""##).count(), 30, "RNR NAKs");
    assert_eq!(
        s.matches("<circle").count(),
        2 + 1 + 1,
        "QP 1's MADs and the first SEND"
    );
    let height: f64 = s
        .split("height=\"")
        .nth(1)
        .unwrap()
        .split('"')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    for c in s.split("<circle ").skip(1) {
        let cy: f64 = c
            .split("cy=\"")
            .nth(1)
            .unwrap()
            .split('"')
            .next()
            .unwrap()
            .parse()
            .unwrap();
        let cx: f64 = c
            .split("cx=\"")
            .nth(1)
            .unwrap()
            .split('"')
            .next()
            .unwrap()
            .parse()
            .unwrap();
        assert!(
            (0.0..height).contains(&cy) && (90.0..=880.0).contains(&cx),
            "{cx} {cy}"
        );
    }
}

/// `uroce decode -i IFACE -c N -w FILE`: frames injected on one end of a veth pair are
/// read live on the other, filtered, printed, counted and saved with their times. Needs
/// root (namespaces, AF_PACKET); skips saying so otherwise.
#[test]
fn live_interface_with_save() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("live_interface_with_save: skipped, not root");
        return;
    }
    let pair = uroce_tools::netns::VethPair::create("dec", 1500).expect("veth pair");
    let out = std::env::temp_dir().join(format!("uroce-test-{}-live.pcap", std::process::id()));
    let child = common::uroce_in(
        &pair.ns[0],
        &["decode", "-i", &pair.ifaces[0], "-c", "3", "-w"],
    )
    .arg(&out)
    .args(["--json", "--qp", "0x33"])
    .stdout(std::process::Stdio::piped())
    .stderr(std::process::Stdio::piped())
    .spawn()
    .unwrap();
    let frame = ud_over_ipv6();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sender = {
        let (stop, ns, iface) = (stop.clone(), pair.ns[1].clone(), pair.ifaces[1].clone());
        let frame = frame.clone();
        std::thread::spawn(move || {
            uroce_tools::netns::enter(&ns).unwrap();
            let fd =
                uroce::net::packet_socket::packet_socket(&iface, libc::ETH_P_ALL as u16, false)
                    .unwrap();
            // Until the reader has its 3 frames (it may start after the first ones), at
            // most 500 frames.
            for _ in 0..500 {
                if stop.load(std::sync::atomic::Ordering::SeqCst) {
                    break;
                }
                use std::os::fd::AsRawFd;
                // SAFETY: `frame` is readable for its length.
                unsafe { libc::send(fd.as_raw_fd(), frame.as_ptr().cast(), frame.len(), 0) };
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
        })
    };
    let o = child.wait_with_output().unwrap();
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    sender.join().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let lines: Vec<Value> = String::from_utf8(o.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(frame_numbers(&lines), [1, 2, 3]);
    for j in &lines {
        assert_eq!(
            (j["ok"].clone(), j["dest_qp"].clone()),
            (true.into(), 0x33.into())
        );
        assert_eq!(j["ecn"], "CE");
        assert!(j["time_ns"].as_u64().unwrap() > 1_600_000_000_000_000_000);
    }
    let saved = std::fs::read(&out).unwrap();
    let frames: Vec<_> = Reader::new(&saved).unwrap().map(|f| f.unwrap()).collect();
    assert_eq!(frames.len(), 3);
    for (f, j) in frames.iter().zip(&lines) {
        assert_eq!(f.data, &frame[..]);
        assert_eq!(f.ts_ns, j["time_ns"].as_u64());
    }
    let _ = std::fs::remove_file(&out);
}

/// A lossy uroce-to-uroce RDMA WRITE run (tests/data/README.md): `--stats` finds the
/// packets and retransmissions the client printed (`packets_sent` 167, `retransmits`
/// 60), and the plot marks the same 60.
#[test]
fn stats_agree_with_uroce_counters() {
    let path = data("uroce_write_loss.pcap");
    let s = stats(&path);
    let server = qp(&s, "10.214.9.2", 0x11);
    assert_eq!(server["frames"], 167, "the client's packets_sent");
    assert_eq!(server["retransmissions"], 60, "the client's retransmits");
    assert_eq!(
        (server["psn_first"].clone(), server["psn_max"].clone()),
        (256.into(), 362.into())
    );
    let client = qp(&s, "10.214.9.1", 0x11);
    assert_eq!(
        (client["frames"].clone(), client["seq_naks"].clone()),
        (17.into(), 3.into())
    );
    let svg = std::env::temp_dir().join(format!("uroce-test-{}-loss.svg", std::process::id()));
    let (code, _, _) = decode(&["--stats", "--plot", &svg.to_string_lossy(), &path]);
    assert_eq!(code, 0);
    let s = std::fs::read_to_string(&svg).unwrap();
    assert_eq!(
        s.matches(r##"stroke="#d62728" stroke-width="1.5""##)
            .count(),
        60
    );
    assert_eq!(
        s.matches(r##"fill="#d62728""##).count(),
        3,
        "PSN sequence NAKs"
    );
    let _ = std::fs::remove_file(&svg);
}

/// The CM messages no capture here holds (MRA, LAP, APR), written by hand from IBTA's
/// layouts (offsets after the 24-byte MAD header), decoded in JSON and text.
#[test]
fn mra_lap_apr_written_by_hand() {
    let ud = |mad: &[u8]| {
        let r = FrameRepr {
            eth: Some(EthernetRepr {
                dst: [2, 0, 0, 0, 0, 2],
                src: [2, 0, 0, 0, 0, 1],
                vlan: None,
                ethertype: 0x0800,
            }),
            ip: IpRepr::V4(uroce::wire::Ipv4Repr::new(
                [10, 0, 0, 1].into(),
                [10, 0, 0, 2].into(),
                0,
            )),
            udp: UdpRepr {
                src_port: 50000,
                dst_port: 4791,
                checksum: 0,
            },
            bth: BthRepr::new(Opcode::UdSendOnly, 1, 3),
            ext: ExtHeaders {
                deth: Some(DethRepr {
                    qkey: 0x8001_0000,
                    src_qp: 1,
                }),
                ..Default::default()
            },
        };
        let mut f = vec![0u8; r.buffer_len(mad.len())];
        r.emit(mad, &mut f).unwrap();
        f
    };
    let mad = |attr: u8, fill: &dyn Fn(&mut [u8])| {
        let mut m = vec![0u8; 256];
        m[..4].copy_from_slice(&[1, 7, 2, 3]);
        m[8..16].copy_from_slice(&[0, 0, 0, 0, 0, 0, 0x12, 0x34]);
        m[17] = attr;
        fill(&mut m[24..]);
        ud(&m)
    };
    let mra = mad(0x11, &|d| {
        d[0..4].copy_from_slice(&[0, 0, 0, 0x0a]);
        d[4..8].copy_from_slice(&[0, 0, 0, 0x0b]);
        d[8] = 1 << 6; // MRA of a REP
        d[9] = 23 << 3; // service timeout 23
    });
    let lap = mad(0x19, &|d| {
        d[0..4].copy_from_slice(&[0, 0, 0, 0x0a]);
        d[12..15].copy_from_slice(&[0, 0, 0x21]);
        d[15] = 19 << 3;
        d[24..40].copy_from_slice(&"fd00::1".parse::<Ipv6Addr>().unwrap().octets());
        d[40..56].copy_from_slice(&"fd00::2".parse::<Ipv6Addr>().unwrap().octets());
    });
    let apr = mad(0x1a, &|d| d[9] = 3);
    let sidr = mad(0x18, &|d| {
        d[4] = 1; // service ID not supported
        d[8..11].copy_from_slice(&[0, 0, 0x40]);
    });
    let path = tmp("mra.pcap", &write_pcap([&mra[..], &lap, &apr, &sidr]));
    let (_, l, _) = decode(&["--json", "--check", &path]);
    assert_eq!(l[0]["mad"]["attr"], "MsgRcptAck");
    assert_eq!(l[0]["mad"]["tid"], 0x1234);
    let c = &l[0]["cm"];
    assert_eq!(
        (
            c["msg"].clone(),
            c["message_mraed"].clone(),
            c["service_timeout"].clone()
        ),
        ("MRA".into(), 1.into(), 23.into())
    );
    assert_eq!(
        (c["local_comm_id"].clone(), c["remote_comm_id"].clone()),
        (10.into(), 11.into())
    );
    let c = &l[1]["cm"];
    assert_eq!(
        (
            c["msg"].clone(),
            c["remote_qpn"].clone(),
            c["remote_cm_response_timeout"].clone()
        ),
        ("LAP".into(), 0x21.into(), 19.into())
    );
    assert_eq!(
        (
            c["alternate_local_gid"].clone(),
            c["alternate_remote_gid"].clone()
        ),
        ("fd00::1".into(), "fd00::2".into())
    );
    assert_eq!(
        (l[2]["cm"]["msg"].clone(), l[2]["cm"]["ap_status"].clone()),
        ("APR".into(), 3.into())
    );
    let c = &l[3]["cm"];
    assert_eq!(
        (
            c["status"].clone(),
            c["status_name"].clone(),
            c["qpn"].clone()
        ),
        (1.into(), "service ID not supported".into(), 0x40.into())
    );
    let (_, t, _) = decode(&[&path]);
    let t: Vec<&str> = t.iter().map(|v| v.as_str().unwrap()).collect();
    assert!(
        t[0].contains(
            "mad[CM v2 Send tid 0x1234 MsgRcptAck] cm[MRA comm 0xa/0xb of REP timeout 23]"
        ),
        "{}",
        t[0]
    );
    assert!(
        t[1].contains("cm[LAP comm 0xa/0x0 qpn 0x21 alt fd00::1 > fd00::2]"),
        "{}",
        t[1]
    );
    assert!(t[2].contains("cm[APR comm 0x0/0x0 status 3]"), "{}", t[2]);
    assert!(
        t[3].contains("cm[SIDR_REP req 0x0 status 1 (service ID not supported) qpn 0x40"),
        "{}",
        t[3]
    );
}

/// IPv6 extension headers (hop-by-hop, then destination options) are followed to UDP and
/// named; the ICRC covers them as part of the IP header; a fragment header of a real
/// fragment stops the decode with an error that says where.
#[test]
fn ipv6_extension_headers() {
    let f = ud_over_ipv6();
    let at = 14 + 40;
    let mut g = f[..at].to_vec();
    g.extend_from_slice(&[60, 0, 1, 4, 0, 0, 0, 0]); // hop-by-hop: next dest-opts, PadN
    g.extend_from_slice(&[17, 0, 1, 4, 0, 0, 0, 0]); // dest-opts: next UDP
    g.extend_from_slice(&f[at..]);
    g[20] = 0; // the fixed header's next header: hop-by-hop
    let plen = u16::from_be_bytes([g[18], g[19]]) + 16;
    g[18..20].copy_from_slice(&plen.to_be_bytes());
    let udp = at + 16;
    let n = g.len();
    let crc = uroce::wire::icrc::compute_ipv6_ext(
        &g[14..at],
        &g[at..udp],
        &g[udp..udp + 8],
        &g[udp + 8..n - 4],
    );
    g[n - 4..].copy_from_slice(&crc.to_le_bytes());
    let mut frag = g.clone();
    frag[at + 8] = 44; // dest-opts says a fragment header follows...
    frag[udp..udp + 8].copy_from_slice(&[17, 0, 0, 9, 0, 0, 0, 1]); // ...offset 1, M set
    let path = tmp("v6ext.pcap", &write_pcap([&g[..], &frag]));
    let (_, l, _) = decode(&["--json", &path]);
    assert_eq!(l[0]["ok"], true, "{}", l[0]);
    assert_eq!(
        l[0]["ipv6_ext"],
        serde_json::json!(["hop-by-hop", "dest-opts"])
    );
    assert_eq!(
        (l[0]["dest_qp"].clone(), l[0]["imm"].clone()),
        (0x33.into(), 0xdead_beef_u32.into())
    );
    assert_eq!(l[0]["ecn"], "CE");
    assert_eq!(l[1]["ok"], false);
    let e = l[1]["error"].as_str().unwrap();
    assert!(e.starts_with("IP fragment at offset 72 "), "{e}");
    let (_, t, _) = decode(&[&path]);
    assert!(
        t[0].as_str()
            .unwrap()
            .contains(" ext[hop-by-hop,dest-opts] ttl 64 CE UD_SEND_ONLY_WITH_IMMEDIATE"),
        "{}",
        t[0]
    );
}

/// One of the interop suite's lossy cases against rdma_rxe (tests/data/README.md): the
/// retransmissions `--stats` finds are the 25 uroce printed.
#[test]
fn stats_agree_with_uroce_counters_against_rxe() {
    let s = stats(&data("rxe_write_loss.pcap"));
    let to_rxe = qp(&s, "10.78.0.11", 0x12);
    assert_eq!(to_rxe["retransmissions"], 25, "uroce's retransmits");
    assert_eq!(to_rxe["frames"], 10 * 4 + 25);
    let to_uroce = qp(&s, "10.78.0.1", 0x11);
    assert_eq!(
        (to_uroce["frames"].clone(), to_uroce["seq_naks"].clone()),
        (29.into(), 1.into())
    );
    let (code, l, _) = decode(&["--check", &data("rxe_write_loss.pcap")]);
    assert_eq!((code, l.len()), (0, 94));
}
