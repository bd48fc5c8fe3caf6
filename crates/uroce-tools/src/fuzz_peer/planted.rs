//! A fault planted on purpose, for the tests of `uroce fuzz-peer`: with the environment
//! variable `UROCE_PLANTED_FAULT` set, the datapath of `uroce perf` and the perftest mode
//! is wrapped so that the first received frame whose BTH opcode is the one named
//! (`0x1e`) stops it answering anything from then on (`hang:0x1e`, the default), or
//! panics the process (`panic:0x1e`). A responder that hangs or dies on one chosen
//! frame is what the fuzzer's liveness oracle and shrinking must find. Unset, nothing is
//! wrapped.

use std::io;
use std::time::Duration;

use uroce::datapath::{Backend, Received, Transmit};

/// The environment variable.
pub const ENV: &str = "UROCE_PLANTED_FAULT";

/// What the fault does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Stop taking frames (the peer goes silent).
    Hang,
    /// Panic.
    Panic,
}

/// `[hang:|panic:]OPCODE` (hex with 0x, or decimal).
pub fn parse(s: &str) -> Option<(Fault, u8)> {
    let (f, op) = match s.split_once(':') {
        Some(("hang", op)) => (Fault::Hang, op),
        Some(("panic", op)) => (Fault::Panic, op),
        Some(_) => return None,
        None => (Fault::Hang, s),
    };
    let op = match op.strip_prefix("0x") {
        Some(h) => u8::from_str_radix(h, 16).ok()?,
        None => op.parse().ok()?,
    };
    Some((f, op))
}

/// A backend that trips on one opcode.
pub struct Planted<B> {
    inner: B,
    fault: Fault,
    opcode: u8,
    tripped: bool,
}

/// `b`, wrapped when the environment asks for a planted fault.
pub fn wrap_from_env(b: crate::backend::Boxed) -> crate::backend::Boxed {
    match std::env::var(ENV).ok().as_deref().and_then(parse) {
        Some((fault, opcode)) => Box::new(Planted {
            inner: b,
            fault,
            opcode,
            tripped: false,
        }),
        None => b,
    }
}

/// The BTH opcode of a received packet, when it is UDP to 4791.
fn opcode_of(r: &Received<'_>) -> Option<u8> {
    match r {
        Received::Datagram { roce, .. } => roce.first().copied(),
        Received::Frame(f) => {
            let ip = 14;
            let udp = match u16::from_be_bytes([*f.get(12)?, *f.get(13)?]) {
                0x0800 => ip + usize::from(f.get(ip)? & 0x0f) * 4,
                0x86dd => ip + 40,
                _ => return None,
            };
            let port = u16::from_be_bytes([*f.get(udp + 2)?, *f.get(udp + 3)?]);
            (port == 4791).then(|| f.get(udp + 8).copied()).flatten()
        }
    }
}

impl<B: Backend> Backend for Planted<B> {
    fn send_with(
        &mut self,
        build: &mut dyn FnMut(&mut [u8]) -> Option<Transmit>,
    ) -> io::Result<bool> {
        self.inner.send_with(build)
    }
    fn send_frame_with(
        &mut self,
        build: &mut dyn FnMut(&mut [u8]) -> Option<usize>,
    ) -> io::Result<bool> {
        self.inner.send_frame_with(build)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
    fn claim_qpns(&mut self, count: u32) -> io::Result<Option<(u32, u32)>> {
        self.inner.claim_qpns(count)
    }
    fn needs_link_addresses(&self) -> bool {
        self.inner.needs_link_addresses()
    }
    fn serves_link_local(&self) -> bool {
        self.inner.serves_link_local()
    }
    fn receive(
        &mut self,
        timeout: Duration,
        max: usize,
        handle: &mut dyn FnMut(Received<'_>),
    ) -> io::Result<usize> {
        let (fault, opcode) = (self.fault, self.opcode);
        let tripped = &mut self.tripped;
        self.inner.receive(timeout, max, &mut |r| {
            if !*tripped && opcode_of(&r) == Some(opcode) {
                if fault == Fault::Panic {
                    panic!("planted fault: a frame with opcode {opcode:#04x}");
                }
                *tripped = true;
            }
            if !*tripped {
                handle(r);
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_fault() {
        assert_eq!(parse("0x1e"), Some((Fault::Hang, 0x1e)));
        assert_eq!(parse("panic:30"), Some((Fault::Panic, 30)));
        assert_eq!(parse("boom:1"), None);
        assert_eq!(parse("0xzz"), None);
    }
}
