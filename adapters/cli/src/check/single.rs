//! `oxccl check <collective>`: verdict and modelled speed per size.

use super::{config, CheckArgs, CheckPlan};
use crate::validate::refused;
use oxccl::framework::analyzer::{analyze, Failure, Recording};
use oxccl::framework::cost::{estimate, model, write_chrome_trace, CostError, CostParams};
use oxccl::framework::planner::Loops;
use oxccl::framework::platform::RankProgram;
use oxccl::framework::{
    select_alg, Config, Explanation, SelectRequest, Verdict, SIMULATION_BUDGET,
};
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
    /// Which estimate decided the selection (simulated, or analytic from which ranks).
    estimate: String,
    /// Which estimate gave `time_us` (the replay of every rank, or the analytic estimate
    /// over every rank's program above the simulation budget).
    time_estimate: String,
    failures: usize,
    tasks: usize,
    /// Which iterations the analyzer proved for all (when it folded the loop).
    #[serde(skip_serializing_if = "Option::is_none")]
    folded: Option<String>,
    analyzer_ms: f64,
    /// Wall time of select_alg's choice, of planning every rank, and of the time model.
    select_ms: f64,
    plan_ms: f64,
    model_ms: f64,
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

/// The modelled time of a recording, and which estimate gave it.
struct Modelled {
    time_s: f64,
    algbw_gbps: f64,
    busbw_gbps: f64,
    how: String,
}

/// The discrete-event replay of every rank ([`model`]) while the recording's tasks fit
/// the budget selection replays within ([`SIMULATION_BUDGET`]); above it, the analytic
/// α-β estimate ([`estimate`]) over every rank's program, as selection does from its
/// representative ranks: the replay of a 4096-rank recording costs more than the rest of
/// the check.
fn modelled(rec: &Recording, params: &CostParams) -> Result<Modelled, CostError> {
    let tasks: usize = rec.ranks.iter().map(|r| r.program.task_count()).sum();
    if tasks <= SIMULATION_BUDGET {
        let cost = model(rec, params)?;
        return Ok(Modelled {
            time_s: cost.time_s,
            algbw_gbps: cost.algbw_gbps,
            busbw_gbps: cost.busbw_gbps,
            how: "discrete-event replay of every rank".into(),
        });
    }
    let programs: Vec<(&RankProgram, &Loops)> =
        rec.ranks.iter().map(|r| (&*r.program, &r.loops)).collect();
    let time_s = estimate(&programs, &rec.topology, rec.layout, params)?;
    let (input, output) = rec.ops[0].buffer_bytes(0, rec.rank_count());
    let algbw_gbps = match time_s > 0.0 {
        true => input.max(output) as f64 / time_s / 1e9,
        false => 0.0,
    };
    Ok(Modelled {
        time_s,
        algbw_gbps,
        busbw_gbps: algbw_gbps * rec.op.kind.busbw_factor(rec.rank_count()),
        how: format!(
            "analytic alpha-beta estimate over every rank's program (the replay of {tasks} \
             tasks would pass the simulation budget of {SIMULATION_BUDGET})"
        ),
    })
}

/// select_alg's explanation of the choice a recording with `config` makes for `op` (rank
/// 0's call; every rank's agrees, or the recording refused). The choice is cached, so
/// asking again costs a lookup.
fn explanation(
    config: &Config,
    op: &OpParam,
    topo: &oxccl::Topology,
    args: &CheckArgs,
) -> Result<Explanation, Error> {
    let ranks = topo.ranks();
    let req = SelectRequest {
        op,
        ranks,
        topology: topo,
        bytes: SelectRequest::input_bytes(op, 0, ranks),
        ccl_bytes: config.ccl_buffer_bytes,
        mode: oxccl::framework::planner::mode_for(config.zero_copy, topo),
        in_place: args.in_place,
        link_channels: config.link_channels,
        tune: config.tune.as_deref(),
    };
    Ok((*select_alg(&req, &config.algo)?.explanation).clone())
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

fn ms_since(start: Instant) -> f64 {
    start.elapsed().as_secs_f64() * 1e3
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
        let config = config(args, kind, topo, args.algo.as_deref())?;
        // select_alg first (the recording then finds its choice cached), so each phase
        // is timed alone.
        let start = Instant::now();
        let explained = explanation(&config, op, topo, args)?;
        let select_ms = ms_since(start);
        let start = Instant::now();
        let rec = Recording::record_each(&each, args.in_place, config.clone())?;
        let plan_ms = ms_since(start);
        let start = Instant::now();
        let report = analyze(&rec);
        let analyzer_ms = ms_since(start);
        let start = Instant::now();
        let cost = modelled(&rec, &params).map_err(|e| {
            refused(
                "oxccl check",
                kind.name(),
                "the cost model cannot model it",
                e,
            )
        })?;
        let model_ms = ms_since(start);
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
            estimate: explained.estimates(),
            failures: report.failures.len(),
            tasks: report.tasks,
            folded: report.folded.as_ref().map(ToString::to_string),
            analyzer_ms,
            select_ms,
            plan_ms,
            model_ms,
            time_estimate: cost.how,
            time_us: cost.time_s * 1e6,
            algbw_gbps: cost.algbw_gbps,
            busbw_gbps: cost.busbw_gbps,
            sequence_failures: sequence.as_ref().map(|(_, f)| f.len()),
            candidates: args.explain.then(|| candidates_json(&explained)),
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
            if args.explain {
                out!("{}", explained.table("      "));
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
        let reason = "cannot write the trace there; name a writable file";
        let mut file = std::fs::File::create(path)
            .map_err(|e| refused("--trace", path.display(), reason, e))?;
        write_chrome_trace(rec, &params, &mut file)
            .map_err(|e| refused("--trace", path.display(), reason, e))?;
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
            outln!("# {}", row.estimate);
            outln!("# time: {}", row.time_estimate);
        }
        if let Some(folded) = rows.iter().rev().find_map(|r| r.folded.as_ref()) {
            outln!("# analyzer (last folded size): {folded}");
        }
        if let Some(row) = rows.last() {
            outln!(
                "# wall time of the last size: select {:.1} ms, plan {:.1} ms, analyzer {:.1} \
                 ms, model {:.1} ms",
                row.select_ms,
                row.plan_ms,
                row.analyzer_ms,
                row.model_ms
            );
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
