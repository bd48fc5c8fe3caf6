//! `rdma_cm` events: made from what the CM reports (as the kernel's `cma_ib_handler`
//! and `cma_req_handler` make them from the IB CM's), queued on the id's channel, handed
//! out by `rdma_get_cm_event` and freed by `rdma_ack_cm_event`.

#![deny(unsafe_code)]

use std::ffi::c_int;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::AsRawFd;
use std::time::Instant;

use uroce::cm::{CmEvent, CmId, ConnectReply, ConnectRequest, PortSpace};
use uroce::verbs::QpState;
use uroce::wire::cm_repr::IpCmHeaderRepr;

use crate::abi::*;
use crate::ffi::CBox;
use crate::qp;
use crate::state::{gid_of, signal, Channel, EventBox, Id, Phase, State};
use crate::verbs_abi::ibv_ah_attr;

/// Bytes of the RDMA CM IP addressing header at the front of a REQ's private data.
pub(crate) const IP_HEADER_LEN: usize = 36;

/// An event's parameters.
pub(crate) enum Param {
    None,
    Conn {
        private_data: Vec<u8>,
        responder_resources: u8,
        initiator_depth: u8,
        flow_control: u8,
        retry_count: u8,
        rnr_retry_count: u8,
        srq: u8,
        qp_num: u32,
    },
    Ud {
        private_data: Vec<u8>,
        ah_attr: ibv_ah_attr,
        qp_num: u32,
        qkey: u32,
    },
}

/// Queues an event for `id` (and `listen_id`) on the id's channel.
pub(crate) fn push(
    g: &mut State,
    id: usize,
    listen_id: usize,
    event: rdma_cm_event_type,
    status: c_int,
    param: Param,
) {
    // A connection request comes on the listener's channel (the new id may have one of
    // its own: a synchronous listener's children do).
    let on = if listen_id != 0 { listen_id } else { id };
    let Some(chan) = g.ids.get(&on).map(|i| i.channel) else {
        return;
    };
    let mut b: CBox<EventBox> = CBox::new(crate::ffi::zeroed());
    b.ev.id = id as *mut rdma_cm_id;
    b.ev.listen_id = listen_id as *mut rdma_cm_id;
    b.ev.event = event;
    b.ev.status = status;
    // The private data is copied into the box, whose contents never move: the pointer
    // stays valid until the ack frees it.
    let mut copy = |data: &[u8]| {
        let n = data.len().min(255);
        b.private_data[..n].copy_from_slice(&data[..n]);
        let p = if n > 0 {
            b.private_data.as_ptr().cast()
        } else {
            std::ptr::null()
        };
        (p, n as u8)
    };
    match param {
        Param::None => {}
        Param::Conn {
            private_data,
            responder_resources,
            initiator_depth,
            flow_control,
            retry_count,
            rnr_retry_count,
            srq,
            qp_num,
        } => {
            let (private_data, private_data_len) = copy(&private_data);
            b.ev.param.conn = rdma_conn_param {
                private_data,
                private_data_len,
                responder_resources,
                initiator_depth,
                flow_control,
                retry_count,
                rnr_retry_count,
                srq,
                qp_num,
            };
        }
        Param::Ud {
            private_data,
            ah_attr,
            qp_num,
            qkey,
        } => {
            let (private_data, private_data_len) = copy(&private_data);
            b.ev.param.ud = rdma_ud_param {
                private_data,
                private_data_len,
                ah_attr,
                qp_num,
                qkey,
            };
        }
    }
    match g.deferred.as_mut() {
        Some(d) => d.push((chan, b)),
        None => deliver(g, chan, b),
    }
}

