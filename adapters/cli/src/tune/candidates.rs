//! Which executors `oxccl tune` measures for an operator.

use oxccl::framework::executor::ExecutorEntry;
use oxccl::{registry, Error, OpKind, Topology};

/// The executors of `kind` to measure on `topology`, and those skipped with the reason.
pub struct Candidates {
    pub run: Vec<&'static ExecutorEntry>,
    /// `(executor, why it cannot run here)`.
    pub skipped: Vec<(&'static str, String)>,
}

/// Every registered executor of `kind` whose declared constraints (rank counts, mesh,
/// servers) hold on `topology`. Selection hints (`max_bytes`, `min_bytes`) are not
/// applied: they are what the built-in choice guesses, and tuning is there to measure
/// past them. Links are not checked here: building an executor's programs on every rank
/// does that, size by size.
pub fn candidates(kind: OpKind, topology: &Topology) -> Result<Candidates, Error> {
    let mut out = Candidates {
        run: vec![],
        skipped: vec![],
    };
    for entry in registry()?.executors_for(kind) {
        match entry.constraints.check(topology.ranks(), topology) {
            None => out.run.push(entry),
            Some(why) => out.skipped.push((entry.name, why)),
        }
    }
    Ok(out)
}
