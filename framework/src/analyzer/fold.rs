//! Folding a long loop: prove a window of congruent iterations for all of them.
//!
//! A 1 GiB operation through 32 MiB CCL buffers is 32 iterations of the orchestration
//! loop, each the same tasks on the same CCL buffers, scratch and notifies, over the next
//! elements of the user's buffers. Proving all 32 costs 32 times one. This pass finds such
//! a loop and builds a *window*, a recording of a few of its iterations, that the checks
//! prove instead.
//!
//! ## The shape
//!
//! Iterations are read from the planner's marks ([`crate::planner::Loops`]). A rank's
//! program is `F S_1 S_2 ... S_q L`: a prefix `F` of `f` iterations (0 or 1: some
//! executors do something different in their first), `q` *super-iterations* `S_k` of `p`
//! iterations each (`p` is 1 or 2: executors that alternate link channels by iteration
//! parity repeat every two), and the rest `L` (the full iterations left over, then the
//! shorter last one). The window is `F S_1 S_2 L`; it is built only when `q >= 3`, so
//! something is left out, and only when every rank's program meets all of:
//!
//! 1. **congruent**: every task of `S_k` equals the corresponding task of `S_1`, user
//!    slices moved by the distance between the two iterations' first elements, every
//!    other slice (CCL buffers, scratch) and every notify the same;
//! 2. **contained**: every user slice of `F`, `S_1` and `L` lies inside its own
//!    iteration's elements (on both sides, block by block), so iterations never share a
//!    byte of a user buffer (by 1, neither do the `S_k`);
//! 3. **balanced**: over all ranks, `F` and `S_1` each post every notify as often as they
//!    wait on it.
//!
//! ## Why the window stands for the whole loop
//!
//! Binary notifies pair the `j`-th post of a notify with its `j`-th wait once the
//! lost-wakeup check holds, so by 3 every post pairs with a wait in its own part, and the
//! happens-before graph of the program has no edge from a later part to an earlier one:
//! its edges are stream order (forward) and pairings (inside a part). By 1 the graph of
//! `S_k S_{k+1}` is the graph of `S_1 S_2`, and a window edge from `S_2` to `L` (stream
//! order) stands for the path through `S_3 .. S_q` along the same stream, so whatever the
//! window orders, the whole program orders too. Then, check by check:
//!
//! - *deadlock, lost wakeup, fork/join*: a cycle or an unpaired wait lies inside one
//!   part, the same in the window; post `j + 1` after wait `j` relates adjacent parts at
//!   most, which the window holds (`S_1 S_2`, `S_2 L`, `F S_1`).
//! - *memory*: by 2 only CCL buffers and scratch are shared across iterations, at the
//!   same offsets in every `S_k`. Two conflicting accesses `a` in `S_i`, `b` in `S_j`
//!   with `j >= i + 2`: if `a` writes, `a` conflicts with its copy `a'` in `S_{i+1}`,
//!   which conflicts with `b` (adjacent parts, proved), so `a` before `a'` before `b`; if
//!   `b` writes, the same through `b`'s copy in `S_{j-1}`. Against `F` or `L`, the path
//!   the window proves from `S_1` (or to `S_2`) moves along the `S_k` and leaves or
//!   enters them by stream order, which holds from any `S_k`.
//! - *peer ready*: an access to a peer's user buffer in `S_k` comes after its copy in
//!   `S_2` on the same stream, which the window orders after a task of the peer.
//! - *semantics*: with no race, a read of a CCL byte sees the last write before it, in its
//!   own part or the one before (every `S_k` writes the same bytes), so the values `S_k`
//!   computes are `S_2`'s moved to its elements, and `L` sees what it sees after `S_2`.
//!   The outputs are compared on the window's iterations only
//!   ([`Fold::covered`]).
//!
//! The window orders no more than the program does, so a window can fail where the whole
//! program passes (a dependency that needs three parts to cross over). The analyzer
//! therefore trusts a window only when it passes: a failing window is analysed again
//! whole, and every failure reported comes from the whole program.

use super::recording::{RankRecording, Recording};
use crate::planner::{block_sides, inside_iteration, Loops};
use oxccl_platform::{NotifyId, RankProgram, Slice, StreamProgram, Task};
use std::collections::HashMap;
use std::ops::Range;
use std::sync::Arc;

/// The (prefix, period) shapes tried, simplest first.
const SHAPES: [(usize, usize); 4] = [(0, 1), (1, 1), (0, 2), (1, 2)];

