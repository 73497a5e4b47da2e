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

use super::{block_layout, PieceRounds};
use crate::templates::{healthy_ring_for, ring_all_gather, ring_neighbours, RingParams};
use oxccl_framework::platform::{Buf, Rank};
use oxccl_framework::{
    BufRange, Constraints, Error, Executor, KernelArgs, KernelCtx, Mode, OpKind, Peers, PlanCtx,
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
        Ok(ResourceRequest::with_peers(Peers::List(ring_neighbours(
            &order, ctx.rank,
        ))))
    }

    fn kernel_run(&self, ctx: &mut KernelCtx<'_>, args: &KernelArgs) -> Result<(), Error> {
        let (counts, displs) = block_layout(NAME, KIND, args)?;
        let (me, n, es) = (ctx.rank, ctx.ranks, args.op.dtype.size());
        if !args.aliased {
            let len = counts[me] * es;
            let (src, dst) = (
                args.input.at(me, 0, len),
                args.output.at(me, displs[me] * es, len),
            );
            ctx.main().copy(src, dst);
        }
        if n == 1 {
            return Ok(());
        }
        let order = healthy_ring_for(ctx.topology, NAME, KIND)?;
        if args.mode == Mode::Direct {
            let chunks: Vec<(usize, usize)> =
                (0..n).map(|s| (displs[s] * es, counts[s] * es)).collect();
            return ring_all_gather(ctx, &ring(&order, &chunks, args.output, args));
        }
        let plan = PieceRounds::new(NAME, KIND, counts, es, args.ccl_bytes)?;
        let slots = BufRange {
            buf: Buf::CclOut,
            offset: 0,
            len: n * plan.slot,
        };
        for t in 0..plan.rounds {
            let pieces: Vec<(usize, usize)> =
                counts.iter().map(|&c| plan.piece(c, es, t)).collect();
            let chunks: Vec<(usize, usize)> =
                (0..n).map(|s| (s * plan.slot, pieces[s].1)).collect();
            let (at, len) = pieces[me];
            let (src, dst) = (args.input.at(me, at, len), slots.at(me, chunks[me].0, len));
            ctx.main().copy(src, dst);
            ring_all_gather(ctx, &ring(&order, &chunks, slots, args))?;
            for s in (0..n).filter(|&s| s != me) {
                let (at, len) = pieces[s];
                let src = slots.at(me, chunks[s].0, len);
                let dst = args.output.at(me, displs[s] * es + at, len);
                ctx.main().copy(src, dst);
            }
        }
        Ok(())
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
