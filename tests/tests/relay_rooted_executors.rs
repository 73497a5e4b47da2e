//! The relaying executors of Broadcast, Reduce, Scatter, Gather, AllGatherV and
//! ReduceScatterV: mesh executors (`relay-mesh`) whose ranks without a link to a root (the
//! rooted operators' root, every block owner for the V forms) are served in pieces through
//! every common healthy neighbour, and the two-phase Broadcast `relay-scatter-allgather`
//! and Reduce `relay-reduce-scatter-gather` built from the same relays.
//!
//! - On healthy shapes they pass the analyzer's whole conformance matrix (they then run
//!   the plain mesh programs).
//! - On broken topologies (`mesh8` without 0-1; without 0-1 and 2-3; without 0-1, 2-5 and
//!   3-4; a 5-rank mesh without 0-1) the analyzer proves their programs for roots 0, 1 and
//!   one more, every boundary count, in and out of place, zero-copy and staged; no rank
//!   asks for a broken link, and a far rank talks to every relay and nothing else.
//! - On the same topologies the host device produces exactly the reference data.
//! - A topology whose unlinked pair has no common neighbour is refused with a typed error.

use oxccl::framework::analyzer::conformance::{assert_conforms, cases};
use oxccl::framework::analyzer::{analyze, Recording};
use oxccl::framework::executor::Peers;
use oxccl::{Config, DataType, OpKind, Topology};
use oxccl_tests::rooted::{rooted_conforms, rooted_matrix, run_rooted};
use oxccl_tests::vector::{blocks_matrix, run_vector};
use oxccl_tests::{Setup, SMALL_CCL_BYTES};

const NAME: &str = "relay-mesh";
const ROOTED: [(OpKind, &str); 6] = [
    (OpKind::Broadcast, NAME),
    (OpKind::Broadcast, "relay-scatter-allgather"),
    (OpKind::Reduce, NAME),
    (OpKind::Reduce, "relay-reduce-scatter-gather"),
    (OpKind::Scatter, NAME),
    (OpKind::Gather, NAME),
];
const VECTOR: [(OpKind, &str); 2] = [(OpKind::AllGatherV, NAME), (OpKind::ReduceScatterV, NAME)];

/// `ranks`-rank single server without the links `pairs`.
fn mesh_without(ranks: usize, pairs: &[(usize, usize)]) -> Topology {
    pairs
        .iter()
        .fold(Topology::single_server(ranks), |t, &(a, b)| {
            t.with_broken(a, b).expect("a linked pair")
        })
}

/// The broken topologies of the issue, and a small odd one.
fn broken_topologies() -> Vec<Topology> {
    vec![
        mesh_without(8, &[(0, 1)]),
        mesh_without(8, &[(0, 1), (2, 3)]),
        mesh_without(8, &[(0, 1), (2, 5), (3, 4)]),
        mesh_without(5, &[(0, 1)]),
    ]
}

fn config(topology: &Topology, kind: OpKind, name: &str, zero_copy: bool) -> Config {
    let mut config = Config {
        topology: Some(topology.clone()),
        zero_copy,
        ccl_buffer_bytes: SMALL_CCL_BYTES,
        ..Config::default()
    };
    config.algo.set(Some(kind), name);
    config
}

#[test]
fn rooted_executors_conform_on_healthy_shapes() {
    for (kind, name) in ROOTED {
        rooted_conforms(kind, name);
    }
}

#[test]
fn vector_executors_conform_on_healthy_shapes() {
    for (kind, name) in VECTOR {
        assert_conforms(kind, name);
    }
}

/// The analyzer's cases of `kind` on `topology` (one dtype, rotating), for roots 0, 1 and
/// the last rank: every check passes and no rank asks for a broken link.
fn analyze_on(topology: &Topology, (kind, name): (OpKind, &str), dtype: DataType) {
    let n = topology.ranks();
    for case in cases(kind, n, SMALL_CCL_BYTES) {
        if case.ops[0].dtype != dtype {
            continue;
        }
        let roots: &[usize] = if kind.has_root() {
            &[0, 1, n - 1]
        } else {
            &[0]
        };
        for &root in roots {
            let mut ops = case.ops.clone();
            if kind.has_root() {
                ops.iter_mut().for_each(|op| op.root = Some(root));
            }
            let what = format!(
                "{kind} {name} on {n} ranks broken {:?} root {root} count {} {case:?}",
                topology.broken_links().collect::<Vec<_>>(),
                ops[0].count
            );
            let config = config(topology, kind, name, case.zero_copy);
            let rec = Recording::record_each(&ops, case.in_place, config)
                .unwrap_or_else(|e| panic!("{what}: {e}"));
            assert_eq!(rec.executor, name, "{what}");
            let report = analyze(&rec);
            assert!(report.passed(), "{what}:\n{report}");
            for (rank, r) in rec.ranks.iter().enumerate() {
                let Peers::List(peers) = &r.request.peers else {
                    panic!("{what}: rank {rank} asks for every peer");
                };
                assert!(
                    peers.iter().all(|&p| !topology.is_broken(rank, p)),
                    "{what}: rank {rank} asks for a broken link: {peers:?}"
                );
            }
        }
    }
}

