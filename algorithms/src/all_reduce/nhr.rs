//! AllReduce NHR: NHR reduce-scatter then NHR all-gather, HCCL's non-uniform
//! hierarchical ring, on the main stream.
//!
//! `2⌈log2 p⌉` steps for any rank count, with no fold and no extra volume: the
//! reduce-scatter's steps move about half, a quarter, ... of the vector between ranks
//! `⌈p/2⌉, ⌈p/4⌉, ...` apart, the all-gather the same in reverse. See
//! [`nhr`](crate::templates::nhr). It needs links between the ranks at those distances;
//! it cannot route around a broken one, so it declares `full_mesh` and a topology with a
//! broken or missing link refuses it.
//! HCCL cost: `2⌈log2 p⌉α + 2(p−1)/p·nβ + (p−1)/p·nγ`.
//!
//! Every step ends with the reader's Ack ("done reading your buffers"), so when an
//! iteration ends nobody reads this rank's buffers and its output is final.

use crate::templates::{
    even_chunks, nhr_all_gather, nhr_peers, nhr_reduce_scatter, require_links, RingParams,
};
use oxccl_framework::{
    Constraints, Error, Executor, KernelArgs, KernelCtx, OpKind, Peers, PlanCtx, ResourceRequest,
};

/// The NHR AllReduce executor.
pub struct NhrAllReduce;

oxccl_framework::register_executor! {
    name: "nhr",
    op: OpKind::AllReduce,
    description: "NHR reduce-scatter then all-gather: 2 ceil(log2 n) ring steps of halving size, any rank count",
    constraints: Constraints { full_mesh: true, ..Constraints::ANY },
    preference: 7,
    make: || Box::new(NhrAllReduce),
}

impl Executor for NhrAllReduce {
    fn resources(&self, ctx: &PlanCtx<'_>) -> Result<ResourceRequest, Error> {
        let order: Vec<usize> = (0..ctx.ranks).collect();
        let peers = require_links(ctx.topology, "nhr", ctx.rank, nhr_peers(&order, ctx.rank))?;
        Ok(ResourceRequest::with_peers(Peers::List(peers)))
    }

    fn kernel_run(&self, ctx: &mut KernelCtx<'_>, args: &KernelArgs) -> Result<(), Error> {
        if ctx.ranks == 1 {
            args.copy_input_to_output(ctx);
            return Ok(());
        }
        let op = &args.op;
        let order: Vec<usize> = (0..ctx.ranks).collect();
        let chunks = even_chunks(op.count, ctx.ranks, op.dtype.size());
        let p = RingParams::on_main_stream(&order, &chunks, &order, args);
        nhr_reduce_scatter(ctx, &p)?;
        nhr_all_gather(ctx, &p)
    }
}
