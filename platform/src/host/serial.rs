//! Linked sequences: one thread runs a whole group of small launches in one precomputed
//! order, with no signals and no scheduler.
//!
//! When one thread submits every rank of an in-process device at once (an eager group call
//! over every rank, as `oxccl perf` and a NCCL-style group make, or a group launch of
//! graph mode), nothing outside the group can post
//! or wait on the group's notifies, so the only orders that matter are the ones the
//! programs' Posts and Waits impose. A [`Schedule`] is one such order, computed once by
//! playing the programs' signals symbolically (the way the analyzer's canonical execution
//! does): every stream runs until it waits on a word not yet posted, a post sets its word
//! and a wait consumes it. The data tasks in the order they ran there form a valid
//! execution of the group, so running them one after the other on this thread is one of
//! the executions the device could have produced; the signals themselves need not run.
//! Epochs are played one after the other (every launch of epoch `e` before any of
//! `e + 1`), which the epoch fence allows.
//!
//! Only what this proves is linked: every launch is small (its data fits the inline
//! path), every signal stays on this device (no shared-memory or TCP peers), every local
//! rank is in every epoch of the group, and the symbolic play completes with no post onto
//! a set word and no word left set at the end of an epoch. Anything else — and any group
//! whose gates are not all open, or whose ranks are not all at the epoch before the
//! group's — runs through the device's scheduler as usual, which reports the faults the
//! play saw. Schedules are cached per group of compiled programs (they hold the programs,
//! so the key cannot be reused by others).

use super::compile::{HostProgram, Op};
use super::exec::BoundTask;
use super::launch::{Launch, Shared};
use super::memory::{BindingKey, UserRegions};
use crate::device::{Compiled, UserBuffers};
use crate::error::TaskLocation;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;

/// Groups whose schedule (or refusal) is kept.
const CACHED_GROUPS: usize = 64;

/// A data task of a group: (launch index in the group, stream, task index).
type TaskAt = (usize, usize, usize);

/// A group's launches: each one's program and epoch relative to the group's first.
type GroupKey = Vec<(Arc<Compiled>, u64)>;

/// The data tasks of a group, in the order to run them, with the launches of each epoch
/// ending after its last task.
pub(crate) struct Schedule {
    /// Per epoch of the group (ascending): the launches (indices in the group) of that
    /// epoch, and its data tasks in order.
    pub epochs: Vec<(Vec<usize>, Vec<TaskAt>)>,
    /// Per epoch, its tasks as bound by the last run, with the user buffers they were
    /// bound with: a run with the same buffers (a framework's usual replay) runs them
    /// without binding and checking each operand again.
    bound: Mutex<Vec<Option<BoundEpoch>>>,
    /// Runs made by [`Schedule::replay`], for tests.
    #[cfg(test)]
    pub replays: std::sync::atomic::AtomicUsize,
}

/// The user buffers of an epoch's launches, each one's as its key.
type Bindings = Vec<BindingKey>;

/// An epoch's tasks as bound with the buffers they were bound with.
type BoundEpoch = (Bindings, Vec<BoundTask>);

impl std::fmt::Debug for Schedule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Schedule")
            .field("epochs", &self.epochs)
            .finish()
    }
}

/// The schedules of the groups seen, keyed by their programs.
#[derive(Default)]
pub(crate) struct Schedules {
    /// Per group: each launch's program and epoch (relative to the group's first).
    cache: Mutex<Vec<(GroupKey, Option<Arc<Schedule>>)>>,
}

impl Schedules {
    /// The schedule of `group` (each launch's compiled program, host part and epoch
    /// relative to the group's first), from the cache or played now; `None` when the
    /// group cannot be linked.
    pub(crate) fn of(
        &self,
        group: &[(&Arc<Compiled>, &HostProgram, u64)],
        local_slots: usize,
    ) -> Option<Arc<Schedule>> {
        let same = |key: &[(Arc<Compiled>, u64)]| {
            key.len() == group.len()
                && key
                    .iter()
                    .zip(group)
                    .all(|(k, g)| Arc::ptr_eq(&k.0, g.0) && k.1 == g.2)
        };
        if let Some((_, found)) = self.cache.lock().iter().find(|(key, _)| same(key)) {
            return found.clone();
        }
        let schedule = play(group, local_slots).map(Arc::new);
        let mut cache = self.cache.lock();
        if cache.len() >= CACHED_GROUPS {
            cache.remove(0);
        }
        let key = group.iter().map(|g| (g.0.clone(), g.2)).collect();
        cache.push((key, schedule.clone()));
        schedule
    }

