//! The DCQCN paper's claims, on the simulated switch (the real reaction and notification
//! point code, the paper's parameters, 40 Gb/s, Kmin 5 KB / Kmax 200 KB / Pmax 1%).

use std::time::Duration;

use uroce::sim::cc::{run, CcConfig, Pfc};

fn cfg(flows: usize, stagger_ms: u64, duration_ms: u64) -> CcConfig {
    CcConfig {
        stagger: Duration::from_millis(stagger_ms),
        duration: Duration::from_millis(duration_ms),
        ..CcConfig::paper(flows)
    }
}

#[test]
fn two_flows_converge_to_a_fair_share() {
    let r = run(&cfg(2, 10, 40));
    assert!(r.jain_second_half >= 0.95, "Jain {}", r.jain_second_half);
    assert!(
        r.utilisation_second_half >= 0.9,
        "utilisation {}",
        r.utilisation_second_half
    );
    assert!(r.converge_us.is_some());
    assert_eq!(r.drops, 0);
}

#[test]
fn eight_flows_converge_to_a_fair_share() {
    let r = run(&cfg(8, 2, 50));
    assert!(r.jain_second_half >= 0.95, "Jain {}", r.jain_second_half);
    assert!(
        r.utilisation_second_half >= 0.9,
        "utilisation {}",
        r.utilisation_second_half
    );
    assert_eq!(r.drops, 0);
}

#[test]
fn incast_queue_stays_bounded_at_line_rate() {
    let c = cfg(8, 0, 30);
    let r = run(&c);
    assert_eq!(r.drops, 0, "no buffer overflow with the paper's parameters");
    assert!(
        r.max_queue_bytes < c.buffer_bytes / 2,
        "max queue {}",
        r.max_queue_bytes
    );
    assert!(
        r.mean_queue_bytes_second_half < 200_000.0,
        "queue {}",
        r.mean_queue_bytes_second_half
    );
    assert!(
        r.utilisation_second_half >= 0.9,
        "utilisation {}",
        r.utilisation_second_half
    );
}

#[test]
fn without_dcqcn_the_incast_overflows_or_sits_on_a_deep_queue() {
    let mut c = cfg(8, 0, 20);
    c.dcqcn = None;
    let none = run(&c);
    assert!(none.drops > 0, "no control: the buffer overflows");
    assert!(
        none.jain_second_half < 0.95,
        "no control: drop-tail is unfair here"
    );
    c.pfc = Some(Pfc {
        xoff_bytes: 400_000,
        xon_bytes: 200_000,
    });
    let pfc = run(&c);
    assert_eq!(pfc.drops, 0, "PFC alone is lossless");
    let dcqcn = run(&cfg(8, 0, 20));
    assert!(
        pfc.mean_queue_bytes_second_half > 2.0 * dcqcn.mean_queue_bytes_second_half,
        "PFC alone keeps a standing queue: {} vs {}",
        pfc.mean_queue_bytes_second_half,
        dcqcn.mean_queue_bytes_second_half
    );
}

/// The bottleneck never sends faster than its line rate: with 1086-byte packets at
/// 100 Gb/s (86.88 ns each) a port clock in whole nanoseconds would serialise in 86 ns and
/// report 1.010 of the line as carried. Saturated by 12 flows, the second half carries
/// nearly all of the line (95% or more within 20 ms), never more.
#[test]
fn utilisation_never_exceeds_the_line_rate() {
    for flows in [1, 12] {
        let c = CcConfig {
            line_rate_bps: 100e9,
            duration: std::time::Duration::from_millis(20),
            ..CcConfig::paper(flows)
        };
        let u = run(&c).utilisation_second_half;
        assert!(u <= 1.0 + 1e-3, "{flows} flows: utilisation {u}");
        if flows > 1 {
            assert!(u >= 0.95, "{flows} flows: utilisation {u}");
        }
    }
}
