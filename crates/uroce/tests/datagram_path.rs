//! The endpoint's quinn-shaped edge: `poll_transmit` writes only the RoCE part and says
//! where it goes; `handle_datagram` takes a UDP payload with its addressing. RC traffic
//! carried that way completes as it does over whole frames, and the ICRC still covers the
//! IP and UDP fields a socket reports.

mod common;

use common::*;
use uroce::endpoint::Transmit;
use uroce::wire::{DatagramRepr, IpRepr};

/// Moves every datagram `from` has to send to `to` as a UDP socket would: the RoCE bytes
/// and the addressing, no link headers. Returns what went.
fn carry(from: &mut Context, to: &mut Context, now: Instant) -> Vec<(Transmit, Vec<u8>)> {
    let mut buf = vec![0u8; 5000];
    let mut went = Vec::new();
    while let Some(t) = from.poll_transmit(now, &mut buf) {
        let roce = buf[..t.len].to_vec();
        to.handle_datagram(now, &t.datagram, &roce)
            .expect("a datagram the endpoint wrote verifies");
        went.push((t, roce));
    }
    went
}

#[test]
fn rc_write_and_send_complete_over_datagrams() {
    let mut p = Pair::new(RtsAttr::default(), all());
    let payload: Vec<u8> = (0..3000u32).map(|i| (i * 7) as u8).collect();
    p.a.mr_bytes_mut(&p.la)[..3000].copy_from_slice(&payload);
    let w = SendWr {
        wr_id: 1,
        op: write_op(&p, 100),
        sge: Sge {
            addr: p.la.addr,
            length: 3000,
            lkey: p.la.lkey,
        },
        signaled: true,
        solicited: false,
    };
    p.a.post_send(p.qa, w).unwrap();
    let now = p.now;
    let sent = carry(&mut p.a, &mut p.b, now);
    // 3000 bytes at path MTU 1024: FIRST, MIDDLE, LAST, each a datagram to 4791 from the
    // QP's source port, with only the RoCE part in the buffer.
    assert_eq!(sent.len(), 3);
    for (t, roce) in &sent {
        assert_eq!(t.datagram.dst(), IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)));
        assert_eq!(t.datagram.udp.dst_port, 4791);
        assert_eq!(
            t.datagram.udp.src_port,
            uroce::verbs::udp_source_port(0xc000, p.qa)
        );
        assert_eq!(t.dst_mac, [2, 0, 0, 0, 0, 2]);
        assert_eq!(t.len, roce.len());
        assert_eq!(t.frame_len(), 14 + 20 + 8 + roce.len());
    }
    carry(&mut p.b, &mut p.a, now); // the ACK
    let wc = p.a.poll_cq(p.cqa, 4);
    assert_eq!(wc.len(), 1);
    assert_eq!((wc[0].wr_id, wc[0].status), (1, WcStatus::Success));
    assert_eq!(&p.b.mr_bytes(&p.rb)[100..3100], &payload[..]);
    assert_eq!(p.b.counters().rx_frames, 3);
}

#[test]
fn the_icrc_covers_what_the_socket_reports() {
    let mut p = Pair::new(RtsAttr::default(), all());
    let w = SendWr {
        wr_id: 2,
        op: write_op(&p, 0),
        sge: Sge {
            addr: p.la.addr,
            length: 64,
            lkey: p.la.lkey,
        },
        signaled: true,
        solicited: false,
    };
    p.a.post_send(p.qa, w).unwrap();
    let mut buf = vec![0u8; 5000];
    let t = p.a.poll_transmit(p.now, &mut buf).unwrap();
    let roce = &buf[..t.len];
    // Another source port, another identification: not the datagram the ICRC was made
    // for, so it is refused and counted, and nothing is written.
    let mut other_port = t.datagram;
    other_port.udp.src_port ^= 1;
    let mut other_ident: DatagramRepr = t.datagram;
    if let IpRepr::V4(ip) = &mut other_ident.ip {
        ip.ident = 0x1234;
    }
    for d in [other_port, other_ident] {
        let e = p.b.handle_datagram(p.now, &d, roce).unwrap_err();
        assert!(matches!(e, uroce::wire::WireError::BadIcrc { .. }), "{e}");
    }
    assert_eq!(p.b.counters().rx_bad_icrc, 2);
    // Masked fields (TOS, which carries ECN) may change on the way.
    let mut marked = t.datagram;
    if let IpRepr::V4(ip) = &mut marked.ip {
        ip.tos |= 0x03;
    }
    p.b.handle_datagram(p.now, &marked, roce).unwrap();
    assert_eq!(p.b.qp_counters(p.qb).unwrap().np_ecn_marked_roce_packets, 1);
    // A truncated payload is malformed, not a panic.
    assert!(p
        .b
        .handle_datagram(p.now, &t.datagram, &roce[..10])
        .is_err());
    assert_eq!(p.b.counters().rx_malformed, 1);
}

