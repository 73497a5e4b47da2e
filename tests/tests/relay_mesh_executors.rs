//! The relayed mesh executors: AllReduce `relay-mesh` and `relay-mesh-single`, AllGather
//! and ReduceScatter `relay-mesh`.
//!
//! Each passes the analyzer's conformance matrix on the healthy shapes (where it has
//! nothing to relay). On meshes with broken links (mesh8 without 0-1; without 0-1 and
//! 2-3; without 0-1, 2-5 and 3-4; a 5-rank mesh without 0-1; and mesh8 without 0-1, 0-2
//! and 1-3, where rank 0 misses two peers whose routes cut its chunk at different places)
//! the analyzer proves the recorded programs over the conformance cases (every dtype and
//! reduce op; counts 0, 1, odd, uneven, a few thousand and larger than the CCL buffer; in
//! and out of place; zero-copy and staged through CCL buffers small enough that the loop
//! runs many times), and the host device produces exactly the reference data. Graphs
//! where a pair shares no neighbour are refused with `Unsupported`, and the cost model
//! shows the spread relays reaching the headline bound on mesh8 without 0-1.

use oxccl::framework::analyzer::conformance::{assert_conforms, cases, Case};
use oxccl::framework::analyzer::{analyze, Recording};
use oxccl::framework::cost::{model, CostParams};
use oxccl::{Config, DataType, Error, OpKind, OpParam, ReduceOp, Topology};
use oxccl_tests::blocks::{block_matrix, run_blocks};
use oxccl_tests::{full_matrix, run_all_reduce, Case as OxCase, Setup};

// The example plugin is linked by the harness; name it so the registry is complete here.
use oxccl_plugin_bidir_ring as _;

/// Every executor under test, with its operator.
const EXECUTORS: [(OpKind, &str); 4] = [
    (OpKind::AllReduce, "relay-mesh"),
    (OpKind::AllReduce, "relay-mesh-single"),
    (OpKind::AllGather, "relay-mesh"),
    (OpKind::ReduceScatter, "relay-mesh"),
];

/// The broken topologies: `(ranks, broken pairs)`.
const BROKEN: [(usize, &[(usize, usize)]); 5] = [
    (8, &[(0, 1)]),
    (8, &[(0, 1), (2, 3)]),
    (8, &[(0, 1), (2, 5), (3, 4)]),
    (5, &[(0, 1)]),
    (8, &[(0, 1), (0, 2), (1, 3)]),
];

/// CCL buffers of the host runs: the matrices' larger-than-the-buffer counts then run the
/// staged loop several times in a few hundred kilobytes per rank.
const DATA_CCL_BYTES: usize = 64 << 10;

fn mesh_without(ranks: usize, pairs: &[(usize, usize)]) -> Topology {
    pairs
        .iter()
        .fold(Topology::single_server(ranks), |t, &(a, b)| {
            t.with_broken(a, b).expect("a linked pair")
        })
}

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

#[test]
fn conform_on_healthy_shapes() {
    for (kind, name) in EXECUTORS {
        assert_conforms(kind, name);
    }
}

/// The analyzer works on byte intervals: one- and four-byte elements and two reduce ops
/// cover what the element type and op change in a program (every count, form and mode is
/// kept).
fn thin(case: &Case) -> bool {
    let op = &case.ops[0];
    [DataType::I8, DataType::F32].contains(&op.dtype)
        && [ReduceOp::Sum, ReduceOp::Max].contains(&op.op)
}

#[test]
fn analyzer_passes_on_broken_meshes() {
    for (kind, algo) in EXECUTORS {
        for (ranks, pairs) in BROKEN {
            let topology = mesh_without(ranks, pairs);
            for case in cases(kind, ranks, 4096).into_iter().filter(thin) {
                let config = record_config(kind, algo, topology.clone(), case.zero_copy);
                let op = &case.ops[0];
                let what = format!(
                    "{kind} {algo} without {pairs:?}: {} count {} {} in_place {} zero_copy {}",
                    op.dtype, op.count, op.op, case.in_place, case.zero_copy
                );
                let rec = Recording::record_each(&case.ops, case.in_place, config)
                    .unwrap_or_else(|e| panic!("{what}: record: {e}"));
                assert_eq!(rec.executor, algo, "{what}");
                let report = analyze(&rec);
                assert!(report.failures.is_empty(), "{what}:\n{report}");
            }
        }
    }
}

/// Element counts (f32) large enough that the spread executors use several relays per
/// missing link (the relay count grows with the chunk, see `relays_for`), for `kind`:
/// AllReduce chunks of about 100 KiB to 1 MiB, gather and scatter blocks of 800 KiB.
fn spread_count(kind: OpKind) -> usize {
    match kind {
        OpKind::AllReduce => 2_300_017,
        _ => 200_003,
    }
}

/// CCL buffers for [`spread_count`] cases: staged iterations then take several relays
/// too, and a smaller last iteration fewer.
const SPREAD_CCL_BYTES: usize = 1 << 20;

#[test]
fn analyzer_passes_with_several_relays_per_link() {
    for (kind, algo) in EXECUTORS {
        for (ranks, pairs) in BROKEN {
            let topology = mesh_without(ranks, pairs);
            let op = OpParam::new(kind, spread_count(kind), DataType::F32, ReduceOp::Sum);
            for (zero_copy, in_place) in
                [(true, false), (true, true), (false, false), (false, true)]
            {
                let mut config = record_config(kind, algo, topology.clone(), zero_copy);
                config.ccl_buffer_bytes = SPREAD_CCL_BYTES;
                let what = format!(
                    "{kind} {algo} without {pairs:?}: zero_copy {zero_copy} in_place {in_place}"
                );
                let rec = Recording::record(&op, in_place, config)
                    .unwrap_or_else(|e| panic!("{what}: record: {e}"));
                let report = analyze(&rec);
                assert!(report.failures.is_empty(), "{what}:\n{report}");
            }
        }
    }
}

