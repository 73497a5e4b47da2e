//! Ring reduce-scatter: after `n - 1` pull steps, ring position `i` holds in its output the
//! fully reduced chunk `chunk_at[i]`.
//!
//! In step `k`, position `p` reduces chunk `c = chunk_at[p - k - 2]`: the left neighbour's
//! partial sum of `c` (its input in step 0, its output afterwards) with its own input, into
//! its output. Only `chunk_at[p]` is complete at the end; other output chunks hold partial
//! sums.

use super::ring::{ring_step, RingParams};
use oxccl_framework::{Error, KernelCtx};

oxccl_framework::register_template! {
    name: "ring_reduce_scatter",
    description: "n-1 pull steps around a ring; position i ends with chunk_at[i] reduced",
}

/// Append a ring reduce-scatter on `p.stream`.
pub fn ring_reduce_scatter(ctx: &mut KernelCtx<'_>, p: &RingParams<'_>) -> Result<(), Error> {
    let ring = p.position(ctx)?;
    let n = ring.n;
    let (me, left) = (ctx.rank, ring.left.remote);
    for k in 0..n.saturating_sub(1) {
        let (off, len) = p.chunk(ring.pos + 2 * n - k - 2);
        let from_left = if k == 0 {
            p.input.at(left, off, len)
        } else {
            p.output.at(left, off, len)
        };
        let srcs = vec![from_left, p.input.at(me, off, len)];
        let dst = p.output.at(me, off, len);
        ring_step(ctx, p.stream, &ring, |ctx| {
            ctx.stream(p.stream).reduce(srcs, dst, p.dtype, p.op)
        });
    }
    Ok(())
}
