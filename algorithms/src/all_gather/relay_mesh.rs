//! AllGather relay-mesh: the mesh AllGather on a mesh with broken links, the blocks of
//! every missing link pulled piecewise from all the common neighbours of its two ends.
//!
//! After placing its own block, a rank signals every healthy neighbour and pulls each
//! neighbour's block on that neighbour's stream. When `r` and `p` are not linked, each of
//! their `m` relays copies its `1/m` piece of block `p` first, tells `r`, and copies the
//! rest; `r` then pulls the piece from the relay's output ([`relay_mesh_all_gather`]).
//! The `relay -> r` links carry `1/m` of a block more, no other link anything extra. On a
//! healthy mesh it behaves like the mesh AllGather; it refuses topologies where some pair
//! of ranks has no common neighbour.
//!
//! Staged, a rank overwrites its own CCL block at the start of the next iteration, so an
//! Ack round ("I am done reading your output") ends every iteration; zero-copy, the device's exit fence plays that part (a zero-copy call returns only after every granted peer finished it).

use super::place_own_block;
use crate::templates::{
    neighbour_round, relay_mesh_all_gather, relay_mesh_resources, NeighbourRound, RelayMeshParams,
    RelayPlan,
};
use oxccl_framework::{
    Constraints, Error, Executor, KernelArgs, KernelCtx, Mode, OpKind, PlanCtx, ResourceRequest,
};

const NAME: &str = "relay-mesh";

/// The relayed mesh AllGather executor.
pub struct RelayMeshAllGather;

oxccl_framework::register_executor! {
    name: NAME,
    op: OpKind::AllGather,
    description: "mesh all-gather on a broken mesh, missing links' blocks pulled piecewise from all common neighbours",
    constraints: Constraints::ANY,
    preference: 18,
    make: || Box::new(RelayMeshAllGather),
}

impl Executor for RelayMeshAllGather {
    fn resources(&self, ctx: &PlanCtx<'_>) -> Result<ResourceRequest, Error> {
        let plan = RelayPlan::new(ctx.topology, NAME, OpKind::AllGather, None)?;
        Ok(relay_mesh_resources(&plan, ctx.rank, 0))
    }

    fn kernel_run(&self, ctx: &mut KernelCtx<'_>, args: &KernelArgs) -> Result<(), Error> {
        let blocks = args.blocks(ctx.ranks);
        place_own_block(ctx, args, &blocks);
        if ctx.ranks == 1 {
            return Ok(());
        }
        let lens = vec![args.op.count * args.op.dtype.size(); ctx.ranks];
        let plan = RelayPlan::for_chunks(ctx.topology, NAME, OpKind::AllGather, None, &lens)?;
        let p = RelayMeshParams {
            plan: &plan,
            chunks: &blocks,
            out_chunks: &blocks,
            input: args.input,
            output: args.output,
            aliased: args.aliased,
            dtype: args.op.dtype,
            op: args.op.op,
        };
        relay_mesh_all_gather(ctx, &p)?;
        if args.mode == Mode::Staged {
            neighbour_round(ctx, &plan, NeighbourRound::Ack)?;
        }
        Ok(())
    }
}
