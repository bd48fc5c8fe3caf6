//! Communication management messages (IBTA Vol. 1 chapter 12): the data of a MAD of
//! class 0x07 ([`super::mad`]), after its 24-byte header, and the RDMA CM IP addressing
//! header that Linux's RDMA CM puts at the start of a REQ's or SIDR_REQ's private data.
//!
//! One zero-copy view per message, over the 232 bytes after the MAD header. Offsets
//! below count from there (add 24 for the MAD offset); "b\[7:3\]" means bits 7 to 3 of a
//! byte, bit 7 the most significant:
//!
//! ```text
//! REQ       0 local comm ID (4)   8 service ID (8)   16 local CA GUID (8)
//!           28 local Q_Key (4)    32 local QPN (3)   35 responder resources
//!           36 local EECN (3)     39 initiator depth 40 remote EECN (3)
//!           43 remote CM response timeout b[7:3], transport service type b[2:1],
//!              end-to-end flow control b[0]
//!           44 starting PSN (3)   47 local CM response timeout b[7:3], retry count b[2:0]
//!           48 P_Key (2)          50 path MTU b[7:4], RDC exists b[3], RNR retry b[2:0]
//!           51 max CM retries b[7:4], SRQ b[3], extended transport type b[2:0]
//!           52 primary local LID, 54 remote LID, 56 local GID (16), 72 remote GID (16)
//!           88 flow label (20 bits), 91 packet rate b[5:0], 92 traffic class, 93 hop limit,
//!           94 SL b[7:4], subnet local b[3], 95 local ACK timeout b[7:3]
//!           96..140 the alternate path, same layout; 140 private data (92)
//! MRA       0 local comm ID  4 remote comm ID  8 message MRAed b[7:6]
//!           9 service timeout b[7:3]  10 private data (222)
//! REJ       0 local  4 remote  8 message rejected b[7:6]  9 reject info length b[7:1]
//!           10 reason (2)  12 additional reject information (72)  84 private data (148)
//! REP       0 local  4 remote  8 local Q_Key  12 local QPN (3)  16 local EECN (3)
//!           20 starting PSN (3)  24 responder resources  25 initiator depth
//!           26 target ACK delay b[7:3], failover accepted b[2:1], end-to-end flow control b[0]
//!           27 RNR retry count b[7:5], SRQ b[4]  28 local CA GUID (8)  36 private data (196)
//! RTU, DREP 0 local  4 remote  8 private data (224)
//! DREQ      0 local  4 remote  8 remote QPN/EECN (3)  12 private data (220)
//! LAP       0 local  4 remote  12 remote QPN/EECN (3)  15 remote CM response timeout b[7:3]
//!           20 alt. local LID  22 alt. remote LID  24 alt. local GID  40 alt. remote GID
//!           56 flow label (20 bits)  59 traffic class  60 hop limit  61 packet rate b[5:0]
//!           62 SL b[7:4]  63 local ACK timeout b[7:3]  64 private data (168)
//! APR       0 local  4 remote  8 additional info length  9 AP status
//!           12 additional info (72)  84 private data (148)
//! SIDR_REQ  0 request ID  4 P_Key (2)  8 service ID (8)  16 private data (216)
//! SIDR_REP  0 request ID  4 status  5 additional info length  8 QPN (3)
//!           12 service ID (8)  20 Q_Key  24 additional info (72)  96 private data (136)
//! ```
//!
//! Each view checks in `new_checked` that every fixed field is there (a truncated message
//! is [`WireError::Truncated`] naming it); accessors then read only inside that length,
//! and there is no unchecked constructor, so nothing here panics. The private data is
//! whatever follows the fixed fields, up to the 232 bytes of a MAD. The emit side, a
//! `Repr` per message, is [`super::cm_repr`].

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use super::{be16, be24, be32, be64, check_len, WireError};

/// Bytes of CM data after the MAD header.
pub const DATA_LEN: usize = super::mad::MAD_LEN - super::mad::HEADER_LEN;

/// The CM attributes (message types) and their attribute IDs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CmAttr {
    /// ClassPortInfo (0x0001).
    ClassPortInfo,
    /// ConnectRequest (0x0010).
    Req,
    /// MsgRcptAck (0x0011).
    Mra,
    /// ConnectReject (0x0012).
    Rej,
    /// ConnectReply (0x0013).
    Rep,
    /// ReadyToUse (0x0014).
    Rtu,
    /// DisconnectRequest (0x0015).
    Dreq,
    /// DisconnectReply (0x0016).
    Drep,
    /// ServiceIDResReq (0x0017).
    SidrReq,
    /// ServiceIDResReqResp (0x0018).
    SidrRep,
    /// LoadAlternatePath (0x0019).
    Lap,
    /// AlternatePathResponse (0x001A).
    Apr,
}

