//! The relayed mesh reduce-scatter: every rank the root of a reduce of its own chunk,
//! common neighbours of unlinked pairs pre-reducing the far contributions (see [`super`]).

use super::{
    distinct, far_ranks, linked_peers, peers_round, relay_pre_reduce, root_reduce, segments,
    ReduceSides, Segment,
};
use crate::templates::Round;
use oxccl_framework::platform::{Buf, DataType, Rank, ReduceOp, Slice};
use oxccl_framework::{BufRange, Error, KernelCtx, OpKind};

/// Parameters of [`relayed_reduce_scatter`].
pub struct RelayedReduceScatter<'a> {
    /// Every rank's contributions, chunk `d` (`(byte offset, byte length)` in `input`,
    /// the same on every rank) for rank `d`.
    pub input: BufRange,
    pub chunks: &'a [(usize, usize)],
    /// Where this rank's reduced chunk starts in `output`.
    pub output: BufRange,
    pub out_at: usize,
    /// Scratch bytes per root (at least the largest chunk; 0 when nothing is relayed):
    /// a relay keeps its pieces for root `d` in scratch slot `d`.
    pub slot: usize,
    pub dtype: DataType,
    pub op: ReduceOp,
    /// End with a DataSignal round (channel 0) with every linked peer ("done reading"),
    /// for callers that refill inputs or scratch next.
    pub release: bool,
    /// The caller, named in the error of a pair without a relay.
    pub executor: &'a str,
    pub kind: OpKind,
}

/// Signals on a link, in order: an Ack round (channel 0: every input in place), Ack on
/// channel 1 from a relay to each root it pre-reduced for (one whatever the number of far
/// ranks), and with `release` a DataSignal round (channel 0). Needs links to the healthy
/// neighbours and, where some pair is unlinked, `ranks · slot` scratch bytes.
pub fn relayed_reduce_scatter(
    ctx: &mut KernelCtx<'_>,
    p: &RelayedReduceScatter<'_>,
) -> Result<(), Error> {
    let (me, n, es) = (ctx.rank, ctx.ranks, p.dtype.size());
    let linked = linked_peers(ctx.topology, me);
    peers_round(ctx, &linked, 0, Round::Ack)?;
    let segs: Vec<Vec<Segment>> = (0..n)
        .map(|d| {
            let far = far_ranks(ctx.topology, d, p.executor, p.kind)?;
            Ok(segments(&far, p.chunks[d], es))
        })
        .collect::<Result<_, Error>>()?;
    let input_at = |r: Rank, off: usize, len: usize| p.input.at(r, off, len);
    // Relay scratch for root `d`: slot `d`, the piece at its offset in the chunk.
    let scratch_for = |d: Rank| {
        let (base, chunk) = (d * p.slot, p.chunks[d].0);
        move |r: Rank, off: usize, len: usize| Slice::new(r, Buf::Scratch, base + off - chunk, len)
    };
    for d in (0..n).filter(|&d| d != me) {
        let scratch = scratch_for(d);
        let sides = ReduceSides {
            input: &input_at,
            scratch: &scratch,
            dtype: p.dtype,
            op: p.op,
        };
        if relay_pre_reduce(ctx.main(), me, &segs[d], &sides) {
            ctx.link(d, 1)?.tx_ack(ctx.main());
        }
    }
    let via: Vec<(Rank, Rank)> = segs[me]
        .iter()
        .flat_map(|s| s.via.iter().copied())
        .collect();
    for k in distinct(&via, |&(_, k)| k) {
        ctx.link(k, 1)?.rx_ack(ctx.main());
    }
    let scratch = scratch_for(me);
    let output = |off: usize, len: usize| p.output.at(me, p.out_at + off - p.chunks[me].0, len);
    let sides = ReduceSides {
        input: &input_at,
        scratch: &scratch,
        dtype: p.dtype,
        op: p.op,
    };
    root_reduce(ctx.main(), me, &linked, &segs[me], &sides, &output);
    match p.release {
        true => peers_round(ctx, &linked, 0, Round::DataSignal),
        false => Ok(()),
    }
}
