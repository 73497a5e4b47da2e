//! Reduce mesh: the root reduces every rank's input in one n-way Reduce.
//!
//! Every other rank tells the root that its input is ready (Ack); the root waits for all
//! of them and reduces all `p` inputs straight into its output in one task. One
//! synchronisation step, the root's links carrying `p − 1` vectors: the choice for small
//! messages. Cost `α + (p−1)·nβ + (p−1)·nγ` on the root. It needs a link from every rank to
//! the root, and no other link.
//!
//! Staged, the peers overwrite their CclIn right after an iteration, so the root answers
//! "done reading" (DataSignal) and every peer waits for it before it ends the iteration;
//! zero-copy, the device's exit fence plays that part (a peer's call returns only after
//! the root finished it).

use crate::broadcast::mesh::star_peers;
use crate::broadcast::root_of;
use oxccl_framework::{
    Constraints, Error, Executor, KernelArgs, KernelCtx, Mode, OpKind, PlanCtx, ResourceRequest,
};

/// The mesh Reduce executor.
pub struct MeshReduce;

oxccl_framework::register_executor! {
    name: "mesh",
    op: OpKind::Reduce,
    description: "the root reduces every rank's input in one n-way Reduce (small messages)",
    constraints: Constraints { max_bytes: Some(64 << 10), ..Constraints::ANY },
    preference: 30,
    make: || Box::new(MeshReduce),
}

impl Executor for MeshReduce {
    fn resources(&self, ctx: &PlanCtx<'_>) -> Result<ResourceRequest, Error> {
        Ok(star_peers(ctx, root_of(ctx.op, "mesh")?))
    }

    fn kernel_run(&self, ctx: &mut KernelCtx<'_>, args: &KernelArgs) -> Result<(), Error> {
        let root = root_of(&args.op, "mesh")?;
        let op = &args.op;
        let (me, len) = (ctx.rank, op.count * op.dtype.size());
        let staged = args.mode == Mode::Staged;
        if ctx.ranks == 1 {
            args.copy_input_to_output(ctx);
            return Ok(());
        }
        if me != root {
            let link = ctx.link(root, 0)?;
            link.tx_ack(ctx.main());
            if staged {
                link.rx_data_signal(ctx.main());
            }
            return Ok(());
        }
        let peers = (0..ctx.ranks)
            .filter(|&p| p != root)
            .map(|p| ctx.link(p, 0))
            .collect::<Result<Vec<_>, _>>()?;
        peers.iter().for_each(|l| l.rx_ack(ctx.main()));
        let srcs = (0..ctx.ranks).map(|r| args.input.at(r, 0, len)).collect();
        ctx.main()
            .reduce(srcs, args.output.at(me, 0, len), op.dtype, op.op);
        if staged {
            peers.iter().for_each(|l| l.tx_data_signal(ctx.main()));
        }
        Ok(())
    }
}
