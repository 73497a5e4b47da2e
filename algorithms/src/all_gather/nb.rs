//! AllGather NB: HCCL's non-uniform Bruck, `⌈log2 p⌉` steps for any rank count, on the
//! main stream.
//!
//! In step `k` every rank pulls from the rank `2^k` ahead the run of (up to `2^k`) blocks
//! that follows the ones it holds, so the held blocks double each step and the last step
//! takes what is left: no fold and no extra volume on any rank count. See
//! [`nb`](crate::templates::nb). It needs links between the ranks `2^k` apart; it cannot
//! route around a broken one, so it declares `full_mesh` and a topology with a broken or
//! missing link refuses it.
//! HCCL cost: `⌈log2 p⌉α + (p−1)/p·nβ`.
//!
//! Every step ends with the reader's Ack ("done reading your output"), so when an
//! iteration ends nobody reads this rank's output any more.

use super::place_own_block;
use crate::templates::{nb_all_gather, nb_peers, require_links, RingParams};
use oxccl_framework::{
    Constraints, Error, Executor, KernelArgs, KernelCtx, OpKind, Peers, PlanCtx, ResourceRequest,
};

/// The NB AllGather executor.
pub struct NbAllGather;

oxccl_framework::register_executor! {
    name: "nb",
    op: OpKind::AllGather,
    description: "Bruck: ceil(log2 n) steps, the peer of step k 2^k away, any rank count",
    constraints: Constraints { full_mesh: true, ..Constraints::ANY },
    preference: 6,
    make: || Box::new(NbAllGather),
}

impl Executor for NbAllGather {
    fn resources(&self, ctx: &PlanCtx<'_>) -> Result<ResourceRequest, Error> {
        let order: Vec<usize> = (0..ctx.ranks).collect();
        let peers = require_links(ctx.topology, "nb", ctx.rank, nb_peers(&order, ctx.rank))?;
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
        nb_all_gather(ctx, &p)
    }
}
