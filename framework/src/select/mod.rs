//! `select_alg`: which executor runs an operation.
//!
//! A chain, first answer wins:
//! 1. the override (`OXCCL_ALGO`, or `Config::algo`): `all_reduce=ring;all_gather=mesh`, or a
//!    bare name that applies to every operator;
//! 2. plugin selectors, a `linkme` distributed slice ([`SELECTORS`]) tried by descending
//!    priority, then name;
//! 3. the tuning table ([`SelectRequest::tune`]), when it holds a measurement for the
//!    request's size among the executors that can run;
//! 4. the built-in choice by cost model (`model`): every registered executor of the
//!    operator whose hard constraints hold and whose links all exist is planned by the
//!    [planner](crate::planner) and replayed by the cost model (or, past the replay's
//!    budget on large clusters, estimated analytically from representative ranks, see
//!    `model`); the least modelled time wins (ties:
//!    higher preference, then name). Requests the model cannot decide (zero bytes, and the
//!    point-to-point operators whose layouts differ per rank) fall back to the highest
//!    declared preference (`preference`).
//!
//! Built-in choices are cached process-wide per size bucket and shape (`cache`), so the
//! model runs once per key per process and every rank gets the same answer.
//!
//! The result names the executor, says why it was chosen (a one-line reason and a full
//! [`Explanation`]: the source and a verdict per candidate), and carries the resource tag
//! (HCCL's `newTag`: operator plus executor) that keys cached resources.

mod cache;
mod candidates;
pub mod explain;
mod model;
mod preference;

pub use explain::{CandidateReport, Estimate, Explanation, Modelled, Rejection, Source, Verdict};
pub use model::SIMULATION_BUDGET;

use crate::error::{ConfigError, Error};
use crate::executor::{ExecutorEntry, Mode};
use crate::op::{OpKind, OpParam, VLayout};
use crate::planner::Setting;
use crate::registry::registry;
use crate::topology::Topology;
use crate::tune::{TuneKey, TuneTable};
use oxccl_platform::Rank;
use std::str::FromStr;
use std::sync::Arc;

/// A parsed `OXCCL_ALGO`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AlgoOverride {
    /// `(operator, name)`; `None` applies to every operator.
    entries: Vec<(Option<OpKind>, String)>,
}

impl AlgoOverride {
    /// Force `name` for `op` (or for every operator when `op` is `None`).
    pub fn set(&mut self, op: Option<OpKind>, name: &str) {
        self.entries.retain(|(o, _)| *o != op);
        self.entries.push((op, name.to_string()));
    }

    /// The entries as given: `(operator, name)`, `None` for a bare name.
    pub fn entries(&self) -> impl Iterator<Item = (Option<OpKind>, &str)> {
        self.entries.iter().map(|(op, name)| (*op, name.as_str()))
    }

    /// The forced executor name for `op`, if any: an entry for `op` beats a bare one.
    pub fn for_op(&self, op: OpKind) -> Option<&str> {
        let exact = self.entries.iter().find(|(o, _)| *o == Some(op));
        exact
            .or_else(|| self.entries.iter().find(|(o, _)| o.is_none()))
            .map(|(_, n)| n.as_str())
    }

    /// Check every name against the registry: an unknown name is an error listing the
    /// known ones.
    pub fn validate(&self) -> Result<(), Error> {
        let reg = registry()?;
        for (op, name) in &self.entries {
            match op {
                Some(op) => {
                    reg.executor(*op, name)?;
                }
                None => {
                    let found = OpKind::ALL
                        .into_iter()
                        .any(|op| reg.executor(op, name).is_ok());
                    if !found {
                        return Err(Error::UnknownAlgorithm {
                            op: OpKind::AllReduce,
                            name: name.clone(),
                            known: reg.known_names(OpKind::AllReduce),
                        });
                    }
                }
            }
        }
        Ok(())
    }
}

impl FromStr for AlgoOverride {
    type Err = ConfigError;

    /// `all_reduce=ring;all_gather=mesh` or a bare name; an operator (or the bare form)
    /// named twice is an error that quotes both entries.
    fn from_str(s: &str) -> Result<Self, ConfigError> {
        let bad = |reason: String| ConfigError {
            var: "OXCCL_ALGO",
            value: s.to_string(),
            reason,
            source: None,
        };
        let mut out = AlgoOverride::default();
        let mut entries: Vec<&str> = Vec::new();
        for part in s.split(';').map(str::trim).filter(|p| !p.is_empty()) {
            let (op, name) = match part.split_once('=') {
                Some((op, name)) => {
                    let op = op
                        .trim()
                        .parse::<OpKind>()
                        .map_err(|e| bad(format!("`{part}` names no operator")).caused_by(e))?;
                    if name.trim().is_empty() {
                        return Err(bad(format!("no executor name after `{op}=`")));
                    }
                    (Some(op), name.trim())
                }
                None => (None, part),
            };
            if let Some(i) = out.entries.iter().position(|(o, _)| *o == op) {
                let what = op.map_or("every operator".to_string(), |op| op.name().to_string());
                return Err(bad(format!(
                    "`{}` and `{part}` both choose the executor of {what}; keep one of them",
                    entries[i]
                )));
            }
            out.entries.push((op, name.to_string()));
            entries.push(part);
        }
        Ok(out)
    }
}

