//! ReduceScatter mesh: one ready round with every peer, then one n-way Reduce.
//!
//! Each rank reduces its own block from every rank's input, straight into its output:
//! one handshake round, one task, `(n - 1)/n` of the input read over the links, all at
//! once. It needs every pair of ranks linked. HCCL cost: `α + (p−1)/p·nβ + (p−1)/p·nγ`.
//!
//! Staged, the next iteration overwrites CclIn at once, so a DataSignal round ("I am done
//! reading your input") ends every iteration; zero-copy, the device's exit fence plays that part (a zero-copy call returns only after every granted peer finished it).

use crate::templates::{all_peers_round, mesh_reduce_scatter, mesh_resources, MeshParams, Round};
use oxccl_framework::{
    Constraints, Error, Executor, KernelArgs, KernelCtx, Mode, OpKind, PlanCtx, ResourceRequest,
};

/// The mesh ReduceScatter executor.
pub struct MeshReduceScatter;

oxccl_framework::register_executor! {
    name: "mesh",
    op: OpKind::ReduceScatter,
    description: "one ready round with all peers, then one n-way Reduce of the own block",
    constraints: Constraints { full_mesh: true, ..Constraints::ANY },
    preference: 20,
    make: || Box::new(MeshReduceScatter),
}

impl Executor for MeshReduceScatter {
    fn resources(&self, ctx: &PlanCtx<'_>) -> Result<ResourceRequest, Error> {
        Ok(mesh_resources(ctx.ranks))
    }

    fn kernel_run(&self, ctx: &mut KernelCtx<'_>, args: &KernelArgs) -> Result<(), Error> {
        if ctx.ranks == 1 {
            args.copy_input_to_output(ctx);
            return Ok(());
        }
        let blocks = args.blocks(ctx.ranks);
        let len = args.op.count * args.op.dtype.size();
        let out_chunks = vec![(0, len); ctx.ranks];
        let p = MeshParams {
            chunks: &blocks,
            out_chunks: &out_chunks,
            input: args.input,
            output: args.output,
            dtype: args.op.dtype,
            op: args.op.op,
            channel: 0,
        };
        mesh_reduce_scatter(ctx, &p)?;
        if args.mode == Mode::Staged {
            all_peers_round(ctx, 0, Round::DataSignal)?;
        }
        Ok(())
    }
}
