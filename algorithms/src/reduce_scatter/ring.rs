//! ReduceScatter ring: `n - 1` pull steps around a ring of healthy links, on the main
//! stream.
//!
//! In each step a rank reduces its left neighbour's partial sum of one block (the left
//! neighbour's input block in the first step) with its own input block and keeps the
//! result for its right neighbour; block `order[i]` travels once around the ring and
//! ends, fully reduced, at ring position `i`.
//! Partial sums need one block per rank of room, which the output (one block) lacks, so
//! they go to scratch, and the last step writes straight into the output. The scratch is
//! one CCL buffer, which caps a zero-copy iteration at the CCL buffer over the rank count.
//! Needs two links per rank, so it keeps running when links break (the order comes from
//! [`healthy_ring`](crate::templates::healthy_ring)).
//! HCCL cost: `(p−1)α + (p−1)/p·nβ + (p−1)/p·nγ`.
//!
//! Each step ends with the right neighbour's Ack ("done reading your buffers"), so when an
//! iteration ends nobody reads this rank's input or scratch any more.

use crate::templates::{healthy_ring_for, ring_neighbours, ring_reduce_scatter_into, RingOrder};
use oxccl_framework::{
    Constraints, Error, Executor, KernelArgs, KernelCtx, OpKind, Peers, PlanCtx, ResourceRequest,
};

/// The ring ReduceScatter executor.
pub struct RingReduceScatter;

oxccl_framework::register_executor! {
    name: "ring",
    op: OpKind::ReduceScatter,
    description: "n-1 pull steps around a ring of healthy links, partial sums in scratch",
    constraints: Constraints::ANY,
    preference: 10,
    make: || Box::new(RingReduceScatter),
}

impl Executor for RingReduceScatter {
    fn resources(&self, ctx: &PlanCtx<'_>) -> Result<ResourceRequest, Error> {
        let order = healthy_ring_for(ctx.topology, "ring", OpKind::ReduceScatter)?;
        let request = ResourceRequest::with_peers(Peers::List(ring_neighbours(&order, ctx.rank)));
        Ok(super::with_partials_scratch(ctx, request).with_plan(RingOrder(order)))
    }

    fn kernel_run(&self, ctx: &mut KernelCtx<'_>, args: &KernelArgs) -> Result<(), Error> {
        let order = &ctx.plan::<RingOrder>()?.0;
        super::scatter_via_scratch(ctx, args, order, ring_reduce_scatter_into)
    }
}
