//! Every registered Broadcast executor produces exactly the reference (every rank's output is the root's input) on every
//! shape (1 to 9 ranks, multi-server), with roots 0, n/2 and n-1, for every dtype, at
//! boundary counts (0, 1, odd, not divisible by the ranks, larger than the CCL buffer), in
//! place and out of place, zero-copy and staged; passes the analyzer's conformance matrix;
//! and the built-in selector finds one where links are broken.

use oxccl::framework::analyzer::conformance::check_conformance;
use oxccl::{OpKind, Topology};
use oxccl_tests::rooted::{rooted_matrix, run_rooted};
use oxccl_tests::{check_on_every_shape, Setup, SMALL_CCL_BYTES};

const KIND: OpKind = OpKind::Broadcast;

fn check_executor(algo: &'static str) {
    check_on_every_shape(algo, |setup| {
        run_rooted(
            KIND,
            setup,
            &rooted_matrix(KIND, setup.topology.ranks(), SMALL_CCL_BYTES),
        )
    });
}

/// The executor passes the analyzer's whole conformance matrix, on every shape.
fn conforms(algo: &str) {
    let out = check_conformance(KIND, algo).unwrap_or_else(|e| panic!("{e}"));
    assert!(out.cases > 0 && out.skipped_shapes == 0, "{out:?}");
}

#[test]
fn mesh() {
    check_executor("mesh");
}

#[test]
fn mesh_conforms() {
    conforms("mesh");
}

#[test]
fn ring() {
    check_executor("ring");
}

#[test]
fn ring_conforms() {
    conforms("ring");
}

#[test]
fn tree() {
    check_executor("tree");
}

#[test]
fn tree_conforms() {
    conforms("tree");
}

#[test]
fn the_selector_finds_an_executor_around_broken_links() {
    // Root 0 (the first case's) loses its link to rank 3: no star around it, but a tree
    // and a ring of healthy links remain for every root the cases use.
    let topology = Topology::single_server(8)
        .with_broken(0, 3)
        .and_then(|t| t.with_broken(1, 6))
        .and_then(|t| t.with_broken(2, 5))
        .expect("valid topology");
    for zero_copy in [true, false] {
        let setup = Setup {
            algo: None,
            topology: topology.clone(),
            zero_copy,
            ccl_bytes: SMALL_CCL_BYTES,
        };
        let cases = rooted_matrix(KIND, 8, SMALL_CCL_BYTES);
        run_rooted(KIND, &setup, &cases).unwrap();
    }
}
