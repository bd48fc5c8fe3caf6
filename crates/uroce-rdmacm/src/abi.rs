//! The C structures and constants of `<rdma/rdma_cma.h>` (rdma-core 44, x86-64), with what
//! they need from `<infiniband/sa.h>` and `<infiniband/verbs.h>`, written by hand from the
//! headers' declarations: same fields, same order, same types, so the same layout.
//! tests/abi_layout.rs compiles a C program against the distro's headers and compares
//! `sizeof` and `offsetof` of every field here.
//!
//! The ibverbs structures a `rdma_cm_id` points to (`ibv_context`, `ibv_qp`, `ibv_pd`, ...)
//! are uroce-verbs' ([`crate::verbs_abi`]); the few verbs.h structures librdmacm's calls
//! take and uroce-verbs does not define (`ibv_srq_init_attr`, `ibv_srq_init_attr_ex`,
//! `ibv_ece`) are at the end of this file.
//! `<rdma/rdma_verbs.h>` adds no structure: its inline functions (`rdma_post_send`,
//! `rdma_reg_msgs`, `rdma_get_send_comp`, ...) call ibverbs on the `qp`, `pd`,
//! `send_cq`, `recv_cq` and `*_cq_channel` members of [`rdma_cm_id`], in the program, so
//! those members must hold objects of the libibverbs.so.1 the program loaded.
//!
//! C enums are `c_int` here (their storage). C's anonymous unions are named Rust unions:
//! `id->route.addr.src_sin` in C is `id.route.addr.src.sin` here.
#![allow(non_camel_case_types)]

use std::ffi::{c_char, c_int, c_void};

use libc::{sockaddr, sockaddr_in, sockaddr_in6, sockaddr_storage, socklen_t};

use crate::verbs_abi::{
    ibv_ah_attr, ibv_comp_channel, ibv_context, ibv_cq, ibv_gid, ibv_pd, ibv_qp, ibv_srq,
    ibv_srq_attr,
};

// ---------------------------------------------------------------------------------------
// enum rdma_cm_event_type

/// `enum rdma_cm_event_type`.
pub type rdma_cm_event_type = c_int;
pub const RDMA_CM_EVENT_ADDR_RESOLVED: rdma_cm_event_type = 0;
pub const RDMA_CM_EVENT_ADDR_ERROR: rdma_cm_event_type = 1;
pub const RDMA_CM_EVENT_ROUTE_RESOLVED: rdma_cm_event_type = 2;
pub const RDMA_CM_EVENT_ROUTE_ERROR: rdma_cm_event_type = 3;
pub const RDMA_CM_EVENT_CONNECT_REQUEST: rdma_cm_event_type = 4;
pub const RDMA_CM_EVENT_CONNECT_RESPONSE: rdma_cm_event_type = 5;
pub const RDMA_CM_EVENT_CONNECT_ERROR: rdma_cm_event_type = 6;
pub const RDMA_CM_EVENT_UNREACHABLE: rdma_cm_event_type = 7;
pub const RDMA_CM_EVENT_REJECTED: rdma_cm_event_type = 8;
pub const RDMA_CM_EVENT_ESTABLISHED: rdma_cm_event_type = 9;
pub const RDMA_CM_EVENT_DISCONNECTED: rdma_cm_event_type = 10;
pub const RDMA_CM_EVENT_DEVICE_REMOVAL: rdma_cm_event_type = 11;
pub const RDMA_CM_EVENT_MULTICAST_JOIN: rdma_cm_event_type = 12;
pub const RDMA_CM_EVENT_MULTICAST_ERROR: rdma_cm_event_type = 13;
pub const RDMA_CM_EVENT_ADDR_CHANGE: rdma_cm_event_type = 14;
pub const RDMA_CM_EVENT_TIMEWAIT_EXIT: rdma_cm_event_type = 15;

// ---------------------------------------------------------------------------------------
// Port spaces: the upper bits of the service ID (IBTA Vol. 1 Annex A11, the RDMA IP CM
// Service: 0x0000000001 <ps> <port>).

/// `enum rdma_port_space`.
pub type rdma_port_space = c_int;
pub const RDMA_PS_IPOIB: rdma_port_space = 0x0002;
pub const RDMA_PS_TCP: rdma_port_space = 0x0106;
pub const RDMA_PS_UDP: rdma_port_space = 0x0111;
pub const RDMA_PS_IB: rdma_port_space = 0x013F;

