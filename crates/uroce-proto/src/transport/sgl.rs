//! Scatter/gather lists: the local buffer of a work request as one or several ranges of
//! registered memory, and the payload of a packet that may cross from one range to the
//! next.
//!
//! Rules (ibverbs `sg_list` / `num_sge`, as rdma_rxe applies them):
//! - at most the QP's `max_send_sge` / `max_recv_sge` (the SRQ's `max_sge`) entries per
//!   work request, EINVAL at post time beyond (rdma_rxe's `validate_send_wr` and
//!   `post_one_recv`); a QP or SRQ may ask for at most [`MAX_SGE`] (`RXE_MAX_SGE`);
//! - the message length is the sum of the entries' lengths (`rxe_init_send_wqe`,
//!   `post_one_recv`);
//! - every entry is checked (lkey, PD, bounds, rights) when the request is posted, as a
//!   single one is; an entry of length 0 needs no region and is skipped (rdma_rxe's
//!   `copy_data` walks past entries with nothing left in them);
//! - data goes out gathered from the entries in order and comes in scattered over them
//!   in order (`copy_data`), a packet's payload crossing entry boundaries freely.
//!
//! A list of one non-empty entry is a [`Local::One`], as every request was before lists:
//! the data path of a single-SGE request is unchanged. Two or more are a
//! [`Local::Many`], held in one boxed slice (one allocation per post, none per packet).
//! A packet whose payload crosses entries is [`Payload::Gathered`]: the service that
//! makes it writes the pieces into the context's staging list ([`super::Io::gather`],
//! room for [`MAX_SGE`] reserved once), from which the frame builder copies them right
//! after; so an [`super::OutPacket`] stays a small `Copy` value.

use super::{Sge, VerbsError, WcStatus};
use crate::mem::{Access, Memory, PdId, Span};

/// The most scatter/gather entries a work request may carry, and a QP or SRQ may ask
/// for: rdma_rxe's `RXE_MAX_SGE`.
pub const MAX_SGE: u32 = 32;

/// A work request's local buffer, every non-empty entry checked.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) enum Local {
    /// No bytes.
    #[default]
    Empty,
    /// One range.
    One(Span),
    /// Two or more non-empty ranges, in order.
    Many(Box<[Span]>),
}

impl From<Option<Span>> for Local {
    fn from(s: Option<Span>) -> Self {
        s.map_or(Local::Empty, Local::One)
    }
}

impl Local {
    /// Makes the local buffer of the ranges `spans` (the non-empty ones, in order).
    pub(crate) fn of(spans: &[Span]) -> Self {
        match spans {
            [] => Local::Empty,
            [s] => Local::One(*s),
            _ => Local::Many(spans.into()),
        }
    }

    /// Total bytes.
    pub(crate) fn len(&self) -> usize {
        match self {
            Local::Empty => 0,
            Local::One(s) => s.len,
            Local::Many(l) => l.iter().map(|s| s.len).sum(),
        }
    }

    /// Whether a range lies in the region `lkey`.
    pub(crate) fn refers_to(&self, lkey: u32) -> bool {
        match self {
            Local::Empty => false,
            Local::One(s) => s.lkey == lkey,
            Local::Many(l) => l.iter().any(|s| s.lkey == lkey),
        }
    }

    /// Whether every range's region is still one of `pd`'s: a region moved to another PD
    /// after the buffer was posted (ibv_rereg_mr) fails a NIC's lkey check when the
    /// WQE is used.
    pub(crate) fn in_pd(&self, mem: &Memory, pd: PdId) -> bool {
        let ok = |s: &Span| mem.mr(s.lkey).is_some_and(|m| m.pd == pd);
        match self {
            Local::Empty => true,
            Local::One(s) => ok(s),
            Local::Many(l) => l.iter().all(ok),
        }
    }

