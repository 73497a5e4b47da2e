//! AllGatherV ring: `n - 1` pull steps around a ring of healthy links, blocks of any size.
//!
//! Zero-copy, the ring all-gather runs once on the users' outputs, with the blocks at
//! their displacements. Staged, it runs in rounds through CclOut: a rank copies the
//! round's piece of its input into its own slot, the ring gathers every rank's slot, and
//! the rank copies the other slots out to their blocks of its output. Every ring step ends
//! with the right neighbour's Ack, so when a round ends nobody reads this rank's CclOut
//! any more and the next round may refill it. Blocks of 0 elements still take part in the
//! handshakes. Two links per rank (the order comes from
//! [`healthy_ring`](crate::templates::healthy_ring)), so it keeps running when links break.
//! HCCL cost: `(p−1)α + (p−1)/p·nβ` per round, with `n` the largest block times `p`.

use super::gather_v_blocks;
use crate::templates::{healthy_ring_for, ring_all_gather, ring_neighbours, RingOrder, RingParams};
use oxccl_framework::platform::Rank;
use oxccl_framework::{
    BufRange, Constraints, Error, Executor, KernelArgs, KernelCtx, OpKind, Peers, PlanCtx,
    ResourceRequest,
};

/// The ring AllGatherV executor.
pub struct RingAllGatherV;

const NAME: &str = "ring";
const KIND: OpKind = OpKind::AllGatherV;

oxccl_framework::register_executor! {
    name: NAME,
    op: KIND,
    description: "n-1 pull steps around a ring of healthy links, staged in rounds through CclOut",
    constraints: Constraints::ANY,
    preference: 10,
    make: || Box::new(RingAllGatherV),
}

impl Executor for RingAllGatherV {
    fn resources(&self, ctx: &PlanCtx<'_>) -> Result<ResourceRequest, Error> {
        let order = healthy_ring_for(ctx.topology, NAME, KIND)?;
        Ok(
            ResourceRequest::with_peers(Peers::List(ring_neighbours(&order, ctx.rank)))
                .with_plan(RingOrder(order)),
        )
    }

    fn kernel_run(&self, ctx: &mut KernelCtx<'_>, args: &KernelArgs) -> Result<(), Error> {
        // Every ring step ends with the right neighbour's Ack: a round needs no more.
        let order = &ctx.plan::<RingOrder>()?.0;
        gather_v_blocks(
            ctx,
            args,
            NAME,
            |ctx, buffer, chunks| ring_all_gather(ctx, &ring(order, chunks, buffer, args)),
            |_, _| Ok(()),
        )
    }
}

/// The ring over `order` that gathers `chunks` of `buffer` on the main stream.
fn ring<'a>(
    order: &'a [Rank],
    chunks: &'a [(usize, usize)],
    buffer: BufRange,
    args: &KernelArgs,
) -> RingParams<'a> {
    RingParams {
        order,
        stream: 0,
        channel: 0,
        chunks,
        chunk_at: order,
        input: buffer,
        output: buffer,
        dtype: args.op.dtype,
        op: args.op.op,
    }
}
