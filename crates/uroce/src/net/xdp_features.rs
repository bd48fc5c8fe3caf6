//! What a driver says it can do with XDP: the `netdev` generic netlink family's
//! `NETDEV_CMD_DEV_GET` (Linux 6.3 and later, `Documentation/netlink/specs/netdev.yaml`),
//! whose `xdp-features` bit set tells native XDP (`basic`, `redirect`) from AF_XDP
//! zero-copy (`xsk-zerocopy`) without binding a socket to try.
//!
//! Two requests on one `NETLINK_GENERIC` socket: `CTRL_CMD_GETFAMILY` for the family's
//! id, then the device's attributes. The messages are a handful of fixed fields and
//! attributes, written and read here (no generic-netlink crate for two messages).

use std::io;

use netlink_sys::{protocols::NETLINK_GENERIC, Socket, SocketAddr};

/// The driver runs XDP programs in its own receive path (native mode).
pub const BASIC: u64 = 1;
/// The driver can redirect frames (to an AF_XDP socket among others).
pub const REDIRECT: u64 = 2;
/// AF_XDP zero-copy: frames land in the socket's own memory with no copy.
pub const XSK_ZEROCOPY: u64 = 8;

/// `GENL_ID_CTRL`: the generic netlink controller.
const GENL_ID_CTRL: u16 = 0x10;
/// `CTRL_CMD_GETFAMILY`.
const CTRL_CMD_GETFAMILY: u8 = 3;
/// `CTRL_ATTR_FAMILY_ID` (u16) and `CTRL_ATTR_FAMILY_NAME` (string).
const CTRL_ATTR_FAMILY_ID: u16 = 1;
const CTRL_ATTR_FAMILY_NAME: u16 = 2;
/// `NETDEV_CMD_DEV_GET`.
const NETDEV_CMD_DEV_GET: u8 = 1;
/// `NETDEV_A_DEV_IFINDEX` (u32) and `NETDEV_A_DEV_XDP_FEATURES` (u64).
const NETDEV_A_DEV_IFINDEX: u16 = 1;
const NETDEV_A_DEV_XDP_FEATURES: u16 = 3;
/// `NLM_F_REQUEST`, `NLMSG_ERROR`.
const NLM_F_REQUEST: u16 = 1;
const NLMSG_ERROR: u16 = 2;

/// The `xdp-features` bits of interface `ifindex` in the calling thread's network
/// namespace. An error when the kernel has no `netdev` family (before 6.3: ENOENT) or
/// no such interface.
pub fn xdp_features(ifindex: u32) -> io::Result<u64> {
    let mut sock = Socket::new(NETLINK_GENERIC)?;
    sock.bind_auto()?;
    sock.connect(&SocketAddr::new(0, 0))?;
    let family = ask(
        &mut sock,
        GENL_ID_CTRL,
        CTRL_CMD_GETFAMILY,
        &attr(CTRL_ATTR_FAMILY_NAME, b"netdev\0"),
        1,
    )?;
    let id = find(&family, CTRL_ATTR_FAMILY_ID)
        .and_then(|v| Some(u16::from_ne_bytes(v.get(..2)?.try_into().ok()?)))
        .ok_or_else(|| io::Error::other("the netdev family's id is missing"))?;
    let dev = ask(
        &mut sock,
        id,
        NETDEV_CMD_DEV_GET,
        &attr(NETDEV_A_DEV_IFINDEX, &ifindex.to_ne_bytes()),
        2,
    )?;
    find(&dev, NETDEV_A_DEV_XDP_FEATURES)
        .and_then(|v| Some(u64::from_ne_bytes(v.get(..8)?.try_into().ok()?)))
        .ok_or_else(|| io::Error::other("the device's xdp-features are missing"))
}

/// One attribute (`struct nlattr`), padded to 4 bytes.
fn attr(kind: u16, value: &[u8]) -> Vec<u8> {
    let mut b = Vec::with_capacity(4 + value.len() + 3);
    b.extend_from_slice(&(4 + value.len() as u16).to_ne_bytes());
    b.extend_from_slice(&kind.to_ne_bytes());
    b.extend_from_slice(value);
    b.resize(b.len().next_multiple_of(4), 0);
    b
}

