//! The nccl-tests table (or one JSON document) for `oxccl perf`. On GPUs each row also
//! carries the copy bound of its size and busbw over it ([`super::gpu`]); the host's table
//! and document are nccl-tests' alone.

use super::gpu::{self, CopyBound};
use super::run::{Measured, Timing};
use super::PerfArgs;
use oxccl::{Communicator, OpKind, OpParam, Topology};
use serde::Serialize;
use std::process::ExitCode;

#[derive(Serialize)]
struct JsonTiming {
    time_us: f64,
    algbw_gbps: f64,
    busbw_gbps: f64,
    wrong: Option<usize>,
}

#[derive(Serialize)]
struct JsonRow {
    size: usize,
    count: usize,
    datatype: String,
    redop: String,
    root: i64,
    executor: String,
    out_of_place: Option<JsonTiming>,
    in_place: Option<JsonTiming>,
    /// Why the executor refused the in-place form (it was not run).
    #[serde(skip_serializing_if = "Option::is_none")]
    in_place_refused: Option<String>,
    skipped: Option<String>,
    /// On GPUs: GB/s of one of the concurrent copies of this size (the copy bound).
    #[serde(skip_serializing_if = "Option::is_none")]
    copy_gbps: Option<f64>,
    /// On GPUs: the out-of-place busbw over the copy bound.
    #[serde(skip_serializing_if = "Option::is_none")]
    busbw_over_copy: Option<f64>,
    /// On GPUs: the concurrent copies of the bound (the ranks sharing rank 0's GPU).
    #[serde(skip_serializing_if = "Option::is_none")]
    concurrent_copies: Option<usize>,
}

#[derive(Serialize)]
struct JsonReport {
    collective: String,
    ranks: usize,
    topology: String,
    device: String,
    rows: Vec<JsonRow>,
    out_of_bounds: usize,
    wrong: usize,
    /// Rows skipped (`--skip-oom`): their buffers did not fit in memory.
    skipped_rows: usize,
    avg_busbw_gbps: f64,
}

pub struct Report {
    json: Option<JsonReport>,
    kind: OpKind,
    ranks: usize,
    /// The ranks run on GPUs: the table has the copy-bound columns.
    on_gpu: bool,
    busbw_sum: f64,
    busbw_rows: usize,
    wrong: usize,
    out_of_bounds: usize,
    /// Rows skipped because their buffers did not fit (`--skip-oom`).
    skipped_rows: usize,
    /// The table has said why an executor refused the in-place form.
    refusal_shown: bool,
}

/// The exit status of a run that measured everything it was asked to and found every
/// value right, but skipped sizes whose buffers did not fit (`--skip-oom`): the table is
/// incomplete, which a script must be able to tell.
pub const EXIT_SKIPPED: u8 = 3;

/// algbw and busbw in GB/s for `bytes` in `seconds`.
fn bandwidth(kind: OpKind, ranks: usize, bytes: usize, seconds: f64) -> (f64, f64) {
    let algbw = bytes as f64 / seconds / 1e9;
    (algbw, algbw * kind.busbw_factor(ranks))
}

/// nccl-tests' "size" of `op`'s row: per-rank bytes for AllReduce/Broadcast/Reduce, total
/// otherwise.
pub fn row_size(op: &OpParam, ranks: usize) -> usize {
    let (i, o) = op.buffer_bytes(0, ranks);
    i.max(o)
}

/// The copy-bound columns' cells, empty for a host table.
fn copy_cells(on_gpu: bool, copy: Option<CopyBound>, ratio: Option<f64>) -> String {
    match (on_gpu, copy, ratio) {
        (false, _, _) => String::new(),
        (true, Some(c), Some(r)) => format!("{:>8.2} {:>10.3}  ", c.gbps, r),
        (true, _, _) => format!("{:>8} {:>10}  ", "N/A", "N/A"),
    }
}

impl Report {
    pub fn new(kind: OpKind, comms: &[Communicator], topology: &Topology, args: &PerfArgs) -> Self {
        let ranks = comms[0].size();
        let on_gpu = gpu::runs_on_gpu(&comms[0]);
        let device = format!("{:?}", comms[0].framework().device());
        let json = args.json.then(|| JsonReport {
            collective: kind.name().into(),
            ranks,
            topology: topology.describe(),
            device,
            rows: vec![],
            out_of_bounds: 0,
            wrong: 0,
            skipped_rows: 0,
            avg_busbw_gbps: 0.0,
        });
        if json.is_none() {
            outln!(
                "# oxccl perf {}: {ranks} ranks on {:?}, topology {}",
                kind.name(),
                comms[0].framework().device(),
                topology.describe()
            );
            outln!(
                "# iters {} warmup {} check {}",
                args.iters,
                args.warmup,
                args.check
            );
            if let Some(table) = &comms[0].framework().config().tune {
                outln!(
                    "# tuning table (OXCCL_TUNE_FILE): {} measurements",
                    table.entries.len()
                );
            }
            if on_gpu {
                outln!(
                    "# user buffers on the GPUs; copy: GB/s of each of R concurrent \
                     device-to-device copies of the size on rank 0's GPU (R = its ranks), \
                     busbw/copy: out-of-place busbw over it"
                );
            }
            outln!("#");
            outln!(
                "# {:>10} {:>12} {:>8} {:>6} {:>5}   {:^34}   {:^34}{}",
                "",
                "",
                "",
                "",
                "",
                "out-of-place",
                "in-place",
                if on_gpu { "  copy bound" } else { "" }
            );
            outln!(
                "# {:>10} {:>12} {:>8} {:>6} {:>5}   {:>9} {:>7} {:>7} {:>7}   {:>9} {:>7} {:>7} {:>7}  {}executor",
                "size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw", "#wrong",
                if on_gpu { format!("{:>8} {:>10}  ", "copy", "busbw/copy") } else { String::new() }
            );
            outln!(
                "# {:>10} {:>12} {:>8} {:>6} {:>5}   {:>9} {:>7} {:>7} {:>7}   {:>9} {:>7} {:>7} {:>7}{}",
                "(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "",
                if on_gpu { format!("  {:>8}", "(GB/s)") } else { String::new() }
            );
        }
        Report {
            json,
            kind,
            ranks,
            on_gpu,
            busbw_sum: 0.0,
            busbw_rows: 0,
            wrong: 0,
            out_of_bounds: 0,
            skipped_rows: 0,
            refusal_shown: false,
        }
    }

