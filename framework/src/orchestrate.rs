//! The orchestration loop: from a selected executor to one rank's program.
//!
//! HCCL's eager loop, as data. In [`Mode::Staged`] every iteration copies a buffer-full of
//! user input into CclIn, lets the executor append its kernel from CclIn to CclOut, and
//! copies CclOut to the user's output; the loop repeats until the op is done. In
//! [`Mode::Direct`] the kernel runs on the user's buffers, split into iterations only when
//! the executor caps its per-loop count. A Close exchange with every linked peer ends the
//! program (see [`LinkSignal::Close`](oxccl_platform::LinkSignal::Close)). Afterwards the program is checked against the
//! links the executor was granted, so a program never reaches a device with a task over a
//! link that does not exist.

use crate::error::Error;
use crate::executor::{
    BufRange, Executor, KernelArgs, KernelCtx, Mode, Peers, PlanCtx, ResourceRequest,
};
use crate::op::OpKind;
use oxccl_platform::{Buf, Link, LinkKind, NotifyLayout, RankProgram, Slice, Task};

/// Build `plan.rank`'s program for the whole operation.
pub fn build_program(
    executor_name: &'static str,
    executor: &dyn Executor,
    plan: &PlanCtx<'_>,
    req: &ResourceRequest,
    layout: NotifyLayout,
) -> Result<RankProgram, Error> {
    let links = grant_links(executor_name, plan, req)?;
    let mut program = RankProgram::new(plan.rank, 1 + req.slave_streams);
    let op = plan.op;
    let es = op.dtype.size();
    let per_loop = loop_count(executor_name, plan, req)?;
    let mut first = 0;
    while first < op.count {
        let count = per_loop.min(op.count - first);
        let args = iteration_args(plan, first, count, first / per_loop);
        if plan.mode == Mode::Staged {
            let (from, to) = (
                Slice::new(plan.rank, Buf::Input, first * es, count * es),
                args.input.at(plan.rank, 0, count * es),
            );
            program.streams[0].copy(from, to);
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
        if plan.mode == Mode::Staged {
            let (from, to) = (
                args.output.at(plan.rank, 0, count * es),
                Slice::new(plan.rank, Buf::Output, first * es, count * es),
            );
            program.streams[0].copy(from, to);
        }
        first += count;
    }
    if op.count > 0 {
        close_links(&mut program, plan.rank, &links, layout);
    }
    let notifies = layout.table_len(2 * req.slave_streams + req.local_notifies);
    validate_program(executor_name, plan, &program, &links, notifies as u32)?;
    Ok(program)
}

/// End the program with a Close exchange with every linked peer, on the main stream: after
/// it no peer touches this rank's buffers and every notify this rank posted was consumed,
/// so the next operation may use any executor.
fn close_links(
    program: &mut RankProgram,
    rank: usize,
    links: &[Option<LinkKind>],
    layout: NotifyLayout,
) {
    let peers: Vec<Link> = links
        .iter()
        .enumerate()
        .filter_map(|(peer, kind)| kind.map(|k| Link::new(rank, peer, k, 0, layout)))
        .collect();
    let main = &mut program.streams[0];
    peers.iter().for_each(|l| l.tx_close(main));
    peers.iter().for_each(|l| l.rx_close(main));
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

/// Elements per loop iteration.
fn loop_count(
    name: &'static str,
    plan: &PlanCtx<'_>,
    req: &ResourceRequest,
) -> Result<usize, Error> {
    let op = plan.op;
    if !matches!(
        op.kind,
        OpKind::AllReduce | OpKind::Broadcast | OpKind::Reduce
    ) {
        // Gathers and scatters need strided staging; until then they run in one iteration
        // on user buffers only.
        if plan.mode == Mode::Staged {
            return Err(Error::Unsupported {
                executor: name.into(),
                op: op.kind,
                ranks: plan.ranks,
                reason: "staged orchestration of this operator is not available; enable OXCCL_ZERO_COPY on a device that supports it".into(),
            });
        }
        return Ok(op.count.max(1));
    }
    let buffer_cap = match plan.mode {
        Mode::Staged => plan.ccl_bytes / op.dtype.size(),
        Mode::Direct => usize::MAX,
    };
    let cap = req.max_count_per_loop.unwrap_or(usize::MAX).min(buffer_cap);
    if cap == 0 {
        return Err(Error::BadProgram {
            executor: name.into(),
            rank: plan.rank,
            reason: "resource request allows 0 elements per loop".into(),
        });
    }
    Ok(cap)
}

fn iteration_args(plan: &PlanCtx<'_>, first: usize, count: usize, iteration: usize) -> KernelArgs {
    let es = plan.op.dtype.size();
    let (in_count, out_count) = plan.op.kind.buffer_counts(count, plan.ranks);
    let (input, output) = match plan.mode {
        Mode::Staged => (
            BufRange {
                buf: Buf::CclIn,
                offset: 0,
                len: in_count * es,
            },
            BufRange {
                buf: Buf::CclOut,
                offset: 0,
                len: out_count * es,
            },
        ),
        Mode::Direct => (
            BufRange {
                buf: Buf::Input,
                offset: first * es,
                len: in_count * es,
            },
            BufRange {
                buf: Buf::Output,
                offset: first * es,
                len: out_count * es,
            },
        ),
    };
    KernelArgs {
        op: crate::op::OpParam { count, ..*plan.op },
        input,
        output,
        first_element: first,
        iteration,
        aliased: plan.in_place && plan.mode == Mode::Direct,
        mode: plan.mode,
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
