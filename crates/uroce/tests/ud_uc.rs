//! UD and UC, and CNPs on every QP type: packet-level behaviour with two contexts wired
//! back to back.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::{Duration, Instant};

use uroce::mem::{Access, Mr};
use uroce::verbs::{
    Context, ContextConfig, CqId, InitAttr, Mtu, QpCaps, QpType, RecvWr, Remote, RtrAttr, RtsAttr,
    SendOp, SendWr, Sge, UdSendWr, WcOpcode, WcStatus,
};
use uroce::wire::{self, Opcode};

const QKEY: u32 = 0x1111_1111;

struct Node {
    ctx: Context,
    qpn: u32,
    cq: CqId,
    buf: Mr,
}

fn addr(n: u8, v6: bool) -> IpAddr {
    if v6 {
        IpAddr::V6(Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, u16::from(n)))
    } else {
        IpAddr::V4(Ipv4Addr::new(10, 0, 0, n))
    }
}

fn remote(n: u8, v6: bool) -> Remote {
    Remote {
        ip: addr(n, v6),
        mac: [2, 0, 0, 0, 0, n],
    }
}

fn node(n: u8, t: QpType, v6: bool) -> Node {
    let mut ctx = Context::new(
        ContextConfig {
            mac: [2, 0, 0, 0, 0, n],
            ip: addr(n, v6),
            seed: u64::from(n),
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
                qp_type: t,
                send_cq: cq,
                recv_cq: cq,
                max_send_wr: 256,
                max_recv_wr: 256,
            },
        )
        .unwrap();
    let all = Access::LOCAL_WRITE | Access::REMOTE_WRITE;
    let buf = ctx.reg_mr(pd, vec![0; 1 << 20], all).unwrap();
    ctx.modify_qp_init(
        qpn,
        InitAttr {
            qkey: QKEY,
            ..InitAttr::default()
        },
    )
    .unwrap();
    Node { ctx, qpn, cq, buf }
}

fn ud_pair(v6: bool) -> (Node, Node) {
    let mut a = node(1, QpType::Ud, v6);
    let mut b = node(2, QpType::Ud, v6);
    for x in [&mut a, &mut b] {
        x.ctx.modify_qp_rtr_ud(x.qpn, Mtu::M1024).unwrap();
        x.ctx
            .modify_qp_rts(
                x.qpn,
                RtsAttr {
                    sq_psn: 77,
                    ..RtsAttr::default()
                },
            )
            .unwrap();
    }
    (a, b)
}

fn post_recvs(x: &mut Node, n: u64, size: u32) {
    for i in 0..n {
        let sge = Sge {
            addr: x.buf.addr + i * 8192,
            length: size,
            lkey: x.buf.lkey,
        };
        x.ctx.post_recv(x.qpn, RecvWr { wr_id: i, sge }).unwrap();
    }
}

fn ud_send(a: &mut Node, to: u8, to_qpn: u32, qkey: u32, len: u32, v6: bool) {
    let sge = Sge {
        addr: a.buf.addr + 512 * 1024,
        length: len,
        lkey: a.buf.lkey,
    };
    let wr = UdSendWr {
        wr_id: 9,
        dest: remote(to, v6),
        remote_qpn: to_qpn,
        remote_qkey: qkey,
        sge,
        imm: Some(0xabcd),
        signaled: true,
        solicited: false,
    };
    a.ctx.post_send_ud(a.qpn, wr).unwrap();
}

/// Moves every frame from `a` to `b` (and back), returning what `a` sent.
fn pump(a: &mut Node, b: &mut Node, now: Instant) -> Vec<Vec<u8>> {
    let mut sent = Vec::new();
    let mut buf = vec![0u8; 5000];
    loop {
        let mut moved = false;
        while let Some(n) = a.ctx.poll_frame(now, &mut buf) {
            sent.push(buf[..n].to_vec());
            let _ = b.ctx.handle_frame(now, &buf[..n]);
            moved = true;
        }
        while let Some(n) = b.ctx.poll_frame(now, &mut buf) {
            let _ = a.ctx.handle_frame(now, &buf[..n]);
            moved = true;
        }
        if !moved {
            return sent;
        }
    }
}

