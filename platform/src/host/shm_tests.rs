//! Host devices that reach each other's ranks through shared memory: two devices of this
//! process stand for two processes (the multi-process tests are in `tests/`).

use super::HostDevice;
use crate::device::{CompileRequest, Device, DeviceConfig, ShmJob, Submission, UserBuffers};
use crate::error::{AbortCause, DeviceError, PeerLoss};
use crate::ir::{Buf, RankProgram, Slice};
use crate::notify::LinkSignal;
use std::sync::Arc;
use std::time::{Duration, Instant};

const RANKS: usize = 4;

pub(super) fn tag(test: &str) -> String {
    format!("t{}-{test}", std::process::id())
}

/// Devices serving ranks {0, 1} and {2, 3} of one job, created side by side (each waits
/// for the other's segments).
fn pair(tag: &str, timeout: Duration) -> (HostDevice, HostDevice) {
    pair_with(tag, timeout, false)
}

/// [`pair`], the peers mapping each other's user buffers when `user_buffers`.
pub(super) fn pair_with(
    tag: &str,
    timeout: Duration,
    user_buffers: bool,
) -> (HostDevice, HostDevice) {
    let config = |local: Vec<usize>| DeviceConfig {
        local_ranks: local,
        ccl_bytes: 1 << 16,
        link_channels: 2,
        exec_timeout: timeout,
        host_threads: 1,
        shm: Some(ShmJob {
            user_buffers,
            ..ShmJob::new(tag)
        }),
        ..DeviceConfig::all_local(RANKS)
    };
    std::thread::scope(|s| {
        let b = s.spawn(|| HostDevice::new(config(vec![2, 3])).expect("device b"));
        let a = HostDevice::new(config(vec![0, 1])).expect("device a");
        (a, b.join().unwrap())
    })
}

/// Rank `r` writes its input into the CclIn of rank `r ^ 2` (on the other device), posts
/// it, waits for its own, and copies its CclIn to its output.
pub(super) fn swap(dev: &HostDevice, r: usize, len: usize) -> RankProgram {
    swap_through(dev, r, len, (Buf::CclIn, 0))
}

/// [`swap`] through `buf` at `offset` (a scratch set, for one) instead of CclIn.
pub(super) fn swap_through(
    dev: &HostDevice,
    r: usize,
    len: usize,
    (buf, offset): (Buf, usize),
) -> RankProgram {
    let layout = dev.config().layout();
    let peer = r ^ 2;
    let mut p = RankProgram::new(r, 1);
    let s = &mut p.streams[0];
    s.copy(
        Slice::new(r, Buf::Input, 0, len),
        Slice::new(peer, buf, offset, len),
    );
    s.post(layout.link(peer, r, 0, LinkSignal::DataSignal));
    s.wait(layout.link(r, peer, 0, LinkSignal::DataSignal));
    s.copy(
        Slice::new(r, buf, offset, len),
        Slice::new(r, Buf::Output, 0, len),
    );
    p
}

pub(super) fn run_ranks(
    dev: &HostDevice,
    programs: Vec<(RankProgram, Vec<usize>)>,
    inputs: &[Vec<u8>],
    outputs: &mut [Vec<u8>],
    epoch: u64,
) -> Vec<Result<(), DeviceError>> {
    let requests = programs.into_iter().map(|(p, peers)| request(p, peers));
    run_requests(dev, requests.collect(), (inputs, outputs), epoch)
}

/// A compile of `program` fencing on `peers`, staged, without scratch.
pub(super) fn request(program: RankProgram, peers: Vec<usize>) -> CompileRequest {
    CompileRequest {
        program: Arc::new(program),
        scratch: None,
        peers,
        local_notifies: 0,
        in_place: false,
        exit_fence: false,
        footprint: 0,
    }
}

