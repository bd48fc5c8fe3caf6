//! `uroce decode FILE [--json] [--check]`.

use std::io::{BufWriter, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;

use uroce::pcap::Reader;
use uroce_tools::decode::{human_line, record};

/// Arguments of `uroce decode`.
#[derive(clap::Args)]
pub struct Args {
    /// Capture file (pcap or pcapng; Ethernet, raw IP or Linux cooked link types).
    file: PathBuf,
    /// One JSON object per frame instead of a human line.
    #[arg(long)]
    json: bool,
    /// Exit with status 1 if any frame sent to UDP port 4791 is not a valid RoCEv2
    /// packet with a good ICRC.
    #[arg(long)]
    check: bool,
}

/// Runs the command; `Err` for a file that cannot be read at all.
pub fn run(a: Args) -> anyhow::Result<ExitCode> {
    let data = std::fs::read(&a.file).with_context(|| a.file.display().to_string())?;
    let reader = Reader::new(&data).with_context(|| a.file.display().to_string())?;
    let stdout = std::io::stdout();
    let mut out = BufWriter::new(stdout.lock());
    let mut bad_roce = 0usize;
    for (i, frame) in reader.enumerate() {
        let frame = match frame {
            Ok(f) => f,
            Err(e) => {
                let _ = out.flush();
                return Err(e).with_context(|| a.file.display().to_string());
            }
        };
        let r = record(i + 1, &frame);
        if r.is_roce() && !r.ok {
            bad_roce += 1;
        }
        let line = if a.json { r.to_json() } else { human_line(&r) };
        if writeln!(out, "{line}").is_err() {
            return Ok(ExitCode::SUCCESS); // reader went away (a pipe to head)
        }
    }
    let _ = out.flush();
    if a.check && bad_roce > 0 {
        eprintln!("uroce: {bad_roce} RoCEv2 frame(s) failed to decode or verify");
        return Ok(ExitCode::from(1));
    }
    Ok(ExitCode::SUCCESS)
}
