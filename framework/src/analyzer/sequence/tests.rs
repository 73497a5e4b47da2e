//! Hand-written sequences: correct ones pass, and each fence edge, the grant rule and the
//! binary notify contract across operations are shown to matter.

use super::super::tests::{in_, link, mesh_push, out, record, sum};
use super::super::{Check, Recording, Report};
use super::{analyze_sequence, analyze_sequence_with, FenceModel, SequenceError};
use crate::executor::{Mode, Peers};
use crate::topology::Topology;
use oxccl_platform::{Buf, DataType, ReduceOp, Slice};

const B: usize = 64;

fn ccl_in(r: usize) -> Slice {
    Slice::new(r, Buf::CclIn, 0, B)
}

/// Staged, 2 ranks: rank `writer` copies its input into rank 1's CclIn and signals; the
/// other rank waits and reduces rank 1's CclIn with its own input. Nobody tells the writer
/// when the reader is done: its next write relies on the fence.
fn one_way(writer: usize) -> Recording {
    let reader = 1 - writer;
    let mut rec = record(sum(B / 4), Topology::single_server(2), 0, |r, p, layout| {
        let s = &mut p.streams[0];
        if r == writer {
            s.copy(in_(writer, 0, B), ccl_in(1));
            link(writer, reader, layout).tx_data_signal(s);
        } else {
            link(reader, writer, layout).rx_data_signal(s);
            s.reduce(
                vec![in_(reader, 0, B), ccl_in(1)],
                out(reader, 0, B),
                DataType::F32,
                ReduceOp::Sum,
            );
        }
    });
    rec.mode = Mode::Staged;
    rec
}

/// Rank 0 writes its input straight into rank 1's CclIn; rank 1 reduces it. The next
/// operation's write into that CclIn relies on the entry fence.
fn push() -> Recording {
    one_way(0)
}

/// Rank 1 stages its input into its own CclIn; rank 0 reads it. Rank 1's next stage-in
/// relies on its fence waiting for rank 0, which needs rank 0 granted to it.
fn pull(rank1_grants: Peers) -> Recording {
    let mut rec = one_way(1);
    rec.ranks[1].request.peers = rank1_grants;
    rec
}

fn assert_passes(recs: &[&Recording], what: &str) {
    let report = analyze_sequence(recs).expect("one communicator");
    assert!(report.passed(), "{what}:\n{report}");
}

fn assert_reports(report: &Report, check: Check, needles: &[&str]) {
    let hit = report
        .of(check)
        .any(|f| needles.iter().all(|n| f.message.contains(n)));
    assert!(hit, "no {check} failure with {needles:?} in\n{report}");
}

#[test]
fn back_to_back_operations_pass() {
    for n in [2, 3, 4] {
        let mesh = mesh_push(n, 8 * n);
        assert_passes(&[&mesh, &mesh], "mesh twice");
        assert_passes(&[&mesh, &mesh, &mesh], "mesh three times");
    }
    let (mesh, push, pull) = (mesh_push(2, 16), push(), pull(Peers::All));
    assert_passes(&[&push, &push, &push], "push three times");
    assert_passes(&[&pull, &pull], "pull twice");
    assert_passes(&[&mesh, &push, &pull], "mesh, push, pull");
    assert_passes(&[&pull, &mesh, &push], "pull, mesh, push");
    assert_passes(&[&mesh_push(2, 16), &push], "mesh, push");
}

#[test]
fn without_the_entry_fence_a_write_into_a_peer_races_with_its_previous_operation() {
    let push = push();
    let report =
        analyze_sequence_with(&[&push, &push], FenceModel::NONE).expect("one communicator");
    assert_reports(
        &report,
        Check::MemoryConflict,
        &[
            "op 0 rank 1 stream 0 task 1 (Reduce) reads",
            "op 1 rank 0 stream 0 task 0 (Copy) writes",
            "rank 1 CclIn[0..64]",
        ],
    );
    let f = report.of(Check::MemoryConflict).next().expect("a conflict");
    assert_eq!(
        (f.op, f.rank, f.stream, f.task),
        (Some(1), Some(0), Some(0), Some(0))
    );
    assert_passes(&[&push, &push], "the entry fence orders it");
}

