//! Measuring the host device itself: what a task costs a thread besides its bytes.
//!
//! The cost model charges a data task (Copy or Reduce) `task_us` of thread time besides
//! its bytes and leaves its signals free, so the figure covers what a staged executor's
//! data task brings with it: its Post and Wait, and the switch to the stream that the
//! Post resumed. [`task_us`] runs, on a host device of its own, two ranks that hand a
//! token back and forth, each with an 8-byte Copy before every Post, on the inline path
//! (the submitting thread runs every stream, as it runs every small operation), and
//! takes the difference between a long and a short such program over the extra Copy
//! tasks. Each program counts its median over [`RUNS`] timed submissions after
//! [`WARMUP`]: a typical call, not the preempted ones. The copies are checked
//! afterwards, so what was timed is what was meant.
//!
//! It is the floor of what executors' tasks cost: on the 2-core CI VM it measures 0.005
//! to 0.006 µs, where an 8-rank AllReduce of 32 bytes takes 5.0 to 5.1 µs with `ring`
//! (112 data tasks) and 3.4 to 3.5 with `mesh-push` (8), about 0.015 µs per extra task
//! (Reduce tasks, reads of peers' buffers, several streams). The model's picks on that
//! VM, 8 ranks and 1 KiB to 32 MiB, are the same with 0.005 and 0.05 µs.
//!
//! The wake-up (the cost model's `wake_us`) is not measured here. A probe of the same
//! kind (ranks in pairs passing a token with Post and Wait on the threaded path, against
//! the same programs without the passes) measured 0.5 to 1.6 µs per pass on the 2-core
//! CI VM, with one or two workers and two or eight ranks. The model's figure is not
//! that pickup: it stands for what a round of a staged executor costs on the threaded
//! path beyond its tasks, fitted from executors' times on the development machine (see
//! the framework's `topology::presets`). With the VM's measured copy rates, the model's
//! picks are the same for any figure from 2.5 to 12 µs, and with 1.3 µs `oxccl tune`
//! measured one of them 1.16x slower than the fastest (Gather 32 MiB, where the model
//! ties `mesh` and `put-mesh`), so the reference's 5 µs stays.

use super::super::HostDevice;
use crate::device::{CompileRequest, Device, DeviceConfig, Submission, UserBuffers};
use crate::ir::{Buf, RankProgram, Slice};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Timed submissions per program.
const RUNS: usize = 60;
/// Untimed submissions first (pages faulted in, the pool's threads started).
const WARMUP: usize = 5;
/// The hand-offs of the short program of the task measurement, and the extra ones of
/// the long program (each rank copies once per hand-off).
const FEW_STEPS: usize = 8;
const MORE_STEPS: usize = 256;
/// Bytes each Copy of the task measurement moves.
const TASK_BYTES: usize = 8;
/// How long a probe's submission may take before the probe gives up.
const TIMEOUT: Duration = Duration::from_secs(10);

/// The thread time a data task costs besides its bytes on this machine's host device,
/// with the signals a staged executor gives it, microseconds; `None` when the device
/// could not be made or a run failed.
pub fn task_us() -> Option<f64> {
    let device = HostDevice::new(config(2, 1)).ok()?;
    let few = time_hand_offs(&device, FEW_STEPS)?;
    let many = time_hand_offs(&device, FEW_STEPS + MORE_STEPS)?;
    // Both ranks copy once per hand-off.
    Some(((many - few) / (2 * MORE_STEPS) as f64 * 1e6).max(0.0))
}

fn config(ranks: usize, workers: usize) -> DeviceConfig {
    DeviceConfig {
        ccl_bytes: 64 << 10,
        link_channels: 1,
        exec_timeout: TIMEOUT,
        host_threads: workers.max(1),
        ..DeviceConfig::all_local(ranks)
    }
}

/// Median seconds of two ranks' programs that hand a token back and forth `steps`
/// times, each rank copying 8 bytes of its input to its output before every Post.
fn time_hand_offs(device: &HostDevice, steps: usize) -> Option<f64> {
    let layout = device.config().layout();
    let programs = (0..2)
        .map(|rank| {
            let peer = 1 - rank;
            let mut p = RankProgram::new(rank, 1);
            let s = &mut p.streams[0];
            for step in 0..steps {
                let at = step * TASK_BYTES;
                // Rank 0 starts every hand-off, rank 1 answers it.
                if rank == 1 {
                    s.wait(layout.local(rank, 0));
                }
                s.copy(
                    Slice::new(rank, Buf::Input, at, TASK_BYTES),
                    Slice::new(rank, Buf::Output, at, TASK_BYTES),
                );
                s.post(layout.local(peer, 0));
                if rank == 0 {
                    s.wait(layout.local(rank, 0));
                }
            }
            p
        })
        .collect();
    time_group(device, programs, steps * TASK_BYTES)
}

/// Compile `programs` (each bound to an input and an output of `len` bytes of its
/// own), submit them together `WARMUP + RUNS` times, and return the median time of the
/// timed submissions in seconds.
fn time_group(device: &HostDevice, programs: Vec<RankProgram>, len: usize) -> Option<f64> {
    let compiled: Vec<_> = programs
        .into_iter()
        .map(|program| {
            device.compile(CompileRequest {
                program: Arc::new(program),
                scratch: None,
                peers: Vec::new(),
                local_notifies: 1,
                in_place: false,
                exit_fence: false,
                footprint: 0,
            })
        })
        .collect::<Result<_, _>>()
        .ok()?;
    let inputs = vec![vec![1u8; len]; compiled.len()];
    let mut outputs = vec![vec![0u8; len]; compiled.len()];
    let mut times = Vec::with_capacity(RUNS);
    for run in 0..WARMUP + RUNS {
        // Epochs go on from the device's last submission (see `crate::device`).
        let epoch = device.done_epoch(0).ok()? + 1;
        let group = compiled
            .iter()
            .zip(&inputs)
            .zip(outputs.iter_mut())
            .map(|((c, input), output)| Submission {
                compiled: c.clone(),
                user: UserBuffers::OutOfPlace { input, output },
                epoch,
                gate: None,
            })
            .collect();
        let start = Instant::now();
        let ok = device.run(group).into_iter().all(|r| r.is_ok());
        let took = start.elapsed().as_secs_f64();
        if !ok {
            return None;
        }
        if run >= WARMUP {
            times.push(took);
        }
    }
    // The programs' copies moved every input byte: what was timed is what was meant.
    if outputs != inputs {
        return None;
    }
    times.sort_by(f64::total_cmp);
    Some(times[times.len() / 2])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_task_cost_is_measured_on_a_device_of_its_own() {
        let us = task_us().expect("the probe's device runs its programs");
        // Far below a submission's timeout: the probe timed working programs.
        assert!(us.is_finite() && (0.0..1e5).contains(&us), "{us} us");
    }

    #[test]
    fn a_probe_program_that_fails_gives_no_figure() {
        // Two ranks whose programs wait on a notify nobody posts: the run times out.
        let device = HostDevice::new(DeviceConfig {
            exec_timeout: Duration::from_millis(50),
            ..config(2, 1)
        })
        .unwrap();
        let layout = device.config().layout();
        let stuck: Vec<RankProgram> = (0..2)
            .map(|rank| {
                let mut p = RankProgram::new(rank, 1);
                p.streams[0].wait(layout.local(rank, 0));
                p
            })
            .collect();
        assert_eq!(time_group(&device, stuck, 8), None);
    }
}
