//! Reading capture files: classic pcap (both byte orders, micro- and nanosecond) and
//! pcapng (sections of either byte order, several interfaces, enhanced / simple /
//! obsolete packet blocks). The whole file is in memory; frames borrow from it.
//!
//! A damaged file is an error that says where, after the frames before the damage.

#![forbid(unsafe_code)]

/// The link layer a captured frame starts with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkType {
    /// Ethernet II (LINKTYPE_ETHERNET, 1).
    Ethernet,
    /// A raw IPv4 or IPv6 packet (LINKTYPE_RAW 101, DLT_RAW 12/14, IPV4 228, IPV6 229).
    RawIp,
    /// Linux cooked capture v1 (`tcpdump -i any`, 113).
    LinuxSll,
    /// Linux cooked capture v2 (276).
    LinuxSll2,
    /// Anything else, by its number.
    Other(u32),
}

impl LinkType {
    fn from_u32(v: u32) -> Self {
        match v {
            1 => Self::Ethernet,
            12 | 14 | 101 | 228 | 229 => Self::RawIp,
            113 => Self::LinuxSll,
            276 => Self::LinuxSll2,
            n => Self::Other(n),
        }
    }
}

/// One captured frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Frame<'a> {
    /// Link layer of `data`.
    pub link: LinkType,
    /// The captured bytes (possibly fewer than were on the wire).
    pub data: &'a [u8],
    /// Length of the frame on the wire.
    pub orig_len: u32,
    /// When it was captured, in nanoseconds since the epoch (`None` for a pcapng simple
    /// packet block, which has no time).
    pub ts_ns: Option<u64>,
}

/// A capture file that cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CaptureError {
    /// Not a pcap or pcapng file.
    #[error("not a pcap or pcapng file (magic {magic:#010x})")]
    UnknownFormat { magic: u32 },
    /// The file ends inside a header or record.
    #[error("capture truncated at byte {offset}: {what} needs {need} bytes, {have} remain")]
    Truncated {
        what: &'static str,
        offset: usize,
        need: usize,
        have: usize,
    },
    /// A header or block that makes no sense.
    #[error("corrupt capture at byte {offset}: {why}")]
    Corrupt { offset: usize, why: String },
}

/// Frames larger than this are taken as a sign of corruption.
const MAX_FRAME: usize = 256 * 1024;

#[derive(Debug, Clone, Copy)]
enum Endian {
    Little,
    Big,
}

impl Endian {
    fn u16(self, b: &[u8]) -> u16 {
        let a = [b[0], b[1]];
        match self {
            Self::Little => u16::from_le_bytes(a),
            Self::Big => u16::from_be_bytes(a),
        }
    }
    fn u32(self, b: &[u8]) -> u32 {
        let a = [b[0], b[1], b[2], b[3]];
        match self {
            Self::Little => u32::from_le_bytes(a),
            Self::Big => u32::from_be_bytes(a),
        }
    }
}

fn need(what: &'static str, data: &[u8], offset: usize, n: usize) -> Result<(), CaptureError> {
    let have = data.len().saturating_sub(offset);
    if have < n {
        Err(CaptureError::Truncated {
            what,
            offset,
            need: n,
            have,
        })
    } else {
        Ok(())
    }
}

/// An iterator over the frames of a capture file.
#[derive(Debug, Clone)]
pub struct Reader<'a> {
    data: &'a [u8],
    pos: usize,
    format: Format,
    failed: bool,
}

#[derive(Debug, Clone)]
enum Format {
    Pcap {
        endian: Endian,
        link: LinkType,
        /// Nanosecond timestamps (magic 0xa1b23c4d) rather than microseconds.
        nanos: bool,
    },
    Pcapng {
        endian: Endian,
        /// Each interface's link type and timestamp units per second.
        links: Vec<(LinkType, u64)>,
    },
}

const PCAPNG_SHB: u32 = 0x0a0d_0d0a;
const PCAPNG_BOM: u32 = 0x1a2b_3c4d;

impl<'a> Reader<'a> {
    /// Reads the file header; frames come from iterating.
    pub fn new(data: &'a [u8]) -> Result<Self, CaptureError> {
        need("file header", data, 0, 4)?;
        let magic_le = u32::from_le_bytes([data[0], data[1], data[2], data[3]]);
        match magic_le {
            0xa1b2_c3d4 => Self::pcap(data, Endian::Little, false),
            0xa1b2_3c4d => Self::pcap(data, Endian::Little, true),
            0xd4c3_b2a1 => Self::pcap(data, Endian::Big, false),
            0x4d3c_b2a1 => Self::pcap(data, Endian::Big, true),
            PCAPNG_SHB => Ok(Self {
                data,
                pos: 0,
                format: Format::Pcapng {
                    endian: Endian::Little,
                    links: Vec::new(),
                },
                failed: false,
            }),
            magic => Err(CaptureError::UnknownFormat { magic }),
        }
    }

