//! select_alg's chain: a plugin selector (a `linkme` slice entry) decides before the
//! built-in choice, and the OXCCL_ALGO override decides before it (own binary: the selector
//! is global); the built-in choice is the cost model's fastest feasible executor, cached
//! per size bucket and explained candidate by candidate; a disconnected topology is refused.

use oxccl::framework::op::VLayout;
use oxccl::framework::select::{Rejection, Source};
use oxccl::framework::{Explanation, Verdict};
use oxccl::{
    registry, Communicator, Config, DataType, Error, OpKind, OpParam, ReduceOp, SelectRequest,
    Topology,
};
use std::sync::Arc;

fn ring_for_777(req: &SelectRequest<'_>) -> Option<&'static str> {
    (req.op.count == 777).then_some("ring")
}

oxccl::register_selector!(RING_FOR_777, "ring-for-777", 100, ring_for_777);

fn selected(config: Config, count: usize) -> (String, String) {
    let comms = Communicator::init_all(4, config).unwrap();
    let op = OpParam::all_reduce(count, DataType::I32, ReduceOp::Sum);
    let p = comms[0].framework().prepare(&op, false).unwrap();
    (p.selection.executor.name.to_string(), p.selection.reason)
}

#[test]
fn plugin_selectors_come_between_the_override_and_the_builtin_choice() {
    let (name, reason) = selected(Config::default(), 777);
    assert_eq!(name, "ring");
    assert!(reason.contains("ring-for-777"), "{reason}");

    let (name, reason) = selected(Config::default(), 778);
    assert_ne!(name, "ring");
    assert!(reason.contains("built-in"), "{reason}");

    let mut forced = Config::default();
    forced.algo.set(Some(OpKind::AllReduce), "mesh");
    let (name, reason) = selected(forced, 777);
    assert_eq!(name, "mesh");
    assert!(reason.contains("OXCCL_ALGO"), "{reason}");
}

/// Sim-device ranks on `topology` (selection only: nothing runs).
fn sim(topology: Topology) -> Vec<oxccl::framework::Communicator> {
    let config = Config {
        device: "sim".to_string(),
        topology: Some(topology),
        ..Config::default()
    };
    oxccl::framework::Communicator::init_all(config.topology.as_ref().unwrap().ranks(), config)
        .unwrap()
}

fn modelled_us(e: &Explanation, name: &str) -> f64 {
    let c = e.candidates.iter().find(|c| c.name == name).unwrap();
    c.verdict
        .modelled()
        .unwrap_or_else(|| panic!("{e}"))
        .time_us
}

#[test]
fn the_model_picks_a_mesh_for_a_1mib_broadcast_where_preference_picked_ring() {
    let topology = Topology::parse_spec("mesh8").unwrap();
    let comms = sim(topology.clone());
    let op = OpParam::rooted(OpKind::Broadcast, 1 << 18, DataType::F32, ReduceOp::Sum, 0);
    let chosen = comms[3].select(&op, false).unwrap();
    let e = &chosen.explanation;
    // mesh-push (each rank pushes a chunk of the root's vector over all its links) beats
    // the pulling mesh, which beats the ring that preference alone would pick.
    assert_eq!(chosen.executor.name, "mesh-push", "{e}");
    assert_eq!(e.source, Source::Model);
    assert!(modelled_us(e, "mesh-push") < modelled_us(e, "mesh"), "{e}");
    assert!(modelled_us(e, "mesh") < modelled_us(e, "ring"), "{e}");
    // The hand-set hint that made the old selector skip mesh above 64 KiB is ignored.
    let mesh = registry()
        .unwrap()
        .executor(OpKind::Broadcast, "mesh")
        .unwrap();
    assert!(mesh
        .constraints
        .auto_selection_veto(1 << 20, &topology)
        .is_some());
    let ring = e.candidates.iter().find(|c| c.name == "ring").unwrap();
    assert!(
        matches!(&ring.verdict, Verdict::NotChosen { why, .. } if why == "slower than mesh-push"),
        "{e}"
    );
}

#[test]
fn the_cache_answers_every_rank_and_communicator_of_a_bucket_alike() {
    let topology = Topology::parse_spec("mesh8").unwrap();
    let (a, b) = (sim(topology.clone()), sim(topology));
    let op = OpParam::all_reduce(200_000, DataType::F32, ReduceOp::Sum);
    let first = a[0].select(&op, false).unwrap();
    // 800 000 and 1 000 000 bytes share the 1 MiB bucket.
    let other = b[5].select(&op.with_count(250_000), false).unwrap();
    assert_eq!(first.executor.name, other.executor.name);
    assert!(Arc::ptr_eq(&first.explanation, &other.explanation));
    assert_eq!(first.explanation.bucket_bytes, Some(1 << 20));
    let smaller = a[0].select(&op.with_count(1000), false).unwrap();
    assert!(!Arc::ptr_eq(&first.explanation, &smaller.explanation));
}

#[test]
fn broken_links_are_explained_and_the_fastest_feasible_executor_wins() {
    let topology = Topology::parse_spec("mesh8")
        .unwrap()
        .with_broken(0, 1)
        .unwrap();
    let comms = sim(topology);
    let op = OpParam::all_reduce(1 << 18, DataType::F32, ReduceOp::Sum);
    let chosen = comms[0].select(&op, false).unwrap();
    let e = &chosen.explanation;
    let registered = registry().unwrap().executors_for(OpKind::AllReduce).count();
    assert_eq!(e.candidates.len(), registered, "{e}");
    let rejected: Vec<(&str, Rejection)> = e.rejected().map(|(c, k)| (c.name, k)).collect();
    assert!(rejected.contains(&("mesh", Rejection::Constraint)), "{e}");
    // rhd cannot route around the broken link and declares it (full_mesh), as does every
    // built-in that cannot: none is left to be refused at planning (infeasible).
    assert!(rejected.contains(&("rhd", Rejection::Constraint)), "{e}");
    assert!(
        rejected.contains(&("put-rhd", Rejection::Constraint)),
        "{e}"
    );
    assert!(
        rejected.iter().all(|&(_, k)| k == Rejection::Constraint),
        "{e}"
    );
    let best = e
        .candidates
        .iter()
        .filter_map(|c| c.verdict.modelled().map(|m| m.time_us))
        .fold(f64::INFINITY, f64::min);
    assert_eq!(modelled_us(e, chosen.executor.name), best, "{e}");
    assert!(modelled_us(e, "ring") > best, "{e}");
}

#[test]
fn point_to_point_operators_keep_the_preference_choice() {
    let comms = sim(Topology::single_server(4));
    let counts = [8usize; 4];
    let displs = [0usize, 8, 16, 24];
    let layout = VLayout::all_to_all_v(&counts, &displs, &counts, &displs);
    let op = OpParam::vector(OpKind::AlltoAllV, layout, DataType::F32, ReduceOp::Sum);
    let chosen = comms[1].select(&op, false).unwrap();
    let e = &chosen.explanation;
    assert_eq!(e.source, Source::Preference, "{e}");
    assert!(e.note.as_deref().unwrap().contains("point-to-point"), "{e}");
    assert!(chosen.reason.contains("built-in"), "{}", chosen.reason);
    let best = registry()
        .unwrap()
        .executors_for(OpKind::AlltoAllV)
        .map(|x| x.preference)
        .max();
    assert_eq!(Some(chosen.executor.preference), best, "{e}");
    // Every pair at once, in one phase.
    assert_eq!(chosen.executor.name, "mesh", "{e}");
}

#[test]
fn every_rank_picks_the_same_point_to_point_executor_around_a_broken_link() {
    // Each rank sends to the next and receives from the previous: only ranks 0 and 1 see
    // the broken 0-1 link in their own items, yet all ranks must agree.
    let ring_items = |rank: usize| {
        let item = |peer| oxccl::framework::op::P2pItem {
            peer,
            offset: 0,
            count: 4,
        };
        let layout = VLayout::P2p {
            sends: vec![item((rank + 1) % 8)],
            recvs: vec![item((rank + 7) % 8)],
        };
        OpParam::vector(OpKind::SendRecv, layout, DataType::F32, ReduceOp::Sum)
    };
    let picks = |topology: Topology| -> Vec<&'static str> {
        let comms = sim(topology);
        (0..8)
            .map(|r| {
                comms[r]
                    .select(&ring_items(r), false)
                    .unwrap()
                    .executor
                    .name
            })
            .collect()
    };
    let healthy = picks(Topology::parse_spec("mesh8").unwrap());
    assert!(healthy.iter().all(|&n| n == "put-p2p"), "{healthy:?}");
    let cut = picks(Topology::parse_spec("mesh8-cut").unwrap());
    assert!(cut.iter().all(|&n| n == cut[0]), "{cut:?}");
    for direct in ["p2p", "put-p2p"] {
        assert_ne!(
            cut[0], direct,
            "{direct} needs the broken link on ranks 0 and 1"
        );
    }
}

#[test]
fn a_disconnected_topology_is_refused_with_the_groups() {
    let cut = (1..8).fold(Topology::parse_spec("mesh8").unwrap(), |t, p| {
        t.with_broken(0, p).unwrap()
    });
    let err = Communicator::init_all(
        8,
        Config {
            topology: Some(cut),
            ..Config::default()
        },
    )
    .unwrap_err();
    assert!(
        matches!(&err, Error::Disconnected { groups } if groups.len() == 2 && groups[0] == [0]),
        "{err:?}"
    );
    assert!(err.to_string().contains("ranks {0} and {1,...,7}"), "{err}");
}
