//! ReduceScatterV executors: rank `r`'s output becomes the reduction over every rank of
//! input block `r` (`counts[r]` elements at `displs[r]`, the same layout on every rank).
//!
//! As for AllGatherV, the framework runs these operators in one iteration on the user's
//! buffers; the executors move the blocks in rounds of one slot-sized piece of every block
//! through the CCL buffers themselves (see [`crate::all_gather_v`]). In place, the output
//! is block `r` of the one buffer; only rank `r` reads that block, in the very task that
//! writes it.

pub mod mesh;
pub mod put_ring;
pub mod relay_mesh;
pub mod ring;

use oxccl_framework::{KernelArgs, KernelCtx};

/// On one rank ReduceScatterV is a copy of its block `(displ, count)` to the output (none
/// in place). True when the rank is alone and the caller is done.
pub(crate) fn alone(
    ctx: &mut KernelCtx<'_>,
    args: &KernelArgs,
    (displ, count): (usize, usize),
) -> bool {
    if ctx.ranks != 1 {
        return false;
    }
    if !args.aliased {
        let (me, es) = (ctx.rank, args.op.dtype.size());
        let src = args.input.at(me, displ * es, count * es);
        ctx.main().copy(src, args.output.at(me, 0, count * es));
    }
    true
}
