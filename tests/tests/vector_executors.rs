//! Every registered AllGatherV, ReduceScatterV and AlltoAllV executor produces exactly the
//! reference on every shape, for every dtype (every reduce op for ReduceScatterV), with
//! uneven counts (some zero), displacements out of rank order with gaps, blocks larger
//! than the CCL buffer, in and out of place, zero-copy and staged; and passes the analyzer
//! on a few layouts.

use oxccl::framework::analyzer::{analyze, Recording};
use oxccl::framework::op::VLayout;
use oxccl::{Config, DataType, OpKind, ReduceOp, Topology};
use oxccl_tests::vector::{all_to_all_v, blocks, blocks_matrix, p2p_matrix, run_vector, VCase};
use oxccl_tests::{check_on_every_shape, SMALL_CCL_BYTES};

fn check_blocks(kind: OpKind, algo: &'static str) {
    check_on_every_shape(algo, |setup| {
        let n = setup.topology.ranks();
        run_vector(kind, setup, &blocks_matrix(kind, n, SMALL_CCL_BYTES))
    });
}

/// AlltoAllV layouts on `n` ranks: uniform, uneven with zeros, a few thousand, one pair
/// larger than the CCL buffer.
fn all_to_all_v_layouts(n: usize) -> Vec<Vec<VLayout>> {
    let big = SMALL_CCL_BYTES / 2 + 37;
    vec![
        all_to_all_v(n, |_, _| 1),
        all_to_all_v(n, |a, b| (a * 3 + b * 5) % 4 * 3),
        all_to_all_v(n, |a, b| 1000 + 37 * a + 11 * b),
        all_to_all_v(n, |a, b| {
            if (a, b) == (0, n / 2) {
                big
            } else {
                (a + b) % 3
            }
        }),
    ]
}

#[test]
fn all_gather_v_ring() {
    check_blocks(OpKind::AllGatherV, "ring");
}

#[test]
fn all_gather_v_mesh() {
    check_blocks(OpKind::AllGatherV, "mesh");
}

#[test]
fn reduce_scatter_v_mesh() {
    check_blocks(OpKind::ReduceScatterV, "mesh");
}

#[test]
fn reduce_scatter_v_ring() {
    check_blocks(OpKind::ReduceScatterV, "ring");
}

/// AlltoAllV executor `algo` on every shape, over [`all_to_all_v_layouts`].
fn check_all_to_all_v(algo: &'static str) {
    check_on_every_shape(algo, |setup| {
        let n = setup.topology.ranks();
        run_vector(
            OpKind::AlltoAllV,
            setup,
            &p2p_matrix(n, &all_to_all_v_layouts(n)),
        )
    });
}

#[test]
fn all_to_all_v_put_pairwise() {
    check_all_to_all_v("put-pairwise");
}

#[test]
fn all_to_all_v_mesh() {
    check_all_to_all_v("mesh");
}

#[test]
fn all_to_all_v_put_mesh() {
    check_all_to_all_v("put-mesh");
}

/// put-pairwise and put-mesh pass the analyzer on the put-only shapes (`tcp8`, `2x8`)
/// and on one server, where they run in both modes.
#[test]
fn all_to_all_v_put_executors_pass_the_analyzer_on_put_only_links() {
    let mut shapes = oxccl_tests::put_only_shapes();
    shapes.push(Topology::single_server(5));
    for topology in shapes {
        analyze_all_to_all_v("put-pairwise", topology.clone());
        analyze_all_to_all_v("put-mesh", topology);
    }
}

#[test]
fn all_to_all_v_pairwise() {
    check_all_to_all_v("pairwise");
}

fn analyze_case(kind: OpKind, algo: &str, ranks: usize, case: &VCase, zero_copy: bool) {
    analyze_case_on(kind, algo, Topology::single_server(ranks), case, zero_copy);
}

fn analyze_case_on(kind: OpKind, algo: &str, topology: Topology, case: &VCase, zero_copy: bool) {
    let ranks = topology.ranks();
    let mut config = Config {
        topology: Some(topology),
        zero_copy,
        ccl_buffer_bytes: 4096,
        ..Config::default()
    };
    config.algo.set(Some(kind), algo);
    let rec = Recording::record_each(&case.params(kind), case.in_place, config).expect("record");
    let report = analyze(&rec);
    assert!(
        report.failures.is_empty(),
        "{kind} {algo} on {ranks} ranks, zero_copy {zero_copy}, {case:?}:\n{report}"
    );
}

/// AlltoAllV executor `algo` passes the analyzer on `topology`, over uneven counts with
/// empty blocks and over dense ones, both modes.
fn analyze_all_to_all_v(algo: &str, topology: Topology) {
    let ranks = topology.ranks();
    for layouts in [
        all_to_all_v(ranks, |a, b| (a * 3 + b * 5) % 4 * 300),
        all_to_all_v(ranks, |a, b| 1 + a + b),
    ] {
        for zero_copy in [true, false] {
            let case = VCase {
                dtype: DataType::F32,
                op: ReduceOp::Sum,
                layouts: layouts.clone(),
                in_place: false,
            };
            analyze_case_on(OpKind::AlltoAllV, algo, topology.clone(), &case, zero_copy);
        }
    }
}

fn analyze_blocks(kind: OpKind, algo: &str) {
    for ranks in [1, 2, 3, 5, 8] {
        let uneven: Vec<usize> = (0..ranks).map(|r| (r + 1) % 3 * 700).collect();
        for counts in [vec![1; ranks], uneven] {
            for in_place in [false, true] {
                for zero_copy in [true, false] {
                    let case = VCase {
                        dtype: DataType::F32,
                        op: ReduceOp::Sum,
                        layouts: vec![blocks(&counts, 2); ranks],
                        in_place,
                    };
                    analyze_case(kind, algo, ranks, &case, zero_copy);
                }
            }
        }
    }
}

#[test]
fn vector_executors_pass_the_analyzer() {
    analyze_blocks(OpKind::AllGatherV, "ring");
    analyze_blocks(OpKind::ReduceScatterV, "ring");
    analyze_blocks(OpKind::AllGatherV, "mesh");
    analyze_blocks(OpKind::ReduceScatterV, "mesh");
    for ranks in [1, 2, 3, 5, 8] {
        analyze_all_to_all_v("pairwise", Topology::single_server(ranks));
        analyze_all_to_all_v("mesh", Topology::single_server(ranks));
    }
}
