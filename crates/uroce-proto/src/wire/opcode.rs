//! The BTH opcode table (IBTA Vol. 1 §9.2.1, Table 35; RoCEv2 CNP from Annex A17.9.3;
//! FLUSH and ATOMIC WRITE from the IBTA 1.5 memory placement extensions).
//!
//! The top three bits name the transport (RC 0x00, UC 0x20, RD 0x40, UD 0x60, CNP 0x80),
//! the low five the operation. Each known opcode says which extension headers follow the
//! BTH, in wire order, and whether a payload may follow them.

use super::WireError;

/// The transport service an opcode belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TransportKind {
    /// Reliable connected.
    Rc,
    /// Unreliable connected.
    Uc,
    /// Reliable datagram: opcodes are known, the transport is not implemented.
    Rd,
    /// Unreliable datagram.
    Ud,
    /// RoCEv2 congestion notification packet.
    Cnp,
}

impl TransportKind {
    /// Short name as used in opcode names (`RC`, `UC`, ...).
    pub fn name(self) -> &'static str {
        match self {
            Self::Rc => "RC",
            Self::Uc => "UC",
            Self::Rd => "RD",
            Self::Ud => "UD",
            Self::Cnp => "CNP",
        }
    }
}

/// An extension header that may follow the BTH. The discriminant order is wire order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ExtHeader {
    /// Reliable Datagram ETH (4 bytes, RD only).
    Rdeth,
    /// Datagram ETH: Q_Key and source QP (8 bytes).
    Deth,
    /// Flush ETH (4 bytes, FLUSH only).
    Feth,
    /// RDMA ETH: virtual address, R_Key, DMA length (16 bytes).
    Reth,
    /// Atomic ETH: VA, R_Key, swap/add, compare (28 bytes).
    AtomicEth,
    /// ACK ETH: syndrome and MSN (4 bytes).
    Aeth,
    /// Atomic ACK ETH: the original remote data (8 bytes).
    AtomicAckEth,
    /// Immediate data (4 bytes).
    ImmDt,
    /// Invalidate ETH: the R_Key to invalidate (4 bytes).
    Ieth,
    /// The 16 reserved bytes that follow the BTH of a CNP.
    CnpReserved,
}

impl ExtHeader {
    /// The header's IBTA name.
    pub const fn name(self) -> &'static str {
        match self {
            Self::Rdeth => "RDETH",
            Self::Deth => "DETH",
            Self::Feth => "FETH",
            Self::Reth => "RETH",
            Self::AtomicEth => "AtomicETH",
            Self::Aeth => "AETH",
            Self::AtomicAckEth => "AtomicAckETH",
            Self::ImmDt => "ImmDt",
            Self::Ieth => "IETH",
            Self::CnpReserved => "CNP reserved bytes",
        }
    }

    /// Length on the wire, in bytes.
    pub const fn wire_len(self) -> usize {
        match self {
            Self::Rdeth | Self::Feth | Self::Aeth | Self::ImmDt | Self::Ieth => 4,
            Self::Deth | Self::AtomicAckEth => 8,
            Self::Reth | Self::CnpReserved => 16,
            Self::AtomicEth => 28,
        }
    }

    /// Every extension header, in wire order.
    pub const ALL_WIRE_ORDER: [ExtHeader; 10] = [
        Self::Rdeth,
        Self::Deth,
        Self::Feth,
        Self::Reth,
        Self::AtomicEth,
        Self::Aeth,
        Self::AtomicAckEth,
        Self::ImmDt,
        Self::Ieth,
        Self::CnpReserved,
    ];
}

/// What may follow the extension headers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PayloadRule {
    /// Nothing: pad count must be 0 and no bytes may follow.
    None,
    /// Any length from 0 to the path MTU.
    Any,
    /// Exactly this many bytes (ATOMIC WRITE carries 8).
    Exactly(usize),
}

