//! Scatter/gather lists end to end (ibverbs `sg_list` / `num_sge`): sends gathered from
//! several SGEs with packet boundaries that do not line up with theirs, receives, READ
//! responses and atomic results scattered over several SGEs, UD's GRH split across
//! SGEs, the caps (`max_send_sge`, `max_recv_sge`, the SRQ's `max_sge`) checked at post
//! time, and the local errors of a list. Each test names the rdma_rxe / ibverbs
//! behaviour it follows.

use std::net::{IpAddr, Ipv4Addr};
use std::time::Instant;

use uroce::mem::{Access, Mr};
use uroce::verbs::{
    Context, ContextConfig, CqId, InitAttr, Mtu, QpCaps, QpInitEx, QpState, QpType, RecvWr, Remote,
    RtrAttr, RtsAttr, SendFlags, SendOp, SendWr, Sge, SrqAttr, UdSendWr, VerbsError, WcOpcode,
    WcStatus, WorkCompletion, MAX_SGE,
};
use uroce::wire::{self, Opcode};

const QKEY: u32 = 0x1111_1111;
const MB: usize = 1 << 20;

struct Node {
    ctx: Context,
    qpn: u32,
    cq: CqId,
    buf: Mr,
}

impl Node {
    /// An SGE of this node's buffer at `off`.
    fn sge(&self, off: u64, length: u32) -> Sge {
        Sge {
            addr: self.buf.addr + off,
            length,
            lkey: self.buf.lkey,
        }
    }

    fn write(&mut self, off: usize, data: &[u8]) {
        self.ctx.mr_bytes_mut(&self.buf)[off..off + data.len()].copy_from_slice(data);
    }

    fn read(&self, off: usize, len: usize) -> Vec<u8> {
        self.ctx.mr_bytes(&self.buf)[off..off + len].to_vec()
    }

    /// The bytes the SGEs of `sgl` name, in order.
    fn gather(&self, sgl: &[Sge]) -> Vec<u8> {
        let mut v = Vec::new();
        for s in sgl {
            v.extend(self.read((s.addr - self.buf.addr) as usize, s.length as usize));
        }
        v
    }

    fn wcs(&mut self) -> Vec<WorkCompletion> {
        self.ctx.poll_cq(self.cq, 100)
    }
}

fn ip(n: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(10, 0, 0, n))
}

fn remote(n: u8) -> Remote {
    Remote {
        ip: ip(n),
        mac: [2, 0, 0, 0, 0, n],
    }
}

