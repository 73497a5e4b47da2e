//! Reduce relay-reduce-scatter-gather: a relayed mesh reduce-scatter, then a gather of
//! the reduced chunks to the root, over healthy links only (large messages on meshes with
//! broken links).
//!
//! The vector is cut into one chunk per rank. Phase 1 is the relayed mesh reduce-scatter
//! ([`relayed_reduce_scatter`]): rank `d` reduces chunk `d` of every rank's input into its
//! partials ([`Partials`]: the root's output; zero-copy, a non-root's Scratch after the
//! relays' slots), common neighbours of an unlinked pair pre-reducing the far
//! contribution. Phase 2 gathers the reduced chunks into the root's output: a rank linked
//! to the root offers
//! its chunk (DataSignal, channel 0); the chunk of a *far* rank (no link to the root)
//! travels in pieces through its relays
//! ([`relay_rooted`](crate::templates::relay_rooted)), each pulling its piece into its own
//! partials before it offers its chunk; the root pulls every linked rank's chunk and
//! relayed pieces on that rank's slave stream. Every link carries
//! about two chunks instead of the whole vector: cost `3α + 2·n/p·β` plus `1/m` of a chunk
//! per relayed pair and the reductions, against the star's `nβ`.
//!
//! Signals on a link, in order: the reduce-scatter's Ack round (channel 0) and relay Acks
//! (channel 1), the gather's DataSignal (channel 0, toward the root), and a DataSignal
//! round on channel 1 ("done reading") where the inputs or the relays' scratch are refilled
//! next: staged, zero-copy where some pair is unlinked, and zero-copy between iterations
//! (the non-roots' partials are in Scratch; an iteration holds at most a CCL buffer). It
//! needs a route through at most one relay between every pair of ranks.

use super::{with_partials, Partials};
use crate::broadcast::root_of;
use crate::templates::even_chunks;
use crate::templates::relay_rooted::{
    far_ranks, has_far_pairs, linked_peers, peer_stream, peers_round, pieces_of,
    relayed_reduce_scatter, FarRank, RelayedReduceScatter,
};
use crate::templates::Round;
use oxccl_framework::platform::Rank;
use oxccl_framework::{
    Constraints, Error, Executor, KernelArgs, KernelCtx, Mode, OpKind, Peers, PlanCtx,
    ResourceRequest,
};

/// The relaying reduce-scatter + gather Reduce executor.
pub struct RelayReduceScatterGatherReduce;

const NAME: &str = "relay-reduce-scatter-gather";
const KIND: OpKind = OpKind::Reduce;

oxccl_framework::register_executor! {
    name: NAME,
    op: KIND,
    description: "relayed mesh reduce-scatter, then the chunks gathered to the root through every common neighbour (large messages)",
    constraints: Constraints::ANY,
    preference: 14,
    make: || Box::new(RelayReduceScatterGatherReduce),
}

/// Elements per loop iteration where the relays' scratch bounds it (some pair unlinked).
fn per_loop(ctx: &PlanCtx<'_>) -> Option<usize> {
    has_far_pairs(ctx.topology).then(|| (ctx.ccl_bytes / ctx.op.dtype.size()).max(1))
}

/// Scratch bytes per root: room for the largest chunk of the largest iteration.
fn slot_bytes(per_loop: usize, ranks: usize, es: usize) -> usize {
    per_loop.div_ceil(ranks) * es
}

impl Executor for RelayReduceScatterGatherReduce {
    fn resources(&self, ctx: &PlanCtx<'_>) -> Result<ResourceRequest, Error> {
        let root = root_of(ctx.op, NAME)?;
        far_ranks(ctx.topology, root, NAME, KIND)?;
        let request = ResourceRequest {
            slave_streams: if ctx.rank == root { ctx.ranks - 1 } else { 0 },
            ..ResourceRequest::with_peers(Peers::List(linked_peers(ctx.topology, ctx.rank)))
        };
        let request = match per_loop(ctx) {
            None => request,
            Some(count) => ResourceRequest {
                scratch_bytes: ctx.ranks * slot_bytes(count, ctx.ranks, ctx.op.dtype.size()),
                max_count_per_loop: Some(count),
                ..request
            },
        };
        Ok(with_partials(ctx, request))
    }

