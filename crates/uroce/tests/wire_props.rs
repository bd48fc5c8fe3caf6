//! Properties of the wire layer: any valid representation survives emit → parse; the
//! ICRC catches every single-bit change outside the masked fields and ignores changes
//! inside them.

use std::net::{Ipv4Addr, Ipv6Addr};

use proptest::prelude::*;
use uroce::wire::opcode::{ExtHeader, PayloadRule};
use uroce::wire::{
    icrc, parse, AethRepr, AtomicAckEthRepr, AtomicEthRepr, BthRepr, DethRepr, EthernetRepr,
    ExtHeaders, FrameRepr, IpRepr, Ipv4Repr, Ipv6Repr, Opcode, RethRepr, UdpRepr, VlanTag,
};

fn eth(ethertype: u16) -> impl Strategy<Value = EthernetRepr> {
    (
        any::<[u8; 6]>(),
        any::<[u8; 6]>(),
        proptest::option::of((0u8..8, any::<bool>(), 0u16..4096)),
    )
        .prop_map(move |(dst, src, tag)| EthernetRepr {
            dst,
            src,
            vlan: tag.map(|(pcp, dei, vid)| VlanTag {
                tpid: 0x8100,
                pcp,
                dei,
                vid,
            }),
            ethertype,
        })
}

fn ip() -> impl Strategy<Value = IpRepr> {
    let v4 = (
        any::<u32>(),
        any::<u32>(),
        any::<u8>(),
        any::<u16>(),
        any::<bool>(),
        any::<u8>(),
        (0usize..=10).prop_flat_map(|words| proptest::collection::vec(any::<u8>(), words * 4)),
    )
        .prop_map(|(s, d, tos, ident, df, ttl, opts)| {
            let mut r = Ipv4Repr::new(Ipv4Addr::from(s), Ipv4Addr::from(d), tos);
            r.ident = ident;
            r.dont_frag = df;
            r.ttl = ttl;
            r.options[..opts.len()].copy_from_slice(&opts);
            r.options_len = opts.len() as u8;
            IpRepr::V4(r)
        });
    let v6 = (
        any::<u128>(),
        any::<u128>(),
        any::<u8>(),
        0u32..1 << 20,
        any::<u8>(),
    )
        .prop_map(|(s, d, tc, fl, hl)| {
            IpRepr::V6(Ipv6Repr {
                src: Ipv6Addr::from(s),
                dst: Ipv6Addr::from(d),
                traffic_class: tc,
                flow_label: fl,
                next_header: 17,
                hop_limit: hl,
            })
        });
    prop_oneof![v4, v6]
}

fn ext_for(op: Opcode) -> impl Strategy<Value = ExtHeaders> {
    (
        any::<(u32, u32, u32, u64, u32, u32)>(),
        any::<(u64, u32, u64, u64, u8, u32, u64)>(),
    )
        .prop_map(
            move |((qkey, sqp, imm, va, rkey, len), (ava, ark, sa, cmp, syn, msn, orig))| {
                let mut e = ExtHeaders::default();
                for h in op.headers() {
                    match h {
                        ExtHeader::Deth => {
                            e.deth = Some(DethRepr {
                                qkey,
                                src_qp: sqp & 0xff_ffff,
                            })
                        }
                        ExtHeader::Feth => e.feth = Some(imm),
                        ExtHeader::Reth => e.reth = Some(RethRepr { va, rkey, len }),
                        ExtHeader::AtomicEth => {
                            e.atomic = Some(AtomicEthRepr {
                                va: ava,
                                rkey: ark,
                                swap_add: sa,
                                compare: cmp,
                            })
                        }
                        ExtHeader::Aeth => {
                            e.aeth = Some(AethRepr {
                                syndrome: syn,
                                msn: msn & 0xff_ffff,
                            })
                        }
                        ExtHeader::AtomicAckEth => e.atomic_ack = Some(AtomicAckEthRepr { orig }),
                        ExtHeader::ImmDt => e.imm = Some(imm),
                        ExtHeader::Ieth => e.ieth = Some(rkey),
                        ExtHeader::Rdeth | ExtHeader::CnpReserved => {}
                    }
                }
                e
            },
        )
}

