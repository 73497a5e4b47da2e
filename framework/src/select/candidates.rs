//! Screening candidates (hard constraints, then feasibility on every rank) and turning a
//! list of judged candidates into a [`Decision`] with its explanation.

use super::cache::Decision;
use super::explain::{CandidateReport, Explanation, Modelled, Rejection, Source, Verdict};
use super::SelectRequest;
use crate::error::Error;
use crate::executor::{ExecutorEntry, Peers, PlanCtx};
use crate::op::OpParam;
use std::sync::Arc;

/// What the screening and the model made of one candidate.
#[derive(Clone, Debug)]
pub(super) enum Outcome {
    Rejected(Rejection, String),
    /// It can run; with its modelled figures when the model ran.
    Applicable(Option<Modelled>),
}

/// One executor and what became of it.
#[derive(Clone, Debug)]
pub(super) struct Candidate {
    pub entry: &'static ExecutorEntry,
    pub outcome: Outcome,
}

impl Candidate {
    /// Whether it can run at all (constraints hold and every link it asks for exists).
    pub fn feasible(&self) -> bool {
        !matches!(
            self.outcome,
            Outcome::Rejected(Rejection::Constraint | Rejection::Infeasible, _)
        )
    }

    pub fn modelled(&self) -> Option<Modelled> {
        match self.outcome {
            Outcome::Applicable(m) => m,
            Outcome::Rejected(..) => None,
        }
    }
}

/// Why `entry` cannot run `req` at all: its hard constraints, or a rank it cannot plan.
pub(super) fn screen(
    entry: &'static ExecutorEntry,
    req: &SelectRequest<'_>,
) -> Option<(Rejection, String)> {
    if let Some(why) = entry.constraints.check(req.ranks, req.topology) {
        return Some((Rejection::Constraint, why));
    }
    infeasible(entry, req).map(|why| (Rejection::Infeasible, why))
}

/// Why `entry` cannot run `req` on its topology, found by asking it for every rank's
/// resources: an error, or a link it needs that is broken or missing.
pub(super) fn infeasible(entry: &'static ExecutorEntry, req: &SelectRequest<'_>) -> Option<String> {
    infeasible_each(entry, req, &|_| req.op.clone())
}

/// [`infeasible`] with each rank's own operation, `op_of(rank)`.
pub(super) fn infeasible_each(
    entry: &'static ExecutorEntry,
    req: &SelectRequest<'_>,
    op_of: &dyn Fn(usize) -> OpParam,
) -> Option<String> {
    let executor = entry.instantiate();
    let mode = req.for_entry(entry).mode;
    // Every link exists on a full mesh: asking each rank for `Peers::All` needs no check
    // of n - 1 links (n² lookups on a cluster).
    let full_mesh = req.topology.is_full_mesh();
    (0..req.ranks).find_map(|rank| {
        let op = op_of(rank);
        let plan = PlanCtx {
            rank,
            ranks: req.ranks,
            op: &op,
            topology: req.topology,
            mode,
            ccl_bytes: req.ccl_bytes,
            link_channels: req.link_channels,
            in_place: req.in_place,
        };
        match executor.resources(&plan) {
            Err(e) => Some(e.to_string()),
            Ok(request) if full_mesh && request.peers == Peers::All => None,
            Ok(request) => request
                .peers
                .expand(rank, req.ranks)
                .into_iter()
                .find(|&p| req.topology.link_kind(rank, p).is_none())
                .map(|p| {
                    format!("rank {rank} needs the link to rank {p}, which is broken or missing")
                }),
        }
    })
}

/// How a built-in choice was made, for its explanation.
pub(super) struct Judged<'a> {
    pub source: Source,
    pub bucket: usize,
    pub note: Option<String>,
    /// The ranks analytic estimates were made from, if any candidate was estimated.
    pub sampled_ranks: Option<Vec<oxccl_platform::Rank>>,
    pub candidates: &'a [Candidate],
    /// Index of the winner in `candidates`.
    pub chosen: Option<usize>,
    /// Why a candidate that could run lost to `winner`.
    pub lost: &'a dyn Fn(&Candidate, &Candidate) -> String,
    /// The selection's one-line reason, given the winner.
    pub reason: &'a dyn Fn(&Candidate) -> String,
}

impl Judged<'_> {
    /// The decision, or [`Error::NoExecutor`] listing every candidate and why it was
    /// rejected.
    pub fn decision(&self, op: crate::op::OpKind) -> Result<Decision, Error> {
        let Some(chosen) = self.chosen.map(|i| &self.candidates[i]) else {
            return Err(Error::NoExecutor {
                op,
                reason: self.rejections(),
            });
        };
        let candidates = self
            .candidates
            .iter()
            .map(|c| CandidateReport {
                name: c.entry.name,
                preference: c.entry.preference,
                verdict: match &c.outcome {
                    Outcome::Rejected(kind, reason) => Verdict::Rejected {
                        kind: *kind,
                        reason: reason.clone(),
                    },
                    Outcome::Applicable(modelled) if std::ptr::eq(c.entry, chosen.entry) => {
                        Verdict::Chosen {
                            modelled: *modelled,
                        }
                    }
                    Outcome::Applicable(modelled) => Verdict::NotChosen {
                        modelled: *modelled,
                        why: (self.lost)(c, chosen),
                    },
                },
            })
            .collect();
        Ok(Decision {
            chosen: chosen.entry,
            feasible: self
                .candidates
                .iter()
                .filter(|c| c.feasible())
                .map(|c| c.entry)
                .collect(),
            reason: (self.reason)(chosen),
            explanation: Arc::new(Explanation {
                source: self.source.clone(),
                op,
                bucket_bytes: Some(self.bucket),
                note: self.note.clone(),
                candidates,
                sampled_ranks: self.sampled_ranks.clone(),
            }),
        })
    }

    fn rejections(&self) -> String {
        if self.candidates.is_empty() {
            return "no executor is registered for it".to_string();
        }
        let each: Vec<String> = self
            .candidates
            .iter()
            .map(|c| match &c.outcome {
                Outcome::Rejected(kind, why) => {
                    format!("{}: {} ({})", c.entry.name, why, kind.label())
                }
                Outcome::Applicable(_) => format!("{}: not chosen", c.entry.name),
            })
            .collect();
        format!("every candidate was rejected ({})", each.join("; "))
    }
}
