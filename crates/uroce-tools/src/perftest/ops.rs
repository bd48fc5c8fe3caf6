//! One operation the perftest way, shared by the bandwidth and latency tests: perftest's
//! cycle buffer (the step between messages, each message's offset), posting, polling and
//! checking completions, and what a responder can check of its own memory afterwards.

use std::time::{Duration, Instant};

use anyhow::{anyhow, bail};

use super::{Run, Verb};
use uroce::verbs::{RecvWr, SendOp, SendWr, Sge, WcStatus};

fn round_up(x: u64, to: u64) -> u64 {
    x.div_ceil(to) * to
}

/// perftest's INC(): the step between messages in the cycle buffer.
pub(super) fn step(size: u64, cache_line: u64) -> u64 {
    if size > cache_line {
        round_up(size, cache_line)
    } else {
        cache_line
    }
}

impl Run {
    /// Runs the datapath once (busy in latency tests).
    pub(super) fn poll(&mut self) -> anyhow::Result<()> {
        let wait = if self.cfg.test.latency {
            Duration::ZERO
        } else {
            Duration::from_micros(200)
        };
        self.ep.poll(wait).map(drop).map_err(Into::into)
    }

    pub(super) fn post_recv(&mut self, i: u64) -> anyhow::Result<()> {
        let size = u64::from(self.cfg.size);
        let at = self.remote_offset(i, size);
        let sge = Sge {
            addr: self.mr.addr + self.half + at,
            length: self.cfg.size,
            lkey: self.mr.lkey,
        };
        self.ep
            .ctx
            .post_recv(self.qp, RecvWr { wr_id: i, sge })
            .map_err(Into::into)
    }

    /// Offset of message `k` inside a half buffer (perftest's cycle buffer rule).
    pub(super) fn remote_offset(&self, k: u64, size: u64) -> u64 {
        if self.cfg.test.latency || size > self.cycle / 2 {
            return 0;
        }
        let inc = step(size, self.cache_line);
        (k % (self.cycle / inc)) * inc
    }

    pub(super) fn check_wc(&self, wc: &uroce::verbs::WorkCompletion) -> anyhow::Result<()> {
        if wc.status == WcStatus::Success {
            Ok(())
        } else {
            Err(anyhow!(
                "completion with error: wr_id {} status {} ({})",
                wc.wr_id,
                wc.status.name(),
                self.cfg.test.tool()
            ))
        }
    }

    /// Fails a run that was interrupted or has completed nothing for 30 s (a peer that
    /// stopped answering, or one run with fewer iterations that stopped posting
    /// receives: RNR retries are unlimited, as perftest sets them).
    pub(super) fn stalled(&self, last: &mut Instant, done: u64, iters: u64) -> anyhow::Result<()> {
        if uroce::datapath::interrupted() {
            bail!("interrupted after {done} of {iters}");
        }
        if last.elapsed() > Duration::from_secs(30) {
            bail!(
                "no completion for 30 s after {done} of {iters} (does the peer run the same -n?)"
            );
        }
        Ok(())
    }

    /// What a responder can check of its own memory after a bandwidth run by a perftest
    /// client: READs leave it unchanged; FETCH_AND_ADD of 1 adds `iters` over the slots;
    /// CMP_AND_SWAP 0/0 leaves non-zero words alone. WRITEs bring random bytes: nothing.
    pub(super) fn validate_target(&mut self, before: &[u8], iters: u64) -> anyhow::Result<()> {
        let now = self.ep.ctx.mr_bytes(&self.mr);
        let h = self.half as usize;
        match self.cfg.test.verb {
            Verb::Read => {
                if now != before {
                    bail!("RDMA READs changed the responder's memory");
                }
                self.out
                    .validated
                    .push("memory read by the peer is unchanged".into());
            }
            Verb::Atomic => {
                let word = |b: &[u8], at: usize| {
                    u64::from_le_bytes(b[h + at..h + at + 8].try_into().unwrap_or([0; 8]))
                };
                let mut added = 0u64;
                for k in 0..(self.cycle / step(8, self.cache_line)) as usize {
                    let at = k * step(8, self.cache_line) as usize;
                    added = added.wrapping_add(word(now, at).wrapping_sub(word(before, at)));
                }
                // The atomic type does not cross the wire: CMP_AND_SWAP 0/0 leaves the
                // (non-zero) words alone, FETCH_AND_ADD adds one per operation; with -D
                // the client reports the iterations it sampled, fewer than it ran.
                if added != 0 && added < iters {
                    bail!(
                        "the atomics added {added} over the target words: neither 0 (CMP_AND_SWAP) nor at least {iters} (FETCH_AND_ADD)"
                    );
                }
                self.out.validated.push(if added == 0 {
                    format!("target words unchanged by {iters} CMP_AND_SWAP 0/0")
                } else {
                    format!("target words grew by {added} over {iters} reported FETCH_AND_ADDs")
                });
            }
            _ => {}
        }
        Ok(())
    }

    /// The test's operation on the peer's buffer at `remote_addr`.
    pub(super) fn op_at(&self, remote_addr: u64) -> SendOp {
        let rkey = self.rem.rkey;
        match self.cfg.test.verb {
            Verb::Write => SendOp::Write { remote_addr, rkey },
            Verb::Read => SendOp::Read { remote_addr, rkey },
            Verb::Atomic if self.cfg.compare_swap => SendOp::CompareSwap {
                remote_addr,
                rkey,
                compare: 0,
                swap: 0,
            },
            Verb::Atomic => SendOp::FetchAdd {
                remote_addr,
                rkey,
                add: 1,
            },
            Verb::Send => SendOp::Send,
        }
    }

    /// Posts one signaled `op` of `-s` bytes from offset `off` of the local buffer.
    pub(super) fn post(&mut self, wr_id: u64, op: SendOp, off: u64) -> anyhow::Result<()> {
        let sge = Sge {
            addr: self.mr.addr + off,
            length: self.cfg.size,
            lkey: self.mr.lkey,
        };
        let wr = SendWr {
            wr_id,
            op,
            sge,
            signaled: true,
            solicited: false,
        };
        self.ep.ctx.post_send(self.qp, wr).map_err(Into::into)
    }

    /// Waits for one completion of the given kind (send side or receive side).
    pub(super) fn wait_wc(
        &mut self,
        recv: bool,
        stash: &mut Vec<uroce::verbs::WorkCompletion>,
    ) -> anyhow::Result<uroce::verbs::WorkCompletion> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(i) = stash
                .iter()
                .position(|w| (w.opcode == uroce::verbs::WcOpcode::Recv) == recv)
            {
                let wc = stash.remove(i);
                self.check_wc(&wc)?;
                return Ok(wc);
            }
            self.poll()?;
            self.ep.ctx.poll_cq_into(self.cq, 16, stash);
            if Instant::now() > deadline || uroce::datapath::interrupted() {
                bail!(
                    "the peer stopped answering ({})",
                    if recv {
                        "no SEND arrived"
                    } else {
                        "no completion"
                    }
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use uroce::verbs::Mtu;

    #[test]
    fn cycle_buffer_offsets_follow_perftest() {
        assert_eq!(step(8, 64), 64);
        assert_eq!(step(100, 64), 128);
        assert_eq!(step(4096, 64), 4096);
        assert_eq!(Mtu::fitting(1500), Some(Mtu::M1024));
        assert_eq!(Mtu::fitting(9000), Some(Mtu::M4096));
        assert_eq!(Mtu::fitting(2200), Some(Mtu::M2048));
        assert_eq!(Mtu::fitting(300), None);
    }
}
