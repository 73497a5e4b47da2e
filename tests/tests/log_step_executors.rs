//! The log-step executor families (RHD, NHR, NB) for AllReduce, AllGather and
//! ReduceScatter produce exactly the reference on every shape (1 to 9 ranks,
//! multi-server), for every dtype and reduce op, at boundary counts (0, 1, odd, not
//! divisible by the ranks, larger than the CCL buffer), in place and out of place,
//! zero-copy and staged; each passes the analyzer's conformance matrix; and each refuses a
//! topology whose link it needs is broken, with a typed error.

use oxccl::framework::analyzer::conformance::assert_conforms;
use oxccl::{Communicator, DataType, OpKind, OpParam, ReduceOp, Topology};
use oxccl_tests::blocks::{block_matrix, run_blocks};
use oxccl_tests::{check_on_every_shape, full_matrix, run_all_reduce, Setup, SMALL_CCL_BYTES};

fn check_all_reduce(algo: &'static str) {
    check_on_every_shape(algo, |setup| {
        run_all_reduce(setup, &full_matrix(setup.topology.ranks(), SMALL_CCL_BYTES))
    });
}

fn check_blocks(kind: OpKind, algo: &'static str) {
    check_on_every_shape(algo, |setup| {
        run_blocks(
            kind,
            setup,
            &block_matrix(kind, setup.topology.ranks(), SMALL_CCL_BYTES),
        )
    });
}

/// With the link between ranks 0 and `peer` of an 8-rank server broken, forcing `algo`
/// on rank 0 fails with a typed error, instead of a program over the link: the executor
/// declares that it needs a full mesh (it cannot route around a broken link), so its
/// constraints refuse the topology before planning.
fn refuses_broken_link(kind: OpKind, algo: &'static str, peer: usize) {
    let setup = Setup {
        algo: Some(algo),
        topology: Topology::single_server(8).with_broken(0, peer).unwrap(),
        zero_copy: true,
        ccl_bytes: SMALL_CCL_BYTES,
        device: None,
    };
    let comms = Communicator::init_all(8, setup.config_for(kind)).expect("init");
    let op = OpParam {
        kind,
        ..OpParam::all_reduce(64, DataType::F32, ReduceOp::Sum)
    };
    let err = comms[0].framework().prepare(&op, false).unwrap_err();
    let text = oxccl::framework::error::with_causes(&err);
    assert!(
        text.contains(algo) && text.contains("needs a full mesh"),
        "{peer}: {text}"
    );
}

macro_rules! executor_tests {
    ($kind:expr, $algo:literal, $peer:literal, $run:ident, $conforms:ident, $refuses:ident) => {
        #[test]
        fn $run() {
            match $kind {
                OpKind::AllReduce => check_all_reduce($algo),
                kind => check_blocks(kind, $algo),
            }
        }

        #[test]
        fn $conforms() {
            assert_conforms($kind, $algo);
        }

        #[test]
        fn $refuses() {
            refuses_broken_link($kind, $algo, $peer);
        }
    };
}

executor_tests!(
    OpKind::AllReduce,
    "rhd",
    4,
    all_reduce_rhd,
    all_reduce_rhd_conforms,
    all_reduce_rhd_refuses_broken_link
);

executor_tests!(
    OpKind::AllReduce,
    "nhr",
    4,
    all_reduce_nhr,
    all_reduce_nhr_conforms,
    all_reduce_nhr_refuses_broken_link
);

executor_tests!(
    OpKind::AllReduce,
    "nb",
    4,
    all_reduce_nb,
    all_reduce_nb_conforms,
    all_reduce_nb_refuses_broken_link
);

executor_tests!(
    OpKind::AllGather,
    "rhd",
    4,
    all_gather_rhd,
    all_gather_rhd_conforms,
    all_gather_rhd_refuses_broken_link
);

executor_tests!(
    OpKind::AllGather,
    "nhr",
    4,
    all_gather_nhr,
    all_gather_nhr_conforms,
    all_gather_nhr_refuses_broken_link
);

executor_tests!(
    OpKind::AllGather,
    "nb",
    4,
    all_gather_nb,
    all_gather_nb_conforms,
    all_gather_nb_refuses_broken_link
);

executor_tests!(
    OpKind::ReduceScatter,
    "rhd",
    4,
    reduce_scatter_rhd,
    reduce_scatter_rhd_conforms,
    reduce_scatter_rhd_refuses_broken_link
);

executor_tests!(
    OpKind::ReduceScatter,
    "nhr",
    4,
    reduce_scatter_nhr,
    reduce_scatter_nhr_conforms,
    reduce_scatter_nhr_refuses_broken_link
);

executor_tests!(
    OpKind::ReduceScatter,
    "nb",
    4,
    reduce_scatter_nb,
    reduce_scatter_nb_conforms,
    reduce_scatter_nb_refuses_broken_link
);
