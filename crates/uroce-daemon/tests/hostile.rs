//! A process that attacks the daemon through everything it is handed (its rings, its
//! control socket) while honest processes keep exchanging datagrams through the same
//! daemon: the daemon survives, the honest processes get exactly their own packets and
//! never a forged one, and a process that vanishes leaves its QPNs to nobody.

mod common;

use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::Path;
use std::time::{Duration, Instant};

use common::{exchange, ud, Daemon, Honest, LOCALHOST};
use uroce::datapath::daemon::proto::{self, Reply, Request, MSG_LEN};
use uroce::datapath::daemon::ring::{Dir, Region, SlotHeader, HEADER_LEN, SLOT, SLOTS};
use uroce::datapath::MAX_FRAME;
use uroce::wire::DatagramRepr;

/// xorshift64*: the garbage needs no more than this.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn fill(&mut self, b: &mut [u8]) {
        for c in b.chunks_mut(8) {
            let v = self.next().to_le_bytes();
            c.copy_from_slice(&v[..c.len()]);
        }
    }
}

/// The fast path's class a welcome `msg` gives, checking the descriptors that came with
/// it are as many as it says (as the client's `DaemonBackend::connect` does): the region
/// and the two doorbells, and the fast path's socket when the class is not 0.
fn welcome_fast_class(msg: &[u8], fds: &[OwnedFd]) -> u8 {
    let Some(Reply::Welcome { fast_class, .. }) = Reply::decode(msg) else {
        panic!("not a welcome: {msg:?}");
    };
    assert_eq!(
        fds.len(),
        3 + usize::from(fast_class != 0),
        "descriptors with a welcome of fast_class {fast_class}"
    );
    fast_class
}

