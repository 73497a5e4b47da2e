//! Host device tests on hand-written programs.

use super::HostDevice;
use crate::device::{
    CompileRequest, Device, DeviceConfig, Resource, ScratchId, Submission, UserBuffers,
};
use crate::dtype::{DataType, ReduceOp};
use crate::error::{AbortCause, ConfigFault, DeviceError, GateRefusal};
use crate::ir::{Buf, NotifyId, RankProgram, Slice, Task};
use std::sync::Arc;
use std::time::Duration;

fn config(ranks: usize, threads: usize, timeout_ms: u64) -> DeviceConfig {
    DeviceConfig {
        ccl_bytes: 4 << 20,
        link_channels: 1,
        exec_timeout: Duration::from_millis(timeout_ms),
        host_threads: threads,
        ..DeviceConfig::all_local(ranks)
    }
}

fn device(ranks: usize, threads: usize, timeout_ms: u64) -> HostDevice {
    HostDevice::new(config(ranks, threads, timeout_ms)).unwrap()
}

fn local(dev: &HostDevice, rank: usize, i: usize) -> NotifyId {
    dev.config().layout().local(rank, i)
}

/// The error and every cause below it, as one line.
fn chain(err: &DeviceError) -> String {
    let mut text = err.to_string();
    let mut source = std::error::Error::source(err);
    while let Some(cause) = source {
        text += &format!(": {cause}");
        source = cause.source();
    }
    text
}

/// One rank's program, its bindings and how it is fenced.
struct Ex<'a> {
    program: RankProgram,
    user: UserBuffers<'a>,
    scratch: Option<ScratchId>,
    gate: Option<Arc<crate::Gate>>,
    epoch: u64,
    peers: Vec<usize>,
    exit_fence: bool,
}

