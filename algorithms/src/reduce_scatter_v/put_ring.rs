//! ReduceScatterV put ring: `n - 1` put steps around a ring per round, blocks of any
//! size, for put-only links.
//!
//! Each round reduces one slot-sized piece of every block (the rounds of
//! [`PieceRounds`](crate::all_gather_v)): a rank puts its partial sum of one piece (its
//! own input in the first step) into its right neighbour's receive slot, and reduces the
//! left neighbour's put with its own input locally (see
//! [`put_ring`](crate::templates::put_ring)); piece `order[i]` ends, fully reduced, in
//! ring position `i`'s output. The receive slot and the one partial sum in flight live in
//! CclOut (two slots; the V operators leave the CCL buffers to their executors), and the
//! input is read where it is, locally, in both modes. Two links per rank, ordered by
//! [`healthy_ring`](crate::templates::healthy_ring).

use crate::all_gather_v::{block_layout, PieceRounds};
use crate::templates::{
    healthy_ring_for, put_ring_reduce_scatter, ring_neighbours, PutRing, RingOrder,
};
use oxccl_framework::platform::{Buf, Rank};
use oxccl_framework::{
    BufRange, Constraints, Error, Executor, KernelArgs, KernelCtx, LinkNeed, OpKind, Peers,
    PlanCtx, ResourceRequest,
};

/// The put ring ReduceScatterV executor.
pub struct PutRingReduceScatterV;

const NAME: &str = "put-ring";
const KIND: OpKind = OpKind::ReduceScatterV;

oxccl_framework::register_executor! {
    name: NAME,
    op: KIND,
    description: "n-1 put steps around a ring per round into the neighbour's CclOut slot, reduced locally; runs over put-only links",
    constraints: Constraints { links: LinkNeed::Put, ..Constraints::ANY },
    preference: 5,
    make: || Box::new(PutRingReduceScatterV),
}

impl Executor for PutRingReduceScatterV {
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
        ctx.reserve_rounds(plan.rounds, 6 * n)?;
        // Two slots of at most a CCL buffer over the rank count each (n >= 2 here).
        let ccl_out = |i: usize| BufRange {
            buf: Buf::CclOut,
            offset: i * plan.slot,
            len: plan.slot,
        };
        let (slot, partials) = (ccl_out(0), ccl_out(1));
        let ring = PutRing {
            order,
            stream: 0,
            channel: 0,
            chunk_at: order,
            slot,
            dtype: args.op.dtype,
            op: args.op.op,
        };
        for t in 0..plan.rounds {
            let pieces: Vec<(usize, usize)> =
                counts.iter().map(|&c| plan.piece(c, es, t)).collect();
            let input =
                |r: Rank, c: usize| args.input.at(r, displs[c] * es + pieces[c].0, pieces[c].1);
            let partial = |r: Rank, c: usize| match c == me {
                true => args.output.at(r, pieces[c].0, pieces[c].1),
                false => partials.at(r, 0, pieces[c].1),
            };
            put_ring_reduce_scatter(ctx, &ring, &input, &partial)?;
        }
        Ok(())
    }
}
