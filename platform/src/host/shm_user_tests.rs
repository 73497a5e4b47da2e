//! Zero-copy across processes: two host devices of this process stand for two processes
//! whose ranks map each other's user buffers ([`ShmJob::user_buffers`]).
//!
//! [`ShmJob::user_buffers`]: crate::device::ShmJob::user_buffers

use super::shm_tests::{pair_with, tag};
use super::HostDevice;
use crate::device::{CompileRequest, Device, SharedMemory, Submission, UserBuffers};
use crate::error::{AbortCause, DeviceError};
use crate::ir::{Buf, RankProgram, Slice};
use crate::notify::LinkSignal;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Rank `r` and its peer `r ^ 2` (on the other device) say they entered, then `r` copies
/// the peer's Input into its own Output at 0 and its own Input into the peer's Output at
/// `len`, both in place in the other's memory; then each says it is done with the other.
fn cross(dev: &HostDevice, r: usize, len: usize) -> CompileRequest {
    let layout = dev.config().layout();
    let peer = r ^ 2;
    let mut p = RankProgram::new(r, 1);
    let s = &mut p.streams[0];
    s.post(layout.link(peer, r, 0, LinkSignal::Ack));
    s.wait(layout.link(r, peer, 0, LinkSignal::Ack));
    s.copy(
        Slice::new(peer, Buf::Input, 0, len),
        Slice::new(r, Buf::Output, 0, len),
    );
    s.copy(
        Slice::new(r, Buf::Input, 0, len),
        Slice::new(peer, Buf::Output, len, len),
    );
    s.post(layout.link(peer, r, 0, LinkSignal::DataSignal));
    s.wait(layout.link(r, peer, 0, LinkSignal::DataSignal));
    CompileRequest {
        program: Arc::new(p),
        scratch: None,
        peers: vec![peer],
        local_notifies: 0,
        in_place: false,
        exit_fence: true,
        footprint: 0,
    }
}

/// Bytes each allocation has beyond what a call uses: the calls use them at offsets that
/// change with the epoch, so a binding's offset matters.
const SLACK: usize = 13;

/// Where a call of `epoch` places its input and its output in their allocations.
fn offsets(epoch: u64) -> (usize, usize) {
    (epoch as usize % SLACK, (epoch as usize * 5 + 3) % SLACK)
}

/// Each local rank's input and output (twice `len`, plus [`SLACK`]) from `alloc_shared`,
/// each rank allocating from a thread of its own, as for any collective.
fn buffers(dev: &HostDevice, ranks: [usize; 2], len: usize) -> Vec<(SharedMemory, SharedMemory)> {
    std::thread::scope(|s| {
        let threads: Vec<_> = ranks
            .iter()
            .map(|&r| {
                s.spawn(move || {
                    let input = dev.alloc_shared(r, len + SLACK).expect("input");
                    let output = dev.alloc_shared(r, 2 * len + SLACK).expect("output");
                    (input, output)
                })
            })
            .collect();
        threads.into_iter().map(|t| t.join().unwrap()).collect()
    })
}

/// The bytes of `m`.
///
/// # Safety
/// Nothing else touches them while the slice lives.
#[allow(
    clippy::mut_from_ref,
    reason = "shared memory: the caller orders the access"
)]
unsafe fn bytes(m: &SharedMemory) -> &mut [u8] {
    unsafe { std::slice::from_raw_parts_mut(m.as_ptr(), m.len()) }
}

/// Run [`cross`] on `ranks` of `dev` at `epoch`, on `bufs` at the epoch's [`offsets`].
fn run(
    dev: &HostDevice,
    ranks: [usize; 2],
    bufs: &[(SharedMemory, SharedMemory)],
    len: usize,
    epoch: u64,
) -> Vec<Result<(), DeviceError>> {
    let (at_in, at_out) = offsets(epoch);
    let subs = ranks
        .iter()
        .zip(bufs)
        .map(|(&r, (input, output))| Submission {
            compiled: dev.compile(cross(dev, r, len)).expect("compile"),
            // SAFETY: the test touches the buffers only between runs.
            user: UserBuffers::OutOfPlace {
                input: unsafe { &bytes(input)[at_in..at_in + len] },
                output: unsafe { &mut bytes(output)[at_out..at_out + 2 * len] },
            },
            epoch,
            gate: None,
        })
        .collect();
    dev.run(subs)
}

fn input_byte(rank: usize, epoch: u64) -> u8 {
    (rank as u8) * 10 + epoch as u8
}

