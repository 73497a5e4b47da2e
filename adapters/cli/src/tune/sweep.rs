//! Measuring the candidates of one operator over the size sweep.

use super::candidates::candidates;
use super::contenders::{contenders, deciders};
use super::drift;
use super::reference::reference_picks;
use super::twins::{self, Twins};
use crate::calls::calls;
use crate::perf::{measure, Measured, Settings};
use crate::sizes::count_for_size;
use oxccl::framework::executor::ExecutorEntry;
use oxccl::framework::tune::{TuneEntry, TuneTable};
use oxccl::{Communicator, Config, DataType, Error, OpKind, ReduceOp, Topology};

/// What to tune: one operator on one topology.
pub struct Job {
    pub kind: OpKind,
    pub dtype: DataType,
    pub root: usize,
    /// nccl-tests sizes, as `oxccl perf` takes them.
    pub sizes: Vec<usize>,
    pub settings: Settings,
    /// Rounds over every executor; each point's time is the median of its rounds with
    /// each round's load taken out ([`drift`]).
    pub rounds: usize,
    /// Rounds more, after those, over each size's contenders ([`contenders`]).
    pub contender_rounds: usize,
    /// Rounds more, after those, over each size's deciders ([`deciders`]).
    pub decider_rounds: usize,
    /// The communicators' configuration (topology set, no executor forced).
    pub config: Config,
    pub topology: Topology,
}

impl Job {
    /// Every rank's call at nccl-tests size `size` (f32 sum, the job's root), as the
    /// model's pick, the programs compared for twins and the measurement all see it.
    pub fn calls_at(&self, size: usize) -> Vec<oxccl::OpParam> {
        let ranks = self.topology.ranks();
        let count = count_for_size(self.kind, size, self.dtype, ranks);
        calls(
            self.kind,
            count,
            self.dtype,
            ReduceOp::Sum,
            self.root,
            ranks,
        )
    }
}

/// One measured (or skipped) point of the sweep, for the printed table.
pub struct Point {
    pub size: usize,
    /// The measurement recorded: its time is the median of `rounds`, each round's load
    /// taken out ([`Outcome::level`]).
    pub entry: TuneEntry,
    /// Each round's time, in the order measured.
    pub rounds: Vec<RoundTime>,
}

/// One round's measurement of a point.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RoundTime {
    /// The sweep's round, from 1.
    pub round: usize,
    pub us: f64,
}

impl Point {
    /// A point measured once, in `round`.
    pub fn new(size: usize, round: usize, entry: TuneEntry) -> Self {
        let rounds = vec![RoundTime {
            round,
            us: entry.time_us,
        }];
        Point {
            size,
            entry,
            rounds,
        }
    }
}

/// An executor (or every executor) that cannot run here, at one size or at all.
pub struct Skip {
    pub executor: String,
    pub size: Option<usize>,
    pub why: String,
}

/// Everything one operator's tuning found.
#[derive(Default)]
pub struct Outcome {
    /// Sound measurements, in sweep order per executor.
    pub points: Vec<Point>,
    /// What cannot run here: every size of an executor (`size: None`), or one size.
    pub skipped: Vec<Skip>,
    /// Executors that computed wrong results or failed on the device: never recorded.
    pub failures: Vec<String>,
    /// What `select_alg` picks at each measured size without a tuning table (the cost
    /// model's choice), or why it picks nothing: the pick check's subject.
    pub picks: Vec<(usize, Pick)>,
    /// With `--reference`, the executor that table measured fastest at each measured size,
    /// or why it has none ([`reference_picks`]): the deciders measure it and the report
    /// checks it.
    pub reference_picks: Vec<(usize, Pick)>,
    /// `(size, executor, measured)`: `executor` runs the programs of `measured` at `size`
    /// and got its measurement ([`twins`]).
    pub twins: Vec<(usize, &'static str, &'static str)>,
    /// `(size, [(round, load)])`: each round's load at a size, as [`Outcome::level`]
    /// last estimated it (the median round's 1).
    pub load: Vec<(usize, Vec<(usize, f64)>)>,
}

/// The executor `select_alg` picks, or why it picks none.
pub type Pick = Result<String, String>;

