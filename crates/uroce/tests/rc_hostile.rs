//! A hostile peer: random well-formed packets with random PSNs, QPNs, rkeys, addresses
//! and opcodes thrown at a QP. It must not crash, must not touch memory it did not grant
//! (regions and memory windows, SEND with Invalidate included), and must not accept data
//! outside its PSN window.

use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};

use uroce::mem::{Access, Mr};
use uroce::sim::Rng;
use uroce::verbs::{
    Context, ContextConfig, InitAttr, Mtu, QpCaps, RecvWr, Remote, RtrAttr, RtsAttr, Sge,
};
use uroce::wire::opcode::{ExtHeader, PayloadRule};
use uroce::wire::{
    AethRepr, AtomicAckEthRepr, AtomicEthRepr, BthRepr, DethRepr, EthernetRepr, ExtHeaders,
    FrameRepr, IpRepr, Ipv4Repr, Opcode, RethRepr, UdpRepr,
};

const EPSN: u32 = 0x00_1000;

struct Victim {
    ctx: Context,
    qpn: u32,
    granted: Mr,
    canary: Mr,
    recv: Mr,
}

fn victim() -> Victim {
    let mut ctx = Context::new(
        ContextConfig {
            mac: [2, 0, 0, 0, 0, 2],
            ip: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)),
            seed: 99,
            udp_sport_base: 0xc000,
            tos: 0,
        },
        std::time::Instant::now(),
    );
    let cq = ctx
        .create_cq(uroce::verbs::MAX_CQE)
        .expect("MAX_CQE is a valid CQ depth");
    let pd = ctx.alloc_pd();
    let qpn = ctx
        .create_qp(
            pd,
            QpCaps {
                qp_type: uroce::verbs::QpType::Rc,
                send_cq: cq,
                recv_cq: cq,
                max_send_wr: 16,
                max_recv_wr: 64,
            },
        )
        .unwrap();
    let all =
        Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ | Access::REMOTE_ATOMIC;
    let granted = ctx.reg_mr(pd, vec![0x5a; 65536], all).unwrap();
    let canary = ctx
        .reg_mr(pd, vec![0xc3; 65536], Access::LOCAL_WRITE)
        .unwrap();
    let recv = ctx
        .reg_mr(pd, vec![0; 8 * 4096], Access::LOCAL_WRITE)
        .unwrap();
    ctx.modify_qp_init(qpn, InitAttr::default()).unwrap();
    ctx.modify_qp_rtr(
        qpn,
        RtrAttr {
            remote: Remote {
                ip: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)),
                mac: [2, 0, 0, 0, 0, 1],
            },
            dest_qpn: 0x77,
            rq_psn: EPSN,
            path_mtu: Mtu::M1024,
            max_dest_rd_atomic: 4,
            min_rnr_timer: 1,
        },
    )
    .unwrap();
    ctx.modify_qp_rts(
        qpn,
        RtsAttr {
            sq_psn: 0x50_0000,
            ..RtsAttr::default()
        },
    )
    .unwrap();
    for i in 0..8u64 {
        let sge = Sge {
            addr: recv.addr + i * 4096,
            length: 4096,
            lkey: recv.lkey,
        };
        ctx.post_recv(qpn, RecvWr { wr_id: i, sge }).unwrap();
    }
    Victim {
        ctx,
        qpn,
        granted,
        canary,
        recv,
    }
}

fn frame(bth: BthRepr, ext: ExtHeaders, payload: &[u8]) -> Vec<u8> {
    let r = FrameRepr {
        eth: Some(EthernetRepr {
            dst: [2, 0, 0, 0, 0, 2],
            src: [2, 0, 0, 0, 0, 1],
            vlan: None,
            ethertype: 0x0800,
        }),
        ip: IpRepr::V4(Ipv4Repr::new(
            Ipv4Addr::new(10, 0, 0, 1),
            Ipv4Addr::new(10, 0, 0, 2),
            0,
        )),
        udp: UdpRepr {
            src_port: 0xc123,
            dst_port: 4791,
            checksum: 0,
        },
        bth,
        ext,
    };
    let mut buf = vec![0u8; r.buffer_len(payload.len())];
    r.emit(payload, &mut buf).unwrap();
    buf
}