/// The broken topologies `keep` accepts (by index in [`BROKEN`]), zero-copy and staged,
/// with `algo` forced.
fn for_each_broken_mesh(
    algo: &'static str,
    keep: impl Fn(usize) -> bool,
    run: impl Fn(&Setup) -> Result<(), String>,
) {
    for (_, (ranks, pairs)) in BROKEN.into_iter().enumerate().filter(|(i, _)| keep(*i)) {
        for zero_copy in [true, false] {
            let setup = Setup {
                algo: Some(algo),
                topology: mesh_without(ranks, pairs),
                zero_copy,
                ccl_bytes: DATA_CCL_BYTES,
                device: None,
            };
            run(&setup).unwrap_or_else(|e| panic!("{ranks} ranks without {pairs:?}: {e}"));
        }
    }
}

#[test]
fn all_reduce_data_is_exact_on_broken_meshes() {
    // The single relay differs from the spread one only in its routes: it gets the
    // headline topology and the one with a rank missing two peers.
    let spread = |_: usize| true;
    let single = |i: usize| i == 0 || i == BROKEN.len() - 1;
    for (algo, keep) in [
        ("relay-mesh", &spread as &dyn Fn(usize) -> bool),
        ("relay-mesh-single", &single),
    ] {
        for_each_broken_mesh(algo, keep, |setup| {
            let cases = full_matrix(setup.topology.ranks(), setup.ccl_bytes);
            run_all_reduce(setup, &cases)
        });
    }
}

#[test]
fn all_gather_and_reduce_scatter_data_is_exact_on_broken_meshes() {
    for kind in [OpKind::AllGather, OpKind::ReduceScatter] {
        for_each_broken_mesh(
            "relay-mesh",
            |_| true,
            |setup| {
                let cases = block_matrix(kind, setup.topology.ranks(), setup.ccl_bytes);
                run_blocks(kind, setup, &cases)
            },
        );
    }
}

#[test]
fn data_is_exact_with_several_relays_per_link() {
    for (ranks, pairs) in BROKEN {
        for zero_copy in [true, false] {
            let setup = |algo| Setup {
                algo: Some(algo),
                topology: mesh_without(ranks, pairs),
                zero_copy,
                ccl_bytes: SPREAD_CCL_BYTES,
                device: None,
            };
            let case = |kind, op, in_place| OxCase {
                dtype: DataType::F32,
                op,
                count: spread_count(kind),
                in_place,
            };
            let what = format!("{ranks} ranks without {pairs:?}, zero_copy {zero_copy}");
            let all_reduce = [
                case(OpKind::AllReduce, ReduceOp::Sum, false),
                case(OpKind::AllReduce, ReduceOp::Max, true),
            ];
            run_all_reduce(&setup("relay-mesh"), &all_reduce)
                .unwrap_or_else(|e| panic!("{what}: {e}"));
            for kind in [OpKind::AllGather, OpKind::ReduceScatter] {
                let cases = [
                    case(kind, ReduceOp::Sum, false),
                    case(kind, ReduceOp::Min, true),
                ];
                run_blocks(kind, &setup("relay-mesh"), &cases)
                    .unwrap_or_else(|e| panic!("{what}: {e}"));
            }
        }
    }
}

#[test]
fn no_common_neighbour_is_unsupported() {
    // A path 0 - 1 - 2 - 3: ranks 0 and 3 share no neighbour.
    let path = mesh_without(4, &[(0, 2), (0, 3), (1, 3)]);
    for (kind, algo) in EXECUTORS {
        let config = record_config(kind, algo, path.clone(), true);
        let op = OpParam::new(kind, 64, DataType::F32, ReduceOp::Sum);
        match Recording::record(&op, false, config) {
            Err(Error::Unsupported { reason, .. }) => {
                assert!(reason.contains("ranks 0 and 3"), "{kind} {algo}: {reason}")
            }
            other => panic!("{kind} {algo} on a path: expected Unsupported, got {other:?}"),
        }
    }
}

/// Modelled algbw (GB/s) of AllReduce `algo` on mesh8 without 0-1 at `bytes`.
fn modelled_algbw(algo: &str, bytes: usize) -> f64 {
    let kind = OpKind::AllReduce;
    let config = record_config(kind, algo, mesh_without(8, &[(0, 1)]), true);
    let op = OpParam::all_reduce(bytes / 4, DataType::F32, ReduceOp::Sum);
    let rec = Recording::record(&op, false, config).expect("record");
    model(&rec, &CostParams::default())
        .expect("model")
        .algbw_gbps
}

#[test]
fn spread_relays_reach_the_bound_and_beat_a_single_relay() {
    // Ranks 0 and 1 move 2(n-1)/n of the data over six 56 GB/s links: 192 GB/s.
    let big = modelled_algbw("relay-mesh", 1 << 30);
    assert!(big >= 0.9 * 192.0, "relay-mesh at 1 GiB: {big:.1} GB/s");
    for bytes in [1 << 10, 1 << 20, 1 << 30] {
        let (spread, single) = (
            modelled_algbw("relay-mesh", bytes),
            modelled_algbw("relay-mesh-single", bytes),
        );
        assert!(
            spread >= single,
            "{bytes} B: relay-mesh {spread:.3} GB/s, relay-mesh-single {single:.3}"
        );
    }
}
