//! IPv6 fixed header (RFC 8200). RoCEv2 over IPv6 carries UDP directly: the endpoint's
//! parser accepts no extension headers, but [`walk_extensions`] follows them (hop-by-hop,
//! routing, destination options, fragment, authentication) for the dissector.

use std::net::Ipv6Addr;

use super::{be16, check_len, put16, WireError};

/// Length of the fixed IPv6 header.
pub const HEADER_LEN: usize = 40;

mod field {
    pub const VER_TC_FLOW: usize = 0;
    pub const LENGTH: usize = 4;
    pub const NEXT_HEADER: usize = 6;
    pub const HOP_LIMIT: usize = 7;
    pub const SRC: usize = 8;
    pub const DST: usize = 24;
}

/// A zero-copy view of an IPv6 header.
#[derive(Debug, Clone, Copy)]
pub struct Header<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Header<T> {
    /// Wraps a buffer, checking length and version.
    pub fn new_checked(buffer: T) -> Result<Self, WireError> {
        check_len("IPv6 header", buffer.as_ref(), HEADER_LEN, 0)?;
        let h = Self { buffer };
        if h.version() != 6 {
            return Err(WireError::BadIpVersion {
                version: h.version(),
                expected: 6,
                offset: 0,
            });
        }
        Ok(h)
    }
    fn word0(&self) -> u32 {
        super::be32(self.buffer.as_ref(), field::VER_TC_FLOW)
    }
    /// Version nibble.
    pub fn version(&self) -> u8 {
        (self.word0() >> 28) as u8
    }
    /// Traffic class: DSCP and ECN.
    pub fn traffic_class(&self) -> u8 {
        (self.word0() >> 20) as u8
    }
    /// Flow label (20 bits).
    pub fn flow_label(&self) -> u32 {
        self.word0() & 0x000f_ffff
    }
    /// Payload length.
    pub fn payload_len(&self) -> u16 {
        be16(self.buffer.as_ref(), field::LENGTH)
    }
    /// Next header.
    pub fn next_header(&self) -> u8 {
        self.buffer.as_ref()[field::NEXT_HEADER]
    }
    /// Hop limit.
    pub fn hop_limit(&self) -> u8 {
        self.buffer.as_ref()[field::HOP_LIMIT]
    }
    /// Source address.
    pub fn src(&self) -> Ipv6Addr {
        addr(&self.buffer.as_ref()[field::SRC..field::SRC + 16])
    }
    /// Destination address.
    pub fn dst(&self) -> Ipv6Addr {
        addr(&self.buffer.as_ref()[field::DST..field::DST + 16])
    }
}

fn addr(b: &[u8]) -> Ipv6Addr {
    let mut a = [0u8; 16];
    a.copy_from_slice(b);
    Ipv6Addr::from(a)
}

/// Plain representation of an IPv6 header; payload length is derived when emitting.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ipv6Repr {
    /// Source address.
    pub src: Ipv6Addr,
    /// Destination address.
    pub dst: Ipv6Addr,
    /// Traffic class (DSCP and ECN).
    pub traffic_class: u8,
    /// Flow label (20 bits).
    pub flow_label: u32,
    /// Next header (17 for RoCEv2).
    pub next_header: u8,
    /// Hop limit.
    pub hop_limit: u8,
}

impl Ipv6Repr {
    /// Parses a checked view.
    pub fn parse<T: AsRef<[u8]>>(h: &Header<T>) -> Self {
        Self {
            src: h.src(),
            dst: h.dst(),
            traffic_class: h.traffic_class(),
            flow_label: h.flow_label(),
            next_header: h.next_header(),
            hop_limit: h.hop_limit(),
        }
    }

    /// The ECN codepoint.
    pub fn ecn(&self) -> u8 {
        self.traffic_class & 0x03
    }

