//! AllReduce hierarchical (HCCL's level-0 mesh + level-1 ring): reduce inside each server,
//! then across servers, then share inside each server again.
//!
//! The data is cut into `L` chunks, `L` the widest server's rank count; on a server of `m`
//! ranks chunk `c` belongs to local rank `c % m` (see [`Servers`]).
//! 1. Level 0, reduce-scatter: after a ready round with its server, each rank reduces the
//!    chunks it owns from every server peer's input, in one `m`-way Reduce per chunk.
//! 2. Level 1, AllReduce across servers: for each chunk `c` it owns, in increasing order,
//!    a rank runs the [`Level1`] reduce-scatter then all-gather of chunk `c` with the
//!    owners of `c` on the other servers, on its output.
//! 3. Level 0, all-gather: after a "chunks final" round with its server, each rank pulls
//!    every chunk it does not own from that chunk's owner, one slave stream per server
//!    peer.
//!
//! Only one rank per server and chunk crosses servers, so the slow inter-server links
//! carry `2(S−1)/S · n/L` per rank instead of the flat ring's `2(p−1)/p · n`.
//! Cost with `m` ranks per server and `S` servers, level 1 a ring:
//! `2α₀ + 2(m−1)/m·nβ₀ + 2(S−1)α₁ + 2(S−1)/(S·m)·nβ₁ + (p−1)/p·nγ`.
//! Needs a full mesh inside each server and a link from every rank to the ranks of the
//! same chunk on the other servers (one link per server and owned chunk).
//!
//! Staged, the next iteration overwrites the CCL buffers at once, so an Ack round ("I am
//! done reading your output") ends every iteration; the level-1 rings end each step with a
//! full handshake already. The server rounds of consecutive iterations alternate link
//! channels, since an iteration's last round and the next one's first may both be Acks.

use crate::templates::{
    even_chunks, server_all_gather, server_round, server_slaves, Level1, RingParams, Round, Servers,
};
use oxccl_framework::platform::Rank;
use oxccl_framework::{
    Constraints, Error, Executor, KernelArgs, KernelCtx, Mode, OpKind, Peers, PlanCtx,
    ResourceRequest,
};

/// The hierarchical AllReduce executor, over a level-1 algorithm.
pub struct HierAllReduce(pub Level1);

oxccl_framework::register_executor! {
    name: "hier-ring",
    op: OpKind::AllReduce,
    description: "level-0 mesh reduce-scatter in each server, level-1 ring AllReduce across servers, level-0 mesh all-gather",
    constraints: Constraints {
        full_mesh: true,
        min_servers: 2,
        ..Constraints::ANY
    },
    preference: 26,
    make: || Box::new(HierAllReduce(Level1::Ring)),
}

oxccl_framework::register_executor! {
    name: "hier-rhd",
    op: OpKind::AllReduce,
    description: "level-0 mesh reduce-scatter in each server, level-1 recursive halving-doubling AllReduce across servers, level-0 mesh all-gather",
    constraints: Constraints { full_mesh: true, ..Constraints::ANY },
    preference: 5,
    make: || Box::new(HierAllReduce(Level1::Rhd)),
}

oxccl_framework::register_executor! {
    name: "hier-nhr",
    op: OpKind::AllReduce,
    description: "level-0 mesh reduce-scatter in each server, level-1 NHR AllReduce across servers, level-0 mesh all-gather",
    constraints: Constraints { full_mesh: true, ..Constraints::ANY },
    preference: 5,
    make: || Box::new(HierAllReduce(Level1::Nhr)),
}

impl Executor for HierAllReduce {
    fn resources(&self, ctx: &PlanCtx<'_>) -> Result<ResourceRequest, Error> {
        let servers = Servers::of(ctx.topology);
        Ok(ResourceRequest {
            slave_streams: server_slaves(&servers, ctx.rank),
            ..ResourceRequest::with_peers(Peers::List(servers.peers(ctx.rank, self.0)))
        })
    }

