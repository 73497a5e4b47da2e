//! Broadcast ring: a pipelined chain, NCCL style, along a ring of healthy links.
//!
//! The ring of [`healthy_ring_for`](crate::templates::healthy_ring_for), rotated to start
//! at the root, is cut into a chain (its closing link is not used). The data is cut into
//! up to `MAX_CHUNKS` chunks; every rank pulls chunk `k` from its predecessor (the
//! root's input, the others' output) as soon as the predecessor has it, so the chain
//! moves `p − 1` chunks at once once the pipeline is full. Cost with `c` chunks
//! `(p − 2 + c)(α + n/c·β)`: close to `nβ` for large messages, whatever the rank count.
//! It needs only the links between chain neighbours.
//!
//! Per chunk a predecessor posts "chunk `k` is ready" and the successor answers "done
//! reading chunk `k`"; both alternate Ack and DataSignal by the chunk's parity. A rank
//! waits for the answer to chunk `k − 2` before it announces chunk `k`, so at most two
//! chunks are in flight per link and no notify is posted twice before its wait; at the
//! end of an iteration it waits for the answers still open, so no peer reads its buffers
//! any more.

use super::{chain_from_root, chain_neighbours, root_keeps_its_data, root_of, rx_chunk, tx_chunk};
use crate::templates::even_chunks;
use oxccl_framework::{
    Constraints, Error, Executor, KernelArgs, KernelCtx, OpKind, Peers, PlanCtx, ResourceRequest,
};

/// The pipelined-chain Broadcast executor.
pub struct RingBroadcast;

/// Bytes per chunk the pipeline aims for.
pub(crate) const CHUNK_BYTES: usize = 64 << 10;
/// The most chunks one loop iteration is cut into.
pub(crate) const MAX_CHUNKS: usize = 32;

oxccl_framework::register_executor! {
    name: "ring",
    op: OpKind::Broadcast,
    description: "pipelined chain from the root along a ring of healthy links (large messages)",
    constraints: Constraints::ANY,
    preference: 20,
    make: || Box::new(RingBroadcast),
}

/// The chunks of one iteration of `count` elements of `es` bytes: `(offset, len)` each.
pub(crate) fn pipeline_chunks(count: usize, es: usize) -> Vec<(usize, usize)> {
    let parts = (count * es).div_ceil(CHUNK_BYTES).clamp(1, MAX_CHUNKS);
    even_chunks(count, parts.min(count.max(1)), es)
}

/// The links of `rank`'s chain neighbours.
pub(crate) fn chain_peers(chain: &[usize], rank: usize) -> ResourceRequest {
    let (pred, succ) = chain_neighbours(chain, rank);
    let mut peers: Vec<usize> = pred.into_iter().chain(succ).collect();
    peers.sort_unstable();
    ResourceRequest::with_peers(Peers::List(peers))
}

impl Executor for RingBroadcast {
    fn resources(&self, ctx: &PlanCtx<'_>) -> Result<ResourceRequest, Error> {
        let root = root_of(ctx.op, "ring")?;
        let chain = chain_from_root(ctx.topology, root, "ring", OpKind::Broadcast)?;
        Ok(chain_peers(&chain, ctx.rank))
    }

    fn kernel_run(&self, ctx: &mut KernelCtx<'_>, args: &KernelArgs) -> Result<(), Error> {
        let root = root_of(&args.op, "ring")?;
        let chain = chain_from_root(ctx.topology, root, "ring", OpKind::Broadcast)?;
        let (pred, succ) = chain_neighbours(&chain, ctx.rank);
        let pred = pred.map(|p| ctx.link(p, 0)).transpose()?;
        let succ = succ.map(|s| ctx.link(s, 0)).transpose()?;
        let me = ctx.rank;
        if pred.is_none() {
            root_keeps_its_data(ctx, args);
        }
        let chunks = pipeline_chunks(args.op.count, args.op.dtype.size());
        for (k, &(off, len)) in chunks.iter().enumerate() {
            if let Some(pred) = &pred {
                let from = if pred.remote == root {
                    args.input
                } else {
                    args.output
                };
                let (src, dst) = (from.at(pred.remote, off, len), args.output.at(me, off, len));
                rx_chunk(pred, ctx.main(), k);
                ctx.main().copy(src, dst);
                tx_chunk(pred, ctx.main(), k);
            }
            if let Some(succ) = &succ {
                if k >= 2 {
                    rx_chunk(succ, ctx.main(), k - 2);
                }
                tx_chunk(succ, ctx.main(), k);
            }
        }
        if let Some(succ) = &succ {
            for k in chunks.len().saturating_sub(2)..chunks.len() {
                rx_chunk(succ, ctx.main(), k);
            }
        }
        Ok(())
    }
}
