//! The hand-written `#[repr(C)]` structures have the layout of the distro's
//! `<rdma/rdma_cma.h>` (and of the `<infiniband/sa.h>` / `<infiniband/verbs.h>` structures
//! src/abi.rs adds), and the constants its values: a C program compiled against the
//! headers prints `sizeof` and `offsetof` of every field and the value of every constant,
//! and Rust's `size_of` / `offset_of!` / constants must agree. Skips (saying so) without
//! gcc or the header (`apt-get install librdmacm-dev`).

mod common;

use std::path::Path;

use rdmacm::abi;

#[macro_use]
#[path = "../../../test-support/layout.rs"]
mod layout;

fn entries() -> Vec<layout::Entry> {
    let mut v = layout! {
        struct rdma_ib_addr { sgid, dgid, pkey }
        struct rdma_addr {
            src.addr => "src_addr", src.sin => "src_sin", src.sin6 => "src_sin6",
            src.storage => "src_storage",
            dst.addr => "dst_addr", dst.sin => "dst_sin", dst.sin6 => "dst_sin6",
            dst.storage => "dst_storage",
            addr.ibaddr, addr.ibaddr.sgid, addr.ibaddr.dgid, addr.ibaddr.pkey
        }
        struct ibv_sa_path_rec {
            dgid, sgid, dlid, slid, raw_traffic, flow_label, hop_limit, traffic_class,
            reversible, numb_path, pkey, sl, mtu_selector, mtu, rate_selector, rate,
            packet_life_time_selector, packet_life_time, preference
        }
        struct rdma_route { addr, path_rec, num_paths }
        struct rdma_event_channel { fd }
        struct rdma_cm_id {
            verbs, channel, context, qp, route, route.addr.src.sin => "route.addr.src_sin",
            route.addr.dst.sin6 => "route.addr.dst_sin6", route.addr.addr.ibaddr.pkey,
            route.path_rec, route.num_paths, ps, port_num, event, send_cq_channel, send_cq,
            recv_cq_channel, recv_cq, srq, pd, qp_type
        }
        struct rdma_conn_param {
            private_data, private_data_len, responder_resources, initiator_depth,
            flow_control, retry_count, rnr_retry_count, srq, qp_num
        }
        struct rdma_ud_param {
            private_data, private_data_len, ah_attr, ah_attr.grh.dgid, ah_attr.dlid,
            ah_attr.port_num, qp_num, qkey
        }
        struct rdma_cm_event {
            id, listen_id, event, status, param, param.conn, param.conn.private_data,
            param.conn.private_data_len, param.conn.responder_resources,
            param.conn.initiator_depth, param.conn.flow_control, param.conn.retry_count,
            param.conn.rnr_retry_count, param.conn.srq, param.conn.qp_num, param.ud,
            param.ud.private_data, param.ud.private_data_len, param.ud.ah_attr,
            param.ud.qp_num, param.ud.qkey
        }
        struct rdma_addrinfo {
            ai_flags, ai_family, ai_qp_type, ai_port_space, ai_src_len, ai_dst_len,
            ai_src_addr, ai_dst_addr, ai_src_canonname, ai_dst_canonname, ai_route_len,
            ai_route, ai_connect_len, ai_connect, ai_next
        }
        struct rdma_cm_join_mc_attr_ex { comp_mask, join_flags, addr }
        struct ibv_path_record {
            service_id, dgid, sgid, dlid, slid, flowlabel_hoplimit, tclass,
            reversible_numpath, pkey, qosclass_sl, mtu, rate, packetlifetime, preference,
            reserved
        }
        struct ibv_path_data { flags, reserved, path }
        struct ibv_ece { vendor_id, options, comp_mask }
        struct ibv_srq_init_attr { srq_context, attr }
        struct ibv_tm_cap { max_num_tags, max_ops }
        struct ibv_srq_init_attr_ex {
            srq_context, attr, comp_mask, srq_type, pd, xrcd, cq, tm_cap
        }
        struct ibv_rx_hash_conf {
            rx_hash_function, rx_hash_key_len, rx_hash_key, rx_hash_fields_mask
        }
        struct ibv_qp_init_attr_ex {
            qp_context, send_cq, recv_cq, srq, cap, qp_type, sq_sig_all, comp_mask, pd,
            xrcd, create_flags, max_tso_header, rwq_ind_tbl, rx_hash_conf, source_qpn,
            send_ops_flags
        }
    };
    v.extend(constants![
        RDMA_CM_EVENT_ADDR_RESOLVED,
        RDMA_CM_EVENT_ADDR_ERROR,
        RDMA_CM_EVENT_ROUTE_RESOLVED,
        RDMA_CM_EVENT_ROUTE_ERROR,
        RDMA_CM_EVENT_CONNECT_REQUEST,
        RDMA_CM_EVENT_CONNECT_RESPONSE,
        RDMA_CM_EVENT_CONNECT_ERROR,
        RDMA_CM_EVENT_UNREACHABLE,
        RDMA_CM_EVENT_REJECTED,
        RDMA_CM_EVENT_ESTABLISHED,
        RDMA_CM_EVENT_DISCONNECTED,
        RDMA_CM_EVENT_DEVICE_REMOVAL,
        RDMA_CM_EVENT_MULTICAST_JOIN,
        RDMA_CM_EVENT_MULTICAST_ERROR,
        RDMA_CM_EVENT_ADDR_CHANGE,
        RDMA_CM_EVENT_TIMEWAIT_EXIT,
        RDMA_PS_IPOIB,
        RDMA_PS_TCP,
        RDMA_PS_UDP,
        RDMA_PS_IB,
        RDMA_IB_IP_PS_MASK,
        RDMA_IB_IP_PORT_MASK,
        RDMA_IB_IP_PS_TCP,
        RDMA_IB_IP_PS_UDP,
        RDMA_IB_PS_IB,
        RDMA_UDP_QKEY,
        RDMA_MAX_RESP_RES,
        RDMA_MAX_INIT_DEPTH,
        RAI_PASSIVE,
        RAI_NUMERICHOST,
        RAI_NOROUTE,
        RAI_FAMILY,
        RDMA_CM_JOIN_MC_ATTR_ADDRESS,
        RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS,
        RDMA_CM_JOIN_MC_ATTR_RESERVED,
        RDMA_MC_JOIN_FLAG_FULLMEMBER,
        RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER,
        RDMA_MC_JOIN_FLAG_RESERVED,
        RDMA_OPTION_ID,
        RDMA_OPTION_IB,
        RDMA_OPTION_ID_TOS,
        RDMA_OPTION_ID_REUSEADDR,
        RDMA_OPTION_ID_AFONLY,
        RDMA_OPTION_ID_ACK_TIMEOUT,
        RDMA_OPTION_IB_PATH,
        IBV_PATH_RECORD_REVERSIBLE,
        IBV_PATH_FLAG_GMP,
        IBV_PATH_FLAG_PRIMARY,
        IBV_PATH_FLAG_ALTERNATE,
        IBV_PATH_FLAG_OUTBOUND,
        IBV_PATH_FLAG_INBOUND,
        IBV_PATH_FLAG_INBOUND_REVERSE,
        IBV_PATH_FLAG_BIDIRECTIONAL,
        SOL_RDMA,
        RDMA_SQSIZE,
        RDMA_RQSIZE,
        RDMA_INLINE,
        RDMA_IOMAPSIZE,
        RDMA_ROUTE,
    ]);
    v
}

#[test]
fn rust_layout_matches_the_distro_header() {
    let header = Path::new("/usr/include/rdma/rdma_cma.h");
    if !header.exists() {
        eprintln!(
            "SKIP: {} is missing (apt-get install librdmacm-dev)",
            header.display()
        );
        return;
    }
    let entries = entries();
    let headers = ["rdma/rdma_cma.h", "rdma/rdma_verbs.h", "rdma/rsocket.h"];
    if !layout::check_against_c("uroce-rdmacm", &headers, &entries, common::compile_c) {
        return;
    }
    eprintln!("{} sizes, offsets and constants agree", entries.len());
}
