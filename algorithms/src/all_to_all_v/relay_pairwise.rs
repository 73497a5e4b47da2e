//! AlltoAllV relay-pairwise: the pairwise exchange over every healthy link, and the
//! blocks of every pair without a link relayed through all their common neighbours.
//!
//! Step `k` of `n - 1` sends to `r + k` and receives from `r - k` (mod `n`) as in
//! [`pairwise`](super::pairwise), through the p2p template's CclIn slots on the main
//! stream (link channel 0); a step whose pair has no link is skipped on both ends (the
//! link is symmetric, so they agree). Those pairs go through their relays on a slave
//! stream meanwhile (channel 1): the sender writes one piece per relay into the relay's
//! Scratch slot and the receiver reads it from there, the relay only signals (the
//! [`relay_exchange`] template), because no rank but the two ends knows the pair's counts.
//! The limits are those of [`relay-p2p`](crate::send_recv::relay_p2p): a relayed pair
//! moves at most its relays' slots per call (`Unsupported` otherwise, on both ends), and
//! every relay and every end of an unlinked pair must have some elements of its own in
//! the call (else its peers' waits time out).
//! Cost: pairwise's `(n−1)·⌈m/s⌉·2α + 2(n−1)mβ` over the linked steps, plus `2α` and
//! `m/r·β` per relayed pair with `r` relays, overlapped with them.
//!
//! [`relay_exchange`]: crate::templates::relay_p2p::relay_exchange

use crate::send_recv::relay_p2p::{linked, relay_p2p_resources, relay_p2p_run};
use crate::templates::P2pPhase;
use oxccl_framework::{
    Constraints, Error, Executor, KernelArgs, KernelCtx, OpKind, PlanCtx, ResourceRequest,
};

/// The relaying pairwise AlltoAllV executor.
pub struct RelayPairwiseAlltoAllV;

const NAME: &str = "relay-pairwise";

oxccl_framework::register_executor! {
    name: NAME,
    op: OpKind::AlltoAllV,
    description: "pairwise over healthy links; unlinked pairs written to and read from the common neighbours' Scratch",
    constraints: Constraints::ANY,
    preference: 5,
    make: || Box::new(RelayPairwiseAlltoAllV),
}

impl Executor for RelayPairwiseAlltoAllV {
    fn resources(&self, ctx: &PlanCtx<'_>) -> Result<ResourceRequest, Error> {
        relay_p2p_resources(ctx, NAME, OpKind::AlltoAllV)
    }

    fn kernel_run(&self, ctx: &mut KernelCtx<'_>, args: &KernelArgs) -> Result<(), Error> {
        let (me, n, t) = (ctx.rank, ctx.ranks, ctx.topology);
        let phases: Vec<P2pPhase> = (1..n)
            .map(|k| P2pPhase {
                send_to: linked(t, me, vec![(me + k) % n]),
                recv_from: linked(t, me, vec![(me + n - k) % n]),
            })
            .collect();
        relay_p2p_run(ctx, args, NAME, &phases)
    }
}
