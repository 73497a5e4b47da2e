//! AlltoAllV put-mesh: every pair at once, in one phase, the sender writing into
//! per-source slots of the receiver's CclIn.
//!
//! The put-based twin of [`super::mesh`] and the one-phase form of
//! [`super::put_pairwise`], for put-only links (TCP, RDMA write): one phase of
//! [`p2p_put_exchange`] holds every peer, so no rank reads a peer's memory and a call
//! takes one round of signals. Cost with `m` bytes per pair and slots of `s` bytes:
//! `⌈m/s⌉·3α + 2(n−1)mβ`. Needs a full mesh.
//!
//! It is the preferred AlltoAllV executor wherever every pair has a link, as `put-p2p` is
//! for send/recv (point-to-point operators are chosen by preference, not by the cost
//! model: see the framework's `select::preference`), and as NCCL runs an all-to-all as one
//! group of sends and receives. On 8 in-process ranks of the 2-core development host
//! (`oxccl tune all-to-all-v --ranks 8 -b 1K -e 64M -f 8`) it was within 1.02x of the
//! fastest at every size, where `pairwise` took 1.09x at 64 KiB and 4 MiB and 1.17x at
//! 512 KiB (60.68 against 65.93 µs, 150.16 against 171.65, 2820.82 against 3071.37).

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
    preference: 15,
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
