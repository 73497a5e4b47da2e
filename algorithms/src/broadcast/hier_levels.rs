//! Broadcast hierarchical (HCCL's scatter + all-gather over the levels): the root's
//! server scatters the data, each piece crosses the servers on its own plane of ranks, and
//! every server all-gathers the pieces.
//!
//! The data is cut into `L` chunks, `L` the widest server's rank count; on a server of `m`
//! ranks chunk `c` belongs to local rank `c % m`, and the level-1 group of `c` is its owner
//! on every server (see [`Servers`]).
//! 1. Level 0, scatter: in the root's server, every rank pulls the chunks it owns from the
//!    root's input.
//! 2. Level 1: for each chunk `c` it owns, in increasing order, a rank joins the broadcast
//!    of `c` from its owner on the root's server (the source) to the group of `c`: each
//!    other member pulls its `1/S` of the chunk from the source, then the [`Level1`]
//!    all-gather over the group completes it.
//! 3. Level 0, all-gather: every rank pulls the chunks it does not own from their owners
//!    in its server, one slave stream per server peer.
//!
//! Every rank's NIC carries about `2(S−1)/S · n/m` instead of the whole vector.
//! Cost with `m` ranks per server and `S` servers, level 1 a ring:
//! `2α₀ + 2(m−1)/m·nβ₀ + Sα₁ + 2(S−1)/(S·m)·nβ₁`. Needs a full mesh inside each server and
//! links between the owners of a chunk.
//!
//! Each scatter pull is announced by a DataSignal from the rank read and answered by an
//! Ack ("done reading"); the level-1 templates end every step with a full handshake.
//! Staged, an Ack round with the server ("I am done reading your output") ends every
//! iteration, and consecutive iterations alternate link channels.

use super::{root_keeps_its_data, root_of};
use crate::templates::{
    even_chunks, server_all_gather, server_round, server_slaves, Level1, RingParams, Round, Servers,
};
use oxccl_framework::platform::Rank;
use oxccl_framework::{
    BufRange, Constraints, Error, Executor, KernelArgs, KernelCtx, Mode, OpKind, Peers, PlanCtx,
    ResourceRequest,
};

/// The hierarchical Broadcast executor, over a level-1 algorithm.
pub struct HierBroadcast(pub Level1);

/// The name the hierarchical Broadcasts of this file give in their errors.
const NAME: &str = "hier broadcast";

oxccl_framework::register_executor! {
    name: "hier-ring",
    op: OpKind::Broadcast,
    description: "scatter in the root's server, level-1 scatter + ring all-gather of each chunk across servers, level-0 all-gather",
    constraints: Constraints {
        full_mesh: true,
        min_servers: 2,
        ..Constraints::ANY
    },
    preference: 26,
    make: || Box::new(HierBroadcast(Level1::Ring)),
}

oxccl_framework::register_executor! {
    name: "hier-rhd",
    op: OpKind::Broadcast,
    description: "scatter in the root's server, level-1 scatter + recursive-doubling all-gather of each chunk across servers, level-0 all-gather",
    constraints: Constraints { full_mesh: true, ..Constraints::ANY },
    preference: 5,
    make: || Box::new(HierBroadcast(Level1::Rhd)),
}

oxccl_framework::register_executor! {
    name: "hier-nhr",
    op: OpKind::Broadcast,
    description: "scatter in the root's server, level-1 scatter + NHR all-gather of each chunk across servers, level-0 all-gather",
    constraints: Constraints { full_mesh: true, ..Constraints::ANY },
    preference: 5,
    make: || Box::new(HierBroadcast(Level1::Nhr)),
}

impl Executor for HierBroadcast {
    fn resources(&self, ctx: &PlanCtx<'_>) -> Result<ResourceRequest, Error> {
        let root = root_of(ctx.op, NAME)?;
        let servers = Servers::of(ctx.topology);
        Ok(hier_broadcast_request(&servers, root, ctx.rank, |group| {
            self.0.peers(group, ctx.rank)
        }))
    }

