//! Golden vectors: real RoCEv2 traffic from Linux soft-RoCE (rdma_rxe), captured on the
//! wire (see tests/data/README.md). Every RoCE frame must parse with a good ICRC and be
//! re-emitted byte for byte from its parsed representation.

use uroce::pcap::Reader;
use uroce::wire::{self, Opcode};

fn frames(name: &str) -> Vec<Vec<u8>> {
    let path = format!("{}/tests/data/{name}", env!("CARGO_MANIFEST_DIR"));
    let data = std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    Reader::new(&data)
        .unwrap()
        .map(|f| f.unwrap().data.to_vec())
        .collect()
}

/// RoCE frames of a capture (UDP dst 4791), each checked and re-emitted.
fn golden(name: &str) -> Vec<(Opcode, usize)> {
    let mut seen = Vec::new();
    for (i, f) in frames(name).iter().enumerate() {
        let d = wire::dissect(f);
        if d.udp.is_none() {
            continue; // the TCP/18515 exchange
        }
        let p = wire::parse(f).unwrap_or_else(|e| panic!("{name} frame {}: {e}", i + 1));
        let mut out = vec![0u8; f.len()];
        let n = p.frame_repr().emit(p.payload, &mut out).unwrap();
        out.truncate(n);
        out.extend_from_slice(p.trailer);
        assert_eq!(&out, f, "{name} frame {} re-emitted differently", i + 1);
        seen.push((p.bth.opcode(), p.payload.len()));
    }
    seen
}

fn count(seen: &[(Opcode, usize)], op: Opcode) -> usize {
    seen.iter().filter(|(o, _)| *o == op).count()
}

#[test]
fn rc_pingpong() {
    let s = golden("rc_pingpong.pcap");
    assert_eq!(s.len(), 80);
    assert_eq!(count(&s, Opcode::RcSendOnly), 40);
    assert_eq!(count(&s, Opcode::RcAck), 40);
    assert!(s.iter().all(|&(o, n)| o != Opcode::RcSendOnly || n == 1024));
}

#[test]
fn ud_pingpong() {
    let s = golden("ud_pingpong.pcap");
    assert_eq!(s.len(), 40);
    assert_eq!(count(&s, Opcode::UdSendOnly), 40);
    assert!(s.iter().all(|&(_, n)| n == 512));
}

#[test]
fn ib_send_bw() {
    let s = golden("ib_send_bw.pcap");
    assert_eq!(s.len(), 100);
    assert_eq!(count(&s, Opcode::RcSendFirst), 20);
    assert_eq!(count(&s, Opcode::RcSendMiddle), 40);
    assert_eq!(count(&s, Opcode::RcSendLast), 20);
    assert_eq!(count(&s, Opcode::RcAck), 20);
}

#[test]
fn ib_write_bw() {
    let s = golden("ib_write_bw.pcap");
    assert_eq!(s.len(), 100);
    assert_eq!(count(&s, Opcode::RcWriteFirst), 20);
    assert_eq!(count(&s, Opcode::RcWriteMiddle), 40);
    assert_eq!(count(&s, Opcode::RcWriteLast), 20);
}

#[test]
fn ib_read_bw() {
    let s = golden("ib_read_bw.pcap");
    assert_eq!(s.len(), 100);
    assert_eq!(count(&s, Opcode::RcReadRequest), 20);
    assert_eq!(count(&s, Opcode::RcReadResponseFirst), 20);
    assert_eq!(count(&s, Opcode::RcReadResponseMiddle), 40);
    assert_eq!(count(&s, Opcode::RcReadResponseLast), 20);
}

#[test]
fn ib_atomic_bw() {
    let s = golden("ib_atomic_bw.pcap");
    assert_eq!(s.len(), 40);
    assert_eq!(count(&s, Opcode::RcFetchAdd), 20);
    assert_eq!(count(&s, Opcode::RcAtomicAck), 20);
}

/// Every truncation and every single-bit flip of every real RoCE frame is rejected with an
/// error (never a panic, never accepted), except flips in fields the ICRC does not cover.
#[test]
fn damaged_real_frames_are_rejected() {
    for name in [
        "rc_pingpong.pcap",
        "ud_pingpong.pcap",
        "ib_write_bw.pcap",
        "ib_atomic_bw.pcap",
    ] {
        for f in frames(name)
            .iter()
            .filter(|f| wire::dissect(f).udp.is_some())
            .take(6)
        {
            for cut in 0..f.len() {
                assert!(
                    wire::parse(&f[..cut]).is_err(),
                    "{name}: cut at {cut} accepted"
                );
                let _ = wire::dissect(&f[..cut]);
            }
            // Bits the ICRC covers: from the IP header (offset 14) on, minus the masked
            // fields. Ethernet addresses are not covered by the ICRC (the FCS does that).
            let masked = [14 + 1, 14 + 8, 14 + 10, 14 + 11, 34 + 6, 34 + 7, 42 + 4];
            for byte in 14..f.len() {
                for bit in 0..8 {
                    let mut g = f.clone();
                    g[byte] ^= 1 << bit;
                    let r = wire::parse(&g);
                    if masked.contains(&byte) {
                        // Masked: the ICRC still holds; only the IPv4 checksum (bytes 10/11,
                        // or a TOS/TTL change it covers) can object.
                        assert!(
                            !matches!(r, Err(wire::WireError::BadIcrc { .. })),
                            "{name}: flip in masked byte {byte} broke the ICRC"
                        );
                    } else {
                        assert!(r.is_err(), "{name}: flip of byte {byte} bit {bit} accepted");
                    }
                }
            }
        }
    }
}

/// The UDP backend cannot see the IPv4 identification rxe numbers its packets with, yet
/// the ICRC covers it: it is solved for from the ICRC. Every IPv4 RoCE frame of the
/// captures, with its identification erased, gives it back.
#[test]
fn rxe_ip_identification_is_recovered_from_the_icrc() {
    let mut recovered = 0;
    for name in [
        "rc_pingpong.pcap",
        "ud_pingpong.pcap",
        "ib_write_bw.pcap",
        "ib_read_bw.pcap",
        "ib_send_bw.pcap",
        "ib_atomic_bw.pcap",
    ] {
        for f in frames(name) {
            let Ok(p) = wire::parse(&f) else { continue };
            let wire::IpRepr::V4(ip) = p.ip().repr() else {
                continue;
            };
            let ihl = usize::from(f[14] & 0x0f) * 4;
            let ip_hdr = &f[14..14 + ihl];
            let udp = &f[14 + ihl..14 + ihl + 8];
            let transport = &f[14 + ihl + 8..f.len() - 4];
            let stored = wire::icrc::stored(&f[14 + ihl + 8..]).unwrap();
            let mut erased = ip_hdr.to_vec();
            erased[4..6].copy_from_slice(&[0, 0]);
            let zero = wire::icrc::compute(&erased, udp, transport);
            let basis = wire::icrc::ident_basis(ihl, transport.len()).unwrap();
            assert_eq!(
                wire::icrc::solve_ident(&basis, stored ^ zero),
                Some(ip.ident),
                "{name}"
            );
            recovered += usize::from(ip.ident != 0);
        }
    }
    assert!(
        recovered > 100,
        "only {recovered} frames had a non-zero identification"
    );
}
