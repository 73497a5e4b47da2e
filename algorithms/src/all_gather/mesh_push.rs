//! AllGather mesh-push: each rank writes its block into every output in one pass.
//!
//! After one ready round with every peer, rank `r` copies its input into block `r` of
//! every rank's output (its own too, out of place) in one Copy task with `n`
//! destinations, which the host device runs block by block: each piece of the input is
//! read once, while it is in the cache, and stored to all `n` outputs. The collective
//! then reads `S` and writes `nS` (`S` the gathered size), its memory-traffic floor,
//! where pulling every block (`mesh`) reads each input `n` times. One synchronisation
//! round, every pair linked. It only writes peers' outputs, never reads their memory, so
//! it runs over put-only links too (`LinkNeed::Put`: there calls are staged and the
//! outputs are the peers' CCL buffers).
//!
//! Staged, a rank copies CclOut out as soon as its iteration ends, so a second round
//! (DataSignal: "I finished writing your output") ends each iteration; zero-copy, the
//! device's exit fence plays that part.

use crate::templates::{all_peers_round, Round};
use oxccl_framework::{
    Constraints, Error, Executor, KernelArgs, KernelCtx, LinkNeed, Mode, OpKind, Peers, PlanCtx,
    ResourceRequest,
};

/// The mesh-push AllGather executor.
pub struct MeshPushAllGather;

oxccl_framework::register_executor! {
    name: "mesh-push",
    op: OpKind::AllGather,
    description: "one ready round, then each rank copies its block into every output, reading it once",
    constraints: Constraints { full_mesh: true, links: LinkNeed::Put, ..Constraints::ANY },
    preference: 25,
    make: || Box::new(MeshPushAllGather),
}

impl Executor for MeshPushAllGather {
    fn resources(&self, _ctx: &PlanCtx<'_>) -> Result<ResourceRequest, Error> {
        Ok(ResourceRequest::with_peers(Peers::All))
    }

    fn kernel_run(&self, ctx: &mut KernelCtx<'_>, args: &KernelArgs) -> Result<(), Error> {
        let me = ctx.rank;
        let (offset, len) = args.blocks(ctx.ranks)[me];
        all_peers_round(ctx, 0, Round::Ack)?;
        let dsts = (0..ctx.ranks)
            .filter(|&r| r != me || !args.aliased)
            .map(|r| args.output.at(r, offset, len))
            .collect();
        ctx.main().copy_to(args.input.at(me, 0, len), dsts);
        if args.mode == Mode::Staged {
            all_peers_round(ctx, 0, Round::DataSignal)?;
        }
        Ok(())
    }
}