fn ex(program: RankProgram, user: UserBuffers<'_>) -> Ex<'_> {
    Ex {
        program,
        user,
        scratch: None,
        gate: None,
        epoch: 1,
        peers: Vec::new(),
        exit_fence: false,
    }
}

/// Compile every program (8 local notifies), then run them as one group.
fn run_group(dev: &HostDevice, group: Vec<Ex<'_>>) -> Vec<Result<(), DeviceError>> {
    let mut results: Vec<Option<Result<(), DeviceError>>> = Vec::new();
    let mut submissions = Vec::new();
    for e in group {
        let request = CompileRequest {
            program: Arc::new(e.program),
            scratch: e.scratch,
            peers: e.peers,
            local_notifies: 8,
            in_place: e.user.is_in_place(),
            exit_fence: e.exit_fence,
            footprint: 0,
        };
        match dev.compile(request) {
            Ok(compiled) => {
                submissions.push(Submission {
                    compiled,
                    user: e.user,
                    epoch: e.epoch,
                    gate: e.gate,
                });
                results.push(None);
            }
            Err(err) => results.push(Some(Err(err))),
        }
    }
    let mut ran = dev.run(submissions).into_iter();
    results
        .into_iter()
        .map(|r| r.unwrap_or_else(|| ran.next().expect("one result per submission")))
        .collect()
}

fn run(dev: &HostDevice, e: Ex<'_>) -> Result<(), DeviceError> {
    run_group(dev, vec![e]).pop().unwrap()
}

/// Rank 0 writes its input's first `len` bytes into rank 1's CclIn and posts; rank 1
/// waits and copies them to its Output at `at` (rank 1's local notify 0 of `layout`).
pub(crate) fn hand_off(
    layout: crate::notify::NotifyLayout,
    len: usize,
    at: usize,
) -> (RankProgram, RankProgram) {
    let notify = layout.local(1, 0);
    let mut p0 = RankProgram::new(0, 1);
    p0.streams[0].copy(
        Slice::new(0, Buf::Input, 0, len),
        Slice::new(1, Buf::CclIn, 0, len),
    );
    p0.streams[0].post(notify);
    let mut p1 = RankProgram::new(1, 1);
    p1.streams[0].wait(notify);
    p1.streams[0].copy(
        Slice::new(1, Buf::CclIn, 0, len),
        Slice::new(1, Buf::Output, at, len),
    );
    (p0, p1)
}

fn run2(
    dev: &HostDevice,
    p0: RankProgram,
    p1: RankProgram,
    input: &[u8],
    out: &mut [u8],
) -> Vec<Result<(), DeviceError>> {
    let (mut scratch_out, scratch_in) = (vec![0u8; out.len()], vec![0u8; input.len()]);
    run_group(
        dev,
        vec![
            ex(
                p0,
                UserBuffers::OutOfPlace {
                    input,
                    output: &mut scratch_out,
                },
            ),
            ex(
                p1,
                UserBuffers::OutOfPlace {
                    input: &scratch_in,
                    output: out,
                },
            ),
        ],
    )
}

#[test]
fn a_post_orders_a_remote_write_before_the_waiting_stream() {
    for (threads, len) in [(1, 1000), (2, 3 << 20), (3, (3 << 20) + 7)] {
        let dev = device(2, threads, 5000);
        let input: Vec<u8> = (0..len).map(|i| (i * 7 % 251) as u8).collect();
        let mut out = vec![0u8; len];
        let (p0, p1) = hand_off(dev.config().layout(), len, 0);
        assert!(run2(&dev, p0, p1, &input, &mut out)
            .into_iter()
            .all(|r| r.is_ok()));
        assert!(out == input, "threads {threads} len {len}");
    }
}

#[test]
fn small_groups_run_on_the_submitting_thread_and_wake_no_worker() {
    let dev = device(2, 2, 5000);
    let input: Vec<u8> = (0..1000).map(|i| (i * 7 % 251) as u8).collect();
    for epoch in 1..=50 {
        let mut out = vec![0u8; input.len()];
        let (p0, p1) = hand_off(dev.config().layout(), input.len(), 0);
        let (mut scratch_out, scratch_in) = (vec![0u8; out.len()], vec![0u8; input.len()]);
        let group = vec![
            Ex {
                epoch,
                ..ex(
                    p0,
                    UserBuffers::OutOfPlace {
                        input: &input,
                        output: &mut scratch_out,
                    },
                )
            },
            Ex {
                epoch,
                ..ex(
                    p1,
                    UserBuffers::OutOfPlace {
                        input: &scratch_in,
                        output: &mut out,
                    },
                )
            },
        ];
        assert!(run_group(&dev, group).into_iter().all(|r| r.is_ok()));
        assert!(out == input, "epoch {epoch}");
    }
    assert_eq!(dev.shared.pool.worker_jobs(), 0);
}

#[test]
fn a_second_post_before_the_wait_is_a_lost_wakeup() {
    let dev = device(2, 2, 5000);
    let mut p = RankProgram::new(0, 1);
    p.streams[0].post(local(&dev, 1, 0));
    p.streams[0].post(local(&dev, 1, 0));
    let err = run_without_buffers(&dev, p).unwrap_err();
    let DeviceError::LostWakeup { at, .. } = &err else {
        panic!("{err:?}")
    };
    assert_eq!((at.rank, at.stream, at.task), (0, 0, 1));
}

#[test]
fn a_notify_left_set_is_reported_by_the_call_that_left_it() {
    let dev = device(2, 1, 60_000);
    // Rank 0 posts two of rank 1's notifies; rank 1 waits for the second only, so the
    // first is set before rank 1's streams end.
    let mut poster = RankProgram::new(0, 1);
    poster.streams[0].post(local(&dev, 1, 3));
    poster.streams[0].post(local(&dev, 1, 0));
    let mut waiter = RankProgram::new(1, 1);
    waiter.streams[0].wait(local(&dev, 1, 0));
    let results = run_group(
        &dev,
        vec![
            ex(poster, UserBuffers::InPlace(&mut [])),
            ex(waiter, UserBuffers::InPlace(&mut [])),
        ],
    );
    let err = results[1].as_ref().unwrap_err();
    let DeviceError::NotifyLeftSet {
        rank: 1,
        epoch: 1,
        notify,
        ..
    } = err
    else {
        panic!("{err:?}");
    };
    assert_eq!(*notify, local(&dev, 1, 3));
    assert!(err.to_string().contains("local #3"), "{err}");
    // The device stopped: rank 0's call either finished first or was released.
    if let Err(err) = &results[0] {
        assert!(matches!(err, DeviceError::Aborted { .. }), "{err:?}");
    }
}

#[test]
fn a_post_after_its_owner_ended_the_operation_is_reported_by_the_poster() {
    let dev = device(2, 1, 60_000);
    // Rank 1's call of epoch 1 has nothing to wait for and ends; rank 0's then posts it.
    run_without_buffers(&dev, RankProgram::new(1, 1)).unwrap();
    let mut late = RankProgram::new(0, 1);
    late.streams[0].post(local(&dev, 1, 2));
    let err = run_without_buffers(&dev, late).unwrap_err();
    let DeviceError::PostAfterEnd {
        at,
        owner: 1,
        epoch: 1,
        ..
    } = &err
    else {
        panic!("{err:?}");
    };
    assert_eq!((at.rank, at.stream, at.task), (0, 0, 0));
    assert!(
        err.to_string()
            .contains("after rank 1 finished operation 1"),
        "{err}"
    );
}

/// Rank 1 waits for rank 0's post and then ends at once, on another thread: its end often
/// falls between rank 0's post and rank 0's look at rank 1's ended mark. The post was
/// taken, so it is no late post. The window is a few instructions wide, so this finds a
/// check that forgets to look at the word again only now and then (the executor suites
/// found it under load); it never fails a right one.
#[test]
fn a_post_taken_just_before_its_owner_ends_is_no_late_post() {
    let dev = device(2, 1, 60_000);
    let notify = local(&dev, 1, 0);
    let compiled: Vec<_> = (0..2)
        .map(|rank| {
            let mut p = RankProgram::new(rank, 1);
            match rank {
                0 => p.streams[0].post(notify),
                _ => p.streams[0].wait(notify),
            }
            dev.compile(CompileRequest {
                program: Arc::new(p),
                scratch: None,
                peers: vec![1 - rank],
                local_notifies: 1,
                in_place: true,
                exit_fence: false,
                footprint: 0,
            })
            .unwrap()
        })
        .collect();
    std::thread::scope(|s| {
        for compiled in &compiled {
            let dev = &dev;
            s.spawn(move || {
                for epoch in 1..=20_000u64 {
                    let submission = Submission {
                        compiled: compiled.clone(),
                        user: UserBuffers::InPlace(&mut []),
                        epoch,
                        gate: None,
                    };
                    let result = dev.run(vec![submission]).pop().unwrap();
                    assert!(result.is_ok(), "epoch {epoch}: {result:?}");
                }
            });
        }
    });
}

#[test]
fn a_wait_nobody_posts_times_out_with_its_location() {
    let dev = device(2, 1, 100);
    let mut p = RankProgram::new(1, 2);
    p.streams[1].wait(local(&dev, 1, 1));
    let err = run_without_buffers(&dev, p).unwrap_err();
    let DeviceError::WaitTimeout {
        at, notify, waited, ..
    } = &err
    else {
        panic!("{err:?}")
    };
    assert_eq!((at.rank, at.stream, at.task, notify.rank), (1, 1, 0, 1));
    assert!(*waited >= Duration::from_millis(100));
    assert!(err.to_string().contains("local #1"), "{err}");
}

/// Run a program that touches no user buffer.
fn run_without_buffers(dev: &HostDevice, p: RankProgram) -> Result<(), DeviceError> {
    run(dev, ex(p, UserBuffers::InPlace(&mut [])))
}

fn run_one(dev: &HostDevice, task: Task, input: &[u8], output: &mut [u8]) -> DeviceError {
    let mut p = RankProgram::new(0, 1);
    p.streams[0].tasks.push(task);
    run(dev, ex(p, UserBuffers::OutOfPlace { input, output })).unwrap_err()
}

#[test]
fn bad_slices_are_errors_not_memory_accesses() {
    let (input, mut output) = (vec![1u8; 16], vec![0u8; 16]);
    let copy = |src, dst| Task::Copy {
        src,
        dsts: vec![dst],
    };
    let cases = [
        (
            copy(
                Slice::new(0, Buf::Input, 8, 16),
                Slice::new(0, Buf::Output, 0, 16),
            ),
            "Input has 16 bytes; the program touches 24",
        ),
        (
            copy(
                Slice::new(0, Buf::Output, 0, 8),
                Slice::new(0, Buf::Input, 0, 8),
            ),
            "must not write the user's Input",
        ),
        (
            copy(
                Slice::new(0, Buf::CclIn, 0, 8),
                Slice::new(0, Buf::CclIn, 4, 8),
            ),
            "overlaps",
        ),
        (
            copy(
                Slice::new(0, Buf::Input, 0, 8),
                Slice::new(5, Buf::CclIn, 0, 8),
            ),
            "rank 5 does not exist",
        ),
        (
            copy(
                Slice::new(0, Buf::Input, 0, 8),
                Slice::new(1, Buf::Output, 0, 8),
            ),
            "no collective in flight",
        ),
        (
            copy(
                Slice::new(0, Buf::Scratch, 0, 8),
                Slice::new(0, Buf::Output, 0, 8),
            ),
            "no scratch",
        ),
        (
            Task::Reduce {
                srcs: vec![Slice::new(0, Buf::Input, 0, 6)],
                dsts: vec![Slice::new(0, Buf::Output, 0, 6)],
                dtype: DataType::F32,
                op: ReduceOp::Sum,
            },
            "not a multiple",
        ),
        (
            // offset + len wraps around the address space: refused, not wrapped.
            copy(
                Slice::new(0, Buf::Input, 0, 8),
                Slice::new(0, Buf::Output, usize::MAX - 3, 8),
            ),
            "Output has 16 bytes",
        ),
        (
            copy(
                Slice::new(0, Buf::Input, usize::MAX, 8),
                Slice::new(0, Buf::Output, 0, 8),
            ),
            "Input has 16 bytes",
        ),
    ];
    for (task, want) in cases {
        // A failed launch stops its device (see `Running`): one device per case.
        let dev = device(2, 1, 1000);
        let err = chain(&run_one(&dev, task.clone(), &input, &mut output));
        assert!(err.contains(want), "{task:?}: {err}");
    }
    assert!(output.iter().all(|&b| b == 0), "nothing was written");
}

#[test]
fn a_failed_launch_releases_the_others_and_stops_the_device() {
    let dev = device(2, 1, 60_000);
    let mut waiter = RankProgram::new(1, 1);
    waiter.streams[0].wait(NotifyId { rank: 1, index: 0 });
    let mut bad = RankProgram::new(0, 1);
    bad.streams[0].post(NotifyId { rank: 0, index: 0 });
    bad.streams[0].post(NotifyId { rank: 0, index: 0 });
    let started = std::time::Instant::now();
    std::thread::scope(|s| {
        let blocked = s.spawn(|| run_without_buffers(&dev, waiter));
        std::thread::sleep(std::time::Duration::from_millis(50));
        let err = run_without_buffers(&dev, bad).unwrap_err();
        assert!(matches!(err, DeviceError::LostWakeup { .. }), "{err}");
        let released = blocked.join().unwrap().unwrap_err();
        let DeviceError::Aborted {
            rank: 1,
            cause: AbortCause::PeerFailed { rank: 0, error },
        } = &released
        else {
            panic!("{released:?}");
        };
        assert!(
            matches!(**error, DeviceError::LostWakeup { .. }),
            "the cause is kept typed"
        );
    });
    assert!(
        started.elapsed() < std::time::Duration::from_secs(30),
        "released promptly"
    );
    let after = run_without_buffers(&dev, RankProgram::new(0, 1)).unwrap_err();
    assert!(after.to_string().contains("aborted"), "{after}");
}

#[test]
fn waits_on_another_ranks_notify_are_refused() {
    let dev = device(2, 1, 1000);
    let mut p = RankProgram::new(0, 1);
    p.streams[0].wait(NotifyId { rank: 1, index: 0 });
    let err = run_without_buffers(&dev, p).unwrap_err();
    assert!(chain(&err).contains("waits are local"), "{err}");
}

#[test]
fn one_rank_cannot_run_two_collectives_at_once() {
    let dev = device(1, 1, 1000);
    let mut p = RankProgram::new(0, 1);
    p.streams[0].wait(local(&dev, 0, 0));
    let results = run_group(
        &dev,
        vec![
            ex(p.clone(), UserBuffers::InPlace(&mut [])),
            ex(p, UserBuffers::InPlace(&mut [])),
        ],
    );
    assert!(
        matches!(results[1], Err(DeviceError::Busy { rank: 0 })),
        "{results:?}"
    );
    // The rest of a group whose member could not start is aborted, not left to time out.
    assert!(
        matches!(&results[0], Err(DeviceError::Aborted { rank: 0, .. })),
        "{results:?}"
    );
}

#[test]
fn slave_streams_fork_and_join_through_local_notifies() {
    let dev = device(1, 2, 5000);
    let (fork, join) = (local(&dev, 0, 0), local(&dev, 0, 1));
    let mut p = RankProgram::new(0, 2);
    p.streams[0].copy(
        Slice::new(0, Buf::Input, 0, 4),
        Slice::new(0, Buf::CclIn, 0, 4),
    );
    p.streams[0].post(fork);
    p.streams[1].wait(fork);
    p.streams[1].reduce(
        vec![
            Slice::new(0, Buf::CclIn, 0, 4),
            Slice::new(0, Buf::Input, 0, 4),
        ],
        Slice::new(0, Buf::CclOut, 0, 4),
        DataType::I32,
        ReduceOp::Sum,
    );
    p.streams[1].post(join);
    p.streams[0].wait(join);
    p.streams[0].copy(
        Slice::new(0, Buf::CclOut, 0, 4),
        Slice::new(0, Buf::Output, 0, 4),
    );
    let input = 21i32.to_le_bytes();
    let mut output = [0u8; 4];
    run(
        &dev,
        ex(
            p,
            UserBuffers::OutOfPlace {
                input: &input,
                output: &mut output,
            },
        ),
    )
    .unwrap();
    assert_eq!(i32::from_le_bytes(output), 42);
}

#[test]
fn gated_launches_start_when_the_gate_opens_and_end_untouched_when_refused() {
    let dev = device(2, 1, 60_000);
    // Each group is the next call: epochs 1, 2 and 3.
    let exchange = |rank: usize, gate: &Arc<crate::Gate>, epoch: u64| {
        let mut p = RankProgram::new(rank, 1);
        p.streams[0].post(local(&dev, 1 - rank, 0));
        p.streams[0].wait(local(&dev, rank, 0));
        Ex {
            gate: Some(gate.clone()),
            epoch,
            ..ex(p, UserBuffers::InPlace(&mut []))
        }
    };
    let opened = Arc::new(crate::Gate::default());
    std::thread::scope(|s| {
        let both =
            s.spawn(|| run_group(&dev, vec![exchange(0, &opened, 1), exchange(1, &opened, 1)]));
        std::thread::sleep(Duration::from_millis(20));
        opened.decide(Ok(()));
        let results = both.join().unwrap();
        assert!(results.iter().all(Result::is_ok), "{results:?}");
    });
    let refused = Arc::new(crate::Gate::default());
    let cause: GateRefusal = Arc::new(std::io::Error::other("rank 1 passed count 10"));
    refused.decide(Err(cause));
    for result in run_group(
        &dev,
        vec![exchange(0, &refused, 2), exchange(1, &refused, 2)],
    ) {
        let err = chain(&result.unwrap_err());
        assert!(
            err.contains("not started because its gate refused it: rank 1 passed count 10"),
            "{err}"
        );
    }
    // Nothing ran and nothing was left set: the device still works.
    let again = Arc::new(crate::Gate::default());
    again.decide(Ok(()));
    let results = run_group(&dev, vec![exchange(0, &again, 3), exchange(1, &again, 3)]);
    assert!(results.iter().all(Result::is_ok), "{results:?}");
}

#[test]
fn a_rank_s_queued_submissions_run_in_epoch_order() {
    let dev = device(2, 1, 60_000);
    // Epochs 1, 2 and 3 of both ranks in one group: a ping-pong per epoch, each copying
    // its input to its output. Epoch 1 waits on a gate, so epochs 2 and 3 must wait too,
    // although no peer holds them back on rank 1 before rank 0 starts.
    let gate = Arc::new(crate::Gate::default());
    let step = |rank: usize, epoch: u64| {
        let mut p = copy_through(rank, 8);
        p.streams[0].post(local(&dev, 1 - rank, 0));
        p.streams[0].wait(local(&dev, rank, 0));
        (p, epoch)
    };
    let inputs: Vec<[u8; 8]> = (0..6u8).map(|i| [i + 1; 8]).collect();
    let mut outputs = vec![[0u8; 8]; 6];
    std::thread::scope(|s| {
        let group: Vec<Ex<'_>> = outputs
            .iter_mut()
            .zip(&inputs)
            .enumerate()
            .map(|(i, (output, input))| {
                let (p, epoch) = step(i % 2, 1 + i as u64 / 2);
                Ex {
                    gate: (epoch == 1).then(|| gate.clone()),
                    epoch,
                    peers: vec![1 - i % 2],
                    ..ex(p, UserBuffers::OutOfPlace { input, output })
                }
            })
            .collect();
        let all = s.spawn(|| run_group(&dev, group));
        std::thread::sleep(Duration::from_millis(50));
        for rank in 0..2 {
            assert_eq!(
                dev.done_epoch(rank).unwrap(),
                0,
                "nothing ran before epoch 1"
            );
        }
        gate.decide(Ok(()));
        let results = all.join().unwrap();
        assert!(results.iter().all(Result::is_ok), "{results:?}");
    });
    assert_eq!(outputs, inputs);
    for rank in 0..2 {
        assert_eq!(dev.done_epoch(rank).unwrap(), 3);
    }
}

/// Compile `group` and run it as a sequence group (graph mode's path).
fn run_sequence_group(dev: &HostDevice, group: Vec<Ex<'_>>) -> Vec<Result<(), DeviceError>> {
    dev.run_sequence_group(compile_all(dev, group))
}

/// Every entry of `group` compiled into a submission.
fn compile_all<'a>(dev: &HostDevice, group: Vec<Ex<'a>>) -> Vec<Submission<'a>> {
    group
        .into_iter()
        .map(|e| Submission {
            compiled: dev
                .compile(CompileRequest {
                    program: Arc::new(e.program),
                    scratch: e.scratch,
                    peers: e.peers,
                    local_notifies: 8,
                    in_place: e.user.is_in_place(),
                    exit_fence: e.exit_fence,
                    footprint: 0,
                })
                .unwrap(),
            user: e.user,
            epoch: e.epoch,
            gate: e.gate,
        })
        .collect()
}

