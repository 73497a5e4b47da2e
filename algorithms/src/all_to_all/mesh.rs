//! AlltoAll mesh: every peer's block pulled at once, one slave stream per peer.
//!
//! Slave stream `i` serves peer `r + i` (mod `n`): DataSignal ("my input is ready"), wait
//! for the peer's, copy the peer's block, Ack ("done reading yours"), wait for the peer's
//! Ack. One handshake whatever the rank count, every link busy at once; the closing Ack
//! means that when an iteration ends nobody reads this rank's input any more. Needs every
//! pair of ranks linked.
//! HCCL cost: `α + (p−1)/p·nβ` with `n` the bytes of a rank's input.

use super::pull_block;
use crate::templates::{mesh_peer, mesh_resources};
use oxccl_framework::{
    Constraints, Error, Executor, KernelArgs, KernelCtx, OpKind, PlanCtx, ResourceRequest,
};

/// The mesh AlltoAll executor.
pub struct MeshAlltoAll;

oxccl_framework::register_executor! {
    name: "mesh",
    op: OpKind::AlltoAll,
    description: "every peer's block pulled at once, one slave stream per peer",
    constraints: Constraints { full_mesh: true, ..Constraints::ANY },
    preference: 20,
    make: || Box::new(MeshAlltoAll),
}

impl Executor for MeshAlltoAll {
    fn resources(&self, ctx: &PlanCtx<'_>) -> Result<ResourceRequest, Error> {
        Ok(mesh_resources(ctx.ranks))
    }

    fn kernel_run(&self, ctx: &mut KernelCtx<'_>, args: &KernelArgs) -> Result<(), Error> {
        let (me, n) = (ctx.rank, ctx.ranks);
        let blocks = args.blocks(n);
        pull_block(ctx, args, &blocks, me, 0);
        if n == 1 {
            return Ok(());
        }
        ctx.fork(1..=n - 1);
        for slave in 1..n {
            let link = ctx.link(mesh_peer(me, n, slave), 0)?;
            link.tx_data_signal(ctx.stream(slave));
            link.rx_data_signal(ctx.stream(slave));
            pull_block(ctx, args, &blocks, link.remote, slave);
            link.tx_ack(ctx.stream(slave));
            link.rx_ack(ctx.stream(slave));
        }
        ctx.join(1..=n - 1);
        Ok(())
    }
}