/// Sends `msg` as it is (any length) with `fds` attached.
fn send_raw(fd: RawFd, msg: &[u8], fds: &[RawFd]) -> std::io::Result<()> {
    let mut iov = libc::iovec {
        iov_base: msg.as_ptr() as *mut libc::c_void,
        iov_len: msg.len(),
    };
    let mut cbuf = [0u64; 64];
    // SAFETY: a zeroed msghdr is valid; it points at the iovec and the control buffer,
    // both alive during sendmsg.
    let mut m: libc::msghdr = unsafe { std::mem::zeroed() };
    m.msg_iov = &mut iov;
    m.msg_iovlen = 1;
    if !fds.is_empty() {
        let bytes = std::mem::size_of_val(fds) as u32;
        // SAFETY: CMSG_* on a control buffer big enough for `fds` (at most 100).
        unsafe {
            m.msg_control = cbuf.as_mut_ptr().cast();
            m.msg_controllen = libc::CMSG_SPACE(bytes) as usize;
            let c = libc::CMSG_FIRSTHDR(&m);
            (*c).cmsg_level = libc::SOL_SOCKET;
            (*c).cmsg_type = libc::SCM_RIGHTS;
            (*c).cmsg_len = libc::CMSG_LEN(bytes) as usize;
            std::ptr::copy_nonoverlapping(fds.as_ptr(), libc::CMSG_DATA(c).cast(), fds.len());
        }
    }
    // SAFETY: a valid msghdr.
    if unsafe { libc::sendmsg(fd, &m, libc::MSG_NOSIGNAL) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// The daemon's answer on `fd` within 5 s: `Some(reply)`, or `None` when it closed.
fn answer(fd: RawFd) -> Option<Reply> {
    assert!(
        proto::wait_readable(fd, Duration::from_secs(5)),
        "no answer from the daemon in 5 s"
    );
    match proto::recv(fd, libc::MSG_DONTWAIT) {
        Ok(Some((msg, _))) => Some(Reply::decode(&msg).expect("a reply that is one")),
        Ok(None) => None,
        Err(e) if e.raw_os_error() == Some(libc::ECONNRESET) => None,
        Err(e) => panic!("recv: {e}"),
    }
}

fn call(fd: RawFd, req: Request) -> Option<Reply> {
    proto::send(fd, &req.encode(), &[]).expect("send");
    answer(fd)
}

/// A process speaking the protocol by hand and writing into its rings what it likes.
struct Hostile {
    sock: OwnedFd,
    region: Region,
    to_daemon: OwnedFd,
    _to_process: OwnedFd,
    rng: Rng,
}

impl Hostile {
    fn attach(socket: &Path, seed: u64) -> Self {
        let sock = proto::connect(socket).expect("connect");
        proto::send(
            sock.as_raw_fd(),
            &Request::Hello {
                version: proto::VERSION,
            }
            .encode(),
            &[],
        )
        .unwrap();
        assert!(proto::wait_readable(
            sock.as_raw_fd(),
            Duration::from_secs(5)
        ));
        let (msg, mut fds) = proto::recv(sock.as_raw_fd(), 0).unwrap().expect("welcome");
        // The fast path's socket, when given, is not used here: the attacks go through
        // the ring, where the daemon checks them.
        if welcome_fast_class(&msg, &fds) != 0 {
            fds.pop();
        }
        let to_process = fds.pop().unwrap();
        let to_daemon = fds.pop().unwrap();
        let region = Region::map(fds.pop().unwrap()).expect("mapping the region");
        Self {
            sock,
            region,
            to_daemon,
            _to_process: to_process,
            rng: Rng(seed | 1),
        }
    }

    fn claim(&self) -> u32 {
        match call(self.sock.as_raw_fd(), Request::ClaimQpns { count: 1 }) {
            Some(Reply::Qpns { first, .. }) => first,
            r => panic!("claim: {r:?}"),
        }
    }

    /// Writes a slot of its own making (`header` as raw bytes, `body` after it) into the
    /// ring to the daemon; waits while the ring is full.
    fn put_raw(&self, header: &[u8; HEADER_LEN], body: &[u8]) {
        let ring = self.region.ring(Dir::ToDaemon);
        let deadline = Instant::now() + Duration::from_secs(10);
        let index = loop {
            if let Some(i) = ring.free_slot().expect("our own indices") {
                break i;
            }
            proto::ring(self.to_daemon.as_raw_fd());
            assert!(
                Instant::now() < deadline,
                "the daemon stopped taking our sends"
            );
            std::thread::sleep(Duration::from_micros(200));
        };
        // SAFETY: a free slot of our ring, which only we write until we publish it.
        let slot = unsafe { ring.slot_mut(index) };
        slot[..HEADER_LEN].copy_from_slice(header);
        let n = body.len().min(SLOT - HEADER_LEN);
        slot[HEADER_LEN..HEADER_LEN + n].copy_from_slice(&body[..n]);
        ring.publish(index);
        if ring.consumer_needs_wake() {
            proto::ring(self.to_daemon.as_raw_fd());
        }
    }

    /// Writes a datagram from `src` (to 127.0.0.1, or ::1 from IPv6) carrying `roce`.
    fn put(&self, src: std::net::IpAddr, roce: &[u8]) {
        let dst = match src {
            std::net::IpAddr::V4(_) => LOCALHOST,
            std::net::IpAddr::V6(_) => std::net::Ipv6Addr::LOCALHOST.into(),
        };
        let datagram = DatagramRepr::roce(src, dst, 49152, 0).unwrap();
        let mut h = [0u8; HEADER_LEN];
        SlotHeader::Datagram {
            datagram,
            dst_mac: [0; 6],
        }
        .write(&mut h, roce.len() as u32);
        self.put_raw(&h, roce);
    }

    /// Writes a datagram from `src` to 127.0.0.1 carrying `roce` as one its socket of the
    /// fast path received for another process ([`SlotHeader::Misdelivered`]).
    fn put_misdelivered(&self, src: std::net::IpAddr, roce: &[u8]) {
        let datagram = DatagramRepr::roce(src, LOCALHOST, 49152, 0).unwrap();
        let mut h = [0u8; HEADER_LEN];
        SlotHeader::Misdelivered { datagram }.write(&mut h, roce.len() as u32);
        self.put_raw(&h, roce);
    }

    /// (a) Slots of garbage: random headers, lengths (also past MAX_FRAME and the slot),
    /// kinds that are none, bytes; and well-formed headers with random lengths.
    fn garbage(&mut self, n: usize) {
        let mut body = vec![0u8; SLOT - HEADER_LEN];
        for i in 0..n {
            let mut h = [0u8; HEADER_LEN];
            self.rng.fill(&mut h);
            self.rng.fill(&mut body);
            match i % 5 {
                // Random all through.
                0 => {}
                // A kind that is none (1 to 3 are datagram, frame, misdelivered).
                1 => h[4] = 4 + (self.rng.next() % 250) as u8,
                // A datagram header with a length past MAX_FRAME (and past the slot).
                2 => {
                    h[4] = 1;
                    h[16] = 4;
                    h[65] = 0;
                    let len = MAX_FRAME as u32 + 1 + (self.rng.next() % 1_000_000) as u32;
                    h[0..4].copy_from_slice(&len.to_le_bytes());
                }
                // A frame (the UDP daemon sends none), any length.
                3 => h[4] = 2,
                // A well-formed datagram header from a random source, random length.
                _ => {
                    let datagram = DatagramRepr::roce(
                        std::net::Ipv4Addr::from(self.rng.next() as u32).into(),
                        LOCALHOST,
                        self.rng.next() as u16,
                        0,
                    )
                    .unwrap();
                    SlotHeader::Datagram {
                        datagram,
                        dst_mac: [0; 6],
                    }
                    .write(&mut h, (self.rng.next() % (2 * MAX_FRAME as u64)) as u32);
                }
            }
            self.put_raw(&h, &body);
        }
    }

    /// Waits up to 5 s for the daemon to cut us off (our control socket closes).
    fn cut_off(&self) -> bool {
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if !proto::wait_readable(self.sock.as_raw_fd(), Duration::from_millis(100)) {
                continue;
            }
            match proto::recv(self.sock.as_raw_fd(), libc::MSG_DONTWAIT) {
                Ok(None) | Err(_) => return true,
                Ok(Some(_)) => {}
            }
        }
        false
    }
}

/// Everything a process could hand the daemon on its control socket.
fn malformed_control(socket: &Path) {
    let fresh = || proto::connect(socket).expect("connect");
    let eproto = Some(Reply::Err(libc::EPROTO));

    // Before a hello: nothing but a hello is taken.
    let c = fresh();
    assert_eq!(call(c.as_raw_fd(), Request::ClaimQpns { count: 1 }), eproto);
    let listen = Request::Listen {
        service_id: 7,
        ip: LOCALHOST,
        on: true,
    };
    assert_eq!(call(c.as_raw_fd(), listen), eproto);
    // Another version.
    assert_eq!(call(c.as_raw_fd(), Request::Hello { version: 99 }), eproto);
    assert_eq!(call(c.as_raw_fd(), Request::Hello { version: 0 }), eproto);
    // Wrong lengths (short, long, longer than the daemon reads), unknown operations.
    for len in [1usize, 5, 31, 33, 64, 65, 200, 4000] {
        send_raw(c.as_raw_fd(), &vec![1u8; len], &[]).unwrap();
        assert_eq!(answer(c.as_raw_fd()), eproto, "a {len}-byte message");
    }
    for op in [0u8, 4, 9, 0x80, 0xff] {
        let mut m = [0u8; MSG_LEN];
        m[0] = op;
        send_raw(c.as_raw_fd(), &m, &[]).unwrap();
        assert_eq!(answer(c.as_raw_fd()), eproto, "op {op}");
    }
    let mut bad_listen = Request::Listen {
        service_id: 1,
        ip: LOCALHOST,
        on: true,
    }
    .encode();
    bad_listen[1] = 7;
    send_raw(c.as_raw_fd(), &bad_listen, &[]).unwrap();
    assert_eq!(
        answer(c.as_raw_fd()),
        eproto,
        "listen with a flag that is none"
    );
    // Descriptors attached (many of them, more than the daemon has room for): a hello
    // still gets its welcome, and a second hello is refused.
    let junk: Vec<OwnedFd> = (0..40).map(|_| proto::eventfd().unwrap()).collect();
    let raw: Vec<RawFd> = junk.iter().map(|f| f.as_raw_fd()).collect();
    let hello = Request::Hello {
        version: proto::VERSION,
    }
    .encode();
    send_raw(c.as_raw_fd(), &hello, &raw).unwrap();
    assert!(proto::wait_readable(c.as_raw_fd(), Duration::from_secs(5)));
    let (msg, fds) = proto::recv(c.as_raw_fd(), 0).unwrap().unwrap();
    welcome_fast_class(&msg, &fds);
    drop(fds);
    send_raw(c.as_raw_fd(), &hello, &raw[..3]).unwrap();
    assert_eq!(answer(c.as_raw_fd()), eproto, "a second hello");
    let mut claim = Request::ClaimQpns { count: 1 }.encode().to_vec();
    claim.push(0);
    send_raw(c.as_raw_fd(), &claim, &raw[..5]).unwrap();
    assert_eq!(answer(c.as_raw_fd()), eproto, "a claim one byte long");
    // Huge and empty claims are bounded, not refused; the connection still works.
    for count in [0, u32::MAX] {
        match call(c.as_raw_fd(), Request::ClaimQpns { count }) {
            Some(Reply::Qpns { first, count }) => {
                assert!(first >= 0x100 && count >= 1 && first + count <= 1 << 24)
            }
            r => panic!("claim of {count}: {r:?}"),
        }
    }
    drop(c);
    // An empty message, then silence: the daemon lets the connection go.
    let c = fresh();
    send_raw(c.as_raw_fd(), &[], &[]).unwrap();
    drop(c);
    // A connection that closes halfway through its hello's answer.
    let c = fresh();
    proto::send(c.as_raw_fd(), &hello, &[]).unwrap();
    drop(c);
}

#[test]
fn a_hostile_process_harms_no_one_else() {
    if !common::root_or_skip("a_hostile_process_harms_no_one_else") {
        return;
    }
    let _watchdog = common::Watchdog::new(
        "a_hostile_process_harms_no_one_else",
        Duration::from_secs(120),
    );
    let mut daemon = Daemon::start("hostile", &[]);
    let fds_before = daemon.fd_list();
    let mut a = Honest::attach(&daemon.socket);
    let mut b = Honest::attach(&daemon.socket);
    assert!(!a.owns(b.qpn()) && !b.owns(a.qpn()));
    exchange(&mut a, &mut b, 0, 20);

    let (a_qpn, b_qpn) = (a.qpn(), b.qpn());
    let socket = daemon.socket.clone();
    let attack = std::thread::spawn(move || {
        let mut h = Hostile::attach(&socket, 0x5eed_1234_abcd);
        let mine = h.claim();
        // (a) garbage.
        h.garbage(3000);
        // (b) forged sources: UD from b's QPN (and QP 0, and b's with the reserved byte
        // set) to a and to b; from a foreign address with our own QPN; and with a
        // source that is ours to a QPN nobody holds.
        for i in 0..500u32 {
            let tag = format!("FORGED {i}");
            h.put(LOCALHOST, &ud(a_qpn, b_qpn, tag.as_bytes()));
            h.put(LOCALHOST, &ud(b_qpn, b_qpn, tag.as_bytes()));
            h.put(LOCALHOST, &ud(a_qpn, 0, tag.as_bytes()));
            h.put(LOCALHOST, &ud(a_qpn, 0xff00_0000 | b_qpn, tag.as_bytes()));
            h.put(
                "10.9.9.9".parse().unwrap(),
                &ud(a_qpn, mine, tag.as_bytes()),
            );
            h.put("::1".parse().unwrap(), &ud(a_qpn, b_qpn, tag.as_bytes()));
        }
        // (c) a flood of well-formed datagrams: to ourselves (our ring fills, we never
        // read it) and to QPNs nobody holds.
        for i in 0..6000u32 {
            let dst = if i % 2 == 0 { mine } else { 0x00ff_ff00 - i };
            h.put(LOCALHOST, &ud(dst, mine, &i.to_le_bytes()));
        }
        // (e) the control socket, on connections of its own.
        malformed_control(&socket);
        // Our own connection still answers after all that.
        let again = h.claim();
        assert_ne!(again, mine);
        // (d) indices far ahead: the daemon cuts us off.
        let ring = h.region.ring(Dir::ToDaemon);
        let head = ring.free_slot().unwrap().unwrap();
        ring.publish(head.wrapping_add(SLOTS * 1000));
        proto::ring(h.to_daemon.as_raw_fd());
        assert!(
            h.cut_off(),
            "a process that broke its ring indices is cut off"
        );
        // Another one breaks the ring the daemon writes to it (a tail far ahead), then
        // sends itself a packet: cut off too when the daemon delivers.
        let h2 = Hostile::attach(&socket, 77);
        let mine2 = h2.claim();
        let rx = h2.region.ring(Dir::ToProcess);
        rx.release(SLOTS * 7 + 3);
        h2.put(LOCALHOST, &ud(mine2, mine2, b"to myself"));
        assert!(
            h2.cut_off(),
            "a process that broke its receive ring is cut off"
        );
        drop(h2);
        drop(h);
    });

    // Meanwhile a and b keep exchanging: exactly their own datagrams arrive.
    let mut round = 1;
    while !attack.is_finished() || round < 4 {
        exchange(&mut a, &mut b, round, 50);
        round += 1;
    }
    attack.join().expect("the attack's own checks");
    exchange(&mut a, &mut b, round, 200);
    daemon.assert_alive();

    // A newcomer works with a.
    let mut c = Honest::attach(&daemon.socket);
    assert!(!c.owns(a_qpn) && !c.owns(b_qpn));
    exchange(&mut a, &mut c, round + 1, 50);
    daemon.assert_alive();

    // Nothing of the hostile processes stays behind in the daemon: what its descriptors
    // name once all left, they named before any came, as many times (the start's probe
    // connection may have been open then). By what they name, not their numbers: the
    // socket of a class a process held is read by the daemon itself from then on,
    // through a copy of its descriptor that replaces the one it had.
    drop((a, b, c));
    let named = |f: &String| {
        f.split_once(" -> ")
            .map_or(f.clone(), |(_, t)| t.to_string())
    };
    let left_behind = || -> Vec<String> {
        let mut before: Vec<String> = fds_before.iter().map(named).collect();
        let mut extra = Vec::new();
        for f in daemon.fd_list() {
            match before.iter().position(|b| *b == named(&f)) {
                Some(i) => {
                    before.swap_remove(i);
                }
                None => extra.push(f),
            }
        }
        extra
    };
    let deadline = Instant::now() + Duration::from_secs(5);
    while !left_behind().is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(
        left_behind(),
        Vec::<String>::new(),
        "descriptors the daemon still holds once every process left"
    );
    daemon.assert_alive();
}

/// Without the fast path (`--no-fast-path`: no process has a socket that coalesces), a
/// process that writes datagrams "received for another process" into its ring, forged
/// from a foreign address to a and b, has them refused: a and b receive exactly each
/// other's datagrams.
#[test]
fn a_process_without_the_fast_path_cannot_pass_datagrams_on() {
    if !common::root_or_skip("a_process_without_the_fast_path_cannot_pass_datagrams_on") {
        return;
    }
    let _watchdog = common::Watchdog::new(
        "a_process_without_the_fast_path_cannot_pass_datagrams_on",
        Duration::from_secs(60),
    );
    let mut daemon = Daemon::start("hostile-pass", &["--no-fast-path"]);
    let mut a = Honest::attach(&daemon.socket);
    let mut b = Honest::attach(&daemon.socket);
    let h = Hostile::attach(&daemon.socket, 0xfeed);
    let mine = h.claim();
    for i in 0..200u32 {
        let tag = format!("PASSED ON {i}");
        let from: std::net::IpAddr = "10.9.9.9".parse().unwrap();
        h.put_misdelivered(from, &ud(a.qpn(), b.qpn(), tag.as_bytes()));
        h.put_misdelivered(from, &ud(b.qpn(), a.qpn(), tag.as_bytes()));
        h.put_misdelivered(LOCALHOST, &ud(a.qpn(), mine, tag.as_bytes()));
    }
    exchange(&mut a, &mut b, 0, 50);
    daemon.assert_alive();
}

#[test]
fn a_process_that_vanishes_leaves_its_qpns_to_nobody() {
    if !common::root_or_skip("a_process_that_vanishes_leaves_its_qpns_to_nobody") {
        return;
    }
    let _watchdog = common::Watchdog::new(
        "a_process_that_vanishes_leaves_its_qpns_to_nobody",
        Duration::from_secs(120),
    );
    let mut daemon = Daemon::start("vanish", &[]);
    let mut a = Honest::attach(&daemon.socket);
    let mut doomed = Honest::attach(&daemon.socket);
    exchange(&mut a, &mut doomed, 0, 10);
    let dead = doomed.qpn();
    let dead_range = doomed.first..doomed.first + doomed.count;
    // Packets for it sit in its ring when it goes: no goodbye, descriptors dropped.
    a.send(&ud(dead, a.qpn(), b"unread"));
    drop(doomed);
    // Also one speaking by hand, which claimed and vanished mid-way.
    let raw = Hostile::attach(&daemon.socket, 9);
    let dead2 = raw.claim();
    raw.put(LOCALHOST, &ud(a.qpn(), dead2, b"last words"));
    let got = a.receive(Duration::from_secs(5), 1);
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].text(), "last words");
    drop(raw);
    std::thread::sleep(Duration::from_millis(500));

    // Newcomers never get the dead blocks (quarantine)...
    let mut newcomers: Vec<Honest> = (0..8).map(|_| Honest::attach(&daemon.socket)).collect();
    for n in &newcomers {
        let r = n.first..n.first + n.count;
        assert!(
            r.end <= dead_range.start || r.start >= dead_range.end,
            "{r:?} overlaps the dead {dead_range:?}"
        );
        assert!(!n.owns(dead2), "{r:?} holds the dead {dead2:#x}");
    }
    // ... and what is sent to the dead QPNs reaches no one.
    for i in 0..20u32 {
        a.send(&ud(dead, a.qpn(), format!("to the dead {i}").as_bytes()));
        a.send(&ud(dead2, a.qpn(), format!("to the dead {i}").as_bytes()));
        a.send(&ud(
            dead + 1,
            a.qpn(),
            format!("to the dead {i}").as_bytes(),
        ));
    }
    for n in &mut newcomers {
        let got = n.receive(Duration::from_millis(100), 1);
        assert!(got.is_empty(), "a newcomer got {got:?}");
    }
    let got = a.receive(Duration::from_millis(100), 1);
    assert!(got.is_empty(), "the sender got {got:?}");
    // The newcomers work.
    let mut n0 = newcomers.pop().unwrap();
    exchange(&mut a, &mut n0, 1, 20);
    daemon.assert_alive();
}