#[test]
fn poll_frame_is_poll_transmit_with_the_link_headers_in_front() {
    let mut p = Pair::new(RtsAttr::default(), all());
    let mut q = Pair::new(RtsAttr::default(), all());
    for x in [&mut p, &mut q] {
        let w = SendWr {
            wr_id: 3,
            op: write_op(x, 0),
            sge: Sge {
                addr: x.la.addr,
                length: 200,
                lkey: x.la.lkey,
            },
            signaled: true,
            solicited: false,
        };
        x.a.post_send(x.qa, w).unwrap();
    }
    let mut frame = vec![0u8; 5000];
    let n = p.a.poll_frame(p.now, &mut frame).unwrap();
    let mut buf = vec![0u8; 5000];
    let t = q.a.poll_transmit(q.now, &mut buf).unwrap();
    let at = t.link_headers_len();
    assert_eq!(n, at + t.len);
    let mut link = vec![0u8; at];
    t.emit_link_headers([2, 0, 0, 0, 0, 1], &mut link).unwrap();
    // Same addresses, QPNs and lengths: the same link headers (the RETH's VA differs, the
    // regions live at different addresses).
    assert_eq!(&frame[..at], &link[..]);
    let parsed = uroce::wire::parse(&frame[..n]).unwrap();
    assert_eq!(
        (parsed.ip().repr(), parsed.udp),
        (t.datagram.ip, t.datagram.udp)
    );
    // The RoCE part carries the ICRC of its datagram, in both forms.
    let roce = &buf[..t.len];
    let stored = u32::from_le_bytes(roce[t.len - 4..].try_into().unwrap());
    assert_eq!(t.datagram.icrc(&roce[..t.len - 4]).unwrap(), stored);
    assert_eq!(
        t.datagram.icrc(&frame[at..n - 4]).unwrap(),
        parsed.icrc,
        "the frame's RoCE part is what poll_transmit writes"
    );
}

/// A packet the transport produced that does not fit the buffer is counted as dropped,
/// not lost silently, and RC sends it again once its ACK timer fires.
#[test]
fn a_packet_that_does_not_fit_is_counted_and_retransmitted() {
    let mut p = Pair::new(
        RtsAttr {
            timeout: 1,
            ..RtsAttr::default()
        },
        all(),
    );
    let w = SendWr {
        wr_id: 4,
        op: write_op(&p, 0),
        sge: Sge {
            addr: p.la.addr,
            length: 512,
            lkey: p.la.lkey,
        },
        signaled: true,
        solicited: false,
    };
    p.a.post_send(p.qa, w).unwrap();
    let mut small = vec![0u8; 100];
    assert!(p.a.poll_transmit(p.now, &mut small).is_none());
    assert_eq!(p.a.counters().tx_dropped, 1);
    let later = p.now + std::time::Duration::from_millis(50);
    p.a.handle_timeout(later);
    carry(&mut p.a, &mut p.b, later);
    carry(&mut p.b, &mut p.a, later);
    let wc = p.a.poll_cq(p.cqa, 4);
    assert_eq!(wc.len(), 1);
    assert_eq!((wc[0].wr_id, wc[0].status), (4, WcStatus::Success));
}