/// What a selector sees.
#[derive(Copy, Clone, Debug)]
pub struct SelectRequest<'a> {
    pub op: &'a OpParam,
    pub ranks: usize,
    pub topology: &'a Topology,
    /// Bytes per rank of the operation's input, the same on every rank
    /// ([`SelectRequest::input_bytes`]).
    pub bytes: usize,
    /// Bytes of each CCL buffer.
    pub ccl_bytes: usize,
    /// The mode the communicator offers; each candidate is judged in its own
    /// ([`SelectRequest::for_entry`]).
    pub mode: Mode,
    /// The in-place form was called.
    pub in_place: bool,
    /// Notify channels per link.
    pub link_channels: usize,
    /// Measured times that decide before the cost model (`None`: no table).
    pub tune: Option<&'a TuneTable>,
}

impl<'a> SelectRequest<'a> {
    /// What the planner plans every rank with for this request.
    pub fn setting(&self) -> Setting<'a> {
        Setting {
            topology: self.topology,
            mode: self.mode,
            ccl_bytes: self.ccl_bytes,
            link_channels: self.link_channels,
            in_place: self.in_place,
        }
    }

    /// The request as `entry` is screened, planned and modelled: in its own mode
    /// ([`crate::planner::executor_mode`]), derived from the one the communicator offers.
    pub fn for_entry(&self, entry: &ExecutorEntry) -> SelectRequest<'a> {
        SelectRequest {
            mode: crate::planner::executor_mode(self.mode, self.topology, entry.constraints.links),
            ..*self
        }
    }

    /// Bytes per rank of `op`'s input as selection counts them: the input buffer of
    /// `rank`, except for the V forms of AllGather and ReduceScatter, whose per-rank
    /// blocks differ: AllGatherV counts the mean block (`⌈total / ranks⌉`),
    /// ReduceScatterV the total, as their fixed forms would with the same data, so every
    /// rank asks for the same size.
    pub fn input_bytes(op: &OpParam, rank: Rank, ranks: usize) -> usize {
        let es = op.dtype.size();
        match (op.kind, op.layout().and_then(VLayout::blocks)) {
            (OpKind::AllGatherV, Some(_)) => op.count.div_ceil(ranks.max(1)) * es,
            (OpKind::ReduceScatterV, Some(_)) => op.count * es,
            _ => op.buffer_bytes(rank, ranks).0,
        }
    }
}

