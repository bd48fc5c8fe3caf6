//! The fuzz entry points that reach the tools' parsers (the decoder over whole capture
//! files, perftest's keys message); the library's own are in `uroce::fuzzing`. Each takes
//! arbitrary bytes and must never panic.

use uroce::pcap::Reader;

use crate::decode::{human_line, record};

/// Capture files: reading and decoding every frame never panics; JSON is valid; the
/// statistics and the plot of whatever was read never panic either (frames in any
/// order of time).
pub fn pcap(data: &[u8]) {
    if let Ok(reader) = Reader::new(data) {
        let mut stats = crate::decode_views::Stats::default();
        for (i, f) in reader.enumerate().take(10_000) {
            match f {
                Ok(frame) => {
                    let r = record(i + 1, &frame);
                    let j = r.to_json();
                    assert!(serde_json::from_str::<serde_json::Value>(&j).is_ok());
                    let _ = human_line(&r);
                    stats.add(&r, r.wire_len, r.time_ns);
                }
                Err(e) => {
                    let _ = e.to_string();
                    break;
                }
            }
        }
        let _ = stats.table();
        assert!(stats.svg().ends_with("</svg>\n"));
    }
}

/// perftest's 108-byte keys message: what parses writes back to the same keys.
pub fn perftest_keys(data: &[u8]) {
    if let Ok(k) = crate::perftest::Keys::from_wire(data) {
        let again = crate::perftest::Keys::from_wire(&k.to_wire())
            .expect("keys written by to_wire must parse");
        assert_eq!(again, k);
    }
}