    /// Bytes the header takes.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes the header for `payload_len` bytes of payload.
    pub fn emit(&self, buf: &mut [u8], payload_len: usize) -> Result<(), WireError> {
        if buf.len() < HEADER_LEN {
            return Err(WireError::BufferTooSmall {
                need: HEADER_LEN,
                have: buf.len(),
            });
        }
        if self.flow_label > 0x000f_ffff {
            return Err(WireError::InvalidRepr("IPv6 flow label wider than 20 bits"));
        }
        let len = u16::try_from(payload_len)
            .map_err(|_| WireError::InvalidRepr("IPv6 payload longer than 65535 bytes"))?;
        let w0 = (6u32 << 28) | (u32::from(self.traffic_class) << 20) | self.flow_label;
        buf[..4].copy_from_slice(&w0.to_be_bytes());
        put16(buf, field::LENGTH, len);
        buf[field::NEXT_HEADER] = self.next_header;
        buf[field::HOP_LIMIT] = self.hop_limit;
        buf[field::SRC..field::SRC + 16].copy_from_slice(&self.src.octets());
        buf[field::DST..field::DST + 16].copy_from_slice(&self.dst.octets());
        Ok(())
    }
}

/// Next-header value of the hop-by-hop options header.
pub const EXT_HOP_BY_HOP: u8 = 0;
/// Next-header value of the routing header.
pub const EXT_ROUTING: u8 = 43;
/// Next-header value of the fragment header.
pub const EXT_FRAGMENT: u8 = 44;
/// Next-header value of the authentication header.
pub const EXT_AUTH: u8 = 51;
/// Next-header value of the destination options header.
pub const EXT_DEST_OPTS: u8 = 60;

/// Most extension headers [`walk_extensions`] follows before it gives up.
pub const MAX_EXTENSIONS: usize = 8;

/// The short name of an extension header's next-header value, `None` for a protocol.
pub fn extension_name(next_header: u8) -> Option<&'static str> {
    Some(match next_header {
        EXT_HOP_BY_HOP => "hop-by-hop",
        EXT_ROUTING => "routing",
        EXT_FRAGMENT => "fragment",
        EXT_AUTH => "auth",
        EXT_DEST_OPTS => "dest-opts",
        _ => return None,
    })
}

/// The extension headers between the fixed IPv6 header and the upper-layer protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Extensions {
    /// The next-header values of the extension headers, in order (`count` used).
    pub kinds: [u8; MAX_EXTENSIONS],
    /// How many extension headers there were.
    pub count: u8,
    /// Their length in bytes: where the upper-layer header starts in the payload.
    pub len: usize,
    /// The upper-layer protocol that follows them.
    pub protocol: u8,
    /// Where the last next-header field (the one naming `protocol`) is, from the start
    /// of the payload; `None` when there are no extension headers (it is the fixed
    /// header's).
    pub protocol_at: Option<usize>,
}

impl Extensions {
    /// The next-header values of the extension headers, in order.
    pub fn kinds(&self) -> &[u8] {
        &self.kinds[..usize::from(self.count)]
    }
}

/// Follows the extension headers at the start of an IPv6 `payload` whose first header is
/// `next_header` (the fixed header's field) up to the first header that is not one. A
/// header that runs past the payload is [`WireError::Truncated`]; a fragment header of a
/// fragment (offset or M flag set) is [`WireError::Fragmented`]; more than
/// [`MAX_EXTENSIONS`] headers is [`WireError::BadIpLength`]. Offsets count from the start
/// of `payload`.
pub fn walk_extensions(payload: &[u8], next_header: u8) -> Result<Extensions, WireError> {
    let mut e = Extensions {
        protocol: next_header,
        ..Default::default()
    };
    while let Some(name) = extension_name(e.protocol) {
        if usize::from(e.count) == MAX_EXTENSIONS {
            return Err(WireError::BadIpLength {
                field: e.len,
                offset: e.len,
                why: "more than 8 IPv6 extension headers",
            });
        }
        let at = e.len;
        check_len(name_of(name), &payload[at.min(payload.len())..], 8, at)?;
        let h = &payload[at..];
        let len = match e.protocol {
            EXT_FRAGMENT => {
                let off_flags = be16(h, 2);
                if off_flags & 0xfff9 != 0 {
                    return Err(WireError::Fragmented { offset: at + 2 });
                }
                8
            }
            EXT_AUTH => (usize::from(h[1]) + 2) * 4,
            _ => (usize::from(h[1]) + 1) * 8,
        };
        check_len(name_of(name), h, len, at)?;
        e.kinds[usize::from(e.count)] = e.protocol;
        e.count += 1;
        e.protocol = h[0];
        e.protocol_at = Some(at);
        e.len += len;
    }
    Ok(e)
}