/// Queues event `e` on channel `chan` and counts it in the channel's fd, if its id (and
/// the listener of a connection request) and the channel are still there; otherwise the
/// event is freed, and a connection request's new id with it (its REQ rejected).
pub(crate) fn deliver(g: &mut State, chan: usize, e: CBox<EventBox>) {
    let (id, listen) = (e.ev.id as usize, e.ev.listen_id as usize);
    let alive = g.ids.contains_key(&id) && (listen == 0 || g.ids.contains_key(&listen));
    match g.channels.get_mut(&chan) {
        Some(c) if alive => {
            c.queue.push_back(e);
            signal(c.fd.as_raw_fd());
        }
        _ => {
            drop(e);
            if listen != 0 {
                crate::api::discard_id(g, id);
            }
        }
    }
}

/// Drops the queued (not yet taken) events of id `id` (and the connection requests of
/// the listener `id`) from channel `c`; their counts stay in the fd as stale ones.
/// Returns the new ids of the connection requests dropped.
pub(crate) fn forget_queued(c: &mut Channel, id: usize) -> Vec<usize> {
    let mut children = Vec::new();
    let mut dropped = 0;
    c.queue.retain(|e| {
        let (of, listen) = (e.ev.id as usize, e.ev.listen_id as usize);
        let mine = of == id || listen == id;
        if mine {
            if listen == id {
                children.push(of);
            }
            // The event is freed as `retain` drops it.
            dropped += 1;
        }
        !mine
    });
    c.stale += dropped;
    children
}

/// The address handle attributes that reach `peer` from device `d`.
pub(crate) fn ah_to(g: &State, d: usize, peer: std::net::IpAddr, tos: u8) -> ibv_ah_attr {
    let dev = &g.devices.as_ref().expect("device in use")[d];
    let mut ah = ibv_ah_attr {
        is_global: 1,
        port_num: 1,
        ..ibv_ah_attr::default()
    };
    ah.grh.dgid.raw = gid_of(peer);
    ah.grh.sgid_index = dev.sgid_index;
    ah.grh.hop_limit = 64;
    ah.grh.traffic_class = tos;
    ah
}

/// Handles every event every CM has.
pub(crate) fn process(g: &mut State) {
    let n = g.devices.as_ref().map_or(0, Vec::len);
    for d in 0..n {
        while let Some(ev) = g.devices.as_mut().expect("counted")[d].cm.poll_event() {
            handle(g, d, ev);
        }
    }
}

/// The id of CM connection `cm` on device `d`.
fn id_of(g: &State, d: usize, cm: CmId) -> Option<usize> {
    g.devices.as_ref()?[d].by_cm.get(&cm.0).copied()
}

fn forget_cm(g: &mut State, d: usize, cm: CmId) {
    if let Some(devs) = g.devices.as_mut() {
        devs[d].by_cm.remove(&cm.0);
    }
}