#[test]
fn sequences_run_in_waves_report_each_submission_in_its_place() {
    let dev = device(2, 1, 10_000);
    let inputs: Vec<[u8; 8]> = (0..6u8).map(|i| [i + 1; 8]).collect();
    let mut outputs = vec![[0u8; 8]; 6];
    let mut short = [0u8; 4];
    let mut steps = ping_pong_steps(&dev, 1, &inputs, &mut outputs, 1);
    // Rank 1's second step bound to a receive buffer shorter than its program writes.
    steps[3].user = UserBuffers::OutOfPlace {
        input: &inputs[3],
        output: &mut short,
    };
    // Rank by rank, as a launch may bring them: (0, 1) (0, 2) (0, 3) (1, 1) (1, 2) (1, 3).
    let mut by_rank: Vec<Option<Ex<'_>>> = steps.into_iter().map(Some).collect();
    let group: Vec<Ex<'_>> = [0, 2, 4, 1, 3, 5]
        .iter()
        .map(|&i| by_rank[i].take().unwrap())
        .collect();
    let results = crate::device::run_in_waves(&dev, compile_all(&dev, group));
    assert_eq!(results.len(), 6);
    assert!(results[0].is_ok() && results[3].is_ok(), "{results:?}");
    assert!(
        matches!(results[4], Err(DeviceError::Config(_))),
        "the short buffer's refusal is its own submission's: {results:?}"
    );
}

