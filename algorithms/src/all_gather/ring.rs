//! AllGather ring: `n - 1` pull steps around a ring of healthy links, on the main stream.
//!
//! Ring position `i` starts with its own block (the rank `order[i]`'s input) and in each
//! step copies from its left neighbour's output the block that neighbour received in the
//! step before. Each rank reads `(n - 1)/n` of the output once, over two links only, so
//! it keeps running when links break: the order is the natural `0, 1, ..., n-1` when its
//! links are healthy, otherwise a Hamiltonian cycle found by
//! [`healthy_ring`](crate::templates::healthy_ring).
//! HCCL cost: `(p−1)α + (p−1)/p·nβ`.
//!
//! Each step ends with the right neighbour's Ack ("done reading your buffer"), so when an
//! iteration ends nobody reads this rank's output any more and the staged loop may copy
//! it out and reuse the CCL buffers at once.

use super::place_own_block;
use crate::templates::{healthy_ring_for, ring_all_gather, ring_neighbours, RingOrder, RingParams};
use oxccl_framework::{
    Constraints, Error, Executor, KernelArgs, KernelCtx, OpKind, Peers, PlanCtx, ResourceRequest,
};

/// The ring AllGather executor.
pub struct RingAllGather;

oxccl_framework::register_executor! {
    name: "ring",
    op: OpKind::AllGather,
    description: "n-1 pull steps around a ring of healthy links, on the main stream",
    constraints: Constraints::ANY,
    preference: 10,
    make: || Box::new(RingAllGather),
}

impl Executor for RingAllGather {
    fn resources(&self, ctx: &PlanCtx<'_>) -> Result<ResourceRequest, Error> {
        let order = healthy_ring_for(ctx.topology, "ring", OpKind::AllGather)?;
        Ok(
            ResourceRequest::with_peers(Peers::List(ring_neighbours(&order, ctx.rank)))
                .with_plan(RingOrder(order)),
        )
    }

    fn kernel_run(&self, ctx: &mut KernelCtx<'_>, args: &KernelArgs) -> Result<(), Error> {
        let blocks = args.blocks(ctx.ranks);
        place_own_block(ctx, args, &blocks);
        if ctx.ranks == 1 {
            return Ok(());
        }
        let order = &ctx.plan::<RingOrder>()?.0;
        let p = RingParams::on_main_stream(order, &blocks, order, args);
        ring_all_gather(ctx, &p)
    }
}
