//! Gather mesh: the root pulls every rank's input at once, one slave stream per peer.
//!
//! Every other rank tells the root that its input is ready (Ack); the root copies each
//! peer's input into that peer's block of its output on the peer's own stream, as soon
//! as that peer is ready. One synchronisation step; the root's links carry `(p − 1)/p` of
//! its output, all at once. Cost `α + (p−1)/p·nβ`, `n` the root's whole output. It needs
//! a link from every rank to the root, and no other link.
//!
//! Staged, the root answers "done reading" (DataSignal) and every peer waits for it
//! before it ends the iteration; zero-copy, the device's exit fence does (a peer's call
//! returns only after the root finished it).

use super::{peer_input, root_places_its_block};
use crate::broadcast::mesh::star_peers;
use crate::broadcast::root_of;
use crate::templates::mesh_peer;
use oxccl_framework::{
    Constraints, Error, Executor, KernelArgs, KernelCtx, Mode, OpKind, PlanCtx, ResourceRequest,
};

/// The mesh Gather executor.
pub struct MeshGather;

oxccl_framework::register_executor! {
    name: "mesh",
    op: OpKind::Gather,
    description: "the root pulls every rank's input at once, one slave stream per peer",
    constraints: Constraints::ANY,
    preference: 20,
    make: || Box::new(MeshGather),
}

impl Executor for MeshGather {
    fn resources(&self, ctx: &PlanCtx<'_>) -> Result<ResourceRequest, Error> {
        let root = root_of(ctx.op, "mesh")?;
        let slave_streams = match ctx.rank == root {
            true => ctx.ranks - 1,
            false => 0,
        };
        Ok(ResourceRequest {
            slave_streams,
            ..star_peers(ctx, root)
        })
    }

    fn kernel_run(&self, ctx: &mut KernelCtx<'_>, args: &KernelArgs) -> Result<(), Error> {
        let root = root_of(&args.op, "mesh")?;
        let me = ctx.rank;
        let staged = args.mode == Mode::Staged;
        if me != root {
            let link = ctx.link(root, 0)?;
            link.tx_ack(ctx.main());
            if staged {
                link.rx_data_signal(ctx.main());
            }
            return Ok(());
        }
        root_places_its_block(ctx, args);
        let peers = ctx.ranks - 1;
        if peers == 0 {
            return Ok(());
        }
        let blocks = args.blocks(ctx.ranks);
        ctx.fork(1..=peers);
        for slave in 1..=peers {
            let peer = mesh_peer(me, ctx.ranks, slave);
            let link = ctx.link(peer, 0)?;
            let (off, len) = blocks[peer];
            let (src, dst) = (
                peer_input(args, me, peer, len),
                args.output.at(me, off, len),
            );
            let s = ctx.stream(slave);
            link.rx_ack(s);
            s.copy(src, dst);
            if staged {
                link.tx_data_signal(s);
            }
        }
        ctx.join(1..=peers);
        Ok(())
    }
}