#[test]
fn programs_on_broken_topologies_pass_the_analyzer() {
    let dtypes = [DataType::F32, DataType::I8, DataType::Bf16, DataType::I32];
    for (t, topology) in broken_topologies().iter().enumerate() {
        for executor in ROOTED.into_iter().chain(VECTOR) {
            analyze_on(topology, executor, dtypes[t % dtypes.len()]);
        }
    }
}

/// A far rank's traffic is spread over all its relays: on `mesh8` without 0-1, rank 1
/// (far from root 0) talks to exactly the six common neighbours, and each of them to the
/// root and rank 1.
#[test]
fn a_far_rank_talks_to_every_relay() {
    let topology = mesh_without(8, &[(0, 1)]);
    for (kind, _) in ROOTED.into_iter().filter(|&(_, name)| name == NAME) {
        let mut op = cases(kind, 8, SMALL_CCL_BYTES)[0].ops[0].clone();
        (op.count, op.root) = (4099, Some(0));
        let rec = Recording::record(&op, false, config(&topology, kind, NAME, true))
            .unwrap_or_else(|e| panic!("{kind}: {e}"));
        assert_eq!(
            rec.ranks[1].request.peers,
            Peers::List(vec![2, 3, 4, 5, 6, 7])
        );
        for relay in 2..8 {
            assert_eq!(rec.ranks[relay].request.peers, Peers::List(vec![0, 1]));
        }
    }
}

#[test]
fn rooted_data_on_broken_topologies() {
    for (t, topology) in broken_topologies().into_iter().enumerate() {
        let n = topology.ranks();
        for (kind, name) in ROOTED {
            // Every fourth case, rotating with the topology: every dtype and count on some
            // topology, and a few cases larger than the CCL buffer on each.
            let thinned: Vec<_> = rooted_matrix(kind, n, SMALL_CCL_BYTES)
                .into_iter()
                .enumerate()
                .filter(|&(i, _)| (i + t) % 4 == 0)
                .map(|(_, c)| c)
                .collect();
            for zero_copy in [true, false] {
                let setup = Setup {
                    algo: Some(name),
                    topology: topology.clone(),
                    zero_copy,
                    ccl_bytes: SMALL_CCL_BYTES,
                    device: None,
                };
                run_rooted(kind, &setup, &thinned).unwrap_or_else(|e| panic!("{e}"));
            }
        }
    }
}

#[test]
fn vector_data_on_broken_topologies() {
    for (t, topology) in broken_topologies().into_iter().enumerate() {
        let n = topology.ranks();
        for (kind, name) in VECTOR {
            let all = blocks_matrix(kind, n, SMALL_CCL_BYTES);
            let thinned: Vec<_> = all.into_iter().skip(t % 3).step_by(3).collect();
            for zero_copy in [true, false] {
                let setup = Setup {
                    algo: Some(name),
                    topology: topology.clone(),
                    zero_copy,
                    ccl_bytes: SMALL_CCL_BYTES,
                    device: None,
                };
                run_vector(kind, &setup, &thinned).unwrap_or_else(|e| panic!("{e}"));
            }
        }
    }
}

/// Ranks 0 and 3 of a 4-rank path 0 - 1 - 2 - 3 share no neighbour: every relay-mesh
/// executor refuses the topology, saying which pair cannot be relayed.
#[test]
fn a_pair_without_a_common_neighbour_is_refused() {
    let topology = mesh_without(4, &[(0, 2), (0, 3), (1, 3)]);
    for (kind, name) in ROOTED.into_iter().chain(VECTOR) {
        let mut op = cases(kind, 4, SMALL_CCL_BYTES)[0].ops.clone();
        op.iter_mut().for_each(|o| o.count = o.count.max(1));
        let err = Recording::record_each(&op, false, config(&topology, kind, name, true))
            .err()
            .unwrap_or_else(|| panic!("{kind} {name}: the path topology was accepted"))
            .to_string();
        assert!(
            err.contains(name) && err.contains("common healthy neighbour"),
            "{kind}: {err}"
        );
    }
}
