//! AllGather hierarchical with a put level 1: puts across servers, load/store inside each
//! server, so it runs where only the inter-server links are put-only (`2x8`, or a job of
//! processes on several hosts) and, zero-copy, gathers straight into the user's output
//! inside each host.
//!
//! The decomposition of [`hier-ring`](super::hier_levels) (index `c` owned by local rank
//! `c % m` on a server of `m` ranks; see [`Servers`]):
//! 1. level 1, for each owned index in increasing order: a put ring all-gather
//!    ([`put_ring_all_gather`]) of the blocks of local index `c` on every server, with
//!    their owners on the other servers (a narrower server's member brings an empty
//!    block). Each step puts the block a rank holds into its right neighbour: staged,
//!    into the neighbour's CclOut block itself; zero-copy, into its Scratch slot, which
//!    the neighbour copies into its output, so nothing is read across servers and no user
//!    buffer is written there;
//! 2. level 0, as in `hier-ring`: a "blocks ready" round with the server, then each rank
//!    pulls from each server peer the blocks that peer gathered at level 1 (loads inside
//!    the server); staged, an Ack round ends the iteration.
//!
//! Each block crosses the servers once per server, carried by one rank per server. Level
//! 0 is a mesh and level 1 pairs fixed owners, so it cannot route around a broken link:
//! like the other `hier-*`, it declares `full_mesh`.

use super::hier_levels::hier_all_gather;
use crate::templates::{
    hier_request, put_ring_all_gather, with_group_ring, Level1, Servers, HIER_PUT_CONSTRAINTS,
};
use oxccl_framework::platform::{Buf, Rank};
use oxccl_framework::{
    BufRange, Error, Executor, KernelArgs, KernelCtx, OpKind, PlanCtx, ResourceRequest,
};

/// The hierarchical AllGather executor with a put ring across servers.
pub struct HierPutRingAllGather;

oxccl_framework::register_executor! {
    name: "hier-put-ring",
    op: OpKind::AllGather,
    description: "level-1 put ring all-gather across servers, then level-0 mesh all-gather in each server (load/store); runs where only inter-server links are put-only",
    constraints: HIER_PUT_CONSTRAINTS,
    preference: 5,
    make: || Box::new(HierPutRingAllGather),
}

impl Executor for HierPutRingAllGather {
    fn resources(&self, ctx: &PlanCtx<'_>) -> Result<ResourceRequest, Error> {
        let servers = Servers::of(ctx.topology);
        let request = hier_request(&servers, ctx.rank, Level1::Ring);
        if servers.count() < 2 {
            return Ok(request);
        }
        // Zero-copy, one receive slot of one block (staged: none, puts land in CclOut).
        Ok(super::with_slot_scratch(ctx, request, 1))
    }

    fn kernel_run(&self, ctx: &mut KernelCtx<'_>, args: &KernelArgs) -> Result<(), Error> {
        hier_all_gather(ctx, args, |ctx, group, chunks, channel| {
            level1_put_all_gather(ctx, args, group, chunks, channel)
        })
    }
}

/// Level 1: a put ring all-gather over `group` of `chunks` (`(byte offset, byte length)`
/// in the output, one per member), on the main stream and link `channel`.
fn level1_put_all_gather(
    ctx: &mut KernelCtx<'_>,
    args: &KernelArgs,
    group: &[Rank],
    chunks: &[(usize, usize)],
    channel: usize,
) -> Result<(), Error> {
    let slot = BufRange {
        buf: Buf::Scratch,
        offset: 0,
        len: chunks.iter().map(|&(_, len)| len).max().unwrap_or(0),
    };
    let held = |r: Rank, i: usize| args.output.at(r, chunks[i].0, chunks[i].1);
    with_group_ring(group, channel, slot, &args.op, |ring| {
        put_ring_all_gather(ctx, ring, &held, !args.output.buf.is_user())
    })
}
