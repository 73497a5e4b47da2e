//! AllReduce NB: NB reduce-scatter then NB all-gather, HCCL's non-uniform Bruck, on the
//! main stream.
//!
//! `2⌈log2 p⌉` steps for any rank count, the peer of step `k` `2^k` away, with no fold
//! and no extra volume. See [`nb`](crate::templates::nb). It needs links between the
//! ranks `2^k` apart; it cannot route around a broken one, so it declares `full_mesh` and
//! a topology with a broken or missing link refuses it.
//! HCCL cost: `2⌈log2 p⌉α + 2(p−1)/p·nβ + (p−1)/p·nγ`.
//!
//! Every step ends with the reader's Ack ("done reading your buffers"), so when an
//! iteration ends nobody reads this rank's buffers and its output is final.

use crate::templates::{
    even_chunks, nb_all_gather, nb_peers, nb_reduce_scatter, require_links, RingParams,
};
use oxccl_framework::{
    Constraints, Error, Executor, KernelArgs, KernelCtx, OpKind, Peers, PlanCtx, ResourceRequest,
};

/// The NB AllReduce executor.
pub struct NbAllReduce;

oxccl_framework::register_executor! {
    name: "nb",
    op: OpKind::AllReduce,
    description: "NB reduce-scatter then all-gather: 2 ceil(log2 n) steps, the peer of step k 2^k away",
    constraints: Constraints { full_mesh: true, ..Constraints::ANY },
    preference: 6,
    make: || Box::new(NbAllReduce),
}

impl Executor for NbAllReduce {
    fn resources(&self, ctx: &PlanCtx<'_>) -> Result<ResourceRequest, Error> {
        let order: Vec<usize> = (0..ctx.ranks).collect();
        let peers = require_links(ctx.topology, "nb", ctx.rank, nb_peers(&order, ctx.rank))?;
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
        nb_reduce_scatter(ctx, &p)?;
        nb_all_gather(ctx, &p)
    }
}