impl CmAttr {
    /// The attribute with this ID, `None` for one the CM does not define.
    pub fn from_id(id: u16) -> Option<Self> {
        Some(match id {
            0x0001 => Self::ClassPortInfo,
            0x0010 => Self::Req,
            0x0011 => Self::Mra,
            0x0012 => Self::Rej,
            0x0013 => Self::Rep,
            0x0014 => Self::Rtu,
            0x0015 => Self::Dreq,
            0x0016 => Self::Drep,
            0x0017 => Self::SidrReq,
            0x0018 => Self::SidrRep,
            0x0019 => Self::Lap,
            0x001a => Self::Apr,
            _ => return None,
        })
    }
    /// The short name (`REQ`, `SIDR_REP`...).
    pub fn name(self) -> &'static str {
        match self {
            Self::ClassPortInfo => "ClassPortInfo",
            Self::Req => "REQ",
            Self::Mra => "MRA",
            Self::Rej => "REJ",
            Self::Rep => "REP",
            Self::Rtu => "RTU",
            Self::Dreq => "DREQ",
            Self::Drep => "DREP",
            Self::SidrReq => "SIDR_REQ",
            Self::SidrRep => "SIDR_REP",
            Self::Lap => "LAP",
            Self::Apr => "APR",
        }
    }
    /// The attribute's name in IBTA's tables (`ConnectRequest`...).
    pub fn long_name(self) -> &'static str {
        match self {
            Self::ClassPortInfo => "ClassPortInfo",
            Self::Req => "ConnectRequest",
            Self::Mra => "MsgRcptAck",
            Self::Rej => "ConnectReject",
            Self::Rep => "ConnectReply",
            Self::Rtu => "ReadyToUse",
            Self::Dreq => "DisconnectRequest",
            Self::Drep => "DisconnectReply",
            Self::SidrReq => "ServiceIDResReq",
            Self::SidrRep => "ServiceIDResReqResp",
            Self::Lap => "LoadAlternatePath",
            Self::Apr => "AlternatePathResponse",
        }
    }
}

/// A 16-byte GID as an IPv6 address (RoCE GIDs are IPv6 or IPv4-mapped addresses).
fn gid(b: &[u8], at: usize) -> Ipv6Addr {
    let mut a = [0u8; 16];
    a.copy_from_slice(&b[at..at + 16]);
    Ipv6Addr::from(a)
}

/// The part of `b` from `from` on, no longer than a MAD's CM data.
fn tail(b: &[u8], from: usize) -> &[u8] {
    &b[from..b.len().min(DATA_LEN).max(from)]
}

macro_rules! view {
    ($(#[$doc:meta])* $name:ident, $what:literal, $fixed:expr) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy)]
        pub struct $name<T: AsRef<[u8]>> {
            buffer: T,
        }

        impl<T: AsRef<[u8]>> $name<T> {
            /// Bytes of fixed fields before the private data.
            pub const FIXED_LEN: usize = $fixed;
            /// Wraps the CM data (after the MAD header), checking that every fixed field
            /// is there.
            pub fn new_checked(buffer: T) -> Result<Self, WireError> {
                check_len($what, buffer.as_ref(), $fixed, 0)?;
                Ok(Self { buffer })
            }
            fn b(&self) -> &[u8] {
                self.buffer.as_ref()
            }
            /// The private data: what follows the fixed fields.
            pub fn private_data(&self) -> &[u8] {
                tail(self.b(), $fixed)
            }
        }

        impl<'a> $name<&'a [u8]> {
            /// The bytes under the view (the CM data it was made over).
            pub fn bytes(&self) -> &'a [u8] {
                self.buffer
            }
            /// The private data, borrowed from the buffer rather than from the view.
            pub fn private_data_ref(&self) -> &'a [u8] {
                tail(self.buffer, $fixed)
            }
        }
    };
}

macro_rules! comm_ids {
    ($name:ident) => {
        impl<T: AsRef<[u8]>> $name<T> {
            /// The sender's communication ID.
            pub fn local_comm_id(&self) -> u32 {
                be32(self.b(), 0)
            }
            /// The receiver's communication ID (0 when the sender does not know it).
            pub fn remote_comm_id(&self) -> u32 {
                be32(self.b(), 4)
            }
        }
    };
}

view!(
    /// ConnectRequest.
    Req,
    "CM REQ",
    140
);
view!(
    /// MsgRcptAck: "your message arrived, the answer will take longer".
    Mra,
    "CM MRA",
    10
);
view!(
    /// ConnectReject.
    Rej,
    "CM REJ",
    84
);
view!(
    /// ConnectReply.
    Rep,
    "CM REP",
    36
);
view!(
    /// ReadyToUse.
    Rtu,
    "CM RTU",
    8
);
view!(
    /// DisconnectRequest.
    Dreq,
    "CM DREQ",
    12
);
view!(
    /// DisconnectReply.
    Drep,
    "CM DREP",
    8
);
view!(
    /// LoadAlternatePath.
    Lap,
    "CM LAP",
    64
);
view!(
    /// AlternatePathResponse.
    Apr,
    "CM APR",
    84
);
view!(
    /// ServiceIDResReq: resolves a service ID to a UD QP.
    SidrReq,
    "CM SIDR_REQ",
    16
);
view!(
    /// ServiceIDResReqResp.
    SidrRep,
    "CM SIDR_REP",
    96
);
comm_ids!(Mra);
comm_ids!(Rej);
comm_ids!(Rep);
comm_ids!(Rtu);
comm_ids!(Dreq);
comm_ids!(Drep);
comm_ids!(Lap);
comm_ids!(Apr);