/// Every datagram `c` has to send now: (addressing, RoCE bytes).
fn datagrams(c: &mut Context, now: Instant) -> Vec<(DatagramRepr, Vec<u8>)> {
    let mut buf = vec![0u8; 5000];
    let mut out = Vec::new();
    while let Some(t) = c.poll_transmit(now, &mut buf) {
        out.push((t.datagram, buf[..t.len].to_vec()));
    }
    out
}

/// Posts an RDMA WRITE of A's first `len` bytes to B's region at `off`; returns its
/// datagrams.
fn write_datagrams(p: &mut Pair, wr_id: u64, off: u64, len: u32) -> Vec<(DatagramRepr, Vec<u8>)> {
    let sge = Sge {
        addr: p.la.addr,
        length: len,
        lkey: p.la.lkey,
    };
    let op = write_op(p, off);
    p.a.post_send(p.qa, wr(wr_id, op, sge, true)).unwrap();
    let now = p.now;
    datagrams(&mut p.a, now)
}

/// An RDMA WRITE's target is the program's memory, which programs read while it is
/// written (NCCL's LL protocol polls flags inside the data): a damaged packet of a
/// WRITE leaves no byte there, whichever packet of the message it is, and the QP does
/// not move; resent, the message completes whole.
#[test]
fn a_damaged_write_packet_leaves_no_byte_in_the_target() {
    let mut p = Pair::new(RtsAttr::default(), all());
    let payload: Vec<u8> = (0..3000u32).map(|i| (i * 7 + 3) as u8).collect();
    p.a.mr_bytes_mut(&p.la)[..3000].copy_from_slice(&payload);
    p.b.mr_bytes_mut(&p.rb)[..4000].fill(0xee);
    let sent = write_datagrams(&mut p, 5, 100, 3000);
    // FIRST, MIDDLE, LAST at path MTU 1024.
    let ops: Vec<u8> = sent.iter().map(|s| s.1[0]).collect();
    assert_eq!(ops, [0x06, 0x07, 0x08]);
    let bad = |e: uroce::wire::WireError| matches!(e, uroce::wire::WireError::BadIcrc { .. });
    let untouched =
        |p: &Pair, from: usize| p.b.mr_bytes(&p.rb)[from..4000].iter().all(|&x| x == 0xee);
    // The FIRST with its RETH's address moved by 64 bytes.
    let mut first = sent[0].1.clone();
    first[12 + 7] ^= 0x40;
    let e = p.b.handle_datagram(p.now, &sent[0].0, &first).unwrap_err();
    assert!(bad(e), "{e}");
    assert!(untouched(&p, 0));
    p.b.handle_datagram(p.now, &sent[0].0, &sent[0].1).unwrap();
    // The MIDDLE, then the LAST, with a payload byte damaged.
    for (i, at) in [(1, 500), (2, 900)] {
        let mut damaged = sent[i].1.clone();
        damaged[12 + at] ^= 0xff;
        let e =
            p.b.handle_datagram(p.now, &sent[i].0, &damaged)
                .unwrap_err();
        assert!(bad(e), "{e}");
        assert!(untouched(&p, 100 + 1024 * i), "packet {i}");
        if i == 1 {
            // The QP still expects the MIDDLE: resent, it is taken.
            p.b.handle_datagram(p.now, &sent[1].0, &sent[1].1).unwrap();
        }
    }
    assert_eq!(&p.b.mr_bytes(&p.rb)[100..2148], &payload[..2048]);
    assert_eq!(p.b.counters().rx_bad_icrc, 3);
    p.b.handle_datagram(p.now, &sent[2].0, &sent[2].1).unwrap();
    assert_eq!(p.b.counters().rx_placed, 0);
    let mem = p.b.mr_bytes(&p.rb);
    assert_eq!(&mem[100..3100], &payload[..]);
    assert!(mem[..100].iter().all(|&x| x == 0xee));
    assert!(untouched(&p, 3100));
    let c = p.b.qp_counters(p.qb).unwrap();
    assert_eq!(c.duplicate_request, 0);
}

