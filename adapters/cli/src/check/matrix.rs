//! `oxccl check --all`: every registered executor over the conformance matrix (see
//! `oxccl::framework::analyzer::conformance`), one line per executor.

use super::CheckArgs;
use oxccl::framework::analyzer::conformance::{conformance, shapes, Outcome, DTYPES};
use oxccl::{registry, Config, Error, OpKind};
use std::fmt;
use std::process::ExitCode;
use std::time::Instant;

pub fn run(args: &CheckArgs) -> Result<ExitCode, Error> {
    // A collective name narrows `--all` to that operator's executors.
    let only: Option<OpKind> = args.collective.as_deref().map(str::parse).transpose()?;
    let base = Config::from_env()?;
    let mut all_passed = true;
    outln!(
        "# oxccl check --all: {} shapes, dtypes {:?}, every reduce op, boundary counts, in and out of place, zero-copy and staged",
        shapes().len(),
        DTYPES.map(|d| d.name())
    );
    for entry in registry()?
        .executors()
        .filter(|e| only.is_none_or(|k| e.op == k))
    {
        let start = Instant::now();
        let out = conformance(entry, &base);
        all_passed &= print_row(
            &out,
            format_args!(
                "{:<16} {:<12} {:<26} {:>6} cases, {:>4} failed, {}{} shapes skipped by constraints, {:.1} s",
                entry.op.name(),
                entry.name,
                entry.crate_name,
                out.cases,
                out.failures,
                refused(&out),
                out.skipped_shapes,
                start.elapsed().as_secs_f64()
            ),
        );
    }
    Ok(if all_passed {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// Print one row of a conformance run, `PASS` or `FAIL` then `row`, and under it the
/// first failure; true when the run passed. Shared with `--all --sequence`.
pub(super) fn print_row(out: &Outcome, row: fmt::Arguments<'_>) -> bool {
    let passed = out.failures == 0;
    outln!("{:<5} {row}", if passed { "PASS" } else { "FAIL" });
    if let Some(first) = &out.first_failure {
        outln!("      first failure: {first}");
    }
    passed
}

/// `N refused, ` when the executor refused cases (a count off its unit, a form it does not
/// run), else nothing.
fn refused(out: &Outcome) -> String {
    match out.refused {
        0 => String::new(),
        n => format!("{n} refused, "),
    }
}
