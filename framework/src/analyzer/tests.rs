//! Hand-written programs that each check must catch, and correct ones that must pass.

use super::{analyze, Check, RankRecording, Recording, Report};
use crate::executor::{Mode, Peers, ResourceRequest};
use crate::op::{OpKind, OpParam};
use crate::topology::Topology;
use oxccl_platform::{
    Buf, DataType, Link, LinkKind, NotifyLayout, RankProgram, ReduceOp, Slice, StreamProgram,
};
use std::sync::Arc;

const ES: usize = 4;

/// One rank's main-stream program for a hand-written operator.
type Body = Box<dyn Fn(usize, &mut StreamProgram)>;

/// A recording of `n` ranks on one server, built by `build(rank, program, layout)`.
pub(super) fn record(
    op: OpParam,
    topology: Topology,
    slaves: usize,
    build: impl Fn(usize, &mut RankProgram, NotifyLayout),
) -> Recording {
    let n = topology.ranks();
    let layout = NotifyLayout {
        ranks: n,
        link_channels: 1,
    };
    let ranks = (0..n)
        .map(|r| {
            let mut p = RankProgram::new(r, 1 + slaves);
            build(r, &mut p, layout);
            RankRecording {
                program: Arc::new(p),
                loops: Default::default(),
                request: ResourceRequest {
                    slave_streams: slaves,
                    local_notifies: 0,
                    scratch_bytes: 64,
                    peers: Peers::All,
                    max_count_per_loop: None,
                    plan: Default::default(),
                },
            }
        })
        .collect();
    Recording {
        ops: vec![op.clone(); topology.ranks()],
        op,
        topology,
        mode: Mode::Direct,
        in_place: false,
        executor: "hand-written",
        reason: String::new(),
        layout,
        ccl_bytes: 1024,
        ranks,
    }
}

pub(super) fn link(r: usize, peer: usize, layout: NotifyLayout) -> Link {
    Link::new(r, peer, LinkKind::Sdma, 0, layout)
}

pub(super) fn in_(r: usize, off: usize, len: usize) -> Slice {
    Slice::new(r, Buf::Input, off, len)
}

pub(super) fn out(r: usize, off: usize, len: usize) -> Slice {
    Slice::new(r, Buf::Output, off, len)
}

pub(super) fn sum(count: usize) -> OpParam {
    OpParam::all_reduce(count, DataType::F32, ReduceOp::Sum)
}

/// Ack round with every peer on `s`.
fn ready_round(r: usize, n: usize, s: &mut StreamProgram, layout: NotifyLayout) {
    (0..n)
        .filter(|&p| p != r)
        .for_each(|p| link(r, p, layout).tx_ack(s));
    (0..n)
        .filter(|&p| p != r)
        .for_each(|p| link(r, p, layout).rx_ack(s));
}

/// A correct AllReduce: a slave stream does the ready round between a fork and a join, the
/// main stream reduces chunk r of every input into its output and every peer's output.
pub(super) fn mesh_push(n: usize, count: usize) -> Recording {
    record(sum(count), Topology::single_server(n), 1, |r, p, layout| {
        let (fork, join) = (layout.local(r, 0), layout.local(r, 1));
        p.streams[0].post(fork);
        p.streams[1].wait(fork);
        ready_round(r, n, &mut p.streams[1], layout);
        p.streams[1].post(join);
        p.streams[0].wait(join);
        let chunk = count / n * ES;
        let srcs = (0..n).map(|q| in_(q, r * chunk, chunk)).collect();
        let dsts = (0..n).map(|q| out(q, r * chunk, chunk)).collect();
        p.streams[0].reduce_to(srcs, dsts, DataType::F32, ReduceOp::Sum);
    })
}

/// Failures of one check, as text.
fn of(report: &Report, check: Check) -> Vec<String> {
    report.of(check).map(|f| f.message.clone()).collect()
}

fn assert_reports(report: &Report, check: Check, needle: &str) {
    let msgs = of(report, check);
    assert!(
        msgs.iter().any(|m| m.contains(needle)),
        "no {check} failure with `{needle}` in\n{report}"
    );
}