/// A backend's datagrams carry its guess of the IPv4 identification (a socket does not
/// report it): where the ICRC fits another, that one is taken and counted. Handed in as
/// it was on the wire ([`Context::handle_datagram`]), another identification is another
/// packet.
#[test]
fn a_guessed_identification_is_taken_where_the_icrc_fits_another() {
    let mut p = Pair::new(RtsAttr::default(), all());
    let sent = write_datagrams(&mut p, 6, 0, 2048);
    assert_eq!(sent.len(), 2);
    for (i, (d, roce)) in sent.iter().enumerate() {
        let mut guessed = *d;
        if let IpRepr::V4(ip) = &mut guessed.ip {
            ip.ident = 0x0102 + i as u16;
        }
        if i == 1 {
            let e = p.b.handle_datagram(p.now, &guessed, roce).unwrap_err();
            assert!(matches!(e, uroce::wire::WireError::BadIcrc { .. }), "{e}");
        }
        let r = uroce::endpoint::Received::Datagram {
            datagram: &guessed,
            roce,
        };
        p.b.handle_received(p.now, r).unwrap();
    }
    let c = p.b.counters();
    assert_eq!((c.rx_idents_recovered, c.rx_bad_icrc), (2, 1));
    assert_eq!(&p.b.mr_bytes(&p.rb)[..2048], &p.a.mr_bytes(&p.la)[..2048]);
}

/// Moves one datagram from `from` to `to` through `handle_datagram`, with `damage`
/// applied to its bytes first; returns what `to` said.
fn carry_one(
    from: &mut Context,
    to: &mut Context,
    now: Instant,
    damage: impl FnOnce(&mut [u8]),
) -> Option<Result<(), uroce::wire::WireError>> {
    let mut buf = vec![0u8; 5000];
    let t = from.poll_transmit(now, &mut buf)?;
    damage(&mut buf[..t.len]);
    Some(to.handle_datagram(now, &t.datagram, &buf[..t.len]))
}

/// Hands `roce` to `to` as a UDP backend does (`Received::Datagram`), the IPv4
/// identification a wrong guess, which the context must correct.
fn as_backend(
    to: &mut Context,
    now: Instant,
    d: &DatagramRepr,
    roce: &[u8],
) -> Result<(), uroce::wire::WireError> {
    let mut guessed = *d;
    if let IpRepr::V4(ip) = &mut guessed.ip {
        ip.ident ^= 0x0077;
    }
    let r = uroce::endpoint::Received::Datagram {
        datagram: &guessed,
        roce,
    };
    to.handle_received(now, r)
}

