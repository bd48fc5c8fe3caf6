//! Shrinking a finding: the frames sent since the last good check are replayed against a
//! fresh peer (`--restart-cmd`), and cut down, delta-debugging style (Zeller's ddmin:
//! drop ever smaller chunks while the finding still comes back), to the shortest
//! sequence that still reproduces it. Each spec is rendered again against the fresh
//! peer's QPN, rkey and PSN, so the replay means the same frames.

use super::mutate::{Expect, Spec};
use super::{connect, kind_name, Driver, FuzzConfig};

/// What a finding must look like to count as reproduced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Want {
    /// The known-good operation fails.
    Liveness,
    /// `--check-cmd` fails.
    CheckCmd,
    /// A frame of this kind is answered otherwise than `Expect` asks.
    Verdict(String, Expect),
}

/// The result of shrinking.
#[derive(Debug, Clone)]
pub struct Shrunk {
    /// Whether the whole sequence did it again.
    pub reproduced: bool,
    /// The shortest sequence found.
    pub specs: Vec<Spec>,
    /// Its frames as sent in its last replay.
    pub frames: Vec<Vec<u8>>,
    /// Replays taken.
    pub replays: u32,
}

/// Replays `seq` against a restarted peer; the frames sent when the finding came back.
fn replay(cfg: &FuzzConfig, want: &Want, seq: &[Spec]) -> anyhow::Result<Option<Vec<Vec<u8>>>> {
    let mut d = Driver::new(connect(cfg, true)?);
    let mut frames = Vec::new();
    for spec in seq {
        if !d.has_target() {
            return Ok(None);
        }
        let Some(st) = d.step(spec, cfg.wait)? else {
            return Ok(None);
        };
        frames.push(st.frame);
        if let (Want::Verdict(kind, expect), Some(m)) = (want, &st.mismatch) {
            if &kind_name(&m.spec) == kind && m.expected == *expect {
                return Ok(Some(frames));
            }
        }
    }
    let hit = match want {
        Want::Verdict(..) => false,
        Want::Liveness => d.sess.liveness(cfg.deadline)?.is_err(),
        Want::CheckCmd => match &cfg.check_cmd {
            Some(cmd) => super::shell(cmd)?.is_err(),
            None => false,
        },
    };
    Ok(hit.then_some(frames))
}

/// Shrinks `specs` to the shortest sequence that still gives `want`; `restarts` counts
/// the peer's restarts.
pub fn shrink(
    cfg: &FuzzConfig,
    want: &Want,
    specs: &[Spec],
    restarts: &mut u64,
) -> anyhow::Result<Shrunk> {
    let mut replays = 0u32;
    let mut attempt = |seq: &[Spec]| {
        replays += 1;
        *restarts += 1;
        replay(cfg, want, seq)
    };
    let Some(mut frames) = attempt(specs)? else {
        return Ok(Shrunk {
            reproduced: false,
            specs: specs.to_vec(),
            frames: Vec::new(),
            replays: 1,
        });
    };
    let mut cur = specs.to_vec();
    let mut n = 2usize;
    let budget = cfg.shrink_budget.max(1);
    let mut used = 1u32;
    while cur.len() >= 2 && used < budget {
        let chunk = cur.len().div_ceil(n);
        let mut reduced = false;
        let mut i = 0;
        while i < cur.len() && used < budget {
            let cand: Vec<Spec> = cur[..i]
                .iter()
                .chain(cur[(i + chunk).min(cur.len())..].iter())
                .copied()
                .collect();
            if cand.is_empty() {
                i += chunk;
                continue;
            }
            used += 1;
            if let Some(f) = attempt(&cand)? {
                cur = cand;
                frames = f;
                reduced = true;
            } else {
                i += chunk;
            }
        }
        if reduced {
            n = n.saturating_sub(1).max(2);
        } else if chunk <= 1 {
            break;
        } else {
            n = (n * 2).min(cur.len());
        }
    }
    Ok(Shrunk {
        reproduced: true,
        specs: cur,
        frames,
        replays,
    })
}
