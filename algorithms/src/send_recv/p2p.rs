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
//! Needs a link to every peer it exchanges with, and relays nothing. Constraints judge a
//! topology, not a call, so it declares `full_mesh`: a topology with a broken or missing
//! link refuses it even for a call between linked ranks, and `relay-p2p` (which sends the
//! linked pairs the same way) runs there. Selection already passed it over on such a
//! topology, as it screens the point-to-point operators with every pair exchanging.

use super::{direct_p2p_resources, direct_p2p_run};
use crate::templates::p2p_exchange;
use oxccl_framework::{
    Constraints, Error, Executor, KernelArgs, KernelCtx, OpKind, PlanCtx, ResourceRequest,
};

/// The p2p send/recv executor.
pub struct P2pSendRecv;

oxccl_framework::register_executor! {
    name: "p2p",
    op: OpKind::SendRecv,
    description: "every pair at once, staged through per-destination CclIn slots",
    constraints: Constraints { full_mesh: true, ..Constraints::ANY },
    preference: 10,
    make: || Box::new(P2pSendRecv),
}

impl Executor for P2pSendRecv {
    fn resources(&self, ctx: &PlanCtx<'_>) -> Result<ResourceRequest, Error> {
        direct_p2p_resources(ctx, "p2p")
    }

    fn kernel_run(&self, ctx: &mut KernelCtx<'_>, args: &KernelArgs) -> Result<(), Error> {
        direct_p2p_run(ctx, args, "p2p", p2p_exchange)
    }
}
