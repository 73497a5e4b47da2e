//! AllReduce mesh: reduce-scatter then all-gather with every peer at once.
//!
//! Each rank reduces its own `1/n` of the data from all ranks' inputs in one n-way Reduce,
//! then pulls every other rank's reduced chunk, one slave stream per peer. Two handshake
//! rounds regardless of the rank count, and each rank reads `(2n - 1)/n` of the data: the
//! least traffic of any AllReduce when every pair of ranks is linked.
//! HCCL cost: `2α + 2(p−1)/p·nβ + (p−1)/p·nγ`.

use crate::templates::{
    even_chunks, mesh_all_gather, mesh_reduce_scatter, mesh_resources, MeshParams,
};
use oxccl_framework::{
    Constraints, Error, Executor, KernelArgs, KernelCtx, OpKind, PlanCtx, ResourceRequest,
};

/// The mesh AllReduce executor.
pub struct MeshAllReduce;

oxccl_framework::register_executor! {
    name: "mesh",
    op: OpKind::AllReduce,
    description: "reduce-scatter then all-gather with all peers at once, one slave stream per peer",
    constraints: Constraints { full_mesh: true, ..Constraints::ANY },
    preference: 20,
    make: || Box::new(MeshAllReduce),
}

impl Executor for MeshAllReduce {
    fn resources(&self, ctx: &PlanCtx<'_>) -> Result<ResourceRequest, Error> {
        Ok(mesh_resources(ctx.ranks))
    }

    fn kernel_run(&self, ctx: &mut KernelCtx<'_>, args: &KernelArgs) -> Result<(), Error> {
        if ctx.ranks == 1 {
            args.copy_input_to_output(ctx);
            return Ok(());
        }
        let op = &args.op;
        let chunks = even_chunks(op.count, ctx.ranks, op.dtype.size());
        let p = MeshParams {
            chunks: &chunks,
            out_chunks: &chunks,
            input: args.input,
            output: args.output,
            dtype: op.dtype,
            op: op.op,
            channel: 0,
        };
        mesh_reduce_scatter(ctx, &p)?;
        mesh_all_gather(ctx, &p)
    }
}
