//! The built-in choice by cost model: the least modelled time among the executors that can
//! run.
//!
//! For the request's representative operation (see [`Key::representative`]) every
//! registered executor of the operator is screened (hard constraints, then every rank's
//! resources against the topology's healthy links); each survivor is planned by the
//! [planner](crate::planner) exactly as the communicator would run it (same topology,
//! mode, in-place, CCL buffer and link channels) and replayed by
//! [`cost::model`] with the default [`CostParams`], the figures `oxccl check` prints.
//!
//! At cluster scale the replay of every rank is too costly (tens of millions of tasks,
//! n² for executors whose programs grow with the rank count), so each candidate first
//! has its representative ranks planned ([`crate::planner::sample`]); when any
//! candidate's largest sampled program times the rank count passes
//! [`SIMULATION_BUDGET`], every candidate is estimated by the analytic α-β model
//! ([`crate::cost::analytic`]) from its sampled programs instead, and the explanation
//! says so ([`Estimate`], [`Explanation::sampled_ranks`](super::Explanation::sampled_ranks)).
//! Small topologies stay under the budget and keep the replay's choices.
//!
//! The least time wins. Candidates within [`TIE`] (0.2%) of the least modelled time tie
//! with it, and a tie goes to the higher declared preference, then to the name. The model
//! does not resolve finer than that: on a CPU host the executors bound by the memory bus
//! move the same bytes, and what tells their modelled times apart are fixed terms of a
//! few microseconds (8-rank AllGatherV at 32 MiB: `ring` 10958 µs, `mesh` 10968), while
//! measured they differ by more (`mesh` took 0.91 to 0.92 of `ring`'s time in
//! four full `oxccl tune` runs). A tie is measured from the least time, not from one
//! candidate to the next, so a chain of near ties cannot carry the choice further off.
//! A candidate whose recording or replay fails is rejected with that error.
//!
//! The size hints of [`Constraints`](crate::Constraints) (`max_bytes`, `min_bytes`,
//! `min_servers`, [`auto_selection_veto`](crate::Constraints::auto_selection_veto)) are
//! not consulted here: they were hand-made stand-ins for exactly this comparison, and the
//! model now times the candidates they would have excluded. They still guide the
//! preference fallback.

use super::cache::{Decision, Key};
use super::candidates::{screen, Candidate, Judged, Outcome};
use super::explain::{Estimate, Modelled, Rejection, Source};
use super::SelectRequest;
use crate::cost::{algbw_gbps, estimate, model, op_bytes, CostParams};
use crate::error::Error;
use crate::executor::ExecutorEntry;
use crate::planner::sample::representative_ranks;
use crate::planner::Planned;
use crate::planner::{plan_iterations, record_every_rank, Iterations, Loops};
use crate::registry::registry;
use oxccl_platform::{Rank, RankProgram};

/// Relative difference under which two modelled times tie: what the model resolves
/// (see the module doc).
const TIE: f64 = 2e-3;

/// Tasks, over all ranks, that one candidate's discrete-event replay may hold. When any
/// candidate's programs would hold more (foretold from its representative ranks'
/// programs times the rank count), every candidate of the decision is estimated
/// analytically ([`crate::cost::analytic`]) from its representative ranks' programs
/// alone, so times of one kind are compared, and what one candidate may cost to model is
/// bounded by the sample whatever the cluster.
pub const SIMULATION_BUDGET: usize = 1 << 20;

