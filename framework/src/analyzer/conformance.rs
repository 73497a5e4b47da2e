//! Conformance: one executor over the analyzer's matrix of shapes, types, ops and counts.
//!
//! The matrix follows HCCL's analyzer suite and goes further: shapes 1x1..1x9, 4+4, 8+8
//! and the asymmetric 8+4 (put-only across servers), 4+4 and 8+4 load/store throughout,
//! `tcp8` (every link put-only), and two broken meshes (4 ranks with 0-1 broken, and
//! `mesh8-cut`); int8, int32, f16, bf16 and f32; every reduce op of reducing operators;
//! counts 0, 1, odd, not divisible by the ranks, a few thousand, and larger than the CCL
//! buffer; in place and out of place; zero-copy and staged through the CCL buffers. A
//! shape excluded by the executor's declared constraints is skipped (the broken meshes for
//! one that declares `full_mesh`, the put-only shapes for one that needs load/store);
//! anything else that fails to record or to pass the analyzer is a failure, so an executor
//! that does not declare `full_mesh` must route around a broken link.
//!
//! [`sequence_conformance`] proves pairs of executors of one operator back to back (see
//! [`super::sequence`]) on a smaller matrix.
//!
//! A plugin's own test proves its executor in one line:
//!
//! ```no_run
//! use oxccl_framework::analyzer::conformance::assert_conforms;
//! use oxccl_framework::OpKind;
//!
//! assert_conforms(OpKind::AllReduce, "my-ring");
//! ```

use super::layouts::vector_ops;
use super::{analyze, analyze_sequence_with, FenceModel, Recording};
use crate::config::Config;
use crate::error::Error;
use crate::executor::ExecutorEntry;
use crate::op::{OpKind, OpParam};
use crate::registry::registry;
use crate::topology::Topology;
use oxccl_platform::{DataType, LinkAccess, ReduceOp};

/// The data types of the matrix (those of HCCL's analyzer suite).
pub const DTYPES: [DataType; 5] = [
    DataType::I8,
    DataType::I32,
    DataType::F16,
    DataType::Bf16,
    DataType::F32,
];

/// The rank shapes of the matrix: one server of 1 to 9 ranks (load/store links), servers
/// joined by put-only RoCE links (4+4, 8+8 = `2x8`, 8+4), 4+4 and 8+4 joined by
/// load/store links (so executors that need load/store everywhere are still checked
/// across servers), `tcp8` (every link put-only), and two broken meshes: one server of 4
/// ranks with the 0-1 link broken (ranks 0 and 1 keep two common neighbours, so what goes
/// around the link is squeezed through few relays) and `mesh8-cut` (8 ranks, 0-1 broken,
/// six common neighbours). An executor whose declared link need a shape's
/// put-only links refuse skips the shape, like any other constraint; one that declares
/// `full_mesh` skips the broken meshes. Any other must run on them, routing around the
/// broken link (a ring of healthy links, relays), or it is refused here rather than when
/// a user's topology has one.
pub fn shapes() -> Vec<Topology> {
    let mut shapes: Vec<Topology> = (1..=9).map(Topology::single_server).collect();
    for servers in [vec![4, 4], vec![8, 8], vec![8, 4]] {
        shapes.push(Topology::servers(servers).expect("valid shape"));
    }
    for servers in [vec![4, 4], vec![8, 4]] {
        let shape = Topology::servers(servers).expect("valid shape");
        shapes.push(shape.with_fabric_access(LinkAccess::LoadStore, LinkAccess::LoadStore));
    }
    shapes.push(crate::topology::presets::preset("tcp8").expect("tcp8 is a preset"));
    let cut4 = Topology::single_server(4).with_broken(0, 1);
    shapes.push(cut4.expect("a valid broken link"));
    shapes.push(crate::topology::presets::preset("mesh8-cut").expect("mesh8-cut is a preset"));
    shapes
}

fn counts(ranks: usize, ccl_bytes: usize, dtype: DataType) -> [usize; 6] {
    [0, 1, 7, 3 * ranks + 1, 4099, ccl_bytes / dtype.size() + 37]
}

