//! UD and UC over a damaging link: messages may be lost, never delivered damaged,
//! partial or (UC) twice.

use proptest::prelude::*;
use uroce::sim::dgram::{run, DgramConfig};
use uroce::sim::LinkConfig;
use uroce::verbs::{Mtu, QpType};

proptest! {
    #![proptest_config(ProptestConfig { cases: 16, ..ProptestConfig::default() })]

    #[test]
    fn nothing_damaged_or_partial_is_delivered(
        uc in any::<bool>(),
        seed in any::<u64>(),
        loss in 0.0f64..0.3,
        corrupt in 0.0f64..0.2,
        dup in 0.0f64..0.05,
        reorder in 0.0f64..0.05,
        max in 1u32..12_000,
    ) {
        let cfg = DgramConfig {
            transport: if uc { QpType::Uc } else { QpType::Ud },
            messages: 300,
            size: (0, max),
            link: LinkConfig { loss, corrupt, dup, reorder, ..LinkConfig::default() },
            seed,
            mtu: Mtu::M1024,
            window: 16,
        };
        let r = run(&cfg);
        prop_assert!(r.errors.is_empty(), "{:?}", &r.errors[..r.errors.len().min(3)]);
        prop_assert_eq!(r.sent, 300);
        prop_assert_eq!(r.delivered + r.dropped, r.sent);
        if !uc {
            prop_assert!(r.delivered > 0);
        }
    }
}

#[test]
fn lossless_delivers_everything() {
    for t in [QpType::Ud, QpType::Uc] {
        let r = run(&DgramConfig {
            transport: t,
            messages: 500,
            size: (0, 9000),
            link: LinkConfig::default(),
            seed: 5,
            mtu: Mtu::M4096,
            window: 32,
        });
        assert!(r.errors.is_empty(), "{:?}", r.errors);
        assert_eq!(r.delivered, 500, "{t:?}");
    }
}

#[test]
fn corruption_is_rejected_not_delivered() {
    for t in [QpType::Ud, QpType::Uc] {
        let r = run(&DgramConfig {
            transport: t,
            messages: 2000,
            size: (1, 3000),
            link: LinkConfig {
                corrupt: 0.2,
                ..LinkConfig::default()
            },
            seed: 9,
            mtu: Mtu::M1024,
            window: 32,
        });
        assert!(r.errors.is_empty(), "{:?}", r.errors);
        assert!(r.corrupted_rejected > 100, "{t:?}: {r:?}");
        assert!(r.dropped > 100);
    }
}
