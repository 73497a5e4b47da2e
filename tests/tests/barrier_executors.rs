//! Every registered Barrier executor completes on every shape, many times in a row, zero-copy
//! and staged, and passes the analyzer (whose deadlock and lost-wakeup checks are what
//! prove a barrier), including a ranks-apart entry test on the host device.

use oxccl::framework::analyzer::conformance::assert_conforms;
use oxccl::framework::analyzer::{analyze, Recording};
use oxccl::{Config, OpKind, OpParam, Topology};
use oxccl_tests::barrier::run_barriers;
use oxccl_tests::check_on_every_shape;

#[test]
fn dissemination() {
    check_on_every_shape("dissemination", run_barriers);
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
