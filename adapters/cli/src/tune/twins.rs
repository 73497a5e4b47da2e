//! Executors that run the same programs at a size: measured once.
//!
//! On a healthy topology a relaying executor plans exactly what its base executor plans
//! (`relay-mesh` is `mesh` when no rank lacks a link to the root), and some executors
//! coincide at small rank counts. Their times are one quantity: measured separately they
//! differ only by the machine's noise, which on a shared machine reaches tens of percent
//! between identical programs (over four tunes of a Reduce on 8 ranks at 512 KiB and
//! 32 MiB, `mesh` measured 1.00x to 1.34x the time of `relay-mesh`, slower at 7 of the 8
//! points). A table that records that noise as a difference sends the pick check and
//! select_alg after it. So at each size the candidates are grouped by what decides their
//! time, every rank's program and loop layout, zero-copy and staged alike, and each
//! group is measured once, under its first name; its other names get the same time.

use oxccl::framework::analyzer::Recording;
use oxccl::framework::executor::ExecutorEntry;
use oxccl::framework::planner::Loops;
use oxccl::framework::platform::RankProgram;
use std::sync::Arc;

use super::sweep::Job;

/// A group of candidates with the same programs at one size.
pub struct Twins {
    /// The executor measured.
    pub measured: &'static ExecutorEntry,
    /// The others, which get its measurement.
    pub twins: Vec<&'static ExecutorEntry>,
}

impl Twins {
    /// True when `executor` is the group's measured executor or one of its twins.
    pub fn holds(&self, executor: &str) -> bool {
        self.measured.name == executor || self.twins.iter().any(|t| t.name == executor)
    }
}

/// `entries` grouped by their programs at `size`, in `entries`' order (a group under its
/// first member). An executor whose programs cannot be recorded here is a group alone:
/// measuring it then reports why it cannot run.
pub fn group(job: &Job, size: usize, entries: &[&'static ExecutorEntry]) -> Vec<Twins> {
    let mut groups: Vec<(Twins, Option<Programs>)> = Vec::new();
    for &entry in entries {
        let programs = programs(job, size, entry);
        let same = programs.as_ref().and_then(|p| {
            groups
                .iter_mut()
                .find(|(_, other)| other.as_ref() == Some(p))
        });
        match same {
            Some((group, _)) => group.twins.push(entry),
            None => groups.push((
                Twins {
                    measured: entry,
                    twins: vec![],
                },
                programs,
            )),
        }
    }
    groups.into_iter().map(|(g, _)| g).collect()
}

/// What decides an executor's time at a size: every rank's program and loop marks,
/// zero-copy then staged.
type Programs = Vec<Recorded>;
type Recorded = (Arc<RankProgram>, Loops);

/// [`Programs`] of `entry` at `size`, or `None` when they cannot be recorded.
fn programs(job: &Job, size: usize, entry: &ExecutorEntry) -> Option<Programs> {
    let ops = job.calls_at(size);
    let mut out = Vec::new();
    for zero_copy in [true, false] {
        let mut config = job.config.clone();
        config.tune = None;
        config.zero_copy = zero_copy;
        config.algo.set(Some(job.kind), entry.name);
        let recording = Recording::record_each(&ops, false, config).ok()?;
        out.extend(
            recording
                .ranks
                .iter()
                .map(|r| (r.program.clone(), r.loops.clone())),
        );
    }
    Some(out)
}
