//! Ring reduce-scatter: after `n - 1` pull steps, ring position `i` holds in its output the
//! fully reduced chunk `chunk_at[i]`.
//!
//! In step `k`, position `p` reduces chunk `c = chunk_at[p - k - 2]`: the left neighbour's
//! partial sum of `c` (its input in step 0, its output afterwards) with its own input, into
//! its output. Only `chunk_at[p]` is complete at the end; other output chunks hold partial
//! sums.

use super::ring::{ring_step, RingParams};
use oxccl_framework::{BufRange, Error, KernelCtx};

oxccl_framework::register_template! {
    name: "ring_reduce_scatter",
    description: "n-1 pull steps around a ring; position i ends with chunk_at[i] reduced",
}

/// Append a ring reduce-scatter on `p.stream`: partial sums and the result in `p.output`,
/// at each chunk's offset.
pub fn ring_reduce_scatter(ctx: &mut KernelCtx<'_>, p: &RingParams<'_>) -> Result<(), Error> {
    let targets = RingTargets {
        partials: p.output,
        partial_chunks: p.chunks,
        result: None,
    };
    ring_reduce_scatter_into(ctx, p, &targets)
}

/// Where a ring reduce-scatter leaves its partial sums and its own reduced chunk, when
/// that is not `p.output` at the chunks' offsets: ReduceScatter's output holds only the
/// rank's own block, so its partial sums go to scratch.
#[derive(Clone, Debug)]
pub struct RingTargets<'a> {
    /// Where the partial sums go (and where the left neighbour's are read from).
    pub partials: BufRange,
    /// `(byte offset, byte length)` of each chunk within `partials`.
    pub partial_chunks: &'a [(usize, usize)],
    /// Where the own, fully reduced chunk goes (at offset 0); `None`: into `partials`.
    pub result: Option<BufRange>,
}

/// Append a ring reduce-scatter on `p.stream` that reads `p.input` and writes `t`.
pub fn ring_reduce_scatter_into(
    ctx: &mut KernelCtx<'_>,
    p: &RingParams<'_>,
    t: &RingTargets<'_>,
) -> Result<(), Error> {
    let ring = p.position(ctx)?;
    let n = ring.n;
    let (me, left) = (ctx.rank, ring.left.remote);
    for k in 0..n.saturating_sub(1) {
        let chunk = p.chunk_index(ring.pos + 2 * n - k - 2);
        let (off, len) = p.chunks[chunk];
        let (partial, _) = t.partial_chunks[chunk];
        let from_left = if k == 0 {
            p.input.at(left, off, len)
        } else {
            t.partials.at(left, partial, len)
        };
        let srcs = vec![from_left, p.input.at(me, off, len)];
        let dst = match t.result {
            Some(result) if k == n - 2 => result.at(me, 0, len),
            _ => t.partials.at(me, partial, len),
        };
        ring_step(ctx, p.stream, &ring, |ctx| {
            ctx.stream(p.stream).reduce(srcs, dst, p.dtype, p.op)
        });
    }
    Ok(())
}
