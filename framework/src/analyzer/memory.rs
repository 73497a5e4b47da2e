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
//! A put over a put-only link that an access follows must also have landed: the target
//! waited for a post the writer sent after it ([`super::delivery`]).
//! Over a sequence of operations the CCL buffers and scratch are one memory for all of
//! them and each call's user buffers its own ([`Index::mem_in`]).

use super::delivery::Delivery;
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

/// A conflict found for the current task: (earlier task, memory, whether it wrote,
/// whether it is a put ordered before but not known to have landed) -> shared bytes.
type Found = BTreeMap<(TaskId, usize, bool, bool), (Slice, usize, usize)>;

/// What the accesses of one task are checked with.
struct Pass<'p, 'i, 'h> {
    idx: &'p Index<'i>,
    ex: &'p Execution,
    hb: &'p mut Hb<'h>,
    delivery: &'p Delivery,
}

impl Pass<'_, '_, '_> {
    /// How `earlier`, which wrote bytes of `owner` that `t` touches, is ordered before
    /// `t`: `None` when it is (and, a put, has landed), else whether it is ordered but
    /// may still be in flight.
    fn unordered_write(&mut self, earlier: TaskId, t: TaskId, owner: usize) -> Option<bool> {
        if !self.hb.ordered(earlier, t) {
            return Some(false);
        }
        let landed = self
            .delivery
            .landed(self.idx, self.ex, self.hb, earlier, t, owner);
        (!landed).then_some(true)
    }
}

/// Run the memory-conflict check.
pub(crate) fn check(idx: &Index<'_>, ex: &Execution, hb: &mut Hb<'_>, out: &mut Collector) {
    let mut mems: Vec<IntervalMap<Access>> = vec![IntervalMap::default(); idx.mems()];
    let mut found = Found::new();
    let written = written_memories(idx);
    let delivery = Delivery::new(idx, ex);
    let mut pass = Pass {
        idx,
        ex,
        hb,
        delivery: &delivery,
    };
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
                read(&mut pass, &mut mems[mem], t, s, mem, &mut found);
            }
        }
        for s in task.writes() {
            let mem = idx.mem_in(op, s.rank, s.buf);
            write(&mut pass, &mut mems[mem], t, s, mem, &mut found);
        }
        for (&(other, mem, other_writes, in_flight), &(slice, lo, hi)) in &found {
            let pair = Pair {
                t,
                other,
                other_writes,
                in_flight,
            };
            report(idx, out, pair, slice, mem, lo, hi);
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
    pass: &mut Pass<'_, '_, '_>,
    map: &mut IntervalMap<Access>,
    t: TaskId,
    s: &Slice,
    mem: usize,
    found: &mut Found,
) {
    let stream = pass.idx.stream_of[t as usize];
    map.modify(s.offset, s.offset.saturating_add(s.len), |lo, hi, acc| {
        if let Some(w) = acc.write.filter(|&w| w != t) {
            if let Some(in_flight) = pass.unordered_write(w, t, s.rank) {
                note(found, (w, true, in_flight), s, mem, lo, hi);
            }
        }
        acc.reads
            .retain(|&r| pass.idx.stream_of[r as usize] != stream);
        acc.reads.push(t);
    });
}

fn write(
    pass: &mut Pass<'_, '_, '_>,
    map: &mut IntervalMap<Access>,
    t: TaskId,
    s: &Slice,
    mem: usize,
    found: &mut Found,
) {
    map.update(s.offset, s.offset.saturating_add(s.len), |lo, hi, acc| {
        if let Some(acc) = acc {
            if let Some(w) = acc.write.filter(|&w| w != t) {
                if let Some(in_flight) = pass.unordered_write(w, t, s.rank) {
                    note(found, (w, true, in_flight), s, mem, lo, hi);
                }
            }
            for &r in acc.reads.iter().filter(|&&r| r != t) {
                if !pass.hb.ordered(r, t) {
                    note(found, (r, false, false), s, mem, lo, hi);
                }
            }
        }
        Some(Access {
            write: Some(t),
            reads: Vec::new(),
        })
    });
}

/// Remember a conflict with `other` (which wrote, or read; whose put may be in flight) on
/// the bytes `[lo, hi)` of the memory of `s`.
fn note(
    found: &mut Found,
    (other, writes, in_flight): (TaskId, bool, bool),
    s: &Slice,
    mem: usize,
    lo: usize,
    hi: usize,
) {
    let key = (other, mem, writes, in_flight);
    let e = found.entry(key).or_insert((*s, lo, hi));
    e.1 = e.1.min(lo);
    e.2 = e.2.max(hi);
}

/// A conflicting pair: the current task `t` and an earlier one.
struct Pair {
    t: TaskId,
    other: TaskId,
    other_writes: bool,
    /// `other` is a put ordered before `t` that may not have landed.
    in_flight: bool,
}

fn report(
    idx: &Index<'_>,
    out: &mut Collector,
    Pair {
        t,
        other,
        other_writes,
        in_flight,
    }: Pair,
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
        let (writer, owner) = (idx.loc(other).rank, s.rank);
        let why = match in_flight {
            false => "with no happens-before order between them".to_string(),
            true => format!(
                "after the put, which may not have landed: a put over the put-only link \
                 {writer}-{owner} completes when it is sent, so rank {owner} must wait for a \
                 post of rank {writer} sent after it (over the same link) before the bytes \
                 are touched"
            ),
        };
        format!(
            "{kind} conflict: {} {} and {} {} rank {} {:?}[{lo}..{hi}] {why}",
            idx.describe(other),
            verb(other_writes),
            idx.describe(t),
            verb(this_writes),
            s.rank,
            s.buf
        )
    });
}
