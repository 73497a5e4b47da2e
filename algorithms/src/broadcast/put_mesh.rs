//! Broadcast put-mesh: the root writes its input straight into every rank's output.
//!
//! The put-based twin of [`super::mesh`], for put-only links (TCP, RDMA write): instead of
//! every rank pulling from the root, every rank opens its output (Ack) and the root writes
//! into it and signals (see [`crate::templates::put`](mod@crate::templates::put)). Staged, the output is the peer's
//! CclOut, a registered buffer a put may reach; Direct mode (only when every link is
//! load/store) writes the user's output. One synchronisation step, the root's links
//! carrying `n - 1` copies: cost `α + (p−1)·nβ` at the root, for small messages. Links: the
//! root to every rank.

use super::mesh::star_peers;
use super::{root_keeps_its_data, root_of};
use crate::templates::{await_puts, finish_puts, open_for_puts, put};
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
        Ok(star_peers(ctx, root_of(ctx.op, "put-mesh")?))
    }

    fn kernel_run(&self, ctx: &mut KernelCtx<'_>, args: &KernelArgs) -> Result<(), Error> {
        let root = root_of(&args.op, "put-mesh")?;
        let (me, len) = (ctx.rank, args.op.count * args.op.dtype.size());
        if me != root {
            let links = open_for_puts(ctx, 0, &[root])?;
            await_puts(ctx, 0, &links);
            return Ok(());
        }
        let src = args.input.at(root, 0, len);
        let sent = (0..ctx.ranks)
            .filter(|&p| p != root)
            .map(|p| put(ctx, 0, p, &[(args.output.at(p, 0, len), src)]))
            .collect::<Result<Vec<_>, _>>()?;
        root_keeps_its_data(ctx, args);
        finish_puts(ctx, 0, &sent);
        Ok(())
    }
}
