//! The semantics check: symbolic data flow along the canonical execution.
//!
//! Every memory holds [`Value`]s over byte intervals ([`IntervalMap`]); at the start each
//! rank's Input holds its own input (shift 0) and everything else, Output included (unless
//! in place), holds nothing. In place, the input and the output lie where NCCL puts them
//! in the one buffer ([`Recording::user_offsets`]): AllGather's input is block `rank` of
//! the buffer, and ReduceScatter's output is checked in block `rank`. A Copy moves the source's pieces to each destination, moving
//! their shifts by the distance between the two offsets. A Reduce splits its range where
//! any source's pieces change and, per piece, takes the multiset union of the sources'
//! terms under its op; reading bytes that hold nothing is stale data, and combining a value
//! reduced with another op is a mixed reduction. The memory-conflict and lost-wakeup checks
//! make this one execution stand for all of them. At the end every rank's output is
//! compared with [`expected_output`], piece by piece, and each mismatch is explained:
//! missing, duplicated or unexpected contributions, wrong offsets, wrong op, or bytes
//! that were never written. The cost follows the number of tasks and pieces, never bytes.
//!
//! [`Recording::user_offsets`]: super::Recording::user_offsets

use super::bounds::show;
use super::expect::{expected_output, Expected, ExpectedRange};
use super::index::{Index, TaskId};
use super::intervals::IntervalMap;
use super::report::{Check, Collector};
use super::schedule::Execution;
use super::value::{Terms, Value};
use oxccl_platform::{Buf, DataType, ReduceOp, Slice, Task};

type Memories = Vec<IntervalMap<Value>>;

/// Run the semantics check.
/// Outputs are compared on the iterations `covered` (`(first element, count)`), all
/// when `None` (see [`super::fold`]).
pub(crate) fn check(
    idx: &Index<'_>,
    ex: &Execution,
    covered: Option<&[(usize, usize)]>,
    out: &mut Collector,
) {
    let rec = idx.rec;
    let mut mems: Memories = vec![IntervalMap::default(); idx.mems()];
    for rank in 0..rec.rank_count() {
        let (input_len, _) = rec.ops[rank].buffer_bytes(rank, rec.rank_count());
        let (base, _) = rec.user_offsets(rank);
        let value = Value::input(rank, -(base as i64));
        mems[idx.mem(rank, Buf::Input)].assign(base, base + input_len, Some(value));
    }
    // What every output held before the call (nothing; in place, the input).
    let before: Memories = (0..rec.rank_count())
        .map(|rank| mems[idx.mem(rank, Buf::Output)].clone())
        .collect();
    for t in ex.data_tasks() {
        let task = idx.task(t);
        if !idx.addressable(task) {
            continue;
        }
        match task {
            Task::Copy { src, dsts } => copy(idx, &mut mems, src, dsts),
            Task::Reduce {
                srcs,
                dsts,
                dtype,
                op,
            } => {
                if let Some((first, rest)) = dsts.split_first() {
                    reduce(idx, &mut mems, out, t, srcs, first, *dtype, *op);
                    copy(idx, &mut mems, first, rest);
                }
            }
            Task::Post { .. } | Task::Wait { .. } => {}
        }
    }
    if ex.stuck.is_empty() {
        compare_outputs(idx, &mems, &before, covered, out);
    }
}

fn span(s: &Slice) -> (usize, usize) {
    (s.offset, s.offset.saturating_add(s.len))
}

