//! The hand-written `#[repr(C)]` structures have the layout of the distro's
//! `<infiniband/verbs.h>`: a C program compiled against the header prints `sizeof` and
//! `offsetof` of every field the library reads or writes, and Rust's `size_of` /
//! `offset_of!` must agree. Skips (saying so) without gcc or the header
//! (`apt-get install libibverbs-dev`).

mod common;

use std::path::Path;

use ibverbs::abi;

#[macro_use]
#[path = "../../../test-support/layout.rs"]
mod layout;

fn entries() -> Vec<layout::Entry> {
    layout! {
        union ibv_gid { raw }
        struct ibv_gid_entry { gid, gid_index, port_num, gid_type, ndev_ifindex }
        struct ibv_device { _ops, node_type, transport_type, name, dev_name, dev_path, ibdev_path }
        struct ibv_context_ops {
            _compat_query_device, alloc_mw, bind_mw, dealloc_mw, poll_cq, req_notify_cq,
            post_srq_recv, post_send, post_recv, _compat_async_event
        }
        struct ibv_context { device, ops, cmd_fd, async_fd, num_comp_vectors, mutex, abi_compat }
        struct verbs_context {
            query_port, advise_mr, create_cq_ex, priv_ => "priv", query_device_ex,
            ibv_destroy_flow, ibv_create_flow, open_qp, create_qp_ex, get_srq_num,
            create_srq_ex, open_xrcd, close_xrcd, _ABI_placeholder3, sz, context
        }
        struct ibv_device_attr {
            fw_ver, node_guid, sys_image_guid, max_mr_size, page_size_cap, vendor_id,
            vendor_part_id, hw_ver, max_qp, max_qp_wr, device_cap_flags, max_sge, max_sge_rd,
            max_cq, max_cqe, max_mr, max_pd, max_qp_rd_atom, max_ee_rd_atom, max_res_rd_atom,
            max_qp_init_rd_atom, max_ee_init_rd_atom, atomic_cap, max_ee, max_rdd, max_mw,
            max_raw_ipv6_qp, max_raw_ethy_qp, max_mcast_grp, max_mcast_qp_attach,
            max_total_mcast_qp_attach, max_ah, max_fmr, max_map_per_fmr, max_srq, max_srq_wr,
            max_srq_sge, max_pkeys, local_ca_ack_delay, phys_port_cnt
        }
        struct ibv_device_attr_ex { orig_attr, comp_mask, phys_port_cnt_ex }
        struct ibv_port_attr {
            state, max_mtu, active_mtu, gid_tbl_len, port_cap_flags, max_msg_sz,
            bad_pkey_cntr, qkey_viol_cntr, pkey_tbl_len, lid, sm_lid, lmc, max_vl_num, sm_sl,
            subnet_timeout, init_type_reply, active_width, active_speed, phys_state,
            link_layer, flags, port_cap_flags2
        }
        struct ibv_pd { context, handle }
        struct ibv_mr { context, pd, addr, length, handle, lkey, rkey }
        struct ibv_comp_channel { context, fd, refcnt }
        struct ibv_cq {
            context, channel, cq_context, handle, cqe, mutex, cond, comp_events_completed,
            async_events_completed
        }
        struct ibv_srq { context, srq_context, pd, handle, mutex, cond, events_completed }
        struct ibv_qp {
            context, qp_context, pd, send_cq, recv_cq, srq, handle, qp_num, state, qp_type,
            mutex, cond, events_completed
        }
        struct ibv_ah { context, pd, handle }
        struct ibv_global_route { dgid, flow_label, sgid_index, hop_limit, traffic_class }
        struct ibv_ah_attr { grh, dlid, sl, src_path_bits, static_rate, is_global, port_num }
        struct ibv_sge { addr, length, lkey }
        struct ibv_send_wr {
            wr_id, next, sg_list, num_sge, opcode, send_flags, imm_data,
            wr.rdma.remote_addr, wr.rdma.rkey, wr.atomic.remote_addr, wr.atomic.compare_add,
            wr.atomic.swap, wr.atomic.rkey, wr.ud.ah, wr.ud.remote_qpn, wr.ud.remote_qkey,
            qp_type => "qp_type.xrc.remote_srqn",
            ext.bind_mw.mw => "bind_mw.mw", ext.bind_mw.rkey => "bind_mw.rkey",
            ext.bind_mw.bind_info => "bind_mw.bind_info", ext.tso.hdr => "tso.hdr",
            ext.tso.hdr_sz => "tso.hdr_sz", ext.tso.mss => "tso.mss"
        }
        struct ibv_recv_wr { wr_id, next, sg_list, num_sge }
        struct ibv_wc {
            wr_id, status, opcode, vendor_err, byte_len, imm_data, qp_num, src_qp, wc_flags,
            pkey_index, slid, sl, dlid_path_bits
        }
        struct ibv_qp_cap { max_send_wr, max_recv_wr, max_send_sge, max_recv_sge, max_inline_data }
        struct ibv_qp_init_attr { qp_context, send_cq, recv_cq, srq, cap, qp_type, sq_sig_all }
        struct ibv_qp_attr {
            qp_state, cur_qp_state, path_mtu, path_mig_state, qkey, rq_psn, sq_psn,
            dest_qp_num, qp_access_flags, cap, ah_attr, alt_ah_attr, pkey_index,
            alt_pkey_index, en_sqd_async_notify, sq_draining, max_rd_atomic,
            max_dest_rd_atomic, min_rnr_timer, port_num, timeout, retry_cnt, rnr_retry,
            alt_port_num, alt_timeout, rate_limit
        }
        struct ibv_srq_attr { max_wr, max_sge, srq_limit }
        struct ibv_mw_bind_info { mr, addr, length, mw_access_flags }
        struct ibv_mw { context, pd, rkey, handle, type_ => "type" }
        struct ibv_mw_bind { wr_id, send_flags, bind_info }
        struct ibv_async_event {
            element.cq, element.qp, element.srq, element.wq, element.port_num, event_type
        }
        struct ibv_poll_cq_attr { comp_mask }
        struct ibv_cq_ex {
            context, channel, cq_context, handle, cqe, mutex, cond, comp_events_completed,
            async_events_completed, comp_mask, status, wr_id, start_poll, next_poll,
            end_poll, read_opcode, read_vendor_err, read_byte_len, read_imm_data,
            read_qp_num, read_src_qp, read_wc_flags, read_slid, read_sl,
            read_dlid_path_bits, read_completion_ts, read_cvlan, read_flow_tag,
            read_tm_info, read_completion_wallclock_ns
        }
        struct ibv_cq_init_attr_ex {
            cqe, cq_context, channel, comp_vector, wc_flags, comp_mask, flags, parent_domain
        }
        struct ibv_data_buf { addr, length }
        struct ibv_qp_ex {
            qp_base, comp_mask, wr_id, wr_flags, wr_atomic_cmp_swp, wr_atomic_fetch_add,
            wr_bind_mw, wr_local_inv, wr_rdma_read, wr_rdma_write, wr_rdma_write_imm,
            wr_send, wr_send_imm, wr_send_inv, wr_send_tso, wr_set_ud_addr,
            wr_set_xrc_srqn, wr_set_inline_data, wr_set_inline_data_list, wr_set_sge,
            wr_set_sge_list, wr_start, wr_complete, wr_abort, wr_atomic_write
        }
        struct ibv_rx_hash_conf {
            rx_hash_function, rx_hash_key_len, rx_hash_key, rx_hash_fields_mask
        }
        struct ibv_qp_init_attr_ex {
            qp_context, send_cq, recv_cq, srq, cap, qp_type, sq_sig_all, comp_mask, pd, xrcd,
            create_flags, max_tso_header, rwq_ind_tbl, rx_hash_conf, source_qpn,
            send_ops_flags
        }
    }
}