    fn pcap(data: &'a [u8], endian: Endian, nanos: bool) -> Result<Self, CaptureError> {
        need("pcap file header", data, 0, 24)?;
        let major = endian.u16(&data[4..]);
        if major != 2 {
            return Err(CaptureError::Corrupt {
                offset: 4,
                why: format!("pcap version {major}, expected 2"),
            });
        }
        let link = LinkType::from_u32(endian.u32(&data[20..]) & 0x03ff_ffff);
        Ok(Self {
            data,
            pos: 24,
            format: Format::Pcap {
                endian,
                link,
                nanos,
            },
            failed: false,
        })
    }

    fn next_pcap(
        &mut self,
        endian: Endian,
        link: LinkType,
        nanos: bool,
    ) -> Result<Option<Frame<'a>>, CaptureError> {
        let (d, at) = (self.data, self.pos);
        if at == d.len() {
            return Ok(None);
        }
        need("pcap record header", d, at, 16)?;
        let incl = endian.u32(&d[at + 8..]) as usize;
        let orig_len = endian.u32(&d[at + 12..]);
        if incl > MAX_FRAME {
            return Err(CaptureError::Corrupt {
                offset: at + 8,
                why: format!("record length {incl} exceeds {MAX_FRAME}"),
            });
        }
        need("pcap record data", d, at + 16, incl)?;
        self.pos = at + 16 + incl;
        let sec = u64::from(endian.u32(&d[at..]));
        let frac = u64::from(endian.u32(&d[at + 4..]));
        let frac_ns = if nanos {
            frac
        } else {
            frac.saturating_mul(1000)
        };
        Ok(Some(Frame {
            link,
            data: &d[at + 16..at + 16 + incl],
            orig_len,
            ts_ns: Some(sec.saturating_mul(1_000_000_000).saturating_add(frac_ns)),
        }))
    }

    fn next_pcapng(&mut self) -> Result<Option<Frame<'a>>, CaptureError> {
        loop {
            let (d, at) = (self.data, self.pos);
            if at == d.len() {
                return Ok(None);
            }
            need("pcapng block header", d, at, 12)?;
            let raw_type = u32::from_le_bytes([d[at], d[at + 1], d[at + 2], d[at + 3]]);
            if raw_type == PCAPNG_SHB {
                need("pcapng section header", d, at, 16)?;
                let bom = &d[at + 8..at + 12];
                let endian = match u32::from_le_bytes([bom[0], bom[1], bom[2], bom[3]]) {
                    PCAPNG_BOM => Endian::Little,
                    0x4d3c_2b1a => Endian::Big,
                    m => {
                        return Err(CaptureError::Corrupt {
                            offset: at + 8,
                            why: format!("bad pcapng byte-order magic {m:#010x}"),
                        })
                    }
                };
                if let Format::Pcapng { endian: e, links } = &mut self.format {
                    *e = endian;
                    links.clear();
                }
            }
            let Format::Pcapng { endian, links } = &mut self.format else {
                return Ok(None);
            };
            let endian = *endian;
            let btype = endian.u32(&d[at..]);
            let blen = endian.u32(&d[at + 4..]) as usize;
            if blen < 12 || blen % 4 != 0 || blen > MAX_FRAME + 64 {
                return Err(CaptureError::Corrupt {
                    offset: at + 4,
                    why: format!("pcapng block length {blen}"),
                });
            }
            need("pcapng block", d, at, blen)?;
            if endian.u32(&d[at + blen - 4..]) as usize != blen {
                return Err(CaptureError::Corrupt {
                    offset: at + blen - 4,
                    why: "pcapng trailing block length differs from the leading one".into(),
                });
            }
            let body = &d[at + 8..at + blen - 4];
            self.pos = at + blen;
            let frame = |iface: usize, caplen: usize, origlen: u32, off: usize, ts: Option<u64>| {
                let (link, per_sec) = *links.get(iface).ok_or_else(|| CaptureError::Corrupt {
                    offset: at,
                    why: format!("packet names interface {iface}, which no block described"),
                })?;
                if off + caplen > body.len() {
                    return Err(CaptureError::Corrupt {
                        offset: at,
                        why: format!("captured length {caplen} overruns its block"),
                    });
                }
                let ts_ns = ts.map(|t| {
                    let ns = u128::from(t) * 1_000_000_000 / u128::from(per_sec.max(1));
                    u64::try_from(ns).unwrap_or(u64::MAX)
                });
                Ok(Some(Frame {
                    link,
                    data: &body[off..off + caplen],
                    orig_len: origlen,
                    ts_ns,
                }))
            };
            let ts64 = |b: &[u8]| (u64::from(endian.u32(b)) << 32) | u64::from(endian.u32(&b[4..]));
            match btype {
                1 => {
                    need("pcapng interface block", body, 0, 8).map_err(|_| {
                        CaptureError::Corrupt {
                            offset: at,
                            why: "interface description block too short".into(),
                        }
                    })?;
                    let link = LinkType::from_u32(u32::from(endian.u16(body)));
                    links.push((link, if_tsresol(endian, &body[8..])));
                }
                6 => {
                    if body.len() < 20 {
                        return Err(CaptureError::Corrupt {
                            offset: at,
                            why: "enhanced packet block too short".into(),
                        });
                    }
                    let iface = endian.u32(body) as usize;
                    let caplen = endian.u32(&body[12..]) as usize;
                    let ts = ts64(&body[4..]);
                    return frame(iface, caplen, endian.u32(&body[16..]), 20, Some(ts));
                }
                3 => {
                    if body.len() < 4 {
                        return Err(CaptureError::Corrupt {
                            offset: at,
                            why: "simple packet block too short".into(),
                        });
                    }
                    let orig = endian.u32(body);
                    let caplen = (orig as usize).min(body.len() - 4);
                    return frame(0, caplen, orig, 4, None);
                }
                2 => {
                    if body.len() < 20 {
                        return Err(CaptureError::Corrupt {
                            offset: at,
                            why: "packet block too short".into(),
                        });
                    }
                    let iface = usize::from(endian.u16(body));
                    let caplen = endian.u32(&body[12..]) as usize;
                    let ts = ts64(&body[4..]);
                    return frame(iface, caplen, endian.u32(&body[16..]), 20, Some(ts));
                }
                _ => {} // section header, statistics, name resolution, custom...: skipped
            }
        }
    }
}

