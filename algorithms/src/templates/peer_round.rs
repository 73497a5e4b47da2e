//! One synchronisation round with every peer, on the main stream.
//!
//! Post the round's signal to every peer, then wait for every peer's: after it, every rank
//! has reached this point of its program. Single-step algorithms (one-shot, mesh-push)
//! are built from such rounds. Rounds that follow each other must alternate their signal
//! (Ack, then DataSignal, then Ack...) or their link channel, so that no notify is posted
//! twice before its wait.

use oxccl_framework::{Error, KernelCtx};

oxccl_framework::register_template! {
    name: "all_peers_round",
    description: "post one signal to every peer, then wait for every peer's, on the main stream",
}

/// Which link signal a round uses.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Round {
    /// Ack: "I am ready".
    Ack,
    /// DataSignal: "my data is in place / I am done with yours".
    DataSignal,
}

/// Append a round with every other rank on link `channel`.
pub fn all_peers_round(ctx: &mut KernelCtx<'_>, channel: usize, round: Round) -> Result<(), Error> {
    let me = ctx.rank;
    let links = (0..ctx.ranks)
        .filter(|&p| p != me)
        .map(|p| ctx.link(p, channel))
        .collect::<Result<Vec<_>, _>>()?;
    for l in &links {
        match round {
            Round::Ack => l.tx_ack(ctx.main()),
            Round::DataSignal => l.tx_data_signal(ctx.main()),
        }
    }
    for l in &links {
        match round {
            Round::Ack => l.rx_ack(ctx.main()),
            Round::DataSignal => l.rx_data_signal(ctx.main()),
        }
    }
    Ok(())
}
