//! The peer's verdict on one fuzz frame: what came back to the fuzz QP ([`Response`],
//! summed up as an [`Outcome`]), whether it is what the IBTA rules ask ([`judge`]), and
//! what it teaches about the responder's state ([`learn`]: its expected PSN, whether the
//! QP went to the error state).

use serde::Serialize;

use super::mutate::{psn_add, psn_diff, Expect, IpEdge, Rendered, Spec, Track};
use uroce::wire::{NakCode, Opcode, RocePacket, Syndrome};

/// One packet the peer sent to the fuzz QP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Response {
    /// Its opcode byte.
    pub opcode: u8,
    /// Its PSN.
    pub psn: u32,
    /// The AETH syndrome byte, when it has one.
    pub syndrome: Option<u8>,
}

impl Response {
    /// What a parsed packet says.
    pub fn of(p: &RocePacket<'_>) -> Self {
        Self {
            opcode: p.bth.opcode().value(),
            psn: p.bth.psn(),
            syndrome: p.ext.aeth.map(|a| a.syndrome),
        }
    }
}

/// The peer's answer to one frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "answer", rename_all = "snake_case")]
pub enum Outcome {
    /// Nothing came.
    Silence,
    /// An ACK of `psn`.
    Ack { psn: u32 },
    /// A NAK with its code.
    Nak { code: u8, psn: u32 },
    /// An RNR NAK.
    Rnr { psn: u32 },
    /// READ response data, first and last PSN.
    ReadResp { first: u32, last: u32 },
    /// An atomic ACK of `psn`.
    AtomicAck { psn: u32 },
    /// A UD datagram (a UD peer's answer to a datagram it took).
    Datagram,
    /// Something else (a request from the peer's requester, a reserved syndrome).
    Other { opcode: u8 },
}

impl Outcome {
    /// The answer made of what came back, in order.
    pub fn of(r: &[Response]) -> Self {
        // CNPs are the peer's congestion notifications, not answers ([`cnps`]).
        let Some(first) = r.iter().find(|x| x.opcode != Opcode::Cnp.value()) else {
            return Self::Silence;
        };
        let op = Opcode::from_u8(first.opcode);
        match op {
            Some(Opcode::RcAck) => match first.syndrome.map(Syndrome::from_byte) {
                Some(Syndrome::Ack { .. }) => Self::Ack { psn: first.psn },
                Some(Syndrome::Nak(c)) => Self::Nak {
                    code: c.code(),
                    psn: first.psn,
                },
                Some(Syndrome::RnrNak { .. }) => Self::Rnr { psn: first.psn },
                _ => Self::Other {
                    opcode: first.opcode,
                },
            },
            Some(Opcode::RcAtomicAck) => Self::AtomicAck { psn: first.psn },
            Some(Opcode::UdSendOnly | Opcode::UdSendOnlyImm) => Self::Datagram,
            Some(
                Opcode::RcReadResponseFirst
                | Opcode::RcReadResponseMiddle
                | Opcode::RcReadResponseLast
                | Opcode::RcReadResponseOnly,
            ) => {
                let last = r
                    .iter()
                    .filter(|x| (0x0d..=0x10).contains(&x.opcode))
                    .map(|x| x.psn)
                    .next_back()
                    .unwrap_or(first.psn);
                Self::ReadResp {
                    first: first.psn,
                    last,
                }
            }
            _ => Self::Other {
                opcode: first.opcode,
            },
        }
    }

    /// A short name for counting ("ACK", "NAK INVALID_REQUEST", "silence").
    pub fn label(&self) -> String {
        match self {
            Self::Silence => "silence".into(),
            Self::Ack { .. } => "ACK".into(),
            Self::Nak { code, .. } => format!("NAK {}", nak_name(*code)),
            Self::Rnr { .. } => "RNR NAK".into(),
            Self::ReadResp { .. } => "READ response".into(),
            Self::AtomicAck { .. } => "ATOMIC ACK".into(),
            Self::Datagram => "datagram".into(),
            Self::Other { opcode } => format!("opcode {opcode:#04x}"),
        }
    }
}

