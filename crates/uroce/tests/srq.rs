//! Shared receive queues end to end: one server context whose QPs share an SRQ, fed by
//! two peer contexts, all wired through a loop that logs every frame (IBTA Vol. 1
//! §10.2.9; rdma_rxe's `get_srq_wqe`, `flush_recv_queue`; ibverbs' `ibv_*_srq`).

use std::net::{IpAddr, Ipv4Addr};
use std::time::Instant;

use uroce::mem::{Access, Mr, PdId};
use uroce::verbs::{
    AsyncEvent, Context, ContextConfig, CqId, InitAttr, Mtu, QpCaps, QpInitEx, QpState, QpType,
    RecvWr, Remote, RtrAttr, RtsAttr, SendOp, SendWr, Sge, SrqAttr, SrqAttrMask, SrqId, UdSendWr,
    VerbsError, WcOpcode, WcStatus,
};
use uroce::wire::{self, Syndrome};

const SERVER: u8 = 1;
const QKEY: u32 = 0x1111_1111;

fn ip(n: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(10, 0, 0, n))
}

fn remote(n: u8) -> Remote {
    Remote {
        ip: ip(n),
        mac: [2, 0, 0, 0, 0, n],
    }
}

/// One context with a CQ, a PD and a registered buffer.
struct Node {
    n: u8,
    ctx: Context,
    cq: CqId,
    pd: PdId,
    buf: Mr,
}

impl Node {
    fn new(n: u8) -> Self {
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
        let buf = ctx
            .reg_mr(pd, vec![0; 1 << 16], Access::LOCAL_WRITE)
            .unwrap();
        Self {
            n,
            ctx,
            cq,
            pd,
            buf,
        }
    }

    fn qp(&mut self, t: QpType, srq: Option<SrqId>) -> u32 {
        let caps = QpCaps {
            qp_type: t,
            send_cq: self.cq,
            recv_cq: self.cq,
            max_send_wr: 16,
            max_recv_wr: 16,
        };
        let ex = QpInitEx {
            srq,
            ..QpInitEx::default()
        };
        let q = self.ctx.create_qp_ex(self.pd, caps, ex).unwrap();
        let init = InitAttr {
            qkey: QKEY,
            ..InitAttr::default()
        };
        self.ctx.modify_qp_init(q, init).unwrap();
        q
    }

    /// Moves a connected QP to RTS towards `peer`'s QP `dest`.
    fn connect(&mut self, q: u32, peer: u8, dest: u32) {
        let rtr = RtrAttr {
            remote: remote(peer),
            dest_qpn: dest,
            rq_psn: 0x100,
            path_mtu: Mtu::M1024,
            max_dest_rd_atomic: 1,
            min_rnr_timer: 1,
        };
        self.ctx.modify_qp_rtr(q, rtr).unwrap();
        let rts = RtsAttr {
            sq_psn: 0x100,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            max_rd_atomic: 1,
        };
        self.ctx.modify_qp_rts(q, rts).unwrap();
    }

    fn ud_ready(&mut self, q: u32) {
        self.ctx.modify_qp_rtr_ud(q, Mtu::M1024).unwrap();
        let rts = RtsAttr {
            sq_psn: 0,
            ..RtsAttr::default()
        };
        self.ctx.modify_qp_rts(q, rts).unwrap();
    }

    /// A SEND of `len` bytes of `byte` from offset 0 of the buffer.
    fn send(&mut self, q: u32, wr_id: u64, byte: u8, len: u32) {
        let buf = self.buf;
        self.ctx.mr_bytes_mut(&buf)[..len as usize].fill(byte);
        let sge = Sge {
            addr: buf.addr,
            length: len,
            lkey: buf.lkey,
        };
        let wr = SendWr {
            wr_id,
            op: SendOp::Send,
            sge,
            signaled: true,
            solicited: false,
        };
        self.ctx.post_send(q, wr).unwrap();
    }

    /// Receive `wr_id` into its own 1 KiB slot of the buffer.
    fn recv_wr(&self, wr_id: u64) -> RecvWr {
        RecvWr {
            wr_id,
            sge: Sge {
                addr: self.buf.addr + wr_id * 1024,
                length: 1024,
                lkey: self.buf.lkey,
            },
        }
    }

    fn slot(&self, wr_id: u64) -> &[u8] {
        &self.ctx.mr_bytes(&self.buf)[wr_id as usize * 1024..][..1024]
    }

    fn events(&mut self) -> Vec<AsyncEvent> {
        std::iter::from_fn(|| self.ctx.poll_async_event()).collect()
    }
}

/// The server and its peers, with every frame logged as (sender, frame).
struct Net {
    nodes: Vec<Node>,
    now: Instant,
    log: Vec<(u8, Vec<u8>)>,
}

impl Net {
    fn new(peers: u8) -> Self {
        Self {
            nodes: (SERVER..=SERVER + peers).map(Node::new).collect(),
            now: Instant::now(),
            log: Vec::new(),
        }
    }

