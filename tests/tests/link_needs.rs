//! Every executor's declared link need (`Constraints.links`) is what its programs do.
//!
//! For each registered executor and each put-only shape (`tcp8`: every link put-only;
//! `2x8`: put-only across servers, load/store inside), the executor's programs are
//! recorded in every mode it runs in on the put-only shape (staged always; zero-copy too
//! where the shape's servers are load/store inside, as on `2x8`, for every executor but
//! those that need load/store everywhere: see `planner::executor_mode`), then analyzed as
//! if they ran on the put-only shape. They are recorded on the shape itself where the
//! executor's declared need allows it, so that an executor that picks its destinations by
//! link (zero-copy per peer: puts across a put-only link land in Scratch) sees the links
//! it will run on, and a program the planner refuses there counts as a finding; on the
//! shape's load/store twin (the same servers and wiring, every link load/store) where the
//! declaration would screen it out, to find what it does all the same. What the
//! analyzer's link check reports decides the need:
//!
//! - nothing on either shape: [`LinkNeed::Put`];
//! - only reads or user-buffer writes over links inside a server: `LoadStoreWithinServer`;
//! - anything over a link across servers (every link of `tcp8` is one): `LoadStore`.
//!
//! The test asserts the declaration equals the finding, both ways: an executor that
//! declares more than it needs would be screened off machines it can run on, one that
//! declares less would be refused by the planner at run time. `--nocapture` prints the
//! audit table.

use oxccl::framework::analyzer::conformance::cases;
use oxccl::framework::analyzer::{analyze, Check, Recording};
use oxccl::framework::planner::{executor_mode, mode_for};
use oxccl::framework::platform::LinkAccess;
use oxccl::framework::{ExecutorEntry, LinkNeed, Mode};
// Linked so that the example plugin's executor is audited too.
use oxccl::{registry, Config, DataType, Error, ReduceOp, Topology};
use oxccl_tests as _;

/// The put-only shapes of the audit.
fn shapes() -> Vec<(&'static str, Topology)> {
    let mut shapes: Vec<(&'static str, Topology)> = ["tcp8", "2x8"]
        .into_iter()
        .map(|name| (name, Topology::parse_spec(name).expect("preset")))
        .collect();
    // Servers of several ranks whose links are all put-only: the one shape that tells an
    // executor that only puts (Put) from one that loads and stores inside a server
    // (LoadStoreWithinServer); tcp8 has one rank per server, and 2x8 allows load/store
    // inside its servers.
    let all_put = Topology::parse_spec("2x8")
        .expect("preset")
        .with_fabric_access(LinkAccess::Put, LinkAccess::Put);
    shapes.push(("2x8 all put", all_put));
    shapes
}

/// `topology` with every link load/store.
fn load_store_twin(topology: &Topology) -> Topology {
    let text = topology
        .to_toml()
        .replace("access = \"put\"", "access = \"load-store\"");
    let twin = Topology::from_toml(&text).expect("twin parses");
    assert!(twin.all_load_store());
    twin
}

/// What the link check reports as put-only violations for `kind`/`name` on `shape`, over
/// a few cases in each mode the shape runs calls in; `None` when the executor cannot run
/// on the shape at all (its other constraints, or a resource error).
fn violations(entry: &ExecutorEntry, put_only: &Topology) -> Option<Vec<String>> {
    let (kind, name) = (entry.op, entry.name);
    let recorded_on = match entry.constraints.links.refusal(put_only) {
        None => put_only.clone(),
        Some(_) => load_store_twin(put_only),
    };
    let mut config = Config {
        topology: Some(recorded_on),
        zero_copy: false,
        ccl_buffer_bytes: 1 << 16,
        ..Config::default()
    };
    config.algo.set(Some(kind), name);
    let ranks = put_only.ranks();
    let offered = mode_for(true, put_only);
    let zero_copy_runs = executor_mode(offered, put_only, entry.constraints.links) == Mode::Direct;
    let picked = cases(kind, ranks, config.ccl_buffer_bytes)
        .into_iter()
        .filter(|c| {
            (!c.zero_copy || zero_copy_runs)
                && matches!(c.ops[0].dtype, DataType::F32 | DataType::U8)
                && c.ops[0].op == ReduceOp::Sum
                && (c.ops[0].count != 0 || kind == oxccl::OpKind::Barrier)
        })
        .collect::<Vec<_>>();
    let mut found = Vec::new();
    let mut recorded = false;
    for case in picked {
        config.zero_copy = case.zero_copy;
        let mut rec = match Recording::record_each(&case.ops, case.in_place, config.clone()) {
            Ok(rec) => rec,
            Err(Error::PutOnlyLink { access, .. }) => {
                recorded = true;
                found.push(access.to_string());
                continue;
            }
            Err(_) => continue,
        };
        recorded = true;
        rec.topology = put_only.clone();
        found.extend(
            analyze(&rec)
                .of(Check::Link)
                .filter(|f| f.message.contains("put-only"))
                .map(|f| f.message.clone()),
        );
    }
    recorded.then_some(found)
}

/// Whether a put-only violation message names a link across servers of `topology`.
fn across_servers(message: &str, topology: &Topology) -> bool {
    let Some(link) = message
        .split("put-only link ")
        .nth(1)
        .and_then(|rest| rest.split(':').next())
    else {
        return true;
    };
    let ends: Vec<usize> = link.split('-').filter_map(|r| r.parse().ok()).collect();
    match ends[..] {
        [a, b] => topology.server_of(a) != topology.server_of(b),
        _ => true,
    }
}

#[test]
fn every_executor_declares_the_links_its_programs_need() {
    let shapes = shapes();
    let mut wrong = Vec::new();
    println!(
        "{:<16} {:<26} {:<26} evidence",
        "operator", "executor", "need"
    );
    for entry in registry().unwrap().executors() {
        let mut need = LinkNeed::Put;
        let mut evidence = String::from("no put-only violation on tcp8, 2x8 and 2x8 all put");
        let mut ran = false;
        for (shape, topology) in &shapes {
            let Some(found) = violations(entry, topology) else {
                continue;
            };
            ran = true;
            if let Some(first) = found.first() {
                let crossing = found.iter().any(|m| across_servers(m, topology));
                let here = if crossing {
                    LinkNeed::LoadStore
                } else {
                    LinkNeed::LoadStoreWithinServer
                };
                if need != LinkNeed::LoadStore {
                    need = here;
                    evidence = format!("{shape}: {first}");
                }
            }
        }
        if !ran {
            evidence = "cannot run on tcp8 or 2x8 (other constraints)".into();
            need = entry.constraints.links;
        }
        println!(
            "{:<16} {:<26} {:<26} {}",
            entry.op.name(),
            entry.name,
            need.name(),
            evidence
        );
        if need != entry.constraints.links {
            wrong.push(format!(
                "{} {}: declares {:?}, its programs need {:?} ({evidence})",
                entry.op.name(),
                entry.name,
                entry.constraints.links,
                need
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}
