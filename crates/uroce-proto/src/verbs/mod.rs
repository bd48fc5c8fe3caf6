//! The verbs API as a program sees it, with ibverbs' names: the device [`Context`] (the
//! sans-IO endpoint, [`crate::endpoint`]) and everything its calls take and give back:
//! work requests, completions and their statuses, QP types, states and attributes, memory
//! regions and their access rights, memory windows, the error type.

#![forbid(unsafe_code)]

pub use crate::endpoint::{
    udp_source_port, udp_source_port_of, AsyncEvent, Context, ContextConfig, ContextCounters,
    MwBind, MAX_CQE,
};
pub use crate::mem::{inc_rkey, Access, Mr, Mw, MwId, MwType, PdId, RegError};
pub use crate::transport::{
    ack_timeout, rnr_timer_us, CqId, InitAttr, ModifyRefusal, Mtu, QpAttr, QpAttrMask, QpCaps,
    QpCounters, QpInitAttr, QpInitEx, QpState, QpType, RecvWr, Remote, RtrAttr, RtsAttr, SendFlags,
    SendOp, SendWr, Sge, SrqAttr, SrqAttrMask, SrqId, UdSendWr, VerbsError, WcFlags, WcOpcode,
    WcStatus, WorkCompletion, MAX_INLINE_DATA, MAX_SGE, MAX_SRQ_WR,
};
