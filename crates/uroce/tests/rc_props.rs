//! Property: for random operation mixes over any seeded link with up to 30% loss (plus
//! duplication, reordering and corruption), every operation completes exactly once, in
//! order, with the right data, and every atomic runs exactly once (the simulator checks
//! each result and the final value against a model).

use proptest::prelude::*;
use uroce::sim::rc::{run, Mix, SimConfig};
use uroce::sim::LinkConfig;
use uroce::verbs::Mtu;

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn every_operation_completes_once_in_order_with_correct_data(
        seed in any::<u64>(),
        loss in 0.0f64..=0.3,
        dup in 0.0f64..=0.05,
        reorder in 0.0f64..=0.05,
        corrupt in 0.0f64..=0.05,
        weights in (0u32..4, 0u32..4, 0u32..4, 0u32..4),
        max_size in 1u32..12_000,
        mtu in prop::sample::select(vec![Mtu::M256, Mtu::M1024, Mtu::M4096]),
        window in 1usize..24,
        psn_near_wrap in any::<bool>(),
    ) {
        let (send, write, read, atomic) = weights;
        let mix = if send + write + read + atomic == 0 {
            Mix::default()
        } else {
            Mix { send, write, read, atomic }
        };
        let cfg = SimConfig {
            ops: 40,
            mix,
            size: (0, max_size),
            seed,
            mtu,
            window,
            recv_depth: window.div_ceil(2), // fewer receives than sends in flight: RNR NAKs
            client_psn: if psn_near_wrap { 0xff_fff0 } else { (seed as u32) & 0xff_ffff },
            link: LinkConfig { loss, dup, reorder, corrupt, ..LinkConfig::default() },
            ..SimConfig::default()
        };
        let r = run(&cfg);
        prop_assert!(r.errors.is_empty(), "{:?}", &r.errors[..r.errors.len().min(5)]);
        prop_assert_eq!(r.ops_completed, 40);
        prop_assert_eq!(r.ops_failed, 0);
    }
}
