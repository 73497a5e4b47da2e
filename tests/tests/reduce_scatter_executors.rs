//! Every registered ReduceScatter executor produces exactly the reference (each output is
//! the reduction of its block of every input) on every shape (1 to 9 ranks, multi-server),
//! for every dtype and reduce op, at boundary counts (0, 1, odd, not divisible by the
//! ranks, blocks larger than the CCL buffer), in place and out of place, zero-copy and
//! staged.

use oxccl::{registry, OpKind};
use oxccl_tests::blocks::{block_matrix, run_blocks};
use oxccl_tests::{shapes, Setup};

/// Small CCL buffers, so that the staged loop runs more than once.
const CCL_BYTES: usize = 1 << 20;

fn check_executor(algo: &'static str) {
    for topology in shapes() {
        for zero_copy in [true, false] {
            let setup = Setup {
                algo: Some(algo),
                topology: topology.clone(),
                zero_copy,
                ccl_bytes: CCL_BYTES,
            };
            let cases = block_matrix(OpKind::ReduceScatter, topology.ranks(), CCL_BYTES);
            if let Err(e) = run_blocks(OpKind::ReduceScatter, &setup, &cases) {
                panic!("{e}");
            }
        }
    }
}

#[test]
fn mesh() {
    check_executor("mesh");
}

#[test]
fn ring() {
    check_executor("ring");
}

#[test]
fn every_registered_reduce_scatter_executor_is_covered_here() {
    let covered = ["mesh", "ring"];
    let registered: Vec<&str> = registry()
        .unwrap()
        .executors_for(OpKind::ReduceScatter)
        .map(|e| e.name)
        .collect();
    assert_eq!(
        registered, covered,
        "add a test above for each new ReduceScatter executor"
    );
}
