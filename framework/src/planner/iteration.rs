//! One loop iteration's buffers: how much an iteration takes, where its blocks lie, and
//! the staging copies around the kernel.
//!
//! Gathers and scatters move blocks: one per rank, `count` elements each, in AllGather's
//! output and ReduceScatter's input. An iteration of `c` elements starting at element
//! `first` takes `[first, first + c)` of every block. Staged, the blocks are packed into
//! the CCL buffer `c` elements apart (AllGather: Input to CclIn, kernel gathers into
//! CclOut's `n` blocks, `n` copies to the Output blocks; ReduceScatter: `n` copies of the
//! input blocks into CclIn, kernel reduces into CclOut, one copy out), so `c` is at most
//! the CCL buffer over the rank count, aligned down to 128 bytes as HCCL does. Zero-copy,
//! the kernel sees the user's buffer with the blocks one user block apart
//! ([`KernelArgs::block_stride`]). In place (NCCL's convention) the one buffer is the
//! larger side: AllGather's input is block `rank` of it, ReduceScatter's output is block
//! `rank` of it.

use crate::error::Error;
use crate::executor::{BufRange, KernelArgs, Mode, PlanCtx, ResourceRequest};
use crate::op::{OpKind, OpParam};
use oxccl_platform::{Buf, RankProgram, Slice};

/// The first element of every loop iteration: one iteration per `per_loop` elements, and
/// at least one for the operators that run without elements of their own (a barrier; a
/// point-to-point rank that may relay others' transfers, see [`OpParam::has_work`]).
pub(super) fn iteration_starts(
    op: &OpParam,
    per_loop: usize,
) -> impl ExactSizeIterator<Item = usize> {
    let end = if op.kind == OpKind::Barrier || op.kind.is_p2p() {
        op.count.max(1)
    } else {
        op.count
    };
    (0..end).step_by(per_loop)
}

/// Which sides of an operator hold one block per rank (input, output), for the operators
/// the loop splits and stages; `None` for the vector operators and Barrier, which run in
/// one iteration on the user's buffers in either mode: their executors move data through
/// the CCL buffers themselves in [`Mode::Staged`], where peers cannot reach user buffers
/// (see [`crate::op::VLayout`]).
pub(crate) fn block_sides(kind: OpKind) -> Option<(bool, bool)> {
    match kind {
        OpKind::AllReduce | OpKind::Broadcast | OpKind::Reduce => Some((false, false)),
        OpKind::AllGather | OpKind::Gather => Some((false, true)),
        OpKind::ReduceScatter | OpKind::Scatter => Some((true, false)),
        OpKind::AlltoAll => Some((true, true)),
        OpKind::AllGatherV
        | OpKind::ReduceScatterV
        | OpKind::AlltoAllV
        | OpKind::SendRecv
        | OpKind::Barrier => None,
    }
}

/// Byte offsets of the user's input and output data within the bound buffers (see
/// [`OpParam::in_place_offsets`](crate::op::OpParam::in_place_offsets)).
fn user_bases(plan: &PlanCtx<'_>) -> (usize, usize) {
    match plan.in_place {
        true => plan.op.in_place_offsets(plan.rank),
        false => (0, 0),
    }
}

/// Elements per loop iteration.
pub(super) fn loop_count(
    name: &'static str,
    plan: &PlanCtx<'_>,
    req: &ResourceRequest,
) -> Result<usize, Error> {
    let op = plan.op;
    let Some((in_blocks, out_blocks)) = block_sides(op.kind) else {
        return Ok(op.count.max(1));
    };
    let es = op.dtype.size();
    let buffer_cap = match plan.mode {
        Mode::Staged if in_blocks || out_blocks => {
            // HCCL: the CCL buffer over the rank count, aligned down to 128 bytes.
            let per_rank = plan.ccl_bytes / plan.ranks;
            let aligned = per_rank / 128 * 128;
            (if aligned > 0 { aligned } else { per_rank }) / es
        }
        Mode::Staged => plan.ccl_bytes / es,
        Mode::Direct => usize::MAX,
    };
    let cap = req.max_count_per_loop.unwrap_or(usize::MAX).min(buffer_cap);
    if cap == 0 {
        return Err(Error::BadProgram {
            executor: name.into(),
            rank: plan.rank,
            reason: "resource request or CCL buffer size allows 0 elements per loop".into(),
        });
    }
    Ok(cap)
}

/// Staged: copy this iteration's user input (one slice per input block) into CclIn.
pub(super) fn stage_in(
    program: &mut RankProgram,
    plan: &PlanCtx<'_>,
    args: &KernelArgs,
    first: usize,
) {
    let (in_blocks, _) = block_sides(plan.op.kind).unwrap_or((false, false));
    let (base, _) = user_bases(plan);
    for_blocks(plan, args, first, in_blocks, |staged, user| {
        let from = Slice::new(plan.rank, Buf::Input, base + user, staged.1);
        let to = args.input.at(plan.rank, staged.0, staged.1);
        program.streams[0].copy(from, to);
    });
}

