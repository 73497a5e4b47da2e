//! Mesh templates: every rank talks to every peer at once, one slave stream per peer.
//!
//! Slave stream `i` (1-based) serves peer `rank + i` (mod n), so the ranks start with
//! different peers and no link is everybody's first. Both templates pull; the handshake on
//! each link is, in order:
//!
//! | phase | tasks on the peer's stream | meaning |
//! |---|---|---|
//! | reduce-scatter | `tx_ack`, `rx_ack` | both inputs are in place |
//! | (main stream) | Reduce of my chunk from every rank's input | |
//! | all-gather | `tx_data_signal`, `rx_data_signal` | both reduced chunks are ready, both inputs are read |
//! | all-gather | Copy of the peer's chunk | |
//!
//! The rounds alternate Ack and DataSignal, so between two posts of the same notify there
//! is a wait that the peer passes only after consuming the first post: no wakeup is lost,
//! also from one loop iteration to the next. The next iteration's Ack round also says "I
//! am done reading your output"; after the last iteration no task says it, and the
//! device's epoch fence orders the next operation instead. The mesh grants every peer, so
//! a rank's next call (whatever its executor) starts only after every rank finished this
//! one: the entry fence waits for the peers granted in this call and in the previous one.
//! Zero-copy, the exit fence also holds each call until every peer finished reading its
//! user buffers.

use oxccl_framework::platform::{DataType, Rank, ReduceOp};
use oxccl_framework::{BufRange, Error, KernelCtx, Peers, ResourceRequest};

oxccl_framework::register_template! {
    name: "mesh_reduce_scatter",
    description: "handshake with every peer on parallel streams, then one n-way Reduce of the own chunk",
}

oxccl_framework::register_template! {
    name: "mesh_all_gather",
    description: "every peer's chunk pulled on its own stream, in parallel",
}

/// Parameters of the mesh templates.
#[derive(Clone, Debug)]
pub struct MeshParams<'a> {
    /// `(byte offset, byte length)` of each rank's chunk, relative to `input` (and to
    /// `output` for [`mesh_all_gather`]).
    pub chunks: &'a [(usize, usize)],
    /// Where [`mesh_reduce_scatter`] puts each rank's reduced chunk, relative to `output`:
    /// the same as `chunks` for AllReduce, offset 0 for ReduceScatter, whose output holds
    /// only the rank's own block.
    pub out_chunks: &'a [(usize, usize)],
    pub input: BufRange,
    pub output: BufRange,
    pub dtype: DataType,
    pub op: ReduceOp,
    /// The link channel the handshakes use.
    pub channel: usize,
}

/// What every mesh executor needs: links to every peer and one slave stream per peer.
pub fn mesh_resources(ranks: usize) -> ResourceRequest {
    ResourceRequest {
        slave_streams: ranks - 1,
        ..ResourceRequest::with_peers(Peers::All)
    }
}

/// The peer served by slave stream `slave` (1-based) of `rank`.
pub fn mesh_peer(rank: Rank, ranks: usize, slave: usize) -> Rank {
    (rank + slave) % ranks
}

/// Append, on every peer's stream between a fork and a join, what `per_peer` produces.
fn on_every_peer(
    ctx: &mut KernelCtx<'_>,
    mut per_peer: impl FnMut(&mut KernelCtx<'_>, usize, Rank) -> Result<(), Error>,
) -> Result<(), Error> {
    let peers = ctx.ranks - 1;
    if peers == 0 {
        return Ok(());
    }
    ctx.fork(1..=peers);
    for slave in 1..=peers {
        let peer = mesh_peer(ctx.rank, ctx.ranks, slave);
        per_peer(ctx, slave, peer)?;
    }
    ctx.join(1..=peers);
    Ok(())
}

/// After it, `output[out_chunks[me]]` holds the reduction of every rank's
/// `input[chunks[me]]`.
/// Needs `ranks - 1` slave streams.
pub fn mesh_reduce_scatter(ctx: &mut KernelCtx<'_>, p: &MeshParams<'_>) -> Result<(), Error> {
    on_every_peer(ctx, |ctx, slave, peer| {
        let link = ctx.link(peer, p.channel)?;
        link.tx_ack(ctx.stream(slave));
        link.rx_ack(ctx.stream(slave));
        Ok(())
    })?;
    let me = ctx.rank;
    let (off, len) = p.chunks[me];
    let srcs = (0..ctx.ranks).map(|r| p.input.at(r, off, len)).collect();
    let (out_off, _) = p.out_chunks[me];
    ctx.main()
        .reduce(srcs, p.output.at(me, out_off, len), p.dtype, p.op);
    Ok(())
}

/// After it, every `output[chunk r]` holds rank `r`'s `output[chunk r]`. Each peer's
/// DataSignal says "my chunk is ready", so the own chunk must be in place before it;
/// within an AllReduce it follows [`mesh_reduce_scatter`], whose first handshake also
/// released the peers' inputs. Nothing here says "I am done reading your output": a
/// caller whose peers overwrite their output next (a staged loop) adds a round for it.
pub fn mesh_all_gather(ctx: &mut KernelCtx<'_>, p: &MeshParams<'_>) -> Result<(), Error> {
    on_every_peer(ctx, |ctx, slave, peer| {
        let link = ctx.link(peer, p.channel)?;
        let (off, len) = p.chunks[peer];
        let (src, dst) = (p.output.at(peer, off, len), p.output.at(ctx.rank, off, len));
        let s = ctx.stream(slave);
        link.tx_data_signal(s);
        link.rx_data_signal(s);
        s.copy(src, dst);
        Ok(())
    })
}
