//! perftest's keys message: `LID:OUT_READS:QPN:PSN:RKEY:VADDR:GID[16]:SRQN:` in lowercase
//! hex, 108 bytes with the closing NUL (`KEY_PRINT_FMT_GID`), written and parsed.

use std::net::Ipv4Addr;

use anyhow::{anyhow, bail};

/// Length of the keys message with a GID.
pub const KEY_LEN: usize = 108;

/// The keys message (perftest's `KEY_PRINT_FMT_GID`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Keys {
    /// LID (0 on RoCE).
    pub lid: u16,
    /// READ / atomic operations the sender accepts in flight (its max_dest_rd_atomic).
    pub out_reads: u16,
    /// QP number.
    pub qpn: u32,
    /// First PSN the sender sends.
    pub psn: u32,
    /// rkey of the buffer.
    pub rkey: u32,
    /// Address of the buffer the peer targets.
    pub vaddr: u64,
    /// GID (IPv4-mapped for RoCEv2 over IPv4).
    pub gid: [u8; 16],
    /// SRQ number (0).
    pub srqn: u32,
}

impl Keys {
    /// The 108 bytes on the wire: lowercase hex fields, each followed by ':', then NUL.
    pub fn to_wire(&self) -> [u8; KEY_LEN] {
        let mut s = format!(
            "{:04x}:{:04x}:{:06x}:{:06x}:{:08x}:{:016x}:",
            self.lid, self.out_reads, self.qpn, self.psn, self.rkey, self.vaddr
        );
        for b in self.gid {
            s.push_str(&format!("{b:02x}:"));
        }
        s.push_str(&format!("{:08x}:", self.srqn));
        let mut out = [0u8; KEY_LEN];
        let n = s.len().min(KEY_LEN - 1);
        out[..n].copy_from_slice(&s.as_bytes()[..n]);
        out
    }

    /// Parses a keys message; says which field is wrong.
    pub fn from_wire(b: &[u8]) -> anyhow::Result<Self> {
        let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
        let text =
            std::str::from_utf8(&b[..end]).map_err(|_| anyhow!("keys message is not ASCII"))?;
        let f: Vec<&str> = text.split(':').collect();
        if f.len() != 24 || !f[23].is_empty() {
            bail!(
                "keys message has {} fields, not 23: {text:?}",
                f.len().saturating_sub(1)
            );
        }
        let hex = |i: usize, what: &str| {
            u64::from_str_radix(f[i], 16)
                .map_err(|_| anyhow!("keys message: bad {what} {:?}", f[i]))
        };
        let mut gid = [0u8; 16];
        for (k, g) in gid.iter_mut().enumerate() {
            *g = hex(6 + k, "GID byte")? as u8;
        }
        Ok(Self {
            lid: hex(0, "LID")? as u16,
            out_reads: hex(1, "outstanding reads")? as u16,
            qpn: hex(2, "QPN")? as u32 & 0xff_ffff,
            psn: hex(3, "PSN")? as u32 & 0xff_ffff,
            rkey: hex(4, "rkey")? as u32,
            vaddr: hex(5, "address")?,
            gid,
            srqn: hex(22, "SRQN")? as u32,
        })
    }

    /// The peer's IPv4 address from an IPv4-mapped GID.
    pub fn ipv4(&self) -> Option<Ipv4Addr> {
        let g = std::net::Ipv6Addr::from(self.gid);
        g.to_ipv4_mapped()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_message_matches_perftest_capture() {
        // From ../shared/interop: an ib_write_bw client's keys message.
        let wire = b"0000:0001:000015:f8eeaf:000006b3:000055b98d793000:00:00:00:00:00:00:00:00:00:00:ff:ff:0a:4d:00:0c:00000000:\0";
        assert_eq!(wire.len(), KEY_LEN);
        let k = Keys::from_wire(wire).unwrap();
        assert_eq!(k.qpn, 0x15);
        assert_eq!(k.psn, 0xf8eeaf);
        assert_eq!(k.rkey, 0x6b3);
        assert_eq!(k.vaddr, 0x55b9_8d79_3000);
        assert_eq!(k.ipv4(), Some(Ipv4Addr::new(10, 77, 0, 12)));
        assert_eq!(&k.to_wire()[..], &wire[..]);
    }

    #[test]
    fn bad_keys_messages_are_refused() {
        assert!(Keys::from_wire(b"0000:0001\0").is_err());
        let mut w = Keys::from_wire(b"0000:0001:000015:f8eeaf:000006b3:000055b98d793000:00:00:00:00:00:00:00:00:00:00:ff:ff:0a:4d:00:0c:00000000:\0")
            .unwrap()
            .to_wire();
        w[12] = b'z';
        assert!(format!("{:#}", Keys::from_wire(&w).unwrap_err()).contains("QPN"));
    }
}
