//! A hostile peer: random well-formed packets with random PSNs, QPNs, rkeys, addresses
//! and opcodes thrown at a QP. It must not crash, must not touch memory it did not grant,
//! and must not accept data outside its PSN window.

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
