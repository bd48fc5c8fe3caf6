//! CRC-32 (the Ethernet polynomial, as the ICRC uses it) over registered bytes read in
//! place, through raw loads, never through a Rust reference (see `shared.rs` for why):
//! what lets a sender hash a payload it leaves where it is, and the kernel copy it from
//! there, instead of copying it into a buffer first.
//!
//! On x86_64 the bytes are folded by carry-less multiplication, the method of Gopal et
//! al., "Fast CRC Computation for Generic Polynomials Using PCLMULQDQ Instruction" (Intel,
//! 2009): lanes of the input, each multiplied forward by x^n mod P and added to the next
//! bytes, then folded into one 128-bit lane, which with the last bytes is hashed as a
//! short message. Four 512-bit lanes, 256 bytes a round, where the CPU has AVX-512 and
//! VPCLMULQDQ ([`fold_wide`], inline assembly: those intrinsics are newer than the Rust
//! 1.85 this crate supports); four 128-bit lanes, 64 bytes a round, with PCLMULQDQ (Intel
//! since Westmere, AMD since Bulldozer; [`fold`]). Elsewhere, and for short inputs, the
//! bytes go through `crc32fast` in copies of [`CHUNK`] bytes on the stack.
//!
//! A state here is what `crc32fast::Hasher` holds between updates (the CRC so far, final
//! XOR applied), so a hash of a packet may go through a hasher, then here, then a hasher.

#![allow(unsafe_code)]
// The folds' constants are used on x86_64 only.
#![cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]

/// Bytes hashed from a stack copy at a time where the bytes are not folded in place.
pub(crate) const CHUNK: usize = 512;

/// The CRC-32 state after `state` (as `crc32fast::Hasher` holds it) and the `len` bytes
/// at `p`.
///
/// # Safety
///
/// `p` is valid for reads of `len` bytes for the call. Bytes that another thread writes
/// meanwhile are read as one value or the other (raw loads, as `ptr::copy` reads them),
/// and the CRC is then of a mix, which the receiver's check catches.
pub(crate) unsafe fn update(state: u32, p: *const u8, len: usize) -> u32 {
    #[cfg(target_arch = "x86_64")]
    {
        if len >= WIDE_MIN && folds_wide() {
            // SAFETY: the CPU has the features (`folds_wide`); the caller's promise.
            return unsafe { fold_wide(state, p, len) };
        }
        if len >= FOLD_MIN && folds() {
            // SAFETY: the CPU has the features (`folds`); the caller's promise for `p`.
            return unsafe { fold(state, p, len) };
        }
    }
    // SAFETY: the caller's promise for `p`.
    unsafe { by_chunks(state, p, len) }
}

/// [`update`] over bytes the stack may borrow (its own, a received packet's).
pub(crate) fn update_slice(state: u32, bytes: &[u8]) -> u32 {
    // SAFETY: a borrowed slice is valid for reads of its length for the call, and
    // nothing writes it meanwhile.
    unsafe { update(state, bytes.as_ptr(), bytes.len()) }
}

/// The bytes through `crc32fast`, in stack copies of [`CHUNK`] bytes.
///
/// # Safety
///
/// As [`update`]'s.
unsafe fn by_chunks(state: u32, p: *const u8, len: usize) -> u32 {
    let mut h = crc32fast::Hasher::new_with_initial(state);
    let mut chunk = [0u8; CHUNK];
    let mut at = 0;
    while at < len {
        let n = (len - at).min(CHUNK);
        // SAFETY: `at + n <= len`, inside what the caller promised; `chunk` is our own
        // stack array, which cannot overlap it.
        unsafe { std::ptr::copy_nonoverlapping(p.add(at), chunk.as_mut_ptr(), n) };
        h.update(&chunk[..n]);
        at += n;
    }
    h.finalize()
}

/// Inputs shorter than this go through [`by_chunks`]: two rounds of the 128-bit fold at
/// least (a choice, not measured: the payloads folded are at least `IN_PLACE_MIN`, 1 KiB).
#[cfg(target_arch = "x86_64")]
const FOLD_MIN: usize = 128;

/// Inputs of at least this many bytes fold in four 512-bit lanes where the CPU has
/// AVX-512 and VPCLMULQDQ ([`fold_wide`]).
#[cfg(target_arch = "x86_64")]
const WIDE_MIN: usize = 256;