#[test]
fn correct_hand_written_all_reduce_passes() {
    for n in [1, 2, 4] {
        let report = analyze(&mesh_push(n, 8 * n));
        assert!(report.passed(), "{n} ranks:\n{report}");
        assert!(report.tasks > 0);
    }
}

#[test]
fn deadlock_names_every_stuck_wait_and_its_posters() {
    let rec = record(sum(4), Topology::single_server(2), 0, |r, p, layout| {
        let l = link(r, 1 - r, layout);
        l.rx_ack(&mut p.streams[0]);
        l.tx_ack(&mut p.streams[0]);
    });
    let report = analyze(&rec);
    let msgs = of(&report, Check::Deadlock);
    assert_eq!(msgs.len(), 2, "{report}");
    assert!(
        msgs[0].contains(
            "rank 0 stream 0 task 0 (Wait) waits forever on notify 3 of rank 0 (Ack from rank 1"
        ),
        "{report}"
    );
    assert!(
        msgs[0].contains("rank 1 stream 0 task 1 (Post), which never ran"),
        "{report}"
    );

    let orphan = record(sum(4), Topology::single_server(2), 0, |r, p, layout| {
        if r == 1 {
            link(1, 0, layout).rx_data_signal(&mut p.streams[0]);
        }
    });
    assert_reports(&analyze(&orphan), Check::Deadlock, "no task left posts it");
}

#[test]
fn lost_wakeup_is_found_even_when_the_canonical_run_is_lucky() {
    // Rank 0 posts twice; rank 1 waits twice. The canonical run interleaves them, but
    // nothing orders the second post after the first wait.
    let rec = record(sum(4), Topology::single_server(2), 0, |r, p, layout| {
        let l = link(r, 1 - r, layout);
        let s = &mut p.streams[0];
        if r == 1 {
            l.rx_ack(s);
            l.rx_ack(s);
        } else {
            l.tx_ack(s);
            l.tx_ack(s);
        }
    });
    let report = analyze(&rec);
    assert_reports(
        &report,
        Check::LostWakeup,
        "rank 0 stream 0 task 1 (Post) posts notify 0 of rank 1",
    );
    let unconsumed = record(sum(4), Topology::single_server(2), 0, |r, p, layout| {
        if r == 0 {
            link(0, 1, layout).tx_ack(&mut p.streams[0]);
        }
    });
    assert_reports(
        &analyze(&unconsumed),
        Check::LostWakeup,
        "no wait ever consumes it",
    );
}

#[test]
fn unordered_writes_and_reads_conflict() {
    let ww = record(sum(4), Topology::single_server(2), 0, |r, p, _| {
        p.streams[0].copy(in_(r, 0, 16), out(1, 0, 16));
        if r == 0 {
            p.streams[0].copy(in_(0, 0, 16), out(0, 0, 16));
        }
    });
    let report = analyze(&ww);
    assert_reports(&report, Check::MemoryConflict, "write-write conflict: rank 0 stream 0 task 0 (Copy) writes and rank 1 stream 0 task 0 (Copy) writes rank 1 Output[0..16]");

    let rw = record(sum(4), Topology::single_server(2), 0, |r, p, _| {
        if r == 0 {
            p.streams[0].copy(Slice::new(1, Buf::CclOut, 0, 16), out(0, 0, 16));
        } else {
            p.streams[0].copy(in_(1, 0, 16), Slice::new(1, Buf::CclOut, 0, 16));
        }
    });
    let report = analyze(&rw);
    assert!(!of(&report, Check::MemoryConflict).is_empty(), "{report}");
}

