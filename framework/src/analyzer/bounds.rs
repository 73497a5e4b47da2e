//! The bounds check: every task, on its own, addresses memory sanely.
//!
//! Per task: each slice lies inside its buffer ([`Recording::buffer_len`]); all slices
//! have one length; a Reduce's length is a whole number of elements; nothing writes the
//! user's Input; and no destination overlaps another destination or a source, except a
//! Reduce destination that is exactly one of its sources (accumulation, element by
//! element). Overlaps are found by sorting the task's slices by memory and offset, so a
//! 1024-source Reduce costs `n log n`, not `n²`. Input and Output are one memory in place.
//!
//! [`Recording::buffer_len`]: super::Recording::buffer_len

use super::index::{Index, TaskId};
use super::report::{Check, Collector};
use oxccl_platform::{Slice, Task};

/// Run the bounds check over every task.
pub(crate) fn check(idx: &Index<'_>, out: &mut Collector) {
    let mut scratch = Vec::new();
    for id in idx.ids() {
        let task = idx.task(id);
        if matches!(task, Task::Post { .. } | Task::Wait { .. }) {
            continue;
        }
        slices_in_buffers(idx, id, task, out);
        shape(idx, id, task, out);
        overlaps(idx, id, task, &mut scratch, out);
    }
}

fn slices_in_buffers(idx: &Index<'_>, id: TaskId, task: &Task, out: &mut Collector) {
    let rec = idx.rec;
    for s in task.reads().iter().chain(task.writes()) {
        if s.rank >= rec.rank_count() {
            continue; // the link check reports slices on ranks that do not exist
        }
        asymmetric_scratch(idx, id, s, out);
        let len = rec.buffer_len(s.rank, s.buf);
        if s.offset.checked_add(s.len).is_none_or(|end| end > len) {
            out.at(Check::Bounds, Some(idx.loc(id)), || {
                format!(
                    "{} touches {}, past the end of the buffer ({len} bytes)",
                    idx.describe(id),
                    show(s)
                )
            });
        }
    }
    for s in task
        .writes()
        .iter()
        .filter(|s| s.buf == oxccl_platform::Buf::Input)
    {
        out.at(Check::Bounds, Some(idx.loc(id)), || {
            format!(
                "{} writes {}, the user's read-only Input",
                idx.describe(id),
                show(s)
            )
        });
    }
}

/// Report a slice of another rank's Scratch when the two ranks requested different
/// scratch sizes. Scratch is symmetric: a device allocates each request on every rank
/// of the operation (one allocation per executor and size), so a task of rank `a`
/// addresses rank `b`'s copy of `a`'s allocation. When `b` asked for another size, `b`'s
/// own tasks use another allocation: what `a` writes there, `b` never reads (wrong
/// results with no error), and `a`'s bounds are its own size, not `b`'s.
fn asymmetric_scratch(idx: &Index<'_>, id: TaskId, s: &Slice, out: &mut Collector) {
    let me = idx.loc(id).rank;
    if s.buf != oxccl_platform::Buf::Scratch || s.rank == me {
        return;
    }
    let rec = idx.recs[idx.op_of(id)];
    let bytes = |r: usize| rec.ranks[r].request.scratch_bytes;
    let (mine, theirs) = (bytes(me), bytes(s.rank));
    if mine != theirs {
        out.at(Check::Bounds, Some(idx.loc(id)), || {
            format!(
                "{} touches {}, but rank {me} requested {mine} bytes of scratch and rank {} \
                 {theirs}: scratch is symmetric (the device allocates each request on every \
                 rank, so this task reaches a copy of rank {me}'s scratch that rank {}'s own \
                 tasks never use); request the same scratch size on every rank",
                idx.describe(id),
                show(s),
                s.rank,
                s.rank
            )
        });
    }
}

fn shape(idx: &Index<'_>, id: TaskId, task: &Task, out: &mut Collector) {
    let (reads, writes) = (task.reads(), task.writes());
    let Some(first) = writes.first() else {
        out.at(Check::Bounds, Some(idx.loc(id)), || {
            format!("{} has no destination", idx.describe(id))
        });
        return;
    };
    if reads.is_empty() {
        out.at(Check::Bounds, Some(idx.loc(id)), || {
            format!("{} has no source", idx.describe(id))
        });
    }
    if let Some(odd) = reads.iter().chain(writes).find(|s| s.len != first.len) {
        out.at(Check::Bounds, Some(idx.loc(id)), || {
            format!(
                "{}: slices of unequal length, {} is {} bytes but {} is {} bytes",
                idx.describe(id),
                show(first),
                first.len,
                show(odd),
                odd.len
            )
        });
    }
    if let Task::Reduce { dtype, .. } = task {
        if first.len % dtype.size() != 0 {
            out.at(Check::Bounds, Some(idx.loc(id)), || {
                format!(
                    "{} reduces {} bytes, not a multiple of the {}-byte {dtype}",
                    idx.describe(id),
                    first.len,
                    dtype.size()
                )
            });
        }
    }
}

/// One slice of a task, placed in memory, for the overlap sweep.
#[derive(Copy, Clone)]
struct Placed {
    mem: usize,
    start: usize,
    end: usize,
    write: bool,
    slice: Slice,
}

fn overlaps(idx: &Index<'_>, id: TaskId, task: &Task, all: &mut Vec<Placed>, out: &mut Collector) {
    let n = idx.rec.rank_count();
    all.clear();
    let place = |s: &Slice, write| Placed {
        mem: idx.mem(s.rank, s.buf),
        start: s.offset,
        end: s.offset.saturating_add(s.len),
        write,
        slice: *s,
    };
    let reads = task.reads().iter().map(|s| place(s, false));
    all.extend(reads.chain(task.writes().iter().map(|s| place(s, true))));
    all.retain(|p| p.slice.rank < n && p.end > p.start);
    all.sort_by_key(|p| (p.mem, p.start, p.end, p.write));
    let accumulate = matches!(task, Task::Reduce { .. });
    for i in 0..all.len() {
        for j in i + 1..all.len() {
            let (a, b) = (all[i], all[j]);
            if b.mem != a.mem || b.start >= a.end {
                break;
            }
            let exact = a.start == b.start && a.end == b.end;
            if !(a.write || b.write) || (accumulate && exact && a.write != b.write) {
                continue;
            }
            out.at(Check::Bounds, Some(idx.loc(id)), || {
                let what = if a.write && b.write {
                    "destinations"
                } else {
                    "a source and a destination"
                };
                format!(
                    "{}: {what} overlap: {} and {} share bytes {}..{}",
                    idx.describe(id),
                    show(&a.slice),
                    show(&b.slice),
                    b.start,
                    a.end.min(b.end)
                )
            });
        }
    }
}

/// A slice as `rank r Buf[a..b]`, without overflowing.
pub(crate) fn show(s: &Slice) -> String {
    format!(
        "rank {} {:?}[{}..{}]",
        s.rank,
        s.buf,
        s.offset,
        s.offset.saturating_add(s.len)
    )
}
