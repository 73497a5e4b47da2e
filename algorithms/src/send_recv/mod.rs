//! Send/recv executors: point-to-point sends and receives, one pair or many in one call
//! (NCCL's grouped send/recv). The `k`-th send of `a` to `b` matches the `k`-th receive of
//! `b` from `a`; each rank passes only its own items ([`VLayout::P2p`]).
//!
//! [`VLayout::P2p`]: oxccl_framework::op::VLayout::P2p

pub mod p2p;
pub mod put_p2p;
pub mod relay_p2p;

use crate::templates::{p2p_peers, P2pParams, P2pPhase};
use oxccl_framework::op::P2pItem;
use oxccl_framework::{Error, KernelArgs, KernelCtx, OpKind, Peers, PlanCtx, ResourceRequest};

/// `(sends, recvs)` of a point-to-point operator's layout, or the error `executor` reports.
pub(crate) fn p2p_items<'a>(
    executor: &str,
    args: &'a KernelArgs,
) -> Result<(&'a [P2pItem], &'a [P2pItem]), Error> {
    args.op
        .layout()
        .and_then(|l| l.p2p())
        .ok_or_else(|| missing_layout(executor, args.op.kind))
}

/// The error of an executor called without a point-to-point layout.
pub(crate) fn missing_layout(executor: &str, op: OpKind) -> Error {
    Error::BadProgram {
        executor: executor.into(),
        rank: 0,
        reason: format!("{op} called without its per-peer layout"),
    }
}

/// The request of an executor that moves every pair directly: links to every peer this
/// rank sends to or receives from.
pub(crate) fn direct_p2p_resources(
    ctx: &PlanCtx<'_>,
    executor: &str,
) -> Result<ResourceRequest, Error> {
    let (sends, recvs) = ctx
        .op
        .layout()
        .and_then(|l| l.p2p())
        .ok_or_else(|| missing_layout(executor, ctx.op.kind))?;
    Ok(ResourceRequest::with_peers(Peers::List(p2p_peers(
        ctx.rank, sends, recvs,
    ))))
}

/// Every pair at once, in one phase, through `exchange` (the pull or the put template).
pub(crate) fn direct_p2p_run(
    ctx: &mut KernelCtx<'_>,
    args: &KernelArgs,
    executor: &str,
    exchange: fn(&mut KernelCtx<'_>, &P2pParams<'_>) -> Result<(), Error>,
) -> Result<(), Error> {
    let (sends, recvs) = p2p_items(executor, args)?;
    let phase = P2pPhase {
        send_to: p2p_peers(ctx.rank, sends, &[]),
        recv_from: p2p_peers(ctx.rank, &[], recvs),
    };
    p2p_run_phases(ctx, args, executor, std::slice::from_ref(&phase), exchange)
}

/// The pairs of `args` in `phases`, through `exchange` (the pull or the put template).
pub(crate) fn p2p_run_phases(
    ctx: &mut KernelCtx<'_>,
    args: &KernelArgs,
    executor: &str,
    phases: &[P2pPhase],
    exchange: fn(&mut KernelCtx<'_>, &P2pParams<'_>) -> Result<(), Error>,
) -> Result<(), Error> {
    let (sends, recvs) = p2p_items(executor, args)?;
    let p = P2pParams::on_user_buffers(args, sends, recvs, phases);
    exchange(ctx, &p)
}