/// Timestamp units per second of a pcapng interface, from its `if_tsresol` option (code
/// 9: 10^-n seconds, or 2^-n when the top bit is set); 10^6 when it has none or it makes
/// no sense.
fn if_tsresol(endian: Endian, mut opts: &[u8]) -> u64 {
    while opts.len() >= 4 {
        let code = endian.u16(opts);
        let len = usize::from(endian.u16(&opts[2..]));
        if code == 0 {
            break;
        }
        let value = opts.get(4..4 + len);
        if let (9, Some(&[v])) = (code, value) {
            let n = u32::from(v & 0x7f);
            let per_sec = if v & 0x80 == 0 {
                10u64.checked_pow(n)
            } else {
                1u64.checked_shl(n)
            };
            return per_sec.filter(|&p| p > 0).unwrap_or(1_000_000);
        }
        let padded = (len + 3) & !3;
        opts = opts.get(4 + padded..).unwrap_or(&[]);
    }
    1_000_000
}

impl<'a> Iterator for Reader<'a> {
    type Item = Result<Frame<'a>, CaptureError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        let r = match self.format {
            Format::Pcap {
                endian,
                link,
                nanos,
            } => self.next_pcap(endian, link, nanos),
            Format::Pcapng { .. } => self.next_pcapng(),
        };
        match r {
            Ok(f) => f.map(Ok),
            Err(e) => {
                self.failed = true;
                Some(Err(e))
            }
        }
    }
}