/// Whether this CPU has what [`fold_wide`] runs on.
#[cfg(target_arch = "x86_64")]
fn folds_wide() -> bool {
    folds()
        && std::arch::is_x86_feature_detected!("avx512f")
        && std::arch::is_x86_feature_detected!("vpclmulqdq")
}

/// Whether this CPU has what [`fold`] runs on (asked once; std caches the answer).
#[cfg(target_arch = "x86_64")]
fn folds() -> bool {
    std::arch::is_x86_feature_detected!("pclmulqdq")
        && std::arch::is_x86_feature_detected!("sse4.1")
}

/// The Ethernet CRC-32 polynomial, x^32 + x^26 + ... + 1, its x^32 term included.
const POLY: u64 = 0x1_04c1_1db7;

/// x^n mod P, in the normal (not reflected) bit order.
const fn x_pow_mod(n: u32) -> u64 {
    let mut r: u64 = 1;
    let mut i = 0;
    while i < n {
        r <<= 1;
        if r & (1 << 32) != 0 {
            r ^= POLY;
        }
        i += 1;
    }
    r
}

/// The multiplier that moves a 64-bit half of a lane `n` bits on, for bit-reflected
/// data: x^n mod P, its 32 bits reflected, times x (one more bit of shift, which the
/// carry-less product of reflected operands needs).
const fn k(n: u32) -> i64 {
    ((x_pow_mod(n) as u32).reverse_bits() as i64) << 1
}

/// The multipliers of a lane's low and high 64 bits (the low half is the later one in
/// reflected order, so it moves 64 bits further) to move it `d` bits on: x^(d+32) and
/// x^(d-32) mod P. These give the constants of the paper for 128 and 512 bits; the tests
/// check the whole against `crc32fast` over every length and alignment that matters.
const fn by(d: u32) -> (i64, i64) {
    (k(d + 32), k(d - 32))
}

/// The multipliers of the folds, computed when the crate is built (a `const`: a call of
/// `by` in a function would run its loop at every call).
const BY_128: (i64, i64) = by(128);
const BY_256: (i64, i64) = by(256);
const BY_384: (i64, i64) = by(384);
const BY_512: (i64, i64) = by(512);
const BY_2048: (i64, i64) = by(2048);

/// [`update`] by carry-less multiplication, for `len >= FOLD_MIN`: four 128-bit lanes.
///
/// # Safety
///
/// The CPU has PCLMULQDQ and SSE4.1; `p` is as [`update`] asks.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "pclmulqdq,sse2,sse4.1")]
unsafe fn fold(state: u32, p: *const u8, len: usize) -> u32 {
    use std::arch::x86_64::{_mm_cvtsi32_si128, _mm_xor_si128};
    debug_assert!(len >= 64);
    // SAFETY (of every block below): the CPU has the features this function enables
    // (the caller's promise), which `load`, `pair` and `on` ask for; every `load` reads
    // 16 bytes at `at` with `at + 16 <= len`, inside what the caller promised.
    unsafe {
        let by_512 = pair(BY_512);
        let by_128 = pair(BY_128);
        // The register (the state before its final XOR) goes into the first four bytes:
        // from there on the hash is of the bytes alone, from a zero register.
        let mut x0 = _mm_xor_si128(load(p, 0), _mm_cvtsi32_si128(!state as i32));
        let mut x1 = load(p, 16);
        let mut x2 = load(p, 32);
        let mut x3 = load(p, 48);
        let mut at = 64;
        while len - at >= 64 {
            x0 = on(x0, by_512, load(p, at));
            x1 = on(x1, by_512, load(p, at + 16));
            x2 = on(x2, by_512, load(p, at + 32));
            x3 = on(x3, by_512, load(p, at + 48));
            at += 64;
        }
        let mut x = on(x0, by_128, x1);
        x = on(x, by_128, x2);
        x = on(x, by_128, x3);
        finish(x, p, at, len)
    }
}

