//! What `oxccl tune` prints: per operator, every size's executors from fastest to
//! slowest, then what was skipped and what failed.

use super::contenders::CONTENDER_RATIO;
use super::reference::Reference;
use super::sweep::{Job, Outcome, Pick, Point, Skip};
use std::process::ExitCode;

/// How many sizes a pick check passed, of how many it checked.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Tally {
    pub within: usize,
    pub checked: usize,
}

impl Tally {
    fn of(checks: &[PickCheck]) -> Self {
        let within = checks.iter().filter(|c| c.within()).count();
        Tally {
            within,
            checked: checks.len(),
        }
    }

    pub fn add(&mut self, other: Tally) {
        self.within += other.within;
        self.checked += other.checked;
    }
}

/// The pick checks of one operator: select_alg's, and the reference table's fastest.
#[derive(Clone, Copy, Debug, Default)]
pub struct Tallies {
    pub model: Tally,
    pub reference: Option<Tally>,
}

/// The figures select_alg models a CPU host with (this machine's measured ones, unless
/// a topology or `OXCCL_HOST_FIGURES=reference` gave others), as a header line; `None`
/// for a topology that is not a host.
fn host_figures(topology: &oxccl::Topology) -> Option<String> {
    let p = topology.processor()?;
    let mib = |b: usize| b as f64 / (1 << 20) as f64;
    let memory = topology
        .memory_gbps()
        .map_or("not shared".to_string(), |g| format!("{g:.2} GB/s"));
    let forward = match p.forward_gbps {
        0.0 => "forwarding not modelled".to_string(),
        g => format!("{g:.2} of a block another core just wrote"),
    };
    Some(format!(
        "# select_alg's host figures: {} workers; a thread copies {:.2} GB/s, {:.2} within {:.1} MiB of cache (last level {:.1} MiB), {forward}; memory {memory}; a data task {:.3} us, a wake-up {:.1} us",
        p.workers,
        p.thread_gbps,
        p.cache_gbps,
        mib(p.cache_bytes),
        mib(p.llc_bytes),
        p.task_us,
        p.wake_us,
    ))
}

/// Print one operator's table; returns how its pick checks went.
pub fn print(job: &Job, outcome: &Outcome, reference: Option<&Reference>) -> Tallies {
    outln!(
        "# oxccl tune {}: {} ranks, topology {}, {}, blocks of at least {} calls (the fastest block's mean counts), warmup {}, {} rounds{}, each time the median of its rounds with each round's load at its size taken out (out of place, results checked)",
        job.kind.name(),
        job.topology.ranks(),
        job.topology.describe(),
        job.dtype.name(),
        job.settings.blocks,
        job.settings.warmup,
        job.rounds.max(1),
        contender_note(job)
    );
    if let Some(line) = host_figures(&job.topology) {
        outln!("{line}");
    }
    outln!(
        "# {:>10} {:>12}  {:<18} {:>10}  vs fastest",
        "size",
        "bytes/rank",
        "executor",
        "time (us)"
    );
    for &size in &job.sizes {
        let mut at: Vec<&Point> = outcome.at(size).collect();
        at.sort_by(|a, b| a.entry.time_us.total_cmp(&b.entry.time_us));
        let Some(fastest) = at.first().map(|p| p.entry.time_us) else {
            continue;
        };
        let pick = outcome.pick_at(size);
        for p in at {
            let ratio = p.entry.time_us / fastest;
            let mut mark = if p.entry.time_us == fastest {
                "fastest".to_string()
            } else {
                format!("{ratio:.2}x")
            };
            if let Some(measured) = outcome.twin_of(size, &p.entry.executor) {
                mark.push_str(&format!("  (the programs of {measured}, measured once)"));
            }
            if pick == Some(p.entry.executor.as_str()) {
                mark.push_str("  <- select_alg");
            }
            outln!(
                "  {:>10} {:>12}  {:<18} {:>10.2}  {mark}",
                p.size,
                p.entry.bytes,
                p.entry.executor,
                p.entry.time_us
            );
        }
    }
    let model = pick_check(&job.sizes, outcome, &outcome.picks);
    print_pick_check("select_alg without a table", &model, outcome);
    let reference = reference.map(|r| {
        let checks = pick_check(&job.sizes, outcome, &outcome.reference_picks);
        let label = format!("the fastest of {} (an earlier run)", r.path.display());
        print_pick_check(&label, &checks, outcome);
        Tally::of(&checks)
    });
    print_skips(&outcome.skipped);
    for failure in &outcome.failures {
        outln!("# FAILED {failure}");
    }
    outln!("#");
    Tallies {
        model: Tally::of(&model),
        reference,
    }
}

