//! `--drop` and `--reorder`, shared by the commands that can impair what they receive.

use uroce::datapath::impair::Impairment;

/// Loss and reordering of received frames at the endpoint, for recovery tests where
/// `tc netem` is not available (this host's kernel has no `sch_netem`).
#[derive(clap::Args, Debug, Clone)]
pub struct ImpairArgs {
    /// Drop this share (0..0.5) of received frames on purpose, as a lossy path would.
    #[arg(long, default_value_t = 0.0)]
    drop: f64,
    /// Hold back this share (0..0.5) of received frames behind the next one, as a
    /// reordering path would.
    #[arg(long, default_value_t = 0.0)]
    reorder: f64,
}

impl ImpairArgs {
    /// The impairment asked for, or why it is refused.
    pub fn impairment(&self) -> anyhow::Result<Impairment> {
        let i = Impairment {
            drop: self.drop,
            reorder: self.reorder,
        };
        i.validate().map_err(anyhow::Error::msg)?;
        Ok(i)
    }
}