/// Staged: copy this iteration's result (one slice per output block) out of CclOut;
/// nothing into an output the operator leaves alone on this rank (a non-root's of Gather
/// and Reduce): the executor wrote nothing for it there, and what CclOut holds (zeros,
/// or an earlier call's data) must not reach the user's buffer.
pub(super) fn stage_out(
    program: &mut RankProgram,
    plan: &PlanCtx<'_>,
    args: &KernelArgs,
    first: usize,
) {
    if plan.op.unused_buffer(plan.rank) == Some(Buf::Output) {
        return;
    }
    let (_, out_blocks) = block_sides(plan.op.kind).unwrap_or((false, false));
    let (_, base) = user_bases(plan);
    for_blocks(plan, args, first, out_blocks, |staged, user| {
        let from = args.output.at(plan.rank, staged.0, staged.1);
        let to = Slice::new(plan.rank, Buf::Output, base + user, staged.1);
        program.streams[0].copy(from, to);
    });
}

/// Whether bytes `[offset, offset + len)` of a user buffer (`buf`, Input or Output) lie
/// inside elements `first .. first + count` of one block of that side: where the
/// iteration of those elements keeps its user data (the layout [`iteration_args`] and
/// [`for_blocks`] give: blocks `op.count` elements apart from the side's base `bases`,
/// NCCL's in-place offsets when in place). Checked: what would wrap is not inside.
pub(crate) fn inside_iteration(
    op: &OpParam,
    ranks: usize,
    bases: (usize, usize),
    (buf, offset, len): (Buf, usize, usize),
    (first, count): (usize, usize),
) -> bool {
    let Some((in_blocks, out_blocks)) = block_sides(op.kind) else {
        return false;
    };
    let es = op.dtype.size();
    let (base, blocked) = match buf {
        Buf::Input => (bases.0, in_blocks),
        _ => (bases.1, out_blocks),
    };
    let (Some(block), Some(relative)) = (op.count.checked_mul(es), offset.checked_sub(base)) else {
        return false;
    };
    let (index, within) = match (blocked, block) {
        (_, 0) => return false,
        (true, _) => (relative / block, relative % block),
        (false, _) => (0, relative),
    };
    let lo = first.checked_mul(es);
    let hi = first.checked_add(count).and_then(|end| end.checked_mul(es));
    let end = within.checked_add(len);
    match (lo, hi, end) {
        (Some(lo), Some(hi), Some(end)) => index < ranks && within >= lo && end <= hi,
        _ => false,
    }
}

/// Call `f((staged offset, len), user offset)` for each block of one side of the
/// iteration (one block when the side has none).
fn for_blocks(
    plan: &PlanCtx<'_>,
    args: &KernelArgs,
    first: usize,
    blocked: bool,
    mut f: impl FnMut((usize, usize), usize),
) {
    let es = plan.op.dtype.size();
    let blocks = if blocked { plan.ranks } else { 1 };
    for (r, staged) in args.blocks(blocks).into_iter().enumerate() {
        f(staged, (r * plan.op.count + first) * es);
    }
}

pub(super) fn iteration_args(
    plan: &PlanCtx<'_>,
    first: usize,
    count: usize,
    iteration: usize,
) -> KernelArgs {
    let es = plan.op.dtype.size();
    let n = plan.ranks;
    let (in_base, out_base) = user_bases(plan);
    // Bytes a side spans: one block, or `n` blocks `stride` apart.
    let span = |blocked: bool, stride: usize| match blocked {
        true => (n - 1) * stride + count * es,
        false => count * es,
    };
    let range = |buf, offset, len| BufRange { buf, offset, len };
    let (input, output, block_stride) = match (block_sides(plan.op.kind), plan.mode) {
        (Some((ib, ob)), Mode::Staged) => {
            let stride = count * es;
            (
                range(Buf::CclIn, 0, span(ib, stride)),
                range(Buf::CclOut, 0, span(ob, stride)),
                stride,
            )
        }
        (Some((ib, ob)), Mode::Direct) => {
            let stride = if ib || ob {
                plan.op.count * es
            } else {
                count * es
            };
            (
                range(Buf::Input, in_base + first * es, span(ib, stride)),
                range(Buf::Output, out_base + first * es, span(ob, stride)),
                stride,
            )
        }
        (None, _) => {
            // The whole operation on the user's buffers.
            let (in_count, out_count) = plan.op.buffer_counts(plan.rank, n);
            (
                range(Buf::Input, in_base, in_count * es),
                range(Buf::Output, out_base, out_count * es),
                count * es,
            )
        }
    };
    let on_user_buffers = plan.mode == Mode::Direct || block_sides(plan.op.kind).is_none();
    KernelArgs {
        op: plan.op.with_count(count),
        input,
        output,
        first_element: first,
        iteration,
        last: first.saturating_add(count) >= plan.op.count,
        aliased: plan.in_place && on_user_buffers,
        mode: plan.mode,
        block_stride,
        ccl_bytes: plan.ccl_bytes,
    }
}
