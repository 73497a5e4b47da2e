//! `oxccl check <collective>`: verdict and modelled speed per size.

use super::{config, CheckArgs, CheckPlan};
use oxccl::framework::analyzer::{analyze, Failure, Recording};
use oxccl::framework::cost::{model, write_chrome_trace, CostParams};
use oxccl::framework::{Communicator, DeviceChoice, Explanation, Verdict};
use oxccl::{Error, OpKind, OpParam};
use serde::Serialize;
use std::process::ExitCode;
use std::time::Instant;

/// Failures printed in full.
const SHOWN_FAILURES: usize = 10;

#[derive(Serialize)]
struct Row {
    size: usize,
    count: usize,
    executor: String,
    reason: String,
    failures: usize,
    tasks: usize,
    analyzer_ms: f64,
    time_us: f64,
    algbw_gbps: f64,
    busbw_gbps: f64,
    /// Failures of the back-to-back sequences (with --sequence).
    #[serde(skip_serializing_if = "Option::is_none")]
    sequence_failures: Option<usize>,
    /// select_alg's candidates (with --explain).
    #[serde(skip_serializing_if = "Option::is_none")]
    candidates: Option<Vec<serde_json::Value>>,
}

/// Sim-device communicators that answer select_alg as the recordings do, for --explain.
fn explainer(
    args: &CheckArgs,
    kind: OpKind,
    topo: &oxccl::Topology,
) -> Result<Communicator, Error> {
    let mut config = config(args, kind, topo, args.algo.as_deref())?;
    config.device = DeviceChoice::Sim {
        remote_user_buffers: config.zero_copy,
    };
    Ok(Communicator::init_all(topo.ranks(), config)?.swap_remove(0))
}

fn explanation(comm: &Communicator, op: &OpParam, args: &CheckArgs) -> Result<Explanation, Error> {
    Ok((*comm.select(op, args.in_place)?.explanation).clone())
}

fn candidates_json(e: &Explanation) -> Vec<serde_json::Value> {
    e.candidates
        .iter()
        .map(|c| {
            let modelled = c.verdict.modelled();
            serde_json::json!({
                "executor": c.name,
                "preference": c.preference,
                "chosen": matches!(c.verdict, Verdict::Chosen { .. }),
                "time_us": modelled.map(|m| m.time_us),
                "algbw_gbps": modelled.map(|m| m.algbw_gbps),
                "verdict": c.verdict.to_string(),
            })
        })
        .collect()
}

fn describe(f: &Failure) -> String {
    format!("[{:?}] {}", f.check, f.message)
}

fn print_header(kind: OpKind, args: &CheckArgs, topo_desc: &str) {
    outln!(
        "# oxccl check {} on {topo_desc}{}",
        kind.name(),
        if args.staged {
            " (staged eager mode)"
        } else {
            ""
        }
    );
    outln!(
        "# {:>12} {:>12}  {:<18} {:>7} {:>10} {:>9}   {:>12} {:>9} {:>9}",
        "size",
        "count",
        "executor",
        "verdict",
        "tasks",
        "check",
        "time",
        "algbw",
        "busbw"
    );
    outln!(
        "# {:>12} {:>12}  {:<18} {:>7} {:>10} {:>9}   {:>12} {:>9} {:>9}",
        "(B)",
        "(elements)",
        "",
        "",
        "",
        "(ms)",
        "(us)",
        "(GB/s)",
        "(GB/s)"
    );
}

pub fn run(args: &CheckArgs, plan: &CheckPlan) -> Result<ExitCode, Error> {
    let (kind, topo) = (plan.kind, &plan.topology);
    let explainer = match args.explain {
        true => Some(explainer(args, kind, topo)?),
        false => None,
    };
    let topo_desc = format!(
        "{} ranks {:?}, broken {:?}",
        topo.ranks(),
        topo.server_sizes(),
        topo.broken_links().collect::<Vec<_>>()
    );
    let params = CostParams::default();
    let mut rows = Vec::new();
    let mut failures: Vec<(usize, Failure)> = Vec::new();
    let mut last: Option<Recording> = None;
    if !args.json {
        print_header(kind, args, &topo_desc);
    }
    for &count in &plan.counts {
        let each = plan.calls(count);
        let op = &each[0];
        let rec = Recording::record_each(
            &each,
            args.in_place,
            config(args, kind, topo, args.algo.as_deref())?,
        )?;
        let start = Instant::now();
        let report = analyze(&rec);
        let analyzer_ms = start.elapsed().as_secs_f64() * 1e3;
        let cost = model(&rec, &params).map_err(|e| super::bad_arg(format!("cost model: {e}")))?;
        let explained = match &explainer {
            Some(comm) => Some(explanation(comm, op, args)?),
            None => None,
        };
        let sequence = match args.sequence {
            true => Some(super::sequence::check_row(
                args, plan, plan.then, count, &rec,
            )?),
            false => None,
        };
        let (i, o) = op.buffer_bytes(0, topo.ranks());
        let row = Row {
            size: i.max(o),
            count: op.count,
            executor: rec.executor.to_string(),
            reason: rec.reason.clone(),
            failures: report.failures.len(),
            tasks: report.tasks,
            analyzer_ms,
            time_us: cost.time_s * 1e6,
            algbw_gbps: cost.algbw_gbps,
            busbw_gbps: cost.busbw_gbps,
            sequence_failures: sequence.as_ref().map(|(_, f)| f.len()),
            candidates: explained.as_ref().map(candidates_json),
        };
        if !args.json {
            let verdict = if row.failures == 0 {
                "PASS".to_string()
            } else {
                format!("FAIL({})", row.failures)
            };
            outln!(
                "  {:>12} {:>12}  {:<18} {:>7} {:>10} {:>9.1}   {:>12.2} {:>9.3} {:>9.3}",
                row.size,
                row.count,
                row.executor,
                verdict,
                row.tasks,
                row.analyzer_ms,
                row.time_us,
                row.algbw_gbps,
                row.busbw_gbps
            );
            if let Some(e) = &explained {
                out!("{}", e.table("      "));
            }
            if let Some((summary, _)) = &sequence {
                outln!("      {summary}");
            }
        }
        failures.extend(report.failures.into_iter().map(|f| (row.size, f)));
        if let Some((_, seq)) = sequence {
            failures.extend(seq.into_iter().map(|f| (row.size, f)));
        }
        rows.push(row);
        last = Some(rec);
    }
    if let (Some(path), Some(rec)) = (&args.trace, &last) {
        let mut file = std::fs::File::create(path)
            .map_err(|e| super::bad_arg(format!("cannot write {}: {e}", path.display())))?;
        write_chrome_trace(rec, &params, &mut file)
            .map_err(|e| super::bad_arg(format!("cannot write {}: {e}", path.display())))?;
    }
    if args.json {
        let doc = serde_json::json!({
            "collective": kind.name(),
            "topology": topo_desc,
            "rows": rows,
            "failures": failures.iter().map(|(size, f)| serde_json::json!({"size": size, "failure": describe(f)})).collect::<Vec<_>>(),
        });
        outln!(
            "{}",
            serde_json::to_string_pretty(&doc).expect("report serialises")
        );
    } else {
        if let Some(row) = rows.first() {
            outln!("# selection: {}", row.reason);
        }
        for (size, f) in failures.iter().take(SHOWN_FAILURES) {
            outln!("FAIL at {size} B: {}", describe(f));
        }
        if failures.len() > SHOWN_FAILURES {
            outln!("... and {} more failures", failures.len() - SHOWN_FAILURES);
        }
    }
    Ok(if failures.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