    fn kernel_run(&self, ctx: &mut KernelCtx<'_>, args: &KernelArgs) -> Result<(), Error> {
        hier_broadcast(ctx, args, NAME, |ctx, group, source, sub, channel| {
            let me = ctx.rank;
            let pos = group.iter().position(|&r| r == me).unwrap_or(0);
            let others: Vec<Rank> = group.iter().copied().filter(|&r| r != source).collect();
            let out = args.output;
            pull_from_source(ctx, out, out, source, &others, &[sub[pos]], channel)?;
            let positions: Vec<usize> = (0..group.len()).collect();
            let p = RingParams {
                order: group,
                stream: 0,
                channel,
                chunks: sub,
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

/// The request of a hierarchical Broadcast's rank `me`: its server, and for each chunk
/// it owns the chunk's source (the source itself: every other member of the group) and
/// the peers `level1(group)` names; a slave stream per server peer.
pub(crate) fn hier_broadcast_request(
    servers: &Servers,
    root: Rank,
    me: Rank,
    level1: impl Fn(&[Rank]) -> Vec<Rank>,
) -> ResourceRequest {
    let mut peers = servers.server_peers(me);
    for c in servers.owned_chunks(me) {
        let group = servers.group(c);
        let source = group[servers.server_of(root)];
        match me == source {
            true => peers.extend(group.iter().filter(|&&r| r != me)),
            false => peers.push(source),
        }
        peers.extend(level1(&group));
    }
    peers.sort_unstable();
    peers.dedup();
    ResourceRequest {
        slave_streams: server_slaves(servers, me),
        ..ResourceRequest::with_peers(Peers::List(peers))
    }
}

/// A hierarchical Broadcast (see the module docs): the level-0 scatter in the root's
/// server; for each chunk the rank owns, in increasing order, `level1(ctx, group, source,
/// pieces, channel)` over the chunk's group (when it spans two servers or more), `pieces`
/// the chunk cut one per member (`(byte offset, byte length)` in the output) and `source`
/// the member on the root's server; then the level-0 all-gather, and staged an Ack round
/// with the server. `name` is the executor's, for errors.
pub(crate) fn hier_broadcast(
    ctx: &mut KernelCtx<'_>,
    args: &KernelArgs,
    name: &str,
    mut level1: impl FnMut(
        &mut KernelCtx<'_>,
        &[Rank],
        Rank,
        &[(usize, usize)],
        usize,
    ) -> Result<(), Error>,
) -> Result<(), Error> {
    let root = root_of(&args.op, name)?;
    let servers = Servers::of(ctx.topology);
    let es = args.op.dtype.size();
    let chunks = even_chunks(args.op.count, servers.widest(), es);
    let channel = args.iteration % 2;
    scatter_in_root_server(ctx, args, &servers, root, &chunks, channel)?;
    for c in servers.owned_chunks(ctx.rank) {
        let group = servers.group(c);
        if group.len() < 2 {
            continue;
        }
        let source = group[servers.server_of(root)];
        level1(
            ctx,
            &group,
            source,
            &pieces(chunks[c], group.len(), es),
            channel,
        )?;
    }
    server_all_gather(ctx, &servers, args.output, &chunks, (channel, 1))?;
    if args.mode == Mode::Staged {
        server_round(ctx, &servers, channel, Round::Ack)?;
    }
    Ok(())
}

/// Level 0, scatter: the root keeps its data, and in the root's server every rank pulls
/// the chunks it owns (of `chunks`, `(byte offset, byte length)`) from the root's input.
fn scatter_in_root_server(
    ctx: &mut KernelCtx<'_>,
    args: &KernelArgs,
    servers: &Servers,
    root: Rank,
    chunks: &[(usize, usize)],
    channel: usize,
) -> Result<(), Error> {
    let me = ctx.rank;
    if me == root {
        root_keeps_its_data(ctx, args);
    }
    if servers.server_of(me) != servers.server_of(root) {
        return Ok(());
    }
    let pulls: Vec<(usize, usize)> = servers
        .owned_chunks(me)
        .into_iter()
        .map(|c| chunks[c])
        .collect();
    let peers = servers.server_peers(me);
    pull_from_source(ctx, args.input, args.output, root, &peers, &pulls, channel)
}

/// `chunk` (`(byte offset, byte length)`) cut into `parts` even pieces of `es`-byte
/// elements, each as `(byte offset, byte length)` in the same buffer.
fn pieces(chunk: (usize, usize), parts: usize, es: usize) -> Vec<(usize, usize)> {
    let (off, len) = chunk;
    even_chunks(len / es, parts, es)
        .into_iter()
        .map(|(o, l)| (off + o, l))
        .collect()
}

/// `source` announces its data (a DataSignal to each of `readers`) and waits until each
/// is done (their Acks); every reader pulls `pulls` (`(byte offset, byte length)`) from
/// the source's `from` into its own `to`, between the two.
fn pull_from_source(
    ctx: &mut KernelCtx<'_>,
    from: BufRange,
    to: BufRange,
    source: Rank,
    readers: &[Rank],
    pulls: &[(usize, usize)],
    channel: usize,
) -> Result<(), Error> {
    let me = ctx.rank;
    if me == source {
        let links = readers
            .iter()
            .filter(|&&r| r != me)
            .map(|&r| ctx.link(r, channel))
            .collect::<Result<Vec<_>, _>>()?;
        links.iter().for_each(|l| l.tx_data_signal(ctx.main()));
        links.iter().for_each(|l| l.rx_ack(ctx.main()));
        return Ok(());
    }
    let link = ctx.link(source, channel)?;
    link.rx_data_signal(ctx.main());
    for &(off, len) in pulls {
        let (src, dst) = (from.at(source, off, len), to.at(me, off, len));
        ctx.main().copy(src, dst);
    }
    link.tx_ack(ctx.main());
    Ok(())
}
