//! Memory regions over the application's own memory (`Context::reg_mr_raw`), as ibverbs
//! registers them (`ibv_reg_mr`: the NIC reads and writes the process's memory in place,
//! iova = addr): RDMA WRITE, SEND and RDMA READ move bytes between the test's own buffers
//! with nothing copied out or back, read through the test's own pointers after the
//! calls; deregistration under a posted work request is refused with EBUSY until the
//! request completes; a deregistered region's rkey never grants access again (the
//! responder NAKs Remote Access Error, as rdma_rxe's `check_rkey` does for a key it does
//! not find).
//!
//! Every buffer here is a `Vec<u8>` the test keeps, reached only through
//! `Vec::as_mut_ptr` while registered (the aliasing rule of `reg_mr_raw`'s contract).

mod common;
use common::*;

use uroce::mem::PdId;

/// A buffer the test owns and registers in place.
struct Mine {
    bytes: Vec<u8>,
}

impl Mine {
    fn new(len: usize, fill: impl Fn(usize) -> u8) -> Self {
        Self {
            bytes: (0..len).map(fill).collect(),
        }
    }

    fn ptr(&mut self) -> *mut u8 {
        self.bytes.as_mut_ptr()
    }

    /// Registers it in place on `c`'s PD 0.
    fn register(&mut self, c: &mut Context, access: Access) -> Mr {
        let (p, len) = (self.ptr(), self.bytes.len());
        // SAFETY: `self.bytes` outlives the context it is registered with (every test
        // drops the pair first, or deregisters), never moves or reallocates, and is
        // reached only through `as_mut_ptr` while registered, between calls.
        unsafe { c.reg_mr_raw(PdId(0), p, len, access) }.unwrap()
    }

    /// `len` bytes at `off`, read through the test's own pointer, between calls.
    fn read(&mut self, off: usize, len: usize) -> Vec<u8> {
        assert!(off + len <= self.bytes.len());
        // SAFETY: inside the buffer; no call into a context runs, and the slice is
        // copied out at once.
        unsafe { std::slice::from_raw_parts(self.ptr().add(off), len) }.to_vec()
    }

    /// Writes `data` at `off` through the test's own pointer, between calls.
    fn write(&mut self, off: usize, data: &[u8]) {
        assert!(off + data.len() <= self.bytes.len());
        // SAFETY: inside the buffer; no call into a context runs.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), self.ptr().add(off), data.len()) }
    }
}

fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

fn sge(mr: &Mr, off: u64, len: u32) -> Sge {
    Sge {
        addr: mr.addr + off,
        length: len,
        lkey: mr.lkey,
    }
}

fn post(p: &mut Pair, wr_id: u64, op: SendOp, sge: Sge) {
    p.a.post_send(p.qa, wr(wr_id, op, sge, true)).unwrap();
}

/// An RDMA WRITE of three packets (1 KiB MTU) from A's buffer lands in B's buffer at the
/// offset the RETH names, in place: the region's address is B's pointer (iova = addr).
#[test]
fn rdma_write_goes_from_and_lands_in_the_callers_buffers() {
    let mut src = Mine::new(4096, |_| 0);
    let mut dst = Mine::new(8192, |_| 0xee);
    let mut p = Pair::new(RtsAttr::default(), all());
    let smr = src.register(&mut p.a, Access::LOCAL_WRITE);
    let dmr = dst.register(&mut p.b, Access::LOCAL_WRITE | Access::REMOTE_WRITE);
    assert_eq!(smr.addr, src.ptr() as u64);
    assert_eq!(dmr.addr, dst.ptr() as u64);
    let data = pattern(3, 3000);
    src.write(100, &data);
    let op = SendOp::Write {
        remote_addr: dmr.addr + 1000,
        rkey: dmr.rkey,
    };
    post(&mut p, 1, op, sge(&smr, 100, 3000));
    p.run(|_, _| 1, 10);
    assert_eq!(
        p.sent(true, Opcode::RcWriteMiddle).len(),
        1,
        "three packets"
    );
    let wc = p.wcs_a();
    assert_eq!((wc.len(), wc[0].status), (1, WcStatus::Success), "{wc:?}");
    assert_eq!(dst.read(1000, 3000), data);
    assert_eq!(dst.read(0, 1000), vec![0xee; 1000], "nothing before");
    assert_eq!(dst.read(4000, 4192), vec![0xee; 4192], "nothing after");
    drop(p);
}

