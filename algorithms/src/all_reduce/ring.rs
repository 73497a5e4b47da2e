//! AllReduce ring: ring reduce-scatter then ring all-gather, on the main stream.
//!
//! `2(n - 1)` steps, each with one neighbour on each side: the AllReduce that needs the
//! fewest links (two per rank), so it runs on rings and on meshes with broken links. The
//! order is the natural `0, 1, ..., n-1` when its links are healthy, otherwise a
//! Hamiltonian cycle of the healthy links found by [`healthy_ring`](crate::templates::healthy_ring).
//! HCCL cost: `2(p−1)α + 2(p−1)/p·nβ + (p−1)/p·nγ`.

use crate::templates::{
    even_chunks, healthy_ring_for, ring_all_gather, ring_neighbours, ring_reduce_scatter,
    RingOrder, RingParams,
};
use oxccl_framework::{
    Constraints, Error, Executor, KernelArgs, KernelCtx, OpKind, Peers, PlanCtx, ResourceRequest,
};

/// The ring AllReduce executor.
pub struct RingAllReduce;

oxccl_framework::register_executor! {
    name: "ring",
    op: OpKind::AllReduce,
    description: "ring reduce-scatter then ring all-gather over a ring of healthy links, on the main stream",
    constraints: Constraints::ANY,
    preference: 10,
    make: || Box::new(RingAllReduce),
}

impl Executor for RingAllReduce {
    fn resources(&self, ctx: &PlanCtx<'_>) -> Result<ResourceRequest, Error> {
        let order = healthy_ring_for(ctx.topology, "ring", OpKind::AllReduce)?;
        Ok(
            ResourceRequest::with_peers(Peers::List(ring_neighbours(&order, ctx.rank)))
                .with_plan(RingOrder(order)),
        )
    }

    fn kernel_run(&self, ctx: &mut KernelCtx<'_>, args: &KernelArgs) -> Result<(), Error> {
        if ctx.ranks == 1 {
            args.copy_input_to_output(ctx);
            return Ok(());
        }
        let op = &args.op;
        let order = &ctx.plan::<RingOrder>()?.0;
        let positions: Vec<usize> = (0..ctx.ranks).collect();
        let chunks = even_chunks(op.count, ctx.ranks, op.dtype.size());
        let p = RingParams::on_main_stream(order, &chunks, &positions, args);
        ring_reduce_scatter(ctx, &p)?;
        ring_all_gather(ctx, &p)
    }
}
