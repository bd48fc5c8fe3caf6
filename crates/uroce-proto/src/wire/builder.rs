//! Building whole frames in place: headers, payload, pad and ICRC written straight into
//! the caller's buffer (a UMEM frame, a socket buffer), the payload copied exactly once.

use super::opcode::PayloadRule;
use super::{
    bth, icrc, udp, BthRepr, EthernetRepr, ExtHeaders, IpRepr, UdpRepr, WireError, ICRC_LEN,
    MAX_PAYLOAD,
};

/// Everything needed to put one RoCEv2 packet on the wire, payload aside.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FrameRepr {
    /// Ethernet header; `None` to build from the IP header on (the UDP-socket backend
    /// hands the kernel only the UDP payload but needs IP/UDP for the ICRC).
    pub eth: Option<EthernetRepr>,
    /// IP header (protocol / next header must be UDP).
    pub ip: IpRepr,
    /// UDP header (the length is derived).
    pub udp: UdpRepr,
    /// BTH (the pad count is derived from the payload length).
    pub bth: BthRepr,
    /// Extension headers; exactly those the opcode calls for must be present.
    pub ext: ExtHeaders,
}

/// Where the pieces of a built frame are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    /// Offset of the IP header.
    pub ip: usize,
    /// Offset of the UDP header.
    pub udp: usize,
    /// Offset of the BTH (start of the UDP payload).
    pub bth: usize,
    /// Offset of the payload.
    pub payload: usize,
    /// Total frame length.
    pub len: usize,
}

impl FrameRepr {
    /// Length of the extension headers for this opcode.
    fn ext_len(&self) -> usize {
        self.bth.opcode.headers_len()
    }

    /// Byte offsets of every layer for a payload of `payload_len` bytes.
    pub fn layout(&self, payload_len: usize) -> Layout {
        let ip = self.eth.map_or(0, |e| e.buffer_len());
        let udp = ip + self.ip.buffer_len();
        let bth = udp + udp::HEADER_LEN;
        let payload = bth + bth::HEADER_LEN + self.ext_len();
        let pad = (4 - payload_len % 4) % 4;
        Layout {
            ip,
            udp,
            bth,
            payload,
            len: payload + payload_len + pad + ICRC_LEN,
        }
    }

    /// Total bytes of the frame for a payload of `payload_len` bytes.
    pub fn buffer_len(&self, payload_len: usize) -> usize {
        self.layout(payload_len).len
    }

    /// Writes the frame with `payload` into `buf`; returns its length.
    pub fn emit(&self, payload: &[u8], buf: &mut [u8]) -> Result<usize, WireError> {
        self.emit_with(payload.len(), buf, |dst| dst.copy_from_slice(payload))
    }

    /// Writes the frame into `buf`, letting `fill` write the `payload_len` payload bytes in
    /// place (from a registered memory region, say); returns the frame length.
    pub fn emit_with(
        &self,
        payload_len: usize,
        buf: &mut [u8],
        fill: impl FnOnce(&mut [u8]),
    ) -> Result<usize, WireError> {
        self.check(payload_len)?;
        let l = self.layout(payload_len);
        if buf.len() < l.len {
            return Err(WireError::BufferTooSmall {
                need: l.len,
                have: buf.len(),
            });
        }
        let buf = &mut buf[..l.len];
        if let Some(eth) = &self.eth {
            eth.emit(buf)?;
        }
        self.ip.emit(&mut buf[l.ip..], l.len - l.udp)?;
        self.udp.emit(&mut buf[l.udp..], l.len - l.bth)?;
        let (headers, roce) = buf.split_at_mut(l.bth);
        self.emit_transport(payload_len, roce, fill)?;
        let icrc_at = roce.len() - ICRC_LEN;
        let crc = icrc::compute(&headers[l.ip..l.udp], &headers[l.udp..], &roce[..icrc_at]);
        roce[icrc_at..].copy_from_slice(&crc.to_le_bytes());
        Ok(l.len)
    }