pub const RDMA_IB_IP_PS_MASK: u64 = 0xFFFF_FFFF_FFFF_0000;
pub const RDMA_IB_IP_PORT_MASK: u64 = 0x0000_0000_0000_FFFF;
pub const RDMA_IB_IP_PS_TCP: u64 = 0x0000_0000_0106_0000;
pub const RDMA_IB_IP_PS_UDP: u64 = 0x0000_0000_0111_0000;
pub const RDMA_IB_PS_IB: u64 = 0x0000_0000_013F_0000;

/// The Q_Key of UD QPs in the UDP and IPoIB port spaces.
pub const RDMA_UDP_QKEY: u32 = 0x0123_4567;

/// The largest `responder_resources` / `initiator_depth` of [`rdma_conn_param`]: asks for
/// the device's maximum (an anonymous enum in C; the type of the fields here).
pub const RDMA_MAX_RESP_RES: u8 = 0xFF;
pub const RDMA_MAX_INIT_DEPTH: u8 = 0xFF;

// ---------------------------------------------------------------------------------------
// Addresses and routes

/// `struct rdma_ib_addr`: the GIDs and P_Key of a resolved address. 40 bytes: the GIDs'
/// 8-byte alignment pads the 2-byte `pkey` with 6.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct rdma_ib_addr {
    pub sgid: ibv_gid,
    pub dgid: ibv_gid,
    /// `__be16`.
    pub pkey: u16,
}

/// The two anonymous unions of `struct rdma_addr`, one socket address seen as each
/// family: C's `src_addr` / `src_sin` / `src_sin6` / `src_storage` are `src.addr` /
/// `src.sin` / `src.sin6` / `src.storage` here (and `dst_*` likewise). 128 bytes, the
/// size of `sockaddr_storage`.
#[repr(C)]
#[derive(Clone, Copy)]
pub union rdma_sockaddr {
    pub addr: sockaddr,
    pub sin: sockaddr_in,
    pub sin6: sockaddr_in6,
    pub storage: sockaddr_storage,
}

/// The `addr` union of `struct rdma_addr` (one member).
#[repr(C)]
#[derive(Clone, Copy)]
pub union rdma_addr_addr {
    pub ibaddr: rdma_ib_addr,
}

/// `struct rdma_addr`: source and destination, then their GIDs.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct rdma_addr {
    pub src: rdma_sockaddr,
    pub dst: rdma_sockaddr,
    pub addr: rdma_addr_addr,
}

/// `struct ibv_sa_path_rec` (`<infiniband/sa.h>`): a path record unpacked, one member a
/// component (IBTA Vol. 1 §15.2.5.16 PathRecord), the reserved ones left out; `__be16` /
/// `__be32` members are in network order.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ibv_sa_path_rec {
    pub dgid: ibv_gid,
    pub sgid: ibv_gid,
    pub dlid: u16,
    pub slid: u16,
    pub raw_traffic: c_int,
    pub flow_label: u32,
    pub hop_limit: u8,
    pub traffic_class: u8,
    pub reversible: c_int,
    pub numb_path: u8,
    pub pkey: u16,
    pub sl: u8,
    pub mtu_selector: u8,
    pub mtu: u8,
    pub rate_selector: u8,
    pub rate: u8,
    pub packet_life_time_selector: u8,
    pub packet_life_time: u8,
    pub preference: u8,
}

/// `struct rdma_route`: the address, and the path records resolved for it (`path_rec`,
/// `num_paths` of them; librdmacm allocates them).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct rdma_route {
    pub addr: rdma_addr,
    pub path_rec: *mut ibv_sa_path_rec,
    pub num_paths: c_int,
}

// ---------------------------------------------------------------------------------------
// Channels, ids, events

/// `struct rdma_event_channel`: the fd a program polls for the channel's events.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct rdma_event_channel {
    pub fd: c_int,
}

/// `struct rdma_cm_id`: what a program sees of a connection identifier (librdmacm keeps
/// it at the start of a larger private structure). `port_num` after the 4-byte `ps`
/// leaves 3 bytes of padding; 416 bytes in all.
#[repr(C)]
pub struct rdma_cm_id {
    pub verbs: *mut ibv_context,
    pub channel: *mut rdma_event_channel,
    pub context: *mut c_void,
    pub qp: *mut ibv_qp,
    pub route: rdma_route,
    pub ps: rdma_port_space,
    pub port_num: u8,
    pub event: *mut rdma_cm_event,
    pub send_cq_channel: *mut ibv_comp_channel,
    pub send_cq: *mut ibv_cq,
    pub recv_cq_channel: *mut ibv_comp_channel,
    pub recv_cq: *mut ibv_cq,
    pub srq: *mut ibv_srq,
    pub pd: *mut ibv_pd,
    /// `enum ibv_qp_type`.
    pub qp_type: c_int,
}

