#![no_main]

//! `uroce::fuzzing::neighbour`.

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    uroce::fuzzing::neighbour(data);
});
