//! Mirrors: the objects one context shares with another context of the same device.
//!
//! A device whose QPs are spread over several contexts (the drop-in library's shards, one
//! per engine thread, each with its own datapath) still has one key space and one set of
//! CQs for the program: a region registered once is reachable with its rkey on whichever
//! context the QP it arrives on lives, and a CQ is fed by QPs of several contexts. Each
//! such object is created in the first context and then mirrored, under the same id or
//! keys, into the others: every context owns its copy, no lock is shared on the data
//! path, and a QP's completions stay in order because a QP lives in one context only.
//!
//! Protection domains and CQs are named by their index in a context, regions by their
//! keys: the mirror takes the id or keys the first context gave, never draws its own.

#![deny(unsafe_code)]

use super::cq::Cq;
use super::Context;
use crate::mem::{Buffer, Mr, PdId};
use crate::transport::CqId;
use crate::verbs::VerbsError;

impl Context {
    /// Makes protection domain `pd`, allocated by another context of the device, live
    /// here too (the ids in between, the other context's own, stay unallocated here).
    pub fn mirror_pd(&mut self, pd: PdId) {
        self.mem.mirror_pd(pd);
    }

    /// Registers region `mr` of another context of the device here under the same keys,
    /// address, PD and rights: the other context's registration (in place, as
    /// [`Context::reg_mr_raw`] makes one) is what this one names.
    ///
    /// EINVAL ([`crate::mem::RegError::KeyTaken`]) when a key is in use here already
    /// (keys of one device come from one context only, so this means a misuse).
    ///
    /// # Safety
    ///
    /// [`Context::reg_mr_raw`]'s contract for `mr.addr` and `mr.len`: the bytes stay
    /// valid for reads and writes until the mirror is deregistered here.
    #[allow(unsafe_code)]
    pub unsafe fn mirror_mr_raw(&mut self, mr: &Mr) -> Result<(), VerbsError> {
        // SAFETY: this function's contract is `Buffer::borrowed`'s.
        let data = unsafe { Buffer::borrowed(mr.addr as *mut u8, mr.len) }?;
        Ok(self.mem.register_buffer_as(mr, data)?)
    }

    /// Whether region `lkey` may be deregistered as far as this context knows: EBUSY while
    /// one of its QPs may still read or write the region ([`Context::dereg_mr`]'s rule),
    /// EINVAL for an unknown region. Asked of every context before any deregisters it.
    pub fn may_dereg_mr(&self, mr: &Mr) -> Result<(), VerbsError> {
        self.mem.may_deregister(mr.lkey)?;
        if self.region_in_use(mr.lkey) {
            let why = "a posted work request not yet completed has its buffer in it";
            return Err(crate::mem::RegError::RegionInUse(why).into());
        }
        Ok(())
    }

    /// Creates CQ `cq` of another context of the device here, with the same depth: ids up
    /// to it that this context does not have name nothing here. EINVAL when
    /// this context has a CQ of that id or a later one already.
    pub fn mirror_cq(&mut self, cq: CqId, depth: u32) -> Result<(), VerbsError> {
        let at = cq.0 as usize;
        if self.cqs.ids() > at {
            return Err(VerbsError::InvalidWr("the mirrored CQ's id is taken"));
        }
        let depth = Cq::round(depth).ok_or(VerbsError::InvalidWr("CQ depth 0 or above MAX_CQE"))?;
        self.cqs.skip_to(at);
        self.cqs.push(Cq::new(depth));
        Ok(())
    }

    /// Takes back CQ `cq`'s armed notification, if it is armed: another context's copy of
    /// the CQ fired it, and an arm gives one event (IBTA §11.4.2.2).
    pub fn disarm_cq(&mut self, cq: CqId) {
        if let Some(c) = self.cqs.get_mut(cq) {
            c.disarm();
        }
    }

    /// The depth a CQ of at least `cqe` entries gets ([`Context::create_cq`],
    /// [`Context::resize_cq`]); None for a `cqe` they refuse.
    pub fn cq_depth_for(cqe: u32) -> Option<u32> {
        Cq::round(cqe)
    }

    /// Completions waiting in CQ `cq` (0 for an unknown one).
    pub fn cq_held(&self, cq: CqId) -> usize {
        self.cqs.get(cq).map_or(0, |c| c.q.len())
    }

    /// Completions waiting in all of this context's CQs: what a poll of them could take
    /// (a count kept as they come and go: asked each time a shard lets go of its lock).
    pub fn completions_waiting(&self) -> usize {
        self.held
    }

