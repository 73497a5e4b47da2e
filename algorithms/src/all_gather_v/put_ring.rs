//! AllGatherV put ring: `n - 1` put steps around a ring per round, blocks of any size, for
//! put-only links.
//!
//! In both modes the blocks move in rounds through CclOut slots (see
//! `gather_v_blocks`): a rank copies the round's piece of its
//! input into its own slot, the put ring all-gather
//! ([`put_ring`](crate::templates::put_ring)) writes each piece into the right
//! neighbour's slot for it (CclOut, which a put may write), and the rank copies the other
//! slots out to their blocks of its output. Zero-copy too, since a put may not write a
//! peer's user output. Each step's Ack from the receiver comes after its copy-out of the
//! previous round, so a slot is never refilled early. Blocks of 0 elements still take
//! part in the handshakes. Two links per rank, ordered by
//! [`healthy_ring`](crate::templates::healthy_ring).

use super::gather_v_blocks;
use crate::templates::{
    healthy_ring_for, put_ring_all_gather, ring_neighbours, PutRing, RingOrder,
};
use oxccl_framework::platform::{Buf, Rank};
use oxccl_framework::{
    BufRange, Constraints, Error, Executor, KernelArgs, KernelCtx, LinkNeed, Mode, OpKind, Peers,
    PlanCtx, ResourceRequest,
};

/// The put ring AllGatherV executor.
pub struct PutRingAllGatherV;

const NAME: &str = "put-ring";
const KIND: OpKind = OpKind::AllGatherV;

oxccl_framework::register_executor! {
    name: NAME,
    op: KIND,
    description: "n-1 put steps around a ring per round into the neighbour's CclOut slots; runs over put-only links",
    constraints: Constraints { links: LinkNeed::Put, ..Constraints::ANY },
    preference: 5,
    make: || Box::new(PutRingAllGatherV),
}

impl Executor for PutRingAllGatherV {
    fn resources(&self, ctx: &PlanCtx<'_>) -> Result<ResourceRequest, Error> {
        let order = healthy_ring_for(ctx.topology, NAME, KIND)?;
        Ok(
            ResourceRequest::with_peers(Peers::List(ring_neighbours(&order, ctx.rank)))
                .with_plan(RingOrder(order)),
        )
    }

    fn kernel_run(&self, ctx: &mut KernelCtx<'_>, args: &KernelArgs) -> Result<(), Error> {
        let order = &ctx.plan::<RingOrder>()?.0;
        // The rounds through CclOut slots in either mode: the user's output is no target
        // for a put.
        let through_slots = KernelArgs {
            mode: Mode::Staged,
            ..args.clone()
        };
        gather_v_blocks(
            ctx,
            &through_slots,
            NAME,
            |ctx, buffer, chunks| {
                let ring = PutRing {
                    order,
                    stream: 0,
                    channel: 0,
                    chunk_at: order,
                    // Unused: the puts land in place, in the CclOut slots.
                    slot: BufRange {
                        buf: Buf::Scratch,
                        offset: 0,
                        len: 0,
                    },
                    dtype: args.op.dtype,
                    op: args.op.op,
                };
                let held = |r: Rank, c: usize| buffer.at(r, chunks[c].0, chunks[c].1);
                put_ring_all_gather(ctx, &ring, &held, true)
            },
            |_, _| Ok(()),
        )
    }
}
