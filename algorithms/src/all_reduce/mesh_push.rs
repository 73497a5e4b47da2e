//! AllReduce mesh-push: reduce-scatter and all-gather fused into one pass.
//!
//! After one ready round with every peer, rank `r` reduces chunk `r` of every rank's input
//! and writes the result straight into chunk `r` of every rank's output, in one Reduce task
//! with `n` sources and `n` destinations; then nothing more: staged, a closing round says
//! that nobody reads a rank's input or writes its output any more (below), zero-copy the
//! device's exit fence does. Each rank reads and
//! writes the data once (`2S` of memory traffic per rank, against `(3 − 1/n)S` for the
//! classic mesh), in two synchronisation rounds: on shared memory this is the fastest
//! AllReduce at every size. It needs every pair of ranks linked and peers' outputs to be
//! writable, which holds for the CCL buffers and for zero-copy user buffers alike.
//!
//! In place, rank `q`'s output chunk `r` is its input chunk `r`, which only rank `r` reads,
//! in the same task that overwrites it (element by element, reads before writes).
//!
//! Staged, a rank copies CclOut out as soon as its iteration ends, so a third round
//! (DataSignal: "I finished writing your output and reading your input") ends each
//! iteration; zero-copy, the device's exit fence plays that part (a zero-copy call returns only after every granted peer finished it).

use crate::templates::{all_peers_round, even_chunks, Round};
use oxccl_framework::{
    Constraints, Error, Executor, KernelArgs, KernelCtx, Mode, OpKind, Peers, PlanCtx,
    ResourceRequest,
};

/// The mesh-push AllReduce executor.
pub struct MeshPushAllReduce;

oxccl_framework::register_executor! {
    name: "mesh-push",
    op: OpKind::AllReduce,
    description: "one ready round, then each rank reduces its chunk from all inputs into all outputs in one pass",
    constraints: Constraints { full_mesh: true, ..Constraints::ANY },
    preference: 25,
    make: || Box::new(MeshPushAllReduce),
}

impl Executor for MeshPushAllReduce {
    fn resources(&self, _ctx: &PlanCtx<'_>) -> Result<ResourceRequest, Error> {
        Ok(ResourceRequest::with_peers(Peers::All))
    }

    fn kernel_run(&self, ctx: &mut KernelCtx<'_>, args: &KernelArgs) -> Result<(), Error> {
        let op = &args.op;
        let me = ctx.rank;
        all_peers_round(ctx, 0, Round::Ack)?;
        let (off, len) = even_chunks(op.count, ctx.ranks, op.dtype.size())[me];
        let srcs = (0..ctx.ranks).map(|r| args.input.at(r, off, len)).collect();
        let dsts = (0..ctx.ranks)
            .map(|r| args.output.at(r, off, len))
            .collect();
        ctx.main().reduce_to(srcs, dsts, op.dtype, op.op);
        if args.mode == Mode::Staged {
            all_peers_round(ctx, 0, Round::DataSignal)?;
        }
        Ok(())
    }
}
