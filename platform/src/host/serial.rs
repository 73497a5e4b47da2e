//! Linked sequences: one thread runs a whole group of small launches in one precomputed
//! order, with no signals and no scheduler.
//!
//! When one thread submits every rank of an in-process device at once (a group launch of
//! graph mode, [`crate::Device::run_sequence_group`]), nothing outside the group can post
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

use super::compile::{HostProgram, Op, INLINE_BYTES};
use super::exec::{run_data_task, PeerRegions, SPLIT_BYTES};
use super::launch::{Launch, Step};
use super::memory::UserRegions;
use crate::device::Compiled;
use crate::error::TaskLocation;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;

// A small program's tasks each move less than a split: `run` runs them inline.
const _: () = assert!(INLINE_BYTES < SPLIT_BYTES);

/// Groups whose schedule (or refusal) is kept.
const CACHED_GROUPS: usize = 64;

/// A data task of a group: (launch index in the group, stream, task index).
type TaskAt = (usize, usize, usize);

/// A group's launches: each one's program and epoch relative to the group's first.
type GroupKey = Vec<(Arc<Compiled>, u64)>;

/// The data tasks of a group, in the order to run them, with the launches of each epoch
/// ending after its last task.
#[derive(Debug)]
pub(crate) struct Schedule {
    /// Per epoch of the group (ascending): the launches (indices in the group) of that
    /// epoch, and its data tasks in order.
    pub epochs: Vec<(Vec<usize>, Vec<TaskAt>)>,
}

/// The schedules of the groups seen, keyed by their programs.
#[derive(Default)]
pub(crate) struct Schedules {
    /// Per group: each launch's program and epoch (relative to the group's first).
    cache: Mutex<Vec<(GroupKey, Option<Arc<Schedule>>)>>,
}

impl Schedules {
    /// The schedule of `group` (each launch's compiled program, host part and epoch
    /// relative to the group's first),
    /// from the cache or played now; `None` when the group cannot be linked.
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
}

impl Schedules {
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
    if epochs.iter().enumerate().any(|(i, &e)| e != i as u64) {
        return None;
    }
    let mut schedule = Schedule { epochs: Vec::new() };
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
            if !program.small {
                return None;
            }
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
    for (ending, order) in &schedule.epochs {
        let mut regions: Vec<Option<UserRegions>> = vec![None; slots];
        for &i in ending {
            regions[launches[i].program.slot] = Some(launches[i].user);
        }
        for &(i, s, task) in order {
            let launch = &launches[i];
            if launch.is_aborted() {
                break;
            }
            let Op::Data(data) = &launch.program.streams[s][task] else {
                unreachable!("a schedule lists data tasks only");
            };
            let at = TaskLocation {
                rank: launch.rank(),
                stream: s,
                task,
            };
            match run_data_task(launch, data, at, PeerRegions::Serial(&regions)) {
                Ok(Step::Next) => {}
                Ok(Step::Suspended) => unreachable!("small programs run their tasks inline"),
                Err(err) => launch.abort(err),
            }
        }
        let ended: Vec<&Arc<Launch>> = ending.iter().map(|&i| &launches[i]).collect();
        Launch::end_serially(&ended);
    }
}