impl Outcome {
    /// The points measured at `size`.
    pub fn at(&self, size: usize) -> impl Iterator<Item = &Point> + '_ {
        self.points.iter().filter(move |p| p.size == size)
    }

    /// `executor`'s point at `size`, if it was measured there.
    pub fn point_of(&self, size: usize, executor: &str) -> Option<&Point> {
        self.at(size).find(|p| p.entry.executor == executor)
    }

    /// The fastest point at `size`, if any was measured there.
    pub fn fastest_at(&self, size: usize) -> Option<&Point> {
        self.at(size)
            .min_by(|a, b| a.entry.time_us.total_cmp(&b.entry.time_us))
    }

    /// Add `point`'s round to an earlier round's measurement of the same point; its time
    /// is set again by [`Outcome::level`].
    fn record(&mut self, point: Point) {
        let earlier = self
            .points
            .iter_mut()
            .find(|p| p.size == point.size && p.entry.executor == point.entry.executor);
        match earlier {
            Some(p) => p.rounds.extend(point.rounds),
            None => self.points.push(point),
        }
    }

    /// Set the time of every point at `size` from its rounds, each round's load at that
    /// size taken out ([`drift`]), and keep the loads for the report.
    pub(super) fn level(&mut self, size: usize) {
        let mut at: Vec<&mut Point> = self.points.iter_mut().filter(|p| p.size == size).collect();
        let rows: Vec<&[RoundTime]> = at.iter().map(|p| p.rounds.as_slice()).collect();
        let levelled = drift::level(&rows);
        for (p, time) in at.iter_mut().zip(levelled.times) {
            p.entry.time_us = time;
        }
        self.load.retain(|(s, _)| *s != size);
        self.load.push((size, levelled.load));
    }

    /// Each round's load at `size`, if it was estimated.
    pub fn load_at(&self, size: usize) -> Option<&[(usize, f64)]> {
        let (_, load) = self.load.iter().find(|(s, _)| *s == size)?;
        Some(load)
    }

    /// What `select_alg` picks at `size` without a table, when it picks one.
    pub fn pick_at(&self, size: usize) -> Option<&str> {
        let (_, pick) = self.picks.iter().find(|(s, _)| *s == size)?;
        pick.as_deref().ok()
    }

    /// The executor whose measurement `executor` got at `size`, when it runs its programs.
    pub fn twin_of(&self, size: usize, executor: &str) -> Option<&'static str> {
        self.twins
            .iter()
            .find(|(s, twin, _)| *s == size && *twin == executor)
            .map(|(_, _, measured)| *measured)
    }

    /// True when `executor` was found unable to run `size` in an earlier round.
    fn skips(&self, executor: &str, size: usize) -> bool {
        self.skipped
            .iter()
            .any(|s| s.executor == executor && s.size == Some(size))
    }

    /// Give `group`'s twins at `size` what its measured executor got there: its time, its
    /// skip, or its failure (the same programs fail alike).
    fn share(&mut self, kind: OpKind, size: usize, group: &Twins, failed: &mut Vec<&str>) {
        let measured = group.measured.name;
        let point = self
            .point_of(size, measured)
            .map(|p| (p.entry.clone(), p.rounds.clone()));
        let skip = self
            .skipped
            .iter()
            .find(|s| s.executor == measured && s.size == Some(size))
            .map(|s| s.why.clone());
        for twin in &group.twins {
            if failed.contains(&twin.name) {
                continue;
            }
            if let Some((entry, rounds)) = &point {
                let executor = twin.name.to_string();
                self.points.push(Point {
                    size,
                    entry: TuneEntry {
                        executor,
                        ..entry.clone()
                    },
                    rounds: rounds.clone(),
                });
            } else if let Some(why) = &skip {
                self.skipped.push(Skip {
                    executor: twin.name.to_string(),
                    size: Some(size),
                    why: why.clone(),
                });
            } else if failed.contains(&measured) {
                let why = format!("runs the programs of `{measured}`, which failed");
                self.fail(twin.name, format!("{} {}: {why}", kind.name(), twin.name));
                failed.push(twin.name);
            }
            self.twins.push((size, twin.name, measured));
        }
    }

    /// Record that `executor` failed: its points are dropped, later rounds pass it by.
    fn fail(&mut self, executor: &str, failure: String) {
        self.points.retain(|p| p.entry.executor != executor);
        self.failures.push(failure);
    }
}

/// Errors that say an executor cannot run this shape or topology: skipped, not failed.
fn cannot_run_here(err: &Error) -> bool {
    matches!(
        err,
        Error::Unsupported { .. } | Error::NoLink { .. } | Error::NoExecutor { .. }
    )
}