/// Writes frames as a classic little-endian microsecond pcap file with Ethernet link type.
pub fn write_pcap<'f>(frames: impl IntoIterator<Item = &'f [u8]>) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(&0xa1b2_c3d4u32.to_le_bytes());
    out.extend_from_slice(&2u16.to_le_bytes());
    out.extend_from_slice(&4u16.to_le_bytes());
    for v in [0u32, 0, 262_144, 1] {
        out.extend_from_slice(&v.to_le_bytes());
    }
    for (i, f) in frames.into_iter().enumerate() {
        for v in [i as u32, 0, f.len() as u32, f.len() as u32] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        out.extend_from_slice(f);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pcap_round_trip_and_truncation() {
        let frames: [&[u8]; 2] = [b"abc", b"defgh"];
        let file = write_pcap(frames);
        let got: Vec<_> = Reader::new(&file)
            .unwrap()
            .map(|f| f.unwrap().data)
            .collect();
        assert_eq!(got, frames);
        let ts: Vec<_> = Reader::new(&file)
            .unwrap()
            .map(|f| f.unwrap().ts_ns)
            .collect();
        assert_eq!(
            ts,
            [Some(0), Some(1_000_000_000)],
            "write_pcap: frame i at i s"
        );
        // Microsecond and nanosecond pcap: 3 s and 250 µs, or 3 s and 250 ns.
        let mut us = file.clone();
        us[24..32].copy_from_slice(&[3, 0, 0, 0, 0xfa, 0, 0, 0]);
        let mut ns = us.clone();
        ns[..4].copy_from_slice(&0xa1b2_3c4du32.to_le_bytes());
        let first = |f: &[u8]| Reader::new(f).unwrap().next().unwrap().unwrap().ts_ns;
        assert_eq!(first(&us), Some(3_000_250_000));
        assert_eq!(first(&ns), Some(3_000_000_250));
        let cut = &file[..file.len() - 2];
        let r: Vec<_> = Reader::new(cut).unwrap().collect();
        assert_eq!(r.len(), 2);
        assert!(r[0].is_ok());
        assert!(matches!(r[1], Err(CaptureError::Truncated { .. })));
        assert!(matches!(
            Reader::new(b"hello world"),
            Err(CaptureError::UnknownFormat { .. })
        ));
    }

    fn block(t: u32, body: &[u8], be: bool) -> Vec<u8> {
        let len = (12 + body.len()) as u32;
        let w = |v: u32| if be { v.to_be_bytes() } else { v.to_le_bytes() };
        let mut b = Vec::new();
        b.extend_from_slice(&w(t));
        b.extend_from_slice(&w(len));
        b.extend_from_slice(body);
        b.extend_from_slice(&w(len));
        b
    }

    #[test]
    fn pcapng_both_byte_orders() {
        for be in [false, true] {
            let w32 = |v: u32| if be { v.to_be_bytes() } else { v.to_le_bytes() };
            let w16 = |v: u16| if be { v.to_be_bytes() } else { v.to_le_bytes() };
            let mut shb = Vec::new();
            shb.extend_from_slice(&w32(PCAPNG_BOM));
            shb.extend_from_slice(&w16(1));
            shb.extend_from_slice(&w16(0));
            shb.extend_from_slice(&[0xff; 8]);
            let mut idb = Vec::new();
            idb.extend_from_slice(&w16(1));
            idb.extend_from_slice(&w16(0));
            idb.extend_from_slice(&w32(0));
            let mut epb = Vec::new();
            for v in [0u32, 0, 0, 5, 5] {
                epb.extend_from_slice(&w32(v));
            }
            epb.extend_from_slice(b"hello\0\0\0");
            let mut file = block(PCAPNG_SHB, &shb, be);
            file.extend(block(1, &idb, be));
            file.extend(block(6, &epb, be));
            let frames: Vec<_> = Reader::new(&file).unwrap().map(|f| f.unwrap()).collect();
            assert_eq!(frames.len(), 1);
            assert_eq!(frames[0].data, b"hello");
            assert_eq!(frames[0].ts_ns, Some(0));
            // An interface with if_tsresol 9 (nanoseconds) and a packet at 2^32 + 7 units.
            let mut idb9 = idb.clone();
            idb9.extend_from_slice(&w16(9));
            idb9.extend_from_slice(&w16(1));
            idb9.extend_from_slice(&[9, 0, 0, 0]);
            idb9.extend_from_slice(&[0; 4]); // opt_endofopt
            let mut epb9 = Vec::new();
            for v in [1u32, 1, 7, 5, 5] {
                epb9.extend_from_slice(&w32(v));
            }
            epb9.extend_from_slice(b"hello\0\0\0");
            let mut f9 = file.clone();
            f9.extend(block(1, &idb9, be));
            f9.extend(block(6, &epb9, be));
            let t: Vec<_> = Reader::new(&f9)
                .unwrap()
                .map(|f| f.unwrap().ts_ns)
                .collect();
            assert_eq!(t, [Some(0), Some((1u64 << 32) + 7)]);
            assert_eq!(frames[0].link, LinkType::Ethernet);
            // A packet for an interface nobody described is corruption, not a panic.
            let mut bad = file.clone();
            bad.extend(block(6, &epb, be));
            let n = bad.len();
            bad[n - 32..n - 28].copy_from_slice(&w32(1)); // interface id of the last EPB
            let r: Vec<_> = Reader::new(&bad).unwrap().collect();
            assert_eq!(r.len(), 2);
            assert!(r[0].is_ok());
            assert!(matches!(r[1], Err(CaptureError::Corrupt { .. })));
        }
    }
}