impl<T: AsRef<[u8]>> Req<T> {
    /// The sender's communication ID.
    pub fn local_comm_id(&self) -> u32 {
        be32(self.b(), 0)
    }
    /// The service ID asked for.
    pub fn service_id(&self) -> u64 {
        be64(self.b(), 8)
    }
    /// The sender's CA GUID.
    pub fn local_ca_guid(&self) -> u64 {
        be64(self.b(), 16)
    }
    /// The sender's Q_Key (RD and UD only).
    pub fn local_qkey(&self) -> u32 {
        be32(self.b(), 28)
    }
    /// The sender's QP number.
    pub fn local_qpn(&self) -> u32 {
        be24(self.b(), 32)
    }
    /// RDMA READ / atomic requests the sender will accept at once.
    pub fn responder_resources(&self) -> u8 {
        self.b()[35]
    }
    /// The sender's EE context (RD only).
    pub fn local_eecn(&self) -> u32 {
        be24(self.b(), 36)
    }
    /// RDMA READ / atomic requests the sender will have outstanding at once.
    pub fn initiator_depth(&self) -> u8 {
        self.b()[39]
    }
    /// The remote EE context (RD only).
    pub fn remote_eecn(&self) -> u32 {
        be24(self.b(), 40)
    }
    /// Remote CM response timeout (4.096 µs × 2^value).
    pub fn remote_cm_response_timeout(&self) -> u8 {
        self.b()[43] >> 3
    }
    /// Transport service type: 0 RC, 1 UC, 2 RD, 3 see the extended type.
    pub fn transport_service_type(&self) -> u8 {
        (self.b()[43] >> 1) & 0x03
    }
    /// End-to-end flow control.
    pub fn end_to_end_flow_control(&self) -> bool {
        self.b()[43] & 0x01 != 0
    }
    /// Starting PSN.
    pub fn starting_psn(&self) -> u32 {
        be24(self.b(), 44)
    }
    /// Local CM response timeout.
    pub fn local_cm_response_timeout(&self) -> u8 {
        self.b()[47] >> 3
    }
    /// Retry count (transport timeouts).
    pub fn retry_count(&self) -> u8 {
        self.b()[47] & 0x07
    }
    /// Partition key.
    pub fn pkey(&self) -> u16 {
        be16(self.b(), 48)
    }
    /// Path MTU code (1 256, 2 512, 3 1024, 4 2048, 5 4096; [`mtu_bytes`]).
    pub fn path_mtu(&self) -> u8 {
        self.b()[50] >> 4
    }
    /// RDC exists (RD only).
    pub fn rdc_exists(&self) -> bool {
        self.b()[50] & 0x08 != 0
    }
    /// RNR retry count (7: unlimited).
    pub fn rnr_retry_count(&self) -> u8 {
        self.b()[50] & 0x07
    }
    /// Max CM retries.
    pub fn max_cm_retries(&self) -> u8 {
        self.b()[51] >> 4
    }
    /// The sender uses an SRQ.
    pub fn srq(&self) -> bool {
        self.b()[51] & 0x08 != 0
    }
    /// Extended transport type (XRC is 1), when the transport service type is 3.
    pub fn extended_transport_type(&self) -> u8 {
        self.b()[51] & 0x07
    }
    /// Primary path: the sender's LID (0 over RoCE... or what the sender put).
    pub fn primary_local_lid(&self) -> u16 {
        be16(self.b(), 52)
    }
    /// Primary path: the receiver's LID.
    pub fn primary_remote_lid(&self) -> u16 {
        be16(self.b(), 54)
    }
    /// Primary path: the sender's GID.
    pub fn primary_local_gid(&self) -> Ipv6Addr {
        gid(self.b(), 56)
    }
    /// Primary path: the receiver's GID.
    pub fn primary_remote_gid(&self) -> Ipv6Addr {
        gid(self.b(), 72)
    }
    /// Primary path: flow label (20 bits).
    pub fn primary_flow_label(&self) -> u32 {
        be32(self.b(), 88) >> 12
    }
    /// Primary path: packet rate code.
    pub fn primary_packet_rate(&self) -> u8 {
        self.b()[91] & 0x3f
    }
    /// Primary path: traffic class.
    pub fn primary_traffic_class(&self) -> u8 {
        self.b()[92]
    }
    /// Primary path: hop limit.
    pub fn primary_hop_limit(&self) -> u8 {
        self.b()[93]
    }
    /// Primary path: service level.
    pub fn primary_sl(&self) -> u8 {
        self.b()[94] >> 4
    }
    /// Primary path: the receiver is on the sender's subnet.
    pub fn primary_subnet_local(&self) -> bool {
        self.b()[94] & 0x08 != 0
    }
    /// Primary path: local ACK timeout (4.096 µs × 2^value).
    pub fn primary_local_ack_timeout(&self) -> u8 {
        self.b()[95] >> 3
    }
    /// Alternate path: the sender's GID (all zero when there is none).
    pub fn alternate_local_gid(&self) -> Ipv6Addr {
        gid(self.b(), 100)
    }
    /// Alternate path: the receiver's GID.
    pub fn alternate_remote_gid(&self) -> Ipv6Addr {
        gid(self.b(), 116)
    }
}

impl<T: AsRef<[u8]>> Mra<T> {
    /// Which message is acknowledged: 0 REQ, 1 REP, 2 LAP.
    pub fn message_mraed(&self) -> u8 {
        self.b()[8] >> 6
    }
    /// Service timeout (4.096 µs × 2^value): how long the answer may take.
    pub fn service_timeout(&self) -> u8 {
        self.b()[9] >> 3
    }
}

