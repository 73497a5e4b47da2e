//! AllGather mesh-push: each rank writes its block into every output in one pass.
//!
//! After one ready round with every peer, rank `r` copies its input into block `r` of
//! every rank's output (its own too, out of place) in one Copy task with `n`
//! destinations, which the host device runs block by block: each piece of the input is
//! read once, while it is in the cache, and stored to all `n` outputs. The collective
//! then reads `S` and writes `nS` (`S` the gathered size), its memory-traffic floor,
//! where pulling every block (`mesh`) reads each input `n` times. One synchronisation
//! round, every pair linked. It only writes peers' outputs, never reads their memory, so
//! it runs over put-only links too (`LinkNeed::Put`): staged, the outputs are the peers'
//! CclOut; zero-copy, a peer across a put-only link gets the block in its Scratch slot of
//! the rank and copies it into its output (zero-copy per peer: see
//! [`crate::templates::put`](mod@crate::templates::put)).
//!
//! Staged, a rank copies CclOut out as soon as its iteration ends, so a second round
//! (DataSignal: "I finished writing your output") ends each iteration; zero-copy, the
//! device's exit fence plays that part, unless some link is put-only: the peers across
//! one must know their Scratch slots are full before they copy them, and the landing
//! Scratch caps the iterations, so the round is made (with every peer) as when staged.

use crate::templates::{
    all_peers_round, land_from_scratch, landing, lands_in_place, slot_len, with_landing_scratch,
    Round,
};
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
    fn resources(&self, ctx: &PlanCtx<'_>) -> Result<ResourceRequest, Error> {
        // A landing slot per rank, of one block each.
        let cap = ctx.ccl_bytes / ctx.ranks / ctx.op.dtype.size();
        let request = ResourceRequest::with_peers(Peers::All);
        Ok(with_landing_scratch(ctx, request, ctx.ranks, cap))
    }

    fn kernel_run(&self, ctx: &mut KernelCtx<'_>, args: &KernelArgs) -> Result<(), Error> {
        let me = ctx.rank;
        let blocks = args.blocks(ctx.ranks);
        let (offset, len) = blocks[me];
        let slot = slot_len(&blocks);
        all_peers_round(ctx, 0, Round::Ack)?;
        let dsts = (0..ctx.ranks)
            .filter(|&r| r != me || !args.aliased)
            .map(|r| landing(ctx, args.output.at(r, offset, len), me * slot))
            .collect();
        ctx.main().copy_to(args.input.at(me, 0, len), dsts);
        if args.mode == Mode::Staged {
            return all_peers_round(ctx, 0, Round::DataSignal);
        }
        if ctx.topology.all_load_store() {
            return Ok(());
        }
        // Puts landed in Scratch, and the iterations are capped: the round is made with
        // every peer, so that the next iteration's Ack round follows this one's on every
        // link (a peer over a load/store link would otherwise see two Acks of this rank
        // with nothing between them).
        all_peers_round(ctx, 0, Round::DataSignal)?;
        let landed =
            (0..ctx.ranks).filter(|&p| p != me && !lands_in_place(ctx, p, args.output.buf));
        for p in landed.collect::<Vec<_>>() {
            let (off, len) = blocks[p];
            land_from_scratch(ctx, 0, p, args.output.at(me, off, len), p * slot);
        }
        Ok(())
    }
}