/// A SEND from A's buffer is placed in the receive B posted in its own buffer.
#[test]
fn send_lands_in_the_posted_receive_in_place() {
    let mut src = Mine::new(4096, |_| 0);
    let mut rbuf = Mine::new(4096, |_| 0);
    let mut p = Pair::new(RtsAttr::default(), all());
    let smr = src.register(&mut p.a, Access::NONE);
    let rmr = rbuf.register(&mut p.b, Access::LOCAL_WRITE);
    let rwr = RecvWr {
        wr_id: 7,
        sge: sge(&rmr, 512, 2048),
    };
    p.b.post_recv(p.qb, rwr).unwrap();
    let data = pattern(9, 1500);
    src.write(0, &data);
    post(&mut p, 1, SendOp::Send, sge(&smr, 0, 1500));
    p.run(|_, _| 1, 10);
    let wb = p.wcs_b();
    assert_eq!(
        (wb.len(), wb[0].status, wb[0].byte_len),
        (1, WcStatus::Success, 1500)
    );
    assert_eq!(wb[0].wr_id, 7);
    assert_eq!(rbuf.read(512, 1500), data);
    assert_eq!(rbuf.read(0, 512), vec![0; 512]);
    assert_eq!(p.wcs_a()[0].status, WcStatus::Success);
    drop(p);
}

/// An RDMA READ takes B's bytes from B's own buffer and puts them into A's own buffer.
#[test]
fn rdma_read_comes_from_and_lands_in_the_callers_buffers() {
    let mut theirs = Mine::new(8192, |i| (i % 251) as u8);
    let mut ours = Mine::new(4096, |_| 0);
    let mut p = Pair::new(RtsAttr::default(), all());
    let tmr = theirs.register(&mut p.b, Access::REMOTE_READ);
    let omr = ours.register(&mut p.a, Access::LOCAL_WRITE);
    let fresh = pattern(5, 2500);
    theirs.write(3000, &fresh); // B changes its memory between calls: READ sees it
    let op = SendOp::Read {
        remote_addr: tmr.addr + 3000,
        rkey: tmr.rkey,
    };
    post(&mut p, 1, op, sge(&omr, 8, 2500));
    p.run(|_, _| 1, 10);
    let wc = p.wcs_a();
    assert_eq!((wc.len(), wc[0].status), (1, WcStatus::Success), "{wc:?}");
    assert_eq!(ours.read(8, 2500), fresh);
    assert_eq!(ours.read(0, 8), vec![0; 8]);
    assert_eq!(ours.read(2508, 100), vec![0; 100]);
    drop(p);
}

