#![no_main]

//! `uroce::fuzzing::perftest_keys`.

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    uroce::fuzzing::perftest_keys(data);
});
