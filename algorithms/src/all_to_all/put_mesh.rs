//! AlltoAll put-mesh: every rank writes block `p` of its input into block `rank` of rank
//! `p`'s output.
//!
//! The put-based twin of [`super::mesh`] for put-only links. Every rank first opens its
//! output to every peer (Ack), then writes each peer's block and signals, then waits for
//! every peer's block (see [`crate::templates::put`](mod@crate::templates::put)): all opens come before any wait, so
//! the exchange cannot deadlock. Staged, outputs are the CclOut buffers; Direct mode (only
//! when every link is load/store) writes the user's output. Needs a full mesh.

use crate::templates::{await_puts, finish_puts, mesh_peer, open_for_puts, put};
use oxccl_framework::{
    Constraints, Error, Executor, KernelArgs, KernelCtx, LinkNeed, OpKind, Peers, PlanCtx,
    ResourceRequest,
};

/// The put-mesh AlltoAll executor.
pub struct PutMeshAlltoAll;

oxccl_framework::register_executor! {
    name: "put-mesh",
    op: OpKind::AlltoAll,
    description: "every rank writes each peer's block into that peer's output (put-only links)",
    constraints: Constraints { full_mesh: true, links: LinkNeed::Put, ..Constraints::ANY },
    preference: 10,
    make: || Box::new(PutMeshAlltoAll),
}

impl Executor for PutMeshAlltoAll {
    fn resources(&self, _: &PlanCtx<'_>) -> Result<ResourceRequest, Error> {
        Ok(ResourceRequest::with_peers(Peers::All))
    }

    fn kernel_run(&self, ctx: &mut KernelCtx<'_>, args: &KernelArgs) -> Result<(), Error> {
        let (me, n) = (ctx.rank, ctx.ranks);
        let blocks = args.blocks(n);
        let peers: Vec<usize> = (1..n).map(|step| mesh_peer(me, n, step)).collect();
        let incoming = open_for_puts(ctx, 0, &peers)?;
        let (own_off, len) = blocks[me];
        let own = (
            args.input.at(me, own_off, len),
            args.output.at(me, own_off, len),
        );
        ctx.main().copy(own.0, own.1);
        let sent = peers
            .iter()
            .map(|&p| {
                let write = (
                    args.output.at(p, own_off, len),
                    args.input.at(me, blocks[p].0, len),
                );
                put(ctx, 0, p, &[write])
            })
            .collect::<Result<Vec<_>, _>>()?;
        await_puts(ctx, 0, &incoming);
        finish_puts(ctx, 0, &sent);
        Ok(())
    }
}
