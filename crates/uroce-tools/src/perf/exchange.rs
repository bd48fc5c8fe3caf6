//! The exchange between two uroce perf peers: one JSON line each way over TCP, [`Hello`]
//! with the QPNs, PSN, rkeys and addresses, and the helpers that write and read such lines,
//! accept the client and notice that the peer said stop.

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};

use anyhow::Context as _;

use serde::{Deserialize, Serialize};

use super::PerfOp;

/// One side's line of the exchange.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Hello {
    pub(crate) op: PerfOp,
    pub(crate) size: u32,
    pub(crate) qpn: u32,
    pub(crate) psn: u32,
    pub(crate) rkey: u32,
    pub(crate) addr: u64,
    /// Every QP's number (the first is `qpn`).
    #[serde(default)]
    pub(crate) qpns: Vec<u32>,
    /// Event loops (threads) on the sender's side, one QP each, when above 1.
    #[serde(default)]
    pub(crate) threads: u32,
    /// Each QP's rkey and buffer address, when they differ (one region per loop).
    #[serde(default)]
    pub(crate) rkeys: Vec<u32>,
    #[serde(default)]
    pub(crate) addrs: Vec<u64>,
    /// The sender's path MTU in bytes (0 from a peer that does not say): both sides use
    /// the smaller of the two ([`agreed_mtu`]), as perftest's exchange does.
    #[serde(default)]
    pub(crate) mtu: u32,
}

/// The path MTU both sides use: the smaller of ours and the one the peer's [`Hello`]
/// names (ours where it names none or one that is not an IBTA MTU).
pub(crate) fn agreed_mtu(ours: uroce::verbs::Mtu, theirs: u32) -> uroce::verbs::Mtu {
    match uroce::verbs::Mtu::from_bytes(theirs) {
        Some(t) if t.bytes() < ours.bytes() => t,
        _ => ours,
    }
}

/// Writes `v` as one JSON line.
pub(crate) fn send_json(tcp: &TcpStream, v: &impl Serialize) -> anyhow::Result<()> {
    let line = serde_json::to_string(v)?;
    writeln!(&mut &*tcp, "{line}")?;
    Ok(())
}

/// Reads one JSON line; `what` names it in the error ("hello from the server").
pub(crate) fn read_json<T: serde::de::DeserializeOwned>(
    tcp: &TcpStream,
    what: &str,
) -> anyhow::Result<T> {
    let mut line = String::new();
    BufReader::new(tcp).read_line(&mut line)?;
    serde_json::from_str(&line).with_context(|| format!("bad {what}"))
}

/// Whether the peer said stop (any byte) or went away, on a non-blocking stream; false
/// while nothing came.
pub(super) fn peer_stopped(tcp: &TcpStream) -> bool {
    let mut probe = [0u8; 64];
    match std::io::Read::read(&mut &*tcp, &mut probe) {
        Ok(_) => true,
        Err(e) => e.kind() != std::io::ErrorKind::WouldBlock,
    }
}

/// Waits for one client on TCP `port`, over IPv6 or IPv4 (dual-stack where the host has
/// IPv6, else IPv4 only); the listener is closed once it has come.
pub fn accept_one(port: u16) -> anyhow::Result<TcpStream> {
    Ok(listen(port)?.accept()?.0)
}

/// Listens on TCP `port` for clients one after another (`uroce perf --keep-serving`), as
/// [`accept_one`] does for one.
pub fn listen(port: u16) -> anyhow::Result<TcpListener> {
    TcpListener::bind(SocketAddr::from((std::net::Ipv6Addr::UNSPECIFIED, port)))
        .or_else(|_| TcpListener::bind(SocketAddr::from(([0, 0, 0, 0], port))))
        .with_context(|| format!("listening on TCP {port}"))
}
