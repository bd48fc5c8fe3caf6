//! The MAC addresses QP 1's MADs go to, found without holding up the CM.
//!
//! Over AF_XDP uroce finds a peer's MAC itself (ARP / NDP, up to
//! [`GIVE_UP`](uroce::net::neighbours::GIVE_UP) for a peer that does not answer). The
//! kernel's CM never waits for that in its own thread: a MAD to a neighbour not yet
//! resolved waits in the neighbour's queue while the kernel asks, and is dropped if no
//! answer comes, which the CM's retries and timeout then report. This is the same,
//! sans-IO: [`Peers::route`] says whether a MAD can go now, waits behind a resolution
//! already under way, or must start one; [`Peers::resolved`] takes the answer and hands
//! back what waited. A peer that did not answer is refused at once for a while, rather
//! than asked again for every retry of every MAD to it.

#![deny(unsafe_code)]

use std::collections::HashMap;
use std::net::IpAddr;
use std::time::{Duration, Instant};

use uroce::wire::mad::MAD_LEN;

/// How long a MAC found stays good without being asked again.
pub(crate) const KNOWN_FOR: Duration = Duration::from_secs(30);
/// How long a peer that did not answer is refused at once.
pub(crate) const UNREACHABLE_FOR: Duration = uroce::net::neighbours::GIVE_UP;
/// MADs that wait for one peer's MAC; more are refused (EAGAIN), as a full neighbour
/// queue drops them.
pub(crate) const PENDING_MAX: usize = 16;
/// Resolutions under way at once (a thread each); a MAD to yet another peer is refused
/// (EAGAIN) until one ends, so that MADs from many addresses cannot start many threads.
pub(crate) const RESOLVING_MAX: usize = 32;

/// A MAD waiting for its peer's MAC.
pub(crate) struct Pending {
    pub remote_qpn: u32,
    pub remote_qkey: u32,
    pub mad: [u8; MAD_LEN],
}

enum Peer {
    Known { mac: [u8; 6], until: Instant },
    Resolving { pending: Vec<Pending> },
    Unreachable { until: Instant },
}

/// What to do with a MAD to a peer.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Route {
    /// Send it now, to this MAC.
    Now([u8; 6]),
    /// It waits behind a resolution already under way.
    Queued,
    /// It waits; start the resolution (on a thread of its own) and report it with
    /// [`Peers::resolved`].
    Resolve,
    /// The peer did not answer lately (EHOSTUNREACH).
    Unreachable,
    /// Too many MADs wait for this peer already, or too many resolutions are under way
    /// (EAGAIN).
    Full,
}

/// The peers of one device's QP 1.
#[derive(Default)]
pub(crate) struct Peers {
    map: HashMap<IpAddr, Peer>,
}

impl Peers {
    /// Where a MAD to `ip` goes at `now`; `mad` is kept when it has to wait.
    pub fn route(&mut self, ip: IpAddr, now: Instant, mad: Pending) -> Route {
        match self.map.get_mut(&ip) {
            Some(Peer::Known { mac, until }) if now < *until => Route::Now(*mac),
            Some(Peer::Unreachable { until }) if now < *until => Route::Unreachable,
            Some(Peer::Resolving { pending }) => {
                if pending.len() >= PENDING_MAX {
                    return Route::Full;
                }
                pending.push(mad);
                Route::Queued
            }
            _ => {
                let resolving = self
                    .map
                    .values()
                    .filter(|p| matches!(p, Peer::Resolving { .. }))
                    .count();
                if resolving >= RESOLVING_MAX {
                    return Route::Full;
                }
                self.map.insert(ip, Peer::Resolving { pending: vec![mad] });
                Route::Resolve
            }
        }
    }

    /// Gives up a resolution that could not be started (no thread): its MADs are dropped
    /// and the next MAD to `ip` starts one again.
    pub fn forget(&mut self, ip: IpAddr) {
        if matches!(self.map.get(&ip), Some(Peer::Resolving { .. })) {
            self.map.remove(&ip);
        }
    }

    /// `ip` answered with `mac` (learnt elsewhere too: `rdma_resolve_addr`'s own
    /// resolution), or did not answer (`None`); returns the MADs that waited, to send to
    /// `mac` (or to drop).
    /// A failure does not undo a MAC found meanwhile by another resolution.
    pub fn resolved(&mut self, ip: IpAddr, mac: Option<[u8; 6]>, now: Instant) -> Vec<Pending> {
        if mac.is_none()
            && matches!(self.map.get(&ip), Some(Peer::Known { until, .. }) if now < *until)
        {
            return Vec::new();
        }
        let entry = match mac {
            Some(mac) => Peer::Known {
                mac,
                until: now + KNOWN_FOR,
            },
            None => Peer::Unreachable {
                until: now + UNREACHABLE_FOR,
            },
        };
        match self.map.insert(ip, entry) {
            Some(Peer::Resolving { pending }) => pending,
            _ => Vec::new(),
        }
    }

