//! The QPs of a context by QPN, found in constant time whatever their number: the QPs
//! sit in a dense vector of slots, and an index says which slot holds which QPN. The
//! index is an open-addressed table of 8-byte entries (QPN and slot in one word) with
//! linear probing from a multiplicative hash of the QPN (QPNs are numbers the context
//! hands out, so no keyed hash is needed against collisions), at most three quarters
//! full: a lookup reads one cache line of it, where a `HashMap` read two (its control
//! bytes and its bucket), a miss each once 10,000 QPs have pushed both out of the cache.
//! A sorted tree was O(log n) per packet: about 200 instructions per lookup with
//! 10,000 QPs.
//!
//! Iteration goes in slot order, which is creation order.

use super::qp::Qp;

/// An empty entry of the index.
const EMPTY: u64 = 0;

/// QPN → slot: open addressing, linear probing, backward-shift removal (no tombstones).
/// An entry is `(qpn + 1) << 32 | slot`, so 0 is free (QPNs are 24 bits).
#[derive(Default)]
struct QpIndex {
    entries: Vec<u64>,
    len: usize,
}

impl QpIndex {
    /// Where QPN `qpn`'s probe starts: the high bits of a Fibonacci hash.
    #[inline]
    fn home(&self, qpn: u32) -> usize {
        let bits = self.entries.len().trailing_zeros();
        (u64::from(qpn).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (64 - bits)) as usize
    }

    #[inline]
    fn key(qpn: u32) -> u64 {
        (u64::from(qpn) + 1) << 32
    }

    /// The slot of QPN `qpn`.
    #[inline]
    fn get(&self, qpn: u32) -> Option<u32> {
        if self.len == 0 {
            return None;
        }
        let mask = self.entries.len() - 1;
        let key = Self::key(qpn);
        let mut i = self.home(qpn);
        loop {
            let e = self.entries[i];
            if e & !0xffff_ffff == key {
                return Some(e as u32);
            }
            if e == EMPTY {
                return None;
            }
            i = (i + 1) & mask;
        }
    }

    /// Adds QPN `qpn` at `slot` (it is not in the index).
    fn insert(&mut self, qpn: u32, slot: u32) {
        if (self.len + 1) * 4 > self.entries.len() * 3 {
            self.grow();
        }
        self.place(Self::key(qpn) | u64::from(slot));
        self.len += 1;
    }

    fn place(&mut self, entry: u64) {
        let mask = self.entries.len() - 1;
        let mut i = self.home(((entry >> 32) - 1) as u32);
        while self.entries[i] != EMPTY {
            i = (i + 1) & mask;
        }
        self.entries[i] = entry;
    }

    fn grow(&mut self) {
        let bigger = vec![EMPTY; (self.entries.len() * 2).max(16)];
        let old = std::mem::replace(&mut self.entries, bigger);
        for e in old.into_iter().filter(|&e| e != EMPTY) {
            self.place(e);
        }
    }

    /// Takes QPN `qpn` out; its slot.
    fn remove(&mut self, qpn: u32) -> Option<u32> {
        if self.len == 0 {
            return None;
        }
        let mask = self.entries.len() - 1;
        let key = Self::key(qpn);
        let mut i = self.home(qpn);
        let slot = loop {
            let e = self.entries[i];
            if e & !0xffff_ffff == key {
                break e as u32;
            }
            if e == EMPTY {
                return None;
            }
            i = (i + 1) & mask;
        };
        // Backward shift: move up every entry after the hole that may sit there (its
        // home is not between the hole and it), so no probe stops early.
        let mut hole = i;
        let mut j = (i + 1) & mask;
        while self.entries[j] != EMPTY {
            let home = self.home(((self.entries[j] >> 32) - 1) as u32);
            if (j.wrapping_sub(home) & mask) >= (j.wrapping_sub(hole) & mask) {
                self.entries[hole] = self.entries[j];
                hole = j;
            }
            j = (j + 1) & mask;
        }
        self.entries[hole] = EMPTY;
        self.len -= 1;
        Some(slot)
    }
}

/// Cache lines at the start of a slot that a packet reads (`endpoint/qp.rs`).
const HOT_SLOT_LINES: usize = 3;
/// Cache lines at the start of a QP's service state (RC: path, requester, responder)
/// that a packet may read.
const HOT_SERVICE_LINES: usize = 6;

/// A QP and its QPN, on a cache line boundary: the QP's hot fields come first
/// (`endpoint/qp.rs`), and start a line, so a packet touches the fewest lines of it;
/// the QPN, read when walking the table, comes last.
#[repr(C, align(64))]
struct Slot {
    /// `None` for a slot freed by `remove`.
    qp: Option<Qp>,
    qpn: u32,
}

/// QPs by QPN.
#[derive(Default)]
pub(crate) struct QpTable {
    /// QPN → slot.
    index: QpIndex,
    /// The QPs and their QPNs.
    slots: Vec<Slot>,
    /// Slots freed, for the next `insert`.
    free: Vec<u32>,
}

