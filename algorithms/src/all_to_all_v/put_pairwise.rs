//! AlltoAllV put-pairwise: `n - 1` steps; in step `k` rank `r` writes its pieces for
//! `r + k` into that rank's CclIn and receives from `r - k` (mod `n`).
//!
//! The put-based twin of [`super::pairwise`], for put-only links (TCP, RDMA write): each
//! step is one phase of [`p2p_put_exchange`], so the sender puts into per-source slots of
//! the receiver's CclIn and the receiver copies out locally; no rank reads a peer's
//! memory. A step uses one outgoing and one incoming link. Cost with `m` bytes per pair
//! and slots of `s` bytes: `(n−1)·⌈m/s⌉·3α + 2(n−1)mβ`. Over a whole call it talks to
//! every peer, so it needs a full mesh.

use crate::send_recv::{missing_layout, p2p_items};
use crate::templates::{p2p_peers, p2p_put_exchange, P2pParams, P2pPhase};
use oxccl_framework::{
    Constraints, Error, Executor, KernelArgs, KernelCtx, LinkNeed, OpKind, Peers, PlanCtx,
    ResourceRequest,
};

/// The put-pairwise AlltoAllV executor.
pub struct PutPairwiseAlltoAllV;

oxccl_framework::register_executor! {
    name: "put-pairwise",
    op: OpKind::AlltoAllV,
    description: "n-1 pairwise steps, the sender writing into the receiver's CclIn slots (put-only links)",
    constraints: Constraints { full_mesh: true, links: LinkNeed::Put, ..Constraints::ANY },
    preference: 5,
    make: || Box::new(PutPairwiseAlltoAllV),
}

impl Executor for PutPairwiseAlltoAllV {
    fn resources(&self, ctx: &PlanCtx<'_>) -> Result<ResourceRequest, Error> {
        let (sends, recvs) = ctx
            .op
            .layout()
            .and_then(|l| l.p2p())
            .ok_or_else(|| missing_layout("put-pairwise", OpKind::AlltoAllV))?;
        Ok(ResourceRequest::with_peers(Peers::List(p2p_peers(
            ctx.rank, sends, recvs,
        ))))
    }

    fn kernel_run(&self, ctx: &mut KernelCtx<'_>, args: &KernelArgs) -> Result<(), Error> {
        let (sends, recvs) = p2p_items("put-pairwise", args)?;
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
        p2p_put_exchange(ctx, &p)
    }
}