    /// The bytes `[offset, offset + len)` of the buffer as a packet's payload (callers
    /// keep the range inside; a range past the end is cut short, as [`Span::sub`] does).
    /// A range inside one entry is a plain [`Payload::Span`]; one that crosses entries
    /// has its pieces written to `staged` ([`Payload::Gathered`]).
    #[inline]
    pub(crate) fn payload(&self, offset: usize, len: usize, staged: &mut Vec<Span>) -> Payload {
        match self {
            Local::Empty => Payload::None,
            Local::One(s) => Payload::Span(s.sub(offset, len)),
            Local::Many(l) => many_payload(l, offset, len, staged),
        }
    }

    /// The bytes `[offset, offset + len)` of the buffer where they lie in one range of
    /// one region (a buffer of one entry); `None` otherwise.
    pub(crate) fn span_at(&self, offset: usize, len: usize) -> Option<Span> {
        match self {
            Local::One(s) if offset.checked_add(len)? <= s.len => Some(s.sub(offset, len)),
            _ => None,
        }
    }

    /// [`Local::copy_in`], unless the context placed `data` there already
    /// ([`crate::transport::Io::placed`]).
    pub(crate) fn copy_in_unless_placed(
        &self,
        mem: &mut Memory,
        offset: usize,
        data: &[u8],
        placed: Option<Span>,
    ) -> bool {
        placed.is_some_and(|p| self.span_at(offset, data.len()) == Some(p))
            || self.copy_in(mem, offset, data)
    }

    /// Scatters `data` into the buffer from byte `offset` on, over the entries in order.
    /// False, with nothing or part written, if the buffer is too short or a region went
    /// away since the post.
    pub(crate) fn copy_in(&self, mem: &mut Memory, offset: usize, data: &[u8]) -> bool {
        match self {
            Local::Empty => data.is_empty(),
            Local::One(s) => mem.copy_in(s.sub(offset, data.len()), data),
            Local::Many(l) => walk(l, offset, data.len(), |s, at| {
                mem.copy_in(s, &data[at..at + s.len])
            }),
        }
    }
}

/// [`Local::payload`] of a list: out of line, so that the one-entry case stays small.
#[inline(never)]
fn many_payload(list: &[Span], offset: usize, len: usize, staged: &mut Vec<Span>) -> Payload {
    staged.clear();
    let total: usize = list.iter().map(|s| s.len).sum();
    let offset = offset.min(total);
    let len = len.min(total - offset);
    walk(list, offset, len, |s, _| {
        staged.push(s);
        true
    });
    match staged[..] {
        [] => Payload::None,
        [s] => Payload::Span(s),
        _ => Payload::Gathered(len),
    }
}

/// Calls `f` with the piece of each range of `list` that `[offset, offset + len)` covers
/// and where that piece starts in the range asked for; false if the list is shorter or
/// `f` says so.
fn walk(list: &[Span], offset: usize, len: usize, mut f: impl FnMut(Span, usize) -> bool) -> bool {
    let (mut skip, mut done) = (offset, 0);
    for s in list {
        if done == len {
            break;
        }
        if skip >= s.len {
            skip -= s.len;
            continue;
        }
        let piece = s.sub(skip, len - done);
        skip = 0;
        if !f(piece, done) {
            return false;
        }
        done += piece.len;
    }
    done == len
}

/// The payload of a packet: registered bytes, read when the frame is built.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Payload {
    /// No payload.
    #[default]
    None,
    /// One range of a region.
    Span(Span),
    /// This many bytes gathered from the ranges the service that made the packet staged
    /// in the context's staging list (`Io::gather`), in order: valid for the
    /// packet just made, which the context builds at once.
    Gathered(usize),
}

impl From<Option<Span>> for Payload {
    fn from(s: Option<Span>) -> Self {
        s.map_or(Payload::None, Payload::Span)
    }
}

impl Payload {
    /// Bytes of payload.
    pub fn len(&self) -> usize {
        match self {
            Payload::None => 0,
            Payload::Span(s) => s.len,
            Payload::Gathered(n) => *n,
        }
    }

