//! ReduceScatter hierarchical (HCCL's level-0 mesh + level-1 ring): reduce inside each
//! server, then across servers.
//!
//! With `L` the widest server's rank count, local rank `c % m` of a server of `m` ranks
//! owns index `c` of `0..L` (see [`Servers`]); the level-1 group of `c` is its owner on
//! every server, and its members reduce the blocks of the ranks with local index `c`.
//! 1. Level 0: after a ready round with its server, each rank reduces, for each index `c`
//!    it owns, the input blocks of the ranks with local index `c` on every server from all
//!    its server's inputs, into scratch (one `m`-way Reduce per block).
//! 2. Level 1: for each index `c` it owns, in increasing order, the [`Level1`]
//!    reduce-scatter of those partial sums over the group of `c`, in scratch; a narrower
//!    server's member contributes an empty chunk. The member of local index `c` ends with
//!    its own block fully reduced and copies it to the output.
//!
//! On one server the level-0 Reduce writes the output directly and there is no level 1.
//! Cost with `m` ranks per server and `S` servers, level 1 a ring:
//! `α₀ + (m−1)/m·nβ₀ + (S−1)α₁ + (S−1)/(S·m)·nβ₁ + (p−1)/p·nγ` (`n` the input bytes).
//! Partial sums need one block per rank of scratch, which caps an iteration at the CCL
//! buffer over the rank count. Needs a full mesh inside each server and links to the
//! owners of the same indices on the other servers.
//!
//! Staged, the next iteration overwrites CclIn at once, so a DataSignal round ("I am done
//! reading your input") follows the level-0 Reduces; the level-1 rings end each step with
//! a full handshake. Server rounds alternate link channels between iterations.

use crate::templates::{server_round, Level1, RingParams, Round, Servers};
use oxccl_framework::platform::Buf;
use oxccl_framework::{
    BufRange, Constraints, Error, Executor, KernelArgs, KernelCtx, Mode, OpKind, Peers, PlanCtx,
    ResourceRequest,
};

/// The hierarchical ReduceScatter executor, over a level-1 algorithm.
pub struct HierReduceScatter(pub Level1);

oxccl_framework::register_executor! {
    name: "hier-ring",
    op: OpKind::ReduceScatter,
    description: "level-0 mesh reduce in each server, then level-1 ring reduce-scatter across servers",
    constraints: Constraints {
        full_mesh: true,
        min_servers: 2,
        ..Constraints::ANY
    },
    preference: 26,
    make: || Box::new(HierReduceScatter(Level1::Ring)),
}

oxccl_framework::register_executor! {
    name: "hier-rhd",
    op: OpKind::ReduceScatter,
    description: "level-0 mesh reduce in each server, then level-1 recursive-halving reduce-scatter across servers",
    constraints: Constraints { full_mesh: true, ..Constraints::ANY },
    preference: 5,
    make: || Box::new(HierReduceScatter(Level1::Rhd)),
}

oxccl_framework::register_executor! {
    name: "hier-nhr",
    op: OpKind::ReduceScatter,
    description: "level-0 mesh reduce in each server, then level-1 NHR reduce-scatter across servers",
    constraints: Constraints { full_mesh: true, ..Constraints::ANY },
    preference: 5,
    make: || Box::new(HierReduceScatter(Level1::Nhr)),
}

impl Executor for HierReduceScatter {
    fn resources(&self, ctx: &PlanCtx<'_>) -> Result<ResourceRequest, Error> {
        let servers = Servers::of(ctx.topology);
        let peers = ResourceRequest::with_peers(Peers::List(servers.peers(ctx.rank, self.0)));
        if servers.count() == 1 {
            return Ok(peers);
        }
        let es = ctx.op.dtype.size();
        let per_rank = (ctx.ccl_bytes / ctx.ranks / es).max(1);
        Ok(ResourceRequest {
            scratch_bytes: ctx.ranks * per_rank * es,
            max_count_per_loop: Some(per_rank),
            ..peers
        })
    }