    fn kernel_run(&self, ctx: &mut KernelCtx<'_>, args: &KernelArgs) -> Result<(), Error> {
        let root = root_of(&args.op, NAME)?;
        let far = far_ranks(ctx.topology, root, NAME, KIND)?;
        let (me, n, es) = (ctx.rank, ctx.ranks, args.op.dtype.size());
        if n == 1 {
            args.copy_input_to_output(ctx);
            return Ok(());
        }
        let chunks = even_chunks(args.op.count, n, es);
        let relayed = has_far_pairs(ctx.topology);
        let slot = match relayed {
            true => slot_bytes(args.ccl_bytes / es, n, es),
            false => 0,
        };
        // The relays' slots, then the partials (see `resources`).
        let partials = Partials::new(args, root, n * slot);
        let p = RelayedReduceScatter {
            input: args.input,
            chunks: &chunks,
            output: partials.of(me),
            out_at: chunks[me].0,
            slot,
            dtype: args.op.dtype,
            op: args.op.op,
            release: false,
            executor: NAME,
            kind: KIND,
        };
        relayed_reduce_scatter(ctx, &p)?;
        match (me == root, far.iter().find(|f| f.rank == me)) {
            (true, _) => root_gathers(ctx, args, &partials, &far, &chunks)?,
            (false, Some(f)) => {
                for &k in &f.relays {
                    ctx.link(k, 0)?.tx_data_signal(ctx.main());
                }
            }
            (false, None) => linked_offers(ctx, args, &partials, root, &far, &chunks)?,
        }
        // Zero-copy, a non-root's partials live in Scratch, which the next iteration
        // refills: so do the relays' slots.
        if args.mode == Mode::Staged || relayed || !args.last {
            let linked = linked_peers(ctx.topology, me);
            peers_round(ctx, &linked, 1, Round::DataSignal)?;
        }
        Ok(())
    }
}

/// The relay piece of far rank `f`'s chunk that `relay` carries, if any.
fn relay_piece(
    f: &FarRank,
    relay: Rank,
    chunk: (usize, usize),
    es: usize,
) -> Option<(usize, usize)> {
    pieces_of(f, chunk, es)
        .into_iter()
        .find(|&(k, _)| k == relay)
        .map(|(_, piece)| piece)
}

/// A linked rank: pull its pieces of the far chunks it relays into its partials, then
/// tell the root that its chunk and those pieces are ready.
fn linked_offers(
    ctx: &mut KernelCtx<'_>,
    args: &KernelArgs,
    partials: &Partials,
    root: Rank,
    far: &[FarRank],
    chunks: &[(usize, usize)],
) -> Result<(), Error> {
    let (me, es) = (ctx.rank, args.op.dtype.size());
    for f in far.iter().filter(|f| f.relays.contains(&me)) {
        ctx.link(f.rank, 0)?.rx_data_signal(ctx.main());
        if let Some((off, len)) = relay_piece(f, me, chunks[f.rank], es) {
            let (src, dst) = (
                partials.of(f.rank).at(f.rank, off, len),
                partials.of(me).at(me, off, len),
            );
            ctx.main().copy(src, dst);
        }
    }
    ctx.link(root, 0)?.tx_data_signal(ctx.main());
    Ok(())
}

/// The root: every linked rank's chunk and relayed pieces, on that rank's slave stream.
fn root_gathers(
    ctx: &mut KernelCtx<'_>,
    args: &KernelArgs,
    partials: &Partials,
    far: &[FarRank],
    chunks: &[(usize, usize)],
) -> Result<(), Error> {
    let (me, es) = (ctx.rank, args.op.dtype.size());
    let linked = linked_peers(ctx.topology, me);
    let streams: Vec<usize> = linked
        .iter()
        .map(|&k| peer_stream(me, ctx.ranks, k))
        .collect();
    streams.iter().for_each(|&s| ctx.fork(s..=s));
    for (&k, &slave) in linked.iter().zip(&streams) {
        let link = ctx.link(k, 0)?;
        let mut ranges = vec![chunks[k]];
        ranges.extend(
            far.iter()
                .filter_map(|f| relay_piece(f, k, chunks[f.rank], es)),
        );
        let s = ctx.stream(slave);
        link.rx_data_signal(s);
        for (off, len) in ranges {
            s.copy(partials.of(k).at(k, off, len), args.output.at(me, off, len));
        }
    }
    streams.iter().for_each(|&s| ctx.join(s..=s));
    Ok(())
}
