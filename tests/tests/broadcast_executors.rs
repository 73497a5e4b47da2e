//! Every registered Broadcast executor produces exactly the reference (every rank's output is the root's input) on every
//! shape (1 to 9 ranks, multi-server), with roots 0, n/2 and n-1, for every dtype, at
//! boundary counts (0, 1, odd, not divisible by the ranks, larger than the CCL buffer), in
//! place and out of place, zero-copy and staged; passes the analyzer's conformance matrix;
//! and the built-in selector finds one where links are broken.

use oxccl::OpKind;
use oxccl_tests::rooted::{
    check_rooted_executor, rooted_conforms, rooted_selection_around_broken_links,
};

const KIND: OpKind = OpKind::Broadcast;

#[test]
fn mesh() {
    check_rooted_executor(KIND, "mesh");
}

#[test]
fn mesh_conforms() {
    rooted_conforms(KIND, "mesh");
}

#[test]
fn mesh_push() {
    check_rooted_executor(KIND, "mesh-push");
}

#[test]
fn mesh_push_conforms() {
    rooted_conforms(KIND, "mesh-push");
}

#[test]
fn ring() {
    check_rooted_executor(KIND, "ring");
}

#[test]
fn ring_conforms() {
    rooted_conforms(KIND, "ring");
}

#[test]
fn tree() {
    check_rooted_executor(KIND, "tree");
}

#[test]
fn tree_conforms() {
    rooted_conforms(KIND, "tree");
}

#[test]
fn the_selector_finds_an_executor_around_broken_links() {
    rooted_selection_around_broken_links(KIND);
}

#[test]
fn put_mesh() {
    check_rooted_executor(KIND, "put-mesh");
}

#[test]
fn put_mesh_conforms() {
    rooted_conforms(KIND, "put-mesh");
}
