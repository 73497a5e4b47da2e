//! Send/recv put-p2p: every pair of the call at once, the sender writing into
//! per-source slots of the receiver's CclIn.
//!
//! The put-based twin of [`super::p2p`], for put-only links (TCP, RDMA write): the same
//! pairs, rounds and slots, but the sender puts each piece into the receiver's CclIn and
//! the receiver copies it out locally (see [`p2p_put_exchange`]), so no rank ever reads a
//! peer's memory. A rank links only to the peers it has non-empty items with. Cost per
//! pair with `m` bytes and slots of `s` bytes: `⌈m/s⌉·3α + 2mβ` (two copies; the extra
//! α is the Ack that opens a slot before it is written).

use super::{missing_layout, p2p_items};
use crate::templates::{p2p_peers, p2p_put_exchange, P2pParams, P2pPhase};
use oxccl_framework::{
    Constraints, Error, Executor, KernelArgs, KernelCtx, LinkNeed, OpKind, Peers, PlanCtx,
    ResourceRequest,
};

/// The put-p2p SendRecv executor.
pub struct PutP2pSendRecv;

oxccl_framework::register_executor! {
    name: "put-p2p",
    op: OpKind::SendRecv,
    description: "every pair at once, the sender writing into the receiver's CclIn slots (put-only links)",
    constraints: Constraints { links: LinkNeed::Put, ..Constraints::ANY },
    preference: 5,
    make: || Box::new(PutP2pSendRecv),
}

impl Executor for PutP2pSendRecv {
    fn resources(&self, ctx: &PlanCtx<'_>) -> Result<ResourceRequest, Error> {
        let (sends, recvs) = ctx
            .op
            .layout()
            .and_then(|l| l.p2p())
            .ok_or_else(|| missing_layout("put-p2p", OpKind::SendRecv))?;
        Ok(ResourceRequest::with_peers(Peers::List(p2p_peers(
            ctx.rank, sends, recvs,
        ))))
    }

    fn kernel_run(&self, ctx: &mut KernelCtx<'_>, args: &KernelArgs) -> Result<(), Error> {
        let (sends, recvs) = p2p_items("put-p2p", args)?;
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
        p2p_put_exchange(ctx, &p)
    }
}
