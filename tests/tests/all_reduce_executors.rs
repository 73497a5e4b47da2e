//! Every registered AllReduce executor, built-in or plugin, produces exactly the scalar
//! reference on every shape (1 to 9 ranks, multi-server), for every dtype and reduce op,
//! at boundary counts (0, 1, odd, not divisible by the ranks, larger than the CCL buffer),
//! in place and out of place, zero-copy and staged.

use oxccl_tests::{check_on_every_shape, full_matrix, run_all_reduce, SMALL_CCL_BYTES};

fn check_executor(algo: &'static str) {
    check_on_every_shape(algo, |setup| {
        run_all_reduce(setup, &full_matrix(setup.topology.ranks(), SMALL_CCL_BYTES))
    });
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