/// The pick checks' totals over every operator tuned, when there was more than one.
pub fn print_totals(operators: usize, totals: &Tallies, reference: Option<&Reference>) {
    if operators < 2 {
        return;
    }
    let line = |whose: &str, t: Tally| {
        outln!(
            "# pick check, {operators} operators: {whose} {} of {} sizes within {:.0}%",
            t.within,
            t.checked,
            tolerance_percent()
        )
    };
    line("select_alg without a table", totals.model);
    if let (Some(t), Some(r)) = (totals.reference, reference) {
        line(&format!("the fastest of {}", r.path.display()), t);
    }
}

fn tolerance_percent() -> f64 {
    (PICK_TOLERANCE - 1.0) * 100.0
}

/// What the header says of the contender and decider rounds, if there are any.
fn contender_note(job: &Job) -> String {
    let contenders = match job.contender_rounds {
        0 => String::new(),
        more => format!(
            ", {} for the executors within {CONTENDER_RATIO}x of the fastest after those and the pick",
            job.rounds.max(1) + more
        ),
    };
    let deciders = match job.decider_rounds {
        0 => String::new(),
        more => format!(
            ", then {more} more for the pick, the reference's fastest and the fastest of the others"
        ),
    };
    contenders + &deciders
}

/// How `select_alg`'s pick (without a tuning table) did at one size.
pub struct PickCheck {
    pub size: usize,
    pub pick: Pick,
    /// The pick's measured time over the fastest's, when both were measured.
    pub ratio: Option<f64>,
}

impl PickCheck {
    /// The pick was measured, within [`PICK_TOLERANCE`] of the fastest.
    fn within(&self) -> bool {
        self.ratio.is_some_and(|r| r <= PICK_TOLERANCE)
    }
}

/// Picks more than this much slower than the fastest measured are called out (the
/// host cost model's goal: within 10% everywhere).
pub const PICK_TOLERANCE: f64 = 1.10;

/// The check of `picks` (one per size: select_alg's, or another table's fastest) at every
/// one of `sizes` that has measurements.
pub fn pick_check(sizes: &[usize], outcome: &Outcome, picks: &[(usize, Pick)]) -> Vec<PickCheck> {
    sizes
        .iter()
        .filter_map(|&size| {
            let fastest = outcome.fastest_at(size)?.entry.time_us;
            let pick = picks.iter().find(|(s, _)| *s == size)?.1.clone();
            let ratio = pick.as_ref().ok().and_then(|name| {
                let p = outcome.point_of(size, name)?;
                Some(p.entry.time_us / fastest)
            });
            Some(PickCheck { size, pick, ratio })
        })
        .collect()
}

/// One summary line for the picks of `whose`, then a line per size where the pick
/// missed, with the rounds of the pick and of the fastest and each round's load (a miss
/// by a loud round or two reads differently from one by every round).
fn print_pick_check(whose: &str, checks: &[PickCheck], outcome: &Outcome) {
    let worst = checks.iter().filter_map(|c| c.ratio).max_by(f64::total_cmp);
    let misses: Vec<&PickCheck> = checks.iter().filter(|c| !c.within()).collect();
    match worst {
        Some(worst) => outln!(
            "# {whose}: {} of {} sizes within {:.0}% of the fastest; worst {worst:.2}x",
            checks.len() - misses.len(),
            checks.len(),
            tolerance_percent()
        ),
        None => outln!("# {whose}: no pick was measured"),
    }
    for c in misses {
        match (&c.pick, c.ratio) {
            (Ok(name), Some(r)) => outln!(
                "#   at {} B it picks {name}: {r:.2}x the fastest; rounds (us): {}; load: {}",
                c.size,
                rounds_of_pick_and_fastest(outcome, c.size, name),
                load_of_rounds(outcome, c.size)
            ),
            (Ok(name), None) => outln!(
                "#   at {} B it picks {name}, which was not measured",
                c.size
            ),
            (Err(why), _) => outln!("#   at {} B it picks nothing: {why}", c.size),
        }
    }
}

