//! Transports: pure state machines (sans-IO). Packets and time go in, packets and
//! completions come out; nothing here touches a socket or reads a clock.

pub mod rc;

/// PSNs are 24 bits.
pub const PSN_MASK: u32 = 0x00ff_ffff;

/// `psn + n` modulo 2^24.
pub fn psn_add(psn: u32, n: u32) -> u32 {
    psn.wrapping_add(n) & PSN_MASK
}

/// The signed distance `a - b` in 24-bit PSN space (IBTA §9.7.1: half the space is the
/// past, half the future).
pub fn psn_diff(a: u32, b: u32) -> i32 {
    ((a.wrapping_sub(b) << 8) as i32) >> 8
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn psn_wraps() {
        assert_eq!(psn_add(0xff_ffff, 1), 0);
        assert_eq!(psn_diff(0, 0xff_ffff), 1);
        assert_eq!(psn_diff(0xff_ffff, 0), -1);
        assert_eq!(psn_diff(5, 3), 2);
        assert_eq!(psn_diff(0x40_0000, 0), 0x40_0000);
        assert_eq!(psn_diff(0x80_0000, 0), -0x80_0000);
    }
}
