//! The AF_XDP backend: an XDP program steers UDP/4791 to AF_XDP sockets (one per receive
//! queue), everything else goes on to the kernel. Frames are read from and written to a
//! UMEM shared with the kernel through fill / RX / TX / completion rings.
//!
//! Copy mode with NEED_WAKEUP (veth has no zero-copy); zero-copy is tried first where the
//! driver has it. Multi-buffer (XDP_USE_SG) carries frames larger than one 4 KiB UMEM
//! chunk, so a 4096-byte path MTU works (the interface MTU must allow 4154-byte frames).

mod bpf;
mod ring;

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::Duration;

use super::Backend;
use ring::{Ring, Umem};

const AF_XDP: i32 = 44;
const SOL_XDP: i32 = 283;
const XDP_MMAP_OFFSETS: i32 = 1;
const XDP_RX_RING: i32 = 2;
const XDP_TX_RING: i32 = 3;
const XDP_UMEM_REG: i32 = 4;
const XDP_UMEM_FILL_RING: i32 = 5;
const XDP_UMEM_COMPLETION_RING: i32 = 6;
const XDP_COPY: u16 = 1 << 1;
const XDP_ZEROCOPY: u16 = 1 << 2;
const XDP_USE_NEED_WAKEUP: u16 = 1 << 3;
const XDP_USE_SG: u16 = 1 << 4;
const XDP_PKT_CONTD: u32 = 1;

/// Frames in the UMEM, each one 4 KiB chunk; half for receive, half for send.
const FRAMES: u32 = 4096;
const CHUNK: u32 = 4096;
const RING: u32 = 2048;

/// How the socket ended up bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct XdpMode {
    /// The program runs in the driver (native), not in the generic skb path.
    pub native: bool,
    /// Zero-copy bind (else copy mode).
    pub zero_copy: bool,
    /// Multi-buffer frames (XDP_USE_SG).
    pub multi_buffer: bool,
}

struct Socket {
    fd: OwnedFd,
    umem: Umem,
    fill: Ring,
    comp: Ring,
    rx: Ring,
    tx: Ring,
    free_tx: Vec<u64>,
}

/// AF_XDP on one interface.
pub struct XdpBackend {
    socks: Vec<Socket>,
    _link: OwnedFd,
    _prog: OwnedFd,
    _map: OwnedFd,
    mode: XdpMode,
    next_rx: usize,
    /// Share of received frames dropped on purpose (seeded), to test recovery where
    /// `tc netem` is not available.
    drop: f64,
    rng: crate::sim::Rng,
}