/// Measure every candidate of `job.kind` over `job.sizes`: round by round, each round
/// over every size and at each size over every executor, so that the executors compared
/// at a size are measured within the same stretch of the machine's load and a point's
/// rounds lie a whole sweep apart; every second round goes through the executors in
/// reverse, so no executor always runs first. Then `job.contender_rounds` rounds more,
/// the same way, over each size's contenders as the first rounds left them, and
/// `job.decider_rounds` over each size's deciders: select_alg's pick, `reference`'s
/// fastest, and their rival ([`deciders`]).
pub fn tune_operator(job: &Job, reference: Option<&TuneTable>) -> Result<Outcome, Error> {
    let found = candidates(job.kind, &job.topology)?;
    let mut outcome = Outcome::default();
    for (name, why) in found.skipped {
        outcome.skipped.push(Skip {
            executor: name.to_string(),
            size: None,
            why,
        });
    }
    let sizes = measurable_sizes(job, &mut outcome);
    outcome.picks = model_picks(job, &sizes)?;
    let mut sweep = Sweep {
        job,
        by_size: sizes
            .iter()
            .map(|&size| (size, twins::group(job, size, &found.run)))
            .collect(),
        next_round: 1,
        outcome,
        failed: vec![],
    };
    let every: Vec<Vec<&'static ExecutorEntry>> = sweep
        .by_size
        .iter()
        .map(|(_, groups)| groups.iter().map(|g| g.measured).collect())
        .collect();
    sweep.rounds(job.rounds.max(1), &every, "");
    let contenders: Vec<Vec<&'static ExecutorEntry>> = sweep
        .by_size
        .iter()
        .map(|(size, groups)| contenders(&sweep.outcome, *size, groups))
        .collect();
    sweep.rounds(job.contender_rounds, &contenders, "contender");
    if let Some(table) = reference {
        sweep.outcome.reference_picks = reference_picks(job, &sweep.outcome, table);
    }
    let deciders: Vec<Vec<&'static ExecutorEntry>> = sweep
        .by_size
        .iter()
        .map(|(size, groups)| {
            let named = named_picks(&sweep.outcome, *size);
            deciders(&sweep.outcome, *size, groups, &named)
        })
        .collect();
    sweep.rounds(job.decider_rounds, &deciders, "decider");
    let Sweep {
        by_size,
        mut outcome,
        mut failed,
        ..
    } = sweep;
    for (size, groups) in &by_size {
        for g in groups {
            outcome.share(job.kind, *size, g, &mut failed);
        }
    }
    Ok(outcome)
}

/// The executors whose pick checks `size` decides: select_alg's pick and the reference
/// table's fastest, where there are such.
fn named_picks(outcome: &Outcome, size: usize) -> Vec<&str> {
    let reference = outcome
        .reference_picks
        .iter()
        .filter(|(s, _)| *s == size)
        .filter_map(|(_, pick)| pick.as_deref().ok());
    outcome.pick_at(size).into_iter().chain(reference).collect()
}

/// A sweep in progress: the groups measured at each size, the outcome so far.
struct Sweep<'a> {
    job: &'a Job,
    by_size: Vec<(usize, Vec<Twins>)>,
    /// The number of the next round to measure, from 1.
    next_round: usize,
    outcome: Outcome,
    failed: Vec<&'static str>,
}

impl Sweep<'_> {
    /// `count` rounds, each over every size, at each size over its executors in `orders`
    /// (one list per size, in `by_size`'s order; an empty list measures nothing there),
    /// then every size levelled. `what` names the executors in the progress lines.
    fn rounds(&mut self, count: usize, orders: &[Vec<&'static ExecutorEntry>], what: &str) {
        for _ in 0..count {
            let round = self.next_round;
            self.next_round += 1;
            for ((size, _), order) in self.by_size.iter().zip(orders) {
                if order.is_empty() {
                    continue;
                }
                let kind = self.job.kind.name();
                let n = match (what, order.len()) {
                    ("", _) => String::new(),
                    (_, 1) => format!(": 1 {what}"),
                    (_, n) => format!(": {n} {what}s"),
                };
                eprintln!("# tuning {kind} at {size} B (round {round}{n})");
                let (outcome, failed) = (&mut self.outcome, &mut self.failed);
                measure_round(self.job, round, *size, order.clone(), outcome, failed);
            }
        }
        for (size, _) in &self.by_size {
            self.outcome.level(*size);
        }
    }
}

