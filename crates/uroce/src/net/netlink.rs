//! The plumbing of every host query: one request on a `NETLINK_ROUTE` socket and the
//! messages the kernel answers with (rtnetlink(7), netlink(7); the protocol is RFC 3549).
//!
//! A request is a [`RouteNetlinkMessage`] (`RTM_GETLINK`, `RTM_GETADDR`, `RTM_GETROUTE`,
//! `RTM_GETNEIGH`) sent with `NLM_F_REQUEST`, plus `NLM_F_DUMP` for a whole table. The
//! kernel answers a dump with multi-part messages ended by `NLMSG_DONE`, a single get with
//! one message, and either with `NLMSG_ERROR` carrying a negative errno when it fails.
//!
//! The socket is opened per query in the calling thread's network namespace (a thread
//! that joined another one with `setns` asks that one), used synchronously and closed:
//! nothing is forked, nothing stays open. Message encoding and decoding are
//! `netlink-packet-route`'s; the socket is `netlink-sys`'s.

use std::io;

use netlink_packet_core::{
    NetlinkHeader, NetlinkMessage, NetlinkPayload, NLM_F_DUMP, NLM_F_REQUEST,
};
use netlink_packet_route::RouteNetlinkMessage;
use netlink_sys::{protocols::NETLINK_ROUTE, Socket, SocketAddr};

use super::NetError;

/// Whether a request asks for one object or dumps a whole table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `NLM_F_REQUEST`: one answer (or an error).
    Get,
    /// `NLM_F_REQUEST | NLM_F_DUMP`: every object, until `NLMSG_DONE`.
    Dump,
}

/// The name of a request in errors ("RTM_GETROUTE").
fn name(msg: &RouteNetlinkMessage) -> &'static str {
    match msg {
        RouteNetlinkMessage::GetLink(_) => "RTM_GETLINK",
        RouteNetlinkMessage::GetAddress(_) => "RTM_GETADDR",
        RouteNetlinkMessage::GetRoute(_) => "RTM_GETROUTE",
        RouteNetlinkMessage::GetNeighbour(_) => "RTM_GETNEIGH",
        _ => "request",
    }
}

/// The bytes of `msg` as one netlink message with sequence number `seq`.
pub fn encode(msg: RouteNetlinkMessage, kind: Kind, seq: u32) -> Vec<u8> {
    let mut header = NetlinkHeader::default();
    header.flags = match kind {
        Kind::Get => NLM_F_REQUEST,
        Kind::Dump => NLM_F_REQUEST | NLM_F_DUMP,
    };
    header.sequence_number = seq;
    let mut m = NetlinkMessage::new(header, NetlinkPayload::InnerMessage(msg));
    m.finalize();
    let mut buf = vec![0; m.buffer_len()];
    m.serialize(&mut buf);
    buf
}

/// What one datagram from the kernel said.
#[derive(Debug, Default)]
pub struct Datagram {
    /// The rtnetlink messages in it (for the request with our sequence number).
    pub messages: Vec<RouteNetlinkMessage>,
    /// The answer is complete: `NLMSG_DONE`, an ACK, or a single get's answer.
    pub done: bool,
}

/// Splits one datagram into its netlink messages and keeps those answering request
/// `seq`. An `NLMSG_ERROR` with an errno becomes that errno as an [`io::Error`]; a
/// message that does not parse becomes [`NetError::Decode`].
pub fn decode(buf: &[u8], seq: u32, kind: Kind, op: &'static str) -> Result<Datagram, NetError> {
    let mut out = Datagram::default();
    let mut rest = buf;
    while rest.len() >= 16 {
        let len = u32::from_ne_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize;
        if len < 16 || len > rest.len() {
            return Err(NetError::Decode(format!(
                "{op}: a message of {len} bytes in {} remaining",
                rest.len()
            )));
        }
        let msg = NetlinkMessage::<RouteNetlinkMessage>::deserialize(&rest[..len])
            .map_err(|e| NetError::Decode(format!("{op}: {e}")))?;
        // Messages are padded to 4 bytes (NLMSG_ALIGN).
        rest = &rest[len.next_multiple_of(4).min(rest.len())..];
        if msg.header.sequence_number != seq {
            continue;
        }
        match msg.payload {
            NetlinkPayload::Done(_) => out.done = true,
            NetlinkPayload::Error(e) => match e.code {
                None => out.done = true,
                Some(_) => {
                    return Err(NetError::Netlink {
                        op,
                        source: e.to_io(),
                    })
                }
            },
            NetlinkPayload::InnerMessage(m) => {
                out.messages.push(m);
                if kind == Kind::Get {
                    out.done = true;
                }
            }
            NetlinkPayload::Overrun(_) => {
                return Err(NetError::Netlink {
                    op,
                    source: io::Error::other("the kernel's answer overran"),
                })
            }
            _ => {}
        }
    }
    Ok(out)
}

/// Sends `msg` on a new `NETLINK_ROUTE` socket and returns every message of the answer
/// (one for a [`Kind::Get`], the table for a [`Kind::Dump`]).
pub fn request(msg: RouteNetlinkMessage, kind: Kind) -> Result<Vec<RouteNetlinkMessage>, NetError> {
    let op = name(&msg);
    let io = |source: io::Error| NetError::Netlink { op, source };
    let mut sock = Socket::new(NETLINK_ROUTE).map_err(io)?;
    sock.bind_auto().map_err(io)?;
    sock.connect(&SocketAddr::new(0, 0)).map_err(io)?;
    // One request per socket: any sequence number will do, 1 is as good as any.
    let seq = 1;
    let bytes = encode(msg, kind, seq);
    sock.send(&bytes, 0).map_err(io)?;
    let mut all = Vec::new();
    loop {
        let (buf, _) = loop {
            match sock.recv_from_full() {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                r => break r.map_err(io)?,
            }
        };
        if buf.is_empty() {
            return Err(io(io::Error::other("the kernel closed the socket")));
        }
        let d = decode(&buf, seq, kind, op)?;
        all.extend(d.messages);
        if d.done {
            return Ok(all);
        }
    }
}