/// The kernel's `ib_dereg_mr` (EBUSY while the region is in use; IBTA §10.6.7.2.6 for
/// memory windows, as rdma_rxe's `rxe_dereg_mr` cites it):
/// a region that a posted, not yet completed send refers to cannot be deregistered (a
/// SEND whose ACK has not come back, sent or not); the refusal leaves the region fully
/// usable, and once the requests complete the same call succeeds. (A receive waiting on
/// the receive queue does not pin its region: `rc_regressions`.)
#[test]
fn dereg_under_a_posted_work_request_is_ebusy_until_it_completes() {
    let mut src = Mine::new(4096, |_| 0);
    let mut rbuf = Mine::new(4096, |_| 0);
    let mut p = Pair::new(RtsAttr::default(), all());
    let smr = src.register(&mut p.a, Access::NONE);
    let rmr = rbuf.register(&mut p.b, Access::LOCAL_WRITE);
    for wr_id in 0..2 {
        let rwr = RecvWr {
            wr_id,
            sge: sge(&rmr, wr_id * 2048, 2048),
        };
        p.b.post_recv(p.qb, rwr).unwrap();
    }
    let busy = |r: Result<Option<Vec<u8>>, uroce::verbs::VerbsError>| {
        let e = r.unwrap_err();
        assert_eq!(e.errno(), libc::EBUSY, "{e}");
    };
    src.write(0, &pattern(1, 100));
    post(&mut p, 1, SendOp::Send, sge(&smr, 0, 100));
    busy(p.a.dereg_mr(&smr));
    // The SEND goes out and lands, but B's ACK is lost: A's request is not complete.
    p.run(|s, _| usize::from(s.from_a), 0);
    assert_eq!(p.sent(true, Opcode::RcSendOnly).len(), 1);
    assert!(p.wcs_a().is_empty(), "no ACK, no completion");
    busy(p.a.dereg_mr(&smr));
    let wb = p.wcs_b();
    assert_eq!((wb.len(), wb[0].status), (1, WcStatus::Success));
    // Still fully usable: a second SEND from the same region into the same one.
    src.write(100, &pattern(2, 100));
    post(&mut p, 2, SendOp::Send, sge(&smr, 100, 100));
    p.run(|_, _| 1, 10); // B's ACK of SEND 2 acknowledges SEND 1 too (cumulative)
    let wa = p.wcs_a();
    assert_eq!(wa.iter().map(|c| c.wr_id).collect::<Vec<_>>(), [1, 2]);
    assert!(wa.iter().all(|c| c.status == WcStatus::Success), "{wa:?}");
    assert_eq!(p.wcs_b()[0].status, WcStatus::Success);
    assert_eq!(p.a.dereg_mr(&smr), Ok(None), "the memory is the caller's");
    assert_eq!(p.b.dereg_mr(&rmr), Ok(None));
    assert_eq!(rbuf.read(0, 100), pattern(1, 100));
    assert_eq!(rbuf.read(2048, 100), pattern(2, 100));
    drop(p);
}

/// An RC receive taken off the receive queue by the FIRST packet of a SEND, and being
/// filled, still refers to its region: EBUSY until the message completes.
#[test]
fn dereg_under_a_receive_being_filled_is_ebusy() {
    let mut rbuf = Mine::new(4096, |_| 0);
    let mut p = Pair::new(RtsAttr::default(), all());
    let rmr = rbuf.register(&mut p.b, Access::LOCAL_WRITE);
    let rwr = RecvWr {
        wr_id: 3,
        sge: sge(&rmr, 0, 4096),
    };
    p.b.post_recv(p.qb, rwr).unwrap();
    let la = p.la;
    post(&mut p, 1, SendOp::Send, sge(&la, 0, 3000)); // FIRST MIDDLE LAST
    p.run(|s, _| usize::from(s.opcode() == Opcode::RcSendFirst), 0);
    assert_eq!(
        p.sent(true, Opcode::RcSendLast).len(),
        1,
        "all sent, two lost"
    );
    assert!(p.wcs_b().is_empty());
    let e = p.b.dereg_mr(&rmr).unwrap_err();
    assert_eq!(e.errno(), libc::EBUSY, "{e}");
    p.run(|_, _| 1, 10); // A's retransmission timer resends MIDDLE and LAST
    let wb = p.wcs_b();
    assert_eq!((wb[0].wr_id, wb[0].byte_len), (3, 3000), "{wb:?}");
    assert_eq!(p.b.dereg_mr(&rmr), Ok(None));
    assert_eq!(rbuf.read(0, 3000), p.a.mr_bytes(&la)[..3000].to_vec());
    drop(p);
}