#[test]
fn ud_delivers_with_grh_src_qp_and_sender() {
    for v6 in [false, true] {
        let (mut a, mut b) = ud_pair(v6);
        post_recvs(&mut b, 1, 2048);
        a.ctx.mr_bytes_mut(&a.buf)[512 * 1024..512 * 1024 + 300].fill(0x42);
        ud_send(&mut a, 2, b.qpn, QKEY, 300, v6);
        let sent = pump(&mut a, &mut b, Instant::now());
        assert_eq!(sent.len(), 1);
        let p = wire::parse(&sent[0]).unwrap();
        assert_eq!(p.bth.opcode(), Opcode::UdSendOnlyImm);
        assert_eq!(p.bth.psn(), 77);
        assert_eq!(
            (p.ext.deth.unwrap().qkey, p.ext.deth.unwrap().src_qp),
            (QKEY, a.qpn)
        );
        let wc = b.ctx.poll_cq(b.cq, 10);
        assert_eq!(wc.len(), 1);
        let w = wc[0];
        assert_eq!(
            (w.status, w.opcode, w.byte_len, w.imm),
            (WcStatus::Success, WcOpcode::Recv, 340, Some(0xabcd))
        );
        assert_eq!((w.src_qp, w.sender), (a.qpn, Some(addr(1, v6))));
        let got = &b.ctx.mr_bytes(&b.buf)[..340];
        // The GRH area, byte for byte: the IP header as it arrived (IPv4: after 20 zeros).
        if v6 {
            assert_eq!(&got[..40], &sent[0][14..54]);
            assert_eq!(got[0] >> 4, 6);
        } else {
            assert_eq!(&got[..20], &[0u8; 20]);
            assert_eq!(&got[20..40], &sent[0][14..34]);
            assert_eq!(got[20], 0x45);
        }
        assert!(got[40..].iter().all(|&x| x == 0x42));
        assert_eq!(a.ctx.poll_cq(a.cq, 10)[0].status, WcStatus::Success);
    }
}

#[test]
fn ud_qkey_rules() {
    let (mut a, mut b) = ud_pair(false);
    post_recvs(&mut b, 4, 2048);
    // Wrong Q_Key: dropped silently and counted.
    ud_send(&mut a, 2, b.qpn, 0x2222_2222, 10, false);
    pump(&mut a, &mut b, Instant::now());
    assert!(b.ctx.poll_cq(b.cq, 10).is_empty());
    assert_eq!(b.ctx.qp_counters(b.qpn).unwrap().qkey_violation, 1);
    // Bit 31 set: the sender's own Q_Key (also QKEY here) goes on the wire.
    ud_send(&mut a, 2, b.qpn, 0x8000_0000, 10, false);
    let sent = pump(&mut a, &mut b, Instant::now());
    assert_eq!(wire::parse(&sent[0]).unwrap().ext.deth.unwrap().qkey, QKEY);
    assert_eq!(b.ctx.poll_cq(b.cq, 10).len(), 1);
    // Unknown QPN: counted, dropped.
    ud_send(&mut a, 2, 0xabc, QKEY, 10, false);
    pump(&mut a, &mut b, Instant::now());
    assert_eq!(b.ctx.counters().rx_unknown_qp, 1);
}

#[test]
fn ud_mtu_limit_is_a_local_length_error() {
    let (mut a, mut b) = ud_pair(false);
    post_recvs(&mut b, 1, 4096);
    ud_send(&mut a, 2, b.qpn, QKEY, 1025, false);
    let sent = pump(&mut a, &mut b, Instant::now());
    assert!(sent.is_empty(), "nothing goes on the wire");
    let wc = a.ctx.poll_cq(a.cq, 10);
    assert_eq!(wc[0].status, WcStatus::LocLenErr);
    ud_send(&mut a, 2, b.qpn, QKEY, 1024, false);
    assert_eq!(pump(&mut a, &mut b, Instant::now()).len(), 1);
}

#[test]
fn ud_without_a_receive_drops_and_goes_on() {
    let (mut a, mut b) = ud_pair(false);
    ud_send(&mut a, 2, b.qpn, QKEY, 10, false);
    pump(&mut a, &mut b, Instant::now());
    assert_eq!(b.ctx.qp_counters(b.qpn).unwrap().no_recv_drop, 1);
    post_recvs(&mut b, 1, 2048);
    ud_send(&mut a, 2, b.qpn, QKEY, 10, false);
    pump(&mut a, &mut b, Instant::now());
    assert_eq!(b.ctx.poll_cq(b.cq, 10).len(), 1, "no stall after a drop");
}