/// Every response of a READ lands in the READ's buffer before its check (a buffer lent
/// to the work request, which the program may not touch before it completes), on the
/// path a UDP backend's datagrams take; a damaged response is dropped, its bytes only
/// where the expected one's go, and asked for again; a damaged copy of a response
/// already taken is not placed at all. A SEND's packets are checked first: a damaged
/// MIDDLE leaves nothing in the receive.
#[test]
fn read_responses_are_placed_before_the_check_and_sends_are_not() {
    let mut p = Pair::new(RtsAttr::default(), all());
    let payload: Vec<u8> = (0..3000u32).map(|i| (i * 11 + 1) as u8).collect();
    p.a.mr_bytes_mut(&p.la)[..3000].copy_from_slice(&payload);
    p.post_recv(0);
    p.post(1, SendOp::Send, 3000);
    let now = p.now;
    let bad = |e: uroce::wire::WireError| matches!(e, uroce::wire::WireError::BadIcrc { .. });
    carry_one(&mut p.a, &mut p.b, now, |_| {}).unwrap().unwrap(); // FIRST
    let send = datagrams(&mut p.a, now);
    let mut damaged = send[0].1.clone();
    damaged[12 + 300] ^= 0x20;
    let e = as_backend(&mut p.b, now, &send[0].0, &damaged).unwrap_err();
    assert!(bad(e), "{e}");
    assert!(p.b.mr_bytes(&p.recv)[1024..8192].iter().all(|&x| x == 0));
    for (d, roce) in &send {
        as_backend(&mut p.b, now, d, roce).unwrap();
    }
    assert_eq!(
        p.b.counters().rx_placed,
        0,
        "a SEND's packets are checked first"
    );
    let wc = p.wcs_b();
    assert_eq!(
        (wc.len(), wc[0].status, wc[0].byte_len),
        (1, WcStatus::Success, 3000)
    );
    assert_eq!(&p.b.mr_bytes(&p.recv)[..3000], &payload[..]);
    while carry_one(&mut p.b, &mut p.a, now, |_| {}).is_some() {} // the ACK
    assert_eq!(p.wcs_a().len(), 1);

    // A READ of 3000 bytes of B's region into A's buffer at 4096.
    let from: Vec<u8> = p.b.mr_bytes(&p.rb)[200..3200].to_vec();
    p.a.mr_bytes_mut(&p.la)[4096..8192].fill(0xee);
    let op = SendOp::Read {
        remote_addr: p.rb.addr + 200,
        rkey: p.rb.rkey,
    };
    let sge = Sge {
        addr: p.la.addr + 4096,
        length: 3000,
        lkey: p.la.lkey,
    };
    p.a.post_send(p.qa, wr(2, op, sge, true)).unwrap();
    carry_one(&mut p.a, &mut p.b, now, |_| {}).unwrap().unwrap(); // the request
    let responses = datagrams(&mut p.b, now);
    assert_eq!(responses.len(), 3);
    as_backend(&mut p.a, now, &responses[0].0, &responses[0].1).unwrap();
    assert_eq!(p.a.counters().rx_placed, 1);
    // A damaged copy of the FIRST, taken already: not placed, its bytes nowhere.
    let mut again = responses[0].1.clone();
    again[16 + 10] ^= 0x08;
    let e = as_backend(&mut p.a, now, &responses[0].0, &again).unwrap_err();
    assert!(bad(e), "{e}");
    assert_eq!(p.a.counters().rx_placed, 1);
    assert_eq!(&p.a.mr_bytes(&p.la)[4096..4096 + 1024], &from[..1024]);
    // The MIDDLE damaged: placed where it goes, then dropped.
    let mut middle = responses[1].1.clone();
    middle[12 + 100] ^= 0x01;
    let e = as_backend(&mut p.a, now, &responses[1].0, &middle).unwrap_err();
    assert!(bad(e), "{e}");
    assert_eq!(p.a.counters().rx_placed, 2);
    let mem = &p.a.mr_bytes(&p.la)[4096..8192];
    assert_eq!(&mem[..1024], &from[..1024]);
    assert_eq!(
        mem[1024 + 100],
        from[1024 + 100] ^ 0x01,
        "the MIDDLE's place"
    );
    assert!(mem[2048..].iter().all(|&x| x == 0xee));
    assert!(p.wcs_a().is_empty());
    for (d, roce) in &responses[1..] {
        as_backend(&mut p.a, now, d, roce).unwrap();
    }
    let c = p.a.counters();
    assert_eq!(c.rx_placed, 4);
    // Each good response's identification found; the damaged ones fit none.
    assert_eq!(c.rx_idents_recovered, 3, "{c:?}");
    let wc = p.wcs_a();
    assert_eq!(
        (wc.len(), wc[0].wr_id, wc[0].status),
        (1, 2, WcStatus::Success)
    );
    let mem = &p.a.mr_bytes(&p.la)[4096..8192];
    assert_eq!(&mem[..3000], &from[..]);
    assert!(mem[3000..].iter().all(|&x| x == 0xee));
}

