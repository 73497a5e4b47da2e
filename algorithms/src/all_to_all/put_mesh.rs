//! AlltoAll put-mesh: every rank writes block `p` of its input into block `rank` of rank
//! `p`'s output.
//!
//! The put-based twin of [`super::mesh`] for put-only links. Every rank first opens its
//! output to every peer (Ack), then writes each peer's block and signals, then waits for
//! every peer's block (see [`crate::templates::put`](mod@crate::templates::put)): all opens come before any wait, so
//! the exchange cannot deadlock. Staged, outputs are the CclOut buffers; zero-copy, the
//! user's output over a load/store link, and over a put-only one the receiver's Scratch
//! slot of the sender, which the receiver copies into its output (zero-copy per peer).
//! Needs a full mesh.

use crate::templates::{
    await_puts, finish_puts, land_from_scratch, landing, mesh_peer, open_for_puts, put, slot_len,
    with_landing_scratch,
};
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
    fn resources(&self, ctx: &PlanCtx<'_>) -> Result<ResourceRequest, Error> {
        // A landing slot per sender, of one block each.
        let cap = ctx.ccl_bytes / ctx.ranks / ctx.op.dtype.size();
        let request = ResourceRequest::with_peers(Peers::All);
        Ok(with_landing_scratch(ctx, request, ctx.ranks, cap))
    }

    fn kernel_run(&self, ctx: &mut KernelCtx<'_>, args: &KernelArgs) -> Result<(), Error> {
        let (me, n) = (ctx.rank, ctx.ranks);
        let blocks = args.blocks(n);
        let peers: Vec<usize> = (1..n).map(|step| mesh_peer(me, n, step)).collect();
        let incoming = open_for_puts(ctx, 0, &peers)?;
        let (own_off, len) = blocks[me];
        let slot = slot_len(&blocks);
        let own = (
            args.input.at(me, own_off, len),
            args.output.at(me, own_off, len),
        );
        ctx.main().copy(own.0, own.1);
        let sent = peers
            .iter()
            .map(|&p| {
                let write = (
                    landing(ctx, args.output.at(p, own_off, len), me * slot),
                    args.input.at(me, blocks[p].0, len),
                );
                put(ctx, 0, p, &[write])
            })
            .collect::<Result<Vec<_>, _>>()?;
        await_puts(ctx, 0, &incoming);
        for &p in &peers {
            let (off, len) = blocks[p];
            land_from_scratch(ctx, 0, p, args.output.at(me, off, len), p * slot);
        }
        finish_puts(ctx, 0, &sent);
        Ok(())
    }
}