    /// True without payload bytes.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Copies the payload into `dst` (exactly [`Payload::len`] bytes), a gathered one
    /// from the ranges in `staged`; false, `dst` then undefined, if a region went away
    /// since the work request was posted.
    pub fn copy_out(&self, mem: &Memory, staged: &[Span], dst: &mut [u8]) -> bool {
        match self {
            Payload::None => dst.is_empty(),
            Payload::Span(s) => mem.copy_out(*s, dst),
            Payload::Gathered(n) => {
                dst.len() == *n
                    && walk(staged, 0, *n, |s, at| {
                        mem.copy_out(s, &mut dst[at..at + s.len])
                    })
            }
        }
    }
}

/// The sum of the entries' lengths, EINVAL above 2^32 - 1 (ibverbs' `byte_len` and a
/// message's length are 32 bits; rdma_rxe sums the lengths into a 32-bit `length`).
pub(crate) fn total_len(sgl: &[Sge]) -> Result<u32, VerbsError> {
    sgl.iter()
        .try_fold(0u32, |t, s| t.checked_add(s.length))
        .ok_or(VerbsError::InvalidWr("SGE lengths add up past 2^32 - 1"))
}

/// EINVAL for a list longer than `cap` entries (rdma_rxe's `validate_send_wr`:
/// `num_sge > sq->max_sge`; `post_one_recv`: `num_sge > rq->max_sge`).
pub(crate) fn check_count(sgl: &[Sge], cap: u32, what: &'static str) -> Result<(), VerbsError> {
    if sgl.len() > cap as usize {
        return Err(VerbsError::InvalidWr(what));
    }
    Ok(())
}

/// Checks every non-empty entry of `sgl` against the regions of `pd` with the right
/// `need` and makes the local buffer; the first bad entry's error.
#[inline]
pub(crate) fn resolve(
    mem: &Memory,
    pd: PdId,
    sgl: &[Sge],
    need: Access,
) -> Result<Local, crate::mem::AccessError> {
    // One entry, as almost every request has: no list to build.
    if let [sge] = sgl {
        if sge.length == 0 {
            return Ok(Local::Empty);
        }
        let s = mem.check_local(pd, sge.lkey, sge.addr, u64::from(sge.length), need)?;
        return Ok(Local::One(s));
    }
    resolve_many(mem, pd, sgl, need)
}

/// [`resolve`] of a list of any length, out of line.
#[inline(never)]
fn resolve_many(
    mem: &Memory,
    pd: PdId,
    sgl: &[Sge],
    need: Access,
) -> Result<Local, crate::mem::AccessError> {
    let mut spans = [Span {
        lkey: 0,
        offset: 0,
        len: 0,
    }; MAX_SGE as usize];
    let mut n = 0;
    for sge in sgl.iter().filter(|s| s.length > 0) {
        let s = mem.check_local(pd, sge.lkey, sge.addr, u64::from(sge.length), need)?;
        // The callers checked the count against a cap of at most MAX_SGE.
        let Some(slot) = spans.get_mut(n) else {
            return Err(crate::mem::AccessError::OutOfBounds {
                va: sge.addr,
                len: u64::from(sge.length),
            });
        };
        *slot = s;
        n += 1;
    }
    Ok(Local::of(&spans[..n]))
}

