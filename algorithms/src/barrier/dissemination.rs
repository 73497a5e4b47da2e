//! Barrier dissemination: `⌈log2 n⌉` rounds; in round `k` rank `r` signals rank
//! `r + 2^k` and waits for rank `r - 2^k` (mod `n`).
//!
//! After round `k` a rank has heard, directly or through the chain of earlier rounds, from
//! the `2^(k+1) - 1` ranks before it, so after the last round from every rank. Signals
//! only, on the main stream. The offsets `2^k` of one barrier are distinct and below `n`,
//! so every notify is posted at most once per barrier; rounds still alternate Ack and
//! DataSignal, so that two consecutive rounds on one link (small `n`, where a rank's
//! target in one round is its source in the next) never share a signal kind; the
//! device's epoch fence separates one barrier from the next (a peer posts in the next
//! barrier only after this rank finished this one, having consumed every post made to
//! it). Links to `2⌈log2 n⌉`
//! peers at most.
//! Cost: `⌈log2 p⌉α`.

use crate::templates::Round;
use oxccl_framework::platform::Rank;
use oxccl_framework::{
    Constraints, Error, Executor, KernelArgs, KernelCtx, LinkNeed, OpKind, Peers, PlanCtx,
    ResourceRequest,
};

/// The dissemination barrier executor.
pub struct DisseminationBarrier;

oxccl_framework::register_executor! {
    name: "dissemination",
    op: OpKind::Barrier,
    description: "ceil(log2 n) rounds, round k signals rank r+2^k and waits for rank r-2^k",
    // Signals only: no data crosses a link, so put-only links (TCP, RDMA) serve it.
    constraints: Constraints { full_mesh: true, links: LinkNeed::Put, ..Constraints::ANY },
    preference: 10,
    make: || Box::new(DisseminationBarrier),
}

/// `(to, from)` of every round for `rank`.
fn rounds(rank: Rank, ranks: usize) -> Vec<(Rank, Rank)> {
    std::iter::successors(Some(1usize), |d| d.checked_mul(2))
        .take_while(|&d| d < ranks)
        .map(|d| ((rank + d) % ranks, (rank + ranks - d) % ranks))
        .collect()
}

impl Executor for DisseminationBarrier {
    fn resources(&self, ctx: &PlanCtx<'_>) -> Result<ResourceRequest, Error> {
        let mut peers: Vec<Rank> = rounds(ctx.rank, ctx.ranks)
            .into_iter()
            .flat_map(|(to, from)| [to, from])
            .collect();
        peers.sort_unstable();
        peers.dedup();
        Ok(ResourceRequest::with_peers(Peers::List(peers)))
    }

    fn kernel_run(&self, ctx: &mut KernelCtx<'_>, _args: &KernelArgs) -> Result<(), Error> {
        for (k, (to, from)) in rounds(ctx.rank, ctx.ranks).into_iter().enumerate() {
            let round = if k % 2 == 0 {
                Round::Ack
            } else {
                Round::DataSignal
            };
            let (to, from) = (ctx.link(to, 0)?, ctx.link(from, 0)?);
            match round {
                Round::Ack => {
                    to.tx_ack(ctx.main());
                    from.rx_ack(ctx.main());
                }
                Round::DataSignal => {
                    to.tx_data_signal(ctx.main());
                    from.rx_data_signal(ctx.main());
                }
            }
        }
        Ok(())
    }
}
