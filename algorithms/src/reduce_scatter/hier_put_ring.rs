//! ReduceScatter hierarchical with a put level 1: load/store inside each server, puts
//! across servers, so it runs where only the inter-server links are put-only (`2x8`, or a
//! job of processes on several hosts) and, zero-copy, reduces straight from the users'
//! inputs inside each host.
//!
//! The decomposition of [`hier-ring`](super::hier_levels) (index `c` owned by local rank
//! `c % m` on a server of `m` ranks; see [`Servers`]):
//! 1. level 0, as in `hier-ring`: a ready round with the server, then for each owned
//!    index the blocks of that local index on every server reduced from all the server's
//!    inputs (loads inside the server), into this rank's partial sums in Scratch (at the
//!    block's rank); staged, a DataSignal round follows ("I am done reading your input");
//! 2. level 1, for each owned index in increasing order: a put ring reduce-scatter
//!    ([`put_ring_reduce_scatter`]) of those partial sums over the owners of `c` on every
//!    server (a narrower server's member brings an empty block): each step puts a partial
//!    sum into the right neighbour's receive slot (Scratch, after the partials) and
//!    reduces the left neighbour's into its own partial, locally; so nothing is read
//!    across servers and no user buffer is written there. The member of local index `c`
//!    ends with its own block fully reduced and copies it to its output.
//!
//! Scratch holds one block per rank (the partials) and the slot, which caps an iteration
//! at the CCL buffer over the rank count. Level 0 is a mesh and level 1 pairs fixed
//! owners, so it cannot route around a broken link: like the other `hier-*`, it declares
//! `full_mesh`.

use super::hier_levels::{group_partials, level0_partials, own_block_out};
use crate::templates::{
    hier_request, put_ring_reduce_scatter, with_group_ring, Level1, Servers, HIER_PUT_CONSTRAINTS,
};
use oxccl_framework::platform::{Buf, Rank};
use oxccl_framework::{
    BufRange, Error, Executor, KernelArgs, KernelCtx, OpKind, PlanCtx, ResourceRequest,
};

/// The hierarchical ReduceScatter executor with a put ring across servers.
pub struct HierPutRingReduceScatter;

oxccl_framework::register_executor! {
    name: "hier-put-ring",
    op: OpKind::ReduceScatter,
    description: "level-0 mesh reduce in each server (load/store), then level-1 put ring reduce-scatter across servers; runs where only inter-server links are put-only",
    constraints: HIER_PUT_CONSTRAINTS,
    preference: 5,
    make: || Box::new(HierPutRingReduceScatter),
}

impl Executor for HierPutRingReduceScatter {
    fn resources(&self, ctx: &PlanCtx<'_>) -> Result<ResourceRequest, Error> {
        let servers = Servers::of(ctx.topology);
        let request = hier_request(&servers, ctx.rank, Level1::Ring);
        if servers.count() < 2 {
            return Ok(request);
        }
        // One partial sum per rank, and the receive slot.
        Ok(super::with_put_scratch(ctx, request, ctx.ranks + 1))
    }

    fn kernel_run(&self, ctx: &mut KernelCtx<'_>, args: &KernelArgs) -> Result<(), Error> {
        let servers = Servers::of(ctx.topology);
        let channel = args.iteration % 2;
        let Some(partials) = level0_partials(ctx, args, &servers, channel)? else {
            return Ok(());
        };
        let len = args.op.count * args.op.dtype.size();
        // The receive slot, after the partials.
        let slot = BufRange {
            buf: Buf::Scratch,
            offset: partials.len,
            len,
        };
        for c in servers.owned_chunks(ctx.rank) {
            let group = servers.group(c);
            let chunks = group_partials(&servers, c, len);
            level1_put_reduce_scatter(ctx, args, &group, &chunks, (partials, slot), channel)?;
        }
        own_block_out(ctx, args, partials);
        Ok(())
    }
}

/// Level 1: a put ring reduce-scatter over `group` of `chunks` (`(byte offset, byte
/// length)` in `partials`, one per member), in place in the partials, each step received
/// in `slot`; on the main stream and link `channel`.
fn level1_put_reduce_scatter(
    ctx: &mut KernelCtx<'_>,
    args: &KernelArgs,
    group: &[Rank],
    chunks: &[(usize, usize)],
    (partials, slot): (BufRange, BufRange),
    channel: usize,
) -> Result<(), Error> {
    if group.len() < 2 {
        return Ok(());
    }
    let partial = |r: Rank, i: usize| partials.at(r, chunks[i].0, chunks[i].1);
    with_group_ring(group, channel, slot, &args.op, |ring| {
        put_ring_reduce_scatter(ctx, ring, &partial, &partial)
    })
}
