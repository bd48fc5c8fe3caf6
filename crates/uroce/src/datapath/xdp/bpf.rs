//! The XDP program that steers RoCEv2 (UDP destination port 4791, over IPv4 with or
//! without options, or IPv6) to the AF_XDP socket of the receive queue, and passes every
//! other frame to the kernel. Hand-assembled eBPF, loaded with the `bpf` system call and
//! attached through a BPF link, which detaches it when the process exits (even on a
//! crash). No clang, no libbpf.

use std::io;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};

const BPF_MAP_CREATE: i64 = 0;
const BPF_MAP_UPDATE_ELEM: i64 = 2;
const BPF_PROG_LOAD: i64 = 5;
const BPF_LINK_CREATE: i64 = 28;
const BPF_MAP_TYPE_XSKMAP: u32 = 17;
const BPF_PROG_TYPE_XDP: u32 = 6;
const BPF_XDP: u32 = 37;
/// The program may see multi-buffer frames (needed for 4 KiB MTU on veth).
const BPF_F_XDP_HAS_FRAGS: u32 = 1 << 5;
/// Attach in native (driver) mode.
pub const XDP_FLAGS_DRV_MODE: u32 = 1 << 2;
/// Attach in generic (skb) mode.
pub const XDP_FLAGS_SKB_MODE: u32 = 1 << 1;

