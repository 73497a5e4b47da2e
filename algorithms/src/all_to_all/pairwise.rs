//! AlltoAll pairwise: `n - 1` steps; in step `k` rank `r` pulls its block from rank
//! `r - k` while rank `r + k` pulls from it (mod `n`), HCCL's pairwise exchange.
//!
//! A step uses one link in each direction, on the main stream, with the ring step's
//! handshake: DataSignal to `r + k` ("my input is ready"), wait for `r - k`'s, copy, Ack
//! to `r - k` ("done reading yours"), wait for `r + k`'s Ack. Each ordered pair meets in
//! exactly one step, so no notify is posted twice in an iteration, and the closing Ack
//! wait means that when an iteration ends nobody reads this rank's input any more (the
//! staged loop may refill CclIn at once). Every pair of ranks talks over a call, so it
//! needs a full mesh.
//! HCCL cost: `(p−1)α + (p−1)/p·nβ` with `n` the bytes of a rank's input.

use super::pull_block;
use oxccl_framework::{
    Constraints, Error, Executor, KernelArgs, KernelCtx, OpKind, Peers, PlanCtx, ResourceRequest,
};

/// The pairwise AlltoAll executor.
pub struct PairwiseAlltoAll;

oxccl_framework::register_executor! {
    name: "pairwise",
    op: OpKind::AlltoAll,
    description: "n-1 steps, step k pulls from rank r-k, one link per direction per step",
    constraints: Constraints { full_mesh: true, ..Constraints::ANY },
    preference: 10,
    make: || Box::new(PairwiseAlltoAll),
}

impl Executor for PairwiseAlltoAll {
    fn resources(&self, _ctx: &PlanCtx<'_>) -> Result<ResourceRequest, Error> {
        Ok(ResourceRequest::with_peers(Peers::All))
    }

    fn kernel_run(&self, ctx: &mut KernelCtx<'_>, args: &KernelArgs) -> Result<(), Error> {
        let (me, n) = (ctx.rank, ctx.ranks);
        let blocks = args.blocks(n);
        pull_block(ctx, args, &blocks, me, 0);
        for k in 1..n {
            let to = ctx.link((me + k) % n, 0)?;
            let from = ctx.link((me + n - k) % n, 0)?;
            to.tx_data_signal(ctx.main());
            from.rx_data_signal(ctx.main());
            pull_block(ctx, args, &blocks, from.remote, 0);
            from.tx_ack(ctx.main());
            to.rx_ack(ctx.main());
        }
        Ok(())
    }
}
