//! RoCEv2 Congestion Notification Packet (IBTA Annex A17.9.3): opcode 0x81, BECN set,
//! DestQP naming the QP whose flow was marked, PSN 0, followed by 16 reserved (zero) bytes
//! and the ICRC. The notification point sends it back to the source of ECN-CE packets.

use super::{BthRepr, Opcode};

/// Length of the reserved block after the BTH of a CNP.
pub const RESERVED_LEN: usize = 16;

/// The BTH of a CNP addressed to `dest_qp` with partition key `pkey`.
pub fn bth(dest_qp: u32, pkey: u16) -> BthRepr {
    BthRepr {
        becn: true,
        pkey,
        ..BthRepr::new(Opcode::Cnp, dest_qp, 0)
    }
}
