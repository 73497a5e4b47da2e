//! The executor and template registries.
//!
//! Entries are constant data submitted at link time (`inventory`). The first lookup builds
//! sorted maps (link order differs between builds, so nothing may depend on it), rejects
//! duplicate names with both crates named, and answers unknown names with the known ones.

use crate::error::Error;
use crate::executor::{ExecutorEntry, TemplateEntry};
use crate::op::OpKind;
use std::collections::BTreeMap;
use std::sync::OnceLock;

/// Every registered executor and template, sorted.
#[derive(Debug)]
pub struct Registry {
    executors: BTreeMap<(OpKind, String), &'static ExecutorEntry>,
    templates: BTreeMap<String, &'static TemplateEntry>,
    /// Per operator, the distinct count units above 1 its executors declare, sorted
    /// (selection keys its cache on them on every call).
    count_units: BTreeMap<OpKind, Vec<usize>>,
}

/// Names compare case-insensitively.
fn key(name: &str) -> String {
    name.to_ascii_lowercase()
}

impl Registry {
    fn build() -> Result<Self, Error> {
        let mut executors = BTreeMap::new();
        for e in inventory::iter::<ExecutorEntry> {
            if let Some(prev) = executors.insert((e.op, key(e.name)), e) {
                return Err(Error::Registry(format!(
                    "executor `{}` for {} is registered twice: by crate `{}` and by crate `{}`",
                    e.name, e.op, prev.crate_name, e.crate_name
                )));
            }
        }
        // Imported algorithm files, named around the executors crates registered.
        let taken = |op, name: &str| executors.contains_key(&(op, name.to_string()));
        for e in crate::msccl::entries(&taken)? {
            executors.insert((e.op, key(e.name)), e);
        }
        let mut templates = BTreeMap::new();
        for t in inventory::iter::<TemplateEntry> {
            if let Some(prev) = templates.insert(key(t.name), t) {
                return Err(Error::Registry(format!(
                    "template `{}` is registered twice: by crate `{}` and by crate `{}`",
                    t.name, prev.crate_name, t.crate_name
                )));
            }
        }
        let mut count_units: BTreeMap<OpKind, Vec<usize>> = BTreeMap::new();
        for e in executors.values().filter(|e| e.constraints.count_unit > 1) {
            count_units
                .entry(e.op)
                .or_default()
                .push(e.constraints.count_unit);
        }
        for units in count_units.values_mut() {
            units.sort_unstable();
            units.dedup();
        }
        Ok(Registry {
            executors,
            templates,
            count_units,
        })
    }

    /// The distinct count units above 1 that `op`'s executors declare
    /// ([`crate::executor::Constraints::count_unit`]), sorted.
    pub fn count_units(&self, op: OpKind) -> &[usize] {
        self.count_units.get(&op).map_or(&[], Vec::as_slice)
    }

    /// Executors, sorted by operator then name.
    pub fn executors(&self) -> impl Iterator<Item = &'static ExecutorEntry> + '_ {
        self.executors.values().copied()
    }

    /// Executors of one operator, sorted by name.
    pub fn executors_for(&self, op: OpKind) -> impl Iterator<Item = &'static ExecutorEntry> + '_ {
        self.executors().filter(move |e| e.op == op)
    }

    /// Templates, sorted by name.
    pub fn templates(&self) -> impl Iterator<Item = &'static TemplateEntry> + '_ {
        self.templates.values().copied()
    }

    /// The executor `name` of `op`, or an error listing the known ones.
    pub fn executor(&self, op: OpKind, name: &str) -> Result<&'static ExecutorEntry, Error> {
        self.executors
            .get(&(op, key(name)))
            .copied()
            .ok_or_else(|| Error::UnknownAlgorithm {
                op,
                name: name.to_string(),
                known: self.known_names(op),
            })
    }

    /// Comma-separated names of `op`'s executors (`none` when there are none).
    pub fn known_names(&self, op: OpKind) -> String {
        let names: Vec<_> = self.executors_for(op).map(|e| e.name).collect();
        if names.is_empty() {
            "none".into()
        } else {
            names.join(", ")
        }
    }
}

static REGISTRY: OnceLock<Result<Registry, Error>> = OnceLock::new();

/// The process-wide registry: the executors crates registered at link time, and those
/// imported from algorithm files ([`crate::msccl`]), built on first use.
pub fn registry() -> Result<&'static Registry, Error> {
    REGISTRY
        .get_or_init(Registry::build)
        .as_ref()
        .map_err(Clone::clone)
}