impl<T: AsRef<[u8]>> Rej<T> {
    /// Which message is rejected: 0 REQ, 1 REP, 2 other.
    pub fn message_rejected(&self) -> u8 {
        self.b()[8] >> 6
    }
    /// Length of the additional reject information, in bytes.
    pub fn reject_info_len(&self) -> u8 {
        self.b()[9] >> 1
    }
    /// The reason ([`reject_reason_name`]).
    pub fn reason(&self) -> u16 {
        be16(self.b(), 10)
    }
    /// The additional reject information (as long as the length field says, at most 72).
    pub fn reject_info(&self) -> &[u8] {
        &self.b()[12..12 + usize::from(self.reject_info_len()).min(72)]
    }
}

impl<T: AsRef<[u8]>> Rep<T> {
    /// The sender's Q_Key.
    pub fn local_qkey(&self) -> u32 {
        be32(self.b(), 8)
    }
    /// The sender's QP number.
    pub fn local_qpn(&self) -> u32 {
        be24(self.b(), 12)
    }
    /// The sender's EE context (RD only).
    pub fn local_eecn(&self) -> u32 {
        be24(self.b(), 16)
    }
    /// Starting PSN.
    pub fn starting_psn(&self) -> u32 {
        be24(self.b(), 20)
    }
    /// Responder resources.
    pub fn responder_resources(&self) -> u8 {
        self.b()[24]
    }
    /// Initiator depth.
    pub fn initiator_depth(&self) -> u8 {
        self.b()[25]
    }
    /// Target ACK delay.
    pub fn target_ack_delay(&self) -> u8 {
        self.b()[26] >> 3
    }
    /// Failover accepted: 0 accepted, 1 rejected (not supported), 2 rejected (other).
    pub fn failover_accepted(&self) -> u8 {
        (self.b()[26] >> 1) & 0x03
    }
    /// End-to-end flow control.
    pub fn end_to_end_flow_control(&self) -> bool {
        self.b()[26] & 0x01 != 0
    }
    /// RNR retry count.
    pub fn rnr_retry_count(&self) -> u8 {
        self.b()[27] >> 5
    }
    /// The sender uses an SRQ.
    pub fn srq(&self) -> bool {
        self.b()[27] & 0x10 != 0
    }
    /// The sender's CA GUID.
    pub fn local_ca_guid(&self) -> u64 {
        be64(self.b(), 28)
    }
}

impl<T: AsRef<[u8]>> Dreq<T> {
    /// The receiver's QP (or EE context) number.
    pub fn remote_qpn(&self) -> u32 {
        be24(self.b(), 8)
    }
}

impl<T: AsRef<[u8]>> Lap<T> {
    /// The receiver's QP (or EE context) number.
    pub fn remote_qpn(&self) -> u32 {
        be24(self.b(), 12)
    }
    /// Remote CM response timeout.
    pub fn remote_cm_response_timeout(&self) -> u8 {
        self.b()[15] >> 3
    }
    /// Alternate path: the sender's GID.
    pub fn alternate_local_gid(&self) -> Ipv6Addr {
        gid(self.b(), 24)
    }
    /// Alternate path: the receiver's GID.
    pub fn alternate_remote_gid(&self) -> Ipv6Addr {
        gid(self.b(), 40)
    }
    /// Alternate path: flow label (20 bits).
    pub fn alternate_flow_label(&self) -> u32 {
        be32(self.b(), 56) >> 12
    }
    /// Alternate path: traffic class.
    pub fn alternate_traffic_class(&self) -> u8 {
        self.b()[59]
    }
    /// Alternate path: hop limit.
    pub fn alternate_hop_limit(&self) -> u8 {
        self.b()[60]
    }
    /// Alternate path: service level.
    pub fn alternate_sl(&self) -> u8 {
        self.b()[62] >> 4
    }
    /// Alternate path: local ACK timeout.
    pub fn alternate_local_ack_timeout(&self) -> u8 {
        self.b()[63] >> 3
    }
}

impl<T: AsRef<[u8]>> Apr<T> {
    /// Length of the additional information.
    pub fn additional_info_len(&self) -> u8 {
        self.b()[8]
    }
    /// AP status (0: the alternate path was loaded).
    pub fn ap_status(&self) -> u8 {
        self.b()[9]
    }
}

impl<T: AsRef<[u8]>> SidrReq<T> {
    /// Request ID.
    pub fn request_id(&self) -> u32 {
        be32(self.b(), 0)
    }
    /// Partition key.
    pub fn pkey(&self) -> u16 {
        be16(self.b(), 4)
    }
    /// The service ID to resolve.
    pub fn service_id(&self) -> u64 {
        be64(self.b(), 8)
    }
}

impl<T: AsRef<[u8]>> SidrRep<T> {
    /// Request ID (the SIDR_REQ's).
    pub fn request_id(&self) -> u32 {
        be32(self.b(), 0)
    }
    /// Status ([`sidr_status_name`]).
    pub fn status(&self) -> u8 {
        self.b()[4]
    }
    /// Length of the additional information.
    pub fn additional_info_len(&self) -> u8 {
        self.b()[5]
    }
    /// The UD QP that serves the service ID.
    pub fn qpn(&self) -> u32 {
        be24(self.b(), 8)
    }
    /// The service ID resolved.
    pub fn service_id(&self) -> u64 {
        be64(self.b(), 12)
    }
    /// The Q_Key to use.
    pub fn qkey(&self) -> u32 {
        be32(self.b(), 20)
    }
}

