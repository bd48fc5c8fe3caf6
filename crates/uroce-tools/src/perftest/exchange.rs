//! The TCP side of perftest's exchange: [`Oob`], lock-step messages of exact lengths with
//! the datapath running while they wait; the version and MTU encodings the first messages
//! carry; the keys exchanges of a run and the QP's connection, and `done` at the end.

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, TcpStream};
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};

use super::{Keys, Run, Verb};
use crate::link::peer_mac;
use uroce::verbs::{Mtu, Remote, RtrAttr, RtsAttr};

/// The version uroce announces: perftest 4.5's.
pub const VERSION: &str = "6.06";
/// Oldest peer version perftest itself accepts.
pub(super) const MIN_VERSION: f64 = 5.70;

/// `enum ibv_mtu` (1 = 256 ... 5 = 4096).
pub(super) fn mtu_enum(m: Mtu) -> u8 {
    match m {
        Mtu::M256 => 1,
        Mtu::M512 => 2,
        Mtu::M1024 => 3,
        Mtu::M2048 => 4,
        Mtu::M4096 => 5,
    }
}

pub(super) fn mtu_from_enum(e: u8) -> Option<Mtu> {
    Some(match e {
        1 => Mtu::M256,
        2 => Mtu::M512,
        3 => Mtu::M1024,
        4 => Mtu::M2048,
        5 => Mtu::M4096,
        _ => return None,
    })
}

/// The TCP side of the exchange.
pub(super) struct Oob {
    pub(super) tcp: TcpStream,
    pub(super) client: bool,
}

impl Oob {
    /// Reads exactly `n` bytes, running `poll` (the datapath) while none arrive, so the
    /// QP keeps answering the peer while we wait on it.
    pub(super) fn read(
        &mut self,
        n: usize,
        poll: &mut dyn FnMut() -> anyhow::Result<()>,
    ) -> anyhow::Result<Vec<u8>> {
        let mut buf = vec![0u8; n];
        let mut got = 0;
        self.tcp.set_nonblocking(true)?;
        while got < n {
            match self.tcp.read(&mut buf[got..]) {
                Ok(0) => bail!("the peer closed the exchange connection"),
                Ok(k) => got += k,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    if uroce::datapath::interrupted() {
                        bail!("interrupted");
                    }
                    poll()?;
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e).context("reading from the peer"),
            }
        }
        self.tcp.set_nonblocking(false)?;
        Ok(buf)
    }

    fn write(&mut self, b: &[u8]) -> anyhow::Result<()> {
        self.tcp.write_all(b).context("writing to the peer")
    }

    /// One lock-step exchange: the client writes first, the server reads first.
    pub(super) fn xchg(
        &mut self,
        mine: &[u8],
        poll: &mut dyn FnMut() -> anyhow::Result<()>,
    ) -> anyhow::Result<Vec<u8>> {
        if self.client {
            self.write(mine)?;
            self.read(mine.len(), poll)
        } else {
            let theirs = self.read(mine.len(), poll)?;
            self.write(mine)?;
            Ok(theirs)
        }
    }

    /// `done\0` each way; the peer may already have gone (perftest closes right after
    /// writing its own), so only our write must succeed.
    fn done(&mut self, poll: &mut dyn FnMut() -> anyhow::Result<()>) -> anyhow::Result<()> {
        let _ = self.write(b"done\0");
        let deadline = Instant::now() + Duration::from_secs(2);
        let mut idle = || {
            if Instant::now() > deadline {
                bail!("timeout");
            }
            poll()
        };
        let _ = self.read(5, &mut idle);
        Ok(())
    }
}

pub(super) fn sleep_poll() -> anyhow::Result<()> {
    std::thread::sleep(Duration::from_millis(1));
    Ok(())
}

impl Run {
    /// One keys exchange while the datapath keeps running.
    pub(super) fn keys(&mut self) -> anyhow::Result<Keys> {
        let mine = self.mine.to_wire();
        let Self { oob, ep, .. } = self;
        let mut poll = || {
            ep.poll(Duration::from_micros(200))
                .map(drop)
                .map_err(Into::into)
        };
        Keys::from_wire(&oob.xchg(&mine, &mut poll)?)
    }

    /// The first keys exchange, the connection of the QP, the rest of the pre-run keys.
    pub(super) fn handshake(&mut self, tcp_peer: Ipv4Addr) -> anyhow::Result<()> {
        self.rem = self.keys()?;
        let Some(peer) = self.rem.ipv4() else {
            bail!(
                "the peer's GID {} is not IPv4-mapped; uroce's is, and perftest refuses a mix (use an IPv4 RoCEv2 GID index, e.g. -x 1 with rxe)",
                std::net::Ipv6Addr::from(self.rem.gid)
            );
        };
        let peer = if peer.is_unspecified() {
            tcp_peer
        } else {
            peer
        };
        let my_mac = self.ep.ctx.config().mac;
        let remote = Remote {
            ip: IpAddr::V4(peer),
            mac: peer_mac(self.ep.backend_mut(), &self.iface, my_mac, self.local, peer)?,
        };
        self.ep.ctx.modify_qp_rtr(
            self.qp,
            RtrAttr {
                remote,
                dest_qpn: self.rem.qpn,
                rq_psn: self.rem.psn,
                path_mtu: self.mtu,
                max_dest_rd_atomic: self.mine.out_reads as u8,
                min_rnr_timer: 12,
            },
        )?;
        self.ep.ctx.modify_qp_rts(
            self.qp,
            RtsAttr {
                sq_psn: self.mine.psn,
                timeout: 14,
                retry_cnt: 7,
                rnr_retry: 7,
                max_rd_atomic: self.rem.out_reads.clamp(1, 16) as u8,
            },
        )?;
        let t = self.cfg.test;
        // Receives are up before the sync message that lets the peer send.
        let receiver = t.verb == Verb::Send && (t.latency || !self.oob.client);
        if receiver {
            let depth = self.cfg.iters.min(512);
            for i in 0..depth {
                self.post_recv(i)?;
            }
        }
        for _ in 1..t.keys_before() {
            let k = self.keys()?;
            if k.qpn != self.rem.qpn {
                bail!("the peer's keys changed during the exchange");
            }
        }
        Ok(())
    }

    pub(super) fn xchg_poll(&mut self, mine: &[u8]) -> anyhow::Result<Vec<u8>> {
        let Self { oob, ep, .. } = self;
        let mut poll = || {
            ep.poll(Duration::from_micros(200))
                .map(drop)
                .map_err(Into::into)
        };
        oob.xchg(mine, &mut poll)
    }

    pub(super) fn finish(&mut self) -> anyhow::Result<()> {
        let Self { oob, ep, .. } = self;
        let mut poll = || {
            ep.poll(Duration::from_micros(200))
                .map(drop)
                .map_err(Into::into)
        };
        oob.done(&mut poll)
    }
}