fn sockopt<T>(fd: i32, name: i32, v: &T) -> io::Result<()> {
    // SAFETY: `v` is a live value of the size passed.
    let r = unsafe {
        libc::setsockopt(
            fd,
            SOL_XDP,
            name,
            (v as *const T).cast(),
            std::mem::size_of::<T>() as u32,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

#[repr(C)]
#[derive(Default)]
struct RingOffset {
    producer: u64,
    consumer: u64,
    desc: u64,
    flags: u64,
}

#[repr(C)]
#[derive(Default)]
struct MmapOffsets {
    rx: RingOffset,
    tx: RingOffset,
    fr: RingOffset,
    cr: RingOffset,
}

#[repr(C)]
struct UmemReg {
    addr: u64,
    len: u64,
    chunk_size: u32,
    headroom: u32,
    flags: u32,
    tx_metadata_len: u32,
}

#[repr(C)]
struct SockaddrXdp {
    family: u16,
    flags: u16,
    ifindex: u32,
    queue_id: u32,
    shared_umem_fd: u32,
}

fn open_socket(ifindex: u32, queue: u32, sg: bool) -> io::Result<(Socket, bool)> {
    // SAFETY: plain socket call; the descriptor is owned at once.
    let raw = unsafe { libc::socket(AF_XDP, libc::SOCK_RAW, 0) };
    if raw < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `raw` is a fresh descriptor nobody else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    let umem = Umem::new(FRAMES as usize * CHUNK as usize)?;
    let reg = UmemReg {
        addr: umem.addr() as u64,
        len: umem.len() as u64,
        chunk_size: CHUNK,
        headroom: 0,
        flags: 0,
        tx_metadata_len: 0,
    };
    sockopt(raw, XDP_UMEM_REG, &reg)?;
    for name in [
        XDP_UMEM_FILL_RING,
        XDP_UMEM_COMPLETION_RING,
        XDP_RX_RING,
        XDP_TX_RING,
    ] {
        sockopt(raw, name, &RING)?;
    }
    let mut off = MmapOffsets::default();
    let mut len = std::mem::size_of::<MmapOffsets>() as u32;
    // SAFETY: `off` is a writable MmapOffsets and `len` its size.
    let r = unsafe {
        libc::getsockopt(
            raw,
            SOL_XDP,
            XDP_MMAP_OFFSETS,
            (&mut off as *mut MmapOffsets).cast(),
            &mut len,
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    let fill = Ring::map(raw, 0x1_0000_0000, &off.fr, RING, 8)?;
    let comp = Ring::map(raw, 0x1_8000_0000, &off.cr, RING, 8)?;
    let rx = Ring::map(raw, 0, &off.rx, RING, 16)?;
    let tx = Ring::map(raw, 0x8000_0000, &off.tx, RING, 16)?;
    let mut zero_copy = true;
    let bind = |flags: u16| {
        let sa = SockaddrXdp {
            family: AF_XDP as u16,
            flags,
            ifindex,
            queue_id: queue,
            shared_umem_fd: 0,
        };
        // SAFETY: `sa` is a valid sockaddr_xdp of the size passed.
        let r = unsafe {
            libc::bind(
                raw,
                (&sa as *const SockaddrXdp).cast(),
                std::mem::size_of::<SockaddrXdp>() as u32,
            )
        };
        if r == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    };
    let sg_flag = if sg { XDP_USE_SG } else { 0 };
    if bind(XDP_ZEROCOPY | XDP_USE_NEED_WAKEUP | sg_flag).is_err() {
        zero_copy = false;
        bind(XDP_COPY | XDP_USE_NEED_WAKEUP | sg_flag)?;
    }
    let mut s = Socket {
        fd,
        umem,
        fill,
        comp,
        rx,
        tx,
        free_tx: Vec::new(),
    };
    // The first half of the frames wait in the fill ring for received packets.
    for i in 0..FRAMES / 2 {
        s.fill.push_addr(u64::from(i * CHUNK));
    }
    s.fill.submit();
    s.free_tx = (FRAMES / 2..FRAMES).map(|i| u64::from(i * CHUNK)).collect();
    Ok((s, zero_copy))
}

fn ifindex(iface: &str) -> io::Result<u32> {
    let name = CString::new(iface).map_err(|_| io::Error::other("interface name"))?;
    // SAFETY: a valid C string.
    let i = unsafe { libc::if_nametoindex(name.as_ptr()) };
    if i == 0 {
        Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!("no interface {iface}"),
        ))
    } else {
        Ok(i)
    }
}

impl XdpBackend {
    /// Loads and attaches the steering program on `iface` and opens one AF_XDP socket per
    /// receive queue (`queues`, at least 1). `mtu` above 3498 asks for multi-buffer.
    /// Errors say what failed (capabilities: CAP_BPF, CAP_NET_ADMIN, CAP_NET_RAW).
    pub fn open(iface: &str, queues: u32, mtu: u32) -> io::Result<Self> {
        let ifindex = ifindex(iface)?;
        let sg = mtu > 3498;
        let map = bpf::create_xskmap(queues.max(1))
            .map_err(|e| io::Error::new(e.kind(), format!("creating the XSKMAP: {e}")))?;
        let prog = bpf::load(map.as_raw_fd(), sg)?;
        let (link, native) = match bpf::attach(prog.as_raw_fd(), ifindex, bpf::XDP_FLAGS_DRV_MODE) {
            Ok(l) => (l, true),
            Err(_) => (
                bpf::attach(prog.as_raw_fd(), ifindex, bpf::XDP_FLAGS_SKB_MODE).map_err(|e| {
                    io::Error::new(e.kind(), format!("attaching XDP to {iface}: {e}"))
                })?,
                false,
            ),
        };
        let mut socks = Vec::new();
        let mut zero_copy = true;
        for q in 0..queues.max(1) {
            match open_socket(ifindex, q, sg) {
                Ok((s, zc)) => {
                    bpf::map_set(map.as_raw_fd(), q, s.fd.as_raw_fd())?;
                    zero_copy &= zc;
                    socks.push(s);
                }
                // Queues past the active ones refuse a bind; queue 0 must work.
                Err(e) if q == 0 => {
                    return Err(io::Error::new(
                        e.kind(),
                        format!("AF_XDP socket on {iface} queue 0: {e}"),
                    ))
                }
                Err(_) => break,
            }
        }
        Ok(Self {
            socks,
            _link: link,
            _prog: prog,
            _map: map,
            drop: 0.0,
            rng: crate::sim::Rng::new(u64::from(ifindex) ^ 0x5844_5000),
            mode: XdpMode {
                native,
                zero_copy,
                multi_buffer: sg,
            },
            next_rx: 0,
        })
    }

    /// Drops a share `p` of received frames, as a lossy path would.
    pub fn set_drop(&mut self, p: f64) {
        self.drop = p;
    }

    /// How it is bound.
    pub fn mode(&self) -> XdpMode {
        self.mode
    }
}

impl Socket {
    fn reclaim(&mut self) {
        while let Some(addr) = self.comp.pop_addr() {
            self.free_tx.push(addr & !u64::from(CHUNK - 1));
        }
        self.comp.release();
    }

    fn kick(&self) {
        // SAFETY: a zero-length sendto on our own socket only wakes the kernel's TX path.
        unsafe {
            libc::sendto(
                self.fd.as_raw_fd(),
                std::ptr::null(),
                0,
                libc::MSG_DONTWAIT,
                std::ptr::null(),
                0,
            );
        }
    }
}

impl Backend for XdpBackend {
    fn send(&mut self, frame: &[u8]) -> io::Result<()> {
        let s = &mut self.socks[0];
        s.reclaim();
        let chunks = frame.len().div_ceil(CHUNK as usize).max(1);
        if chunks > 1 && !self.mode.multi_buffer {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "frame larger than a UMEM chunk without multi-buffer",
            ));
        }
        for _ in 0..100 {
            if s.free_tx.len() >= chunks && s.tx.free_slots() >= chunks as u32 {
                break;
            }
            s.kick();
            std::thread::yield_now();
            s.reclaim();
        }
        if s.free_tx.len() < chunks || s.tx.free_slots() < chunks as u32 {
            return Err(io::Error::new(
                io::ErrorKind::WouldBlock,
                "AF_XDP TX ring full",
            ));
        }
        for (k, part) in frame.chunks(CHUNK as usize).enumerate() {
            let addr = s.free_tx.pop().unwrap_or(0);
            s.umem.write(addr, part);
            let more = if k + 1 < chunks { XDP_PKT_CONTD } else { 0 };
            s.tx.push_desc(addr, part.len() as u32, more);
        }
        s.tx.submit();
        if s.tx.needs_wakeup() || !self.mode.zero_copy {
            s.kick();
        }
        Ok(())
    }

    fn recv(&mut self, buf: &mut [u8], timeout: Duration) -> io::Result<Option<usize>> {
        let n = self.socks.len();
        for round in 0..2 {
            for k in 0..n {
                let i = (self.next_rx + k) % n;
                let s = &mut self.socks[i];
                let mut len = 0usize;
                let mut got = false;
                while let Some((addr, l, opts)) = s.rx.pop_desc() {
                    let l = l as usize;
                    if len + l <= buf.len() {
                        s.umem.read(addr, &mut buf[len..len + l]);
                    }
                    len += l;
                    s.fill.push_addr(addr & !u64::from(CHUNK - 1));
                    if opts & XDP_PKT_CONTD == 0 {
                        got = true;
                        break;
                    }
                }
                s.rx.release();
                s.fill.submit();
                if got && self.rng.chance(self.drop) {
                    continue; // dropped on purpose, as a lossy path would
                }
                if got {
                    self.next_rx = (i + 1) % n;
                    if len > buf.len() {
                        return Err(io::Error::new(
                            io::ErrorKind::InvalidData,
                            "received frame larger than the buffer",
                        ));
                    }
                    return Ok(Some(len));
                }
            }
            if round == 0 {
                let mut pfds: Vec<libc::pollfd> = self
                    .socks
                    .iter()
                    .map(|s| libc::pollfd {
                        fd: s.fd.as_raw_fd(),
                        events: libc::POLLIN,
                        revents: 0,
                    })
                    .collect();
                let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
                // SAFETY: valid pollfds for our sockets.
                let r = unsafe { libc::poll(pfds.as_mut_ptr(), pfds.len() as libc::nfds_t, ms) };
                if r <= 0 {
                    return Ok(None);
                }
            }
        }
        Ok(None)
    }
}
