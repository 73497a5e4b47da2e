//! The memory-conflict check: tasks that touch the same bytes, at least one writing, are
//! ordered by happens-before.
//!
//! FastTrack along the canonical execution: every memory keeps, per byte interval, the
//! last task that wrote it and the tasks that read it since. A new read must happen after
//! that write; a new write after that write and after all those reads. Earlier accesses
//! need no check: they happen before the kept ones, or the kept ones were already reported
//! against them, and HB is transitive. A read drops the kept reads of its own stream, which
//! it happens after, so the read sets stay small. Input and Output are one memory in place.
//! Memories that no task writes (the user's Input, out of place) are not tracked at all.
//! Each conflicting pair of tasks is reported once per memory, with the bytes it shares.
//! Over a sequence of operations the CCL buffers and scratch are one memory for all of
//! them and each call's user buffers its own ([`Index::mem_in`]).

use super::hb::Hb;
use super::index::{Index, TaskId, NONE};
use super::intervals::IntervalMap;
use super::report::{Check, Collector};
use super::schedule::Execution;
use oxccl_platform::Slice;
use std::collections::BTreeMap;

/// The kept accesses of one byte interval.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
struct Access {
    write: Option<TaskId>,
    reads: Vec<TaskId>,
}

/// A conflict found for the current task: earlier task and memory -> shared bytes.
type Found = BTreeMap<(TaskId, usize, bool), (Slice, usize, usize)>;

/// Run the memory-conflict check.
pub(crate) fn check(idx: &Index<'_>, ex: &Execution, hb: &mut Hb<'_>, out: &mut Collector) {
    let mut mems: Vec<IntervalMap<Access>> = vec![IntervalMap::default(); idx.mems()];
    let mut found = Found::new();
    let written = written_memories(idx);
    for t in ex.data_tasks() {
        let task = idx.task(t);
        if task.writes().is_empty() || !idx.addressable(task) {
            continue;
        }
        found.clear();
        let op = idx.op_of(t);
        for s in task.reads() {
            let mem = idx.mem_in(op, s.rank, s.buf);
            if written[mem] {
                read(idx, hb, &mut mems[mem], t, s, mem, &mut found);
            }
        }
        for s in task.writes() {
            let mem = idx.mem_in(op, s.rank, s.buf);
            write(hb, &mut mems[mem], t, s, mem, &mut found);
        }
        for (&(other, mem, other_writes), &(slice, lo, hi)) in &found {
            report(idx, out, t, other, other_writes, slice, mem, lo, hi);
        }
    }
}

/// Which memories any task writes: reads of the others (the user's Input, usually) can
/// never conflict and are not tracked.
fn written_memories(idx: &Index<'_>) -> Vec<bool> {
    let mut written = vec![false; idx.mems()];
    for id in idx.ids() {
        let task = idx.task(id);
        if idx.addressable(task) {
            let op = idx.op_of(id);
            task.writes()
                .iter()
                .for_each(|s| written[idx.mem_in(op, s.rank, s.buf)] = true);
        }
    }
    written
}

fn read(
    idx: &Index<'_>,
    hb: &mut Hb<'_>,
    map: &mut IntervalMap<Access>,
    t: TaskId,
    s: &Slice,
    mem: usize,
    found: &mut Found,
) {
    let stream = idx.stream_of[t as usize];
    map.modify(s.offset, s.offset.saturating_add(s.len), |lo, hi, acc| {
        if let Some(w) = acc.write.filter(|&w| w != t) {
            if !hb.ordered(w, t) {
                note(found, w, true, s, mem, lo, hi);
            }
        }
        acc.reads.retain(|&r| idx.stream_of[r as usize] != stream);
        acc.reads.push(t);
    });
}

fn write(
    hb: &mut Hb<'_>,
    map: &mut IntervalMap<Access>,
    t: TaskId,
    s: &Slice,
    mem: usize,
    found: &mut Found,
) {
    map.update(s.offset, s.offset.saturating_add(s.len), |lo, hi, acc| {
        if let Some(acc) = acc {
            let earlier = acc.write.into_iter().map(|w| (w, true));
            for (other, writes) in earlier.chain(acc.reads.iter().map(|&r| (r, false))) {
                if other != t && !hb.ordered(other, t) {
                    note(found, other, writes, s, mem, lo, hi);
                }
            }
        }
        Some(Access {
            write: Some(t),
            reads: Vec::new(),
        })
    });
}

/// Remember a conflict with `other` on the bytes `[lo, hi)` of the memory of `s`.
fn note(
    found: &mut Found,
    other: TaskId,
    writes: bool,
    s: &Slice,
    mem: usize,
    lo: usize,
    hi: usize,
) {
    let key = (other, mem, writes);
    let e = found.entry(key).or_insert((*s, lo, hi));
    e.1 = e.1.min(lo);
    e.2 = e.2.max(hi);
}

#[allow(clippy::too_many_arguments)]
fn report(
    idx: &Index<'_>,
    out: &mut Collector,
    t: TaskId,
    other: TaskId,
    other_writes: bool,
    s: Slice,
    mem: usize,
    lo: usize,
    hi: usize,
) {
    debug_assert_ne!(other, NONE);
    let task = idx.task(t);
    let op = idx.op_of(t);
    let this_writes = task
        .writes()
        .iter()
        .any(|w| idx.mem_in(op, w.rank, w.buf) == mem && w.offset < hi && lo < w.offset + w.len);
    let verb = |w: bool| if w { "writes" } else { "reads" };
    let kind = match (other_writes, this_writes) {
        (true, true) => "write-write",
        (true, false) => "write-read",
        _ => "read-write",
    };
    out.at(Check::MemoryConflict, Some(idx.loc(t)), || {
        format!(
            "{kind} conflict: {} {} and {} {} rank {} {:?}[{lo}..{hi}] with no happens-before order between them",
            idx.describe(other),
            verb(other_writes),
            idx.describe(t),
            verb(this_writes),
            s.rank,
            s.buf
        )
    });
}