/// A receive waiting on the receive queue does not pin the program's region: it is
/// deregistered (and its memory re-registered as a new region, as ibv_rereg_mr with a new
/// translation does), and the receive then fails when a SEND takes it, never writing to
/// the memory (LOC_QP_OP_ERR; the SEND is REM_OP_ERR at the sender). A receive behind it,
/// into the new region, is flushed with the QP.
#[test]
fn dereg_under_a_waiting_receive_fails_it_when_used() {
    let mut rbuf = Mine::new(4096, |_| 0x5a);
    let mut p = Pair::new(RtsAttr::default(), all());
    let old = rbuf.register(&mut p.b, Access::LOCAL_WRITE);
    let rwr = RecvWr {
        wr_id: 4,
        sge: sge(&old, 0, 4096),
    };
    p.b.post_recv(p.qb, rwr).unwrap();
    assert_eq!(p.b.dereg_mr(&old), Ok(None));
    let new = rbuf.register(&mut p.b, Access::LOCAL_WRITE);
    assert_ne!(new.lkey, old.lkey);
    let rwr = RecvWr {
        wr_id: 5,
        sge: sge(&new, 0, 4096),
    };
    p.b.post_recv(p.qb, rwr).unwrap();
    let la = p.la;
    post(&mut p, 1, SendOp::Send, sge(&la, 0, 3000)); // FIRST MIDDLE LAST
    p.run(|_, _| 1, 10);
    let wa = p.wcs_a();
    assert_eq!(
        (wa[0].wr_id, wa[0].status),
        (1, WcStatus::RemOpErr),
        "{wa:?}"
    );
    let wb: Vec<_> = p.wcs_b().iter().map(|w| (w.wr_id, w.status)).collect();
    assert_eq!(
        wb,
        [(4, WcStatus::LocQpOpErr), (5, WcStatus::WrFlushErr)],
        "the old key fails at use"
    );
    assert_eq!(rbuf.read(0, 4096), vec![0x5a; 4096], "nothing written");
    assert_eq!(p.b.dereg_mr(&new), Ok(None));
    drop(p);
}

/// READ responses the responder has queued and not sent yet read from the region: EBUSY
/// until they are out. (Were it let go, the responses would have nothing to carry; a
/// region deregistered under them must never send the peer other bytes, or zeros, as its
/// READ's data.)
#[test]
fn dereg_under_queued_read_responses_is_ebusy() {
    let mut p = Pair::new(RtsAttr::default(), all());
    for (i, b) in p.b.mr_bytes_mut(&p.rb)[..4096].iter_mut().enumerate() {
        *b = (i % 253) as u8 | 1;
    }
    let la = p.la;
    let read = SendOp::Read {
        remote_addr: p.rb.addr,
        rkey: p.rb.rkey,
    };
    post(&mut p, 1, read, sge(&la, 0, 4096)); // 4 responses at MTU 1024
    let mut buf = vec![0u8; 5000];
    let n = p.a.poll_frame(p.now, &mut buf).unwrap();
    p.b.handle_frame(p.now, &buf[..n]).unwrap(); // B queues the responses
    let rb = p.rb;
    let e = p.b.dereg_mr(&rb).unwrap_err();
    assert_eq!(e.errno(), libc::EBUSY, "{e}");
    p.run(|_, _| 1, 10);
    let wa = p.wcs_a();
    assert_eq!((wa[0].wr_id, wa[0].status), (1, WcStatus::Success));
    let got = p.a.mr_bytes(&la)[..4096].to_vec();
    assert_eq!(got, p.b.mr_bytes(&rb)[..4096].to_vec());
    assert!(
        p.b.dereg_mr(&rb).is_ok(),
        "every response sent: the region may go"
    );
}

/// `ibv_dereg_mr` of a region that is not registered: EINVAL, not a panic; the owned
/// form hands its bytes back once, and only once.
#[test]
fn dereg_of_an_unknown_region_is_einval() {
    let mut p = Pair::new(RtsAttr::default(), all());
    let la = p.la;
    assert_eq!(p.a.dereg_mr(&la).unwrap().map(|v| v.len()), Some(1 << 17));
    let e = p.a.dereg_mr(&la).unwrap_err();
    assert_eq!(e.errno(), libc::EINVAL, "{e}");
}