/// Compile each of `requests` and run them as one call of `dev` at `epoch`, each on its
/// input and output.
pub(super) fn run_requests(
    dev: &HostDevice,
    requests: Vec<CompileRequest>,
    (inputs, outputs): (&[Vec<u8>], &mut [Vec<u8>]),
    epoch: u64,
) -> Vec<Result<(), DeviceError>> {
    let mut subs = Vec::new();
    for (request, (input, output)) in requests.into_iter().zip(inputs.iter().zip(outputs)) {
        let compiled = dev.compile(request).expect("compile");
        subs.push(Submission {
            compiled,
            user: UserBuffers::OutOfPlace { input, output },
            epoch,
            gate: None,
        });
    }
    dev.run(subs)
}

#[test]
fn ranks_of_two_devices_exchange_data_and_signals_through_shared_memory() {
    let (a, b) = pair(&tag("swap"), Duration::from_secs(20));
    assert!(!a.capabilities().peer_user_buffers);
    for epoch in 1..=3u64 {
        swap_and_check(&a, &b, 4096, epoch);
    }
}

/// Run [`swap`] on ranks {0, 1} of `a` and {2, 3} of `b` at `epoch`, `len` bytes each,
/// and check that every rank got its peer's input.
pub(super) fn swap_and_check(a: &HostDevice, b: &HostDevice, len: usize, epoch: u64) {
    let input = |r: usize| vec![(r as u8) * 10 + epoch as u8; len];
    let (mut out_a, mut out_b) = (vec![vec![0u8; len]; 2], vec![vec![0u8; len]; 2]);
    let (in_a, in_b) = ([input(0), input(1)], [input(2), input(3)]);
    let results = std::thread::scope(|s| {
        let rb = s.spawn(|| {
            let programs = vec![(swap(b, 2, len), vec![0]), (swap(b, 3, len), vec![1])];
            run_ranks(b, programs, &in_b, &mut out_b, epoch)
        });
        let programs = vec![(swap(a, 0, len), vec![2]), (swap(a, 1, len), vec![3])];
        let mut ra = run_ranks(a, programs, &in_a, &mut out_a, epoch);
        ra.extend(rb.join().unwrap());
        ra
    });
    for r in results {
        r.expect("every rank ran");
    }
    assert_eq!(out_a, [input(2), input(3)], "epoch {epoch}");
    assert_eq!(out_b, [input(0), input(1)], "epoch {epoch}");
}

#[test]
fn a_post_through_shared_memory_after_its_owner_ended_the_operation_is_refused() {
    let (a, b) = pair(&tag("late"), Duration::from_secs(30));
    let layout = a.config().layout();
    let mut out = [vec![0u8; 8]];
    let ended = run_ranks(
        &a,
        vec![(RankProgram::new(0, 1), vec![])],
        &[vec![0u8; 8]],
        &mut out,
        1,
    );
    assert!(ended[0].is_ok(), "{ended:?}");
    // Rank 2 (device b) posts rank 0's Ack for epoch 1, which rank 0 already ended.
    let mut late = RankProgram::new(2, 1);
    late.streams[0].post(layout.link(0, 2, 0, LinkSignal::Ack));
    let r2 = run_ranks(&b, vec![(late, vec![0])], &[vec![0u8; 8]], &mut out, 1).pop();
    let Some(Err(DeviceError::PostAfterEnd {
        owner: 0, epoch: 1, ..
    })) = &r2
    else {
        panic!("{r2:?}");
    };
}