/// A random well-formed RC (or UD / UC / CNP) packet.
fn random_packet(r: &mut Rng, qpn: u32, rkeys: &[u32], va_base: u64) -> Vec<u8> {
    let ops: Vec<Opcode> = Opcode::ALL
        .iter()
        .copied()
        .filter(|o| o.is_supported())
        .collect();
    let op = ops[r.range(0, ops.len() as u64 - 1) as usize];
    let qp = if r.chance(0.9) {
        qpn
    } else {
        r.next_u64() as u32 & 0xff_ffff
    };
    let psn = if r.chance(0.5) {
        (EPSN + r.range(0, 8) as u32).wrapping_sub(4) & 0xff_ffff
    } else {
        r.next_u64() as u32 & 0xff_ffff
    };
    let mut bth = BthRepr::new(op, qp, psn);
    bth.ack_req = r.chance(0.5);
    let rkey = rkeys[r.range(0, rkeys.len() as u64 - 1) as usize];
    let va = if r.chance(0.5) {
        va_base + r.range(0, 70_000)
    } else {
        r.next_u64()
    };
    let mut ext = ExtHeaders::default();
    for &h in op.headers() {
        match h {
            ExtHeader::Reth => {
                ext.reth = Some(RethRepr {
                    va,
                    rkey,
                    len: r.range(0, 70_000) as u32,
                })
            }
            ExtHeader::AtomicEth => {
                ext.atomic = Some(AtomicEthRepr {
                    va,
                    rkey,
                    swap_add: r.next_u64(),
                    compare: r.next_u64(),
                })
            }
            ExtHeader::Aeth => {
                ext.aeth = Some(AethRepr {
                    syndrome: r.next_u64() as u8,
                    msn: r.next_u64() as u32 & 0xff_ffff,
                })
            }
            ExtHeader::AtomicAckEth => {
                ext.atomic_ack = Some(AtomicAckEthRepr { orig: r.next_u64() })
            }
            ExtHeader::Deth => {
                ext.deth = Some(DethRepr {
                    qkey: r.next_u64() as u32,
                    src_qp: 1,
                })
            }
            ExtHeader::ImmDt => ext.imm = Some(r.next_u64() as u32),
            ExtHeader::Ieth => ext.ieth = Some(rkey),
            ExtHeader::Feth => ext.feth = Some(0),
            ExtHeader::Rdeth | ExtHeader::CnpReserved => {}
        }
    }
    let len = match op.payload() {
        PayloadRule::None => 0,
        PayloadRule::Exactly(n) => n,
        PayloadRule::Any => *[0usize, 1, 1023, 1024, 1025, 4096]
            .get(r.range(0, 5) as usize)
            .unwrap_or(&0),
    };
    let payload: Vec<u8> = (0..len).map(|_| 0xee).collect();
    frame(bth, ext, &payload)
}

#[test]
fn random_packets_never_reach_memory_they_were_not_granted() {
    let mut v = victim();
    let mut r = Rng::new(2024);
    // Keys the attacker might try: random ones, counting from a known key, the canary's
    // lkey used as an rkey; never the granted region's rkey itself.
    let g = v.granted.rkey;
    let rkeys = [
        r.next_u64() as u32,
        g.wrapping_add(1),
        g.wrapping_sub(1),
        g ^ 0x100,
        v.canary.lkey,
        v.recv.lkey,
        0,
    ];
    let mut now = Instant::now();
    let mut buf = vec![0u8; 5000];
    for i in 0..20_000 {
        let f = random_packet(&mut r, v.qpn, &rkeys, v.granted.addr);
        let _ = v.ctx.handle_frame(now, &f);
        while v.ctx.poll_frame(now, &mut buf).is_some() {}
        if i % 100 == 0 {
            now += Duration::from_millis(1);
            v.ctx.handle_timeout(now);
        }
        let _ = v.ctx.poll_cq(uroce::verbs::CqId(0), 100);
    }
    assert!(
        v.ctx.mr_bytes(&v.canary).iter().all(|&b| b == 0xc3),
        "canary region touched"
    );
    assert!(
        v.ctx.mr_bytes(&v.granted).iter().all(|&b| b == 0x5a),
        "granted region written with a wrong key"
    );
    assert!(v.ctx.counters().rx_unknown_qp > 0);
}

