//! Graph mode's launches on the cuda backend
//! ([`Device::run_sequence_group`](crate::Device::run_sequence_group)): a launch that holds
//! every local rank's steps, on device buffers, runs as one CUDA graph per GPU
//! ([`super::graph`]), built on its first launch and replayed on the next ones.
//!
//! What a replay takes: the launch brings, for every epoch of the sequence, one
//! submission of every local rank (a group launch from one thread, `Graph::launch_group`,
//! whose calls the framework agreed without gates), each bound to device memory (host
//! slices are staged through copies a graph cannot hold), every one passing the checks
//! an eager launch makes, on a device that has not stopped and whose ranks are idle.
//! Anything else is launched step by step, as eager calls are, with the same outcome: so
//! is a sequence whose graph the driver refuses to build (which also turns graphs off
//! for the device, with a warning, rather than fail every launch).
//!
//! A replay claims its ranks for all its steps, prepares every step's launch in epoch
//! order (the entry fences as consecutive calls would have them), replays each GPU's
//! graph on its stream, and waits for the GPUs' done events. The waiting thread is the
//! watchdog: when no further step ended for `exec_timeout`, the first step, in epoch
//! order, with a stream that did not reach its end is the one reported (each step has
//! progress words of its own), and the device is stopped, which releases every kernel,
//! later steps' included (a kernel of a stopped device runs nothing).

use super::device::pause;
use super::graph::{SequenceGraph, StepPrograms, GRAPHS_KEPT};
use super::group::GpuGroup;
use super::launch::{Checked, Launch};
use super::Shared;
use crate::device::{wait_out, Submission};
use crate::error::{AbortCause, DeviceError};
use cudarc::driver::sys;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Replay `group` as CUDA graphs, or give it back (`Err`) to be launched step by step.
pub(crate) fn run_sequences<'a>(
    shared: &Arc<Shared>,
    group: Vec<Submission<'a>>,
) -> Result<Vec<Result<(), DeviceError>>, Vec<Submission<'a>>> {
    if !shared.graphs_on() {
        return Err(group);
    }
    if let Some(plan) = plan(shared, &group) {
        if let Some(outcomes) = replay(shared, plan) {
            return Ok(outcomes);
        }
    }
    Err(group)
}

/// A launch that can replay: its checked submissions by step (epoch order), each step
/// holding every local rank in slot order, with each one's index in the launch.
struct Plan<'s, 'a> {
    steps: Vec<(u64, Vec<(usize, Checked<'s, 'a>)>)>,
}

/// The plan of `group`, or `None` when it cannot replay (see the module docs).
fn plan<'s, 'a>(shared: &Shared, group: &'s [Submission<'a>]) -> Option<Plan<'s, 'a>> {
    if group
        .iter()
        .any(|s| s.gate.is_some() || !s.user.is_device())
    {
        return None;
    }
    let mut checked = Vec::with_capacity(group.len());
    for s in group {
        checked.push(Some(Launch::check(shared, s).ok()?));
    }
    let keys: Vec<(u64, usize)> = checked
        .iter()
        .flatten()
        .map(|c| (c.epoch(), c.program().slot))
        .collect();
    let steps = steps_of(&keys, shared.ranks.len())?
        .into_iter()
        .map(|(epoch, indices)| {
            let runs = indices
                .into_iter()
                .map(|i| (i, checked[i].take().expect("each submission in one step")))
                .collect();
            (epoch, runs)
        })
        .collect();
    Some(Plan { steps })
}

/// The steps of a launch whose `i`-th submission is of `keys[i]` = (epoch, local slot):
/// per epoch, ascending, the indices of its submissions by slot; `None` unless every
/// epoch holds exactly one submission of each of the `local` slots.
fn steps_of(keys: &[(u64, usize)], local: usize) -> Option<Vec<(u64, Vec<usize>)>> {
    if local == 0 || keys.is_empty() || !keys.len().is_multiple_of(local) {
        return None;
    }
    let mut order: Vec<usize> = (0..keys.len()).collect();
    order.sort_by_key(|&i| keys[i]);
    // Sorted, each chunk must be (epoch, 0), ..., (epoch, local - 1); a slot missing or
    // twice at an epoch breaks its chunk, so the chunks' epochs also differ.
    order
        .chunks(local)
        .map(|chunk| {
            let epoch = keys[chunk[0]].0;
            let whole = (0..local)
                .zip(chunk)
                .all(|(slot, &i)| keys[i] == (epoch, slot));
            whole.then(|| (epoch, chunk.to_vec()))
        })
        .collect()
}