/// rdma_rxe's `check_rkey` (an rkey with no region: NAK Remote Access Error, the QP to
/// ERR): once B deregisters its region,
/// the rkey A holds grants nothing: a WRITE or READ naming it is NAKed Remote Access
/// Error on the wire, completes REM_ACCESS_ERR at A, and B's memory is not touched (a
/// later region of B gets another rkey, and the old one still fails against it).
#[test]
fn a_deregistered_rkey_never_grants_access_again() {
    for read in [false, true] {
        let mut src = Mine::new(1024, |_| 0x11);
        let mut theirs = Mine::new(1024, |_| 0x22);
        let mut p = Pair::new(RtsAttr::default(), all());
        let smr = src.register(&mut p.a, Access::LOCAL_WRITE);
        let access = Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ;
        let old = theirs.register(&mut p.b, access);
        let op = |mr: &Mr| {
            if read {
                SendOp::Read {
                    remote_addr: mr.addr,
                    rkey: old.rkey,
                }
            } else {
                SendOp::Write {
                    remote_addr: mr.addr,
                    rkey: old.rkey,
                }
            }
        };
        post(&mut p, 1, op(&old), sge(&smr, 0, 64));
        p.run(|_, _| 1, 10);
        assert_eq!(
            p.wcs_a()[0].status,
            WcStatus::Success,
            "granted while registered"
        );
        assert_eq!(p.b.dereg_mr(&old), Ok(None));
        src.write(0, &[0x33; 64]);
        theirs.write(0, &[0x44; 64]);
        let new = theirs.register(&mut p.b, access);
        assert_eq!(new.addr, old.addr, "the same memory again");
        assert_ne!(new.rkey, old.rkey, "under another rkey");
        post(&mut p, 2, op(&new), sge(&smr, 0, 64));
        p.log.clear();
        p.run(|_, _| 1, 10);
        let naks: Vec<_> = p
            .log
            .iter()
            .filter(|s| {
                !s.from_a && s.syndrome() == Some(Syndrome::Nak(NakCode::RemoteAccessError))
            })
            .collect();
        assert_eq!(
            naks.len(),
            1,
            "read={read}: NAK Remote Access Error on the wire"
        );
        let wc = p.wcs_a();
        assert_eq!(wc[0].wr_id, 2);
        assert_eq!(wc[0].status, WcStatus::RemAccessErr, "read={read}: {wc:?}");
        assert_eq!(theirs.read(0, 64), vec![0x44; 64], "B's memory untouched");
        assert_eq!(src.read(0, 64), vec![0x33; 64], "A's buffer untouched");
        drop(p);
    }
}

/// A region deregistered in the middle of a peer's multi-packet RDMA WRITE (nothing of
/// B's own refers to it, so `dereg_mr` succeeds): the packets after it are NAKed Remote
/// Access Error and write nothing; what the FIRST packet wrote before stays. (rdma_rxe
/// holds a reference on the MR from the FIRST packet and goes on writing; uroce may not:
/// once `dereg_mr` succeeds, memory registered in place is the application's alone.)
#[test]
fn a_region_deregistered_under_a_peers_write_takes_no_more_of_it() {
    let mut theirs = Mine::new(4096, |_| 0x22);
    let mut p = Pair::new(RtsAttr::default(), all());
    let access = Access::LOCAL_WRITE | Access::REMOTE_WRITE;
    let tmr = theirs.register(&mut p.b, access);
    let la = p.la;
    p.a.mr_bytes_mut(&la)[..3000].fill(0x55);
    let op = SendOp::Write {
        remote_addr: tmr.addr,
        rkey: tmr.rkey,
    };
    post(&mut p, 1, op, sge(&la, 0, 3000)); // FIRST MIDDLE LAST
    p.run(|s, _| usize::from(s.opcode() == Opcode::RcWriteFirst), 0);
    assert_eq!(p.b.dereg_mr(&tmr), Ok(None));
    p.log.clear();
    p.run(|_, _| 1, 10); // A's retransmission timer resends from the FIRST
    let nak = Some(Syndrome::Nak(NakCode::RemoteAccessError));
    assert_eq!(
        p.log
            .iter()
            .filter(|s| !s.from_a && s.syndrome() == nak)
            .count(),
        1
    );
    let wc = p.wcs_a();
    assert_eq!(wc[0].status, WcStatus::RemAccessErr, "{wc:?}");
    assert_eq!(theirs.read(0, 1024), vec![0x55; 1024], "the FIRST, before");
    assert_eq!(theirs.read(1024, 3072), vec![0x22; 3072], "nothing after");
    drop(p);
}