/// One CM message, by its attribute ID, over the CM data.
#[derive(Debug, Clone, Copy)]
pub enum Message<T: AsRef<[u8]>> {
    /// ConnectRequest.
    Req(Req<T>),
    /// MsgRcptAck.
    Mra(Mra<T>),
    /// ConnectReject.
    Rej(Rej<T>),
    /// ConnectReply.
    Rep(Rep<T>),
    /// ReadyToUse.
    Rtu(Rtu<T>),
    /// DisconnectRequest.
    Dreq(Dreq<T>),
    /// DisconnectReply.
    Drep(Drep<T>),
    /// ServiceIDResReq.
    SidrReq(SidrReq<T>),
    /// ServiceIDResReqResp.
    SidrRep(SidrRep<T>),
    /// LoadAlternatePath.
    Lap(Lap<T>),
    /// AlternatePathResponse.
    Apr(Apr<T>),
}

impl<T: AsRef<[u8]>> Message<T> {
    /// The message for attribute `attr_id` over `data` (the bytes after the MAD header);
    /// `Ok(None)` for ClassPortInfo and for attribute IDs the CM does not define, an
    /// error when the message's fixed fields are not all there.
    pub fn parse(attr_id: u16, data: T) -> Result<Option<Self>, WireError> {
        let Some(attr) = CmAttr::from_id(attr_id) else {
            return Ok(None);
        };
        Ok(Some(match attr {
            CmAttr::ClassPortInfo => return Ok(None),
            CmAttr::Req => Self::Req(Req::new_checked(data)?),
            CmAttr::Mra => Self::Mra(Mra::new_checked(data)?),
            CmAttr::Rej => Self::Rej(Rej::new_checked(data)?),
            CmAttr::Rep => Self::Rep(Rep::new_checked(data)?),
            CmAttr::Rtu => Self::Rtu(Rtu::new_checked(data)?),
            CmAttr::Dreq => Self::Dreq(Dreq::new_checked(data)?),
            CmAttr::Drep => Self::Drep(Drep::new_checked(data)?),
            CmAttr::SidrReq => Self::SidrReq(SidrReq::new_checked(data)?),
            CmAttr::SidrRep => Self::SidrRep(SidrRep::new_checked(data)?),
            CmAttr::Lap => Self::Lap(Lap::new_checked(data)?),
            CmAttr::Apr => Self::Apr(Apr::new_checked(data)?),
        }))
    }

    /// The attribute.
    pub fn attr(&self) -> CmAttr {
        match self {
            Self::Req(_) => CmAttr::Req,
            Self::Mra(_) => CmAttr::Mra,
            Self::Rej(_) => CmAttr::Rej,
            Self::Rep(_) => CmAttr::Rep,
            Self::Rtu(_) => CmAttr::Rtu,
            Self::Dreq(_) => CmAttr::Dreq,
            Self::Drep(_) => CmAttr::Drep,
            Self::SidrReq(_) => CmAttr::SidrReq,
            Self::SidrRep(_) => CmAttr::SidrRep,
            Self::Lap(_) => CmAttr::Lap,
            Self::Apr(_) => CmAttr::Apr,
        }
    }

    /// The private data.
    pub fn private_data(&self) -> &[u8] {
        match self {
            Self::Req(m) => m.private_data(),
            Self::Mra(m) => m.private_data(),
            Self::Rej(m) => m.private_data(),
            Self::Rep(m) => m.private_data(),
            Self::Rtu(m) => m.private_data(),
            Self::Dreq(m) => m.private_data(),
            Self::Drep(m) => m.private_data(),
            Self::SidrReq(m) => m.private_data(),
            Self::SidrRep(m) => m.private_data(),
            Self::Lap(m) => m.private_data(),
            Self::Apr(m) => m.private_data(),
        }
    }

    /// The RDMA CM IP addressing header at the start of a REQ's or SIDR_REQ's private
    /// data, when the service ID is one of the RDMA CM's IP port spaces
    /// ([`rdma_cm_service`]) and the header is there with version 0 and IP version 4 or 6.
    pub fn rdma_cm_header(&self) -> Option<IpCmHeader<&[u8]>> {
        let sid = match self {
            Self::Req(m) => m.service_id(),
            Self::SidrReq(m) => m.service_id(),
            _ => return None,
        };
        // The IB port space (AF_IB) carries no IP addressing header.
        let (ps, _) = rdma_cm_service(sid)?;
        if ps == PS_IB {
            return None;
        }
        let h = IpCmHeader::new_checked(self.private_data()).ok()?;
        (h.cma_version() == 0 && h.src_addr().is_some()).then_some(h)
    }
}

/// The path MTU in bytes for a CM path MTU code (1..=5), `None` for a reserved code.
pub fn mtu_bytes(code: u8) -> Option<u32> {
    (1..=5).contains(&code).then(|| 128u32 << code)
}

/// The name of a transport service type (REQ): `RC`, `UC`, `RD`, or `extended`.
pub fn transport_name(t: u8) -> &'static str {
    match t & 3 {
        0 => "RC",
        1 => "UC",
        2 => "RD",
        _ => "extended",
    }
}

