//! The double-ring executors of AllReduce, AllGather and ReduceScatter: exact results on
//! every shape (1 to 9 ranks, multi-server), dtype, reduce op and boundary count, in and
//! out of place, zero-copy and staged; the analyzer's conformance matrix; and a run on a
//! mesh with a broken link, which the healthy ring avoids.

use oxccl::framework::analyzer::conformance::assert_conforms;
use oxccl::{OpKind, Topology};
use oxccl_tests::blocks::{block_matrix, run_blocks};
use oxccl_tests::{check_on_every_shape, full_matrix, run_all_reduce, Setup, SMALL_CCL_BYTES};

const NAME: &str = "double-ring";

fn run(kind: OpKind, setup: &Setup) -> Result<(), String> {
    let n = setup.topology.ranks();
    match kind {
        OpKind::AllReduce => run_all_reduce(setup, &full_matrix(n, setup.ccl_bytes)),
        _ => run_blocks(kind, setup, &block_matrix(kind, n, setup.ccl_bytes)),
    }
}

#[test]
fn all_reduce_exact_on_every_shape() {
    check_on_every_shape(NAME, |setup| run(OpKind::AllReduce, setup));
}

#[test]
fn all_gather_exact_on_every_shape() {
    check_on_every_shape(NAME, |setup| run(OpKind::AllGather, setup));
}

#[test]
fn reduce_scatter_exact_on_every_shape() {
    check_on_every_shape(NAME, |setup| run(OpKind::ReduceScatter, setup));
}

#[test]
fn every_operator_conforms() {
    for kind in [OpKind::AllReduce, OpKind::AllGather, OpKind::ReduceScatter] {
        assert_conforms(kind, NAME);
    }
}

#[test]
fn runs_around_a_broken_link() {
    let topology = Topology::single_server(8).with_broken(0, 1).unwrap();
    for kind in [OpKind::AllReduce, OpKind::AllGather, OpKind::ReduceScatter] {
        for zero_copy in [true, false] {
            let setup = Setup {
                algo: Some(NAME),
                topology: topology.clone(),
                zero_copy,
                ccl_bytes: SMALL_CCL_BYTES,
                device: None,
            };
            run(kind, &setup).unwrap_or_else(|e| panic!("{kind}: {e}"));
        }
    }
}
