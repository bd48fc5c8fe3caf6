//! What the host knows about its network, and raw access to its links.
//!
//! - [`packet_socket`]: AF_PACKET sockets, and capturing what crosses an interface.

pub mod packet_socket;