    /// Counts a completion event of CQ `cq` that another context's copy produced and the
    /// program took, as [`Context::poll_cq_event`] counts its own: until
    /// [`Context::ack_cq_events`] acknowledges it, [`Context::cq_events_unacked`] has it.
    pub fn count_cq_event(&mut self, cq: CqId) {
        if let Some(c) = self.cqs.get_mut(cq) {
            c.unacked += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::net::{IpAddr, Ipv4Addr};
    use std::time::Instant;

    use super::*;
    use crate::endpoint::ContextConfig;
    use crate::mem::Access;

    fn ctx(seed: u64) -> Context {
        let cfg = ContextConfig {
            mac: [2, 0, 0, 0, 0, 1],
            ip: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)),
            seed,
            udp_sport_base: 0xc000,
            tos: 0,
        };
        Context::new(cfg, Instant::now())
    }

    /// A region registered in one context and mirrored into another has the same keys
    /// there, reaches the same bytes, and goes from both only when neither refuses.
    #[test]
    #[allow(unsafe_code)]
    fn a_mirrored_region_has_the_same_keys_and_bytes() {
        let (mut a, mut b) = (ctx(1), ctx(2));
        let _own_pd = a.alloc_pd();
        let pd = a.alloc_pd();
        b.mirror_pd(pd);
        let mut bytes = vec![7u8; 64];
        // SAFETY: `bytes` outlives both registrations (deregistered below) and is not
        // moved meanwhile.
        let mr = unsafe {
            a.reg_mr_raw(
                pd,
                bytes.as_mut_ptr(),
                64,
                Access::LOCAL_WRITE | Access::REMOTE_WRITE,
            )
        }
        .unwrap();
        // SAFETY: as above.
        unsafe { b.mirror_mr_raw(&mr) }.unwrap();
        assert_eq!(b.mem.mr(mr.lkey), Some(mr));
        assert!(b.mr_write(&mr, 3, &[1, 2]));
        let mut got = [0u8; 4];
        assert!(a.mr_read(&mr, 2, &mut got));
        assert_eq!(got, [7, 1, 2, 7]);
        // Its keys are taken in `b` now: a second mirror is refused.
        // SAFETY: as above.
        assert!(unsafe { b.mirror_mr_raw(&mr) }.is_err());
        for c in [&a, &b] {
            c.may_dereg_mr(&mr).unwrap();
        }
        assert_eq!(a.dereg_mr(&mr).unwrap(), None);
        assert_eq!(b.dereg_mr(&mr).unwrap(), None);
        assert!(b.may_dereg_mr(&mr).is_err());
    }

    /// A CQ mirrored under a later id than the mirror's own CQs gets that id, the ids
    /// before it naming nothing; one whose id is taken is refused.
    #[test]
    fn a_mirrored_cq_keeps_its_id() {
        let (mut a, mut b) = (ctx(1), ctx(2));
        a.create_cq(4).unwrap();
        let cq = a.create_cq(100).unwrap();
        b.mirror_cq(cq, 100).unwrap();
        assert_eq!(b.cq_depth(cq), a.cq_depth(cq));
        assert_eq!(
            b.cq_depth(CqId(0)),
            None,
            "the id skipped names nothing here"
        );
        assert!(b.mirror_cq(CqId(0), 4).is_err());
        b.count_cq_event(cq);
        assert_eq!(b.cq_events_unacked(cq), 1);
        b.req_notify_cq(cq, false).unwrap();
        b.disarm_cq(cq);
        assert!(b.poll_cq_event().is_none());
    }

    /// The count of completions waiting follows what the CQs take and what is polled,
    /// over every CQ; a full CQ's overrun is not counted.
    #[test]
    fn completions_waiting_counts_what_the_cqs_hold() {
        use crate::transport::{WcOpcode, WcStatus, WorkCompletion};
        let mut a = ctx(1);
        let (small, big) = (a.create_cq(1).unwrap(), a.create_cq(8).unwrap());
        let wc = WorkCompletion::send(0x11, 1, WcOpcode::Send, 8, WcStatus::Success);
        for cq in [small, small, big, big, big] {
            a.wcs.push((cq, wc));
        }
        a.route_completions();
        a.wcs.clear();
        // The second for `small` overran it (depth 1): 1 + 3 held.
        assert_eq!(a.completions_waiting(), 4);
        assert_eq!(a.cq_held(big), 3);
        assert_eq!(a.poll_cq(big, 2).len(), 2);
        let mut out = Vec::new();
        assert_eq!(a.poll_cq_into(small, 8, &mut out), 1);
        assert_eq!(a.completions_waiting(), 1);
    }
}