/// How many of `r` are CNPs (RoCEv2 Annex A17.9.3: a DCQCN receiver's answer to a
/// CE-marked packet, sent to the packet's source QP).
pub fn cnps(r: &[Response]) -> u64 {
    r.iter().filter(|x| x.opcode == Opcode::Cnp.value()).count() as u64
}

/// What a peer must do with a valid request at the expected PSN that carries one IP /
/// UDP header edge ([`IpEdge`]):
/// - taken (ACKed): TTL / hop limit 0 or 1 (a host does not discard a datagram for its
///   TTL, RFC 1122 §3.2.1.7; TTL is a forwarding matter), a correct non-zero UDP
///   checksum, UDP source port 4791, Ethernet padding after the IP packet (the IP length
///   says where it ends), any DSCP, ECN ECT(0) / ECT(1) / CE (a DCQCN receiver also sends
///   a CNP for CE, counted), an IPv6 flow label;
/// - dropped without a word: fragments (MF or an offset: a part of a datagram is not a
///   RoCEv2 packet; it is reassembled or dropped), an IP length longer than the frame or
///   shorter than the UDP datagram, a bad IPv4 header checksum (RFC 1122 §3.2.1.2), a UDP
///   length longer or shorter than the datagram (its last four bytes are then not the
///   ICRC), a destination port other than 4791 (not RoCEv2, Annex A17.2), an IPv6 next
///   header other than UDP;
/// - taken or dropped, never NAKed: IPv4 options (rdma_rxe's ICRC covers a 20-byte
///   header only), a wrong non-zero UDP checksum (Annex A17.4.2 has senders put 0;
///   whether a receiver checks one is its own: Linux's UDP stack does, a NIC may not).
pub fn ip_edge_expect(edge: IpEdge) -> Expect {
    use IpEdge as E;
    match edge {
        E::TtlZero
        | E::TtlOne
        | E::HopLimitZero
        | E::GoodUdpChecksum
        | E::SourcePort4791
        | E::Trailer
        | E::Dscp
        | E::EcnEct0
        | E::EcnEct1
        | E::EcnCe
        | E::FlowLabel => Expect::Ack,
        E::MoreFragments
        | E::FragmentOffset
        | E::TotalLenLong
        | E::TotalLenShort
        | E::BadIpChecksum
        | E::UdpLenShort
        | E::UdpLenLong
        | E::WrongDstPort
        | E::NextHeader => Expect::Silent,
        E::Options | E::BadUdpChecksum => Expect::AckOrSilent,
    }
}

/// IBTA Vol. 1 Table 45's name of a NAK code.
pub fn nak_name(code: u8) -> &'static str {
    Syndrome::from_byte(0x60 | code)
        .nak()
        .map_or("RESERVED", NakCode::name)
}

trait NakOf {
    fn nak(self) -> Option<NakCode>;
}

impl NakOf for Syndrome {
    fn nak(self) -> Option<NakCode> {
        match self {
            Syndrome::Nak(c) => Some(c),
            _ => None,
        }
    }
}

/// A frame answered otherwise than the rules ask.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Mismatch {
    /// The frame.
    pub spec: Spec,
    /// What the rules ask.
    pub expected: Expect,
    /// What came.
    pub got: Outcome,
    /// The PSN sent and the expected PSN then.
    pub psn: u32,
    /// The responder's expected PSN when the frame went.
    pub epsn: u32,
}

