//! Test harness shared by the RC test files: two contexts wired back to back through a
//! loop that can drop, duplicate and inspect every frame.

#![allow(dead_code, unused_imports)]

pub use std::net::{IpAddr, Ipv4Addr};
pub use std::time::Instant;

pub use uroce::mem::{Access, Mr};
pub use uroce::transport::psn_add;
pub use uroce::verbs::{
    Context, ContextConfig, CqId, InitAttr, Mtu, QpCaps, QpInitEx, QpState, RecvWr, Remote,
    RtrAttr, RtsAttr, SendFlags, SendOp, SendWr, Sge, WcStatus, WorkCompletion,
};
pub use uroce::wire::{self, NakCode, Opcode, Syndrome};

pub const A_PSN: u32 = 0x10_0000;
pub const B_PSN: u32 = 0x20_0000;

/// One packet seen by the harness: who sent it and the frame.
#[derive(Clone)]
pub struct Seen {
    pub from_a: bool,
    pub frame: Vec<u8>,
    pub at: Instant,
}

impl Seen {
    pub fn opcode(&self) -> Opcode {
        wire::parse(&self.frame).unwrap().bth.opcode()
    }
    pub fn psn(&self) -> u32 {
        wire::parse(&self.frame).unwrap().bth.psn()
    }
    pub fn syndrome(&self) -> Option<Syndrome> {
        wire::parse(&self.frame).unwrap().ext.aeth.map(|a| a.kind())
    }
}

pub struct Pair {
    pub a: Context,
    pub b: Context,
    pub qa: u32,
    pub qb: u32,
    pub cqa: CqId,
    pub cqb: CqId,
    pub la: Mr,   // A's local buffer
    pub rb: Mr,   // B's remote-accessible region
    pub recv: Mr, // B's receive buffers
    pub now: Instant,
    pub log: Vec<Seen>,
}

pub fn ctx(last: u8) -> (Context, CqId, u32) {
    ctx_ex(last, QpInitEx::default())
}

/// [`ctx`] with the QP created by `create_qp_ex`.
pub fn ctx_ex(last: u8, ex: QpInitEx) -> (Context, CqId, u32) {
    let mut c = Context::new(
        ContextConfig {
            mac: [2, 0, 0, 0, 0, last],
            ip: IpAddr::V4(Ipv4Addr::new(10, 0, 0, last)),
            seed: u64::from(last),
            udp_sport_base: 0xc000,
            tos: 0,
        },
        std::time::Instant::now(),
    );
    let cq = c
        .create_cq(uroce::verbs::MAX_CQE)
        .expect("MAX_CQE is a valid CQ depth");
    let pd = c.alloc_pd();
    let caps = QpCaps {
        qp_type: uroce::verbs::QpType::Rc,
        send_cq: cq,
        recv_cq: cq,
        max_send_wr: 64,
        max_recv_wr: 64,
    };
    let q = c.create_qp_ex(pd, caps, ex).unwrap();
    (c, cq, q)
}

impl Pair {
    pub fn new(rts: RtsAttr, rb_access: Access) -> Self {
        Self::with(rts, rb_access, A_PSN)
    }

    pub fn with(rts: RtsAttr, rb_access: Access, a_psn: u32) -> Self {
        Self::custom(rts, rb_access, a_psn, InitAttr::default(), 4, Mtu::M1024)
    }

    pub fn custom(
        rts: RtsAttr,
        rb_access: Access,
        a_psn: u32,
        b_init: InitAttr,
        max_dest: u8,
        mtu: Mtu,
    ) -> Self {
        Self::custom_ex(
            rts,
            rb_access,
            a_psn,
            b_init,
            max_dest,
            mtu,
            QpInitEx::default(),
        )
    }

    /// [`Pair::new`] (every access on B's region) with A's QP created with `a_ex`.
    pub fn with_ex(a_ex: QpInitEx) -> Self {
        Self::custom_ex(
            RtsAttr::default(),
            all(),
            A_PSN,
            InitAttr::default(),
            4,
            Mtu::M1024,
            a_ex,
        )
    }

    /// [`Pair::custom`] with A's QP created with `a_ex`.
    pub fn custom_ex(
        rts: RtsAttr,
        rb_access: Access,
        a_psn: u32,
        b_init: InitAttr,
        max_dest: u8,
        mtu: Mtu,
        a_ex: QpInitEx,
    ) -> Self {
        let (mut a, cqa, qa) = ctx_ex(1, a_ex);
        let (mut b, cqb, qb) = ctx(2);
        let pd = uroce::mem::PdId(0);
        let la = a.reg_mr(pd, vec![0; 1 << 17], Access::LOCAL_WRITE).unwrap();
        let rb = b
            .reg_mr(pd, (0..1u32 << 17).map(|i| i as u8).collect(), rb_access)
            .unwrap();
        let recv = b.reg_mr(pd, vec![0; 1 << 17], Access::LOCAL_WRITE).unwrap();
        for (i, (c, q, peer, rq, sq)) in [
            (&mut a, qa, (2u8, qb), B_PSN, a_psn),
            (&mut b, qb, (1u8, qa), a_psn, B_PSN),
        ]
        .into_iter()
        .enumerate()
        {
            let init = if i == 1 { b_init } else { InitAttr::default() };
            c.modify_qp_init(q, init).unwrap();
            c.modify_qp_rtr(
                q,
                RtrAttr {
                    remote: Remote {
                        ip: IpAddr::V4(Ipv4Addr::new(10, 0, 0, peer.0)),
                        mac: [2, 0, 0, 0, 0, peer.0],
                    },
                    dest_qpn: peer.1,
                    rq_psn: rq,
                    path_mtu: mtu,
                    max_dest_rd_atomic: max_dest,
                    min_rnr_timer: 12, // 0.64 ms
                },
            )
            .unwrap();
            c.modify_qp_rts(q, RtsAttr { sq_psn: sq, ..rts }).unwrap();
        }
        Self {
            a,
            b,
            qa,
            qb,
            cqa,
            cqb,
            la,
            rb,
            recv,
            now: Instant::now(),
            log: Vec::new(),
        }
    }