use ExtHeader as H;
const RDETH: H = H::Rdeth;
const DETH: H = H::Deth;
const FETH: H = H::Feth;
const RETH: H = H::Reth;
const ATOMIC: H = H::AtomicEth;
const AETH: H = H::Aeth;
const ATOMIC_ACK: H = H::AtomicAckEth;
const IMM: H = H::ImmDt;
const IETH: H = H::Ieth;
const CNP_RESV: H = H::CnpReserved;

const NONE: PayloadRule = PayloadRule::None;
const ANY: PayloadRule = PayloadRule::Any;

macro_rules! opcodes {
    ($( $variant:ident = $value:literal, $kind:ident, $name:literal, $hdrs:expr, $payload:expr; )*) => {
        /// A known BTH opcode. Unknown and reserved values do not convert
        /// ([`Opcode::try_from`] gives [`WireError::UnknownOpcode`]).
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[repr(u8)]
        #[allow(missing_docs)]
        pub enum Opcode {
            $( $variant = $value, )*
        }

        impl Opcode {
            /// Looks an opcode up in the table; `None` for unknown and reserved values.
            pub const fn from_u8(v: u8) -> Option<Self> {
                match v {
                    $( $value => Some(Self::$variant), )*
                    _ => None,
                }
            }

            /// The IBTA name with its transport prefix, for example `RC_SEND_ONLY`.
            pub const fn name(self) -> &'static str {
                match self { $( Self::$variant => $name, )* }
            }

            /// The transport this opcode belongs to.
            pub const fn transport(self) -> TransportKind {
                match self { $( Self::$variant => TransportKind::$kind, )* }
            }

            /// The extension headers that follow the BTH, in wire order.
            pub const fn headers(self) -> &'static [ExtHeader] {
                match self { $( Self::$variant => &$hdrs, )* }
            }

            /// What may follow the extension headers.
            pub const fn payload(self) -> PayloadRule {
                match self { $( Self::$variant => $payload, )* }
            }

            /// Every known opcode, in numeric order.
            pub const ALL: &'static [Opcode] = &[ $( Self::$variant, )* ];
        }
    };
}