    /// Forgets entries long expired (bounded memory over many peers); called as MADs go.
    pub fn expire(&mut self, now: Instant) {
        if self.map.len() < 64 {
            return;
        }
        self.map.retain(|_, p| match p {
            Peer::Known { until, .. } | Peer::Unreachable { until } => now < *until,
            Peer::Resolving { .. } => true,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mad(n: u8) -> Pending {
        Pending {
            remote_qpn: 1,
            remote_qkey: 0x8001_0000,
            mad: [n; MAD_LEN],
        }
    }

    const IP: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(192, 0, 2, 7));
    const MAC: [u8; 6] = [2, 0, 0, 0, 0, 7];

    #[test]
    fn the_first_mad_starts_a_resolution_and_the_next_ones_wait_behind_it() {
        let (mut p, t) = (Peers::default(), Instant::now());
        assert_eq!(p.route(IP, t, mad(1)), Route::Resolve);
        assert_eq!(p.route(IP, t, mad(2)), Route::Queued);
        let waited = p.resolved(IP, Some(MAC), t);
        assert_eq!(
            waited.iter().map(|m| m.mad[0]).collect::<Vec<_>>(),
            [1, 2],
            "in the order they came"
        );
        assert_eq!(p.route(IP, t, mad(3)), Route::Now(MAC));
        // Good for a while, then asked again.
        assert_eq!(p.route(IP, t + KNOWN_FOR, mad(4)), Route::Resolve);
    }

    #[test]
    fn a_peer_that_did_not_answer_is_refused_at_once_for_a_while() {
        let (mut p, t) = (Peers::default(), Instant::now());
        assert_eq!(p.route(IP, t, mad(1)), Route::Resolve);
        let dropped = p.resolved(IP, None, t);
        assert_eq!(dropped.len(), 1);
        assert_eq!(p.route(IP, t, mad(2)), Route::Unreachable);
        assert_eq!(
            p.route(IP, t + UNREACHABLE_FOR - Duration::from_millis(1), mad(3)),
            Route::Unreachable
        );
        assert_eq!(p.route(IP, t + UNREACHABLE_FOR, mad(4)), Route::Resolve);
    }

    #[test]
    fn waiting_mads_are_bounded_and_a_mac_learnt_elsewhere_serves_at_once() {
        let (mut p, t) = (Peers::default(), Instant::now());
        assert_eq!(p.route(IP, t, mad(0)), Route::Resolve);
        for i in 1..PENDING_MAX {
            assert_eq!(p.route(IP, t, mad(i as u8)), Route::Queued);
        }
        assert_eq!(p.route(IP, t, mad(99)), Route::Full);
        let other = IpAddr::V4(std::net::Ipv4Addr::new(192, 0, 2, 8));
        assert!(p.resolved(other, Some(MAC), t).is_empty());
        assert_eq!(p.route(other, t, mad(1)), Route::Now(MAC));
    }

    #[test]
    fn a_failure_does_not_undo_a_mac_found_meanwhile() {
        let (mut p, t) = (Peers::default(), Instant::now());
        assert_eq!(p.route(IP, t, mad(1)), Route::Resolve);
        // rdma_resolve_addr's own resolution answers first, the thread's fails later.
        assert_eq!(p.resolved(IP, Some(MAC), t).len(), 1);
        assert!(p.resolved(IP, None, t).is_empty());
        assert_eq!(p.route(IP, t, mad(2)), Route::Now(MAC));
    }

    #[test]
    fn resolutions_under_way_are_bounded_and_one_not_started_is_forgotten() {
        let (mut p, t) = (Peers::default(), Instant::now());
        let ip = |i: usize| IpAddr::V4(std::net::Ipv4Addr::new(10, 1, (i / 256) as u8, i as u8));
        for i in 0..RESOLVING_MAX {
            assert_eq!(p.route(ip(i), t, mad(1)), Route::Resolve);
        }
        assert_eq!(p.route(ip(RESOLVING_MAX), t, mad(1)), Route::Full);
        p.forget(ip(0));
        assert_eq!(p.route(ip(RESOLVING_MAX), t, mad(1)), Route::Resolve);
        assert_eq!(p.route(ip(0), t, mad(1)), Route::Full, "still 32 under way");
    }

    #[test]
    fn expired_entries_are_forgotten_once_there_are_many() {
        let (mut p, t) = (Peers::default(), Instant::now());
        for i in 0..100u8 {
            let ip = IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 0, i));
            p.resolved(ip, Some(MAC), t);
        }
        assert_eq!(p.route(IP, t, mad(1)), Route::Resolve);
        p.expire(t + KNOWN_FOR);
        assert_eq!(p.map.len(), 1, "only the resolution under way is kept");
    }
}
