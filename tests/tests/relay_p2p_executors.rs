//! The fault-avoiding executors of the point-to-point operators and Barrier: AlltoAll
//! `relay-mesh`, AlltoAllV `relay-pairwise`, send/recv `relay-p2p` and Barrier
//! `spanning-tree`.
//!
//! Each passes the analyzer's conformance matrix, its broken meshes included, except where
//! a relayed pair asks more than its relays carry in one call: AlltoAllV and send/recv
//! beyond the CCL buffer on the matrix's 4-rank mesh without 0-1, which they refuse with
//! `Unsupported`, as documented. On more meshes with broken links (mesh8 without 0-1; without 0-1 and 2-3; without 0-1, 2-5 and 3-4; a
//! 5-rank mesh without 0-1) the analyzer proves its recorded programs (among its checks:
//! no task uses a broken link), with CCL buffers small enough that the staged loops and
//! the relay slots run several rounds, and the host device produces exactly the reference
//! data, zero-copy and staged, for counts 0, 1, odd, uneven point-to-point layouts,
//! relayed streams larger than a relay slot and direct ones larger than the CCL buffer.
//! Relayed streams beyond what the relays carry, and graphs where a pair shares no
//! neighbour, are refused with `Unsupported`.

use oxccl::framework::analyzer::conformance::{assert_conforms, cases, check_conformance, shapes};
use oxccl::framework::analyzer::{analyze, Recording};
use oxccl::framework::op::VLayout;
use oxccl::{Config, DataType, Error, OpKind, OpParam, ReduceOp, Topology};
use oxccl_tests::all_to_all::run_all_to_all;
use oxccl_tests::barrier::run_barriers;
use oxccl_tests::vector::{all_to_all_v, p2p_matrix, run_vector, send_recv, VCase};
use oxccl_tests::{Setup, SMALL_CCL_BYTES};

/// The broken topologies: `(ranks, broken pairs)`.
const BROKEN: [(usize, &[(usize, usize)]); 4] = [
    (8, &[(0, 1)]),
    (8, &[(0, 1), (2, 3)]),
    (8, &[(0, 1), (2, 5), (3, 4)]),
    (5, &[(0, 1)]),
];

fn mesh_without(ranks: usize, pairs: &[(usize, usize)]) -> Topology {
    pairs
        .iter()
        .fold(Topology::single_server(ranks), |t, &(a, b)| {
            t.with_broken(a, b).expect("a linked pair")
        })
}

/// Every broken topology, zero-copy and staged, with `algo` forced and CCL buffers of
/// `ccl_bytes`.
fn for_each_broken_mesh(
    algo: &'static str,
    ccl_bytes: usize,
    run: impl Fn(&Setup) -> Result<(), String>,
) {
    for (ranks, pairs) in BROKEN {
        for zero_copy in [true, false] {
            let setup = Setup {
                algo: Some(algo),
                topology: mesh_without(ranks, pairs),
                zero_copy,
                ccl_bytes,
                device: None,
            };
            run(&setup).unwrap_or_else(|e| panic!("{ranks} ranks without {pairs:?}: {e}"));
        }
    }
}

/// A config recording `algo` for `kind` on `topology` with small CCL buffers.
fn record_config(kind: OpKind, algo: &str, topology: Topology, zero_copy: bool) -> Config {
    let mut config = Config {
        topology: Some(topology),
        zero_copy,
        ccl_buffer_bytes: 4096,
        ..Config::default()
    };
    config.algo.set(Some(kind), algo);
    config
}