/// The name of a REJ reason (IBTA Vol. 1 chapter 12, the reject reasons table).
pub fn reject_reason_name(reason: u16) -> Option<&'static str> {
    Some(match reason {
        1 => "no QP available",
        2 => "no EEC available",
        3 => "no resources available",
        4 => "timeout",
        5 => "unsupported request",
        6 => "invalid communication ID",
        7 => "invalid communication instance",
        8 => "invalid service ID",
        9 => "invalid transport service type",
        10 => "stale connection",
        11 => "RDC does not exist",
        12 => "invalid primary GID",
        13 => "invalid primary LID",
        14 => "invalid primary SL",
        15 => "invalid primary traffic class",
        16 => "invalid primary hop limit",
        17 => "invalid primary packet rate",
        18 => "invalid alternate GID",
        19 => "invalid alternate LID",
        20 => "invalid alternate SL",
        21 => "invalid alternate traffic class",
        22 => "invalid alternate hop limit",
        23 => "invalid alternate packet rate",
        24 => "port and CM redirection",
        25 => "port redirection",
        26 => "invalid path MTU",
        27 => "insufficient responder resources",
        28 => "consumer reject",
        29 => "invalid RNR NAK timeout",
        30 => "duplicate local communication ID",
        31 => "invalid class version",
        32 => "invalid primary flow label",
        33 => "invalid alternate flow label",
        35 => "vendor option not supported",
        _ => return None,
    })
}

/// The name of a SIDR_REP status.
pub fn sidr_status_name(status: u8) -> Option<&'static str> {
    Some(match status {
        0 => "valid",
        1 => "service ID not supported",
        2 => "rejected by the service provider",
        3 => "no QP available",
        4 => "redirect",
        5 => "class version not supported",
        _ => return None,
    })
}

/// For a service ID in the RDMA CM's IP range (`0x00000000_01SSPPPP`: the port space
/// `0x01SS` in bits 31-16, the port in bits 15-0), the port space ([`port_space_name`])
/// and the port.
pub fn rdma_cm_service(service_id: u64) -> Option<(u16, u16)> {
    (service_id >> 24 == 1).then_some(((service_id >> 16) as u16, service_id as u16))
}

/// The RDMA CM port space of native InfiniBand addressing (AF_IB), whose REQs carry no
/// IP addressing header.
pub const PS_IB: u16 = 0x013f;

/// The name of an RDMA CM port space (`0x0106` TCP, `0x0111` UDP, `0x0002` IPoIB,
/// `0x013f` IB).
pub fn port_space_name(ps: u16) -> Option<&'static str> {
    Some(match ps {
        0x0002 => "IPoIB",
        0x0106 => "TCP",
        0x0111 => "UDP",
        0x013f => "IB",
        _ => return None,
    })
}

