//! Every registered AlltoAll executor produces exactly the reference (block `s` of rank
//! `r`'s output is block `r` of rank `s`'s input) on every shape, for every dtype, at
//! boundary counts (0, 1, odd, not divisible by the ranks, blocks larger than the CCL
//! buffer), zero-copy and staged; and passes the analyzer's conformance matrix.

use oxccl::framework::analyzer::conformance::assert_conforms;
use oxccl::{Communicator, DataType, OpKind, OpParam, ReduceOp};
use oxccl_tests::{
    boundary_counts, check_on_every_shape, data, run_on_every_rank, RankData, Setup,
    SMALL_CCL_BYTES,
};

fn run_case(
    comms: &[Communicator],
    dtype: DataType,
    count: usize,
    seed: u64,
) -> Result<(), String> {
    let n = comms.len();
    let block = count * dtype.size();
    let inputs: Vec<Vec<u8>> = (0..n)
        .map(|r| data::input(dtype, ReduceOp::Sum, r, n * count, seed))
        .collect();
    let data: Vec<RankData> = (0..n)
        .map(|r| RankData {
            input: inputs[r].clone(),
            start: vec![0xEE; n * block],
            expected: (0..n)
                .flat_map(|s| inputs[s][r * block..(r + 1) * block].to_vec())
                .collect(),
        })
        .collect();
    let param = OpParam::new(OpKind::AlltoAll, count, dtype, ReduceOp::Sum);
    run_on_every_rank(comms, &param, false, &data)
}

fn run(setup: &Setup) -> Result<(), String> {
    let n = setup.topology.ranks();
    let comms = Communicator::init_all(n, setup.config_for(OpKind::AlltoAll))
        .map_err(|e| format!("{setup:?}: init: {e}"))?;
    for (i, dtype) in DataType::ALL.into_iter().enumerate() {
        let mut counts = boundary_counts(n);
        counts.push(SMALL_CCL_BYTES / (n * dtype.size()) + 37);
        for (j, &count) in counts.iter().enumerate() {
            if n > oxccl_tests::THIN_ABOVE_RANKS && (i + j) % 3 != 0 {
                continue;
            }
            run_case(&comms, dtype, count, (i * 16 + j) as u64).map_err(|e| {
                format!(
                    "{:?} on {:?}, zero_copy={}, {dtype} count {count}: {e}",
                    setup.algo,
                    setup.topology.server_sizes(),
                    setup.zero_copy
                )
            })?;
        }
    }
    Ok(())
}

#[test]
fn pairwise() {
    check_on_every_shape("pairwise", run);
}

#[test]
fn mesh() {
    check_on_every_shape("mesh", run);
}

#[test]
fn pairwise_conforms() {
    assert_conforms(OpKind::AlltoAll, "pairwise");
}

#[test]
fn mesh_conforms() {
    assert_conforms(OpKind::AlltoAll, "mesh");
}
