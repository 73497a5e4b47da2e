//! AllGather executors: rank `r`'s output block `s` becomes rank `s`'s input.
//!
//! Both start by placing the rank's own input into its block of the output (nothing to do
//! in place, where the input already is that block), then gather the other blocks from
//! the peers' outputs. The blocks are described by [`KernelArgs::blocks`], so the same
//! code runs on packed CCL buffers (staged) and on the user's buffer (zero-copy).
//!
//! [`KernelArgs::blocks`]: oxccl_framework::KernelArgs::blocks

pub mod double_ring;
pub mod hier_levels;
pub mod mesh;
pub mod nb;
pub mod nhr;
pub mod relay_mesh;
pub mod rhd;
pub mod ring;

use oxccl_framework::{KernelArgs, KernelCtx};

/// Copy this rank's input into its own output block, unless they are the same memory.
pub(crate) fn place_own_block(
    ctx: &mut KernelCtx<'_>,
    args: &KernelArgs,
    blocks: &[(usize, usize)],
) {
    let me = ctx.rank;
    let (offset, len) = blocks[me];
    if !args.aliased {
        let (src, dst) = (args.input.at(me, 0, len), args.output.at(me, offset, len));
        ctx.main().copy(src, dst);
    }
}
