//! AlltoAllV put-mesh: every pair at once, in one phase, the sender writing into
//! per-source slots of the receiver's CclIn.
//!
//! The put-based twin of [`super::mesh`] and the one-phase form of
//! [`super::put_pairwise`], for put-only links (TCP, RDMA write): one phase of
//! [`p2p_put_exchange`] holds every peer, so no rank reads a peer's memory and a call
//! takes one round of signals. Cost with `m` bytes per pair and slots of `s` bytes:
//! `⌈m/s⌉·3α + 2(n−1)mβ`. Needs a full mesh.
//!
//! Preferred after [`super::mesh`], whose pulls take one signal less per round, and before
//! `pairwise`: the AlltoAllV executor of put-only links.

use crate::send_recv::{direct_p2p_resources, direct_p2p_run};
use crate::templates::p2p_put_exchange;
use oxccl_framework::{
    Constraints, Error, Executor, KernelArgs, KernelCtx, LinkNeed, OpKind, PlanCtx, ResourceRequest,
};

/// The put-mesh AlltoAllV executor.
pub struct PutMeshAlltoAllV;

oxccl_framework::register_executor! {
    name: "put-mesh",
    op: OpKind::AlltoAllV,
    description: "every pair at once in one phase, the sender writing into the receiver's CclIn slots (put-only links)",
    constraints: Constraints {
        full_mesh: true,
        links: LinkNeed::Put,
        ..Constraints::ANY
    },
    preference: 12,
    make: || Box::new(PutMeshAlltoAllV),
}

impl Executor for PutMeshAlltoAllV {
    fn resources(&self, ctx: &PlanCtx<'_>) -> Result<ResourceRequest, Error> {
        direct_p2p_resources(ctx, "put-mesh")
    }

    fn kernel_run(&self, ctx: &mut KernelCtx<'_>, args: &KernelArgs) -> Result<(), Error> {
        direct_p2p_run(ctx, args, "put-mesh", p2p_put_exchange)
    }
}
