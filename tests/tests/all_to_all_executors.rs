//! Every registered AlltoAll executor produces exactly the reference (block `s` of rank
//! `r`'s output is block `r` of rank `s`'s input) on every shape, for every dtype, at
//! boundary counts (0, 1, odd, not divisible by the ranks, blocks larger than the CCL
//! buffer), zero-copy and staged; and passes the analyzer's conformance matrix.

use oxccl::framework::analyzer::conformance::assert_conforms;
use oxccl::OpKind;
use oxccl_tests::all_to_all::run_all_to_all;
use oxccl_tests::{check_on_every_shape, Setup};

fn run(setup: &Setup) -> Result<(), String> {
    run_all_to_all(setup, |_, _| true)
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

#[test]
fn put_mesh() {
    check_on_every_shape("put-mesh", run);
}

#[test]
fn put_mesh_conforms() {
    assert_conforms(OpKind::AlltoAll, "put-mesh");
}
