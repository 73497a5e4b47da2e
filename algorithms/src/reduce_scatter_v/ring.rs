//! ReduceScatterV ring: `n - 1` pull steps around a ring of healthy links per round, blocks
//! of any size.
//!
//! Each round reduces one slot-sized piece of every block: a rank reduces its left
//! neighbour's partial sum of one piece (the left neighbour's input in the first step)
//! with its own, and keeps the result for its right neighbour; piece `order[i]` ends,
//! fully reduced, in ring position `i`'s output. Partial sums live in CclOut slots, one
//! per rank. Staged, the round's pieces of the input are first copied into CclIn slots;
//! zero-copy, the ring reads them straight from the users' inputs. Every step ends with
//! the right neighbour's Ack, so when a round ends nobody reads this rank's CCL slots any
//! more. Two links per rank (order from [`healthy_ring`](crate::templates::healthy_ring)).
//! HCCL cost: `(p−1)α + (p−1)/p·nβ + (p−1)/p·nγ` per round, with `n` the largest block
//! times `p`.

use crate::all_gather_v::{block_layout, PieceRounds};
use crate::templates::{
    healthy_ring_for, ring_neighbours, ring_reduce_scatter_into, RingOrder, RingParams, RingTargets,
};
use oxccl_framework::platform::Buf;
use oxccl_framework::{
    BufRange, Constraints, Error, Executor, KernelArgs, KernelCtx, Mode, OpKind, Peers, PlanCtx,
    ResourceRequest,
};

/// The ring ReduceScatterV executor.
pub struct RingReduceScatterV;

const NAME: &str = "ring";
const KIND: OpKind = OpKind::ReduceScatterV;

oxccl_framework::register_executor! {
    name: NAME,
    op: KIND,
    description: "n-1 pull steps around a ring of healthy links per round, partial sums in CclOut",
    constraints: Constraints::ANY,
    preference: 10,
    make: || Box::new(RingReduceScatterV),
}

impl Executor for RingReduceScatterV {
    fn resources(&self, ctx: &PlanCtx<'_>) -> Result<ResourceRequest, Error> {
        let order = healthy_ring_for(ctx.topology, NAME, KIND)?;
        Ok(
            ResourceRequest::with_peers(Peers::List(ring_neighbours(&order, ctx.rank)))
                .with_plan(RingOrder(order)),
        )
    }

    fn kernel_run(&self, ctx: &mut KernelCtx<'_>, args: &KernelArgs) -> Result<(), Error> {
        let (counts, displs) = block_layout(NAME, KIND, args)?;
        let (me, n, es) = (ctx.rank, ctx.ranks, args.op.dtype.size());
        if super::alone(ctx, args, (displs[0], counts[0])) {
            return Ok(());
        }
        let order = &ctx.plan::<RingOrder>()?.0;
        let plan = PieceRounds::new(NAME, KIND, counts, es, args.ccl_bytes)?;
        ctx.reserve_rounds(plan.rounds, 4 * counts.len())?;
        let slots = |buf| BufRange {
            buf,
            offset: 0,
            len: n * plan.slot,
        };
        let (staged_in, partials) = (slots(Buf::CclIn), slots(Buf::CclOut));
        for t in 0..plan.rounds {
            let pieces: Vec<(usize, usize)> =
                counts.iter().map(|&c| plan.piece(c, es, t)).collect();
            let slot_chunks: Vec<(usize, usize)> =
                (0..n).map(|s| (s * plan.slot, pieces[s].1)).collect();
            let user_chunks: Vec<(usize, usize)> = (0..n)
                .map(|s| (displs[s] * es + pieces[s].0, pieces[s].1))
                .collect();
            let (input, chunks) = match args.mode {
                Mode::Direct => (args.input, &user_chunks),
                Mode::Staged => {
                    for s in 0..n {
                        let (src, dst) = (
                            args.input.at(me, user_chunks[s].0, pieces[s].1),
                            staged_in.at(me, slot_chunks[s].0, pieces[s].1),
                        );
                        ctx.main().copy(src, dst);
                    }
                    (staged_in, &slot_chunks)
                }
            };
            let p = RingParams {
                order,
                stream: 0,
                channel: 0,
                chunks,
                chunk_at: order,
                input,
                output: args.output,
                dtype: args.op.dtype,
                op: args.op.op,
            };
            let targets = RingTargets {
                partials,
                partial_chunks: &slot_chunks,
                result: Some(BufRange {
                    buf: args.output.buf,
                    offset: args.output.offset + pieces[me].0,
                    len: pieces[me].1,
                }),
            };
            ring_reduce_scatter_into(ctx, &p, &targets)?;
        }
        Ok(())
    }
}