/// A plugin selector: returns an executor name for requests it wants to decide.
pub struct SelectorEntry {
    pub name: &'static str,
    /// Higher runs first.
    pub priority: i32,
    pub select: fn(&SelectRequest<'_>) -> Option<&'static str>,
}

/// Plugin selectors, collected at link time.
#[linkme::distributed_slice]
pub static SELECTORS: [SelectorEntry];

/// Register a plugin selector: `register_selector!(MY_SELECTOR, "name", priority, function)`.
#[macro_export]
macro_rules! register_selector {
    ($ident:ident, $name:expr, $priority:expr, $select:expr $(,)?) => {
        #[$crate::linkme::distributed_slice($crate::select::SELECTORS)]
        #[linkme(crate = $crate::linkme)]
        static $ident: $crate::select::SelectorEntry = $crate::select::SelectorEntry {
            name: $name,
            priority: $priority,
            select: $select,
        };
    };
}

/// The outcome of `select_alg`.
#[derive(Clone, Debug)]
pub struct Selection {
    pub executor: &'static ExecutorEntry,
    /// Why it was chosen, in one line, for logs.
    pub reason: String,
    /// Resource cache key: operator and executor.
    pub tag: String,
    /// Why it was chosen, in full: the source and every candidate's verdict (shared with
    /// the selection cache).
    pub explanation: Arc<Explanation>,
}

fn selection(
    executor: &'static ExecutorEntry,
    reason: String,
    explanation: Arc<Explanation>,
) -> Selection {
    Selection {
        tag: format!("{}/{}", executor.op, executor.name),
        executor,
        reason,
        explanation,
    }
}

/// The explanation of a choice made by name (override or plugin selector).
fn named(entry: &'static ExecutorEntry, source: Source) -> Arc<Explanation> {
    Arc::new(Explanation {
        source,
        op: entry.op,
        bucket_bytes: None,
        note: None,
        sampled_ranks: None,
        candidates: vec![CandidateReport {
            name: entry.name,
            preference: entry.preference,
            verdict: Verdict::Chosen { modelled: None },
        }],
    })
}

/// Choose the executor for `req`.
pub fn select_alg(req: &SelectRequest<'_>, over: &AlgoOverride) -> Result<Selection, Error> {
    let reg = registry()?;
    let kind = req.op.kind;
    if let Some(name) = over.for_op(kind) {
        let entry = reg.executor(kind, name)?;
        ensure_applicable(entry, req)?;
        let reason = format!("forced by OXCCL_ALGO ({name})");
        return Ok(selection(entry, reason, named(entry, Source::Override)));
    }
    let mut selectors: Vec<&SelectorEntry> = SELECTORS.iter().collect();
    selectors.sort_by(|a, b| b.priority.cmp(&a.priority).then(a.name.cmp(b.name)));
    for sel in selectors {
        if let Some(name) = (sel.select)(req) {
            let entry = reg.executor(kind, name)?;
            ensure_applicable(entry, req)?;
            let reason = format!("chosen by plugin selector `{}`", sel.name);
            let explanation = named(entry, Source::PluginSelector(sel.name));
            return Ok(selection(entry, reason, explanation));
        }
    }
    builtin_choice(req)
}

fn ensure_applicable(entry: &'static ExecutorEntry, req: &SelectRequest<'_>) -> Result<(), Error> {
    match entry.constraints.check(req.ranks, req.topology) {
        None => Ok(()),
        Some(reason) => Err(Error::Unsupported {
            executor: entry.name.to_string(),
            op: entry.op,
            ranks: req.ranks,
            reason,
        }),
    }
}

/// Why the point-to-point operators are not modelled (see [`preference`]).
const P2P_NOTE: &str = "the cost model is not used: point-to-point layouts differ per rank, \
                        so one rank's call cannot be modelled as every rank's";
/// Why zero-byte requests are not modelled.
const ZERO_NOTE: &str = "the cost model is not used: zero bytes per rank move nothing";

/// Steps 3 and 4 of the chain: the tuning table, then the cached built-in decision.
fn builtin_choice(req: &SelectRequest<'_>) -> Result<Selection, Error> {
    let decision = if req.op.kind.is_p2p() {
        let bucket = cache::size_bucket(req.bytes);
        let decision = preference::decide_p2p(req, bucket, P2P_NOTE)?;
        log_fresh(req, &decision);
        Arc::new(decision)
    } else {
        cached_decision(req)?
    };
    if let Some(tuned) = tuned_choice(req, &decision) {
        return Ok(tuned);
    }
    Ok(selection(
        decision.chosen,
        decision.reason.clone(),
        decision.explanation.clone(),
    ))
}

/// The decision for `req`'s key, made on the representative operation of its size bucket.
fn cached_decision(req: &SelectRequest<'_>) -> Result<Arc<cache::Decision>, Error> {
    let key = cache::Key::new(req);
    let (decision, fresh) = cache::decision(key, |key| {
        let op = key.representative();
        let rep = SelectRequest {
            op: &op,
            bytes: key.bucket,
            tune: None,
            ..*req
        };
        match key.bucket {
            0 => preference::decide(&rep, 0, ZERO_NOTE),
            _ => model::decide(key, &rep),
        }
    });
    let decision = decision?;
    if fresh {
        log_fresh(req, &decision);
    }
    Ok(decision)
}

fn log_fresh(req: &SelectRequest<'_>, decision: &cache::Decision) {
    let e = &decision.explanation;
    tracing::debug!(
        op = %req.op.kind,
        bytes = req.bytes,
        bucket = ?e.bucket_bytes,
        executor = decision.chosen.name,
        source = %e.source,
        candidates = %e.compact(),
        "executor selected"
    );
}

/// The tuning table's pick among the feasible executors, if it has a measurement.
fn tuned_choice(req: &SelectRequest<'_>, decision: &cache::Decision) -> Option<Selection> {
    let table = req.tune?;
    let names: Vec<&str> = decision.feasible.iter().map(|e| e.name).collect();
    let topology = req.topology.describe();
    let key = TuneKey {
        op: req.op.kind,
        ranks: req.ranks,
        topology: &topology,
        dtype: req.op.dtype,
        bytes: req.bytes,
    };
    let pick = table.pick(&key, &names)?;
    let entry = *decision
        .feasible
        .iter()
        .find(|e| e.name.eq_ignore_ascii_case(&pick.executor))?;
    let source = Source::TuningTable {
        time_us: pick.time_us,
        measured_bytes: pick.measured_bytes,
    };
    let explanation = Arc::new(decision.explanation.retold(entry.name, source));
    let reason = format!(
        "tuning table: fastest measured ({:.2} us at {} B per rank)",
        pick.time_us, pick.measured_bytes
    );
    Some(selection(entry, reason, explanation))
}

#[cfg(test)]
mod tests;
