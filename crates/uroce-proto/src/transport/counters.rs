//! The counters of one QP, as RDMA operators know them from mlx5 and rdma statistics.

use std::collections::BTreeMap;

/// Counters of one QP, named as mlx5 / rdma statistics name them where they exist.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QpCounters {
    /// Packets sent (requests, responses, ACKs).
    pub packets_sent: u64,
    /// Request packets sent again (go-back-N, READ re-requests).
    pub retransmits: u64,
    /// Local ACK timeouts that led to a retransmission.
    pub local_ack_timeout_err: u64,
    /// Tail probes: the packet at the oldest unacknowledged PSN sent again alone, asking
    /// for an ACK, after no response moved it for the recovery probe's wait outside a
    /// loss episode (counted in `retransmits` too).
    pub tail_probes: u64,
    /// PSN sequence error NAKs received.
    pub packet_seq_err: u64,
    /// RNR NAKs received.
    pub rnr_nak_received: u64,
    /// RNR retries exhausted.
    pub rnr_nak_retry_err: u64,
    /// Out-of-sequence requests the responder saw (one NAK each sequence error).
    pub out_of_sequence: u64,
    /// Duplicate requests the responder answered again.
    pub duplicate_request: u64,
    /// NAKs sent by kind.
    pub nak_sent_seq: u64,
    /// RNR NAKs sent.
    pub nak_sent_rnr: u64,
    /// Invalid-request NAKs sent.
    pub nak_sent_inv: u64,
    /// Remote-access-error NAKs sent.
    pub nak_sent_access: u64,
    /// Packets dropped as unexpected or malformed for this QP.
    pub dropped: u64,
    /// UD: datagrams dropped for a Q_Key that is not the QP's.
    pub qkey_violation: u64,
    /// UD / UC: messages dropped because no receive was posted.
    pub no_recv_drop: u64,
    /// UC: messages dropped whole because a packet of theirs was lost.
    pub uc_msg_dropped: u64,
    /// UD / UC: messages delivered.
    pub delivered: u64,
    /// np_ecn_marked_roce_packets: packets received with ECN CE.
    pub np_ecn_marked_roce_packets: u64,
    /// np_cnp_sent: CNPs sent for this QP's flows.
    pub np_cnp_sent: u64,
    /// rp_cnp_handled: CNPs received for this QP (and acted on, when DCQCN is on).
    pub rp_cnp_handled: u64,
    /// rp_cnp_ignored: CNPs DCQCN ignored (inside `rate_reduce_monitor_period`).
    pub rp_cnp_ignored: u64,
}

impl QpCounters {
    /// The counters by name, as operators know them from mlx5 and rdma statistics.
    pub fn named(&self) -> BTreeMap<&'static str, u64> {
        BTreeMap::from([
            ("packets_sent", self.packets_sent),
            ("retransmits", self.retransmits),
            ("local_ack_timeout_err", self.local_ack_timeout_err),
            ("tail_probes", self.tail_probes),
            ("packet_seq_err", self.packet_seq_err),
            ("rnr_nak_received", self.rnr_nak_received),
            ("rnr_nak_retry_err", self.rnr_nak_retry_err),
            ("out_of_sequence", self.out_of_sequence),
            ("duplicate_request", self.duplicate_request),
            ("nak_sent_seq", self.nak_sent_seq),
            ("nak_sent_rnr", self.nak_sent_rnr),
            ("nak_sent_inv", self.nak_sent_inv),
            ("nak_sent_access", self.nak_sent_access),
            ("dropped", self.dropped),
            (
                "np_ecn_marked_roce_packets",
                self.np_ecn_marked_roce_packets,
            ),
            ("np_cnp_sent", self.np_cnp_sent),
            ("rp_cnp_handled", self.rp_cnp_handled),
            ("rp_cnp_ignored", self.rp_cnp_ignored),
        ])
    }
}
