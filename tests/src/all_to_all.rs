//! The harness for AlltoAll: block `s` of rank `r`'s output is block `r` of rank `s`'s
//! input, compared byte for byte, for every dtype at boundary counts and one count whose
//! `n` blocks exceed the CCL buffer.

use std::sync::Arc;

use crate::{
    boundary_counts, data, run_on_every_rank, Aligned, Case, RankData, Setup, SMALL_CCL_BYTES,
};
use oxccl::{Communicator, DataType, OpKind, OpParam, ReduceOp};

fn run_case(
    comms: &[Communicator],
    dtype: DataType,
    count: usize,
    seed: u64,
) -> Result<(), String> {
    let n = comms[0].size();
    let block = count * dtype.size();
    let inputs: Vec<Aligned> = (0..n)
        .map(|r| data::input(dtype, ReduceOp::Sum, r, n * count, seed))
        .collect();
    let expected: Vec<Arc<[u8]>> = (0..n)
        .map(|r| {
            let blocks: Vec<&[u8]> = inputs
                .iter()
                .map(|input| &input[r * block..(r + 1) * block])
                .collect();
            blocks.concat().into()
        })
        .collect();
    let data: Vec<RankData> = inputs
        .into_iter()
        .zip(expected)
        .map(|(input, expected)| RankData {
            input,
            start: Aligned::filled(0xEE, n * block),
            expected: Some(expected),
        })
        .collect();
    let param = OpParam::new(OpKind::AlltoAll, count, dtype, ReduceOp::Sum);
    run_on_every_rank(comms, &param, false, data)
}

/// Every dtype x (boundary counts + one past the CCL buffer) on a fresh communicator built
/// from `setup` (its `algo` forced for AlltoAll), thinned on many ranks; `keep(i, j)`
/// selects the (dtype index, count index) pairs to run. The first failure, with the setup
/// and case that produced it.
pub fn run_all_to_all(setup: &Setup, keep: impl Fn(usize, usize) -> bool) -> Result<(), String> {
    let config = setup.config_for(OpKind::AlltoAll);
    setup.run_with("", config, |comms| all_to_all_on(comms, keep))
}

/// [`run_all_to_all`]'s cases on the ranks `comms` (all of a communicator's, or this
/// process's); the first failure, with its dtype and count.
pub fn all_to_all_on(
    comms: &[Communicator],
    keep: impl Fn(usize, usize) -> bool,
) -> Result<(), String> {
    let n = comms[0].size();
    for (i, dtype) in DataType::ALL.into_iter().enumerate() {
        let mut counts = boundary_counts(n);
        counts.push(SMALL_CCL_BYTES / (n * dtype.size()) + 37);
        for (j, &count) in counts.iter().enumerate() {
            if !keep(i, j) || (n > crate::THIN_ABOVE_RANKS && (i + j) % 3 != 0) {
                continue;
            }
            run_case(comms, dtype, count, (i * 16 + j) as u64)
                .map_err(|e| format!("{dtype} count {count}: {e}"))?;
        }
    }
    Ok(())
}

/// AlltoAll `cases` in order on the ranks `comms`, each with its dtype and count (its op
/// and in-place flag are not used: AlltoAll has neither), for algorithms that run some
/// counts only (an imported MSCCL-IR file runs multiples of its unit); the first failure,
/// with its case.
pub fn all_to_all_cases_on(comms: &[Communicator], cases: &[Case]) -> Result<(), String> {
    for (i, case) in cases.iter().enumerate() {
        run_case(comms, case.dtype, case.count, i as u64)
            .map_err(|e| format!("{} count {}: {e}", case.dtype, case.count))?;
    }
    Ok(())
}
