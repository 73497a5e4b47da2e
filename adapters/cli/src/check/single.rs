//! `oxccl check <collective>`: verdict and modelled speed per size.

use super::{config, ops, topology, CheckArgs};
use oxccl::framework::analyzer::{analyze, Failure, Recording};
use oxccl::framework::cost::{model, write_chrome_trace, CostParams};
use oxccl::{Error, OpKind};
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
}

fn describe(f: &Failure) -> String {
    format!("[{:?}] {}", f.check, f.message)
}

fn print_header(kind: OpKind, args: &CheckArgs, topo_desc: &str) {
    println!(
        "# oxccl check {} on {topo_desc}{}",
        kind.name(),
        if args.staged {
            " (staged eager mode)"
        } else {
            ""
        }
    );
    println!(
        "# {:>12} {:>12}  {:<12} {:>7} {:>10} {:>9}   {:>12} {:>9} {:>9}",
        "size", "count", "executor", "verdict", "tasks", "check", "time", "algbw", "busbw"
    );
    println!(
        "# {:>12} {:>12}  {:<12} {:>7} {:>10} {:>9}   {:>12} {:>9} {:>9}",
        "(B)", "(elements)", "", "", "", "(ms)", "(us)", "(GB/s)", "(GB/s)"
    );
}

pub fn run(args: &CheckArgs, kind: OpKind) -> Result<ExitCode, Error> {
    let topo = topology(args)?;
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
    for each in ops(args, kind, topo.ranks())? {
        let op = &each[0];
        let rec = Recording::record_each(
            &each,
            args.in_place,
            config(args, kind, &topo, args.algo.as_deref())?,
        )?;
        let start = Instant::now();
        let report = analyze(&rec);
        let analyzer_ms = start.elapsed().as_secs_f64() * 1e3;
        let cost = model(&rec, &params).map_err(|e| super::bad_arg(format!("cost model: {e}")))?;
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
        };
        if !args.json {
            let verdict = if row.failures == 0 {
                "PASS".to_string()
            } else {
                format!("FAIL({})", row.failures)
            };
            println!(
                "  {:>12} {:>12}  {:<12} {:>7} {:>10} {:>9.1}   {:>12.2} {:>9.3} {:>9.3}",
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
        }
        failures.extend(report.failures.into_iter().map(|f| (row.size, f)));
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
        println!(
            "{}",
            serde_json::to_string_pretty(&doc).expect("report serialises")
        );
    } else {
        if let Some(row) = rows.first() {
            println!("# selection: {}", row.reason);
        }
        for (size, f) in failures.iter().take(SHOWN_FAILURES) {
            println!("FAIL at {size} B: {}", describe(f));
        }
        if failures.len() > SHOWN_FAILURES {
            println!("... and {} more failures", failures.len() - SHOWN_FAILURES);
        }
    }
    Ok(if failures.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
