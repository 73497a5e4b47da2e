//! The analyzer: proves an executor's programs correct without moving data.
//!
//! [`recording`] builds every rank's program through the real framework path on the `sim`
//! device; [`analyze`] checks it. The checks build on one another:
//!
//! - `bounds` and `links` look at each task alone: slices inside their buffers, no
//!   overlapping writes within a task, remote accesses over existing links, notifies that
//!   exist and are used by the right ranks.
//! - `schedule` runs one canonical interleaving of every stream of every rank, recording
//!   when each task ran and which post each wait consumed; a run that cannot finish is a
//!   deadlock, reported wait by wait with the posts that could have ended it.
//! - `hb` answers happens-before queries over that run's task graph (stream order plus
//!   post-to-wait edges). `lost_wakeup` proves with it that every interleaving pairs posts
//!   and waits as the canonical one does, with no post on a notify still set; that proof
//!   is what lets the remaining checks reason about one execution and conclude for all.
//! - `fork_join` checks that slave streams fork from and join the main stream.
//! - `peer_ready` checks, in zero-copy mode, that a task touches a peer's Input or Output
//!   only after a task of that peer (which has then entered the operation, so its user
//!   buffers exist on the device).
//! - `memory` finds tasks that touch the same bytes without HB order, FastTrack-style:
//!   along the canonical run, each access is checked against the last write and the reads
//!   since, per byte interval. A put over a put-only link must also have landed
//!   (`delivery`): its target waited for a post of the writer sent after it. That is a
//!   happens-before query through a post of one kind, so `fold`'s argument covers it as it
//!   covers the plain ones.
//! - `semantics` follows symbolic values ([`value`]) through the run over byte intervals
//!   and compares every output with the operator's definition ([`expect`]).
//!
//! [`conformance`] runs one executor over the matrix of shapes, types, ops and counts.
//!
//! [`sequence`] proves two or three operations run back to back safe under the device's
//! epoch fence (which alone keeps operations apart): the same deadlock, lost-wakeup and
//! memory passes over the operations indexed together, with the fence as extra
//! happens-before edges, and the grant rule the fence relies on.
//!
//! Everything works on intervals and dense task ids, so the cost grows with the number of
//! tasks, not with the bytes moved: a task moving 1 GiB costs what one moving 1 KiB does.
//! The task count still grows with the bytes through the loop, one iteration per CCL
//! buffer-full: a 1 GiB put-rhd AllReduce on 1024 ranks with 32 MiB CCL buffers is 32
//! iterations, 3.7 million tasks. When the iterations repeat, `fold` proves a window of
//! a few of them for all (the argument is in its doc). Failures are capped per check
//! ([`KEPT_PER_CHECK`]) but all counted ([`Report::failure_count`]).

mod bounds;
pub mod conformance;
mod delivery;
pub mod expect;
mod fence;
mod fold;
mod fork_join;
mod hb;
mod index;
mod intervals;
pub mod layouts;
mod links;
mod lost_wakeup;
mod memory;
mod peer_ready;
pub mod recording;
pub mod report;
mod schedule;
mod semantics;
pub mod sequence;
#[cfg(test)]
mod tests;
pub mod value;

pub use fold::Folded;
pub use recording::{RankRecording, Recording};
pub use report::{Check, Failure, Report, KEPT_PER_CHECK};
pub use sequence::{analyze_sequence, analyze_sequence_with, FenceModel, SequenceError};

/// Run every check on `rec`.
///
/// A long loop whose iterations repeat is proved on a window of them (`fold`); a window
/// that fails is analysed again whole, so every failure reported is the whole program's.
pub fn analyze(rec: &Recording) -> Report {
    if let Some(fold) = fold::fold(rec) {
        let report = analyze_part(&fold.window, Some(&fold.covered));
        if report.passed() {
            let tasks = rec.ranks.iter().map(|r| r.program.task_count()).sum();
            return Report {
                tasks,
                folded: Some(fold.folded),
                ..report
            };
        }
    }
    analyze_part(rec, None)
}

/// Every check on every task of `rec`, never folding: the reference a fold is measured
/// against, and what a window that fails is analysed with.
pub fn analyze_unfolded(rec: &Recording) -> Report {
    analyze_part(rec, None)
}

/// Every check on `rec`, comparing the outputs of the iterations `covered` (`(first
/// element, count)`; all when `None`).
///
/// After the canonical execution, the semantics pass (which needs no happens-before
/// queries) runs on a second thread beside the synchronisation and memory-conflict passes.
fn analyze_part(rec: &Recording, covered: Option<&[(usize, usize)]>) -> Report {
    let idx = index::Index::new(rec);
    let mut out = report::Collector::default();
    bounds::check(&idx, &mut out);
    links::check(&idx, &mut out);
    let ex = schedule::run(&idx);
    schedule::check_deadlock(&idx, &ex, &mut out);
    let flow = std::thread::scope(|scope| {
        let flow = scope.spawn(|| {
            let mut flow = report::Collector::default();
            semantics::check(&idx, &ex, covered, &mut flow);
            flow
        });
        let mut hb = hb::Hb::new(&ex);
        lost_wakeup::check(&idx, &ex, &mut hb, &mut out);
        fork_join::check(&idx, &ex, &mut hb, &mut out);
        peer_ready::check(&idx, &ex, &mut out);
        memory::check(&idx, &ex, &mut hb, &mut out);
        flow.join()
    });
    match flow {
        Ok(flow) => out.merge(flow),
        Err(panic) => std::panic::resume_unwind(panic),
    }
    out.into_report(idx.task_count())
}
