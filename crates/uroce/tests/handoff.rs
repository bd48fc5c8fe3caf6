//! A steered group of coalescing sockets (UDP GRO on, `bind_steered_coalescing`) and its
//! handoff (`datapath::handoff::Member`): a peer whose QPs of two classes share one source
//! port sends a run as one GSO send; the kernel hands it up coalesced on the socket its
//! first packet steers to, and each packet still reaches the member of its own class, in
//! order. Loopback addresses only: no privileges needed.

use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use uroce::datapath::handoff::{Group, Member};
use uroce::datapath::udp::UdpBackend;
use uroce::datapath::{Backend, Received};

const MEMBERS: usize = 2;
const PACKETS: u32 = 16;
const LEN: usize = 1000;

#[test]
fn a_coalesced_run_of_two_classes_reaches_both_members_in_order() {
    let (to, from) = (Ipv4Addr::new(127, 0, 0, 81), Ipv4Addr::new(127, 0, 0, 82));
    let group = Group::new(MEMBERS).unwrap();
    let mut members = Vec::new();
    let mut gro = false;
    for k in 0..MEMBERS as u32 {
        let b = match UdpBackend::bind_steered_coalescing(to, k, MEMBERS as u32) {
            Ok(b) => b,
            Err(e) => {
                eprintln!("SKIP: steered UDP sockets on {to}: {e}");
                return;
            }
        };
        gro |= b.offloads().1;
        members.push(Member::new(Box::new(b), k as usize, group.clone()));
    }
    // One GSO send from one source port, DestQP 10, 11, 12...: two classes interleaved
    // in one run (uroce's own sends never mix QPs in a run; a peer's coalesced packets,
    // or another stack's GSO, may).
    let mut run = vec![0u8; LEN * PACKETS as usize];
    for (s, p) in run.chunks_mut(LEN).enumerate() {
        let qpn = 10 + s as u32;
        p[5..8].copy_from_slice(&qpn.to_be_bytes()[1..]);
        p[12..16].copy_from_slice(&(s as u32).to_be_bytes());
    }
    let peer = std::net::UdpSocket::bind((from, 0xc123)).unwrap();
    gso_send(&peer, &run, SocketAddrV4::new(to, 4791));
    let mut got: Vec<Vec<(u32, u32)>> = vec![Vec::new(); MEMBERS];
    let until = Instant::now() + Duration::from_secs(5);
    while got.iter().map(Vec::len).sum::<usize>() < PACKETS as usize && Instant::now() < until {
        for (k, m) in members.iter_mut().enumerate() {
            m.receive(Duration::from_millis(1), 64, &mut |r| {
                if let Received::Datagram { roce, .. } = r {
                    let qpn = u32::from_be_bytes([0, roce[5], roce[6], roce[7]]);
                    let seq = u32::from_be_bytes(roce[12..16].try_into().unwrap());
                    got[k].push((qpn, seq));
                }
            })
            .unwrap();
        }
    }
    for (k, g) in got.iter().enumerate() {
        let want: Vec<(u32, u32)> = (0..PACKETS)
            .filter(|s| (10 + s) as usize % MEMBERS == k)
            .map(|s| (10 + s, s))
            .collect();
        assert_eq!(g, &want, "member {k}");
    }
    let handed: u64 = members.iter().map(|m| m.handed_over).sum();
    if gro {
        // Coalesced, the run went to one socket: half of it was handed over.
        assert!(handed > 0, "nothing handed over from a coalesced run");
    } else {
        eprintln!("no UDP GRO here: every packet was steered on its own");
    }
}

/// Sends `run` to `to` as one UDP GSO send of `LEN`-byte segments (UDP_SEGMENT).
fn gso_send(sock: &UdpSocket, run: &[u8], to: SocketAddrV4) {
    const UDP_SEGMENT: libc::c_int = 103;
    let sa = libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: to.port().to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from(*to.ip()).to_be(),
        },
        sin_zero: [0; 8],
    };
    let mut iov = libc::iovec {
        iov_base: run.as_ptr() as *mut libc::c_void,
        iov_len: run.len(),
    };
    let mut ctrl = [0u64; 4];
    // SAFETY: plain data, zero is valid.
    let mut h: libc::msghdr = unsafe { std::mem::zeroed() };
    h.msg_name = (&sa as *const libc::sockaddr_in).cast_mut().cast();
    h.msg_namelen = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
    h.msg_iov = &mut iov;
    h.msg_iovlen = 1;
    h.msg_control = ctrl.as_mut_ptr().cast();
    // SAFETY: CMSG_SPACE only computes a size.
    h.msg_controllen = unsafe { libc::CMSG_SPACE(2) } as usize;
    // SAFETY: `h` points at a control buffer of msg_controllen bytes.
    unsafe {
        let c = libc::CMSG_FIRSTHDR(&h);
        (*c).cmsg_level = libc::SOL_UDP;
        (*c).cmsg_type = UDP_SEGMENT;
        (*c).cmsg_len = libc::CMSG_LEN(2) as usize;
        std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<u16>(), LEN as u16);
    }
    // SAFETY: every pointer in `h` is to a live local for the call.
    let r = unsafe { libc::sendmsg(sock.as_raw_fd(), &h, 0) };
    assert_eq!(r, run.len() as isize, "{}", std::io::Error::last_os_error());
}
