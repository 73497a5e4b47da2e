//! What each operator must leave in every rank's output, as symbolic values.
//!
//! nccl-tests conventions, with `B` the per-rank block of `count` elements in bytes and
//! `n` ranks (shifts are in bytes: the element at output byte `x` is built from
//! `Input_r[x + shift]`):
//!
//! | operator | rank `r`'s output |
//! |---|---|
//! | AllReduce | op over every rank's input, shift 0 |
//! | AllGather | block `s` = rank `s`'s input (shift `-sB`) |
//! | ReduceScatter | op over block `r` of every input (shift `rB`) |
//! | Broadcast | the root's input |
//! | Reduce | root: op over every input; others: anything |
//! | Scatter | block `r` of the root's input (shift `rB`) |
//! | Gather | root: block `s` = rank `s`'s input (shift `-sB`); others: anything |
//! | AlltoAll | block `s` = block `r` of rank `s`'s input (shift `(r - s)B`) |
//! | AllGatherV | block `s` (at `displs[s]`) = rank `s`'s input |
//! | ReduceScatterV | op over block `r` (at `displs[r]`) of every input |
//! | AlltoAllV, send/recv | each receive from `p` = the matching send of `p` (the `k`-th receive from `p` matches `p`'s `k`-th send to `r`); the rest of the output: anything |
//! | Barrier | nothing (no output) |
//!
//! A reduction over a single rank is a plain copy (no op).
//!
//! The ranges are relative to the start of the rank's output. In place, AllGather and
//! ReduceScatter follow NCCL: the one buffer is the larger side, AllGather's input is
//! block `r` of it and ReduceScatter's output is block `r` of it; the semantics check
//! places the input and reads the output there
//! ([`Recording::user_offsets`](super::Recording::user_offsets)).

use super::value::{Terms, Value};
use crate::op::{OpKind, OpParam, VLayout};
use oxccl_platform::Rank;

/// What a byte interval of an output must hold.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Expected {
    /// Exactly this value.
    Exactly(Value),
    /// Anything (bytes of a vector operator's output that no receive covers).
    Anything,
    /// What the bytes held before the call: a non-root rank's output of a rooted
    /// reduction or gather, which the operator leaves alone, as NCCL leaves `recvbuff`
    /// unused off the root (in place, the rank's input stays where it was).
    Unchanged,
    /// A receive from `peer` that no send of `peer` matches (count or number of items
    /// differ): no program can be right.
    Unmatched { peer: Rank },
}

/// One interval of an output and what it must hold.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExpectedRange {
    pub start: usize,
    pub end: usize,
    pub expected: Expected,
}

/// What `rank`'s output must hold, interval by interval, after the operation whose
/// parameters on each rank are `ops` (indexed by rank; all equal except for the
/// point-to-point vector operators).
pub fn expected_output(ops: &[OpParam], rank: Rank) -> Vec<ExpectedRange> {
    let (op, ranks) = (&ops[rank], ops.len());
    if let Some(layout) = op.layout() {
        return expected_vector(ops, layout, rank);
    }
    let block = op.count * op.dtype.size();
    let whole = |e| {
        vec![ExpectedRange {
            start: 0,
            end: block,
            expected: e,
        }]
    };
    let all = |shift: i64| Expected::Exactly(Value::reduced(op.op, Terms::ranks(0..ranks, shift)));
    let from = |src: Rank, shift: i64| Expected::Exactly(Value::input(src, shift));
    let blocks = |f: &dyn Fn(Rank) -> Expected| {
        (0..ranks)
            .map(|s| ExpectedRange {
                start: s * block,
                end: (s + 1) * block,
                expected: f(s),
            })
            .collect()
    };
    let b = block as i64;
    let root = op.root.unwrap_or(0);
    match op.kind {
        OpKind::AllReduce => whole(all(0)),
        OpKind::AllGather => blocks(&|s| from(s, -(s as i64) * b)),
        OpKind::ReduceScatter => whole(all(rank as i64 * b)),
        OpKind::Broadcast => whole(from(root, 0)),
        OpKind::Reduce if rank == root => whole(all(0)),
        OpKind::Scatter => whole(from(root, rank as i64 * b)),
        OpKind::Gather if rank == root => blocks(&|s| from(s, -(s as i64) * b)),
        OpKind::Reduce | OpKind::Gather => {
            let (_, end) = op.buffer_bytes(rank, ranks);
            vec![ExpectedRange {
                start: 0,
                end,
                expected: Expected::Unchanged,
            }]
        }
        OpKind::AlltoAll => blocks(&|s| from(s, (rank as i64 - s as i64) * b)),
        _ => Vec::new(),
    }
}

