//! `Context::destroy_qp` (ibv_destroy_qp): the QP goes with its queued work and no
//! completions; packets for it afterwards are counted as for an unknown QP; a region it
//! used can be deregistered after; its QPN is not given out again.

mod common;

use common::{all, write_op, Pair};
use uroce::verbs::{QpCaps, QpType, RtsAttr, VerbsError};

#[test]
fn a_destroyed_qp_is_gone_with_its_work() {
    let mut p = Pair::new(RtsAttr::default(), all());
    // Queued and in flight: none of it completes once the QP is destroyed.
    p.post(1, write_op(&p, 0), 4096);
    p.post(2, write_op(&p, 4096), 4096);
    let now = p.now;
    let frames = common::drain(&mut p.a, now);
    assert!(!frames.is_empty(), "the WRITEs went out");
    p.a.destroy_qp(p.qa).unwrap();
    assert!(matches!(p.a.destroy_qp(p.qa), Err(VerbsError::NoSuchQp(_))));
    assert!(p.a.qp_state(p.qa).is_none());
    assert!(p.a.qpns().all(|q| q != p.qa));
    // B answers; the ACKs find no QP on A.
    for f in &frames {
        let _ = p.b.handle_frame(now, f);
    }
    let before = p.a.counters().rx_unknown_qp;
    for f in common::drain(&mut p.b, now) {
        let _ = p.a.handle_frame(now, &f);
    }
    assert!(
        p.a.counters().rx_unknown_qp > before,
        "the ACKs were for a QP that is gone"
    );
    assert!(
        p.wcs_a().is_empty(),
        "no completion for the destroyed QP's work"
    );
    // Nothing uses A's region any more.
    let la = p.la;
    assert!(p.a.dereg_mr(&la).is_ok());
    // A new QP does not take the destroyed one's number.
    let cq = p.cqa;
    let q =
        p.a.create_qp(
            uroce::mem::PdId(0),
            QpCaps {
                qp_type: QpType::Rc,
                send_cq: cq,
                recv_cq: cq,
                max_send_wr: 4,
                max_recv_wr: 4,
            },
        )
        .unwrap();
    assert_ne!(q, p.qa);
}
