//! AllReduce ring: ring reduce-scatter then ring all-gather, on the main stream.
//!
//! `2(n - 1)` steps, each with one neighbour on each side: the AllReduce that needs the
//! fewest links (two per rank), so it runs on rings and on meshes with broken links as long
//! as the natural order `0, 1, ..., n-1` is a cycle of healthy links.
//! HCCL cost: `2(p−1)α + 2(p−1)/p·nβ + (p−1)/p·nγ`.

use crate::templates::{even_chunks, ring_all_gather, ring_reduce_scatter, RingParams};
use oxccl_framework::{
    Constraints, Error, Executor, KernelArgs, KernelCtx, OpKind, Peers, PlanCtx, ResourceRequest,
};

/// The ring AllReduce executor, over the natural rank order.
pub struct RingAllReduce;

oxccl_framework::register_executor! {
    name: "ring",
    op: OpKind::AllReduce,
    description: "ring reduce-scatter then ring all-gather over ranks 0..n, on the main stream",
    constraints: Constraints::ANY,
    preference: 10,
    make: || Box::new(RingAllReduce),
}

/// The neighbours of `rank` in the natural ring of `ranks`, without duplicates.
pub fn natural_ring_peers(rank: usize, ranks: usize) -> Vec<usize> {
    let mut peers = vec![(rank + ranks - 1) % ranks, (rank + 1) % ranks];
    peers.sort_unstable();
    peers.dedup();
    peers.retain(|&p| p != rank);
    peers
}

impl Executor for RingAllReduce {
    fn resources(&self, ctx: &PlanCtx<'_>) -> Result<ResourceRequest, Error> {
        Ok(ResourceRequest::with_peers(Peers::List(
            natural_ring_peers(ctx.rank, ctx.ranks),
        )))
    }

    fn kernel_run(&self, ctx: &mut KernelCtx<'_>, args: &KernelArgs) -> Result<(), Error> {
        let op = &args.op;
        let order: Vec<usize> = (0..ctx.ranks).collect();
        let chunks = even_chunks(op.count, ctx.ranks, op.dtype.size());
        let p = RingParams {
            order: &order,
            stream: 0,
            channel: 0,
            chunks: &chunks,
            chunk_at: &order,
            input: args.input,
            output: args.output,
            dtype: op.dtype,
            op: op.op,
        };
        if ctx.ranks == 1 {
            args.copy_input_to_output(ctx);
            return Ok(());
        }
        ring_reduce_scatter(ctx, &p)?;
        ring_all_gather(ctx, &p)
    }
}
