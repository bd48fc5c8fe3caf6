//! CM timers (IBTA Vol. 1 §12.7.30 and §12.9.2): how long a CM waits for an answer to a
//! message before sending it again, and how often.
//!
//! A sender waits the receiver's CM response timeout plus twice the packet life time
//! (the message's way there and the answer's way back); an MRA replaces the response
//! timeout with its service timeout (§12.6.6). Times are the CM's encoding, 4.096 µs ×
//! 2^value, as the local ACK timeout's.

use std::time::{Duration, Instant};

use crate::wire::mad::MAD_LEN;

/// 4.096 µs × 2^`code` (`code` capped at 31).
pub fn cm_time(code: u8) -> Duration {
    Duration::from_nanos(4096u64 << code.min(31))
}

/// The wait for an answer: `response` (a CM response or service timeout code) plus
/// twice the packet life time.
pub fn answer_wait(response: u8, packet_life_time: u8) -> Duration {
    cm_time(response) + 2 * cm_time(packet_life_time)
}

/// A message sent and awaiting its answer: sent again at each deadline until the retries
/// are spent (the kernel's `ib_post_send_mad` with `retries` and `timeout_ms`).
#[derive(Debug, Clone)]
pub(super) struct Retransmit {
    /// The MAD to send again.
    pub mad: Box<[u8; MAD_LEN]>,
    /// When it is sent again (or, with no retries left, given up).
    pub deadline: Instant,
    /// The wait after each send.
    pub wait: Duration,
    /// Sends left after the first.
    pub retries_left: u8,
}

impl Retransmit {
    pub fn new(mad: [u8; MAD_LEN], now: Instant, wait: Duration, retries: u8) -> Self {
        Self {
            mad: Box::new(mad),
            deadline: now + wait,
            wait,
            retries_left: retries,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cm_times() {
        assert_eq!(cm_time(0), Duration::from_nanos(4096));
        // rdma_cm's CMA_CM_RESPONSE_TIMEOUT 20: 4.29 s.
        assert_eq!(cm_time(20), Duration::from_nanos(4_294_967_296));
        assert_eq!(cm_time(40), cm_time(31));
        assert_eq!(answer_wait(10, 8), cm_time(10) + cm_time(9));
    }
}
