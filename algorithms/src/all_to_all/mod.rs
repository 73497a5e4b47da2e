//! AlltoAll executors: block `s` of rank `r`'s output becomes block `r` of rank `s`'s
//! input.
//!
//! The framework's block loop hands every iteration one block per rank on both sides
//! ([`KernelArgs::blocks`] applies to input and output alike): packed CCL buffers when
//! staged, the user's buffers zero-copy. In place is refused by validation, so input and
//! output never alias. The mesh and pairwise executors pull: a rank copies its block out of
//! each peer's input, so nothing is written into a peer; relay-mesh pulls over healthy
//! links too, and writes the pieces of unlinked pairs into the relays' Scratch slots.
//!
//! [`KernelArgs::blocks`]: oxccl_framework::KernelArgs::blocks

pub mod mesh;
pub mod pairwise;
pub mod put_mesh;
pub mod relay_mesh;

use oxccl_framework::platform::Rank;
use oxccl_framework::{KernelArgs, KernelCtx};

/// On `stream`, copy block `ctx.rank` of `from`'s input into block `from` of this rank's
/// output (`from` may be the rank itself).
pub(crate) fn pull_block(
    ctx: &mut KernelCtx<'_>,
    args: &KernelArgs,
    blocks: &[(usize, usize)],
    from: Rank,
    stream: usize,
) {
    let me = ctx.rank;
    let len = blocks[me].1;
    let src = args.input.at(from, blocks[me].0, len);
    let dst = args.output.at(me, blocks[from].0, len);
    ctx.stream(stream).copy(src, dst);
}
