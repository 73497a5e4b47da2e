//! Every registered AllReduce executor, built-in or plugin, produces exactly the scalar
//! reference on every shape (1 to 9 ranks, multi-server), for every dtype and reduce op,
//! at boundary counts (0, 1, odd, not divisible by the ranks, larger than the CCL buffer),
//! in place and out of place, zero-copy and staged.

use oxccl::{registry, OpKind};
use oxccl_tests::{full_matrix, run_all_reduce, shapes, Setup};

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
            let cases = full_matrix(topology.ranks(), CCL_BYTES);
            if let Err(e) = run_all_reduce(&setup, &cases) {
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
fn mesh_push() {
    check_executor("mesh-push");
}

#[test]
fn one_shot() {
    check_executor("one-shot");
}

#[test]
fn ring() {
    check_executor("ring");
}

#[test]
fn bidir_ring_plugin() {
    check_executor("bidir-ring");
}

#[test]
fn every_registered_all_reduce_executor_is_covered_here() {
    let covered = ["bidir-ring", "mesh", "mesh-push", "one-shot", "ring"];
    let registered: Vec<&str> = registry()
        .unwrap()
        .executors_for(OpKind::AllReduce)
        .map(|e| e.name)
        .collect();
    assert_eq!(
        registered, covered,
        "add a test above for each new AllReduce executor"
    );
}
