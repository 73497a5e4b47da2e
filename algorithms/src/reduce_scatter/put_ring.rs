//! ReduceScatter put ring: `n - 1` put steps around a ring, for put-only links.
//!
//! Like [`ring`](super::ring), block `order[i]` travels once around the ring and ends,
//! fully reduced, at ring position `i`; but each step puts the partial sum into the right
//! neighbour's receive slot and reduces the left neighbour's locally (see
//! [`put_ring`](crate::templates::put_ring)). Scratch holds the receive slot and one
//! partial sum (a partial is sent on in the step after it was made), each one block of an
//! iteration; an iteration is capped at the CCL buffer over the rank count.

use crate::templates::{
    healthy_ring_for, put_ring_reduce_scatter, ring_neighbours, PutRing, RingOrder,
};
use oxccl_framework::platform::{Buf, Rank};
use oxccl_framework::{
    BufRange, Constraints, Error, Executor, KernelArgs, KernelCtx, LinkNeed, OpKind, Peers,
    PlanCtx, ResourceRequest,
};

/// The put ring ReduceScatter executor.
pub struct PutRingReduceScatter;

const NAME: &str = "put-ring";

oxccl_framework::register_executor! {
    name: NAME,
    op: OpKind::ReduceScatter,
    description: "n-1 put steps around a ring into the neighbour's Scratch slot, reduced locally; runs over put-only links",
    constraints: Constraints { links: LinkNeed::Put, ..Constraints::ANY },
    preference: 5,
    make: || Box::new(PutRingReduceScatter),
}

impl Executor for PutRingReduceScatter {
    fn resources(&self, ctx: &PlanCtx<'_>) -> Result<ResourceRequest, Error> {
        let order = healthy_ring_for(ctx.topology, NAME, OpKind::ReduceScatter)?;
        let request = ResourceRequest::with_peers(Peers::List(ring_neighbours(&order, ctx.rank)))
            .with_plan(RingOrder(order));
        Ok(super::with_put_scratch(ctx, request, 2))
    }

    fn kernel_run(&self, ctx: &mut KernelCtx<'_>, args: &KernelArgs) -> Result<(), Error> {
        let n = ctx.ranks;
        if n == 1 {
            args.copy_input_to_output(ctx);
            return Ok(());
        }
        let order = &ctx.plan::<RingOrder>()?.0;
        let blocks = args.blocks(n);
        let len = blocks[0].1;
        let scratch = |offset| BufRange {
            buf: Buf::Scratch,
            offset,
            len,
        };
        let (slot, partials) = (scratch(0), scratch(len));
        let ring = PutRing {
            order,
            stream: 0,
            channel: 0,
            chunk_at: order,
            slot,
            dtype: args.op.dtype,
            op: args.op.op,
        };
        let input = |r: Rank, c: usize| args.input.at(r, blocks[c].0, blocks[c].1);
        let partial = |r: Rank, c: usize| match c == r {
            true => args.output.at(r, 0, len),
            false => partials.at(r, 0, len),
        };
        put_ring_reduce_scatter(ctx, &ring, &input, &partial)
    }
}