#[test]
fn missing_duplicated_and_misplaced_contributions_are_named() {
    let variant = |srcs: fn(usize) -> Vec<Slice>| {
        record(
            sum(4),
            Topology::single_server(3),
            0,
            move |r, p, layout| {
                ready_round(r, 3, &mut p.streams[0], layout);
                p.streams[0].reduce(srcs(r), out(r, 0, 16), DataType::F32, ReduceOp::Sum);
            },
        )
    };
    let missing = variant(|_| vec![in_(0, 0, 16), in_(1, 0, 16)]);
    assert_reports(
        &analyze(&missing),
        Check::Semantics,
        "rank 0 Output[0..16]: missing contributions of rank 2",
    );
    let dup = variant(|_| vec![in_(0, 0, 16), in_(1, 0, 16), in_(2, 0, 16), in_(1, 0, 16)]);
    assert_reports(
        &analyze(&dup),
        Check::Semantics,
        "duplicated contributions of rank 1",
    );
    let complete = variant(|_| vec![in_(2, 0, 16), in_(0, 0, 16), in_(1, 0, 16)]);
    assert!(analyze(&complete).passed());
    let rec = record(sum(4), Topology::single_server(2), 0, |r, p, _| {
        p.streams[0].reduce(
            vec![in_(0, 0, 8), in_(1, 8, 8)],
            out(r, 0, 8),
            DataType::F32,
            ReduceOp::Sum,
        );
        p.streams[0].reduce(
            vec![in_(0, 8, 8), in_(1, 0, 8)],
            out(r, 8, 8),
            DataType::F32,
            ReduceOp::Sum,
        );
    });
    assert_reports(
        &analyze(&rec),
        Check::Semantics,
        "wrong offset: rank 1's Input[8..16] where Input[0..8] belongs",
    );
}

#[test]
fn wrong_op_and_stale_reads_are_semantic_failures() {
    let max = record(sum(4), Topology::single_server(2), 0, |r, p, _| {
        p.streams[0].reduce(
            vec![in_(0, 0, 16), in_(1, 0, 16)],
            out(r, 0, 16),
            DataType::F32,
            ReduceOp::Max,
        );
    });
    assert_reports(
        &analyze(&max),
        Check::Semantics,
        "reduced with Max, expected Sum",
    );
    let stale = record(sum(4), Topology::single_server(1), 0, |_, p, _| {
        let ccl = Slice::new(0, Buf::CclIn, 0, 16);
        p.streams[0].reduce_to(
            vec![in_(0, 0, 16), ccl],
            vec![out(0, 0, 16)],
            DataType::F32,
            ReduceOp::Sum,
        );
    });
    let report = analyze(&stale);
    assert_reports(&report, Check::Semantics, "stale data read before it was written: rank 0 stream 0 task 0 (Reduce) reduces rank 0 CclIn[0..16]");
    assert_reports(&report, Check::Semantics, "uninitialised");
}

#[test]
fn out_of_bounds_overlaps_and_input_writes_are_bounds_failures() {
    let rec = record(sum(4), Topology::single_server(1), 0, |_, p, _| {
        p.streams[0].copy(in_(0, 8, 16), out(0, 0, 16));
        p.streams[0].copy(Slice::new(0, Buf::Scratch, 0, 16), in_(0, 0, 16));
        p.streams[0].reduce_to(
            vec![out(0, 0, 8), out(0, 4, 8)],
            vec![out(0, 0, 8)],
            DataType::F32,
            ReduceOp::Sum,
        );
    });
    let report = analyze(&rec);
    assert_reports(
        &report,
        Check::Bounds,
        "touches rank 0 Input[8..24], past the end of the buffer (16 bytes)",
    );
    assert_reports(
        &report,
        Check::Bounds,
        "writes rank 0 Input[0..16], the user's read-only Input",
    );
    assert_reports(
        &report,
        Check::Bounds,
        "a source and a destination overlap: rank 0 Output[0..8] and rank 0 Output[4..12]",
    );
    assert_eq!(report.of(Check::Bounds).count(), 3, "{report}");
}

#[test]
fn broken_links_and_foreign_waits_are_link_failures() {
    let topo = Topology::single_server(3).with_broken(0, 1).unwrap();
    let rec = record(sum(4), topo, 0, |r, p, layout| {
        if r == 0 {
            p.streams[0].copy(in_(1, 0, 16), out(0, 0, 16));
            p.streams[0].post(layout.link(1, 0, 0, oxccl_platform::LinkSignal::Ack));
            p.streams[0].wait(layout.link(2, 0, 0, oxccl_platform::LinkSignal::Ack));
        }
    });
    let report = analyze(&rec);
    assert_reports(
        &report,
        Check::Link,
        "touches rank 1 Input[0..16], but the link between ranks 0 and 1 is broken",
    );
    assert_reports(
        &report,
        Check::Link,
        "posts notify 0 of rank 1, but the link between ranks 0 and 1 is broken",
    );
    assert_reports(
        &report,
        Check::Link,
        "waits on notify 0 of rank 2: a rank waits only on its own notifies",
    );
}

