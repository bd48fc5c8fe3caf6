//! The fuzzing entry points (hidden from the documentation): those of the sans-IO core
//! (`uroce_proto::fuzzing`), and the neighbour cache's, which lives in [`crate::net`].

#![forbid(unsafe_code)]

pub use uroce_proto::fuzzing::*;

/// ARP and NDP frames (the neighbour code's parsers): what parses re-emits and parses
/// back to the same representation, and a neighbour cache fed the frame never panics
/// and only sends frames that parse.
pub fn neighbour(data: &[u8]) {
    use crate::wire::{arp, ndp};
    use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
    if let Ok((_, a)) = arp::parse_frame(data) {
        let mut out = [0u8; 64];
        let n = a
            .emit_frame(&mut out)
            .expect("a parsed ARP packet must re-emit");
        let (_, again) = arp::parse_frame(&out[..n]).expect("a re-emitted ARP frame must parse");
        assert_eq!(again, a);
    }
    if let Ok(f) = ndp::parse_frame(data) {
        let mut out = [0u8; 64];
        let len = f.ndp.buffer_len();
        f.ndp
            .emit(&f.ip.src, &f.ip.dst, &mut out[..len])
            .expect("a parsed neighbor discovery message must re-emit");
        let m = ndp::Message::new_checked(&out[..len]).expect("re-emitted message");
        let again = ndp::NdpRepr::parse(&f.ip, &m).expect("a re-emitted message must parse");
        assert_eq!(again, f.ndp);
    }
    let mine = [
        IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)),
        IpAddr::V6(Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 1)),
        IpAddr::V6(Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 1)),
    ];
    let mut cache = crate::net::neighbours::Neighbours::new([2, 0, 0, 0, 0, 1], &mine);
    let now = std::time::Instant::now();
    cache.handle_frame(now, data);
    let mut out = [0u8; 256];
    let mut sent = 0;
    while let Some(n) = cache.poll_transmit(now, &mut out) {
        let f = &out[..n];
        assert!(
            arp::parse_frame(f).is_ok() || ndp::parse_frame(f).is_ok(),
            "the cache sent a frame that does not parse: {f:02x?}"
        );
        sent += 1;
        assert!(sent < 64, "the cache keeps sending");
    }
}
