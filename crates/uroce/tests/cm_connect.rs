//! RDMA CM end to end over the verbs API: two contexts back to back, each with a QP 1
//! (QpType::Gsi) carrying the CM's MADs as UD SENDs, and a `cm::CmEndpoint` each. The CM
//! brings an RC QP on each side to RTS with the attributes it negotiated, and an RDMA
//! WRITE to the region the passive side advertised in its REP's private data completes;
//! then the connection is torn down with DREQ / DREP. The lossy variant drops CM MADs
//! on the wire and lets the CM's timers send them again.

use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};

use uroce::cm::{
    ip_private_data, service_id, AcceptParams, CmConfig, CmEndpoint, CmEvent, CmId, CmState,
    ConnectParams, PortSpace,
};
use uroce::mem::{Access, Mr, PdId};
use uroce::verbs::{
    Context, ContextConfig, CqId, InitAttr, Mtu, QpCaps, QpState, QpType, RecvWr, Remote, RtsAttr,
    SendOp, SendWr, Sge, UdSendWr, WcOpcode, WcStatus, WorkCompletion,
};
use uroce::wire::mad::{GSI_QKEY, GSI_QPN, MAD_LEN};

/// Bytes of a UD receive: the 40-byte GRH area, then the MAD.
const GRH: usize = 40;
const SLOT: u64 = 512;
const RECV_SLOTS: u64 = 16;
const SEND_SLOTS: u64 = 16;

fn ip(n: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(10, 0, 0, n))
}

fn mac_of(a: IpAddr) -> [u8; 6] {
    match a {
        IpAddr::V4(v) => [2, 0, 0, 0, 0, v.octets()[3]],
        IpAddr::V6(_) => unreachable!("IPv4 only here"),
    }
}

struct Node {
    ctx: Context,
    cq: CqId,
    pd: PdId,
    rc: u32,
    mads: Mr,
    data: Mr,
    cm: CmEndpoint,
    next_send: u64,
    /// Completions that are not QP 1's receives.
    wcs: Vec<WorkCompletion>,
}

impl Node {
    fn new(n: u8, now: Instant) -> Self {
        let mut ctx = Context::new(
            ContextConfig {
                mac: [2, 0, 0, 0, 0, n],
                ip: ip(n),
                seed: u64::from(n),
                udp_sport_base: 0xc000,
                tos: 0,
            },
            now,
        );
        let cq = ctx.create_cq(4095).unwrap();
        let pd = ctx.alloc_pd();
        let caps = |t| QpCaps {
            qp_type: t,
            send_cq: cq,
            recv_cq: cq,
            max_send_wr: 64,
            max_recv_wr: 64,
        };
        let gsi = ctx.create_qp(pd, caps(QpType::Gsi)).unwrap();
        assert_eq!(gsi, GSI_QPN);
        ctx.modify_qp_init(
            gsi,
            InitAttr {
                qkey: GSI_QKEY,
                ..InitAttr::default()
            },
        )
        .unwrap();
        ctx.modify_qp_rtr_ud(gsi, Mtu::M1024).unwrap();
        ctx.modify_qp_rts(gsi, RtsAttr::default()).unwrap();
        let rc = ctx.create_qp(pd, caps(QpType::Rc)).unwrap();
        let mads = ctx
            .reg_mr(
                pd,
                vec![0; ((RECV_SLOTS + SEND_SLOTS) * SLOT) as usize],
                Access::LOCAL_WRITE,
            )
            .unwrap();
        let data = ctx
            .reg_mr(
                pd,
                vec![0; 1 << 16],
                Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ,
            )
            .unwrap();
        let mut node = Self {
            ctx,
            cq,
            pd,
            rc,
            mads,
            data,
            cm: CmEndpoint::new(CmConfig {
                packet_life_time: 10,
                ..CmConfig::new(
                    ip(n),
                    uroce::cm::ca_guid_from_mac([2, 0, 0, 0, 0, n]),
                    99 + u64::from(n),
                )
            }),
            next_send: 0,
            wcs: Vec::new(),
        };
        for i in 0..RECV_SLOTS {
            node.post_mad_recv(i);
        }
        node
    }

    fn post_mad_recv(&mut self, slot: u64) {
        let sge = Sge {
            addr: self.mads.addr + slot * SLOT,
            length: (GRH + MAD_LEN) as u32,
            lkey: self.mads.lkey,
        };
        self.ctx
            .post_recv(GSI_QPN, RecvWr { wr_id: slot, sge })
            .unwrap();
    }

