//! AlltoAllV put-pairwise: `n - 1` steps; in step `k` rank `r` writes its pieces for
//! `r + k` into that rank's CclIn and receives from `r - k` (mod `n`).
//!
//! The put-based twin of [`super::pairwise`], for put-only links (TCP, RDMA write): each
//! step is one phase of [`p2p_put_exchange`], so the sender puts into per-source slots of
//! the receiver's CclIn and the receiver copies out locally; no rank reads a peer's
//! memory. A step uses one outgoing and one incoming link. Cost with `m` bytes per pair
//! and slots of `s` bytes: `(n−1)·⌈m/s⌉·3α + 2(n−1)mβ`. Over a whole call it talks to
//! every peer, so it needs a full mesh.

use super::pairwise_phases;
use crate::send_recv::{direct_p2p_resources, p2p_run_phases};
use crate::templates::p2p_put_exchange;
use oxccl_framework::{
    Constraints, Error, Executor, KernelArgs, KernelCtx, LinkNeed, OpKind, PlanCtx, ResourceRequest,
};

/// The put-pairwise AlltoAllV executor.
pub struct PutPairwiseAlltoAllV;

oxccl_framework::register_executor! {
    name: "put-pairwise",
    op: OpKind::AlltoAllV,
    description: "n-1 pairwise steps, the sender writing into the receiver's CclIn slots (put-only links)",
    constraints: Constraints { full_mesh: true, links: LinkNeed::Put, ..Constraints::ANY },
    preference: 5,
    make: || Box::new(PutPairwiseAlltoAllV),
}

impl Executor for PutPairwiseAlltoAllV {
    fn resources(&self, ctx: &PlanCtx<'_>) -> Result<ResourceRequest, Error> {
        direct_p2p_resources(ctx, "put-pairwise")
    }

    fn kernel_run(&self, ctx: &mut KernelCtx<'_>, args: &KernelArgs) -> Result<(), Error> {
        let phases = pairwise_phases(ctx.rank, ctx.ranks);
        p2p_run_phases(ctx, args, "put-pairwise", &phases, p2p_put_exchange)
    }
}
