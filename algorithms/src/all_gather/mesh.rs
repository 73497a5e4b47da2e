//! AllGather mesh: every peer's block pulled at once, one slave stream per peer.
//!
//! After placing its own block, a rank signals every peer that it is ready and copies
//! each peer's block as soon as that peer signals back: one handshake round whatever the
//! rank count, every link busy at once. It needs every pair of ranks linked.
//! HCCL cost: `α + (p−1)/p·nβ`.
//!
//! Staged, a rank overwrites its own CCL block at the start of the next iteration, so an
//! Ack round ("I am done reading your output") ends every iteration; zero-copy, the device's exit fence plays that part (a zero-copy call returns only after every granted peer finished it).

use super::place_own_block;
use crate::templates::{all_peers_round, mesh_all_gather, mesh_resources, MeshParams, Round};
use oxccl_framework::{
    Constraints, Error, Executor, KernelArgs, KernelCtx, Mode, OpKind, PlanCtx, ResourceRequest,
};

/// The mesh AllGather executor.
pub struct MeshAllGather;

oxccl_framework::register_executor! {
    name: "mesh",
    op: OpKind::AllGather,
    description: "every peer's block pulled at once, one slave stream per peer",
    constraints: Constraints { full_mesh: true, ..Constraints::ANY },
    preference: 20,
    make: || Box::new(MeshAllGather),
}

impl Executor for MeshAllGather {
    fn resources(&self, ctx: &PlanCtx<'_>) -> Result<ResourceRequest, Error> {
        Ok(mesh_resources(ctx.ranks))
    }

    fn kernel_run(&self, ctx: &mut KernelCtx<'_>, args: &KernelArgs) -> Result<(), Error> {
        let blocks = args.blocks(ctx.ranks);
        place_own_block(ctx, args, &blocks);
        if ctx.ranks == 1 {
            return Ok(());
        }
        let p = MeshParams {
            chunks: &blocks,
            out_chunks: &blocks,
            input: args.input,
            output: args.output,
            dtype: args.op.dtype,
            op: args.op.op,
            channel: 0,
        };
        mesh_all_gather(ctx, &p)?;
        if args.mode == Mode::Staged {
            all_peers_round(ctx, 0, Round::Ack)?;
        }
        Ok(())
    }
}