    /// Posts what the CM has to send as UD SENDs on QP 1; returns how many.
    fn send_mads(&mut self) -> usize {
        let mut n = 0;
        while let Some(m) = self.cm.poll_transmit() {
            let slot = RECV_SLOTS + self.next_send % SEND_SLOTS;
            self.next_send += 1;
            let at = (slot * SLOT) as usize;
            self.ctx.mr_bytes_mut(&self.mads)[at..at + MAD_LEN].copy_from_slice(&m.mad);
            let wr = UdSendWr {
                wr_id: 1000 + slot,
                dest: Remote {
                    ip: m.to,
                    mac: mac_of(m.to),
                },
                remote_qpn: m.remote_qpn,
                remote_qkey: m.qkey,
                sge: Sge {
                    addr: self.mads.addr + slot * SLOT,
                    length: MAD_LEN as u32,
                    lkey: self.mads.lkey,
                },
                imm: None,
                signaled: true,
                solicited: false,
            };
            self.ctx.post_send_ud(GSI_QPN, wr).unwrap();
            n += 1;
        }
        n
    }

    /// Hands the MADs QP 1 received to the CM (with the sender's address and QP from
    /// the completion) and posts their buffers again; keeps every other completion.
    fn recv_mads(&mut self, now: Instant) -> usize {
        let mut n = 0;
        for wc in self.ctx.poll_cq(self.cq, 64) {
            if wc.qp_num == GSI_QPN && wc.opcode == WcOpcode::Recv {
                assert_eq!(wc.status, WcStatus::Success);
                assert_eq!(wc.byte_len as usize, GRH + MAD_LEN);
                let at = (wc.wr_id * SLOT) as usize + GRH;
                let mad = self.ctx.mr_bytes(&self.mads)[at..at + MAD_LEN].to_vec();
                self.cm.handle_mad(
                    now,
                    wc.sender.expect("a UD receive has a sender"),
                    wc.src_qp,
                    &mad,
                );
                self.post_mad_recv(wc.wr_id);
                n += 1;
            } else if wc.qp_num == GSI_QPN {
                assert_eq!(wc.status, WcStatus::Success, "{wc:?}");
            } else {
                self.wcs.push(wc);
            }
        }
        n
    }

    fn events(&mut self) -> Vec<CmEvent> {
        std::iter::from_fn(|| self.cm.poll_event()).collect()
    }

    /// Applies the CM's attributes for `to` to the RC QP, with the peer's MAC.
    fn modify(&mut self, id: CmId, to: QpState) {
        let (mut attr, mask) = self.cm.qp_attr(id, to).unwrap();
        attr.ah_attr.mac = mac_of(attr.ah_attr.ip);
        self.ctx.modify_qp(self.rc, &attr, mask).unwrap();
        assert_eq!(self.ctx.qp_state(self.rc), Some(to));
    }
}

/// Moves everything both ways until nothing moves: CM MADs into QP 1, frames across
/// (dropping the QP 1 frames `drop` picks: from A?, index of QP 1 frames from that side),
/// received MADs into the CM.
struct Wire {
    now: Instant,
    gsi_frames: [usize; 2],
}

impl Wire {
    fn pump(&mut self, a: &mut Node, b: &mut Node, drop: &mut dyn FnMut(bool, usize) -> bool) {
        let mut buf = vec![0u8; 9000];
        loop {
            let mut moved = a.send_mads() + b.send_mads();
            for from_a in [true, false] {
                let (src, dst) = if from_a {
                    (&mut *a, &mut *b)
                } else {
                    (&mut *b, &mut *a)
                };
                while let Some(n) = src.ctx.poll_frame(self.now, &mut buf) {
                    moved += 1;
                    let p = uroce::wire::parse(&buf[..n]).unwrap();
                    if p.bth.dest_qp() == GSI_QPN {
                        let k = &mut self.gsi_frames[usize::from(!from_a)];
                        *k += 1;
                        if drop(from_a, *k - 1) {
                            continue;
                        }
                    }
                    dst.ctx.handle_frame(self.now, &buf[..n]).unwrap();
                }
            }
            moved += a.recv_mads(self.now) + b.recv_mads(self.now);
            if moved == 0 {
                return;
            }
        }
    }

    /// Runs the CMs' (and contexts') timers at the earliest CM deadline.
    fn next_cm_timeout(&mut self, a: &mut Node, b: &mut Node) -> bool {
        let Some(t) = [a.cm.poll_timeout(), b.cm.poll_timeout()]
            .into_iter()
            .flatten()
            .min()
        else {
            return false;
        };
        self.now = self.now.max(t);
        a.cm.handle_timeout(self.now);
        b.cm.handle_timeout(self.now);
        true
    }
}

const PORT: u16 = 7174;
const A_PSN: u32 = 0x12_3456;
const B_PSN: u32 = 0xab_cdef;