    fn kernel_run(&self, ctx: &mut KernelCtx<'_>, args: &KernelArgs) -> Result<(), Error> {
        let servers = Servers::of(ctx.topology);
        let channel = args.iteration % 2;
        let Some(scratch) = level0_partials(ctx, args, &servers, channel)? else {
            return Ok(());
        };
        let len = args.op.count * args.op.dtype.size();
        let me = ctx.rank;
        for c in servers.owned_chunks(me) {
            let group = servers.group(c);
            let chunks = group_partials(&servers, c, len);
            let positions: Vec<usize> = (0..group.len()).collect();
            let p = RingParams {
                order: &group,
                stream: 0,
                channel,
                chunks: &chunks,
                chunk_at: &positions,
                input: scratch,
                output: scratch,
                dtype: args.op.dtype,
                op: args.op.op,
            };
            self.0.reduce_scatter(ctx, &p)?;
        }
        own_block_out(ctx, args, scratch);
        Ok(())
    }
}

/// Level 0 as far as the partial sums: `Some(partials)` (Scratch, one block per rank at
/// the block's rank) for level 1 to reduce across servers, or `None` where nothing is
/// left to do (one rank: its input copied; one server: the output written).
pub(crate) fn level0_partials(
    ctx: &mut KernelCtx<'_>,
    args: &KernelArgs,
    servers: &Servers,
    channel: usize,
) -> Result<Option<BufRange>, Error> {
    let n = ctx.ranks;
    if n == 1 {
        args.copy_input_to_output(ctx);
        return Ok(None);
    }
    let len = args.op.count * args.op.dtype.size();
    let partials = BufRange {
        buf: Buf::Scratch,
        offset: 0,
        len: n * len,
    };
    level0_reduce(ctx, args, servers, partials, channel)?;
    Ok((servers.count() > 1).then_some(partials))
}

/// The level-1 chunks of index `c` (`(byte offset, byte length)` in the partials, one per
/// server): the block of the rank with local index `c` on each server, empty where a
/// server is narrower.
pub(crate) fn group_partials(servers: &Servers, c: usize, len: usize) -> Vec<(usize, usize)> {
    (0..servers.count())
        .map(|s| match c < servers.size(s) {
            true => (servers.rank(s, c) * len, len),
            false => (0, 0),
        })
        .collect()
}

/// The end: this rank's block, fully reduced in its partials, copied to its output.
pub(crate) fn own_block_out(ctx: &mut KernelCtx<'_>, args: &KernelArgs, partials: BufRange) {
    let (me, len) = (ctx.rank, args.op.count * args.op.dtype.size());
    let (own, out) = (partials.at(me, me * len, len), args.output.at(me, 0, len));
    ctx.main().copy(own, out);
}

/// Level 0: a ready round with the server, then for each owned index the blocks of that
/// local index on every server reduced from all the server's inputs: into scratch (at
/// the block's rank), or straight into the output on a single server. Staged, a
/// DataSignal round follows ("I am done reading your input").
fn level0_reduce(
    ctx: &mut KernelCtx<'_>,
    args: &KernelArgs,
    servers: &Servers,
    scratch: BufRange,
    channel: usize,
) -> Result<(), Error> {
    let me = ctx.rank;
    let blocks = args.blocks(ctx.ranks);
    let server = servers.server_ranks(me);
    if server.len() > 1 {
        server_round(ctx, servers, channel, Round::Ack)?;
    }
    for c in servers.owned_chunks(me) {
        for s in (0..servers.count()).filter(|&s| c < servers.size(s)) {
            let b = servers.rank(s, c);
            let (off, len) = blocks[b];
            let dst = match servers.count() {
                1 => args.output.at(me, 0, len),
                _ => scratch.at(me, b * len, len),
            };
            let srcs = server.clone().map(|r| args.input.at(r, off, len)).collect();
            ctx.main().reduce(srcs, dst, args.op.dtype, args.op.op);
        }
    }
    if server.len() > 1 && args.mode == Mode::Staged {
        server_round(ctx, servers, channel, Round::DataSignal)?;
    }
    Ok(())
}
