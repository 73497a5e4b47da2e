//! AlltoAll relay-mesh: the mesh exchange over every healthy link, and the blocks of
//! every pair without a link relayed through all their common neighbours.
//!
//! Linked pairs go as in [`mesh`](super::mesh): one slave stream per healthy peer
//! (rotated so that no link is everybody's first), DataSignal ("my input is ready"),
//! pull the peer's block, Ack ("done reading yours"), on link channel 0. The block `s`
//! owes an unlinked `r` is cut into one piece per relay (their common neighbours); `s`
//! writes each piece into its relay's Scratch slot and `r` reads it from there, with the
//! four signal rounds of the [`relay_exchange`] template on link channel 1, on one more
//! slave stream, with the copies to and from each relay on a stream of their own, all
//! concurrently with the mesh streams. Every relay thus carries `1/m` of
//! the pair's block, on links that also carry their own mesh traffic.
//!
//! The slots hold one CCL buffer's worth of Scratch shared by the busiest relay's duties,
//! so an iteration takes at most as many elements as the relays of the worst-served pair
//! can hold (`max_count_per_loop`). The fourth round ("nobody reads my slots any more")
//! ends each iteration, so the next one may refill the slots and, staged, CclIn.
//! Needs every unlinked pair to share a healthy neighbour (else `Unsupported`); on a full
//! mesh it is the mesh executor with streams assigned in rank order.
//! Cost with `m` relays for a pair and blocks of `b` bytes: `α(mesh) + 4α + (b/m)β` over
//! the relay links, besides the mesh's `(p−1)/p·nβ`.

use super::pull_block;
use crate::templates::relay_p2p::{
    relay_capacity, relay_exchange, relay_notifies, relay_scratch_bytes, relay_slot_bytes,
    relay_streams, unlinked_peers, RelayParams,
};
use crate::templates::require_routes;
use oxccl_framework::platform::{Rank, Slice};
use oxccl_framework::{
    Constraints, Error, Executor, KernelArgs, KernelCtx, OpKind, Peers, PlanCtx, ResourceRequest,
    Topology,
};

/// The relaying mesh AlltoAll executor.
pub struct RelayMeshAlltoAll;

const NAME: &str = "relay-mesh";

oxccl_framework::register_executor! {
    name: NAME,
    op: OpKind::AlltoAll,
    description: "mesh over healthy links; blocks of unlinked pairs written to and read from the common neighbours' Scratch",
    constraints: Constraints::ANY,
    preference: 5,
    make: || Box::new(RelayMeshAlltoAll),
}

/// The healthy peers of `rank`, starting after it (rank order, rotated).
fn mesh_peers(topology: &Topology, rank: Rank) -> Vec<Rank> {
    let n = topology.ranks();
    (1..n)
        .map(|i| (rank + i) % n)
        .filter(|&p| topology.link(rank, p).is_some())
        .collect()
}

/// The most elements per block that the relays of every unlinked pair carry in one
/// iteration (`None`: nothing is relayed).
fn relayed_block_cap(topology: &Topology, slot: usize, es: usize) -> Option<usize> {
    let n = topology.ranks();
    (0..n)
        .flat_map(|a| (0..n).map(move |b| (a, b)))
        .filter_map(|(a, b)| relay_capacity(topology, a, b, slot, es))
        .min()
        .map(|bytes| bytes / es)
}

impl Executor for RelayMeshAlltoAll {
    fn resources(&self, ctx: &PlanCtx<'_>) -> Result<ResourceRequest, Error> {
        let t = ctx.topology;
        require_routes(t, NAME, OpKind::AlltoAll, None)?;
        let es = ctx.op.dtype.size();
        let slot = relay_slot_bytes(t, ctx.ccl_bytes, es);
        let max_count_per_loop = relayed_block_cap(t, slot, es);
        if max_count_per_loop == Some(0) {
            return Err(Error::Unsupported {
                executor: NAME.into(),
                op: OpKind::AlltoAll,
                ranks: t.ranks(),
                reason: format!(
                    "a CCL buffer of {} bytes leaves the relays no room for one element; \
                     raise OXCCL_BUFFSIZE",
                    ctx.ccl_bytes
                ),
            });
        }
        let mut peers = mesh_peers(t, ctx.rank);
        peers.sort_unstable();
        Ok(ResourceRequest {
            slave_streams: peers.len() + relay_streams(t, ctx.rank),
            local_notifies: relay_notifies(t, ctx.rank),
            scratch_bytes: relay_scratch_bytes(t, ctx.ccl_bytes, es),
            max_count_per_loop,
            ..ResourceRequest::with_peers(Peers::List(peers))
        })
    }

    fn kernel_run(&self, ctx: &mut KernelCtx<'_>, args: &KernelArgs) -> Result<(), Error> {
        let me = ctx.rank;
        let blocks = args.blocks(ctx.ranks);
        pull_block(ctx, args, &blocks, me, 0);
        let peers = mesh_peers(ctx.topology, me);
        let relaying = relay_streams(ctx.topology, me);
        let streams = peers.len() + relaying;
        if streams == 0 {
            return Ok(());
        }
        ctx.fork(1..=streams);
        for (i, &peer) in peers.iter().enumerate() {
            let slave = i + 1;
            let link = ctx.link(peer, 0)?;
            link.tx_data_signal(ctx.stream(slave));
            link.rx_data_signal(ctx.stream(slave));
            pull_block(ctx, args, &blocks, peer, slave);
            link.tx_ack(ctx.stream(slave));
            link.rx_ack(ctx.stream(slave));
        }
        if relaying > 0 {
            relay_blocks(ctx, args, &blocks, peers.len() + 1)?;
        }
        ctx.join(1..=streams);
        Ok(())
    }
}

/// The relayed blocks of this rank's unlinked pairs and its relay duties: the rounds on
/// `stream`, the copies on the streams after it.
fn relay_blocks(
    ctx: &mut KernelCtx<'_>,
    args: &KernelArgs,
    blocks: &[(usize, usize)],
    stream: usize,
) -> Result<(), Error> {
    let me = ctx.rank;
    let es = args.op.dtype.size();
    let block = |range: oxccl_framework::BufRange, q: Rank| -> Vec<Slice> {
        vec![range.at(me, blocks[q].0, blocks[q].1)]
    };
    let unlinked = unlinked_peers(ctx.topology, me);
    let sends: Vec<(Rank, Vec<Slice>)> = unlinked
        .iter()
        .map(|&q| (q, block(args.input, q)))
        .collect();
    let recvs: Vec<(Rank, Vec<Slice>)> = unlinked
        .iter()
        .map(|&q| (q, block(args.output, q)))
        .collect();
    let p = RelayParams {
        sends: &sends,
        recvs: &recvs,
        elem_size: es,
        slot_bytes: relay_slot_bytes(ctx.topology, args.ccl_bytes, es),
        channel: 1,
        stream,
        first_copy_stream: stream + 1,
        first_notify: 0,
        slots_reused: true,
    };
    relay_exchange(ctx, &p)
}
