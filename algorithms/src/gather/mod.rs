//! Gather executors: block `s` of the root's output becomes rank `s`'s input.
//!
//! The output holds one block per rank ([`KernelArgs::blocks`]), packed in CclOut when
//! staged and one user block apart zero-copy; in place the input is block `rank` of the
//! one buffer, so the root has nothing to copy for itself. Only the root's output is
//! defined afterwards.
//!
//! [`KernelArgs::blocks`]: oxccl_framework::KernelArgs::blocks

pub mod mesh;
pub mod put_mesh;
pub mod relay_mesh;
pub mod tree;

use oxccl_framework::platform::{Rank, Slice};
use oxccl_framework::{KernelArgs, KernelCtx};

/// `len` bytes of `peer`'s input, seen from `me`. In place the input is the rank's own
/// block of the one buffer, so it lies at a different offset on every rank.
pub(crate) fn peer_input(args: &KernelArgs, me: Rank, peer: Rank, len: usize) -> Slice {
    let mut at = args.input.at(peer, 0, len);
    if args.aliased {
        at.offset = at.offset + peer * args.block_stride - me * args.block_stride;
    }
    at
}

/// The root's copy of its own input into its output block, unless they are one memory.
pub(crate) fn root_places_its_block(ctx: &mut KernelCtx<'_>, args: &KernelArgs) {
    let me = ctx.rank;
    let (off, len) = args.blocks(ctx.ranks)[me];
    if !args.aliased {
        let (src, dst) = (args.input.at(me, 0, len), args.output.at(me, off, len));
        ctx.main().copy(src, dst);
    }
}
