//! AllReduce double ring: ring reduce-scatter then ring all-gather on each half of the
//! data, one ring clockwise (main stream, link channel 0) and one counter-clockwise (slave
//! stream, link channel 1) over the same ring of healthy links.
//!
//! Both directions of each ring link carry half the data at once, so on full-duplex links
//! it moves the data in half the ring's time for large messages, with the ring's two links
//! per rank (it runs where `ring` runs). HCCL cost per direction:
//! `2(p−1)α + 2(p−1)/p·(n/2)β + (p−1)/p·(n/2)γ`, the two directions concurrently.

use crate::templates::{
    double_ring, even_chunks, healthy_ring_for, ring_all_gather, ring_neighbours,
    ring_reduce_scatter, RingOrder, RingParams,
};
use oxccl_framework::{
    Constraints, Error, Executor, KernelArgs, KernelCtx, OpKind, Peers, PlanCtx, ResourceRequest,
};

/// The double-ring AllReduce executor.
pub struct DoubleRingAllReduce;

oxccl_framework::register_executor! {
    name: "double-ring",
    op: OpKind::AllReduce,
    description: "ring reduce-scatter + all-gather on each half of the data, the rings in opposite directions on two streams",
    constraints: Constraints::ANY,
    preference: 12,
    make: || Box::new(DoubleRingAllReduce),
}

impl Executor for DoubleRingAllReduce {
    fn resources(&self, ctx: &PlanCtx<'_>) -> Result<ResourceRequest, Error> {
        let order = healthy_ring_for(ctx.topology, "double-ring", OpKind::AllReduce)?;
        Ok(ResourceRequest {
            slave_streams: usize::from(ctx.ranks > 1),
            ..ResourceRequest::with_peers(Peers::List(ring_neighbours(&order, ctx.rank)))
        }
        .with_plan(RingOrder(order)))
    }

    fn kernel_run(&self, ctx: &mut KernelCtx<'_>, args: &KernelArgs) -> Result<(), Error> {
        let n = ctx.ranks;
        if n == 1 {
            args.copy_input_to_output(ctx);
            return Ok(());
        }
        let order = &ctx.plan::<RingOrder>()?.0;
        let es = args.op.dtype.size();
        let chunks = even_chunks(args.op.count, n, es);
        let positions: Vec<usize> = (0..n).collect();
        ctx.fork(1..=1);
        for dir in double_ring(order, &chunks, es) {
            let p = RingParams {
                order: &dir.order,
                stream: dir.stream,
                channel: dir.channel,
                chunks: &dir.chunks,
                ..RingParams::on_main_stream(order, &chunks, &positions, args)
            };
            ring_reduce_scatter(ctx, &p)?;
            ring_all_gather(ctx, &p)?;
        }
        ctx.join(1..=1);
        Ok(())
    }
}
