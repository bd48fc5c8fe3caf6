//! Memory of an idle QP: the bytes a context holds for each RC QP brought to RTS with
//! nothing posted, counted with a counting global allocator (bytes allocated minus bytes
//! freed) over 10,000 QPs (and 8,193), and bounded: under 4 KiB. Posted work requests take more, in
//! their queues; that is not counted here. Run with `--nocapture` to see the figure.

use std::alloc::{GlobalAlloc, Layout, System};
use std::net::{IpAddr, Ipv4Addr};
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Instant;

use uroce::verbs::{
    Context, ContextConfig, InitAttr, Mtu, QpCaps, QpType, Remote, RtrAttr, RtsAttr,
};

struct Counting;
static LIVE: AtomicI64 = AtomicI64::new(0);

// SAFETY: forwards to the system allocator, only counting bytes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        LIVE.fetch_add(l.size() as i64, Ordering::Relaxed);
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        LIVE.fetch_sub(l.size() as i64, Ordering::Relaxed);
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        LIVE.fetch_add(n as i64 - l.size() as i64, Ordering::Relaxed);
        unsafe { System.realloc(p, l, n) }
    }
}

#[global_allocator]
static A: Counting = Counting;

/// Bytes per QP of `n` RC QPs in RTS, nothing posted (deep queues allowed: 1024 send and
/// receive work requests each, as `uroce perf` creates them).
fn bytes_per_idle_qp(n: u32) -> f64 {
    let mut c = Context::new(
        ContextConfig {
            mac: [2, 0, 0, 0, 0, 1],
            ip: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)),
            seed: 1,
            udp_sport_base: 0xc000,
            tos: 0,
        },
        Instant::now(),
    );
    let cq = c.create_cq(4095).unwrap();
    let pd = c.alloc_pd();
    let caps = QpCaps {
        qp_type: QpType::Rc,
        send_cq: cq,
        recv_cq: cq,
        max_send_wr: 1024,
        max_recv_wr: 1024,
    };
    let remote = Remote {
        ip: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)),
        mac: [2, 0, 0, 0, 0, 2],
    };
    let before = LIVE.load(Ordering::Relaxed);
    for i in 0..n {
        let q = c.create_qp(pd, caps).unwrap();
        c.modify_qp_init(q, InitAttr::default()).unwrap();
        let rtr = RtrAttr {
            remote,
            dest_qpn: 0x100 + i,
            rq_psn: 0,
            path_mtu: Mtu::M4096,
            max_dest_rd_atomic: 16,
            min_rnr_timer: 1,
        };
        c.modify_qp_rtr(q, rtr).unwrap();
        c.modify_qp_rts(q, RtsAttr::default()).unwrap();
    }
    let after = LIVE.load(Ordering::Relaxed);
    drop(c);
    (after - before) as f64 / f64::from(n)
}

/// 10,000 QPs, and 8,193: just past a doubling of the QP table's vector, where its unused
/// capacity weighs most per QP.
#[test]
fn an_idle_qp_in_rts_takes_under_4_kib() {
    for n in [10_000, 8_193] {
        let per_qp = bytes_per_idle_qp(n);
        println!("{per_qp:.0} bytes per idle RC QP in RTS ({n} QPs)");
        assert!(per_qp > 0.0, "the counter counts");
        assert!(per_qp < 4096.0, "{per_qp:.0} bytes per idle QP ({n} QPs)");
    }
}