/// Measure `order`'s executors at `size` once (`round`), in reverse on even rounds,
/// passing by those that failed or cannot run `size`; one that fails now is recorded.
fn measure_round(
    job: &Job,
    round: usize,
    size: usize,
    mut order: Vec<&'static ExecutorEntry>,
    outcome: &mut Outcome,
    failed: &mut Vec<&'static str>,
) {
    if round.is_multiple_of(2) {
        order.reverse();
    }
    for entry in order {
        if failed.contains(&entry.name) || outcome.skips(entry.name, size) {
            continue;
        }
        if let Err(failure) = tune_point(job, round, size, entry, outcome) {
            outcome.fail(entry.name, failure);
            failed.push(entry.name);
        }
    }
}

/// What `select_alg` picks at each of `sizes` on communicators of the job's topology with
/// no tuning table (so the cost model decides) and no executor forced.
fn model_picks(job: &Job, sizes: &[usize]) -> Result<Vec<(usize, Pick)>, Error> {
    let mut config = job.config.clone();
    config.tune = None;
    let ranks = job.topology.ranks();
    let comms = Communicator::init_all(ranks, config)?;
    Ok(sizes
        .iter()
        .map(|&size| {
            let ops = job.calls_at(size);
            let pick = comms[0]
                .framework()
                .select(&ops[0], false)
                .map(|s| s.executor.name.to_string())
                .map_err(|e| e.to_string());
            (size, pick)
        })
        .collect())
}

/// The sizes of the sweep that hold at least one element per rank (all of them for a
/// barrier); the others are recorded as skipped for every executor.
fn measurable_sizes(job: &Job, outcome: &mut Outcome) -> Vec<usize> {
    let ranks = job.topology.ranks();
    let mut sizes = Vec::new();
    for &size in &job.sizes {
        let empty =
            job.kind != OpKind::Barrier && count_for_size(job.kind, size, job.dtype, ranks) == 0;
        if empty {
            outcome.skipped.push(Skip {
                executor: "every executor".into(),
                size: Some(size),
                why: "less than one element per rank".into(),
            });
        } else {
            sizes.push(size);
        }
    }
    sizes
}

/// Measure one executor at one size on communicators of its own (one round); `Err` is
/// a failure report (wrong values, out-of-bounds writes, a device error). Making the
/// communicators costs some milliseconds, against a point's tens.
fn tune_point(
    job: &Job,
    round: usize,
    size: usize,
    entry: &'static ExecutorEntry,
    outcome: &mut Outcome,
) -> Result<(), String> {
    let failed = |what: String| format!("{} {}: {what}", job.kind.name(), entry.name);
    let mut config = job.config.clone();
    config.algo.set(Some(job.kind), entry.name);
    let ranks = job.topology.ranks();
    let comms = Communicator::init_all(ranks, config).map_err(|e| failed(format!("init: {e}")))?;
    let ops = job.calls_at(size);
    match measure(&comms, &ops, &job.settings).and_then(|m| steady(&comms, &ops, job, m)) {
        Err(e) if cannot_run_here(&e) => outcome.skipped.push(Skip {
            executor: entry.name.to_string(),
            size: Some(size),
            why: e.to_string(),
        }),
        Err(e) => return Err(failed(format!("at {size} B: {e}"))),
        Ok(m) => {
            if let Some(why) = m.skipped {
                outcome.skipped.push(Skip {
                    executor: entry.name.to_string(),
                    size: Some(size),
                    why,
                });
                return Ok(());
            }
            let tuned =
                sound_entry(job, entry, &m).map_err(|w| failed(format!("at {size} B: {w}")))?;
            outcome.record(Point::new(size, round, tuned));
        }
    }
    Ok(())
}

/// Timed calls of one point take at least this long: a few microseconds' call measured
/// `-n 4` times is the machine's noise, not the executor.
const MIN_POINT_SECONDS: f64 = 0.02;

/// A point's calls are timed in this many blocks, and the fastest block counts: other
/// processes only ever add time, in bursts that one long block would average in.
const POINT_BLOCKS: usize = 5;

/// Calls one block needs at most, however short they are.
const MAX_BLOCK_ITERS: usize = 20_000;

