//! The one error type of the wire layer.

/// What was wrong with a frame, and where. Offsets count bytes from the start of the
/// buffer handed to the parser (the Ethernet header for [`super::parse`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// Fewer bytes than the header or length field requires.
    #[error("{what} truncated at offset {offset}: need {need} bytes, have {have}")]
    Truncated {
        what: &'static str,
        offset: usize,
        need: usize,
        have: usize,
    },
    /// The Ethernet frame does not carry IPv4 or IPv6.
    #[error("not RoCEv2: ethertype {ethertype:#06x} at offset {offset}")]
    UnsupportedEthertype { ethertype: u16, offset: usize },
    /// The IP version nibble disagrees with the ethertype (or is neither 4 nor 6).
    #[error("IP version {version} at offset {offset}, expected {expected}")]
    BadIpVersion {
        version: u8,
        expected: u8,
        offset: usize,
    },
    /// IPv4 IHL below 5 words.
    #[error("IPv4 header length {len} bytes at offset {offset} is below the minimum of 20")]
    BadIpv4HeaderLen { len: usize, offset: usize },
    /// IP total/payload length inconsistent with the header or the captured bytes.
    #[error("IP length field {field} at offset {offset} is inconsistent: {why}")]
    BadIpLength {
        field: usize,
        offset: usize,
        why: &'static str,
    },
    /// IPv4 header checksum does not verify.
    #[error(
        "bad IPv4 header checksum at offset {offset}: computed {computed:#06x}, found {found:#06x}"
    )]
    BadIpv4Checksum {
        computed: u16,
        found: u16,
        offset: usize,
    },
    /// An IPv4 fragment, or an IPv6 fragment header of a fragment; RoCEv2 packets are
    /// never fragmented.
    #[error("IP fragment at offset {offset} (more-fragments flag set or fragment offset non-zero); RoCEv2 is never fragmented")]
    Fragmented { offset: usize },
    /// The IP payload is not UDP (IPv6 extension headers land here too).
    #[error("not RoCEv2: IP protocol / next header {protocol} at offset {offset}, not UDP (17)")]
    NotUdp { protocol: u8, offset: usize },
    /// UDP destination port is not 4791.
    #[error("not RoCEv2: UDP destination port {port} at offset {offset}, not 4791")]
    NotRoceV2Port { port: u16, offset: usize },
    /// UDP length field disagrees with the IP payload length.
    #[error(
        "UDP length {udp_len} at offset {offset} disagrees with the IP payload length {ip_payload}"
    )]
    BadUdpLength {
        udp_len: usize,
        ip_payload: usize,
        offset: usize,
    },
    /// BTH opcode that no IBTA transport defines (or that is reserved).
    #[error("unknown or reserved BTH opcode {opcode:#04x} at offset {offset}")]
    UnknownOpcode { opcode: u8, offset: usize },
    /// A known opcode of a transport uroce does not implement (RD).
    #[error("BTH opcode {opcode:#04x} ({name}) at offset {offset} is not supported: reliable datagram (RD) is not implemented")]
    UnsupportedOpcode {
        opcode: u8,
        name: &'static str,
        offset: usize,
    },
    /// BTH TVer is not 0 (IBTA 9.2: the only defined transport header version).
    #[error("BTH transport header version {tver} at offset {offset}, expected 0")]
    BadTver { tver: u8, offset: usize },
    /// Pad count larger than the bytes that follow the headers, or non-zero where no payload is allowed.
    #[error("BTH pad count {pad} at offset {offset} is invalid for {available} bytes of payload")]
    BadPad {
        pad: u8,
        available: usize,
        offset: usize,
    },
    /// Payload plus pad not a multiple of 4 bytes (IBTA 9.2: packets are 4-byte aligned).
    #[error("payload+pad of {len} bytes at offset {offset} is not a multiple of 4")]
    Unaligned { len: usize, offset: usize },
    /// Bytes after the headers of an opcode that carries no payload (or the wrong amount).
    #[error("opcode {opcode:#04x} takes {allowed} payload bytes but {len} follow its headers at offset {offset}")]
    UnexpectedPayload {
        opcode: u8,
        len: usize,
        allowed: &'static str,
        offset: usize,
    },
    /// Payload larger than the 4096-byte maximum path MTU.
    #[error("payload of {len} bytes at offset {offset} exceeds the 4096-byte maximum path MTU")]
    PayloadTooLong { len: usize, offset: usize },
    /// The invariant CRC does not verify. `computed` and `found` are CRC values (see
    /// [`super::icrc::stored`]); the message shows both as the 4 bytes appear on the wire,
    /// as Wireshark and tcpdump show them.
    #[error(
        "bad ICRC at offset {offset}: computed {:#010x}, found {:#010x} (bytes in wire order)",
        .computed.swap_bytes(),
        .found.swap_bytes()
    )]
    BadIcrc {
        computed: u32,
        found: u32,
        offset: usize,
    },
    /// The buffer given to a builder is too small.
    #[error("buffer too small: need {need} bytes, have {have}")]
    BufferTooSmall { need: usize, have: usize },
    /// A representation that cannot be put on the wire as it is.
    #[error("cannot emit: {0}")]
    InvalidRepr(&'static str),
}

impl WireError {
    /// True for errors that leave the frame's structure intact (a checksum or CRC mismatch),
    /// so a dissector can go on decoding the headers that follow.
    pub fn is_integrity(&self) -> bool {
        matches!(self, Self::BadIpv4Checksum { .. } | Self::BadIcrc { .. })
    }
}

impl WireError {
    /// The same error with its offset moved by `base` bytes: sub-parsers report offsets
    /// within the slice they were given, the frame parser rebases them onto the frame.
    pub fn shifted(self, base: usize) -> Self {
        use WireError::*;
        let mut e = self;
        match &mut e {
            Truncated { offset, .. }
            | UnsupportedEthertype { offset, .. }
            | BadIpVersion { offset, .. }
            | BadIpv4HeaderLen { offset, .. }
            | BadIpLength { offset, .. }
            | BadIpv4Checksum { offset, .. }
            | Fragmented { offset }
            | NotUdp { offset, .. }
            | NotRoceV2Port { offset, .. }
            | BadUdpLength { offset, .. }
            | UnknownOpcode { offset, .. }
            | UnsupportedOpcode { offset, .. }
            | BadTver { offset, .. }
            | BadPad { offset, .. }
            | Unaligned { offset, .. }
            | UnexpectedPayload { offset, .. }
            | PayloadTooLong { offset, .. }
            | BadIcrc { offset, .. } => *offset += base,
            BufferTooSmall { .. } | InvalidRepr(_) => {}
        }
        e
    }
}