/// Epochs `first..first + 3` of a two-rank ping-pong that copies input to output.
fn ping_pong_steps<'a>(
    dev: &HostDevice,
    first: u64,
    inputs: &'a [[u8; 8]],
    outputs: &'a mut [[u8; 8]],
    posts: usize,
) -> Vec<Ex<'a>> {
    outputs
        .iter_mut()
        .zip(inputs)
        .enumerate()
        .map(|(i, (output, input))| {
            let rank = i % 2;
            let mut p = copy_through(rank, 8);
            for _ in 0..posts {
                p.streams[0].post(local(dev, 1 - rank, 0));
            }
            p.streams[0].wait(local(dev, rank, 0));
            Ex {
                epoch: first + i as u64 / 2,
                peers: vec![1 - rank],
                ..ex(p, UserBuffers::OutOfPlace { input, output })
            }
        })
        .collect()
}

#[test]
fn a_whole_group_of_sequences_runs_linked_and_again_from_the_cache() {
    let dev = device(2, 1, 60_000);
    let inputs: Vec<[u8; 8]> = (0..6u8).map(|i| [i + 1; 8]).collect();
    for first in [1, 4] {
        let mut outputs = vec![[0u8; 8]; 6];
        let steps = ping_pong_steps(&dev, first, &inputs, &mut outputs, 1);
        let results = run_sequence_group(&dev, steps);
        assert!(results.iter().all(Result::is_ok), "{results:?}");
        assert_eq!(outputs, inputs);
        assert_eq!(dev.done_epoch(1).unwrap(), first + 2);
    }
    // Compiled anew each time: two groups linked.
    assert_eq!(dev.shared.schedules.linked(), 2);
}