/// Record `ops` (one per rank) with `algo` on every broken topology, both modes, and
/// assert the analyzer passes.
fn analyze_on_broken_meshes(kind: OpKind, algo: &str, ops: impl Fn(usize) -> Vec<Vec<OpParam>>) {
    for (ranks, pairs) in BROKEN {
        for case in ops(ranks) {
            for zero_copy in [true, false] {
                let config = record_config(kind, algo, mesh_without(ranks, pairs), zero_copy);
                let rec = Recording::record_each(&case, false, config)
                    .unwrap_or_else(|e| panic!("{algo} without {pairs:?}: record: {e}"));
                let report = analyze(&rec);
                assert!(
                    report.failures.is_empty(),
                    "{algo} on {ranks} ranks without {pairs:?}, zero_copy {zero_copy}, \
                     count {}:\n{report}",
                    case[0].count
                );
            }
        }
    }
}

/// AlltoAllV layouts on `n` ranks: uniform, uneven with empty pairs (every rank still has
/// some data), and a relayed pair larger than a relay slot beside a linked pair larger
/// than the CCL buffer.
fn a2av_layouts(n: usize, big_relayed: usize, big_direct: usize) -> Vec<Vec<VLayout>> {
    vec![
        all_to_all_v(n, |_, _| 1),
        all_to_all_v(n, |a, b| (a * 3 + b * 5) % 4 * 3 + usize::from(a == b)),
        all_to_all_v(n, |a, b| match (a, b) {
            (0, 1) | (1, 0) => big_relayed,
            (0, 2) => big_direct,
            _ => (a + b) % 3 + 1,
        }),
    ]
}

/// Send/recv patterns on `n` ranks as `(from, to, count)`, every rank with some data: a
/// ring both ways, all pairs (uneven, some empty), several items per peer (one empty),
/// and the big pairs of [`a2av_layouts`].
fn send_recv_patterns(n: usize, big_relayed: usize, big_direct: usize) -> Vec<Vec<VLayout>> {
    let ring: Vec<(usize, usize, usize)> = (0..n)
        .flat_map(|r| [(r, (r + 1) % n, r % 3 * 5 + 1), ((r + 1) % n, r, 2)])
        .collect();
    let all_pairs = (0..n)
        .flat_map(|a| (0..n).map(move |b| (a, b, (a * 3 + b * 5) % 4 * 3)))
        .collect::<Vec<_>>();
    let several = (0..n)
        .flat_map(|r| {
            let (next, far) = ((r + 1) % n, (r + 2) % n);
            [(r, next, 5), (r, next, 0), (r, far, 9), (next, r, 1)]
        })
        .collect::<Vec<_>>();
    let mut big = ring.clone();
    big.extend([(0, 1, big_relayed), (1, 0, 3), (0, 2, big_direct)]);
    [ring, all_pairs, several, big]
        .iter()
        .map(|t| send_recv(n, t))
        .collect()
}

/// Each rank's parameters of `layouts`.
fn vector_ops(kind: OpKind, layouts: Vec<Vec<VLayout>>) -> Vec<Vec<OpParam>> {
    layouts
        .into_iter()
        .map(|l| {
            l.into_iter()
                .map(|l| OpParam::vector(kind, l, DataType::I32, ReduceOp::Sum))
                .collect()
        })
        .collect()
}

// ---- the conformance matrix ----

#[test]
fn relay_mesh_conforms() {
    assert_conforms(OpKind::AlltoAll, "relay-mesh");
}

