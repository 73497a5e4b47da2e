//! Broadcast mesh-push: the root's vector cut into one chunk per rank, each rank
//! copying its chunk from the root into every output.
//!
//! After one ready round with every peer, rank `r` copies chunk `r` of the root's input
//! into chunk `r` of every rank's output (the root's too, out of place) in one Copy task
//! with `n` destinations, which the host device runs block by block: each piece of the
//! root's vector is read once and stored to all `n` outputs, and the `n` ranks share the
//! work. The collective reads `S` and writes `nS`, its memory-traffic floor, where
//! every rank pulling the whole vector (`mesh`) reads it `n` times, and a chain or tree
//! passes it through intermediate ranks. It needs every pair of ranks linked (every rank
//! writes every output).
//!
//! Staged, the root overwrites CclIn and every rank copies CclOut out as soon as its
//! iteration ends, so a second round (DataSignal) ends each iteration; zero-copy, the
//! device's exit fence plays that part.

use super::root_of;
use crate::templates::{all_peers_round, even_chunks, Round};
use oxccl_framework::{
    Constraints, Error, Executor, KernelArgs, KernelCtx, Mode, OpKind, Peers, PlanCtx,
    ResourceRequest,
};

/// The mesh-push Broadcast executor.
pub struct MeshPushBroadcast;

oxccl_framework::register_executor! {
    name: "mesh-push",
    op: OpKind::Broadcast,
    description: "one ready round, then each rank copies its chunk of the root's input into every output",
    constraints: Constraints { full_mesh: true, ..Constraints::ANY },
    preference: 25,
    make: || Box::new(MeshPushBroadcast),
}

impl Executor for MeshPushBroadcast {
    fn resources(&self, _ctx: &PlanCtx<'_>) -> Result<ResourceRequest, Error> {
        Ok(ResourceRequest::with_peers(Peers::All))
    }

    fn kernel_run(&self, ctx: &mut KernelCtx<'_>, args: &KernelArgs) -> Result<(), Error> {
        let root = root_of(&args.op, "mesh-push")?;
        let me = ctx.rank;
        all_peers_round(ctx, 0, Round::Ack)?;
        let (off, len) = even_chunks(args.op.count, ctx.ranks, args.op.dtype.size())[me];
        let dsts = (0..ctx.ranks)
            .filter(|&r| r != root || !args.aliased)
            .map(|r| args.output.at(r, off, len))
            .collect();
        ctx.main().copy_to(args.input.at(root, off, len), dsts);
        if args.mode == Mode::Staged {
            all_peers_round(ctx, 0, Round::DataSignal)?;
        }
        Ok(())
    }
}