/// ibv_reg_mr's refusals for memory in place, from the kernel's `ib_umem_get`: length 0
/// (EINVAL), a null address (EFAULT), a range wrapping around the address space
/// (EINVAL).
#[test]
fn reg_mr_raw_refusals() {
    let (mut c, _, _) = ctx(1);
    let mut mine = vec![0u8; 16];
    let p = mine.as_mut_ptr();
    // SAFETY: every call is refused before anything is registered.
    let errno = |r: Result<Mr, uroce::verbs::VerbsError>| r.unwrap_err().errno();
    unsafe {
        assert_eq!(
            errno(c.reg_mr_raw(PdId(0), p, 0, Access::NONE)),
            libc::EINVAL
        );
        let null = std::ptr::null_mut();
        assert_eq!(
            errno(c.reg_mr_raw(PdId(0), null, 16, Access::NONE)),
            libc::EFAULT
        );
        let wraps = usize::MAX - 8;
        assert_eq!(
            errno(c.reg_mr_raw(PdId(0), p, wraps, Access::NONE)),
            libc::EINVAL
        );
        let no_local = Access::REMOTE_WRITE;
        assert_eq!(errno(c.reg_mr_raw(PdId(0), p, 16, no_local)), libc::EINVAL);
    }
}

/// IBV_ATOMIC_GLOB: a thread of the program adds to one word of its registered memory
/// with its own atomics (`AtomicU64::from_ptr`, as C's `__atomic_fetch_add`) while the
/// peer's FETCH_ADDs land on the same word; at the end the word is exactly the sum of
/// both sides' adds and every FETCH_ADD saw a different original value. A FETCH_ADD at
/// an address that is not 8-byte aligned is NAKed Invalid Request (IBTA §9.4.5; rdma_rxe's
/// misaligned-atomic error) and changes nothing. (The C version, over the drop-in
/// library, is uroce-verbs' `tests/atomic_glob.rs`.)
#[test]
fn remote_fetch_adds_and_a_local_thread_on_one_word_lose_nothing() {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::sync::Arc;
    const N: u64 = 3200;
    const BATCH: u64 = 16;
    let mut words = vec![0u64; 4];
    let w = words.as_mut_ptr();
    let rts = RtsAttr {
        max_rd_atomic: 4,
        ..RtsAttr::default()
    };
    let mut p = Pair::new(rts, all());
    let access = Access::LOCAL_WRITE | Access::REMOTE_ATOMIC;
    // SAFETY: `words` outlives the registration (deregistered below before it is read
    // through the `Vec`), never moves, and is reached only through `w` meanwhile: by
    // the stack, and by the thread's atomics on its first word.
    let mr = unsafe { p.b.reg_mr_raw(PdId(0), w.cast(), 32, access) }.unwrap();
    let done = Arc::new(AtomicBool::new(false));
    let (word, stop) = (w as usize, Arc::clone(&done));
    let local = std::thread::spawn(move || {
        // SAFETY: an aligned `u64` of `words`, alive until after the join, accessed
        // only atomically by this thread and by the stack while the thread runs.
        let cell = unsafe { AtomicU64::from_ptr(word as *mut u64) };
        let mut n = 0u64;
        while !stop.load(Ordering::Acquire) {
            cell.fetch_add(1 << 32, Ordering::SeqCst);
            n += 1;
        }
        n
    });
    // SAFETY: as for the thread's: an aligned word of `words`, accessed atomically.
    let mine = unsafe { AtomicU64::from_ptr(w.cast::<u64>()) };
    while mine.load(Ordering::SeqCst) == 0 {
        std::hint::spin_loop(); // until the thread runs, so that the two sides overlap
    }
    let la = p.la;
    let mut seen = Vec::with_capacity(N as usize);
    for batch in 0..N / BATCH {
        for i in 0..BATCH {
            let op = SendOp::FetchAdd {
                remote_addr: mr.addr,
                rkey: mr.rkey,
                add: 1,
            };
            let wr_id = batch * BATCH + i;
            post(&mut p, wr_id, op, sge(&la, i * 8, 8));
        }
        p.run(|_, _| 1, 10);
        let wcs = p.wcs_a();
        assert_eq!(wcs.len() as u64, BATCH);
        assert!(wcs.iter().all(|c| c.status == WcStatus::Success), "{wcs:?}");
        let results = &p.a.mr_bytes(&p.la)[..8 * BATCH as usize];
        seen.extend(
            results
                .chunks(8)
                .map(|c| u64::from_ne_bytes(c.try_into().unwrap())),
        );
    }
    done.store(true, Ordering::Release);
    let local_adds = local.join().unwrap();
    // Remote adds are in the low half, local ones in the high half: each FETCH_ADD saw
    // as many remote adds before it as were posted before it.
    for (i, v) in seen.iter().enumerate() {
        assert_eq!(v & 0xffff_ffff, i as u64, "FETCH_ADD {i} saw {v:#x}");
    }
    let mut distinct = seen.clone();
    distinct.sort_unstable();
    distinct.dedup();
    assert_eq!(distinct.len(), seen.len(), "every original value once");
    // A misaligned FETCH_ADD: NAK Invalid Request, nothing changed.
    let op = SendOp::FetchAdd {
        remote_addr: mr.addr + 4,
        rkey: mr.rkey,
        add: 1,
    };
    post(&mut p, 9999, op, sge(&la, 0, 8));
    p.log.clear();
    p.run(|_, _| 1, 10);
    assert_eq!(p.wcs_a()[0].status, WcStatus::RemInvReqErr);
    assert!(p
        .log
        .iter()
        .any(|s| s.syndrome() == Some(Syndrome::Nak(NakCode::InvalidRequest))));
    drop(p);
    assert_eq!(words[0], local_adds << 32 | N, "no add of either side lost");
    assert_eq!(words[1..], [0, 0, 0]);
}

