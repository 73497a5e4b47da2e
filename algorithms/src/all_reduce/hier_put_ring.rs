//! AllReduce hierarchical with a put level 1: load/store inside each server, puts across
//! servers, so it runs where only the inter-server links are put-only (`2x8`: RDMA
//! between servers, shared memory inside).
//!
//! The decomposition of [`hier_levels`](super::hier_levels) (chunk `c` owned by local rank
//! `c % m` on a server of `m` ranks; see [`Servers`]):
//! 1. level 0, reduce-scatter: a ready round with the server, then each rank reduces the
//!    chunks it owns from its server peers' inputs (loads inside the server);
//! 2. level 1, for each owned chunk in increasing order: a put ring AllReduce of the chunk
//!    with its owners on the other servers ([`put_ring`](crate::templates::put_ring)):
//!    each step puts into the next server's owner (its Scratch slot, or its CclOut chunk
//!    when staged) and reduces or copies locally, so nothing is read across servers and
//!    no user buffer is written there;
//! 3. level 0, all-gather: a "chunks final" round with the server, then each rank pulls
//!    the chunks it does not own from their owners in the server.
//!
//! Staged, an Ack round with the server ends every iteration (the next one overwrites the
//! CCL buffers at once), and the server rounds of consecutive iterations alternate link
//! channels, as in `hier-ring`. The level-1 slot is one chunk of an iteration, capped at
//! one CCL buffer. Level 0 is a mesh and level 1 pairs fixed owners, so it cannot route
//! around a broken link: like the other `hier-*`, it declares `full_mesh`.

use super::hier_levels::{hier_all_reduce, level1_chunks};
use crate::templates::{
    hier_request, put_ring_all_gather, put_ring_reduce_scatter, with_group_ring, Level1, Servers,
    HIER_PUT_CONSTRAINTS,
};
use oxccl_framework::platform::{Buf, Rank};
use oxccl_framework::{
    BufRange, Error, Executor, KernelArgs, KernelCtx, OpKind, PlanCtx, ResourceRequest,
};

/// The hierarchical AllReduce executor with a put ring across servers.
pub struct HierPutRingAllReduce;

oxccl_framework::register_executor! {
    name: "hier-put-ring",
    op: OpKind::AllReduce,
    description: "level-0 mesh reduce-scatter in each server (load/store), level-1 put ring AllReduce across servers, level-0 mesh all-gather; runs where only inter-server links are put-only",
    constraints: HIER_PUT_CONSTRAINTS,
    preference: 5,
    make: || Box::new(HierPutRingAllReduce),
}

impl Executor for HierPutRingAllReduce {
    fn resources(&self, ctx: &PlanCtx<'_>) -> Result<ResourceRequest, Error> {
        let servers = Servers::of(ctx.topology);
        let request = hier_request(&servers, ctx.rank, Level1::Ring);
        if servers.count() < 2 {
            return Ok(request);
        }
        let es = ctx.op.dtype.size();
        let cap = (ctx.ccl_bytes / es).max(1);
        Ok(ResourceRequest {
            scratch_bytes: cap.min(ctx.op.count).div_ceil(servers.widest()) * es,
            max_count_per_loop: Some(cap),
            ..request
        })
    }

    fn kernel_run(&self, ctx: &mut KernelCtx<'_>, args: &KernelArgs) -> Result<(), Error> {
        hier_all_reduce(ctx, args, |ctx, group, chunk, channel| {
            level1_put_all_reduce(ctx, args, group, chunk, channel)
        })
    }
}

/// Level 1: a put ring AllReduce of one chunk (`(byte offset, byte length)` in the output)
/// over `group`, in place on the output, on the main stream and link `channel`.
fn level1_put_all_reduce(
    ctx: &mut KernelCtx<'_>,
    args: &KernelArgs,
    group: &[Rank],
    (off, len): (usize, usize),
    channel: usize,
) -> Result<(), Error> {
    if group.len() < 2 {
        return Ok(());
    }
    let sub = level1_chunks((off, len), group.len(), args.op.dtype.size());
    let slot = BufRange {
        buf: Buf::Scratch,
        offset: 0,
        len: sub[0].1,
    };
    let output = |r: Rank, c: usize| args.output.at(r, sub[c].0, sub[c].1);
    with_group_ring(group, channel, slot, &args.op, |ring| {
        put_ring_reduce_scatter(ctx, ring, &output, &output)?;
        put_ring_all_gather(ctx, ring, &output, !args.output.buf.is_user())
    })
}
