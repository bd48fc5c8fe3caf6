//! Helpers shared by the exported functions: the conversions and names that
//! libibverbs answers without a device (rates, enum names).
//!
//! Safe code: the names are `&'static CStr`s; their exported `*_str` calls in
//! `exports.rs` hand C the pointers.

#![deny(unsafe_code)]

use std::ffi::{c_char, c_int, CStr};

/// What the `*_str` calls answer for a value they do not know (and after a panic).
pub(crate) fn unknown() -> *const c_char {
    c"unknown".as_ptr()
}

/// `(enum ibv_rate, multiple of 2.5 Gb/s, Mb/s)`, from `enum ibv_rate` in verbs.h.
const RATES: [(c_int, c_int, c_int); 23] = [
    (2, 1, 2500),
    (5, 2, 5000),
    (3, 4, 10000),
    (6, 8, 20000),
    (4, 12, 30000),
    (7, 16, 40000),
    (8, 24, 60000),
    (9, 32, 80000),
    (10, 48, 120000),
    (11, 0, 14062),
    (12, 0, 56250),
    (13, 0, 112500),
    (14, 0, 168750),
    (15, 10, 25781),
    (16, 40, 103125),
    (17, 80, 206250),
    (18, 120, 309375),
    (19, 0, 28125),
    (20, 20, 53125),
    (21, 160, 425000),
    (22, 240, 637500),
    (23, 320, 850000),
    (24, 480, 1275000),
];

pub(crate) fn rate_to_mult(rate: c_int) -> c_int {
    RATES.iter().find(|r| r.0 == rate).map_or(-1, |r| r.1)
}

pub(crate) fn mult_to_rate(mult: c_int) -> c_int {
    RATES
        .iter()
        .find(|r| r.1 == mult && mult != 0)
        .map_or(0, |r| r.0)
}

pub(crate) fn rate_to_mbps(rate: c_int) -> c_int {
    RATES.iter().find(|r| r.0 == rate).map_or(-1, |r| r.2)
}

pub(crate) fn mbps_to_rate(mbps: c_int) -> c_int {
    RATES.iter().find(|r| r.2 == mbps).map_or(0, |r| r.0)
}

fn name(names: &'static [&'static CStr], index: c_int, unknown: &'static CStr) -> &'static CStr {
    usize::try_from(index)
        .ok()
        .and_then(|i| names.get(i))
        .copied()
        .unwrap_or(unknown)
}

pub(crate) fn node_type_str(node_type: c_int) -> &'static CStr {
    const NAMES: [&CStr; 5] = [
        c"unknown",
        c"InfiniBand channel adapter",
        c"InfiniBand switch",
        c"InfiniBand router",
        c"iWARP NIC",
    ];
    name(&NAMES, node_type, c"unknown")
}

pub(crate) fn port_state_str(state: c_int) -> &'static CStr {
    const NAMES: [&CStr; 6] = [
        c"no state change (NOP)",
        c"down",
        c"init",
        c"armed",
        c"active",
        c"active deferred",
    ];
    name(&NAMES, state, c"unknown")
}

pub(crate) fn event_type_str(event: c_int) -> &'static CStr {
    const NAMES: [&CStr; 20] = [
        c"CQ error",
        c"local work queue catastrophic error",
        c"invalid request local work queue error",
        c"local access violation work queue error",
        c"communication established",
        c"send queue drained",
        c"path migrated",
        c"path migration request error",
        c"local catastrophic error",
        c"port active",
        c"port error",
        c"LID change",
        c"P_Key change",
        c"SM change",
        c"SRQ catastrophic error",
        c"SRQ limit reached",
        c"last WQE reached",
        c"client reregistration",
        c"GID table change",
        c"WQ fatal",
    ];
    name(&NAMES, event, c"unknown")
}

pub(crate) fn wc_status_str(status: c_int) -> &'static CStr {
    const NAMES: [&CStr; 24] = [
        c"success",
        c"local length error",
        c"local QP operation error",
        c"local EE context operation error",
        c"local protection error",
        c"Work Request Flushed Error",
        c"memory management operation error",
        c"bad response error",
        c"local access error",
        c"remote invalid request error",
        c"remote access error",
        c"remote operation error",
        c"transport retry counter exceeded",
        c"RNR retry counter exceeded",
        c"local RDD violation error",
        c"remote invalid RD request",
        c"operation aborted",
        c"invalid EE context number",
        c"invalid EE context state",
        c"fatal error",
        c"response timeout error",
        c"general error",
        c"TM error",
        c"TM software rendezvous",
    ];
    name(&NAMES, status, c"unknown")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_round_trip() {
        for (rate, mult, mbps) in RATES {
            assert_eq!(rate_to_mult(rate), mult);
            assert_eq!(rate_to_mbps(rate), mbps);
            assert_eq!(mbps_to_rate(mbps), rate);
            if mult != 0 {
                assert_eq!(mult_to_rate(mult), rate);
            }
        }
        assert_eq!(rate_to_mult(1), -1);
        assert_eq!(mult_to_rate(3), 0);
    }

    #[test]
    fn names_out_of_range_are_unknown() {
        let s = |c: &'static CStr| c.to_str().unwrap();
        assert_eq!(s(wc_status_str(0)), "success");
        assert_eq!(s(wc_status_str(-1)), "unknown");
        assert_eq!(s(wc_status_str(1000)), "unknown");
        assert_eq!(s(port_state_str(4)), "active");
        assert_eq!(s(event_type_str(19)), "WQ fatal");
    }
}