    fn kernel_run(&self, ctx: &mut KernelCtx<'_>, args: &KernelArgs) -> Result<(), Error> {
        hier_all_reduce(ctx, args, |ctx, group, chunk, channel| {
            level1_all_reduce(ctx, args, self.0, group, chunk, (0, channel))
        })
    }
}

/// The three levels of a hierarchical AllReduce (see the module docs), with `level1`
/// running one owned chunk (`(byte offset, byte length)` in the output) across servers
/// with its owners `group`, on link `channel`: the part `hier-ring`, `hier-rhd`,
/// `hier-nhr` and `hier-put-ring` differ in.
pub(crate) fn hier_all_reduce(
    ctx: &mut KernelCtx<'_>,
    args: &KernelArgs,
    mut level1: impl FnMut(&mut KernelCtx<'_>, &[Rank], (usize, usize), usize) -> Result<(), Error>,
) -> Result<(), Error> {
    if ctx.ranks == 1 {
        args.copy_input_to_output(ctx);
        return Ok(());
    }
    let servers = Servers::of(ctx.topology);
    let chunks = even_chunks(args.op.count, servers.widest(), args.op.dtype.size());
    let channel = args.iteration % 2;
    level0_reduce_scatter(ctx, args, &servers, &chunks, channel)?;
    for c in servers.owned_chunks(ctx.rank) {
        level1(ctx, &servers.group(c), chunks[c], channel)?;
    }
    server_all_gather(ctx, &servers, args.output, &chunks, (channel, 1))?;
    if args.mode == Mode::Staged {
        server_round(ctx, &servers, channel, Round::Ack)?;
    }
    Ok(())
}

/// Level 0: a ready round with the server, then each owned chunk reduced from every
/// server rank's input into the own output.
pub(crate) fn level0_reduce_scatter(
    ctx: &mut KernelCtx<'_>,
    args: &KernelArgs,
    servers: &Servers,
    chunks: &[(usize, usize)],
    channel: usize,
) -> Result<(), Error> {
    let me = ctx.rank;
    let server = servers.server_ranks(me);
    if server.len() > 1 {
        server_round(ctx, servers, channel, Round::Ack)?;
    }
    for c in servers.owned_chunks(me) {
        let (off, len) = chunks[c];
        let dst = args.output.at(me, off, len);
        if server.len() == 1 {
            if !args.aliased {
                ctx.main().copy(args.input.at(me, off, len), dst);
            }
            continue;
        }
        let srcs = server.clone().map(|r| args.input.at(r, off, len)).collect();
        ctx.main().reduce(srcs, dst, args.op.dtype, args.op.op);
    }
    Ok(())
}

/// The level-1 ring's chunks of one level-0 chunk (`(byte offset, byte length)` in the
/// output): its elements split evenly over `parts` ranks, as output byte ranges.
pub(crate) fn level1_chunks(
    (off, len): (usize, usize),
    parts: usize,
    es: usize,
) -> Vec<(usize, usize)> {
    even_chunks(len / es, parts, es)
        .into_iter()
        .map(|(o, l)| (off + o, l))
        .collect()
}

/// Level 1: AllReduce of one chunk (`(byte offset, byte length)` in the output) over
/// `group`, in place on the output, on `(stream, link channel)`.
pub(crate) fn level1_all_reduce(
    ctx: &mut KernelCtx<'_>,
    args: &KernelArgs,
    level1: Level1,
    group: &[usize],
    (off, len): (usize, usize),
    (stream, channel): (usize, usize),
) -> Result<(), Error> {
    if group.len() < 2 {
        return Ok(());
    }
    let sub = level1_chunks((off, len), group.len(), args.op.dtype.size());
    let positions: Vec<usize> = (0..group.len()).collect();
    let p = RingParams {
        order: group,
        stream,
        channel,
        chunks: &sub,
        chunk_at: &positions,
        input: args.output,
        output: args.output,
        dtype: args.op.dtype,
        op: args.op.op,
    };
    level1.all_reduce(ctx, &p)
}
