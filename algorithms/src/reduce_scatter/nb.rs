//! ReduceScatter NB: HCCL's non-uniform Bruck, `⌈log2 p⌉` steps for any rank count, on
//! the main stream.
//!
//! The transpose of Bruck's all-gather: in step `k` (from the last down to 0) every rank
//! reduces into its own partial sums those of the rank `2^k` behind, for the run of (up to
//! `2^k`) blocks starting at its own; after step 0 its own block is complete. No fold and
//! no extra volume on any rank count. See [`nb`](crate::templates::nb). Partial sums
//! need one block per rank of room, which the output (one block) lacks, so they go to
//! scratch (one CCL buffer, which caps a zero-copy iteration at the CCL buffer over the
//! rank count), and the last step writes straight into the output. It needs links between
//! the ranks `2^k` apart; it cannot route around a broken one, so it declares `full_mesh`
//! and a topology with a broken or missing link refuses it.
//! HCCL cost: `⌈log2 p⌉α + (p−1)/p·nβ + (p−1)/p·nγ`.
//!
//! Every step ends with the reader's Ack ("done reading your buffers"), so when an
//! iteration ends nobody reads this rank's input or scratch any more.

use crate::templates::{nb_peers, nb_reduce_scatter_into};
use oxccl_framework::{
    Constraints, Error, Executor, KernelArgs, KernelCtx, OpKind, PlanCtx, ResourceRequest,
};

/// The NB ReduceScatter executor.
pub struct NbReduceScatter;

oxccl_framework::register_executor! {
    name: "nb",
    op: OpKind::ReduceScatter,
    description: "transposed Bruck: ceil(log2 n) steps, the peer of step k 2^k away, partial sums in scratch",
    constraints: Constraints { full_mesh: true, ..Constraints::ANY },
    preference: 6,
    make: || Box::new(NbReduceScatter),
}

impl Executor for NbReduceScatter {
    fn resources(&self, ctx: &PlanCtx<'_>) -> Result<ResourceRequest, Error> {
        super::log_step_resources(ctx, "nb", nb_peers)
    }

    fn kernel_run(&self, ctx: &mut KernelCtx<'_>, args: &KernelArgs) -> Result<(), Error> {
        let order: Vec<usize> = (0..ctx.ranks).collect();
        super::scatter_via_scratch(ctx, args, &order, nb_reduce_scatter_into)
    }
}
