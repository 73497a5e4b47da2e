//! ReduceScatterV relay-mesh: the mesh ReduceScatterV for topologies with broken links.
//!
//! Every rank is the root of a reduce of its own block; a round is the relayed mesh
//! reduce-scatter ([`relayed_reduce_scatter`]):
//! 1. an Ack round with every linked peer (channel 0): all inputs are in place;
//! 2. a rank that is a common neighbour of an unlinked pair `(s, d)` pre-reduces its piece
//!    of block `d` of `s`'s input with its own into its scratch, then tells `d` (Ack,
//!    channel 1; one signal per root whatever the number of far ranks);
//! 3. once its relays have told it, a rank reduces its block segment by segment: its own
//!    input, every linked rank's and, where a relay pre-reduced, the relay's scratch
//!    instead of its input;
//! 4. a DataSignal round with every linked peer (channel 0): done reading, so the next
//!    round may refill slots and scratch (the last round leaves it out; see below).
//!
//! Staged, the round's piece of every block goes into CclIn slots first, as in
//! [`mesh`](super::mesh); zero-copy, the round reads the inputs in place. Where some pair
//! of ranks is unlinked the relays' scratch holds one slot per rank, so both modes run in
//! rounds of a slot; on a healthy mesh zero-copy runs in one round, like the mesh
//! ReduceScatterV. Cost per round: `2α + bβ + f·b/m·β` plus the reductions, for blocks of
//! `b` and `f` far ranks relayed over `m` relays. It needs a route through at most one
//! relay between every pair of ranks.
//!
//! After the last round nothing in the program says "done reading"; the device's epoch
//! fence orders the next operation. Zero-copy, the exit fence returns a rank's call only
//! after every linked peer finished it, so every later use of its slots, scratch and
//! buffers, by itself or by a peer, follows this call's reads. Staged there is no exit
//! fence: the rank's own next call waits (entry fence, previous call's peers) for the
//! linked peers that read its CclIn slots and scratch, but a third rank linked to it and
//! not to such a reader is not held back, should the next executor write into the rank's
//! CclIn or Scratch (a put or relay executor). The analyzer's sequence matrix has no
//! broken-link shape, so that case is not proved.

use crate::all_gather_v::{block_layout, PieceRounds};
use crate::templates::relay_rooted::{
    has_far_pairs, linked_peers, relayed_reduce_scatter, RelayedReduceScatter,
};
use crate::templates::{p2p_slot_bytes, require_routes};
use oxccl_framework::platform::Buf;
use oxccl_framework::{
    BufRange, Constraints, Error, Executor, KernelArgs, KernelCtx, Mode, OpKind, Peers, PlanCtx,
    ResourceRequest,
};

/// The relaying mesh ReduceScatterV executor.
pub struct RelayMeshReduceScatterV;

const NAME: &str = "relay-mesh";
const KIND: OpKind = OpKind::ReduceScatterV;

oxccl_framework::register_executor! {
    name: NAME,
    op: KIND,
    description: "mesh ReduceScatterV; common neighbours of unlinked ranks pre-reduce their pieces",
    constraints: Constraints::ANY,
    preference: 15,
    make: || Box::new(RelayMeshReduceScatterV),
}

impl Executor for RelayMeshReduceScatterV {
    fn resources(&self, ctx: &PlanCtx<'_>) -> Result<ResourceRequest, Error> {
        require_routes(ctx.topology, NAME, KIND, None)?;
        let request =
            ResourceRequest::with_peers(Peers::List(linked_peers(ctx.topology, ctx.rank)));
        if !has_far_pairs(ctx.topology) {
            return Ok(request);
        }
        let slot = p2p_slot_bytes(ctx.ranks, ctx.ccl_bytes, ctx.op.dtype.size());
        Ok(ResourceRequest {
            scratch_bytes: ctx.ranks * slot,
            ..request
        })
    }

    fn kernel_run(&self, ctx: &mut KernelCtx<'_>, args: &KernelArgs) -> Result<(), Error> {
        let (counts, displs) = block_layout(NAME, KIND, args)?;
        let (me, n, es) = (ctx.rank, ctx.ranks, args.op.dtype.size());
        if super::alone(ctx, args, (displs[0], counts[0])) {
            return Ok(());
        }
        if args.mode == Mode::Direct && !has_far_pairs(ctx.topology) {
            let chunks: Vec<(usize, usize)> =
                (0..n).map(|s| (displs[s] * es, counts[s] * es)).collect();
            return reduce_round(ctx, args, args.input, &chunks, (0, 0), true);
        }
        let plan = PieceRounds::new(NAME, KIND, counts, es, args.ccl_bytes)?;
        ctx.reserve_rounds(plan.rounds, 4 * counts.len())?;
        for t in 0..plan.rounds {
            let pieces: Vec<(usize, usize)> =
                counts.iter().map(|&c| plan.piece(c, es, t)).collect();
            let (input, chunks) = match args.mode {
                Mode::Direct => (
                    args.input,
                    (0..n)
                        .map(|s| (displs[s] * es + pieces[s].0, pieces[s].1))
                        .collect(),
                ),
                Mode::Staged => stage_slots(ctx, args, displs, &pieces, plan.slot),
            };
            let last = t + 1 == plan.rounds;
            reduce_round(ctx, args, input, &chunks, (pieces[me].0, plan.slot), last)?;
        }
        Ok(())
    }
}

/// Staged: the round's piece of every block (blocks at `displs` elements) into this
/// rank's CclIn slots of `slot` bytes; the slots and every rank's chunk in them.
fn stage_slots(
    ctx: &mut KernelCtx<'_>,
    args: &KernelArgs,
    displs: &[usize],
    pieces: &[(usize, usize)],
    slot: usize,
) -> (BufRange, Vec<(usize, usize)>) {
    let (me, es) = (ctx.rank, args.op.dtype.size());
    let slots = BufRange {
        buf: Buf::CclIn,
        offset: 0,
        len: pieces.len() * slot,
    };
    let chunks: Vec<(usize, usize)> = (0..pieces.len()).map(|s| (s * slot, pieces[s].1)).collect();
    for (s, &(at, len)) in pieces.iter().enumerate() {
        let src = args.input.at(me, displs[s] * es + at, len);
        ctx.main().copy(src, slots.at(me, chunks[s].0, len));
    }
    (slots, chunks)
}

/// One round: this rank's output at `at` becomes the reduction of every rank's
/// `input[chunks[me]]`; `slot` is the bytes per root of the relays' scratch (0 where
/// nothing is relayed). The last round has no "done reading" round: the epoch fence
/// orders the next operation (see the module docs for what it does not cover staged).
fn reduce_round(
    ctx: &mut KernelCtx<'_>,
    args: &KernelArgs,
    input: BufRange,
    chunks: &[(usize, usize)],
    (out_at, slot): (usize, usize),
    last: bool,
) -> Result<(), Error> {
    let p = RelayedReduceScatter {
        input,
        chunks,
        output: args.output,
        out_at,
        slot,
        dtype: args.op.dtype,
        op: args.op.op,
        release: !last,
        executor: NAME,
        kind: KIND,
    };
    relayed_reduce_scatter(ctx, &p)
}