/// Whether `got` is an answer the rules allow for frame `r` sent while the responder
/// expected `epsn`.
pub fn judge(r: &Rendered, epsn: u32, got: &Outcome) -> bool {
    let accepted = match *got {
        Outcome::Ack { psn } | Outcome::AtomicAck { psn } => psn == r.psn,
        Outcome::ReadResp { first, .. } => first == r.psn,
        Outcome::Datagram => true,
        _ => false,
    };
    match r.expect {
        Expect::Any => true,
        // IBTA Vol. 1 §9.7.5.1: a valid request at the expected PSN with AckReq is
        // executed and acknowledged (the ACK may cover it by a later PSN: coalescing).
        Expect::Ack => {
            matches!(*got, Outcome::Ack { psn } if psn_diff(psn, r.psn) >= 0)
        }
        // §9.7.5.1: a PSN after the expected one: one PSN sequence error NAK carrying
        // the expected PSN.
        Expect::SeqNak => matches!(*got, Outcome::Nak { code: 0, psn } if psn == epsn),
        // §9.7.5.2 / Table 45: an R_Key, bounds or rights violation.
        Expect::RemoteAccess => matches!(*got, Outcome::Nak { code: 2, .. }),
        Expect::Refused => matches!(*got, Outcome::Nak { code: 1 | 2, .. }),
        Expect::ReadResp => matches!(*got, Outcome::ReadResp { first, .. } if first == r.psn),
        Expect::NotAccepted => !accepted,
        Expect::Silent => *got == Outcome::Silence,
        // §9.7.5.1: a duplicate WRITE / SEND is not executed again; the responder
        // acknowledges it (with the last PSN it took) or, between, says nothing.
        Expect::DupAck => matches!(*got, Outcome::Silence | Outcome::Ack { .. }),
        // §9.7.5.2.8: a SEND finding no receive is RNR NAKed, with its own PSN.
        Expect::AckOrRnr => match *got {
            Outcome::Ack { psn } => psn_diff(psn, r.psn) >= 0,
            Outcome::Rnr { psn } => psn == r.psn,
            _ => false,
        },
        Expect::InvalidRequest => matches!(*got, Outcome::Nak { code: 1, .. }),
        Expect::Datagram => *got == Outcome::Datagram,
        Expect::NoAckNak => matches!(*got, Outcome::Silence | Outcome::Datagram),
        Expect::AckOrSilent => match *got {
            Outcome::Ack { psn } => psn_diff(psn, r.psn) >= 0,
            Outcome::Silence => true,
            _ => false,
        },
    }
}

/// What the answer teaches about the responder's state. Returns false when the QP has
/// gone to the error state (a NAK other than a PSN sequence error or RNR: IBTA Vol. 1
/// §9.7.5.2, the responder's class C / D / E errors), so it takes no more frames.
pub fn learn(t: &mut Track, spec: &Spec, r: &Rendered, got: &Outcome) -> bool {
    if r.ends {
        return false;
    }
    // The responder takes only the packet at its expected PSN; an answer naming another
    // PSN (a duplicate's ACK, whichever PSN the peer puts in it) moves nothing. When the
    // expected PSN moves, the PSN it NAKed has arrived and it may NAK a sequence error
    // again.
    let at_epsn = t.known && r.psn == t.epsn;
    let take = |t: &mut Track, next: u32| {
        t.epsn = next;
        t.nak_sent = false;
    };
    match *got {
        Outcome::Ack { psn } | Outcome::AtomicAck { psn } => {
            if at_epsn && psn == r.psn {
                take(t, psn_add(psn, 1));
                match *spec {
                    Spec::OpenWrite { packets, .. } => {
                        t.open = Some(packets.saturating_sub(1) * t.mtu)
                    }
                    Spec::ContinueWrite => {
                        let mtu = t.mtu;
                        t.open = t.open.and_then(|left| {
                            let left = left.saturating_sub(left.min(mtu));
                            (left > 0).then_some(left)
                        })
                    }
                    Spec::Write { .. } | Spec::PsnOff { .. } => t.open = None,
                    Spec::OpenSend => t.send_open = Some(t.mtu),
                    Spec::ContinueSend { last, .. } => {
                        t.send_open = match (last, t.send_open) {
                            (true, _) => None,
                            (false, n) => Some(n.unwrap_or(0) + t.mtu),
                        };
                    }
                    Spec::Send { .. } => t.send_open = None,
                    // Rendered as if nothing were open; taken, it went on with a message
                    // the responder had open (a FIRST before it): its bytes count, and a
                    // LAST ends the message. (A MIDDLE that used up a WRITE's RETH length
                    // leaves the LAST nothing to carry, `open` at 0: the responder NAKs
                    // that LAST, as it must; the rules asked an ACK of it.)
                    Spec::Orphan { opcode, payload } => {
                        let len = payload.min(t.mtu);
                        match Opcode::from_u8(opcode) {
                            Some(Opcode::RcWriteMiddle) => {
                                t.open = t.open.map(|left| left.saturating_sub(len))
                            }
                            Some(Opcode::RcWriteLast | Opcode::RcWriteLastImm) => t.open = None,
                            Some(Opcode::RcSendMiddle) => {
                                t.send_open = t.send_open.map(|n| n + len)
                            }
                            Some(
                                Opcode::RcSendLast | Opcode::RcSendLastImm | Opcode::RcSendLastInv,
                            ) => t.send_open = None,
                            _ => {}
                        }
                    }
                    _ => {}
                }
                if let (Outcome::AtomicAck { .. }, Some(a)) = (got, atomic_of(r)) {
                    t.last_atomic = Some((psn, a.0, a.1));
                }
            }
            true
        }
        Outcome::ReadResp { first, .. } => {
            if at_epsn && first == r.psn {
                if let Some(reth) = reth_of(r) {
                    // A READ takes one PSN per response packet (IBTA Vol. 1 §9.7).
                    let n = reth.len.div_ceil(t.mtu.max(1)).max(1);
                    t.last_read = Some((first, reth, n));
                    take(t, psn_add(first, i64::from(n)));
                }
            }
            true
        }
        Outcome::Nak { code: 0, psn } => {
            t.epsn = psn;
            t.known = true;
            t.nak_sent = true;
            true
        }
        // After an RNR NAK the responder waits for that PSN again and, as after a
        // sequence error NAK, says nothing to packets after it (uroce, rdma_rxe).
        Outcome::Rnr { psn } => {
            t.epsn = psn;
            t.known = true;
            t.nak_sent = true;
            true
        }
        Outcome::Nak { .. } => false,
        Outcome::Datagram => {
            // UD has no expected PSN: the next datagram goes at the one after this.
            t.epsn = psn_add(r.psn, 1);
            true
        }
        Outcome::Silence | Outcome::Other { .. } => {
            if r.silent_take && r.psn == t.epsn {
                // Taken or not: the PSN is no longer certain.
                t.known = false;
            }
            true
        }
    }
}