#[test]
fn a_failure_on_one_device_releases_the_ranks_waiting_on_it_in_another() {
    let (a, b) = pair(&tag("fail"), Duration::from_secs(30));
    let layout = a.config().layout();
    // Rank 0 waits for rank 2, which posts one of rank 0's notifies twice: a lost wakeup
    // that stops device b, and with it device a's rank 0 at once.
    let mut p0 = RankProgram::new(0, 1);
    p0.streams[0].wait(layout.link(0, 2, 1, LinkSignal::DataSignal));
    let mut p2 = RankProgram::new(2, 1);
    let twice = layout.link(0, 2, 0, LinkSignal::Ack);
    p2.streams[0].post(twice);
    p2.streams[0].post(twice);
    let start = Instant::now();
    let (r0, r2) = std::thread::scope(|s| {
        let r2 = s.spawn(|| {
            let mut out = [vec![0u8; 8]];
            run_ranks(&b, vec![(p2, vec![0])], &[vec![0u8; 8]], &mut out, 1).pop()
        });
        let mut out = [vec![0u8; 8]];
        let r0 = run_ranks(&a, vec![(p0, vec![2])], &[vec![0u8; 8]], &mut out, 1).pop();
        (r0.unwrap(), r2.join().unwrap().unwrap())
    });
    assert!(matches!(r2, Err(DeviceError::LostWakeup { .. })), "{r2:?}");
    match r0 {
        Err(DeviceError::Aborted {
            rank: 0,
            cause:
                AbortCause::PeerProcess {
                    rank: 2,
                    loss: PeerLoss::Failed,
                    ..
                },
        }) => {}
        other => panic!("rank 0: {other:?}"),
    }
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "released, not timed out"
    );
}

#[test]
fn segments_are_unnamed_once_every_peer_mapped_them() {
    let tag = tag("names");
    let (a, b) = pair(&tag, Duration::from_secs(20));
    let left: Vec<String> = std::fs::read_dir("/dev/shm")
        .map(|dir| {
            dir.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.contains(&tag))
                .collect()
        })
        .unwrap_or_default();
    assert!(left.is_empty(), "still named: {left:?}");
    drop((a, b));
}

#[test]
fn a_program_cannot_reach_outside_a_peers_shared_buffers() {
    let (a, _b) = pair(&tag("bounds"), Duration::from_secs(20));
    let compile = |p: RankProgram| {
        a.compile(CompileRequest {
            program: Arc::new(p),
            scratch: None,
            peers: vec![2],
            local_notifies: 0,
            in_place: false,
            exit_fence: false,
            footprint: 0,
        })
    };
    let ccl = a.config().ccl_bytes;
    let mut past_end = RankProgram::new(0, 1);
    past_end.streams[0].copy(
        Slice::new(0, Buf::Input, 0, 8),
        Slice::new(2, Buf::CclIn, ccl - 4, 8),
    );
    let err = compile(past_end).unwrap_err();
    assert!(
        matches!(
            err,
            DeviceError::InvalidSlice {
                fault: crate::error::SliceFault::OutOfBounds { .. },
                ..
            }
        ),
        "{err}"
    );
    let mut user = RankProgram::new(0, 1);
    user.streams[0].copy(
        Slice::new(2, Buf::Input, 0, 8),
        Slice::new(0, Buf::Output, 0, 8),
    );
    let err = compile(user).unwrap_err();
    assert!(err.to_string().contains("another process"), "{err}");
    let mut private = RankProgram::new(0, 1);
    private.streams[0].post(a.config().layout().local(2, 0));
    let err = compile(private).unwrap_err();
    assert!(matches!(err, DeviceError::InvalidTask { .. }), "{err}");
}

#[test]
fn an_abort_on_one_device_releases_the_ranks_of_another_that_wait_on_it() {
    let (a, b) = pair(&tag("abort"), Duration::from_secs(30));
    let layout = a.config().layout();
    let mut p0 = RankProgram::new(0, 1);
    p0.streams[0].wait(layout.link(0, 2, 0, LinkSignal::DataSignal));
    let start = Instant::now();
    let r0 = std::thread::scope(|s| {
        s.spawn(|| {
            std::thread::sleep(Duration::from_millis(100));
            b.abort(crate::error::AbortCause::UserAbort { rank: 2 });
        });
        let mut out = [vec![0u8; 8]];
        run_ranks(&a, vec![(p0, vec![2])], &[vec![0u8; 8]], &mut out, 1).pop()
    });
    match r0.unwrap() {
        Err(DeviceError::Aborted {
            cause: AbortCause::PeerProcess { rank: 2, .. },
            ..
        }) => {}
        other => panic!("rank 0: {other:?}"),
    }
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "released, not timed out"
    );
}
