//! What the analyzer found: typed failures, collected per check, sorted, and capped.
//!
//! A broken program can fail the same way millions of times (a ring of 1024 ranks that
//! forgets one handshake races in every step). The collector therefore keeps at most
//! [`KEPT_PER_CHECK`] failures of each [`Check`], so that one flood does not hide the other
//! checks' findings, and counts every failure in [`Report::failure_count`]. The kept
//! failures are the first ones found in a deterministic order and are sorted by check,
//! rank, stream and task before they are handed out.

use oxccl_platform::Rank;
use std::fmt;

/// The checks the analyzer runs, in the order they are reported.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Check {
    /// Slices inside their buffers, no overlapping destinations, Input never written.
    Bounds,
    /// Remote slices and posts over existing, unbroken links; notifies that exist.
    Link,
    /// Over a sequence: a task touches a rank's buffers or notifies without the two ranks
    /// granting each other, so the epoch fence does not order it.
    Grant,
    /// A wait that can never be satisfied.
    Deadlock,
    /// A post on a notify that may still be set, or a post nobody consumes.
    LostWakeup,
    /// Slave streams fork from and join the main stream.
    ForkJoin,
    /// In zero-copy mode, a peer's Input or Output touched before a task of that peer (it
    /// has not entered the operation, so its user buffers may not exist yet).
    PeerReady,
    /// Two unordered tasks touching the same bytes, at least one writing.
    MemoryConflict,
    /// The outputs do not hold what the operator defines.
    Semantics,
}

impl Check {
    /// Every check, in report order.
    pub const ALL: [Check; 9] = [
        Check::Bounds,
        Check::Link,
        Check::Grant,
        Check::Deadlock,
        Check::LostWakeup,
        Check::ForkJoin,
        Check::PeerReady,
        Check::MemoryConflict,
        Check::Semantics,
    ];
}

impl fmt::Display for Check {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

/// One thing the analyzer proved wrong.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure {
    pub check: Check,
    /// The operation's position when a sequence of operations was analysed.
    pub op: Option<usize>,
    /// The rank whose task (or output) is at fault, when there is one.
    pub rank: Option<Rank>,
    pub stream: Option<usize>,
    /// Index of the task in its stream.
    pub task: Option<usize>,
    pub message: String,
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "[{}] {}", self.check, self.message)
    }
}

/// The analyzer's verdict on one recording.
#[derive(Clone, Debug)]
pub struct Report {
    /// The kept failures (at most [`KEPT_PER_CHECK`] per check), sorted.
    pub failures: Vec<Failure>,
    /// Every failure found, kept or not.
    pub failure_count: usize,
    /// Tasks of the program, over all ranks and streams.
    pub tasks: usize,
    /// When a window of the loop's iterations was proved for all of them, which.
    pub folded: Option<super::Folded>,
}

impl Report {
    /// True when no check failed.
    pub fn passed(&self) -> bool {
        self.failure_count == 0
    }

    /// The kept failures of one check.
    pub fn of(&self, check: Check) -> impl Iterator<Item = &Failure> {
        self.failures.iter().filter(move |f| f.check == check)
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.passed() {
            write!(f, "all checks passed on {} tasks", self.tasks)?;
            if let Some(folded) = &self.folded {
                write!(f, " ({folded})")?;
            }
            return Ok(());
        }
        writeln!(
            f,
            "{} failures on {} tasks ({} shown):",
            self.failure_count,
            self.tasks,
            self.failures.len()
        )?;
        self.failures.iter().try_for_each(|x| writeln!(f, "  {x}"))
    }
}

/// Failures kept per check; the rest are only counted.
pub const KEPT_PER_CHECK: usize = 64;

/// Where checks put their failures.
#[derive(Debug, Default)]
pub(crate) struct Collector {
    kept: Vec<Failure>,
    counts: [usize; Check::ALL.len()],
}

impl Collector {
    /// True when another failure of `check` would still be kept: lets a check skip building
    /// an expensive message that would be dropped.
    pub fn wants(&self, check: Check) -> bool {
        self.counts[check as usize] < KEPT_PER_CHECK
    }

    /// Count a failure whose message is not built (it would not be kept).
    pub fn count_only(&mut self, check: Check) {
        self.counts[check as usize] += 1;
    }

    /// Record a failure.
    pub fn push(&mut self, failure: Failure) {
        let c = failure.check as usize;
        if self.counts[c] < KEPT_PER_CHECK {
            self.kept.push(failure);
        }
        self.counts[c] += 1;
    }

    /// Record a failure of `check` at a task location, building its message only if kept.
    pub fn at(
        &mut self,
        check: Check,
        loc: Option<super::index::Loc>,
        message: impl FnOnce() -> String,
    ) {
        if !self.wants(check) {
            self.count_only(check);
            return;
        }
        self.push(Failure {
            check,
            op: loc.and_then(|l| l.op),
            rank: loc.map(|l| l.rank),
            stream: loc.map(|l| l.stream),
            task: loc.map(|l| l.task),
            message: message(),
        });
    }

    /// Take in the failures another collector found (the per-check cap still holds).
    pub fn merge(&mut self, other: Collector) {
        for (c, n) in other.counts.iter().enumerate() {
            let room = KEPT_PER_CHECK.saturating_sub(self.counts[c]);
            let kept = other
                .kept
                .iter()
                .filter(|f| f.check as usize == c)
                .take(room);
            self.kept.extend(kept.cloned());
            self.counts[c] += n;
        }
    }

    /// Sort the kept failures and produce the report.
    pub fn into_report(mut self, tasks: usize) -> Report {
        self.kept.sort_by(|a, b| {
            (a.check, a.op, a.rank, a.stream, a.task, &a.message)
                .cmp(&(b.check, b.op, b.rank, b.stream, b.task, &b.message))
        });
        Report {
            failures: self.kept,
            failure_count: self.counts.iter().sum(),
            tasks,
            folded: None,
        }
    }
}