/// The matrix passes but for one documented limit. On its 4-rank mesh without 0-1, ranks
/// 0 and 1 have two relays, whose slots carry one CCL buffer between them per call; the
/// matrix's count beyond the CCL buffer asks more, and `algo` refuses it at planning with
/// `Unsupported` (split the call, or raise `OXCCL_BUFFSIZE`): a relay is count-blind, so
/// it cannot take more rounds for a larger call. Every such case is refused so, and they
/// are all the refusals of the matrix, which counts them apart from failures (refused is
/// not wrong; on `mesh8-cut` six relays carry three buffers).
fn conforms_within_relay_capacity(kind: OpKind, algo: &str) {
    let base = Config::default();
    let cut4 = shapes()
        .into_iter()
        .find(|t| t.ranks() == 4 && t.is_broken(0, 1))
        .expect("the matrix has 4 ranks without 0-1");
    let mut refused = 0;
    for case in cases(kind, 4, base.ccl_buffer_bytes) {
        let mut config = Config {
            topology: Some(cut4.clone()),
            zero_copy: case.zero_copy,
            ..base.clone()
        };
        config.algo.set(Some(kind), algo);
        let op = &case.ops[0];
        let what = format!("{algo} {} count {} {case:?}", op.dtype, op.count);
        match Recording::record_each(&case.ops, case.in_place, config) {
            Ok(rec) => assert!(analyze(&rec).passed(), "{what}"),
            Err(e) => {
                let beyond = op.count * op.dtype.size() > base.ccl_buffer_bytes;
                assert!(
                    beyond
                        && matches!(e, Error::Unsupported { .. })
                        && e.to_string().contains("carry at most"),
                    "{what}: {e}"
                );
                refused += 1;
            }
        }
    }
    assert!(refused > 0, "{algo}: no case beyond the relays' capacity");
    match check_conformance(kind, algo) {
        Ok(out) => assert_eq!(out.refused, refused, "{algo}: {out:?}"),
        other => panic!("{algo}: expected only the relay capacity refusals, got {other:?}"),
    }
}

#[test]
fn relay_pairwise_conforms() {
    conforms_within_relay_capacity(OpKind::AlltoAllV, "relay-pairwise");
}

#[test]
fn relay_p2p_conforms() {
    conforms_within_relay_capacity(OpKind::SendRecv, "relay-p2p");
}

#[test]
fn spanning_tree_conforms() {
    assert_conforms(OpKind::Barrier, "spanning-tree");
}

// ---- broken meshes: the analyzer ----

#[test]
fn relay_mesh_passes_the_analyzer_on_broken_meshes() {
    // 4099 elements per block need several relay slots of a 4 KiB CCL buffer.
    analyze_on_broken_meshes(OpKind::AlltoAll, "relay-mesh", |n| {
        [1, 7, 3 * n + 1, 4099]
            .map(|c| vec![OpParam::new(OpKind::AlltoAll, c, DataType::I32, ReduceOp::Sum); n])
            .to_vec()
    });
}

#[test]
fn relay_pairwise_passes_the_analyzer_on_broken_meshes() {
    // Slots of a 4 KiB CCL buffer: a relayed pair of 150 i32 spans pieces of every relay.
    analyze_on_broken_meshes(OpKind::AlltoAllV, "relay-pairwise", |n| {
        vector_ops(OpKind::AlltoAllV, a2av_layouts(n, 150, 3000))
    });
}

#[test]
fn relay_p2p_passes_the_analyzer_on_broken_meshes() {
    analyze_on_broken_meshes(OpKind::SendRecv, "relay-p2p", |n| {
        vector_ops(OpKind::SendRecv, send_recv_patterns(n, 150, 3000))
    });
}

#[test]
fn spanning_tree_passes_the_analyzer_on_broken_meshes() {
    analyze_on_broken_meshes(OpKind::Barrier, "spanning-tree", |n| {
        vec![vec![OpParam::barrier(); n]]
    });
}

// ---- broken meshes: data on the host device ----

#[test]
fn relay_mesh_moves_the_data_on_broken_meshes() {
    // 16 KiB CCL buffers: the larger counts need several iterations of relay slots.
    for_each_broken_mesh("relay-mesh", 16 << 10, |setup| {
        run_all_to_all(setup, |i, j| (i + j).is_multiple_of(4) || j == 5)
    });
}

/// A few dtypes of `layouts` (p2p_matrix thinned to keep the file quick).
fn few_dtypes(n: usize, layouts: &[Vec<VLayout>]) -> Vec<VCase> {
    p2p_matrix(n, layouts)
        .into_iter()
        .filter(|c| matches!(c.dtype, DataType::I8 | DataType::F32 | DataType::F64))
        .collect()
}