#[test]
fn qp1_gsi_sends_and_receives_mads() {
    // MADs go GSI to GSI: 0x80010000 is a controlled Q_Key (bit 31), which a work request
    // can only name by using the sending QP's own, so the sender is QP1 too.
    let mut a = node(1, QpType::Gsi, false);
    let mut b = node(2, QpType::Gsi, false);
    assert_eq!((a.qpn, b.qpn), (1, 1));
    for x in [&mut a, &mut b] {
        x.ctx.modify_qp_rtr_ud(x.qpn, Mtu::M1024).unwrap();
        x.ctx.modify_qp_rts(x.qpn, RtsAttr::default()).unwrap();
    }
    post_recvs(&mut b, 2, 2048);
    ud_send(&mut a, 2, 1, 0x8001_0000, 256, false); // a MAD is 256 bytes
    pump(&mut a, &mut b, Instant::now());
    let wc = b.ctx.poll_cq(b.cq, 10);
    assert_eq!((wc.len(), wc[0].byte_len), (1, 296));
    ud_send(&mut a, 2, 1, QKEY, 256, false);
    pump(&mut a, &mut b, Instant::now());
    assert_eq!(b.ctx.qp_counters(1).unwrap().qkey_violation, 1);
}

fn uc_pair() -> (Node, Node) {
    let mut a = node(1, QpType::Uc, false);
    let mut b = node(2, QpType::Uc, false);
    let (qa, qb) = (a.qpn, b.qpn);
    for (x, peer, pq) in [(&mut a, 2u8, qb), (&mut b, 1, qa)] {
        let rtr = RtrAttr {
            remote: remote(peer, false),
            dest_qpn: pq,
            rq_psn: 500,
            path_mtu: Mtu::M1024,
            max_dest_rd_atomic: 0,
            min_rnr_timer: 0,
        };
        x.ctx.modify_qp_rtr(x.qpn, rtr).unwrap();
        x.ctx
            .modify_qp_rts(
                x.qpn,
                RtsAttr {
                    sq_psn: 500,
                    ..RtsAttr::default()
                },
            )
            .unwrap();
    }
    (a, b)
}

fn uc_post(a: &mut Node, wr_id: u64, op: SendOp, off: u64, len: u32, fill: u8) {
    let at = (512 * 1024 + off) as usize;
    a.ctx.mr_bytes_mut(&a.buf)[at..at + len as usize].fill(fill);
    let sge = Sge {
        addr: a.buf.addr + at as u64,
        length: len,
        lkey: a.buf.lkey,
    };
    a.ctx
        .post_send(
            a.qpn,
            SendWr {
                wr_id,
                op,
                sge,
                signaled: true,
                solicited: false,
            },
        )
        .unwrap();
}

#[test]
fn uc_loss_inside_a_message_loses_only_that_message() {
    let (mut a, mut b) = uc_pair();
    post_recvs(&mut b, 2, 8192);
    uc_post(&mut a, 1, SendOp::Send, 0, 3000, 0x11); // FIRST MIDDLE LAST: 500..=502
    uc_post(&mut a, 2, SendOp::SendWithImm(7), 4096, 2500, 0x22); // 503..=505
    let mut buf = vec![0u8; 5000];
    let now = Instant::now();
    let mut n_sent = 0;
    while let Some(n) = a.ctx.poll_frame(now, &mut buf) {
        if n_sent != 1 {
            // the MIDDLE of the first message is lost
            b.ctx.handle_frame(now, &buf[..n]).unwrap();
        }
        n_sent += 1;
    }
    assert_eq!(n_sent, 6);
    let wc = b.ctx.poll_cq(b.cq, 10);
    assert_eq!(wc.len(), 1, "no completion for the damaged message");
    let w = wc[0];
    assert_eq!(
        (w.status, w.byte_len, w.imm, w.wr_id),
        (WcStatus::Success, 2500, Some(7), 0)
    );
    assert!(
        b.ctx.mr_bytes(&b.buf)[..2500].iter().all(|&x| x == 0x22),
        "the receive was reused"
    );
    assert_eq!(b.ctx.qp_counters(b.qpn).unwrap().uc_msg_dropped, 1);
    // The sender completed both: UC has no acknowledgements.
    assert_eq!(a.ctx.poll_cq(a.cq, 10).len(), 2);
}

