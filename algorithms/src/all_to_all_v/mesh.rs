//! AlltoAllV mesh: every pair at once, in one phase, through per-destination CclIn slots.
//!
//! The one-phase form of [`super::pairwise`]: one phase of the [`p2p_exchange`] template
//! holds every peer, so each round stages a slot-full for every destination, signals them
//! all, pulls every source's piece and waits for its destinations to free their slots.
//! A rank talks to all its peers at once, so a call takes one round of signals where
//! pairwise takes `n - 1` in a row: what decides a small call. Empty pairs are skipped
//! without a signal; the own block is a local copy. Cost with `m` bytes per pair and slots
//! of `s` bytes: `⌈m/s⌉·2α + 2(n−1)mβ`, the links all busy at once (on a network that
//! shares a port among its peers, pairwise keeps them from crowding one receiver).
//! Needs a full mesh. Preferred after `put-mesh` and before `pairwise`: in the tune that
//! set those preferences (see [`super::put_mesh`]) it was within 1.05x of the fastest at
//! every size.

use crate::send_recv::{direct_p2p_resources, direct_p2p_run};
use crate::templates::p2p_exchange;
use oxccl_framework::{
    Constraints, Error, Executor, KernelArgs, KernelCtx, OpKind, PlanCtx, ResourceRequest,
};

/// The mesh AlltoAllV executor.
pub struct MeshAlltoAllV;

oxccl_framework::register_executor! {
    name: "mesh",
    op: OpKind::AlltoAllV,
    description: "every pair at once in one phase, staged through per-destination CclIn slots",
    constraints: Constraints { full_mesh: true, ..Constraints::ANY },
    preference: 12,
    make: || Box::new(MeshAlltoAllV),
}

impl Executor for MeshAlltoAllV {
    fn resources(&self, ctx: &PlanCtx<'_>) -> Result<ResourceRequest, Error> {
        direct_p2p_resources(ctx, "mesh")
    }

    fn kernel_run(&self, ctx: &mut KernelCtx<'_>, args: &KernelArgs) -> Result<(), Error> {
        direct_p2p_run(ctx, args, "mesh", p2p_exchange)
    }
}