/// Elements of `dtype` in half a small CCL buffer, plus some: more than one relay slot,
/// within what the relays of every broken topology carry.
fn big_relayed(es: usize) -> usize {
    SMALL_CCL_BYTES / 2 / es + 37
}

#[test]
fn relay_pairwise_moves_the_data_on_broken_meshes() {
    for_each_broken_mesh("relay-pairwise", SMALL_CCL_BYTES, |setup| {
        let n = setup.topology.ranks();
        let mut cases = Vec::new();
        for es in [1, 4, 8] {
            let layouts = a2av_layouts(n, big_relayed(es), SMALL_CCL_BYTES / es + 37);
            cases.extend(
                few_dtypes(n, &layouts)
                    .into_iter()
                    .filter(|c| c.dtype.size() == es),
            );
        }
        run_vector(OpKind::AlltoAllV, setup, &cases)
    });
}

#[test]
fn relay_p2p_moves_the_data_on_broken_meshes() {
    for_each_broken_mesh("relay-p2p", SMALL_CCL_BYTES, |setup| {
        let n = setup.topology.ranks();
        let mut cases = Vec::new();
        for es in [1, 4, 8] {
            let layouts = send_recv_patterns(n, big_relayed(es), SMALL_CCL_BYTES / es + 37);
            cases.extend(
                few_dtypes(n, &layouts)
                    .into_iter()
                    .filter(|c| c.dtype.size() == es),
            );
        }
        run_vector(OpKind::SendRecv, setup, &cases)
    });
}

/// Ten barriers in a row; the rank that enters late must hold everybody back.
#[test]
fn spanning_tree_holds_every_rank_on_broken_meshes() {
    for_each_broken_mesh("spanning-tree", SMALL_CCL_BYTES, run_barriers);
}

// ---- what the executors refuse ----

#[test]
fn a_relayed_pair_beyond_the_relay_slots_is_unsupported() {
    let topology = mesh_without(5, &[(0, 1)]);
    // Three relays, one slot of 2 KiB each out of a 4 KiB CCL buffer: 6 KiB at most.
    let too_big = send_recv(
        5,
        &[(0, 1, 6 * 1024 / 4 + 1), (2, 3, 1), (3, 4, 1), (4, 2, 1)],
    );
    let ops: Vec<OpParam> = too_big
        .into_iter()
        .map(|l| OpParam::vector(OpKind::SendRecv, l, DataType::I32, ReduceOp::Sum))
        .collect();
    let config = record_config(OpKind::SendRecv, "relay-p2p", topology, true);
    match Recording::record_each(&ops, false, config) {
        Err(Error::Unsupported { reason, .. }) => {
            assert!(
                reason.contains("relays carry at most 6144 bytes"),
                "{reason}"
            )
        }
        other => panic!("expected Unsupported, got {:?}", other.map(|_| ())),
    }
}

#[test]
fn a_pair_without_a_common_neighbour_is_unsupported_but_the_tree_barrier_runs() {
    // A path 0 - 1 - 2 - 3 - 4: 0 and 2 share neighbour 1, 0 and 3 share none.
    let mut path = Topology::single_server(5);
    for (a, b) in [(0, 2), (0, 3), (0, 4), (1, 3), (1, 4), (2, 4)] {
        path = path.with_broken(a, b).expect("a linked pair");
    }
    let a2a = vec![OpParam::new(OpKind::AlltoAll, 4, DataType::I32, ReduceOp::Sum); 5];
    let config = record_config(OpKind::AlltoAll, "relay-mesh", path.clone(), true);
    assert!(matches!(
        Recording::record_each(&a2a, false, config),
        Err(Error::Unsupported { .. })
    ));
    let config = record_config(OpKind::Barrier, "spanning-tree", path, false);
    let rec = Recording::record(&OpParam::barrier(), false, config).expect("record");
    let report = analyze(&rec);
    assert!(report.passed(), "{report}");
}
