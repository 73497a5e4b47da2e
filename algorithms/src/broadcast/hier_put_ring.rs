//! Broadcast hierarchical with a put level 1: load/store inside each server, puts across
//! servers, so it runs where only the inter-server links are put-only (`2x8`, or a job of
//! processes on several hosts) and, zero-copy, lands in the users' outputs inside each
//! host.
//!
//! The decomposition of [`hier-ring`](super::hier_levels): the data is cut into `L`
//! chunks (`L` the widest server's rank count), chunk `c` owned by local rank `c % m` on
//! a server of `m` ranks, its level-1 group its owner on every server (see [`Servers`]).
//! 1. Level 0, scatter: in the root's server, every rank pulls the chunks it owns from
//!    the root's input (loads inside the server).
//! 2. Level 1, for each owned chunk in increasing order: its owner on the root's server
//!    (the source) cuts it into one piece per server and puts each other member's piece
//!    to it ([`put`]): staged, into the member's CclOut itself; zero-copy, into its
//!    Scratch slot, which the member copies into its output. Then a put ring all-gather
//!    ([`put_ring_all_gather`]) over the group completes the chunk everywhere. Nothing is
//!    read across servers and no user buffer is written there.
//! 3. Level 0, all-gather: every rank pulls the chunks it does not own from their owners
//!    in its server; staged, an Ack round with the server ends the iteration.
//!
//! The slot holds one piece: zero-copy, an iteration is capped at one CCL buffer, so the
//! slot stays within a CCL buffer over the rank count. Level 0 is a mesh and level 1
//! pairs fixed owners, so it cannot route around a broken link: like the other `hier-*`,
//! it declares `full_mesh`.

use super::hier_levels::{pieces, scatter_in_root_server};
use super::root_of;
use crate::templates::{
    await_puts, even_chunks, finish_puts, open_for_puts, put, put_ring_all_gather, ring_neighbours,
    server_all_gather, server_round, server_slaves, with_group_ring, Round, Servers,
    HIER_PUT_CONSTRAINTS,
};
use oxccl_framework::platform::{Buf, Rank};
use oxccl_framework::{
    BufRange, Error, Executor, KernelArgs, KernelCtx, Mode, OpKind, Peers, PlanCtx, ResourceRequest,
};

/// The hierarchical Broadcast executor with puts across servers.
pub struct HierPutRingBroadcast;

const NAME: &str = "hier-put-ring";

oxccl_framework::register_executor! {
    name: NAME,
    op: OpKind::Broadcast,
    description: "scatter in the root's server (load/store), level-1 put scatter + put ring all-gather of each chunk across servers, level-0 all-gather; runs where only inter-server links are put-only",
    constraints: HIER_PUT_CONSTRAINTS,
    preference: 5,
    make: || Box::new(HierPutRingBroadcast),
}

impl Executor for HierPutRingBroadcast {
    fn resources(&self, ctx: &PlanCtx<'_>) -> Result<ResourceRequest, Error> {
        let root = root_of(ctx.op, NAME)?;
        let servers = Servers::of(ctx.topology);
        let me = ctx.rank;
        let mut peers = servers.server_peers(me);
        for c in servers.owned_chunks(me) {
            let group = servers.group(c);
            let source = group[servers.server_of(root)];
            match me == source {
                true => peers.extend(group.iter().filter(|&&r| r != me)),
                false => peers.push(source),
            }
            peers.extend(ring_neighbours(&group, me));
        }
        peers.sort_unstable();
        peers.dedup();
        let request = ResourceRequest {
            slave_streams: server_slaves(&servers, me),
            ..ResourceRequest::with_peers(Peers::List(peers))
        };
        if ctx.mode == Mode::Staged || servers.count() < 2 {
            return Ok(request);
        }
        // Zero-copy: one piece of one chunk of an iteration in Scratch.
        let es = ctx.op.dtype.size();
        let cap = (ctx.ccl_bytes / es).max(1);
        let piece = cap
            .min(ctx.op.count)
            .div_ceil(servers.widest())
            .div_ceil(servers.count());
        Ok(ResourceRequest {
            scratch_bytes: piece * es,
            max_count_per_loop: Some(cap),
            ..request
        })
    }

    fn kernel_run(&self, ctx: &mut KernelCtx<'_>, args: &KernelArgs) -> Result<(), Error> {
        let root = root_of(&args.op, NAME)?;
        let servers = Servers::of(ctx.topology);
        let es = args.op.dtype.size();
        let chunks = even_chunks(args.op.count, servers.widest(), es);
        let channel = args.iteration % 2;
        let me = ctx.rank;
        scatter_in_root_server(ctx, args, &servers, root, &chunks, channel)?;
        for c in servers.owned_chunks(me) {
            let group = servers.group(c);
            if group.len() < 2 {
                continue;
            }
            let pieces = pieces(chunks[c], group.len(), es);
            let source = group[servers.server_of(root)];
            level1_put_broadcast(ctx, args, &group, source, &pieces, channel)?;
        }
        server_all_gather(ctx, &servers, args.output, &chunks, (channel, 1))?;
        if args.mode == Mode::Staged {
            server_round(ctx, &servers, channel, Round::Ack)?;
        }
        Ok(())
    }
}

/// Level 1 of one chunk, cut into `pieces` (`(byte offset, byte length)` in the output,
/// one per member of `group`): `source` puts each other member's piece to it, then a put
/// ring all-gather over the group; on the main stream, the ring on link `channel`.
fn level1_put_broadcast(
    ctx: &mut KernelCtx<'_>,
    args: &KernelArgs,
    group: &[Rank],
    source: Rank,
    pieces: &[(usize, usize)],
    channel: usize,
) -> Result<(), Error> {
    let me = ctx.rank;
    let piece_of = |r: Rank| {
        let at = group.iter().position(|&g| g == r).unwrap_or(0);
        pieces[at]
    };
    let widest = pieces.iter().map(|&(_, len)| len).max().unwrap_or(0);
    let slot = BufRange {
        buf: Buf::Scratch,
        offset: 0,
        len: widest,
    };
    // Staged, a put may land in the member's CclOut itself; zero-copy, in its slot.
    let into_place = !args.output.buf.is_user();
    let landing = |r: Rank| {
        let (off, len) = piece_of(r);
        match into_place {
            true => args.output.at(r, off, len),
            false => slot.at(r, 0, len),
        }
    };
    if me == source {
        let sent = group
            .iter()
            .filter(|&&r| r != me)
            .map(|&r| {
                let (off, len) = piece_of(r);
                put(ctx, 0, r, &[(landing(r), args.output.at(me, off, len))])
            })
            .collect::<Result<Vec<_>, _>>()?;
        finish_puts(ctx, 0, &sent);
    } else {
        let links = open_for_puts(ctx, 0, &[source])?;
        await_puts(ctx, 0, &links);
        if !into_place {
            let (off, len) = piece_of(me);
            ctx.main()
                .copy(slot.at(me, 0, len), args.output.at(me, off, len));
        }
    }
    let held = |r: Rank, i: usize| args.output.at(r, pieces[i].0, pieces[i].1);
    with_group_ring(group, channel, slot, &args.op, |ring| {
        put_ring_all_gather(ctx, ring, &held, into_place)
    })
}