/// `struct rdma_conn_param`: what `rdma_connect` / `rdma_accept` ask for and a
/// CONNECT_REQUEST / ESTABLISHED event reports (private data of the REQ / REP, responder
/// resources and initiator depth, retry counts). The seven bytes pad to 8 before `qp_num`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct rdma_conn_param {
    pub private_data: *const c_void,
    pub private_data_len: u8,
    pub responder_resources: u8,
    pub initiator_depth: u8,
    pub flow_control: u8,
    /// Ignored when accepting.
    pub retry_count: u8,
    pub rnr_retry_count: u8,
    /// This and `qp_num` are ignored when a QP was created on the id.
    pub srq: u8,
    pub qp_num: u32,
}

/// `struct rdma_ud_param`: what a UD event reports (SIDR_REP's private data, the address
/// to reach the peer, its QP number and Q_Key). `ah_attr` holds a GID, so it sits at
/// offset 16 (8-byte alignment), not 9.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct rdma_ud_param {
    pub private_data: *const c_void,
    pub private_data_len: u8,
    pub ah_attr: ibv_ah_attr,
    pub qp_num: u32,
    pub qkey: u32,
}

/// The `param` union of `struct rdma_cm_event`: `conn` for connected port spaces, `ud`
/// for UD (56 bytes, the larger).
#[repr(C)]
#[derive(Clone, Copy)]
pub union rdma_cm_event_param {
    pub conn: rdma_conn_param,
    pub ud: rdma_ud_param,
}

/// `struct rdma_cm_event`: one event of a channel, returned by `rdma_get_cm_event` and
/// given back with `rdma_ack_cm_event`. `status` is 0 or a negative errno (or, for
/// REJECTED, the IBTA reject reason).
#[repr(C)]
pub struct rdma_cm_event {
    pub id: *mut rdma_cm_id,
    pub listen_id: *mut rdma_cm_id,
    pub event: rdma_cm_event_type,
    pub status: c_int,
    pub param: rdma_cm_event_param,
}

// ---------------------------------------------------------------------------------------
// rdma_getaddrinfo

pub const RAI_PASSIVE: c_int = 0x0000_0001;
pub const RAI_NUMERICHOST: c_int = 0x0000_0002;
pub const RAI_NOROUTE: c_int = 0x0000_0004;
pub const RAI_FAMILY: c_int = 0x0000_0008;

/// `struct rdma_addrinfo`: `getaddrinfo`'s answer with both ends, the port space and, for
/// an active side, the route (path records) and connect data.
#[repr(C)]
pub struct rdma_addrinfo {
    pub ai_flags: c_int,
    pub ai_family: c_int,
    pub ai_qp_type: c_int,
    pub ai_port_space: c_int,
    pub ai_src_len: socklen_t,
    pub ai_dst_len: socklen_t,
    pub ai_src_addr: *mut sockaddr,
    pub ai_dst_addr: *mut sockaddr,
    pub ai_src_canonname: *mut c_char,
    pub ai_dst_canonname: *mut c_char,
    pub ai_route_len: usize,
    pub ai_route: *mut c_void,
    pub ai_connect_len: usize,
    pub ai_connect: *mut c_void,
    pub ai_next: *mut rdma_addrinfo,
}

// ---------------------------------------------------------------------------------------
// Multicast

/// `enum rdma_cm_join_mc_attr_mask`: the valid members of [`rdma_cm_join_mc_attr_ex`].
pub const RDMA_CM_JOIN_MC_ATTR_ADDRESS: u32 = 1 << 0;
pub const RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS: u32 = 1 << 1;
pub const RDMA_CM_JOIN_MC_ATTR_RESERVED: u32 = 1 << 2;

/// `enum rdma_cm_mc_join_flags`.
pub const RDMA_MC_JOIN_FLAG_FULLMEMBER: u32 = 0;
pub const RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER: u32 = 1;
pub const RDMA_MC_JOIN_FLAG_RESERVED: u32 = 2;

/// `struct rdma_cm_join_mc_attr_ex`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct rdma_cm_join_mc_attr_ex {
    pub comp_mask: u32,
    pub join_flags: u32,
    pub addr: *mut sockaddr,
}

// ---------------------------------------------------------------------------------------
// rdma_set_option

/// Option levels.
pub const RDMA_OPTION_ID: c_int = 0;
pub const RDMA_OPTION_IB: c_int = 1;