/// `name`'s rounds at `size` and the fastest executor's, in the order measured:
/// `mesh-push 179.26 181.02 150.20, mesh 148.41 150.10 151.03`.
fn rounds_of_pick_and_fastest(outcome: &Outcome, size: usize, name: &str) -> String {
    let fastest = outcome.fastest_at(size);
    let pick = outcome.point_of(size, name);
    let show = |p: &Point| {
        let rounds: Vec<String> = p.rounds.iter().map(|t| format!("{:.2}", t.us)).collect();
        format!("{} {}", p.entry.executor, rounds.join(" "))
    };
    pick.into_iter()
        .chain(fastest)
        .map(show)
        .collect::<Vec<String>>()
        .join(", ")
}

/// Each round's load at `size`, by round: `1.00 1.31 0.97`.
fn load_of_rounds(outcome: &Outcome, size: usize) -> String {
    let load = outcome.load_at(size).unwrap_or_default();
    let each: Vec<String> = load.iter().map(|(_, l)| format!("{l:.2}")).collect();
    each.join(" ")
}

/// One line per executor and reason, with the sizes it was skipped at.
fn print_skips(skips: &[Skip]) {
    let mut lines: Vec<(&str, &str, Vec<String>)> = Vec::new();
    for skip in skips {
        let size = skip.size.map(|s| s.to_string());
        match lines
            .iter_mut()
            .find(|(e, w, _)| *e == skip.executor && *w == skip.why)
        {
            Some((_, _, sizes)) => sizes.extend(size),
            None => lines.push((&skip.executor, &skip.why, size.into_iter().collect())),
        }
    }
    for (executor, why, sizes) in lines {
        if sizes.is_empty() {
            outln!("# skipped {executor}: {why}");
        } else {
            outln!("# skipped {executor} at {} B: {why}", sizes.join(", "));
        }
    }
}

/// The exit status: failure when any executor failed (its figures were not recorded).
pub fn finish(failures: &[String]) -> ExitCode {
    if failures.is_empty() {
        return ExitCode::SUCCESS;
    }
    outln!(
        "# {} executor(s) FAILED (wrong results or device errors); their figures were not \
         recorded",
        failures.len()
    );
    ExitCode::FAILURE
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tune::sweep::{point, RoundTime};

    #[test]
    fn the_pick_is_timed_against_the_fastest_at_each_size() {
        let outcome = Outcome {
            points: vec![
                point(1024, "rhd", 4.0),
                point(1024, "mesh", 5.0),
                point(4096, "ring", 10.0),
                point(4096, "mesh", 10.5),
            ],
            picks: vec![
                (1024, Ok("mesh".into())),
                (4096, Ok("mesh".into())),
                (16384, Ok("mesh".into())),
                (65536, Err("no executor".into())),
            ],
            ..Outcome::default()
        };
        let checks = pick_check(&[1024, 4096, 16384], &outcome, &outcome.picks);
        // 16384 has no measurement at all, so no check.
        assert_eq!(checks.len(), 2);
        assert_eq!(checks[0].ratio, Some(1.25));
        assert_eq!(checks[1].ratio, Some(1.05));
        assert!(checks[0].ratio.unwrap() > PICK_TOLERANCE);
        assert!(checks[1].ratio.unwrap() <= PICK_TOLERANCE);
        // A pick that was not measured has no ratio.
        let unmeasured = Outcome {
            points: vec![point(1024, "rhd", 4.0)],
            picks: vec![(1024, Ok("mesh".into()))],
            ..Outcome::default()
        };
        let check = pick_check(&[1024], &unmeasured, &unmeasured.picks);
        assert_eq!(check[0].ratio, None);
        assert_eq!(
            Tally::of(&checks),
            Tally {
                within: 1,
                checked: 2
            }
        );
    }

    #[test]
    fn a_miss_shows_the_rounds_of_the_pick_and_of_the_fastest_and_their_load() {
        let mut outcome = Outcome::default();
        for (executor, rounds) in [("mesh", [12.0, 24.0, 12.0]), ("rhd", [10.0, 20.0, 10.0])] {
            let mut p = point(1024, executor, 13.0);
            p.rounds = (1..=3)
                .zip(rounds)
                .map(|(round, us)| RoundTime { round, us })
                .collect();
            outcome.points.push(p);
        }
        outcome.level(1024);
        assert_eq!(
            rounds_of_pick_and_fastest(&outcome, 1024, "mesh"),
            "mesh 12.00 24.00 12.00, rhd 10.00 20.00 10.00"
        );
        assert_eq!(load_of_rounds(&outcome, 1024), "1.00 2.00 1.00");
    }
}
