//! `select_alg`: which executor runs an operation.
//!
//! A chain, first answer wins:
//! 1. the override (`OXCCL_ALGO`, or `Config::algo`): `all_reduce=ring;all_gather=mesh`, or a
//!    bare name that applies to every operator;
//! 2. plugin selectors, a `linkme` distributed slice ([`SELECTORS`]) tried by descending
//!    priority, then name;
//! 3. the built-in choice: among the executors of the operator whose declared constraints
//!    hold, the one with the highest declared preference (ties by name).
//!
//! The result names the executor, says why it was chosen, and carries the resource tag
//! (HCCL's `newTag`: operator plus executor) that keys cached resources.

use crate::error::{ConfigError, Error};
use crate::executor::{ExecutorEntry, Mode, Peers, PlanCtx};
use crate::op::{OpKind, OpParam};
use crate::registry::registry;
use crate::topology::Topology;
use std::str::FromStr;

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

    fn from_str(s: &str) -> Result<Self, ConfigError> {
        let mut out = AlgoOverride::default();
        for part in s.split(';').map(str::trim).filter(|p| !p.is_empty()) {
            let bad = |reason: String| ConfigError {
                var: "OXCCL_ALGO",
                value: s.to_string(),
                reason,
            };
            match part.split_once('=') {
                Some((op, name)) => {
                    let op = op
                        .trim()
                        .parse::<OpKind>()
                        .map_err(|e| bad(e.to_string()))?;
                    if name.trim().is_empty() {
                        return Err(bad(format!("no executor name after `{op}=`")));
                    }
                    out.set(Some(op), name.trim());
                }
                None => out.set(None, part),
            }
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
    /// Bytes per rank of the operation's input.
    pub bytes: usize,
    /// Bytes of each CCL buffer.
    pub ccl_bytes: usize,
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
    /// Why it was chosen, for logs and `--explain`.
    pub reason: String,
    /// Resource cache key: operator and executor.
    pub tag: String,
}

fn selection(executor: &'static ExecutorEntry, reason: String) -> Selection {
    Selection {
        tag: format!("{}/{}", executor.op, executor.name),
        executor,
        reason,
    }
}

/// Choose the executor for `req`.
pub fn select_alg(req: &SelectRequest<'_>, over: &AlgoOverride) -> Result<Selection, Error> {
    let reg = registry()?;
    let kind = req.op.kind;
    if let Some(name) = over.for_op(kind) {
        let entry = reg.executor(kind, name)?;
        ensure_applicable(entry, req)?;
        return Ok(selection(entry, format!("forced by OXCCL_ALGO ({name})")));
    }
    let mut selectors: Vec<&SelectorEntry> = SELECTORS.iter().collect();
    selectors.sort_by(|a, b| b.priority.cmp(&a.priority).then(a.name.cmp(b.name)));
    for sel in selectors {
        if let Some(name) = (sel.select)(req) {
            let entry = reg.executor(kind, name)?;
            ensure_applicable(entry, req)?;
            return Ok(selection(
                entry,
                format!("chosen by plugin selector `{}`", sel.name),
            ));
        }
    }
    builtin_choice(reg.executors_for(kind), req)
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

fn builtin_choice(
    candidates: impl Iterator<Item = &'static ExecutorEntry>,
    req: &SelectRequest<'_>,
) -> Result<Selection, Error> {
    let mut best: Option<&'static ExecutorEntry> = None;
    let mut rejected = Vec::new();
    for e in candidates {
        let why = e
            .constraints
            .check(req.ranks, req.topology)
            .or_else(|| e.constraints.auto_selection_veto(req.bytes, req.topology))
            .or_else(|| infeasible(e, req));
        match why {
            Some(why) => rejected.push(format!("{}: {why}", e.name)),
            None if best.is_none_or(|b| e.preference > b.preference) => best = Some(e),
            None => {}
        }
    }
    let kind = req.op.kind;
    let Some(best) = best else {
        let reason = if rejected.is_empty() {
            "no executor is registered for it".to_string()
        } else {
            format!("every candidate was rejected ({})", rejected.join("; "))
        };
        return Err(Error::NoExecutor { op: kind, reason });
    };
    Ok(selection(
        best,
        format!(
            "built-in choice: highest preference ({}) among applicable executors",
            best.preference
        ),
    ))
}

/// Why `entry` cannot run `req` on its topology, found by asking it for every rank's
/// resources: an error, or a link it needs that is broken or missing.
fn infeasible(entry: &'static ExecutorEntry, req: &SelectRequest<'_>) -> Option<String> {
    let executor = (entry.make)();
    (0..req.ranks).find_map(|rank| {
        let plan = PlanCtx {
            rank,
            ranks: req.ranks,
            op: req.op,
            topology: req.topology,
            mode: Mode::Direct,
            ccl_bytes: req.ccl_bytes,
            in_place: false,
        };
        match executor.resources(&plan) {
            Err(e) => Some(e.to_string()),
            Ok(request) => {
                let peers: Vec<usize> = match request.peers {
                    Peers::All => (0..req.ranks).filter(|&p| p != rank).collect(),
                    Peers::List(list) => list,
                };
                peers
                    .into_iter()
                    .find(|&p| req.topology.link_kind(rank, p).is_none())
                    .map(|p| {
                        format!(
                            "rank {rank} needs the link to rank {p}, which is broken or missing"
                        )
                    })
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn override_grammar() {
        let o: AlgoOverride = "all_reduce=ring; all-gather = mesh ;bidir".parse().unwrap();
        assert_eq!(o.for_op(OpKind::AllReduce), Some("ring"));
        assert_eq!(o.for_op(OpKind::AllGather), Some("mesh"));
        assert_eq!(o.for_op(OpKind::Broadcast), Some("bidir"));
        let err = "allsum=ring".parse::<AlgoOverride>().unwrap_err();
        assert!(err.to_string().contains("all_reduce"), "{err}");
        assert!("all_reduce=".parse::<AlgoOverride>().is_err());
    }
}