prop_compose! {
    fn frame()(
        op in proptest::sample::select(
            Opcode::ALL.iter().copied().filter(|o| o.is_supported()).collect::<Vec<_>>()),
        ip in ip(),
        sport in any::<u16>(),
        flags in any::<(bool, bool, bool, bool, bool)>(),
        pkey in any::<u16>(),
        qp in 0u32..1 << 24,
        psn in 0u32..1 << 24,
        payload_len in 0usize..=4096,
        seed in any::<u8>(),
    )(
        eth in eth(ip.ethertype()),
        ext in ext_for(op),
        op in Just(op), ip in Just(ip), sport in Just(sport), flags in Just(flags),
        pkey in Just(pkey), qp in Just(qp), psn in Just(psn), payload_len in Just(payload_len),
        seed in Just(seed),
    ) -> (FrameRepr, Vec<u8>) {
        let (solicited, mig_req, fecn, becn, ack_req) = flags;
        let bth = BthRepr { solicited, mig_req, fecn, becn, ack_req, pkey,
            ..BthRepr::new(op, qp, psn) };
        let len = match op.payload() {
            PayloadRule::None => 0,
            PayloadRule::Exactly(n) => n,
            PayloadRule::Any => payload_len,
        };
        let payload = (0..len).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect();
        let udp = UdpRepr { src_port: sport, dst_port: 4791, checksum: 0 };
        (FrameRepr { eth: Some(eth), ip, udp, bth, ext }, payload)
    }
}

/// Offsets (within the frame) of bytes or bits the ICRC masks, as (byte, bit mask).
fn masked(r: &FrameRepr) -> Vec<(usize, u8)> {
    let l = r.layout(0);
    let mut m = vec![(l.udp + 6, 0xff), (l.udp + 7, 0xff), (l.bth + 4, 0xff)];
    match r.ip {
        IpRepr::V4(_) => m.extend([1, 8, 10, 11].map(|i| (l.ip + i, 0xff))),
        IpRepr::V6(_) => {
            m.push((l.ip, 0x0f));
            m.extend([1, 2, 3, 7].map(|i| (l.ip + i, 0xff)));
        }
    }
    m
}

fn icrc_holds(r: &FrameRepr, f: &[u8]) -> bool {
    let l = r.layout(0);
    let end = f.len() - 4;
    icrc::compute(&f[l.ip..l.udp], &f[l.udp..l.bth], &f[l.bth..end]) == icrc::stored(f).unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn emit_then_parse_gives_the_repr_back((r, payload) in frame()) {
        let mut buf = vec![0u8; r.buffer_len(payload.len())];
        let n = r.emit(&payload, &mut buf).unwrap();
        prop_assert_eq!(n, buf.len());
        prop_assert_eq!((n - r.layout(payload.len()).bth) % 4, 0, "transport part is 4-byte aligned");
        let p = parse(&buf).unwrap();
        let mut want = r;
        want.bth.pad_count = ((4 - payload.len() % 4) % 4) as u8;
        prop_assert_eq!(p.frame_repr(), want);
        prop_assert_eq!(p.payload, &payload[..]);
        prop_assert!(p.trailer.is_empty());
    }

    #[test]
    fn any_unmasked_bit_flip_breaks_the_icrc((r, payload) in frame(), pick in any::<usize>(), bit in 0u8..8) {
        let mut buf = vec![0u8; r.buffer_len(payload.len())];
        r.emit(&payload, &mut buf).unwrap();
        let l = r.layout(payload.len());
        let byte = l.ip + pick % (buf.len() - l.ip);
        let mask = masked(&r).iter().find(|(b, _)| *b == byte).map_or(0, |m| m.1);
        buf[byte] ^= 1 << bit;
        if mask & (1 << bit) != 0 {
            prop_assert!(icrc_holds(&r, &buf), "masked byte {} bit {} changed the ICRC", byte, bit);
        } else {
            prop_assert!(!icrc_holds(&r, &buf), "byte {} bit {} went unnoticed", byte, bit);
            prop_assert!(parse(&buf).is_err());
        }
    }

    #[test]
    fn masked_fields_may_change_freely((r, payload) in frame(), vals in any::<[u8; 8]>()) {
        let mut buf = vec![0u8; r.buffer_len(payload.len())];
        r.emit(&payload, &mut buf).unwrap();
        for (i, (byte, mask)) in masked(&r).into_iter().enumerate() {
            buf[byte] = (buf[byte] & !mask) | (vals[i % 8] & mask);
        }
        prop_assert!(icrc_holds(&r, &buf));
    }

    #[test]
    fn arbitrary_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..200)) {
        let _ = parse(&data);
        let _ = uroce::wire::dissect(&data);
        let _ = uroce::wire::dissect_ip(&data);
    }
}