    fn node(&mut self, n: u8) -> &mut Node {
        &mut self.nodes[usize::from(n - SERVER)]
    }

    /// Moves frames until none is left; then fires timers, up to `timeouts` times.
    fn run(&mut self, timeouts: usize) {
        let mut buf = vec![0u8; 5000];
        let mut fired = 0;
        loop {
            let mut moved = false;
            for i in 0..self.nodes.len() {
                while let Some(len) = self.nodes[i].ctx.poll_frame(self.now, &mut buf) {
                    moved = true;
                    let frame = buf[..len].to_vec();
                    let IpAddr::V4(dst) = wire::parse(&frame).unwrap().ip().dst() else {
                        unreachable!()
                    };
                    let from = self.nodes[i].n;
                    let to = dst.octets()[3];
                    let now = self.now;
                    self.node(to).ctx.handle_frame(now, &frame).unwrap();
                    self.log.push((from, frame));
                }
            }
            if moved {
                continue;
            }
            let next = self.nodes.iter().filter_map(|n| n.ctx.poll_timeout()).min();
            match next {
                Some(t) if fired < timeouts => {
                    fired += 1;
                    self.now = self.now.max(t);
                    for n in &mut self.nodes {
                        n.ctx.handle_timeout(self.now);
                    }
                }
                _ => break,
            }
        }
    }

    /// Syndromes of the ACK-type packets `from` sent.
    fn syndromes(&self, from: u8) -> Vec<Syndrome> {
        self.log
            .iter()
            .filter(|(f, _)| *f == from)
            .filter_map(|(_, fr)| wire::parse(fr).unwrap().ext.aeth.map(|a| a.kind()))
            .collect()
    }
}

/// A server SRQ and `pairs` RC QPs on it, QP i connected to a QP of peer `2 + i % 2`.
/// Returns the net, the SRQ, the server's QPs and the peers' QPs.
fn rc_setup(pairs: usize, attr: SrqAttr) -> (Net, SrqId, Vec<u32>, Vec<u32>) {
    let mut net = Net::new(2);
    let pd = net.node(SERVER).pd;
    let srq = net.node(SERVER).ctx.create_srq(pd, attr).unwrap();
    let mut ours = Vec::new();
    let mut theirs = Vec::new();
    for i in 0..pairs {
        let peer = 2 + (i % 2) as u8;
        let s = net.node(SERVER).qp(QpType::Rc, Some(srq));
        let p = net.node(peer).qp(QpType::Rc, None);
        net.node(SERVER).connect(s, peer, p);
        net.node(peer).connect(p, SERVER, s);
        ours.push(s);
        theirs.push(p);
    }
    (net, srq, ours, theirs)
}

fn depth(max_wr: u32) -> SrqAttr {
    SrqAttr {
        max_wr,
        max_sge: 1,
        srq_limit: 0,
    }
}

/// IBTA §10.2.9: every QP on an SRQ takes the oldest WQE, whichever QP the message
/// comes in on; each completion names the QP that consumed the WQE (its `qp_num`) and
/// the data is in that WQE's buffer. Four QPs fed by two peers.
#[test]
fn receives_are_taken_in_order_across_qps() {
    let (mut net, srq, ours, theirs) = rc_setup(4, depth(16));
    for w in 0..8 {
        let wr = net.node(SERVER).recv_wr(w);
        net.node(SERVER).ctx.post_srq_recv(srq, wr).unwrap();
    }
    // Messages in the order QP 2, 0, 3, 1, 0, 2, 1, 3, each delivered before the next.
    let order = [2usize, 0, 3, 1, 0, 2, 1, 3];
    for (k, &i) in order.iter().enumerate() {
        let peer = 2 + (i % 2) as u8;
        net.node(peer)
            .send(theirs[i], k as u64, 0x40 + k as u8, 100 + k as u32);
        net.run(0);
    }
    let cq = net.node(SERVER).cq;
    let wcs = net.node(SERVER).ctx.poll_cq(cq, 100);
    assert_eq!(wcs.len(), 8);
    for (k, wc) in wcs.iter().enumerate() {
        let i = order[k];
        assert_eq!(wc.status, WcStatus::Success);
        assert_eq!(wc.opcode, WcOpcode::Recv);
        assert_eq!(
            wc.wr_id, k as u64,
            "the oldest WQE goes to the next message"
        );
        assert_eq!(wc.qp_num, ours[i], "the completion names the consuming QP");
        assert_eq!(wc.src_qp, theirs[i]);
        assert_eq!(wc.byte_len, 100 + k as u32);
        let slot = net.node(SERVER).slot(k as u64);
        assert!(slot[..100 + k].iter().all(|&b| b == 0x40 + k as u8));
        assert_eq!(slot[100 + k], 0);
    }
    assert_eq!(net.node(SERVER).ctx.srq_posted(srq), Some(0));
    for peer in [2, 3] {
        let cq = net.node(peer).cq;
        let sends = net.node(peer).ctx.poll_cq(cq, 100);
        assert_eq!(sends.len(), 4);
        assert!(sends.iter().all(|w| w.status == WcStatus::Success));
    }
}

