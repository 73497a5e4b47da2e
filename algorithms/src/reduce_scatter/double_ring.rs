//! ReduceScatter double ring: the first half of every block is reduced around a ring of
//! healthy links clockwise (main stream, link channel 0), the second half
//! counter-clockwise (slave stream, link channel 1), so both directions of every ring
//! link carry data at once.
//!
//! As in `ring`, partial sums need one block per rank of room and go to scratch (one CCL
//! buffer, which caps an iteration at the CCL buffer over the rank count); the two
//! directions use disjoint halves of it, and each direction's last step writes its half
//! of the rank's block straight into the output.
//! HCCL cost per direction: `(p−1)α + (p−1)/p·(n/2)β + (p−1)/p·(n/2)γ`, concurrently.

use crate::templates::{
    double_ring, healthy_ring_for, ring_neighbours, ring_reduce_scatter_into, RingOrder,
    RingParams, RingTargets,
};
use oxccl_framework::{
    BufRange, Constraints, Error, Executor, KernelArgs, KernelCtx, OpKind, Peers, PlanCtx,
    ResourceRequest,
};

/// The double-ring ReduceScatter executor.
pub struct DoubleRingReduceScatter;

oxccl_framework::register_executor! {
    name: "double-ring",
    op: OpKind::ReduceScatter,
    description: "half of every block reduced clockwise, half counter-clockwise, partial sums in scratch",
    constraints: Constraints::ANY,
    preference: 12,
    make: || Box::new(DoubleRingReduceScatter),
}

impl Executor for DoubleRingReduceScatter {
    fn resources(&self, ctx: &PlanCtx<'_>) -> Result<ResourceRequest, Error> {
        let order = healthy_ring_for(ctx.topology, "double-ring", OpKind::ReduceScatter)?;
        let peers = ResourceRequest::with_peers(Peers::List(ring_neighbours(&order, ctx.rank)));
        Ok(ResourceRequest {
            slave_streams: usize::from(ctx.ranks > 1),
            ..super::with_partials_scratch(ctx, peers)
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
        let len = args.op.count * es;
        let blocks = args.blocks(n);
        // Partial sums of block c at c * len of scratch, split like the blocks.
        let (partials, partial_chunks) = super::partials(args, n);
        let [a, b] = double_ring(order, &blocks, es);
        let [pa, pb] = double_ring(order, &partial_chunks, es);
        let own_half = a.chunks[0].1;
        ctx.fork(1..=1);
        for (dir, partial, result) in [
            (a, pa, part(args.output, 0, own_half)),
            (b, pb, part(args.output, own_half, len - own_half)),
        ] {
            let p = RingParams {
                order: &dir.order,
                stream: dir.stream,
                channel: dir.channel,
                chunks: &dir.chunks,
                chunk_at: &dir.order,
                ..RingParams::on_main_stream(order, &blocks, order, args)
            };
            let targets = RingTargets {
                partials,
                partial_chunks: &partial.chunks,
                result: Some(result),
            };
            ring_reduce_scatter_into(ctx, &p, &targets)?;
        }
        ctx.join(1..=1);
        Ok(())
    }
}

/// `len` bytes at `from` of `r`.
fn part(r: BufRange, from: usize, len: usize) -> BufRange {
    BufRange {
        buf: r.buf,
        offset: r.offset + from,
        len,
    }
}