fn write_only(v: &Victim, psn: u32, fill: u8) -> Vec<u8> {
    let ext = ExtHeaders {
        reth: Some(RethRepr {
            va: v.granted.addr,
            rkey: v.granted.rkey,
            len: 512,
        }),
        ..ExtHeaders::default()
    };
    frame(
        BthRepr::new(Opcode::RcWriteOnly, v.qpn, psn),
        ext,
        &[fill; 512],
    )
}

#[test]
fn data_outside_the_psn_window_is_never_accepted() {
    let mut v = victim();
    let mut r = Rng::new(7);
    let now = Instant::now();
    let mut buf = vec![0u8; 5000];
    // The right key and address, every PSN but the expected one.
    for _ in 0..5_000 {
        let mut psn = r.next_u64() as u32 & 0xff_ffff;
        if psn == EPSN {
            psn ^= 1;
        }
        v.ctx.handle_frame(now, &write_only(&v, psn, 0xee)).unwrap();
        while v.ctx.poll_frame(now, &mut buf).is_some() {}
    }
    assert!(
        v.ctx.mr_bytes(&v.granted).iter().all(|&b| b == 0x5a),
        "data accepted outside the window"
    );
    assert!(v.ctx.qp_counters(v.qpn).unwrap().out_of_sequence > 0);
    assert!(v.ctx.qp_counters(v.qpn).unwrap().duplicate_request > 0);
    // The expected PSN is accepted: the check above could have failed.
    v.ctx
        .handle_frame(now, &write_only(&v, EPSN, 0xee))
        .unwrap();
    assert!(v.ctx.mr_bytes(&v.granted)[..512].iter().all(|&b| b == 0xee));
    assert!(v.ctx.mr_bytes(&v.granted)[512..].iter().all(|&b| b == 0x5a));
}

/// The victim's windows: a region of its own (LOCAL_WRITE and MW_BIND only: its rkey
/// grants nothing) with windows over parts of it, and what each may let in.
struct Windows {
    mr: Mr,
    /// Type 1, read/write/atomic, over [16 KiB, 20 KiB).
    t1: u32,
    /// Type 2 bound to the victim's QP, over [32 KiB, 36 KiB).
    t2: u32,
    /// Type 2 bound to the victim's second QP, over [48 KiB, 52 KiB): never usable, nor
    /// invalidated, through the attacked QP.
    t2_other: u32,
    /// Rkeys that grant nothing: a type 2 window invalidated by LOCAL_INV (it covered
    /// [40 KiB, 44 KiB)), a deallocated window (it covered [56 KiB, 60 KiB)), the key
    /// before each window's last bind.
    dead: Vec<u32>,
    /// The second QP.
    other_qpn: u32,
}

const OTHER_EPSN: u32 = 0x00_2000;
const KIB: u64 = 1024;

/// Runs the victim's requesters (`poll_frame`), so that the BIND_MW and LOCAL_INV work
/// requests posted take effect.
fn run_local(ctx: &mut Context) {
    let mut buf = vec![0u8; 5000];
    while ctx.poll_frame(Instant::now(), &mut buf).is_some() {}
}