/// The limit event (IBTA §11.5.2; rdma_rxe's `get_srq_wqe`): armed by modify_srq, it
/// fires exactly once, when taking a WQE leaves fewer than `srq_limit`, then reads 0
/// until armed again; posting does not fire it.
#[test]
fn limit_event_fires_once_per_arm() {
    let (mut net, srq, _ours, theirs) = rc_setup(2, depth(15));
    for w in 0..4 {
        let wr = net.node(SERVER).recv_wr(w);
        net.node(SERVER).ctx.post_srq_recv(srq, wr).unwrap();
    }
    let arm = |limit| SrqAttr {
        max_wr: 0,
        max_sge: 0,
        srq_limit: limit,
    };
    net.node(SERVER)
        .ctx
        .modify_srq(srq, arm(3), SrqAttrMask::LIMIT)
        .unwrap();
    assert_eq!(net.node(SERVER).ctx.query_srq(srq).unwrap().srq_limit, 3);
    let mut msg = 0;
    let mut deliver = |net: &mut Net| {
        let i = msg % 2;
        net.node(2 + i as u8).send(theirs[i], msg as u64, 1, 8);
        net.run(0);
        msg += 1;
    };
    deliver(&mut net); // 3 left: not below 3
    assert!(net.node(SERVER).events().is_empty());
    deliver(&mut net); // 2 left: fires
    assert_eq!(
        net.node(SERVER).events(),
        vec![AsyncEvent::SrqLimitReached(srq)]
    );
    assert_eq!(net.node(SERVER).ctx.query_srq(srq).unwrap().srq_limit, 0);
    deliver(&mut net); // 1 left: disarmed, nothing
    assert!(net.node(SERVER).events().is_empty());
    // Armed again at 2 with 1 left: posting does not fire it, taking does.
    net.node(SERVER)
        .ctx
        .modify_srq(srq, arm(2), SrqAttrMask::LIMIT)
        .unwrap();
    for w in 4..7 {
        let wr = net.node(SERVER).recv_wr(w);
        net.node(SERVER).ctx.post_srq_recv(srq, wr).unwrap();
    }
    assert!(net.node(SERVER).events().is_empty());
    deliver(&mut net); // 3 left
    deliver(&mut net); // 2 left
    assert!(net.node(SERVER).events().is_empty());
    deliver(&mut net); // 1 left: fires once more
    assert_eq!(
        net.node(SERVER).events(),
        vec![AsyncEvent::SrqLimitReached(srq)]
    );
    deliver(&mut net); // 0 left
    assert!(net.node(SERVER).events().is_empty());
    let cq = net.node(SERVER).cq;
    assert_eq!(net.node(SERVER).ctx.poll_cq(cq, 100).len(), 7);
}

/// An empty SRQ is an empty receive queue to RC (rdma_rxe's `get_srq_wqe` returns
/// RESPST_ERR_RNR): the responder sends RNR NAK (§9.7.5.2.8) and the requester retries;
/// once a WQE is posted the retried SEND succeeds.
#[test]
fn empty_srq_answers_rnr_nak_then_succeeds() {
    let (mut net, srq, ours, theirs) = rc_setup(2, depth(4));
    net.node(3).send(theirs[1], 7, 0x5a, 64);
    net.run(0);
    let rnr = net
        .syndromes(SERVER)
        .into_iter()
        .filter(|s| matches!(s, Syndrome::RnrNak { .. }))
        .count();
    assert_eq!(rnr, 1, "one RNR NAK for the SEND that found the SRQ empty");
    let cq = net.node(SERVER).cq;
    assert!(net.node(SERVER).ctx.poll_cq(cq, 10).is_empty());
    let wr = net.node(SERVER).recv_wr(0);
    net.node(SERVER).ctx.post_srq_recv(srq, wr).unwrap();
    net.run(3); // the RNR timer fires, the SEND is retried
    let wcs = net.node(SERVER).ctx.poll_cq(cq, 10);
    assert_eq!(wcs.len(), 1);
    assert_eq!(wcs[0].status, WcStatus::Success);
    assert_eq!((wcs[0].wr_id, wcs[0].qp_num), (0, ours[1]));
    assert!(net.node(SERVER).slot(0)[..64].iter().all(|&b| b == 0x5a));
    let pcq = net.node(3).cq;
    let sends = net.node(3).ctx.poll_cq(pcq, 10);
    assert_eq!(sends.len(), 1);
    assert_eq!((sends[0].wr_id, sends[0].status), (7, WcStatus::Success));
}

