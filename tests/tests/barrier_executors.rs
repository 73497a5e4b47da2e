//! Every registered Barrier executor completes on every shape, many times in a row, zero-copy
//! and staged, and passes the analyzer (whose deadlock and lost-wakeup checks are what
//! prove a barrier), including a ranks-apart entry test on the host device.

use oxccl::framework::analyzer::conformance::assert_conforms;
use oxccl::framework::analyzer::{analyze, Recording};
use oxccl::{Communicator, Config, OpKind, OpParam, Topology, UserBuffers};
use oxccl_tests::{check_on_every_shape, Setup};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

fn barrier(comm: &Communicator) -> Result<(), String> {
    let mut none: [u8; 0] = [];
    comm.execute(&OpParam::barrier(), UserBuffers::InPlace(&mut none))
        .map_err(|e| format!("rank {}: {e}", comm.rank()))
}

/// Ten barriers in a row; before each, every rank counts itself in, and after it every rank
/// must see all the counts of that barrier (the late rank sleeps before entering).
fn run(setup: &Setup) -> Result<(), String> {
    let n = setup.topology.ranks();
    let comms = Communicator::init_all(n, setup.config_for(OpKind::Barrier))
        .map_err(|e| format!("{setup:?}: init: {e}"))?;
    let entered = AtomicUsize::new(0);
    std::thread::scope(|s| {
        let handles: Vec<_> = comms
            .iter()
            .map(|comm| {
                let entered = &entered;
                s.spawn(move || -> Result<(), String> {
                    for round in 0..10 {
                        if comm.rank() == round % n {
                            std::thread::sleep(Duration::from_millis(2));
                        }
                        entered.fetch_add(1, Ordering::SeqCst);
                        barrier(comm)?;
                        let seen = entered.load(Ordering::SeqCst);
                        if seen < (round + 1) * n {
                            return Err(format!(
                                "{:?} on {n} ranks: rank {} left barrier {round} after {seen} entries",
                                setup.topology.server_sizes(),
                                comm.rank()
                            ));
                        }
                        barrier(comm)?;
                    }
                    Ok(())
                })
            })
            .collect();
        handles
            .into_iter()
            .try_for_each(|h| h.join().expect("rank thread panicked"))
    })
}

#[test]
fn dissemination() {
    check_on_every_shape("dissemination", run);
}

#[test]
fn dissemination_passes_the_analyzer() {
    for ranks in 1..=9 {
        for zero_copy in [true, false] {
            let mut config = Config {
                topology: Some(Topology::single_server(ranks)),
                zero_copy,
                ..Config::default()
            };
            config.algo.set(Some(OpKind::Barrier), "dissemination");
            let rec = Recording::record(&OpParam::barrier(), false, config).expect("record");
            let report = analyze(&rec);
            assert!(
                report.passed(),
                "{ranks} ranks, zero_copy {zero_copy}:\n{report}"
            );
        }
    }
}

#[test]
fn dissemination_conforms() {
    assert_conforms(OpKind::Barrier, "dissemination");
}