/// Super-iterations a loop needs before a window leaves any out.
const MIN_SUPER: usize = 3;

/// How a recording was folded, for reports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Folded {
    /// Iterations of the loop.
    pub iterations: usize,
    /// Iterations before the repeating part (0 or 1).
    pub prefix: usize,
    /// Iterations per repetition (1 or 2).
    pub period: usize,
    /// The iterations the window holds, as ranges of iteration indices.
    pub kept: Vec<Range<usize>>,
    /// Tasks of the window, over all ranks.
    pub window_tasks: usize,
}

impl std::fmt::Display for Folded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kept: Vec<String> = self
            .kept
            .iter()
            .map(|r| match r.len() {
                1 => r.start.to_string(),
                _ => format!("{}..={}", r.start, r.end - 1),
            })
            .collect();
        let left_out: usize = self.iterations - self.kept.iter().map(|r| r.len()).sum::<usize>();
        write!(
            f,
            "proved on iterations {} of {} ({} tasks); the other {left_out} repeat every {} \
             iteration(s) after the first {} and are proved with them",
            kept.join(", "),
            self.iterations,
            self.window_tasks,
            self.period,
            self.prefix
        )
    }
}

/// A window and what it stands for.
pub(crate) struct Fold {
    pub window: Recording,
    /// `(first element, count)` of every iteration in the window: the outputs to compare.
    pub covered: Vec<(usize, usize)>,
    pub folded: Folded,
}

/// The window of `rec`, when its loop is long and repeats (see the module doc).
pub(crate) fn fold(rec: &Recording) -> Option<Fold> {
    let loops = uniform_loops(rec)?;
    let full = loops.full();
    let (prefix, period) = SHAPES.into_iter().find(|&(f, p)| {
        full >= f
            && (full - f) / p >= MIN_SUPER
            && rec
                .ranks
                .iter()
                .all(|r| congruent(&r.program, &r.loops, (f, p, full), rec.op.dtype.size()))
    })?;
    let supers = (full - prefix) / period;
    let head = 0..prefix + 2 * period;
    let tail = prefix + supers * period..loops.marks.len();
    let checked = [0..prefix + period, tail.clone()];
    let contained = rec.ranks.iter().enumerate().all(|(rank, r)| {
        checked
            .iter()
            .all(|range| range.clone().all(|i| contained(rec, rank, &r.loops, i)))
    });
    if !contained || !balanced(rec, 0..prefix) || !balanced(rec, prefix..prefix + period) {
        return None;
    }
    let kept: Vec<Range<usize>> = [head, tail].into_iter().filter(|r| !r.is_empty()).collect();
    let window = window(rec, &kept);
    let covered = kept
        .iter()
        .flat_map(|r| r.clone())
        .map(|i| (loops.marks[i].first, loops.marks[i].count))
        .collect();
    let window_tasks = window.ranks.iter().map(|r| r.program.task_count()).sum();
    Some(Fold {
        window,
        covered,
        folded: Folded {
            iterations: loops.marks.len(),
            prefix,
            period,
            kept,
            window_tasks,
        },
    })
}

/// Rank 0's loop, when every rank runs the same operation through the same iterations
/// of a loop that splits its operator into blocks (not a vector operator or Barrier).
fn uniform_loops(rec: &Recording) -> Option<&Loops> {
    let loops = &rec.ranks.first()?.loops;
    // A mark standing for several iterations (a sampled plan) is never proved.
    let same_iterations = |l: &Loops| {
        l.marks.iter().all(|m| m.repeats == 1)
            && l.per_loop == loops.per_loop
            && l.marks.len() == loops.marks.len()
            && l.marks
                .iter()
                .zip(&loops.marks)
                .all(|(a, b)| (a.first, a.count) == (b.first, b.count))
    };
    let plain = rec.op.layout().is_none() && block_sides(rec.op.kind).is_some();
    let uniform =
        rec.ops.iter().all(|o| *o == rec.op) && rec.ranks.iter().all(|r| same_iterations(&r.loops));
    (plain && uniform && loops.per_loop > 0).then_some(loops)
}