/// Connects A's RC QP to B's through the CM, with `drop` choosing QP 1 frames to lose;
/// returns the two connection IDs and the region B advertised (address, rkey).
fn connect(
    a: &mut Node,
    b: &mut Node,
    w: &mut Wire,
    drop: &mut dyn FnMut(bool, usize) -> bool,
) -> (CmId, CmId, u64, u32) {
    let svc = service_id(PortSpace::Tcp, PORT);
    b.cm.listen(svc).unwrap();
    let params = ConnectParams {
        responder_resources: 4,
        initiator_depth: 4,
        path_mtu: Mtu::M2048,
        remote_cm_response_timeout: 12, // 16 ms
        max_cm_retries: 4,
        private_data: ip_private_data(ip(1), 40000, ip(2), b"from A").unwrap(),
        ..ConnectParams::new(svc, ip(2), a.rc, A_PSN)
    };
    let ia = a.cm.connect(w.now, &params).unwrap();
    a.modify(ia, QpState::Init);
    let mut ib = None;
    let mut addr_rkey = None;
    // Run until both sides are established, answering each event as rdma_cm does.
    for _ in 0..100 {
        w.pump(a, b, drop);
        let (eb, ea) = (b.events(), a.events());
        let handled = eb.len() + ea.len();
        for ev in eb {
            match ev {
                CmEvent::ConnectRequest { id, req } => {
                    assert!(ib.is_none(), "one ConnectRequest");
                    let h = req.ip.expect("RDMA CM IP header");
                    assert_eq!((h.src, h.src_port, h.dst), (ip(1), 40000, ip(2)));
                    assert_eq!(&req.private_data[36..42], b"from A");
                    assert_eq!((req.remote_qpn, req.starting_psn), (a.rc, A_PSN));
                    // The REP carries the region A may write, as rping's private data.
                    let mut pd = b.data.addr.to_be_bytes().to_vec();
                    pd.extend_from_slice(&b.data.rkey.to_be_bytes());
                    b.cm.accept(
                        w.now,
                        id,
                        &AcceptParams {
                            responder_resources: 2,
                            initiator_depth: 2,
                            private_data: pd,
                            ..AcceptParams::new(b.rc, B_PSN)
                        },
                    )
                    .unwrap();
                    // To RTS before the REP leaves (the kernel's cma_accept order).
                    for s in [QpState::Init, QpState::Rtr, QpState::Rts] {
                        b.modify(id, s);
                    }
                    ib = Some(id);
                }
                CmEvent::Established { id } => assert_eq!(Some(id), ib),
                e => panic!("B: {e:?}"),
            }
        }
        for ev in ea {
            match ev {
                CmEvent::ConnectReply { id, rep } => {
                    assert_eq!(id, ia);
                    assert_eq!((rep.remote_qpn, rep.starting_psn), (b.rc, B_PSN));
                    let addr = u64::from_be_bytes(rep.private_data[..8].try_into().unwrap());
                    let rkey = u32::from_be_bytes(rep.private_data[8..12].try_into().unwrap());
                    addr_rkey = Some((addr, rkey));
                    a.modify(ia, QpState::Rtr);
                    a.modify(ia, QpState::Rts);
                    a.cm.rtu(ia, &[]).unwrap();
                }
                CmEvent::Established { id } => assert_eq!(id, ia),
                e => panic!("A: {e:?}"),
            }
        }
        let done = a.cm.state(ia) == Some(CmState::Established)
            && ib.is_some_and(|ib| b.cm.state(ib) == Some(CmState::Established));
        if done {
            let (addr, rkey) = addr_rkey.unwrap();
            return (ia, ib.unwrap(), addr, rkey);
        }
        if handled == 0 {
            assert!(w.next_cm_timeout(a, b), "stuck with no timer pending");
        }
    }
    panic!("not connected after 100 rounds");
}