/// The counts of an executor that runs multiples of `unit` only (see
/// [`crate::executor::Constraints::count_unit`]): 0, one unit, an odd number of units, the
/// first multiple past the CCL buffer, and one count that is not a multiple, which it must
/// refuse.
fn unit_counts(unit: usize, ccl_bytes: usize, dtype: DataType) -> Vec<usize> {
    let past_buffer = (ccl_bytes / dtype.size()).div_ceil(unit) + 1;
    vec![0, unit, 7 * unit, past_buffer * unit, unit + 1]
}

/// One case of the matrix: every rank's parameters (equal except for the point-to-point
/// vector operators), in place or not, zero-copy or staged.
#[derive(Clone, Debug)]
pub struct Case {
    pub ops: Vec<OpParam>,
    pub in_place: bool,
    pub zero_copy: bool,
}

/// Every case of one shape. Vector operators get uneven layouts
/// ([`super::layouts::vector_ops`]); operators that refuse in place get no in-place cases; a
/// barrier gets one case per mode.
pub fn cases(kind: OpKind, ranks: usize, ccl_bytes: usize) -> Vec<Case> {
    unit_cases(kind, ranks, ccl_bytes, 1)
}

/// [`cases`] for an executor that runs multiples of `unit` elements only.
pub fn unit_cases(kind: OpKind, ranks: usize, ccl_bytes: usize, unit: usize) -> Vec<Case> {
    let reduce_ops: &[ReduceOp] = if kind.reduces() {
        &ReduceOp::ALL
    } else {
        &[ReduceOp::Sum]
    };
    let dtypes: &[DataType] = if kind == OpKind::Barrier {
        &[DataType::U8]
    } else {
        &DTYPES
    };
    let mut cases = Vec::new();
    for &dtype in dtypes {
        for &op in reduce_ops {
            let counts = match kind {
                OpKind::Barrier => vec![0],
                _ if unit > 1 => unit_counts(unit, ccl_bytes, dtype),
                _ => counts(ranks, ccl_bytes, dtype).to_vec(),
            };
            for count in counts {
                push_modes(&mut cases, vector_ops(kind, count, ranks, dtype, op));
            }
        }
    }
    cases
}

/// Push `ops` in every mode: out of place and (where the operator allows) in place, each
/// zero-copy and staged.
fn push_modes(cases: &mut Vec<Case>, ops: Vec<OpParam>) {
    for (in_place, zero_copy) in [(false, true), (true, true), (false, false), (true, false)] {
        if !in_place || ops[0].in_place_allowed() {
            cases.push(Case {
                ops: ops.clone(),
                in_place,
                zero_copy,
            });
        }
    }
}

/// What one executor did over the matrix.
#[derive(Clone, Debug, Default)]
pub struct Outcome {
    pub cases: usize,
    pub failures: usize,
    /// Shapes its declared constraints exclude.
    pub skipped_shapes: usize,
    /// Cases it refused with [`Error::Unsupported`] (a count off its unit, an in-place
    /// call to an algorithm that runs out of place only): refused is not wrong.
    pub refused: usize,
    pub first_failure: Option<String>,
}

/// The first problem of one case, if any: the case, then the rank (and stream and task)
/// at fault when the analyzer names one, then what is wrong.
fn check_case(config: Config, topo: &Topology, ops: &[OpParam], in_place: bool) -> Verdict {
    let what = describe(topo, &ops[0], in_place, config.zero_copy);
    match Recording::record_each(ops, in_place, config) {
        Err(Error::Unsupported { .. }) => Verdict::Refused,
        Err(e) => Verdict::Failed(format!("{what}: {}", crate::error::with_causes(&e))),
        Ok(rec) => match analyze(&rec).failures.first() {
            Some(f) => Verdict::Failed(format!("{what}: {}[{:?}] {}", at(f), f.check, f.message)),
            None => Verdict::Passed,
        },
    }
}

/// What became of one case.
enum Verdict {
    Passed,
    /// The executor refused it, saying why ([`Error::Unsupported`]).
    Refused,
    Failed(String),
}