impl QpTable {
    /// QPs held.
    pub(crate) fn len(&self) -> usize {
        self.index.len
    }

    /// Whether QP `qpn` exists.
    pub(crate) fn contains_key(&self, qpn: &u32) -> bool {
        self.index.get(*qpn).is_some()
    }

    /// QP `qpn`.
    #[inline]
    pub(crate) fn get(&self, qpn: &u32) -> Option<&Qp> {
        let i = self.index.get(*qpn)?;
        self.slots[i as usize].qp.as_ref()
    }

    /// QP `qpn`, to change.
    #[inline]
    pub(crate) fn get_mut(&mut self, qpn: &u32) -> Option<&mut Qp> {
        let i = self.index.get(*qpn)?;
        self.slots[i as usize].qp.as_mut()
    }

    /// Asks the cache for QP `qpn`'s hot lines ahead of their use (`prefetch.rs`): its
    /// slot's first [`HOT_SLOT_LINES`], then those of its service's state. Finding the
    /// slot reads the index, and finding the service reads the slot's first line: two
    /// loads that may miss, after which the other lines come in parallel.
    #[inline]
    pub(crate) fn prefetch(&self, qpn: u32) {
        let Some(i) = self.index.get(qpn) else {
            return;
        };
        let slot = &self.slots[i as usize];
        super::prefetch::lines((slot as *const Slot).cast(), HOT_SLOT_LINES);
        if let Some(qp) = &slot.qp {
            super::prefetch::lines(qp.service_ptr(), HOT_SERVICE_LINES);
        }
    }

    /// Adds QP `qpn` (replacing one of that number).
    pub(crate) fn insert(&mut self, qpn: u32, qp: Qp) {
        if let Some(q) = self.get_mut(&qpn) {
            *q = qp;
            return;
        }
        let i = match self.free.pop() {
            Some(i) => {
                self.slots[i as usize] = Slot { qp: Some(qp), qpn };
                i
            }
            None => {
                self.slots.push(Slot { qp: Some(qp), qpn });
                self.slots.len() as u32 - 1
            }
        };
        self.index.insert(qpn, i);
    }

    /// Takes QP `qpn` out.
    #[allow(dead_code)] // for destroy_qp
    pub(crate) fn remove(&mut self, qpn: &u32) -> Option<Qp> {
        let i = self.index.remove(*qpn)?;
        self.free.push(i);
        self.slots[i as usize].qp.take()
    }

    /// Every QP with its QPN.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&u32, &Qp)> {
        self.slots
            .iter()
            .filter_map(|s| s.qp.as_ref().map(|q| (&s.qpn, q)))
    }

    /// Every QP with its QPN, to change.
    pub(crate) fn iter_mut(&mut self) -> impl Iterator<Item = (&u32, &mut Qp)> {
        self.slots
            .iter_mut()
            .filter_map(|s| s.qp.as_mut().map(|q| (&s.qpn, q)))
    }

    /// Every QP.
    pub(crate) fn values(&self) -> impl Iterator<Item = &Qp> {
        self.iter().map(|(_, q)| q)
    }

    /// Every QP, to change.
    pub(crate) fn values_mut(&mut self) -> impl Iterator<Item = &mut Qp> {
        self.iter_mut().map(|(_, q)| q)
    }

    /// Every QPN.
    pub(crate) fn keys(&self) -> impl Iterator<Item = &u32> {
        self.iter().map(|(n, _)| n)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::QpIndex;

    /// The index agrees with a `HashMap` through growth and removals (backward shifts
    /// across wrap-around included), for consecutive QPNs, QPNs with a stride, and QPN
    /// 1; and never fills past three quarters.
    #[test]
    fn index_agrees_with_a_map_through_inserts_and_removals() {
        let mut ix = QpIndex::default();
        let mut model = HashMap::new();
        let qpns: Vec<u32> = (0..3000u32)
            .map(|k| 0x11 + k)
            .chain((0..3000).map(|k| (0x40_0000 + 7 * k) & 0xff_ffff))
            .chain([1, 0xff_ffff])
            .collect();
        for (slot, &q) in qpns.iter().enumerate() {
            if model.contains_key(&q) {
                continue;
            }
            ix.insert(q, slot as u32);
            model.insert(q, slot as u32);
            assert!(ix.len * 4 <= ix.entries.len() * 3);
        }
        // Remove every third, in an order unrelated to insertion.
        let mut gone: Vec<u32> = model.keys().copied().filter(|q| q % 3 == 0).collect();
        gone.sort_unstable_by_key(|q| q.wrapping_mul(0x2545_f491));
        for q in gone {
            assert_eq!(ix.remove(q), model.remove(&q), "removing {q:#x}");
            assert_eq!(ix.remove(q), None);
        }
        assert_eq!(ix.len, model.len());
        for q in 0..0x1_0000u32 {
            assert_eq!(ix.get(q), model.get(&q).copied(), "QPN {q:#x}");
        }
        for &q in &qpns {
            assert_eq!(ix.get(q), model.get(&q).copied(), "QPN {q:#x}");
        }
    }
}
