//! AllReduce put ring: ring reduce-scatter then ring all-gather by puts, for put-only links.
//!
//! The same `2(n - 1)` steps as [`ring`](super::ring), but nothing is read out of a peer:
//! each step puts one chunk into the right neighbour's receive slot (Scratch) and reduces
//! what the left neighbour put into this rank's slot (see
//! [`put_ring`](crate::templates::put_ring)). The all-gather puts straight into the right
//! neighbour's CclOut when staged, and through the slot on user buffers (zero-copy). One
//! extra local Copy per step against the pull ring; the same signal latencies.
//!
//! Scratch is one slot of a chunk: an iteration is capped at one CCL buffer (the staged
//! loop's own cap), so the slot is the CCL buffer over the rank count.

use crate::templates::{
    even_chunks, healthy_ring_for, put_ring_all_gather, put_ring_reduce_scatter, ring_neighbours,
    PutRing, RingOrder,
};
use oxccl_framework::platform::{Buf, Rank};
use oxccl_framework::{
    BufRange, Constraints, Error, Executor, KernelArgs, KernelCtx, LinkNeed, OpKind, Peers,
    PlanCtx, ResourceRequest,
};

/// The put ring AllReduce executor.
pub struct PutRingAllReduce;

const NAME: &str = "put-ring";

oxccl_framework::register_executor! {
    name: NAME,
    op: OpKind::AllReduce,
    description: "ring reduce-scatter and all-gather by puts into the neighbour's Scratch slot, reduced locally; runs over put-only links",
    constraints: Constraints { links: LinkNeed::Put, ..Constraints::ANY },
    preference: 5,
    make: || Box::new(PutRingAllReduce),
}

impl Executor for PutRingAllReduce {
    fn resources(&self, ctx: &PlanCtx<'_>) -> Result<ResourceRequest, Error> {
        let order = healthy_ring_for(ctx.topology, NAME, OpKind::AllReduce)?;
        let request = ResourceRequest::with_peers(Peers::List(ring_neighbours(&order, ctx.rank)))
            .with_plan(RingOrder(order));
        if ctx.ranks == 1 {
            return Ok(request);
        }
        Ok(super::with_chunk_slots(ctx, request, 1))
    }

    fn kernel_run(&self, ctx: &mut KernelCtx<'_>, args: &KernelArgs) -> Result<(), Error> {
        let n = ctx.ranks;
        if n == 1 {
            args.copy_input_to_output(ctx);
            return Ok(());
        }
        let op = &args.op;
        let order = &ctx.plan::<RingOrder>()?.0;
        let chunks = even_chunks(op.count, n, op.dtype.size());
        let positions: Vec<usize> = (0..n).collect();
        let ring = PutRing {
            order,
            stream: 0,
            channel: 0,
            chunk_at: &positions,
            slot: BufRange {
                buf: Buf::Scratch,
                offset: 0,
                len: chunks[0].1,
            },
            dtype: op.dtype,
            op: op.op,
        };
        let input = |r: Rank, c: usize| args.input.at(r, chunks[c].0, chunks[c].1);
        let output = |r: Rank, c: usize| args.output.at(r, chunks[c].0, chunks[c].1);
        put_ring_reduce_scatter(ctx, &ring, &input, &output)?;
        put_ring_all_gather(ctx, &ring, &output, !args.output.buf.is_user())
    }
}
