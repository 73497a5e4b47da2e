//! `oxccl check`: the analyzer and the cost model on the command line.
//!
//! For one collective it records every rank's program through the real framework path on
//! the `sim` device (select_alg included, unless `--algo` forces an executor), proves it
//! correct with the analyzer, and models its time on the topology: one row per size with
//! the verdict and the modelled time, algbw and busbw, then the first failures in full.
//! `--explain` adds, under each row, select_alg's candidate table (the source of the
//! choice, and per executor its modelled time and algbw or why it was rejected).
//! `--all` runs every registered executor over the conformance matrix instead, one line
//! per executor. The exit status is non-zero on any failure.

mod matrix;
mod single;

use crate::calls::calls;
use crate::sizes::{count_for_size, size_sweep};
use clap::Args;
use oxccl::{Config, DataType, Error, OpKind, OpParam, ReduceOp, Topology};
use std::process::ExitCode;

#[derive(Args, Debug)]
pub struct CheckArgs {
    /// The collective (all-reduce, ...); omit with --all.
    pub collective: Option<String>,
    /// Check every registered executor over the conformance matrix.
    #[arg(long)]
    pub all: bool,
    /// Ranks of a single server (the `1xN` shape); ignored with --topo.
    #[arg(long, default_value_t = 8)]
    pub ranks: usize,
    /// Topology: a preset (mesh8, ring8, 2x8, 1xN, MxN) or a TOML file.
    #[arg(long)]
    pub topo: Option<String>,
    /// A broken link, `A-B` (repeatable).
    #[arg(long = "broken", value_name = "A-B")]
    pub broken: Vec<String>,
    /// Executor to check (default: what select_alg picks for each size).
    #[arg(long)]
    pub algo: Option<String>,
    /// Smallest size in bytes (K, M, G suffixes).
    #[arg(short = 'b', long = "minbytes", default_value = "1K")]
    pub minbytes: String,
    /// Largest size in bytes.
    #[arg(short = 'e', long = "maxbytes", default_value = "1G")]
    pub maxbytes: String,
    /// Multiplication factor between sizes.
    #[arg(short = 'f', long = "stepfactor", default_value_t = 1024)]
    pub stepfactor: usize,
    /// Check exactly this element count instead of a size sweep.
    #[arg(long)]
    pub count: Option<usize>,
    /// Data type.
    #[arg(short = 'd', long = "datatype", default_value = "float")]
    pub datatype: String,
    /// Reduce op.
    #[arg(short = 'o', long = "op", default_value = "sum")]
    pub op: String,
    /// Root rank of rooted collectives.
    #[arg(short = 'r', long = "root", default_value_t = 0)]
    pub root: usize,
    /// Check the in-place form.
    #[arg(long)]
    pub in_place: bool,
    /// Check HCCL's staged eager mode (through the CCL buffers) instead of zero-copy.
    #[arg(long)]
    pub staged: bool,
    /// Write the modelled schedule of the last size as Chrome trace-event JSON.
    #[arg(long, value_name = "FILE")]
    pub trace: Option<std::path::PathBuf>,
    /// Under each size, list every candidate executor with its verdict: modelled time and
    /// algbw, or why it was rejected or lost.
    #[arg(long)]
    pub explain: bool,
    /// Print one JSON document instead of the table.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: &CheckArgs) -> Result<ExitCode, Error> {
    if args.all {
        return matrix::run(args);
    }
    let Some(collective) = &args.collective else {
        return Err(bad_arg(
            "name a collective (e.g. `oxccl check all-reduce`) or pass --all".into(),
        ));
    };
    single::run(args, collective.parse()?)
}

pub(crate) fn bad_arg(reason: String) -> Error {
    oxccl::ConfigError {
        var: "oxccl check",
        value: String::new(),
        reason,
    }
    .into()
}

/// The topology named by `--topo`/`--ranks`, with every `--broken` link applied.
pub(crate) fn topology(args: &CheckArgs) -> Result<Topology, Error> {
    crate::topo_args::topology(args.ranks, args.topo.as_deref(), &args.broken)
}

/// The configuration a recording is made with.
pub(crate) fn config(
    args: &CheckArgs,
    kind: OpKind,
    topology: &Topology,
    algo: Option<&str>,
) -> Result<Config, Error> {
    let mut config = Config::from_env()?;
    config.topology = Some(topology.clone());
    config.zero_copy = !args.staged;
    if let Some(name) = algo {
        config.algo.set(Some(kind), name);
    }
    Ok(config)
}

/// The operations of a size sweep (or of `--count`), each as every rank's call.
pub(crate) fn ops(
    args: &CheckArgs,
    kind: OpKind,
    ranks: usize,
) -> Result<Vec<Vec<OpParam>>, Error> {
    let dtype: DataType = args
        .datatype
        .parse()
        .map_err(|e: oxccl::platform::dtype::ParseNameError| bad_arg(e.to_string()))?;
    let op: ReduceOp = args
        .op
        .parse()
        .map_err(|e: oxccl::platform::dtype::ParseNameError| bad_arg(e.to_string()))?;
    let param = |count| calls(kind, count, dtype, op, args.root, ranks);
    if let Some(count) = args.count {
        return Ok(vec![param(count)]);
    }
    let sizes = size_sweep(&args.minbytes, &args.maxbytes, args.stepfactor).map_err(bad_arg)?;
    Ok(sizes
        .into_iter()
        .map(|size| param(count_for_size(kind, size, dtype, ranks)))
        .collect())
}
