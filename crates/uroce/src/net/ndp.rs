//! The Neighbor Discovery (RFC 4861) side of neighbour resolution that is not the cache:
//! which received frames the resolver reads. The wire formats are in
//! [`crate::wire::ndp`] and [`crate::wire::arp`].

use crate::wire::arp;
use crate::wire::ethernet::{self, ETHERTYPE_IPV6};
use crate::wire::ipv6;
use crate::wire::ndp;

/// True for an ARP frame or an ICMPv6 Neighbor Solicitation / Advertisement right after
/// the IPv6 header: the frames neighbour resolution reads (checked cheaply, not validated).
pub fn is_neighbour_frame(frame: &[u8]) -> bool {
    let Ok(f) = ethernet::Frame::new_checked(frame) else {
        return false;
    };
    match f.ethertype() {
        arp::ETHERTYPE_ARP => true,
        ETHERTYPE_IPV6 => {
            let p = f.payload();
            ipv6::Header::new_checked(p).is_ok_and(|h| {
                h.next_header() == ndp::NEXT_HEADER_ICMPV6
                    && matches!(
                        p.get(ipv6::HEADER_LEN),
                        Some(&(ndp::TYPE_NEIGHBOR_SOLICIT | ndp::TYPE_NEIGHBOR_ADVERT))
                    )
            })
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::arp::ArpRepr;

    const ME: [u8; 6] = [0x02, 0, 0, 0, 0, 0x01];

    #[test]
    fn neighbour_frame_filter() {
        let mut b = [0u8; 128];
        let len = ndp::emit_solicit_frame(
            ME,
            "fd00::1".parse().unwrap(),
            "fd00::2".parse().unwrap(),
            &mut b,
        )
        .unwrap();
        assert!(is_neighbour_frame(&b[..len]));
        b[54] = 128; // echo request
        assert!(!is_neighbour_frame(&b[..len]));
        assert!(!is_neighbour_frame(&b[..54]));
        let mut arp = [0u8; 60];
        let len = ArpRepr::request(ME, "10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap())
            .emit_frame(&mut arp)
            .unwrap();
        assert!(is_neighbour_frame(&arp[..len]));
        assert!(!is_neighbour_frame(&[0u8; 10]));
    }
}