/// The constants of the extended API this library compares against.
fn ex_constants() -> Vec<layout::Entry> {
    constants! {
        IBV_WC_STANDARD_FLAGS, IBV_CQ_INIT_ATTR_MASK_FLAGS, IBV_CQ_INIT_ATTR_MASK_PD,
        IBV_CREATE_CQ_ATTR_SINGLE_THREADED, IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN,
        IBV_QP_INIT_ATTR_PD, IBV_QP_INIT_ATTR_CREATE_FLAGS, IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
        IBV_QP_EX_WITH_RDMA_WRITE, IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM, IBV_QP_EX_WITH_SEND,
        IBV_QP_EX_WITH_SEND_WITH_IMM, IBV_QP_EX_WITH_RDMA_READ,
        IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP, IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD,
        IBV_QP_EX_WITH_LOCAL_INV, IBV_QP_EX_WITH_BIND_MW, IBV_QP_EX_WITH_SEND_WITH_INV,
    }
}

#[test]
fn rust_layout_matches_the_distro_header() {
    let header = Path::new("/usr/include/infiniband/verbs.h");
    if !header.exists() {
        eprintln!(
            "SKIP: {} is missing (apt-get install libibverbs-dev)",
            header.display()
        );
        return;
    }
    let mut entries = entries();
    entries.extend(ex_constants());
    if !layout::check_against_c(
        "uroce-verbs",
        &["infiniband/verbs.h"],
        &entries,
        common::compile_c,
    ) {
        return;
    }
    eprintln!("{} sizes and offsets agree", entries.len());
}
