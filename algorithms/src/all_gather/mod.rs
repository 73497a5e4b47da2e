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
pub mod hier_put_ring;
pub mod mesh;
pub mod mesh_push;
pub mod nb;
pub mod nhr;
pub mod put_mesh;
pub mod put_rhd;
pub mod put_ring;
pub mod relay_mesh;
pub mod rhd;
pub mod ring;

use oxccl_framework::{KernelArgs, KernelCtx, Mode, PlanCtx, ResourceRequest};

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

/// The request of a put-based AllGather: `request` plus, zero-copy, `slots` Scratch
/// receive slots of one block each, since a put may not write a peer's user output (an
/// iteration is then capped at the CCL buffer over the rank count, a slot at the
/// operation's count). Staged, puts land in
/// the peers' CclOut blocks and need no scratch; nothing extra on one rank.
pub(crate) fn with_slot_scratch(
    ctx: &PlanCtx<'_>,
    request: ResourceRequest,
    slots: usize,
) -> ResourceRequest {
    if ctx.mode == Mode::Staged {
        return request;
    }
    crate::reduce_scatter::with_put_scratch(ctx, request, slots)
}
