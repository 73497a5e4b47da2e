//! `oxccl check <collective> --sequence`: the checked operation back to back under the
//! device's epoch fence (`analyzer::sequence`): followed by itself (two and three calls)
//! and, with `--then`, by a second operation (`--then-algo` forces its executor), as
//! `first, then` and `first, then, first`. `--all --sequence` runs every ordered pair of
//! each operator's executors over the sequence matrix instead.

use super::{config, CheckArgs, CheckPlan};
use crate::calls::calls;
use oxccl::framework::analyzer::conformance::{sequence_conformance, sequence_shapes};
use oxccl::framework::analyzer::{analyze_sequence, Failure, FenceModel, Recording};
use oxccl::{registry, Config, Error, OpKind};
use std::process::ExitCode;
use std::time::Instant;

/// The sequences checked for one size: a one-line summary and every failure, each
/// prefixed with the sequence it was found in.
pub fn check_row(
    args: &CheckArgs,
    plan: &CheckPlan,
    then: Option<OpKind>,
    count: usize,
    first: &Recording,
) -> Result<(String, Vec<Failure>), Error> {
    let second = match then {
        None => None,
        Some(kind) => {
            let each = calls(
                kind,
                count,
                plan.dtype,
                plan.redop,
                plan.root,
                plan.topology.ranks(),
            );
            let config = config(args, kind, &plan.topology, args.then_algo.as_deref())?;
            Some(Recording::record_each(&each, args.in_place, config)?)
        }
    };
    let mut sequences: Vec<Vec<&Recording>> = vec![vec![first, first], vec![first, first, first]];
    if let Some(second) = &second {
        sequences.push(vec![first, second]);
        sequences.push(vec![first, second, first]);
    }
    let (mut failures, mut names) = (Vec::new(), Vec::new());
    for seq in &sequences {
        let name = seq.iter().map(|r| r.executor).collect::<Vec<_>>().join(",");
        let report = analyze_sequence(seq).map_err(|e| super::bad_arg(e.to_string()))?;
        failures.extend(report.failures.into_iter().map(|mut f| {
            f.message = format!("sequence {name}: {}", f.message);
            f
        }));
        names.push(name);
    }
    let verdict = if failures.is_empty() {
        "PASS".to_string()
    } else {
        format!("FAIL({})", failures.len())
    };
    let summary = format!("sequences {}: {verdict}", names.join("; "));
    Ok((summary, failures))
}

/// `--all --sequence`: every ordered pair of each operator's executors.
pub fn run_pairs(args: &CheckArgs) -> Result<ExitCode, Error> {
    let only: Option<OpKind> = args.collective.as_deref().map(str::parse).transpose()?;
    let base = Config::from_env()?;
    let shapes = sequence_shapes();
    let shown: Vec<_> = shapes.iter().map(|t| t.server_sizes()).collect();
    outln!("# oxccl check --all --sequence: pairs of executors back to back on shapes {shown:?}");
    let reg = registry()?;
    let mut all_passed = true;
    for op in OpKind::ALL
        .into_iter()
        .filter(|k| only.is_none_or(|o| o == *k))
    {
        let entries: Vec<_> = reg.executors_for(op).collect();
        for first in &entries {
            for second in &entries {
                let start = Instant::now();
                let out = sequence_conformance(first, second, &base, &shapes, FenceModel::DEVICE);
                all_passed &= super::matrix::print_row(
                    &out,
                    format_args!(
                        "{:<16} {:<28} {:>5} cases, {:>4} failed, {} shapes skipped, {:.1} s",
                        op.name(),
                        format!("{} then {}", first.name, second.name),
                        out.cases,
                        out.failures,
                        out.skipped_shapes,
                        start.elapsed().as_secs_f64()
                    ),
                );
            }
        }
    }
    Ok(if all_passed {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
