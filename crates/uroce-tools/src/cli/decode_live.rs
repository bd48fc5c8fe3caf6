//! `uroce decode -i IFACE [-w FILE] [-c COUNT]`: frames read live from an interface
//! (AF_PACKET, both directions), decoded as they come, optionally saved.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::os::fd::AsRawFd;
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::Context as _;

use uroce::net::packet_socket::packet_socket;
use uroce::pcap::{Frame, LinkType};
use uroce_tools::decode::{record, FrameRecord};
use uroce_tools::decode_views::Filter;

/// A pcap file with nanosecond timestamps, written as frames come.
struct PcapOut(BufWriter<File>);

impl PcapOut {
    fn create(path: &Path) -> anyhow::Result<Self> {
        let mut w = BufWriter::new(File::create(path).with_context(|| path.display().to_string())?);
        w.write_all(&0xa1b2_3c4du32.to_le_bytes())?; // nanosecond pcap
        w.write_all(&2u16.to_le_bytes())?;
        w.write_all(&4u16.to_le_bytes())?;
        for v in [0u32, 0, 262_144, 1] {
            w.write_all(&v.to_le_bytes())?;
        }
        w.flush()?;
        Ok(Self(w))
    }

    fn frame(&mut self, ts_ns: u64, data: &[u8], orig_len: usize) -> std::io::Result<()> {
        let sec = (ts_ns / 1_000_000_000) as u32;
        let ns = (ts_ns % 1_000_000_000) as u32;
        for v in [sec, ns, data.len() as u32, orig_len as u32] {
            self.0.write_all(&v.to_le_bytes())?;
        }
        self.0.write_all(data)?;
        self.0.flush()
    }
}

/// Reads frames from `iface` until `count` frames that pass `filter` (as tcpdump's `-c`
/// counts), Ctrl-C, or `take` says stop; each frame that passes is saved to `write`
/// (when given) and handed to `take`.
pub fn run(
    iface: &str,
    filter: &Filter,
    write: Option<&Path>,
    count: Option<usize>,
    take: &mut dyn FnMut(&FrameRecord) -> bool,
) -> anyhow::Result<()> {
    let fd = packet_socket(iface, libc::ETH_P_ALL as u16, false).map_err(|e| {
        let why = if e.kind() == std::io::ErrorKind::PermissionDenied {
            " (an AF_PACKET socket needs root or CAP_NET_RAW)"
        } else {
            ""
        };
        anyhow::anyhow!("cannot read interface {iface}{why}: {e}")
    })?;
    let mut out = write.map(PcapOut::create).transpose()?;
    uroce::datapath::catch_interrupts();
    let mut buf = vec![0u8; 65536];
    let mut n = 0usize;
    while !uroce::datapath::interrupted() && count.is_none_or(|c| n < c) {
        let mut pfd = libc::pollfd {
            fd: fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        if unsafe { libc::poll(&mut pfd, 1, 200) } <= 0 {
            continue;
        }
        // SAFETY: `buf` is writable for its length; MSG_TRUNC makes the call return the
        // frame's real length when it is longer than the buffer.
        let got = unsafe {
            libc::recv(
                fd.as_raw_fd(),
                buf.as_mut_ptr().cast(),
                buf.len(),
                libc::MSG_DONTWAIT | libc::MSG_TRUNC,
            )
        };
        if got <= 0 {
            continue;
        }
        let orig_len = got as usize;
        let data = &buf[..orig_len.min(buf.len())];
        let ts = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        let frame = Frame {
            link: LinkType::Ethernet,
            data,
            orig_len: orig_len as u32,
            ts_ns: Some(ts),
        };
        let r = record(n + 1, &frame);
        if !filter.matches(&r) {
            continue;
        }
        n += 1;
        if let Some(o) = &mut out {
            o.frame(ts, data, orig_len)
                .context("writing the capture file")?;
        }
        if !take(&r) {
            break;
        }
    }
    Ok(())
}
