#![no_main]

//! `uroce::fuzzing::mad`: the payload of a UD SEND to QP 1 (a MAD), through the MAD
//! header and CM message views.

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    uroce::fuzzing::mad(data);
});