opcodes! {
    RcSendFirst = 0x00, Rc, "RC_SEND_FIRST", [], ANY;
    RcSendMiddle = 0x01, Rc, "RC_SEND_MIDDLE", [], ANY;
    RcSendLast = 0x02, Rc, "RC_SEND_LAST", [], ANY;
    RcSendLastImm = 0x03, Rc, "RC_SEND_LAST_WITH_IMMEDIATE", [IMM], ANY;
    RcSendOnly = 0x04, Rc, "RC_SEND_ONLY", [], ANY;
    RcSendOnlyImm = 0x05, Rc, "RC_SEND_ONLY_WITH_IMMEDIATE", [IMM], ANY;
    RcWriteFirst = 0x06, Rc, "RC_RDMA_WRITE_FIRST", [RETH], ANY;
    RcWriteMiddle = 0x07, Rc, "RC_RDMA_WRITE_MIDDLE", [], ANY;
    RcWriteLast = 0x08, Rc, "RC_RDMA_WRITE_LAST", [], ANY;
    RcWriteLastImm = 0x09, Rc, "RC_RDMA_WRITE_LAST_WITH_IMMEDIATE", [IMM], ANY;
    RcWriteOnly = 0x0a, Rc, "RC_RDMA_WRITE_ONLY", [RETH], ANY;
    RcWriteOnlyImm = 0x0b, Rc, "RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE", [RETH, IMM], ANY;
    RcReadRequest = 0x0c, Rc, "RC_RDMA_READ_REQUEST", [RETH], NONE;
    RcReadResponseFirst = 0x0d, Rc, "RC_RDMA_READ_RESPONSE_FIRST", [AETH], ANY;
    RcReadResponseMiddle = 0x0e, Rc, "RC_RDMA_READ_RESPONSE_MIDDLE", [], ANY;
    RcReadResponseLast = 0x0f, Rc, "RC_RDMA_READ_RESPONSE_LAST", [AETH], ANY;
    RcReadResponseOnly = 0x10, Rc, "RC_RDMA_READ_RESPONSE_ONLY", [AETH], ANY;
    RcAck = 0x11, Rc, "RC_ACKNOWLEDGE", [AETH], NONE;
    RcAtomicAck = 0x12, Rc, "RC_ATOMIC_ACKNOWLEDGE", [AETH, ATOMIC_ACK], NONE;
    RcCompareSwap = 0x13, Rc, "RC_COMPARE_SWAP", [ATOMIC], NONE;
    RcFetchAdd = 0x14, Rc, "RC_FETCH_ADD", [ATOMIC], NONE;
    RcSendLastInv = 0x16, Rc, "RC_SEND_LAST_WITH_INVALIDATE", [IETH], ANY;
    RcSendOnlyInv = 0x17, Rc, "RC_SEND_ONLY_WITH_INVALIDATE", [IETH], ANY;
    RcFlush = 0x1c, Rc, "RC_FLUSH", [FETH, RETH], NONE;
    RcAtomicWrite = 0x1d, Rc, "RC_ATOMIC_WRITE", [RETH], PayloadRule::Exactly(8);

    UcSendFirst = 0x20, Uc, "UC_SEND_FIRST", [], ANY;
    UcSendMiddle = 0x21, Uc, "UC_SEND_MIDDLE", [], ANY;
    UcSendLast = 0x22, Uc, "UC_SEND_LAST", [], ANY;
    UcSendLastImm = 0x23, Uc, "UC_SEND_LAST_WITH_IMMEDIATE", [IMM], ANY;
    UcSendOnly = 0x24, Uc, "UC_SEND_ONLY", [], ANY;
    UcSendOnlyImm = 0x25, Uc, "UC_SEND_ONLY_WITH_IMMEDIATE", [IMM], ANY;
    UcWriteFirst = 0x26, Uc, "UC_RDMA_WRITE_FIRST", [RETH], ANY;
    UcWriteMiddle = 0x27, Uc, "UC_RDMA_WRITE_MIDDLE", [], ANY;
    UcWriteLast = 0x28, Uc, "UC_RDMA_WRITE_LAST", [], ANY;
    UcWriteLastImm = 0x29, Uc, "UC_RDMA_WRITE_LAST_WITH_IMMEDIATE", [IMM], ANY;
    UcWriteOnly = 0x2a, Uc, "UC_RDMA_WRITE_ONLY", [RETH], ANY;
    UcWriteOnlyImm = 0x2b, Uc, "UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE", [RETH, IMM], ANY;

    RdSendFirst = 0x40, Rd, "RD_SEND_FIRST", [RDETH, DETH], ANY;
    RdSendMiddle = 0x41, Rd, "RD_SEND_MIDDLE", [RDETH, DETH], ANY;
    RdSendLast = 0x42, Rd, "RD_SEND_LAST", [RDETH, DETH], ANY;
    RdSendLastImm = 0x43, Rd, "RD_SEND_LAST_WITH_IMMEDIATE", [RDETH, DETH, IMM], ANY;
    RdSendOnly = 0x44, Rd, "RD_SEND_ONLY", [RDETH, DETH], ANY;
    RdSendOnlyImm = 0x45, Rd, "RD_SEND_ONLY_WITH_IMMEDIATE", [RDETH, DETH, IMM], ANY;
    RdWriteFirst = 0x46, Rd, "RD_RDMA_WRITE_FIRST", [RDETH, DETH, RETH], ANY;
    RdWriteMiddle = 0x47, Rd, "RD_RDMA_WRITE_MIDDLE", [RDETH, DETH], ANY;
    RdWriteLast = 0x48, Rd, "RD_RDMA_WRITE_LAST", [RDETH, DETH], ANY;
    RdWriteLastImm = 0x49, Rd, "RD_RDMA_WRITE_LAST_WITH_IMMEDIATE", [RDETH, DETH, IMM], ANY;
    RdWriteOnly = 0x4a, Rd, "RD_RDMA_WRITE_ONLY", [RDETH, DETH, RETH], ANY;
    RdWriteOnlyImm = 0x4b, Rd, "RD_RDMA_WRITE_ONLY_WITH_IMMEDIATE", [RDETH, DETH, RETH, IMM], ANY;
    RdReadRequest = 0x4c, Rd, "RD_RDMA_READ_REQUEST", [RDETH, DETH, RETH], NONE;
    RdReadResponseFirst = 0x4d, Rd, "RD_RDMA_READ_RESPONSE_FIRST", [RDETH, AETH], ANY;
    RdReadResponseMiddle = 0x4e, Rd, "RD_RDMA_READ_RESPONSE_MIDDLE", [RDETH], ANY;
    RdReadResponseLast = 0x4f, Rd, "RD_RDMA_READ_RESPONSE_LAST", [RDETH, AETH], ANY;
    RdReadResponseOnly = 0x50, Rd, "RD_RDMA_READ_RESPONSE_ONLY", [RDETH, AETH], ANY;
    RdAck = 0x51, Rd, "RD_ACKNOWLEDGE", [RDETH, AETH], NONE;
    RdAtomicAck = 0x52, Rd, "RD_ATOMIC_ACKNOWLEDGE", [RDETH, AETH, ATOMIC_ACK], NONE;
    RdCompareSwap = 0x53, Rd, "RD_COMPARE_SWAP", [RDETH, DETH, ATOMIC], NONE;
    RdFetchAdd = 0x54, Rd, "RD_FETCH_ADD", [RDETH, DETH, ATOMIC], NONE;
    RdResync = 0x55, Rd, "RD_RESYNC", [RDETH, DETH], NONE;

    UdSendOnly = 0x64, Ud, "UD_SEND_ONLY", [DETH], ANY;
    UdSendOnlyImm = 0x65, Ud, "UD_SEND_ONLY_WITH_IMMEDIATE", [DETH, IMM], ANY;

    Cnp = 0x81, Cnp, "CNP", [CNP_RESV], NONE;
}