#[test]
fn an_eager_group_of_every_rank_runs_linked() {
    let dev = device(2, 1, 60_000);
    let inputs: Vec<[u8; 8]> = (0..2u8).map(|i| [i + 1; 8]).collect();
    let mut outputs = vec![[0u8; 8]; 2];
    // One call of both ranks (epoch 1), submitted by one thread through `run`.
    let call = ping_pong_steps(&dev, 1, &inputs, &mut outputs, 1);
    let results = run_group(&dev, call);
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    assert_eq!(outputs, inputs);
    assert_eq!(dev.done_epoch(0).unwrap(), 1);
    assert_eq!(dev.shared.schedules.linked(), 1);
}

#[test]
fn a_linked_group_rebinds_when_its_buffers_change_and_reads_new_data_when_not() {
    let dev = device(2, 1, 60_000);
    // Compiled once, launched four times: epochs 1-2, 3-4, 5-6, 7-8.
    let compiled: Vec<Arc<crate::Compiled>> = (0..4)
        .map(|i| {
            let rank = i % 2;
            let mut p = copy_through(rank, 8);
            p.streams[0].post(local(&dev, 1 - rank, 0));
            p.streams[0].wait(local(&dev, rank, 0));
            dev.compile(CompileRequest {
                program: Arc::new(p),
                scratch: None,
                peers: vec![1 - rank],
                local_notifies: 8,
                in_place: false,
                exit_fence: false,
                footprint: 0,
            })
            .unwrap()
        })
        .collect();
    let mut inputs = vec![[0u8; 8]; 4];
    let mut outputs = vec![[0u8; 8]; 4];
    let mut other = vec![[0u8; 8]; 4];
    for launch in 0..4u8 {
        for (i, input) in inputs.iter_mut().enumerate() {
            *input = [launch * 10 + i as u8; 8];
        }
        // Launches 0 and 1 bind the same buffers, 2 others, 3 the first ones again.
        let outs = if launch == 2 {
            &mut other
        } else {
            &mut outputs
        };
        let group = compiled
            .iter()
            .zip(&inputs)
            .zip(outs.iter_mut())
            .enumerate()
            .map(|(i, ((c, input), output))| Submission {
                compiled: c.clone(),
                user: UserBuffers::OutOfPlace { input, output },
                epoch: 1 + 2 * launch as u64 + i as u64 / 2,
                gate: None,
            })
            .collect();
        let results = dev.run_sequence_group(group);
        assert!(results.iter().all(Result::is_ok), "{results:?}");
        let outs = if launch == 2 { &other } else { &outputs };
        assert_eq!(outs, &inputs, "launch {launch}");
    }
    assert_eq!(dev.shared.schedules.linked(), 1);
    // Launch 1 found its buffers bound as launch 0 left them, and replayed; launches 2
    // and 3 bound anew.
    assert_eq!(dev.shared.schedules.replays(), 1);
}

