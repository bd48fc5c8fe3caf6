#![no_main]

//! `uroce_tools::fuzzing::perftest_keys`.

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    uroce_tools::fuzzing::perftest_keys(data);
});