#[test]
fn reads_and_user_writes_over_put_only_links_are_link_failures() {
    let tcp = crate::topology::presets::preset("tcp8").unwrap();
    let rec = record(sum(4), tcp, 0, |r, p, _| {
        if r == 0 {
            p.streams[0].copy(in_(1, 0, 16), out(0, 0, 16));
            p.streams[0].copy(in_(0, 0, 16), out(2, 0, 16));
            p.streams[0].copy(in_(0, 0, 16), Slice::new(3, Buf::CclIn, 0, 16));
        }
    });
    let report = analyze(&rec);
    assert_reports(&report, Check::Link, "rank 0 stream 0 task 0");
    assert_reports(
        &report,
        Check::Link,
        "reads rank 1 Input[0..16] over the put-only link 0-1",
    );
    assert_reports(
        &report,
        Check::Link,
        "writes rank 2 Output[0..16] over the put-only link 0-2",
    );
    let put_only: Vec<String> = of(&report, Check::Link)
        .into_iter()
        .filter(|m| m.contains("put-only"))
        .collect();
    assert_eq!(
        put_only.len(),
        2,
        "the put into CclIn is allowed: {put_only:?}"
    );
}

#[test]
fn a_put_read_before_its_writer_s_post_reached_the_target_is_reported() {
    // Rank 0 puts into rank 2's CclIn over a put-only link. Announced through rank 1, the
    // read is ordered after the put but the put may still be in flight; announced by a
    // post of rank 0 to rank 2, which rank 2 waits for, it has landed.
    let tcp = crate::topology::presets::preset("tcp8").unwrap();
    let cclin = Slice::new(2, Buf::CclIn, 0, 16);
    let through = |relay: bool| {
        record(sum(4), tcp.clone(), 0, move |r, p, layout| {
            let s = &mut p.streams[0];
            match r {
                0 => {
                    s.copy(in_(0, 0, 16), cclin);
                    link(0, if relay { 1 } else { 2 }, layout).tx_ack(s);
                }
                1 if relay => {
                    link(1, 0, layout).rx_ack(s);
                    link(1, 2, layout).tx_ack(s);
                }
                2 => {
                    link(2, if relay { 1 } else { 0 }, layout).rx_ack(s);
                    s.copy(cclin, out(2, 0, 16));
                }
                _ => {}
            }
        })
    };
    let report = analyze(&through(true));
    assert_reports(
        &report,
        Check::MemoryConflict,
        "write-read conflict: rank 0 stream 0 task 0 (Copy) writes and rank 2 stream 0 task 1 \
         (Copy) reads rank 2 CclIn[0..16] after the put, which may not have landed",
    );
    let report = analyze(&through(false));
    assert!(of(&report, Check::MemoryConflict).is_empty(), "{report}");
}

#[test]
fn slave_that_never_joins_is_reported() {
    let rec = record(sum(4), Topology::single_server(1), 1, |r, p, layout| {
        let fork = layout.local(r, 0);
        p.streams[0].post(fork);
        p.streams[1].wait(fork);
        p.streams[1].copy(in_(0, 0, 16), out(0, 0, 16));
    });
    let report = analyze(&rec);
    assert_reports(
        &report,
        Check::ForkJoin,
        "slave stream 1 of rank 0 never joins the main stream",
    );
}

