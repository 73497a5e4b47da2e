//! The orchestration loop: from a selected executor to one rank's program.
//!
//! HCCL's eager loop, as data. In [`Mode::Staged`] every iteration copies a buffer-full of
//! user input into CclIn, lets the executor append its kernel from CclIn to CclOut, and
//! copies CclOut to the user's output; the loop repeats until the op is done. In
//! [`Mode::Direct`] the kernel runs on the user's buffers, split into iterations only when
//! the executor caps its per-loop count.
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
//!
//! A Close exchange with every linked peer ends the program (see
//! [`LinkSignal::Close`](oxccl_platform::LinkSignal::Close)). Afterwards the program is
//! checked against the links the executor was granted, so a program never reaches a
//! device with a task over a link that does not exist.

use crate::error::Error;
use crate::executor::{
    BufRange, Executor, KernelArgs, KernelCtx, Mode, Peers, PlanCtx, ResourceRequest,
};
use crate::limits::MAX_TASKS;
use crate::op::{OpKind, OpParam};
use oxccl_platform::{Buf, Link, LinkKind, NotifyLayout, RankProgram, Slice, Task};

/// Build `plan.rank`'s program for the whole operation.
pub fn build_program(
    executor_name: &'static str,
    executor: &dyn Executor,
    plan: &PlanCtx<'_>,
    req: &ResourceRequest,
    layout: NotifyLayout,
) -> Result<RankProgram, Error> {
    req.check(executor_name, plan.rank)?;
    let links = grant_links(executor_name, plan, req)?;
    let mut program = RankProgram::new(plan.rank, 1 + req.slave_streams);
    let op = plan.op;
    let per_loop = loop_count(executor_name, plan, req)?;
    // Vector operators and Barrier stage by themselves (see `block_sides`).
    let staged_by_loop = plan.mode == Mode::Staged && block_sides(op.kind).is_some();
    let iterations = op.count.div_ceil(per_loop);
    check_task_count(executor_name, plan.rank, Some(iterations))?;
    for (iteration, first) in iteration_starts(op, per_loop).enumerate() {
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
    }
    if op.has_work() {
        close_links(&mut program, plan.rank, &links, layout);
    }
    let notifies = layout.table_len(req.local_notify_count());
    validate_program(executor_name, plan, &program, &links, notifies as u32)?;
    Ok(program)
}

/// Refuse a program of `tasks` tasks (`None`: the count overflowed) beyond
/// [`MAX_TASKS`]: the op is too large for the CCL buffers it stages through.
pub(crate) fn check_task_count(
    executor: &str,
    rank: usize,
    tasks: Option<usize>,
) -> Result<(), Error> {
    match tasks {
        Some(t) if t <= MAX_TASKS => Ok(()),
        _ => Err(Error::TooManyTasks {
            executor: executor.to_string(),
            rank,
            limit: MAX_TASKS,
        }),
    }
}

/// The first element of every loop iteration: one iteration per `per_loop` elements, and
/// at least one for the operators that run without elements of their own (a barrier; a
/// point-to-point rank that may relay others' transfers, see [`OpParam::has_work`]).
fn iteration_starts(op: &OpParam, per_loop: usize) -> impl Iterator<Item = usize> {
    let end = if op.kind == OpKind::Barrier || op.kind.is_p2p() {
        op.count.max(1)
    } else {
        op.count
    };
    (0..end).step_by(per_loop)
}

/// End the program with a two-phase Close exchange with every linked peer, on the main
/// stream: Close on link channel 0 to every peer, wait for every peer's, then the same on
/// channel 1. Afterwards no peer touches this rank's buffers and every notify this rank
/// posted in the operation was consumed, so the next operation may use any executor.
///
/// Why two phases: when this rank has seen a peer's phase-1 Close, the peer's kernel is
/// done, so every kernel notify this rank posted to it was consumed; but the peer may not
/// have consumed this rank's own Close yet, and an operation whose next post to that peer
/// is again a Close would post it twice (a lost wakeup). Phase 2 closes that gap: this
/// rank finishes only after the peer's phase-2 post, which follows the peer's consumption
/// of every phase-1 Close; and this rank's phase-2 Close of the next operation follows the
/// peer's phase-1 Close of that operation, which follows the peer's consumption of this
/// rank's phase-2 Close. Close is the framework's own signal, never used by executors.
fn close_links(
    program: &mut RankProgram,
    rank: usize,
    links: &[Option<LinkKind>],
    layout: NotifyLayout,
) {
    for channel in 0..2 {
        let peers: Vec<Link> = links
            .iter()
            .enumerate()
            .filter_map(|(peer, kind)| kind.map(|k| Link::new(rank, peer, k, channel, layout)))
            .collect();
        let main = &mut program.streams[0];
        peers.iter().for_each(|l| l.tx_close(main));
        peers.iter().for_each(|l| l.rx_close(main));
    }
}

