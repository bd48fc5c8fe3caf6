#![no_main]

//! `uroce::fuzzing::cm`: the connection manager's state machine, two endpoints driven by
//! a script of MADs from the input, timers, application calls and lossy delivery.

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    uroce::fuzzing::cm(data);
});
