//! What the endpoint hands a backend with each datagram it produces, quinn-style: the
//! RoCE bytes (BTH to ICRC) are in the caller's buffer, and this record says where they go.

use crate::wire::{DatagramRepr, WireError};

/// One datagram to send: the RoCE part is the first `len` bytes of the buffer given to
/// [`crate::verbs::Context::poll_transmit`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transmit {
    /// IP and UDP: addresses, ports, TOS (DSCP and ECN). A UDP socket sends to
    /// `datagram.dst()` port 4791 from `datagram.udp.src_port` with this TOS; a backend that
    /// builds frames writes these headers in front ([`Transmit::emit_link_headers`]). The
    /// ICRC covers them as they are here.
    pub datagram: DatagramRepr,
    /// The next hop's MAC address, as the QP's path (or the packet a CNP answers) gives it;
    /// only a backend that builds Ethernet headers uses it.
    pub dst_mac: [u8; 6],
    /// Bytes of the RoCE part: BTH, extension headers, payload, pad and ICRC.
    pub len: usize,
}

impl Transmit {
    /// Bytes Ethernet (no VLAN tag), IP and UDP take in front of the RoCE part.
    pub fn link_headers_len(&self) -> usize {
        self.datagram.link_headers_len()
    }

    /// Length of the whole Ethernet frame.
    pub fn frame_len(&self) -> usize {
        self.link_headers_len() + self.len
    }

    /// Writes Ethernet (from `src_mac`), IP and UDP into `buf`, which must be exactly
    /// [`Transmit::link_headers_len`] bytes: the space right in front of the RoCE part.
    pub fn emit_link_headers(&self, src_mac: [u8; 6], buf: &mut [u8]) -> Result<(), WireError> {
        self.datagram
            .emit_link(src_mac, self.dst_mac, buf, self.len)
    }
}