/// Run `plan`; `None` when it cannot after all (a rank busy, a graph the driver would not
/// build), before anything ran.
fn replay(shared: &Arc<Shared>, plan: Plan<'_, '_>) -> Option<Vec<Result<(), DeviceError>>> {
    let _claim = Claim::all(shared)?;
    let mut graphs = Vec::with_capacity(shared.groups.len());
    for group in &shared.groups {
        let programs: Vec<StepPrograms<'_>> = plan
            .steps
            .iter()
            .map(|(_, runs)| step_programs(group, runs))
            .collect();
        let mut kept = group.graphs.lock();
        let at = find_or_build(shared, group, &mut kept, &programs)?;
        graphs.push((kept, at));
    }
    let mut order = Vec::new();
    let mut steps: Vec<(u64, Vec<Arc<Launch>>)> = Vec::with_capacity(plan.steps.len());
    for (epoch, runs) in plan.steps {
        let mut launches = Vec::with_capacity(runs.len());
        for (index, checked) in runs {
            let launch = Launch::prepare(shared, checked, false);
            order.push((index, launch.clone()));
            launches.push(launch);
        }
        steps.push((epoch, launches));
    }
    let mut replayed_on = Vec::with_capacity(graphs.len());
    for (group, (kept, at)) in shared.groups.iter().zip(&graphs) {
        let runs: Vec<(u64, Vec<Arc<Launch>>)> = steps
            .iter()
            .map(|(epoch, launches)| (*epoch, on_group(group, launches)))
            .collect();
        let outcome = replay_on(shared, group, &kept[*at], &runs);
        replayed_on.push(outcome.is_ok());
        for launch in runs.iter().flat_map(|(_, l)| l) {
            launch.launched(outcome.clone());
        }
    }
    if shared.stopped().is_none() {
        shared.graphs.replays.fetch_add(1, Ordering::Relaxed);
    }
    drop(graphs);
    // The launches that went to a GPU, by epoch: the watchdog looks for the first that
    // did not end.
    let replayed: Vec<Arc<Launch>> = steps
        .iter()
        .flat_map(|(_, launches)| launches)
        .filter(|l| replayed_on[shared.group_index[l.program().slot]])
        .cloned()
        .collect();
    watch(shared, &replayed);
    order.sort_by_key(|(index, _)| *index);
    let timeout = shared.config.exec_timeout;
    Some(
        order
            .into_iter()
            .map(|(_, launch)| wait_out(&mut launch.completion(), timeout))
            .collect(),
    )
}

/// Replay `graph` with `runs` on `group`'s GPU, unless the device stopped; a failure
/// stops the device, and is the cause every run of the GPU reports.
fn replay_on(
    shared: &Shared,
    group: &GpuGroup,
    graph: &SequenceGraph,
    runs: &[(u64, Vec<Arc<Launch>>)],
) -> Result<(), AbortCause> {
    if let Some(cause) = shared.stopped() {
        return Err(cause);
    }
    graph.replay(shared, group, runs).map_err(|error| {
        let first = runs.iter().flat_map(|(_, l)| l).next();
        let rank = first.map_or(0, |l| l.rank());
        let cause = AbortCause::PeerFailed {
            rank,
            error: Arc::new(error),
        };
        shared.stop(cause.clone());
        // What the failed replay queued before it failed may run: stopped, its kernels
        // exit at once, and nothing may touch the buffers once the call returns.
        group.drain();
        cause
    })
}

/// The programs of `group`'s ranks in one step.
fn step_programs<'c>(group: &GpuGroup, runs: &'c [(usize, Checked<'_, '_>)]) -> StepPrograms<'c> {
    let here: Vec<&Checked<'_, '_>> = runs
        .iter()
        .map(|(_, c)| c)
        .filter(|c| group.slots.contains(&c.program().slot))
        .collect();
    StepPrograms {
        compiled: here.iter().map(|c| c.compiled()).collect(),
        programs: here.iter().map(|c| &**c.program()).collect(),
    }
}

/// The launches of `group`'s ranks in one step, by slot.
fn on_group(group: &GpuGroup, launches: &[Arc<Launch>]) -> Vec<Arc<Launch>> {
    launches
        .iter()
        .filter(|l| group.slots.contains(&l.program().slot))
        .cloned()
        .collect()
}

