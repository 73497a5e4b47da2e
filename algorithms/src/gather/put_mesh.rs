//! Gather put-mesh: every rank writes its input into its block of the root's output.
//!
//! The put-based twin of [`super::mesh`] for put-only links: the root opens its output to
//! every rank (Ack), each rank writes its input into block `rank` of it and signals (see
//! [`crate::templates::put`](mod@crate::templates::put)). Staged, the root's output is its CclOut; zero-copy,
//! the user's output over a load/store link, and over a put-only one the root's Scratch
//! slot of the rank, which the root copies into its output (zero-copy per peer). Links:
//! every rank to the root.

use super::root_places_its_block;
use crate::broadcast::mesh::star_peers;
use crate::broadcast::root_of;
use crate::templates::{
    await_puts, finish_puts, land_from_scratch, landing, open_for_puts, put, slot_len,
    with_landing_scratch,
};
use oxccl_framework::{
    Constraints, Error, Executor, KernelArgs, KernelCtx, LinkNeed, OpKind, PlanCtx, ResourceRequest,
};

/// The put-mesh Gather executor.
pub struct PutMeshGather;

oxccl_framework::register_executor! {
    name: "put-mesh",
    op: OpKind::Gather,
    description: "every rank writes its input into its block of the root's output (put-only links)",
    constraints: Constraints { links: LinkNeed::Put, ..Constraints::ANY },
    preference: 10,
    make: || Box::new(PutMeshGather),
}

impl Executor for PutMeshGather {
    fn resources(&self, ctx: &PlanCtx<'_>) -> Result<ResourceRequest, Error> {
        let request = star_peers(ctx, root_of(ctx.op, "put-mesh")?);
        // A landing slot per rank at the root, of one block each.
        let cap = ctx.ccl_bytes / ctx.ranks / ctx.op.dtype.size();
        Ok(with_landing_scratch(ctx, request, ctx.ranks, cap))
    }

    fn kernel_run(&self, ctx: &mut KernelCtx<'_>, args: &KernelArgs) -> Result<(), Error> {
        let root = root_of(&args.op, "put-mesh")?;
        let me = ctx.rank;
        let blocks = args.blocks(ctx.ranks);
        let slot = slot_len(&blocks);
        if me != root {
            let (off, len) = blocks[me];
            let dst = landing(ctx, args.output.at(root, off, len), me * slot);
            let write = (dst, args.input.at(me, 0, len));
            let link = put(ctx, 0, root, &[write])?;
            finish_puts(ctx, 0, &[link]);
            return Ok(());
        }
        let peers: Vec<usize> = (0..ctx.ranks).filter(|&p| p != root).collect();
        let links = open_for_puts(ctx, 0, &peers)?;
        root_places_its_block(ctx, args);
        await_puts(ctx, 0, &links);
        for p in peers {
            let (off, len) = blocks[p];
            land_from_scratch(ctx, 0, p, args.output.at(root, off, len), p * slot);
        }
        Ok(())
    }
}