    fn timing(&mut self, size: usize, t: &Timing) -> (JsonTiming, String) {
        let (algbw, busbw) = bandwidth(self.kind, self.ranks, size, t.seconds);
        self.busbw_sum += busbw;
        self.busbw_rows += 1;
        self.wrong += t.wrong.unwrap_or(0);
        let wrong = t.wrong.map_or("N/A".to_string(), |w| w.to_string());
        let text = format!(
            "{:>9.2} {:>7.3} {:>7.3} {:>7}",
            t.seconds * 1e6,
            algbw,
            busbw,
            wrong
        );
        (
            JsonTiming {
                time_us: t.seconds * 1e6,
                algbw_gbps: algbw,
                busbw_gbps: busbw,
                wrong: t.wrong,
            },
            text,
        )
    }

    /// Report `m`, with the copy bound of its size on GPUs.
    pub fn row(&mut self, m: Measured, copy: Option<CopyBound>) {
        let size = row_size(&m.op, self.ranks);
        let root = m.op.root.map_or(-1, |r| r as i64);
        let (redop, dtype) = (
            if self.kind.reduces() {
                m.op.op.name()
            } else {
                "none"
            },
            m.op.dtype.name(),
        );
        let (oop, ip) = match &m.skipped {
            Some(_) => (None, None),
            None => (
                Some(self.timing(size, &m.out_of_place)),
                m.in_place.as_ref().map(|t| self.timing(size, t)),
            ),
        };
        self.out_of_bounds += m.out_of_bounds;
        self.skipped_rows += usize::from(m.skipped.is_some());
        let ratio = match (&oop, copy) {
            (Some((t, _)), Some(c)) if c.gbps > 0.0 => Some(t.busbw_gbps / c.gbps),
            _ => None,
        };
        match &mut self.json {
            None => match (&oop, &ip, &m.skipped) {
                (Some((_, o)), ip, None) => {
                    if let (Some(why), false) = (&m.in_place_refused, self.refusal_shown) {
                        self.refusal_shown = true;
                        outln!("# in place not run: {} refuses it: {why}", m.executor);
                    }
                    let none = match m.in_place_refused {
                        Some(_) => "refused by the executor",
                        None => "no in-place form",
                    };
                    let i = ip.as_ref().map_or(format!("{none:>34}"), |x| x.1.clone());
                    let c = copy_cells(self.on_gpu, copy, ratio);
                    outln!(
                        "  {size:>10} {:>12} {dtype:>8} {redop:>6} {root:>5}   {o}   {i}  {c}{}",
                        m.op.count,
                        m.executor
                    )
                }
                (_, _, reason) => {
                    outln!("# skipped {size} B: {}", reason.as_deref().unwrap_or(""))
                }
            },
            Some(json) => json.rows.push(JsonRow {
                size,
                count: m.op.count,
                datatype: dtype.into(),
                redop: redop.into(),
                root,
                executor: m.executor,
                out_of_place: oop.map(|x| x.0),
                in_place: ip.map(|x| x.0),
                in_place_refused: m.in_place_refused,
                skipped: m.skipped,
                copy_gbps: copy.map(|c| c.gbps),
                busbw_over_copy: ratio,
                concurrent_copies: copy.map(|c| c.copies),
            }),
        }
    }

    pub fn finish(mut self) -> ExitCode {
        let avg = if self.busbw_rows > 0 {
            self.busbw_sum / self.busbw_rows as f64
        } else {
            0.0
        };
        let ok = self.wrong == 0 && self.out_of_bounds == 0;
        match self.json.take() {
            Some(mut json) => {
                json.out_of_bounds = self.out_of_bounds;
                json.wrong = self.wrong;
                json.skipped_rows = self.skipped_rows;
                json.avg_busbw_gbps = avg;
                outln!(
                    "{}",
                    serde_json::to_string_pretty(&json).expect("report serialises")
                );
            }
            None => {
                let verdict = if self.out_of_bounds == 0 {
                    "OK"
                } else {
                    "FAILED"
                };
                outln!("# Out of bounds values : {} {verdict}", self.out_of_bounds);
                outln!("# Avg bus bandwidth    : {avg:.4}");
                if self.wrong > 0 {
                    outln!("# {} wrong values: FAILED", self.wrong);
                }
                if self.skipped_rows > 0 {
                    outln!(
                        "# {} sizes skipped (--skip-oom): the table is incomplete",
                        self.skipped_rows
                    );
                }
            }
        }
        match (ok, self.skipped_rows) {
            (false, _) => ExitCode::FAILURE,
            (true, 0) => ExitCode::SUCCESS,
            (true, _) => ExitCode::from(EXIT_SKIPPED),
        }
    }
}
