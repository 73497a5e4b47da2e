//! ReduceScatterV mesh: a handshake with every peer on parallel streams, then one n-way
//! Reduce of the rank's own block out of every rank's input.
//!
//! Zero-copy, the Reduce reads the peers' inputs at the block's displacement directly.
//! Staged, it runs in rounds: the rank copies the round's piece of every block into its
//! CclIn slots, handshakes, reduces its own slot of every rank's CclIn into its output,
//! and ends the round with a DataSignal round ("done reading your CclIn") so that the next
//! round may refill the slots. Needs every pair of ranks linked.
//! HCCL cost: `α + (p−1)/p·nβ + (p−1)/p·nγ` per round (staged: `2α`), with `n` the largest
//! block times `p`.

use crate::all_gather_v::{block_layout, PieceRounds};
use crate::templates::{all_peers_round, mesh_reduce_scatter, mesh_resources, MeshParams, Round};
use oxccl_framework::platform::Buf;
use oxccl_framework::{
    BufRange, Constraints, Error, Executor, KernelArgs, KernelCtx, Mode, OpKind, PlanCtx,
    ResourceRequest,
};

/// The mesh ReduceScatterV executor.
pub struct MeshReduceScatterV;

const NAME: &str = "mesh";
const KIND: OpKind = OpKind::ReduceScatterV;

oxccl_framework::register_executor! {
    name: NAME,
    op: KIND,
    description: "handshake with every peer, then one n-way Reduce of the own block; staged in rounds through CclIn",
    constraints: Constraints { full_mesh: true, ..Constraints::ANY },
    preference: 20,
    make: || Box::new(MeshReduceScatterV),
}

/// The mesh reducing `chunks` of `input` into `out_chunks` of the output.
fn params<'a>(
    chunks: &'a [(usize, usize)],
    out_chunks: &'a [(usize, usize)],
    input: BufRange,
    args: &KernelArgs,
) -> MeshParams<'a> {
    MeshParams {
        chunks,
        out_chunks,
        input,
        output: args.output,
        dtype: args.op.dtype,
        op: args.op.op,
        channel: 0,
    }
}

impl Executor for MeshReduceScatterV {
    fn resources(&self, ctx: &PlanCtx<'_>) -> Result<ResourceRequest, Error> {
        Ok(mesh_resources(ctx.ranks))
    }

    fn kernel_run(&self, ctx: &mut KernelCtx<'_>, args: &KernelArgs) -> Result<(), Error> {
        let (counts, displs) = block_layout(NAME, KIND, args)?;
        let (me, n, es) = (ctx.rank, ctx.ranks, args.op.dtype.size());
        if super::alone(ctx, args, (displs[0], counts[0])) {
            return Ok(());
        }
        if args.mode == Mode::Direct {
            let chunks: Vec<(usize, usize)> =
                (0..n).map(|s| (displs[s] * es, counts[s] * es)).collect();
            let out = vec![(0, counts[me] * es); n];
            return mesh_reduce_scatter(ctx, &params(&chunks, &out, args.input, args));
        }
        let plan = PieceRounds::new(NAME, KIND, counts, es, args.ccl_bytes)?;
        ctx.reserve_rounds(plan.rounds, 4 * counts.len())?;
        let slots = BufRange {
            buf: Buf::CclIn,
            offset: 0,
            len: n * plan.slot,
        };
        for t in 0..plan.rounds {
            let pieces: Vec<(usize, usize)> =
                counts.iter().map(|&c| plan.piece(c, es, t)).collect();
            let chunks: Vec<(usize, usize)> =
                (0..n).map(|s| (s * plan.slot, pieces[s].1)).collect();
            for s in 0..n {
                let (at, len) = pieces[s];
                let src = args.input.at(me, displs[s] * es + at, len);
                ctx.main().copy(src, slots.at(me, chunks[s].0, len));
            }
            let out = vec![(pieces[me].0, pieces[me].1); n];
            mesh_reduce_scatter(ctx, &params(&chunks, &out, slots, args))?;
            all_peers_round(ctx, 0, Round::DataSignal)?;
        }
        Ok(())
    }
}