fn with_windows(v: &mut Victim) -> Windows {
    use uroce::verbs::{inc_rkey, MwBind, MwType, QpType, SendOp, SendWr};
    let pd = uroce::mem::PdId(0);
    let ctx = &mut v.ctx;
    let mr = ctx
        .reg_mr(pd, vec![0x5a; 65536], Access::LOCAL_WRITE | Access::MW_BIND)
        .unwrap();
    let cq = uroce::verbs::CqId(0);
    let other_qpn = ctx
        .create_qp(
            pd,
            QpCaps {
                qp_type: QpType::Rc,
                send_cq: cq,
                recv_cq: cq,
                max_send_wr: 16,
                max_recv_wr: 16,
            },
        )
        .unwrap();
    ctx.modify_qp_init(other_qpn, InitAttr::default()).unwrap();
    let rtr = RtrAttr {
        remote: Remote {
            ip: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)),
            mac: [2, 0, 0, 0, 0, 1],
        },
        dest_qpn: 0x78,
        rq_psn: OTHER_EPSN,
        path_mtu: Mtu::M1024,
        max_dest_rd_atomic: 4,
        min_rnr_timer: 1,
    };
    ctx.modify_qp_rtr(other_qpn, rtr).unwrap();
    ctx.modify_qp_rts(other_qpn, RtsAttr::default()).unwrap();
    let all = Access::REMOTE_WRITE | Access::REMOTE_READ | Access::REMOTE_ATOMIC;
    let mut t1 = ctx.alloc_mw(pd, MwType::Type1).unwrap();
    let mut dead = vec![t1.rkey];
    let bind = MwBind {
        wr_id: 0,
        signaled: false,
        mr_lkey: mr.lkey,
        addr: mr.addr + 16 * KIB,
        length: 4 * KIB,
        access: all,
    };
    ctx.bind_mw(v.qpn, &mut t1, bind).unwrap();
    let bind2 = |ctx: &mut Context, qpn: u32, at: u64, dead: &mut Vec<u32>| {
        let mw = ctx.alloc_mw(pd, MwType::Type2).unwrap();
        dead.push(mw.rkey);
        let rkey = inc_rkey(mw.rkey);
        let op = SendOp::BindMw {
            mw: mw.id(),
            rkey,
            mr_lkey: mr.lkey,
            addr: mr.addr + at * KIB,
            length: 4 * KIB,
            access: all,
        };
        let wr = SendWr {
            wr_id: 0,
            op,
            sge: Sge::default(),
            signaled: false,
            solicited: false,
        };
        ctx.post_send(qpn, wr).unwrap();
        (mw, rkey)
    };
    let (_, t2) = bind2(ctx, v.qpn, 32, &mut dead);
    let (_, t2_other) = bind2(ctx, other_qpn, 48, &mut dead);
    let (_, gone) = bind2(ctx, v.qpn, 40, &mut dead);
    let (freed, freed_key) = bind2(ctx, v.qpn, 56, &mut dead);
    let inv = SendWr {
        wr_id: 0,
        op: SendOp::LocalInv { rkey: gone },
        sge: Sge::default(),
        signaled: false,
        solicited: false,
    };
    ctx.post_send(v.qpn, inv).unwrap();
    run_local(ctx);
    ctx.dealloc_mw(&freed).unwrap();
    dead.extend([gone, freed_key]);
    assert!(ctx.poll_cq(cq, 100).is_empty(), "every bind succeeded");
    Windows {
        mr,
        t1: t1.rkey,
        t2,
        t2_other,
        dead,
        other_qpn,
    }
}

/// Whether offset `i` of the windows' region lies in a window the attacked QP may use.
fn in_grant(i: u64) -> bool {
    (16 * KIB..20 * KIB).contains(&i) || (32 * KIB..36 * KIB).contains(&i)
}