#[test]
fn a_group_the_play_refuses_runs_as_usual_and_reports_its_fault() {
    let dev = device(2, 1, 60_000);
    let inputs: Vec<[u8; 8]> = (0..6u8).map(|i| [i + 1; 8]).collect();
    let mut outputs = vec![[0u8; 8]; 6];
    // Two posts onto one word before its wait: a lost wakeup.
    let steps = ping_pong_steps(&dev, 1, &inputs, &mut outputs, 2);
    let results = run_sequence_group(&dev, steps);
    assert!(
        results
            .iter()
            .any(|r| matches!(r, Err(DeviceError::LostWakeup { .. }))),
        "{results:?}"
    );
    assert_eq!(dev.shared.schedules.linked(), 0);
}

#[test]
fn a_group_without_every_rank_is_not_linked() {
    let dev = device(2, 1, 60_000);
    let input = [5u8; 8];
    let mut output = [0u8; 8];
    dev.retire(1, 1).unwrap();
    let alone = ex(
        copy_through(0, 8),
        UserBuffers::OutOfPlace {
            input: &input,
            output: &mut output,
        },
    );
    let results = run_sequence_group(&dev, vec![alone]);
    assert!(results[0].is_ok(), "{results:?}");
    assert_eq!(output, input);
    assert_eq!(dev.shared.schedules.linked(), 0);
}

/// Rank `rank`'s program that copies its Input to its Output.
fn copy_through(rank: usize, len: usize) -> RankProgram {
    let mut p = RankProgram::new(rank, 1);
    p.streams[0].copy(
        Slice::new(rank, Buf::Input, 0, len),
        Slice::new(rank, Buf::Output, 0, len),
    );
    p
}

/// Submit `e` on its own thread (a rank's thread) and return its outcome.
fn spawn_run<'s>(
    scope: &'s std::thread::Scope<'s, '_>,
    dev: &'s HostDevice,
    program: RankProgram,
    epoch: u64,
    peers: Vec<usize>,
    exit_fence: bool,
) -> std::thread::ScopedJoinHandle<'s, (Result<(), DeviceError>, Vec<u8>)> {
    scope.spawn(move || {
        let input = [7u8; 8];
        let mut output = [0u8; 8];
        let e = Ex {
            epoch,
            peers,
            exit_fence,
            ..ex(
                program,
                UserBuffers::OutOfPlace {
                    input: &input,
                    output: &mut output,
                },
            )
        };
        let result = run(dev, e);
        (result, output.to_vec())
    })
}

