//! AllGatherV mesh: every peer's block pulled at once, one slave stream per peer.
//!
//! Zero-copy, a rank places its own block and pulls every other block straight out of its
//! owner's output, all peers in parallel. Staged, it runs in rounds through CclOut: the
//! rank copies the round's piece of its input into its own slot, pulls every peer's slot
//! in parallel, copies the slots out to their blocks, and ends the round with an Ack round
//! ("done reading your CclOut") so that the next round may refill the slots. Needs every
//! pair of ranks linked.
//! HCCL cost: `α + (p−1)/p·nβ` per round (staged: `2α`), with `n` the largest block times `p`.

use super::{block_layout, PieceRounds};
use crate::templates::{all_peers_round, mesh_all_gather, mesh_resources, MeshParams, Round};
use oxccl_framework::platform::Buf;
use oxccl_framework::{
    BufRange, Constraints, Error, Executor, KernelArgs, KernelCtx, Mode, OpKind, PlanCtx,
    ResourceRequest,
};

/// The mesh AllGatherV executor.
pub struct MeshAllGatherV;

const NAME: &str = "mesh";
const KIND: OpKind = OpKind::AllGatherV;

oxccl_framework::register_executor! {
    name: NAME,
    op: KIND,
    description: "every peer's block pulled at once, one slave stream per peer; staged in rounds through CclOut",
    constraints: Constraints { full_mesh: true, ..Constraints::ANY },
    preference: 20,
    make: || Box::new(MeshAllGatherV),
}

fn params<'a>(chunks: &'a [(usize, usize)], buffer: BufRange, args: &KernelArgs) -> MeshParams<'a> {
    MeshParams {
        chunks,
        out_chunks: chunks,
        input: buffer,
        output: buffer,
        dtype: args.op.dtype,
        op: args.op.op,
        channel: 0,
    }
}

impl Executor for MeshAllGatherV {
    fn resources(&self, ctx: &PlanCtx<'_>) -> Result<ResourceRequest, Error> {
        Ok(mesh_resources(ctx.ranks))
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
        if args.mode == Mode::Direct {
            let chunks: Vec<(usize, usize)> =
                (0..n).map(|s| (displs[s] * es, counts[s] * es)).collect();
            return mesh_all_gather(ctx, &params(&chunks, args.output, args));
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
            mesh_all_gather(ctx, &params(&chunks, slots, args))?;
            for s in (0..n).filter(|&s| s != me) {
                let (at, len) = pieces[s];
                let src = slots.at(me, chunks[s].0, len);
                let dst = args.output.at(me, displs[s] * es + at, len);
                ctx.main().copy(src, dst);
            }
            all_peers_round(ctx, 0, Round::Ack)?;
        }
        Ok(())
    }
}