/// Where a READ response is not placed before its check, it is checked first and lands
/// as any other: a READ into a scatter list (two entries), whose damaged FIRST (the
/// response expected next) leaves no byte in either entry (tried: with `Local::span_at`
/// placing into the first entry, the bytes and the counter say so). And the responses
/// of a READ its QP flushed when it went to ERR land nowhere.
#[test]
fn read_responses_are_checked_first_into_a_scatter_list_and_in_error() {
    let ex = QpInitEx {
        max_send_sge: 2,
        ..QpInitEx::default()
    };
    let mut p = Pair::with_ex(ex);
    let now = p.now;
    let bad = |e: uroce::wire::WireError| matches!(e, uroce::wire::WireError::BadIcrc { .. });
    let from: Vec<u8> = p.b.mr_bytes(&p.rb)[100..3100].to_vec();
    p.a.mr_bytes_mut(&p.la)[..8192].fill(0xee);
    let op = SendOp::Read {
        remote_addr: p.rb.addr + 100,
        rkey: p.rb.rkey,
    };
    let sgl = [
        Sge {
            addr: p.la.addr + 5000,
            length: 1500,
            lkey: p.la.lkey,
        },
        Sge {
            addr: p.la.addr + 300,
            length: 1500,
            lkey: p.la.lkey,
        },
    ];
    p.a.post_send_sgl(p.qa, wr(7, op, Sge::default(), true), &sgl, SendFlags::NONE)
        .unwrap();
    carry_one(&mut p.a, &mut p.b, now, |_| {}).unwrap().unwrap();
    let responses = datagrams(&mut p.b, now);
    assert_eq!(responses.len(), 3);
    // The FIRST, the response expected next: its bytes 0..1024 would go to the first
    // entry (5000..6024) were a scatter list placed.
    let mut damaged = responses[0].1.clone();
    damaged[16 + 600] ^= 0x04;
    let e = as_backend(&mut p.a, now, &responses[0].0, &damaged).unwrap_err();
    assert!(bad(e), "{e}");
    assert!(
        p.a.mr_bytes(&p.la)[..8192].iter().all(|&x| x == 0xee),
        "nothing placed"
    );
    for (d, roce) in &responses {
        as_backend(&mut p.a, now, d, roce).unwrap();
    }
    assert_eq!(p.a.counters().rx_placed, 0, "a scatter list is not placed");
    let wc = p.wcs_a();
    assert_eq!(
        (wc.len(), wc[0].wr_id, wc[0].status),
        (1, 7, WcStatus::Success)
    );
    let mem = p.a.mr_bytes(&p.la);
    assert_eq!(&mem[5000..6500], &from[..1500]);
    assert_eq!(&mem[300..1800], &from[1500..]);
    assert!(mem[..300]
        .iter()
        .chain(&mem[1800..5000])
        .all(|&x| x == 0xee));

    // A one-entry READ whose responses come after its QP went to ERR.
    p.a.mr_bytes_mut(&p.la)[..8192].fill(0xee);
    let op = SendOp::Read {
        remote_addr: p.rb.addr + 100,
        rkey: p.rb.rkey,
    };
    let sge = Sge {
        addr: p.la.addr,
        length: 3000,
        lkey: p.la.lkey,
    };
    p.a.post_send(p.qa, wr(8, op, sge, true)).unwrap();
    carry_one(&mut p.a, &mut p.b, now, |_| {}).unwrap().unwrap();
    let responses = datagrams(&mut p.b, now);
    assert_eq!(responses.len(), 3);
    p.a.modify_qp_err(p.qa, now).unwrap();
    for (d, roce) in &responses {
        let _ = as_backend(&mut p.a, now, d, roce);
    }
    assert_eq!(p.a.counters().rx_placed, 0, "a QP in ERR places nothing");
    assert!(p.a.mr_bytes(&p.la)[..8192].iter().all(|&x| x == 0xee));
    let wc = p.wcs_a();
    assert_eq!(
        (wc.len(), wc[0].wr_id, wc[0].status),
        (1, 8, WcStatus::WrFlushErr)
    );
}