#[test]
fn a_peer_outside_the_granted_set_is_caught_and_races() {
    let bad = pull(Peers::List(vec![]));
    let report = analyze_sequence(&[&bad, &bad]).expect("one communicator");
    assert_reports(
        &report,
        Check::Grant,
        &[
            "op 0 rank 0 stream 0 task 1 (Reduce) reads rank 1 CclIn[0..64]",
            "rank 0 is not among rank 1's granted peers",
        ],
    );
    assert_reports(
        &report,
        Check::MemoryConflict,
        &[
            "op 0 rank 0 stream 0 task 1 (Reduce) reads",
            "op 1 rank 1 stream 0 task 0 (Copy) writes",
        ],
    );
    let good = pull(Peers::List(vec![0]));
    assert_passes(&[&good, &good], "rank 1 grants rank 0");
}

#[test]
fn the_exit_fence_orders_peers_use_of_user_buffers_in_direct_mode() {
    // Rank 0 writes rank 1's Output (zero-copy) and never tells it; rank 1's next call
    // stages into its CclIn, which rank 0 read in the first call. Direct mode's exit fence
    // (rank 1 ends after rank 0) is what orders them when rank 1's second call grants no one.
    let first = {
        let mut rec = record(sum(B / 4), Topology::single_server(2), 0, |r, p, _| {
            if r == 0 {
                p.streams[0].copy(ccl_in(1), out(1, 0, B));
            }
        });
        rec.ranks[1].request.peers = Peers::List(vec![0]);
        rec
    };
    let second = {
        let mut rec = record(sum(B / 4), Topology::single_server(2), 0, |r, p, _| {
            if r == 1 {
                p.streams[0].copy(in_(1, 0, B), ccl_in(1));
            }
        });
        rec.ranks[1].request.peers = Peers::List(vec![]);
        rec
    };
    assert_passes(&[&first, &second], "the exit fence orders them");
    // The first specification's entry fence alone (this call's peers only): the device's
    // also waits for the previous call's peers, which orders this case by itself.
    let entry_only = FenceModel {
        exit: false,
        ..FenceModel::CURRENT_PEERS_ONLY
    };
    let report = analyze_sequence_with(&[&first, &second], entry_only).expect("one communicator");
    assert_reports(
        &report,
        Check::MemoryConflict,
        &["op 1 rank 1 stream 0 task 0 (Copy) writes"],
    );
}

#[test]
fn a_notify_left_set_is_a_lost_wakeup_in_the_next_operation() {
    let mut leaky = mesh_push(2, 16);
    for r in 0..2 {
        let mut p = (*leaky.ranks[r].program).clone();
        link(r, 1 - r, leaky.layout).tx_ack(&mut p.streams[0]);
        leaky.ranks[r].program = std::sync::Arc::new(p);
    }
    let single = super::super::analyze(&leaky);
    assert_reports(
        &single,
        Check::LostWakeup,
        &["left set for the next operation"],
    );
    let report = analyze_sequence(&[&leaky, &leaky]).expect("one communicator");
    assert_reports(
        &report,
        Check::LostWakeup,
        &["op 1 rank", "which operation 0 left set"],
    );
    assert!(
        report.of(Check::LostWakeup).any(|f| f.op == Some(1)),
        "{report}"
    );
}

#[test]
fn recordings_of_different_communicators_are_refused() {
    let (two, three) = (mesh_push(2, 16), mesh_push(3, 24));
    assert_eq!(
        analyze_sequence(&[&two]).unwrap_err(),
        SequenceError::TooShort { got: 1 }
    );
    let err = analyze_sequence(&[&two, &three]).unwrap_err();
    assert!(
        matches!(
            err,
            SequenceError::Ranks {
                op: 1,
                ranks: 3,
                expected: 2
            }
        ),
        "{err}"
    );
    let mut bigger = two.clone();
    bigger.ccl_bytes *= 2;
    let err = analyze_sequence(&[&two, &bigger]).unwrap_err();
    assert!(
        matches!(err, SequenceError::CclBytes { op: 1, .. }),
        "{err}"
    );
}
