//! Host device tests on hand-written programs.

use super::HostDevice;
use crate::device::{Device, DeviceConfig, Execution, UserBuffers};
use crate::dtype::{DataType, ReduceOp};
use crate::error::DeviceError;
use crate::ir::{Buf, NotifyId, RankProgram, Slice, Task};
use std::sync::Arc;
use std::time::Duration;

fn device(ranks: usize, threads: usize, timeout_ms: u64) -> HostDevice {
    HostDevice::new(DeviceConfig {
        ranks,
        ccl_bytes: 4 << 20,
        link_channels: 1,
        exec_timeout: Duration::from_millis(timeout_ms),
        host_threads: threads,
    })
    .unwrap()
}

fn local(dev: &HostDevice, rank: usize, i: usize) -> NotifyId {
    dev.config().layout().local(rank, i)
}

/// Rank 0 writes its input into rank 1's CclIn and posts; rank 1 waits and copies it out.
fn hand_off(dev: &HostDevice, len: usize) -> (Arc<RankProgram>, Arc<RankProgram>) {
    let notify = local(dev, 1, 0);
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
        Slice::new(1, Buf::Output, 0, len),
    );
    (Arc::new(p0), Arc::new(p1))
}

fn run2(
    dev: &HostDevice,
    p0: Arc<RankProgram>,
    p1: Arc<RankProgram>,
    input: &[u8],
    out: &mut [u8],
) -> Vec<Result<(), DeviceError>> {
    let (mut scratch_out, scratch_in) = (vec![0u8; out.len()], vec![0u8; input.len()]);
    dev.execute_group(vec![
        Execution {
            program: p0,
            user: UserBuffers::OutOfPlace {
                input,
                output: &mut scratch_out,
            },
            scratch: None,
            gate: None,
        },
        Execution {
            program: p1,
            user: UserBuffers::OutOfPlace {
                input: &scratch_in,
                output: out,
            },
            scratch: None,
            gate: None,
        },
    ])
}

#[test]
fn a_post_orders_a_remote_write_before_the_waiting_stream() {
    for (threads, len) in [(1, 1000), (2, 3 << 20), (3, (3 << 20) + 7)] {
        let dev = device(2, threads, 5000);
        dev.reserve_local_notifies(1).unwrap();
        let input: Vec<u8> = (0..len).map(|i| (i * 7 % 251) as u8).collect();
        let mut out = vec![0u8; len];
        let (p0, p1) = hand_off(&dev, len);
        assert!(run2(&dev, p0, p1, &input, &mut out)
            .into_iter()
            .all(|r| r.is_ok()));
        assert!(out == input, "threads {threads} len {len}");
    }
}

#[test]
fn a_second_post_before_the_wait_is_a_lost_wakeup() {
    let dev = device(2, 2, 5000);
    dev.reserve_local_notifies(1).unwrap();
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
fn a_wait_nobody_posts_times_out_with_its_location() {
    let dev = device(2, 1, 100);
    dev.reserve_local_notifies(2).unwrap();
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
    dev.execute(Execution {
        program: Arc::new(p),
        user: UserBuffers::InPlace(&mut []),
        scratch: None,
        gate: None,
    })
}

fn run_one(dev: &HostDevice, task: Task, input: &[u8], output: &mut [u8]) -> DeviceError {
    let mut p = RankProgram::new(0, 1);
    p.streams[0].tasks.push(task);
    dev.execute(Execution {
        program: Arc::new(p),
        user: UserBuffers::OutOfPlace { input, output },
        scratch: None,
        gate: None,
    })
    .unwrap_err()
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
            "only 16 bytes",
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
            "overlaps source",
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
            "only 16 bytes",
        ),
        (
            copy(
                Slice::new(0, Buf::Input, usize::MAX, 8),
                Slice::new(0, Buf::Output, 0, 8),
            ),
            "only 16 bytes",
        ),
    ];
    for (task, want) in cases {
        // A failed launch stops its device (see `Running`): one device per case.
        let dev = device(2, 1, 1000);
        let err = run_one(&dev, task.clone(), &input, &mut output).to_string();
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
    bad.streams[0].wait(NotifyId { rank: 1, index: 0 });
    let started = std::time::Instant::now();
    std::thread::scope(|s| {
        let blocked = s.spawn(|| run_without_buffers(&dev, waiter));
        std::thread::sleep(std::time::Duration::from_millis(50));
        let err = run_without_buffers(&dev, bad).unwrap_err();
        assert!(err.to_string().contains("waits are local"), "{err}");
        let released = blocked.join().unwrap().unwrap_err().to_string();
        assert!(released.contains("rank 0 failed"), "{released}");
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
    assert!(err.to_string().contains("waits are local"), "{err}");
}

#[test]
fn one_rank_cannot_run_two_collectives_at_once() {
    let dev = device(1, 1, 1000);
    let p = Arc::new(RankProgram::new(0, 1));
    let results = dev.execute_group(vec![
        Execution {
            program: p.clone(),
            user: UserBuffers::InPlace(&mut []),
            scratch: None,
            gate: None,
        },
        Execution {
            program: p,
            user: UserBuffers::InPlace(&mut []),
            scratch: None,
            gate: None,
        },
    ]);
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
    dev.reserve_local_notifies(2).unwrap();
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
    dev.execute(Execution {
        program: Arc::new(p),
        user: UserBuffers::OutOfPlace {
            input: &input,
            output: &mut output,
        },
        scratch: None,
        gate: None,
    })
    .unwrap();
    assert_eq!(i32::from_le_bytes(output), 42);
}

#[test]
fn gated_launches_start_when_the_gate_opens_and_end_untouched_when_refused() {
    let dev = device(2, 1, 60_000);
    dev.reserve_local_notifies(1).unwrap();
    let exchange = |rank: usize, gate: &Arc<crate::Gate>| {
        let mut p = RankProgram::new(rank, 1);
        p.streams[0].post(local(&dev, 1 - rank, 0));
        p.streams[0].wait(local(&dev, rank, 0));
        Execution {
            program: Arc::new(p),
            user: UserBuffers::InPlace(&mut []),
            scratch: None,
            gate: Some(gate.clone()),
        }
    };
    let opened = Arc::new(crate::Gate::default());
    std::thread::scope(|s| {
        let both = s.spawn(|| dev.execute_group(vec![exchange(0, &opened), exchange(1, &opened)]));
        std::thread::sleep(Duration::from_millis(20));
        opened.decide(Ok(()));
        let results = both.join().unwrap();
        assert!(results.iter().all(Result::is_ok), "{results:?}");
    });
    let refused = Arc::new(crate::Gate::default());
    refused.decide(Err("rank 1 passed count 10".into()));
    for result in dev.execute_group(vec![exchange(0, &refused), exchange(1, &refused)]) {
        let err = result.unwrap_err().to_string();
        assert!(
            err.contains("not started because rank 1 passed count 10"),
            "{err}"
        );
    }
    // Nothing ran and nothing was left set: the device still works.
    let again = Arc::new(crate::Gate::default());
    again.decide(Ok(()));
    let results = dev.execute_group(vec![exchange(0, &again), exchange(1, &again)]);
    assert!(results.iter().all(Result::is_ok), "{results:?}");
}
