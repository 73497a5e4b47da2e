//! ReduceScatter RHD: recursive halving between ranks `2^k` apart, HCCL's `H-D_R`, on
//! the main stream.
//!
//! In each step a rank keeps the half of its current block range that holds its own
//! block and reduces its partner's partial sums of it into its own, so the data halves
//! each step: `log2(p)` steps on a power of two. Any other rank count folds first, the
//! HCCL way: of the first `2(p − 2^k)` ranks, each even one reduces its odd neighbour's
//! input into its own and takes part for both, and hands the odd one its block at the end
//! (two more steps, the first moving the whole input). See [`rhd`](crate::templates::rhd).
//! Partial sums need one block per rank of room, which the output (one block) lacks, so
//! they go to scratch (one CCL buffer, which caps a zero-copy iteration at the CCL buffer
//! over the rank count), and the last step writes straight into the output. It needs
//! links between the ranks at those distances; it cannot route around a broken one, so it
//! declares `full_mesh` and a topology with a broken or missing link refuses it.
//! HCCL cost: `log2(p)α + (p−1)/p·nβ + (p−1)/p·nγ` on a power of two; otherwise two
//! more steps.
//!
//! Every step ends with the partner's Ack ("done reading your buffers"), so when an
//! iteration ends nobody reads this rank's input or scratch any more.

use crate::templates::{rhd_peers, rhd_reduce_scatter_into};
use oxccl_framework::{
    Constraints, Error, Executor, KernelArgs, KernelCtx, OpKind, PlanCtx, ResourceRequest,
};

/// The RHD ReduceScatter executor.
pub struct RhdReduceScatter;

oxccl_framework::register_executor! {
    name: "rhd",
    op: OpKind::ReduceScatter,
    description: "recursive halving between ranks 2^k apart, partial sums in scratch; non-powers of two fold pairwise",
    constraints: Constraints { full_mesh: true, ..Constraints::ANY },
    preference: 8,
    make: || Box::new(RhdReduceScatter),
}

impl Executor for RhdReduceScatter {
    fn resources(&self, ctx: &PlanCtx<'_>) -> Result<ResourceRequest, Error> {
        super::log_step_resources(ctx, "rhd", rhd_peers)
    }

    fn kernel_run(&self, ctx: &mut KernelCtx<'_>, args: &KernelArgs) -> Result<(), Error> {
        let order: Vec<usize> = (0..ctx.ranks).collect();
        super::scatter_via_scratch(ctx, args, &order, rhd_reduce_scatter_into)
    }
}
