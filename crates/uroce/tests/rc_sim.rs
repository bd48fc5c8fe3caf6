//! RC end to end over the simulated link.

use uroce::sim::rc::{run, Mix, SimConfig};
use uroce::sim::LinkConfig;

fn cfg(ops: usize, loss: f64, seed: u64) -> SimConfig {
    SimConfig {
        ops,
        size: (1, 20_000),
        seed,
        link: LinkConfig {
            loss,
            ..LinkConfig::default()
        },
        ..SimConfig::default()
    }
}

#[test]
fn lossless_mix_completes_and_verifies() {
    let r = run(&cfg(300, 0.0, 1));
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    assert_eq!(r.ops_completed, 300);
    assert_eq!(r.retransmits, 0);
}

#[test]
fn lossy_mix_completes_and_verifies() {
    let r = run(&cfg(300, 0.1, 2));
    assert!(
        r.errors.is_empty(),
        "{:?}",
        &r.errors[..r.errors.len().min(5)]
    );
    assert_eq!(r.ops_completed, 300);
    assert!(r.retransmits > 0);
}

#[test]
fn every_kind_alone() {
    for (name, mix) in [
        (
            "send",
            Mix {
                send: 1,
                write: 0,
                read: 0,
                atomic: 0,
            },
        ),
        (
            "write",
            Mix {
                send: 0,
                write: 1,
                read: 0,
                atomic: 0,
            },
        ),
        (
            "read",
            Mix {
                send: 0,
                write: 0,
                read: 1,
                atomic: 0,
            },
        ),
        (
            "atomic",
            Mix {
                send: 0,
                write: 0,
                read: 0,
                atomic: 1,
            },
        ),
    ] {
        for loss in [0.0, 0.2] {
            let r = run(&SimConfig {
                mix,
                ..cfg(100, loss, 3)
            });
            assert!(
                r.errors.is_empty(),
                "{name} loss {loss}: {:?}",
                &r.errors[..r.errors.len().min(5)]
            );
            assert_eq!(r.ops_completed, 100, "{name}");
        }
    }
}
