//! Where lkeys and rkeys come from: a keyed permutation of a counter, so that a key is
//! never handed out twice in a context's life (until 2^32 keys have been drawn) and yet
//! does not follow from the previous one.
//!
//! Never twice: a key that stopped working (a deregistered region's, an invalidated one)
//! never comes to name another region, so a peer still holding it gets a Remote Access
//! Error forever, and a span checked against it before never reaches another region's
//! bytes. Random draws only make that likely (a draw meets a retired key with probability
//! retired / 2^32); a permutation makes it certain.
//!
//! Not sequential: the permutation is a four-round Feistel network over the two 16-bit
//! halves with round keys from the context's seeded generator, so a peer that knows one
//! rkey cannot count to the next (it is no cipher against a determined analyst, as the
//! seeded generator is no secret against one).

#![forbid(unsafe_code)]

/// The key sequence of one context.
#[derive(Debug)]
pub(super) struct Keys {
    next: u32,
    round: [u32; 4],
}

impl Keys {
    /// A sequence whose permutation is drawn from `rng`.
    pub(super) fn new(rng: &mut crate::rng::Rng) -> Self {
        let mut round = [0; 4];
        for r in &mut round {
            *r = rng.next_u64() as u32;
        }
        Self {
            next: rng.next_u64() as u32,
            round,
        }
    }

    /// The next key: different from every key before it (for 2^32 draws).
    pub(super) fn next(&mut self) -> u32 {
        let n = self.next;
        self.next = self.next.wrapping_add(1);
        self.permute(n)
    }

    /// A bijection of `u32`: each Feistel round swaps the halves and mixes one into the
    /// other, which any round function keeps invertible.
    fn permute(&self, n: u32) -> u32 {
        let (mut l, mut r) = (n >> 16, n & 0xffff);
        for k in self.round {
            let f = (r ^ k).wrapping_mul(0x9e37_79b9).rotate_right(13) ^ (k >> 16);
            (l, r) = (r, (l ^ f) & 0xffff);
        }
        l << 16 | r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// No key twice over a long run, none a fixed step from the one before.
    #[test]
    fn keys_never_repeat_and_do_not_count() {
        let mut keys = Keys::new(&mut crate::rng::Rng::new(7));
        let drawn: Vec<u32> = (0..1 << 16).map(|_| keys.next()).collect();
        let mut sorted = drawn.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), drawn.len(), "a key came back");
        let steps: std::collections::HashSet<u32> =
            drawn.windows(2).map(|w| w[1].wrapping_sub(w[0])).collect();
        assert!(steps.len() > drawn.len() / 2, "keys follow a pattern");
    }

    /// A permutation: a 2^18 block of counters maps to distinct keys.
    #[test]
    fn permute_is_a_bijection_on_a_block() {
        let keys = Keys::new(&mut crate::rng::Rng::new(1));
        let mut seen = std::collections::HashSet::new();
        assert!((0..1u32 << 18).all(|n| seen.insert(keys.permute(n))));
    }
}