/// The fast path over UDP has 63 sockets to give: the 63 first processes get one each
/// (with QPNs of its class: `DestQP >> 18` names the socket the kernel steers to), the
/// next goes through the rings with QPNs of class 0 (the daemon's own socket), and it
/// still exchanges with a process on the fast path; once one leaves, its socket is given
/// again; with `--no-fast-path` nobody gets one.
#[test]
fn the_fast_path_has_63_sockets_and_the_rings_take_the_rest() {
    if !common::root_or_skip("the_fast_path_has_63_sockets_and_the_rings_take_the_rest") {
        return;
    }
    let _watchdog = common::Watchdog::new(
        "the_fast_path_has_63_sockets_and_the_rings_take_the_rest",
        Duration::from_secs(120),
    );
    let shift = uroce::datapath::udp::CLASS_SHIFT;
    let mut daemon = Daemon::start("classes", &[]);
    let mut fast: Vec<Honest> = (0..63).map(|_| Honest::attach(&daemon.socket)).collect();
    let mut classes: Vec<u32> = fast.iter().map(|h| h.first >> shift).collect();
    for h in &fast {
        assert!(h.backend.fast_path(), "process with QPN {:#x}", h.first);
        assert_eq!(h.first >> shift, (h.first + h.count - 1) >> shift);
    }
    classes.sort_unstable();
    assert_eq!(classes, (1..64).collect::<Vec<u32>>(), "one class each");
    let mut ringed = Honest::attach(&daemon.socket);
    assert!(!ringed.backend.fast_path());
    assert_eq!(ringed.first >> shift, 0, "{:#x}", ringed.first);
    exchange(&mut fast[0], &mut ringed, 0, 20);
    // A socket let go is given again (after the daemon saw its process leave).
    let freed = fast.pop().unwrap();
    let class = freed.first >> shift;
    drop(freed);
    let deadline = Instant::now() + Duration::from_secs(5);
    let again = loop {
        let h = Honest::attach(&daemon.socket);
        if h.backend.fast_path() {
            break h;
        }
        assert!(Instant::now() < deadline, "class {class} never given again");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(again.first >> shift, class);
    daemon.assert_alive();
    drop(fast);

    let mut off = Daemon::start("nofast", &["--no-fast-path"]);
    let mut a = Honest::attach(&off.socket);
    let mut b = Honest::attach(&off.socket);
    assert!(!a.backend.fast_path() && !b.backend.fast_path());
    exchange(&mut a, &mut b, 0, 20);
    off.assert_alive();
}