/// [`update`] for `len >= WIDE_MIN` with 512-bit carry-less multiplication: four lanes
/// of 64 bytes, each moved 256 bytes on per round, then folded into one lane, whose four
/// 128-bit parts [`fold`]'s steps fold into one. The wide part is inline assembly: the
/// 512-bit intrinsics came to stable Rust after the version this crate supports (1.85).
///
/// # Safety
///
/// The CPU has AVX-512F, VPCLMULQDQ, PCLMULQDQ and SSE4.1; `p` is as [`update`] asks.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "pclmulqdq,sse2,sse4.1")]
unsafe fn fold_wide(state: u32, p: *const u8, len: usize) -> u32 {
    debug_assert!(len >= 256);
    // The multipliers as the assembly reads them: 16 bytes each, the low half first (an
    // x86_64 `i64` is little-endian).
    const WIDE_2048: [i64; 2] = [BY_2048.0, BY_2048.1];
    const WIDE_512: [i64; 2] = [BY_512.0, BY_512.1];
    let mut lane = [0u8; 64];
    let mut at = p;
    let mut left = len;
    // SAFETY: the CPU has AVX-512F and VPCLMULQDQ (the caller's promise). The loads
    // read `[at, at + 64)` blocks while `left >= 64` of the `len` bytes at `p` the caller
    // promised (256 at first: `len >= 256`); the stores write `lane`'s 64 bytes; the
    // constants are read from `WIDE_2048` / `WIDE_512`. zmm0-zmm15 are declared clobbered
    // (zmm0-6 written, the rest's upper halves cleared by `vzeroupper`), no stack is used,
    // and the flags are clobbered (the default).
    unsafe {
        std::arch::asm!(
            // Four lanes of the first 256 bytes, the register in the first 4 bytes.
            "vmovdqu64 zmm0, zmmword ptr [{at}]",
            "vmovdqu64 zmm1, zmmword ptr [{at} + 64]",
            "vmovdqu64 zmm2, zmmword ptr [{at} + 128]",
            "vmovdqu64 zmm3, zmmword ptr [{at} + 192]",
            "vmovd xmm6, {seed:e}",
            "vpxorq zmm0, zmm0, zmm6",
            "vbroadcasti32x4 zmm4, xmmword ptr [{k2048}]",
            "vbroadcasti32x4 zmm5, xmmword ptr [{k512}]",
            "add {at}, 256",
            "sub {left}, 256",
            // Each lane moved 2048 bits on, plus the next 256 bytes.
            "2:",
            "cmp {left}, 256",
            "jb 3f",
            "vpclmulqdq zmm6, zmm0, zmm4, 0x00",
            "vpclmulqdq zmm0, zmm0, zmm4, 0x11",
            "vpternlogq zmm0, zmm6, zmmword ptr [{at}], 0x96",
            "vpclmulqdq zmm6, zmm1, zmm4, 0x00",
            "vpclmulqdq zmm1, zmm1, zmm4, 0x11",
            "vpternlogq zmm1, zmm6, zmmword ptr [{at} + 64], 0x96",
            "vpclmulqdq zmm6, zmm2, zmm4, 0x00",
            "vpclmulqdq zmm2, zmm2, zmm4, 0x11",
            "vpternlogq zmm2, zmm6, zmmword ptr [{at} + 128], 0x96",
            "vpclmulqdq zmm6, zmm3, zmm4, 0x00",
            "vpclmulqdq zmm3, zmm3, zmm4, 0x11",
            "vpternlogq zmm3, zmm6, zmmword ptr [{at} + 192], 0x96",
            "add {at}, 256",
            "sub {left}, 256",
            "jmp 2b",
            // The four lanes into one, each moved 512 bits onto the next.
            "3:",
            "vpclmulqdq zmm6, zmm0, zmm5, 0x00",
            "vpclmulqdq zmm0, zmm0, zmm5, 0x11",
            "vpternlogq zmm0, zmm6, zmm1, 0x96",
            "vpclmulqdq zmm6, zmm0, zmm5, 0x00",
            "vpclmulqdq zmm0, zmm0, zmm5, 0x11",
            "vpternlogq zmm0, zmm6, zmm2, 0x96",
            "vpclmulqdq zmm6, zmm0, zmm5, 0x00",
            "vpclmulqdq zmm0, zmm0, zmm5, 0x11",
            "vpternlogq zmm0, zmm6, zmm3, 0x96",
            // Then 64 bytes at a time.
            "4:",
            "cmp {left}, 64",
            "jb 5f",
            "vpclmulqdq zmm6, zmm0, zmm5, 0x00",
            "vpclmulqdq zmm0, zmm0, zmm5, 0x11",
            "vpternlogq zmm0, zmm6, zmmword ptr [{at}], 0x96",
            "add {at}, 64",
            "sub {left}, 64",
            "jmp 4b",
            "5:",
            "vmovdqu64 zmmword ptr [{lane}], zmm0",
            "vzeroupper",
            at = inout(reg) at,
            left = inout(reg) left,
            seed = in(reg) !state,
            k2048 = in(reg) WIDE_2048.as_ptr(),
            k512 = in(reg) WIDE_512.as_ptr(),
            lane = in(reg) lane.as_mut_ptr(),
            // zmm0-6 are written; `vzeroupper` clears the upper halves of the rest of
            // ymm0-15, so those are clobbered too.
            out("zmm0") _, out("zmm1") _, out("zmm2") _, out("zmm3") _,
            out("zmm4") _, out("zmm5") _, out("zmm6") _, out("zmm7") _,
            out("zmm8") _, out("zmm9") _, out("zmm10") _, out("zmm11") _,
            out("zmm12") _, out("zmm13") _, out("zmm14") _, out("zmm15") _,
            options(nostack),
        );
    }
    // The lane's four parts, 16 bytes apart: each moved onto the last.
    // SAFETY: the CPU has the features `load`, `pair` and `on` ask for (the caller's
    // promise); the loads read `lane`'s 64 bytes; `at` is `left` bytes from the end of
    // what the caller promised.
    unsafe {
        let part = |i: usize| load(lane.as_ptr(), 16 * i);
        let mut x = on(part(0), pair(BY_384), part(3));
        x = on(part(1), pair(BY_256), x);
        x = on(part(2), pair(BY_128), x);
        finish(x, at, 0, left)
    }
}

