//! Replays the cargo-fuzz corpus through the `uroce::fuzzing` and `uroce_tools::fuzzing` entry points, so every
//! `cargo test` checks the seeds and past findings without a nightly toolchain or
//! libFuzzer.
//!
//! For each target it runs every file in `fuzz/corpus/<target>/` (which must not be
//! empty), `fuzz/artifacts-regression/<target>/` (minimised crashes kept as regression
//! inputs) and, when present, `fuzz/artifacts/<target>/` (where `cargo fuzz` drops new
//! crashes; not committed). The `hdr_*` targets prepend their selector byte, as their
//! fuzz targets do, so their files hold the header bytes alone.

use std::fs;
use std::panic;
use std::path::{Path, PathBuf};

use uroce::fuzzing;

/// How a target feeds its input to the library.
#[derive(Clone, Copy)]
enum Entry {
    /// Straight to this function.
    Plain(fn(&[u8])),
    /// To `fuzzing::header`, after this selector byte.
    Header(u8),
}

impl Entry {
    fn run(self, data: &[u8]) {
        match self {
            Self::Plain(f) => f(data),
            Self::Header(selector) => {
                let mut input = Vec::with_capacity(data.len() + 1);
                input.push(selector);
                input.extend_from_slice(data);
                fuzzing::header(&input);
            }
        }
    }
}

macro_rules! targets {
    ($($test:ident: $name:literal => $entry:expr;)*) => {
        /// Every fuzz target, with its entry point.
        const TARGETS: &[(&str, Entry)] = &[$(($name, $entry)),*];

        $(
            #[test]
            fn $test() {
                replay($name, $entry);
            }
        )*
    };
}

targets! {
    frame: "frame" => Entry::Plain(fuzzing::frame);
    ip_packet: "ip_packet" => Entry::Plain(fuzzing::ip_packet);
    pcap: "pcap" => Entry::Plain(uroce_tools::fuzzing::pcap);
    hdr_ethernet: "hdr_ethernet" => Entry::Header(0);
    hdr_ipv4: "hdr_ipv4" => Entry::Header(1);
    hdr_ipv6: "hdr_ipv6" => Entry::Header(2);
    hdr_udp: "hdr_udp" => Entry::Header(3);
    hdr_bth: "hdr_bth" => Entry::Header(4);
    hdr_reth: "hdr_reth" => Entry::Header(5);
    hdr_aeth: "hdr_aeth" => Entry::Header(6);
    hdr_deth: "hdr_deth" => Entry::Header(7);
    hdr_atomic_eth: "hdr_atomic_eth" => Entry::Header(8);
    hdr_atomic_ack_eth: "hdr_atomic_ack_eth" => Entry::Header(9);
    hdr_grh: "hdr_grh" => Entry::Header(10);
    hdr_immdt: "hdr_immdt" => Entry::Header(11);
    neighbour: "neighbour" => Entry::Plain(fuzzing::neighbour);
    mad: "mad" => Entry::Plain(fuzzing::mad);
    cm: "cm" => Entry::Plain(fuzzing::cm);
    perftest_keys: "perftest_keys" => Entry::Plain(uroce_tools::fuzzing::perftest_keys);
}

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz")
}

/// The regular, non-hidden files of `dir`, sorted; empty if `dir` does not exist.
fn files(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut v: Vec<PathBuf> = entries
        .map(|e| e.expect("read corpus directory").path())
        .filter(|p| p.is_file())
        .filter(|p| !p.file_name().unwrap().to_string_lossy().starts_with('.'))
        .collect();
    v.sort();
    v
}

fn hex(data: &[u8]) -> String {
    const SHOWN: usize = 256;
    let mut s: String = data
        .iter()
        .take(SHOWN)
        .map(|b| format!("{b:02x}"))
        .collect();
    if data.len() > SHOWN {
        s.push_str("...");
    }
    s
}

fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "(non-string panic payload)".to_string()
    }
}

fn replay(target: &str, entry: Entry) {
    let fuzz = fuzz_dir();
    let corpus = files(&fuzz.join("corpus").join(target));
    assert!(
        !corpus.is_empty(),
        "fuzz/corpus/{target}/ is empty or missing (regenerate with fuzz/make_seeds.py)"
    );
    let mut inputs = corpus;
    inputs.extend(files(&fuzz.join("artifacts-regression").join(target)));
    inputs.extend(files(&fuzz.join("artifacts").join(target)));

    let mut failures = Vec::new();
    for path in &inputs {
        let data = fs::read(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
        if let Err(p) = panic::catch_unwind(|| entry.run(&data)) {
            failures.push(format!(
                "{} ({} bytes): {}\n    input: {}",
                path.display(),
                data.len(),
                panic_message(&*p),
                hex(&data)
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{target}: {} of {} inputs panicked:\n{}",
        failures.len(),
        inputs.len(),
        failures.join("\n")
    );
}

/// Every directory under `fuzz/corpus/`, `fuzz/artifacts-regression/` and
/// `fuzz/artifacts/` names a target (a misspelt directory would never be replayed), and
/// every target has a fuzz target source with the same selector.
#[test]
fn directories_and_targets_agree() {
    let fuzz = fuzz_dir();
    for parent in ["corpus", "artifacts-regression", "artifacts"] {
        let Ok(entries) = fs::read_dir(fuzz.join(parent)) else {
            continue;
        };
        for e in entries {
            let e = e.expect("read fuzz directory");
            if !e.path().is_dir() {
                continue;
            }
            let name = e.file_name().to_string_lossy().into_owned();
            assert!(
                TARGETS.iter().any(|(t, _)| *t == name),
                "fuzz/{parent}/{name}/ is not a fuzz target"
            );
        }
    }
    let manifest = fs::read_to_string(fuzz.join("Cargo.toml")).expect("read fuzz/Cargo.toml");
    for (target, entry) in TARGETS {
        assert!(
            manifest.contains(&format!("name = \"{target}\"")),
            "fuzz/Cargo.toml has no [[bin]] named {target}"
        );
        let src = fuzz.join("fuzz_targets").join(format!("{target}.rs"));
        let src =
            fs::read_to_string(&src).unwrap_or_else(|e| panic!("read {}: {e}", src.display()));
        if let Entry::Header(selector) = entry {
            assert!(
                src.contains(&format!("const SELECTOR: u8 = {selector};")),
                "fuzz/fuzz_targets/{target}.rs does not use selector {selector}"
            );
        }
    }
}
