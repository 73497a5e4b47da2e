//! The orchestration loop: from a resource request to one rank's program.
//!
//! HCCL's eager loop, as data. In [`Mode::Staged`] every iteration copies a buffer-full of
//! user input into CclIn, lets the executor append its kernel from CclIn to CclOut, and
//! copies CclOut to the user's output; the loop repeats until the op is done. In
//! [`Mode::Direct`] the kernel runs on the user's buffers, split into iterations only when
//! the executor caps its per-loop count. How an iteration's buffers are laid out is
//! [`super::iteration`]'s business.

use super::iteration::{block_sides, iteration_args, iteration_starts, loop_count};
use super::iteration::{stage_in, stage_out};
use super::links::{grant_links, validate_program};
use super::loops::{Iterations, LoopMark, Loops};
use crate::error::Error;
use crate::executor::{
    check_task_count, Executor, KernelCtx, Memo, Mode, PlanCtx, ResourceRequest,
};
use oxccl_platform::{NotifyLayout, RankProgram};

/// Build `plan.rank`'s program for the whole operation from its resource request `req`
/// (every iteration of the loop, or the sample `which` names), with where each planned
/// iteration lies in it.
pub fn plan_program(
    executor_name: &'static str,
    executor: &dyn Executor,
    plan: &PlanCtx<'_>,
    req: &ResourceRequest,
    layout: NotifyLayout,
    which: Iterations,
) -> Result<(RankProgram, Loops), Error> {
    req.check(executor_name, plan.rank)?;
    let links = grant_links(executor_name, plan, req)?;
    let mut program = RankProgram::new(plan.rank, 1 + req.slave_streams);
    let op = plan.op;
    let per_loop = loop_count(executor_name, plan, req)?;
    // Vector operators and Barrier stage by themselves (see `block_sides`).
    let staged_by_loop = plan.mode == Mode::Staged && block_sides(op.kind).is_some();
    let iterations = op.count.div_ceil(per_loop);
    check_task_count(executor_name, plan.rank, Some(iterations))?;
    let mut loops = Loops {
        per_loop,
        // Grown as planned: a sampled plan keeps 3 marks of however many iterations.
        marks: Vec::new(),
    };
    let total = iteration_starts(op, per_loop).len();
    let mut memo = Memo::default();
    for (iteration, first) in iteration_starts(op, per_loop).enumerate() {
        let Some(repeats) = which.repeats(iteration, total) else {
            continue;
        };
        let count = per_loop.min(op.count - first);
        let args = iteration_args(plan, first, count, iteration);
        if staged_by_loop {
            stage_in(&mut program, plan, &args, first);
        }
        let mut ctx = KernelCtx {
            rank: plan.rank,
            ranks: plan.ranks,
            topology: plan.topology,
            executor: executor_name,
            program: &mut program,
            links: &links,
            layout,
            slaves: req.slave_streams,
            plan: &req.plan,
            memo: &mut memo,
        };
        executor.kernel_run(&mut ctx, &args)?;
        if staged_by_loop {
            stage_out(&mut program, plan, &args, first);
        }
        // Iterations are alike: the first one's tasks times the iterations foretell the
        // program's size, so an op too large is refused before it is built.
        let tasks = program.task_count();
        let foretold = if iteration == 0 {
            tasks.checked_mul(iterations)
        } else {
            Some(tasks)
        };
        check_task_count(executor_name, plan.rank, foretold)?;
        loops.marks.push(LoopMark {
            first,
            count,
            repeats,
            ends: program.streams.iter().map(|s| s.tasks.len()).collect(),
        });
    }
    let notifies = layout.table_len(req.local_notify_count());
    validate_program(executor_name, plan, &program, &links, notifies as u32)?;
    Ok((program, loops))
}
