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
//!
//! A reduction over a single rank is a plain copy (no op).
//!
//! The ranges are relative to the start of the rank's output. In place, AllGather and
//! ReduceScatter follow NCCL: the one buffer is the larger side, AllGather's input is
//! block `r` of it and ReduceScatter's output is block `r` of it; the semantics check
//! places the input and reads the output there
//! ([`Recording::user_offsets`](super::Recording::user_offsets)).

use super::value::{Terms, Value};
use crate::op::{OpKind, OpParam};
use oxccl_platform::Rank;

/// What a byte interval of an output must hold.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Expected {
    /// Exactly this value.
    Exactly(Value),
    /// Anything (a non-root rank's output of a rooted reduction or gather).
    Anything,
}

/// One interval of an output and what it must hold.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExpectedRange {
    pub start: usize,
    pub end: usize,
    pub expected: Expected,
}

/// What `rank`'s output must hold after `op` on `ranks` ranks, interval by interval.
pub fn expected_output(op: &OpParam, ranks: usize, rank: Rank) -> Vec<ExpectedRange> {
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
            let (_, end) = op.buffer_bytes(ranks);
            vec![ExpectedRange {
                start: 0,
                end,
                expected: Expected::Anything,
            }]
        }
        OpKind::AlltoAll => blocks(&|s| from(s, (rank as i64 - s as i64) * b)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use oxccl_platform::{DataType, ReduceOp};

    #[test]
    fn output_sizes_match_the_operator_buffer_shapes() {
        for kind in OpKind::ALL {
            let op = OpParam {
                kind,
                root: Some(1),
                ..OpParam::all_reduce(5, DataType::F32, ReduceOp::Sum)
            };
            let (_, out) = op.buffer_bytes(4);
            for rank in 0..4 {
                let e = expected_output(&op, 4, rank);
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
        let e = expected_output(&op, 3, 2);
        assert_eq!(e[1].expected, Expected::Exactly(Value::input(1, 8)));
    }
}
