//! AllReduce executors.

pub mod double_ring;
pub mod hier_levels;
pub mod hier_pipelined;
pub mod hier_put_ring;
pub mod mesh;
pub mod mesh_push;
pub mod nb;
pub mod nhr;
pub mod one_shot;
pub mod put_mesh;
pub mod put_rd;
pub mod put_rhd;
pub mod put_ring;
pub mod relay_mesh;
pub mod relay_mesh_single;
pub mod rhd;
pub mod ring;

use oxccl_framework::{PlanCtx, ResourceRequest};

/// The request of a put-based AllReduce: `request` plus Scratch for `slots` receive slots
/// of one chunk (an iteration over the rank count, rounded up). An iteration is capped at
/// one CCL buffer, the staged loop's own cap, so zero-copy needs no more scratch than
/// staged; a slot is sized by the operation's count when that is smaller.
pub(crate) fn with_chunk_slots(
    ctx: &PlanCtx<'_>,
    request: ResourceRequest,
    slots: usize,
) -> ResourceRequest {
    let es = ctx.op.dtype.size();
    let cap = (ctx.ccl_bytes / es).max(1);
    ResourceRequest {
        scratch_bytes: slots * cap.min(ctx.op.count).div_ceil(ctx.ranks) * es,
        max_count_per_loop: Some(cap),
        ..request
    }
}
