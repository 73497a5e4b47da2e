//! `oxccl check --all`: every registered executor over the conformance matrix.
//!
//! Shapes 1x1..1x9, 2x4, 2x8 and an asymmetric 8+4; int8, int32, f16, bf16, f32 (the
//! dtypes of HCCL's analyzer suite) and every reduce op; counts 0, 1, odd, not divisible by
//! the ranks, a few thousand, and larger than the CCL buffer; in place and out of place;
//! zero-copy and staged through the CCL buffers.
//! An executor whose declared constraints exclude a shape is skipped there; anything else
//! that fails to record or to pass the analyzer is a failure.

use super::{bad_arg, config, CheckArgs};
use oxccl::framework::analyzer::{analyze, Recording};
use oxccl::{registry, Config, DataType, Error, ExecutorEntry, OpKind, OpParam, ReduceOp, Topology};
use std::process::ExitCode;
use std::time::Instant;

const DTYPES: [DataType; 5] = [DataType::I8, DataType::I32, DataType::F16, DataType::Bf16, DataType::F32];

fn shapes() -> Vec<Topology> {
    let mut shapes: Vec<Topology> = (1..=9).map(Topology::single_server).collect();
    for servers in [vec![4, 4], vec![8, 8], vec![8, 4]] {
        shapes.push(Topology::servers(servers).expect("valid shape"));
    }
    shapes
}

fn counts(ranks: usize, ccl_bytes: usize, dtype: DataType) -> [usize; 6] {
    [0, 1, 7, 3 * ranks + 1, 4099, ccl_bytes / dtype.size() + 37]
}

/// Outcome of one executor over the matrix.
struct Outcome {
    cases: usize,
    skipped: usize,
    first_failure: Option<String>,
    failures: usize,
}

/// Every (operation, in place, zero-copy) case of one shape.
fn cases(kind: OpKind, ranks: usize, ccl_bytes: usize) -> Vec<(OpParam, bool, bool)> {
    let reduce_ops: &[ReduceOp] = if kind.reduces() { &ReduceOp::ALL } else { &[ReduceOp::Sum] };
    let mut cases = Vec::new();
    for dtype in DTYPES {
        for &op in reduce_ops {
            for count in counts(ranks, ccl_bytes, dtype) {
                let param = OpParam { kind, count, dtype, op, root: kind.has_root().then_some(ranks / 2) };
                for (in_place, zero_copy) in [(false, true), (true, true), (false, false), (true, false)] {
                    cases.push((param, in_place, zero_copy));
                }
            }
        }
    }
    cases
}

/// The first problem of one case, if any.
fn check_case(config: &Config, topo: &Topology, op: &OpParam, in_place: bool) -> Option<String> {
    let what = format!(
        "{:?} {} count {} {} {} {}",
        topo.server_sizes(),
        op.dtype,
        op.count,
        op.op,
        if in_place { "in-place" } else { "out-of-place" },
        if config.zero_copy { "zero-copy" } else { "staged" }
    );
    match Recording::record(op, in_place, config.clone()) {
        Err(e) => Some(format!("{what}: {e}")),
        Ok(rec) => analyze(&rec).failures.first().map(|f| format!("{what}: [{:?}] {}", f.check, f.message)),
    }
}

fn check_executor(args: &CheckArgs, entry: &ExecutorEntry) -> Result<Outcome, Error> {
    let mut out = Outcome { cases: 0, skipped: 0, first_failure: None, failures: 0 };
    for topo in shapes() {
        if entry.constraints.check(topo.ranks(), &topo).is_some() {
            out.skipped += 1;
            continue;
        }
        let mut config = config(args, entry.op, &topo, Some(entry.name))?;
        for (op, in_place, zero_copy) in cases(entry.op, topo.ranks(), config.ccl_buffer_bytes) {
            out.cases += 1;
            config.zero_copy = zero_copy;
            if let Some(problem) = check_case(&config, &topo, &op, in_place) {
                out.failures += 1;
                out.first_failure.get_or_insert(problem);
            }
        }
    }
    Ok(out)
}

pub fn run(args: &CheckArgs) -> Result<ExitCode, Error> {
    if args.collective.is_some() {
        return Err(bad_arg("--all checks every collective; drop the collective name".into()));
    }
    let mut all_passed = true;
    println!(
        "# oxccl check --all: {} shapes, dtypes {:?}, every reduce op, boundary counts, in and out of place, zero-copy and staged",
        shapes().len(),
        DTYPES.map(|d| d.name())
    );
    for entry in registry()?.executors() {
        let start = Instant::now();
        let out = check_executor(args, entry)?;
        let verdict = if out.failures == 0 { "PASS" } else { "FAIL" };
        all_passed &= out.failures == 0;
        println!(
            "{verdict:<5} {:<16} {:<12} {:<26} {:>6} cases, {:>4} failed, {} shapes skipped by constraints, {:.1} s",
            entry.op.name(),
            entry.name,
            entry.crate_name,
            out.cases,
            out.failures,
            out.skipped,
            start.elapsed().as_secs_f64()
        );
        if let Some(first) = out.first_failure {
            println!("      first failure: {first}");
        }
    }
    Ok(if all_passed { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}