#[test]
fn uc_write_with_imm_and_resync_after_loss_of_a_last() {
    let (mut a, mut b) = uc_pair();
    post_recvs(&mut b, 2, 64);
    let target = b.buf.addr + 256 * 1024;
    let rkey = b.buf.rkey;
    uc_post(
        &mut a,
        1,
        SendOp::WriteWithImm {
            remote_addr: target,
            rkey,
            imm: 1,
        },
        0,
        2048,
        0x33,
    );
    uc_post(
        &mut a,
        2,
        SendOp::WriteWithImm {
            remote_addr: target + 4096,
            rkey,
            imm: 2,
        },
        4096,
        1500,
        0x44,
    );
    let mut buf = vec![0u8; 5000];
    let now = Instant::now();
    let mut i = 0;
    while let Some(n) = a.ctx.poll_frame(now, &mut buf) {
        if i != 1 {
            b.ctx.handle_frame(now, &buf[..n]).unwrap(); // lose the LAST of the first WRITE
        }
        i += 1;
    }
    let wc = b.ctx.poll_cq(b.cq, 10);
    assert_eq!(wc.len(), 1);
    assert_eq!(
        (wc[0].opcode, wc[0].imm, wc[0].byte_len),
        (WcOpcode::RecvRdmaWithImm, Some(2), 1500)
    );
    let m = &b.ctx.mr_bytes(&b.buf)[256 * 1024 + 4096..256 * 1024 + 4096 + 1500];
    assert!(m.iter().all(|&x| x == 0x44));
}

#[test]
fn cnp_at_most_once_per_interval_to_the_right_qpn() {
    let (mut a, mut b) = ud_pair(false);
    post_recvs(&mut b, 1, 2048);
    ud_send(&mut a, 2, b.qpn, QKEY, 64, false);
    let sent = pump(&mut a, &mut b, Instant::now());
    let mut marked = sent[0].clone();
    marked[15] |= 0x03; // ECN CE (a masked field: the ICRC still holds)
    let ip_sum = uroce::wire::ipv4::header_checksum(&marked[14..34]);
    marked[24..26].copy_from_slice(&ip_sum.to_be_bytes());
    let t0 = Instant::now();
    let mut cnps = Vec::new();
    let mut buf = vec![0u8; 512];
    // 10 Mpkt/s of CE-marked packets for 1 ms.
    for i in 0..10_000u64 {
        let now = t0 + Duration::from_nanos(i * 100);
        let _ = b.ctx.handle_frame(now, &marked);
        while let Some(n) = b.ctx.poll_frame(now, &mut buf) {
            cnps.push((now, buf[..n].to_vec()));
        }
    }
    assert_eq!(cnps.len(), 20, "1 ms / 50 us");
    for w in cnps.windows(2) {
        assert!(w[1].0 - w[0].0 >= Duration::from_micros(50));
    }
    for (_, f) in &cnps {
        let p = wire::parse(f).unwrap();
        assert_eq!(p.bth.opcode(), Opcode::Cnp);
        assert_eq!(p.bth.dest_qp(), a.qpn, "addressed to the sender's QP");
        assert!(p.bth.becn());
        assert_eq!(p.ip().dst(), addr(1, false));
    }
    let c = b.ctx.qp_counters(b.qpn).unwrap();
    assert_eq!((c.np_ecn_marked_roce_packets, c.np_cnp_sent), (10_000, 20));
    // The sender's reaction point gets them.
    for (_, f) in &cnps {
        a.ctx.handle_frame(t0, f).unwrap();
    }
    assert_eq!(a.ctx.reaction_point(a.qpn).unwrap().cnps, 20);
    assert_eq!(a.ctx.qp_counters(a.qpn).unwrap().rp_cnp_handled, 20);
}

