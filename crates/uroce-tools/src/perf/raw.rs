//! `uroce perf raw`: the datapath's ceiling, no transport. The client sends one real RC
//! WRITE frame again and again through the backend alone; the server counts what arrives
//! and sends the count back when the client says stop.

use std::io::Write;
use std::net::{IpAddr, TcpStream};
use std::time::{Duration, Instant};

use anyhow::Context as _;

use serde::{Deserialize, Serialize};

use super::exchange::{peer_stopped, read_json, send_json, Hello};
use super::setup::Setup;
use super::{Meter, PerfConfig, PerfResult};
use uroce::verbs::{SendOp, SendWr, Sge};

/// What the raw sink counted, sent back to the client at the end.
#[derive(Debug, Serialize, Deserialize)]
struct RawCount {
    frames: u64,
    bytes: u64,
}

/// Server side of `raw`: counts frames until the client says stop, then tells it.
pub(super) fn raw_sink(s: &mut Setup, tcp: &TcpStream, peer: IpAddr) -> anyhow::Result<String> {
    tcp.set_nonblocking(true)?;
    let mut count = RawCount {
        frames: 0,
        bytes: 0,
    };
    let mut rounds = 0u32;
    loop {
        let backend = s.ep.backend_mut();
        backend.receive(Duration::from_millis(1), 256, &mut |f| {
            count.frames += 1;
            count.bytes += f.len() as u64;
        })?;
        rounds += 1;
        if (rounds % 64 == 0 || count.frames == 0) && peer_stopped(tcp) {
            break;
        }
        if uroce::datapath::interrupted() {
            break;
        }
    }
    // Frames still in flight when the client stopped.
    let quiet = Instant::now() + Duration::from_millis(20);
    while Instant::now() < quiet {
        s.ep.backend_mut()
            .receive(Duration::from_millis(1), 256, &mut |f| {
                count.frames += 1;
                count.bytes += f.len() as u64;
            })?;
    }
    tcp.set_nonblocking(false)?;
    send_json(tcp, &count)?;
    Ok(format!(
        "counted {} raw frames ({} bytes) from {peer} over {}",
        count.frames, count.bytes, s.datapath
    ))
}

/// Client side of `raw`: one real RC WRITE packet carrying a full path MTU of payload is
/// built once, then sent again and again through the backend alone.
pub(super) fn raw_source(
    s: &mut Setup,
    cfg: &PerfConfig,
    theirs: &Hello,
    tcp: &TcpStream,
    progress: &mut dyn FnMut(&str),
) -> anyhow::Result<PerfResult> {
    let payload = cfg.mtu.bytes();
    let (qp, mr) = (s.qps[0], s.mr);
    s.ep.ctx.post_send(
        qp,
        SendWr {
            wr_id: 0,
            op: SendOp::Write {
                remote_addr: theirs.addr,
                rkey: theirs.rkey,
            },
            sge: Sge {
                addr: mr.addr,
                length: payload.min(mr.len as u32),
                lkey: mr.lkey,
            },
            signaled: false,
            solicited: false,
        },
    )?;
    let mut template = vec![0u8; uroce::datapath::MAX_FRAME];
    let n =
        s.ep.ctx
            .poll_frame(Instant::now(), &mut template)
            .context("the context built no frame")?;
    template.truncate(n);
    let backend = s.ep.backend_mut();
    let mut meter = Meter::start();
    let mut sent = 0u64;
    let mut copy = |buf: &mut [u8]| {
        buf[..template.len()].copy_from_slice(&template);
        Some(template.len())
    };
    // Whole frames as built: the backend alone, no transport.
    while meter.secs() < cfg.duration.as_secs_f64() && !uroce::datapath::interrupted() {
        for _ in 0..64 {
            match backend.send_frame_with(&mut copy) {
                Ok(true) => sent += 1,
                Ok(false) => {}
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) => return Err(e.into()),
            }
        }
        backend.flush()?;
        meter.tick(sent, 0, " sent", progress);
    }
    let secs = meter.secs();
    backend.flush()?;
    writeln!(&mut &*tcp, "stop")?;
    let count: RawCount = read_json(tcp, "count from the server")?;
    Ok(PerfResult {
        frames_sent: Some(sent),
        frames_received: Some(count.frames),
        ..PerfResult::measured("raw", payload, count.frames, secs, s.datapath.clone())
    })
}
