//! Broadcast mesh: every non-root rank pulls the whole vector from the root at once.
//!
//! The root tells every peer that its input is ready (one Ack each); each peer copies the
//! root's input into its own output. One synchronisation step whatever the rank count, at
//! the price of the root's links carrying `n - 1` copies of the data: the choice for small
//! messages. Cost `α + (p−1)·nβ` on the root's side (`α + nβ` where the root's links run
//! in parallel). It needs a link from the root to every other rank, and no other link.
//!
//! Staged, the root overwrites CclIn right after an iteration, so every peer answers
//! "done reading" (DataSignal) and the root waits for all of them before it ends the
//! iteration; zero-copy, the device's exit fence plays that part (the root's call returns
//! only after every peer finished it).

use super::{root_keeps_its_data, root_of};
use oxccl_framework::{
    Constraints, Error, Executor, KernelArgs, KernelCtx, Mode, OpKind, Peers, PlanCtx,
    ResourceRequest,
};

/// The mesh Broadcast executor.
pub struct MeshBroadcast;

oxccl_framework::register_executor! {
    name: "mesh",
    op: OpKind::Broadcast,
    description: "every rank pulls the root's input at once (small messages)",
    constraints: Constraints { max_bytes: Some(64 << 10), ..Constraints::ANY },
    preference: 30,
    make: || Box::new(MeshBroadcast),
}

/// Links of a star around the root: the root to every rank, every rank to the root.
pub(crate) fn star_peers(ctx: &PlanCtx<'_>, root: usize) -> ResourceRequest {
    let peers = match ctx.rank == root {
        true => (0..ctx.ranks).filter(|&p| p != root).collect(),
        false => vec![root],
    };
    ResourceRequest::with_peers(Peers::List(peers))
}

impl Executor for MeshBroadcast {
    fn resources(&self, ctx: &PlanCtx<'_>) -> Result<ResourceRequest, Error> {
        Ok(star_peers(ctx, root_of(ctx.op, "mesh")?))
    }

    fn kernel_run(&self, ctx: &mut KernelCtx<'_>, args: &KernelArgs) -> Result<(), Error> {
        let root = root_of(&args.op, "mesh")?;
        let (me, len) = (ctx.rank, args.op.count * args.op.dtype.size());
        let staged = args.mode == Mode::Staged;
        if me == root {
            let peers = (0..ctx.ranks)
                .filter(|&p| p != root)
                .map(|p| ctx.link(p, 0))
                .collect::<Result<Vec<_>, _>>()?;
            peers.iter().for_each(|l| l.tx_ack(ctx.main()));
            root_keeps_its_data(ctx, args);
            if staged {
                peers.iter().for_each(|l| l.rx_data_signal(ctx.main()));
            }
            return Ok(());
        }
        let link = ctx.link(root, 0)?;
        let (src, dst) = (args.input.at(root, 0, len), args.output.at(me, 0, len));
        link.rx_ack(ctx.main());
        ctx.main().copy(src, dst);
        if staged {
            link.tx_data_signal(ctx.main());
        }
        Ok(())
    }
}