/// Moves everything `from` has to send to `to` through `poll_transmit_in_place`, each
/// datagram made whole as a backend that cannot send from a gather list would make it
/// (`uroce::datapath::gather`), and hands it over; returns, per datagram, its opcode and
/// whether its payload was left in place (and how long it was).
fn move_in_place(
    from: &mut Context,
    to: &mut Context,
    now: Instant,
) -> Vec<(Opcode, Option<usize>)> {
    let mut buf = vec![0u8; 5000];
    let mut seen = vec![];
    // SAFETY: each datagram is made whole below before `from` is called again.
    while let Some(mut t) = unsafe { from.poll_transmit_in_place(now, &mut buf) } {
        if let Some(p) = t.in_place {
            // The buffer holds the headers, then the pad (under 4 bytes) and the ICRC.
            let pad = t.len - p.len() - p.at() - wire::ICRC_LEN;
            assert!(pad < 4 && (p.len() + pad) % 4 == 0, "{t:?}");
        }
        let in_place = t.in_place.map(|p| p.len());
        // SAFETY: `from` built it just now and has not been called since.
        assert!(unsafe { uroce::datapath::gather(&mut t, &mut buf) });
        assert_eq!(t.in_place, None);
        let op = Opcode::from_u8(buf[0]).unwrap();
        seen.push((op, in_place));
        let r = uroce::endpoint::Received::Datagram {
            datagram: &t.datagram,
            roce: &buf[..t.len],
        };
        to.handle_received(now, r).unwrap();
    }
    seen
}

