//! `uroce decode` end to end: the binary on real and damaged captures.

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
