//! Cache-line prefetch hints: with thousands of QPs, the QP a received packet names is
//! rarely in the cache, and it is known from the frame's bytes before the packet is
//! parsed and its ICRC verified; asking for its lines then lets their misses overlap
//! that work instead of stalling the handling one line after another.
//!
//! A hint never changes what the program computes: a wrong address costs a wasted
//! fetch, never a fault. x86_64 only (`prefetcht0`); a no-op elsewhere.

/// Asks for the `lines` cache lines from `p` on into the first-level cache.
#[inline(always)]
pub(crate) fn lines(p: *const u8, lines: usize) {
    #[cfg(target_arch = "x86_64")]
    for k in 0..lines {
        use core::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        // `wrapping_add` never dereferences; the address may lie anywhere.
        let a = p.wrapping_add(k * 64).cast::<i8>();
        // SAFETY: `prefetcht0` is a hint: it reads nothing the program sees and does not
        // fault whatever the address (Intel SDM Vol. 2B, PREFETCHh). SSE, where it comes
        // from, is part of the x86_64 baseline, so the target feature is always there.
        #[allow(unsafe_code)]
        unsafe {
            _mm_prefetch::<_MM_HINT_T0>(a)
        };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (p, lines);
}