    /// Writes only the RoCE part (BTH, extension headers, payload, pad and ICRC) at the
    /// start of `buf`, letting `fill` write the payload in place; the ICRC covers this
    /// representation's IP and UDP headers ([`super::DatagramRepr::icrc`]), which a
    /// backend puts in front (or a UDP socket's kernel does). `eth` is not used. Returns
    /// the length of the RoCE part.
    pub fn emit_roce_with(
        &self,
        payload_len: usize,
        buf: &mut [u8],
        fill: impl FnOnce(&mut [u8]),
    ) -> Result<usize, WireError> {
        self.check(payload_len)?;
        let l = self.layout(payload_len);
        let len = l.len - l.bth;
        if buf.len() < len {
            return Err(WireError::BufferTooSmall {
                need: len,
                have: buf.len(),
            });
        }
        let roce = &mut buf[..len];
        self.emit_transport(payload_len, roce, fill)?;
        let icrc_at = len - ICRC_LEN;
        let d = super::DatagramRepr {
            ip: self.ip,
            udp: self.udp,
        };
        let crc = d.icrc(&roce[..icrc_at])?;
        roce[icrc_at..].copy_from_slice(&crc.to_le_bytes());
        Ok(len)
    }

    /// Writes the RoCE part of a packet whose payload is not in `buf`: the BTH and the
    /// extension headers at its start, then the pad and the ICRC right behind them, no
    /// room left between for the payload, whose `payload_len` bytes `payload` hashes into
    /// the ICRC (from a CRC-32 state to the next; see [`super::icrc::compute_for_parts`]).
    /// Returns the length of the RoCE part with the payload (what goes on the wire) and
    /// where the payload goes in it (after the headers); `buf` holds that length less
    /// `payload_len`. For a sender that hands the kernel the headers and the payload from
    /// where it lies (a gather list), never copying the payload.
    pub fn emit_roce_around(
        &self,
        payload_len: usize,
        buf: &mut [u8],
        payload: impl FnOnce(u32) -> u32,
    ) -> Result<(usize, usize), WireError> {
        self.check(payload_len)?;
        let l = self.layout(payload_len);
        let len = l.len - l.bth;
        let at = l.payload - l.bth;
        let in_buf = len - payload_len;
        if buf.len() < in_buf {
            return Err(WireError::BufferTooSmall {
                need: in_buf,
                have: buf.len(),
            });
        }
        let pad = in_buf - ICRC_LEN - at;
        self.emit_headers(pad, &mut buf[..at])?;
        buf[at..at + pad].fill(0);
        let (head, rest) = buf.split_at_mut(at);
        let crc = super::icrc::compute_for_parts(
            &self.ip,
            &self.udp,
            head,
            payload_len,
            payload,
            &rest[..pad],
        )?;
        rest[pad..pad + ICRC_LEN].copy_from_slice(&crc.to_le_bytes());
        Ok((len, at))
    }

    /// BTH, extension headers, payload and pad into `roce` (sized to the RoCE part, the
    /// ICRC's 4 bytes last, left for the caller).
    fn emit_transport(
        &self,
        payload_len: usize,
        roce: &mut [u8],
        fill: impl FnOnce(&mut [u8]),
    ) -> Result<(), WireError> {
        let payload_at = bth::HEADER_LEN + self.ext_len();
        let pad = roce.len() - ICRC_LEN - payload_at - payload_len;
        self.emit_headers(pad, roce)?;
        fill(&mut roce[payload_at..payload_at + payload_len]);
        let icrc_at = roce.len() - ICRC_LEN;
        roce[payload_at + payload_len..icrc_at].fill(0);
        Ok(())
    }

