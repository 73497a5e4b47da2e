//! Every registered AllGather executor produces exactly the reference (block `s` of every
//! output is rank `s`'s input) on every shape (1 to 9 ranks, multi-server), for every
//! dtype, at boundary counts (0, 1, odd, not divisible by the ranks, blocks larger than the
//! CCL buffer), in place and out of place, zero-copy and staged.

use oxccl::framework::analyzer::conformance::assert_conforms;
use oxccl::OpKind;
use oxccl_tests::blocks::{block_matrix, run_blocks};
use oxccl_tests::{check_on_every_shape, SMALL_CCL_BYTES};

fn check_executor(algo: &'static str) {
    let kind = OpKind::AllGather;
    check_on_every_shape(algo, |setup| {
        run_blocks(
            kind,
            setup,
            &block_matrix(kind, setup.topology.ranks(), SMALL_CCL_BYTES),
        )
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
fn mesh_push_conforms() {
    assert_conforms(OpKind::AllGather, "mesh-push");
}

#[test]
fn ring() {
    check_executor("ring");
}
