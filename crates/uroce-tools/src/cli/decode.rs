//! `uroce decode FILE [--json] [--check] [--qp N] [--opcode NAME] [--ip ADDR] [--stats]
//! [--plot FILE.svg]`, or live: `uroce decode -i IFACE [-w FILE] [-c COUNT] ...`.

use std::io::{BufWriter, Write};
use std::net::IpAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;

use uroce::pcap::Reader;
use uroce_tools::decode::{human_line, record, FrameRecord};
use uroce_tools::decode_views::{parse_number, Filter, Stats};

/// Arguments of `uroce decode`.
#[derive(clap::Args)]
pub struct Args {
    /// Capture file (pcap or pcapng; Ethernet, raw IP or Linux cooked link types).
    #[arg(required_unless_present = "interface")]
    file: Option<PathBuf>,
    /// One JSON object per frame instead of a human line (with --stats: one per QP).
    #[arg(long)]
    json: bool,
    /// Exit with status 1 if any frame sent to UDP port 4791 is not a valid RoCEv2
    /// packet with a good ICRC.
    #[arg(long)]
    check: bool,
    /// Only frames to this QP (BTH destination QP) or from it (UD: DETH source QP);
    /// decimal or 0x hex.
    #[arg(long, value_parser = parse_qp)]
    qp: Option<u32>,
    /// Only frames with this opcode: its name (RC_SEND_ONLY), its name without the
    /// transport prefix (SEND_ONLY), or its value (0x04).
    #[arg(long)]
    opcode: Option<String>,
    /// Only frames from or to this IP address.
    #[arg(long)]
    ip: Option<IpAddr>,
    /// Instead of the frames, a table per QP (destination address and QP): frames,
    /// bytes, PSN range, retransmissions (PSNs sent again), PSN sequence and RNR NAKs,
    /// CE marks, CNPs, READ / atomic round trips.
    #[arg(long)]
    stats: bool,
    /// Also draw each QP's PSNs against time, with retransmissions, NAKs and CNPs marked,
    /// into this SVG file.
    #[arg(long, value_name = "FILE.svg")]
    plot: Option<PathBuf>,
    /// Read frames live from this interface (AF_PACKET, both directions; needs
    /// CAP_NET_RAW) instead of a file; stops after --count frames or at Ctrl-C. Frame
    /// numbers count the frames that pass the filters.
    #[arg(
        short = 'i',
        long = "interface",
        value_name = "IFACE",
        conflicts_with = "file"
    )]
    interface: Option<String>,
    /// Live: also save the frames that pass the filters into this pcap file
    /// (nanosecond timestamps), as they come.
    #[arg(short = 'w', value_name = "FILE")]
    write: Option<PathBuf>,
    /// Live: stop after this many frames that pass the filters.
    #[arg(short = 'c', long)]
    count: Option<usize>,
}

fn parse_qp(s: &str) -> Result<u32, String> {
    parse_number(s)
        .filter(|&v| v <= 0x00ff_ffff)
        .map(|v| v as u32)
        .ok_or_else(|| format!("{s:?} is not a QP number (24 bits, decimal or 0x hex)"))
}

/// What happens to each decoded frame.
struct Sink<W: Write> {
    out: W,
    json: bool,
    /// Print the frames (not with --stats).
    print: bool,
    filter: Filter,
    /// For --stats and --plot.
    stats: Option<Stats>,
    bad_roce: usize,
}

impl<W: Write> Sink<W> {
    /// Takes one record; false once the reader of stdout has gone away.
    fn take(&mut self, r: &FrameRecord) -> bool {
        if r.is_roce() && !r.ok {
            self.bad_roce += 1;
        }
        if !self.filter.matches(r) {
            return true;
        }
        if let Some(s) = &mut self.stats {
            s.add(r, r.wire_len, r.time_ns);
        }
        if self.print {
            let line = if self.json {
                r.to_json()
            } else {
                human_line(r)
            };
            return writeln!(self.out, "{line}").is_ok();
        }
        true
    }
}

/// Runs the command; `Err` for a file that cannot be read at all.
pub fn run(a: Args) -> anyhow::Result<ExitCode> {
    if a.interface.is_none() && (a.write.is_some() || a.count.is_some()) {
        anyhow::bail!("-w and -c go with -i IFACE (reading an interface live), not with a file");
    }
    let stdout = std::io::stdout();
    let mut sink = Sink {
        out: BufWriter::new(stdout.lock()),
        json: a.json,
        print: !a.stats,
        filter: Filter {
            qp: a.qp,
            opcode: a.opcode.clone(),
            ip: a.ip,
        },
        stats: (a.stats || a.plot.is_some()).then(Stats::default),
        bad_roce: 0,
    };
    let fed = feed_with(&a, &mut |r: &FrameRecord| sink.take(r));
    if let Err(e) = fed {
        let _ = sink.out.flush();
        return Err(e);
    }
    finish(&a, sink)
}

/// Decodes every frame of the file or the interface and hands it to `take` until it
/// says stop.
fn feed_with(a: &Args, take: &mut dyn FnMut(&FrameRecord) -> bool) -> anyhow::Result<()> {
    if let Some(iface) = &a.interface {
        let filter = Filter {
            qp: a.qp,
            opcode: a.opcode.clone(),
            ip: a.ip,
        };
        return crate::cli::decode_live::run(iface, &filter, a.write.as_deref(), a.count, take);
    }
    let Some(file) = &a.file else {
        anyhow::bail!("no capture file and no interface");
    };
    let data = std::fs::read(file).with_context(|| file.display().to_string())?;
    let reader = Reader::new(&data).with_context(|| file.display().to_string())?;
    for (i, frame) in reader.enumerate() {
        let frame = frame.with_context(|| file.display().to_string())?;
        if !take(&record(i + 1, &frame)) {
            break;
        }
    }
    Ok(())
}

fn finish<W: Write>(a: &Args, mut sink: Sink<W>) -> anyhow::Result<ExitCode> {
    if let Some(s) = &sink.stats {
        if let Some(path) = &a.plot {
            std::fs::write(path, s.svg()).with_context(|| path.display().to_string())?;
        }
        if a.stats {
            if a.json {
                for q in s.qps() {
                    let j = serde_json::to_string(q).unwrap_or_default();
                    let _ = writeln!(sink.out, "{j}");
                }
            } else {
                let _ = write!(sink.out, "{}", s.table());
            }
        }
    }
    let _ = sink.out.flush();
    if a.check && sink.bad_roce > 0 {
        eprintln!(
            "uroce: {} RoCEv2 frame(s) failed to decode or verify",
            sink.bad_roce
        );
        return Ok(ExitCode::from(1));
    }
    Ok(ExitCode::SUCCESS)
}