/// ibv_destroy_srq fails with EBUSY while a QP is on the SRQ (rdma_rxe keeps a reference
/// per QP); an SRQ without QPs is destroyed and its handle is gone.
#[test]
fn destroy_while_attached_is_ebusy() {
    let mut net = Net::new(1);
    let pd = net.node(SERVER).pd;
    let used = net.node(SERVER).ctx.create_srq(pd, depth(8)).unwrap();
    let idle = net.node(SERVER).ctx.create_srq(pd, depth(8)).unwrap();
    net.node(SERVER).qp(QpType::Rc, Some(used));
    let e = net.node(SERVER).ctx.destroy_srq(used).unwrap_err();
    assert_eq!(e, VerbsError::Busy);
    assert_eq!(e.errno(), libc::EBUSY);
    assert!(net.node(SERVER).ctx.query_srq(used).is_ok());
    net.node(SERVER).ctx.destroy_srq(idle).unwrap();
    assert_eq!(
        net.node(SERVER).ctx.query_srq(idle),
        Err(VerbsError::NoSuchSrq)
    );
    let wr = net.node(SERVER).recv_wr(0);
    assert_eq!(
        net.node(SERVER).ctx.post_srq_recv(idle, wr),
        Err(VerbsError::NoSuchSrq)
    );
}

/// ibv_post_recv on a QP with an SRQ is refused with EINVAL (rdma_rxe's `rxe_post_recv`);
/// ibv_post_srq_recv refuses a full SRQ with ENOMEM and takes a buffer outside its region
/// (the message that uses it fails, as a QP's receive); create_qp refuses an SRQ of
/// another PD or one that does not exist.
#[test]
fn posting_rules() {
    let mut net = Net::new(1);
    let pd = net.node(SERVER).pd;
    let srq = net.node(SERVER).ctx.create_srq(pd, depth(1)).unwrap();
    assert_eq!(net.node(SERVER).ctx.query_srq(srq).unwrap().max_wr, 1);
    let q = net.node(SERVER).qp(QpType::Rc, Some(srq));
    let wr = net.node(SERVER).recv_wr(0);
    let e = net.node(SERVER).ctx.post_recv(q, wr).unwrap_err();
    assert_eq!(e.errno(), libc::EINVAL);
    net.node(SERVER).ctx.post_srq_recv(srq, wr).unwrap();
    let e = net.node(SERVER).ctx.post_srq_recv(srq, wr).unwrap_err();
    assert_eq!(e.errno(), libc::ENOMEM);
    let mut bad = net.node(SERVER).recv_wr(1);
    bad.sge.addr += 1 << 16;
    net.node(SERVER)
        .ctx
        .modify_srq(srq, depth(3), SrqAttrMask::MAX_WR)
        .unwrap();
    // Posted all the same, as a NIC takes it: the message that uses it fails.
    net.node(SERVER).ctx.post_srq_recv(srq, bad).unwrap();
    assert_eq!(net.node(SERVER).ctx.srq_posted(srq), Some(2));
    // Another PD's SRQ, and an SRQ that does not exist.
    let pd2 = net.node(SERVER).ctx.alloc_pd();
    let other = net.node(SERVER).ctx.create_srq(pd2, depth(4)).unwrap();
    let cq = net.node(SERVER).cq;
    let caps = QpCaps {
        qp_type: QpType::Rc,
        send_cq: cq,
        recv_cq: cq,
        max_send_wr: 4,
        max_recv_wr: 4,
    };
    for (srq, want) in [(other, libc::EINVAL), (SrqId(99), libc::EINVAL)] {
        let ex = QpInitEx {
            srq: Some(srq),
            ..QpInitEx::default()
        };
        let e = net.node(SERVER).ctx.create_qp_ex(pd, caps, ex).unwrap_err();
        assert_eq!(e.errno(), want);
    }
    assert_eq!(
        net.node(SERVER)
            .ctx
            .create_qp_ex(
                pd,
                caps,
                QpInitEx {
                    srq: Some(SrqId(99)),
                    ..QpInitEx::default()
                }
            )
            .unwrap_err(),
        VerbsError::NoSuchSrq
    );
}

/// A QP on an SRQ that enters ERR flushes none of the SRQ's WQEs (they belong to the
/// SRQ) and raises IBV_EVENT_QP_LAST_WQE_REACHED (IBTA §11.5.2; rdma_rxe's
/// `flush_recv_queue`); the other QPs keep taking the WQEs, in order.
#[test]
fn qp_in_err_raises_last_wqe_and_leaves_the_srq_alone() {
    let (mut net, srq, ours, theirs) = rc_setup(2, depth(8));
    for w in 0..3 {
        let wr = net.node(SERVER).recv_wr(w);
        net.node(SERVER).ctx.post_srq_recv(srq, wr).unwrap();
    }
    let now = net.now;
    net.node(SERVER).ctx.modify_qp_err(ours[0], now).unwrap();
    assert_eq!(net.node(SERVER).ctx.qp_state(ours[0]), Some(QpState::Err));
    assert_eq!(
        net.node(SERVER).events(),
        vec![AsyncEvent::QpLastWqeReached(ours[0])]
    );
    let cq = net.node(SERVER).cq;
    assert!(
        net.node(SERVER).ctx.poll_cq(cq, 10).is_empty(),
        "no WQE of the SRQ is flushed"
    );
    assert_eq!(net.node(SERVER).ctx.srq_posted(srq), Some(3));
    // Modifying to ERR again raises nothing new.
    net.node(SERVER).ctx.modify_qp_err(ours[0], now).unwrap();
    assert!(net.node(SERVER).events().is_empty());
    // The other QP takes WQE 0, then 1.
    for k in 0..2 {
        net.node(3).send(theirs[1], k, 0x30, 16);
        net.run(0);
    }
    let wcs = net.node(SERVER).ctx.poll_cq(cq, 10);
    assert_eq!(
        wcs.iter()
            .map(|w| (w.wr_id, w.qp_num, w.status))
            .collect::<Vec<_>>(),
        vec![
            (0, ours[1], WcStatus::Success),
            (1, ours[1], WcStatus::Success)
        ]
    );
    assert_eq!(net.node(SERVER).ctx.srq_posted(srq), Some(1));
}

