#![no_main]

//! `uroce::fuzzing::header` with selector 2: the input is the header buffer alone.

use libfuzzer_sys::fuzz_target;

const SELECTOR: u8 = 2;

fuzz_target!(|data: &[u8]| {
    let mut input = Vec::with_capacity(data.len() + 1);
    input.push(SELECTOR);
    input.extend_from_slice(data);
    uroce::fuzzing::header(&input);
});
