//! Broadcast relay-scatter-allgather: the root's data spread over every rank, then
//! all-gathered, over healthy links only (large messages on meshes with broken links).
//!
//! The vector is cut into one chunk per rank. Phase 1 scatters: every rank linked to the
//! root pulls its chunk out of the root's input into its output; the chunk of a *far* rank
//! (no link to the root) travels in pieces through its relays, the common healthy
//! neighbours of the two ([`relay_rooted`](crate::templates::relay_rooted)): each relay
//! pulls its piece into its own output (where it belongs anyway) before its own chunk and
//! tells the far rank (Ack, channel 1), which pulls the pieces on one slave stream per
//! relay. Phase 2 is the relayed mesh all-gather of the chunks over the outputs
//! ([`relayed_all_gather`]). Every link then carries about two chunks instead of the whole
//! vector: cost `2α + 2·n/p·β` (plus `1/m` of a chunk per relayed pair) against the star's
//! `nβ`, at the price of one more synchronisation step.
//!
//! Signals on a link, in order: Ack channel 0 (root to linked rank: "my input is ready"),
//! Ack channel 1 (relay to far rank), DataSignal channel 0 both ways and Ack channel 1
//! (the all-gather), and staged a DataSignal round on channel 1 ("done reading") that ends
//! the iteration; each is consumed before it is posted again. Zero-copy runs one iteration
//! without "done reading": it reads only user buffers, and the device's exit fence returns
//! a call only after every granted peer finished it. It needs a route through at most one
//! relay between every pair of ranks.

use super::{root_keeps_its_data, root_of};
use crate::templates::even_chunks;
use crate::templates::relay_rooted::{
    far_ranks, linked_peers, peer_stream, peers_round, pieces_of, relayed_all_gather, FarRank,
};
use crate::templates::Round;
use oxccl_framework::platform::Rank;
use oxccl_framework::{
    Constraints, Error, Executor, KernelArgs, KernelCtx, Mode, OpKind, Peers, PlanCtx,
    ResourceRequest,
};

/// The relaying scatter + all-gather Broadcast executor.
pub struct RelayScatterAllGatherBroadcast;

const NAME: &str = "relay-scatter-allgather";
const KIND: OpKind = OpKind::Broadcast;

oxccl_framework::register_executor! {
    name: NAME,
    op: KIND,
    description: "the root's chunks scattered, then all-gathered, far ranks served through every common neighbour (large messages)",
    constraints: Constraints::ANY,
    preference: 14,
    make: || Box::new(RelayScatterAllGatherBroadcast),
}

impl Executor for RelayScatterAllGatherBroadcast {
    fn resources(&self, ctx: &PlanCtx<'_>) -> Result<ResourceRequest, Error> {
        far_ranks(ctx.topology, root_of(ctx.op, NAME)?, NAME, KIND)?;
        Ok(ResourceRequest {
            slave_streams: ctx.ranks - 1,
            ..ResourceRequest::with_peers(Peers::List(linked_peers(ctx.topology, ctx.rank)))
        })
    }

    fn kernel_run(&self, ctx: &mut KernelCtx<'_>, args: &KernelArgs) -> Result<(), Error> {
        let root = root_of(&args.op, NAME)?;
        let far = far_ranks(ctx.topology, root, NAME, KIND)?;
        let (me, es) = (ctx.rank, args.op.dtype.size());
        let chunks = even_chunks(args.op.count, ctx.ranks, es);
        if me == root {
            let links = linked_peers(ctx.topology, me)
                .into_iter()
                .map(|p| ctx.link(p, 0))
                .collect::<Result<Vec<_>, _>>()?;
            links.iter().for_each(|l| l.tx_ack(ctx.main()));
            root_keeps_its_data(ctx, args);
        } else {
            match far.iter().find(|f| f.rank == me) {
                Some(f) => far_scatter(ctx, args, f, chunks[me], es)?,
                None => linked_scatter(ctx, args, root, &far, &chunks)?,
            }
        }
        relayed_all_gather(ctx, args.output, &chunks, es, NAME, KIND)?;
        if args.mode == Mode::Staged {
            let linked = linked_peers(ctx.topology, me);
            peers_round(ctx, &linked, 1, Round::DataSignal)?;
        }
        Ok(())
    }
}

/// A linked rank's scatter: its pieces of the far chunks it relays, announced, then its
/// own chunk, all out of the root's input into its output.
fn linked_scatter(
    ctx: &mut KernelCtx<'_>,
    args: &KernelArgs,
    root: Rank,
    far: &[FarRank],
    chunks: &[(usize, usize)],
) -> Result<(), Error> {
    let (me, es) = (ctx.rank, args.op.dtype.size());
    let pull = |ctx: &mut KernelCtx<'_>, (off, len): (usize, usize)| {
        let (src, dst) = (args.input.at(root, off, len), args.output.at(me, off, len));
        ctx.main().copy(src, dst);
    };
    ctx.link(root, 0)?.rx_ack(ctx.main());
    for f in far.iter().filter(|f| f.relays.contains(&me)) {
        let pieces = pieces_of(f, chunks[f.rank], es);
        if let Some(&(_, piece)) = pieces.iter().find(|&&(k, _)| k == me) {
            pull(ctx, piece);
        }
        ctx.link(f.rank, 1)?.tx_ack(ctx.main());
    }
    pull(ctx, chunks[me]);
    Ok(())
}

/// A far rank's scatter: the pieces of its chunk out of its relays' outputs, one slave
/// stream per relay.
fn far_scatter(
    ctx: &mut KernelCtx<'_>,
    args: &KernelArgs,
    far: &FarRank,
    chunk: (usize, usize),
    es: usize,
) -> Result<(), Error> {
    let me = ctx.rank;
    let pieces = pieces_of(far, chunk, es);
    let streams: Vec<usize> = pieces
        .iter()
        .map(|&(k, _)| peer_stream(me, ctx.ranks, k))
        .collect();
    streams.iter().for_each(|&s| ctx.fork(s..=s));
    for (&(k, (off, len)), &slave) in pieces.iter().zip(&streams) {
        let link = ctx.link(k, 1)?;
        let (src, dst) = (args.output.at(k, off, len), args.output.at(me, off, len));
        let s = ctx.stream(slave);
        link.rx_ack(s);
        s.copy(src, dst);
    }
    streams.iter().for_each(|&s| ctx.join(s..=s));
    Ok(())
}