    /// Replays of every group kept, for tests.
    #[cfg(test)]
    pub(crate) fn replays(&self) -> usize {
        let cache = self.cache.lock();
        let replays = cache.iter().flat_map(|(_, s)| s.as_ref());
        replays
            .map(|s| s.replays.load(std::sync::atomic::Ordering::Relaxed))
            .sum()
    }

    /// Groups kept with a schedule (the others could not be linked).
    #[cfg(test)]
    pub(crate) fn linked(&self) -> usize {
        self.cache
            .lock()
            .iter()
            .filter(|(_, s)| s.is_some())
            .count()
    }
}

/// Play the group's signals symbolically, epoch by epoch (see the module docs).
fn play(group: &[(&Arc<Compiled>, &HostProgram, u64)], local_slots: usize) -> Option<Schedule> {
    let mut epochs: Vec<u64> = group.iter().map(|g| g.2).collect();
    epochs.sort_unstable();
    epochs.dedup();
    let consecutive = epochs.iter().enumerate().all(|(i, &e)| e == i as u64);
    if !consecutive || group.iter().any(|g| !g.1.small()) {
        return None;
    }
    let mut schedule = Schedule {
        epochs: Vec::new(),
        bound: Mutex::new(Vec::new()),
        #[cfg(test)]
        replays: Default::default(),
    };
    for epoch in epochs {
        let launches: Vec<usize> = (0..group.len()).filter(|&i| group[i].2 == epoch).collect();
        let mut slots: Vec<usize> = launches.iter().map(|&i| group[i].1.slot).collect();
        slots.sort_unstable();
        slots.dedup();
        if slots.len() != launches.len() || slots.len() != local_slots {
            return None;
        }
        let order = play_epoch(group, &launches)?;
        schedule.epochs.push((launches, order));
    }
    *schedule.bound.get_mut() = schedule.epochs.iter().map(|_| None).collect();
    Some(schedule)
}

/// The data tasks of one epoch's launches in an order their signals allow, or `None`.
fn play_epoch(
    group: &[(&Arc<Compiled>, &HostProgram, u64)],
    launches: &[usize],
) -> Option<Vec<TaskAt>> {
    let mut set: HashMap<(usize, usize), bool> = HashMap::new();
    let mut pcs: Vec<Vec<usize>> = launches
        .iter()
        .map(|&i| vec![0; group[i].1.streams.len()])
        .collect();
    let mut order = Vec::new();
    loop {
        let mut progressed = false;
        let mut remaining = false;
        for (l, &i) in launches.iter().enumerate() {
            let program = group[i].1;
            for (s, ops) in program.streams.iter().enumerate() {
                let pc = &mut pcs[l][s];
                while let Some(op) = ops.get(*pc) {
                    match op {
                        Op::Data(data) if data.remote.is_empty() => order.push((i, s, *pc)),
                        Op::Data(_) | Op::PostAfar { .. } | Op::PostTcp { .. } => return None,
                        Op::Fused => {}
                        Op::Post { slot, word, .. } => {
                            let word = set.entry((*slot, *word)).or_default();
                            if *word {
                                return None;
                            }
                            *word = true;
                        }
                        Op::Wait { word, .. } => {
                            let word = set.entry((program.slot, *word)).or_default();
                            if !*word {
                                break;
                            }
                            *word = false;
                        }
                    }
                    *pc += 1;
                    progressed = true;
                }
                remaining |= *pc < ops.len();
            }
        }
        if !remaining {
            return (!set.values().any(|&v| v)).then_some(order);
        }
        if !progressed {
            return None;
        }
    }
}

/// Run `schedule` over `launches` (the group's, admitted and not started): each epoch's
/// data tasks in order, then its launches end. A task that fails aborts its launch,
/// which stops the device, so every launch of the group still ends, with its outcome.
pub(crate) fn run(schedule: &Schedule, launches: &[Arc<Launch>]) {
    let slots = launches
        .iter()
        .map(|l| l.program.slot)
        .max()
        .map_or(0, |s| s + 1);
    for (e, (ending, order)) in schedule.epochs.iter().enumerate() {
        let bindings: Bindings = ending.iter().map(|&i| launches[i].user.key()).collect();
        let kept = schedule.bound.lock().get_mut(e).and_then(Option::take);
        let tasks = match kept {
            Some((kept, tasks)) if kept == bindings => Some(tasks),
            _ => bind_epoch(launches, (ending, order), slots),
        };
        if let Some(tasks) = &tasks {
            for (task, &(i, ..)) in tasks.iter().zip(order) {
                if launches[i].is_aborted() {
                    break;
                }
                // SAFETY: bound with `bindings`, the buffers of this run's launches, which
                // stay registered to this thread's run until it returns; the schedule
                // orders every task after those it depends on, and only this thread
                // runs the group's tasks.
                unsafe { task.run() };
            }
        }
        let ended: Vec<&Arc<Launch>> = ending.iter().map(|&i| &launches[i]).collect();
        Launch::end_serially(&ended);
        if let (Some(tasks), Some(slot)) = (tasks, schedule.bound.lock().get_mut(e)) {
            *slot = Some((bindings, tasks));
        }
    }
}