fn handle(g: &mut State, d: usize, ev: CmEvent) {
    match ev {
        CmEvent::ConnectRequest { id, req } => connect_request(g, d, id, req),
        CmEvent::SidrRequest {
            id,
            service_id,
            peer,
            ip,
            private_data,
        } => sidr_request(g, d, id, service_id, peer, ip, private_data),
        CmEvent::ConnectReply { id, rep } => connect_reply(g, d, id, &rep),
        CmEvent::Established { id } => {
            // The active side reported ESTABLISHED with the REP's parameters when it sent
            // the RTU (or the program sent it with rdma_establish): only the passive
            // side's comes from here.
            let passive = id_of(g, d, id).filter(|i| g.ids[i].phase == Phase::Connecting);
            if let Some(i) = passive {
                set_phase(g, i, Phase::Connected);
                push(g, i, 0, RDMA_CM_EVENT_ESTABLISHED, 0, Param::None);
            }
        }
        CmEvent::Rejected {
            id,
            reason,
            private_data,
            ..
        } => {
            if let Some(i) = id_of(g, d, id) {
                forget_cm(g, d, id);
                clear_cm(g, i);
                set_phase(g, i, Phase::RouteResolved);
                // As librdmacm: the QP of a rejected connection goes to the error state.
                qp::to_error(g, i);
                push(
                    g,
                    i,
                    0,
                    RDMA_CM_EVENT_REJECTED,
                    c_int::from(reason),
                    conn_param(private_data, 0, 0, 0, 0),
                );
            }
        }
        CmEvent::Unreachable { id } => {
            if let Some(i) = id_of(g, d, id) {
                forget_cm(g, d, id);
                clear_cm(g, i);
                set_phase(g, i, Phase::RouteResolved);
                push(
                    g,
                    i,
                    0,
                    RDMA_CM_EVENT_UNREACHABLE,
                    -libc::ETIMEDOUT,
                    Param::None,
                );
            }
        }
        CmEvent::Disconnected { id, private_data } => {
            if let Some(i) = id_of(g, d, id) {
                set_phase(g, i, Phase::Disconnected);
                push(
                    g,
                    i,
                    0,
                    RDMA_CM_EVENT_DISCONNECTED,
                    0,
                    conn_param(private_data, 0, 0, 0, 0),
                );
            }
        }
        CmEvent::TimeWaitExit { id } => {
            if let Some(i) = id_of(g, d, id) {
                forget_cm(g, d, id);
                clear_cm(g, i);
                push(g, i, 0, RDMA_CM_EVENT_TIMEWAIT_EXIT, 0, Param::None);
            }
        }
        CmEvent::SidrReply {
            id,
            status,
            qpn,
            qkey,
            private_data,
        } => {
            if let Some(i) = id_of(g, d, id) {
                forget_cm(g, d, id);
                clear_cm(g, i);
                let Some(peer) = g.ids.get(&i).and_then(|x| x.dst) else {
                    return;
                };
                let tos = g.ids.get(&i).map_or(0, |x| x.tos);
                if status == uroce::cm::SIDR_VALID {
                    set_phase(g, i, Phase::Connected);
                    let ah_attr = ah_to(g, d, g.wire_ip(d, peer.ip()), tos);
                    push(
                        g,
                        i,
                        0,
                        RDMA_CM_EVENT_ESTABLISHED,
                        0,
                        Param::Ud {
                            private_data,
                            ah_attr,
                            qp_num: qpn,
                            qkey,
                        },
                    );
                } else {
                    set_phase(g, i, Phase::RouteResolved);
                    push(
                        g,
                        i,
                        0,
                        RDMA_CM_EVENT_UNREACHABLE,
                        c_int::from(status),
                        Param::None,
                    );
                }
            }
        }
    }
}

fn conn_param(private_data: Vec<u8>, rr: u8, id: u8, rnr: u8, qpn: u32) -> Param {
    Param::Conn {
        private_data,
        responder_resources: rr,
        initiator_depth: id,
        flow_control: 0,
        retry_count: 0,
        rnr_retry_count: rnr,
        srq: 0,
        qp_num: qpn,
    }
}

fn set_phase(g: &mut State, i: usize, p: Phase) {
    if let Some(id) = g.ids.get_mut(&i) {
        id.phase = p;
    }
}

fn clear_cm(g: &mut State, i: usize) {
    if let Some(id) = g.ids.get_mut(&i) {
        id.cm = None;
    }
}

/// The listening id that takes a REQ for `service_id` arriving at device `d`: one bound
/// to its address, else one bound to the wildcard or a loopback address (the kernel's
/// `cma_any_addr`), in the service ID's port space and port; one bound to the loopback
/// address the CM IP header (`to`) names is an exact match.
fn listener_for(g: &State, d: usize, service_id: u64, to: Option<IpAddr>) -> Option<usize> {
    let (ps, port) = uroce::cm::port_of(service_id)?;
    let ip = g.devices.as_ref()?[d].ip;
    let code = c_int::from(ps.code());
    let mut best = None;
    for (&p, id) in &g.ids {
        if id.phase != Phase::Listening || id.ps != code {
            continue;
        }
        let Some(src) = id.src else { continue };
        if src.port() != port {
            continue;
        }
        if src.ip() == ip || (src.ip().is_loopback() && to == Some(src.ip())) {
            return Some(p);
        }
        let any = src.ip().is_unspecified() || src.ip().is_loopback();
        if any && (!id.afonly || src.is_ipv4() == ip.is_ipv4()) {
            best = Some(p);
        }
    }
    best
}