#[test]
fn a_rank_starting_the_next_call_early_waits_for_its_peer() {
    let dev = device(2, 2, 60_000);
    std::thread::scope(|s| {
        // Rank 0 starts epoch 2 (its epoch 1 ran nothing) while rank 1 has not finished
        // epoch 1.
        dev.retire(0, 1).unwrap();
        let early = spawn_run(s, &dev, copy_through(0, 8), 2, vec![1], false);
        std::thread::sleep(Duration::from_millis(100));
        assert!(!early.is_finished(), "the entry fence holds rank 0 back");
        assert_eq!(dev.done_epoch(0).unwrap(), 1);
        dev.retire(1, 1).unwrap();
        let (result, output) = early.join().unwrap();
        result.unwrap();
        assert_eq!(output, vec![7u8; 8], "ran once the peer finished epoch 1");
        assert_eq!(dev.done_epoch(0).unwrap(), 2);
    });
}

#[test]
fn the_exit_fence_holds_a_zero_copy_call_until_its_peers_finish() {
    let dev = device(2, 2, 60_000);
    std::thread::scope(|s| {
        let exiting = spawn_run(s, &dev, copy_through(0, 8), 1, vec![1], true);
        std::thread::sleep(Duration::from_millis(100));
        assert!(!exiting.is_finished(), "peers may still touch its buffers");
        assert_eq!(dev.done_epoch(0).unwrap(), 1, "its own work is over");
        let peer = spawn_run(s, &dev, copy_through(1, 8), 1, vec![0], true);
        peer.join().unwrap().0.unwrap();
        exiting.join().unwrap().0.unwrap();
    });
}

#[test]
fn a_fence_timeout_names_the_rank_the_epoch_and_the_peer() {
    let dev = device(3, 1, 100);
    // Rank 0's epochs 1 and 2 ran nothing; rank 1 finished epoch 2, rank 2 did not.
    dev.retire(0, 2).unwrap();
    dev.retire(1, 2).unwrap();
    let (input, mut output) = ([1u8; 8], [0u8; 8]);
    let e = Ex {
        epoch: 3,
        peers: vec![1, 2],
        ..ex(
            copy_through(0, 8),
            UserBuffers::OutOfPlace {
                input: &input,
                output: &mut output,
            },
        )
    };
    let err = run(&dev, e).unwrap_err();
    let DeviceError::FenceTimeout {
        rank,
        epoch,
        peer,
        needed,
        reached,
        waited,
    } = &err
    else {
        panic!("{err:?}");
    };
    assert_eq!((*rank, *epoch, *peer, *needed, *reached), (0, 3, 2, 2, 0));
    assert!(*waited >= Duration::from_millis(100));
    assert!(
        err.to_string().contains("for rank 2 to finish epoch 2"),
        "{err}"
    );
    assert_eq!(output, [0u8; 8], "nothing ran");
}

#[test]
fn a_device_failure_releases_fence_waiters_at_once() {
    let dev = device(2, 1, 60_000);
    let started = std::time::Instant::now();
    std::thread::scope(|s| {
        let fenced = spawn_run(s, &dev, copy_through(0, 8), 5, vec![1], false);
        std::thread::sleep(Duration::from_millis(50));
        let mut bad = RankProgram::new(1, 1);
        bad.streams[0].post(local(&dev, 1, 0));
        bad.streams[0].post(local(&dev, 1, 0));
        let err = run_without_buffers(&dev, bad).unwrap_err();
        assert!(matches!(err, DeviceError::LostWakeup { .. }), "{err}");
        let (result, output) = fenced.join().unwrap();
        let err = result.unwrap_err();
        assert!(
            matches!(err, DeviceError::Aborted { rank: 0, .. }),
            "{err:?}"
        );
        assert_eq!(output, vec![0u8; 8], "the fenced call never ran");
    });
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "released promptly"
    );
}

/// Both ranks write into the other's CclIn, signal, wait, and copy their CclIn out: with
/// no Close exchange, only the epoch fence keeps a fast rank's next write from landing
/// before the slow rank copied the last one out.
#[test]
fn back_to_back_calls_stay_correct_without_a_close_exchange() {
    let dev = device(2, 2, 20_000);
    let layout = dev.config().layout();
    let program = |rank: usize| {
        let peer = 1 - rank;
        let link = crate::Link::new(rank, peer, crate::LinkKind::Sdma, 0, layout);
        let mut p = RankProgram::new(rank, 1);
        link.tx_async(
            &mut p.streams[0],
            &[(
                Slice::new(peer, Buf::CclIn, 0, 8),
                Slice::new(rank, Buf::Input, 0, 8),
            )],
        );
        link.rx_async(&mut p.streams[0]);
        p.streams[0].copy(
            Slice::new(rank, Buf::CclIn, 0, 8),
            Slice::new(rank, Buf::Output, 0, 8),
        );
        p
    };
    let compiled: Vec<_> = (0..2)
        .map(|rank| {
            dev.compile(CompileRequest {
                program: Arc::new(program(rank)),
                scratch: None,
                peers: vec![1 - rank],
                local_notifies: 0,
                in_place: false,
                exit_fence: false,
                footprint: 0,
            })
            .unwrap()
        })
        .collect();
    std::thread::scope(|s| {
        for rank in 0..2 {
            let compiled = compiled[rank].clone();
            let dev = &dev;
            s.spawn(move || {
                for epoch in 1..=300u64 {
                    let input = [(epoch as u8).wrapping_mul(3).wrapping_add(rank as u8); 8];
                    let mut output = [0u8; 8];
                    let submission = Submission {
                        compiled: compiled.clone(),
                        user: UserBuffers::OutOfPlace {
                            input: &input,
                            output: &mut output,
                        },
                        epoch,
                        gate: None,
                    };
                    dev.run(vec![submission]).pop().unwrap().unwrap();
                    let want = (epoch as u8).wrapping_mul(3).wrapping_add(1 - rank as u8);
                    assert_eq!(output, [want; 8], "rank {rank} epoch {epoch}");
                    if epoch % 7 == rank as u64 {
                        std::thread::yield_now();
                    }
                }
            });
        }
    });
}