fn name_of(name: &'static str) -> &'static str {
    match name {
        "hop-by-hop" => "IPv6 hop-by-hop options header",
        "routing" => "IPv6 routing header",
        "fragment" => "IPv6 fragment header",
        "auth" => "IPv6 authentication header",
        _ => "IPv6 destination options header",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let r = Ipv6Repr {
            src: "fe80::1".parse().unwrap(),
            dst: "2001:db8::2".parse().unwrap(),
            traffic_class: 0x6a,
            flow_label: 0xabcde,
            next_header: 17,
            hop_limit: 64,
        };
        let mut b = [0u8; 40];
        r.emit(&mut b, 1000).unwrap();
        assert_eq!(&b[..4], &[0x66, 0xaa, 0xbc, 0xde]);
        let h = Header::new_checked(&b[..]).unwrap();
        assert_eq!(h.payload_len(), 1000);
        assert_eq!(Ipv6Repr::parse(&h), r);
        b[0] = 0x45;
        assert!(matches!(
            Header::new_checked(&b[..]),
            Err(WireError::BadIpVersion { version: 4, .. })
        ));
    }

    #[test]
    fn extension_headers_are_followed_to_udp() {
        // hop-by-hop (8 bytes) -> routing (24 bytes) -> dest opts (16) -> fragment (8,
        // offset 0, M clear) -> UDP.
        let mut p = vec![0u8; 8 + 24 + 16 + 8 + 8];
        p[0] = EXT_ROUTING;
        p[1] = 0;
        p[8] = EXT_DEST_OPTS;
        p[9] = 2;
        p[32] = EXT_FRAGMENT;
        p[33] = 1;
        p[48] = 17;
        let e = walk_extensions(&p, EXT_HOP_BY_HOP).unwrap();
        assert_eq!(
            e.kinds(),
            &[EXT_HOP_BY_HOP, EXT_ROUTING, EXT_DEST_OPTS, EXT_FRAGMENT]
        );
        assert_eq!((e.len, e.protocol), (56, 17));
        // No extension headers at all.
        assert_eq!(walk_extensions(&p, 17).unwrap().len, 0);
        // A fragment that is not the whole packet.
        let mut f = p.clone();
        f[51] = 0x01; // M flag
        assert_eq!(
            walk_extensions(&f, EXT_HOP_BY_HOP),
            Err(WireError::Fragmented { offset: 50 })
        );
        // The routing header claims more than is there.
        assert!(matches!(
            walk_extensions(&p[..20], EXT_HOP_BY_HOP),
            Err(WireError::Truncated {
                offset: 8,
                need: 24,
                have: 12,
                ..
            })
        ));
        assert!(matches!(
            walk_extensions(&p[..4], EXT_HOP_BY_HOP),
            Err(WireError::Truncated { offset: 0, .. })
        ));
        // A chain that never ends is cut at MAX_EXTENSIONS.
        let endless = vec![0u8; 8 * 12];
        assert!(matches!(
            walk_extensions(&endless, EXT_HOP_BY_HOP),
            Err(WireError::BadIpLength { .. })
        ));
    }
}
