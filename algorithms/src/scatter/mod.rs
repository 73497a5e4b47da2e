//! Scatter executors: rank `r`'s output becomes block `r` of the root's input.
//!
//! The input holds one block per rank ([`KernelArgs::blocks`]), packed in CclIn when
//! staged and one user block apart zero-copy; in place the output is block `rank` of the
//! one buffer, so the root has nothing to copy for itself. Only the root's input is read.
//!
//! [`KernelArgs::blocks`]: oxccl_framework::KernelArgs::blocks

pub mod mesh;
pub mod put_mesh;
pub mod relay_mesh;
pub mod tree;

use oxccl_framework::{KernelArgs, KernelCtx};

/// The root's copy of its own block to its output, unless they are one memory.
pub(crate) fn root_keeps_its_block(ctx: &mut KernelCtx<'_>, args: &KernelArgs) {
    let me = ctx.rank;
    let (off, len) = args.blocks(ctx.ranks)[me];
    if !args.aliased {
        let (src, dst) = (args.input.at(me, off, len), args.output.at(me, 0, len));
        ctx.main().copy(src, dst);
    }
}