/// A CNP built by uroce, against bytes written out by hand from Annex A17.9.3 (BTH opcode
/// 0x81, BECN, 16 reserved zero bytes) with the ICRC computed independently (Python's
/// zlib.crc32 over the masked headers).
#[test]
fn cnp_golden_bytes() {
    use uroce::wire::{cnp, EthernetRepr, ExtHeaders, FrameRepr, IpRepr, Ipv4Repr, UdpRepr};
    let mut ip = Ipv4Repr::new(
        Ipv4Addr::new(10, 0, 0, 2),
        Ipv4Addr::new(10, 0, 0, 1),
        48 << 2,
    );
    ip.ident = 1;
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
        bth: cnp::bth(0x12, 0xffff),
        ext: ExtHeaders::default(),
    };
    let mut f = vec![0u8; r.buffer_len(0)];
    r.emit(&[], &mut f).unwrap();
    let hex: String = f.iter().map(|b| format!("{b:02x}")).collect();
    let want = concat!(
        "020000000001020000000002",
        "0800",                                     // Ethernet
        "45c0003c00014000401125ee0a0000020a000001", // IPv4, DSCP 48, 60 bytes
        "c00112b700280000",                         // UDP to 4791, 40 bytes
        "8100ffff4000001200000000",                 // BTH: CNP, BECN, QP 0x12, PSN 0
        "00000000000000000000000000000000",         // 16 reserved bytes
        "e30351e1",                                 // ICRC, least significant byte first
    );
    assert_eq!(hex, want);
}

/// `ibv_dereg_mr` is refused (EBUSY) while a datagram of a UD QP not sent yet has its
/// buffer in the region (UD completes a send once it is on the wire); once it completes
/// it succeeds. A posted receive does not pin its region.
#[test]
fn ud_regions_cannot_be_deregistered_under_posted_sends() {
    let (mut a, mut b) = ud_pair(false);
    post_recvs(&mut b, 1, 8192);
    ud_send(&mut a, 2, b.qpn, QKEY, 100, false);
    let (abuf, bbuf) = (a.buf, b.buf);
    assert_eq!(a.ctx.dereg_mr(&abuf).unwrap_err().errno(), libc::EBUSY);
    pump(&mut a, &mut b, Instant::now());
    assert_eq!(a.ctx.poll_cq(a.cq, 4)[0].status, WcStatus::Success);
    assert_eq!(b.ctx.poll_cq(b.cq, 4)[0].status, WcStatus::Success);
    assert!(a.ctx.dereg_mr(&abuf).unwrap().is_some());
    assert!(b.ctx.dereg_mr(&bbuf).unwrap().is_some());
}

/// The same on UC, with a three-packet SEND: the sender's buffer is busy until the
/// message is sent, the receiver's while the message is being placed in it (taken off the
/// receive queue at the FIRST packet), not while the receive only waits.
#[test]
fn uc_regions_cannot_be_deregistered_under_posted_requests() {
    let (mut a, mut b) = uc_pair();
    post_recvs(&mut b, 1, 8192);
    uc_post(&mut a, 1, SendOp::Send, 0, 3000, 0x11); // FIRST MIDDLE LAST
    let (abuf, bbuf) = (a.buf, b.buf);
    let busy = |e: Result<Option<Vec<u8>>, uroce::verbs::VerbsError>| {
        assert_eq!(e.unwrap_err().errno(), libc::EBUSY);
    };
    busy(a.ctx.dereg_mr(&abuf));
    let now = Instant::now();
    let mut buf = vec![0u8; 5000];
    let n = a.ctx.poll_frame(now, &mut buf).unwrap();
    b.ctx.handle_frame(now, &buf[..n]).unwrap();
    busy(a.ctx.dereg_mr(&abuf)); // two packets still to send
    busy(b.ctx.dereg_mr(&bbuf)); // the receive is being filled
    pump(&mut a, &mut b, now);
    assert_eq!(a.ctx.poll_cq(a.cq, 4)[0].status, WcStatus::Success);
    assert_eq!(b.ctx.poll_cq(b.cq, 4)[0].byte_len, 3000);
    assert!(a.ctx.dereg_mr(&abuf).unwrap().is_some());
    assert!(b.ctx.dereg_mr(&bbuf).unwrap().is_some());
}

fn link_local(n: u8) -> Ipv6Addr {
    Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, u16::from(n))
}