/// What the receive path needs of an opcode byte, in one lookup of [`OP_TABLE`]: the
/// opcode, whether uroce handles its transport (not RD), how long its extension headers
/// are, which of the common sets they are, and its payload rule as bounds. The same facts as [`Opcode::headers`], [`Opcode::payload`]
/// and [`Opcode::transport`], laid out so that parsing a packet does not walk four
/// `match`es (see `wire::fastpath`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct OpInfo {
    /// The opcode, `None` for an unknown or reserved value.
    pub opcode: Option<Opcode>,
    /// True for opcodes of a transport uroce implements (RC, UC, UD, CNP).
    pub supported: bool,
    /// The extension headers, in wire order ([`Opcode::headers`]).
    pub headers: &'static [ExtHeader],
    /// Total length of the extension headers.
    pub ext_len: u8,
    /// Which extension headers, as one of the common sets (a jump table's index).
    pub shape: ExtShape,
    /// The payload rule as bounds on the bytes after the extension headers (payload and
    /// pad): at least `min_rest`, at most `max_rest`, and a pad count other than 0 only
    /// where `pad_ok`.
    pub min_rest: u16,
    pub max_rest: u16,
    pub pad_ok: bool,
}

/// The extension headers of an opcode, as one of the sets the receive path meets most.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ExtShape {
    /// None.
    Bare,
    /// RETH.
    Reth,
    /// AETH.
    Aeth,
    /// ImmDt.
    Imm,
    /// RETH, ImmDt.
    RethImm,
    /// DETH.
    Deth,
    /// Any other set.
    Other,
}

