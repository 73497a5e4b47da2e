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
pub mod hier_put_ring;
pub mod mesh;
pub mod nb;
pub mod nhr;
pub mod put_mesh;
pub mod put_rhd;
pub mod put_ring;
pub mod relay_mesh;
pub mod rhd;
pub mod ring;

use crate::templates::{require_links, RingParams, RingTargets};
use oxccl_framework::platform::{Buf, Rank};
use oxccl_framework::{
    BufRange, Error, KernelArgs as Args, KernelCtx, Peers, PlanCtx, ResourceRequest,
};

/// A reduce-scatter template that keeps partial sums in [`RingTargets`] (ring, RHD, NHR,
/// NB: `ring_reduce_scatter_into` and its log-step siblings).
pub(crate) type ScatterInto =
    fn(&mut KernelCtx<'_>, &RingParams<'_>, &RingTargets<'_>) -> Result<(), Error>;

/// The kernel of the executors built on a [`ScatterInto`] template: over `order` (ring
/// position `i` ends with block `order[i]`), partial sums in scratch, the own block's
/// last step straight into the output; a plain copy on one rank.
pub(crate) fn scatter_via_scratch(
    ctx: &mut KernelCtx<'_>,
    args: &Args,
    order: &[Rank],
    template: ScatterInto,
) -> Result<(), Error> {
    let n = ctx.ranks;
    if n == 1 {
        args.copy_input_to_output(ctx);
        return Ok(());
    }
    let blocks = args.blocks(n);
    let (partials, partial_chunks) = partials(args, n);
    let p = RingParams::on_main_stream(order, &blocks, order, args);
    let targets = RingTargets {
        partials,
        partial_chunks: &partial_chunks,
        result: Some(args.output),
    };
    template(ctx, &p, &targets)
}

/// The resources of the log-step executors (RHD, NHR, NB) over the natural order: links
/// to the peers `peers_of` names for this rank, each checked healthy, plus the
/// partial-sums scratch.
pub(crate) fn log_step_resources(
    ctx: &PlanCtx<'_>,
    name: &str,
    peers_of: fn(&[Rank], Rank) -> Vec<Rank>,
) -> Result<ResourceRequest, Error> {
    let order: Vec<Rank> = (0..ctx.ranks).collect();
    let peers = require_links(ctx.topology, name, ctx.rank, peers_of(&order, ctx.rank))?;
    let request = ResourceRequest::with_peers(Peers::List(peers));
    Ok(with_partials_scratch(ctx, request))
}

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

/// The request of a put-based ReduceScatter: `request` plus Scratch for `areas` areas of
/// one block of an iteration each (receive slots, a partial sum), the block capped at the
/// CCL buffer over the rank count and at the operation's count. Nothing extra on one rank.
pub(crate) fn with_put_scratch(
    ctx: &PlanCtx<'_>,
    request: ResourceRequest,
    areas: usize,
) -> ResourceRequest {
    if ctx.ranks == 1 {
        return request;
    }
    let es = ctx.op.dtype.size();
    let per_rank = (ctx.ccl_bytes / ctx.ranks / es).max(1);
    ResourceRequest {
        scratch_bytes: areas * per_rank.min(ctx.op.count) * es,
        max_count_per_loop: Some(per_rank),
        ..request
    }
}
