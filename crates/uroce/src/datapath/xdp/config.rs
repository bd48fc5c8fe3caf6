//! Tuning of an AF_XDP backend: how many frames go to the kernel per wake-up, and busy
//! polling. The defaults are what measured best over veth (README, "AF_XDP knobs");
//! both can be set from the environment (`UROCE_XDP_TX_BATCH`, `UROCE_XDP_BUSY_POLL`)
//! for programs that cannot pass a [`XdpConfig`] (uroce-verbs' libibverbs.so.1).

use std::fmt;
use std::str::FromStr;

/// The kernel moves at most this many descriptors per wake-up in copy mode unless told
/// otherwise (`TX_BATCH_SIZE` in net/xdp/xsk.c, also the least `XDP_MAX_TX_SKB_BUDGET`
/// takes).
pub const KERNEL_TX_BATCH: u32 = 32;

/// The most frames [`XdpConfig::tx_batch`] may ask for (the TX ring is never smaller).
pub const MAX_TX_BATCH: u32 = 2048;

/// Frames per wake-up unless told otherwise. Against the kernel's 32, 256 took about a
/// twentieth less CPU per GB and gave about a twentieth more bandwidth in RC WRITE, READ
/// and SEND over veth (medians of alternating runs, 14 of 18 pairs in its favour;
/// README, "AF_XDP knobs"). A flush wakes the kernel for fewer, so a lone packet does
/// not wait.
pub const DEFAULT_TX_BATCH: u32 = 256;

/// The environment variable holding a [`BusyPoll`] (`USEC[,BUDGET][,noprefer]`).
pub const BUSY_POLL_ENV: &str = "UROCE_XDP_BUSY_POLL";

/// The environment variable holding [`XdpConfig::tx_batch`].
pub const TX_BATCH_ENV: &str = "UROCE_XDP_TX_BATCH";

/// Busy polling of the interface's receive queue by the AF_XDP socket (Linux ≥ 5.11):
/// `SO_BUSY_POLL`, `SO_PREFER_BUSY_POLL` and `SO_BUSY_POLL_BUDGET` (socket(7)). The
/// kernel polls the queue's NAPI from the application's own `sendto` / `recvfrom` on the
/// socket instead of waiting for its interrupt and softirq; with `prefer` and the
/// interface's `napi_defer_hard_irqs` / `gro_flush_timeout` set (sysfs, never set by
/// uroce) the interrupts stay off while the application keeps polling.
///
/// It needs a NAPI the socket is tied to: Linux 6.13 and later take it at bind from the
/// driver's receive queue (`xsk_bind` in net/xdp/xsk.c reads the queue's NAPI, which a
/// driver names with `netif_queue_set_napi`); earlier kernels took it from the first
/// frame received. A socket without one (veth does not name its NAPI; generic XDP has
/// none) busy-polls nothing: [`super::XdpMode::napi_id`] says which. All three options
/// need CAP_NET_ADMIN.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BusyPoll {
    /// Microseconds the kernel may poll per call (`SO_BUSY_POLL`), 1 or more.
    pub usecs: u32,
    /// Packets per poll (`SO_BUSY_POLL_BUDGET`); `None` leaves the kernel's default (8).
    pub budget: Option<u16>,
    /// `SO_PREFER_BUSY_POLL`: keep the interrupts off while the application polls.
    pub prefer: bool,
}

impl BusyPoll {
    /// Busy polling for `usecs` microseconds per call, preferred, the kernel's budget.
    pub fn new(usecs: u32) -> Self {
        Self {
            usecs,
            budget: None,
            prefer: true,
        }
    }
}

impl fmt::Display for BusyPoll {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.usecs)?;
        if let Some(b) = self.budget {
            write!(f, ",{b}")?;
        }
        if !self.prefer {
            write!(f, ",noprefer")?;
        }
        Ok(())
    }
}

impl FromStr for BusyPoll {
    type Err = String;

    /// `USEC[,BUDGET][,noprefer]`: microseconds per call (1 to 1,000,000), packets per
    /// poll (1 to 65535), and `noprefer` to leave `SO_PREFER_BUSY_POLL` off.
    fn from_str(s: &str) -> Result<Self, String> {
        let mut parts = s.split(',').map(str::trim);
        let usecs = parts.next().unwrap_or_default();
        let usecs: u32 = usecs
            .parse()
            .ok()
            .filter(|u| (1..=1_000_000).contains(u))
            .ok_or_else(|| {
                format!("busy poll {s:?}: microseconds {usecs:?} are not 1 to 1000000")
            })?;
        let mut bp = Self::new(usecs);
        for p in parts {
            if p == "noprefer" {
                bp.prefer = false;
            } else if bp.budget.is_none() {
                bp.budget = Some(p.parse().ok().filter(|&b| b > 0).ok_or_else(|| {
                    format!("busy poll {s:?}: budget {p:?} is not 1 to 65535 (or \"noprefer\")")
                })?);
            } else {
                return Err(format!("busy poll {s:?}: {p:?} is one part too many"));
            }
        }
        Ok(bp)
    }
}

