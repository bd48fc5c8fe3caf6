//! Management datagrams (IBTA Vol. 1 §13.4): the 256-byte messages that UD SENDs to QP 1
//! (the general services interface, GSI) carry, and the 24-byte common MAD header that
//! starts each of them. Over RoCEv2 the connection manager ([`super::cm`]) is the class
//! one sees: every RDMA CM connection starts with its REQ / REP / RTU.
//!
//! ```text
//! byte 0      BaseVersion (1)
//! byte 1      MgmtClass (0x07 communication management, ...)
//! byte 2      ClassVersion (2 for CM)
//! byte 3      R (response) | Method (7 bits)
//! bytes 4-5   Status
//! bytes 6-7   ClassSpecific
//! bytes 8-15  TransactionID
//! bytes 16-17 AttributeID
//! bytes 18-19 reserved
//! bytes 20-23 AttributeModifier
//! bytes 24-   the class's data (232 bytes in a 256-byte MAD)
//! ```
//!
//! The view checks its length once, in [`Header::new_checked`], and has no unchecked
//! constructor, so no accessor can panic.

use super::{be16, be32, be64, check_len, need, put16, put32, put64, WireError};

/// Length of the common MAD header.
pub const HEADER_LEN: usize = 24;
/// Length of a MAD (IBTA base version 1).
pub const MAD_LEN: usize = 256;
/// The QP number of the general services interface, where MADs are sent.
pub const GSI_QPN: u32 = 1;
/// The Q_Key of QP 1 (IBTA §13.5.3.3.2).
pub const GSI_QKEY: u32 = 0x8001_0000;
/// Management class of the communication manager.
pub const CLASS_CM: u8 = 0x07;

mod field {
    pub const BASE_VERSION: usize = 0;
    pub const MGMT_CLASS: usize = 1;
    pub const CLASS_VERSION: usize = 2;
    pub const METHOD: usize = 3;
    pub const STATUS: usize = 4;
    pub const CLASS_SPECIFIC: usize = 6;
    pub const TID: usize = 8;
    pub const ATTR_ID: usize = 16;
    pub const ATTR_MOD: usize = 20;
}

/// A zero-copy view of a MAD: its common header and the class data after it.
#[derive(Debug, Clone, Copy)]
pub struct Header<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Header<T> {
    /// Wraps a buffer, checking that the 24-byte header is there.
    pub fn new_checked(buffer: T) -> Result<Self, WireError> {
        check_len("MAD header", buffer.as_ref(), HEADER_LEN, 0)?;
        Ok(Self { buffer })
    }
    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }
    /// Base version (1 for every MAD IBTA defines).
    pub fn base_version(&self) -> u8 {
        self.b()[field::BASE_VERSION]
    }
    /// Management class.
    pub fn mgmt_class(&self) -> u8 {
        self.b()[field::MGMT_CLASS]
    }
    /// Class version.
    pub fn class_version(&self) -> u8 {
        self.b()[field::CLASS_VERSION]
    }
    /// The R bit: a response.
    pub fn response(&self) -> bool {
        self.b()[field::METHOD] & 0x80 != 0
    }
    /// The method (7 bits, R excluded).
    pub fn method(&self) -> u8 {
        self.b()[field::METHOD] & 0x7f
    }
    /// Status.
    pub fn status(&self) -> u16 {
        be16(self.b(), field::STATUS)
    }
    /// Class-specific field.
    pub fn class_specific(&self) -> u16 {
        be16(self.b(), field::CLASS_SPECIFIC)
    }
    /// Transaction ID.
    pub fn tid(&self) -> u64 {
        be64(self.b(), field::TID)
    }
    /// Attribute ID.
    pub fn attr_id(&self) -> u16 {
        be16(self.b(), field::ATTR_ID)
    }
    /// Attribute modifier.
    pub fn attr_mod(&self) -> u32 {
        be32(self.b(), field::ATTR_MOD)
    }
    /// The class data after the header (at most the 232 bytes of a 256-byte MAD).
    pub fn data(&self) -> &[u8] {
        let b = self.b();
        &b[HEADER_LEN..b.len().min(MAD_LEN)]
    }
}

/// Plain representation of the common MAD header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct MadRepr {
    /// Base version.
    pub base_version: u8,
    /// Management class.
    pub mgmt_class: u8,
    /// Class version.
    pub class_version: u8,
    /// The R bit.
    pub response: bool,
    /// Method (7 bits).
    pub method: u8,
    /// Status.
    pub status: u16,
    /// Class-specific field.
    pub class_specific: u16,
    /// Transaction ID.
    pub tid: u64,
    /// Attribute ID.
    pub attr_id: u16,
    /// Attribute modifier.
    pub attr_mod: u32,
}

impl MadRepr {
    /// Reads a checked view.
    pub fn parse<T: AsRef<[u8]>>(h: &Header<T>) -> Self {
        Self {
            base_version: h.base_version(),
            mgmt_class: h.mgmt_class(),
            class_version: h.class_version(),
            response: h.response(),
            method: h.method(),
            status: h.status(),
            class_specific: h.class_specific(),
            tid: h.tid(),
            attr_id: h.attr_id(),
            attr_mod: h.attr_mod(),
        }
    }

