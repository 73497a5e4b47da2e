//! AllReduce RHD: recursive halving (reduce-scatter) then recursive doubling (all-gather),
//! HCCL's `H-D_R`, on the main stream.
//!
//! `2log2(p)` steps on a power of two, each with one partner at distance `2^k` (in rank
//! order), moving half, a quarter, ... of the vector: few steps, so it suits small and
//! medium messages across servers. Any other rank count folds first, the HCCL way: the
//! first `2(p − 2^k)` ranks pair up, the odd one of each pair hands its input to the even
//! one, which takes part for both and hands the result back at the end (two more steps,
//! each moving the whole vector). See [`rhd`](crate::templates::rhd).
//! It needs links between the ranks at those distances; it cannot route around a broken
//! one, so it declares `full_mesh` and a topology with a broken or missing link refuses it.
//! HCCL cost: `2log2(p)α + 2(p−1)/p·nβ + (p−1)/p·nγ` on a power of two; otherwise
//! `(2⌊log2 p⌋ + 2)α + (2(p'−1)/p' + 2)·nβ + ((p'−1)/p' + 1)·nγ` with `p' = 2^⌊log2 p⌋`.
//!
//! Every step ends with the partner's Ack ("done reading your buffers"), so when an
//! iteration ends nobody reads this rank's buffers and its output is final.

use crate::templates::{even_chunks, rhd_all_reduce, rhd_links, RingParams};
use oxccl_framework::{
    Constraints, Error, Executor, KernelArgs, KernelCtx, OpKind, Peers, PlanCtx, ResourceRequest,
};

/// The RHD AllReduce executor.
pub struct RhdAllReduce;

oxccl_framework::register_executor! {
    name: "rhd",
    op: OpKind::AllReduce,
    description: "recursive halving then doubling between ranks 2^k apart; non-powers of two fold pairwise",
    constraints: Constraints { full_mesh: true, ..Constraints::ANY },
    preference: 8,
    make: || Box::new(RhdAllReduce),
}

impl Executor for RhdAllReduce {
    fn resources(&self, ctx: &PlanCtx<'_>) -> Result<ResourceRequest, Error> {
        let peers = rhd_links(ctx, "rhd")?;
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
        rhd_all_reduce(ctx, &p)
    }
}
