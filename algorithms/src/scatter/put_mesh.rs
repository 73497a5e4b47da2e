//! Scatter put-mesh: the root writes block `r` of its input into rank `r`'s output.
//!
//! The put-based twin of [`super::mesh`] for put-only links: every rank opens its output
//! (Ack), the root writes each rank's block into it and signals (see
//! [`crate::templates::put`](mod@crate::templates::put)). Staged, the output is the peer's CclOut; zero-copy,
//! the user's output over a load/store link and the peer's Scratch over a put-only one,
//! which the peer copies into its output (zero-copy per peer). Links: the root to every
//! rank.

use super::root_keeps_its_block;
use crate::broadcast::mesh::star_peers;
use crate::broadcast::root_of;
use crate::templates::{
    await_puts, finish_puts, land_from_scratch, landing, open_for_puts, put, with_landing_scratch,
};
use oxccl_framework::platform::{Rank, Slice};
use oxccl_framework::{
    Constraints, Error, Executor, KernelArgs, KernelCtx, LinkNeed, OpKind, PlanCtx, ResourceRequest,
};

/// `len` bytes of `peer`'s output, seen from `me`. In place the output is the rank's own
/// block of the one buffer, so it lies at a different offset on every rank.
fn peer_output(args: &KernelArgs, me: Rank, peer: Rank, len: usize) -> Slice {
    let mut at = args.output.at(peer, 0, len);
    if args.aliased {
        at.offset = at.offset + peer * args.block_stride - me * args.block_stride;
    }
    at
}

/// The put-mesh Scatter executor.
pub struct PutMeshScatter;

oxccl_framework::register_executor! {
    name: "put-mesh",
    op: OpKind::Scatter,
    description: "the root writes every rank's block into its output (put-only links)",
    constraints: Constraints { links: LinkNeed::Put, ..Constraints::ANY },
    preference: 10,
    make: || Box::new(PutMeshScatter),
}

impl Executor for PutMeshScatter {
    fn resources(&self, ctx: &PlanCtx<'_>) -> Result<ResourceRequest, Error> {
        let request = star_peers(ctx, root_of(ctx.op, "put-mesh")?);
        // One landing slot of one block (the root's CCL buffer holds every block, staged).
        let cap = ctx.ccl_bytes / ctx.ranks / ctx.op.dtype.size();
        Ok(with_landing_scratch(ctx, request, 1, cap))
    }

    fn kernel_run(&self, ctx: &mut KernelCtx<'_>, args: &KernelArgs) -> Result<(), Error> {
        let root = root_of(&args.op, "put-mesh")?;
        let me = ctx.rank;
        if me != root {
            let links = open_for_puts(ctx, 0, &[root])?;
            await_puts(ctx, 0, &links);
            let len = args.blocks(ctx.ranks)[me].1;
            land_from_scratch(ctx, 0, root, peer_output(args, me, me, len), 0);
            return Ok(());
        }
        let blocks = args.blocks(ctx.ranks);
        let sent = (0..ctx.ranks)
            .filter(|&p| p != root)
            .map(|p| {
                let (off, len) = blocks[p];
                let write = (
                    landing(ctx, peer_output(args, root, p, len), 0),
                    args.input.at(root, off, len),
                );
                put(ctx, 0, p, &[write])
            })
            .collect::<Result<Vec<_>, _>>()?;
        root_keeps_its_block(ctx, args);
        finish_puts(ctx, 0, &sent);
        Ok(())
    }
}