fn node(n: u8, t: QpType, ex: QpInitEx) -> Node {
    let mut ctx = Context::new(
        ContextConfig {
            mac: [2, 0, 0, 0, 0, n],
            ip: ip(n),
            seed: u64::from(n),
            udp_sport_base: 0xc000,
            tos: 0,
        },
        Instant::now(),
    );
    let cq = ctx.create_cq(1023).unwrap();
    let pd = ctx.alloc_pd();
    let caps = QpCaps {
        qp_type: t,
        send_cq: cq,
        recv_cq: cq,
        max_send_wr: 64,
        max_recv_wr: 64,
    };
    let qpn = ctx.create_qp_ex(pd, caps, ex).unwrap();
    let access =
        Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ | Access::REMOTE_ATOMIC;
    let pattern = (0..MB).map(|i| (i * 7 + usize::from(n)) as u8).collect();
    let buf = ctx.reg_mr(pd, pattern, access).unwrap();
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

/// Two QPs of type `t` back to back at path MTU `mtu`, with their own `QpInitEx`.
fn pair(t: QpType, mtu: Mtu, ex_a: QpInitEx, ex_b: QpInitEx) -> (Node, Node) {
    let mut a = node(1, t, ex_a);
    let mut b = node(2, t, ex_b);
    let (qa, qb) = (a.qpn, b.qpn);
    connect(&mut a, t, 2, qb, mtu);
    connect(&mut b, t, 1, qa, mtu);
    (a, b)
}

/// Takes `x`'s QP (in INIT) to RTS towards node `peer`'s QP `pq`.
fn connect(x: &mut Node, t: QpType, peer: u8, pq: u32, mtu: Mtu) {
    if t == QpType::Ud {
        x.ctx.modify_qp_rtr_ud(x.qpn, mtu).unwrap();
    } else {
        let rtr = RtrAttr {
            remote: remote(peer),
            dest_qpn: pq,
            rq_psn: 500,
            path_mtu: mtu,
            max_dest_rd_atomic: 4,
            min_rnr_timer: 1,
        };
        x.ctx.modify_qp_rtr(x.qpn, rtr).unwrap();
    }
    let rts = RtsAttr {
        sq_psn: 500,
        ..RtsAttr::default()
    };
    x.ctx.modify_qp_rts(x.qpn, rts).unwrap();
}

fn sge_caps(send: u32, recv: u32) -> QpInitEx {
    QpInitEx {
        max_send_sge: send,
        max_recv_sge: recv,
        ..QpInitEx::default()
    }
}

/// Moves frames both ways, firing timers when nothing moves (at most `timeouts` times);
/// `drop(from_a, n, frame)` loses the n-th frame. Returns every frame, with its sender.
fn pump(
    a: &mut Node,
    b: &mut Node,
    timeouts: usize,
    mut drop: impl FnMut(bool, usize, &[u8]) -> bool,
) -> Vec<(bool, Vec<u8>)> {
    let mut now = Instant::now();
    let mut log = Vec::new();
    let mut buf = vec![0u8; 5000];
    let mut fired = 0;
    loop {
        let mut moved = false;
        for from_a in [true, false] {
            let (src, dst) = if from_a {
                (&mut *a, &mut *b)
            } else {
                (&mut *b, &mut *a)
            };
            while let Some(n) = src.ctx.poll_frame(now, &mut buf) {
                moved = true;
                let f = buf[..n].to_vec();
                if !drop(from_a, log.len(), &f) {
                    let _ = dst.ctx.handle_frame(now, &f);
                }
                log.push((from_a, f));
            }
        }
        if moved {
            continue;
        }
        let next = [a.ctx.poll_timeout(), b.ctx.poll_timeout()]
            .into_iter()
            .flatten()
            .min();
        match next {
            Some(t) if fired < timeouts => {
                fired += 1;
                now = now.max(t);
                a.ctx.handle_timeout(now);
                b.ctx.handle_timeout(now);
            }
            _ => return log,
        }
    }
}

fn opcodes(log: &[(bool, Vec<u8>)], from_a: bool) -> Vec<(Opcode, usize)> {
    log.iter()
        .filter(|(f, _)| *f == from_a)
        .map(|(_, f)| {
            let p = wire::parse(f).unwrap();
            (p.bth.opcode(), p.payload.len())
        })
        .collect()
}

fn send_wr(wr_id: u64, op: SendOp) -> SendWr {
    SendWr {
        wr_id,
        op,
        sge: Sge::default(),
        signaled: true,
        solicited: false,
    }
}

/// SGEs of 100, 1, 0, 300 and 37 bytes at scattered places of A's buffer: 438 bytes
/// that MTU 256 cuts at 256, in the middle of the fourth SGE.
fn odd_list(a: &Node) -> Vec<Sge> {
    vec![
        a.sge(5000, 100),
        a.sge(70_000, 1),
        a.sge(0, 0),
        a.sge(20_000, 300),
        a.sge(9_999, 37),
    ]
}

/// rdma_rxe's `copy_data` (the requester's `finish_packet` gathers each packet's payload
/// from the WQE's SGEs in order, a packet crossing SGE boundaries, a zero-length SGE
/// skipped); the message length is the sum of the SGE lengths (`init_send_wqe`). RC and
/// UC SEND and RDMA WRITE.
#[test]
fn send_and_write_gather_across_sge_boundaries() {
    for t in [QpType::Rc, QpType::Uc] {
        let (mut a, mut b) = pair(t, Mtu::M256, sge_caps(5, 1), QpInitEx::default());
        let list = odd_list(&a);
        let want = a.gather(&list);
        assert_eq!(want.len(), 438);
        let r = b.sge(100_000, 1000);
        b.ctx.post_recv(b.qpn, RecvWr { wr_id: 7, sge: r }).unwrap();
        a.ctx
            .post_send_sgl(a.qpn, send_wr(1, SendOp::Send), &list, SendFlags::NONE)
            .unwrap();
        let write = SendOp::Write {
            remote_addr: b.buf.addr + 300_000,
            rkey: b.buf.rkey,
        };
        a.ctx
            .post_send_sgl(a.qpn, send_wr(2, write), &list, SendFlags::NONE)
            .unwrap();
        let log = pump(&mut a, &mut b, 0, |_, _, _| false);
        let (first, last) = if t == QpType::Rc {
            (Opcode::RcSendFirst, Opcode::RcSendLast)
        } else {
            (Opcode::UcSendFirst, Opcode::UcSendLast)
        };
        let sent = opcodes(&log, true);
        assert_eq!(sent[..2], [(first, 256), (last, 182)], "{t:?}");
        assert_eq!(sent[2].1, 256);
        assert_eq!(sent[3].1, 182);
        assert_eq!(b.read(100_000, 438), want, "{t:?} SEND");
        assert_eq!(b.read(300_000, 438), want, "{t:?} WRITE");
        let wa = a.wcs();
        assert_eq!(wa.len(), 2);
        assert!(wa
            .iter()
            .all(|w| w.status == WcStatus::Success && w.byte_len == 438));
        let wb = b.wcs();
        assert_eq!((wb[0].wr_id, wb[0].byte_len), (7, 438));
    }
}

/// rdma_rxe's responder places an incoming SEND with `copy_data` over the receive WQE's
/// SGEs in order (`send_data_in`); the completion's byte_len is the message length. RC
/// and UC, on the QP's receive queue and on an SRQ (`post_srq_recv` with a list).
#[test]
fn a_send_scatters_over_a_receive_list() {
    for (t, srq) in [(QpType::Rc, false), (QpType::Uc, false), (QpType::Rc, true)] {
        let (mut a, mut b) = if srq {
            // B's QP takes its receives from an SRQ with max_sge 4 (same PD).
            let mut a = node(1, t, QpInitEx::default());
            let mut b = node(2, t, QpInitEx::default());
            let pd = uroce::mem::PdId(0);
            let attr = SrqAttr {
                max_wr: 8,
                max_sge: 4,
                srq_limit: 0,
            };
            let id = b.ctx.create_srq(pd, attr).unwrap();
            assert_eq!(b.ctx.query_srq(id).unwrap().max_sge, 4);
            let caps = QpCaps {
                qp_type: t,
                send_cq: b.cq,
                recv_cq: b.cq,
                max_send_wr: 8,
                max_recv_wr: 8,
            };
            let ex = QpInitEx {
                srq: Some(id),
                ..QpInitEx::default()
            };
            b.qpn = b.ctx.create_qp_ex(pd, caps, ex).unwrap();
            b.ctx.modify_qp_init(b.qpn, InitAttr::default()).unwrap();
            let (qa, qb) = (a.qpn, b.qpn);
            connect(&mut a, t, 2, qb, Mtu::M256);
            connect(&mut b, t, 1, qa, Mtu::M256);
            (a, b)
        } else {
            pair(t, Mtu::M256, QpInitEx::default(), sge_caps(1, 4))
        };
        let src = a.sge(1000, 600);
        let want = a.gather(&[src]);
        let rlist = [
            b.sge(10_000, 50),
            b.sge(0, 0),
            b.sge(30_000, 200),
            b.sge(50_000, 400),
        ];
        if srq {
            b.ctx
                .post_srq_recv_sgl(uroce::verbs::SrqId(0), 9, &rlist)
                .unwrap();
        } else {
            b.ctx.post_recv_sgl(b.qpn, 9, &rlist).unwrap();
        }
        a.ctx
            .post_send(
                a.qpn,
                SendWr {
                    wr_id: 1,
                    op: SendOp::Send,
                    sge: src,
                    signaled: true,
                    solicited: false,
                },
            )
            .unwrap();
        pump(&mut a, &mut b, 0, |_, _, _| false);
        let wb = b.wcs();
        assert_eq!(wb.len(), 1, "{t:?} srq {srq}");
        assert_eq!(
            (wb[0].wr_id, wb[0].status, wb[0].byte_len),
            (9, WcStatus::Success, 600)
        );
        assert_eq!(b.gather(&rlist[..3]), want[..250]);
        assert_eq!(b.read(50_000, 350), want[250..]);
        // The last SGE's bytes past the message are untouched.
        assert_eq!(b.read(50_350, 50), node_pattern(2, 50_350, 50));
    }
}

/// Long messages at path MTU 4096, at odd offsets at both ends: an RDMA WRITE that loses
/// a MIDDLE and is resent from there (IBTA §9.7.5.1.4's go-back-N from the NAK's PSN),
/// a SEND scattered over a receive list, a READ into one SGE, each of 256 KiB and more,
/// land every byte and nothing beyond.
#[test]
fn long_messages_land_whole_at_odd_offsets() {
    let (mut a, mut b) = pair(QpType::Rc, Mtu::M4096, QpInitEx::default(), sge_caps(1, 2));
    const LEN: usize = 262_147;
    let write = SendOp::Write {
        remote_addr: b.buf.addr + 500_003,
        rkey: b.buf.rkey,
    };
    let mut w = send_wr(1, write);
    w.sge = a.sge(3, LEN as u32);
    a.ctx.post_send(a.qpn, w).unwrap();
    let rlist = [b.sge(1_001, 130_000), b.sge(200_005, 132_147)];
    b.ctx.post_recv_sgl(b.qpn, 2, &rlist).unwrap();
    let mut s = send_wr(3, SendOp::Send);
    s.sge = a.sge(400_007, LEN as u32);
    a.ctx.post_send(a.qpn, s).unwrap();
    let read = SendOp::Read {
        remote_addr: b.buf.addr + 770_017,
        rkey: b.buf.rkey,
    };
    let mut r = send_wr(4, read);
    r.sge = a.sge(700_009, LEN as u32);
    let want_read = node_pattern(2, 770_017, LEN);
    a.ctx.post_send(a.qpn, r).unwrap();
    let mut middles = 0;
    let log = pump(&mut a, &mut b, 10, |from_a, _, f| {
        let op = wire::parse(f).unwrap().bth.opcode();
        if from_a && op == Opcode::RcWriteMiddle {
            middles += 1;
            return middles == 20;
        }
        false
    });
    let writes = opcodes(&log, true)
        .into_iter()
        .filter(|(op, _)| matches!(op, Opcode::RcWriteMiddle | Opcode::RcWriteLast))
        .count();
    assert!(
        writes > LEN / 4096,
        "the WRITE was resent from the loss: {writes}"
    );
    let mut wa = a.wcs();
    wa.sort_by_key(|w| w.wr_id);
    let got: Vec<_> = wa.iter().map(|w| (w.wr_id, w.status)).collect();
    let ok = WcStatus::Success;
    assert_eq!(got, [(1, ok), (3, ok), (4, ok)]);
    // (`assert!`, not `assert_eq!`: a failure would print 300,000 bytes twice.)
    assert!(b.read(500_003, LEN) == node_pattern(1, 3, LEN), "the WRITE");
    assert_eq!(b.read(500_003 + LEN, 8), node_pattern(2, 500_003 + LEN, 8));
    assert_eq!(b.read(499_995, 8), node_pattern(2, 499_995, 8));
    let sent = node_pattern(1, 400_007, LEN);
    assert!(b.gather(&rlist) == sent, "the SEND");
    assert_eq!(b.read(1_001 - 8, 8), node_pattern(2, 1_001 - 8, 8));
    assert_eq!(b.read(332_152, 8), node_pattern(2, 332_152, 8));
    assert!(a.read(700_009, LEN) == want_read, "the READ");
    assert_eq!(a.read(700_009 + LEN, 8), node_pattern(1, 700_009 + LEN, 8));
    let wb = b.wcs();
    assert_eq!(
        (wb[0].wr_id, wb[0].status, wb[0].byte_len),
        (2, ok, LEN as u32)
    );
}

/// The bytes `node(n, ..)` registered at `off`.
fn node_pattern(n: u8, off: usize, len: usize) -> Vec<u8> {
    (off..off + len)
        .map(|i| (i * 7 + usize::from(n)) as u8)
        .collect()
}

/// rdma_rxe's completer writes each READ response at its offset in the WQE's SGE list
/// (`read_reply` → `copy_data` from the WQE's current position), and a lost response
/// makes it ask again from the first missing PSN (IBTA §9.7.5.1.4, `rxe_comp.c`
/// "retry from the middle of a READ"): the re-request's RETH names the rest of the
/// message, and its responses land mid-list, in the second and third SGEs.
#[test]
fn read_scatters_into_three_sges_and_resumes_after_a_lost_response() {
    let (mut a, mut b) = pair(QpType::Rc, Mtu::M256, sge_caps(3, 1), QpInitEx::default());
    let list = [a.sge(1_000, 100), a.sge(40_000, 350), a.sge(80_000, 250)];
    let read = SendOp::Read {
        remote_addr: b.buf.addr + 7_000,
        rkey: b.buf.rkey,
    };
    a.ctx
        .post_send_sgl(a.qpn, send_wr(3, read), &list, SendFlags::NONE)
        .unwrap();
    // 700 bytes: 3 responses; the second (bytes 256..512, across SGEs 2 and 3) is lost.
    let mut responses = 0;
    let log = pump(&mut a, &mut b, 10, |from_a, _, f| {
        if from_a {
            return false;
        }
        let op = wire::parse(f).unwrap().bth.opcode();
        if op == Opcode::RcReadResponseMiddle {
            responses += 1;
            return responses == 1;
        }
        false
    });
    let reqs: Vec<_> = log
        .iter()
        .filter(|(from_a, _)| *from_a)
        .map(|(_, f)| wire::parse(f).unwrap().ext.reth.unwrap())
        .collect();
    assert_eq!(reqs.len(), 2, "one READ and one re-request");
    assert_eq!(reqs[1].va, b.buf.addr + 7_000 + 256);
    assert_eq!(reqs[1].len, 700 - 256);
    assert_eq!(a.gather(&list), b.read(7_000, 700));
    let wa = a.wcs();
    assert_eq!(
        (wa[0].wr_id, wa[0].status, wa[0].opcode, wa[0].byte_len),
        (3, WcStatus::Success, WcOpcode::RdmaRead, 700)
    );
}

/// Atomics: the original value lands in the local SGE list (8 bytes in all, scattered
/// in order, as rdma_rxe's completer copies the atomic ACK's value with `copy_data`); a
/// list that does not add up to 8 bytes is refused at post time (EINVAL), as a single
/// SGE of another length is.
#[test]
fn atomic_results_scatter_over_an_sge_list() {
    let (mut a, mut b) = pair(QpType::Rc, Mtu::M1024, sge_caps(4, 1), QpInitEx::default());
    b.write(8_000, &0x1122_3344_5566_7788u64.to_le_bytes());
    let list = [a.sge(100, 3), a.sge(200, 0), a.sge(300, 5)];
    let fadd = SendOp::FetchAdd {
        remote_addr: b.buf.addr + 8_000,
        rkey: b.buf.rkey,
        add: 1,
    };
    a.ctx
        .post_send_sgl(a.qpn, send_wr(4, fadd), &list, SendFlags::NONE)
        .unwrap();
    let cas = SendOp::CompareSwap {
        remote_addr: b.buf.addr + 8_000,
        rkey: b.buf.rkey,
        compare: 0x1122_3344_5566_7789,
        swap: 42,
    };
    let list2 = [a.sge(400, 6), a.sge(500, 2)];
    a.ctx
        .post_send_sgl(a.qpn, send_wr(5, cas), &list2, SendFlags::NONE)
        .unwrap();
    pump(&mut a, &mut b, 0, |_, _, _| false);
    assert_eq!(a.gather(&list), 0x1122_3344_5566_7788u64.to_le_bytes());
    assert_eq!(a.gather(&list2), 0x1122_3344_5566_7789u64.to_le_bytes());
    assert_eq!(b.read(8_000, 8), 42u64.to_le_bytes());
    let wa = a.wcs();
    assert!(wa.iter().all(|w| w.status == WcStatus::Success), "{wa:?}");
    let short = [a.sge(100, 3), a.sge(300, 4)];
    assert!(matches!(
        a.ctx
            .post_send_sgl(a.qpn, send_wr(6, fadd), &short, SendFlags::NONE),
        Err(VerbsError::InvalidWr(_))
    ));
}

/// UD: a receive's first 40 bytes are the GRH, whatever its SGEs (ibverbs' UD receive
/// layout; rdma_rxe's `send_data_in` copies the GRH then the payload with `copy_data`):
/// a list whose first SGE is shorter than the GRH gets the same bytes as one SGE does.
/// The datagram is gathered from a send list too.
#[test]
fn ud_grh_split_across_sges_and_a_gathered_datagram() {
    let (mut a, mut b) = pair(QpType::Ud, Mtu::M1024, sge_caps(3, 3), sge_caps(3, 3));
    let single = b.sge(0, 1000);
    b.ctx
        .post_recv(
            b.qpn,
            RecvWr {
                wr_id: 1,
                sge: single,
            },
        )
        .unwrap();
    let rlist = [b.sge(10_000, 30), b.sge(20_000, 20), b.sge(30_000, 500)];
    b.ctx.post_recv_sgl(b.qpn, 2, &rlist).unwrap();
    let slist = [a.sge(60_000, 70), a.sge(0, 0), a.sge(61_000, 130)];
    let payload = a.gather(&slist);
    for wr_id in [10, 11] {
        let wr = UdSendWr {
            wr_id,
            dest: remote(2),
            remote_qpn: b.qpn,
            remote_qkey: QKEY,
            sge: Sge::default(),
            imm: None,
            signaled: true,
            solicited: false,
        };
        a.ctx
            .post_send_ud_sgl(a.qpn, wr, &slist, SendFlags::NONE)
            .unwrap();
    }
    let log = pump(&mut a, &mut b, 0, |_, _, _| false);
    assert_eq!(opcodes(&log, true), [(Opcode::UdSendOnly, 200); 2]);
    let wb = b.wcs();
    assert_eq!(wb.len(), 2);
    assert!(wb
        .iter()
        .all(|w| w.status == WcStatus::Success && w.byte_len == 240));
    let one = b.read(0, 240);
    assert_eq!(one[40..], payload[..]);
    assert_eq!(b.gather(&rlist)[..240], one[..], "GRH and payload alike");
}

/// The caps: a work request with more SGEs than the QP's `max_send_sge` /
/// `max_recv_sge` or the SRQ's `max_sge` is refused at post time with EINVAL and leaves
/// no trace (rdma_rxe's `validate_send_wr`, `post_one_recv`); caps above
/// `RXE_MAX_SGE` (32) are refused at creation (`rxe_qp_chk_cap`, `rxe_srq_chk_init`);
/// `query_qp` / `query_srq` report what was granted.
#[test]
fn more_sges_than_the_cap_is_einval() {
    let (mut a, mut b) = pair(QpType::Rc, Mtu::M1024, sge_caps(2, 2), sge_caps(2, 2));
    let three = [a.sge(0, 8), a.sge(100, 8), a.sge(200, 8)];
    let e = a
        .ctx
        .post_send_sgl(a.qpn, send_wr(1, SendOp::Send), &three, SendFlags::NONE)
        .unwrap_err();
    assert!(matches!(e, VerbsError::InvalidWr(_)), "{e:?}");
    let e = a.ctx.post_recv_sgl(a.qpn, 1, &three).unwrap_err();
    assert!(matches!(e, VerbsError::InvalidWr(_)), "{e:?}");
    assert!(pump(&mut a, &mut b, 0, |_, _, _| false).is_empty());
    assert!(a.wcs().is_empty());
    assert_eq!(a.ctx.qp_state(a.qpn), Some(QpState::Rts));
    // Two are fine, and the caps read back.
    a.ctx
        .post_send_sgl(
            a.qpn,
            send_wr(2, SendOp::Send),
            &three[..2],
            SendFlags::NONE,
        )
        .unwrap();
    let (_, init) = a.ctx.query_qp(a.qpn).unwrap();
    assert_eq!((init.ex.max_send_sge, init.ex.max_recv_sge), (2, 2));
    // wr.sge set as well as a list: refused.
    let mut w = send_wr(3, SendOp::Send);
    w.sge = three[0];
    assert!(a
        .ctx
        .post_send_sgl(a.qpn, w, &three[..1], SendFlags::NONE)
        .is_err());

    // SRQ.
    let pd = uroce::mem::PdId(0);
    let attr = |max_sge| SrqAttr {
        max_wr: 4,
        max_sge,
        srq_limit: 0,
    };
    let srq = b.ctx.create_srq(pd, attr(2)).unwrap();
    let bthree = [b.sge(0, 8), b.sge(100, 8), b.sge(200, 8)];
    assert!(matches!(
        b.ctx.post_srq_recv_sgl(srq, 1, &bthree),
        Err(VerbsError::InvalidWr(_))
    ));
    assert_eq!(b.ctx.srq_posted(srq), Some(0));
    b.ctx.post_srq_recv_sgl(srq, 1, &bthree[..2]).unwrap();
    assert!(b.ctx.create_srq(pd, attr(MAX_SGE + 1)).is_err());
    let srq0 = b.ctx.create_srq(pd, attr(0)).unwrap();
    assert_eq!(b.ctx.query_srq(srq0).unwrap().max_sge, 1);

    // Creation: above 32 refused; 0 granted as 1; the default is 1 (one SGE per request).
    let caps = QpCaps {
        qp_type: QpType::Ud,
        send_cq: b.cq,
        recv_cq: b.cq,
        max_send_wr: 4,
        max_recv_wr: 4,
    };
    assert!(b
        .ctx
        .create_qp_ex(pd, caps, sge_caps(MAX_SGE + 1, 1))
        .is_err());
    assert!(b
        .ctx
        .create_qp_ex(pd, caps, sge_caps(1, MAX_SGE + 1))
        .is_err());
    let q = b.ctx.create_qp_ex(pd, caps, sge_caps(0, MAX_SGE)).unwrap();
    let (_, init) = b.ctx.query_qp(q).unwrap();
    assert_eq!((init.ex.max_send_sge, init.ex.max_recv_sge), (1, MAX_SGE));
    let d = QpInitEx::default();
    assert_eq!((d.max_send_sge, d.max_recv_sge), (1, 1));
    // UD send above the cap.
    b.ctx.modify_qp_init(q, InitAttr::default()).unwrap();
    b.ctx.modify_qp_rtr_ud(q, Mtu::M1024).unwrap();
    b.ctx.modify_qp_rts(q, RtsAttr::default()).unwrap();
    let wr = UdSendWr {
        wr_id: 1,
        dest: remote(1),
        remote_qpn: 5,
        remote_qkey: QKEY,
        sge: Sge::default(),
        imm: None,
        signaled: true,
        solicited: false,
    };
    assert!(matches!(
        b.ctx.post_send_ud_sgl(q, wr, &bthree[..2], SendFlags::NONE),
        Err(VerbsError::InvalidWr(_))
    ));
}

/// Each SGE of a list is checked at post time as a single one is (rdma_rxe's
/// `copy_data` looks up every SGE's MR and fails the WQE with IB_WC_LOC_PROT_ERR): one
/// bad SGE among good ones completes the request LOC_PROT_ERR with nothing of it on the
/// wire and takes the RC QP to ERR; a bad SGE in a receive list fails the message that
/// uses it (a NIC checks a receive's keys when it uses the WQE).
#[test]
fn one_bad_sge_of_several_is_a_local_protection_error() {
    let (mut a, mut b) = pair(QpType::Rc, Mtu::M1024, sge_caps(3, 3), QpInitEx::default());
    let mut list = [a.sge(0, 100), a.sge(1000, 100), a.sge(2000, 100)];
    list[1].lkey ^= 0x40;
    a.ctx
        .post_send_sgl(a.qpn, send_wr(1, SendOp::Send), &list, SendFlags::NONE)
        .unwrap();
    let log = pump(&mut a, &mut b, 0, |_, _, _| false);
    assert!(log.iter().all(|(from_a, _)| !from_a), "nothing sent");
    let wa = a.wcs();
    assert_eq!((wa[0].wr_id, wa[0].status), (1, WcStatus::LocProtErr));
    assert_eq!(a.ctx.qp_state(a.qpn), Some(QpState::Err));
    // Outside its region: the same.
    let (mut a, _b) = pair(QpType::Rc, Mtu::M1024, sge_caps(3, 3), QpInitEx::default());
    let list = [a.sge(0, 100), a.sge(MB as u64 - 50, 100)];
    a.ctx
        .post_send_sgl(a.qpn, send_wr(2, SendOp::Send), &list, SendFlags::NONE)
        .unwrap();
    assert_eq!(a.wcs()[0].status, WcStatus::LocProtErr);
    // A receive list with one SGE outside its region is posted, as a NIC takes it, and
    // fails the SEND that uses it: the receive completes in error, the sender gets
    // Remote Operational Error.
    let (mut a, mut b) = pair(QpType::Rc, Mtu::M1024, sge_caps(3, 3), sge_caps(3, 3));
    let rlist = [b.sge(0, 100), b.sge(MB as u64 - 50, 100)];
    b.ctx.post_recv_sgl(b.qpn, 3, &rlist).unwrap();
    a.ctx
        .post_send(
            a.qpn,
            SendWr {
                wr_id: 4,
                op: SendOp::Send,
                sge: a.sge(0, 150),
                signaled: true,
                solicited: false,
            },
        )
        .unwrap();
    pump(&mut a, &mut b, 0, |_, _, _| false);
    assert_eq!(a.wcs()[0].status, WcStatus::RemOpErr);
    let wb = b.wcs();
    assert_eq!((wb[0].wr_id, wb[0].status), (3, WcStatus::LocQpOpErr));
    // A good receive whose region moves to another PD (ibv_rereg_mr) before a SEND uses
    // it: the same, the keys being checked when the WQE is used.
    let (mut a, mut b) = pair(QpType::Rc, Mtu::M1024, sge_caps(3, 3), sge_caps(3, 3));
    b.ctx.post_recv_sgl(b.qpn, 5, &[b.sge(0, 200)]).unwrap();
    let other = b.ctx.alloc_pd();
    let moved = b.ctx.modify_mr(&b.buf, other, b.buf.access).unwrap();
    assert_eq!((moved.lkey, moved.rkey), (b.buf.lkey, b.buf.rkey));
    a.ctx
        .post_send(
            a.qpn,
            SendWr {
                wr_id: 6,
                op: SendOp::Send,
                sge: a.sge(0, 150),
                signaled: true,
                solicited: false,
            },
        )
        .unwrap();
    pump(&mut a, &mut b, 0, |_, _, _| false);
    assert_eq!(a.wcs()[0].status, WcStatus::RemOpErr);
    assert_eq!(b.wcs()[0].status, WcStatus::LocQpOpErr);
}

/// A receive list shorter in all than the SEND: the receive completes LOC_LEN_ERR, as
/// with one short SGE (rdma_rxe's `check_length` / `send_data_in` fail the WQE with
/// IB_WC_LOC_LEN_ERR and NAK Invalid Request, so the sender sees REM_INV_REQ_ERR).
#[test]
fn a_receive_list_too_short_is_a_local_length_error() {
    let (mut a, mut b) = pair(QpType::Rc, Mtu::M256, QpInitEx::default(), sge_caps(1, 3));
    let rlist = [b.sge(0, 100), b.sge(0, 0), b.sge(1000, 150)];
    b.ctx.post_recv_sgl(b.qpn, 5, &rlist).unwrap();
    a.ctx
        .post_send(
            a.qpn,
            SendWr {
                wr_id: 1,
                op: SendOp::Send,
                sge: a.sge(0, 251),
                signaled: true,
                solicited: false,
            },
        )
        .unwrap();
    pump(&mut a, &mut b, 0, |_, _, _| false);
    let wb = b.wcs();
    assert_eq!((wb[0].wr_id, wb[0].status), (5, WcStatus::LocLenErr));
    assert_eq!(a.wcs()[0].status, WcStatus::RemInvReqErr);
}

/// IBV_SEND_INLINE with several SGEs: the data of every SGE is copied, in order, when
/// the request is posted (rdma_rxe's `copy_inline_data_to_wqe` walks the SGE list), so
/// changing the buffers after the post changes nothing on the wire; the total counts
/// against `max_inline_data`.
#[test]
fn inline_gathers_several_sges_at_post_time() {
    let ex = QpInitEx {
        max_inline_data: 64,
        ..sge_caps(4, 1)
    };
    let (mut a, mut b) = pair(QpType::Rc, Mtu::M1024, ex, QpInitEx::default());
    let list = [a.sge(100, 10), a.sge(0, 0), a.sge(5000, 20), a.sge(300, 30)];
    let want = a.gather(&list);
    b.ctx
        .post_recv(
            b.qpn,
            RecvWr {
                wr_id: 1,
                sge: b.sge(0, 100),
            },
        )
        .unwrap();
    a.ctx
        .post_send_sgl(a.qpn, send_wr(1, SendOp::Send), &list, SendFlags::INLINE)
        .unwrap();
    a.write(5000, &[0xee; 20]);
    pump(&mut a, &mut b, 0, |_, _, _| false);
    assert_eq!(b.read(0, 60), want);
    assert_eq!(b.wcs()[0].byte_len, 60);
    let long = [a.sge(0, 40), a.sge(100, 25)];
    assert!(matches!(
        a.ctx
            .post_send_sgl(a.qpn, send_wr(2, SendOp::Send), &long, SendFlags::INLINE),
        Err(VerbsError::InvalidWr(_))
    ));
}

/// Go-back-N from the middle of a message (IBTA §9.7.4.1.6; rdma_rxe's `req_retry`
/// rewinds the WQE's position in its SGE list to the PSN retried): a lost packet whose
/// payload crosses SGE boundaries is sent again with the same bytes.
#[test]
fn retransmission_from_the_middle_of_a_gathered_message() {
    let (mut a, mut b) = pair(QpType::Rc, Mtu::M256, sge_caps(5, 1), QpInitEx::default());
    let mut list = odd_list(&a);
    list.push(a.sge(200_000, 700)); // 1138 bytes: 5 packets
    list.remove(2);
    let want = a.gather(&list);
    let write = SendOp::Write {
        remote_addr: b.buf.addr + 400_000,
        rkey: b.buf.rkey,
    };
    a.ctx
        .post_send_sgl(a.qpn, send_wr(1, write), &list, SendFlags::NONE)
        .unwrap();
    let mut dropped = false;
    let log = pump(&mut a, &mut b, 10, |from_a, _, f| {
        let p = wire::parse(f).unwrap();
        if from_a && p.bth.psn() == 501 && !dropped {
            dropped = true;
            return true;
        }
        false
    });
    let psns: Vec<u32> = log
        .iter()
        .filter(|(from_a, _)| *from_a)
        .map(|(_, f)| wire::parse(f).unwrap().bth.psn())
        .collect();
    assert_eq!(psns.iter().filter(|&&p| p == 501).count(), 2, "{psns:?}");
    assert_eq!(b.read(400_000, 1138), want);
    assert_eq!(a.wcs()[0].status, WcStatus::Success);
}