fn copy(idx: &Index<'_>, mems: &mut Memories, src: &Slice, dsts: &[Slice]) {
    let (lo, hi) = span(src);
    let pieces = mems[idx.mem(src.rank, src.buf)].pieces(lo, hi);
    for d in dsts {
        let delta = src.offset as i64 - d.offset as i64;
        let map = &mut mems[idx.mem(d.rank, d.buf)];
        for (a, b, v) in &pieces {
            let at = d.offset + (a - src.offset);
            map.update(at, at + (b - a), |_, _, _| {
                v.as_ref().map(|v| v.shifted(delta))
            });
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn reduce(
    idx: &Index<'_>,
    mems: &mut Memories,
    out: &mut Collector,
    t: TaskId,
    srcs: &[Slice],
    dst: &Slice,
    dtype: DataType,
    op: ReduceOp,
) {
    check_dtype(idx, out, t, dtype);
    let len = dst.len;
    let pieces: Vec<_> = srcs
        .iter()
        .map(|s| mems[idx.mem(s.rank, s.buf)].pieces(s.offset, s.offset.saturating_add(len)))
        .collect();
    if pieces.iter().all(|p| p.len() == 1) {
        let value = combine(idx, out, t, srcs, op, dst, 0, len, |j| &pieces[j][0].2);
        mems[idx.mem(dst.rank, dst.buf)]
            .update(dst.offset, dst.offset + len, |_, _, _| value.clone());
        return;
    }
    let mut cuts: Vec<usize> = pieces
        .iter()
        .zip(srcs)
        .flat_map(|(p, s)| p.iter().map(move |(a, _, _)| a - s.offset))
        .chain([len])
        .collect();
    cuts.sort_unstable();
    cuts.dedup();
    let mut cursor = vec![0usize; srcs.len()];
    let mut results = Vec::with_capacity(cuts.len());
    for w in cuts.windows(2) {
        let (u, v) = (w[0], w[1]);
        for (j, s) in srcs.iter().enumerate() {
            while pieces[j][cursor[j]].1 <= s.offset + u {
                cursor[j] += 1;
            }
        }
        let value = combine(idx, out, t, srcs, op, dst, u, v, |j| {
            &pieces[j][cursor[j]].2
        });
        results.push((u, v, value));
    }
    let map = &mut mems[idx.mem(dst.rank, dst.buf)];
    for (u, v, value) in results {
        map.update(dst.offset + u, dst.offset + v, |_, _, _| value.clone());
    }
}

/// The value of bytes `[u, v)` (relative to the task's slices) of a Reduce, from each
/// source's value there (`at(j)`); `None` after reporting a stale read.
#[allow(clippy::too_many_arguments)]
fn combine<'v>(
    idx: &Index<'_>,
    out: &mut Collector,
    t: TaskId,
    srcs: &[Slice],
    op: ReduceOp,
    dst: &Slice,
    u: usize,
    v: usize,
    at: impl Fn(usize) -> &'v Option<Value>,
) -> Option<Value> {
    let mut parts = Vec::with_capacity(srcs.len());
    let (mut stale, mut mixed) = (None, None);
    for (j, s) in srcs.iter().enumerate() {
        match at(j) {
            None => stale = stale.or(Some(Slice::new(s.rank, s.buf, s.offset + u, v - u))),
            Some(val) => {
                mixed = mixed.or(val.op.filter(|&o| o != op));
                parts.push((&val.terms, s.offset as i64));
            }
        }
    }
    report_piece(idx, out, t, op, stale, mixed);
    stale
        .is_none()
        .then(|| Value::reduced(op, Terms::union(parts)).shifted(-(dst.offset as i64)))
}

fn check_dtype(idx: &Index<'_>, out: &mut Collector, t: TaskId, dtype: DataType) {
    if dtype != idx.rec.op.dtype {
        out.at(Check::Semantics, Some(idx.loc(t)), || {
            format!(
                "{} reduces as {dtype}, but the operation's data type is {}",
                idx.describe(t),
                idx.rec.op.dtype
            )
        });
    }
}

/// Report what went wrong in one piece of a Reduce: a source that holds nothing yet, or
/// a source already reduced with another op.
fn report_piece(
    idx: &Index<'_>,
    out: &mut Collector,
    t: TaskId,
    op: ReduceOp,
    stale: Option<Slice>,
    mixed: Option<ReduceOp>,
) {
    if let Some(s) = stale {
        out.at(Check::Semantics, Some(idx.loc(t)), || {
            format!(
                "stale data read before it was written: {} reduces {}, which holds nothing yet",
                idx.describe(t),
                show(&s)
            )
        });
    }
    if let Some(other) = mixed {
        out.at(Check::Semantics, Some(idx.loc(t)), || {
            format!(
                "{} reduces with {op:?} a value already reduced with {other:?}",
                idx.describe(t)
            )
        });
    }
}

/// The parts of `range` (an expected range of a blocked operator, which starts at a
/// block) that the iterations `covered` write; the whole range when `None`.
fn covered_parts(
    range: &ExpectedRange,
    covered: Option<&[(usize, usize)]>,
    es: usize,
) -> Vec<ExpectedRange> {
    let Some(covered) = covered else {
        return vec![range.clone()];
    };
    covered
        .iter()
        .map(|&(first, count)| {
            // Element offsets into the block; what would wrap lies past its end.
            let at = |elements: Option<usize>| {
                elements
                    .and_then(|e| e.checked_mul(es))
                    .and_then(|b| b.checked_add(range.start))
                    .map_or(range.end, |b| b.min(range.end))
            };
            ExpectedRange {
                start: at(Some(first)),
                end: at(first.checked_add(count)),
                expected: range.expected.clone(),
            }
        })
        .filter(|part| part.start < part.end)
        .collect()
}

fn compare_outputs(
    idx: &Index<'_>,
    mems: &Memories,
    before: &Memories,
    covered: Option<&[(usize, usize)]>,
    out: &mut Collector,
) {
    let rec = idx.rec;
    for rank in 0..rec.rank_count() {
        let map = &mems[idx.mem(rank, Buf::Output)];
        let (_, base) = rec.user_offsets(rank);
        let es = rec.ops[rank].dtype.size();
        let expected = expected_output(&rec.ops, rank);
        for range in expected.iter().flat_map(|r| covered_parts(r, covered, es)) {
            let want = match range.expected {
                Expected::Exactly(want) => want,
                Expected::Anything => continue,
                Expected::Unchanged => {
                    let (a, b) = (base + range.start, base + range.end);
                    if let Some((x, y)) = first_change(&before[rank], map, a, b) {
                        out.at(Check::Semantics, None, || {
                            format!(
                                "rank {rank} Output[{x}..{y}] was written, but the operator \
                                 leaves a non-root's output as it was (NCCL's recvbuff is \
                                 unused off the root): keep partial results in Scratch or \
                                 the CCL buffers"
                            )
                        });
                    }
                    continue;
                }
                Expected::Unmatched { peer } => {
                    out.at(Check::Semantics, None, || {
                        format!(
                            "rank {rank} Output[{}..{}] receives from rank {peer}, which has no \
                             matching send of the same count",
                            base + range.start,
                            base + range.end
                        )
                    });
                    continue;
                }
            };
            let want = want.shifted(-(base as i64));
            for (a, b, have) in map.pieces(base + range.start, base + range.end) {
                if have.as_ref() == Some(&want) {
                    continue;
                }
                out.at(Check::Semantics, None, || {
                    format!(
                        "rank {rank} Output[{a}..{b}]: {}",
                        explain(have.as_ref(), &want, a, b)
                    )
                });
            }
        }
    }
}

/// The first bytes of `[a, b)` where `after` holds something else than `before`.
fn first_change(
    before: &IntervalMap<Value>,
    after: &IntervalMap<Value>,
    a: usize,
    b: usize,
) -> Option<(usize, usize)> {
    after.pieces(a, b).into_iter().find_map(|(x, y, have)| {
        let was = before.pieces(x, y);
        let same = matches!(was.as_slice(), [(_, _, w)] if *w == have);
        (!same).then_some((x, y))
    })
}

/// Why `have` is not `want` on output bytes `[a, b)`.
fn explain(have: Option<&Value>, want: &Value, a: usize, b: usize) -> String {
    let Some(have) = have else {
        return "uninitialised: no task wrote these bytes (or they hold stale data)".into();
    };
    let mut why = Vec::new();
    let (h, w) = (have.terms.by_rank(), want.terms.by_rank());
    let missing: Vec<u32> = w.keys().filter(|r| !h.contains_key(r)).copied().collect();
    let unexpected: Vec<u32> = h.keys().filter(|r| !w.contains_key(r)).copied().collect();
    let duplicated: Vec<u32> = h
        .iter()
        .filter(|(_, s)| s.len() > 1)
        .map(|(r, _)| *r)
        .collect();
    if !missing.is_empty() {
        why.push(format!("missing contributions of {}", ranks(&missing)));
    }
    if !duplicated.is_empty() {
        why.push(format!(
            "duplicated contributions of {}",
            ranks(&duplicated)
        ));
    }
    if !unexpected.is_empty() {
        why.push(format!(
            "contributions of {}, which do not belong here",
            ranks(&unexpected)
        ));
    }
    for (r, shifts) in h.iter().filter(|(_, s)| s.len() == 1) {
        if let Some(&[ws]) = w.get(r).map(Vec::as_slice) {
            if shifts[0] != ws {
                let at = |s: i64| format!("[{}..{}]", a as i64 + s, b as i64 + s);
                why.push(format!(
                    "wrong offset: rank {r}'s Input{} where Input{} belongs",
                    at(shifts[0]),
                    at(ws)
                ));
            }
        }
    }
    if have.op.is_some() && want.op.is_some() && have.op != want.op {
        why.push(format!(
            "reduced with {:?}, expected {:?}",
            have.op.unwrap_or(ReduceOp::Sum),
            want.op.unwrap_or(ReduceOp::Sum)
        ));
    }
    if why.is_empty() {
        why.push(format!("holds {have}, expected {want}"));
    }
    why.join("; ")
}

/// Ranks as compact ranges: "ranks 0..3, 7".
fn ranks(list: &[u32]) -> String {
    let mut parts = Vec::new();
    let mut i = 0;
    while i < list.len() {
        let mut j = i;
        while j + 1 < list.len() && list[j + 1] == list[j] + 1 {
            j += 1;
        }
        parts.push(if i == j {
            list[i].to_string()
        } else {
            format!("{}..={}", list[i], list[j])
        });
        i = j + 1;
    }
    let noun = if list.len() == 1 { "rank" } else { "ranks" };
    format!("{noun} {}", parts.join(", "))
}