/// A QP on an SRQ taken to ERR by a protocol error: the receive it was placing (taken
/// from the SRQ) completes in error on that QP, the rest stays in the SRQ, and both the
/// affiliated error and LAST_WQE_REACHED are raised.
#[test]
fn qp_error_mid_message_flushes_only_its_own_wqe() {
    let (mut net, srq, ours, theirs) = rc_setup(2, depth(8));
    for w in 0..3 {
        let wr = net.node(SERVER).recv_wr(w);
        net.node(SERVER).ctx.post_srq_recv(srq, wr).unwrap();
    }
    // A 2 KiB SEND into a 1 KiB receive: LOC_LEN_ERR, NAK Invalid Request, ERR (§9.9.3).
    net.node(2).send(theirs[0], 1, 0x11, 2048);
    net.run(0);
    assert_eq!(net.node(SERVER).ctx.qp_state(ours[0]), Some(QpState::Err));
    let cq = net.node(SERVER).cq;
    let wcs = net.node(SERVER).ctx.poll_cq(cq, 10);
    assert_eq!(wcs.len(), 1);
    assert_eq!((wcs[0].wr_id, wcs[0].qp_num), (0, ours[0]));
    assert_eq!(wcs[0].status, WcStatus::LocLenErr);
    assert!(net
        .node(SERVER)
        .events()
        .contains(&AsyncEvent::QpLastWqeReached(ours[0])));
    assert_eq!(net.node(SERVER).ctx.srq_posted(srq), Some(2));
    net.node(3).send(theirs[1], 2, 0x22, 32);
    net.run(0);
    let wcs = net.node(SERVER).ctx.poll_cq(cq, 10);
    assert_eq!(
        wcs.iter().map(|w| (w.wr_id, w.qp_num)).collect::<Vec<_>>(),
        vec![(1, ours[1])]
    );
}

/// UD QPs on an SRQ: each datagram takes the oldest WQE, whichever QP it is addressed to;
/// the completion names that QP and the sender's QPN, with the GRH space in front.
#[test]
fn ud_qps_share_an_srq() {
    let mut net = Net::new(2);
    let pd = net.node(SERVER).pd;
    let srq = net.node(SERVER).ctx.create_srq(pd, depth(8)).unwrap();
    let ours: Vec<u32> = (0..2)
        .map(|_| {
            let q = net.node(SERVER).qp(QpType::Ud, Some(srq));
            net.node(SERVER).ud_ready(q);
            q
        })
        .collect();
    let mut theirs = Vec::new();
    for peer in [2u8, 3] {
        let q = net.node(peer).qp(QpType::Ud, None);
        net.node(peer).ud_ready(q);
        theirs.push(q);
    }
    for w in 0..4 {
        let wr = net.node(SERVER).recv_wr(w);
        net.node(SERVER).ctx.post_srq_recv(srq, wr).unwrap();
    }
    // (peer index, our QP index)
    let order = [(1usize, 0usize), (0, 1), (0, 0), (1, 1)];
    for (k, &(p, o)) in order.iter().enumerate() {
        let peer = 2 + p as u8;
        let buf = net.node(peer).buf;
        net.node(peer).ctx.mr_bytes_mut(&buf)[..50].fill(0x60 + k as u8);
        let wr = UdSendWr {
            wr_id: k as u64,
            dest: remote(SERVER),
            remote_qpn: ours[o],
            remote_qkey: QKEY,
            sge: Sge {
                addr: buf.addr,
                length: 50,
                lkey: buf.lkey,
            },
            imm: None,
            signaled: true,
            solicited: false,
        };
        net.node(peer).ctx.post_send_ud(theirs[p], wr).unwrap();
        net.run(0);
    }
    let cq = net.node(SERVER).cq;
    let wcs = net.node(SERVER).ctx.poll_cq(cq, 10);
    assert_eq!(wcs.len(), 4);
    for (k, wc) in wcs.iter().enumerate() {
        let (p, o) = order[k];
        assert_eq!(wc.status, WcStatus::Success);
        assert_eq!(wc.wr_id, k as u64);
        assert_eq!(wc.qp_num, ours[o]);
        assert_eq!(wc.src_qp, theirs[p]);
        assert_eq!(wc.byte_len, 40 + 50);
        let slot = net.node(SERVER).slot(k as u64);
        assert!(slot[40..90].iter().all(|&b| b == 0x60 + k as u8));
    }
    // post_recv on a UD QP with an SRQ is refused too.
    let wr = net.node(SERVER).recv_wr(5);
    let e = net.node(SERVER).ctx.post_recv(ours[0], wr).unwrap_err();
    assert_eq!(e.errno(), libc::EINVAL);
}

