//! The built-in choice by cost model: the least modelled time among the executors that can
//! run.
//!
//! For the request's representative operation (see [`Key::representative`]) every
//! registered executor of the operator is screened (hard constraints, then every rank's
//! resources against the topology's healthy links); each survivor is recorded on the
//! `sim` device exactly as the communicator would run it (same topology, mode, in-place,
//! CCL buffer and link channels, the executor forced by name) and replayed by
//! [`cost::model`] with the default [`CostParams`], the figures `oxccl check` prints.
//! The least time wins; times within a relative 1e-9 of each other tie, and ties go to the
//! higher declared preference, then to the name. A candidate whose recording or replay
//! fails is rejected with that error.
//!
//! The size hints of [`Constraints`](crate::Constraints) (`max_bytes`, `min_bytes`,
//! `min_servers`, [`auto_selection_veto`](crate::Constraints::auto_selection_veto)) are
//! not consulted here: they were hand-made stand-ins for exactly this comparison, and the
//! model now times the candidates they would have excluded. They still guide the
//! preference fallback.

use super::cache::{Decision, Key};
use super::candidates::{screen, Candidate, Judged, Outcome};
use super::explain::{Modelled, Rejection, Source};
use super::SelectRequest;
use crate::analyzer::Recording;
use crate::config::Config;
use crate::cost::{model, CostParams};
use crate::error::Error;
use crate::executor::{ExecutorEntry, Mode};
use crate::registry::registry;

/// Relative difference under which two modelled times tie.
const TIE: f64 = 1e-9;

/// The model's decision for `key`; `req` is the representative request (its op is
/// `key.representative()`).
pub(super) fn decide(key: &Key, req: &SelectRequest<'_>) -> Result<Decision, Error> {
    let candidates: Vec<Candidate> = registry()?
        .executors_for(key.kind)
        .map(|entry| Candidate {
            entry,
            outcome: judge(entry, req),
        })
        .collect();
    let chosen = fastest(&candidates);
    Judged {
        source: Source::Model,
        bucket: key.bucket,
        note: None,
        candidates: &candidates,
        chosen,
        lost: &lost,
        reason: &|winner| reason(winner, key.bucket, &candidates),
    }
    .decision(key.kind)
}

fn judge(entry: &'static ExecutorEntry, req: &SelectRequest<'_>) -> Outcome {
    if let Some((kind, why)) = screen(entry, req) {
        return Outcome::Rejected(kind, why);
    }
    match model_one(entry, req) {
        Ok(m) => Outcome::Applicable(Some(m)),
        Err(why) => Outcome::Rejected(Rejection::ModelError, why),
    }
}

/// Record every rank's program of `req` with `entry` forced, and model it.
fn model_one(entry: &'static ExecutorEntry, req: &SelectRequest<'_>) -> Result<Modelled, String> {
    let direct = req.mode == Mode::Direct;
    let mut config = Config {
        ccl_buffer_bytes: req.ccl_bytes,
        zero_copy: direct,
        device: "sim".to_string(),
        topology: Some(req.topology.clone()),
        link_channels: req.link_channels,
        tune: None,
        ..Config::default()
    };
    config.algo.set(Some(entry.op), entry.name);
    let rec = Recording::record(req.op, req.in_place, config)
        .map_err(|e| format!("recording failed: {e}"))?;
    let report =
        model(&rec, &CostParams::default()).map_err(|e| format!("cost model failed: {e}"))?;
    Ok(Modelled {
        time_us: report.time_s * 1e6,
        algbw_gbps: report.algbw_gbps,
    })
}

fn ties(a: f64, b: f64) -> bool {
    let scale = a.abs().max(b.abs());
    scale == 0.0 || (a - b).abs() / scale < TIE
}

/// Whether `a` beats `b`: less time, or a tie broken by preference, then name.
fn beats(a: &Candidate, am: Modelled, b: &Candidate, bm: Modelled) -> bool {
    if ties(am.time_us, bm.time_us) {
        (b.entry.preference, a.entry.name) < (a.entry.preference, b.entry.name)
    } else {
        am.time_us < bm.time_us
    }
}

/// Index of the fastest modelled candidate.
pub(super) fn fastest(candidates: &[Candidate]) -> Option<usize> {
    let mut best: Option<(usize, Modelled)> = None;
    for (i, c) in candidates.iter().enumerate() {
        let Some(m) = c.modelled() else { continue };
        if best.is_none_or(|(b, bm)| beats(c, m, &candidates[b], bm)) {
            best = Some((i, m));
        }
    }
    best.map(|(i, _)| i)
}

fn lost(loser: &Candidate, winner: &Candidate) -> String {
    match (loser.modelled(), winner.modelled()) {
        (Some(l), Some(w)) if ties(l.time_us, w.time_us) => format!(
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
            make,
        }))
    }

    fn timed(name: &'static str, preference: i32, time_us: Option<f64>) -> Candidate {
        Candidate {
            entry: entry(name, preference),
            outcome: match time_us {
                Some(time_us) => Outcome::Applicable(Some(Modelled {
                    time_us,
                    algbw_gbps: 1.0,
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
}