/// The 16 bytes at `p + at`, an unaligned raw load (no reference made).
///
/// # Safety
///
/// `p + at` is valid for reads of 16 bytes.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "sse2")]
#[inline]
unsafe fn load(p: *const u8, at: usize) -> std::arch::x86_64::__m128i {
    // SAFETY: the caller's promise.
    unsafe { std::arch::x86_64::_mm_loadu_si128(p.add(at).cast()) }
}

/// A 128-bit register of two multipliers: `k.0` for the low half, `k.1` for the high.
///
/// # Safety
///
/// The CPU has SSE2 (every x86_64 CPU).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "sse2")]
#[inline]
unsafe fn pair(k: (i64, i64)) -> std::arch::x86_64::__m128i {
    std::arch::x86_64::_mm_set_epi64x(k.1, k.0)
}

/// `x` moved on by the multipliers `k` (its low and high halves each by its own), plus
/// `next`.
///
/// # Safety
///
/// The CPU has PCLMULQDQ.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "pclmulqdq,sse2")]
#[inline]
unsafe fn on(
    x: std::arch::x86_64::__m128i,
    k: std::arch::x86_64::__m128i,
    next: std::arch::x86_64::__m128i,
) -> std::arch::x86_64::__m128i {
    use std::arch::x86_64::{_mm_clmulepi64_si128, _mm_xor_si128};
    let lo = _mm_clmulepi64_si128::<0x00>(x, k);
    let hi = _mm_clmulepi64_si128::<0x11>(x, k);
    _mm_xor_si128(_mm_xor_si128(lo, hi), next)
}