#[test]
fn a_peer_user_buffer_touched_before_the_peer_entered_is_reported() {
    let both = |r: usize, p: &mut RankProgram| {
        p.streams[0].reduce(
            vec![in_(0, 0, 16), in_(1, 0, 16)],
            out(r, 0, 16),
            DataType::F32,
            ReduceOp::Sum,
        );
    };
    // No signal at all: both ranks read the other's Input before it may exist.
    let mut rec = record(sum(4), Topology::single_server(2), 0, |r, p, _| both(r, p));
    let report = analyze(&rec);
    let msgs = of(&report, Check::PeerReady);
    assert_eq!(msgs.len(), 2, "{report}");
    assert_reports(
        &report,
        Check::PeerReady,
        "rank 0 stream 0 task 0 (Reduce) reads rank 1 Input[0..16], a user buffer of rank 1, \
         before rank 1 has entered the operation: no task of rank 1 in this operation happens \
         before it",
    );
    assert_reports(&report, Check::PeerReady, "tx_ack/rx_ack");
    // Staged: the link check refuses the peer's user buffer, this check says nothing more.
    rec.mode = Mode::Staged;
    let report = analyze(&rec);
    assert!(of(&report, Check::PeerReady).is_empty(), "{report}");
    assert!(!of(&report, Check::Link).is_empty(), "{report}");
    // One-way: rank 1 signals after its own read, so rank 0's read is ordered and rank 1's
    // is not.
    let rec = record(sum(4), Topology::single_server(2), 0, |r, p, layout| {
        let l = link(r, 1 - r, layout);
        if r == 0 {
            l.rx_ack(&mut p.streams[0]);
            both(r, p);
        } else {
            both(r, p);
            l.tx_ack(&mut p.streams[0]);
        }
    });
    let report = analyze(&rec);
    let found: Vec<_> = report.of(Check::PeerReady).collect();
    assert_eq!(found.len(), 1, "{report}");
    assert_eq!(
        (found[0].rank, found[0].task),
        (Some(1), Some(0)),
        "{report}"
    );
    assert!(found[0].message.contains("reads rank 0 Input[0..16]"));
    // Through a third rank: rank 2 signals rank 1, which then signals rank 0, so rank 0's
    // read of rank 2's Input comes after a task of rank 2.
    let relayed = |direct_from_one: bool| {
        record(
            sum(4),
            Topology::single_server(3),
            0,
            move |r, p, layout| {
                let s = &mut p.streams[0];
                match r {
                    2 => link(2, 1, layout).tx_ack(s),
                    1 => {
                        if !direct_from_one {
                            link(1, 2, layout).rx_ack(s);
                        }
                        link(1, 0, layout).tx_ack(s);
                        if direct_from_one {
                            link(1, 2, layout).rx_ack(s);
                        }
                    }
                    _ => {
                        link(0, 1, layout).rx_ack(s);
                        s.copy(in_(2, 0, 16), out(0, 0, 16));
                    }
                }
            },
        )
    };
    let report = analyze(&relayed(false));
    assert!(of(&report, Check::PeerReady).is_empty(), "{report}");
    // Rank 1 signals before it heard from rank 2: the read is unordered.
    let report = analyze(&relayed(true));
    assert_reports(
        &report,
        Check::PeerReady,
        "rank 0 stream 0 task 1 (Copy) reads rank 2 Input[0..16]",
    );
    // A rank with no task: its peer reads and writes its buffers.
    let rec = record(sum(4), Topology::single_server(2), 0, |r, p, _| {
        if r == 0 {
            p.streams[0].reduce_to(
                vec![in_(0, 0, 16), in_(1, 0, 16)],
                vec![out(0, 0, 16), out(1, 0, 16)],
                DataType::F32,
                ReduceOp::Sum,
            );
        }
    });
    let report = analyze(&rec);
    assert_reports(
        &report,
        Check::PeerReady,
        "writes rank 1 Output[0..16], a user buffer of rank 1, before rank 1 has entered the \
         operation: rank 1 runs no task in this operation",
    );
    assert_reports(&report, Check::PeerReady, "reads rank 1 Input[0..16]");
}

/// A correct pull program for every operator but AllReduce, on `n` ranks with root 1.
fn operator_programs(n: usize, b: usize) -> Vec<(OpKind, Body)> {
    vec![
        (
            OpKind::AllGather,
            Box::new(move |r, s| (0..n).for_each(|q| s.copy(in_(q, 0, b), out(r, q * b, b)))),
        ),
        (
            OpKind::ReduceScatter,
            Box::new(move |r, s| {
                s.reduce(
                    (0..n).map(|q| in_(q, r * b, b)).collect(),
                    out(r, 0, b),
                    DataType::F32,
                    ReduceOp::Sum,
                )
            }),
        ),
        (
            OpKind::Broadcast,
            Box::new(move |r, s| s.copy(in_(1, 0, b), out(r, 0, b))),
        ),
        (
            OpKind::Reduce,
            Box::new(move |r, s| {
                if r == 1 {
                    s.reduce(
                        (0..n).map(|q| in_(q, 0, b)).collect(),
                        out(1, 0, b),
                        DataType::F32,
                        ReduceOp::Sum,
                    )
                }
            }),
        ),
        (
            OpKind::Scatter,
            Box::new(move |r, s| s.copy(in_(1, r * b, b), out(r, 0, b))),
        ),
        (
            OpKind::Gather,
            Box::new(move |r, s| {
                if r == 1 {
                    (0..n).for_each(|q| s.copy(in_(q, 0, b), out(1, q * b, b)))
                }
            }),
        ),
        (
            OpKind::AlltoAll,
            Box::new(move |r, s| (0..n).for_each(|q| s.copy(in_(q, r * b, b), out(r, q * b, b)))),
        ),
    ]
}