#[test]
fn peers_in_another_process_read_and_write_user_buffers_in_place() {
    let tag = tag("user");
    let (a, b) = pair_with(&tag, Duration::from_secs(20), true);
    assert!(a.capabilities().peer_user_buffers);
    let len = 4096 + 7;
    // Collective: each device maps the other's allocations of the same turn.
    let (bufs_a, bufs_b) = std::thread::scope(|s| {
        let bb = s.spawn(|| buffers(&b, [2, 3], len));
        (buffers(&a, [0, 1], len), bb.join().unwrap())
    });
    let named = std::fs::read_dir("/dev/shm")
        .map(|d| {
            d.flatten()
                .filter(|e| e.file_name().to_string_lossy().contains(&tag))
                .count()
        })
        .unwrap_or(0);
    assert_eq!(
        named, 0,
        "every segment was mapped by its peers, so unnamed"
    );
    // More epochs than binding records: each call finds its own.
    for epoch in 1..=6u64 {
        for (ranks, bufs) in [([0, 1], &bufs_a), ([2, 3], &bufs_b)] {
            for (&r, (input, output)) in ranks.iter().zip(bufs.iter()) {
                // SAFETY: no call runs.
                unsafe { bytes(input) }.fill(input_byte(r, epoch));
                unsafe { bytes(output) }.fill(0);
            }
        }
        let (ra, rb) = std::thread::scope(|s| {
            let rb = s.spawn(|| run(&b, [2, 3], &bufs_b, len, epoch));
            (run(&a, [0, 1], &bufs_a, len, epoch), rb.join().unwrap())
        });
        for r in ra.into_iter().chain(rb) {
            r.expect("call");
        }
        for (ranks, bufs) in [([0, 1], &bufs_a), ([2, 3], &bufs_b)] {
            for (&r, (_, output)) in ranks.iter().zip(bufs.iter()) {
                let want = input_byte(r ^ 2, epoch);
                let (_, at) = offsets(epoch);
                // SAFETY: no call runs.
                let out = unsafe { bytes(output) };
                let (before, rest) = out.split_at(at);
                let (call, after) = rest.split_at(2 * len);
                assert!(call.iter().all(|&x| x == want), "rank {r} epoch {epoch}");
                assert!(
                    before.iter().chain(after).all(|&x| x == 0),
                    "only the call's bytes"
                );
            }
        }
    }
}

#[test]
fn a_call_on_private_buffers_is_refused_and_releases_the_peers_waiting_for_it() {
    let (a, b) = pair_with(&tag("private"), Duration::from_secs(30), true);
    let len = 64;
    let (bufs_a, bufs_b) = std::thread::scope(|s| {
        let bb = s.spawn(|| buffers(&b, [2, 3], len));
        (buffers(&a, [0, 1], len), bb.join().unwrap())
    });
    let start = Instant::now();
    let (r0, r2) = std::thread::scope(|s| {
        let r2 = s.spawn(|| run(&b, [2, 3], &bufs_b, len, 1));
        let input = vec![1u8; len];
        let mut output = vec![0u8; 2 * len];
        let private = Submission {
            compiled: a.compile(cross(&a, 0, len)).expect("compile"),
            user: UserBuffers::OutOfPlace {
                input: &input,
                output: &mut output,
            },
            epoch: 1,
            gate: None,
        };
        let r0 = a.run(vec![private]).pop().unwrap();
        drop(bufs_a);
        (r0, r2.join().unwrap())
    });
    match &r0 {
        Err(
            e @ DeviceError::NotShared {
                rank: 0,
                buf: Buf::Input,
            },
        ) => {
            let msg = e.to_string();
            assert!(
                msg.contains("alloc_shared") && msg.contains("OXCCL_SHARED_BUFFERS"),
                "{msg}"
            );
        }
        other => panic!("rank 0: {other:?}"),
    }
    match &r2[0] {
        Err(DeviceError::Aborted {
            cause: AbortCause::PeerProcess { rank: 0, .. },
            ..
        }) => {}
        other => panic!("rank 2: {other:?}"),
    }
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "released, not timed out"
    );
}

#[test]
fn without_shared_user_buffers_the_memory_is_private_and_peers_stage() {
    let (a, _b) = pair_with(&tag("heap"), Duration::from_secs(20), false);
    assert!(!a.capabilities().peer_user_buffers);
    let m = a.alloc_shared(0, 100).expect("heap memory");
    assert_eq!((m.len(), m.as_ptr() as usize % 4096), (100, 0));
    // SAFETY: nobody else has it.
    assert!(unsafe { bytes(&m) }.iter().all(|&x| x == 0));
    let err = a.alloc_shared(2, 8).unwrap_err();
    assert!(err.to_string().contains("2"), "{err}");
}
