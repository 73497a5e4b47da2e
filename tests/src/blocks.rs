//! The harness for gathers and scatters: AllGather and ReduceScatter on every rank, each
//! output compared byte for byte with a reference built from [`oracle::fold`].
//!
//! Buffers follow NCCL. Out of place, AllGather sends `count` and receives `n` blocks of
//! `count`, ReduceScatter the reverse. In place, the one buffer holds `n` blocks: an
//! AllGather rank starts with its input in block `rank` (the other blocks hold garbage),
//! a ReduceScatter rank with its whole input and must end with its result in block `rank`
//! and every other block untouched.

use std::sync::Arc;

use crate::{data, oracle, run_on_every_rank, Aligned, Case, RankData, Setup};
use oxccl::{Communicator, DataType, OpKind, OpParam, ReduceOp};

/// Byte that marks memory the collective must overwrite.
const GARBAGE: u8 = 0xEE;

/// Every dtype x boundary count, in and out of place, for every reduce op when `kind`
/// reduces; plus, per dtype, one count whose `n` blocks exceed the CCL buffer (so the
/// staged loop runs more than once), rotating through the reduce ops and alternating in
/// place.
pub fn block_matrix(kind: OpKind, ranks: usize, ccl_bytes: usize) -> Vec<Case> {
    let ops: &[ReduceOp] = if kind.reduces() {
        &ReduceOp::ALL
    } else {
        &[ReduceOp::Sum]
    };
    let mut cases = Vec::new();
    for (i, dtype) in DataType::ALL.into_iter().enumerate() {
        for (j, count) in crate::boundary_counts(ranks).into_iter().enumerate() {
            for (op, in_place) in crate::op_variants(ops, ranks, i, j) {
                cases.push(Case {
                    dtype,
                    op,
                    count,
                    in_place,
                });
            }
        }
        if !crate::crosses_buffer(ranks, i) {
            continue;
        }
        cases.push(Case {
            dtype,
            op: ReduceOp::ALL[i % 4],
            count: ccl_bytes / (ranks * dtype.size()) + 37,
            in_place: i % 2 == 1,
        });
    }
    cases
}

fn prepare(kind: OpKind, n: usize, case: &Case, seed: u64) -> Vec<RankData> {
    let (in_count, _) = kind.buffer_counts(case.count, n);
    let inputs: Vec<Aligned> = (0..n)
        .map(|r| data::input(case.dtype, case.op, r, in_count, seed))
        .collect();
    let block = case.count * case.dtype.size();
    let gathered: Arc<[u8]> = inputs.concat().into();
    let buffers: Vec<(Aligned, Arc<[u8]>)> = (0..n)
        .map(|r| {
            let own = r * block..(r + 1) * block;
            match (kind, case.in_place) {
                (OpKind::AllGather, false) => {
                    (Aligned::filled(GARBAGE, n * block), gathered.clone())
                }
                (OpKind::AllGather, true) => {
                    let mut start = Aligned::filled(GARBAGE, n * block);
                    start[own].copy_from_slice(&inputs[r]);
                    (start, gathered.clone())
                }
                (_, in_place) => {
                    let blocks: Vec<&[u8]> = inputs.iter().map(|i| &i[own.clone()]).collect();
                    let reduced = oracle::fold(case.dtype, case.op, &blocks);
                    if in_place {
                        let mut expected = inputs[r].to_vec();
                        expected[own].copy_from_slice(&reduced);
                        (inputs[r].clone(), expected.into())
                    } else {
                        (Aligned::filled(GARBAGE, block), reduced.into())
                    }
                }
            }
        })
        .collect();
    let buffers = buffers.into_iter().map(|(s, e)| (s, Some(e))).collect();
    RankData::zip(inputs, buffers)
}

/// Run one case on every rank and compare with the reference.
fn run_case(kind: OpKind, comms: &[Communicator], case: &Case, seed: u64) -> Result<(), String> {
    let data = prepare(kind, comms[0].size(), case, seed);
    let param = OpParam {
        kind,
        ..OpParam::all_reduce(case.count, case.dtype, case.op)
    };
    run_on_every_rank(comms, &param, case.in_place, data)
}

/// Run `cases` of `kind` (AllGather or ReduceScatter) in order on a fresh communicator
/// built from `setup` (its `algo` forced for `kind`); the first failure, with the setup
/// and case that produced it.
pub fn run_blocks(kind: OpKind, setup: &Setup, cases: &[Case]) -> Result<(), String> {
    setup.run_with(&format!("{kind} "), setup.config_for(kind), |comms| {
        blocks_on(kind, comms, cases)
    })
}

/// Run `cases` of `kind` (AllGather or ReduceScatter) in order on the ranks `comms` (all
/// of a communicator's, or this process's); the first failure, with its case.
pub fn blocks_on(kind: OpKind, comms: &[Communicator], cases: &[Case]) -> Result<(), String> {
    for (i, case) in cases.iter().enumerate() {
        run_case(kind, comms, case, i as u64).map_err(|e| format!("{case:?}: {e}"))?;
    }
    Ok(())
}