fn reth_of(r: &Rendered) -> Option<uroce::wire::RethRepr> {
    let b = if r.whole {
        return None;
    } else {
        &r.bytes
    };
    (b.len() >= 28 && b[0] == Opcode::RcReadRequest.value())
        .then(|| uroce::wire::RethRepr::parse(&b[12..28]).ok())
        .flatten()
}

fn atomic_of(r: &Rendered) -> Option<(u8, uroce::wire::AtomicEthRepr)> {
    let b = &r.bytes;
    if r.whole || b.len() < 40 {
        return None;
    }
    let op = b[0];
    (op == Opcode::RcFetchAdd.value() || op == Opcode::RcCompareSwap.value())
        .then(|| {
            uroce::wire::AtomicEthRepr::parse(&b[12..40])
                .ok()
                .map(|a| (op, a))
        })
        .flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rendered(psn: u32, expect: Expect) -> Rendered {
        Rendered {
            bytes: vec![0; 32],
            whole: false,
            psn,
            expect,
            silent_take: false,
            ends: false,
        }
    }

    #[test]
    fn outcomes_from_responses() {
        assert_eq!(Outcome::of(&[]), Outcome::Silence);
        let ack = Response {
            opcode: 0x11,
            psn: 7,
            syndrome: Some(0x1f),
        };
        assert_eq!(Outcome::of(&[ack]), Outcome::Ack { psn: 7 });
        let nak = Response {
            syndrome: Some(0x62),
            ..ack
        };
        assert_eq!(Outcome::of(&[nak]), Outcome::Nak { code: 2, psn: 7 });
        assert_eq!(Outcome::of(&[nak]).label(), "NAK REMOTE_ACCESS_ERROR");
        let rnr = Response {
            syndrome: Some(0x2e),
            ..ack
        };
        assert_eq!(Outcome::of(&[rnr]), Outcome::Rnr { psn: 7 });
    }

    #[test]
    fn judging_follows_the_expectation() {
        let r = rendered(10, Expect::SeqNak);
        assert!(judge(&r, 5, &Outcome::Nak { code: 0, psn: 5 }));
        assert!(!judge(&r, 5, &Outcome::Nak { code: 0, psn: 10 }));
        assert!(!judge(&r, 5, &Outcome::Silence));
        let r = rendered(5, Expect::Silent);
        assert!(!judge(&r, 5, &Outcome::Ack { psn: 5 }));
        let r = rendered(5, Expect::NotAccepted);
        assert!(judge(&r, 5, &Outcome::Nak { code: 1, psn: 5 }));
        assert!(!judge(&r, 5, &Outcome::Ack { psn: 5 }));
        let r = rendered(5, Expect::RemoteAccess);
        assert!(!judge(&r, 5, &Outcome::Nak { code: 1, psn: 5 }));
    }

    #[test]
    fn the_verdicts_of_send_ud_and_ip_edge_frames() {
        let r = rendered(5, Expect::AckOrRnr);
        assert!(judge(&r, 5, &Outcome::Ack { psn: 5 }));
        assert!(judge(&r, 5, &Outcome::Rnr { psn: 5 }));
        assert!(!judge(&r, 5, &Outcome::Rnr { psn: 4 }));
        assert!(!judge(&r, 5, &Outcome::Silence));
        let r = rendered(5, Expect::InvalidRequest);
        assert!(judge(&r, 5, &Outcome::Nak { code: 1, psn: 5 }));
        assert!(!judge(&r, 5, &Outcome::Nak { code: 2, psn: 5 }));
        let r = rendered(5, Expect::Datagram);
        assert!(judge(&r, 5, &Outcome::Datagram));
        assert!(!judge(&r, 5, &Outcome::Silence));
        // A UD QP never acknowledges.
        let r = rendered(5, Expect::NoAckNak);
        assert!(judge(&r, 5, &Outcome::Silence));
        assert!(!judge(&r, 5, &Outcome::Ack { psn: 5 }));
        assert!(!judge(&r, 5, &Outcome::Nak { code: 1, psn: 5 }));
        // A datagram back is an acceptance.
        let r = rendered(5, Expect::NotAccepted);
        assert!(!judge(&r, 5, &Outcome::Datagram));
        let r = rendered(5, Expect::AckOrSilent);
        assert!(judge(&r, 5, &Outcome::Silence));
        assert!(judge(&r, 5, &Outcome::Ack { psn: 5 }));
        assert!(!judge(&r, 5, &Outcome::Nak { code: 1, psn: 5 }));
        // A fragment is never taken; a CE mark is.
        assert_eq!(ip_edge_expect(IpEdge::MoreFragments), Expect::Silent);
        assert_eq!(ip_edge_expect(IpEdge::EcnCe), Expect::Ack);
        // A CNP before the ACK is not the answer; it is counted.
        let cnp = Response {
            opcode: Opcode::Cnp.value(),
            psn: 0,
            syndrome: None,
        };
        let ack = Response {
            opcode: 0x11,
            psn: 5,
            syndrome: Some(0x1f),
        };
        assert_eq!(Outcome::of(&[cnp, ack]), Outcome::Ack { psn: 5 });
        assert_eq!(cnps(&[cnp, ack]), 1);
    }

    #[test]
    fn learning_moves_the_expected_psn_forward_only_and_sees_fatal_naks() {
        let mut t = Track::new(0xff_ffff, 1024);
        let spec = Spec::Write {
            len: 8,
            off: 0,
            ack_req: true,
        };
        let r = rendered(0xff_ffff, Expect::Ack);
        assert!(learn(&mut t, &spec, &r, &Outcome::Ack { psn: 0xff_ffff }));
        assert_eq!(t.epsn, 0);
        // A duplicate's ACK of an older PSN does not move it back.
        assert!(learn(&mut t, &spec, &r, &Outcome::Ack { psn: 0xff_fff0 }));
        assert_eq!(t.epsn, 0);
        assert!(learn(&mut t, &spec, &r, &Outcome::Nak { code: 0, psn: 0 }));
        assert!(t.nak_sent);
        assert!(!learn(&mut t, &spec, &r, &Outcome::Nak { code: 1, psn: 0 }));
    }
}
