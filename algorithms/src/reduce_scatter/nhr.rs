//! ReduceScatter NHR: HCCL's non-uniform hierarchical ring, `⌈log2 p⌉` steps for any
//! rank count, on the main stream.
//!
//! The first step reduces about half of the blocks (those the rank `⌈p/2⌉` behind
//! forwards), each further step about half of the rest, down to the own block from the
//! neighbour: no fold and no extra volume on any rank count. See
//! [`nhr`](crate::templates::nhr). Partial sums need one block per rank of room, which
//! the output (one block) lacks, so they go to scratch (one CCL buffer, which caps a
//! zero-copy iteration at the CCL buffer over the rank count), and the last step writes
//! straight into the output. It needs links between the ranks at those distances; it
//! cannot route around a broken one, so it declares `full_mesh` and a topology with a
//! broken or missing link refuses it.
//! HCCL cost: `⌈log2 p⌉α + (p−1)/p·nβ + (p−1)/p·nγ`.
//!
//! Every step ends with the reader's Ack ("done reading your buffers"), so when an
//! iteration ends nobody reads this rank's input or scratch any more.

use crate::templates::{nhr_peers, nhr_reduce_scatter_into};
use oxccl_framework::{
    Constraints, Error, Executor, KernelArgs, KernelCtx, OpKind, PlanCtx, ResourceRequest,
};

/// The NHR ReduceScatter executor.
pub struct NhrReduceScatter;

oxccl_framework::register_executor! {
    name: "nhr",
    op: OpKind::ReduceScatter,
    description: "ceil(log2 n) ring steps of halving size (distances n/2, n/4, ... rounded up), partial sums in scratch",
    constraints: Constraints { full_mesh: true, ..Constraints::ANY },
    preference: 7,
    make: || Box::new(NhrReduceScatter),
}

impl Executor for NhrReduceScatter {
    fn resources(&self, ctx: &PlanCtx<'_>) -> Result<ResourceRequest, Error> {
        super::log_step_resources(ctx, "nhr", nhr_peers)
    }

    fn kernel_run(&self, ctx: &mut KernelCtx<'_>, args: &KernelArgs) -> Result<(), Error> {
        let order: Vec<usize> = (0..ctx.ranks).collect();
        super::scatter_via_scratch(ctx, args, &order, nhr_reduce_scatter_into)
    }
}