/// The index in `kept` of the graph of `programs`, built if none fits (the least
/// recently used dropped past [`GRAPHS_KEPT`]); `None` when the driver refuses to build
/// it, which turns graphs off for the device.
fn find_or_build(
    shared: &Shared,
    group: &GpuGroup,
    kept: &mut Vec<SequenceGraph>,
    programs: &[StepPrograms<'_>],
) -> Option<usize> {
    if let Some(at) = kept.iter().position(|g| g.fits(programs)) {
        let graph = kept.remove(at);
        kept.push(graph);
        return Some(kept.len() - 1);
    }
    kept.retain(SequenceGraph::is_live);
    match SequenceGraph::build(shared, group, programs) {
        Ok(graph) => {
            shared.graphs.built.fetch_add(1, Ordering::Relaxed);
            if kept.len() >= GRAPHS_KEPT {
                kept.remove(0);
            }
            kept.push(graph);
            Some(kept.len() - 1)
        }
        Err(error) => {
            tracing::warn!(
                gpu = group.gpu.ordinal,
                %error,
                "CUDA graphs turned off: graph mode's launches run step by step"
            );
            shared
                .graphs
                .refused
                .lock()
                .get_or_insert(error.to_string());
            None
        }
    }
}

/// Every local rank marked busy for a replay, freed when dropped.
struct Claim<'s> {
    shared: &'s Shared,
}

impl<'s> Claim<'s> {
    /// Claim every local rank, or none (`None`) when one is busy.
    fn all(shared: &'s Shared) -> Option<Claim<'s>> {
        for (slot, busy) in shared.busy.iter().enumerate() {
            if busy.swap(true, Ordering::AcqRel) {
                shared.busy[..slot]
                    .iter()
                    .for_each(|b| b.store(false, Ordering::Release));
                return None;
            }
        }
        Some(Claim { shared })
    }
}

impl Drop for Claim<'_> {
    fn drop(&mut self) {
        for busy in &self.shared.busy {
            busy.store(false, Ordering::Release);
        }
    }
}

/// Wait until every GPU's done event fired. The watchdog's clock restarts whenever more
/// of `launched` (epoch order) ran to their end, so each step may take `exec_timeout`, as
/// an eager call may; past it, the first that did not end is reported and the device
/// stopped.
fn watch(shared: &Shared, launched: &[Arc<Launch>]) {
    let start = Instant::now();
    let timeout = shared.config.exec_timeout;
    let (mut since, mut ended) = (start, 0);
    let mut gpus: Vec<&GpuGroup> = shared.groups.iter().collect();
    loop {
        gpus.retain(|group| !settled(group));
        if gpus.is_empty() {
            return;
        }
        if shared.stopped().is_none() && since.elapsed() > timeout {
            let now = launched.iter().take_while(|l| l.streams_done()).count();
            if now > ended {
                (since, ended) = (Instant::now(), now);
            } else if let Some(launch) = launched.get(now).or(launched.last()) {
                let error = launch.declare_hung();
                shared.stop(AbortCause::PeerFailed {
                    rank: launch.rank(),
                    error: Arc::new(error),
                });
            }
        }
        pause(start.elapsed(), Duration::MAX);
    }
}

/// Whether `group`'s done event fired (or its query failed: the launches' own polls
/// report that).
fn settled(group: &GpuGroup) -> bool {
    let Ok(_current) = group.gpu.bind() else {
        return true;
    };
    // SAFETY: `done` is a live event of the group.
    let state = unsafe { sys::cuEventQuery(group.done) };
    state != sys::CUresult::CUDA_ERROR_NOT_READY
}

#[cfg(test)]
mod tests {
    use super::steps_of;

    #[test]
    fn a_launch_replays_only_when_every_epoch_holds_every_local_rank_once() {
        // Two ranks' three steps, in the order a group launch brings them (rank by rank).
        let keys = [(5, 0), (6, 0), (7, 0), (5, 1), (6, 1), (7, 1)];
        assert_eq!(
            steps_of(&keys, 2),
            Some(vec![(5, vec![0, 3]), (6, vec![1, 4]), (7, vec![2, 5])])
        );
        // One local rank: every submission is a step of its own.
        assert_eq!(
            steps_of(&[(9, 0), (8, 0)], 1),
            Some(vec![(8, vec![1]), (9, vec![0])])
        );
        // A rank missing at an epoch (and another there twice), ranks at different
        // epochs (a launch per rank's thread), a count that is no multiple, nothing.
        assert_eq!(steps_of(&[(5, 0), (5, 0), (6, 1), (6, 1)], 2), None);
        assert_eq!(steps_of(&[(5, 0), (6, 1)], 2), None);
        assert_eq!(steps_of(&[(5, 0), (5, 1), (6, 0)], 2), None);
        assert_eq!(steps_of(&[], 2), None);
        assert_eq!(steps_of(&[(5, 0)], 0), None);
    }
}
