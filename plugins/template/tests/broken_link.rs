//! `mesh8` with the 0-1 link broken: the executor needs every pair of ranks linked, so it
//! is never selected there, and forcing it is refused with the reason, by the recording
//! the analyzer checks and by a communicator alike.

use oxccl::framework::analyzer::{analyze, Recording};
use oxccl::{Communicator, Config, DataType, OpKind, OpParam, Topology};
use oxccl_plugin_template::NAME;

fn mesh8_without_0_1() -> Topology {
    Topology::single_server(8)
        .with_broken(0, 1)
        .expect("0-1 is a link")
}

fn all_gather() -> OpParam {
    OpParam::all_gather(1000, DataType::F32)
}

fn config(topology: Topology, forced: bool) -> Config {
    let mut config = Config {
        topology: Some(topology),
        ..Config::default()
    };
    if forced {
        config.algo.set(Some(OpKind::AllGather), NAME);
    }
    config
}

#[test]
fn forcing_it_over_a_broken_link_is_refused_naming_the_full_mesh() {
    let err = Recording::record(&all_gather(), false, config(mesh8_without_0_1(), true))
        .expect_err("a full-mesh executor on a broken mesh");
    let text = err.to_string();
    assert!(
        text.contains(NAME) && text.contains("needs a full mesh"),
        "{text}"
    );

    let err = Communicator::init_all(8, config(mesh8_without_0_1(), true))
        .and_then(|comms| {
            let send = vec![0.0f32; 10];
            let mut recv = vec![0.0f32; 80];
            comms[0].all_gather(&send, &mut recv)
        })
        .expect_err("the communicator refuses it too");
    assert!(err.to_string().contains("needs a full mesh"), "{err}");
}

#[test]
fn selection_passes_it_over_on_the_broken_mesh_and_takes_it_where_forced_on_the_whole() {
    let rec = Recording::record(&all_gather(), false, config(mesh8_without_0_1(), false))
        .expect("select_alg finds an executor that avoids 0-1");
    assert_ne!(rec.executor, NAME);
    assert!(analyze(&rec).failures.is_empty());

    let rec = Recording::record(
        &all_gather(),
        false,
        config(Topology::single_server(8), true),
    )
    .expect("a whole mesh");
    assert_eq!(rec.executor, NAME);
    let report = analyze(&rec);
    assert!(report.failures.is_empty(), "{:?}", report.failures);
}