    pub fn post(&mut self, wr_id: u64, op: SendOp, len: u32) {
        let sge = Sge {
            addr: self.la.addr,
            length: len,
            lkey: self.la.lkey,
        };
        self.a
            .post_send(
                self.qa,
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

    pub fn post_recv(&mut self, wr_id: u64) {
        let sge = Sge {
            addr: self.recv.addr + wr_id * 8192,
            length: 8192,
            lkey: self.recv.lkey,
        };
        self.b.post_recv(self.qb, RecvWr { wr_id, sge }).unwrap();
    }

    /// Moves frames both ways until nothing is left to send, then fires the next timer;
    /// `deliver(seen, n)` decides the fate of the n-th frame: how many copies arrive.
    pub fn run(&mut self, mut deliver: impl FnMut(&Seen, usize) -> usize, max_timeouts: usize) {
        let mut buf = vec![0u8; 5000];
        let mut timeouts = 0;
        loop {
            let mut moved = false;
            for from_a in [true, false] {
                loop {
                    let src = if from_a { &mut self.a } else { &mut self.b };
                    let Some(n) = src.poll_frame(self.now, &mut buf) else {
                        break;
                    };
                    moved = true;
                    let s = Seen {
                        from_a,
                        frame: buf[..n].to_vec(),
                        at: self.now,
                    };
                    let copies = deliver(&s, self.log.len());
                    self.log.push(s);
                    let dst = if from_a { &mut self.b } else { &mut self.a };
                    for _ in 0..copies {
                        dst.handle_frame(self.now, &buf[..n]).unwrap();
                    }
                }
            }
            if moved {
                continue;
            }
            let next = [self.a.poll_timeout(), self.b.poll_timeout()]
                .into_iter()
                .flatten()
                .min();
            match next {
                Some(t) if timeouts < max_timeouts => {
                    timeouts += 1;
                    self.now = self.now.max(t);
                    self.a.handle_timeout(self.now);
                    self.b.handle_timeout(self.now);
                }
                _ => break,
            }
        }
    }

    /// Hands B the first frame A sent, again (a late duplicate), and lets B answer.
    pub fn replay_first_from_a(&mut self) {
        let first = self.log.iter().find(|s| s.from_a).unwrap().frame.clone();
        self.b.handle_frame(self.now, &first).unwrap();
        self.run(|_, _| 1, 10);
    }

    pub fn wcs_a(&mut self) -> Vec<WorkCompletion> {
        self.a.poll_cq(self.cqa, 100)
    }
    pub fn wcs_b(&mut self) -> Vec<WorkCompletion> {
        self.b.poll_cq(self.cqb, 100)
    }
    pub fn sent(&self, from_a: bool, op: Opcode) -> Vec<&Seen> {
        self.log
            .iter()
            .filter(|s| s.from_a == from_a && s.opcode() == op)
            .collect()
    }
}

/// A send work request with no flags but `signaled`.
pub fn wr(wr_id: u64, op: SendOp, sge: Sge, signaled: bool) -> SendWr {
    SendWr {
        wr_id,
        op,
        sge,
        signaled,
        solicited: false,
    }
}

pub fn all() -> Access {
    Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ | Access::REMOTE_ATOMIC
}

pub fn write_op(p: &Pair, off: u64) -> SendOp {
    SendOp::Write {
        remote_addr: p.rb.addr + off,
        rkey: p.rb.rkey,
    }
}

pub use uroce::wire::{
    AethRepr, BthRepr, DethRepr, EthernetRepr, ExtHeaders, FrameRepr, IpRepr, Ipv4Repr, RethRepr,
    UdpRepr,
};

#[allow(dead_code)]
pub fn mkframe(from: u8, to: u8, bth: BthRepr, ext: ExtHeaders, payload: &[u8]) -> Vec<u8> {
    let r = FrameRepr {
        eth: Some(EthernetRepr {
            dst: [2, 0, 0, 0, 0, to],
            src: [2, 0, 0, 0, 0, from],
            vlan: None,
            ethertype: 0x0800,
        }),
        ip: IpRepr::V4(Ipv4Repr::new(
            Ipv4Addr::new(10, 0, 0, from),
            Ipv4Addr::new(10, 0, 0, to),
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

pub fn drain(c: &mut Context, now: Instant) -> Vec<Vec<u8>> {
    let mut out = vec![];
    let mut buf = vec![0u8; 5000];
    while let Some(n) = c.poll_frame(now, &mut buf) {
        out.push(buf[..n].to_vec());
    }
    out
}

// ---- 1. dereg of a receive buffer's MR, then a SEND arrives: panic ----