/// `rank R stream S task T: ` as far as `f` locates its fault, or nothing.
fn at(f: &super::Failure) -> String {
    let mut at = String::new();
    if let Some(rank) = f.rank {
        at += &format!("rank {rank}");
        if let Some(stream) = f.stream {
            at += &format!(" stream {stream}");
        }
        if let Some(task) = f.task {
            at += &format!(" task {task}");
        }
        at += ": ";
    }
    at
}

/// One case in words: shape (with its broken links), type, count, reduce op and mode.
fn describe(topo: &Topology, op: &OpParam, in_place: bool, zero_copy: bool) -> String {
    let broken: String = topo
        .broken_links()
        .map(|(a, b)| format!(" broken {a}-{b}"))
        .collect();
    format!(
        "{:?}{broken} {} count {} {} {} {}",
        topo.server_sizes(),
        op.dtype,
        op.count,
        op.op,
        if in_place { "in-place" } else { "out-of-place" },
        if zero_copy { "zero-copy" } else { "staged" }
    )
}

/// Run `entry` over the matrix; `base` supplies everything but the topology, the executor
/// and the eager mode.
pub fn conformance(entry: &ExecutorEntry, base: &Config) -> Outcome {
    let mut base = base.clone();
    base.algo.set(Some(entry.op), entry.name);
    let (unit, root) = (entry.constraints.count_unit, entry.constraints.root);
    let cases = move |kind, ranks, ccl| {
        let mut cases = unit_cases(kind, ranks, ccl, unit);
        // An executor of one root is checked at it.
        for op in cases.iter_mut().flat_map(|c| c.ops.iter_mut()) {
            op.root = op.root.and(root).or(op.root);
        }
        cases
    };
    let mut out = over_matrix(&shapes(), &[entry], &base, &cases, |config, topo, case| {
        let config = Config {
            zero_copy: case.zero_copy,
            ..config.clone()
        };
        check_case(config, topo, &case.ops, case.in_place)
    });
    if out.failures == 0 && out.cases > 0 && out.refused == out.cases {
        // Refusing is not wrong, but an executor that ran nothing proved nothing.
        out.failures = out.cases;
        out.first_failure = Some(format!(
            "it refused every one of the {} cases it was given",
            out.cases
        ));
    }
    out
}

/// Run `check` on every case `cases` gives for each of `shapes` (with `base` on that
/// topology) and count the outcome; a shape any of `entries` excludes by its declared
/// constraints is skipped.
fn over_matrix(
    shapes: &[Topology],
    entries: &[&ExecutorEntry],
    base: &Config,
    cases: &dyn Fn(OpKind, usize, usize) -> Vec<Case>,
    mut check: impl FnMut(&Config, &Topology, &Case) -> Verdict,
) -> Outcome {
    let mut out = Outcome::default();
    for topo in shapes {
        let excluded = entries
            .iter()
            .any(|e| e.constraints.check(topo.ranks(), topo).is_some());
        if excluded {
            out.skipped_shapes += 1;
            continue;
        }
        let config = Config {
            topology: Some(topo.clone()),
            ..base.clone()
        };
        for case in cases(entries[0].op, topo.ranks(), config.ccl_buffer_bytes) {
            out.cases += 1;
            match check(&config, topo, &case) {
                Verdict::Passed => {}
                Verdict::Refused => out.refused += 1,
                Verdict::Failed(problem) => {
                    out.failures += 1;
                    out.first_failure.get_or_insert(problem);
                }
            }
        }
    }
    out
}

/// Run the registered executor `name` of `op` over the matrix with the default
/// configuration; `Err` carries the first failure.
pub fn check_conformance(op: OpKind, name: &str) -> Result<Outcome, Error> {
    let entry = registry()?.executor(op, name)?;
    let out = conformance(entry, &Config::default());
    match &out.first_failure {
        None => Ok(out),
        Some(first) => Err(Error::Nonconforming {
            executor: name.to_string(),
            op,
            failures: out.failures,
            cases: out.cases,
            first: first.clone(),
        }),
    }
}

/// Panic with the first failure unless the executor passes the whole matrix: one line in a
/// plugin's tests.
pub fn assert_conforms(op: OpKind, name: &str) {
    if let Err(e) = check_conformance(op, name) {
        panic!("{e}");
    }
}