/// Builders of raw netlink bytes, for tests that decode what the kernel would send.
#[cfg(test)]
pub(crate) mod testing {
    /// One netlink message: a 16-byte `nlmsghdr` (type, flags, sequence) and `body`,
    /// padded to 4 bytes.
    pub fn nlmsg(kind: u16, flags: u16, seq: u32, body: &[u8]) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(&(16 + body.len() as u32).to_ne_bytes());
        b.extend_from_slice(&kind.to_ne_bytes());
        b.extend_from_slice(&flags.to_ne_bytes());
        b.extend_from_slice(&seq.to_ne_bytes());
        b.extend_from_slice(&0u32.to_ne_bytes());
        b.extend_from_slice(body);
        while b.len() % 4 != 0 {
            b.push(0);
        }
        b
    }

    /// One attribute (`struct nlattr`): length, type, value, padded to 4 bytes.
    pub fn nla(kind: u16, value: &[u8]) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(&(4 + value.len() as u16).to_ne_bytes());
        b.extend_from_slice(&kind.to_ne_bytes());
        b.extend_from_slice(value);
        while b.len() % 4 != 0 {
            b.push(0);
        }
        b
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use netlink_packet_route::link::LinkMessage;

    /// An `NLMSG_DONE` (type 3) for `seq`, as the kernel ends a dump.
    fn done(seq: u32) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(&20u32.to_ne_bytes());
        b.extend_from_slice(&3u16.to_ne_bytes());
        b.extend_from_slice(&2u16.to_ne_bytes()); // NLM_F_MULTI
        b.extend_from_slice(&seq.to_ne_bytes());
        b.extend_from_slice(&0u32.to_ne_bytes());
        b.extend_from_slice(&0i32.to_ne_bytes());
        b
    }

    /// An `NLMSG_ERROR` (type 2) with `errno` for a request of sequence `seq`.
    fn error(seq: u32, errno: i32) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(&36u32.to_ne_bytes());
        b.extend_from_slice(&2u16.to_ne_bytes());
        b.extend_from_slice(&0u16.to_ne_bytes());
        b.extend_from_slice(&seq.to_ne_bytes());
        b.extend_from_slice(&0u32.to_ne_bytes());
        b.extend_from_slice(&(-errno).to_ne_bytes());
        b.extend_from_slice(&[0u8; 16]); // the request's header, echoed
        b
    }

    #[test]
    fn a_dump_request_has_the_dump_flags() {
        let b = encode(
            RouteNetlinkMessage::GetLink(LinkMessage::default()),
            Kind::Dump,
            7,
        );
        assert_eq!(
            u32::from_ne_bytes(b[0..4].try_into().unwrap()) as usize,
            b.len()
        );
        assert_eq!(u16::from_ne_bytes([b[4], b[5]]), 18, "RTM_GETLINK");
        assert_eq!(u16::from_ne_bytes([b[6], b[7]]), 0x301, "REQUEST | DUMP");
        assert_eq!(u32::from_ne_bytes(b[8..12].try_into().unwrap()), 7);
        let g = encode(
            RouteNetlinkMessage::GetLink(LinkMessage::default()),
            Kind::Get,
            7,
        );
        assert_eq!(u16::from_ne_bytes([g[6], g[7]]), 1, "REQUEST only");
    }

    #[test]
    fn done_ends_a_dump_and_errors_carry_the_errno() {
        let d = decode(&done(5), 5, Kind::Dump, "RTM_GETLINK").unwrap();
        assert!(d.done && d.messages.is_empty());
        // Another request's messages are not ours.
        assert!(!decode(&done(6), 5, Kind::Dump, "RTM_GETLINK").unwrap().done);
        let e = decode(&error(5, libc::EACCES), 5, Kind::Get, "RTM_GETROUTE").unwrap_err();
        match &e {
            NetError::Netlink { op, source } => {
                assert_eq!(*op, "RTM_GETROUTE");
                assert_eq!(source.raw_os_error(), Some(libc::EACCES));
            }
            other => panic!("{other:?}"),
        }
        assert!(
            e.to_string()
                .contains("netlink RTM_GETROUTE: Permission denied"),
            "{e}"
        );
        // An ACK (errno 0) ends the answer.
        assert!(decode(&error(5, 0), 5, Kind::Get, "x").unwrap().done);
    }

    #[test]
    fn bad_lengths_are_decode_errors_not_panics() {
        let mut b = done(1);
        b[0] = 200;
        assert!(matches!(
            decode(&b, 1, Kind::Dump, "x"),
            Err(NetError::Decode(_))
        ));
        for n in 0..b.len() {
            let _ = decode(&done(1)[..n], 1, Kind::Dump, "x");
        }
    }

    /// Asks the running kernel for its links: loopback is always there.
    #[test]
    fn dumps_this_namespace_s_links() {
        let links = request(
            RouteNetlinkMessage::GetLink(LinkMessage::default()),
            Kind::Dump,
        )
        .unwrap();
        assert!(links
            .iter()
            .any(|m| matches!(m, RouteNetlinkMessage::NewLink(_))));
    }
}
