//! Ring all-gather: ring position `i` starts with chunk `chunk_at[i]` in its output; after
//! `n - 1` pull steps every position holds every chunk.
//!
//! In step `k`, position `p` copies chunk `chunk_at[p - 1 - k]` from its left neighbour's
//! output into its own output.

use super::ring::{ring_step, RingParams};
use oxccl_framework::{Error, KernelCtx};

oxccl_framework::register_template! {
    name: "ring_all_gather",
    description: "n-1 pull steps around a ring; every position ends with every chunk",
}

/// Append a ring all-gather on `p.stream`.
pub fn ring_all_gather(ctx: &mut KernelCtx<'_>, p: &RingParams<'_>) -> Result<(), Error> {
    let ring = p.position(ctx)?;
    let n = ring.n;
    let (me, left) = (ctx.rank, ring.left.remote);
    for k in 0..n.saturating_sub(1) {
        let (off, len) = p.chunk(ring.pos + 2 * n - 1 - k);
        let (src, dst) = (p.output.at(left, off, len), p.output.at(me, off, len));
        ring_step(ctx, p.stream, &ring, |ctx| {
            ctx.stream(p.stream).copy(src, dst)
        });
    }
    Ok(())
}