fn anything(start: usize, end: usize) -> Vec<ExpectedRange> {
    vec![ExpectedRange {
        start,
        end,
        expected: Expected::Anything,
    }]
}

/// The expected output of AllGatherV, ReduceScatterV, AlltoAllV and send/recv. Bytes no
/// receive covers may hold anything. A receive without a matching send of the same count
/// fails the check, which
/// names it ([`Expected::Unmatched`]).
fn expected_vector(ops: &[OpParam], layout: &VLayout, rank: Rank) -> Vec<ExpectedRange> {
    let op = &ops[rank];
    let es = op.dtype.size() as i64;
    let mut pieces: Vec<ExpectedRange> = Vec::new();
    let mut push = |start: i64, len: i64, expected: Expected| {
        if len > 0 {
            pieces.push(ExpectedRange {
                start: (start * es) as usize,
                end: ((start + len) * es) as usize,
                expected,
            });
        }
    };
    match layout {
        VLayout::Blocks { counts, displs } if op.kind == OpKind::AllGatherV => {
            for (s, (&c, &d)) in counts.iter().zip(displs).enumerate() {
                let value = Value::input(s, -(d as i64) * es);
                push(d as i64, c as i64, Expected::Exactly(value));
            }
        }
        VLayout::Blocks { counts, displs } => {
            let shift = displs[rank] as i64 * es;
            let terms = Terms::ranks(0..ops.len(), shift);
            push(
                0,
                counts[rank] as i64,
                Expected::Exactly(Value::reduced(op.op, terms)),
            );
        }
        VLayout::P2p { recvs, .. } => {
            let mut seen = vec![0usize; ops.len()];
            for item in recvs {
                let k = seen[item.peer];
                seen[item.peer] += 1;
                let send = ops[item.peer]
                    .layout()
                    .and_then(VLayout::p2p)
                    .and_then(|(sends, _)| sends.iter().filter(|s| s.peer == rank).nth(k));
                let expected = match send {
                    Some(s) if s.count == item.count => Expected::Exactly(Value::input(
                        item.peer,
                        (s.offset as i64 - item.offset as i64) * es,
                    )),
                    _ => Expected::Unmatched { peer: item.peer },
                };
                push(item.offset as i64, item.count as i64, expected);
            }
        }
    }
    pieces.sort_by_key(|p| p.start);
    let (_, end) = op.buffer_bytes(rank, ops.len());
    fill_gaps(pieces, end)
}

/// Cover `[0, end)`: gaps between `pieces` (sorted, disjoint) become [`Expected::Anything`].
fn fill_gaps(pieces: Vec<ExpectedRange>, end: usize) -> Vec<ExpectedRange> {
    let mut out = Vec::new();
    let mut at = 0;
    for p in pieces {
        if p.start > at {
            out.extend(anything(at, p.start));
        }
        at = p.end;
        out.push(p);
    }
    if end > at {
        out.extend(anything(at, end));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use oxccl_platform::{DataType, ReduceOp};

    #[test]
    fn output_sizes_match_the_operator_buffer_shapes() {
        for kind in OpKind::ALL {
            if kind.is_vector() || kind == OpKind::Barrier {
                continue;
            }
            let op = OpParam {
                kind,
                root: Some(1),
                ..OpParam::all_reduce(5, DataType::F32, ReduceOp::Sum)
            };
            let (_, out) = op.buffer_bytes(0, 4);
            for rank in 0..4 {
                let e = expected_output(&vec![op.clone(); 4], rank);
                assert_eq!(e.first().map(|r| r.start), Some(0), "{kind}");
                assert_eq!(e.last().map(|r| r.end), Some(out), "{kind}");
                assert!(e.windows(2).all(|w| w[0].end == w[1].start), "{kind}");
            }
        }
    }

    #[test]
    fn all_to_all_block_comes_from_the_right_rank_and_offset() {
        let op = OpParam {
            kind: OpKind::AlltoAll,
            ..OpParam::all_reduce(2, DataType::I32, ReduceOp::Sum)
        };
        let e = expected_output(&vec![op; 3], 2);
        assert_eq!(e[1].expected, Expected::Exactly(Value::input(1, 8)));
    }
}
