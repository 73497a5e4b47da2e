//! ReduceScatter relay-mesh: the mesh ReduceScatter on a mesh with broken links, the
//! traffic of every missing link spread over all the common neighbours of its two ends.
//!
//! After an Ack round with every healthy neighbour, rank `r` reduces its block from every
//! input it reaches directly, one segment per relay on that relay's stream; when `r` and
//! `p` are not linked, each of their `m` relays pre-reduces `1/m` of block `r` from its
//! own input and `p`'s into scratch, and `r` adds those partials in place of the relays'
//! inputs ([`relay_mesh_reduce_scatter`]). The `p -> relay` links carry `1/m` of a block
//! more, no other link anything extra. On a healthy mesh it behaves like the mesh
//! ReduceScatter; it refuses topologies where some pair of ranks has no common neighbour.
//!
//! Staged, the next iteration overwrites CclIn at once, so a DataSignal round ("I am done
//! reading your input and scratch") ends every iteration; zero-copy, the device's exit fence plays that part (a zero-copy call returns only after every granted peer finished it).

use crate::templates::{
    iteration_count_bound, neighbour_round, relay_mesh_reduce_scatter, relay_mesh_resources,
    relay_scratch_bytes, NeighbourRound, RelayMeshParams, RelayPlan,
};
use oxccl_framework::{
    Constraints, Error, Executor, KernelArgs, KernelCtx, Mode, OpKind, PlanCtx, ResourceRequest,
};

const NAME: &str = "relay-mesh";

/// The relayed mesh ReduceScatter executor.
pub struct RelayMeshReduceScatter;

oxccl_framework::register_executor! {
    name: NAME,
    op: OpKind::ReduceScatter,
    description: "mesh reduce-scatter on a broken mesh, missing links' inputs pre-reduced by all common neighbours",
    constraints: Constraints::ANY,
    preference: 18,
    make: || Box::new(RelayMeshReduceScatter),
}

impl Executor for RelayMeshReduceScatter {
    fn resources(&self, ctx: &PlanCtx<'_>) -> Result<ResourceRequest, Error> {
        let plan = RelayPlan::new(ctx.topology, NAME, OpKind::ReduceScatter, None)?;
        let es = ctx.op.dtype.size();
        let block = iteration_count_bound(ctx, true) * es;
        let (op, lens) = (OpKind::ReduceScatter, vec![block; ctx.ranks]);
        let scratch = relay_scratch_bytes(ctx.topology, NAME, op, None, &lens, es)?;
        Ok(relay_mesh_resources(&plan, ctx.rank, scratch))
    }

    fn kernel_run(&self, ctx: &mut KernelCtx<'_>, args: &KernelArgs) -> Result<(), Error> {
        if ctx.ranks == 1 {
            args.copy_input_to_output(ctx);
            return Ok(());
        }
        let blocks = args.blocks(ctx.ranks);
        let len = args.op.count * args.op.dtype.size();
        let lens = vec![len; ctx.ranks];
        let plan = RelayPlan::for_chunks(ctx.topology, NAME, OpKind::ReduceScatter, None, &lens)?;
        let out_chunks = vec![(0, len); ctx.ranks];
        let p = RelayMeshParams {
            plan: &plan,
            chunks: &blocks,
            out_chunks: &out_chunks,
            input: args.input,
            output: args.output,
            aliased: args.aliased,
            dtype: args.op.dtype,
            op: args.op.op,
        };
        relay_mesh_reduce_scatter(ctx, &p)?;
        if args.mode == Mode::Staged {
            neighbour_round(ctx, &plan, NeighbourRound::DataSignal)?;
        }
        Ok(())
    }
}