/// Condition 1 on one rank: every one of the `full` full iterations past the first
/// period (prefix `f`, period `p`) is its reference iteration (same position in the first
/// period) moved to its elements.
fn congruent(
    program: &RankProgram,
    loops: &Loops,
    (f, p, full): (usize, usize, usize),
    es: usize,
) -> bool {
    (f + p..full).all(|i| {
        let reference = f + (i - f) % p;
        let moved = loops.marks[i]
            .first
            .checked_sub(loops.marks[reference].first);
        let Some(delta) = moved.and_then(|m| m.checked_mul(es)) else {
            return false;
        };
        program.streams.iter().enumerate().all(|(s, stream)| {
            let (a, b) = (loops.tasks(reference, s), loops.tasks(i, s));
            a.len() == b.len()
                && stream.tasks[a]
                    .iter()
                    .zip(&stream.tasks[b])
                    .all(|(x, y)| moved_by(x, y, delta))
        })
    })
}

/// `b` is `a` with every user slice `delta` bytes further.
fn moved_by(a: &Task, b: &Task, delta: usize) -> bool {
    let same_kind = match (a, b) {
        (Task::Copy { .. }, Task::Copy { .. }) => true,
        (
            Task::Reduce { dtype, op, .. },
            Task::Reduce {
                dtype: dtype_b,
                op: op_b,
                ..
            },
        ) => dtype == dtype_b && op == op_b,
        (Task::Post { notify }, Task::Post { notify: other })
        | (Task::Wait { notify }, Task::Wait { notify: other }) => notify == other,
        _ => false,
    };
    same_kind
        && slices_moved(a.reads(), b.reads(), delta)
        && slices_moved(a.writes(), b.writes(), delta)
}

fn slices_moved(a: &[Slice], b: &[Slice], delta: usize) -> bool {
    a.len() == b.len()
        && a.iter().zip(b).all(|(x, y)| {
            let offset = match x.buf.is_user() {
                true => x.offset.checked_add(delta),
                false => Some(x.offset),
            };
            x.rank == y.rank && x.buf == y.buf && x.len == y.len && offset == Some(y.offset)
        })
}

/// Condition 2 for iteration `i` of `rank`: its user slices lie inside the iteration's
/// own elements of their buffer side.
fn contained(rec: &Recording, rank: usize, loops: &Loops, i: usize) -> bool {
    let mark = &loops.marks[i];
    let program = &rec.ranks[rank].program;
    program.streams.iter().enumerate().all(|(s, stream)| {
        stream.tasks[loops.tasks(i, s)].iter().all(|task| {
            task.reads()
                .iter()
                .chain(task.writes())
                .filter(|x| x.buf.is_user() && x.len > 0)
                .all(|x| {
                    inside_iteration(
                        &rec.ops[rank],
                        rec.rank_count(),
                        rec.user_offsets(rank),
                        (x.buf, x.offset, x.len),
                        (mark.first, mark.count),
                    )
                })
        })
    })
}

/// Condition 3 over `iterations` of every rank: each notify posted as often as waited.
fn balanced(rec: &Recording, iterations: Range<usize>) -> bool {
    let mut count: HashMap<NotifyId, i64> = HashMap::new();
    for r in &rec.ranks {
        for (s, stream) in r.program.streams.iter().enumerate() {
            for i in iterations.clone() {
                for task in &stream.tasks[r.loops.tasks(i, s)] {
                    match task {
                        Task::Post { notify } => *count.entry(*notify).or_default() += 1,
                        Task::Wait { notify } => *count.entry(*notify).or_default() -= 1,
                        _ => {}
                    }
                }
            }
        }
    }
    count.values().all(|&c| c == 0)
}

/// `rec` with only the iterations in `kept` (ascending, disjoint).
fn window(rec: &Recording, kept: &[Range<usize>]) -> Recording {
    let ranks = rec
        .ranks
        .iter()
        .map(|r| {
            let streams = (0..r.program.streams.len())
                .map(|s| StreamProgram {
                    tasks: kept
                        .iter()
                        .flat_map(|range| range.clone())
                        .flat_map(|i| r.program.streams[s].tasks[r.loops.tasks(i, s)].iter())
                        .cloned()
                        .collect(),
                })
                .collect();
            RankRecording {
                program: Arc::new(RankProgram {
                    rank: r.program.rank,
                    streams,
                }),
                request: r.request.clone(),
                loops: Loops::default(),
            }
        })
        .collect();
    Recording {
        op: rec.op.clone(),
        ops: rec.ops.clone(),
        topology: rec.topology.clone(),
        mode: rec.mode,
        in_place: rec.in_place,
        executor: rec.executor,
        reason: rec.reason.clone(),
        layout: rec.layout,
        ccl_bytes: rec.ccl_bytes,
        ranks,
    }
}