#[test]
fn a_device_serves_a_subset_of_ranks_and_refuses_the_others() {
    let dev = HostDevice::new(DeviceConfig {
        local_ranks: vec![2, 3],
        ..config(4, 1, 5000)
    })
    .unwrap();
    let request = |p: RankProgram, peers: Vec<usize>| CompileRequest {
        program: Arc::new(p),
        scratch: None,
        peers,
        local_notifies: 0,
        in_place: false,
        exit_fence: false,
        footprint: 0,
    };
    let mut ok = RankProgram::new(2, 1);
    ok.streams[0].copy(
        Slice::new(2, Buf::Input, 0, 8),
        Slice::new(3, Buf::CclIn, 0, 8),
    );
    let compiled = dev.compile(request(ok, vec![3])).unwrap();
    assert_eq!((compiled.rank, compiled.user_extent), (2, (8, 0)));
    let refused = |p, peers| match dev.compile(request(p, peers)) {
        Err(DeviceError::Config(ConfigFault::NotServed { rank, local })) => {
            assert_eq!(local, vec![2, 3]);
            rank
        }
        other => panic!("{other:?}"),
    };
    assert_eq!(refused(RankProgram::new(1, 1), vec![]), 1, "not its rank");
    let mut remote = RankProgram::new(3, 1);
    remote.streams[0].copy(
        Slice::new(3, Buf::CclIn, 0, 8),
        Slice::new(0, Buf::CclIn, 0, 8),
    );
    assert_eq!(refused(remote, vec![0]), 0, "touches rank 0");
    assert_eq!(
        refused(RankProgram::new(3, 1), vec![5]),
        5,
        "fenced on rank 5"
    );
    let err = dev.resource(0, Resource::CclIn).unwrap_err();
    let text = chain(&err);
    assert!(
        text.contains("rank 0 is not served by this device") && text.contains("no transport"),
        "{text}"
    );
    let handle = dev.resource(3, Resource::CclOut).unwrap();
    assert_eq!((handle.rank, handle.len), (3, 4 << 20));
    assert_ne!(handle.addr, 0);
    assert_eq!(dev.retire(0, 1).unwrap_err().to_string(), err.to_string());
}

#[test]
fn a_submissions_replay_key_is_the_key_its_admitted_buffers_get() {
    // A replay runs tasks bound under `UserRegions::key` when `bindings_of_user` matches
    // it: the two must agree on every form.
    let input = [1u8; 16];
    let (mut output, mut both) = ([0u8; 24], [2u8; 8]);
    let out_of_place = UserBuffers::OutOfPlace {
        input: &input,
        output: &mut output,
    };
    let key = super::serial::bindings_of_user(&out_of_place);
    assert_eq!(key, super::user_regions(out_of_place, 1).key());
    let in_place = UserBuffers::InPlace(&mut both);
    let key = super::serial::bindings_of_user(&in_place);
    assert_eq!(key, super::user_regions(in_place, 1).key());
}

#[test]
fn a_reduce_of_many_sources_is_shared_by_the_workers_and_sums_right() {
    // 8 sources of 256 KiB + 4 bytes move more than SPLIT_BYTES through memory, so the
    // task is cut into chunks (the last one short) that the workers share; a chunk that
    // starts mid-task must add the same elements as the whole would.
    assert!(super::traffic_bytes((256 << 10) + 4, 9) >= super::SPLIT_BYTES);
    let dev = device(1, 4, 5_000);
    let count = (64 << 10) + 1;
    let len = count * 4;
    let input: Vec<u8> = (0..8 * count)
        .flat_map(|i| (i as i32 * 7 - 3).to_ne_bytes())
        .collect();
    let mut output = vec![0u8; len];
    let mut p = RankProgram::new(0, 1);
    p.streams[0].tasks.push(Task::Reduce {
        srcs: (0..8)
            .map(|s| Slice::new(0, Buf::Input, s * len, len))
            .collect(),
        dsts: vec![Slice::new(0, Buf::Output, 0, len)],
        dtype: DataType::I32,
        op: ReduceOp::Sum,
    });
    let user = UserBuffers::OutOfPlace {
        input: &input,
        output: &mut output,
    };
    run(&dev, ex(p, user)).unwrap();
    for (e, got) in output.chunks_exact(4).enumerate() {
        let want: i32 = (0..8).map(|s| (s * count + e) as i32 * 7 - 3).sum();
        assert_eq!(
            i32::from_ne_bytes(got.try_into().unwrap()),
            want,
            "element {e}"
        );
    }
}
