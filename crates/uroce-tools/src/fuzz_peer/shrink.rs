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
        Want::Liveness => d.liveness(cfg.wait, cfg.deadline)?.is_err(),
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
    let out = ddmin(specs, cfg.shrink_budget, |seq| {
        replays += 1;
        *restarts += 1;
        replay(cfg, want, seq)
    })?;
    Ok(match out {
        Some((specs, frames)) => Shrunk {
            reproduced: true,
            specs,
            frames,
            replays,
        },
        None => Shrunk {
            reproduced: false,
            specs: specs.to_vec(),
            frames: Vec::new(),
            replays,
        },
    })
}

/// Zeller's ddmin over `seq`: `None` when `test` does not reproduce with the whole of it;
/// else the shortest subsequence found within `budget` tests that reproduces, and what
/// `test` returned for it. Chunks of the sequence are dropped, halving the chunk size
/// whenever no chunk can go.
pub fn ddmin<T: Copy, F>(
    seq: &[T],
    budget: u32,
    mut test: impl FnMut(&[T]) -> anyhow::Result<Option<F>>,
) -> anyhow::Result<Option<(Vec<T>, F)>> {
    let Some(mut found) = test(seq)? else {
        return Ok(None);
    };
    let mut cur = seq.to_vec();
    let mut n = 2usize;
    let budget = budget.max(1);
    let mut used = 1u32;
    while cur.len() >= 2 && used < budget {
        let chunk = cur.len().div_ceil(n);
        let mut reduced = false;
        let mut i = 0;
        while i < cur.len() && used < budget {
            let cand: Vec<T> = cur[..i]
                .iter()
                .chain(cur[(i + chunk).min(cur.len())..].iter())
                .copied()
                .collect();
            if cand.is_empty() {
                i += chunk;
                continue;
            }
            used += 1;
            if let Some(f) = test(&cand)? {
                cur = cand;
                found = f;
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
    Ok(Some((cur, found)))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `test` for "the sequence holds every one of `need`, in order".
    fn holds(need: &'static [u32]) -> impl FnMut(&[u32]) -> anyhow::Result<Option<usize>> {
        move |s: &[u32]| {
            let mut it = s.iter();
            Ok(need.iter().all(|n| it.any(|x| x == n)).then_some(s.len()))
        }
    }

    #[test]
    fn one_culprit_among_many_is_found_alone() {
        let seq: Vec<u32> = (0..64).collect();
        let (min, len) = ddmin(&seq, 200, holds(&[37])).unwrap().unwrap();
        assert_eq!(min, vec![37]);
        assert_eq!(len, 1);
    }

    #[test]
    fn two_frames_that_must_come_in_order_are_both_kept() {
        let seq: Vec<u32> = (0..40).collect();
        let (min, _) = ddmin(&seq, 200, holds(&[3, 31])).unwrap().unwrap();
        assert_eq!(min, vec![3, 31]);
    }

    #[test]
    fn nothing_when_the_whole_sequence_does_not_reproduce_and_the_budget_holds() {
        let seq: Vec<u32> = (0..10).collect();
        assert!(ddmin(&seq, 200, holds(&[99])).unwrap().is_none());
        let mut calls = 0;
        let out = ddmin(&(0..64).collect::<Vec<u32>>(), 5, |s| {
            calls += 1;
            holds(&[5])(s)
        })
        .unwrap()
        .unwrap();
        assert_eq!(calls, 5);
        assert!(out.0.contains(&5));
    }
}
