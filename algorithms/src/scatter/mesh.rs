//! Scatter mesh: every non-root rank pulls its block from the root at once.
//!
//! The root tells every peer that its input is ready (Ack); each peer copies its own
//! block of the root's input into its output. One synchronisation step; the root's links
//! carry `(p − 1)/p` of its input, all at once. Cost `α + (p−1)/p·nβ`, `n` the root's
//! whole input. It needs a link from the root to every other rank, and no other link.
//!
//! Staged, every peer answers "done reading" (DataSignal) and the root waits for all of
//! them before it ends the iteration; zero-copy, the device's exit fence does (the root's
//! call returns only after every peer finished it).

use super::root_keeps_its_block;
use crate::broadcast::mesh::star_peers;
use crate::broadcast::root_of;
use oxccl_framework::{
    Constraints, Error, Executor, KernelArgs, KernelCtx, Mode, OpKind, PlanCtx, ResourceRequest,
};

/// The mesh Scatter executor.
pub struct MeshScatter;

oxccl_framework::register_executor! {
    name: "mesh",
    op: OpKind::Scatter,
    description: "every rank pulls its block of the root's input at once",
    constraints: Constraints::ANY,
    preference: 20,
    make: || Box::new(MeshScatter),
}

impl Executor for MeshScatter {
    fn resources(&self, ctx: &PlanCtx<'_>) -> Result<ResourceRequest, Error> {
        Ok(star_peers(ctx, root_of(ctx.op, "mesh")?))
    }

    fn kernel_run(&self, ctx: &mut KernelCtx<'_>, args: &KernelArgs) -> Result<(), Error> {
        let root = root_of(&args.op, "mesh")?;
        let me = ctx.rank;
        let staged = args.mode == Mode::Staged;
        if me == root {
            let peers = (0..ctx.ranks)
                .filter(|&p| p != root)
                .map(|p| ctx.link(p, 0))
                .collect::<Result<Vec<_>, _>>()?;
            peers.iter().for_each(|l| l.tx_ack(ctx.main()));
            root_keeps_its_block(ctx, args);
            if staged {
                peers.iter().for_each(|l| l.rx_data_signal(ctx.main()));
            }
            return Ok(());
        }
        let link = ctx.link(root, 0)?;
        let (off, len) = args.blocks(ctx.ranks)[me];
        let (src, dst) = (args.input.at(root, off, len), args.output.at(me, 0, len));
        link.rx_ack(ctx.main());
        ctx.main().copy(src, dst);
        if staged {
            link.tx_data_signal(ctx.main());
        }
        Ok(())
    }
}