/// A hostile peer against memory windows (IBTA §10.6.7, the IETH of §9.4.1.1): rounds of
/// crafted requests in sequence (RDMA WRITEs under every window key, live, foreign and
/// dead, at addresses around the window edges; SEND with Invalidate naming those keys),
/// then random packets with the same keys; each round on a fresh victim, as a refused
/// request takes the QP to ERR. Nothing outside the windows the attacked QP may use is
/// ever written (not the type 2 window of the other QP, not the invalidated or
/// deallocated windows' ranges, not the rest of the region); a SEND with Invalidate
/// naming the other QP's window leaves it working there; after the QP's own type 2
/// window is invalidated by a SEND with Invalidate, its range never changes again.
#[test]
fn hostile_peer_never_reaches_outside_a_window_grant() {
    let mut r = Rng::new(4791);
    let mut buf = vec![0u8; 5000];
    let (mut accepted, mut refused, mut invalidated) = (0, 0, 0);
    for round in 0..150 {
        let mut v = victim();
        let w = with_windows(&mut v);
        let now = Instant::now();
        let mut keys = vec![w.t1, w.t2, w.t2_other, v.granted.rkey, w.mr.lkey];
        keys.extend(&w.dead);
        keys.extend([w.t1 ^ 1, w.t2.wrapping_add(1), w.t2 ^ 0x100]);
        let mut t2_snapshot: Option<Vec<u8>> = None;
        for epsn in EPSN..EPSN + 12 {
            let rkey = keys[r.range(0, keys.len() as u64 - 1) as usize];
            let f = if r.chance(0.25) {
                let ext = ExtHeaders {
                    ieth: Some(rkey),
                    ..ExtHeaders::default()
                };
                frame(
                    BthRepr::new(Opcode::RcSendOnlyInv, v.qpn, epsn),
                    ext,
                    &[0xee; 16],
                )
            } else {
                let edge = [16, 20, 32, 36, 40, 44, 48, 52, 56, 60][r.range(0, 9) as usize];
                let va = (w.mr.addr + edge * KIB + r.range(0, 256)).wrapping_sub(128);
                let ext = ExtHeaders {
                    reth: Some(RethRepr { va, rkey, len: 64 }),
                    ..ExtHeaders::default()
                };
                frame(
                    BthRepr::new(Opcode::RcWriteOnly, v.qpn, epsn),
                    ext,
                    &[0xee; 64],
                )
            };
            v.ctx.handle_frame(now, &f).unwrap();
            while v.ctx.poll_frame(now, &mut buf).is_some() {}
            for wc in v.ctx.poll_cq(uroce::verbs::CqId(0), 100) {
                if wc.invalidated_rkey == Some(w.t2) {
                    invalidated += 1;
                    let b = &v.ctx.mr_bytes(&w.mr)[32 * 1024..36 * 1024];
                    t2_snapshot = Some(b.to_vec());
                }
            }
            if v.ctx.qp_state(v.qpn) != Some(uroce::verbs::QpState::Rts) {
                refused += 1;
                break;
            }
            accepted += 1;
        }
        for _ in 0..200 {
            let f = random_packet(&mut r, v.qpn, &keys, w.mr.addr);
            let _ = v.ctx.handle_frame(now, &f);
            while v.ctx.poll_frame(now, &mut buf).is_some() {}
            for wc in v.ctx.poll_cq(uroce::verbs::CqId(0), 100) {
                if wc.invalidated_rkey == Some(w.t2) && t2_snapshot.is_none() {
                    let b = &v.ctx.mr_bytes(&w.mr)[32 * 1024..36 * 1024];
                    t2_snapshot = Some(b.to_vec());
                }
            }
        }
        let bytes = v.ctx.mr_bytes(&w.mr);
        for (i, &b) in bytes.iter().enumerate() {
            assert!(
                b == 0x5a || in_grant(i as u64),
                "round {round}: byte {i} of the windows' region written outside a grant"
            );
        }
        if let Some(s) = t2_snapshot {
            assert_eq!(
                &bytes[32 * 1024..36 * 1024],
                &s[..],
                "round {round}: written through an invalidated window"
            );
        }
        assert!(v.ctx.mr_bytes(&v.canary).iter().all(|&b| b == 0xc3));
        // The other QP's window survived every foreign SEND with Invalidate: a WRITE over
        // its own QP still lands.
        let ext = ExtHeaders {
            reth: Some(RethRepr {
                va: w.mr.addr + 48 * KIB,
                rkey: w.t2_other,
                len: 8,
            }),
            ..ExtHeaders::default()
        };
        let f = frame(
            BthRepr::new(Opcode::RcWriteOnly, w.other_qpn, OTHER_EPSN),
            ext,
            &[0x77; 8],
        );
        v.ctx.handle_frame(now, &f).unwrap();
        assert_eq!(
            &v.ctx.mr_bytes(&w.mr)[48 * 1024..48 * 1024 + 8],
            &[0x77; 8],
            "round {round}: the other QP's window was revoked through this QP"
        );
    }
    // The rounds did exercise both sides: requests through live windows accepted, others
    // refused, and the QP's own type 2 window invalidated by a SEND with Invalidate.
    assert!(
        accepted > 0 && refused > 0 && invalidated > 0,
        "{accepted} {refused} {invalidated}"
    );
}
