//! ReduceScatter put mesh: one round of puts with every peer, for put-only links and
//! small messages.
//!
//! Rank `q` puts its input block `c` into slot `q` of rank `c`'s Scratch and signals;
//! each rank reduces its own block and the `n - 1` slots into its output in one task (see
//! [`put_mesh`](crate::templates::put_mesh)). One signal latency per iteration; from the
//! second iteration of a staged loop on, a ready round first says the slots are free.
//! Needs every pair of ranks linked.

use crate::templates::{put_mesh_reduce_scatter, PutMesh};
use oxccl_framework::platform::Rank;
use oxccl_framework::{
    Constraints, Error, Executor, KernelArgs, KernelCtx, LinkNeed, OpKind, Peers, PlanCtx,
    ResourceRequest,
};

/// The put mesh ReduceScatter executor.
pub struct PutMeshReduceScatter;

oxccl_framework::register_executor! {
    name: "put-mesh",
    op: OpKind::ReduceScatter,
    description: "every rank puts each block into its owner's Scratch slot, each reduces its own locally; runs over put-only links",
    constraints: Constraints { full_mesh: true, links: LinkNeed::Put, ..Constraints::ANY },
    preference: 5,
    make: || Box::new(PutMeshReduceScatter),
}

impl Executor for PutMeshReduceScatter {
    fn resources(&self, ctx: &PlanCtx<'_>) -> Result<ResourceRequest, Error> {
        // One slave stream per peer (see `put_mesh`).
        let request = ResourceRequest {
            slave_streams: ctx.ranks - 1,
            ..ResourceRequest::with_peers(Peers::All)
        };
        Ok(super::with_put_scratch(ctx, request, ctx.ranks))
    }

    fn kernel_run(&self, ctx: &mut KernelCtx<'_>, args: &KernelArgs) -> Result<(), Error> {
        let (me, n) = (ctx.rank, ctx.ranks);
        if n == 1 {
            args.copy_input_to_output(ctx);
            return Ok(());
        }
        let blocks = args.blocks(n);
        let len = blocks[0].1;
        let mesh = PutMesh::one_phase(args, n, len);
        let input = |r: Rank, c: usize| args.input.at(r, blocks[c].0, blocks[c].1);
        put_mesh_reduce_scatter(ctx, &mesh, &input, args.output.at(me, 0, len))
    }
}
