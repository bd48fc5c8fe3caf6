//! Ethernet II, with an optional IEEE 802.1Q (or 802.1ad) tag.

use super::{be16, check_len, put16, WireError};

/// Ethertype of IPv4.
pub const ETHERTYPE_IPV4: u16 = 0x0800;
/// Ethertype of IPv6.
pub const ETHERTYPE_IPV6: u16 = 0x86dd;
/// Ethertype (TPID) of an 802.1Q VLAN tag.
pub const TPID_8021Q: u16 = 0x8100;
/// Ethertype (TPID) of an 802.1ad service tag.
pub const TPID_8021AD: u16 = 0x88a8;

mod field {
    use std::ops::Range;
    pub const DST: Range<usize> = 0..6;
    pub const SRC: Range<usize> = 6..12;
    pub const TYPE: usize = 12;
    pub const TCI: usize = 14;
    pub const INNER_TYPE: usize = 16;
}

/// Length of an untagged Ethernet II header.
pub const HEADER_LEN: usize = 14;
/// Length of the 802.1Q tag when present.
pub const VLAN_TAG_LEN: usize = 4;

/// A zero-copy view of an Ethernet II header.
#[derive(Debug, Clone, Copy)]
pub struct Frame<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Frame<T> {
    /// Wraps a buffer without checking its length.
    pub fn new_unchecked(buffer: T) -> Self {
        Self { buffer }
    }

    /// Wraps a buffer, checking that the whole header (with its tag, if any) is there.
    pub fn new_checked(buffer: T) -> Result<Self, WireError> {
        let f = Self::new_unchecked(buffer);
        check_len("Ethernet header", f.buffer.as_ref(), HEADER_LEN, 0)?;
        check_len("802.1Q tag", f.buffer.as_ref(), f.header_len(), 0)?;
        Ok(f)
    }

    /// Destination MAC address.
    pub fn dst(&self) -> [u8; 6] {
        let mut m = [0; 6];
        m.copy_from_slice(&self.buffer.as_ref()[field::DST]);
        m
    }

    /// Source MAC address.
    pub fn src(&self) -> [u8; 6] {
        let mut m = [0; 6];
        m.copy_from_slice(&self.buffer.as_ref()[field::SRC]);
        m
    }

    /// The ethertype right after the source address (a TPID when tagged).
    pub fn outer_type(&self) -> u16 {
        be16(self.buffer.as_ref(), field::TYPE)
    }

    /// True when an 802.1Q/802.1ad tag follows the source address.
    pub fn is_tagged(&self) -> bool {
        matches!(self.outer_type(), TPID_8021Q | TPID_8021AD)
    }

    /// The tag, if any.
    pub fn vlan(&self) -> Option<VlanTag> {
        self.is_tagged().then(|| {
            let tci = be16(self.buffer.as_ref(), field::TCI);
            VlanTag {
                tpid: self.outer_type(),
                pcp: (tci >> 13) as u8,
                dei: tci & 0x1000 != 0,
                vid: tci & 0x0fff,
            }
        })
    }

    /// The ethertype of the payload (after the tag, if any).
    pub fn ethertype(&self) -> u16 {
        if self.is_tagged() {
            be16(self.buffer.as_ref(), field::INNER_TYPE)
        } else {
            self.outer_type()
        }
    }

    /// Header length, 14 or 18.
    pub fn header_len(&self) -> usize {
        if self.is_tagged() {
            HEADER_LEN + VLAN_TAG_LEN
        } else {
            HEADER_LEN
        }
    }

    /// The bytes after the header.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.header_len()..]
    }
}

/// An 802.1Q tag: priority code point, drop eligible indicator and VLAN id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct VlanTag {
    /// 0x8100 (802.1Q) or 0x88a8 (802.1ad).
    pub tpid: u16,
    /// Priority code point (3 bits): the 802.1p priority PFC acts on.
    pub pcp: u8,
    /// Drop eligible indicator.
    pub dei: bool,
    /// VLAN identifier (12 bits).
    pub vid: u16,
}

/// Plain representation of an Ethernet II header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct EthernetRepr {
    /// Destination MAC.
    pub dst: [u8; 6],
    /// Source MAC.
    pub src: [u8; 6],
    /// Optional VLAN tag.
    pub vlan: Option<VlanTag>,
    /// Ethertype of the payload.
    pub ethertype: u16,
}

impl EthernetRepr {
    /// Parses a checked view.
    pub fn parse<T: AsRef<[u8]>>(frame: &Frame<T>) -> Self {
        let mut b = [0u8; HEADER_LEN];
        b.copy_from_slice(&frame.buffer.as_ref()[..HEADER_LEN]);
        let mut dst = [0u8; 6];
        let mut src = [0u8; 6];
        dst.copy_from_slice(&b[field::DST]);
        src.copy_from_slice(&b[field::SRC]);
        let outer = u16::from_be_bytes([b[field::TYPE], b[field::TYPE + 1]]);
        if matches!(outer, TPID_8021Q | TPID_8021AD) {
            Self {
                dst,
                src,
                vlan: frame.vlan(),
                ethertype: frame.ethertype(),
            }
        } else {
            Self {
                dst,
                src,
                vlan: None,
                ethertype: outer,
            }
        }
    }

    /// Bytes the header takes.
    pub fn buffer_len(&self) -> usize {
        HEADER_LEN + if self.vlan.is_some() { VLAN_TAG_LEN } else { 0 }
    }

    /// Writes the header at the start of `buf`.
    pub fn emit(&self, buf: &mut [u8]) -> Result<(), WireError> {
        let need = self.buffer_len();
        if buf.len() < need {
            return Err(WireError::BufferTooSmall {
                need,
                have: buf.len(),
            });
        }
        buf[field::DST].copy_from_slice(&self.dst);
        buf[field::SRC].copy_from_slice(&self.src);
        match self.vlan {
            Some(tag) => {
                if tag.pcp > 7 || tag.vid > 0x0fff {
                    return Err(WireError::InvalidRepr("VLAN PCP above 7 or VID above 4095"));
                }
                put16(buf, field::TYPE, tag.tpid);
                let tci = (u16::from(tag.pcp) << 13) | (u16::from(tag.dei) << 12) | tag.vid;
                put16(buf, field::TCI, tci);
                put16(buf, field::INNER_TYPE, self.ethertype);
            }
            None => put16(buf, field::TYPE, self.ethertype),
        }
        Ok(())
    }
}

/// Formats a MAC address as `aa:bb:cc:dd:ee:ff`.
pub fn fmt_mac(m: &[u8; 6]) -> String {
    format!(
        "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
        m[0], m[1], m[2], m[3], m[4], m[5]
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tagged_round_trip() {
        let repr = EthernetRepr {
            dst: [1, 2, 3, 4, 5, 6],
            src: [7, 8, 9, 10, 11, 12],
            vlan: Some(VlanTag {
                tpid: TPID_8021Q,
                pcp: 3,
                dei: true,
                vid: 100,
            }),
            ethertype: ETHERTYPE_IPV4,
        };
        let mut buf = [0u8; 18];
        repr.emit(&mut buf).unwrap();
        assert_eq!(&buf[12..18], &[0x81, 0x00, 0x70, 0x64, 0x08, 0x00]);
        let f = Frame::new_checked(&buf[..]).unwrap();
        assert_eq!(EthernetRepr::parse(&f), repr);
        assert!(matches!(
            Frame::new_checked(&buf[..16]),
            Err(WireError::Truncated {
                need: 18,
                have: 16,
                ..
            })
        ));
    }
}