/// A new id for a connection a listener received (`cma_new_conn_id`).
fn new_child(
    g: &mut State,
    d: usize,
    listener: usize,
    cm: CmId,
    peer: SocketAddr,
    qp_type: c_int,
    to: Option<IpAddr>,
) -> usize {
    let ip = g.devices.as_ref().expect("device")[d].ip;
    let l = &g.ids[&listener];
    // The connection's local address is the one the REQ's CM IP header names when that
    // is a loopback address (the device talking to itself), else the device's.
    let ip = to.filter(IpAddr::is_loopback).unwrap_or(ip);
    let local = SocketAddr::new(ip, l.src.map_or(0, |s| s.port()));
    let (ps, mut channel, tos, sync) = (l.ps, l.channel, l.tos, l.sync);
    let (lctx, mut lchan) = (l.obj.id.context, l.obj.id.channel);
    // A synchronous listener's children are synchronous, each with a channel of its own
    // (librdmacm migrates them), so that rdma_accept can wait for its ESTABLISHED.
    if sync {
        if let Ok(c) = crate::api::new_channel(g) {
            lchan = c;
            channel = c as usize;
        }
    }
    let obj = crate::api::new_id_box(lchan, lctx, ps, qp_type);
    let p = obj.addr();
    let psn = (g.random() & 0xff_ffff) as u32;
    g.ids.insert(
        p,
        Id {
            obj,
            ps,
            channel,
            sync,
            dev: Some(d),
            src: Some(local),
            dst: Some(peer),
            phase: Phase::Connecting,
            cm: Some(cm),
            listener: Some(listener),
            tos,
            ack_timeout: None,
            reuseaddr: false,
            afonly: false,
            own_cqs: false,
            ep_qp_init: None,
            psn,
            req: None,
        },
    );
    g.attach(p, d);
    crate::api::set_route(g, p);
    g.devices.as_mut().expect("device")[d].by_cm.insert(cm.0, p);
    p
}

fn connect_request(g: &mut State, d: usize, cm: CmId, req: Box<ConnectRequest>) {
    let to = req.ip.as_ref().map(|h| h.dst);
    let Some(listener) = listener_for(g, d, req.service_id, to) else {
        // The endpoint listens on the service ID, but no id takes it (another address,
        // AFONLY): reason 8, invalid service ID, as if nobody listened.
        let _ = g.devices.as_mut().expect("device")[d].cm.reject_with(
            cm,
            uroce::cm::reason::INVALID_SERVICE_ID,
            &[],
        );
        return;
    };
    let ip_space = uroce::cm::port_of(req.service_id).is_some_and(|(ps, _)| ps != PortSpace::Ib);
    let peer_port = req.ip.as_ref().map_or(0, |h| h.src_port);
    let peer = SocketAddr::new(req.peer, peer_port);
    let qp_type = if req.transport == uroce::cm::Transport::Uc {
        3
    } else {
        2
    };
    let child = new_child(g, d, listener, cm, peer, qp_type, to);
    let user = if ip_space && req.private_data.len() >= IP_HEADER_LEN {
        req.private_data[IP_HEADER_LEN..].to_vec()
    } else {
        req.private_data.clone()
    };
    // The event's view is this side's: the REQ's initiator depth is what this side's
    // responder resources may be, and the other way round (`cm_format_req_event`).
    let param = Param::Conn {
        private_data: user,
        responder_resources: req.initiator_depth,
        initiator_depth: req.responder_resources,
        flow_control: 1,
        retry_count: req.retry_count,
        rnr_retry_count: req.rnr_retry_count,
        srq: u8::from(req.srq),
        qp_num: req.remote_qpn,
    };
    if let Some(id) = g.ids.get_mut(&child) {
        id.req = Some(req);
    }
    push(g, child, listener, RDMA_CM_EVENT_CONNECT_REQUEST, 0, param);
}