/// A context on IPv4 with its interface's link-local address as a second one
/// (`Context::set_link_local`): a datagram to a peer's link-local address leaves from
/// its own (IPv6, in a frame moved to the buffer's start), arrives at the peer, and its
/// answer comes back the same way; IPv4 goes on as before in the same contexts; a
/// link-local peer without a link-local address of ours is refused.
#[test]
fn ud_over_the_link_local_address_beside_ipv4() {
    let (mut a, mut b) = ud_pair(false);
    // Without the second address: an IPv6 peer is the other IP version.
    let to_ll = |n: u8| Remote {
        ip: IpAddr::V6(link_local(n)),
        mac: [2, 0, 0, 0, 0, n],
    };
    let sge = Sge {
        addr: a.buf.addr + 512 * 1024,
        length: 8,
        lkey: a.buf.lkey,
    };
    let wr = |to: u8, qpn: u32| UdSendWr {
        wr_id: 9,
        dest: to_ll(to),
        remote_qpn: qpn,
        remote_qkey: QKEY,
        sge,
        imm: None,
        signaled: true,
        solicited: false,
    };
    assert!(a.ctx.post_send_ud(a.qpn, wr(2, b.qpn)).is_err());
    a.ctx.set_link_local(Some(link_local(1)));
    b.ctx.set_link_local(Some(link_local(2)));
    assert_eq!(a.ctx.link_local(), Some(link_local(1)));
    post_recvs(&mut b, 2, 2048);
    a.ctx.post_send_ud(a.qpn, wr(2, b.qpn)).unwrap();
    let sent = pump(&mut a, &mut b, Instant::now());
    assert_eq!(sent.len(), 1);
    let p = wire::parse(&sent[0]).unwrap();
    assert_eq!(
        (p.ip().src(), p.ip().dst()),
        (IpAddr::V6(link_local(1)), IpAddr::V6(link_local(2)))
    );
    let wc = b.ctx.poll_cq(b.cq, 10);
    assert_eq!(wc.len(), 1, "{wc:?}");
    assert_eq!(wc[0].status, WcStatus::Success);
    assert_eq!(wc[0].sender, Some(IpAddr::V6(link_local(1))));
    // IPv4 in the same contexts, unchanged.
    ud_send(&mut a, 2, b.qpn, QKEY, 8, false);
    let sent = pump(&mut a, &mut b, Instant::now());
    let p = wire::parse(&sent[0]).unwrap();
    assert_eq!(p.ip().src(), addr(1, false));
    let wc = b.ctx.poll_cq(b.cq, 10);
    assert_eq!(wc.len(), 1);
    assert_eq!(wc[0].sender, Some(addr(1, false)));
    // A packet to a link-local address that is not b's is not b's.
    post_recvs(&mut b, 1, 2048);
    let mut other = wr(2, b.qpn);
    other.dest.ip = IpAddr::V6(link_local(4));
    a.ctx.post_send_ud(a.qpn, other).unwrap();
    assert_eq!(pump(&mut a, &mut b, Instant::now()).len(), 1);
    assert!(b.ctx.poll_cq(b.cq, 10).is_empty());
    assert_eq!(b.ctx.counters().rx_not_for_us, 1);
    // Not a link-local address: ignored.
    a.ctx
        .set_link_local(Some(Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 1)));
    assert_eq!(a.ctx.link_local(), None);
}

/// Every datagram `x` has to send now through `poll_transmit_in_place`: whether each
/// left its payload in place.
fn in_place_of(x: &mut Node) -> Vec<bool> {
    let mut buf = vec![0u8; 5000];
    let mut seen = vec![];
    // SAFETY: nothing here reads a payload left in place: none may be (the test's
    // point), and the datagrams are dropped before `x` is called again.
    while let Some(t) = unsafe { x.ctx.poll_transmit_in_place(Instant::now(), &mut buf) } {
        seen.push(t.in_place.is_some());
    }
    seen
}

/// UC and UD payloads are copied even where a backend takes payloads in place: their
/// sends complete as the last packet is built, after which the program may change or
/// free the buffer, so no datagram may still point at it.
#[test]
fn uc_and_ud_payloads_are_never_left_in_place() {
    let (mut a, b) = uc_pair();
    let op = SendOp::Write {
        remote_addr: b.buf.addr,
        rkey: b.buf.rkey,
    };
    uc_post(&mut a, 1, op, 0, 3000, 0x11); // three packets, two of 1 KiB
    assert_eq!(in_place_of(&mut a), [false; 3]);
    let (mut a, _b) = ud_pair(false);
    ud_send(&mut a, 2, 1, QKEY, 1024, false);
    assert_eq!(in_place_of(&mut a), [false]);
}
