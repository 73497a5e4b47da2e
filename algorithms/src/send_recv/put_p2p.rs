//! Send/recv put-p2p: every pair of the call at once, the sender writing into
//! per-source slots of the receiver's CclIn.
//!
//! The put-based twin of [`super::p2p`], for put-only links (TCP, RDMA write): the same
//! pairs, rounds and slots, but the sender puts each piece into the receiver's CclIn and
//! the receiver copies it out locally (see [`p2p_put_exchange`]), so no rank ever reads a
//! peer's memory. A rank links only to the peers it has non-empty items with. Cost per
//! pair with `m` bytes and slots of `s` bytes: `⌈m/s⌉·3α + 2mβ` (two copies; the extra
//! α is the Ack that opens a slot before it is written). Like `p2p` it relays nothing and
//! declares `full_mesh` (see there).
//!
//! It is the preferred send/recv executor wherever every pair has a link (point-to-point
//! operators are chosen by preference, not by the cost model: see the framework's
//! `select::preference`). Both forms wait twice per round; they differ in when. Every rank
//! opens its slots first thing, so the Ack a `put-p2p` sender waits for has usually landed
//! by the time it writes, while a `p2p` sender ends each round waiting for its destination
//! to have read the slot, which it rarely has yet. That is the likely reason for what was
//! measured, not a measurement of it: on 8 in-process ranks of the 2-core development host,
//! in the full `oxccl tune` tables kept from earlier work (16 to 29 per size), `p2p` took
//! 0.998 to 1.005 times `put-p2p`'s time in the median at 1 KiB, 8 KiB, 64 KiB, 4 MiB and
//! 32 MiB, and 1.064 times at 512 KiB (slower in 23 of 29). And it runs on every link kind,
//! TCP and RDMA included, where `p2p`'s reads cannot.

use super::{direct_p2p_resources, direct_p2p_run};
use crate::templates::p2p_put_exchange;
use oxccl_framework::{
    Constraints, Error, Executor, KernelArgs, KernelCtx, LinkNeed, OpKind, PlanCtx, ResourceRequest,
};

/// The put-p2p SendRecv executor.
pub struct PutP2pSendRecv;

oxccl_framework::register_executor! {
    name: "put-p2p",
    op: OpKind::SendRecv,
    description: "every pair at once, the sender writing into the receiver's CclIn slots (put-only links)",
    constraints: Constraints {
        full_mesh: true,
        links: LinkNeed::Put,
        ..Constraints::ANY
    },
    preference: 15,
    make: || Box::new(PutP2pSendRecv),
}

impl Executor for PutP2pSendRecv {
    fn resources(&self, ctx: &PlanCtx<'_>) -> Result<ResourceRequest, Error> {
        direct_p2p_resources(ctx, "put-p2p")
    }

    fn kernel_run(&self, ctx: &mut KernelCtx<'_>, args: &KernelArgs) -> Result<(), Error> {
        direct_p2p_run(ctx, args, "put-p2p", p2p_put_exchange)
    }
}
