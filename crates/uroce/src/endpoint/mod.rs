//! The sans-IO endpoint's edges: what it gives a backend to send ([`Transmit`]) and what it
//! takes from one ([`Received`]).

#![forbid(unsafe_code)]

mod transmit;

pub use transmit::Transmit;

use crate::wire::DatagramRepr;

/// One received packet as a backend has it.
#[derive(Debug, Clone, Copy)]
pub enum Received<'a> {
    /// A whole Ethernet frame (AF_XDP, a packet socket, a simulated link): the endpoint
    /// parses Ethernet, IP and UDP from the frame itself
    /// ([`crate::verbs::Context::handle_frame`]).
    Frame(&'a [u8]),
    /// A UDP payload and the addressing the socket reported
    /// ([`crate::verbs::Context::handle_datagram`]).
    Datagram {
        /// IP and UDP as they were on the wire, as far as the socket tells (see
        /// [`crate::datapath::udp`] for the IPv4 identification).
        datagram: &'a DatagramRepr,
        /// BTH to ICRC.
        roce: &'a [u8],
    },
}

impl Received<'_> {
    /// Bytes received (the frame, or the UDP payload).
    pub fn len(&self) -> usize {
        match self {
            Self::Frame(f) => f.len(),
            Self::Datagram { roce, .. } => roce.len(),
        }
    }

    /// True when nothing was received.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
