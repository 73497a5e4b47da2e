//! AllGather NHR: HCCL's non-uniform hierarchical ring, `⌈log2 p⌉` steps for any rank
//! count, on the main stream.
//!
//! Each step doubles the blocks a rank holds by pulling, from the rank as many positions
//! ahead as it holds blocks, the run of blocks that follows its own; the step sizes halve
//! from the top (`⌈p/2⌉, ⌈p/4⌉, ...`), so the last step moves about half of all blocks,
//! with no fold and no extra volume on any rank count. See
//! [`nhr`](crate::templates::nhr). It needs links between the ranks at those distances;
//! it cannot route around a broken one, so it declares `full_mesh` and a topology with a
//! broken or missing link refuses it.
//! HCCL cost: `⌈log2 p⌉α + (p−1)/p·nβ`.
//!
//! Every step ends with the reader's Ack ("done reading your output"), so when an
//! iteration ends nobody reads this rank's output any more.

use super::place_own_block;
use crate::templates::{nhr_all_gather, nhr_peers, require_links, RingParams};
use oxccl_framework::{
    Constraints, Error, Executor, KernelArgs, KernelCtx, OpKind, Peers, PlanCtx, ResourceRequest,
};

/// The NHR AllGather executor.
pub struct NhrAllGather;

oxccl_framework::register_executor! {
    name: "nhr",
    op: OpKind::AllGather,
    description: "ceil(log2 n) ring steps of doubling size (distances n/2, n/4, ... rounded up), any rank count",
    constraints: Constraints { full_mesh: true, ..Constraints::ANY },
    preference: 7,
    make: || Box::new(NhrAllGather),
}

impl Executor for NhrAllGather {
    fn resources(&self, ctx: &PlanCtx<'_>) -> Result<ResourceRequest, Error> {
        let order: Vec<usize> = (0..ctx.ranks).collect();
        let peers = require_links(ctx.topology, "nhr", ctx.rank, nhr_peers(&order, ctx.rank))?;
        Ok(ResourceRequest::with_peers(Peers::List(peers)))
    }

    fn kernel_run(&self, ctx: &mut KernelCtx<'_>, args: &KernelArgs) -> Result<(), Error> {
        let blocks = args.blocks(ctx.ranks);
        place_own_block(ctx, args, &blocks);
        if ctx.ranks == 1 {
            return Ok(());
        }
        let order: Vec<usize> = (0..ctx.ranks).collect();
        let p = RingParams::on_main_stream(&order, &blocks, &order, args);
        nhr_all_gather(ctx, &p)
    }
}
