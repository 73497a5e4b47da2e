//! AllGather hierarchical (HCCL's level-1 ring + level-0 mesh): gather across servers
//! first, then share inside each server.
//!
//! With `L` the widest server's rank count, local rank `c % m` of a server of `m` ranks
//! owns index `c` of `0..L` (see [`Servers`]); the level-1 group of `c` is its owner on
//! every server.
//! 1. Level 1: for each index `c` it owns, in increasing order, a rank runs the
//!    [`Level1`] all-gather with the owners of `c` on the other servers, over the blocks
//!    of the ranks with local index `c` (a server narrower than `c + 1` contributes an
//!    empty block). Afterwards it holds the blocks of local index `c` of every server.
//! 2. Level 0: after a "blocks ready" round with its server, each rank pulls from each
//!    server peer the blocks that peer gathered at level 1, one slave stream per peer.
//!
//! Each block crosses the inter-server links once per server, carried by one rank per
//! server. Cost with `m` ranks per server and `S` servers, level 1 a ring:
//! `(S−1)α₁ + (S−1)/(S·m)·nβ₁ + α₀ + (m−1)/m·nβ₀` (`n` the gathered bytes).
//! Needs a full mesh inside each server and links to the owners of the same indices on the
//! other servers.
//!
//! Staged, a rank overwrites its CCL output at the start of the next iteration, so an Ack
//! round ("I am done reading your output") ends every iteration; the level-1 rings end
//! each step with a full handshake already.

use super::place_own_block;
use crate::templates::{
    pull_from_server, server_round, server_slaves, Level1, RingParams, Round, Servers,
};
use oxccl_framework::platform::Rank;
use oxccl_framework::{
    Constraints, Error, Executor, KernelArgs, KernelCtx, Mode, OpKind, Peers, PlanCtx,
    ResourceRequest,
};

/// The hierarchical AllGather executor, over a level-1 algorithm.
pub struct HierAllGather(pub Level1);

oxccl_framework::register_executor! {
    name: "hier-ring",
    op: OpKind::AllGather,
    description: "level-1 ring all-gather across servers, then level-0 mesh all-gather in each server",
    constraints: Constraints {
        full_mesh: true,
        min_servers: 2,
        ..Constraints::ANY
    },
    preference: 26,
    make: || Box::new(HierAllGather(Level1::Ring)),
}

oxccl_framework::register_executor! {
    name: "hier-rhd",
    op: OpKind::AllGather,
    description: "level-1 recursive-doubling all-gather across servers, then level-0 mesh all-gather in each server",
    constraints: Constraints { full_mesh: true, ..Constraints::ANY },
    preference: 5,
    make: || Box::new(HierAllGather(Level1::Rhd)),
}

oxccl_framework::register_executor! {
    name: "hier-nhr",
    op: OpKind::AllGather,
    description: "level-1 NHR all-gather across servers, then level-0 mesh all-gather in each server",
    constraints: Constraints { full_mesh: true, ..Constraints::ANY },
    preference: 5,
    make: || Box::new(HierAllGather(Level1::Nhr)),
}

impl Executor for HierAllGather {
    fn resources(&self, ctx: &PlanCtx<'_>) -> Result<ResourceRequest, Error> {
        let servers = Servers::of(ctx.topology);
        Ok(ResourceRequest {
            slave_streams: server_slaves(&servers, ctx.rank),
            ..ResourceRequest::with_peers(Peers::List(servers.peers(ctx.rank, self.0)))
        })
    }

    fn kernel_run(&self, ctx: &mut KernelCtx<'_>, args: &KernelArgs) -> Result<(), Error> {
        hier_all_gather(ctx, args, |ctx, group, chunks, channel| {
            let positions: Vec<usize> = (0..group.len()).collect();
            let p = RingParams {
                order: group,
                stream: 0,
                channel,
                chunks,
                chunk_at: &positions,
                input: args.output,
                output: args.output,
                dtype: args.op.dtype,
                op: args.op.op,
            };
            self.0.all_gather(ctx, &p)
        })
    }
}

/// A hierarchical AllGather: the own block placed; then for each index this rank owns,
/// in increasing order, `level1(ctx, group, chunks, channel)` over the index's group
/// (when it spans two servers or more) and the blocks of that index on every server
/// ([`group_blocks`], `(byte offset, byte length)` in the output); then level 0.
pub(crate) fn hier_all_gather(
    ctx: &mut KernelCtx<'_>,
    args: &KernelArgs,
    mut level1: impl FnMut(&mut KernelCtx<'_>, &[Rank], &[(usize, usize)], usize) -> Result<(), Error>,
) -> Result<(), Error> {
    let blocks = args.blocks(ctx.ranks);
    place_own_block(ctx, args, &blocks);
    if ctx.ranks == 1 {
        return Ok(());
    }
    let servers = Servers::of(ctx.topology);
    let channel = args.iteration % 2;
    for c in servers.owned_chunks(ctx.rank) {
        let group = servers.group(c);
        if group.len() < 2 {
            continue;
        }
        level1(ctx, &group, &group_blocks(&servers, &blocks, c), channel)?;
    }
    level0_all_gather(ctx, args, &servers, &blocks, channel)
}

/// The block of local index `c` on every server, in server order; empty where the server
/// has no such rank.
fn group_blocks(servers: &Servers, blocks: &[(usize, usize)], c: usize) -> Vec<(usize, usize)> {
    (0..servers.count())
        .map(|s| match c < servers.size(s) {
            true => blocks[servers.rank(s, c)],
            false => (0, 0),
        })
        .collect()
}

/// Level 0: a "blocks ready" round with the server, then from each server peer (one slave
/// stream each) the blocks of every index it owns; staged, an Ack round ends the
/// iteration.
fn level0_all_gather(
    ctx: &mut KernelCtx<'_>,
    args: &KernelArgs,
    servers: &Servers,
    blocks: &[(usize, usize)],
    channel: usize,
) -> Result<(), Error> {
    if servers.server_ranks(ctx.rank).len() == 1 {
        return Ok(());
    }
    server_round(ctx, servers, channel, Round::DataSignal)?;
    let gathered_by = |q| {
        let mut pieces = Vec::new();
        for c in servers.owned_chunks(q) {
            for s in (0..servers.count()).filter(|&s| c < servers.size(s)) {
                pieces.push(blocks[servers.rank(s, c)]);
            }
        }
        pieces
    };
    pull_from_server(ctx, servers, args.output, 1, gathered_by);
    if args.mode == Mode::Staged {
        server_round(ctx, servers, channel, Round::Ack)?;
    }
    Ok(())
}
