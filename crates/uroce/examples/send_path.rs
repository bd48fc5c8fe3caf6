//! Drains N (default 2000) 64-byte SENDs through `poll_frame`, DCQCN off or on (first argument),
//! for counting instructions with `valgrind --tool=callgrind` (deterministic, unlike wall
//! time on a shared machine):
//!
//! `valgrind --tool=callgrind target/release/examples/send_path off|on N`

use std::net::{IpAddr, Ipv4Addr};
use std::time::Instant;

use uroce::congestion::dcqcn::Params;
use uroce::mem::Access;
use uroce::verbs::{
    Context, ContextConfig, InitAttr, Mtu, QpCaps, QpType, Remote, RtrAttr, RtsAttr, SendOp,
    SendWr, Sge,
};

fn main() {
    let on = std::env::args().nth(1).as_deref() == Some("on");
    let now = Instant::now();
    let mut c = Context::new(
        ContextConfig {
            mac: [2, 0, 0, 0, 0, 1],
            ip: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)),
            seed: 1,
            udp_sport_base: 0xc000,
            tos: 0,
        },
        std::time::Instant::now(),
    );
    if on {
        c.enable_dcqcn(Params::paper(100e9), now);
    }
    let cq = c
        .create_cq(uroce::verbs::MAX_CQE)
        .expect("MAX_CQE is a valid CQ depth");
    let pd = c.alloc_pd();
    let caps = QpCaps {
        qp_type: QpType::Rc,
        send_cq: cq,
        recv_cq: cq,
        max_send_wr: 1 << 20,
        max_recv_wr: 16,
    };
    let q = c.create_qp(pd, caps).expect("qp");
    let mr = c
        .reg_mr(pd, vec![7; 4096], Access::LOCAL_WRITE)
        .expect("mr");
    c.modify_qp_init(q, InitAttr::default()).expect("init");
    let remote = Remote {
        ip: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)),
        mac: [2, 0, 0, 0, 0, 2],
    };
    let rtr = RtrAttr {
        remote,
        dest_qpn: 0x99,
        rq_psn: 0,
        path_mtu: Mtu::M4096,
        max_dest_rd_atomic: 4,
        min_rnr_timer: 1,
    };
    c.modify_qp_rtr(q, rtr).expect("rtr");
    c.modify_qp_rts(q, RtsAttr::default()).expect("rts");
    let mut buf = vec![0u8; 4096 + 256];
    let n: u64 = std::env::args()
        .nth(2)
        .and_then(|s| s.parse().ok())
        .unwrap_or(2000);
    for i in 0..n {
        let sge = Sge {
            addr: mr.addr,
            length: 64,
            lkey: mr.lkey,
        };
        let wr = SendWr {
            wr_id: i,
            op: SendOp::Send,
            sge,
            signaled: false,
            solicited: false,
        };
        c.post_send(q, wr).expect("post");
    }
    let mut frames = 0u64;
    while c.poll_frame(now, &mut buf).is_some() {
        frames += 1;
    }
    println!("{frames} frames");
}