/// [`resolve`] for a send work request: a bad entry is a local protection error
/// (IBV_WC_LOC_PROT_ERR), completed rather than refused, as a NIC does.
#[inline]
pub(crate) fn send_local(
    mem: &Memory,
    pd: PdId,
    sgl: &[Sge],
    need: Access,
) -> Result<Local, WcStatus> {
    resolve(mem, pd, sgl, need).map_err(|_| WcStatus::LocProtErr)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mem_with(len: usize) -> (Memory, PdId, crate::mem::Mr) {
        let mut m = Memory::new(3);
        let pd = m.alloc_pd();
        let mr = m
            .register(pd, (0..len).map(|i| i as u8).collect(), Access::LOCAL_WRITE)
            .unwrap();
        (m, pd, mr)
    }

    /// rdma_rxe's `copy_data`: entries are walked in order, a zero-length one skipped,
    /// and a range crossing an entry boundary continues at the start of the next entry.
    #[test]
    fn gather_and_scatter_cross_entry_boundaries_in_order() {
        let (mut m, pd, mr) = mem_with(1000);
        let sge = |off: u64, length| Sge {
            addr: mr.addr + off,
            length,
            lkey: mr.lkey,
        };
        // Entries [500..600), [10..11), empty, [100..400), [900..937).
        let sgl = [
            sge(500, 100),
            sge(10, 1),
            sge(0, 0),
            sge(100, 300),
            sge(900, 37),
        ];
        let local = resolve(&m, pd, &sgl, Access::NONE).unwrap();
        assert_eq!(local.len(), 438);
        let mut expect: Vec<u8> = Vec::new();
        for (o, l) in [(500, 100), (10, 1), (100, 300), (900, 37)] {
            expect.extend((o..o + l).map(|i| i as u8));
        }
        // Packets of 256 bytes: the first crosses three entries, the second two.
        let mut staged = Vec::new();
        for (off, len) in [(0, 256), (256, 182), (99, 3), (101, 300), (0, 438)] {
            let p = local.payload(off, len, &mut staged);
            // [101, 401) is the fourth entry exactly: one range, nothing to gather.
            let one = (off, len) == (101, 300);
            assert_eq!(matches!(p, Payload::Gathered(n) if n == len), !one);
            let mut dst = vec![0; p.len()];
            assert!(p.copy_out(&m, &staged, &mut dst));
            assert_eq!(dst, expect[off..off + len], "{off}+{len}");
        }
        // Inside one entry: a plain span, nothing staged.
        assert!(matches!(
            local.payload(110, 50, &mut staged),
            Payload::Span(s) if s.len == 50
        ));
        // Scatter writes each byte once, in order.
        let data: Vec<u8> = (0..438).map(|i| (i % 251) as u8 ^ 0x5a).collect();
        assert!(local.copy_in(&mut m, 0, &data[..200]));
        assert!(local.copy_in(&mut m, 200, &data[200..]));
        let p = local.payload(0, 438, &mut staged);
        let mut back = vec![0; 438];
        assert!(p.copy_out(&m, &staged, &mut back));
        assert_eq!(back, data);
        // Past the end: refused.
        assert!(!local.copy_in(&mut m, 400, &[0; 39]));
    }

    /// Each entry is checked as a single one is (rdma_rxe's `lookup_mr` per SGE in
    /// `copy_data`): one bad entry among good ones fails the whole list.
    #[test]
    fn one_bad_entry_fails_the_list() {
        let (m, pd, mr) = mem_with(100);
        let good = Sge {
            addr: mr.addr,
            length: 10,
            lkey: mr.lkey,
        };
        let outside = Sge {
            addr: mr.addr + 95,
            length: 10,
            ..good
        };
        assert!(resolve(&m, pd, &[good, outside], Access::NONE).is_err());
        let bad_key = Sge {
            lkey: mr.lkey ^ 1,
            ..good
        };
        assert!(resolve(&m, pd, &[good, bad_key, good], Access::NONE).is_err());
        // A zero-length entry needs no region at all.
        let nothing = Sge {
            addr: 0,
            length: 0,
            lkey: 0,
        };
        assert_eq!(
            resolve(&m, pd, &[nothing, good, nothing], Access::NONE).unwrap(),
            Local::One(Span {
                lkey: mr.lkey,
                offset: 0,
                len: 10
            })
        );
        assert_eq!(total_len(&[good; 3]), Ok(30));
        let huge = Sge {
            length: u32::MAX,
            ..good
        };
        assert!(total_len(&[huge, good]).is_err());
        assert!(check_count(&[good; 3], 2, "x").is_err());
        assert!(check_count(&[good; 2], 2, "x").is_ok());
    }
}