#[allow(clippy::too_many_arguments)]
fn sidr_request(
    g: &mut State,
    d: usize,
    cm: CmId,
    service_id: u64,
    peer: std::net::IpAddr,
    ip: Option<IpCmHeaderRepr>,
    private_data: Vec<u8>,
) {
    let to = ip.as_ref().map(|h| h.dst);
    let Some(listener) = listener_for(g, d, service_id, to) else {
        let _ = g.devices.as_mut().expect("device")[d].cm.sidr_reply(
            Instant::now(),
            cm,
            &uroce::cm::SidrReplyParams {
                status: uroce::cm::SIDR_UNSUPPORTED,
                qpn: 0,
                qkey: 0,
                private_data: Vec::new(),
            },
        );
        return;
    };
    let peer = SocketAddr::new(peer, ip.as_ref().map_or(0, |h| h.src_port));
    let child = new_child(g, d, listener, cm, peer, 4, to);
    let user = if ip.is_some() && private_data.len() >= IP_HEADER_LEN {
        private_data[IP_HEADER_LEN..].to_vec()
    } else {
        private_data
    };
    let tos = g.ids.get(&child).map_or(0, |i| i.tos);
    let ah_attr = ah_to(g, d, g.wire_ip(d, peer.ip()), tos);
    push(
        g,
        child,
        listener,
        RDMA_CM_EVENT_CONNECT_REQUEST,
        0,
        Param::Ud {
            private_data: user,
            ah_attr,
            qp_num: 0,
            qkey: 0,
        },
    );
}

fn connect_reply(g: &mut State, d: usize, cm: CmId, rep: &ConnectReply) {
    let Some(i) = id_of(g, d, cm) else {
        return;
    };
    let has_qp = !g.ids[&i].obj.id.qp.is_null();
    // This side's view, as `cm_format_rep_event`: the peer's initiator depth is what
    // this side may take as responder, and the other way round.
    let param = Param::Conn {
        private_data: rep.private_data.clone(),
        responder_resources: rep.initiator_depth,
        initiator_depth: rep.responder_resources,
        flow_control: 1,
        retry_count: 0,
        rnr_retry_count: rep.rnr_retry_count,
        srq: u8::from(rep.srq),
        qp_num: rep.remote_qpn,
    };
    if !has_qp {
        // The program brings its own QP up (rdma_init_qp_attr) and calls rdma_establish.
        push(g, i, 0, RDMA_CM_EVENT_CONNECT_RESPONSE, 0, param);
        return;
    }
    let r = qp::modify_from_cm(g, i, QpState::Init)
        .and_then(|_| qp::modify_from_cm(g, i, QpState::Rtr))
        .and_then(|_| qp::modify_from_cm(g, i, QpState::Rts));
    let cmep = &mut g.devices.as_mut().expect("device")[d].cm;
    match r.map(|_| cmep.rtu(cm, &[]).map_err(|_| libc::EINVAL)) {
        Ok(Ok(())) => {
            set_phase(g, i, Phase::Connected);
            push(g, i, 0, RDMA_CM_EVENT_ESTABLISHED, 0, param);
        }
        Ok(Err(e)) | Err(e) => {
            let _ = cmep.reject(cm, &[]);
            forget_cm(g, d, cm);
            clear_cm(g, i);
            set_phase(g, i, Phase::RouteResolved);
            push(g, i, 0, RDMA_CM_EVENT_CONNECT_ERROR, -e, Param::None);
        }
    }
}
