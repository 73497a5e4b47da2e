//! AllGather put mesh: one round of puts with every peer, for put-only links and small
//! messages.
//!
//! Each rank puts its block into every peer's CclOut block (staged) or into its slot of
//! every peer's Scratch (zero-copy: a put may not write a user buffer; the receiver copies
//! the slots into place), and signals (see [`put_mesh`](crate::templates::put_mesh)). One
//! signal latency per iteration; from the second iteration of a staged loop on, a ready
//! round first says the targets are free. Needs every pair of ranks linked.

use super::place_own_block;
use crate::templates::{put_mesh_all_gather, PutMesh};
use oxccl_framework::platform::Rank;
use oxccl_framework::{
    Constraints, Error, Executor, KernelArgs, KernelCtx, LinkNeed, OpKind, Peers, PlanCtx,
    ResourceRequest,
};

/// The put mesh AllGather executor.
pub struct PutMeshAllGather;

oxccl_framework::register_executor! {
    name: "put-mesh",
    op: OpKind::AllGather,
    description: "every rank puts its block into every peer's CclOut (staged) or Scratch slot (zero-copy); runs over put-only links",
    constraints: Constraints { full_mesh: true, links: LinkNeed::Put, ..Constraints::ANY },
    preference: 5,
    make: || Box::new(PutMeshAllGather),
}

impl Executor for PutMeshAllGather {
    fn resources(&self, ctx: &PlanCtx<'_>) -> Result<ResourceRequest, Error> {
        // One slave stream per peer (see `put_mesh`).
        let request = ResourceRequest {
            slave_streams: ctx.ranks - 1,
            ..ResourceRequest::with_peers(Peers::All)
        };
        Ok(super::with_slot_scratch(ctx, request, ctx.ranks))
    }

    fn kernel_run(&self, ctx: &mut KernelCtx<'_>, args: &KernelArgs) -> Result<(), Error> {
        let n = ctx.ranks;
        let blocks = args.blocks(n);
        place_own_block(ctx, args, &blocks);
        if n == 1 {
            return Ok(());
        }
        let len = blocks[0].1;
        let mesh = PutMesh::one_phase(args, n, len);
        let held = |r: Rank, c: usize| args.output.at(r, blocks[c].0, blocks[c].1);
        put_mesh_all_gather(ctx, &mesh, &held, !args.output.buf.is_user())
    }
}
