//! Send/recv p2p: every pair of the call at once, through per-destination CclIn slots.
//!
//! A rank links only to the peers it has non-empty items with. In each round it stages
//! one slot-full for every destination in its own CclIn, signals it, pulls every source's
//! piece out of the source's CclIn into its output, and waits until its destinations freed
//! their slots (see [`p2p_exchange`]). Posting everything before waiting makes the call
//! deadlock-free whatever order the items are listed in on each rank; items to the rank
//! itself are local copies. Both ends compute the slot positions from their own counts,
//! so nothing but signals travels besides the data, in zero-copy and staged mode alike
//! (neither end knows the other's offsets, so nobody can read the other's user buffer).
//! Cost per pair with `m` bytes and slots of `s` bytes: `⌈m/s⌉·2α + 2mβ` (two copies).
//! Needs a link to every peer it exchanges with.

use super::{missing_layout, p2p_items};
use crate::templates::{p2p_exchange, p2p_peers, P2pParams, P2pPhase};
use oxccl_framework::{
    Constraints, Error, Executor, KernelArgs, KernelCtx, OpKind, Peers, PlanCtx, ResourceRequest,
};

/// The p2p send/recv executor.
pub struct P2pSendRecv;

oxccl_framework::register_executor! {
    name: "p2p",
    op: OpKind::SendRecv,
    description: "every pair at once, staged through per-destination CclIn slots",
    constraints: Constraints::ANY,
    preference: 10,
    make: || Box::new(P2pSendRecv),
}

impl Executor for P2pSendRecv {
    fn resources(&self, ctx: &PlanCtx<'_>) -> Result<ResourceRequest, Error> {
        let (sends, recvs) = ctx
            .op
            .layout()
            .and_then(|l| l.p2p())
            .ok_or_else(|| missing_layout("p2p", OpKind::SendRecv))?;
        Ok(ResourceRequest::with_peers(Peers::List(p2p_peers(
            ctx.rank, sends, recvs,
        ))))
    }

    fn kernel_run(&self, ctx: &mut KernelCtx<'_>, args: &KernelArgs) -> Result<(), Error> {
        let (sends, recvs) = p2p_items("p2p", args)?;
        let phase = P2pPhase {
            send_to: p2p_peers(ctx.rank, sends, &[]),
            recv_from: p2p_peers(ctx.rank, &[], recvs),
        };
        let p = P2pParams {
            sends,
            recvs,
            phases: std::slice::from_ref(&phase),
            input: args.input,
            output: args.output,
            elem_size: args.op.dtype.size(),
            ccl_bytes: args.ccl_bytes,
            channel: 0,
        };
        p2p_exchange(ctx, &p)
    }
}
