//! AllGatherV mesh: every peer's block pulled at once, one slave stream per peer.
//!
//! Zero-copy, a rank places its own block and pulls every other block straight out of its
//! owner's output, all peers in parallel. Staged, it runs in rounds through CclOut: the
//! rank copies the round's piece of its input into its own slot, pulls every peer's slot
//! in parallel, copies the slots out to their blocks, and ends the round with an Ack round
//! ("done reading your CclOut") so that the next round may refill the slots. Needs every
//! pair of ranks linked.
//! HCCL cost: `α + (p−1)/p·nβ` per round (staged: `2α`), with `n` the largest block times `p`.

use super::gather_v_blocks;
use crate::templates::{all_peers_round, mesh_all_gather, mesh_resources, MeshParams, Round};
use oxccl_framework::{
    BufRange, Constraints, Error, Executor, KernelArgs, KernelCtx, OpKind, PlanCtx, ResourceRequest,
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
        gather_v_blocks(
            ctx,
            args,
            NAME,
            |ctx, buffer, chunks| mesh_all_gather(ctx, &params(chunks, buffer, args)),
            |ctx, _| all_peers_round(ctx, 0, Round::Ack),
        )
    }
}