/// The link kind to every peer this rank may use (`None`: not requested or broken).
fn grant_links(
    name: &'static str,
    plan: &PlanCtx<'_>,
    req: &ResourceRequest,
) -> Result<Vec<Option<LinkKind>>, Error> {
    let peers: Vec<usize> = match &req.peers {
        Peers::All => (0..plan.ranks).filter(|&p| p != plan.rank).collect(),
        Peers::List(list) => list.clone(),
    };
    let mut links = vec![None; plan.ranks];
    for peer in peers {
        let no_link = |why| Error::NoLink {
            executor: name.to_string(),
            rank: plan.rank,
            peer,
            why,
        };
        if peer >= plan.ranks || peer == plan.rank {
            return Err(no_link("is not a peer of this rank"));
        }
        links[peer] = Some(
            plan.topology
                .link_kind(plan.rank, peer)
                .ok_or_else(|| no_link(plan.topology.link_status(plan.rank, peer).refusal()))?,
        );
    }
    Ok(links)
}

/// Which sides of an operator hold one block per rank (input, output), for the operators
/// the loop splits and stages; `None` for the vector operators and Barrier, which run in
/// one iteration on the user's buffers in either mode: their executors move data through
/// the CCL buffers themselves in [`Mode::Staged`], where peers cannot reach user buffers
/// (see [`crate::op::VLayout`]).
fn block_sides(kind: OpKind) -> Option<(bool, bool)> {
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
fn loop_count(
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
fn stage_in(program: &mut RankProgram, plan: &PlanCtx<'_>, args: &KernelArgs, first: usize) {
    let (in_blocks, _) = block_sides(plan.op.kind).unwrap_or((false, false));
    let (base, _) = user_bases(plan);
    for_blocks(plan, args, first, in_blocks, |staged, user| {
        let from = Slice::new(plan.rank, Buf::Input, base + user, staged.1);
        let to = args.input.at(plan.rank, staged.0, staged.1);
        program.streams[0].copy(from, to);
    });
}

/// Staged: copy this iteration's result (one slice per output block) out of CclOut.
fn stage_out(program: &mut RankProgram, plan: &PlanCtx<'_>, args: &KernelArgs, first: usize) {
    let (_, out_blocks) = block_sides(plan.op.kind).unwrap_or((false, false));
    let (_, base) = user_bases(plan);
    for_blocks(plan, args, first, out_blocks, |staged, user| {
        let from = args.output.at(plan.rank, staged.0, staged.1);
        let to = Slice::new(plan.rank, Buf::Output, base + user, staged.1);
        program.streams[0].copy(from, to);
    });
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

fn iteration_args(plan: &PlanCtx<'_>, first: usize, count: usize, iteration: usize) -> KernelArgs {
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
        aliased: plan.in_place && on_user_buffers,
        mode: plan.mode,
        block_stride,
        ccl_bytes: plan.ccl_bytes,
    }
}

/// Every remote access goes over a granted link, every wait is local, every notify exists,
/// and staged programs touch no other rank's user buffers.
fn validate_program(
    name: &'static str,
    plan: &PlanCtx<'_>,
    program: &RankProgram,
    links: &[Option<LinkKind>],
    notifies: u32,
) -> Result<(), Error> {
    let me = plan.rank;
    let bad = |s: usize, t: usize, reason: String| Error::BadProgram {
        executor: name.into(),
        rank: me,
        reason: format!("stream {s} task {t}: {reason}"),
    };
    let reachable = |r: usize| r == me || links.get(r).is_some_and(Option::is_some);
    crate::link_access::refuse_put_only_violation(name, plan.topology, program)?;
    for (s, stream) in program.streams.iter().enumerate() {
        for (t, task) in stream.tasks.iter().enumerate() {
            for slice in task.reads().iter().chain(task.writes()) {
                if !reachable(slice.rank) {
                    return Err(bad(
                        s,
                        t,
                        format!("{slice} is on a rank without a granted link"),
                    ));
                }
                if slice.rank != me && slice.buf.is_user() && plan.mode == Mode::Staged {
                    return Err(bad(
                        s,
                        t,
                        format!(
                            "{slice} is another rank's user buffer, which staged mode cannot reach"
                        ),
                    ));
                }
            }
            match task {
                Task::Wait { notify } if notify.rank != me => {
                    return Err(bad(s, t, format!("waits on {notify:?} of another rank")))
                }
                Task::Post { notify } | Task::Wait { notify } if !reachable(notify.rank) => {
                    return Err(bad(
                        s,
                        t,
                        format!("posts {notify:?} on a rank without a granted link"),
                    ))
                }
                Task::Post { notify } | Task::Wait { notify } if notify.index >= notifies => {
                    return Err(bad(
                        s,
                        t,
                        format!("uses notify {notify:?}, beyond the {notifies} requested"),
                    ))
                }
                _ => {}
            }
        }
    }
    Ok(())
}
