//! AllGather put ring: `n - 1` put steps around a ring, for put-only links.
//!
//! Like [`ring`](super::ring), every block travels once around the ring, but each step
//! puts the block this rank holds into its right neighbour instead of reading the left
//! neighbour's (see [`put_ring`](crate::templates::put_ring)). Staged, the put lands in the
//! right neighbour's CclOut block itself and needs no scratch; zero-copy, the output is a
//! user buffer, which a put may not write, so it lands in a Scratch slot of one block and
//! the receiver copies it into place (an iteration is then capped at the CCL buffer over
//! the rank count).

use super::place_own_block;
use crate::templates::{
    healthy_ring_for, put_ring_all_gather, ring_neighbours, PutRing, RingOrder,
};
use oxccl_framework::platform::{Buf, Rank};
use oxccl_framework::{
    BufRange, Constraints, Error, Executor, KernelArgs, KernelCtx, LinkNeed, OpKind, Peers,
    PlanCtx, ResourceRequest,
};

/// The put ring AllGather executor.
pub struct PutRingAllGather;

const NAME: &str = "put-ring";

oxccl_framework::register_executor! {
    name: NAME,
    op: OpKind::AllGather,
    description: "n-1 put steps around a ring, into the neighbour's CclOut (staged) or a Scratch slot (zero-copy); runs over put-only links",
    constraints: Constraints { links: LinkNeed::Put, ..Constraints::ANY },
    preference: 5,
    make: || Box::new(PutRingAllGather),
}

impl Executor for PutRingAllGather {
    fn resources(&self, ctx: &PlanCtx<'_>) -> Result<ResourceRequest, Error> {
        let order = healthy_ring_for(ctx.topology, NAME, OpKind::AllGather)?;
        let request = ResourceRequest::with_peers(Peers::List(ring_neighbours(&order, ctx.rank)))
            .with_plan(RingOrder(order));
        Ok(super::with_slot_scratch(ctx, request, 1))
    }

    fn kernel_run(&self, ctx: &mut KernelCtx<'_>, args: &KernelArgs) -> Result<(), Error> {
        let blocks = args.blocks(ctx.ranks);
        place_own_block(ctx, args, &blocks);
        if ctx.ranks == 1 {
            return Ok(());
        }
        let order = &ctx.plan::<RingOrder>()?.0;
        let ring = PutRing {
            order,
            stream: 0,
            channel: 0,
            chunk_at: order,
            slot: BufRange {
                buf: Buf::Scratch,
                offset: 0,
                len: blocks[0].1,
            },
            dtype: args.op.dtype,
            op: args.op.op,
        };
        let held = |r: Rank, c: usize| args.output.at(r, blocks[c].0, blocks[c].1);
        put_ring_all_gather(ctx, &ring, &held, !args.output.buf.is_user())
    }
}