    /// Bytes the header takes.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes the header at the start of `b` (the reserved bytes 18-19 as zero).
    pub fn emit(&self, b: &mut [u8]) -> Result<(), WireError> {
        need(b, HEADER_LEN)?;
        if self.method > 0x7f {
            return Err(WireError::InvalidRepr("MAD method wider than 7 bits"));
        }
        b[field::BASE_VERSION] = self.base_version;
        b[field::MGMT_CLASS] = self.mgmt_class;
        b[field::CLASS_VERSION] = self.class_version;
        b[field::METHOD] = (u8::from(self.response) << 7) | self.method;
        put16(b, field::STATUS, self.status);
        put16(b, field::CLASS_SPECIFIC, self.class_specific);
        put64(b, field::TID, self.tid);
        put16(b, field::ATTR_ID, self.attr_id);
        put16(b, field::ATTR_ID + 2, 0);
        put32(b, field::ATTR_MOD, self.attr_mod);
        Ok(())
    }

    /// The management class's name, when IBTA gives it one.
    pub fn class_name(&self) -> Option<&'static str> {
        class_name(self.mgmt_class)
    }

    /// The method's name, when IBTA gives it one (`Send`, `GetResp`...).
    pub fn method_name(&self) -> Option<&'static str> {
        method_name(self.method, self.response)
    }

    /// The attribute's name, for the CM class (`ConnectRequest`...).
    pub fn attr_name(&self) -> Option<&'static str> {
        if self.mgmt_class == CLASS_CM {
            super::cm::CmAttr::from_id(self.attr_id).map(super::cm::CmAttr::long_name)
        } else {
            None
        }
    }
}

/// The name of a management class (IBTA Vol. 1 chapter 13, MAD classes).
pub fn class_name(class: u8) -> Option<&'static str> {
    Some(match class {
        0x01 => "SubnMgmt",
        0x81 => "SubnMgmt (directed route)",
        0x03 => "SubnAdm",
        0x04 => "PerfMgmt",
        0x05 => "BaseboardMgmt",
        0x06 => "DevMgmt",
        0x07 => "CM",
        0x08 => "SNMP",
        0x09..=0x0f => "Vendor",
        0x10 => "Application",
        0x30..=0x4f => "Vendor (OUI)",
        _ => return None,
    })
}

/// The name of a MAD method (IBTA Vol. 1 chapter 13, and the subnet administrator's table methods).
pub fn method_name(method: u8, response: bool) -> Option<&'static str> {
    Some(match (method, response) {
        (0x01, false) => "Get",
        (0x02, false) => "Set",
        (0x01, true) => "GetResp",
        (0x03, false) => "Send",
        (0x05, false) => "Trap",
        (0x06, false) => "Report",
        (0x06, true) => "ReportResp",
        (0x07, false) => "TrapRepress",
        (0x12, false) => "GetTable",
        (0x12, true) => "GetTableResp",
        (0x13, false) => "GetTraceTable",
        (0x14, false) => "GetMulti",
        (0x14, true) => "GetMultiResp",
        (0x15, false) => "Delete",
        (0x15, true) => "DeleteResp",
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A CM REQ's header as rdma_rxe's CM sent it (rdma_cm.pcap frame 1), written out
    /// from the layout above.
    const REQ_HEADER: [u8; 24] = [
        0x01, // base version 1
        0x07, // CM
        0x02, // class version 2
        0x03, // Send, R clear
        0x00, 0x00, // status
        0x00, 0x00, // class specific
        0x00, 0x00, 0x00, 0x02, 0x1a, 0xd9, 0x44, 0x8e, // TID
        0x00, 0x10, // ConnectRequest
        0x00, 0x00, // reserved
        0x00, 0x00, 0x00, 0x00, // attribute modifier
    ];

    #[test]
    fn reads_a_cm_header() {
        let mut mad = [0u8; MAD_LEN];
        mad[..24].copy_from_slice(&REQ_HEADER);
        let h = Header::new_checked(&mad[..]).unwrap();
        let r = MadRepr::parse(&h);
        assert_eq!(
            (r.base_version, r.mgmt_class, r.class_version, r.method),
            (1, CLASS_CM, 2, 3)
        );
        assert!(!r.response);
        assert_eq!(
            (r.status, r.tid, r.attr_id, r.attr_mod),
            (0, 0x2_1ad9_448e, 0x10, 0)
        );
        assert_eq!(r.class_name(), Some("CM"));
        assert_eq!(r.method_name(), Some("Send"));
        assert_eq!(r.attr_name(), Some("ConnectRequest"));
        assert_eq!(h.data().len(), 232);
        let mut out = [0u8; 24];
        r.emit(&mut out).unwrap();
        assert_eq!(out, REQ_HEADER);
    }

    #[test]
    fn short_buffers_are_errors() {
        assert!(matches!(
            Header::new_checked(&REQ_HEADER[..23]),
            Err(WireError::Truncated {
                need: 24,
                have: 23,
                ..
            })
        ));
        let h = Header::new_checked(&REQ_HEADER[..]).unwrap();
        assert!(h.data().is_empty());
        let mut r = MadRepr::parse(&h);
        r.response = true;
        r.method = 1;
        assert_eq!(r.method_name(), Some("GetResp"));
        r.method = 0x80;
        assert!(r.emit(&mut [0u8; 24]).is_err());
        assert!(MadRepr::default().emit(&mut [0u8; 23]).is_err());
    }
}
