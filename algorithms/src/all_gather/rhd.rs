//! AllGather RHD: recursive doubling between ranks `2^k` apart, HCCL's `H-D_R`, on the
//! main stream.
//!
//! In step `k` every rank pulls from the rank `2^k` away (in rank order, XOR) the blocks
//! that rank holds, so the held blocks double each step: `log2(p)` steps on a power of
//! two. Any other rank count folds first, the HCCL way: of the first `2(p − 2^k)` ranks,
//! each even one pulls its odd neighbour's block and takes part for both, and the odd one
//! pulls every other block at the end (two more steps). See
//! [`rhd`](crate::templates::rhd). It needs links between the ranks at those distances;
//! it cannot route around a broken one, so it declares `full_mesh` and a topology with a
//! broken or missing link refuses it.
//! HCCL cost: `log2(p)α + (p−1)/p·nβ` on a power of two; otherwise two more steps, the
//! last moving `(p−1)/p·n`.
//!
//! Every step ends with the partner's Ack ("done reading your output"), so when an
//! iteration ends nobody reads this rank's output any more.

use super::place_own_block;
use crate::templates::{rhd_all_gather, rhd_links, RingParams};
use oxccl_framework::{
    Constraints, Error, Executor, KernelArgs, KernelCtx, OpKind, Peers, PlanCtx, ResourceRequest,
};

/// The RHD AllGather executor.
pub struct RhdAllGather;

oxccl_framework::register_executor! {
    name: "rhd",
    op: OpKind::AllGather,
    description: "recursive doubling between ranks 2^k apart; non-powers of two fold pairwise",
    constraints: Constraints { full_mesh: true, ..Constraints::ANY },
    preference: 8,
    make: || Box::new(RhdAllGather),
}

impl Executor for RhdAllGather {
    fn resources(&self, ctx: &PlanCtx<'_>) -> Result<ResourceRequest, Error> {
        let peers = rhd_links(ctx, "rhd")?;
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
        rhd_all_gather(ctx, &p)
    }
}
