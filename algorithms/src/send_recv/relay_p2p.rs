//! Send/recv relay-p2p: pairs with a healthy link go as in [`p2p`](super::p2p); a pair
//! without one goes through all its relays (common healthy neighbours), each carrying one
//! piece of the pair's byte stream.
//!
//! A rank knows its own sends and receives only, and the relays know neither; no
//! metadata is exchanged. So the relays do not touch the data: the sender writes each
//! piece into a Scratch slot of its relay, the receiver reads it from there, and the relay
//! only passes signals (the [`relay_exchange`] template; both ends cut the stream the same
//! way because the `k`-th send of `a` to `b` has the count of the `k`-th receive of `b`
//! from `a`). The linked pairs run the p2p template on the main stream (link channel 0),
//! the relayed ones at the same time on slave streams (channel 1): one for the signal
//! rounds, one per relay for the copies into and out of its slots, so that the pieces
//! move on all relay links at once.
//!
//! What is supported, precisely:
//! - every pair without a healthy link must share one (else `Unsupported` from
//!   `resources()`);
//! - one call moves at most one relay slot per relay between such a pair, in each
//!   direction ([`relay_capacity`](crate::templates::relay_p2p::relay_capacity): `m` relays times one CCL buffer's worth of Scratch
//!   over the busiest relay's slots); more is refused with `Unsupported` on both ends;
//! - every rank that relays, or that is an end of an unlinked pair, must take part in the
//!   call with at least one element of its own (a rank whose call has no elements is not
//!   run by the framework, and the relay cannot know that it is needed): otherwise the
//!   waiting peers fail with a wait timeout that names the notify. AlltoAllV with every
//!   rank sending or receiving something, and send/recv patterns in which every rank has
//!   an item, qualify.
//!
//! Cost per relayed pair with `m` relays and `b` bytes: `2α + (b/m)β` on each of the
//! `2m` links involved, besides the direct pairs' `⌈b/s⌉·2α + 2bβ`.

use super::{missing_layout, p2p_items};
use crate::templates::relay_p2p::{
    check_relay_capacity, relay_exchange, relay_notifies, relay_peers, relay_scratch_bytes,
    relay_slot_bytes, relay_streams, unlinked_peers, RelayParams,
};
use crate::templates::{p2p_exchange, p2p_peers, require_routes, P2pParams, P2pPhase};
use oxccl_framework::op::P2pItem;
use oxccl_framework::platform::{Rank, Slice};
use oxccl_framework::{
    BufRange, Constraints, Error, Executor, KernelArgs, KernelCtx, Mode, OpKind, Peers, PlanCtx,
    ResourceRequest, Topology,
};

/// The relaying send/recv executor.
pub struct RelayP2pSendRecv;

const NAME: &str = "relay-p2p";

oxccl_framework::register_executor! {
    name: NAME,
    op: OpKind::SendRecv,
    description: "p2p over healthy links; unlinked pairs written to and read from the common neighbours' Scratch",
    constraints: Constraints::ANY,
    preference: 5,
    make: || Box::new(RelayP2pSendRecv),
}

/// The resources of a relaying point-to-point executor on `ctx.rank`: links to its direct
/// peers with data and to its relay peers, one slave stream for the relayed rounds, the
/// relay slots; `Unsupported` when a pair has no route or carries too much.
pub(crate) fn relay_p2p_resources(
    ctx: &PlanCtx<'_>,
    name: &'static str,
    op: OpKind,
) -> Result<ResourceRequest, Error> {
    let t = ctx.topology;
    require_routes(t, name, op, None)?;
    let (sends, recvs) = ctx
        .op
        .layout()
        .and_then(|l| l.p2p())
        .ok_or_else(|| missing_layout(name, op))?;
    let es = ctx.op.dtype.size();
    let slot = relay_slot_bytes(t, ctx.ccl_bytes, es);
    for q in unlinked_peers(t, ctx.rank) {
        let bytes = |items: &[P2pItem]| -> usize {
            items
                .iter()
                .filter(|i| i.peer == q)
                .map(|i| i.count * es)
                .sum()
        };
        check_relay_capacity(t, (name, op), (ctx.rank, q, bytes(sends)), slot, es)?;
        check_relay_capacity(t, (name, op), (q, ctx.rank, bytes(recvs)), slot, es)?;
    }
    let relays = relay_peers(t, ctx.rank);
    let mut peers: Vec<Rank> = linked(t, ctx.rank, p2p_peers(ctx.rank, sends, recvs));
    peers.extend(&relays);
    peers.sort_unstable();
    peers.dedup();
    Ok(ResourceRequest {
        slave_streams: relay_streams(t, ctx.rank),
        local_notifies: relay_notifies(t, ctx.rank),
        scratch_bytes: relay_scratch_bytes(t, ctx.ccl_bytes, es),
        ..ResourceRequest::with_peers(Peers::List(peers))
    })
}