/// A payload left in place (`poll_transmit_in_place`, what the UDP backend sends from a
/// gather list) makes the same datagram as the copy: an RC WRITE's packets of at least
/// `IN_PLACE_MIN` bytes carry their payload by address, the ICRC covering the bytes where
/// they lie (pad included, for a length not a multiple of 4), and once made whole the peer
/// takes them (its ICRC check passes: a wrong ICRC would be dropped and counted) and the
/// bytes land. A short last packet, a small SEND and B's READ responses (the responder
/// program's bytes, which it may change while they go) are copied as before.
#[test]
fn payloads_left_in_place_make_the_same_datagrams() {
    let mut src = Mine::new(8192, |_| 0);
    let mut dst = Mine::new(8192, |_| 0xee);
    let mut theirs = Mine::new(8192, |i| (i % 253) as u8);
    let mut p = Pair::custom(
        RtsAttr::default(),
        all(),
        A_PSN,
        InitAttr::default(),
        4,
        Mtu::M2048,
    );
    let smr = src.register(&mut p.a, Access::LOCAL_WRITE);
    let dmr = dst.register(&mut p.b, Access::LOCAL_WRITE | Access::REMOTE_WRITE);
    let tmr = theirs.register(&mut p.b, Access::REMOTE_READ);
    let data = pattern(7, 5000);
    src.write(10, &data);
    let write = |off: u64| SendOp::Write {
        remote_addr: dmr.addr + off,
        rkey: dmr.rkey,
    };
    post(&mut p, 1, write(100), sge(&smr, 10, 5000));
    let now = p.now;
    let sent = move_in_place(&mut p.a, &mut p.b, now);
    assert_eq!(
        sent,
        [
            (Opcode::RcWriteFirst, Some(2048)),
            (Opcode::RcWriteMiddle, Some(2048)),
            (Opcode::RcWriteLast, None), // 904 bytes: copied
        ]
    );
    // 1030 bytes: one packet in place, with 2 bytes of pad behind it in the buffer.
    post(&mut p, 2, write(6000), sge(&smr, 5100, 1030));
    let sent = move_in_place(&mut p.a, &mut p.b, now);
    assert_eq!(sent, [(Opcode::RcWriteOnly, Some(1030))]);
    move_in_place(&mut p.b, &mut p.a, now); // the ACKs
    let wc = p.wcs_a();
    assert_eq!(wc.len(), 2, "{wc:?}");
    assert!(wc.iter().all(|w| w.status == WcStatus::Success), "{wc:?}");
    assert_eq!(dst.read(100, 5000), data);
    assert_eq!(dst.read(0, 100), vec![0xee; 100]);
    assert_eq!(dst.read(6000, 1030), src.read(5100, 1030));

    // B's READ responses are copied from B's region.
    let op = SendOp::Read {
        remote_addr: tmr.addr + 5,
        rkey: tmr.rkey,
    };
    post(&mut p, 3, op, sge(&smr, 4096, 2048));
    move_in_place(&mut p.a, &mut p.b, now);
    let answers = move_in_place(&mut p.b, &mut p.a, now);
    assert_eq!(answers, [(Opcode::RcReadResponseOnly, None)]);
    let wc = p.wcs_a();
    assert_eq!((wc.len(), wc[0].status), (1, WcStatus::Success), "{wc:?}");
    assert_eq!(src.read(4096, 2048), theirs.read(5, 2048));

    // A small SEND is copied.
    let rmr = p.recv;
    p.b.post_recv(
        p.qb,
        RecvWr {
            wr_id: 9,
            sge: sge(&rmr, 0, 256),
        },
    )
    .unwrap();
    post(&mut p, 4, SendOp::Send, sge(&smr, 0, 200));
    assert_eq!(
        move_in_place(&mut p.a, &mut p.b, now),
        [(Opcode::RcSendOnly, None)]
    );
    assert_eq!(p.a.counters().rx_bad_icrc + p.b.counters().rx_bad_icrc, 0);
    drop(p);
}
