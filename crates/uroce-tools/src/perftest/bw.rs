//! The bandwidth tests' data paths: `ib_write_bw`, `ib_read_bw`, `ib_atomic_bw` (the
//! client requests, the server's QP answers) and `ib_send_bw` (the server counts the
//! client's SENDs); the client's results cross to the server afterwards.

use std::time::{Duration, Instant};

use anyhow::bail;

use super::ops::step;
use super::{BwRow, Run, Verb};

impl Run {
    /// ib_write_bw / ib_read_bw / ib_atomic_bw.
    pub(super) fn rdma_bw(&mut self) -> anyhow::Result<()> {
        if self.oob.client {
            let (posted, completed) = self.requester_bw()?;
            let row = self.row(&posted, &completed, self.cfg.iters);
            self.bw_table(row);
            self.keys()?;
            for v in [
                row.bytes,
                row.iterations,
                row.bw_peak.to_bits(),
                row.bw_average.to_bits(),
                row.msg_rate_mpps.to_bits(),
            ] {
                self.xchg_poll(&v.to_be_bytes())?;
            }
        } else {
            // A perftest server has nothing to do on the data path: its QP answers. The
            // client's keys message says the run is over; then its results come.
            let before = self.ep.ctx.mr_bytes(&self.mr).to_vec();
            self.keys()?;
            let mut vals = [0u64; 5];
            for v in vals.iter_mut() {
                let b = self.xchg_poll(&[0u8; 8])?;
                *v = u64::from_be_bytes(b[..8].try_into().unwrap_or([0; 8]));
            }
            let row = BwRow {
                bytes: vals[0],
                iterations: vals[1],
                bw_peak: f64::from_bits(vals[2]),
                bw_average: f64::from_bits(vals[3]),
                msg_rate_mpps: f64::from_bits(vals[4]),
            };
            self.validate_target(&before, row.iterations)?;
            self.bw_table(row);
        }
        self.keys()?;
        self.finish()
    }

    /// Posts `iters` SEND / READ / WRITE / atomic operations, `tx_depth` in flight,
    /// cycling the addresses as perftest does; checks what comes back where it can.
    fn requester_bw(&mut self) -> anyhow::Result<(Vec<Instant>, Vec<Instant>)> {
        let iters = self.cfg.iters;
        let size = u64::from(self.cfg.size);
        let keep = iters <= 20_000;
        let mut posted = Vec::with_capacity(if keep { iters as usize } else { 1 });
        let mut completed = Vec::with_capacity(posted.capacity());
        let (mut next, mut done) = (0u64, 0u64);
        let depth = u64::from(self.cfg.tx_depth.max(1));
        // READ: every read of one remote slot must bring the same bytes. Atomics: per
        // slot, FETCH_AND_ADD returns 1 more each time, CMP_AND_SWAP 0/0 the same word.
        let slots = if size > self.cycle / 2 {
            1
        } else {
            self.cycle / step(size, self.cache_line)
        };
        let mut seen: Vec<Option<Vec<u8>>> = vec![None; slots as usize];
        let mut last_word: Vec<Option<u64>> = vec![None; slots as usize];
        let mut mismatches = 0u64;
        let mut wcs = Vec::with_capacity(64);
        let mut progress = Instant::now();
        while done < iters {
            self.stalled(&mut progress, done, iters)?;
            while next < iters && next - done < depth {
                let off = self.remote_offset(next, size);
                self.post(next, self.op_at(self.rem.vaddr + off), off)?;
                if keep {
                    posted.push(Instant::now());
                }
                next += 1;
            }
            self.poll()?;
            wcs.clear();
            self.ep.ctx.poll_cq_into(self.cq, 64, &mut wcs);
            for wc in &wcs {
                self.check_wc(wc)?;
                if keep {
                    completed.push(Instant::now());
                }
                done += 1;
                progress = Instant::now();
                let off = self.remote_offset(wc.wr_id, size) as usize;
                let slot = (off as u64 / step(size, self.cache_line)) as usize;
                let local = &self.ep.ctx.mr_bytes(&self.mr)[off..off + size as usize];
                match self.cfg.test.verb {
                    Verb::Read => match &seen[slot] {
                        Some(first) if first.as_slice() != local => mismatches += 1,
                        Some(_) => {}
                        None => seen[slot] = Some(local.to_vec()),
                    },
                    Verb::Atomic => {
                        let w = u64::from_le_bytes(local[..8].try_into().unwrap_or([0; 8]));
                        if let Some(prev) = last_word[slot] {
                            let want = if self.cfg.compare_swap {
                                if prev == 0 {
                                    0
                                } else {
                                    prev
                                }
                            } else {
                                prev.wrapping_add(1)
                            };
                            if w != want {
                                mismatches += 1;
                            }
                        }
                        last_word[slot] = Some(w);
                    }
                    _ => {}
                }
            }
        }
        match self.cfg.test.verb {
            Verb::Read if mismatches == 0 => self.out.validated.push(format!(
                "{iters} READs of each remote slot returned the same bytes"
            )),
            Verb::Atomic if mismatches == 0 => self.out.validated.push(format!(
                "{iters} atomics returned the sequence each remote word must show"
            )),
            Verb::Read | Verb::Atomic => bail!(
                "{mismatches} of {iters} responses did not match what the remote memory must hold"
            ),
            _ => {}
        }
        Ok((posted, completed))
    }

    /// ib_send_bw: the client sends `iters` messages; the server counts them.
    pub(super) fn send_bw(&mut self) -> anyhow::Result<()> {
        let iters = self.cfg.iters;
        if self.oob.client {
            let (posted, completed) = self.requester_bw()?;
            let row = self.row(&posted, &completed, iters);
            self.bw_table(row);
        } else {
            let mut posted_recv = iters.min(512);
            let (mut got, mut bad_len) = (0u64, 0u64);
            let mut first = None;
            let mut last = Instant::now();
            let mut wcs = Vec::with_capacity(64);
            let mut idle = Instant::now();
            while got < iters {
                self.poll()?;
                wcs.clear();
                self.ep.ctx.poll_cq_into(self.cq, 64, &mut wcs);
                for wc in &wcs {
                    self.check_wc(wc)?;
                    got += 1;
                    first.get_or_insert_with(Instant::now);
                    last = Instant::now();
                    idle = last;
                    if wc.byte_len != self.cfg.size {
                        bad_len += 1;
                    }
                    if posted_recv < iters {
                        self.post_recv(posted_recv)?;
                        posted_recv += 1;
                    }
                }
                if idle.elapsed() > Duration::from_secs(30) {
                    bail!("no SEND arrived for 30 s after {got} of {iters}");
                }
                if uroce::datapath::interrupted() {
                    bail!("interrupted");
                }
            }
            if bad_len > 0 {
                bail!(
                    "{bad_len} receives had a length other than {}",
                    self.cfg.size
                );
            }
            self.out.validated.push(format!(
                "{iters} receives of exactly {} bytes",
                self.cfg.size
            ));
            let secs = first.map_or(1e-9, |f| last.duration_since(f).as_secs_f64().max(1e-9));
            let (_, factor) = self.bw_unit();
            let row = BwRow {
                bytes: u64::from(self.cfg.size),
                iterations: iters,
                bw_peak: 0.0,
                bw_average: f64::from(self.cfg.size) * iters as f64 / secs / factor,
                msg_rate_mpps: iters as f64 / secs / 1e6,
            };
            self.bw_table(row);
        }
        self.keys()?;
        self.finish()
    }
}
