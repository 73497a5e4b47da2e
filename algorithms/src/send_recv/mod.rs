//! Send/recv executors: point-to-point sends and receives, one pair or many in one call
//! (NCCL's grouped send/recv). The `k`-th send of `a` to `b` matches the `k`-th receive of
//! `b` from `a`; each rank passes only its own items ([`VLayout::P2p`]).
//!
//! [`VLayout::P2p`]: oxccl_framework::op::VLayout::P2p

pub mod p2p;
pub mod put_p2p;
pub mod relay_p2p;

use oxccl_framework::op::P2pItem;
use oxccl_framework::{Error, KernelArgs, OpKind};

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
