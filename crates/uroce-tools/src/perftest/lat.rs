//! The latency tests' data paths: `ib_write_lat` (a counter ping-pongs in the last byte of
//! each WRITE), `ib_read_lat` / `ib_atomic_lat` (one operation at a time) and
//! `ib_send_lat` (SEND ping-pong).

use std::time::{Duration, Instant};

use anyhow::bail;

use super::{Run, Verb};
use uroce::verbs::SendOp;

impl Run {
    /// ib_write_lat: a counter ping-pongs in the last byte of each WRITE, the server
    /// first; each side waits for the counter it expects in its own buffer.
    pub(super) fn write_lat(&mut self) -> anyhow::Result<()> {
        let iters = self.cfg.iters;
        let size = self.cfg.size as usize;
        let server = !self.oob.client;
        let watch = self.half as usize + size - 1;
        let mut stamps = Vec::with_capacity(iters as usize);
        let mut stash = Vec::new();
        let (mut scnt, mut rcnt) = (0u64, 0u64);
        while scnt < iters {
            if !(scnt == 0 && server) {
                rcnt += 1;
                let want = rcnt as u8;
                let deadline = Instant::now() + Duration::from_secs(30);
                while self.ep.ctx.mr_bytes(&self.mr)[watch] != want {
                    self.poll()?;
                    if Instant::now() > deadline || uroce::datapath::interrupted() {
                        bail!("counter {want} never arrived (after {scnt} sent)");
                    }
                }
            }
            scnt += 1;
            self.ep.ctx.mr_bytes_mut(&self.mr)[size - 1] = scnt as u8;
            stamps.push(Instant::now());
            self.post(scnt, self.op_at(self.rem.vaddr), 0)?;
            self.wait_wc(false, &mut stash)?;
        }
        // The server also takes the client's last counter.
        if server {
            rcnt += 1;
            let want = rcnt as u8;
            let deadline = Instant::now() + Duration::from_secs(30);
            while self.ep.ctx.mr_bytes(&self.mr)[watch] != want {
                self.poll()?;
                if Instant::now() > deadline {
                    bail!("last counter {want} never arrived");
                }
            }
        }
        self.out.validated.push(format!(
            "all {iters} counters arrived in order in the last byte"
        ));
        self.lat_table(&stamps, 2.0);
        // No closing exchange in ib_write_lat: keep acknowledging until the peer leaves.
        let Self { oob, ep, .. } = self;
        let deadline = Instant::now() + Duration::from_secs(2);
        let mut poll = || {
            if Instant::now() > deadline {
                bail!("linger over");
            }
            ep.poll(Duration::from_micros(200))
                .map(drop)
                .map_err(Into::into)
        };
        let _ = oob.read(1, &mut poll);
        Ok(())
    }

    /// ib_read_lat / ib_atomic_lat: the client runs one operation at a time; the server
    /// waits for the closing exchange, answering meanwhile.
    pub(super) fn read_atomic_lat(&mut self) -> anyhow::Result<()> {
        if !self.oob.client {
            let before = self.ep.ctx.mr_bytes(&self.mr).to_vec();
            self.keys()?;
            if self.cfg.test.verb == Verb::Read {
                self.validate_target(&before, 0)?;
            }
            return self.finish();
        }
        let iters = self.cfg.iters;
        let mut stamps = Vec::with_capacity(iters as usize);
        let mut stash = Vec::new();
        // The previous response and this one, reused (no allocation per operation).
        let (mut prev, mut got) = (Vec::new(), Vec::new());
        let mut bad = 0u64;
        for i in 0..iters {
            stamps.push(Instant::now());
            self.post(i, self.op_at(self.rem.vaddr), 0)?;
            self.wait_wc(false, &mut stash)?;
            got.clear();
            got.extend_from_slice(&self.ep.ctx.mr_bytes(&self.mr)[..self.cfg.size as usize]);
            if i > 0 {
                let ok = match self.cfg.test.verb {
                    Verb::Read => prev == got,
                    _ if self.cfg.compare_swap => true,
                    _ => {
                        let w = |b: &[u8]| u64::from_le_bytes(b[..8].try_into().unwrap_or([0; 8]));
                        w(&got) == w(&prev).wrapping_add(1)
                    }
                };
                if !ok {
                    bad += 1;
                }
            }
            std::mem::swap(&mut prev, &mut got);
        }
        if bad > 0 {
            bail!("{bad} of {iters} responses broke the expected sequence");
        }
        self.out.validated.push(format!(
            "{iters} responses showed what the remote word or bytes must hold"
        ));
        self.lat_table(&stamps, 1.0);
        self.keys()?;
        self.finish()
    }

    /// ib_send_lat: SEND ping-pong, the client first.
    pub(super) fn send_lat(&mut self) -> anyhow::Result<()> {
        let iters = self.cfg.iters;
        let client = self.oob.client;
        let depth = iters.min(512);
        let mut stamps = Vec::with_capacity(iters as usize);
        let mut stash = Vec::new();
        let (mut scnt, mut rcnt) = (0u64, 0u64);
        while scnt < iters || rcnt < iters {
            if rcnt < iters && !(scnt == 0 && client) {
                let wc = self.wait_wc(true, &mut stash)?;
                if wc.byte_len != self.cfg.size {
                    bail!("a SEND of {} bytes, not {}", wc.byte_len, self.cfg.size);
                }
                rcnt += 1;
                if rcnt + depth <= iters {
                    self.post_recv(rcnt + depth)?;
                }
            }
            if scnt < iters {
                scnt += 1;
                stamps.push(Instant::now());
                self.post(scnt, SendOp::Send, 0)?;
                self.wait_wc(false, &mut stash)?;
            }
        }
        self.out.validated.push(format!(
            "{iters} SENDs received, each of {} bytes",
            self.cfg.size
        ));
        self.lat_table(&stamps, 2.0);
        self.keys()?;
        self.finish()
    }
}
