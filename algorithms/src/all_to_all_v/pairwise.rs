//! AlltoAllV pairwise: `n - 1` steps; in step `k` rank `r` sends to `r + k` and receives
//! from `r - k` (mod `n`), HCCL's pairwise exchange.
//!
//! Each step is one phase of the [`p2p_exchange`] template: the pieces go through
//! per-destination slots of the sender's CclIn, one slot-full per round, in zero-copy and
//! staged mode alike (the receiver does not know the sender's displacements, so it cannot
//! read the sender's user buffer). A step uses one outgoing and one incoming link, so the
//! links are never oversubscribed; empty pairs are skipped without a signal and need no
//! link. The own block is a local copy.
//! Cost with `m` bytes per pair and slots of `s` bytes: `(n−1)·⌈m/s⌉·2α + 2(n−1)mβ`.
//! Over a whole call it talks to every peer, so it needs a full mesh.

use crate::send_recv::{missing_layout, p2p_items};
use crate::templates::{p2p_exchange, p2p_peers, P2pParams, P2pPhase};
use oxccl_framework::{
    Constraints, Error, Executor, KernelArgs, KernelCtx, OpKind, Peers, PlanCtx, ResourceRequest,
};

/// The pairwise AlltoAllV executor.
pub struct PairwiseAlltoAllV;

oxccl_framework::register_executor! {
    name: "pairwise",
    op: OpKind::AlltoAllV,
    description: "n-1 steps, step k sends to r+k and receives from r-k, through CclIn slots",
    constraints: Constraints { full_mesh: true, ..Constraints::ANY },
    preference: 10,
    make: || Box::new(PairwiseAlltoAllV),
}

impl Executor for PairwiseAlltoAllV {
    fn resources(&self, ctx: &PlanCtx<'_>) -> Result<ResourceRequest, Error> {
        let (sends, recvs) = ctx
            .op
            .layout()
            .and_then(|l| l.p2p())
            .ok_or_else(|| missing_layout("pairwise", OpKind::AlltoAllV))?;
        Ok(ResourceRequest::with_peers(Peers::List(p2p_peers(
            ctx.rank, sends, recvs,
        ))))
    }

    fn kernel_run(&self, ctx: &mut KernelCtx<'_>, args: &KernelArgs) -> Result<(), Error> {
        let (sends, recvs) = p2p_items("pairwise", args)?;
        let (me, n) = (ctx.rank, ctx.ranks);
        let phases: Vec<P2pPhase> = (1..n)
            .map(|k| P2pPhase {
                send_to: vec![(me + k) % n],
                recv_from: vec![(me + n - k) % n],
            })
            .collect();
        let p = P2pParams {
            sends,
            recvs,
            phases: &phases,
            input: args.input,
            output: args.output,
            elem_size: args.op.dtype.size(),
            ccl_bytes: args.ccl_bytes,
            channel: 0,
        };
        p2p_exchange(ctx, &p)
    }
}
