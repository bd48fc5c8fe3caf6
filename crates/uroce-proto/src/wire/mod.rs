//! Wire formats: zero-copy views and plain representations of every header a RoCEv2
//! frame carries, the opcode table, the ICRC, and whole-frame parse / build.
//!
//! Each header follows the smoltcp pattern: a zero-copy view over `T: AsRef<[u8]>`
//! (`Header<T>` for most; [`ethernet::Frame`], [`arp::Packet`], [`ndp::Message`],
//! [`atomic::AtomicEthHeader`] and [`atomic::AtomicAckEthHeader`]) whose `new_checked()`
//! turns a short buffer into [`WireError::Truncated`] with need / have, and whose getters
//! read byte offsets named in a private `field` module; plus a plain `Repr` with `parse()`
//! / `buffer_len()` / `emit()`. Two kinds of `parse()`: the outer headers' (Ethernet, IPv4,
//! IPv6, UDP, BTH, ARP, NDP) take a checked view, the extension headers' and the GRH's
//! take the bytes and check them through the view themselves.
//!
//! Setters (on views over `AsMut<[u8]>`) exist for the extension headers (RETH, AETH,
//! DETH, AtomicETH, AtomicAckETH, ImmDt / IETH), the GRH, ARP and NDP, and their `Repr`s
//! emit through them. The Ethernet, IPv4, IPv6, UDP and BTH views are read-only: their
//! `Repr::emit` writes the bytes itself. The one-word headers (ImmDt, IETH, RDETH, FETH)
//! have no `Repr` type: their value is a `u32`, read and written by [`immdt::parse`] and
//! [`immdt::emit`]. The CNP is a BTH followed by 16 reserved bytes ([`cnp`]).
//!
//! Above the transport: [`mad`] (the management datagram header of a UD SEND to QP 1)
//! and [`cm`] (the connection manager's messages and the RDMA CM IP addressing header),
//! read-only views whose only constructor checks the length, and [`cm_repr`], their
//! plain representations, which the connection manager ([`crate::cm`]) emits.
//!
//! Nothing here panics on malformed input: every parse problem is a [`WireError`] that
//! says what and where, and every `emit` into too small a buffer is
//! [`WireError::BufferTooSmall`]. The exception is a view made with `new_unchecked()`:
//! its accessors panic on a buffer shorter than the header, so this module makes one only
//! over bytes whose length it has already checked.
//!
//! Layout of a RoCEv2 frame (IBTA Vol. 1 Annex A17):
//!
//! ```text
//! Ethernet [802.1Q] | IPv4 or IPv6 | UDP (dst 4791) | BTH | ext headers | payload | pad | ICRC
//! ```

#![forbid(unsafe_code)]

pub mod aeth;
pub mod arp;
pub mod atomic;
pub mod bth;
pub mod builder;
pub mod cm;
pub mod cm_repr;
pub mod cnp;
pub mod datagram;
pub mod deth;
mod error;
pub mod ethernet;
mod fastpath;
pub mod grh;
pub mod icrc;
pub mod immdt;
pub mod ipv4;
pub mod ipv6;
pub mod mad;
pub mod ndp;
pub mod opcode;
pub mod packet;
pub mod reth;
pub mod udp;

pub use aeth::{AethRepr, NakCode, Syndrome};
pub use atomic::{AtomicAckEthRepr, AtomicEthRepr};
pub use bth::{Bth, BthRepr};
pub use builder::FrameRepr;
pub use datagram::DatagramRepr;
pub use deth::DethRepr;
pub use error::WireError;
pub use ethernet::{EthernetRepr, VlanTag};
pub use grh::GrhRepr;
pub use ipv4::Ipv4Repr;
pub use ipv6::Ipv6Repr;
pub use opcode::{ExtHeader, Opcode, TransportKind};
pub use packet::{
    dissect, dissect_ip, parse, parse_datagram, parse_datagram_computed, parse_datagram_misfit,
    parse_datagram_unverified, parse_headers, parse_ip, parse_misfit, Dissection, ExtHeaders,
    IpRepr, IpView, Misfit, RocePacket,
};
pub use reth::RethRepr;
pub use udp::UdpRepr;

/// UDP destination port assigned to RoCEv2 by IANA.
pub const ROCEV2_UDP_PORT: u16 = 4791;

/// Largest InfiniBand path MTU, hence the largest payload a packet may carry.
pub const MAX_PAYLOAD: usize = 4096;

/// Length of the ICRC trailer.
pub const ICRC_LEN: usize = 4;

/// Reads a big-endian `u16` at `at`; callers have checked the length.
#[inline]
pub(crate) fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

/// Reads a big-endian 24-bit value at `at`; callers have checked the length.
#[inline]
pub(crate) fn be24(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([0, b[at], b[at + 1], b[at + 2]])
}

/// Reads a big-endian `u32` at `at`; callers have checked the length.
#[inline]
pub(crate) fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// Reads a big-endian `u64` at `at`; callers have checked the length.
#[inline]
pub(crate) fn be64(b: &[u8], at: usize) -> u64 {
    let mut v = [0u8; 8];
    v.copy_from_slice(&b[at..at + 8]);
    u64::from_be_bytes(v)
}

#[inline]
pub(crate) fn put16(b: &mut [u8], at: usize, v: u16) {
    b[at..at + 2].copy_from_slice(&v.to_be_bytes());
}

#[inline]
pub(crate) fn put24(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 3].copy_from_slice(&v.to_be_bytes()[1..]);
}

#[inline]
pub(crate) fn put32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_be_bytes());
}

#[inline]
pub(crate) fn put64(b: &mut [u8], at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_be_bytes());
}

/// Returns `Err(BufferTooSmall)` unless the output buffer `buf` has room for `need` bytes.
#[inline]
pub(crate) fn need(buf: &[u8], need: usize) -> Result<(), WireError> {
    if buf.len() < need {
        Err(WireError::BufferTooSmall {
            need,
            have: buf.len(),
        })
    } else {
        Ok(())
    }
}

/// Returns `Err(Truncated)` unless `buf` holds at least `need` bytes.
#[inline]
pub(crate) fn check_len(
    what: &'static str,
    buf: &[u8],
    need: usize,
    offset: usize,
) -> Result<(), WireError> {
    if buf.len() < need {
        Err(WireError::Truncated {
            what,
            offset,
            need,
            have: buf.len(),
        })
    } else {
        Ok(())
    }
}