/// The RDMA CM's IP addressing header (Linux `cma_hdr`; IBTA Annex A11): 36 bytes at
/// the start of a REQ's or SIDR_REQ's private data.
///
/// ```text
/// byte 0      CM version (0)
/// byte 1      IP version in bits 7-4 (4 or 6)
/// bytes 2-3   the source port
/// bytes 4-19  source address (IPv4: in the last 4 bytes)
/// bytes 20-35 destination address (same)
/// ```
#[derive(Debug, Clone, Copy)]
pub struct IpCmHeader<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> IpCmHeader<T> {
    /// Length of the header.
    pub const LEN: usize = 36;
    /// Wraps a buffer, checking that the 36 bytes are there.
    pub fn new_checked(buffer: T) -> Result<Self, WireError> {
        check_len(
            "RDMA CM IP addressing header",
            buffer.as_ref(),
            Self::LEN,
            0,
        )?;
        Ok(Self { buffer })
    }
    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }
    /// CM version (0).
    pub fn cma_version(&self) -> u8 {
        self.b()[0]
    }
    /// IP version (4 or 6; anything else is not an address this header can carry).
    pub fn ip_version(&self) -> u8 {
        self.b()[1] >> 4
    }
    /// The sender's port.
    pub fn src_port(&self) -> u16 {
        be16(self.b(), 2)
    }
    fn addr(&self, at: usize) -> Option<IpAddr> {
        let b = self.b();
        match self.ip_version() {
            4 => Some(IpAddr::V4(Ipv4Addr::new(
                b[at + 12],
                b[at + 13],
                b[at + 14],
                b[at + 15],
            ))),
            6 => Some(IpAddr::V6(gid(b, at))),
            _ => None,
        }
    }
    /// Source address, `None` for an IP version other than 4 or 6.
    pub fn src_addr(&self) -> Option<IpAddr> {
        self.addr(4)
    }
    /// Destination address.
    pub fn dst_addr(&self) -> Option<IpAddr> {
        self.addr(20)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The CM data of a REQ written out field by field from the layout above, with the
    /// values rdma_rxe's CM sent for `rping` (rdma_cm.pcap frame 1).
    fn req() -> [u8; DATA_LEN] {
        let mut d = [0u8; DATA_LEN];
        d[0..4].copy_from_slice(&[0x8e, 0x44, 0xd9, 0x1a]); // local comm ID
        d[8..16].copy_from_slice(&[0, 0, 0, 0, 0x01, 0x06, 0x1c, 0x06]); // TCP port 7174
        d[16..24].copy_from_slice(&[0x50, 0x54, 0x00, 0xff, 0xfe, 0x77, 0x00, 0x12]);
        d[32..35].copy_from_slice(&[0x00, 0x00, 0x11]); // QPN 0x11
        d[35] = 1; // responder resources
        d[39] = 1; // initiator depth
        d[43] = 20 << 3; // remote CM response timeout 20, RC (type 0), no end-to-end FC
        d[44..47].copy_from_slice(&[0xd6, 0x52, 0xc1]); // starting PSN
        d[47] = (20 << 3) | 7; // local CM response timeout 20, retry count 7
        d[48..50].copy_from_slice(&[0xff, 0xff]); // P_Key
        d[50] = (3 << 4) | 7; // MTU 1024, no RDC, RNR retry 7
        d[51] = 15 << 4; // max CM retries 15
        d[56..72].copy_from_slice(&[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 78, 0, 12]);
        d[72..88].copy_from_slice(&[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 78, 0, 11]);
        d[88..92].copy_from_slice(&[0x00, 0x01, 0x20, 0x03]); // flow label 0x12, rate 3
        d[92] = 0x28; // traffic class
        d[93] = 64; // hop limit
        d[94] = (5 << 4) | 0x08; // SL 5, subnet local
        d[95] = 18 << 3; // local ACK timeout 18
                         // RDMA CM IP header: version 0, IPv4, port 59576, 10.78.0.12 > 10.78.0.11.
        d[141] = 0x40;
        d[142..144].copy_from_slice(&[0xe8, 0xb8]);
        d[156..160].copy_from_slice(&[10, 78, 0, 12]);
        d[172..176].copy_from_slice(&[10, 78, 0, 11]);
        d
    }

    #[test]
    fn req_fields_are_where_the_spec_puts_them() {
        let d = req();
        let Some(Message::Req(m)) = Message::parse(0x10, &d[..]).unwrap() else {
            panic!("not a REQ");
        };
        assert_eq!(m.local_comm_id(), 0x8e44_d91a);
        assert_eq!(m.service_id(), 0x0106_1c06);
        assert_eq!(rdma_cm_service(m.service_id()), Some((0x0106, 7174)));
        assert_eq!(port_space_name(0x0106), Some("TCP"));
        assert_eq!(m.local_ca_guid(), 0x5054_00ff_fe77_0012);
        assert_eq!(
            (m.local_qpn(), m.responder_resources(), m.initiator_depth()),
            (0x11, 1, 1)
        );
        assert_eq!(m.remote_cm_response_timeout(), 20);
        assert_eq!(transport_name(m.transport_service_type()), "RC");
        assert!(!m.end_to_end_flow_control());
        assert_eq!(m.starting_psn(), 14_045_889);
        assert_eq!((m.local_cm_response_timeout(), m.retry_count()), (20, 7));
        assert_eq!(m.pkey(), 0xffff);
        assert_eq!(mtu_bytes(m.path_mtu()), Some(1024));
        assert_eq!((m.rdc_exists(), m.rnr_retry_count()), (false, 7));
        assert_eq!(
            (m.max_cm_retries(), m.srq(), m.extended_transport_type()),
            (15, false, 0)
        );
        assert_eq!(
            m.primary_local_gid(),
            "::ffff:10.78.0.12".parse::<Ipv6Addr>().unwrap()
        );
        assert_eq!(
            m.primary_remote_gid(),
            "::ffff:10.78.0.11".parse::<Ipv6Addr>().unwrap()
        );
        assert_eq!((m.primary_flow_label(), m.primary_packet_rate()), (0x12, 3));
        assert_eq!(
            (m.primary_traffic_class(), m.primary_hop_limit()),
            (0x28, 64)
        );
        assert_eq!((m.primary_sl(), m.primary_subnet_local()), (5, true));
        assert_eq!(m.primary_local_ack_timeout(), 18);
        assert_eq!(m.private_data().len(), 92);
        let msg = Message::Req(m);
        let h = msg.rdma_cm_header().unwrap();
        assert_eq!((h.ip_version(), h.src_port()), (4, 59576));
        assert_eq!(h.src_addr(), Some("10.78.0.12".parse().unwrap()));
        assert_eq!(h.dst_addr(), Some("10.78.0.11".parse().unwrap()));
    }

    #[test]
    fn rep_rej_mra_dreq_sidr_lap_apr() {
        let mut d = [0u8; DATA_LEN];
        d[0..4].copy_from_slice(&[0x44, 0xa2, 0x8b, 0x16]);
        d[4..8].copy_from_slice(&[0x8e, 0x44, 0xd9, 0x1a]);
        d[12..15].copy_from_slice(&[0, 0, 0x11]);
        d[20..23].copy_from_slice(&[0x78, 0x71, 0xb3]);
        d[24] = 1;
        d[25] = 2;
        d[26] = (15 << 3) | (1 << 1) | 1;
        d[27] = (6 << 5) | 0x10;
        d[28..36].copy_from_slice(&[0x50, 0x54, 0x00, 0xff, 0xfe, 0x77, 0x00, 0x11]);
        let Some(Message::Rep(m)) = Message::parse(0x13, &d[..]).unwrap() else {
            panic!()
        };
        assert_eq!(
            (m.local_comm_id(), m.remote_comm_id()),
            (0x44a2_8b16, 0x8e44_d91a)
        );
        assert_eq!((m.local_qpn(), m.starting_psn()), (0x11, 7_893_427));
        assert_eq!((m.responder_resources(), m.initiator_depth()), (1, 2));
        assert_eq!((m.target_ack_delay(), m.failover_accepted()), (15, 1));
        assert!(m.end_to_end_flow_control() && m.srq());
        assert_eq!(m.rnr_retry_count(), 6);
        assert_eq!(m.local_ca_guid(), 0x5054_00ff_fe77_0011);
        assert!(Message::Rep(m).rdma_cm_header().is_none());

        // REJ of a REQ, reason 8, 3 bytes of ARI.
        let mut r = [0u8; DATA_LEN];
        r[4..8].copy_from_slice(&[0x8c, 0x44, 0xd9, 0x1a]);
        r[9] = 3 << 1;
        r[10..12].copy_from_slice(&[0, 8]);
        r[12..15].copy_from_slice(&[1, 2, 3]);
        let Some(Message::Rej(m)) = Message::parse(0x12, &r[..]).unwrap() else {
            panic!()
        };
        assert_eq!((m.message_rejected(), m.reason()), (0, 8));
        assert_eq!(reject_reason_name(m.reason()), Some("invalid service ID"));
        assert_eq!(m.reject_info(), &[1, 2, 3]);
        assert_eq!(m.private_data().len(), 148);

        let mut x = [0u8; DATA_LEN];
        x[8] = 1 << 6;
        x[9] = 17 << 3;
        let Some(Message::Mra(m)) = Message::parse(0x11, &x[..]).unwrap() else {
            panic!()
        };
        assert_eq!((m.message_mraed(), m.service_timeout()), (1, 17));

        let mut x = [0u8; DATA_LEN];
        x[8..11].copy_from_slice(&[0, 0, 0x13]);
        let Some(Message::Dreq(m)) = Message::parse(0x15, &x[..]).unwrap() else {
            panic!()
        };
        assert_eq!(m.remote_qpn(), 0x13);

        // SIDR_REQ (UDP port space, port 7174) and its SIDR_REP.
        let mut x = [0u8; DATA_LEN];
        x[0..4].copy_from_slice(&[0, 0, 0, 9]);
        x[4..6].copy_from_slice(&[0xff, 0xff]);
        x[8..16].copy_from_slice(&[0, 0, 0, 0, 0x01, 0x11, 0x1c, 0x06]);
        x[17] = 0x60;
        let Some(Message::SidrReq(m)) = Message::parse(0x17, &x[..]).unwrap() else {
            panic!()
        };
        assert_eq!((m.request_id(), m.pkey()), (9, 0xffff));
        assert_eq!(rdma_cm_service(m.service_id()), Some((0x0111, 7174)));
        assert_eq!(
            Message::SidrReq(m).rdma_cm_header().unwrap().ip_version(),
            6
        );
        let mut x = [0u8; DATA_LEN];
        x[4] = 1;
        x[8..11].copy_from_slice(&[0, 0, 0x12]);
        x[20..24].copy_from_slice(&[0x01, 0x23, 0x45, 0x67]);
        let Some(Message::SidrRep(m)) = Message::parse(0x18, &x[..]).unwrap() else {
            panic!()
        };
        assert_eq!((m.status(), m.qpn(), m.qkey()), (1, 0x12, 0x0123_4567));
        assert_eq!(
            sidr_status_name(m.status()),
            Some("service ID not supported")
        );

        let mut x = [0u8; DATA_LEN];
        x[12..15].copy_from_slice(&[0, 0, 0x21]);
        x[15] = 19 << 3;
        x[59] = 7;
        let Some(Message::Lap(m)) = Message::parse(0x19, &x[..]).unwrap() else {
            panic!()
        };
        assert_eq!((m.remote_qpn(), m.remote_cm_response_timeout()), (0x21, 19));
        assert_eq!(m.alternate_traffic_class(), 7);
        let mut x = [0u8; DATA_LEN];
        x[9] = 4;
        let Some(Message::Apr(m)) = Message::parse(0x1a, &x[..]).unwrap() else {
            panic!()
        };
        assert_eq!(m.ap_status(), 4);
    }

    #[test]
    fn truncated_and_unknown_messages() {
        let d = req();
        assert!(matches!(
            Message::parse(0x10, &d[..139]),
            Err(WireError::Truncated {
                what: "CM REQ",
                need: 140,
                have: 139,
                ..
            })
        ));
        // A REQ with no room for its private data: the fields read, no IP header.
        let Some(m) = Message::parse(0x10, &d[..140]).unwrap() else {
            panic!()
        };
        assert!(m.private_data().is_empty() && m.rdma_cm_header().is_none());
        // A REQ longer than a MAD's data: the private data stops at 232 bytes.
        let mut long = d.to_vec();
        long.extend_from_slice(&[0; 40]);
        let Some(m) = Message::parse(0x10, &long[..]).unwrap() else {
            panic!()
        };
        assert_eq!(m.private_data().len(), 92);
        assert!(Message::parse(0x0001, &d[..]).unwrap().is_none());
        assert!(Message::parse(0x0099, &d[..]).unwrap().is_none());
        for id in 0x10..=0x1a {
            assert!(Message::parse(id, &[][..]).is_err(), "attribute {id:#x}");
        }
        // The IB port space: no IP header either.
        let mut ib = d;
        ib[13] = 0x3f;
        let m = Message::parse(0x10, &ib[..]).unwrap().unwrap();
        assert!(m.rdma_cm_header().is_none());
        // Not an RDMA CM service ID: no IP header read.
        let mut other = d;
        other[12] = 0x02;
        let m = Message::parse(0x10, &other[..]).unwrap().unwrap();
        assert!(m.rdma_cm_header().is_none());
        // An IP version that is neither 4 nor 6.
        let mut v5 = d;
        v5[141] = 0x50;
        let m = Message::parse(0x10, &v5[..]).unwrap().unwrap();
        assert!(m.rdma_cm_header().is_none());
    }
}