const fn ext_shape(h: &[ExtHeader]) -> ExtShape {
    match h {
        [] => ExtShape::Bare,
        [ExtHeader::Reth] => ExtShape::Reth,
        [ExtHeader::Aeth] => ExtShape::Aeth,
        [ExtHeader::ImmDt] => ExtShape::Imm,
        [ExtHeader::Reth, ExtHeader::ImmDt] => ExtShape::RethImm,
        [ExtHeader::Deth] => ExtShape::Deth,
        _ => ExtShape::Other,
    }
}

const fn op_info(v: u8) -> OpInfo {
    match Opcode::from_u8(v) {
        None => OpInfo {
            opcode: None,
            supported: false,
            headers: &[],
            ext_len: 0,
            shape: ExtShape::Other,
            min_rest: 0,
            max_rest: 0,
            pad_ok: false,
        },
        Some(op) => {
            let hdrs = op.headers();
            let mut len = 0;
            let mut i = 0;
            while i < hdrs.len() {
                len += hdrs[i].wire_len();
                i += 1;
            }
            OpInfo {
                opcode: Some(op),
                supported: op.is_supported(),
                headers: hdrs,
                ext_len: len as u8,
                shape: ext_shape(hdrs),
                min_rest: match op.payload() {
                    PayloadRule::Exactly(n) => n as u16,
                    _ => 0,
                },
                max_rest: match op.payload() {
                    PayloadRule::None => 0,
                    PayloadRule::Exactly(n) => n as u16,
                    PayloadRule::Any => super::MAX_PAYLOAD as u16,
                },
                pad_ok: matches!(op.payload(), PayloadRule::Any),
            }
        }
    }
}

/// [`OpInfo`] of every opcode byte, built at compile time from the table above.
pub(crate) static OP_TABLE: [OpInfo; 256] = {
    let mut t = [op_info(0xff); 256];
    let mut v = 0;
    while v < 256 {
        t[v] = op_info(v as u8);
        v += 1;
    }
    t
};

impl Opcode {
    /// The opcode's numeric value.
    pub const fn value(self) -> u8 {
        self as u8
    }

    /// True when `header` follows the BTH for this opcode.
    pub fn has(self, header: ExtHeader) -> bool {
        self.headers().contains(&header)
    }

    /// Total length of the extension headers.
    pub fn headers_len(self) -> usize {
        self.headers().iter().map(|h| h.wire_len()).sum()
    }

    /// False for RD, which uroce knows by number but does not implement.
    pub const fn is_supported(self) -> bool {
        !matches!(self.transport(), TransportKind::Rd)
    }

    /// True when the opcode carries a payload (possibly of length 0).
    pub const fn carries_payload(self) -> bool {
        !matches!(self.payload(), PayloadRule::None)
    }

    /// True for the first packet of a multi-packet message (`*_FIRST`).
    pub const fn is_first(self) -> bool {
        matches!(
            self,
            Self::RcSendFirst
                | Self::RcWriteFirst
                | Self::RcReadResponseFirst
                | Self::UcSendFirst
                | Self::UcWriteFirst
                | Self::RdSendFirst
                | Self::RdWriteFirst
                | Self::RdReadResponseFirst
        )
    }

    /// True for what an RC responder sends its requester: ACK / NAK, ATOMIC ACK and READ
    /// responses (IBTA Vol. 1 §9.2.3); everything else on an RC QP is a request.
    pub const fn is_rc_response(self) -> bool {
        matches!(
            self,
            Self::RcAck
                | Self::RcAtomicAck
                | Self::RcReadResponseFirst
                | Self::RcReadResponseMiddle
                | Self::RcReadResponseLast
                | Self::RcReadResponseOnly
        )
    }

    /// True for a middle packet (`*_MIDDLE`).
    pub const fn is_middle(self) -> bool {
        matches!(
            self,
            Self::RcSendMiddle
                | Self::RcWriteMiddle
                | Self::RcReadResponseMiddle
                | Self::UcSendMiddle
                | Self::UcWriteMiddle
                | Self::RdSendMiddle
                | Self::RdWriteMiddle
                | Self::RdReadResponseMiddle
        )
    }
}

impl TryFrom<u8> for Opcode {
    type Error = WireError;

