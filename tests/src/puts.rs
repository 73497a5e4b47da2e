//! A put-only audit of recorded programs through the analyzer's link check.
//!
//! Over a put-only link a task may write the peer's CclIn, CclOut or Scratch and post the
//! peer's notifies; it may not read any of the peer's buffers, nor write the peer's Input
//! or Output. The analyzer reports each such access on the links its recording's topology
//! marks put-only. An executor that declares [`LinkNeed::Put`] must keep to that on every
//! link; one that declares [`LinkNeed::LoadStoreWithinServer`] on the links between
//! servers. [`audit_executor`] records the executor over the analyzer's conformance matrix
//! (its shapes plus a three-server one), restricts the recording's links as the need says
//! ([`restricted`]) and runs the analyzer once, so one call proves bounds,
//! synchronisation, semantics and puts.

use oxccl::framework::analyzer::conformance::{cases, shapes};
use oxccl::framework::analyzer::{analyze, Recording};
use oxccl::framework::platform::LinkAccess;
use oxccl::framework::registry::registry;
use oxccl::framework::LinkNeed;
use oxccl::{Config, OpKind, Topology};

/// `topology` with the links that `need` forbids loads over made put-only: every link
/// for [`LinkNeed::Put`], the links between servers for
/// [`LinkNeed::LoadStoreWithinServer`]. Links already put-only stay so.
pub fn restricted(topology: &Topology, need: LinkNeed) -> Topology {
    let intra = topology.intra().spec.access;
    match need {
        LinkNeed::LoadStore => topology.clone(),
        LinkNeed::LoadStoreWithinServer => {
            topology.clone().with_fabric_access(intra, LinkAccess::Put)
        }
        LinkNeed::Put => topology
            .clone()
            .with_fabric_access(LinkAccess::Put, LinkAccess::Put),
    }
}

/// The shapes of the audit: the analyzer's conformance shapes (1 to 9 ranks, 4+4, 8+8,
/// 8+4) and three servers of unequal size.
pub fn audit_shapes() -> Vec<Topology> {
    let mut all = shapes();
    all.push(Topology::servers(vec![4, 3, 4]).expect("valid shape"));
    all
}

/// Record the registered executor `name` of `kind` over every case of the conformance
/// matrix on [`audit_shapes`], with `need` audited (the executor's declared need when
/// `None`), and return the number of cases checked, or the first problem: a recording
/// error or an analyzer failure (a put violation is a link failure).
pub fn audit_executor(kind: OpKind, name: &str, need: Option<LinkNeed>) -> Result<usize, String> {
    let entry = registry()
        .and_then(|r| r.executor(kind, name))
        .map_err(|e| e.to_string())?;
    let need = need.unwrap_or(entry.constraints.links);
    let mut checked = 0;
    for topo in audit_shapes() {
        if entry.constraints.check(topo.ranks(), &topo).is_some() {
            continue;
        }
        let mut config = Config {
            topology: Some(topo.clone()),
            ..Config::default()
        };
        config.algo.set(Some(kind), name);
        for case in cases(kind, topo.ranks(), config.ccl_buffer_bytes) {
            config.zero_copy = case.zero_copy;
            let op = &case.ops[0];
            let what = format!(
                "{kind} {name} on {:?}, {} count {} {}, in place {}, zero-copy {}",
                topo.server_sizes(),
                op.dtype,
                op.count,
                op.op,
                case.in_place,
                case.zero_copy
            );
            let mut rec = Recording::record_each(&case.ops, case.in_place, config.clone())
                .map_err(|e| format!("{what}: {e}"))?;
            rec.topology = restricted(&topo, need);
            if let Some(f) = analyze(&rec).failures.first() {
                return Err(format!("{what}: [{:?}] {}", f.check, f.message));
            }
            checked += 1;
        }
    }
    Ok(checked)
}