/// Sends one generic netlink request (`nlmsghdr`, `genlmsghdr` with `cmd`, version 1,
/// then `attrs`) and returns the attributes of the answer.
fn ask(sock: &mut Socket, family: u16, cmd: u8, attrs: &[u8], seq: u32) -> io::Result<Vec<u8>> {
    let mut m = Vec::with_capacity(20 + attrs.len());
    m.extend_from_slice(&(20 + attrs.len() as u32).to_ne_bytes());
    m.extend_from_slice(&family.to_ne_bytes());
    m.extend_from_slice(&NLM_F_REQUEST.to_ne_bytes());
    m.extend_from_slice(&seq.to_ne_bytes());
    m.extend_from_slice(&0u32.to_ne_bytes());
    m.extend_from_slice(&[cmd, 1, 0, 0]);
    m.extend_from_slice(attrs);
    sock.send(&m, 0)?;
    loop {
        let (buf, _) = sock.recv_from_full()?;
        if buf.is_empty() {
            return Err(io::Error::other("the kernel closed the netlink socket"));
        }
        if let Some(a) = answer(&buf, seq)? {
            return Ok(a);
        }
    }
}

/// The attributes of the answer to request `seq` in `buf` (one datagram of netlink
/// messages); `None` when it holds none; the errno of an `NLMSG_ERROR`.
fn answer(buf: &[u8], seq: u32) -> io::Result<Option<Vec<u8>>> {
    let bad = || io::Error::other("a malformed netlink answer");
    let mut rest = buf;
    while rest.len() >= 16 {
        let len = u32::from_ne_bytes(rest[..4].try_into().unwrap()) as usize;
        let kind = u16::from_ne_bytes(rest[4..6].try_into().unwrap());
        let got = u32::from_ne_bytes(rest[8..12].try_into().unwrap());
        if len < 16 || len > rest.len() {
            return Err(bad());
        }
        let body = &rest[16..len];
        if got == seq {
            if kind == NLMSG_ERROR {
                let e = i32::from_ne_bytes(body.get(..4).ok_or_else(bad)?.try_into().unwrap());
                return Err(io::Error::from_raw_os_error(-e));
            }
            // After the 4-byte genlmsghdr.
            return body.get(4..).map(|a| Some(a.to_vec())).ok_or_else(bad);
        }
        rest = &rest[len.next_multiple_of(4).min(rest.len())..];
    }
    Ok(None)
}

/// The value of the first attribute of type `kind` in `attrs`.
fn find(attrs: &[u8], kind: u16) -> Option<&[u8]> {
    let mut rest = attrs;
    while rest.len() >= 4 {
        let len = u16::from_ne_bytes(rest[..2].try_into().ok()?) as usize;
        let k = u16::from_ne_bytes(rest[2..4].try_into().ok()?) & 0x3fff;
        if len < 4 || len > rest.len() {
            return None;
        }
        if k == kind {
            return Some(&rest[4..len]);
        }
        rest = &rest[len.next_multiple_of(4).min(rest.len())..];
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attributes_are_found_past_others_and_padding() {
        let mut a = attr(7, b"abc");
        a.extend(attr(NETDEV_A_DEV_XDP_FEATURES, &0x2bu64.to_ne_bytes()));
        let v = find(&a, NETDEV_A_DEV_XDP_FEATURES).unwrap();
        assert_eq!(u64::from_ne_bytes(v.try_into().unwrap()), 0x2b);
        assert_eq!(find(&a, 9), None);
        // A length beyond the buffer ends the search instead of reading past it.
        assert_eq!(find(&[40, 0, 3, 0, 1, 2], 3), None);
    }

    #[test]
    fn an_error_answer_is_its_errno() {
        let mut m = Vec::new();
        m.extend_from_slice(&36u32.to_ne_bytes());
        m.extend_from_slice(&NLMSG_ERROR.to_ne_bytes());
        m.extend_from_slice(&0u16.to_ne_bytes());
        m.extend_from_slice(&5u32.to_ne_bytes());
        m.extend_from_slice(&0u32.to_ne_bytes());
        m.extend_from_slice(&(-libc::ENODEV).to_ne_bytes());
        m.extend_from_slice(&[0; 16]);
        let e = answer(&m, 5).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ENODEV));
        // Another request's answer is not ours; a short length is malformed.
        assert!(answer(&m, 6).unwrap().is_none());
        m[0] = 8;
        assert!(answer(&m, 5).is_err());
    }

    #[test]
    fn loopback_has_no_zero_copy() {
        // Where the kernel has the netdev family (6.3+), loopback is index 1 of every
        // namespace and offers no AF_XDP zero-copy.
        match xdp_features(1) {
            Ok(f) => assert_eq!(f & XSK_ZEROCOPY, 0, "{f:#x}"),
            Err(e) => eprintln!("skipped: no netdev family here ({e})"),
        }
    }
}