    /// Converts, reporting an unknown opcode at offset 0 (callers that know where the
    /// BTH sits rewrite the offset).
    fn try_from(v: u8) -> Result<Self, WireError> {
        Self::from_u8(v).ok_or(WireError::UnknownOpcode {
            opcode: v,
            offset: 0,
        })
    }
}

impl std::fmt::Display for Opcode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The receive path's table says what the opcode's own methods say, for every byte.
    #[test]
    fn the_op_table_agrees_with_the_opcodes() {
        for v in 0..=255u8 {
            let t = OP_TABLE[usize::from(v)];
            assert_eq!(t.opcode, Opcode::from_u8(v));
            match Opcode::from_u8(v) {
                None => assert!(!t.supported),
                Some(op) => {
                    assert_eq!(t.supported, op.is_supported());
                    assert_eq!(t.headers, op.headers());
                    assert_eq!(usize::from(t.ext_len), op.headers_len());
                    assert_eq!(t.shape, ext_shape(op.headers()));
                    let bounds = (t.min_rest, t.max_rest, t.pad_ok);
                    match op.payload() {
                        PayloadRule::None => assert_eq!(bounds, (0, 0, false)),
                        PayloadRule::Exactly(n) => assert_eq!(bounds, (n as u16, n as u16, false)),
                        PayloadRule::Any => assert_eq!(bounds, (0, 4096, true)),
                    }
                }
            }
        }
    }

    #[test]
    fn every_value_round_trips_and_unknown_is_none() {
        let mut known = 0;
        for v in 0..=255u8 {
            if let Some(op) = Opcode::from_u8(v) {
                assert_eq!(op.value(), v);
                known += 1;
            }
        }
        assert_eq!(known, Opcode::ALL.len());
        // Reserved values in each transport's range.
        for v in [
            0x15u8, 0x18, 0x1f, 0x2c, 0x3f, 0x56, 0x60, 0x63, 0x66, 0x80, 0x82, 0xc0, 0xff,
        ] {
            assert!(Opcode::from_u8(v).is_none(), "{v:#x} must be unknown");
            assert!(matches!(
                Opcode::try_from(v),
                Err(WireError::UnknownOpcode { opcode, .. }) if opcode == v
            ));
        }
    }

    #[test]
    fn transport_comes_from_the_top_bits() {
        for &op in Opcode::ALL {
            let expect = match op.value() >> 5 {
                0 => TransportKind::Rc,
                1 => TransportKind::Uc,
                2 => TransportKind::Rd,
                3 => TransportKind::Ud,
                _ => TransportKind::Cnp,
            };
            assert_eq!(op.transport(), expect, "{op}");
            assert!(op.name().starts_with(expect.name()), "{op}");
        }
    }

    #[test]
    fn header_lists_follow_table_35() {
        let hs = |op: Opcode| op.headers().to_vec();
        assert_eq!(hs(Opcode::RcWriteOnlyImm), [H::Reth, H::ImmDt]);
        assert_eq!(hs(Opcode::RcAtomicAck), [H::Aeth, H::AtomicAckEth]);
        assert_eq!(hs(Opcode::UdSendOnlyImm), [H::Deth, H::ImmDt]);
        assert_eq!(
            hs(Opcode::RdWriteOnlyImm),
            [H::Rdeth, H::Deth, H::Reth, H::ImmDt]
        );
        assert_eq!(hs(Opcode::RcFlush), [H::Feth, H::Reth]);
        assert_eq!(Opcode::RcCompareSwap.headers_len(), 28);
        assert_eq!(Opcode::Cnp.headers_len(), 16);
        assert!(!Opcode::RcReadRequest.carries_payload());
        assert!(Opcode::RcReadResponseMiddle.carries_payload());
        assert!(!Opcode::RdSendOnly.is_supported());
        assert!(Opcode::UcWriteFirst.is_first() && Opcode::RcSendMiddle.is_middle());
    }
}