/// UC on an SRQ: a SEND takes the SRQ's oldest WQE; a message lost in the middle gives
/// its WQE back to the head of the SRQ for the next message (the UC responder
/// resynchronises, §9.9.3 class D1), so no WQE is lost.
#[test]
fn uc_takes_from_the_srq_and_gives_back_a_dropped_message() {
    let mut net = Net::new(1);
    let pd = net.node(SERVER).pd;
    let srq = net.node(SERVER).ctx.create_srq(pd, depth(4)).unwrap();
    let s = net.node(SERVER).qp(QpType::Uc, Some(srq));
    let p = net.node(2).qp(QpType::Uc, None);
    net.node(SERVER).connect(s, 2, p);
    net.node(2).connect(p, SERVER, s);
    for w in 0..2 {
        let wr = net.node(SERVER).recv_wr(w);
        net.node(SERVER).ctx.post_srq_recv(srq, wr).unwrap();
    }
    // A 3-packet SEND whose MIDDLE is lost: FIRST takes WQE 0, the LAST finds a gap.
    net.node(2).send(p, 1, 0x71, 2100);
    let mut buf = vec![0u8; 5000];
    let now = net.now;
    let mut k = 0;
    while let Some(len) = net.node(2).ctx.poll_frame(now, &mut buf) {
        if k != 1 {
            let f = buf[..len].to_vec();
            net.node(SERVER).ctx.handle_frame(now, &f).unwrap();
        }
        k += 1;
    }
    assert_eq!(k, 3);
    assert_eq!(net.node(SERVER).ctx.srq_posted(srq), Some(2));
    net.node(2).send(p, 2, 0x72, 300);
    net.run(0);
    let cq = net.node(SERVER).cq;
    let wcs = net.node(SERVER).ctx.poll_cq(cq, 10);
    assert_eq!(wcs.len(), 1);
    assert_eq!((wcs[0].wr_id, wcs[0].qp_num), (0, s));
    assert_eq!(wcs[0].byte_len, 300);
    assert_eq!(net.node(SERVER).ctx.srq_posted(srq), Some(1));
}

