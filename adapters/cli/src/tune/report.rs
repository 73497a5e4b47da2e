//! What `oxccl tune` prints: per operator, every size's executors from fastest to
//! slowest, then what was skipped and what failed.

use super::sweep::{Job, Outcome, Point, Skip};
use std::process::ExitCode;

/// Print one operator's table.
pub fn print(job: &Job, outcome: &Outcome) {
    outln!(
        "# oxccl tune {}: {} ranks, topology {}, {}, iters {} warmup {}, best of {} rounds (out of place, results checked)",
        job.kind.name(),
        job.topology.ranks(),
        job.topology.describe(),
        job.dtype.name(),
        job.settings.iters,
        job.settings.warmup,
        job.rounds.max(1)
    );
    outln!(
        "# {:>10} {:>12}  {:<18} {:>10}  vs fastest",
        "size",
        "bytes/rank",
        "executor",
        "time (us)"
    );
    for &size in &job.sizes {
        let mut at: Vec<&Point> = outcome.points.iter().filter(|p| p.size == size).collect();
        at.sort_by(|a, b| a.entry.time_us.total_cmp(&b.entry.time_us));
        let Some(fastest) = at.first().map(|p| p.entry.time_us) else {
            continue;
        };
        for p in at {
            let ratio = p.entry.time_us / fastest;
            let mark = if p.entry.time_us == fastest {
                "fastest".to_string()
            } else {
                format!("{ratio:.2}x")
            };
            outln!(
                "  {:>10} {:>12}  {:<18} {:>10.2}  {mark}",
                p.size,
                p.entry.bytes,
                p.entry.executor,
                p.entry.time_us
            );
        }
    }
    print_skips(&outcome.skipped);
    for failure in &outcome.failures {
        outln!("# FAILED {failure}");
    }
    outln!("#");
}

/// One line per executor and reason, with the sizes it was skipped at.
fn print_skips(skips: &[Skip]) {
    let mut lines: Vec<(&str, &str, Vec<String>)> = Vec::new();
    for skip in skips {
        let size = skip.size.map(|s| s.to_string());
        match lines
            .iter_mut()
            .find(|(e, w, _)| *e == skip.executor && *w == skip.why)
        {
            Some((_, _, sizes)) => sizes.extend(size),
            None => lines.push((&skip.executor, &skip.why, size.into_iter().collect())),
        }
    }
    for (executor, why, sizes) in lines {
        if sizes.is_empty() {
            outln!("# skipped {executor}: {why}");
        } else {
            outln!("# skipped {executor} at {} B: {why}", sizes.join(", "));
        }
    }
}

/// The exit status: failure when any executor failed (its figures were not recorded).
pub fn finish(failures: &[String]) -> ExitCode {
    if failures.is_empty() {
        return ExitCode::SUCCESS;
    }
    outln!(
        "# {} executor(s) FAILED (wrong results or device errors); their figures were not \
         recorded",
        failures.len()
    );
    ExitCode::FAILURE
}