/// The end of a fold: the lane `x` holds the bytes before `at`; 16-byte blocks move it
/// on to the last `len - at` (under 16), and what is left, its 16 bytes and those, is
/// hashed as a message from a zero register (a hasher state of all ones).
///
/// # Safety
///
/// The CPU has PCLMULQDQ; `p` is valid for reads of `len` bytes, `at <= len`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "pclmulqdq,sse2,sse4.1")]
unsafe fn finish(
    mut x: std::arch::x86_64::__m128i,
    p: *const u8,
    mut at: usize,
    len: usize,
) -> u32 {
    let mut rest = [0u8; 32];
    // SAFETY: the caller's promises; each load reads 16 bytes with `at + 16 <= len`;
    // `rest` has room for 16 bytes, then for the tail of under 16, from `p + at` on,
    // inside what the caller promised (`at + tail == len`).
    unsafe {
        let by_128 = pair(BY_128);
        while len - at >= 16 {
            x = on(x, by_128, load(p, at));
            at += 16;
        }
        std::arch::x86_64::_mm_storeu_si128(rest.as_mut_ptr().cast(), x);
        std::ptr::copy_nonoverlapping(p.add(at), rest.as_mut_ptr().add(16), len - at);
    }
    let mut h = crc32fast::Hasher::new_with_initial(!0);
    h.update(&rest[..16 + len - at]);
    h.finalize()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes(n: usize, seed: u32) -> Vec<u8> {
        let mut x = seed.wrapping_mul(0x9e37_79b9) | 1;
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                x as u8
            })
            .collect()
    }

    fn reference(state: u32, b: &[u8]) -> u32 {
        let mut h = crc32fast::Hasher::new_with_initial(state);
        h.update(b);
        h.finalize()
    }

    /// Every length up to a few folds and around a 4 KiB packet's, at every alignment
    /// of a 16-byte load, from several states: the same CRC as `crc32fast`'s.
    #[test]
    fn the_same_crc_as_crc32fast() {
        let big = bytes(4096 + 300, 7);
        let lens = (0..=600).chain(4000..=4200).chain([4096 + 256]);
        for len in lens {
            for off in [0, 1, 3, 8, 15] {
                let b = &big[off..off + len.min(big.len() - off)];
                for state in [0, 0xffff_ffff, 0x1234_5678] {
                    // SAFETY: `b` is a live slice of `b.len()` bytes.
                    let got = unsafe { update(state, b.as_ptr(), b.len()) };
                    assert_eq!(
                        got,
                        reference(state, b),
                        "len {} off {off} state {state:#x}",
                        b.len()
                    );
                }
            }
        }
    }

    /// Each fold on its own, where the CPU has it (`update` takes the stack-copy path for
    /// short inputs and where the CPU lacks the features: this is the test that each fold
    /// itself is right), from an unaligned start.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn each_fold_itself() {
        type Fold = unsafe fn(u32, *const u8, usize) -> u32;
        let b = bytes(4400, 9);
        let folds: [(&str, bool, Fold, usize); 2] = [
            ("128-bit", folds(), fold, 64),
            ("512-bit", folds_wide(), fold_wide, 256),
        ];
        for (name, runs, f, min) in folds {
            if !runs {
                eprintln!("skipped the {name} fold: this CPU lacks its instructions");
                continue;
            }
            for len in (min..=1100).chain([4096, 4100, 4300]) {
                // SAFETY: the CPU has the features; a live slice of at least `len` bytes.
                let got = unsafe { f(0x0bad_cafe, b.as_ptr().add(3), len) };
                assert_eq!(
                    got,
                    reference(0x0bad_cafe, &b[3..3 + len]),
                    "{name}, len {len}"
                );
            }
        }
    }

    /// The constants the paper gives, from the polynomial.
    #[test]
    fn the_constants_of_the_paper() {
        assert_eq!(BY_128, (0x1_7519_97d0, 0x0_ccaa_009e));
        assert_eq!(BY_512, (0x1_5444_2bd4, 0x1_c6e4_1596));
    }

    /// The stack-copy path on its own (the fold's fallback), across chunk boundaries.
    #[test]
    fn by_chunks_is_the_same_crc() {
        let b = bytes(3 * CHUNK + 17, 3);
        for len in [0, 1, CHUNK - 1, CHUNK, CHUNK + 1, 3 * CHUNK + 17] {
            // SAFETY: a live slice of at least `len` bytes.
            let got = unsafe { by_chunks(5, b.as_ptr(), len) };
            assert_eq!(got, reference(5, &b[..len]));
        }
    }

    /// Split anywhere, hashed as a hasher, then here, then a hasher: the CRC of the
    /// whole, as the ICRC of a packet whose payload stays in place is computed.
    #[test]
    fn continues_a_hasher_and_is_continued() {
        let b = bytes(5000, 11);
        let whole = reference(0, &b);
        for (i, j) in [(0, 4096), (40, 4136), (12, 1036), (100, 4999)] {
            let mut h = crc32fast::Hasher::new();
            h.update(&b[..i]);
            let s = h.finalize();
            // SAFETY: `i..j` lies inside `b`.
            let s = unsafe { update(s, b.as_ptr().add(i), j - i) };
            let mut h = crc32fast::Hasher::new_with_initial(s);
            h.update(&b[j..]);
            assert_eq!(h.finalize(), whole, "{i}..{j}");
        }
    }
}