/// A submission's user buffers keyed as [`UserRegions::key`] keys them once admitted
/// (`user_regions` in the parent module), without admitting it; a test holds the two
/// alike, since a replay runs tasks bound by one key when the other matches.
pub(crate) fn bindings_of_user(user: &UserBuffers<'_>) -> BindingKey {
    match user {
        UserBuffers::OutOfPlace { input, output } => [
            (input.as_ptr() as usize, input.len(), false),
            (output.as_ptr() as usize, output.len(), true),
        ],
        UserBuffers::InPlace(buf) => {
            let (addr, len) = (buf.as_ptr() as usize, buf.len());
            [(addr, len, false), (addr, len, true)]
        }
        // Not host memory: never linked (see `HostDevice::linked`).
        UserBuffers::Device { .. } => [(0, 0, false); 2],
    }
}

/// One submission of a group to replay: its local slot, its epoch and its buffers' key.
pub(crate) type Replayed = (usize, u64, BindingKey);

impl Schedule {
    /// Replay the group `group` (in the group's order) by the tasks its every epoch was
    /// last bound with, when each was bound with exactly these buffers — a framework's
    /// training loop, a benchmark, a graph relaunched on the same memory: the data tasks
    /// run in the schedule's order, then each rank's epoch ends and is done, as a serial
    /// run ends it. No launch is created: a linked group waits on nothing (its order is
    /// proved), touches no signal and ends on this thread, so what a launch tracks — its
    /// phase, its fences, its registration for peers' tasks — has nothing to do. Returns
    /// false, having run nothing, when an epoch must be bound anew (then the group runs
    /// as a serial run, which binds it).
    pub(crate) fn replay(&self, shared: &Shared, group: &[Replayed]) -> bool {
        let bound = self.bound.lock();
        if bound.len() != self.epochs.len() {
            return false;
        }
        // Every epoch's tasks, when each epoch was last bound with these very buffers.
        let kept: Option<Vec<&Vec<BoundTask>>> = self
            .epochs
            .iter()
            .zip(bound.iter())
            .map(|((ending, _), kept)| {
                let (keys, tasks) = kept.as_ref()?;
                let same = keys.len() == ending.len()
                    && ending.iter().zip(keys).all(|(&i, k)| group[i].2 == *k);
                same.then_some(tasks)
            })
            .collect();
        let Some(kept) = kept else {
            return false;
        };
        for ((ending, _), tasks) in self.epochs.iter().zip(kept) {
            for task in tasks {
                // SAFETY: bound with these very buffers (the keys matched), which the
                // caller keeps borrowed until this returns; the schedule orders every task
                // after those it depends on, and only this thread runs the group's tasks.
                unsafe { task.run() };
            }
            for &i in ending {
                let (slot, epoch, _) = group[i];
                shared.end(slot, epoch);
                shared.advance(slot, epoch);
            }
        }
        #[cfg(test)]
        self.replays
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        true
    }
}

/// Bind every task of one epoch (`ending`'s launches, `order`) with the launches' user
/// buffers; a task that cannot be bound aborts its launch (which stops the device) and
/// the epoch runs nothing.
fn bind_epoch(
    launches: &[Arc<Launch>],
    (ending, order): (&[usize], &[TaskAt]),
    slots: usize,
) -> Option<Vec<BoundTask>> {
    let mut regions: Vec<Option<UserRegions>> = vec![None; slots];
    for &i in ending {
        regions[launches[i].program.slot] = Some(launches[i].user);
    }
    let mut tasks = Vec::with_capacity(order.len());
    for &(i, s, task) in order {
        let launch = &launches[i];
        let Op::Data(data) = &launch.program.streams[s][task] else {
            unreachable!("a schedule lists data tasks only");
        };
        let at = TaskLocation {
            rank: launch.rank(),
            stream: s,
            task,
        };
        match BoundTask::bind(launch, data, at, &regions) {
            Ok(bound) => tasks.push(bound),
            Err(err) => {
                launch.abort(err);
                return None;
            }
        }
    }
    Some(tasks)
}
