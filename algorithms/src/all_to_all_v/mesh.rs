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
//! Needs a full mesh.
//!
//! It is the preferred AlltoAllV executor wherever every pair has a link that loads and
//! stores (point-to-point operators are chosen by preference, not by the cost model: see
//! the framework's `select::preference`), as NCCL runs an all-to-all as one group of sends
//! and receives; over put-only links `put-mesh` runs instead. On 8 in-process ranks of the
//! 2-core development host, in five tunes of AlltoAllV (`oxccl tune all-to-all-v --ranks 8
//! -b 1K -e 64M -f 8` once, and the AlltoAllV part of four `oxccl tune --all` runs with
//! the same sizes), it was within 1.05x of the fastest at every size from 1 KiB to 32 MiB
//! and the fastest at 512 KiB in all five; `put-mesh` took 1.10x to 1.15x there in three
//! of them (163.31 against 142.35 µs once), and `pairwise`, the preference before them,
//! 1.05x to 1.09x at 64 KiB and 1.08x to 1.20x at 512 KiB.

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
    preference: 15,
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