fn bpf(cmd: i64, attr: &mut [u8; 128]) -> io::Result<i64> {
    // SAFETY: `attr` is a zero-padded bpf_attr of 128 bytes, longer than any command
    // used here reads; pointers inside it refer to buffers that outlive the call.
    let r = unsafe { libc::syscall(libc::SYS_bpf, cmd, attr.as_mut_ptr(), attr.len() as u32) };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

fn put32(a: &mut [u8; 128], at: usize, v: u32) {
    a[at..at + 4].copy_from_slice(&v.to_ne_bytes());
}

fn put64(a: &mut [u8; 128], at: usize, v: u64) {
    a[at..at + 8].copy_from_slice(&v.to_ne_bytes());
}

fn fd(r: i64) -> OwnedFd {
    // SAFETY: the kernel just returned this descriptor to us and nothing else owns it.
    unsafe { OwnedFd::from_raw_fd(r as RawFd) }
}

/// An XSKMAP with `entries` slots (one per receive queue).
pub fn create_xskmap(entries: u32) -> io::Result<OwnedFd> {
    let mut a = [0u8; 128];
    put32(&mut a, 0, BPF_MAP_TYPE_XSKMAP);
    put32(&mut a, 4, 4);
    put32(&mut a, 8, 4);
    put32(&mut a, 12, entries);
    a[28..28 + 10].copy_from_slice(b"uroce_xsks");
    bpf(BPF_MAP_CREATE, &mut a).map(fd)
}

/// Puts socket `xsk` into `map` at `queue`.
pub fn map_set(map: RawFd, queue: u32, xsk: RawFd) -> io::Result<()> {
    let key = queue;
    let value = xsk as u32;
    let mut a = [0u8; 128];
    put32(&mut a, 0, map as u32);
    put64(&mut a, 8, &key as *const u32 as u64);
    put64(&mut a, 16, &value as *const u32 as u64);
    bpf(BPF_MAP_UPDATE_ELEM, &mut a).map(|_| ())
}

/// One eBPF instruction.
fn ins(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> u64 {
    u64::from(code)
        | (u64::from(dst & 0xf) << 8)
        | (u64::from(src & 0xf) << 12)
        | (u64::from(off as u16) << 16)
        | (u64::from(imm as u32) << 32)
}

const LDX_W: u8 = 0x61;
const LDX_H: u8 = 0x69;
const LDX_B: u8 = 0x71;
const MOV_K: u8 = 0xb7;
const MOV_X: u8 = 0xbf;
const ADD_K: u8 = 0x07;
const ADD_X: u8 = 0x0f;
const AND_K: u8 = 0x57;
const LSH_K: u8 = 0x67;
const JGT_X: u8 = 0x2d;
const JEQ_K: u8 = 0x15;
const JNE_K: u8 = 0x55;
const JA: u8 = 0x05;
const CALL: u8 = 0x85;
const EXIT: u8 = 0x95;
const LD_IMM64: u8 = 0x18;
const JLT32_K: u8 = 0xa6;
const XDP_DROP: i32 = 1;
const XDP_PASS: i32 = 2;
const BPF_FUNC_GET_PRANDOM_U32: i32 = 7;
const BPF_FUNC_REDIRECT_MAP: i32 = 51;

/// What the program does with a RoCEv2 frame.
#[derive(Debug, Clone, Copy)]
pub enum OnRoce {
    /// Redirect it to the AF_XDP socket in this XSKMAP slot of its receive queue.
    Steer(RawFd),
    /// Drop it when a random 32-bit number is below this threshold (a lossy link for
    /// tests, where `tc netem` is not available); pass it otherwise.
    Drop(u32),
}

/// One line of the program: an instruction, a jump to a label, or a label.
enum Asm {
    I(u64),
    /// A conditional or unconditional jump: (code, dst, src, imm, label).
    J(u8, u8, u8, i32, &'static str),
    L(&'static str),
}

/// Resolves labels into relative jump offsets.
fn assemble(lines: &[Asm]) -> Vec<u64> {
    let mut at = std::collections::HashMap::new();
    let mut n = 0usize;
    for l in lines {
        match l {
            Asm::L(name) => {
                at.insert(*name, n);
            }
            Asm::I(i) => n += if (*i as u8) == LD_IMM64 { 2 } else { 1 },
            Asm::J(..) => n += 1,
        }
    }
    let mut out = Vec::with_capacity(n);
    for l in lines {
        match l {
            Asm::L(_) => {}
            Asm::I(i) => {
                out.push(*i);
                if (*i as u8) == LD_IMM64 {
                    out.push(0);
                }
            }
            Asm::J(code, dst, src, imm, label) => {
                let target = at.get(label).copied().unwrap_or(out.len() + 1);
                let off = target as i64 - out.len() as i64 - 1;
                out.push(ins(*code, *dst, *src, off as i16, *imm));
            }
        }
    }
    out
}

/// The program: find RoCEv2 frames, then `on_roce` (the XSKMAP's descriptor or the drop
/// threshold patched in).
fn program(on_roce: OnRoce) -> Vec<u64> {
    use Asm::{I, J, L};
    let act = match on_roce {
        // bpf_redirect_map(xskmap, ctx->rx_queue_index, XDP_PASS if the slot is empty)
        OnRoce::Steer(map) => vec![
            I(ins(LD_IMM64, 1, 1, 0, map)),
            I(ins(LDX_W, 2, 6, 16, 0)),
            I(ins(MOV_K, 3, 0, 0, XDP_PASS)),
            I(ins(CALL, 0, 0, 0, BPF_FUNC_REDIRECT_MAP)),
            I(ins(EXIT, 0, 0, 0, 0)),
        ],
        // drop when bpf_get_prandom_u32() < threshold (unsigned, 32-bit compare)
        OnRoce::Drop(threshold) => vec![
            I(ins(CALL, 0, 0, 0, BPF_FUNC_GET_PRANDOM_U32)),
            J(JLT32_K, 0, 0, threshold as i32, "drop"),
            I(ins(MOV_K, 0, 0, 0, XDP_PASS)),
            I(ins(EXIT, 0, 0, 0, 0)),
            L("drop"),
            I(ins(MOV_K, 0, 0, 0, XDP_DROP)),
            I(ins(EXIT, 0, 0, 0, 0)),
        ],
    };
    let mut lines = vec![
        I(ins(MOV_X, 6, 1, 0, 0)), // r6 = ctx
        I(ins(LDX_W, 2, 6, 0, 0)), // r2 = data
        I(ins(LDX_W, 3, 6, 4, 0)), // r3 = data_end
        I(ins(MOV_X, 4, 2, 0, 0)),
        I(ins(ADD_K, 4, 0, 0, 14)),
        J(JGT_X, 4, 3, 0, "pass"),  // no full Ethernet header
        I(ins(LDX_H, 5, 2, 12, 0)), // ethertype, big-endian bytes read little-endian
        J(JEQ_K, 5, 0, 0xdd86, "ipv6"),
        J(JNE_K, 5, 0, 0x0008, "pass"),
        // IPv4: fixed header present, protocol UDP, UDP after IHL*4 bytes (options allowed)
        I(ins(MOV_X, 4, 2, 0, 0)),
        I(ins(ADD_K, 4, 0, 0, 34)),
        J(JGT_X, 4, 3, 0, "pass"),
        I(ins(LDX_B, 5, 2, 23, 0)),
        J(JNE_K, 5, 0, 17, "pass"),
        I(ins(LDX_B, 5, 2, 14, 0)),
        I(ins(AND_K, 5, 0, 0, 0x0f)),
        I(ins(LSH_K, 5, 0, 0, 2)),
        I(ins(MOV_X, 4, 2, 0, 0)),
        I(ins(ADD_X, 4, 5, 0, 0)),
        I(ins(ADD_K, 4, 0, 0, 14)),
        J(JA, 0, 0, 0, "udp"),
        // IPv6: fixed header, next header UDP
        L("ipv6"),
        I(ins(MOV_X, 4, 2, 0, 0)),
        I(ins(ADD_K, 4, 0, 0, 54)),
        J(JGT_X, 4, 3, 0, "pass"),
        I(ins(LDX_B, 5, 2, 20, 0)),
        J(JNE_K, 5, 0, 17, "pass"),
        // r4 = UDP header: 8 bytes present, destination port 4791
        L("udp"),
        I(ins(MOV_X, 7, 4, 0, 0)),
        I(ins(ADD_K, 7, 0, 0, 8)),
        J(JGT_X, 7, 3, 0, "pass"),
        I(ins(LDX_H, 5, 4, 2, 0)),
        J(JNE_K, 5, 0, 0xb712, "pass"),
    ];
    lines.extend(act);
    lines.extend([
        L("pass"),
        I(ins(MOV_K, 0, 0, 0, XDP_PASS)),
        I(ins(EXIT, 0, 0, 0, 0)),
    ]);
    assemble(&lines)
}

/// Loads the program; `frags` for multi-buffer frames. The verifier log comes back in
/// the error when it refuses.
pub fn load(on_roce: OnRoce, frags: bool) -> io::Result<OwnedFd> {
    let insns = program(on_roce);
    let license = b"GPL\0";
    let mut log = vec![0u8; 64 * 1024];
    let mut a = [0u8; 128];
    put32(&mut a, 0, BPF_PROG_TYPE_XDP);
    put32(&mut a, 4, insns.len() as u32);
    put64(&mut a, 8, insns.as_ptr() as u64);
    put64(&mut a, 16, license.as_ptr() as u64);
    put32(&mut a, 24, 1);
    put32(&mut a, 28, log.len() as u32);
    put64(&mut a, 32, log.as_mut_ptr() as u64);
    put32(&mut a, 44, if frags { BPF_F_XDP_HAS_FRAGS } else { 0 });
    a[48..48 + 11].copy_from_slice(b"uroce_steer");
    put32(&mut a, 68, BPF_XDP);
    bpf(BPF_PROG_LOAD, &mut a).map(fd).map_err(|e| {
        let end = log.iter().position(|&b| b == 0).unwrap_or(0);
        let text = String::from_utf8_lossy(&log[..end]);
        io::Error::new(e.kind(), format!("BPF_PROG_LOAD: {e}; verifier: {text}"))
    })
}

/// Attaches `prog` to interface `ifindex` with a BPF link (`flags`: driver or skb mode).
pub fn attach(prog: RawFd, ifindex: u32, flags: u32) -> io::Result<OwnedFd> {
    let mut a = [0u8; 128];
    put32(&mut a, 0, prog as u32);
    put32(&mut a, 4, ifindex);
    put32(&mut a, 8, BPF_XDP);
    put32(&mut a, 12, flags);
    bpf(BPF_LINK_CREATE, &mut a).map(fd)
}
