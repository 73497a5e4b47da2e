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

use super::hier_levels::{hier_broadcast, hier_broadcast_request};
use super::root_of;
use crate::templates::{
    await_puts, finish_puts, open_for_puts, put, put_ring_all_gather, ring_neighbours, slot_len,
    with_group_ring, Servers, HIER_PUT_CONSTRAINTS,
};
use oxccl_framework::platform::{Buf, Rank};
use oxccl_framework::{
    BufRange, Error, Executor, KernelArgs, KernelCtx, Mode, OpKind, PlanCtx, ResourceRequest,
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
        let request = hier_broadcast_request(&servers, root, ctx.rank, |group| {
            ring_neighbours(group, ctx.rank)
        });
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
        hier_broadcast(ctx, args, NAME, |ctx, group, source, pieces, channel| {
            level1_put_broadcast(ctx, args, group, source, pieces, channel)
        })
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
    let slot = BufRange {
        buf: Buf::Scratch,
        offset: 0,
        len: slot_len(pieces),
    };
    // Staged, a put lands in the member's CclOut itself; zero-copy, in its slot, whatever
    // the link: the executor's need (load/store within servers only) is proved with every
    // link between servers put-only, so it decides by the mode, not by the link as the
    // put template's `landing` does for put executors.
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
