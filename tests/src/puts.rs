//! A put-only audit of recorded programs, until the analyzer checks link capabilities
//! itself: every task of every rank is scanned for what a put-only link cannot carry.
//!
//! Over a put-only link a task may write the peer's CclIn, CclOut or Scratch and post the
//! peer's notifies; it may not read any of the peer's buffers, nor write the peer's Input
//! or Output. An executor that declares [`LinkNeed::Put`] must keep to that on every
//! link; one that declares [`LinkNeed::LoadStoreWithinServer`] on the links between
//! servers. [`audit_executor`] records the executor over the analyzer's conformance matrix
//! (its shapes plus a three-server one), runs the analyzer on every recording and the
//! audit on top, so one call proves bounds, synchronisation, semantics and puts.

use oxccl::framework::analyzer::conformance::{cases, shapes};
use oxccl::framework::analyzer::{analyze, Recording};
use oxccl::framework::registry::registry;
use oxccl::framework::LinkNeed;
use oxccl::{Config, OpKind, Topology};

/// Whether `need` forbids loads and user-buffer stores between ranks `a` and `b`.
fn put_only(need: LinkNeed, topology: &Topology, a: usize, b: usize) -> bool {
    match need {
        LinkNeed::LoadStore => false,
        LinkNeed::LoadStoreWithinServer => topology.server_of(a) != topology.server_of(b),
        LinkNeed::Put => true,
    }
}

/// Every task of `rec` that a link restricted by `need` could not carry, described.
pub fn put_violations(rec: &Recording, need: LinkNeed) -> Vec<String> {
    let mut found = Vec::new();
    for (me, rank) in rec.ranks.iter().enumerate() {
        for (s, stream) in rank.program.streams.iter().enumerate() {
            for (t, task) in stream.tasks.iter().enumerate() {
                let foreign = |r: usize| r != me && put_only(need, &rec.topology, me, r);
                for read in task.reads().iter().filter(|x| foreign(x.rank)) {
                    found.push(format!(
                        "rank {me} stream {s} task {t} ({}) reads {read} over a put-only link",
                        task.kind_name()
                    ));
                }
                for write in task.writes().iter().filter(|x| foreign(x.rank)) {
                    if write.buf.is_user() {
                        found.push(format!(
                            "rank {me} stream {s} task {t} ({}) writes {write}, a peer's user buffer, over a put-only link",
                            task.kind_name()
                        ));
                    }
                }
            }
        }
    }
    found
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
/// error, an analyzer failure or a put violation.
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
            let rec = Recording::record_each(&case.ops, case.in_place, config.clone())
                .map_err(|e| format!("{what}: {e}"))?;
            if let Some(f) = analyze(&rec).failures.first() {
                return Err(format!("{what}: [{:?}] {}", f.check, f.message));
            }
            if let Some(v) = put_violations(&rec, need).first() {
                return Err(format!("{what}: {v}"));
            }
            checked += 1;
        }
    }
    Ok(checked)
}