/// The shapes of the sequence matrix: small ones, one per kind of topology.
pub fn sequence_shapes() -> Vec<Topology> {
    let mut shapes: Vec<Topology> = [2, 3, 4, 8].map(Topology::single_server).into();
    shapes.push(Topology::servers(vec![4, 4]).expect("valid shape"));
    shapes
}

/// The cases of the sequence matrix on `ranks` ranks: f32 sums (a barrier: one case),
/// counts 0, 1, not divisible by the ranks and beyond the CCL buffer, in and out of place,
/// zero-copy and staged.
pub fn sequence_cases(kind: OpKind, ranks: usize, ccl_bytes: usize) -> Vec<Case> {
    let dtype = match kind {
        OpKind::Barrier => DataType::U8,
        _ => DataType::F32,
    };
    let counts: Vec<usize> = match kind {
        OpKind::Barrier => vec![0],
        _ => vec![0, 1, 3 * ranks + 1, ccl_bytes / dtype.size() + 37],
    };
    let mut cases = Vec::new();
    for count in counts {
        push_modes(
            &mut cases,
            vector_ops(kind, count, ranks, dtype, ReduceOp::Sum),
        );
    }
    cases
}

/// The first problem of `first` then `second` (and `first, second, first`) on one case.
fn check_pair(
    config: &Config,
    topo: &Topology,
    entries: [&ExecutorEntry; 2],
    case: &Case,
    model: FenceModel,
) -> Verdict {
    let what = format!(
        "{} then {} on {}",
        entries[0].name,
        entries[1].name,
        describe(topo, &case.ops[0], case.in_place, case.zero_copy)
    );
    let mut recs = Vec::with_capacity(2);
    for entry in entries {
        let mut config = Config {
            zero_copy: case.zero_copy,
            ..config.clone()
        };
        config.algo.set(Some(entry.op), entry.name);
        match Recording::record_each(&case.ops, case.in_place, config) {
            Ok(rec) => recs.push(rec),
            Err(Error::Unsupported { .. }) => return Verdict::Refused,
            Err(e) => return Verdict::Failed(format!("{what}: recording {}: {e}", entry.name)),
        }
    }
    let (a, b) = (&recs[0], &recs[1]);
    for seq in [vec![a, b], vec![a, b, a]] {
        let report = match analyze_sequence_with(&seq, model) {
            Ok(report) => report,
            Err(e) => return Verdict::Failed(format!("{what}: {e}")),
        };
        if let Some(f) = report.failures.first() {
            return Verdict::Failed(format!(
                "{what}, {} operations: [{:?}] {}",
                seq.len(),
                f.check,
                f.message
            ));
        }
    }
    Verdict::Passed
}

/// Run `first` followed by `second` (both of one operator) over the sequence matrix on
/// `shapes`; `base` supplies everything but the topology, the executors and the mode. A
/// shape either executor's constraints exclude is skipped. `model` is the fence
/// ([`FenceModel::DEVICE`] unless trying another).
pub fn sequence_conformance(
    first: &ExecutorEntry,
    second: &ExecutorEntry,
    base: &Config,
    shapes: &[Topology],
    model: FenceModel,
) -> Outcome {
    let entries = [first, second];
    over_matrix(
        shapes,
        &entries,
        base,
        &sequence_cases,
        |config, topo, case| check_pair(config, topo, entries, case, model),
    )
}

/// Every ordered pair of registered executors of `op` (each also after itself) over the
/// sequence matrix on `shapes`, with the default configuration.
pub fn sequence_pairs(
    op: OpKind,
    shapes: &[Topology],
    model: FenceModel,
) -> Result<Vec<(&'static str, &'static str, Outcome)>, Error> {
    let entries: Vec<&ExecutorEntry> = registry()?.executors_for(op).collect();
    let base = Config::default();
    let mut out = Vec::new();
    for first in &entries {
        for second in &entries {
            let outcome = sequence_conformance(first, second, &base, shapes, model);
            out.push((first.name, second.name, outcome));
        }
    }
    Ok(out)
}