fn write_and_disconnect(
    a: &mut Node,
    b: &mut Node,
    w: &mut Wire,
    ia: CmId,
    ib: CmId,
    addr: u64,
    rkey: u32,
) {
    // The negotiated attributes are the QPs' own now; each side receives from the PSN
    // its own REQ / REP carried and sends from the other's, as the kernel's CM.
    let (qa, _) = a.ctx.query_qp(a.rc).unwrap();
    let (qb, _) = b.ctx.query_qp(b.rc).unwrap();
    assert_eq!((qa.dest_qp_num, qa.sq_psn, qa.rq_psn), (b.rc, B_PSN, A_PSN));
    assert_eq!((qb.dest_qp_num, qb.sq_psn, qb.rq_psn), (a.rc, A_PSN, B_PSN));
    assert_eq!((qa.path_mtu, qb.path_mtu), (Mtu::M2048, Mtu::M2048));
    assert_eq!((qa.max_rd_atomic, qa.max_dest_rd_atomic), (2, 2));
    assert_eq!((qb.max_rd_atomic, qb.max_dest_rd_atomic), (2, 2));
    assert_eq!((qa.retry_cnt, qa.rnr_retry, qa.timeout), (7, 7, 11));

    let msg: Vec<u8> = (0..5000u32).map(|i| (i * 7) as u8).collect();
    a.ctx.mr_bytes_mut(&a.data)[..msg.len()].copy_from_slice(&msg);
    let sge = Sge {
        addr: a.data.addr,
        length: msg.len() as u32,
        lkey: a.data.lkey,
    };
    a.ctx
        .post_send(
            a.rc,
            SendWr {
                wr_id: 42,
                op: SendOp::Write {
                    remote_addr: addr + 100,
                    rkey,
                },
                sge,
                signaled: true,
                solicited: false,
            },
        )
        .unwrap();
    w.pump(a, b, &mut |_, _| false);
    let wc: Vec<_> = a.wcs.drain(..).collect();
    assert_eq!(wc.len(), 1, "{wc:?}");
    assert_eq!(
        (wc[0].wr_id, wc[0].status, wc[0].opcode),
        (42, WcStatus::Success, WcOpcode::RdmaWrite)
    );
    assert_eq!(&b.ctx.mr_bytes(&b.data)[100..100 + msg.len()], &msg[..]);

    a.cm.disconnect(w.now, ia, b"bye").unwrap();
    w.pump(a, b, &mut |_, _| false);
    assert!(
        matches!(&b.events()[..], [CmEvent::Disconnected { id, private_data }]
        if *id == ib && private_data.starts_with(b"bye"))
    );
    assert!(matches!(&a.events()[..], [CmEvent::Disconnected { id, .. }] if *id == ia));
    while w.next_cm_timeout(a, b) {}
    assert_eq!(a.events(), [CmEvent::TimeWaitExit { id: ia }]);
    assert_eq!(b.events(), [CmEvent::TimeWaitExit { id: ib }]);
    assert_eq!((a.cm.connections(), b.cm.connections()), (0, 0));
    let _ = (a.pd, b.pd);
}

#[test]
fn cm_connects_two_rc_qps_over_qp1_and_an_rdma_write_completes() {
    let now = Instant::now();
    let (mut a, mut b) = (Node::new(1, now), Node::new(2, now));
    let mut w = Wire {
        now,
        gsi_frames: [0; 2],
    };
    let (ia, ib, addr, rkey) = connect(&mut a, &mut b, &mut w, &mut |_, _| false);
    // REQ, REP, RTU: three MADs, none sent again.
    assert_eq!(w.gsi_frames, [2, 1]);
    assert_eq!(a.cm.counters().retransmits + b.cm.counters().retransmits, 0);
    write_and_disconnect(&mut a, &mut b, &mut w, ia, ib, addr, rkey);
}

#[test]
fn cm_over_qp1_retries_a_lost_req_and_a_lost_rep() {
    let now = Instant::now();
    let (mut a, mut b) = (Node::new(1, now), Node::new(2, now));
    let mut w = Wire {
        now,
        gsi_frames: [0; 2],
    };
    // A's first MAD (the REQ) and B's first (the REP) are lost on the wire.
    let (ia, ib, addr, rkey) = connect(&mut a, &mut b, &mut w, &mut |_, k| k == 0);
    // The REQ went three times (the second one's REP was lost); B answered the third, a
    // duplicate, with its REP again (its own REP timer, 4.3 s by A's REQ, had not run).
    assert_eq!(w.gsi_frames, [4, 2], "REQ ×3 + RTU, REP ×2");
    assert_eq!(a.cm.counters().retransmits, 2);
    assert_eq!(b.cm.counters().rx_duplicates, 1);
    assert!(w.now > now + Duration::from_millis(16), "the timers ran");
    write_and_disconnect(&mut a, &mut b, &mut w, ia, ib, addr, rkey);
}

#[test]
fn cm_over_qp1_a_req_to_a_port_nobody_listens_on_is_rejected() {
    let now = Instant::now();
    let (mut a, mut b) = (Node::new(1, now), Node::new(2, now));
    let mut w = Wire {
        now,
        gsi_frames: [0; 2],
    };
    let p = ConnectParams::new(service_id(PortSpace::Tcp, 7777), ip(2), a.rc, 1);
    let ia = a.cm.connect(w.now, &p).unwrap();
    w.pump(&mut a, &mut b, &mut |_, _| false);
    let ev = a.events();
    assert!(
        matches!(&ev[..], [CmEvent::Rejected { id, reason: 8, .. }] if *id == ia),
        "{ev:?}"
    );
    assert_eq!(b.cm.counters().rx_no_listener, 1);
}