/// The point measured again in [`POINT_BLOCKS`] blocks, each of at least `-n` calls and
/// all of them together of at least [`MIN_POINT_SECONDS`]; the fastest block's mean
/// counts ([`Settings::blocks`]) and the results are checked after the last. `m`, the
/// job's `-n` calls each timed alone, served as the warm-up and sizes the blocks.
///
/// Never the fastest single call: the fastest of a few calls is an extreme of their
/// spread, not their time. On the 2-core development machine an 8-rank 32 MiB AllGather
/// (`relay-mesh`) measured a fastest call of 7396 µs in a tune whose `oxccl perf` runs
/// minutes later averaged 10088 to 11382 µs per call, and executors whose calls spread
/// more won the comparison by luck.
fn steady(
    comms: &[Communicator],
    ops: &[oxccl::OpParam],
    job: &Job,
    m: Measured,
) -> Result<Measured, Error> {
    if m.skipped.is_some() {
        return Ok(m);
    }
    let per_call = m.out_of_place.seconds;
    let total = match per_call > 0.0 {
        true => (MIN_POINT_SECONDS / per_call).ceil(),
        false => f64::INFINITY,
    };
    let block = (total / POINT_BLOCKS as f64)
        .ceil()
        .clamp(1.0, MAX_BLOCK_ITERS as f64) as usize;
    let block = block.max(job.settings.blocks);
    let settings = Settings {
        iters: block,
        blocks: POINT_BLOCKS,
        ..job.settings
    };
    measure(comms, ops, &settings)
}

/// The table entry of a measured row, or why it must not be recorded.
fn sound_entry(job: &Job, entry: &ExecutorEntry, m: &Measured) -> Result<TuneEntry, String> {
    if m.executor != entry.name {
        return Err(format!(
            "ran `{}` although `{}` was forced",
            m.executor, entry.name
        ));
    }
    let wrong = m.out_of_place.wrong.unwrap_or(0);
    if wrong > 0 || m.out_of_bounds > 0 {
        return Err(format!(
            "{wrong} wrong values and {} bytes written out of bounds; not recorded",
            m.out_of_bounds
        ));
    }
    let ranks = job.topology.ranks();
    Ok(TuneEntry {
        op: job.kind,
        ranks,
        topology: job.topology.describe(),
        dtype: job.dtype,
        // What select_alg looks up: the bytes of one rank's input.
        bytes: m.op.buffer_bytes(0, ranks).0,
        executor: entry.name.to_string(),
        time_us: drift::hundredths(m.out_of_place.seconds * 1e6),
    })
}

/// A measured point for tests: an AllReduce of `size` bytes on 4 ranks, in round 1.
#[cfg(test)]
pub(super) fn point(size: usize, executor: &str, time_us: f64) -> Point {
    Point::new(
        size,
        1,
        TuneEntry {
            op: OpKind::AllReduce,
            ranks: 4,
            topology: "[4]".into(),
            dtype: DataType::F32,
            bytes: size,
            executor: executor.into(),
            time_us,
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn times(outcome: &Outcome) -> Vec<(usize, &str, f64)> {
        outcome
            .points
            .iter()
            .map(|p| (p.size, p.entry.executor.as_str(), p.entry.time_us))
            .collect()
    }

    /// `point`, measured in `round`.
    fn in_round(round: usize, size: usize, executor: &str, us: f64) -> Point {
        let mut p = point(size, executor, us);
        p.rounds[0].round = round;
        p
    }

    #[test]
    fn rounds_are_levelled_per_size_and_a_failure_drops_the_executor() {
        let mut outcome = Outcome::default();
        outcome.record(in_round(1, 1024, "ring", 30.0));
        outcome.record(in_round(1, 1024, "mesh", 20.0));
        outcome.record(in_round(1, 4096, "ring", 40.0));
        // Round 2 at 1024 B loaded 2x for both: the order and ratio stand.
        outcome.record(in_round(2, 1024, "ring", 60.0));
        outcome.record(in_round(2, 1024, "mesh", 40.0));
        // Recorded, not yet levelled: the first round's times.
        assert_eq!(times(&outcome)[0], (1024, "ring", 30.0));
        outcome.level(1024);
        outcome.level(4096);
        let t = times(&outcome);
        assert_eq!(
            (t[0].1, t[1].1, t[2]),
            ("ring", "mesh", (4096, "ring", 40.0))
        );
        assert!((t[0].2 / t[1].2 - 1.5).abs() < 1e-3, "{t:?}");
        let load = outcome.load_at(1024).expect("levelled");
        assert!((load[1].1 / load[0].1 - 2.0).abs() < 1e-9, "{load:?}");
        assert_eq!(outcome.load_at(4096), Some(&[(1, 1.0)][..]));
        outcome.fail("ring", "all_reduce ring: 3 wrong values".into());
        assert_eq!(times(&outcome).len(), 1);
        assert_eq!(outcome.points[0].rounds.len(), 2);
        assert_eq!(outcome.failures.len(), 1);
    }
}
