//! The preference fallback: the feasible executor of highest declared preference (ties by
//! name), for requests the cost model cannot decide.
//!
//! Two kinds of request fall back here:
//! - zero bytes per rank: nothing moves, so there is nothing to time (Barrier always);
//! - the point-to-point operators (AlltoAllV, send/recv), whose layouts differ per rank:
//!   one rank's call does not say what the others send, so no rank can record the whole
//!   operation, and a model of a guessed layout could differ between ranks, which must
//!   all pick the same executor.
//!
//! For the point-to-point operators the same holds of feasibility: a rank that checked
//! its own items would accept an executor that a peer, whose items cross a broken link,
//! refuses, and the two would deadlock. So they are screened on a layout that is the same
//! whatever rank asks: every rank exchanging one element with every other rank
//! ([`uniform_p2p`]). An executor that needs a direct link for every pair is then refused
//! on any topology with a broken or missing link, and one that relays is chosen on every
//! rank. When no executor passes that screen, each rank screens its own items (the only
//! choice left; ranks whose items cross a broken link then get `NoExecutor`).
//!
//! Here, and only here, the size hints of [`Constraints`](crate::Constraints) still veto
//! ([`auto_selection_veto`](crate::Constraints::auto_selection_veto)), except for the
//! point-to-point operators, whose byte counts differ per rank.

use super::cache::Decision;
use super::candidates::{infeasible_each, screen, Candidate, Judged, Outcome};
use super::explain::{Rejection, Source};
use super::SelectRequest;
use crate::error::Error;
use crate::executor::ExecutorEntry;
use crate::op::{OpKind, OpParam, P2pItem, VLayout};
use crate::registry::registry;

/// The preference decision for `req`; `note` says why the model did not decide.
pub(super) fn decide(
    req: &SelectRequest<'_>,
    bucket: usize,
    note: &str,
) -> Result<Decision, Error> {
    let candidates: Vec<Candidate> = registry()?
        .executors_for(req.op.kind)
        .map(|entry| Candidate {
            entry,
            outcome: judge(entry, req),
        })
        .collect();
    judged(req, bucket, note, &candidates)
}

fn judged(
    req: &SelectRequest<'_>,
    bucket: usize,
    note: &str,
    candidates: &[Candidate],
) -> Result<Decision, Error> {
    let chosen = highest(candidates);
    Judged {
        source: Source::Preference,
        bucket,
        note: Some(note.to_string()),
        sampled_ranks: None,
        candidates,
        chosen,
        lost: &|loser, winner| {
            format!(
                "lower preference than {} ({} vs {})",
                winner.entry.name, loser.entry.preference, winner.entry.preference
            )
        },
        reason: &|winner| {
            format!(
                "built-in choice: highest preference ({}) among applicable executors; {note}",
                winner.entry.preference
            )
        },
    }
    .decision(req.op.kind)
}

/// The point-to-point decision for `req`: screened on [`uniform_p2p`], or on the rank's own
/// items when nothing passes that.
pub(super) fn decide_p2p(
    req: &SelectRequest<'_>,
    bucket: usize,
    note: &str,
) -> Result<Decision, Error> {
    let uniform = |rank| uniform_p2p(req, rank);
    let candidates: Vec<Candidate> = registry()?
        .executors_for(req.op.kind)
        .map(|entry| Candidate {
            entry,
            outcome: match entry.constraints.check(req.ranks, req.topology) {
                Some(why) => Outcome::Rejected(Rejection::Constraint, why),
                None => match infeasible_each(entry, req, &uniform) {
                    Some(why) => Outcome::Rejected(
                        Rejection::Infeasible,
                        format!("with every pair of ranks exchanging data: {why}"),
                    ),
                    None => Outcome::Applicable(None),
                },
            },
        })
        .collect();
    if highest(&candidates).is_none() {
        let own = format!(
            "{note}; no executor serves every pair of ranks, so this rank's own items decided"
        );
        return decide(req, bucket, &own);
    }
    judged(req, bucket, note, &candidates)
}

/// Rank `rank`'s part of an exchange of one element between every pair of ranks
/// (AlltoAllV: with itself too, as its layout needs one item per rank).
fn uniform_p2p(req: &SelectRequest<'_>, rank: usize) -> OpParam {
    let n = req.ranks;
    let all_to_all = req.op.kind == OpKind::AlltoAllV;
    let items: Vec<P2pItem> = (0..n)
        .filter(|&peer| all_to_all || peer != rank)
        .enumerate()
        .map(|(i, peer)| P2pItem {
            peer,
            offset: i,
            count: 1,
        })
        .collect();
    let layout = VLayout::P2p {
        sends: items.clone(),
        recvs: items,
    };
    OpParam::vector(req.op.kind, layout, req.op.dtype, req.op.op)
}

fn judge(entry: &'static ExecutorEntry, req: &SelectRequest<'_>) -> Outcome {
    if let Some((kind, why)) = screen(entry, req) {
        return Outcome::Rejected(kind, why);
    }
    match entry
        .constraints
        .auto_selection_veto(req.bytes, req.topology)
    {
        Some(why) => Outcome::Rejected(Rejection::SizeHint, why),
        None => Outcome::Applicable(None),
    }
}

/// Index of the applicable candidate of highest preference; the first by name on ties
/// (candidates come sorted by name).
fn highest(candidates: &[Candidate]) -> Option<usize> {
    let mut best: Option<usize> = None;
    for (i, c) in candidates.iter().enumerate() {
        let applicable = matches!(c.outcome, Outcome::Applicable(_));
        if applicable && best.is_none_or(|b| c.entry.preference > candidates[b].entry.preference) {
            best = Some(i);
        }
    }
    best
}