/// Names at level [`RDMA_OPTION_ID`].
/// `uint8_t`: the IP type of service (RFC 2474).
pub const RDMA_OPTION_ID_TOS: c_int = 0;
/// `int`: as `SO_REUSEADDR`.
pub const RDMA_OPTION_ID_REUSEADDR: c_int = 1;
/// `int`: as `IPV6_V6ONLY`.
pub const RDMA_OPTION_ID_AFONLY: c_int = 2;
/// `uint8_t`: the QP's local ACK timeout exponent.
pub const RDMA_OPTION_ID_ACK_TIMEOUT: c_int = 3;

/// Names at level [`RDMA_OPTION_IB`]: an array of [`ibv_path_data`].
pub const RDMA_OPTION_IB_PATH: c_int = 1;

/// `struct ibv_path_record` (`<infiniband/sa.h>`): a PathRecord as on the wire (IBTA
/// Vol. 1 §15.2.5.16), network order, bit fields packed as the comments say.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ibv_path_record {
    pub service_id: u64,
    pub dgid: ibv_gid,
    pub sgid: ibv_gid,
    pub dlid: u16,
    pub slid: u16,
    /// Reserved 31:28, flow label 27:8, hop limit 7:0.
    pub flowlabel_hoplimit: u32,
    pub tclass: u8,
    /// Reversible 7, number of paths 6:0.
    pub reversible_numpath: u8,
    pub pkey: u16,
    /// QoS class 15:4, SL 3:0.
    pub qosclass_sl: u16,
    /// Selector 7:6, MTU 5:0.
    pub mtu: u8,
    /// Selector 7:6, rate 5:0.
    pub rate: u8,
    /// Selector 7:6, packet lifetime 5:0.
    pub packetlifetime: u8,
    pub preference: u8,
    pub reserved: [u8; 6],
}

pub const IBV_PATH_RECORD_REVERSIBLE: u8 = 0x80;

pub const IBV_PATH_FLAG_GMP: u32 = 1 << 0;
pub const IBV_PATH_FLAG_PRIMARY: u32 = 1 << 1;
pub const IBV_PATH_FLAG_ALTERNATE: u32 = 1 << 2;
pub const IBV_PATH_FLAG_OUTBOUND: u32 = 1 << 3;
pub const IBV_PATH_FLAG_INBOUND: u32 = 1 << 4;
pub const IBV_PATH_FLAG_INBOUND_REVERSE: u32 = 1 << 5;
pub const IBV_PATH_FLAG_BIDIRECTIONAL: u32 = IBV_PATH_FLAG_OUTBOUND | IBV_PATH_FLAG_INBOUND_REVERSE;

/// `struct ibv_path_data`: one element of the [`RDMA_OPTION_IB_PATH`] option.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ibv_path_data {
    pub flags: u32,
    pub reserved: u32,
    pub path: ibv_path_record,
}

// ---------------------------------------------------------------------------------------
// rsockets (`<rdma/rsocket.h>`): the option level and names of rsetsockopt.

pub const SOL_RDMA: c_int = 0x10000;
pub const RDMA_SQSIZE: c_int = 0;
pub const RDMA_RQSIZE: c_int = 1;
pub const RDMA_INLINE: c_int = 2;
pub const RDMA_IOMAPSIZE: c_int = 3;
pub const RDMA_ROUTE: c_int = 4;

// ---------------------------------------------------------------------------------------
// `<infiniband/verbs.h>` structures librdmacm's calls take that uroce-verbs' abi.rs does
// not define.

/// `struct ibv_ece`: enhanced connection establishment options (`rdma_set_local_ece`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ibv_ece {
    pub vendor_id: u32,
    pub options: u32,
    pub comp_mask: u32,
}

/// `struct ibv_srq_init_attr` (`rdma_create_srq`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_srq_init_attr {
    pub srq_context: *mut c_void,
    pub attr: ibv_srq_attr,
}

/// `struct ibv_tm_cap`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ibv_tm_cap {
    pub max_num_tags: u32,
    pub max_ops: u32,
}

/// `struct ibv_srq_init_attr_ex` (`rdma_create_srq_ex`). `xrcd` points to a
/// `struct ibv_xrcd`, which uroce does not have.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_srq_init_attr_ex {
    pub srq_context: *mut c_void,
    pub attr: ibv_srq_attr,
    pub comp_mask: u32,
    /// `enum ibv_srq_type`.
    pub srq_type: c_int,
    pub pd: *mut ibv_pd,
    pub xrcd: *mut c_void,
    pub cq: *mut ibv_cq,
    pub tm_cap: ibv_tm_cap,
}

/// `struct ibv_qp_init_attr_ex` (`rdma_create_qp_ex`) and what it holds: uroce-verbs'
/// (its extended API takes it too).
pub use crate::verbs_abi::{ibv_qp_init_attr_ex, ibv_rx_hash_conf};