/// The model's decision for `key`; `req` is the representative request (its op is
/// `key.representative()`).
pub(super) fn decide(key: &Key, req: &SelectRequest<'_>) -> Result<Decision, Error> {
    let sampled = representative_ranks(req.topology, req.op);
    let screened: Vec<(&'static ExecutorEntry, Result<Sampled, Outcome>)> = registry()?
        .executors_for(key.kind)
        .map(|entry| {
            (
                entry,
                fitting(entry, key).and_then(|()| sample(entry, &req.for_entry(entry), &sampled)),
            )
        })
        .collect();
    let simulate = screened.iter().all(|(_, s)| {
        s.as_ref().map_or(true, |s| {
            s.largest.saturating_mul(req.ranks) <= SIMULATION_BUDGET
        })
    });
    let candidates: Vec<Candidate> = screened
        .into_iter()
        .map(|(entry, sampled)| Candidate {
            entry,
            outcome: match sampled {
                Err(outcome) => outcome,
                Ok(s) => match model_one(entry, &req.for_entry(entry), &s, simulate) {
                    Ok(m) => Outcome::Applicable(Some(m)),
                    Err(why) => Outcome::Rejected(Rejection::ModelError, why),
                },
            },
        })
        .collect();
    let chosen = fastest(&candidates);
    Judged {
        source: Source::Model,
        bucket: key.bucket,
        note: None,
        sampled_ranks: (!simulate).then_some(sampled),
        candidates: &candidates,
        chosen,
        lost: &lost,
        reason: &|winner| reason(winner, key.bucket, &candidates),
    }
    .decision(key.kind)
}

/// Refuse `entry` when the key's calls are not multiples of its count unit (the
/// representative operation is: see [`Key::representative`]).
fn fitting(entry: &'static ExecutorEntry, key: &Key) -> Result<(), Outcome> {
    let unit = entry.constraints.count_unit;
    match key.fits(unit) {
        true => Ok(()),
        false => Err(Outcome::Rejected(
            Rejection::Infeasible,
            format!("it runs counts that are multiples of {unit}, and this call's is not"),
        )),
    }
}

/// A candidate that passed screening, with its representative ranks planned.
struct Sampled {
    executor: Box<dyn crate::executor::Executor>,
    /// Planned with [`Iterations::Sampled`]: the first, second and last iteration.
    programs: Vec<Planned>,
    /// Tasks the largest sampled program would hold with every iteration planned.
    largest: usize,
}

/// Screen `entry`, then plan its representative ranks `sampled`; the candidate's outcome
/// when either fails.
fn sample(
    entry: &'static ExecutorEntry,
    req: &SelectRequest<'_>,
    sampled: &[Rank],
) -> Result<Sampled, Outcome> {
    if let Some((kind, why)) = screen(entry, req) {
        return Err(Outcome::Rejected(kind, why));
    }
    let setting = req.setting();
    let layout = setting.layout();
    let executor = entry.instantiate();
    let programs = sampled
        .iter()
        .map(|&rank| {
            let ctx = setting.ctx(rank, req.op);
            plan_iterations(
                entry.name,
                executor.as_ref(),
                &ctx,
                layout,
                Iterations::Sampled,
            )
        })
        .collect::<Result<Vec<Planned>, Error>>()
        .map_err(|e| Outcome::Rejected(Rejection::ModelError, format!("planning failed: {e}")))?;
    let largest = programs
        .iter()
        .map(|p| p.loops.foretold_tasks())
        .max()
        .unwrap_or(0);
    Ok(Sampled {
        executor,
        programs,
        largest,
    })
}

/// Model `entry` on `req`: replay every rank's program (`simulate`), or estimate from
/// the representative ranks' programs in `sampled`.
fn model_one(
    entry: &'static ExecutorEntry,
    req: &SelectRequest<'_>,
    sampled: &Sampled,
    simulate: bool,
) -> Result<Modelled, String> {
    let setting = req.setting();
    let params = CostParams::default();
    let (time_s, estimate) = if simulate {
        let ops = vec![req.op.clone(); req.ranks];
        let executor = sampled.executor.as_ref();
        let rec = record_every_rank(entry.name, executor, String::new(), &ops, &setting)
            .map_err(|e| format!("planning failed: {e}"))?;
        let report = model(&rec, &params).map_err(|e| format!("cost model failed: {e}"))?;
        (report.time_s, Estimate::Simulated)
    } else {
        let programs: Vec<(&RankProgram, &Loops)> = sampled
            .programs
            .iter()
            .map(|p| (&p.program, &p.loops))
            .collect();
        let time_s = estimate(&programs, req.topology, setting.layout(), &params)
            .map_err(|e| format!("analytic estimate failed: {e}"))?;
        (time_s, Estimate::Analytic)
    };
    Ok(Modelled {
        time_us: time_s * 1e6,
        algbw_gbps: algbw_gbps(op_bytes(req.op, req.ranks), time_s),
        estimate,
    })
}

fn ties(a: f64, b: f64) -> bool {
    let scale = a.abs().max(b.abs());
    scale == 0.0 || (a - b).abs() / scale < TIE
}

/// Index of the fastest modelled candidate: among those that tie with the least
/// modelled time, the highest preference, then the first name.
pub(super) fn fastest(candidates: &[Candidate]) -> Option<usize> {
    let least = candidates
        .iter()
        .filter_map(|c| c.modelled())
        .map(|m| m.time_us)
        .min_by(f64::total_cmp)?;
    let tied = candidates
        .iter()
        .enumerate()
        .filter(|(_, c)| c.modelled().is_some_and(|m| ties(m.time_us, least)));
    tied.min_by(|(_, a), (_, b)| {
        (b.entry.preference, a.entry.name).cmp(&(a.entry.preference, b.entry.name))
    })
    .map(|(i, _)| i)
}

/// Why `loser` lost to `winner`: a loser no slower than the winner tied with the least
/// time and lost on preference or name.
fn lost(loser: &Candidate, winner: &Candidate) -> String {
    match (loser.modelled(), winner.modelled()) {
        (Some(l), Some(w)) if l.time_us <= w.time_us => format!(
            "ties with {}, which wins on preference ({} vs {}) or name",
            winner.entry.name, winner.entry.preference, loser.entry.preference
        ),
        _ => format!("slower than {}", winner.entry.name),
    }
}

fn reason(winner: &Candidate, bucket: usize, candidates: &[Candidate]) -> String {
    let modelled = candidates.iter().filter(|c| c.modelled().is_some()).count();
    let figures = winner
        .modelled()
        .map_or_else(String::new, |m| format!(" ({m})"));
    format!(
        "built-in choice: least modelled time{figures} at {bucket} B per rank among \
         {modelled} modelled executor(s)"
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::executor::{Constraints, Executor};

    fn entry(name: &'static str, preference: i32) -> &'static ExecutorEntry {
        fn make() -> Box<dyn Executor> {
            unreachable!("never built: the tests judge by modelled times only")
        }
        Box::leak(Box::new(ExecutorEntry {
            name,
            op: crate::op::OpKind::Gather,
            description: "",
            crate_name: "test",
            constraints: Constraints::ANY,
            preference,
            make: crate::executor::Make::Static(make),
            file: None,
        }))
    }

    fn timed(name: &'static str, preference: i32, time_us: Option<f64>) -> Candidate {
        Candidate {
            entry: entry(name, preference),
            outcome: match time_us {
                Some(time_us) => Outcome::Applicable(Some(Modelled {
                    time_us,
                    algbw_gbps: 1.0,
                    estimate: Estimate::Simulated,
                })),
                None => Outcome::Rejected(Rejection::Infeasible, "no link".into()),
            },
        }
    }

    #[test]
    fn least_time_wins_whatever_the_preference() {
        let c = [
            timed("a", 30, Some(20.0)),
            timed("b", 10, Some(10.0)),
            timed("c", 90, None),
        ];
        assert_eq!(fastest(&c), Some(1));
        assert_eq!(lost(&c[0], &c[1]), "slower than b");
    }

    #[test]
    fn ties_go_to_preference_then_name() {
        let c = [
            timed("a", 10, Some(10.0)),
            timed("b", 20, Some(10.0 * (1.0 + 1e-12))),
        ];
        assert_eq!(fastest(&c), Some(1));
        assert!(lost(&c[0], &c[1]).starts_with("ties with b"));
        let c = [timed("z", 10, Some(5.0)), timed("y", 10, Some(5.0))];
        assert_eq!(fastest(&c), Some(1));
        assert_eq!(fastest(&[timed("x", 1, None)]), None);
    }

    #[test]
    fn a_tie_is_within_the_models_resolution_of_the_least_time() {
        // 0.1% behind ties and wins on preference; 0.3% behind does not.
        let c = [
            timed("ring", 10, Some(10_000.0)),
            timed("mesh", 20, Some(10_010.0)),
        ];
        assert_eq!(fastest(&c), Some(1));
        assert!(lost(&c[0], &c[1]).starts_with("ties with mesh"));
        let c = [
            timed("ring", 10, Some(10_000.0)),
            timed("mesh", 20, Some(10_030.0)),
        ];
        assert_eq!(fastest(&c), Some(0));
        // A chain of near ties: `c` is within 0.2% of `b`, not of the least (`a`).
        let c = [
            timed("a", 1, Some(10_000.0)),
            timed("b", 2, Some(10_015.0)),
            timed("c", 3, Some(10_030.0)),
        ];
        assert_eq!(fastest(&c), Some(1));
        assert_eq!(lost(&c[2], &c[1]), "slower than b");
    }
}
