//! The cost model's replay as a Chrome trace (JSON trace events), for Perfetto or
//! `chrome://tracing`.
//!
//! One process per rank (`pid` = rank) and one thread per stream (`tid` = stream), named by
//! metadata events; every task is a complete event (`"ph": "X"`) from the moment its stream
//! issued it to the moment it finished, so a Wait's bar is the time its stream was blocked.
//! Names read like `Copy from 3 (1.0 MiB)` or `Post to 5`; `args` carry the task index,
//! peers, bytes, notify and (for waits) the blocked time. Times are microseconds. Events
//! are written as tasks finish, so the writer holds nothing but the output.

use super::engine::{Observer, TaskSpan};
use super::{model_with, CostError, CostParams, CostReport};
use crate::planner::Recording;
use oxccl_platform::{RankProgram, Task};
use serde_json::{json, Value};
use std::io::Write;

/// Why a trace could not be written.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    #[error(transparent)]
    Cost(#[from] CostError),
    #[error("cannot write the trace: {0}")]
    Io(#[from] std::io::Error),
}

/// Model `rec` and write the replay to `out` as Chrome trace-event JSON; returns the same
/// report as [`super::model`].
pub fn write_chrome_trace(
    rec: &Recording,
    params: &CostParams,
    out: &mut dyn Write,
) -> Result<CostReport, TraceError> {
    let programs: Vec<&RankProgram> = rec.ranks.iter().map(|r| &*r.program).collect();
    out.write_all(b"{\"displayTimeUnit\":\"ns\",\"traceEvents\":[\n")?;
    let mut writer = TraceWriter {
        programs: &programs,
        out,
        first: true,
        error: None,
    };
    writer.metadata();
    let report = model_with(rec, &programs, params, &mut writer);
    if let Some(err) = writer.error.take() {
        return Err(err.into());
    }
    let report = report?;
    let other = json!({
        "executor": rec.executor,
        "op": rec.op.kind.name(),
        "bytes": report.bytes,
        "time_us": report.time_s * 1e6,
        "algbw_gbps": report.algbw_gbps,
        "busbw_gbps": report.busbw_gbps,
    });
    write!(writer.out, "\n],\"otherData\":{other}}}\n")?;
    Ok(report)
}

struct TraceWriter<'a> {
    programs: &'a [&'a RankProgram],
    out: &'a mut dyn Write,
    first: bool,
    error: Option<std::io::Error>,
}

impl TraceWriter<'_> {
    fn emit(&mut self, event: &Value) {
        if self.error.is_some() {
            return;
        }
        let sep: &[u8] = if self.first { b"" } else { b",\n" };
        self.first = false;
        let result = self
            .out
            .write_all(sep)
            .and_then(|()| serde_json::to_writer(&mut *self.out, event).map_err(Into::into));
        if let Err(err) = result {
            self.error = Some(err);
        }
    }

    /// Name every rank and stream, and keep ranks in order.
    fn metadata(&mut self) {
        for (rank, p) in self.programs.iter().enumerate() {
            self.emit(&json!({"ph": "M", "name": "process_name", "pid": rank,
                              "args": {"name": format!("rank {rank}")}}));
            self.emit(
                &json!({"ph": "M", "name": "process_sort_index", "pid": rank,
                              "args": {"sort_index": rank}}),
            );
            for stream in 0..p.streams.len() {
                let name = if stream == 0 {
                    "main stream".to_string()
                } else {
                    format!("slave stream {stream}")
                };
                self.emit(&json!({"ph": "M", "name": "thread_name", "pid": rank,
                                  "tid": stream, "args": {"name": name}}));
            }
        }
    }
}

impl Observer for TraceWriter<'_> {
    fn task(&mut self, span: TaskSpan) {
        let task = &self.programs[span.rank].streams[span.stream].tasks[span.index];
        let (name, mut args) = describe(span.rank, task);
        args["task"] = json!(span.index);
        let dur = (span.end - span.start) * 1e6;
        if matches!(task, Task::Wait { .. }) {
            args["blocked_us"] = json!(dur);
        }
        self.emit(&json!({
            "ph": "X", "name": name, "cat": task.kind_name(),
            "pid": span.rank, "tid": span.stream,
            "ts": span.start * 1e6, "dur": dur, "args": args,
        }));
    }
}

/// A task's label and its arguments, seen from `rank`.
fn describe(rank: usize, task: &Task) -> (String, Value) {
    match task {
        Task::Post { notify } if notify.rank != rank => (
            format!("Post to {}", notify.rank),
            json!({"peer": notify.rank, "notify": notify.index}),
        ),
        Task::Post { notify } | Task::Wait { notify } => (
            task.kind_name().to_string(),
            json!({"notify": notify.index}),
        ),
        Task::Copy { .. } | Task::Reduce { .. } => {
            let peers = |slices: &[oxccl_platform::Slice]| {
                let mut ranks: Vec<usize> = slices
                    .iter()
                    .map(|s| s.rank)
                    .filter(|&r| r != rank)
                    .collect();
                ranks.sort_unstable();
                ranks.dedup();
                ranks
            };
            let (from, to) = (peers(task.reads()), peers(task.writes()));
            let mut name = task.kind_name().to_string();
            for (word, list) in [("from", &from), ("to", &to)] {
                if !list.is_empty() {
                    let list: Vec<String> = list.iter().map(|r| r.to_string()).collect();
                    name.push_str(&format!(" {word} {}", list.join(",")));
                }
            }
            name.push_str(&format!(" ({})", human_bytes(task.bytes())));
            (name, json!({"bytes": task.bytes(), "from": from, "to": to}))
        }
    }
}

fn human_bytes(bytes: usize) -> String {
    const UNITS: [&str; 4] = ["B", "KiB", "MiB", "GiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}