/// The ranks of `peers` that `rank` has a healthy link to.
pub(crate) fn linked(topology: &Topology, rank: Rank, peers: Vec<Rank>) -> Vec<Rank> {
    peers
        .into_iter()
        .filter(|&q| topology.link(rank, q).is_some())
        .collect()
}

/// This rank's byte stream with each of its unlinked peers: the non-empty `items` with it,
/// in call order, as slices of `range`.
fn unlinked_streams(
    ctx: &KernelCtx<'_>,
    items: &[P2pItem],
    range: BufRange,
    es: usize,
) -> Vec<(Rank, Vec<Slice>)> {
    unlinked_peers(ctx.topology, ctx.rank)
        .into_iter()
        .map(|q| {
            let slices = items
                .iter()
                .filter(|i| i.peer == q && i.count > 0)
                .map(|i| range.at(ctx.rank, i.offset * es, i.count * es))
                .collect();
            (q, slices)
        })
        .collect()
}

/// The whole call: `phases` of the linked pairs on the main stream, the relayed pairs on
/// slave stream 1 meanwhile.
pub(crate) fn relay_p2p_run(
    ctx: &mut KernelCtx<'_>,
    args: &KernelArgs,
    name: &'static str,
    phases: &[P2pPhase],
) -> Result<(), Error> {
    let (sends, recvs) = p2p_items(name, args)?;
    let es = args.op.dtype.size();
    let relaying = relay_streams(ctx.topology, ctx.rank);
    if relaying > 0 {
        ctx.fork(1..=relaying);
        let (out, inc) = (
            unlinked_streams(ctx, sends, args.input, es),
            unlinked_streams(ctx, recvs, args.output, es),
        );
        let p = RelayParams {
            sends: &out,
            recvs: &inc,
            elem_size: es,
            slot_bytes: relay_slot_bytes(ctx.topology, args.ccl_bytes, es),
            channel: 1,
            stream: 1,
            first_copy_stream: 2,
            first_notify: 0,
            // Staged, the reader of a relay's slot is no peer of the next writer, so no
            // fence orders the next operation's writes after this one's reads: the
            // release rounds must (see `RelayParams::slots_reused`). Zero-copy the exit
            // and entry fences do.
            slots_reused: args.mode == Mode::Staged,
        };
        relay_exchange(ctx, &p)?;
    }
    let p = P2pParams::on_user_buffers(args, sends, recvs, phases);
    p2p_exchange(ctx, &p)?;
    if relaying > 0 {
        ctx.join(1..=relaying);
    }
    Ok(())
}

impl Executor for RelayP2pSendRecv {
    fn resources(&self, ctx: &PlanCtx<'_>) -> Result<ResourceRequest, Error> {
        relay_p2p_resources(ctx, NAME, OpKind::SendRecv)
    }

    fn kernel_run(&self, ctx: &mut KernelCtx<'_>, args: &KernelArgs) -> Result<(), Error> {
        let (sends, recvs) = p2p_items(NAME, args)?;
        let (me, t) = (ctx.rank, ctx.topology);
        let phase = P2pPhase {
            send_to: linked(t, me, p2p_peers(me, sends, &[])),
            recv_from: linked(t, me, p2p_peers(me, &[], recvs)),
        };
        relay_p2p_run(ctx, args, NAME, std::slice::from_ref(&phase))
    }
}