/// How an AF_XDP backend talks to the kernel. `Default` is what uroce uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct XdpConfig {
    /// Frames queued on the TX ring before the kernel is woken (`sendto`), 1 to
    /// [`MAX_TX_BATCH`] (default [`DEFAULT_TX_BATCH`]); a flush wakes it for fewer. In
    /// copy mode the kernel takes up to this many per wake-up when asked with
    /// `XDP_MAX_TX_SKB_BUDGET` (Linux ≥ 6.17; its budget counts descriptors, two per
    /// multi-buffer frame, at least [`KERNEL_TX_BATCH`]); older kernels take 32
    /// descriptors per wake-up and are woken as often as it takes.
    pub tx_batch: u32,
    /// Busy polling, off by default.
    pub busy_poll: Option<BusyPoll>,
}

impl Default for XdpConfig {
    fn default() -> Self {
        Self {
            tx_batch: DEFAULT_TX_BATCH,
            busy_poll: None,
        }
    }
}

impl XdpConfig {
    /// Checks the values are in range.
    pub fn validate(&self) -> Result<(), String> {
        if !(1..=MAX_TX_BATCH).contains(&self.tx_batch) {
            return Err(format!(
                "AF_XDP TX batch {} is not 1 to {MAX_TX_BATCH}",
                self.tx_batch
            ));
        }
        if let Some(bp) = self.busy_poll {
            if bp.usecs == 0 || bp.budget == Some(0) {
                return Err(format!("busy poll {bp}: zero microseconds or budget"));
            }
        }
        Ok(())
    }

    /// The default with what `UROCE_XDP_TX_BATCH` and `UROCE_XDP_BUSY_POLL` say (unset
    /// or empty: the default); an error names the variable and the value.
    pub fn from_env() -> Result<Self, String> {
        Self::from_vars(
            std::env::var(TX_BATCH_ENV).ok().as_deref(),
            std::env::var(BUSY_POLL_ENV).ok().as_deref(),
        )
    }

    /// [`XdpConfig::from_env`] on given values.
    pub fn from_vars(tx_batch: Option<&str>, busy_poll: Option<&str>) -> Result<Self, String> {
        let mut c = Self::default();
        if let Some(v) = tx_batch.filter(|v| !v.is_empty()) {
            c.tx_batch = v
                .trim()
                .parse()
                .map_err(|_| format!("{TX_BATCH_ENV}={v:?} is not a number"))?;
        }
        if let Some(v) = busy_poll.filter(|v| !v.is_empty() && *v != "0") {
            c.busy_poll = Some(v.parse().map_err(|e| format!("{BUSY_POLL_ENV}: {e}"))?);
        }
        c.validate()?;
        Ok(c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn busy_poll_parses_usecs_budget_and_noprefer() {
        assert_eq!("50".parse(), Ok(BusyPoll::new(50)));
        assert_eq!(
            "50,64".parse(),
            Ok(BusyPoll {
                usecs: 50,
                budget: Some(64),
                prefer: true
            })
        );
        assert_eq!(
            " 20 , noprefer".parse(),
            Ok(BusyPoll {
                usecs: 20,
                budget: None,
                prefer: false
            })
        );
        let bp: BusyPoll = "20,16,noprefer".parse().unwrap();
        assert_eq!((bp.budget, bp.prefer), (Some(16), false));
        // What Display writes parses back to the same value.
        assert_eq!(bp.to_string().parse(), Ok(bp));
    }

    #[test]
    fn busy_poll_refuses_what_the_kernel_would() {
        for bad in [
            "",
            "0",
            "-1",
            "x",
            "1000001",
            "50,0",
            "50,65536",
            "50,8,16",
            "50,prefer",
        ] {
            assert!(bad.parse::<BusyPoll>().is_err(), "{bad:?} was accepted");
        }
    }

    #[test]
    fn config_from_vars() {
        assert_eq!(XdpConfig::from_vars(None, None), Ok(XdpConfig::default()));
        assert_eq!(
            XdpConfig::from_vars(Some(""), Some("0")),
            Ok(XdpConfig::default()),
            "empty and 0 mean unset"
        );
        let c = XdpConfig::from_vars(Some("64"), Some("30,16")).unwrap();
        assert_eq!(c.tx_batch, 64);
        assert_eq!(
            c.busy_poll.map(|b| (b.usecs, b.budget)),
            Some((30, Some(16)))
        );
        let e = XdpConfig::from_vars(Some("0"), None).unwrap_err();
        assert!(e.contains("TX batch 0"), "{e}");
        let e = XdpConfig::from_vars(Some("4096"), None).unwrap_err();
        assert!(e.contains("4096"), "{e}");
        let e = XdpConfig::from_vars(Some("many"), None).unwrap_err();
        assert!(e.contains(TX_BATCH_ENV), "{e}");
        let e = XdpConfig::from_vars(None, Some("fast")).unwrap_err();
        assert!(e.contains(BUSY_POLL_ENV), "{e}");
    }

    #[test]
    fn validate_checks_a_hand_built_config() {
        let mut c = XdpConfig::default();
        assert_eq!(c.validate(), Ok(()));
        c.busy_poll = Some(BusyPoll {
            usecs: 0,
            budget: None,
            prefer: true,
        });
        assert!(c.validate().is_err());
        c.busy_poll = Some(BusyPoll::new(10));
        c.tx_batch = MAX_TX_BATCH + 1;
        assert!(c.validate().is_err());
    }
}
