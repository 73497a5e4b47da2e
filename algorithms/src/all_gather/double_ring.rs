//! AllGather double ring: the first half of every block travels clockwise around a ring of
//! healthy links (main stream, link channel 0), the second half counter-clockwise (slave
//! stream, link channel 1), so both directions of every ring link carry data at once.
//!
//! Ring position `i` owns block `order[i]` in both directions (the reversed ring's
//! position of a rank differs, so each direction names its owners by rank).
//! HCCL cost per direction: `(p−1)α + (p−1)/p·(n/2)β`, the two concurrently.

use super::place_own_block;
use crate::templates::{
    double_ring, healthy_ring_for, ring_all_gather, ring_neighbours, RingOrder, RingParams,
};
use oxccl_framework::{
    Constraints, Error, Executor, KernelArgs, KernelCtx, OpKind, Peers, PlanCtx, ResourceRequest,
};

/// The double-ring AllGather executor.
pub struct DoubleRingAllGather;

oxccl_framework::register_executor! {
    name: "double-ring",
    op: OpKind::AllGather,
    description: "half of every block clockwise, half counter-clockwise, around a ring of healthy links on two streams",
    constraints: Constraints::ANY,
    preference: 12,
    make: || Box::new(DoubleRingAllGather),
}

impl Executor for DoubleRingAllGather {
    fn resources(&self, ctx: &PlanCtx<'_>) -> Result<ResourceRequest, Error> {
        let order = healthy_ring_for(ctx.topology, "double-ring", OpKind::AllGather)?;
        Ok(ResourceRequest {
            slave_streams: usize::from(ctx.ranks > 1),
            ..ResourceRequest::with_peers(Peers::List(ring_neighbours(&order, ctx.rank)))
        }
        .with_plan(RingOrder(order)))
    }

    fn kernel_run(&self, ctx: &mut KernelCtx<'_>, args: &KernelArgs) -> Result<(), Error> {
        let blocks = args.blocks(ctx.ranks);
        place_own_block(ctx, args, &blocks);
        if ctx.ranks == 1 {
            return Ok(());
        }
        let order = &ctx.plan::<RingOrder>()?.0;
        ctx.fork(1..=1);
        for dir in double_ring(order, &blocks, args.op.dtype.size()) {
            // Position i of this direction owns block dir.order[i].
            let p = RingParams {
                order: &dir.order,
                stream: dir.stream,
                channel: dir.channel,
                chunks: &dir.chunks,
                chunk_at: &dir.order,
                ..RingParams::on_main_stream(order, &blocks, order, args)
            };
            ring_all_gather(ctx, &p)?;
        }
        ctx.join(1..=1);
        Ok(())
    }
}
