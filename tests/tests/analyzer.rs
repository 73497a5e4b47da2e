//! The analyzer on every real AllReduce executor, and its cost at scale.
//!
//! Every registered AllReduce executor is recorded through the real framework path on the
//! `sim` device and must pass every check, out of place and in place, zero-copy and staged
//! (with a CCL buffer small enough to force several loop iterations). The ignored tests
//! time the analyzer on a 1024-rank ring and on 8-rank 1 GiB AllReduces:
//! `cargo test -p oxccl-tests --test analyzer -- --ignored --nocapture --test-threads 1`.

use oxccl::framework::analyzer::{analyze, Recording};
use oxccl::{AlgoOverride, Config, DataType, OpKind, OpParam, ReduceOp, Topology};
use std::time::Instant;

use oxccl_plugin_bidir_ring as _;

fn config(algo: &str, topology: Topology, zero_copy: bool, ccl_bytes: usize) -> Config {
    let mut over = AlgoOverride::default();
    over.set(Some(OpKind::AllReduce), algo);
    Config {
        algo: over,
        topology: Some(topology),
        zero_copy,
        ccl_buffer_bytes: ccl_bytes,
        ..Config::default()
    }
}

fn check(algo: &str, ranks: usize, count: usize, in_place: bool, zero_copy: bool) {
    let op = OpParam::all_reduce(count, DataType::F32, ReduceOp::Sum);
    let cfg = config(algo, Topology::single_server(ranks), zero_copy, 4096);
    let rec = Recording::record(&op, in_place, cfg).expect("record");
    let report = analyze(&rec);
    assert!(
        report.passed(),
        "{algo} on {ranks} ranks, count {count}, in_place {in_place}, zero_copy {zero_copy}:\n{report}"
    );
}

#[test]
fn every_all_reduce_executor_passes_every_check() {
    for algo in ["ring", "mesh", "mesh-push", "one-shot", "bidir-ring"] {
        for ranks in [1, 2, 3, 4, 8] {
            for count in [1, 7, 1000, 3000] {
                for in_place in [false, true] {
                    for zero_copy in [true, false] {
                        check(algo, ranks, count, in_place, zero_copy);
                    }
                }
            }
        }
    }
}

/// A staged one-shot call is one round: the closing "done reading your input" round ends
/// every iteration but the last (the next call's stage-in waits at the entry fence), and
/// the analyzer proves the program without it.
#[test]
fn a_staged_one_shot_closes_every_iteration_but_the_last() {
    let ranks = 4;
    let posts = |count: usize| {
        let op = OpParam::all_reduce(count, DataType::F32, ReduceOp::Sum);
        let cfg = config("one-shot", Topology::single_server(ranks), false, 4096);
        let rec = Recording::record(&op, false, cfg).expect("record");
        assert!(analyze(&rec).passed(), "{}", analyze(&rec));
        let program = &rec.ranks[0].program;
        let posts = program.streams.iter().flat_map(|s| &s.tasks);
        posts
            .filter(|t| matches!(t, oxccl::framework::platform::Task::Post { .. }))
            .count()
    };
    // One iteration (a KiB): the ready round alone.
    assert_eq!(posts(256), ranks - 1);
    // Three iterations of a 4 KiB CCL buffer: three ready rounds, two closing ones.
    assert_eq!(posts(3 * 1024), 5 * (ranks - 1));
}

fn timed(algo: &str, ranks: usize, bytes: usize, zero_copy: bool) {
    let op = OpParam::all_reduce(bytes / 4, DataType::F32, ReduceOp::Sum);
    let cfg = config(algo, Topology::single_server(ranks), zero_copy, 32 << 20);
    let t0 = Instant::now();
    let rec = Recording::record(&op, false, cfg).expect("record");
    let t1 = Instant::now();
    let report = analyze(&rec);
    let t2 = Instant::now();
    println!(
        "{algo:>10} {ranks:>5} ranks {bytes:>11} B zero_copy {zero_copy:<5}: {} tasks, record {:.2?}, analyze {:.2?}, {}",
        report.tasks,
        t1 - t0,
        t2 - t1,
        if report.passed() { "passed".to_string() } else { report.to_string() }
    );
    assert!(report.passed());
}

#[test]
#[ignore = "timing: run with --ignored --nocapture"]
fn analyzer_wall_time_8_ranks_1_gib() {
    for algo in ["mesh", "ring"] {
        for zero_copy in [true, false] {
            timed(algo, 8, 1 << 30, zero_copy);
        }
    }
}

#[test]
#[ignore = "timing: run with --ignored --nocapture"]
fn analyzer_wall_time_1024_rank_ring() {
    timed("ring", 1024, 1 << 20, true);
}

#[test]
fn a_real_program_with_one_handshake_removed_fails() {
    use oxccl::framework::analyzer::Check;
    use oxccl::framework::platform::Task;
    let op = OpParam::all_reduce(1000, DataType::F32, ReduceOp::Sum);
    let cfg = config("ring", Topology::single_server(4), true, 4096);
    let mut rec = Recording::record(&op, false, cfg).expect("record");
    let mut program = (*rec.ranks[1].program).clone();
    // Ring step: post DataSignal, wait DataSignal, Reduce, post Ack, wait Ack. Drop the
    // first step's "my right neighbour is done reading my buffer".
    assert!(matches!(program.streams[0].tasks[4], Task::Wait { .. }));
    program.streams[0].tasks.remove(4);
    rec.ranks[1].program = std::sync::Arc::new(program);
    let report = analyze(&rec);
    println!("{report}");
    assert!(report.of(Check::LostWakeup).next().is_some(), "{report}");
}

#[test]
fn a_mesh_that_does_not_join_its_slaves_fails() {
    use oxccl::framework::analyzer::Check;
    use oxccl::framework::platform::Task;
    let op = OpParam::all_reduce(1000, DataType::F32, ReduceOp::Sum);
    let cfg = config("mesh", Topology::single_server(4), true, 4096);
    let mut rec = Recording::record(&op, false, cfg).expect("record");
    let mut program = (*rec.ranks[2].program).clone();
    // The main stream's first waits are the joins of the ready round: drop them all, so
    // the main stream runs ahead of its slaves.
    let main = &mut program.streams[0].tasks;
    let first_reduce = main
        .iter()
        .position(|t| matches!(t, Task::Reduce { .. }))
        .expect("a reduce");
    let joins: Vec<usize> = (0..first_reduce)
        .filter(|&i| matches!(main[i], Task::Wait { .. }))
        .collect();
    joins.iter().rev().for_each(|&i| {
        main.remove(i);
    });
    rec.ranks[2].program = std::sync::Arc::new(program);
    let report = analyze(&rec);
    println!("{report}");
    // The next fork posts a fork notify the slave has not consumed yet.
    assert!(report.of(Check::LostWakeup).next().is_some(), "{report}");
}
