//! ReduceScatter executors: rank `r`'s output becomes the reduction over every rank of
//! input block `r`.
//!
//! The input blocks are described by [`KernelArgs::blocks`], so the same code runs on
//! packed CCL buffers (staged) and on the user's buffer (zero-copy). In place, the output
//! is block `r` of the one buffer; only rank `r` reads that block, in the very task that
//! writes it, so no executor needs a detour for it.
//!
//! [`KernelArgs::blocks`]: oxccl_framework::KernelArgs::blocks

pub mod double_ring;
pub mod hier_levels;
pub mod mesh;
pub mod nb;
pub mod nhr;
pub mod rhd;
pub mod ring;

use oxccl_framework::platform::Buf;
use oxccl_framework::{BufRange, KernelArgs as Args, PlanCtx, ResourceRequest};

/// The request of a ReduceScatter that keeps partial sums of every block in scratch
/// (ring, double ring, RHD, NHR, NB): `request` plus one CCL buffer of scratch, which caps
/// an iteration at the CCL buffer over the rank count. Nothing extra on one rank.
pub(crate) fn with_partials_scratch(
    ctx: &PlanCtx<'_>,
    request: ResourceRequest,
) -> ResourceRequest {
    if ctx.ranks == 1 {
        return request;
    }
    let es = ctx.op.dtype.size();
    let per_rank = (ctx.ccl_bytes / ctx.ranks / es).max(1);
    ResourceRequest {
        scratch_bytes: ctx.ranks * per_rank * es,
        max_count_per_loop: Some(per_rank),
        ..request
    }
}

/// The scratch range holding one partial sum per block for this iteration, and each
/// block's `(offset, len)` in it (block `c` at `c * len`).
pub(crate) fn partials(args: &Args, ranks: usize) -> (BufRange, Vec<(usize, usize)>) {
    let len = args.op.count * args.op.dtype.size();
    let range = BufRange {
        buf: Buf::Scratch,
        offset: 0,
        len: ranks * len,
    };
    (range, (0..ranks).map(|c| (c * len, len)).collect())
}
