//! AlltoAllV pairwise: `n - 1` steps; in step `k` rank `r` sends to `r + k` and receives
//! from `r - k` (mod `n`), HCCL's pairwise exchange.
//!
//! Each step is one phase of the [`p2p_exchange`] template: the pieces go through
//! per-destination slots of the sender's CclIn, one slot-full per round, in zero-copy and
//! staged mode alike (the receiver does not know the sender's displacements, so it cannot
//! read the sender's user buffer). A step uses one outgoing and one incoming link, so the
//! links are never oversubscribed; empty pairs are skipped without a signal and need no
//! link. The own block is a local copy.
//! Cost with `m` bytes per pair and slots of `s` bytes: `(n−1)·⌈m/s⌉·2α + 2(n−1)mβ`.
//! Over a whole call it talks to every peer, so it needs a full mesh.

use super::pairwise_phases;
use crate::send_recv::{direct_p2p_resources, p2p_run_phases};
use crate::templates::p2p_exchange;
use oxccl_framework::{
    Constraints, Error, Executor, KernelArgs, KernelCtx, OpKind, PlanCtx, ResourceRequest,
};

/// The pairwise AlltoAllV executor.
pub struct PairwiseAlltoAllV;

oxccl_framework::register_executor! {
    name: "pairwise",
    op: OpKind::AlltoAllV,
    description: "n-1 steps, step k sends to r+k and receives from r-k, through CclIn slots",
    constraints: Constraints { full_mesh: true, ..Constraints::ANY },
    preference: 10,
    make: || Box::new(PairwiseAlltoAllV),
}

impl Executor for PairwiseAlltoAllV {
    fn resources(&self, ctx: &PlanCtx<'_>) -> Result<ResourceRequest, Error> {
        direct_p2p_resources(ctx, "pairwise")
    }

    fn kernel_run(&self, ctx: &mut KernelCtx<'_>, args: &KernelArgs) -> Result<(), Error> {
        let phases = pairwise_phases(ctx.rank, ctx.ranks);
        p2p_run_phases(ctx, args, "pairwise", &phases, p2p_exchange)
    }
}
