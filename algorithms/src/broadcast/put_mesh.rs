//! Broadcast put-mesh: the root writes its input straight into every rank's output.
//!
//! The put-based twin of [`super::mesh`], for put-only links (TCP, RDMA write): instead of
//! every rank pulling from the root, every rank opens its output (Ack) and the root writes
//! into it and signals (see [`crate::templates::put`](mod@crate::templates::put)). Staged, the output is the peer's
//! CclOut, a registered buffer a put may reach; zero-copy, the user's output over a
//! load/store link and the peer's Scratch over a put-only one, which the peer copies
//! into its output (zero-copy per peer: see [`crate::templates::put`](mod@crate::templates::put)).
//! One synchronisation step, the root's links
//! carrying `n - 1` copies: cost `α + (p−1)·nβ` at the root, for small messages. Links: the
//! root to every rank.

use super::mesh::star_peers;
use super::{root_keeps_its_data, root_of};
use crate::templates::{
    await_puts, finish_puts, land_from_scratch, landing, open_for_puts, put, with_landing_scratch,
};
use oxccl_framework::{
    Constraints, Error, Executor, KernelArgs, KernelCtx, LinkNeed, OpKind, PlanCtx, ResourceRequest,
};

/// The put-mesh Broadcast executor.
pub struct PutMeshBroadcast;

oxccl_framework::register_executor! {
    name: "put-mesh",
    op: OpKind::Broadcast,
    description: "the root writes its input into every rank's output (put-only links)",
    constraints: Constraints { links: LinkNeed::Put, ..Constraints::ANY },
    preference: 10,
    make: || Box::new(PutMeshBroadcast),
}

impl Executor for PutMeshBroadcast {
    fn resources(&self, ctx: &PlanCtx<'_>) -> Result<ResourceRequest, Error> {
        let request = star_peers(ctx, root_of(ctx.op, "put-mesh")?);
        // One landing slot of the whole iteration, which is at most a CCL buffer.
        let cap = ctx.ccl_bytes / ctx.op.dtype.size();
        Ok(with_landing_scratch(ctx, request, 1, cap))
    }

    fn kernel_run(&self, ctx: &mut KernelCtx<'_>, args: &KernelArgs) -> Result<(), Error> {
        let root = root_of(&args.op, "put-mesh")?;
        let (me, len) = (ctx.rank, args.op.count * args.op.dtype.size());
        if me != root {
            let links = open_for_puts(ctx, 0, &[root])?;
            await_puts(ctx, 0, &links);
            land_from_scratch(ctx, 0, root, args.output.at(me, 0, len), 0);
            return Ok(());
        }
        let src = args.input.at(root, 0, len);
        let sent = (0..ctx.ranks)
            .filter(|&p| p != root)
            .map(|p| {
                put(
                    ctx,
                    0,
                    p,
                    &[(landing(ctx, args.output.at(p, 0, len), 0), src)],
                )
            })
            .collect::<Result<Vec<_>, _>>()?;
        root_keeps_its_data(ctx, args);
        finish_puts(ctx, 0, &sent);
        Ok(())
    }
}