    /// The BTH (with `pad` as its pad count) and the extension headers its opcode has, at
    /// the start of `roce`.
    #[inline]
    fn emit_headers(&self, pad: usize, roce: &mut [u8]) -> Result<(), WireError> {
        let bth = BthRepr {
            pad_count: pad as u8,
            ..self.bth
        };
        bth.emit(roce)?;
        let mut at = bth::HEADER_LEN;
        for &h in self.bth.opcode.headers() {
            self.ext.emit_one(h, &mut roce[at..])?;
            at += h.wire_len();
        }
        Ok(())
    }

    fn check(&self, payload_len: usize) -> Result<(), WireError> {
        if self.ip.protocol() != super::ipv4::PROTO_UDP {
            return Err(WireError::InvalidRepr("IP protocol must be UDP (17)"));
        }
        if let Some(eth) = &self.eth {
            if eth.ethertype != self.ip.ethertype() {
                return Err(WireError::InvalidRepr(
                    "ethertype does not match the IP version",
                ));
            }
        }
        let op = self.bth.opcode;
        if !op.is_supported() {
            return Err(WireError::InvalidRepr("RD opcodes are not supported"));
        }
        for h in super::opcode::ExtHeader::ALL_WIRE_ORDER {
            if h != super::opcode::ExtHeader::CnpReserved && op.has(h) != self.ext.has(h) {
                return Err(WireError::InvalidRepr(
                    "extension headers do not match the opcode",
                ));
            }
        }
        let ok = match op.payload() {
            PayloadRule::None => payload_len == 0,
            PayloadRule::Exactly(n) => payload_len == n,
            PayloadRule::Any => payload_len <= MAX_PAYLOAD,
        };
        if !ok {
            return Err(WireError::InvalidRepr(
                "payload length not allowed for this opcode (or above 4096)",
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use super::*;
    use crate::wire::{parse, DethRepr, Ipv4Repr, Opcode, RethRepr};

    fn repr(op: Opcode) -> FrameRepr {
        FrameRepr {
            eth: Some(EthernetRepr {
                dst: [2, 0, 0, 0, 0, 2],
                src: [2, 0, 0, 0, 0, 1],
                vlan: None,
                ethertype: 0x0800,
            }),
            ip: IpRepr::V4(Ipv4Repr::new(
                Ipv4Addr::new(10, 0, 0, 1),
                Ipv4Addr::new(10, 0, 0, 2),
                0x02,
            )),
            udp: UdpRepr {
                src_port: 0xc000,
                dst_port: 4791,
                checksum: 0,
            },
            bth: BthRepr::new(op, 0x11, 0xfffffe),
            ext: ExtHeaders::default(),
        }
    }

    #[test]
    fn builds_what_parses() {
        let mut r = repr(Opcode::RcWriteOnly);
        r.ext.reth = Some(RethRepr {
            va: 0x1000,
            rkey: 0xabc,
            len: 5,
        });
        let mut buf = [0u8; 128];
        let n = r.emit(b"hello", &mut buf).unwrap();
        assert_eq!(n, 14 + 20 + 8 + 12 + 16 + 8 + 4);
        let p = parse(&buf[..n]).unwrap();
        assert_eq!(p.payload, b"hello");
        assert_eq!(p.bth.pad_count(), 3);
        assert_eq!(p.ext.reth, r.ext.reth);
    }

    #[test]
    fn refuses_inconsistent_reprs() {
        let mut buf = [0u8; 256];
        let r = repr(Opcode::RcWriteOnly); // RETH missing
        assert!(matches!(
            r.emit(b"", &mut buf),
            Err(WireError::InvalidRepr(_))
        ));
        let mut r = repr(Opcode::RcAck);
        r.ext.deth = Some(DethRepr::default()); // header the opcode has not
        assert!(r.emit(b"", &mut buf).is_err());
        let r = repr(Opcode::RcSendOnly);
        assert!(matches!(
            r.emit(&[0; 100], &mut buf[..100]),
            Err(WireError::BufferTooSmall { .. })
        ));
        assert!(r.emit(&[0; 4097], &mut [0u8; 5000]).is_err());
    }
}