#[test]
fn every_operator_has_a_correct_hand_written_program() {
    let (n, count) = (3, 2);
    let b = count * ES;
    let op = |kind| OpParam {
        kind,
        root: Some(1),
        ..sum(count)
    };
    let cases = operator_programs(n, b);
    for (kind, body) in &cases {
        let rec = record(op(*kind), Topology::single_server(n), 0, |r, p, layout| {
            ready_round(r, n, &mut p.streams[0], layout);
            body(r, &mut p.streams[0])
        });
        let report = analyze(&rec);
        assert!(report.passed(), "{kind}:\n{report}");
    }
    // The same AlltoAll with two blocks swapped is caught.
    let rec = record(
        op(OpKind::AlltoAll),
        Topology::single_server(n),
        0,
        |r, p, _| {
            (0..n).for_each(|q| p.streams[0].copy(in_(q, (n - 1 - r) * b, b), out(r, q * b, b)))
        },
    );
    assert_reports(&analyze(&rec), Check::Semantics, "wrong offset");
}

#[test]
fn in_place_aliasing_is_one_memory() {
    let mut rec = record(sum(4), Topology::single_server(2), 0, |r, p, _| {
        p.streams[0].reduce(
            vec![in_(0, 0, 16), in_(1, 0, 16)],
            out(r, 0, 16),
            DataType::F32,
            ReduceOp::Sum,
        );
    });
    rec.in_place = true;
    let report = analyze(&rec);
    assert!(!of(&report, Check::MemoryConflict).is_empty(), "{report}");
}

#[test]
fn in_place_gathers_and_scatters_use_the_own_block() {
    let (n, count) = (3, 2);
    let b = count * ES;
    let op = |kind| OpParam { kind, ..sum(count) };
    let in_place = |kind, body: &dyn Fn(usize, &mut StreamProgram)| {
        let mut rec = record(op(kind), Topology::single_server(n), 0, |r, p, layout| {
            ready_round(r, n, &mut p.streams[0], layout);
            body(r, &mut p.streams[0])
        });
        rec.in_place = true;
        analyze(&rec)
    };
    // NCCL: AllGather's input is block r of the one buffer, so block r needs no task.
    let gather = |src_block: fn(usize) -> usize| {
        move |r: usize, s: &mut StreamProgram| {
            (0..n)
                .filter(|&q| q != r)
                .for_each(|q| s.copy(in_(q, src_block(q) * b, b), out(r, q * b, b)))
        }
    };
    let report = in_place(OpKind::AllGather, &gather(|q| q));
    assert!(report.passed(), "{report}");
    let report = in_place(OpKind::AllGather, &gather(|_| 0));
    assert_reports(&report, Check::Semantics, "uninitialised");
    // NCCL: ReduceScatter's output is block r of the one buffer.
    let scatter = |dst_block: fn(usize) -> usize| {
        move |r: usize, s: &mut StreamProgram| {
            let srcs = (0..n).map(|q| in_(q, r * b, b)).collect();
            s.reduce(
                srcs,
                out(r, dst_block(r) * b, b),
                DataType::F32,
                ReduceOp::Sum,
            )
        }
    };
    let report = in_place(OpKind::ReduceScatter, &scatter(|r| r));
    assert!(report.passed(), "{report}");
    let report = in_place(OpKind::ReduceScatter, &scatter(|_| 0));
    assert!(!of(&report, Check::Semantics).is_empty(), "{report}");
}