/// A frame from peer `from` to the server, as the hostile test throws them.
fn hostile_frame(from: u8, bth: wire::BthRepr, ext: wire::ExtHeaders, payload: &[u8]) -> Vec<u8> {
    let r = wire::FrameRepr {
        eth: Some(wire::EthernetRepr {
            dst: [2, 0, 0, 0, 0, SERVER],
            src: [2, 0, 0, 0, 0, from],
            vlan: None,
            ethertype: 0x0800,
        }),
        ip: wire::IpRepr::V4(wire::Ipv4Repr::new(
            Ipv4Addr::new(10, 0, 0, from),
            Ipv4Addr::new(10, 0, 0, SERVER),
            0,
        )),
        udp: wire::UdpRepr {
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

/// A hostile peer throws random well-formed packets (every supported opcode, PSNs near
/// and far, lengths around the MTU, right and wrong Q_Keys) at an RC, a UC and a UD QP
/// sharing one SRQ, while the application keeps the SRQ topped up. No WQE is ever lost
/// or completed twice: at every step, completed + still in the SRQ + held by a QP for a
/// message in progress (at most one per QP) = posted, and once every QP is in ERR,
/// completed + still in the SRQ = posted exactly; each QP that went to ERR raised
/// LAST_WQE_REACHED exactly once.
#[test]
fn hostile_packets_never_lose_or_duplicate_srq_wqes() {
    use uroce::sim::Rng;
    use uroce::wire::opcode::{ExtHeader, PayloadRule};
    let mut net = Net::new(1);
    let pd = net.node(SERVER).pd;
    let srq = net.node(SERVER).ctx.create_srq(pd, depth(32)).unwrap();
    let rc = net.node(SERVER).qp(QpType::Rc, Some(srq));
    let uc = net.node(SERVER).qp(QpType::Uc, Some(srq));
    let ud = net.node(SERVER).qp(QpType::Ud, Some(srq));
    net.node(SERVER).connect(rc, 2, 0x77);
    net.node(SERVER).connect(uc, 2, 0x78);
    net.node(SERVER).ud_ready(ud);
    let ops: Vec<wire::Opcode> = wire::Opcode::ALL
        .iter()
        .copied()
        .filter(|o| o.is_supported())
        .collect();
    let mut r = Rng::new(0x5e9);
    let mut posted = 0u64;
    let mut completed = std::collections::BTreeSet::new();
    let mut last_wqe = Vec::new();
    let cq = net.node(SERVER).cq;
    let mut out = vec![0u8; 5000];
    let mut now = net.now;
    let qps = [rc, uc, ud];
    for i in 0..20_000u32 {
        while net.node(SERVER).ctx.srq_posted(srq).unwrap() < 16 {
            let wr = net.node(SERVER).recv_wr(posted % 64);
            let wr = RecvWr {
                wr_id: posted,
                ..wr
            };
            net.node(SERVER).ctx.post_srq_recv(srq, wr).unwrap();
            posted += 1;
        }
        let op = ops[r.range(0, ops.len() as u64 - 1) as usize];
        let qp = qps[r.range(0, 2) as usize];
        let psn = if r.chance(0.7) {
            0x100 + r.range(0, 63) as u32
        } else {
            r.next_u64() as u32 & 0xff_ffff
        };
        let mut ext = wire::ExtHeaders::default();
        for &h in op.headers() {
            match h {
                ExtHeader::Reth => {
                    ext.reth = Some(wire::RethRepr {
                        va: r.next_u64(),
                        rkey: r.next_u64() as u32,
                        len: r.range(0, 3000) as u32,
                    })
                }
                ExtHeader::Deth => {
                    ext.deth = Some(wire::DethRepr {
                        qkey: if r.chance(0.8) { QKEY } else { 7 },
                        src_qp: 0x79,
                    })
                }
                ExtHeader::ImmDt => ext.imm = Some(r.next_u64() as u32),
                ExtHeader::Ieth => ext.ieth = Some(r.next_u64() as u32),
                ExtHeader::Aeth => {
                    ext.aeth = Some(wire::AethRepr {
                        syndrome: 0,
                        msn: 0,
                    })
                }
                ExtHeader::AtomicEth => {
                    ext.atomic = Some(wire::AtomicEthRepr {
                        va: 0,
                        rkey: 0,
                        swap_add: 0,
                        compare: 0,
                    })
                }
                ExtHeader::AtomicAckEth => {
                    ext.atomic_ack = Some(wire::AtomicAckEthRepr { orig: 0 })
                }
                ExtHeader::Feth => ext.feth = Some(0),
                ExtHeader::Rdeth | ExtHeader::CnpReserved => {}
            }
        }
        let len = match op.payload() {
            PayloadRule::None => 0,
            PayloadRule::Exactly(n) => n,
            PayloadRule::Any => [0usize, 1, 512, 1024, 1025, 2048][r.range(0, 5) as usize],
        };
        let f = hostile_frame(2, wire::BthRepr::new(op, qp, psn), ext, &vec![0xee; len]);
        let _ = net.node(SERVER).ctx.handle_frame(now, &f);
        while net.node(SERVER).ctx.poll_frame(now, &mut out).is_some() {}
        if i % 50 == 0 {
            now += std::time::Duration::from_millis(1);
            net.node(SERVER).ctx.handle_timeout(now);
        }
        for wc in net.node(SERVER).ctx.poll_cq(cq, 100) {
            if wc.opcode == WcOpcode::Send {
                continue;
            }
            assert!(wc.wr_id < posted, "a completion for a WQE never posted");
            assert!(
                completed.insert(wc.wr_id),
                "WQE {} completed twice",
                wc.wr_id
            );
        }
        for e in net.node(SERVER).events() {
            if let AsyncEvent::QpLastWqeReached(q) = e {
                last_wqe.push(q);
            }
        }
        let in_srq = net.node(SERVER).ctx.srq_posted(srq).unwrap() as u64;
        let held = posted - completed.len() as u64 - in_srq;
        assert!(held <= 2, "{held} WQEs neither completed nor in the SRQ");
    }
    // The RC QP goes to ERR on its first in-sequence invalid request, mid-run.
    assert_eq!(last_wqe, vec![rc], "LAST_WQE_REACHED of the RC QP, once");
    assert!(
        completed.len() > 100,
        "only {} receives completed",
        completed.len()
    );
    for q in qps {
        net.node(SERVER).ctx.modify_qp_err(q, now).unwrap();
    }
    for wc in net.node(SERVER).ctx.poll_cq(cq, 100) {
        if wc.opcode != WcOpcode::Send {
            assert_eq!(wc.status, WcStatus::WrFlushErr);
            assert!(
                completed.insert(wc.wr_id),
                "WQE {} completed twice",
                wc.wr_id
            );
        }
    }
    for e in net.node(SERVER).events() {
        if let AsyncEvent::QpLastWqeReached(q) = e {
            last_wqe.push(q);
        }
    }
    let in_srq = net.node(SERVER).ctx.srq_posted(srq).unwrap() as u64;
    assert_eq!(completed.len() as u64 + in_srq, posted);
    last_wqe.sort_unstable();
    let mut want = qps.to_vec();
    want.sort_unstable();
    assert_eq!(last_wqe, want, "one LAST_WQE_REACHED per QP");
}

/// A WQE waiting on an SRQ does not pin its region (as one on a QP's own receive queue
/// does not): the region can be deregistered, the WQE then fails when a message takes it.
#[test]
fn region_of_a_posted_srq_wqe_can_be_deregistered() {
    let mut b = Node::new(2);
    let attr = SrqAttr {
        max_wr: 4,
        max_sge: 1,
        srq_limit: 0,
    };
    let srq = b.ctx.create_srq(b.pd, attr).unwrap();
    let mr = b
        .ctx
        .reg_mr(b.pd, vec![0; 64], Access::LOCAL_WRITE)
        .unwrap();
    let idle = b
        .ctx
        .reg_mr(b.pd, vec![0; 64], Access::LOCAL_WRITE)
        .unwrap();
    let sge = Sge {
        addr: mr.addr,
        length: 64,
        lkey: mr.lkey,
    };
    b.ctx.post_srq_recv(srq, RecvWr { wr_id: 1, sge }).unwrap();
    assert!(b.ctx.dereg_mr(&mr).is_ok());
    assert!(b.ctx.dereg_mr(&idle).is_ok());
}

/// An SRQ WQE whose region was deregistered after the post fails when a SEND takes it,
/// as a NIC's lkey check fails it: LOC_QP_OP_ERR on the QP that took it, the SEND NAKed
/// Remote Operational Error (REM_OP_ERR at the sender), the QP in ERR.
#[test]
fn srq_wqe_of_a_deregistered_region_fails_when_used() {
    let (mut net, srq, ours, theirs) = rc_setup(1, depth(4));
    let wr = net.node(SERVER).recv_wr(0);
    net.node(SERVER).ctx.post_srq_recv(srq, wr).unwrap();
    let buf = net.node(SERVER).buf;
    assert!(net.node(SERVER).ctx.dereg_mr(&buf).unwrap().is_some());
    net.node(2).send(theirs[0], 1, 0x11, 100);
    net.run(0);
    let cq = net.node(SERVER).cq;
    let wcs = net.node(SERVER).ctx.poll_cq(cq, 10);
    let got: Vec<_> = wcs.iter().map(|w| (w.wr_id, w.qp_num, w.status)).collect();
    assert_eq!(got, [(0, ours[0], WcStatus::LocQpOpErr)]);
    assert_eq!(net.node(SERVER).ctx.qp_state(ours[0]), Some(QpState::Err));
    let cq = net.node(2).cq;
    let sends = net.node(2).ctx.poll_cq(cq, 10);
    assert_eq!((sends[0].wr_id, sends[0].status), (1, WcStatus::RemOpErr));
}

/// A QP on an SRQ moved to RESET in the middle of a message gives the WQE it was filling
/// back to the SRQ (it is the SRQ's, not the QP's to drop): the next message, on another
/// QP, lands in it. (rdma_rxe drops it with the QP's state; uroce loses no WQE of a
/// shared queue.)
#[test]
fn reset_mid_message_gives_the_wqe_back_to_the_srq() {
    use uroce::verbs::{QpAttr, QpAttrMask};
    let (mut net, srq, ours, theirs) = rc_setup(2, depth(8));
    let mut big = net.node(SERVER).recv_wr(0);
    big.sge.length = 4096;
    net.node(SERVER).ctx.post_srq_recv(srq, big).unwrap();
    let next = net.node(SERVER).recv_wr(8);
    net.node(SERVER).ctx.post_srq_recv(srq, next).unwrap();
    // A 3000-byte SEND: only its FIRST reaches the server, which takes WQE 0 for it.
    net.node(2).send(theirs[0], 1, 0x11, 3000);
    let mut buf = vec![0u8; 5000];
    let now = net.now;
    let n = net.node(2).ctx.poll_frame(now, &mut buf).unwrap();
    net.node(SERVER).ctx.handle_frame(now, &buf[..n]).unwrap();
    assert_eq!(net.node(SERVER).ctx.srq_posted(srq), Some(1));
    let reset = QpAttr {
        qp_state: QpState::Reset,
        ..QpAttr::default()
    };
    net.node(SERVER)
        .ctx
        .modify_qp(ours[0], &reset, QpAttrMask::STATE)
        .unwrap();
    assert_eq!(
        net.node(SERVER).ctx.srq_posted(srq),
        Some(2),
        "WQE 0 is back"
    );
    let cq = net.node(SERVER).cq;
    assert!(
        net.node(SERVER).ctx.poll_cq(cq, 10).is_empty(),
        "RESET completes nothing"
    );
    net.node(3).send(theirs[1], 2, 0x22, 32);
    net.run(0);
    let wcs = net.node(SERVER).ctx.poll_cq(cq, 10);
    assert_eq!(
        wcs.iter()
            .map(|w| (w.wr_id, w.qp_num, w.status))
            .collect::<Vec<_>>(),
        vec![(0, ours[1], WcStatus::Success)],
        "the message on the other QP lands in the WQE given back"
    );
}
